// systolic_pe.v -- one processing element of the weight-stationary systolic array.
//
// Interface
//   clk, rst_n       clock (rising edge), active-low synchronous reset
//   w_shift          1: this cycle is a weight-preload cycle; the stationary weight register
//                    takes w_in (from the PE above) and passes its old value down on w_out
//   w_in / w_out     weight preload chain (top to bottom)
//   a_in / a_out     activation, travels left to right, one PE per cycle
//   p_in / p_out     partial sum, travels top to bottom, one PE per cycle
// Timing
//   Every output is a register: a_out <= a_in, p_out <= p_in + a_in * w (one cycle).
//   While w_shift is high the weight changes and p_out is not meaningful.
// Number format
//   Signed two's complement integers: DATA_W-bit weights/activations, ACC_W-bit partial sums
//   (ACC_W >= 2*DATA_W + ceil(log2(H)) keeps a column's sum exact; the sum wraps modulo
//   2^ACC_W otherwise).
`timescale 1ns/1ps
module systolic_pe #(
    parameter integer DATA_W = 16,
    parameter integer ACC_W  = 35
) (
    input  wire                     clk,
    input  wire                     rst_n,
    input  wire                     w_shift,
    input  wire signed [DATA_W-1:0] w_in,
    output reg  signed [DATA_W-1:0] w_out,
    input  wire signed [DATA_W-1:0] a_in,
    output reg  signed [DATA_W-1:0] a_out,
    input  wire signed [ACC_W-1:0]  p_in,
    output reg  signed [ACC_W-1:0]  p_out
);
    wire signed [2*DATA_W-1:0] prod = a_in * w_out;
    wire signed [ACC_W-1:0]    prod_ext = {{(ACC_W > 2*DATA_W ? ACC_W-2*DATA_W : 1){prod[2*DATA_W-1]}}, prod};

    always @(posedge clk) begin
        if (!rst_n) begin
            w_out <= {DATA_W{1'b0}};
            a_out <= {DATA_W{1'b0}};
            p_out <= {ACC_W{1'b0}};
        end else begin
            if (w_shift)
                w_out <= w_in;
            a_out <= a_in;
            p_out <= p_in + prod_ext;
        end
    end
endmodule
