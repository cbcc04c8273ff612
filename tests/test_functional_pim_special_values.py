"""The PIM COMP arithmetic of the functional model (archsim.functional.pim_comp_step) is IEEE
754 binary32 with round to nearest even, gradual underflow and a canonical NaN, as its
docstring says and rtl/pim_mac_fp.v implements: checked against an exact rational oracle
(Python fractions, one rounding per operation), so a host FPU that flushed subnormals or a
numpy that reordered the tree would fail here, not only in the RTL co-simulation."""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from archsim import functional

QNAN = functional.PIM_QNAN_BITS


def _decode(b: int):
    s, e, m = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
    if e == 0xFF:
        return ("nan" if m else "inf"), s, None
    return "num", s, Fraction(m if e == 0 else m | 1 << 23) * Fraction(2) ** ((e or 1) - 150)


def _encode(s: int, q: Fraction) -> int:
    """|q| rounded to binary32 (nearest even, gradual underflow, overflow to inf), sign s."""
    if q == 0:
        return s << 31
    k = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** k > q:
        k -= 1                                   # now 2^k <= q < 2^(k+1)
    e = max(k, -126)
    scaled = q / Fraction(2) ** (e - 23)
    n = scaled.numerator // scaled.denominator
    rest = scaled - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n & 1):
        n += 1
    bits = ((e + 126) << 23) + n if k >= -126 else n   # a carry moves into the exponent
    if k >= 128 or bits >= 0x7F800000:
        bits = 0x7F800000
    return (s << 31) | bits


def _mul(a: int, b: int) -> int:
    (ka, sa, va), (kb, sb, vb) = _decode(a), _decode(b)
    if "nan" in (ka, kb) or (ka == "inf" and vb == 0) or (kb == "inf" and va == 0):
        return QNAN
    if "inf" in (ka, kb):
        return ((sa ^ sb) << 31) | 0x7F800000
    return _encode(sa ^ sb, va * vb)


def _add(a: int, b: int) -> int:
    (ka, sa, va), (kb, sb, vb) = _decode(a), _decode(b)
    if "nan" in (ka, kb) or (ka == kb == "inf" and sa != sb):
        return QNAN
    if ka == "inf":
        return a
    if kb == "inf":
        return b
    q = (-va if sa else va) + (-vb if sb else vb)
    if q == 0:
        return ((sa & sb) if va == vb == 0 else 0) << 31
    return _encode(int(q < 0), abs(q))


def _oracle_step(acc: int, row: list[int], gbuf: list[int]) -> int:
    level = [_mul(x, y) for x, y in zip(row, gbuf)]
    while len(level) > 1:
        if len(level) % 2:
            level.append(0)
        level = [_add(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return _add(acc, level[0])


def _f32(bits) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def _bits(x) -> list[int]:
    return [int(v) for v in np.asarray(x, dtype=np.float32).view(np.uint32).ravel()]


def _model_step(acc: int, row: list[int], gbuf: list[int]) -> int:
    with np.errstate(all="ignore"):
        out = functional.pim_comp_step(_f32([acc]), _f32([row]), _f32(gbuf))
    return _bits(out)[0]


def _storage_operand(rng: random.Random, dtype: str) -> int:
    """fp32 bits of a random fp16/bf16 operand of a random class (specials included)."""
    ew, mw = {"fp16": (5, 10), "bf16": (8, 7)}[dtype]
    emax, bias = (1 << ew) - 1, (1 << (ew - 1)) - 1
    cls = rng.choices(["mid", "any", "sub", "zero", "inf", "nan", "max"],
                      [40, 25, 15, 8, 4, 4, 4])[0]
    e = {"mid": bias + rng.randint(-5, 5), "any": rng.randint(1, emax - 1), "sub": 0,
         "zero": 0, "inf": emax, "nan": emax, "max": emax - 1}[cls]
    m = {"zero": 0, "inf": 0, "max": (1 << mw) - 1}.get(cls, rng.randint(1, (1 << mw) - 1))
    raw = np.array([(rng.getrandbits(1) << (ew + mw)) | (e << mw) | m], dtype=np.uint16)
    return _bits(functional.from_storage(raw.view(np.float16) if dtype == "fp16" else raw,
                                         dtype))[0]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("lanes", [16, 12])
def test_comp_steps_equal_an_exact_rational_oracle_with_special_values(dtype, lanes):
    rng = random.Random(f"{dtype}-{lanes}")
    acc = 0
    for step in range(300):
        row = [_storage_operand(rng, dtype) for _ in range(lanes)]
        gbuf = [_storage_operand(rng, dtype) for _ in range(lanes)]
        if rng.random() < 0.3:
            acc = 0
        want = _oracle_step(acc, row, gbuf)
        got = _model_step(acc, row, gbuf)
        assert got == want, (f"step {step}: acc {acc:#x} row {[hex(v) for v in row]} gbuf "
                             f"{[hex(v) for v in gbuf]}: model {got:#010x} != exact {want:#010x}")
        acc = got


@pytest.mark.parametrize("row, gbuf, want", [
    ([0x7F800000], [0xFF800000], 0xFF800000),          # inf * -inf = -inf
    ([0x7F800000, 0xFF800000], [0x3F800000] * 2, QNAN),  # inf - inf
    ([0x7F800000], [0x00000000], QNAN),                 # inf * 0
    ([0xFFC12345], [0x3F800000], QNAN),                 # a NaN's sign and payload are dropped
    ([0x3F800000, 0xBF800000], [0x3F800000] * 2, 0x00000000),   # x - x = +0
    ([0x80000000, 0x80000000], [0x3F800000] * 2, 0x00000000),   # acc +0 + (-0) = +0
    ([0x00800000], [0x3F000000], 0x00400000),           # product in the subnormal range kept
    ([0x7F000000], [0x40000000], 0x7F800000),           # overflow to +inf
])
def test_special_values_of_one_step_from_a_zero_accumulator(row, gbuf, want):
    assert _model_step(0, row, gbuf) == want


def test_negative_zero_accumulator_plus_negative_zero_stays_negative():
    assert _model_step(0x80000000, [0x80000000], [0x3F800000]) == 0x80000000


@pytest.mark.parametrize("dtype, want", [("fp16", 0x7E00), ("bf16", 0x7FC0)])
def test_readres_rounds_the_canonical_nan_to_the_storage_types_quiet_nan(dtype, want):
    raw = functional.to_storage(_f32([QNAN]), dtype)
    assert int(np.asarray(raw).view(np.uint16)[0]) == want
