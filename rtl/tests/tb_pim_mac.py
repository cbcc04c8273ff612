"""Co-simulation of rtl/pim_mac.v against the simulator's PIM arithmetic and pipeline depth.

Arithmetic: every COMP step goes through ``archsim.functional.pim_comp_step`` (the function
functional mode executes COMP with: lane products, pairwise adder tree, accumulate) on int64
values of one bank, wrapped to ``pim.acc_bits`` (see ``archsim.cosim.pim_mac_step``).
Timing: a step presented in cycle t is in ``acc`` (with ``out_valid``) in cycle t + FILL, FILL
being the COMP pipeline depth of the PIM timing table (``archsim.memory.spec.latency_names``).
Every cycle, ``out_valid`` and ``acc`` are compared with that expectation.
"""
from __future__ import annotations

import cocotb

from archsim import cosim
from tb_common import (check_parameters, job, rng_for, run_comp_stream, start_clock_and_reset,
                       to_signed)

PARAMS = ["LANES", "DATA_W", "ACC_W", "FILL_CYCLES"]


async def _run(dut, name, rng, n_cycles, p_valid, p_first, operand, spacing=1):
    """Offer COMP steps for ``n_cycles`` cycles (at most one every ``spacing`` cycles);
    compare (out_valid, acc) every cycle. Returns the number of steps."""
    p = job().parameters
    lanes, acc_w = p["LANES"], p["ACC_W"]

    def draw(r):
        return [operand(r) for _ in range(lanes)], [operand(r) for _ in range(lanes)]

    return await run_comp_stream(
        dut, name, rng, n_cycles, p_valid=p_valid, p_first=p_first, draw=draw,
        bits=p["DATA_W"], init=(0,), fields="(out_valid, acc)", spacing=spacing,
        model_step=lambda s, b, g, f: (cosim.pim_mac_step(s[0], b, g, f, acc_w),),
        observe=lambda d: (int(d.out_valid.value), to_signed(int(d.acc.value), acc_w)))


def _full_range(rng):
    dw = job().parameters["DATA_W"]
    return rng.randint(-(1 << (dw - 1)), (1 << (dw - 1)) - 1)


def _extreme(rng):
    dw = job().parameters["DATA_W"]
    lo, hi = -(1 << (dw - 1)), (1 << (dw - 1)) - 1
    return rng.choice((lo, hi, lo, hi, 0, -1, 1))


async def _setup(dut):
    await start_clock_and_reset(dut, {"in_valid": 0, "in_first": 0, "bank_data": 0,
                                      "gb_data": 0})
    check_parameters(dut, PARAMS)


@cocotb.test()
async def test_random_comp_steps_match_pim_comp_step_every_cycle(dut):
    """Random operands, random gaps, random dot-product starts: bit-exact sums, FILL-cycle
    pipeline."""
    name = "test_random_comp_steps_match_pim_comp_step_every_cycle"
    await _setup(dut)
    await _run(dut, name, rng_for(name), job().count(1500), 0.7, 0.1, _full_range)


@cocotb.test()
async def test_extreme_operands_wrap_the_accumulator_like_the_model(dut):
    """Min/max operands and long dot products: the tree is exact and the accumulator wraps
    modulo 2^ACC_W exactly as the model's wrapped sum."""
    name = "test_extreme_operands_wrap_the_accumulator_like_the_model"
    await _setup(dut)
    await _run(dut, name, rng_for(name), job().count(1500), 0.9, 0.01, _extreme)


@cocotb.test()
async def test_gemv_stream_at_comp_step_spacing(dut):
    """COMP steps back to back at the table's COMP spacing (CSTEP = max(BL, tCCD_S)), as
    PIM_GEMV issues them, with a new dot product every few steps."""
    name = "test_gemv_stream_at_comp_step_spacing"
    await _setup(dut)
    from archsim.memory import spec

    cstep = int(spec.latency_names(job().cfg)["CSTEP"])
    await _run(dut, name, rng_for(name), job().count(1500), 1.0, 0.15, _full_range,
               spacing=cstep)
