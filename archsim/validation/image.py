"""The HBM image of a compiled program: write weights, inputs and the KV cache where the compiler
placed them, read results back.

Everything goes through the compiler's own address information (:class:`mapping.compiler.
CompiledProgram`): ``tensors`` (weights in their tiled layout via ``TensorPlacement.to_image``),
``hidden_row_addresses`` (each request's row of ``hidden.{l}``), ``kv_addresses`` (every K/V
element of a request, in PIM banks or the streaming layout) and ``rope_positions``. Nothing here
knows a layout of its own, so a compiler that places a row somewhere its program does not read
fails validation.
"""
from __future__ import annotations


import numpy as np

from archsim.errors import SimulationError
from archsim.functional import (FunctionalMachine, FunctionalMemory, bytes_to_values,
                                values_to_bytes)
from isa.spec import DTYPE_BYTES


def write_at(mem: FunctionalMemory, addrs: np.ndarray, values: np.ndarray, dtype: str) -> None:
    """Store ``values`` (rounded to ``dtype``) element by element at byte ``addrs`` (same size).

    Raises:
        SimulationError: an element outside every data allocation of the program (names it).
    """
    es = DTYPE_BYTES[dtype]
    a = np.asarray(addrs, dtype=np.int64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if a.size != v.size:
        raise SimulationError(f"write_at: {a.size} addresses for {v.size} values")
    if not a.size:
        return
    raw = values_to_bytes(v, dtype).reshape(-1, es)
    done = np.zeros(a.size, dtype=bool)
    lanes = np.arange(es, dtype=np.int64)[None, :]
    for alloc in mem.allocs:
        sel = (a >= alloc.addr) & (a + es <= alloc.end)
        if not sel.any():
            continue
        off = (a[sel] - alloc.addr)[:, None] + lanes
        mem.buffers[alloc.name][off] = raw[sel]
        done |= sel
    if not done.all():
        bad = int(a[np.argmin(done)])
        raise SimulationError(f"address {bad:#x} is outside every data allocation of the program")


def read_at(mem: FunctionalMemory, addrs: np.ndarray, dtype: str) -> np.ndarray:
    """Values (float32) of ``dtype`` elements at byte ``addrs``; same shape as ``addrs``.

    Raises:
        SimulationError: an element outside every data allocation.
    """
    es = DTYPE_BYTES[dtype]
    shape = np.asarray(addrs).shape
    a = np.asarray(addrs, dtype=np.int64).reshape(-1)
    out = np.zeros((a.size, es), dtype=np.uint8)
    done = np.zeros(a.size, dtype=bool)
    lanes = np.arange(es, dtype=np.int64)[None, :]
    for alloc in mem.allocs:
        sel = (a >= alloc.addr) & (a + es <= alloc.end)
        if not sel.any():
            continue
        out[sel] = mem.buffers[alloc.name][(a[sel] - alloc.addr)[:, None] + lanes]
        done |= sel
    if a.size and not done.all():
        bad = int(a[np.argmin(done)])
        raise SimulationError(f"address {bad:#x} is outside every data allocation of the program")
    return bytes_to_values(out.reshape(-1), dtype, shape)


def row_addresses(row_addr: np.ndarray, cols: int, dtype: str) -> np.ndarray:
    """Element addresses ``[n, cols]`` of rows starting at byte ``row_addr [n]``."""
    return (np.asarray(row_addr, dtype=np.int64)[:, None]
            + np.arange(cols, dtype=np.int64)[None, :] * DTYPE_BYTES[dtype])


def machine_for(program, cfg) -> FunctionalMachine:
    """A :class:`FunctionalMachine` for ``program`` (statically checked by the loader)."""
    from archsim.npu.loader import load_program

    return FunctionalMachine(load_program(program, cfg), cfg)


__all__ = ["write_at", "read_at", "row_addresses", "machine_for"]
