"""``rtl/generated/isa_fields.vh``: the ISA table as Verilog constants and ROM functions."""
from __future__ import annotations

from pathlib import Path

from archsim.cosim.common import GENERATED_DIR
from archsim.cosim.models import isa_engines
from archsim.cosim.params import isa_verilog_parameters

ISA_FIELDS_VH = GENERATED_DIR / "isa_fields.vh"
ISA_KIND_CODES = {"u": 0, "s": 1, "enum": 2, "f32": 3}
"""Field kinds as the generated include encodes them (``isa_field_kind``)."""


def _field_raw_range(f) -> tuple[int, int]:
    """Legal raw (unsigned, as stored) codes of one field: [lo, hi]."""
    if f.kind == "u":
        return f.min_value, f.mask
    if f.kind == "enum":
        return 0, len(f.enum) - 1
    return 0, f.mask


def generate_isa_fields_vh() -> str:
    """The text of ``rtl/generated/isa_fields.vh``: the ISA table as Verilog constants and
    ROM functions (opcode known, used bits, engine, field count, and per field slot its lsb,
    width, kind and legal raw range), generated from :data:`isa.spec.SPEC`.

    Included inside ``isa_decoder``; the decoder logic itself is generic over these functions.
    """
    from isa import spec

    p = isa_verilog_parameters()
    fw, ob, sb = p["FIELD_W"], p["OPCODE_BITS"], p["SLOT_BITS"]
    engines = isa_engines()
    out: list[str] = []
    w = out.append
    w("// isa_fields.vh -- GENERATED from isa/spec.py by archsim.cosim.generate_isa_fields_vh().")
    w("// Do not edit: regenerate with `archsim cosim --write-isa-fields`; a test checks that this")
    w("// file equals the generator's output for the current ISA table.")
    w("// Included inside module isa_decoder.")
    w(f"localparam integer ISA_WORD_BITS   = {spec.WORD_BITS};")
    w(f"localparam integer ISA_OPCODE_BITS = {ob};")
    w(f"localparam integer ISA_MAX_FIELDS  = {p['MAX_FIELDS']};")
    w(f"localparam integer ISA_FIELD_W     = {fw};")
    w(f"localparam integer ISA_N_ENGINES   = {len(engines)};")
    for k, v in ISA_KIND_CODES.items():
        w(f"localparam [1:0] ISA_KIND_{k.upper()} = 2'd{v};")
    for i, e in enumerate(engines):
        w(f"localparam integer ISA_ENGINE_{e.name} = {i};")
    for s in spec.SPEC:
        w(f"localparam [{ob - 1}:0] OP_{s.mnemonic} = {ob}'h{s.opcode:02X};")
    for s in spec.SPEC:
        for f in s.fields:
            n = f"{s.mnemonic}_{f.name.upper()}"
            w(f"localparam integer {n}_LSB = {f.lsb}, {n}_W = {f.width};")

    def rom(name: str, width: str, per_op, default: str) -> None:
        w("")
        w(f"function {width}{name};")
        w(f"    input [{ob - 1}:0] op;")
        w("    begin")
        w(f"        case (op)")
        for s in spec.SPEC:
            w(f"            OP_{s.mnemonic}: {name} = {per_op(s)};")
        w(f"            default: {name} = {default};")
        w("        endcase")
        w("    end")
        w("endfunction")

    def rom_slot(name: str, width: str, per_field, default: str) -> None:
        w("")
        w(f"function {width}{name};")
        w(f"    input [{ob - 1}:0] op;")
        w(f"    input [{sb - 1}:0] slot;")
        w("    begin")
        w(f"        {name} = {default};")
        w("        case (op)")
        for s in spec.SPEC:
            if not s.fields:
                continue
            w(f"            OP_{s.mnemonic}:")
            w("                case (slot)")
            for i, f in enumerate(s.fields):
                w(f"                    {sb}'d{i}: {name} = {per_field(s, f)};")
            w(f"                    default: {name} = {default};")
            w("                endcase")
        w(f"            default: {name} = {default};")
        w("        endcase")
        w("    end")
        w("endfunction")

    rom("isa_known", "", lambda s: "1'b1", "1'b0")
    rom("isa_used_bits", "[7:0] ", lambda s: f"8'd{s.used_bits}", "8'd0")
    rom("isa_engine", f"[{p['ENGINE_BITS'] - 1}:0] ",
        lambda s: f"ISA_ENGINE_{s.engine.name}", "0")
    rom("isa_n_fields", f"[{sb - 1}:0] ", lambda s: f"{sb}'d{len(s.fields)}", f"{sb}'d0")
    rom_slot("isa_field_lsb", "[7:0] ",
             lambda s, f: f"{s.mnemonic}_{f.name.upper()}_LSB", "8'd0")
    rom_slot("isa_field_width", "[7:0] ",
             lambda s, f: f"{s.mnemonic}_{f.name.upper()}_W", "8'd0")
    rom_slot("isa_field_kind", "[1:0] ", lambda s, f: f"ISA_KIND_{f.kind.upper()}",
             "ISA_KIND_U")
    rom_slot("isa_field_min", f"[{fw - 1}:0] ",
             lambda s, f: f"{fw}'d{_field_raw_range(f)[0]}", f"{fw}'d0")
    rom_slot("isa_field_max", f"[{fw - 1}:0] ",
             lambda s, f: f"{fw}'d{_field_raw_range(f)[1]}", f"{fw}'d0")
    return "\n".join(out) + "\n"


def write_isa_fields_vh(path: Path | None = None) -> Path:
    """Write :func:`generate_isa_fields_vh` to ``rtl/generated/isa_fields.vh`` (or ``path``)."""
    target = Path(path or ISA_FIELDS_VH)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(generate_isa_fields_vh())
    return target
