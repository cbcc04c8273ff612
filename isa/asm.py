"""Text assembly: assembler and disassembler, derived from :mod:`isa.spec`.

Syntax (one statement per line; ``;`` or ``#`` starts a comment)::

    .spad 33554432                      ; scratchpad bytes the program was compiled for
    .data                               ; HBM allocations: NAME key=value ...
        A  addr=0x0 size=2048 shape=32x32 dtype=fp16 kind=activation
    .stream dma0                        ; following instructions go to stream dma0
    start:                              ; a label (names an instruction index)
        DMA_LOAD spad=0x0, hbm=A+64, rows=2, cols=32, stride=64, dtype=fp16
        SIGNAL sem=1, count=1

Operands are ``name=value`` (any order) or plain values in table order (positional operands
first); commas are optional. Values: integers (``123``, ``0x7b``, ``0b1111011``, ``1_000``,
``-5`` for signed fields), enum names (``fp16``), aliases (``array=any``), data names with an
optional byte offset (``A``, ``A+0x40``, ``A-16``: the allocation's base address), and for
float immediates a decimal/float literal (``0.125``, ``1e-3``, ``2``) or raw binary32 bits in
hex (``0x3e000000``). ``.stream NAME`` may appear several times; instructions are appended.

Every error is an :class:`isa.errors.AsmError` whose message starts ``FILE:LINE:COLUMN:``.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

import numpy as np

from isa.encoding import Instruction, bits_f32, decode
from isa.errors import AsmError, IsaError, OperandError
from isa.program import DataAlloc, Program, check_stream_instruction
from isa.spec import BY_MNEMONIC, SPAD_ADDR_BITS, FieldSpec, InstrSpec

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|[0-9][0-9_]*)\Z")
_SYM = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*(?:([+-])\s*(\S+))?\Z")
_FLOAT = re.compile(r"[+-]?((\d[\d_]*)?\.?\d[\d_]*([eE][+-]?\d+)?|\d+\.|inf|nan)\Z",
                    re.IGNORECASE)


@dataclass
class _Tok:
    text: str
    col: int  # 1-based


def _strip_comment(line: str) -> str:
    for ch in (";", "#"):
        i = line.find(ch)
        if i >= 0:
            line = line[:i]
    return line.rstrip()


def _split_operands(rest: str, base_col: int) -> list[_Tok]:
    """Split an operand list on commas (or whitespace when there is no comma)."""
    toks: list[_Tok] = []
    if "," in rest:
        pos = 0
        for piece in rest.split(","):
            stripped = piece.strip()
            lead = len(piece) - len(piece.lstrip())
            toks.append(_Tok(stripped, base_col + pos + lead))
            pos += len(piece) + 1
    else:
        for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_.]*\s*=\s*\S+|\S+", rest):
            toks.append(_Tok(m.group(0), base_col + m.start()))
    return toks


def _parse_int(text: str) -> int:
    if not _INT.match(text):
        raise ValueError(text)
    return int(text.replace("_", ""), 0)


def _is_address_field(f: FieldSpec) -> bool:
    return f.kind == "u" and (f.width == SPAD_ADDR_BITS or f.name == "hbm")


class _Assembler:
    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        self.lines = text.splitlines()
        self.prog = Program()
        # instruction statements kept for the second pass (symbols resolved after .data)
        self.pending: list[tuple[str, int, _Tok, InstrSpec, list[_Tok]]] = []
        self.count: dict[str, int] = {}

    def err(self, line: int, col: int, msg: str) -> AsmError:
        return AsmError(self.filename, line, col, msg)

    def run(self) -> Program:
        section: str | None = None  # "data" or a stream name
        for ln, raw in enumerate(self.lines, start=1):
            line = _strip_comment(raw.expandtabs(1))
            if not line.strip():
                continue
            col0 = len(line) - len(line.lstrip()) + 1
            body = line.strip()
            if body.startswith("."):
                section = self.directive(ln, col0, body, section)
                continue
            if section == "data":
                self.data_line(ln, col0, body)
                continue
            # labels
            m = re.match(r"([A-Za-z_][A-Za-z0-9_.]*)\s*:", body)
            if m:
                if section is None:
                    raise self.err(ln, col0, "label before any .stream directive")
                labs = self.prog.labels.setdefault(section, {})
                if m.group(1) in labs:
                    raise self.err(ln, col0, f"label '{m.group(1)}' is defined twice in "
                                             f"stream {section}")
                labs[m.group(1)] = self.count.get(section, 0)
                rest = body[m.end():]
                if not rest.strip():
                    continue
                col0 += m.end() + (len(rest) - len(rest.lstrip()))
                body = rest.strip()
            mm = _IDENT.match(body)
            if not mm:
                raise self.err(ln, col0, "expected an instruction mnemonic, got "
                                         f"'{body.split()[0]}'")
            mnem = mm.group(0)
            spec = BY_MNEMONIC.get(mnem.upper())
            if spec is None:
                near = difflib.get_close_matches(mnem.upper(), list(BY_MNEMONIC), n=3)
                hint = f"; did you mean {', '.join(near)}?" if near else ""
                raise self.err(ln, col0, f"unknown instruction '{mnem}'{hint}")
            if section is None:
                raise self.err(ln, col0, "instruction before any .stream directive")
            if section == "data":  # pragma: no cover - handled above
                raise self.err(ln, col0, "instruction inside .data")
            try:
                check_stream_instruction(section, Instruction.from_codes(spec, ()))
            except IsaError as exc:
                raise self.err(ln, col0, str(exc)) from None
            rest = body[mm.end():]
            toks = _split_operands(rest, col0 + mm.end()) if rest.strip() else []
            self.pending.append((section, ln, _Tok(mnem, col0), spec, toks))
            self.count[section] = self.count.get(section, 0) + 1
        # second pass: operands (data names are known now)
        for section, ln, mtok, spec, toks in self.pending:
            self.prog.streams[section].append(self.instruction(ln, mtok, spec, toks))
        return self.prog

    def directive(self, ln: int, col: int, body: str, section: str | None) -> str | None:
        parts = body.split()
        name = parts[0].lower()
        if name == ".stream":
            if len(parts) != 2:
                raise self.err(ln, col, ".stream takes one stream name, e.g. '.stream dma0'")
            try:
                self.prog.stream(parts[1])
            except IsaError as exc:
                raise self.err(ln, col + body.index(parts[1], 7), str(exc)) from None
            return parts[1]
        if name == ".data":
            if len(parts) != 1:
                raise self.err(ln, col + len(parts[0]) + 1, ".data takes no operands")
            return "data"
        if name == ".spad":
            if len(parts) != 2:
                raise self.err(ln, col, ".spad takes the scratchpad size in bytes")
            try:
                v = _parse_int(parts[1])
                if v < 0:
                    raise ValueError
            except ValueError:
                raise self.err(ln, col + body.index(parts[1], 5),
                               f"cannot parse '{parts[1]}' as a byte count") from None
            self.prog.spad_size_bytes = v
            return section
        raise self.err(ln, col, f"unknown directive '{parts[0]}' (known: .stream, .data, .spad)")

    def data_line(self, ln: int, col: int, body: str) -> None:
        toks = _split_operands(body, col)
        name_tok = toks[0]
        if not _IDENT.fullmatch(name_tok.text):
            raise self.err(ln, name_tok.col, f"expected a data name, got '{name_tok.text}'")
        kv: dict[str, tuple[str, int]] = {}
        for t in toks[1:]:
            if "=" not in t.text:
                raise self.err(ln, t.col, f"expected key=value, got '{t.text}'")
            k, _, v = t.text.partition("=")
            k = k.strip()
            if k not in ("addr", "size", "shape", "dtype", "kind"):
                raise self.err(ln, t.col, f"unknown data key '{k}' (keys: addr, size, shape, "
                                          "dtype, kind)")
            if k in kv:
                raise self.err(ln, t.col, f"data key '{k}' given twice")
            kv[k] = (v.strip(), t.col + t.text.index("=") + 1)
        for k in ("addr", "size", "shape"):
            if k not in kv:
                raise self.err(ln, name_tok.col, f"data '{name_tok.text}' needs {k}=")
        vals = {}
        for k in ("addr", "size"):
            text, c = kv[k]
            try:
                vals[k] = _parse_int(text)
            except ValueError:
                raise self.err(ln, c, f"cannot parse '{text}' as an integer for {k}") from None
        text, c = kv["shape"]
        try:
            shape = tuple(_parse_int(x) for x in text.lower().split("x"))
        except ValueError:
            raise self.err(ln, c, f"cannot parse shape '{text}' (expected e.g. 4096x4096)"
                           ) from None
        try:
            self.prog.add_data(DataAlloc(name_tok.text, vals["addr"], vals["size"], shape,
                                         kv.get("dtype", ("fp16", 0))[0].lower(),
                                         kv.get("kind", ("activation", 0))[0].lower()))
        except IsaError as exc:
            raise self.err(ln, name_tok.col, str(exc)) from None

    def value(self, ln: int, tok: _Tok, text: str, col: int, spec: InstrSpec,
              f: FieldSpec) -> object:
        """Parse one operand value text for field ``f`` into a constructor value."""
        if f.kind == "enum":
            if text.lower() in f.enum:
                return text.lower()
            raise self.err(ln, col, f"operand {f.name} = '{text}' is not one of "
                                    f"{f.range_text()}")
        if f.kind == "f32":
            if re.fullmatch(r"[+-]?0[xX][0-9a-fA-F_]+", text):
                bits = _parse_int(text)
                if not 0 <= bits < (1 << 32):
                    raise self.err(ln, col, f"operand {f.name} = {text}: raw bits must fit the "
                                            f"32-bit float field")
                return ("bits", bits)
            if _FLOAT.match(text):
                try:
                    v = float(text.replace("_", ""))
                except ValueError:
                    pass
                else:
                    if math.isfinite(v) and abs(v) > 3.4028235677973366e38:
                        raise self.err(ln, col, f"operand {f.name} = {text} overflows the 32-bit "
                                                "float field")
                    return v
            raise self.err(ln, col, f"cannot parse '{text}' as a float for field {f.name}")
        for alias, code in f.aliases:
            if text.lower() == alias:
                return code
        try:
            return _parse_int(text)
        except ValueError:
            pass
        m = _SYM.match(text)
        if m and f.name == "hbm":
            try:
                base = self.prog.alloc(m.group(1)).addr
            except IsaError as exc:
                raise self.err(ln, col, str(exc)) from None
            off = 0
            if m.group(2):
                try:
                    off = _parse_int(m.group(3))
                except ValueError:
                    raise self.err(ln, col, f"cannot parse offset '{m.group(3)}'") from None
                off = -off if m.group(2) == "-" else off
            return base + off
        raise self.err(ln, col, f"cannot parse '{text}' as a value for field {f.name} "
                                f"({f.kind_text()})")

    def instruction(self, ln: int, mtok: _Tok, spec: InstrSpec, toks: list[_Tok]) -> Instruction:
        values: dict[str, object] = {}
        cols: dict[str, int] = {}
        names = spec.field_names
        seen_kw = False
        for i, t in enumerate(toks):
            if not t.text:
                raise self.err(ln, t.col, "empty operand (stray comma?)")
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)\Z", t.text)
            if m:
                seen_kw = True
                key, text = m.group(1), m.group(2)
                vcol = t.col + t.text.index("=") + 1 + (len(t.text.split("=", 1)[1])
                                                        - len(t.text.split("=", 1)[1].lstrip()))
                if key not in names:
                    raise self.err(ln, t.col, f"{spec.mnemonic} has no operand '{key}'; operands "
                                              f"are {', '.join(names) or '(none)'}")
            else:
                if seen_kw:
                    raise self.err(ln, t.col, "positional operand after a name=value operand")
                if i >= len(names):
                    raise self.err(ln, t.col, f"{spec.mnemonic} takes {len(names)} operand(s), "
                                              f"got more")
                key, text, vcol = names[i], t.text, t.col
            if key in values:
                raise self.err(ln, t.col, f"operand '{key}' given twice")
            f = spec.field(key)
            values[key] = self.value(ln, t, text, vcol, spec, f)
            cols[key] = vcol
        missing = [n for n in names if n not in values]
        if missing:
            end_col = (toks[-1].col + len(toks[-1].text)) if toks else mtok.col + len(mtok.text)
            raise self.err(ln, end_col, f"{spec.mnemonic}: missing operand(s) "
                                        f"{', '.join(missing)}")
        raw_bits = {k: v[1] for k, v in values.items() if isinstance(v, tuple)}
        ctor = {k: (0.0 if isinstance(v, tuple) else v) for k, v in values.items()}
        try:
            ins = Instruction(spec, **ctor)
        except OperandError as exc:
            msg = str(exc)
            key = next((n for n in names if f"operand {n} " in msg), None)
            col = cols.get(key, mtok.col) if key else mtok.col
            raise self.err(ln, col, msg) from None
        if raw_bits:
            codes = list(ins.codes)
            for k, b in raw_bits.items():
                codes[names.index(k)] = b
            ins = Instruction.from_codes(spec, codes)
        return ins


def assemble(text: str, filename: str = "<text>") -> Program:
    """Assemble program text into a :class:`isa.program.Program`.

    Args:
        text: assembly source (see the module docstring).
        filename: name used in error messages.

    Raises:
        AsmError: the first error, as ``FILE:LINE:COLUMN: message``; an out-of-range operand
            names the field, its bit width and its legal range.
    """
    return _Assembler(text, filename).run()


def assemble_instruction(line: str, data: list[DataAlloc] | None = None) -> Instruction:
    """Assemble one instruction line (no directives); data names resolve against ``data``."""
    text = ""
    if data:
        text += ".data\n" + "".join(
            f"{d.name} addr={d.addr} size={d.size_bytes} shape={'x'.join(map(str, d.shape))} "
            f"dtype={d.dtype} kind={d.kind}\n" for d in data)
    spec = BY_MNEMONIC.get(line.split()[0].upper()) if line.split() else None
    kind = spec.engine.value if spec is not None and spec.engine.value != "sync" else "dma"
    prog = assemble(f"{text}.stream {kind}\n{line}\n", "<line>")
    return prog.streams[kind][0]


# ---- disassembly ---------------------------------------------------------------------------
def _format_f32(bits: int) -> str:
    v = bits_f32(bits)
    if not math.isfinite(v):
        return f"{bits:#010x}"
    text = str(np.float32(v))
    if not re.search(r"[.eE]", text):
        text += ".0"
    return text


def _format_value(f: FieldSpec, code: int, data: list[DataAlloc] | None) -> str:
    if f.kind == "enum":
        return f.enum[code]
    if f.kind == "f32":
        return _format_f32(code)
    for alias, v in f.aliases:
        if code == v:
            return alias
    if f.name == "hbm" and data:
        for d in data:
            if d.addr <= code < d.end:
                off = code - d.addr
                return d.name if off == 0 else f"{d.name}+{off:#x}"
    if _is_address_field(f):
        return f"{code:#x}"
    return str(code)


def format_instruction(ins: Instruction, data: list[DataAlloc] | None = None) -> str:
    """One line of assembly for ``ins`` (``name=value`` operands; HBM addresses symbolic when
    ``data`` has an allocation containing them)."""
    ops = ", ".join(f"{f.name}={_format_value(f, c, data)}"
                    for f, c in zip(ins.spec.fields, ins.codes))
    return f"{ins.mnemonic} {ops}" if ops else ins.mnemonic


def disassemble_word(word: int) -> str:
    """Assembly text of one 128-bit word; IllegalInstruction when it is not legal."""
    return format_instruction(decode(word))


def disassemble_program(prog: Program) -> str:
    """The whole program as assembly text; ``assemble`` of it gives back an equal program."""
    out = ["; archsim ISA program (text form; see docs/isa.md)"]
    if prog.spad_size_bytes:
        out.append(f".spad {prog.spad_size_bytes}")
    if prog.data:
        out.append(".data")
        for d in prog.data:
            out.append(f"    {d.name} addr={d.addr:#x} size={d.size_bytes} "
                       f"shape={'x'.join(map(str, d.shape))} dtype={d.dtype} kind={d.kind}")
    for name, instrs in prog.streams.items():
        out.append(f".stream {name}")
        labs: dict[int, list[str]] = {}
        for lab, idx in prog.labels.get(name, {}).items():
            labs.setdefault(idx, []).append(lab)
        for i, ins in enumerate(instrs):
            for lab in labs.get(i, []):
                out.append(f"{lab}:")
            out.append("    " + format_instruction(ins, prog.data))
        for lab in labs.get(len(instrs), []):
            out.append(f"{lab}:")
    return "\n".join(out) + "\n"


__all__ = ["assemble", "assemble_instruction", "format_instruction", "disassemble_word",
           "disassemble_program"]
