// pim_delay.v -- a D-stage register delay line, the pipeline padding and the control pipe of
// the PIM MAC datapaths (pim_mac.v, pim_mac_fp.v).
//
// Interface
//   clk, rst_n     clock (rising edge), active-low synchronous reset (every stage to 0)
//   d              W bits in
//   q              W bits out
// Timing
//   q in cycle t + D is d of cycle t; D = 0 is a wire.
// Number format
//   Bits, passed through unchanged.
`timescale 1ns/1ps
module pim_delay #(
    parameter integer W = 1,
    parameter integer D = 1
) (
    input  wire         clk,
    input  wire         rst_n,
    input  wire [W-1:0] d,
    output wire [W-1:0] q
);
    generate
        if (D == 0) begin : g_wire
            assign q = d;
        end else begin : g_regs
            reg [W-1:0] r [0:D-1];
            integer s;
            always @(posedge clk) begin
                if (!rst_n) begin
                    for (s = 0; s < D; s = s + 1) r[s] <= {W{1'b0}};
                end else begin
                    r[0] <= d;
                    for (s = 1; s < D; s = s + 1) r[s] <= r[s-1];
                end
            end
            assign q = r[D-1];
        end
    endgenerate
endmodule
