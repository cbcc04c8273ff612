"""Whole-system (cycle-level) simulation: compiler + NPU executor + HBM/PIM memory together.

* :func:`simulate_iteration` — one iteration of a batch on an NPU(+PIM) machine →
  :class:`archsim.results.IterationResult` (:mod:`archsim.system.core`);
* :func:`simulate` — the same, returning the artefacts too (compiled program, executor and memory
  statistics, command log, timing-checker violations);
* :func:`kernels_cached` — whether the one-time JIT of the compiled loop is already done.

The NPU executor they run is :class:`archsim.npu.executor.Executor` (per-instruction times
through its observer, :class:`archsim.npu.observe.InstructionTimes`).

The core does no I/O and prints nothing.
"""
from archsim.system.core import (DEFAULT_WINDOW, SystemRun, WindowRun, lm_head_cycles,
                                 pipeline_handoff_cycles, run_window, simulate,
                                 simulate_iteration)
from archsim.system.program_dir import load_program_dir, simulate_program, write_program_dir


def kernels_cached() -> bool:
    """:func:`archsim.npu.compiled.kernels_cached`, imported when called (numba is heavy)."""
    from archsim.npu.compiled import kernels_cached as cached

    return cached()


__all__ = ["simulate_iteration", "simulate", "SystemRun", "WindowRun", "run_window",
           "lm_head_cycles", "pipeline_handoff_cycles", "DEFAULT_WINDOW",
           "load_program_dir", "simulate_program", "write_program_dir", "kernels_cached"]
