"""The ONE compiled HBM + PIM controller (numba), beside the readable reference.

:mod:`archsim.memory.controller` is the reference: pure Python, one object per burst, easy to
read. This package is the same policy on flat arrays, compiled by numba, and it serves every
fast path: trace replay (``archsim mem run``, the self-test) and the whole-system simulation
(the NPU executor's memory port and its compiled event loop, :mod:`archsim.npu.cloop`). Tests keep
the two identical call for call and command for command.

Modules, in dependency order:

* :mod:`~.jit` — the numba decorators; the cache directory keyed by a hash of every kernel
  source file, so an edit anywhere (the command table included) never loads stale code;
* :mod:`~.layout` — the state (:class:`~.layout.MemState`: named int64 arrays) and the column
  constants of each array;
* :mod:`~.timing` — timing nodes: the constraint table interpreted on the arrays;
* :mod:`~.scheduler` — the decision of one channel (admission, refresh, PIM, FR-FCFS);
* :mod:`~.issue` — committing a command (timing records, row state, queues, completions);
* :mod:`~.drive` — the kernel's API: advance, next event, queue requests, batch replay;
* :mod:`~.port` — :class:`KernelMemory`, the :class:`archsim.memport.MemoryPort` around it.

All cycles are memory-clock cycles (tCK). The package does no I/O and prints nothing.
"""
from archsim.memory.kernel.port import KernelMemory, KernelUnsupported

__all__ = ["KernelMemory", "KernelUnsupported"]
