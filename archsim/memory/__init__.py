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
from archsim.memory.addrmap import AddressMapping
from archsim.memory.bank import BankTimingModel
from archsim.memory.cmdlog import CommandRecord, read_log_csv, write_log_csv
from archsim.memory.spec import CONSTRAINTS, Constraint, gemv_cycles
from archsim.memory.system import MemorySystem

__all__ = ["AddressMapping", "BankTimingModel", "CommandRecord", "read_log_csv",
           "write_log_csv", "CONSTRAINTS", "Constraint", "gemv_cycles", "MemorySystem"]
