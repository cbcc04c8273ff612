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
from tb_common import (check_parameters, end_cycle, job, next_cycle_drive, pack, rng_for,
                       settle, start_clock_and_reset, to_signed)

PARAMS = ["LANES", "DATA_W", "ACC_W", "FILL_CYCLES"]


async def _run(dut, name, rng, n_cycles, p_valid, p_first, operand, spacing=1):
    """Offer COMP steps for ``n_cycles`` cycles (at most one every ``spacing`` cycles);
    compare every cycle. Returns the number of steps."""
    p = job().parameters
    lanes, dw, acc_w = p["LANES"], p["DATA_W"], p["ACC_W"]
    fill = cosim.pim_fill_cycles(job().cfg)            # the timing table's pipeline depth
    in_flight: dict[int, tuple[list, list, bool]] = {}  # cycle the result appears -> step
    acc = 0
    valid_out = 0
    steps = 0
    last_step = -spacing
    recent: list[str] = []
    for c in range(n_cycles):
        valid = int(c - last_step >= spacing and rng.random() < p_valid)
        first = int(rng.random() < p_first)
        bank = [operand(rng) for _ in range(lanes)]
        gbuf = [operand(rng) for _ in range(lanes)]
        # the model's accumulator as seen in this cycle
        if c in in_flight:
            b, g, f = in_flight.pop(c)
            acc = cosim.pim_mac_step(acc, b, g, f, acc_w)
            valid_out = 1
        else:
            valid_out = 0
        await next_cycle_drive()
        dut.in_valid.value = valid
        dut.in_first.value = first
        dut.bank_data.value = pack(bank, dw)
        dut.gb_data.value = pack(gbuf, dw)
        await settle()
        got = (int(dut.out_valid.value), to_signed(int(dut.acc.value), acc_w))
        want = (valid_out, acc)
        assert got == want, (
            f"{name}: cycle {c}: (out_valid, acc) = {got} != model {want} (FILL {fill}); "
            f"steps issued in the last cycles: {recent[-fill - 1:]}")
        if valid:
            in_flight[c + fill] = (bank, gbuf, bool(first))
            steps += 1
            last_step = c
            recent.append(f"{c}:first={first} bank={bank} gbuf={gbuf}")
        await end_cycle()
    job().record(name, stimuli=steps, cycles=n_cycles)
    return steps


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
