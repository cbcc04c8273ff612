// pim_mac.v -- the compute unit of one PIM bank (Newton-style): LANES multipliers, a pairwise
// adder tree and an accumulator, fed one column burst per cycle.
//
// Interface
//   clk, rst_n     clock (rising edge), active-low synchronous reset
//   in_valid       a COMP step this cycle: bank_data x gb_data is reduced and accumulated
//   in_first       with in_valid: this step starts a new dot product (the accumulator restarts
//                  from this step's sum instead of adding to the previous value)
//   bank_data      LANES elements of the open PIM row's column burst, lane l in
//                  bits [l*DATA_W +: DATA_W]
//   gb_data        the matching LANES elements of the channel's global buffer
//   out_valid      acc holds the accumulated value including a step issued FILL_CYCLES ago
//   acc            the accumulator (ACC_W bits)
// Timing
//   Fully pipelined, one step per cycle. Register stages: 1 multiply, ceil(log2(LANES)) adder
//   tree levels, FILL_CYCLES - 2 - ceil(log2(LANES)) delay stages, 1 accumulate; so the step
//   presented in cycle t is visible in acc (with out_valid) in cycle t + FILL_CYCLES.
//   FILL_CYCLES is the PIM pipeline fill of the timing model (config pim.gemv_pipeline_fill,
//   6 in the reference = 1 + log2(16) + 1). Elaboration fails if FILL_CYCLES is too small.
// Number format
//   Signed two's complement integers. Operands DATA_W bits; products exact (2*DATA_W bits);
//   the adder tree is exact (2*DATA_W + ceil(log2(LANES)) bits); the tree sum is sign-extended
//   or truncated to ACC_W bits and accumulated modulo 2^ACC_W (wrap-around, no saturation).
//   Lanes beyond LANES up to the next power of two are zero.
`timescale 1ns/1ps
module pim_mac #(
    parameter integer LANES       = 16,
    parameter integer DATA_W      = 16,
    parameter integer ACC_W       = 32,
    parameter integer FILL_CYCLES = 6
) (
    input  wire                    clk,
    input  wire                    rst_n,
    input  wire                    in_valid,
    input  wire                    in_first,
    input  wire [LANES*DATA_W-1:0] bank_data,
    input  wire [LANES*DATA_W-1:0] gb_data,
    output wire                    out_valid,
    output wire [ACC_W-1:0]        acc
);
    // ceil(log2(LANES)) as a constant function (Verilog-2001)
    function integer clog2;
        input [31:0] value;
        reg [31:0] v;
        begin
            clog2 = 0;
            v = value - 1;
            while (v > 0) begin
                clog2 = clog2 + 1;
                v = v >> 1;
            end
        end
    endfunction

    localparam integer LEVELS = clog2(LANES);
    localparam integer P      = 1 << LEVELS;           // lanes padded to a power of two
    localparam integer PROD_W = 2 * DATA_W;
    localparam integer TREE_W = PROD_W + LEVELS;
    localparam integer EXTRA  = FILL_CYCLES - 2 - LEVELS; // padding delay stages
    localparam integer CTRL_D = 1 + LEVELS + (EXTRA > 0 ? EXTRA : 0); // stages before accumulate

    generate
        if (EXTRA < 0) begin : g_bad_fill
            // FILL_CYCLES cannot be shorter than multiply + tree + accumulate.
            initial begin
                $display("pim_mac: FILL_CYCLES=%0d < 2 + log2(LANES)=%0d", FILL_CYCLES, 2 + LEVELS);
                $finish;
            end
        end
    endgenerate

    // ---------------------------------------------------------------- multiply (stage 1)
    // tree[i], heap order: node i has children 2i+1 and 2i+2; leaves are P-1 .. 2P-2.
    reg signed [TREE_W-1:0] tree [0:2*P-2];
    genvar l, n;
    generate
        for (l = 0; l < P; l = l + 1) begin : g_mul
            if (l < LANES) begin : g_lane
                wire signed [DATA_W-1:0] x = bank_data[l*DATA_W +: DATA_W];
                wire signed [DATA_W-1:0] y = gb_data[l*DATA_W +: DATA_W];
                wire signed [PROD_W-1:0] pr = x * y;
                always @(posedge clk) begin
                    if (!rst_n) tree[P-1+l] <= {TREE_W{1'b0}};
                    else        tree[P-1+l] <= {{LEVELS{pr[PROD_W-1]}}, pr};
                end
            end else begin : g_pad
                always @(posedge clk) tree[P-1+l] <= {TREE_W{1'b0}};
            end
        end
        // ------------------------------------------------------------ adder tree (LEVELS stages)
        for (n = 0; n < P - 1; n = n + 1) begin : g_add
            always @(posedge clk) begin
                if (!rst_n) tree[n] <= {TREE_W{1'b0}};
                else        tree[n] <= tree[2*n+1] + tree[2*n+2];
            end
        end
    endgenerate

    // ------------------------------------------------------------------ padding delay stages
    // and the control (valid, first) travelling alongside: pim_delay.v
    wire signed [TREE_W-1:0] sum_root = tree[0];
    wire signed [TREE_W-1:0] sum_late;
    wire vld_late, first_late;
    pim_delay #(.W(TREE_W), .D(EXTRA > 0 ? EXTRA : 0)) u_pad (
        .clk(clk), .rst_n(rst_n), .d(sum_root), .q(sum_late));
    pim_delay #(.W(2), .D(CTRL_D)) u_ctrl (
        .clk(clk), .rst_n(rst_n), .d({in_valid & in_first, in_valid}),
        .q({first_late, vld_late}));

    // ---------------------------------------------------------------- accumulate (last stage)
    wire [ACC_W-1:0] sum_acc;
    generate
        if (ACC_W > TREE_W) begin : g_sext
            assign sum_acc = {{(ACC_W-TREE_W){sum_late[TREE_W-1]}}, sum_late};
        end else begin : g_trunc
            assign sum_acc = sum_late[ACC_W-1:0];
        end
    endgenerate

    reg [ACC_W-1:0] acc_r;
    reg             out_valid_r;
    always @(posedge clk) begin
        if (!rst_n) begin
            acc_r       <= {ACC_W{1'b0}};
            out_valid_r <= 1'b0;
        end else begin
            out_valid_r <= vld_late;
            if (vld_late)
                acc_r <= first_late ? sum_acc : acc_r + sum_acc;
        end
    end
    assign acc       = acc_r;
    assign out_valid = out_valid_r;
endmodule
