"""Run-time state of the NPU executor (:class:`archsim.npu.executor.Executor`): one record per
stream, DMA transfer in flight, systolic array and vector unit, and the request-id constants.

Cycles are NPU cycles; addresses and sizes bytes. Nothing here decides a time: the executor
writes these records (the compiled loop, :mod:`archsim.npu.cloop`, keeps the same state in
arrays and writes its results back into them, :mod:`archsim.npu.compiled`).
"""
from __future__ import annotations

from collections import deque

from archsim.memport import PimOpKind
from archsim.npu.loader import LoadedOp
from archsim.npu.stats import ArrayStats, StreamStats, VectorStats

PIM_KINDS = {"PIM_HEADER": PimOpKind.HEADER, "GWRITE": PimOpKind.GWRITE,
             "G_ACT": PimOpKind.G_ACT, "COMP": PimOpKind.COMP, "READRES": PimOpKind.READRES,
             "PIM_GEMV": PimOpKind.GEMV, "PIM_PRECHARGE": PimOpKind.PRECHARGE}
"""The ISA's PIM mnemonics -> the memory port's command kinds."""
PIM_RID_BASE = 1 << 62
"""Request ids of PIM commands: ``PIM_RID_BASE + n`` for the executor's n-th command."""
REC_SHIFT = 32
"""A DMA request's id is ``transfer id << REC_SHIFT | request index``."""
INF = float("inf")


def channel_interleave_bytes(cfg) -> int:
    """Bytes of consecutive addresses one channel holds before the address mapping moves to
    the next channel: 2 ** (bits below the ``ch`` field) of ``memory.controller.address_mapping``
    (column bytes x the counts of the fields listed after ``ch``; 1 KiB for ``rorabgbachco``)."""
    org = cfg.memory.org
    counts = {"ch": org.channels, "ra": org.ranks, "bg": org.bank_groups,
              "ba": org.banks_per_group, "ro": org.rows, "co": org.columns}
    size = org.column_width_bits // 8
    for f in reversed(cfg.memory.controller.address_fields):
        if f == "ch":
            return size
        size *= counts[f]
    return size  # pragma: no cover - every mapping has a ch field


class DmaRec:
    """One DMA transfer in flight (``addr_arr`` / ``size_arr``: int64 arrays of its request
    addresses and sizes in bytes; ``addrs`` / ``sizes``: the same as lists, built on first use;
    ``sizes`` is None and ``size_const`` the size when all requests have the same size;
    ``index``: its instruction's index in the stream, ``start``: the NPU cycle it was issued,
    both set by the executor)."""

    __slots__ = ("stream", "seq", "rec_id", "_addrs", "addr_arr", "_sizes", "size_arr", "n",
                 "issued", "remaining", "is_write", "ready_at", "size_const", "index", "start")

    def __init__(self, stream, seq, rec_id, addrs, sizes, is_write, ready_at):
        self.stream = stream
        self.seq = seq
        self.rec_id = rec_id
        self.addr_arr = addrs
        self._addrs = None
        self._sizes = None
        n = int(addrs.shape[0])
        if n and int(sizes.min()) == int(sizes.max()):
            self.size_const = int(sizes[0])
            self.size_arr = None
        else:
            self.size_const = 0
            self.size_arr = sizes
        self.n = n
        self.issued = 0
        self.remaining = n
        self.is_write = is_write
        self.ready_at = ready_at
        self.index = -1
        self.start = 0

    @property
    def addrs(self) -> list[int]:
        """Request addresses (bytes) as a list."""
        if self._addrs is None:
            self._addrs = self.addr_arr.tolist()
        return self._addrs

    @property
    def sizes(self) -> list[int] | None:
        """Request sizes (bytes) as a list; None when they are all ``size_const``."""
        if self.size_arr is None:
            return None
        if self._sizes is None:
            self._sizes = self.size_arr.tolist()
        return self._sizes


class StreamState:
    """Run-time state of one stream."""

    __slots__ = ("name", "kind", "index", "ops", "n", "pc", "stats", "blocked", "block_since",
                 "in_ready", "max_done", "seq", "inflight", "pending_signals", "dma_cur",
                 "last_array", "pim_out", "pim_next", "finished", "wait_info")

    def __init__(self, ls):
        self.name = ls.name
        self.kind = ls.kind
        self.index = ls.index
        self.ops: list[LoadedOp] = ls.ops       # a LazyOps until the Python loop runs it
        self.n = len(ls.ops)
        self.pc = 0
        self.stats = StreamStats(ls.name, ls.kind.value)
        self.blocked: str | None = None
        self.block_since = 0
        self.in_ready = False
        self.max_done = 0
        self.seq = 0
        self.inflight: deque[DmaRec] = deque()
        # SIGNALs behind transfers in flight: (transfer seq, sem, count, index, cycle reached)
        self.pending_signals: deque[tuple[int, int, int, int, int]] = deque()
        self.dma_cur: DmaRec | None = None
        self.last_array: int | None = None
        self.pim_out: deque[int] = deque()   # PIM request ids in flight, oldest first
        self.pim_next = 0                    # next instruction a PIM run would send
        self.finished = False
        self.wait_info: tuple[int, int] | None = None


class ArrayState:
    """One systolic array: when its input rows, shadow weight buffer and preload path are
    free, the pending preload's completion, starts of accepted tiles not yet begun."""

    __slots__ = ("rows_free_at", "shadow_free_at", "preload_free_at", "pending_done",
                 "active_ready", "has_weights", "unstarted", "busy_end", "stats")

    def __init__(self):
        self.rows_free_at = 0
        self.shadow_free_at = 0
        self.preload_free_at = 0
        self.pending_done: int | None = None
        self.active_ready = 0
        self.has_weights = False
        self.unstarted: list[int] = []
        self.busy_end = 0
        self.stats = ArrayStats()


class VectorState:
    """One vector unit: when it is free and the starts of accepted ops not yet begun."""

    __slots__ = ("free_at", "unstarted", "stats")

    def __init__(self):
        self.free_at = 0
        self.unstarted: list[int] = []
        self.stats = VectorStats()



__all__ = ["PIM_KINDS", "PIM_RID_BASE", "REC_SHIFT", "INF", "channel_interleave_bytes", "DmaRec",
           "StreamState", "ArrayState", "VectorState"]
