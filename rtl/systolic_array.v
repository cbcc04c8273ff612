// systolic_array.v -- H x W weight-stationary systolic array with weight preload, skewed input
// feeding, de-skewed outputs and a tile controller.
//
// Computes C[n x W] = A[n x H] * B[H x W] for one tile: B is preloaded and stays in the PEs
// (PE(k, j) holds B[k][j]); rows of A stream in from the left, partial sums flow down.
//
// Interface
//   clk, rst_n     clock (rising edge), active-low synchronous reset
//   start, n_rows  in IDLE, a one-cycle start pulse begins a tile of n_rows rows of A (n_rows is
//                  sampled with start; 0 is allowed and only costs the minimum time)
//   w_ready        high for the H preload cycles, the first of which is the start cycle itself;
//                  w_data must then carry one row of B per cycle, B[H-1] first, B[0] last
//                  (weights enter at the top and shift down one PE row per cycle)
//   w_data         W weights, column j in bits [j*DATA_W +: DATA_W]
//   a_ready        high in each of the n_rows feed cycles that follow preload; a_data must then
//                  carry the next row of A (row 0 first), unskewed: the array skews it itself
//   a_data         H activations, element k in bits [k*DATA_W +: DATA_W]
//   c_valid        c_data holds one full output row C[i] (rows in order)
//   c_data         W sums, column j in bits [j*ACC_W +: ACC_W]
//   done           one-cycle pulse: the tile's last (possibly padding) row has drained
//   busy           a tile is in flight (start is ignored while busy)
// Timing (the NPU timing model of DESIGN §3 / archsim.npu)
//   preload: H cycles (start cycle .. start + H - 1);
//   the feeder issues max(n_rows, MIN_ROWS) rows, one per cycle, padding with zero rows when
//   n_rows < MIN_ROWS (the minimum issue window of the input buffer);
//   row i of A enters PE row k at (first feed cycle) + i + k, reaches column j one cycle per PE,
//   and C[i] (de-skewed) is on c_data at (first feed cycle) + i + H + W - 1.
//   Hence done is high exactly H + (H + W - 2 + max(n_rows, MIN_ROWS)) cycles after the start
//   cycle: preload + tile_latency_cycles(H, W, n).
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
    input  wire                 start,
    input  wire [NROWS_W-1:0]   n_rows,
    output wire                 w_ready,
    input  wire [W*DATA_W-1:0]  w_data,
    output wire                 a_ready,
    input  wire [H*DATA_W-1:0]  a_data,
    output wire                 c_valid,
    output wire [W*ACC_W-1:0]   c_data,
    output wire                 done,
    output wire                 busy
);
    localparam [1:0] S_IDLE = 2'd0, S_LOAD = 2'd1, S_FEED = 2'd2, S_DRAIN = 2'd3;
    localparam integer TAG_DEPTH = H + W - 1;   // first feed cycle -> de-skewed output row

    reg  [1:0]         state;
    reg  [NROWS_W-1:0] rows_total;   // max(n_rows, MIN_ROWS)
    reg  [NROWS_W-1:0] rows_real;    // n_rows
    reg  [NROWS_W-1:0] count;        // preload or feed cycles done in this state

    wire start_ok = (state == S_IDLE) && start;
    assign busy    = (state != S_IDLE);
    assign w_ready = start_ok || (state == S_LOAD);
    wire   feeding = (state == S_FEED);
    assign a_ready = feeding && (count < rows_real);
    wire   feed_last = feeding && (count == rows_total - 1'b1);

    // ---------------------------------------------------------------- tile controller
    wire [NROWS_W-1:0] n_padded = (n_rows < MIN_ROWS) ? MIN_ROWS[NROWS_W-1:0] : n_rows;
    always @(posedge clk) begin
        if (!rst_n) begin
            state      <= S_IDLE;
            count      <= {NROWS_W{1'b0}};
            rows_total <= {NROWS_W{1'b0}};
            rows_real  <= {NROWS_W{1'b0}};
        end else begin
            case (state)
                S_IDLE: if (start) begin
                    rows_real  <= n_rows;
                    rows_total <= n_padded;
                    if (H == 1) begin
                        state <= S_FEED;
                        count <= {NROWS_W{1'b0}};
                    end else begin
                        state <= S_LOAD;
                        count <= 1;         // the start cycle was preload cycle 0
                    end
                end
                S_LOAD: if (count == H - 1) begin
                    state <= S_FEED;
                    count <= {NROWS_W{1'b0}};
                end else begin
                    count <= count + 1'b1;
                end
                S_FEED: if (feed_last) begin
                    state <= S_DRAIN;
                end else begin
                    count <= count + 1'b1;
                end
                S_DRAIN: if (done) state <= S_IDLE;
                default: state <= S_IDLE;
            endcase
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
            tag_last  <= {tag_last[TAG_DEPTH-2:0], feed_last};
        end
    end
    assign c_valid = tag_valid[TAG_DEPTH-1];
    assign done    = tag_last[TAG_DEPTH-1];

    // ---------------------------------------------------------------- input skew
    // a_skewed[k] = a_data[k] delayed by k cycles (row 0 straight through). Padding rows and
    // idle cycles feed zeros.
    wire [H*DATA_W-1:0] a_gated = a_ready ? a_data : {H*DATA_W{1'b0}};
    wire [H*DATA_W-1:0] a_skewed;
    genvar k, j, d;
    generate
        for (k = 0; k < H; k = k + 1) begin : g_skew
            if (k == 0) begin : g_direct
                assign a_skewed[0 +: DATA_W] = a_gated[0 +: DATA_W];
            end else begin : g_delay
                reg [DATA_W-1:0] sr [0:k-1];
                integer s;
                always @(posedge clk) begin
                    if (!rst_n) begin
                        for (s = 0; s < k; s = s + 1) sr[s] <= {DATA_W{1'b0}};
                    end else begin
                        sr[0] <= a_gated[k*DATA_W +: DATA_W];
                        for (s = 1; s < k; s = s + 1) sr[s] <= sr[s-1];
                    end
                end
                assign a_skewed[k*DATA_W +: DATA_W] = sr[k-1];
            end
        end
    endgenerate

    // ---------------------------------------------------------------- PE grid
    // a_bus[(k*(W+1) + j)]: activation entering PE(k, j); column W is the unused exit.
    // p_bus[(k*W + j)]: partial sum entering PE(k, j); row H is the bottom exit.
    // w_bus[(k*W + j)]: weight entering PE(k, j) during preload; row 0 takes w_data.
    wire [H*(W+1)*DATA_W-1:0] a_bus;
    wire [(H+1)*W*ACC_W-1:0]  p_bus;
    wire [(H+1)*W*DATA_W-1:0] w_bus;
    generate
        for (j = 0; j < W; j = j + 1) begin : g_top
            assign p_bus[j*ACC_W +: ACC_W]   = {ACC_W{1'b0}};
            assign w_bus[j*DATA_W +: DATA_W] = w_data[j*DATA_W +: DATA_W];
        end
        for (k = 0; k < H; k = k + 1) begin : g_row
            assign a_bus[(k*(W+1))*DATA_W +: DATA_W] = a_skewed[k*DATA_W +: DATA_W];
            for (j = 0; j < W; j = j + 1) begin : g_col
                systolic_pe #(.DATA_W(DATA_W), .ACC_W(ACC_W)) u_pe (
                    .clk    (clk),
                    .rst_n  (rst_n),
                    .w_shift(w_ready),
                    .w_in   (w_bus[(k*W + j)*DATA_W +: DATA_W]),
                    .w_out  (w_bus[((k+1)*W + j)*DATA_W +: DATA_W]),
                    .a_in   (a_bus[(k*(W+1) + j)*DATA_W +: DATA_W]),
                    .a_out  (a_bus[(k*(W+1) + j + 1)*DATA_W +: DATA_W]),
                    .p_in   (p_bus[(k*W + j)*ACC_W +: ACC_W]),
                    .p_out  (p_bus[((k+1)*W + j)*ACC_W +: ACC_W])
                );
            end
        end
    endgenerate

    // ---------------------------------------------------------------- output de-skew
    // Column j leaves the bottom j cycles after column 0: delay it by W-1-j cycles.
    generate
        for (j = 0; j < W; j = j + 1) begin : g_deskew
            if (j == W - 1) begin : g_direct
                assign c_data[j*ACC_W +: ACC_W] = p_bus[(H*W + j)*ACC_W +: ACC_W];
            end else begin : g_delay
                reg [ACC_W-1:0] dr [0:W-2-j];
                integer s;
                always @(posedge clk) begin
                    if (!rst_n) begin
                        for (s = 0; s <= W-2-j; s = s + 1) dr[s] <= {ACC_W{1'b0}};
                    end else begin
                        dr[0] <= p_bus[(H*W + j)*ACC_W +: ACC_W];
                        for (s = 1; s <= W-2-j; s = s + 1) dr[s] <= dr[s-1];
                    end
                end
                assign c_data[j*ACC_W +: ACC_W] = dr[W-2-j];
            end
        end
    endgenerate
endmodule
