"""A loaded program as typed arrays: what the compiled event loop (:mod:`archsim.npu.cloop`) reads.

The compiled loop interprets the same rules as :class:`archsim.npu.executor.Executor`; it never
evaluates a timing formula itself. Every per-instruction quantity the executor would compute
while running is computed here once, with the executor's own functions, and stored as an
integer column:

* ``OP[N]`` the instruction class (``OP_*``) of every instruction of the program, the streams
  one after the other (global index ``g = SK[k, SK_OFF] + index``);
* ``IA[N, NIA]`` its operand columns, by class:

  - ``WAIT`` / ``SIGNAL``: semaphore, count;
  - DMA: offset of its request pattern in ``DREL``/``DSZ``, requests, address shift, 1 for a
    store (:func:`archsim.npu.timing.dma_request_pattern`: the request addresses are
    ``DREL[off + i] + shift``, sizes ``DSZ[off + i]``, bytes; one copy per distinct pattern);
  - ``SA_LOADW``: array (-1 for ``any``), preload cycles
    (:func:`archsim.npu.timing.weight_preload_cycles`);
  - ``SA_MATMUL``: array (-1 for ``any``), input feed cycles
    (:func:`~archsim.npu.timing.tile_issue_interval_cycles`), latency
    (:func:`~archsim.npu.timing.tile_latency_cycles`), MACs ``m·n·k``;
  - vector ops: duration (:func:`~archsim.npu.timing.vector_op_cycles` with the machine's
    latencies, passes and lanes), elements ``rows·cols``;
  - link ops: NPU cycles the link stream is occupied (:meth:`Executor.link_cycles`);
  - PIM: 1 when the memory accepts it, then what ``KernelMemory.submit_pim`` queues for it
    (:meth:`archsim.memory.kernel.KernelMemory.pim_fields`: command, channel, bank-group mask,
    row, n, sub-commands, sequence estimate);
* ``SK[NS, 4]`` per stream: engine kind (``K_*``), engine index (-1 when the name has none),
  offset of its first instruction, length.

Cycles are NPU cycles. The module does no I/O.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from archsim.errors import SimulationError
from archsim.npu.state import PIM_KINDS
from archsim.npu.timing import (dma_request_pattern, tile_issue_interval_cycles,
                                tile_latency_cycles, vector_op_cycles, weight_preload_cycles)
from isa.spec import ARRAY_ANY, BY_MNEMONIC, DTYPE_BYTES, Engine

OP_NOP, OP_SIGNAL, OP_WAIT, OP_END, OP_DMA, OP_LOADW, OP_MATMUL, OP_VU, OP_LINK, OP_PIM = range(10)
"""Instruction classes of ``OP``."""
K_DMA, K_SA, K_VU, K_LINK, K_PIM = range(5)
"""Stream kinds of ``SK[:, SK_KIND]``."""
SK_KIND, SK_IDX, SK_OFF, SK_N = range(4)
NIA = 8
# operand columns of IA, by class
I_SEM, I_CNT = 0, 1
I_DOFF, I_DN, I_DSHIFT, I_DWR = 0, 1, 2, 3
I_ARR, I_PRE = 0, 1
I_FEED, I_LAT, I_MACS = 1, 2, 3
I_DUR, I_ELEMS = 0, 1
I_LCYC = 0
I_POK, I_PCMD, I_PCH, I_PMASK, I_PROW, I_PN, I_PNSUB, I_PEST = range(8)

_KINDS = {Engine.DMA: K_DMA, Engine.SA: K_SA, Engine.VU: K_VU, Engine.LINK: K_LINK,
          Engine.PIM: K_PIM}
_SYNC = {"NOP": OP_NOP, "SIGNAL": OP_SIGNAL, "WAIT": OP_WAIT, "END": OP_END}

ProgramTables = namedtuple("ProgramTables", ["OP", "IA", "SK", "DREL", "DSZ"])
"""The arrays of the module docstring (int64)."""


class TableInfo:
    """What the compiled loop's state is sized by, found while building the tables.

    Attributes:
        n_instructions, n_streams: the program's.
        n_dma: DMA instructions (one transfer record each).
        n_pim: PIM instructions (one request id each).
        n_timed_signals: SIGNALs of SA and VU streams (each may wait on the timer heap).
        signals_per_stream: SIGNALs of each stream (a DMA stream keeps them pending).
        max_request_bytes: the largest DMA request (bytes).
        pim_errors: global index -> the PIM instruction the memory rejects.
    """

    def __init__(self) -> None:
        self.n_instructions = 0
        self.n_streams = 0
        self.n_dma = 0
        self.n_pim = 0
        self.n_timed_signals = 0
        self.signals_per_stream: list[int] = []
        self.max_request_bytes = 0
        self.pim_errors: set[int] = set()


def build_tables(ex) -> tuple[ProgramTables, TableInfo]:
    """The tables of the program of executor ``ex`` (:class:`archsim.npu.executor.Executor`,
    its machine, options and memory port; the port must offer ``pim_fields``).

    Returns ``(tables, info)``. Raises nothing for a PIM instruction the memory rejects: it is
    marked (``IA[g, I_POK] = 0``) and fails when the loop reaches it, as in the executor.
    """
    lp = ex.loaded
    port = ex.mem
    info = TableInfo()
    streams = lp.streams
    total = sum(len(ls.ops) for ls in streams)
    info.n_instructions = total
    info.n_streams = len(streams)
    OP = np.zeros(total, np.int64)
    IA = np.zeros((total, NIA), np.int64)
    SK = np.zeros((len(streams), 4), np.int64)
    pats: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}   # id(rel) -> (offset, rel, sizes)
    rels: list[np.ndarray] = []
    szs: list[np.ndarray] = []
    n_pat = 0
    H, W = ex.H, ex.W
    lanes, vlat, vpass = ex.lanes, ex.vlat, ex.vpass
    q, ib = ex.request_bytes, ex.interleave_bytes
    pim_memo: dict[tuple, tuple] = {}
    g = 0
    for k, ls in enumerate(streams):
        SK[k] = (_KINDS[ls.kind], -1 if ls.index is None else ls.index, g, len(ls.ops))
        timed = ls.kind in (Engine.SA, Engine.VU)
        n_sig = 0
        memo: dict[int, tuple[int, tuple]] = {}      # id(operand dict) -> (class, row)
        for op in ls.ops:
            o = op.ops
            m = op.mnemonic
            hit = memo.get(id(o))
            if hit is None:
                cls = _SYNC.get(m)
                row: tuple = ()
                if cls is not None:
                    if cls in (OP_SIGNAL, OP_WAIT):
                        row = (o["sem"], o["count"])
                elif m == "DMA_LOAD" or m == "DMA_STORE":
                    cls = OP_DMA
                    es = DTYPE_BYTES[o["dtype"]]
                    rel, sizes, shift = dma_request_pattern(o["hbm"], o["rows"], o["cols"] * es,
                                                            o["stride"], q, ib)
                    pat = pats.get(id(rel))
                    if pat is None:
                        pat = pats[id(rel)] = (n_pat, rel, sizes)
                        rels.append(rel)
                        szs.append(sizes)
                        n_pat += int(rel.shape[0])
                        if rel.shape[0]:
                            info.max_request_bytes = max(info.max_request_bytes,
                                                         int(sizes.max()))
                    row = (pat[0], int(rel.shape[0]), shift, 1 if m == "DMA_STORE" else 0)
                elif m == "SA_LOADW":
                    cls = OP_LOADW
                    a = o["array"]
                    row = (-1 if a == ARRAY_ANY else a, weight_preload_cycles(H))
                elif m == "SA_MATMUL":
                    cls = OP_MATMUL
                    a = o["array"]
                    mm = o["m"]
                    row = (-1 if a == ARRAY_ANY else a, tile_issue_interval_cycles(mm),
                           tile_latency_cycles(H, W, mm), mm * o["n"] * o["k"])
                elif ls.kind is Engine.VU:
                    cls = OP_VU
                    key = BY_MNEMONIC[m].latency_key
                    rows, cols = o["rows"], o["cols"]
                    row = (vector_op_cycles(vlat[key], rows, cols, lanes, vpass.get(key, 1)),
                           rows * cols)
                elif ls.kind is Engine.LINK:
                    cls = OP_LINK
                    row = (ex.link_cycles(op),)
                elif m in PIM_KINDS:
                    cls = OP_PIM
                    key = (m, o["channel"], o.get("row", 0),
                           o.get("n_comps", o.get("n_gemvs", 0)), o.get("bg_mask", 0))
                    row = pim_memo.get(key)
                    if row is None:
                        try:
                            row = (1,) + tuple(port.pim_fields(ex._pim_request(ls, op, 0, 0)))
                        except SimulationError:
                            row = (0,)
                        pim_memo[key] = row
                else:                               # pragma: no cover - the loader rejects it
                    raise SimulationError(f"stream {ls.name} instruction {op.index}: {m} "
                                          f"cannot run on a {ls.kind.value} stream")
                hit = memo[id(o)] = (cls, row)
            cls, row = hit
            OP[g] = cls
            if row:
                IA[g, :len(row)] = row
            if cls == OP_SIGNAL:
                n_sig += 1
                if timed:
                    info.n_timed_signals += 1
            elif cls == OP_DMA:
                info.n_dma += 1
            elif cls == OP_PIM:
                info.n_pim += 1
                if row[0] == 0:
                    info.pim_errors.add(g)
            g += 1
        info.signals_per_stream.append(n_sig)
    DREL = np.concatenate(rels) if rels else np.zeros(1, np.int64)
    DSZ = np.concatenate(szs) if szs else np.zeros(1, np.int64)
    return ProgramTables(OP, IA, SK, DREL, DSZ), info


__all__ = ["ProgramTables", "TableInfo", "build_tables", "NIA"] + [
    n for n in dir() if n[:3] in ("OP_", "SK_") or n[:2] in ("K_", "I_")]
