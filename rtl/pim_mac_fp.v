// pim_mac_fp.v -- the floating-point compute unit of one PIM bank: LANES fp16 or bf16
// multipliers, a pairwise fp32 adder tree and an fp32 accumulator, fed one column burst per
// cycle. It computes what archsim.functional.pim_comp_step computes, bit for bit (the
// integer datapath of the same unit is pim_mac.v).
//
// Interface
//   clk, rst_n     clock (rising edge), active-low synchronous reset
//   in_valid       a COMP step this cycle: bank_data x gb_data is reduced and accumulated
//   in_first       with in_valid: this step starts a new dot product (the accumulator restarts
//                  from +0.0, as after READRES: acc = +0.0 + tree sum)
//   bank_data      LANES storage-type elements of the open PIM row's column burst, lane l in
//                  bits [l*DATA_W +: DATA_W] (DATA_W = 1 + EXP_W + MAN_W = 16)
//   gb_data        the matching LANES elements of the channel's global buffer
//   out_valid      acc holds the accumulated value including a step issued FILL_CYCLES ago
//   acc            the fp32 accumulator (IEEE 754 binary32 bits)
//   res            acc rounded to the storage type: what READRES writes when its out_dtype is
//                  the operand type (archsim.functional.to_storage)
// Parameters
//   LANES          multipliers per bank (pim.multipliers_per_bank, 16)
//   EXP_W, MAN_W   operand format: 5/10 = fp16 (IEEE binary16), 8/7 = bf16
//   FILL_CYCLES    COMP pipeline depth of the timing table (pim.gemv_pipeline_fill, 6)
// Timing
//   As pim_mac.v: fully pipelined, one step per cycle; register stages 1 multiply,
//   ceil(log2(LANES)) adder-tree levels, FILL_CYCLES - 2 - ceil(log2(LANES)) delay stages,
//   1 accumulate; the step presented in cycle t is in acc (with out_valid) in cycle
//   t + FILL_CYCLES; res follows acc combinationally. Elaboration stops if FILL_CYCLES is too
//   small.
// Number format
//   Products: each lane multiplies two storage-type values and rounds the product to fp32
//   (exact for fp16; bf16 products can overflow to infinity or fall into fp32's subnormal
//   range, where they are rounded). Adder tree: level by level, neighbours are added,
//   (p0+p1), (p2+p3), ...; lanes up to the next power of two are +0.0, which equals the
//   model's padding of an odd level with one +0.0. Every addition is one fp32 operation.
//   Accumulate: acc + tree sum in fp32. res: acc rounded to the storage type.
//   Every rounding is IEEE 754 round to nearest, ties to even, with gradual underflow:
//   * subnormals are full values everywhere: as operands (fp16/bf16 subnormals), as fp32
//     products, sums and accumulators (no flush to zero, no denormals-are-zero);
//   * a result beyond the largest finite value rounds to +-infinity; inf + finite = inf,
//     inf x finite nonzero = inf (sign: XOR of the operands');
//   * inf - inf, 0 x inf and any operation with a NaN operand give NaN, and every NaN this
//     unit produces is the canonical quiet NaN: sign 0, exponent all ones, only the top
//     fraction bit set (fp32 32'h7FC00000; res 16'h7E00 for fp16, 16'h7FC0 for bf16). NaN
//     inputs of any payload or sign are NaN; nothing of their payload propagates;
//   * an exact zero sum is +0.0 (x + (-x) = +0.0; -0 + -0 = -0); products of zeros keep the
//     sign XOR; in_first adds the first sum to +0.0, so a -0.0 sum starts the accumulator at
//     +0.0, as the model's 0 + sum does.
//   Functions are static (Verilog-2001, no automatic: pyverilog parses it); none recurses.
//   The normalisation shifter is a 6-step leading-zero shifter, the alignment keeps a guard,
//   a round and a sticky bit (enough for correct rounding of a sum of two fp32 values).
`timescale 1ns/1ps
module pim_mac_fp #(
    parameter integer LANES       = 16,
    parameter integer EXP_W       = 5,
    parameter integer MAN_W       = 10,
    parameter integer FILL_CYCLES = 6
) (
    input  wire                               clk,
    input  wire                               rst_n,
    input  wire                               in_valid,
    input  wire                               in_first,
    input  wire [LANES*(1+EXP_W+MAN_W)-1:0]   bank_data,
    input  wire [LANES*(1+EXP_W+MAN_W)-1:0]   gb_data,
    output wire                               out_valid,
    output wire [31:0]                        acc,
    output wire [EXP_W+MAN_W:0]               res
);
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

    localparam integer DATA_W = 1 + EXP_W + MAN_W;
    localparam integer BIAS   = (1 << (EXP_W - 1)) - 1;
    localparam integer LEVELS = clog2(LANES);
    localparam integer P      = 1 << LEVELS;
    localparam integer EXTRA  = FILL_CYCLES - 2 - LEVELS;
    localparam integer CTRL_D = 1 + LEVELS + (EXTRA > 0 ? EXTRA : 0);
    localparam [31:0]  QNAN32 = 32'h7FC00000;

    generate
        if (EXTRA < 0) begin : g_bad_fill
            initial begin
                $display("pim_mac_fp: FILL_CYCLES=%0d < 2 + log2(LANES)=%0d", FILL_CYCLES,
                         2 + LEVELS);
                $finish;
            end
        end
    endgenerate

    // ------------------------------------------------------------------ rounding
    // (-1)^s * sig * 2^(e - 63) rounded to nearest even into a binary format of ew exponent
    // and mw fraction bits, gradual underflow, overflow to infinity; the result is in the low
    // 1 + ew + mw bits. Where the caller dropped bits below sig's LSB, that LSB is their
    // sticky OR (so sig rounds like the exact value).
    function [31:0] round_pack;
        input               s;
        input signed [15:0] e;
        input [63:0]        sig;
        input [7:0]         ew_in;
        input [7:0]         mw_in;
        reg [63:0]          m;
        reg signed [15:0]   x;
        integer             ew, mw, be, sh;   // signed copies of the format widths
        reg [31:0]          keep, bits;
        reg                 rnd, st;
        begin
            ew = ew_in;
            mw = mw_in;
            if (sig == 64'd0) begin
                round_pack = {31'd0, s} << (ew + mw);
            end else begin
                m = sig;
                x = e;
                if (m[63:32] == 32'd0) begin m = m << 32; x = x - 16'sd32; end
                if (m[63:48] == 16'd0) begin m = m << 16; x = x - 16'sd16; end
                if (m[63:56] ==  8'd0) begin m = m <<  8; x = x - 16'sd8;  end
                if (m[63:60] ==  4'd0) begin m = m <<  4; x = x - 16'sd4;  end
                if (m[63:62] ==  2'd0) begin m = m <<  2; x = x - 16'sd2;  end
                if (m[63]    ==  1'b0) begin m = m <<  1; x = x - 16'sd1;  end
                be = x + ((1 << (ew - 1)) - 1);      // biased exponent of the leading one
                if (be >= (1 << ew) - 1) begin
                    round_pack = ({31'd0, s} << (ew + mw)) | (((32'd1 << ew) - 32'd1) << mw);
                end else begin
                    st = 1'b0;
                    if (be < 1) begin                 // subnormal: shift to exponent 1
                        sh = 1 - be;
                        if (sh > 63) begin
                            st = 1'b1;
                            m = 64'd0;
                        end else begin
                            st = (m & ((64'd1 << sh) - 64'd1)) != 64'd0;
                            m = m >> sh;
                        end
                    end
                    keep = m >> (63 - mw);            // leading one (or 0) and mw bits
                    rnd  = m[62 - mw];
                    st   = st | ((m & ((64'd1 << (62 - mw)) - 64'd1)) != 64'd0);
                    bits = (be >= 1 ? (be - 1) << mw : 0) + keep;  // leading one bumps be-1
                    if (rnd && (st || keep[0]))
                        bits = bits + 32'd1;          // a carry moves into the exponent/inf
                    round_pack = ({31'd0, s} << (ew + mw)) | bits;
                end
            end
        end
    endfunction

    // ------------------------------------------------------------------ fp32 product
    function [31:0] mul_f32;
        input [DATA_W-1:0] a;
        input [DATA_W-1:0] b;
        reg               s, a_nan, b_nan, a_inf, b_inf, a_zero, b_zero;
        reg [EXP_W-1:0]   ea, eb;
        reg [63:0]        ma, mb;
        integer           xa, xb;
        begin
            ea = a[DATA_W-2:MAN_W];
            eb = b[DATA_W-2:MAN_W];
            s  = a[DATA_W-1] ^ b[DATA_W-1];
            a_nan  = (&ea) && (a[MAN_W-1:0] != 0);
            b_nan  = (&eb) && (b[MAN_W-1:0] != 0);
            a_inf  = (&ea) && (a[MAN_W-1:0] == 0);
            b_inf  = (&eb) && (b[MAN_W-1:0] == 0);
            a_zero = (ea == 0) && (a[MAN_W-1:0] == 0);
            b_zero = (eb == 0) && (b[MAN_W-1:0] == 0);
            if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) begin
                mul_f32 = QNAN32;
            end else if (a_inf || b_inf) begin
                mul_f32 = {s, 8'hFF, 23'd0};
            end else begin
                ma = {53'd0, ea != 0, a[MAN_W-1:0]} ;  // significand, hidden bit if normal
                mb = {53'd0, eb != 0, b[MAN_W-1:0]};
                xa = (ea != 0 ? ea : 1) - BIAS;
                xb = (eb != 0 ? eb : 1) - BIAS;
                // value = ma*mb * 2^(xa + xb - 2*MAN_W)
                mul_f32 = round_pack(s, xa + xb - 2 * MAN_W + 63, ma * mb, 8, 23);
            end
        end
    endfunction

    // ------------------------------------------------------------------ fp32 sum
    function [31:0] add_f32;
        input [31:0] a;
        input [31:0] b;
        reg          a_nan, b_nan, a_inf, b_inf, sub, stk;
        reg [31:0]   hi, lo;     // the operand of larger, smaller magnitude
        reg [26:0]   ab, bs, bfull;
        reg [27:0]   sum;
        integer      ehi, elo, d;
        begin
            a_nan = (&a[30:23]) && (a[22:0] != 0);
            b_nan = (&b[30:23]) && (b[22:0] != 0);
            a_inf = (&a[30:23]) && (a[22:0] == 0);
            b_inf = (&b[30:23]) && (b[22:0] == 0);
            if (a_nan || b_nan || (a_inf && b_inf && (a[31] != b[31]))) begin
                add_f32 = QNAN32;
            end else if (a_inf) begin
                add_f32 = a;
            end else if (b_inf) begin
                add_f32 = b;
            end else begin
                if (a[30:0] >= b[30:0]) begin hi = a; lo = b; end
                else                    begin hi = b; lo = a; end
                ehi    = (hi[30:23]   != 0) ? hi[30:23]   : 1;
                elo    = (lo[30:23] != 0) ? lo[30:23] : 1;
                d      = ehi - elo;
                ab     = {hi[30:23] != 0, hi[22:0], 3'b000};     // guard, round, sticky
                bfull  = {lo[30:23] != 0, lo[22:0], 3'b000};
                if (d > 26) begin
                    bs = (bfull != 0) ? 27'd1 : 27'd0;
                end else begin
                    stk = (bfull & ((27'd1 << d) - 27'd1)) != 0;
                    bs  = (bfull >> d) | {26'd0, stk};
                end
                sub = hi[31] ^ lo[31];
                sum = sub ? {1'b0, ab} - {1'b0, bs} : {1'b0, ab} + {1'b0, bs};
                if (sum == 28'd0)
                    add_f32 = sub ? 32'd0 : {hi[31], 31'd0};
                else  // value = sum * 2^(ehi - 127 - 26)
                    add_f32 = round_pack(hi[31], ehi - 90, {36'd0, sum}, 8, 23);
            end
        end
    endfunction

    // ------------------------------------------------------------------ fp32 -> storage type
    function [DATA_W-1:0] to_store;
        input [31:0] x;
        reg [31:0]   r;
        integer      ex;
        begin
            if ((&x[30:23]) && (x[22:0] != 0)) begin
                to_store = {1'b0, {EXP_W{1'b1}}, 1'b1, {(MAN_W-1){1'b0}}};
            end else if (&x[30:23]) begin
                to_store = {x[31], {EXP_W{1'b1}}, {MAN_W{1'b0}}};
            end else begin
                ex = (x[30:23] != 0 ? x[30:23] : 1) - 127;   // value = m * 2^(ex - 23)
                r  = round_pack(x[31], ex + 40, {40'd0, x[30:23] != 0, x[22:0]}, EXP_W, MAN_W);
                to_store = r[DATA_W-1:0];
            end
        end
    endfunction

    // ------------------------------------------------------------------ multiply (stage 1)
    // tree[i], heap order: node i has children 2i+1 and 2i+2; leaves are P-1 .. 2P-2.
    reg [31:0] tree [0:2*P-2];
    genvar l, n;
    generate
        for (l = 0; l < P; l = l + 1) begin : g_mul
            if (l < LANES) begin : g_lane
                wire [DATA_W-1:0] x = bank_data[l*DATA_W +: DATA_W];
                wire [DATA_W-1:0] y = gb_data[l*DATA_W +: DATA_W];
                always @(posedge clk) begin
                    if (!rst_n) tree[P-1+l] <= 32'd0;
                    else        tree[P-1+l] <= mul_f32(x, y);
                end
            end else begin : g_pad
                always @(posedge clk) tree[P-1+l] <= 32'd0;   // +0.0
            end
        end
        // ------------------------------------------------------------ adder tree (LEVELS stages)
        for (n = 0; n < P - 1; n = n + 1) begin : g_add
            always @(posedge clk) begin
                if (!rst_n) tree[n] <= 32'd0;
                else        tree[n] <= add_f32(tree[2*n+1], tree[2*n+2]);
            end
        end
    endgenerate

    // ------------------------------------------------------------------ padding delay stages
    // and the control (valid, first) travelling alongside: pim_delay.v
    wire [31:0] sum_root = tree[0];
    wire [31:0] sum_late;
    wire vld_late, first_late;
    pim_delay #(.W(32), .D(EXTRA > 0 ? EXTRA : 0)) u_pad (
        .clk(clk), .rst_n(rst_n), .d(sum_root), .q(sum_late));
    pim_delay #(.W(2), .D(CTRL_D)) u_ctrl (
        .clk(clk), .rst_n(rst_n), .d({in_valid & in_first, in_valid}),
        .q({first_late, vld_late}));

    // ------------------------------------------------------------------ accumulate (last stage)
    reg [31:0] acc_r;
    reg        out_valid_r;
    always @(posedge clk) begin
        if (!rst_n) begin
            acc_r       <= 32'd0;
            out_valid_r <= 1'b0;
        end else begin
            out_valid_r <= vld_late;
            if (vld_late)
                acc_r <= add_f32(first_late ? 32'd0 : acc_r, sum_late);
        end
    end
    assign acc       = acc_r;
    assign res       = to_store(acc_r);
    assign out_valid = out_valid_r;
endmodule
