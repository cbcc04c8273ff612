"""Co-simulation of rtl/pim_mac_fp.v against the simulator's floating-point PIM arithmetic.

Arithmetic: every COMP step goes through ``archsim.cosim.pim_fp_mac_step``, i.e. the
simulator's own ``archsim.functional.pim_comp_step`` on float32 values of one bank (operands
read with ``from_storage``, fp32 products, pairwise adder tree, fp32 accumulator, the special
values as that function documents them) and ``to_storage`` for READRES's rounding back to the
operand type. Timing: a step presented in cycle t is in ``acc`` (with ``out_valid``) in cycle
t + FILL, FILL being the COMP pipeline depth of the PIM timing table. Every cycle,
``out_valid``, the binary32 bits of ``acc`` and the storage bits of ``res`` are compared.

Stimulus (seeded): operands are drawn by class -- normals of a narrow or of the full exponent
range, subnormals, signed zeros, infinities, NaNs of random sign and payload, the largest
finite value, the smallest normal, values near overflow and underflow -- with the weights of
each test; some tests build cancelling lanes on purpose (exact zeros, signed zeros, massive
cancellation) or stream steps at the COMP spacing of PIM_GEMV. At scale 1 the tests apply
more than 10,000 COMP steps per variant.
"""
from __future__ import annotations

import cocotb

from archsim import cosim
from tb_common import check_parameters, job, rng_for, run_comp_stream, start_clock_and_reset

PARAMS = ["LANES", "EXP_W", "MAN_W", "FILL_CYCLES"]


class Operands:
    """Random storage-type bit patterns of the variant's format, by class."""

    def __init__(self, rng):
        p = job().parameters
        self.rng = rng
        self.ew, self.mw = p["EXP_W"], p["MAN_W"]
        self.emax = (1 << self.ew) - 1
        self.bias = (1 << (self.ew - 1)) - 1

    def make(self, cls: str) -> int:
        """One operand of class ``cls``."""
        r, mw, emax = self.rng, self.mw, self.emax
        m = r.getrandbits(mw)
        if cls == "mid":              # |x| near 1: sums round and cancel in interesting ways
            e = self.bias + r.randint(-6, 6)
        elif cls == "normal":         # any normal exponent
            e = r.randint(1, emax - 1)
        elif cls == "subnormal":
            e, m = 0, r.randint(1, (1 << mw) - 1)
        elif cls == "zero":
            e, m = 0, 0
        elif cls == "inf":
            e, m = emax, 0
        elif cls == "nan":            # quiet or signalling, any payload
            e, m = emax, r.randint(1, (1 << mw) - 1)
        elif cls == "max":
            e, m = emax - 1, (1 << mw) - 1
        elif cls == "min_normal":
            e, m = 1, r.choice((0, m))
        elif cls == "huge":
            e = r.randint(max(1, emax - 8), emax - 1)
        elif cls == "tiny":
            e = r.randint(1, min(8, emax - 1))
        elif cls == "bits":           # a uniformly random bit pattern
            return r.getrandbits(1 + self.ew + mw)
        else:
            raise ValueError(cls)
        return (r.getrandbits(1) << (self.ew + mw)) | (e << mw) | m

    def burst(self, n: int, weights: dict[str, float]) -> list[int]:
        """``n`` operands, each of a class drawn with ``weights``."""
        classes = self.rng.choices(list(weights), list(weights.values()), k=n)
        return [self.make(c) for c in classes]


async def _run(dut, name, rng, n_cycles, p_valid, p_first, draw, spacing=1):
    """Offer COMP steps for ``n_cycles`` cycles (at most one every ``spacing`` cycles);
    ``draw(ops, lanes)`` returns (bank, gbuf) operand lists. Compare (out_valid, acc, res)
    every cycle. Returns the number of steps."""
    p = job().parameters
    lanes, dtype = p["LANES"], job().dtype
    ops = Operands(rng)

    def show(v):
        return f"({v[0]}, {v[1]:#010x}, {v[2]:#06x}) [{dtype}]"

    return await run_comp_stream(
        dut, name, rng, n_cycles, p_valid=p_valid, p_first=p_first,
        draw=lambda r: draw(ops, lanes), bits=1 + p["EXP_W"] + p["MAN_W"], init=(0, 0),
        fields="(out_valid, acc, res)", show=show, spacing=spacing,
        model_step=lambda s, b, g, f: cosim.pim_fp_mac_step(s[0], b, g, f, dtype),
        observe=lambda d: (int(d.out_valid.value), int(d.acc.value), int(d.res.value)))


def _classes(weights):
    def draw(ops, lanes):
        return ops.burst(lanes, weights), ops.burst(lanes, weights)
    return draw


async def _setup(dut):
    await start_clock_and_reset(dut, {"in_valid": 0, "in_first": 0, "bank_data": 0,
                                      "gb_data": 0})
    check_parameters(dut, PARAMS)


@cocotb.test()
async def test_normal_operands_round_like_pim_comp_step_every_cycle(dut):
    """Operands near 1 of random sign: every product, tree level and accumulation rounds to
    nearest even in fp32 exactly as the model does; long dot products."""
    name = "test_normal_operands_round_like_pim_comp_step_every_cycle"
    await _setup(dut)
    await _run(dut, name, rng_for(name), job().count(3000), 0.8, 0.05,
               _classes({"mid": 1.0}))


@cocotb.test()
async def test_random_bit_patterns_of_the_storage_type(dut):
    """Uniformly random fp16/bf16 bit patterns: every exponent, subnormals, infinities and
    NaNs at their natural frequency (1/2^EXP_W each)."""
    name = "test_random_bit_patterns_of_the_storage_type"
    await _setup(dut)
    await _run(dut, name, rng_for(name), job().count(3000), 0.9, 0.3, _classes({"bits": 1.0}))


@cocotb.test()
async def test_subnormals_infinities_and_nans(dut):
    """Special values mixed into normal operands: subnormal operands and products, signed
    zeros, the largest finite value, infinities (inf - inf = NaN, 0 x inf = NaN), NaNs of any
    sign and payload (the result is the canonical NaN)."""
    name = "test_subnormals_infinities_and_nans"
    await _setup(dut)
    await _run(dut, name, rng_for(name), job().count(3000), 0.9, 0.25,
               _classes({"mid": 0.45, "subnormal": 0.25, "zero": 0.08, "min_normal": 0.06,
                         "max": 0.06, "inf": 0.015, "nan": 0.015, "tiny": 0.04,
                         "huge": 0.04}))


@cocotb.test()
async def test_cancelling_lanes_give_exact_and_signed_zeros(dut):
    """Lanes that cancel in pairs or nearly (x*y + (-x)*y, x*y - (x+ulp)*y): exact zeros
    (+0.0 from x - x, -0.0 only from -0 + -0), massive cancellation and renormalisation."""
    name = "test_cancelling_lanes_give_exact_and_signed_zeros"
    await _setup(dut)
    sign = 1 << (job().parameters["EXP_W"] + job().parameters["MAN_W"])

    def draw(ops, lanes):
        r = ops.rng
        bank, gbuf = [], []
        for _ in range((lanes + 1) // 2):
            x = ops.make(r.choice(("mid", "mid", "subnormal", "zero", "normal")))
            y = ops.make(r.choice(("mid", "mid", "tiny", "zero")))
            kind = r.random()
            if kind < 0.5:
                x2 = x ^ sign                       # exact cancellation
            elif kind < 0.8:
                x2 = (x ^ sign) + r.choice((1, -1)) if x & (sign - 1) else x ^ sign
            else:
                x2 = x | sign if r.random() < 0.5 else x   # same or negative zero/value
            bank += [x, x2]
            gbuf += [y, y]
        return bank[:lanes], gbuf[:lanes]

    await _run(dut, name, rng_for(name), job().count(2000), 0.9, 0.2, draw)


@cocotb.test()
async def test_overflow_and_underflow_ranges(dut):
    """Huge and tiny operands: bf16 products overflow fp32 to infinity or round into fp32's
    subnormal range (or to zero); fp16 extremes stay exact; the accumulator may overflow."""
    name = "test_overflow_and_underflow_ranges"
    await _setup(dut)
    await _run(dut, name, rng_for(name), job().count(2000), 0.9, 0.1,
               _classes({"huge": 0.35, "tiny": 0.3, "subnormal": 0.2, "max": 0.1,
                         "min_normal": 0.05}))


@cocotb.test()
async def test_gemv_stream_at_comp_step_spacing(dut):
    """COMP steps back to back at the table's COMP spacing (CSTEP = max(BL, tCCD_S)), as
    PIM_GEMV issues them, with a new dot product every few steps."""
    name = "test_gemv_stream_at_comp_step_spacing"
    await _setup(dut)
    from archsim.memory import spec

    cstep = int(spec.latency_names(job().cfg)["CSTEP"])
    await _run(dut, name, rng_for(name), job().count(1500), 1.0, 0.15,
               _classes({"mid": 0.9, "subnormal": 0.1}), spacing=cstep)
