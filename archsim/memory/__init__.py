"""Cycle-level HBM memory with per-bank PIM and dual row buffers.

Modules: :mod:`~archsim.memory.spec` (the constraint table), :mod:`~archsim.memory.addrmap`
(address mapping), :mod:`~archsim.memory.bank` (per-bank timing model),
:mod:`~archsim.memory.controller` (the reference event-driven channel controller, pure Python),
:mod:`~archsim.memory.kernel` (the one compiled controller: the same policy in numba, for trace
replay and the whole-system simulation),
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
    "run_requests": "archsim.memory.runner", "KernelMemory": "archsim.memory.kernel",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    """Lazy exports: importing one module (e.g. the leaf ``addrmap``) loads nothing else."""
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'archsim.memory' has no attribute '{name}'")
