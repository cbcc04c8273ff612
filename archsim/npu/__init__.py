"""The NPU: timing rules, program loader, statistics, a simple memory, the GEMM kernel's bound.

* :mod:`archsim.npu.timing` — closed-form timing rules (systolic tile, preload, vector op,
  DMA request splitting), one pure function each.
* :mod:`archsim.npu.loader` — static checks of a program against a machine.
* :mod:`archsim.npu.stats` — statistics of a timing run.
* :mod:`archsim.npu.simple_memory` — fixed-latency + bandwidth ``MemoryPort`` (tests, ideal).
* :mod:`archsim.npu.executor` — the event-driven timing executor of ISA programs
  (:class:`~archsim.npu.executor.Executor`, :func:`~archsim.npu.executor.run_timing`), its
  run-time records (:mod:`archsim.npu.state`), its observer hook for per-instruction times
  (:mod:`archsim.npu.observe`), and the same loop compiled beside the compiled memory
  (:mod:`archsim.npu.cloop` over the program's tables, :mod:`archsim.npu.tables`; its Python
  edges :mod:`archsim.npu.compiled`).
* :mod:`archsim.npu.gemm` — ring depth and compute bound of the GEMM test kernel (its
  instructions come from :mod:`mapping.gemm`).

Values are computed by :mod:`archsim.functional`.
"""
from archsim.npu.loader import LoadedProgram, load_program
from archsim.npu.simple_memory import SimpleMemory
from archsim.npu.stats import NpuStats
from archsim.npu.timing import tile_latency_cycles

__all__ = ["LoadedProgram", "load_program", "SimpleMemory", "NpuStats", "tile_latency_cycles"]
