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
