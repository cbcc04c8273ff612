// isa_decoder.v -- decodes one 128-bit instruction word of the custom ISA into its opcode,
// engine and operand fields, and checks it is legal.
//
// The ISA table (isa/spec.py) reaches this module only through the generated include
// rtl/generated/isa_fields.vh (constants and ROM functions per opcode and field slot); the
// decode logic below is generic over it.
//
// Interface
//   clk, rst_n     clock (rising edge), active-low synchronous reset
//   in_valid       instr holds a word to decode this cycle
//   instr          the instruction word (opcode in bits [OPCODE_BITS-1:0], fields packed
//                  upward in table order, unused high bits reserved and zero)
//   out_valid      the outputs below hold the decode of the word offered the cycle before
//   opcode         bits [OPCODE_BITS-1:0] of the word
//   legal          1 when the word is an instruction: err_opcode, err_reserved, err_field all 0
//   err_opcode     the opcode is not in the table
//   err_reserved   a bit above the instruction's last field is set
//   err_field      a field is outside its legal range (an enum code past its list, an unsigned
//                  field below its minimum)
//   engine         the engine the instruction runs on (index in isa.spec.Engine)
//   n_fields       number of operand fields of the opcode (0 for an unknown opcode)
//   fields         slot i (bits [i*FIELD_W +: FIELD_W]) = field i in table order, as stored
//                  (enum index, raw float bits, unsigned value; signed fields sign-extended to
//                  FIELD_W); slots past n_fields are 0
// Timing: one register stage; the decode of a word offered in cycle t is visible in t + 1.
// Number format: fields are the encoding-domain integers of isa.encoding (decode(word).codes).
`timescale 1ns/1ps
module isa_decoder #(
    parameter integer WORD_BITS   = 128,
    parameter integer OPCODE_BITS = 8,
    parameter integer MAX_FIELDS  = 9,
    parameter integer FIELD_W     = 36,
    parameter integer SLOT_BITS   = 4,
    parameter integer ENGINE_BITS = 3
) (
    input  wire                          clk,
    input  wire                          rst_n,
    input  wire                          in_valid,
    input  wire [WORD_BITS-1:0]          instr,
    output reg                           out_valid,
    output reg  [OPCODE_BITS-1:0]        opcode,
    output reg                           legal,
    output reg                           err_opcode,
    output reg                           err_reserved,
    output reg                           err_field,
    output reg  [ENGINE_BITS-1:0]        engine,
    output reg  [SLOT_BITS-1:0]          n_fields,
    output reg  [MAX_FIELDS*FIELD_W-1:0] fields
);
`include "isa_fields.vh"

    // The parameters must describe the table the include was generated from.
    initial begin
        if (WORD_BITS != ISA_WORD_BITS || OPCODE_BITS != ISA_OPCODE_BITS ||
            MAX_FIELDS != ISA_MAX_FIELDS || FIELD_W != ISA_FIELD_W) begin
            $display("isa_decoder: parameters (%0d, %0d, %0d, %0d) differ from isa_fields.vh",
                     WORD_BITS, OPCODE_BITS, MAX_FIELDS, FIELD_W);
            $finish;
        end
    end

    // ---------------------------------------------------------------- combinational decode
    wire [OPCODE_BITS-1:0] op = instr[OPCODE_BITS-1:0];
    reg                    d_err_reserved, d_err_field;
    reg [MAX_FIELDS*FIELD_W-1:0] d_fields;
    reg [7:0]              lsb, width;
    reg [FIELD_W-1:0]      mask, raw;
    reg [WORD_BITS-1:0]    shifted;
    integer                i;

    always @* begin
        d_err_reserved = isa_known(op) && ((instr >> isa_used_bits(op)) != 0);
        d_err_field    = 1'b0;
        d_fields       = {MAX_FIELDS*FIELD_W{1'b0}};
        mask           = {FIELD_W{1'b0}};   // temporaries: assigned on every path (no latch)
        raw            = {FIELD_W{1'b0}};
        shifted        = {WORD_BITS{1'b0}};
        for (i = 0; i < MAX_FIELDS; i = i + 1) begin
            lsb   = isa_field_lsb(op, i);
            width = isa_field_width(op, i);
            if (width != 0) begin
                mask    = {FIELD_W{1'b1}} >> (FIELD_W - width);
                shifted = instr >> lsb;
                raw     = shifted[FIELD_W-1:0] & mask;
                if (raw < isa_field_min(op, i) || raw > isa_field_max(op, i))
                    d_err_field = 1'b1;
                if (isa_field_kind(op, i) == ISA_KIND_S && raw[width-1])
                    raw = raw | ~mask;
                d_fields[i*FIELD_W +: FIELD_W] = raw;
            end
        end
    end

    // ---------------------------------------------------------------- output register
    always @(posedge clk) begin
        if (!rst_n) begin
            out_valid    <= 1'b0;
            opcode       <= {OPCODE_BITS{1'b0}};
            legal        <= 1'b0;
            err_opcode   <= 1'b0;
            err_reserved <= 1'b0;
            err_field    <= 1'b0;
            engine       <= {ENGINE_BITS{1'b0}};
            n_fields     <= {SLOT_BITS{1'b0}};
            fields       <= {MAX_FIELDS*FIELD_W{1'b0}};
        end else begin
            out_valid <= in_valid;
            if (in_valid) begin
                opcode       <= op;
                err_opcode   <= !isa_known(op);
                err_reserved <= d_err_reserved;
                err_field    <= d_err_field;
                legal        <= isa_known(op) && !d_err_reserved && !d_err_field;
                engine       <= isa_engine(op);
                n_fields     <= isa_n_fields(op);
                fields       <= d_fields;
            end
        end
    end
endmodule
