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

The column constants (``OP_*``, ``I_*``, ``K_*``, ``SK_*``) are in :mod:`archsim.npu.cstate`
with the loop's other layouts (the compiled code reads them).

Cycles are NPU cycles. The module does no I/O.
"""
from __future__ import annotations

from collections import namedtuple
from itertools import chain
from operator import attrgetter, itemgetter

import numpy as np

from archsim.errors import SimulationError
from archsim.npu.cstate import (I_POK, I_PROW, K_DMA, K_LINK, K_PIM, K_SA, K_VU, NIA, OP_DMA,
                                OP_END, OP_LINK, OP_LOADW, OP_MATMUL, OP_NOP, OP_PIM, OP_SIGNAL,
                                OP_VU, OP_WAIT, SK_KIND, SK_N)
from archsim.npu.loader import LoadedOp, _operands
from archsim.npu.state import PIM_KINDS
from archsim.npu.timing import (dma_pattern_period, dma_request_pattern,
                                tile_issue_interval_cycles, tile_latency_cycles,
                                vector_op_cycles, weight_preload_cycles)
from isa.encoding import Instruction
from isa.spec import ARRAY_ANY, BY_OPCODE, DTYPE_BYTES, Engine

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
        opcode_groups: the ``(spec, gi, C)`` groups of :func:`codes_by_opcode` the tables
            were built from, kept for more readers of the same pass until the run starts
            (:func:`archsim.system.core.execute_program` reads them between the executor's
            construction and its run; :meth:`archsim.npu.compiled.CompiledRun.run` frees
            them).
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
        self.opcode_groups: list | None = []


def build_tables(ex, group_rows: bool = True) -> tuple[ProgramTables, TableInfo]:
    """The tables of the program of executor ``ex`` (:class:`archsim.npu.executor.Executor`,
    its machine, options and memory port; the port must offer ``pim_fields``), from the
    instructions' operand codes, one opcode at a time with numpy: the timing functions are
    called once per distinct value of the operands they read.

    ``group_rows`` (the default): the memory's fields of a ``G_ACT`` are computed once per
    channel and bank-group mask instead of once per row (:func:`_g_act_columns`); False calls
    the memory once per distinct row, the reference the grouped tables are tested against
    (``tests/test_compile_identity.py``).

    Returns ``(tables, info)``. Raises nothing for a PIM instruction the memory rejects: it is
    marked (``IA[g, I_POK] = 0``) and fails when the loop reaches it, as in the executor.
    """
    streams = ex.loaded.streams
    info = TableInfo()
    ns = len(streams)
    info.n_streams = ns
    SK = np.zeros((ns, 4), np.int64)
    lists = []
    g = 0
    for k, ls in enumerate(streams):
        instrs = ls.instrs if ls.instrs or not len(ls.ops) else [op.ins for op in ls.ops]
        SK[k] = (_KINDS[ls.kind], -1 if ls.index is None else ls.index, g, len(instrs))
        g += len(instrs)
        lists.append(instrs)
    info.n_instructions = g
    OP = np.zeros(g, np.int64)
    IA = np.zeros((g, NIA), np.int64)
    stream_of = np.repeat(np.arange(ns), SK[:, SK_N])
    dma = _DmaPatterns(ex)
    for spec, gi, C in codes_by_opcode(lists):
        info.opcode_groups.append((spec, gi, C))
        OP[gi], cols = _columns(ex, spec, C, gi, stream_of, streams, SK, dma, group_rows)
        if cols is not None:
            IA[gi, :cols.shape[1]] = cols
    sig = np.bincount(stream_of[OP == OP_SIGNAL], minlength=ns)
    info.signals_per_stream = sig.tolist()
    info.n_timed_signals = int(sig[np.isin(SK[:, SK_KIND], (K_SA, K_VU))].sum())
    info.n_dma = int((OP == OP_DMA).sum())
    info.n_pim = int((OP == OP_PIM).sum())
    info.pim_errors = set(np.flatnonzero((OP == OP_PIM) & (IA[:, I_POK] == 0)).tolist())
    info.max_request_bytes = dma.max_request_bytes
    DREL, DSZ = dma.arrays()
    return ProgramTables(OP, IA, SK, DREL, DSZ), info


def codes_by_opcode(lists: list[list[Instruction]]):
    """The instructions of ``lists`` (one after the other: global index ``g``) grouped by
    opcode, in opcode order: yields ``(spec, gi, C)`` with ``gi[n]`` the global indices of the
    opcode's instructions (ascending) and ``C[n, fields]`` their operand codes (int64; enum
    codes are indices into the field's names, integers their values, floats their bits)."""
    specs: list = []
    codes: list[tuple] = []
    for instrs in lists:
        specs += [ins.spec for ins in instrs]
        codes += [ins.codes for ins in instrs]
    g = len(specs)
    if not g:
        return
    OPC = np.fromiter(map(attrgetter("opcode"), specs), np.int64, count=g)
    order = np.argsort(OPC, kind="stable")        # the instructions of each opcode, in order
    bounds = np.flatnonzero(np.diff(OPC[order])) + 1
    for gi in np.split(order, bounds):
        spec = BY_OPCODE[int(OPC[gi[0]])]
        nf = len(spec.fields)
        sel = gi.tolist()
        rows = itemgetter(*sel)(codes) if len(sel) > 1 else (codes[sel[0]],)
        C = np.fromiter(chain.from_iterable(rows), np.int64,
                        count=len(sel) * nf).reshape(len(sel), nf)
        yield spec, gi, C


class _DmaPatterns:
    """The distinct request patterns of a program's transfers, laid out one after the other
    (:func:`archsim.npu.timing.dma_request_pattern` once per pattern)."""

    def __init__(self, ex) -> None:
        self.q, self.ib = ex.request_bytes, ex.interleave_bytes
        self.period = dma_pattern_period(self.q, self.ib)
        self.rels: list[np.ndarray] = []
        self.szs: list[np.ndarray] = []
        self.n = 0
        self.max_request_bytes = 0

    def add(self, off: int, rows: int, row_bytes: int, stride: int) -> tuple[int, int]:
        """Offset and length of the pattern of a transfer at ``off`` (< period)."""
        rel, sizes, _ = dma_request_pattern(off, rows, row_bytes, stride, self.q, self.ib)
        at = self.n
        self.rels.append(rel)
        self.szs.append(sizes)
        self.n += int(rel.shape[0])
        if rel.shape[0]:
            self.max_request_bytes = max(self.max_request_bytes, int(sizes.max()))
        return at, int(rel.shape[0])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(DREL, DSZ)``."""
        if not self.rels:
            return np.zeros(1, np.int64), np.zeros(1, np.int64)
        return np.concatenate(self.rels), np.concatenate(self.szs)


def _per_unique(fn, *cols: np.ndarray) -> np.ndarray:
    """``fn`` applied to each distinct row of the columns ``cols`` (int64, one per argument),
    in lexicographic order of the rows, gathered back to every row: shape ``(n,)`` or
    ``(n, k)`` for a k-tuple result."""
    uk, inv = _unique_rows(cols)
    vals = np.array([fn(*row) for row in uk.tolist()], np.int64)
    return vals[inv]


def _unique_rows(cols) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows ``[u, len(cols)]`` of the columns ``cols`` in lexicographic order and
    the index of each row among them (``np.unique(axis=0)``'s result, from one int64 key per
    row in mixed radix, first column most significant, when the columns' spans allow it)."""
    n = len(cols[0])
    key = np.zeros(n, np.int64)
    lo = [int(c.min()) if n else 0 for c in cols]
    span = 1
    for c, l in zip(reversed(cols), reversed(lo)):
        w = int(c.max()) - l + 1 if n else 1
        if span * w >= 1 << 62:
            uk, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
            return uk, inv.reshape(-1)
        key += (c - l) * span
        span *= w
    uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return np.stack([c[first] for c in cols], axis=1).reshape(len(uk), len(cols)), inv


def _columns(ex, spec, C, gi, stream_of, streams, SK, dma,
             group_rows: bool = True) -> tuple[int, np.ndarray | None]:
    """Class and operand columns (module docstring) of the instructions ``gi`` of one opcode,
    from their operand codes ``C[n, fields]`` (enum codes are indices into the field's names;
    integers are their values)."""
    m = spec.mnemonic
    f = {fs.name: i for i, fs in enumerate(spec.fields)}
    cls = _SYNC.get(m)
    if cls is not None:
        return cls, (C[:, [f["sem"], f["count"]]] if cls in (OP_SIGNAL, OP_WAIT) else None)
    if m in ("DMA_LOAD", "DMA_STORE"):
        es = np.array([DTYPE_BYTES[d] for d in spec.field("dtype").enum], np.int64)
        hbm, rows, stride = C[:, f["hbm"]], C[:, f["rows"]], C[:, f["stride"]]
        row_bytes = C[:, f["cols"]] * es[C[:, f["dtype"]]]
        off = hbm % dma.period
        pat = _per_unique(dma.add, off, rows, row_bytes, stride)
        return OP_DMA, np.stack([pat[:, 0], pat[:, 1], hbm - off,
                                 np.full(len(gi), 1 if m == "DMA_STORE" else 0)], axis=1)
    if m == "SA_LOADW":
        a = C[:, f["array"]]
        return OP_LOADW, np.stack([np.where(a == ARRAY_ANY, -1, a),
                                   np.full(len(gi), weight_preload_cycles(ex.H))], axis=1)
    if m == "SA_MATMUL":
        a, mm = C[:, f["array"]], C[:, f["m"]]
        t = _per_unique(lambda x: (tile_issue_interval_cycles(x),
                                   tile_latency_cycles(ex.H, ex.W, x)), mm)
        return OP_MATMUL, np.stack([np.where(a == ARRAY_ANY, -1, a), t[:, 0], t[:, 1],
                                    mm * C[:, f["n"]] * C[:, f["k"]]], axis=1)
    if spec.engine is Engine.VU:
        key = spec.latency_key
        lat, passes = ex.vlat[key], ex.vpass.get(key, 1)
        rows, cols = C[:, f["rows"]], C[:, f["cols"]]
        dur = _per_unique(lambda r, c: vector_op_cycles(lat, r, c, ex.lanes, passes), rows, cols)
        return OP_VU, np.stack([dur, rows * cols], axis=1)
    if spec.engine is Engine.LINK:
        def link(*c):
            ins = Instruction.from_codes(spec, c)
            return ex.link_cycles(LoadedOp(m, _operands(ins), 0, ins))
        return OP_LINK, _per_unique(link, *C.T).reshape(-1, 1)
    if m in PIM_KINDS:
        # what submit_pim reads of the request (Executor._pim_request): the channel, row,
        # count and bank-group mask
        names = [n for n in ("channel", "row", "n_comps", "n_gemvs", "bg_mask") if n in f]
        ls = streams[int(stream_of[gi[0]])]

        def pim(*c):
            op = LoadedOp(m, dict(zip(names, c)), 0, None)
            try:
                return (1,) + tuple(ex.mem.pim_fields(ex._pim_request(ls, op, 0, 0)))
            except SimulationError:
                return (0,) * NIA
        if m == "G_ACT" and group_rows:
            return OP_PIM, _g_act_columns(pim, names, C, f)
        return OP_PIM, _per_unique(pim, *(C[:, f[n]] for n in names))
    raise SimulationError(f"{m} cannot run on any stream")   # pragma: no cover


def _g_act_columns(pim, names, C, f) -> np.ndarray:
    """The PIM columns of ``G_ACT`` instructions (operand codes ``C``, field index ``f``)
    without a call of the memory per row: ``KernelMemory.pim_fields`` reads a G_ACT's row only
    to check it against the rows of a bank and to pass it through (its other fields depend on
    the channel and the bank-group mask). Per distinct ``(channel, bg_mask)`` the memory is
    asked at the lowest and the highest row the group uses; when it accepts both and passes
    each through, every row between them gets those fields with its own row. Otherwise (a row
    out of range) the group is asked row by row, as :func:`_per_unique` does. This relies on
    that rule of ``pim_fields`` (the row is range-checked against an interval and passed
    through): a change of the rule must change this function too.
    ``build_tables(group_rows=False)`` is the reference, compared with this on real programs
    and on rows out of range by ``tests/test_compile_identity.py``."""
    assert names == ["channel", "row", "bg_mask"]
    ch, row, mask = (C[:, f[n]] for n in names)
    out = np.zeros((len(C), NIA), np.int64)
    uk, inv = _unique_rows([ch, mask])
    for u, (c, m) in enumerate(uk.tolist()):
        sel = np.flatnonzero(inv == u)
        r = row[sel]
        lo, hi = int(r.min()), int(r.max())
        a, b = np.array(pim(c, lo, m), np.int64), np.array(pim(c, hi, m), np.int64)
        same = np.delete(a, I_PROW), np.delete(b, I_PROW)
        if a[I_POK] and b[I_POK] and (a[I_PROW], b[I_PROW]) == (lo, hi) and \
                np.array_equal(*same):
            out[sel] = a
            out[sel, I_PROW] = r
        else:
            out[sel] = _per_unique(pim, ch[sel], r, mask[sel])
    return out


__all__ = ["ProgramTables", "TableInfo", "build_tables"]
