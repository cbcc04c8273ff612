"""Helpers shared by the cocotb test benches (run inside the simulator).

The job (configuration, Verilog parameters, seed, mutation) comes from the run directory, which
is the simulator's working directory; see :mod:`archsim.cosim`.
"""
from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from archsim import cosim

_JOB: cosim.CosimJob | None = None


def job() -> cosim.CosimJob:
    """The run's job, loaded once; applies its mutation to the models on first load."""
    global _JOB
    if _JOB is None:
        _JOB = cosim.load_job()
        cosim.apply_mutation(_JOB)
        cocotb.log.info("cosim job: block=%s variant=%s params=%s seed=%d mutation=%s",
                        _JOB.block, _JOB.variant, _JOB.parameters, _JOB.seed, _JOB.mutation)
    return _JOB


def rng_for(test_name: str) -> random.Random:
    """The seeded random stream of one test (seed logged)."""
    seed = job().rng_seed(test_name)
    cocotb.log.info("%s: stimulus seed %d (run seed %d)", test_name, seed, job().seed)
    return random.Random(seed)


def check_parameters(dut, names: list[str]) -> None:
    """Assert that the simulated design was built with the job's Verilog parameters."""
    for name in names:
        got = int(getattr(dut, name).value)
        want = job().parameters[name]
        assert got == want, f"built with {name}={got}, the model expects {want}"


async def start_clock_and_reset(dut, idle_inputs: dict[str, int], reset_cycles: int = 2) -> None:
    """Start the clock, drive ``idle_inputs``, hold rst_n low for ``reset_cycles`` cycles.

    Returns at the rising edge that ends the last reset cycle: the caller's first cycle
    (cycle 0) begins there.
    """
    Clock(dut.clk, job().clock_period_ns, unit="ns").start()
    for name, value in idle_inputs.items():
        getattr(dut, name).value = value
    dut.rst_n.value = 0
    for _ in range(reset_cycles):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst_n.value = 1
    await RisingEdge(dut.clk)


async def reset(dut, idle_inputs: dict[str, int], reset_cycles: int = 2) -> None:
    """Reset again with the clock running (same timing as :func:`start_clock_and_reset`)."""
    await FallingEdge(dut.clk)
    for name, value in idle_inputs.items():
        getattr(dut, name).value = value
    dut.rst_n.value = 0
    for _ in range(reset_cycles):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst_n.value = 1
    await RisingEdge(dut.clk)


async def next_cycle_drive() -> None:
    """Wait to the middle of the current cycle, where inputs are driven."""
    await FallingEdge(cocotb.top.clk)


async def settle() -> None:
    """Wait until the values of the current cycle are final (read-only phase)."""
    await ReadOnly()


async def end_cycle() -> None:
    """Wait for the rising edge that ends the current cycle."""
    await RisingEdge(cocotb.top.clk)


def to_signed(value: int, bits: int) -> int:
    """Two's complement interpretation of the low ``bits`` bits of ``value``."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def pack(values, bits: int) -> int:
    """Pack signed ints into one vector, element i in bits [i*bits +: bits]."""
    out = 0
    mask = (1 << bits) - 1
    for i, v in enumerate(values):
        out |= (int(v) & mask) << (i * bits)
    return out


def unpack(vector: int, n: int, bits: int) -> list[int]:
    """Inverse of :func:`pack` (signed elements)."""
    return [to_signed(vector >> (i * bits), bits) for i in range(n)]


async def run_comp_stream(dut, name, rng, n_cycles, *, p_valid, p_first, draw, bits,
                          model_step, observe, init, fields, show=repr, spacing=1, script=None):
    """Drive a PIM MAC (``pim_mac``, ``pim_mac_fp``) with random COMP steps and compare every
    cycle with the model; returns the number of steps.

    Each cycle a step is offered with probability ``p_valid`` (at most one every ``spacing``
    cycles), starting a new dot product with probability ``p_first``; ``draw(rng)`` gives the
    (bank, gbuf) operand lists, packed ``bits`` per lane. With ``script`` (a sequence of
    ``(bank, gbuf, first)``) the steps are those, one every ``spacing`` cycles from cycle 0
    (``p_valid``, ``p_first`` and ``draw`` unused), and ``n_cycles`` is ignored: the run
    lasts until the last result is out. The model's state (``init``, a tuple)
    advances by ``model_step(state, bank, gbuf, first)`` in the cycle the step's result must
    appear, FILL cycles later (the timing table's pipeline depth); ``observe(dut)`` must then
    equal ``(out_valid, *state)``, every cycle; ``fields`` names them and ``show`` formats a
    value tuple for the message (cycle index, both values, the recent steps).
    """
    fill = cosim.pim_fill_cycles(job().cfg)
    in_flight: dict[int, tuple[list, list, bool]] = {}  # cycle the result appears -> step
    state = tuple(init)
    steps = 0
    last_step = -spacing
    recent: list[str] = []
    if script is not None:
        n_cycles = (len(script) - 1) * spacing + fill + 2
    for c in range(n_cycles):
        if script is not None:
            i, off = divmod(c, spacing)
            valid = int(off == 0 and i < len(script))
            bank, gbuf, first = script[i] if valid else (script[-1][0], script[-1][1], 0)
            first = int(first)
        else:
            valid = int(c - last_step >= spacing and rng.random() < p_valid)
            first = int(rng.random() < p_first)
            bank, gbuf = draw(rng)
        valid_out = 0
        if c in in_flight:
            state = tuple(model_step(state, *in_flight.pop(c)))
            valid_out = 1
        await next_cycle_drive()
        dut.in_valid.value = valid
        dut.in_first.value = first
        dut.bank_data.value = pack(bank, bits)
        dut.gb_data.value = pack(gbuf, bits)
        await settle()
        got, want = tuple(observe(dut)), (valid_out, *state)
        assert got == want, (
            f"{name}: cycle {c}: {fields} = {show(got)} != model {show(want)} (FILL {fill}); "
            f"steps issued in the last cycles: {recent[-fill - 1:]}")
        if valid:
            in_flight[c + fill] = (bank, gbuf, bool(first))
            steps += 1
            last_step = c
            recent.append(f"{c}:first={first} bank={bank} gbuf={gbuf}")
        await end_cycle()
    job().record(name, stimuli=steps, cycles=n_cycles)
    return steps
