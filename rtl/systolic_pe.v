// systolic_pe.v -- one processing element of the weight-stationary systolic array, with a
// double-buffered (active + shadow) weight.
//
// Interface
//   clk, rst_n       clock (rising edge), active-low synchronous reset
//   w_shift          preload cycle of this column: the transport register takes w_in (from
//                    the PE above) and passes its old value down on w_out (top to bottom)
//   w_capture        last preload cycle of this column: the shadow weight also takes w_in
//                    (the value the transport register holds once the column has shifted in)
//   w_in / w_out     weight transport chain
//   a_in / a_out     activation, travels left to right, one PE per cycle
//   s_in / s_out     swap flag travelling with the activation: set on the first row of a tile
//                    that switches to the preloaded weights; this PE then computes with the
//                    shadow weight and makes it its active weight
//   p_in / p_out     partial sum, travels top to bottom, one PE per cycle
// Timing
//   Every output is a register: a_out <= a_in, s_out <= s_in,
//   p_out <= p_in + a_in * (s_in ? shadow : active), one cycle. The shadow changes only at
//   a capture, so a preload may shift through while the PE still computes with (or is about to
//   swap in) the previous shadow.
// Number format
//   Signed two's complement integers: DATA_W-bit weights/activations, ACC_W-bit partial sums
//   (a product is sign-extended to ACC_W; sums wrap modulo 2^ACC_W).
`timescale 1ns/1ps
module systolic_pe #(
    parameter integer DATA_W = 16,
    parameter integer ACC_W  = 34
) (
    input  wire                     clk,
    input  wire                     rst_n,
    input  wire                     w_shift,
    input  wire                     w_capture,
    input  wire signed [DATA_W-1:0] w_in,
    output wire signed [DATA_W-1:0] w_out,
    input  wire signed [DATA_W-1:0] a_in,
    output reg  signed [DATA_W-1:0] a_out,
    input  wire                     s_in,
    output reg                      s_out,
    input  wire signed [ACC_W-1:0]  p_in,
    output reg  signed [ACC_W-1:0]  p_out
);
    reg  signed [DATA_W-1:0]   w_active;
    reg  signed [DATA_W-1:0]   w_shadow;
    reg  signed [DATA_W-1:0]   w_transport;
    wire signed [DATA_W-1:0]   w_use = s_in ? w_shadow : w_active;
    wire signed [2*DATA_W-1:0] prod = a_in * w_use;
    wire signed [ACC_W-1:0]    prod_ext = prod;   // sign-extended (or truncated) to ACC_W
    assign w_out = w_transport;

    always @(posedge clk) begin
        if (!rst_n) begin
            w_active    <= {DATA_W{1'b0}};
            w_shadow    <= {DATA_W{1'b0}};
            w_transport <= {DATA_W{1'b0}};
            a_out    <= {DATA_W{1'b0}};
            s_out    <= 1'b0;
            p_out    <= {ACC_W{1'b0}};
        end else begin
            if (w_shift)
                w_transport <= w_in;
            if (w_capture)
                w_shadow <= w_in;
            if (s_in)
                w_active <= w_shadow;
            a_out <= a_in;
            s_out <= s_in;
            p_out <= p_in + prod_ext;
        end
    end
endmodule
