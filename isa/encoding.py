"""Instructions as values, and their fixed 128-bit encoding, derived from :mod:`isa.spec`.

An :class:`Instruction` holds its operands in the encoding domain (the integer each field
stores: enum index, IEEE bits of a float immediate, two's-complement value of a signed field),
so ``decode(encode(i)) == i`` holds bit for bit, NaN payloads included. Item access returns the
meaningful value: ``ins["dtype"] == "fp16"``, ``ins["imm"] == 0.125``, ``ins["rows"] == 128``.

Word layout: see :mod:`isa.spec` (opcode in bits [7:0], fields packed upward in table order,
reserved high bits zero). Bytes: 16 per word, little-endian.
"""
from __future__ import annotations

import struct
from typing import Any, Iterable

from isa.errors import IllegalInstruction, OperandError
from isa.spec import BY_MNEMONIC, BY_OPCODE, OPCODE_BITS, WORD_BITS, FieldSpec, InstrSpec

WORD_BYTES = WORD_BITS // 8
_WORD_MASK = (1 << WORD_BITS) - 1


def f32_bits(value: float) -> int:
    """IEEE-754 binary32 bits of ``value`` (rounded to nearest binary32)."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


def bits_f32(bits: int) -> float:
    """The binary32 value whose bits are ``bits`` (0 <= bits < 2**32), as a Python float."""
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _to_code(spec: InstrSpec, f: FieldSpec, value: Any) -> int:
    """Convert a user value of field ``f`` to its encoding-domain integer (checked)."""
    where = f"{spec.mnemonic}: operand {f.name}"
    if f.kind == "enum":
        if isinstance(value, str):
            try:
                return f.enum.index(value.lower())
            except ValueError:
                raise OperandError(f"{where} = {value!r} is not one of {f.range_text()} "
                                   f"({f.kind_text()} field)") from None
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(f.enum):
            return value
        raise OperandError(f"{where} = {value!r} is not one of {f.range_text()} "
                           f"({f.kind_text()} field)")
    if f.kind == "f32":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OperandError(f"{where} = {value!r} is not a number ({f.kind_text()} field)")
        try:
            return f32_bits(float(value))
        except OverflowError:
            raise OperandError(f"{where} = {value!r} overflows binary32 "
                               f"({f.kind_text()} field)") from None
    if isinstance(value, str):
        for name, code in f.aliases:
            if value.lower() == name:
                return code
        raise OperandError(f"{where} = {value!r} is not a number"
                           + (f" or one of {', '.join(n for n, _ in f.aliases)}"
                              if f.aliases else "") + f" ({f.kind_text()} field)")
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int):
        try:
            as_int = int(value)
        except (TypeError, ValueError):
            raise OperandError(f"{where} = {value!r} is not an integer "
                               f"({f.kind_text()} field)") from None
        if as_int != value:
            raise OperandError(f"{where} = {value!r} is not an integer ({f.kind_text()} field)")
        value = as_int
    if not f.lo <= value <= f.hi:
        raise OperandError(f"{where} = {value} out of range for field {f.name} "
                           f"({f.kind_text()}, {f.lo}..{f.hi})")
    return value


def _from_code(f: FieldSpec, code: int) -> Any:
    """The meaningful value of a field from its encoding-domain integer."""
    if f.kind == "enum":
        return f.enum[code]
    if f.kind == "f32":
        return bits_f32(code)
    return code


class Instruction:
    """One instruction: its spec and operand codes (immutable, comparable, hashable).

    Build with ``Instruction("DMA_LOAD", spad=0, hbm=4096, rows=2, cols=8, stride=16,
    dtype="fp16")``: every operand of the spec must be given; enum fields take names, float
    immediates take numbers, aliased fields accept their alias (``array="any"``).

    Raises:
        OperandError: unknown mnemonic, missing or unknown operand, value out of range (the
            message names the field, its bit width and its legal range).
    """

    __slots__ = ("spec", "codes")

    def __init__(self, mnemonic: str | InstrSpec, **operands: Any) -> None:
        if isinstance(mnemonic, InstrSpec):
            spec = mnemonic
        else:
            spec = BY_MNEMONIC.get(str(mnemonic).upper())
            if spec is None:
                raise OperandError(f"unknown instruction '{mnemonic}'")
        names = spec.field_names
        unknown = [k for k in operands if k not in names]
        if unknown:
            raise OperandError(f"{spec.mnemonic}: unknown operand '{unknown[0]}'; operands are "
                               f"{', '.join(names) or '(none)'}")
        missing = [n for n in names if n not in operands]
        if missing:
            raise OperandError(f"{spec.mnemonic}: missing operand(s) {', '.join(missing)}")
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "codes",
                           tuple(_to_code(spec, f, operands[f.name]) for f in spec.fields))

    @classmethod
    def from_codes(cls, spec: InstrSpec, codes: Iterable[int]) -> "Instruction":
        """Build from encoding-domain integers (no range check: the decoder checks)."""
        obj = _new(cls)
        _set_spec(obj, spec)               # the slots' own setters: no __setattr__ call
        _set_codes(obj, codes if type(codes) is tuple else tuple(codes))
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Instruction is immutable; use .replace(**operands)")

    @property
    def mnemonic(self) -> str:
        """Upper-case mnemonic."""
        return self.spec.mnemonic

    @property
    def opcode(self) -> int:
        """8-bit opcode."""
        return self.spec.opcode

    def __getitem__(self, name: str) -> Any:
        """Meaningful value of operand ``name`` (enum name, float, int)."""
        for f, c in zip(self.spec.fields, self.codes):
            if f.name == name:
                return _from_code(f, c)
        raise KeyError(f"{self.spec.mnemonic} has no operand '{name}'")

    def code(self, name: str) -> int:
        """Encoding-domain integer of operand ``name``."""
        return self.codes[self.spec.field_names.index(name)]

    def operands(self) -> dict[str, Any]:
        """All operands as ``{name: meaningful value}`` in table order."""
        return {f.name: _from_code(f, c) for f, c in zip(self.spec.fields, self.codes)}

    def replace(self, **operands: Any) -> "Instruction":
        """A copy with some operands changed (checked like the constructor)."""
        names = self.spec.field_names
        codes = list(self.codes)
        for k, v in operands.items():
            if k not in names:
                raise OperandError(f"{self.spec.mnemonic}: unknown operand '{k}'; operands are "
                                   f"{', '.join(names) or '(none)'}")
            i = names.index(k)
            codes[i] = _to_code(self.spec, self.spec.fields[i], v)
        return Instruction.from_codes(self.spec, codes)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Instruction) and self.spec.opcode == other.spec.opcode
                and self.codes == other.codes)

    def __hash__(self) -> int:
        return hash((self.spec.opcode, self.codes))

    def __repr__(self) -> str:
        ops = ", ".join(f"{k}={v!r}" for k, v in self.operands().items())
        return f"Instruction({self.spec.mnemonic!r}{', ' if ops else ''}{ops})"


_new = object.__new__
_set_spec = Instruction.spec.__set__       # type: ignore[attr-defined]
_set_codes = Instruction.codes.__set__     # type: ignore[attr-defined]


def encode(ins: Instruction) -> int:
    """The 128-bit word of ``ins`` as a Python int (0 <= word < 2**128)."""
    word = ins.spec.opcode
    for f, c in zip(ins.spec.fields, ins.codes):
        word |= (c & f.mask) << f.lsb
    return word


def decode(word: int) -> Instruction:
    """The instruction encoded by ``word`` (0 <= word < 2**128).

    Raises:
        IllegalInstruction: unknown opcode, nonzero reserved bits, an enum code past its
            list, or a field below its minimum; the message names the word and the reason.
    """
    if not isinstance(word, int) or not 0 <= word <= _WORD_MASK:
        raise IllegalInstruction(f"not a 128-bit word: {word!r}")
    opcode = word & ((1 << OPCODE_BITS) - 1)
    spec = BY_OPCODE.get(opcode)
    if spec is None:
        raise IllegalInstruction(f"word {word:#034x}: unknown opcode {opcode:#04x}")
    used = spec.used_bits
    reserved = word >> used
    if reserved:
        raise IllegalInstruction(
            f"word {word:#034x} ({spec.mnemonic}): reserved bits [{WORD_BITS - 1}:{used}] are "
            f"not zero ({reserved:#x})")
    codes = []
    for f in spec.fields:
        raw = (word >> f.lsb) & f.mask
        if f.kind == "s" and raw >> (f.width - 1):
            raw -= 1 << f.width
        elif f.kind == "enum" and raw >= len(f.enum):
            raise IllegalInstruction(
                f"word {word:#034x} ({spec.mnemonic}): field {f.name} has bad enum value {raw} "
                f"(allowed {f.range_text()})")
        elif f.kind == "u" and raw < f.min_value:
            raise IllegalInstruction(
                f"word {word:#034x} ({spec.mnemonic}): field {f.name} = {raw} is below its "
                f"minimum {f.min_value}")
        codes.append(raw)
    return Instruction.from_codes(spec, codes)


def encode_bytes(ins: Instruction) -> bytes:
    """The 16 little-endian bytes of ``ins``."""
    return encode(ins).to_bytes(WORD_BYTES, "little")


def decode_bytes(data: bytes) -> Instruction:
    """Decode 16 little-endian bytes; IllegalInstruction when not a legal word."""
    if len(data) != WORD_BYTES:
        raise IllegalInstruction(f"an instruction is {WORD_BYTES} bytes, got {len(data)}")
    return decode(int.from_bytes(data, "little"))


__all__ = ["Instruction", "encode", "decode", "encode_bytes", "decode_bytes", "f32_bits",
           "bits_f32", "WORD_BYTES"]
