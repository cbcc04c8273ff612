// systolic_array.v -- H x W weight-stationary systolic array: double-buffered weight preload,
// skewed input feeding, de-skewed outputs, pipelined tiles.
//
// Computes C[n x W] = A[n x H] * B[H x W] per tile: PE(k, j) holds B[k][j]; rows of A stream in
// from the left (row k of the array delays element k by k cycles), partial sums flow down and
// each column's result is delayed by W-1-j cycles so a whole row of C leaves at once.
//
// Interface
//   clk, rst_n     clock (rising edge), active-low synchronous reset
//   load           begin a weight preload into the shadow buffer; accepted when load_ready.
//                  In the accepting cycle and the H-1 following ones w_ready is high and w_data
//                  must carry one row of B per cycle, B[H-1] first, B[0] last
//   w_data         W weights, column j in bits [j*DATA_W +: DATA_W]
//   load_ready     a preload may begin: none is running (a pending, unused preload is
//                  simply replaced)
//   shadow_valid   a complete preload waits in the shadow buffer
//   start, swap, n_rows
//                  begin a tile of n_rows rows; accepted when start_ready (and, with swap=1,
//                  shadow_valid). swap=1: the tile uses the preloaded weights (they become the
//                  active weights, PE by PE, as its first row passes); swap=0: it keeps the
//                  active weights. Row 0 of A is consumed in the accepting cycle itself.
//   start_ready    the input is free: the previous tile has issued all its rows
//   a_ready        a_data is consumed this cycle (the n_rows real rows of the tile in flight)
//   a_data         H activations, element k in bits [k*DATA_W +: DATA_W]
//   c_valid        c_data holds one output row (rows of each tile in order)
//   c_data         W sums, column j in bits [j*ACC_W +: ACC_W]
//   done           the last (possibly padding) row of a tile leaves the array this cycle
// Timing (the NPU model, archsim/npu/timing.py, DESIGN §3), tile started in cycle f:
//   rows issue one per cycle in cycles f .. f + max(n, MIN_ROWS) - 1, zero rows padding a tile
//   shorter than MIN_ROWS (tile_issue_interval_cycles); the next tile may start right after;
//   row i of C is on c_data in cycle f + i + H + W - 1, so done is high in cycle
//   f + H + W - 2 + max(n, MIN_ROWS)              (tile_latency_cycles);
//   a preload accepted in cycle p takes H cycles (weight_preload_cycles): a swap tile may start
//   from cycle p + H, and the next preload from p + H as well (even in the cycle a swap tile
//   starts), overlapping the tiles in flight. Weights travel down a transport chain per column,
//   column j skewed by j cycles like the swap wavefront, and each PE's shadow register takes
//   its weight only at its column's last shift (cycle p + H - 1 + j): the swap of PE(k, j),
//   in cycle f + k + j, reads the old shadow whenever p >= f, and the new one when f >= p + H.
// Number format
//   Signed two's complement integers, DATA_W-bit A and B, ACC_W-bit C. With
//   ACC_W >= 2*DATA_W + ceil(log2(H)) every sum is exact (equals an integer matmul); otherwise
//   it wraps modulo 2^ACC_W.
`timescale 1ns/1ps
module systolic_array #(
    parameter integer H        = 4,     // PE rows: weight rows / reduction length
    parameter integer W        = 4,     // PE columns: output columns
    parameter integer DATA_W   = 16,
    parameter integer ACC_W    = 34,
    parameter integer MIN_ROWS = 4,     // minimum rows issued per tile (zero padded)
    parameter integer NROWS_W  = 16     // width of n_rows
) (
    input  wire                 clk,
    input  wire                 rst_n,
    input  wire                 load,
    output wire                 w_ready,
    input  wire [W*DATA_W-1:0]  w_data,
    output wire                 load_ready,
    output reg                  shadow_valid,
    input  wire                 start,
    input  wire                 swap,
    input  wire [NROWS_W-1:0]   n_rows,
    output wire                 start_ready,
    output wire                 a_ready,
    input  wire [H*DATA_W-1:0]  a_data,
    output wire                 c_valid,
    output wire [W*ACC_W-1:0]   c_data,
    output wire                 done
);
    localparam integer TAG_DEPTH = H + W - 1;   // issue cycle -> de-skewed output row
    localparam integer LOAD_W    = 16;   // width of the preload cycle counter

    // ---------------------------------------------------------------- preload control
    reg  [LOAD_W-1:0]  load_left;    // preload cycles still to come after this one
    wire loading      = (load_left != 0);
    wire start_ok     = start && start_ready && (!swap || shadow_valid);
    wire swap_now     = start_ok && swap;
    assign load_ready = !loading;
    wire load_ok      = load && load_ready;
    assign w_ready    = load_ok || loading;
    wire w_last       = load_ok ? (H == 1) : (loading && load_left == 1);

    always @(posedge clk) begin
        if (!rst_n) begin
            load_left    <= {LOAD_W{1'b0}};
            shadow_valid <= 1'b0;
        end else begin
            if (load_ok)
                load_left <= H - 1;
            else if (loading)
                load_left <= load_left - 1'b1;
            if (load_ok)
                shadow_valid <= (H == 1);
            else if (w_last)
                shadow_valid <= 1'b1;
            else if (swap_now)
                shadow_valid <= 1'b0;
        end
    end

    // Column j of the weights (data, shift and capture) is delayed by j cycles.
    wire [W*DATA_W-1:0] w_col;
    wire [W-1:0]        shift_col, cap_col;
    genvar k, j;
    generate
        for (j = 0; j < W; j = j + 1) begin : g_wskew
            if (j == 0) begin : g_direct
                assign w_col[0 +: DATA_W] = w_data[0 +: DATA_W];
                assign shift_col[0]       = w_ready;
                assign cap_col[0]         = w_last;
            end else begin : g_delay
                reg [DATA_W+1:0] wr [0:j-1];
                integer s;
                always @(posedge clk) begin
                    if (!rst_n) begin
                        for (s = 0; s < j; s = s + 1) wr[s] <= {(DATA_W+2){1'b0}};
                    end else begin
                        wr[0] <= {w_ready, w_last, w_data[j*DATA_W +: DATA_W]};
                        for (s = 1; s < j; s = s + 1) wr[s] <= wr[s-1];
                    end
                end
                assign w_col[j*DATA_W +: DATA_W] = wr[j-1][DATA_W-1:0];
                assign cap_col[j]                = wr[j-1][DATA_W];
                assign shift_col[j]              = wr[j-1][DATA_W+1];
            end
        end
    endgenerate

    // ---------------------------------------------------------------- tile issue control
    reg  [NROWS_W-1:0] issue_left;   // rows (real or padding) still to issue after this cycle
    reg  [NROWS_W-1:0] real_left;    // real rows still to issue after this cycle
    assign start_ready = (issue_left == 0);
    wire [NROWS_W-1:0] n_issue = (n_rows < MIN_ROWS) ? MIN_ROWS[NROWS_W-1:0] : n_rows;
    wire issuing   = start_ok || (issue_left != 0);
    assign a_ready = start_ok ? (n_rows != 0) : (real_left != 0);
    wire issue_last = start_ok ? (n_issue == 1) : (issue_left == 1);

    always @(posedge clk) begin
        if (!rst_n) begin
            issue_left <= {NROWS_W{1'b0}};
            real_left  <= {NROWS_W{1'b0}};
        end else if (start_ok) begin
            issue_left <= n_issue - 1'b1;
            real_left  <= (n_rows != 0) ? n_rows - 1'b1 : {NROWS_W{1'b0}};
        end else begin
            if (issue_left != 0) issue_left <= issue_left - 1'b1;
            if (real_left != 0)  real_left  <= real_left - 1'b1;
        end
    end

    // ---------------------------------------------------------------- tags travel with rows
    reg [TAG_DEPTH-1:0] tag_valid;
    reg [TAG_DEPTH-1:0] tag_last;
    always @(posedge clk) begin
        if (!rst_n) begin
            tag_valid <= {TAG_DEPTH{1'b0}};
            tag_last  <= {TAG_DEPTH{1'b0}};
        end else begin
            tag_valid <= {tag_valid[TAG_DEPTH-2:0], a_ready};
            tag_last  <= {tag_last[TAG_DEPTH-2:0], issuing && issue_last};
        end
    end
    assign c_valid = tag_valid[TAG_DEPTH-1];
    assign done    = tag_last[TAG_DEPTH-1];

    // ---------------------------------------------------------------- input skew
    // Row k of the array gets element k (and the swap flag) delayed by k cycles. Padding rows
    // and idle cycles feed zeros.
    localparam integer SK_W = DATA_W + 1;
    wire [H*SK_W-1:0] sk_in;
    wire [H*SK_W-1:0] sk_out;
    generate
        for (k = 0; k < H; k = k + 1) begin : g_skew
            assign sk_in[k*SK_W +: SK_W] = {swap_now,
                                            a_ready ? a_data[k*DATA_W +: DATA_W] : {DATA_W{1'b0}}};
            if (k == 0) begin : g_direct
                assign sk_out[0 +: SK_W] = sk_in[0 +: SK_W];
            end else begin : g_delay
                reg [SK_W-1:0] sr [0:k-1];
                integer s;
                always @(posedge clk) begin
                    if (!rst_n) begin
                        for (s = 0; s < k; s = s + 1) sr[s] <= {SK_W{1'b0}};
                    end else begin
                        sr[0] <= sk_in[k*SK_W +: SK_W];
                        for (s = 1; s < k; s = s + 1) sr[s] <= sr[s-1];
                    end
                end
                assign sk_out[k*SK_W +: SK_W] = sr[k-1];
            end
        end
    endgenerate

    // ---------------------------------------------------------------- PE grid
    // One net per PE link (arrays of nets, not wide buses: a wide bus would wake every reader
    // on every change and slow the simulator down quadratically).
    // a_net/s_net[k*(W+1) + j]: activation / swap flag entering PE(k, j) (column W: exit).
    // p_net[k*W + j]: partial sum entering PE(k, j) (row H: bottom exit).
    // w_net[k*W + j]: weight transport entering PE(k, j) (row 0 takes the skewed w_data).
    wire [DATA_W-1:0] a_net [0:H*(W+1)-1];
    wire              s_net [0:H*(W+1)-1];
    wire [ACC_W-1:0]  p_net [0:(H+1)*W-1];
    wire [DATA_W-1:0] w_net [0:(H+1)*W-1];
    generate
        for (j = 0; j < W; j = j + 1) begin : g_top
            assign p_net[j] = {ACC_W{1'b0}};
            assign w_net[j] = w_col[j*DATA_W +: DATA_W];
        end
        for (k = 0; k < H; k = k + 1) begin : g_row
            assign a_net[k*(W+1)] = sk_out[k*SK_W +: DATA_W];
            assign s_net[k*(W+1)] = sk_out[k*SK_W + DATA_W];
            for (j = 0; j < W; j = j + 1) begin : g_col
                systolic_pe #(.DATA_W(DATA_W), .ACC_W(ACC_W)) u_pe (
                    .clk    (clk),
                    .rst_n  (rst_n),
                    .w_shift  (shift_col[j]),
                    .w_capture(cap_col[j]),
                    .w_in   (w_net[k*W + j]),
                    .w_out  (w_net[(k+1)*W + j]),
                    .a_in   (a_net[k*(W+1) + j]),
                    .a_out  (a_net[k*(W+1) + j + 1]),
                    .s_in   (s_net[k*(W+1) + j]),
                    .s_out  (s_net[k*(W+1) + j + 1]),
                    .p_in   (p_net[k*W + j]),
                    .p_out  (p_net[(k+1)*W + j])
                );
            end
        end
    endgenerate

    // ---------------------------------------------------------------- output de-skew
    // Column j leaves the bottom j cycles after column 0: delay it by W-1-j cycles.
    generate
        for (j = 0; j < W; j = j + 1) begin : g_deskew
            if (j == W - 1) begin : g_direct
                assign c_data[j*ACC_W +: ACC_W] = p_net[H*W + j];
            end else begin : g_delay
                reg [ACC_W-1:0] dr [0:W-2-j];
                integer s;
                always @(posedge clk) begin
                    if (!rst_n) begin
                        for (s = 0; s <= W-2-j; s = s + 1) dr[s] <= {ACC_W{1'b0}};
                    end else begin
                        dr[0] <= p_net[H*W + j];
                        for (s = 1; s <= W-2-j; s = s + 1) dr[s] <= dr[s-1];
                    end
                end
                assign c_data[j*ACC_W +: ACC_W] = dr[W-2-j];
            end
        end
    endgenerate
endmodule
