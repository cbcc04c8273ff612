"""Cycle-level HBM2 memory with per-bank PIM and dual row buffers (issue 3).

Modules: :mod:`~archsim.memory.spec` (the constraint table), :mod:`~archsim.memory.addrmap`
(address mapping), :mod:`~archsim.memory.bank` (per-bank timing model),
:mod:`~archsim.memory.controller` (exact event-driven channel controller),
:mod:`~archsim.memory.fast` (numba fast path for memory-only traffic),
:mod:`~archsim.memory.system` (the :class:`archsim.memport.MemoryPort`),
:mod:`~archsim.memory.energy`, :mod:`~archsim.memory.cmdlog`, :mod:`~archsim.memory.checker`
(independent timing checker), :mod:`~archsim.memory.trace` (trace files) and
:mod:`~archsim.memory.selftest` (standard patterns). The core does no I/O.
"""
from importlib import import_module

_EXPORTS = {
    "AddressMapping": "archsim.memory.addrmap", "BankTimingModel": "archsim.memory.bank",
    "CommandRecord": "archsim.memory.cmdlog", "read_log_csv": "archsim.memory.cmdlog",
    "write_log_csv": "archsim.memory.cmdlog", "CONSTRAINTS": "archsim.memory.spec",
    "Constraint": "archsim.memory.spec", "gemv_cycles": "archsim.memory.spec",
    "MemorySystem": "archsim.memory.system", "check_log": "archsim.memory.checker",
    "run_requests": "archsim.memory.runner",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """Lazy exports: importing one module (e.g. the leaf ``addrmap``) loads nothing else."""
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'archsim.memory' has no attribute '{name}'")
