"""Instruction generation for the work items of :mod:`mapping.schedule`.

One :class:`Codegen` emits a whole program (one layer or a layer stack) for one device.

Streams (``A`` systolic arrays, ``V`` vector units, ``C`` channels; see :mod:`isa.program`):

* ``sa{i}``: systolic array ``i``; ``dma{i}``: its weight-tile loads (double buffered);
* ``vu{j}`` and its DMA queue ``dma{A+j}``; the first half of the vector units (*chain VUs*) run
  the vector work of the GEMM chains (norms, GEMM epilogues, bias, RoPE, activations,
  residuals), the second half (*attention VUs*) the attention's NPU work (softmax, gathers for
  GWRITE, partial-sum reduction; or the whole attention on an NPU-only system), so that
  sub-batch interleaving is not blocked by in-order vector queues;
* ``pim{c}``: PIM channel ``c``;
* ``link``: the device links: an ``ALL_REDUCE`` per tensor-parallel all-reduce (bytes, group,
  ring), and the pipeline-parallel hand-off (``RECV`` of the stage's input first, ``SEND`` of
  its output last; :meth:`Codegen.handoff`).

Data flow of one sub-batch of ``m`` token rows (decode):

* activations between operators stay in the scratchpad, row-major ``[m, cols]``; the systolic
  arrays read their input *blocked* ``[ceil(K/H)][m][H]`` (dense ``[m, kh]`` blocks, made by
  ``VU_COPY``) and accumulate each ``[m, W]`` output block in fp32; the epilogue ``VU_COPY``
  converts it to the model dtype into the row-major destination;
* weights are loaded tile by tile (``DMA_LOAD`` of a contiguous tiled ``[kh, wn]`` tile into one of
  two scratchpad buffers per array, ``SA_LOADW``, ``SA_MATMUL``); the DMA of tile ``t+1`` overlaps
  the matmul of tile ``t`` (semaphores in both directions);
* the layer input and output are rows of ``hidden.{l}`` in HBM (row ``row_of_request[i]``).

Decode attention on PIM, per request (DESIGN §3 layout, :mod:`mapping.kvlayout`): ``DMA_STORE``
of the new K row (one per key row chunk) and V elements (one per head and dimension tile, a
strided store across banks), then per key chunk ``GWRITE`` q and per token group ``PIM_HEADER,
G_ACT, PIM_GEMV x heads, PIM_PRECHARGE`` (scores into the scratchpad), ``VU_SCALE`` +
``VU_SOFTMAX`` (length mask), ``VU_COPY`` gathers of probability runs, per (run, value group)
``GWRITE`` and per dimension tile ``PIM_HEADER, G_ACT, PIM_GEMV x slots, PIM_PRECHARGE``, then
``VU_ADD`` of the run partials and a ``VU_COPY`` into the projection's blocked input. Requests
of a channel are software-pipelined over two buffer slots (q.K of request k+1 overlaps the
softmax of request k).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mapping.builder import ProgramBuilder
from mapping.errors import CapacityError, MappingError, UnsupportedError
from mapping.kvlayout import ceil_div
from mapping.memplan import DTYPE_BYTES, HbmPlan, SpadAllocator, TensorPlacement

_DMA_MAX = (1 << 14) - 1
_VU_STRIDE_MAX = (1 << 16) - 1
PREFILL_Q_TILE = 128
"""Query rows per prefill attention tile (scores ``[tile, L]`` fp32 in the scratchpad)."""
PREFILL_SLAB_BYTES = 1 << 20
"""Scratchpad bytes of one slab of K rows in the PIM-layout prefill KV append."""


def part_tag(sub: int, block: int = -1, chunk: int = -1, unit: int = 0) -> int:
    """Part tag of instructions working on sub-batch ``sub``, row block ``block`` (-1: all
    blocks) and VU row chunk ``chunk`` of that block (-1: all rows of the block); ``unit`` > 0
    numbers the independent pieces of a per-request operator (prefill attention: one per query
    head and query tile; decode PIM attention: one per unit of KV heads). See
    :func:`mapping.verify.rows_meet`."""
    return (sub << 40) | (unit << 20) | ((block + 1) << 10) | (chunk + 1)


def _merge(*dicts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            if out.get(k, -1) < v:
                out[k] = v
    return out


class _Hazard:
    """Hazard state shared by a buffer and its views (see :class:`Buf`)."""

    __slots__ = ("release", "reads", "writes", "wcount", "wseen", "rseen")

    def __init__(self, release: dict[str, int] | None = None) -> None:
        self.release = dict(release or {})
        self.reads: dict[str, int] = {}
        self.writes: dict[str, int] = {}
        self.wcount = 0                      # writes recorded (cache key for readers)
        self.wseen: dict[str, int] = {}      # stream -> wcount it already waited for
        self.rseen: set[str] = set()         # streams that already waited for ``release``


class Buf:
    """A tensor in the scratchpad or HBM with its hazard state.

    ``writes``/``reads`` are the event sets of the current *generation* (the value being
    produced); ``release`` the events after which the previous generation (or the previous
    tenant of the memory) is dead. A writer waits for ``release``; a reader for ``writes``.
    :meth:`view` makes a buffer at another address sharing the state (one logical tensor in
    several pieces, e.g. the q/k and v parts of the QKV output).
    """

    __slots__ = ("name", "addr", "nbytes", "hz", "root")

    def __init__(self, name: str, addr: int, nbytes: int, release: dict[str, int] | None = None,
                 hz: _Hazard | None = None):
        self.name = name
        self.addr = addr
        self.nbytes = nbytes
        self.hz = hz or _Hazard(release)
        self.root = hz is None

    def view(self, name: str, offset: int, nbytes: int) -> "Buf":
        """A buffer ``offset`` bytes into this one, sharing its hazard state."""
        return Buf(name, self.addr + offset, nbytes, hz=self.hz)

    @property
    def writes(self) -> dict[str, int]:
        """Write events of the current generation (``{stream: position}``)."""
        return self.hz.writes

    @property
    def reads(self) -> dict[str, int]:
        """Read events of the current generation."""
        return self.hz.reads

    @property
    def release(self) -> dict[str, int]:
        """Events after which the previous generation / tenant is dead."""
        return self.hz.release

    def new_gen(self) -> None:
        """Start producing a new value: the old one is dead after its reads and writes."""
        h = self.hz
        h.release = _merge(h.release, h.reads, h.writes)
        h.reads = {}
        h.writes = {}
        h.rseen = set()

    def dead_after(self) -> dict[str, int]:
        """Events after which the buffer's memory may be reused."""
        h = self.hz
        return _merge(h.release, h.reads, h.writes)


@dataclass
class Slot:
    """Per-channel (or per-lane) attention buffers of one request in flight."""

    sc: Buf
    stage: Buf
    part: Buf


@dataclass
class SubState:
    """Scratchpad tensors of one sub-batch carried between work items."""

    qk: Buf | None = None
    v: Buf | None = None
    ao: Buf | None = None
    extra: dict = field(default_factory=dict)


class Codegen:
    """Emits the instructions of work items into a :class:`ProgramBuilder`.

    Args:
        ctx: the compilation context (:class:`mapping.compiler.Context`).
    """

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        cfg = ctx.cfg
        self.B: ProgramBuilder = ctx.builder
        self.plan: HbmPlan = ctx.plan
        self.model = ctx.model
        self.dt = ctx.dtype
        self.eb = DTYPE_BYTES[ctx.dtype]
        self.A = cfg.npu.n_arrays
        self.V = cfg.npu.vector.count
        self.H = cfg.npu.array_height
        self.W = cfg.npu.array_width
        if self.V >= 2:
            self.chain_vus = list(range(self.V // 2))
            self.att_vus = list(range(self.V // 2, self.V))
        else:
            self.chain_vus = [0]
            self.att_vus = [0]
        self.spad = SpadAllocator(cfg.npu.scratchpad.size_bytes)
        self.hbm_bufs: dict[str, Buf] = {}
        self.subs: dict[tuple[int, int], SubState] = {}
        m = ctx.model
        self.Hq = m.heads_per_device(ctx.tp)
        self.Hkv = m.kv_heads_per_device(ctx.tp)
        self.qpk = self.Hq // self.Hkv
        self.hd = m.head_dim
        self.d = m.d_model
        self.ff = m.d_ff_per_device(ctx.tp)
        self.eps_exp = _eps_exp(m.norm_eps)
        self._static_buffers()
        self._bank_stride = self.plan.bank_stride() if self.plan.pim_layout else None
        self._prefill_array = 0

    # ------------------------------------------------------------------ streams
    def s_sa(self, i: int) -> str:
        """Stream of systolic array ``i``."""
        return f"sa{i}"

    def s_dw(self, i: int) -> str:
        """DMA queue loading the weight tiles of array ``i``."""
        return f"dma{i}"

    def s_vu(self, j: int) -> str:
        """Stream of vector unit ``j``."""
        return f"vu{j}"

    def s_dv(self, j: int) -> str:
        """DMA queue serving vector unit ``j`` (activations, KV append, attention blocks)."""
        return f"dma{self.A + j}"

    def s_pim(self, c: int) -> str:
        """Stream of PIM channel ``c``."""
        return f"pim{c}"

    @property
    def s_link(self) -> str:
        """Stream of the device links (all-reduces, pipeline hand-off)."""
        return "link"

    # ------------------------------------------------------------------ buffers
    def alloc(self, name: str, nbytes: int) -> Buf:
        """A new scratchpad buffer (CapacityError names it when the scratchpad is full).

        Its owner is the sub-batch of the current part tag (see :func:`part_tag`; none for
        buffers allocated outside any sub-batch): the allocator prefers memory freed by the
        same sub-batch, so that the sub-batches do not wait for each other's readers
        (:class:`mapping.memplan.SpadAllocator`)."""
        part = self.B.part
        owner = part >> 40 if part >= 0 else None
        addr, release = self.spad.alloc(nbytes, name, owner)
        return Buf(name, addr, nbytes, release)

    def free(self, buf: Buf | None) -> None:
        """Return a scratchpad buffer (reusable once its last accesses completed)."""
        if buf is not None:
            self.spad.free(buf.addr, buf.dead_after())

    def hbm(self, name: str) -> Buf:
        """Hazard state of an HBM tensor (activation or KV allocation) by name."""
        b = self.hbm_bufs.get(name)
        if b is None:
            b = self.hbm_bufs[name] = Buf(name, 0, 0)
        return b

    def _static_buffers(self) -> None:
        ctx = self.ctx
        eb = self.eb
        self.m_max = min(max([ctx.rows_per_sub(s) for s in range(ctx.n_sub)] + [1]),
                         max(1, ctx.row_block))
        # more than double buffering only where it costs at most 1/8 of the scratchpad
        nw = ctx.weight_buffers
        if nw > 2 and self.A * nw * self.H * self.W * eb > ctx.cfg.npu.scratchpad.size_bytes // 8:
            nw = 2
        self.wbuf = [[self.alloc(f"w{i}.{k}", self.H * self.W * eb) for k in range(nw)]
                     for i in range(self.A)]
        self.acc = [[self.alloc(f"acc{i}.{k}", self.m_max * self.W * 4) for k in range(2)]
                    for i in range(self.A)]
        self._wtog = [0] * self.A
        self._atog = [0] * self.A
        self.slots: dict[int, list[Slot]] = {}

    def slots_for(self, key: int, seq_max: int, pim: bool = True) -> list[Slot]:
        """The two attention buffer slots of PIM channel ``key``, sized for requests up to
        ``seq_max`` tokens (allocated on first use)."""
        s = self.slots.get(key)
        if s is not None:
            return s
        eb = self.eb
        out = []
        for k in range(2):
            lay = self.plan.pim_layout
            assert lay is not None
            uh = self.unit_heads()
            rows = uh * self.qpk
            lp = lay.scores_cols(seq_max)
            U = lay.runs(seq_max)
            n_stage = max(ceil_div(uh, lay.heads_per_key_row) + 1,
                          U * (ceil_div(uh, lay.slots) + 1)) * self.qpk
            sc = self.alloc(f"sc{key}.{k}", rows * lp * 4)
            st = self.alloc(f"st{key}.{k}", n_stage * lay.page_elems * eb)
            part = self.alloc(f"part{key}.{k}", U * rows * lay.dim_tiles * lay.banks * 4)
            out.append(Slot(sc, st, part))
        self.slots[key] = out
        return out

    # ------------------------------------------------------------------ emission primitive
    def ins(self, stream: str, mnemonic: str, reads=(), writes=(), role: str = "body",
            macs: int = 0, **operands) -> int:
        """Emit one instruction after the waits its buffer accesses need.

        ``reads`` items are :class:`Buf` (wait for all its writes) or ``(Buf, events)`` (wait
        for the given events only, e.g. the writes this instruction's rows depend on);
        ``writes`` items are :class:`Buf` (wait for its release). Returns the position.
        """
        B = self.B
        self.wait_for(stream, reads, writes)
        pos = B.emit(stream, mnemonic, role=role, macs=macs, **operands)[stream]
        for r in reads:
            (r[0] if isinstance(r, tuple) else r).hz.reads[stream] = pos
        for w in writes:
            h = w.hz
            h.writes[stream] = pos
            # the stream has seen every write of the value only if it had seen all the others
            # (another stream may have written another part of it meanwhile, unordered)
            seen_all = h.wseen.get(stream, 0) == h.wcount
            h.wcount += 1
            if seen_all:
                h.wseen[stream] = h.wcount
        return pos

    def wait_for(self, stream: str, reads=(), writes=()) -> None:
        """Emit on ``stream`` now the waits an instruction with these ``reads`` / ``writes``
        (as in :meth:`ins`) needs; the instruction emitted later then needs none (unless the
        buffers were written or renewed in between). Used to hoist the waits of a PIM row's
        commands before its ``PIM_HEADER`` / ``G_ACT``: a stream must never wait on another
        engine while it holds a PIM row open, since the memory controller postpones refresh
        while a PIM row is open (DESIGN §3; JEDEC allows at most 8 postponed REFs)."""
        B = self.B
        for r in reads:
            if isinstance(r, tuple):
                if r[1]:
                    B.wait(stream, r[1])
            else:
                h = r.hz
                if h.wseen.get(stream) != h.wcount:
                    B.wait(stream, h.writes)
                    h.wseen[stream] = h.wcount
        for w in writes:
            h = w.hz
            if stream not in h.rseen:
                B.wait(stream, h.release)
                h.rseen.add(stream)

    def row_chunks(self, m: int) -> list[tuple[int, int, int]]:
        """Split ``m`` rows over the chain VUs: ``[(vu, r0, r1), ...]`` (no empty chunk)."""
        q = self.chain_vus
        n = min(len(q), m)
        out = []
        for k in range(n):
            r0 = m * k // n
            r1 = m * (k + 1) // n
            out.append((q[k], r0, r1))
        return out

    def iter_chunks(self, s: int, chunks: list[tuple[int, int, int]], block: int = 0):
        """Iterate VU row chunks of row block ``block`` of sub-batch ``s``, tagging the
        instructions with the chunk's part; afterwards the part is the whole block again."""
        for k, ch in enumerate(chunks):
            self.B.set_part(part_tag(s, block, k))
            yield ch
        self.B.set_part(part_tag(s, block))

    def request_part(self, i: int, unit: int = 0) -> int:
        """Part tag of batch position ``i``: its sub-batch, row block and row chunk; ``unit`` > 0
        numbers an independent piece of its attention (a PIM attention unit of KV heads, see
        :meth:`unit_heads`), 0 the whole request."""
        ctx = self.ctx
        s = ctx.sub_of(i)
        rho = ctx.row_in_sub(i)
        for bi, (b0, b1) in enumerate(self.row_blocks(ctx.rows_per_sub(s))):
            if b0 <= rho < b1:
                for k, (_, r0, r1) in enumerate(self.row_chunks(b1 - b0)):
                    if r0 <= rho - b0 < r1:
                        return part_tag(s, bi, k, unit)
        return part_tag(s, unit=unit)

    def unit_part(self, unit: tuple[int, int, int]) -> int:
        """Part tag of the PIM attention unit ``(i, k0, k1)`` (KV heads ``[k0, k1)`` of batch
        position ``i``): the units of one request share their operators but not their data
        (each has its own scores / partials slot generation), so the graph check must pair
        score, softmax and context unit by unit (``mapping.verify.rows_meet``)."""
        i, k0, _ = unit
        return self.request_part(i, k0 // self.unit_heads() + 1)

    def dma_vec(self, stream: str, mnemonic: str, spad: int, hbm: int, n: int, dtype: str,
                reads=(), writes=(), role: str = "body") -> None:
        """DMA of ``n`` contiguous elements (split into legal [rows, cols] transfers)."""
        eb = DTYPE_BYTES[dtype]
        done = 0
        while done < n:
            left = n - done
            if left <= _DMA_MAX:
                rows, cols = 1, left
            else:
                cols = _DMA_MAX
                rows = min(left // cols, _DMA_MAX)
            self.ins(stream, mnemonic, reads=reads, writes=writes, role=role,
                     spad=spad + done * eb, hbm=hbm + done * eb, rows=rows, cols=cols,
                     stride=cols * eb, dtype=dtype)
            done += rows * cols

    def load_param(self, name: str, stream: str) -> Buf:
        """Load the HBM tensor ``name`` (norm parameters, bias) into a new scratchpad buffer."""
        t = self.plan.tensors[name]
        buf = self.alloc(name, t.nbytes)
        self.dma_vec(stream, "DMA_LOAD", buf.addr, t.addr, int(np.prod(t.shape)), t.dtype,
                     writes=[buf])
        return buf

    # ------------------------------------------------------------------ GEMM
    def gemm(self, op: str, x: Buf, m: int, K: int, N: int, w: TensorPlacement,
             dests: list[tuple[int, int, Buf, int, int]], x_rows: int | None = None,
             x_row0: int = 0) -> None:
        """``dest[m, N] = x[m, K] @ w[K, N]`` on the systolic arrays.

        Args:
            op: graph node name.
            x: blocked input ``[ceil(K/H)][x_rows][kh]`` in the scratchpad (model dtype); the
                GEMM reads its rows ``[x_row0, x_row0 + m)`` (``x_rows`` defaults to ``m``).
            m, K, N: rows, reduction length, output columns (elements).
            w: tiled weight ``[K, N]`` in HBM.
            dests: ``(c0, c1, buf, buf_col0, buf_cols)``: output columns ``[c0, c1)`` go to
                row-major ``buf`` ``[m, buf_cols]`` starting at column ``buf_col0``.

        Output column block ``nb`` (width W) runs on array ``nb mod A``; blocks are issued in
        rounds so that the epilogues of different arrays interleave on the chain VUs.
        """
        B, H, W, eb, dt = self.B, self.H, self.W, self.eb, self.dt
        B.set_op(op)
        KB, NB = ceil_div(K, H), ceil_div(N, W)
        if m > self.m_max:
            raise MappingError(f"internal: GEMM {op} with {m} rows > accumulator rows "
                               f"{self.m_max}")
        rounds = ceil_div(NB, self.A)
        for rnd in range(rounds):
            for i in range(self.A):
                nb = rnd * self.A + i
                if nb >= NB:
                    break
                wn = min(W, N - nb * W)
                accb = self.acc[i][self._atog[i]]
                self._atog[i] ^= 1
                accb.new_gen()
                sa, dw = self.s_sa(i), self.s_dw(i)
                for kb in range(KB):
                    kh = min(H, K - kb * H)
                    wb = self.wbuf[i][self._wtog[i]]
                    self._wtog[i] = (self._wtog[i] + 1) % len(self.wbuf[i])
                    wb.new_gen()
                    self.ins(dw, "DMA_LOAD", writes=[wb], spad=wb.addr,
                             hbm=w.addr + w.tile_offset(kb, nb), rows=kh, cols=wn,
                             stride=wn * eb, dtype=dt)
                    self.ins(sa, "SA_LOADW", reads=[wb], array=i, w=wb.addr, k=kh, n=wn,
                             dtype=dt)
                    self.ins(sa, "SA_MATMUL", reads=[x], writes=[accb], role="in",
                             macs=m * kh * wn, array=i,
                             src=x.addr + ((x_rows or m) * H * kb + x_row0 * kh) * eb,
                             dst=accb.addr, m=m, n=wn, k=kh, acc=int(kb > 0), dtype=dt,
                             out_dtype="fp32")
                v = self.chain_vus[i % len(self.chain_vus)]
                for c0, c1, dbuf, bc0, bcols in dests:
                    a, e = max(c0, nb * W), min(c1, nb * W + wn)
                    if a >= e:
                        continue
                    _check_stride(bcols, op)
                    self.ins(self.s_vu(v), "VU_COPY", reads=[accb], writes=[dbuf], role="out",
                             dst=dbuf.addr + (a - c0 + bc0) * eb,
                             src=accb.addr + (a - nb * W) * 4, rows=m, cols=e - a,
                             src_stride=wn, dst_stride=bcols, dtype="fp32", out_dtype=dt)

    def reblock(self, vu: int, src: Buf, src_events: dict[str, int], dst: Buf, m: int, K: int,
                r0: int, r1: int, role: str = "out") -> None:
        """Copy rows ``[r0, r1)`` of row-major ``src [m, K]`` into blocked ``dst``."""
        H, eb, dt = self.H, self.eb, self.dt
        _check_stride(K, "reblock")
        for kb in range(ceil_div(K, H)):
            kh = min(H, K - kb * H)
            self.ins(self.s_vu(vu), "VU_COPY", reads=[(src, src_events)], writes=[dst],
                     role=role, dst=dst.addr + (m * H * kb + r0 * kh) * eb,
                     src=src.addr + (r0 * K + kb * H) * eb, rows=r1 - r0, cols=kh,
                     src_stride=K, dst_stride=kh, dtype=dt, out_dtype=dt)

    # ------------------------------------------------------------------ vector helpers
    def norm_rows(self, op: str, l: int, which: str, src: Buf, src_ev, dst: Buf, m: int,
                  params: Buf, vu: int, r0: int, r1: int, role: str = "body") -> None:
        """LayerNorm/RMSNorm of rows ``[r0, r1)`` of ``src [m, d]`` into ``dst [m, d]``."""
        d, eb, dt = self.d, self.eb, self.dt
        self.B.set_op(op)
        if self.model.norm == "layernorm":
            self.ins(self.s_vu(vu), "VU_LAYERNORM", reads=[(src, src_ev), params], writes=[dst],
                     role=role, dst=dst.addr + r0 * d * eb, src=src.addr + r0 * d * eb,
                     params=params.addr, rows=r1 - r0, cols=d, dtype=dt, eps_exp=self.eps_exp)
        else:
            self.ins(self.s_vu(vu), "VU_RMSNORM", reads=[(src, src_ev), params], writes=[dst],
                     role=role, dst=dst.addr + r0 * d * eb, src=src.addr + r0 * d * eb,
                     gamma=params.addr, rows=r1 - r0, cols=d, dtype=dt, eps_exp=self.eps_exp)

    def add_rows(self, vu: int, dst: Buf, a: Buf, b: Buf, a_ev, b_ev, r0: int, r1: int,
                 cols: int, bcast: bool = False, role: str = "inout", b_off: int = 0,
                 dst_col0: int = 0, dst_cols: int | None = None) -> None:
        """``dst = a + b`` on rows ``[r0, r1)`` (dense ``[rows, cols]``; ``b`` one broadcast
        row at element ``b_off`` when ``bcast``)."""
        eb, dt = self.eb, self.dt
        rs = dst_cols or cols
        boff = b_off * eb if bcast else (b_off + r0 * cols) * eb
        self.ins(self.s_vu(vu), "VU_ADD", reads=[(a, a_ev), (b, b_ev)], writes=[dst], role=role,
                 dst=dst.addr + (r0 * rs + dst_col0) * eb, a=a.addr + (r0 * rs + dst_col0) * eb,
                 b=b.addr + boff, rows=r1 - r0, cols=cols, bcast=int(bcast), dtype=dt)

    # ------------------------------------------------------------------ work items
    def row_blocks(self, m: int) -> list[tuple[int, int]]:
        """Rows of a sub-batch cut into blocks of at most ``ctx.row_block`` (the GEMM chains
        run block by block when a whole sub-batch does not fit the scratchpad)."""
        nb = ceil_div(m, max(1, min(m, self.ctx.row_block)))
        return [(m * k // nb, m * (k + 1) // nb) for k in range(nb)]

    def emit_qkv(self, l: int, s: int) -> None:
        """Attention norm, QKV GEMM, bias and RoPE of layer ``l`` for sub-batch ``s``
        (row block by row block), into the sub-batch's q|k and v scratchpad tensors."""
        m = self.ctx.rows_per_sub(s)
        if m == 0:
            return
        self.B.set_part(part_tag(s))
        st = self.subs.setdefault((l, s), SubState())
        Hq, Hkv, hd, eb = self.Hq, self.Hkv, self.hd, self.eb
        qkc = (Hq + Hkv) * hd
        N = (Hq + 2 * Hkv) * hd
        if self.ctx.phase == "prefill":
            # q|k|v of all the sub-batch's tokens go to HBM (pf_qkv rows), block by block
            self.hbm(f"pf_qkv.s{s}").new_gen()
        else:
            st.qk = self.alloc(f"qkv.L{l}.s{s}", m * N * eb)
            st.v = st.qk.view(f"v.L{l}.s{s}", m * qkc * eb, m * Hkv * hd * eb)
        for bi, (b0, b1) in enumerate(self.row_blocks(m)):
            self._qkv_block(l, s, st, b0, b1, bi)

    def _qkv_block(self, l: int, s: int, st: SubState, b0: int, b1: int, bi: int) -> None:
        ctx, B = self.ctx, self.B
        m = b1 - b0
        d, eb, dt = self.d, self.eb, self.dt
        row0 = ctx.sub_row0(s) + b0
        p = f"L{l}."
        hid_t = self.plan.tensors[f"hidden.{l}"]
        hid = self.hbm(f"hidden.{l}")
        chunks = self.row_chunks(m)
        base = bi
        B.set_part(part_tag(s, bi))
        B.set_op(p + "attn_norm")
        pn = self.load_param(p + "attn_norm", self.s_dv(chunks[0][0]))
        xr = self.alloc(f"x.L{l}.s{s}", m * d * eb)
        xn = self.alloc(f"xn.L{l}.s{s}", m * d * eb)
        xb = self.alloc(f"xb.L{l}.s{s}", m * d * eb)
        for vu, r0, r1 in self.iter_chunks(s, chunks, base):
            B.set_op(p + "attn_norm")
            pos = self.ins(self.s_dv(vu), "DMA_LOAD", reads=[hid], writes=[xr], role="in",
                           spad=xr.addr + r0 * d * eb, hbm=hid_t.addr + (row0 + r0) * d * eb,
                           rows=r1 - r0, cols=d, stride=d * eb, dtype=dt)
            self.norm_rows(p + "attn_norm", l, "attn_norm", xr, {self.s_dv(vu): pos}, xn, m,
                           pn, vu, r0, r1)
            self.reblock(vu, xn, {}, xb, m, d, r0, r1)
        self.free(pn)
        self.free(xr)
        self.free(xn)
        Hq, Hkv, hd = self.Hq, self.Hkv, self.hd
        qkc = (Hq + Hkv) * hd
        N = (Hq + 2 * Hkv) * hd
        prefill = ctx.phase == "prefill"
        if prefill:
            blk = self.alloc(f"qkv.L{l}.s{s}.b{bi}", m * N * eb)
            qk = blk
            v = blk.view(blk.name, m * qkc * eb, m * Hkv * hd * eb)
        else:
            assert st.qk is not None and st.v is not None
            qk = st.qk.view(st.qk.name, b0 * qkc * eb, m * qkc * eb)
            v = st.v.view(st.v.name, b0 * Hkv * hd * eb, m * Hkv * hd * eb)
        self.gemm(p + "qkv", xb, m, d, N, self.plan.tensors[p + "qkv_w"],
                  [(0, qkc, qk, 0, qkc), (qkc, N, v, 0, Hkv * hd)])
        self.free(xb)
        # the graph's qkv output is q, k and v together (one hazard state): consumers wait
        # for all of it
        snap_qk = snap_v = dict(qk.writes)
        if self.model.attention_bias:
            B.set_op(p + "qkv_bias")
            bq = self.load_param(p + "qkv_b", self.s_dv(chunks[0][0]))
            for vu, r0, r1 in self.iter_chunks(s, chunks, base):
                self.add_rows(vu, qk, qk, bq, snap_qk, bq.writes, r0, r1, qkc, bcast=True)
                self.add_rows(vu, v, v, bq, snap_v, bq.writes, r0, r1, Hkv * hd,
                              bcast=True, b_off=qkc)
            self.free(bq)
        if self.model.positional == "rope":
            B.set_op(p + "rope")
            rt = self.plan.tensors["rope"]
            tb = self.alloc(f"rope.L{l}.s{s}", m * hd * 4)
            for vu, r0, r1 in self.iter_chunks(s, chunks, base):
                pos = self.ins(self.s_dv(vu), "DMA_LOAD", writes=[tb], spad=tb.addr + r0 * hd * 4,
                               hbm=rt.addr + (row0 + r0) * hd * 4, rows=r1 - r0, cols=hd,
                               stride=hd * 4, dtype="fp32")
                self.ins(self.s_vu(vu), "VU_ROPE", reads=[(qk, snap_qk),
                                                         (tb, {self.s_dv(vu): pos})],
                         writes=[qk], role="inout", dst=qk.addr + r0 * qkc * eb,
                         src=qk.addr + r0 * qkc * eb, table=tb.addr + r0 * hd * 4,
                         rows=r1 - r0, cols=qkc, half_dim=hd // 2, dtype=dt)
            self.free(tb)
        if prefill:
            # to HBM: rows row0.. of pf_qkv (q|k columns, then v columns)
            t = self.plan.tensors["pf_qkv"]
            dst = self.hbm(f"pf_qkv.s{s}")
            for vu, r0, r1 in self.iter_chunks(s, chunks, base):
                last = {self.s_vu(vu): B.stream_len(self.s_vu(vu)) - 1} if B.stream_len(
                    self.s_vu(vu)) else {}
                sd = self.s_dv(vu)
                self.ins(sd, "DMA_STORE", reads=[(qk, _merge(snap_qk, last))], writes=[dst],
                         spad=qk.addr + r0 * qkc * eb, hbm=t.addr + (row0 + r0) * N * eb,
                         rows=r1 - r0, cols=qkc, stride=N * eb, dtype=dt)
                self.ins(sd, "DMA_STORE", reads=[(v, _merge(snap_v, last))], writes=[dst],
                         spad=v.addr + r0 * Hkv * hd * eb,
                         hbm=t.addr + ((row0 + r0) * N + qkc) * eb, rows=r1 - r0,
                         cols=Hkv * hd, stride=N * eb, dtype=dt)
            self.free(blk)

    def emit_pf(self, l: int, s: int) -> None:
        """Projection, residual, FFN norm, FFN, residual of layer ``l``, sub-batch ``s``
        (row block by row block); the result goes to rows of ``hidden.{l+1}`` in HBM."""
        m = self.ctx.rows_per_sub(s)
        if m == 0:
            return
        self.B.set_part(part_tag(s))
        st = self.subs.pop((l, s))
        for bi, (b0, b1) in enumerate(self.row_blocks(m)):
            self._pf_block(l, s, st, m, b0, b1, bi)
        self.free(st.ao)

    def _pf_block(self, l: int, s: int, st: SubState, m_sub: int, b0: int, b1: int,
                  bi: int) -> None:
        ctx, B = self.ctx, self.B
        m = b1 - b0
        d, eb, dt, ff = self.d, self.eb, self.dt, self.ff
        row0 = ctx.sub_row0(s) + b0
        p = f"L{l}."
        chunks = self.row_chunks(m)
        base = bi
        B.set_part(part_tag(s, bi))
        dv0 = self.s_dv(chunks[0][0])
        # projection
        po = self.alloc(f"po.L{l}.s{s}", m * d * eb)
        K = self.Hq * self.hd
        if ctx.phase == "prefill":
            # the attention output comes from HBM (pf_ao rows), loaded straight into blocks
            B.set_op(p + "proj")
            t = self.plan.tensors["pf_ao"]
            src = self.hbm(f"pf_ao.s{s}")
            xb = self.alloc(f"aob.L{l}.s{s}", m * K * eb)
            for kb in range(ceil_div(K, self.H)):
                kh = min(self.H, K - kb * self.H)
                self.ins(dv0, "DMA_LOAD", reads=[src], writes=[xb], role="in",
                         spad=xb.addr + m * self.H * kb * eb,
                         hbm=t.addr + (row0 * K + kb * self.H) * eb, rows=m, cols=kh,
                         stride=K * eb, dtype=dt)
            self.gemm(p + "proj", xb, m, K, d, self.plan.tensors[p + "proj_w"],
                      [(0, d, po, 0, d)])
            self.free(xb)
        else:
            assert st.ao is not None
            self.gemm(p + "proj", st.ao, m, K, d, self.plan.tensors[p + "proj_w"],
                      [(0, d, po, 0, d)], x_rows=m_sub, x_row0=b0)
        if ctx.tp > 1:
            self.allreduce(p + "proj_allreduce", po, m * d * eb)
        snap = dict(po.writes)
        # attention residual (+ projection bias)
        B.set_op(p + "attn_residual")
        hid_t = self.plan.tensors[f"hidden.{l}"]
        hid = self.hbm(f"hidden.{l}")
        xr = self.alloc(f"xres.L{l}.s{s}", m * d * eb)
        pb = self.load_param(p + "proj_b", dv0) if self.model.attention_bias else None
        for vu, r0, r1 in self.iter_chunks(s, chunks, base):
            pos = self.ins(self.s_dv(vu), "DMA_LOAD", reads=[hid], writes=[xr],
                           spad=xr.addr + r0 * d * eb, hbm=hid_t.addr + (row0 + r0) * d * eb,
                           rows=r1 - r0, cols=d, stride=d * eb, dtype=dt)
            self.add_rows(vu, po, po, xr, snap, {self.s_dv(vu): pos}, r0, r1, d,
                          role="inout" if pb is None else "in")
            if pb is not None:
                self.add_rows(vu, po, po, pb, {}, pb.writes, r0, r1, d, bcast=True, role="out")
        self.free(xr)
        self.free(pb)
        h1 = po  # the residual stream after attention
        # FFN norm and re-blocking
        B.set_op(p + "ffn_norm")
        pn = self.load_param(p + "ffn_norm", dv0)
        hn = self.alloc(f"hn.L{l}.s{s}", m * d * eb)
        hb = self.alloc(f"hb.L{l}.s{s}", m * d * eb)
        for vu, r0, r1 in self.iter_chunks(s, chunks, base):
            self.norm_rows(p + "ffn_norm", l, "ffn_norm", h1, {}, hn, m, pn, vu, r0, r1,
                           role="in")
            self.reblock(vu, hn, {}, hb, m, d, r0, r1)
        self.free(pn)
        self.free(hn)
        # FFN1 (and gate)
        f1 = self.alloc(f"f1.L{l}.s{s}", m * ff * eb)
        fg = None
        if self.model.activation == "swiglu":
            fg = self.alloc(f"fg.L{l}.s{s}", m * ff * eb)
            self.gemm(p + "ffn_gate", hb, m, d, ff, self.plan.tensors[p + "ffn_gate_w"],
                      [(0, ff, fg, 0, ff)])
        self.gemm(p + "ffn1", hb, m, d, ff, self.plan.tensors[p + "ffn1_w"], [(0, ff, f1, 0, ff)])
        self.free(hb)
        snap1 = dict(f1.writes)
        snapg = dict(fg.writes) if fg is not None else {}
        if self.model.mlp_bias:
            for name, buf, sn in ((("ffn_gate", fg, snapg),) if fg is not None else ()) + (
                    ("ffn1", f1, snap1),):
                B.set_op(p + name + "_bias")
                bb = self.load_param(p + name + "_b", dv0)
                for vu, r0, r1 in self.iter_chunks(s, chunks, base):
                    self.add_rows(vu, buf, buf, bb, sn, bb.writes, r0, r1, ff, bcast=True)
                self.free(bb)
        # activation, then re-block for FFN2
        B.set_op(p + "ffn_act")
        fb = self.alloc(f"fb.L{l}.s{s}", m * ff * eb)
        act = self.model.activation
        for vu, r0, r1 in self.iter_chunks(s, chunks, base):
            sv = self.s_vu(vu)
            if act == "gelu":
                self.ins(sv, "VU_GELU", reads=[(f1, snap1)], writes=[f1], role="in",
                         dst=f1.addr + r0 * ff * eb, src=f1.addr + r0 * ff * eb, rows=r1 - r0,
                         cols=ff, dtype=dt, form="tanh")
            elif act == "swiglu":
                assert fg is not None
                self.ins(sv, "VU_SILU", reads=[(fg, snapg)], writes=[fg],
                         dst=fg.addr + r0 * ff * eb, src=fg.addr + r0 * ff * eb, rows=r1 - r0,
                         cols=ff, dtype=dt)
                self.ins(sv, "VU_MUL", reads=[(fg, {}), (f1, snap1)], writes=[f1], role="in",
                         dst=f1.addr + r0 * ff * eb, a=fg.addr + r0 * ff * eb,
                         b=f1.addr + r0 * ff * eb, rows=r1 - r0, cols=ff, bcast=0, dtype=dt)
            else:  # pragma: no cover - placement rejects it first
                raise UnsupportedError(f"activation '{act}' has no vector instruction")
            self.reblock(vu, f1, {}, fb, m, ff, r0, r1)
        self.free(f1)
        self.free(fg)
        # FFN2, all-reduce, residual, store
        f2 = self.alloc(f"f2.L{l}.s{s}", m * d * eb)
        self.gemm(p + "ffn2", fb, m, ff, d, self.plan.tensors[p + "ffn2_w"], [(0, d, f2, 0, d)])
        self.free(fb)
        if ctx.tp > 1:
            self.allreduce(p + "ffn_allreduce", f2, m * d * eb)
        snap2 = dict(f2.writes)
        B.set_op(p + "ffn_residual")
        bb = self.load_param(p + "ffn2_b", dv0) if self.model.mlp_bias else None
        out_t = self.plan.tensors[f"hidden.{l + 1}"]
        out = self.hbm(f"hidden.{l + 1}")
        for vu, r0, r1 in self.iter_chunks(s, chunks, base):
            self.add_rows(vu, f2, f2, h1, snap2, {}, r0, r1, d, role="in")
            if bb is not None:
                self.add_rows(vu, f2, f2, bb, {}, bb.writes, r0, r1, d, bcast=True)
            self.ins(self.s_dv(vu), "DMA_STORE", reads=[(f2, {self.s_vu(vu): self.B.stream_len(
                     self.s_vu(vu)) - 1})], writes=[out], role="out",
                     spad=f2.addr + r0 * d * eb, hbm=out_t.addr + (row0 + r0) * d * eb,
                     rows=r1 - r0, cols=d, stride=d * eb, dtype=dt)
        self.free(bb)
        self.free(f2)
        self.free(h1)

    def allreduce(self, op: str, buf: Buf, nbytes: int) -> None:
        """Tensor-parallel all-reduce of ``buf`` (in place, ``nbytes`` bytes per device): one
        ``ALL_REDUCE`` (ring over the ``tp`` devices) on the link stream."""
        self.B.set_op(op)
        self.ins(self.s_link, "ALL_REDUCE", reads=[buf], writes=[buf], role="inout",
                 bytes=int(nbytes), group=int(self.ctx.tp), algo="ring")

    def handoff(self, direction: str, boundary: int, peer: int) -> None:
        """Pipeline-parallel hand-off of ``hidden.{boundary}`` (every token row, ``d_model``
        elements each) with stage ``peer``: ``direction`` ``recv`` (the program's input,
        before its first layer reads it) or ``send`` (its output, after the last store).
        Belongs to no layer and no schedule stage."""
        B = self.B
        B.set_layer(None)
        B.set_stage(None)
        B.set_part(-1)
        B.set_op(f"pipeline_{direction}")
        t = self.plan.tensors[f"hidden.{boundary}"]
        buf = self.hbm(f"hidden.{boundary}")
        nbytes = int(t.shape[0]) * int(t.shape[1]) * t.elem_bytes
        if direction == "recv":
            self.ins(self.s_link, "RECV", writes=[buf], role="out", bytes=nbytes, peer=peer)
        else:
            self.ins(self.s_link, "SEND", reads=[buf], role="in", bytes=nbytes, peer=peer)

    # ------------------------------------------------------------------ attention
    def emit_attn(self, l: int, s: int) -> None:
        """Decode attention of layer ``l`` for sub-batch ``s`` (PIM or NPU per placement)."""
        ctx = self.ctx
        m = ctx.rows_per_sub(s)
        if m == 0:
            return
        st = self.subs[(l, s)]
        self.B.set_part(part_tag(s))
        members = ctx.members(s)
        if ctx.phase == "prefill":
            self._attn_prefill(l, s, members)
            return
        st.ao = self.alloc(f"ao.L{l}.s{s}", m * self.Hq * self.hd * self.eb)
        if ctx.attention_on_pim:
            self._attn_pim(l, s, st, members)
        else:
            self._attn_npu(l, s, st, members)
        self.free(st.qk)
        st.qk = st.v = None

    def _ao_copy(self, vu: int, src: Buf, src_stride: int, ao: Buf, m: int, rho: int,
                 heads: range, role: str = "out", src_dtype: str = "fp32") -> None:
        """Copy ``[len(heads), hd]`` rows (row stride ``src_stride`` elements) of one request
        into the blocked projection input ``ao`` at row ``rho``."""
        H, hd, eb, dt = self.H, self.hd, self.eb, self.dt
        K = self.Hq * hd
        segs: list[tuple[int, int, int]] = []   # (head index in src, col start, length)
        for k, h in enumerate(heads):
            c, e = h * hd, h * hd + hd
            while c < e:
                kb = c // H
                n = min(e, (kb + 1) * H) - c
                segs.append((k, c, n))
                c += n
        i = 0
        while i < len(segs):
            k, c, n = segs[i]
            kb = c // H
            kh = min(H, K - kb * H)
            j = i + 1
            # merge whole heads that follow contiguously in the same block
            while (n == hd and j < len(segs) and segs[j][2] == hd and segs[j][0] == k + (j - i)
                   and segs[j][1] == c + (j - i) * hd and segs[j][1] // H == kb):
                j += 1
            rows = j - i
            self.ins(self.s_vu(vu), "VU_COPY", reads=[src], writes=[ao], role=role,
                     dst=ao.addr + (m * H * kb + rho * kh + (c - kb * H)) * eb,
                     src=src.addr + (k * src_stride + (c - heads[k] * hd)) * DTYPE_BYTES[
                         src_dtype], rows=rows, cols=n,
                     src_stride=src_stride, dst_stride=n, dtype=src_dtype, out_dtype=dt)
            i = j

    def unit_heads(self) -> int:
        """KV heads of one PIM attention *unit*: a union of whole key row chunks and whole value
        groups (lcm of the two, at most all KV heads). A request's attention is done unit by
        unit, so the per-channel buffers scale with the unit, not with all heads."""
        lay = self.plan.pim_layout
        assert lay is not None
        return min(self.Hkv, math.lcm(lay.heads_per_key_row, lay.slots))

    def _attn_pim(self, l: int, s: int, st: SubState, members: list[int]) -> None:
        plan = self.plan
        uh = self.unit_heads()
        by_ch: dict[int, list[tuple[int, int, int]]] = {}
        for i in members:
            for k0 in range(0, self.Hkv, uh):
                by_ch.setdefault(plan.kv[(l, i)].channel, []).append(
                    (i, k0, min(k0 + uh, self.Hkv)))
        chans = sorted(by_ch)
        depth = max(len(v) for v in by_ch.values())
        state: dict[tuple[int, int, int], tuple] = {}
        appended: set[int] = set()
        for k in range(depth + 2):
            # KV appends of the requests that start at this depth, one per channel: their
            # stores are interleaved instruction by instruction across channels, so that the
            # channels absorb them in parallel (a request's append is ~1 K scattered bursts into
            # ONE channel; issued request by request, each DMA stream would stall on that
            # channel's full command queue while the other channels idle)
            cohort = []
            for c in chans:
                if k < len(by_ch[c]) and by_ch[c][k][0] not in appended:
                    appended.add(by_ch[c][k][0])
                    cohort.append(self._kv_append_pim(l, by_ch[c][k][0], c, st))
            while cohort:
                cohort = [g for g in cohort if next(g, None) is not None]
            for c in chans:
                if k < len(by_ch[c]):
                    unit = by_ch[c][k]
                    sl = self.slots_for(c, self.ctx.seq_max_on_channel(c))[k % 2]
                    self._qk_pim(l, unit, c, st, sl)
                    state[unit] = (c, sl)
            for c in chans:
                if 0 <= k - 1 < len(by_ch[c]):
                    unit = by_ch[c][k - 1]
                    self._softmax_pv_pim(l, unit, *state[unit])
            for c in chans:
                if 0 <= k - 2 < len(by_ch[c]):
                    unit = by_ch[c][k - 2]
                    self._sum_pim(l, unit, st, *state.pop(unit))

    def _att_vu(self, key: int) -> int:
        return self.att_vus[key % len(self.att_vus)]

    def _kv_append_pim(self, l: int, i: int, c: int, st: SubState):
        """Store request ``i``'s new K and V (this step's token) into its PIM KV layout on
        channel ``c``. A generator: emits one ``DMA_STORE`` per step (yielding True), so that
        :meth:`_attn_pim` can interleave the appends of several channels. V stores are ordered
        row by row (the heads sharing a bank row back to back: row-buffer hits)."""
        ctx, plan = self.ctx, self.plan
        lay = plan.pim_layout
        assert lay is not None and st.qk is not None and st.v is not None
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        part, opname = self.request_part(i), f"L{l}.kv_append.r{rid}"
        stream = self.s_dv(self._att_vu(c))
        kvb = self.hbm(f"kv.L{l}.r{rid}")
        eb, dt, hd, Hq, Hkv = self.eb, self.dt, self.hd, self.Hq, self.Hkv
        rho = ctx.row_in_sub(i)
        qkc = (Hq + Hkv) * hd
        t = kp.seq_len - 1
        g, b = divmod(t, lay.banks)
        for ck in range(lay.key_chunks):
            h0 = ck * lay.heads_per_key_row
            h1 = min(h0 + lay.heads_per_key_row, Hkv)
            pieces = [(h0, h1)] if lay.head_stride == hd else [(h, h + 1) for h in range(h0, h1)]
            for a, e in pieces:
                hbm = plan.pim_addr(c, kp.key_row + lay.key_row(g, ck), b,
                                    (a - h0) * lay.head_stride)
                self.B.set_part(part)
                self.B.set_op(opname)
                self.ins(stream, "DMA_STORE", reads=[st.qk], writes=[kvb], role="inout",
                         spad=st.qk.addr + (rho * qkc + Hq * hd + a * hd) * eb, hbm=hbm, rows=1,
                         cols=(e - a) * hd, stride=0, dtype=dt)
                yield True
        stride = self._bank_stride
        if stride is None:
            raise UnsupportedError("PIM KV append needs a constant address distance between "
                                   "consecutive banks; address_mapping "
                                   f"'{ctx.cfg.memory.controller.address_mapping}' has none")
        u, tt = divmod(t, lay.run)
        for gv in range(ceil_div(Hkv, lay.slots)):
            for j in range(lay.dim_tiles):
                nd = min(lay.banks, hd - j * lay.banks)
                for h in range(gv * lay.slots, min(Hkv, (gv + 1) * lay.slots)):
                    si = h - gv * lay.slots
                    hbm = plan.pim_addr(c, kp.value_row + lay.value_row(u, gv, j), 0,
                                        si * lay.run + tt)
                    self.B.set_part(part)
                    self.B.set_op(opname)
                    self.ins(stream, "DMA_STORE", reads=[st.v], writes=[kvb], role="inout",
                             spad=st.v.addr + (rho * Hkv * hd + h * hd + j * lay.banks) * eb,
                             hbm=hbm, rows=nd, cols=1, stride=stride, dtype=dt)
                    yield True

    def _qk_pim(self, l: int, unit: tuple[int, int, int], c: int, st: SubState,
                sl: Slot) -> None:
        """q.K^T of KV heads ``[k0, k1)`` of request ``i`` on channel ``c`` into ``sl.sc``
        (fp32 ``[(k1-k0)*q_per_kv, lp]``, row = query head - k0*q_per_kv)."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1 = unit
        lay = plan.pim_layout
        assert lay is not None and st.qk is not None
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        B.set_part(self.unit_part(unit))
        B.set_op(f"L{l}.attn_score.r{rid}")
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        L = kp.seq_len
        lp = lay.scores_cols(L)
        rho = ctx.row_in_sub(i)
        qkc = (Hq + Hkv) * hd
        pim = self.s_pim(c)
        vu = self.s_vu(self._att_vu(c))
        kvb = self.hbm(f"kv.L{l}.r{rid}")
        sl.sc.new_gen()
        sl.stage.new_gen()
        G = lay.token_groups(L)
        ncomp = ceil_div(hd, lay.mults)
        hpr = lay.heads_per_key_row
        for ck in range(k0 // hpr, ceil_div(k1, hpr)):
            h0 = ck * hpr
            nh = min(hpr, Hkv - h0)
            for gi in range(qpk):
                hq0 = h0 * qpk + gi
                if qpk == 1 and lay.head_stride == hd:
                    src_buf, src = st.qk, st.qk.addr + (rho * qkc + hq0 * hd) * eb
                else:
                    src_buf = sl.stage
                    src = sl.stage.addr + ((ck - k0 // hpr) * qpk + gi) * lay.page_elems * eb
                    self.ins(vu, "VU_COPY", reads=[st.qk], writes=[sl.stage],
                             dst=src, src=st.qk.addr + (rho * qkc + hq0 * hd) * eb, rows=nh,
                             cols=hd, src_stride=qpk * hd, dst_stride=lay.head_stride, dtype=dt,
                             out_dtype=dt)
                self.ins(pim, "GWRITE", reads=[src_buf], channel=c, src=src,
                         len=nh * lay.head_stride, dtype=dt)
                for g in range(G):
                    valid = min(lay.banks, L - g * lay.banks)
                    # no WAIT while the PIM row is open (refresh is postponed meanwhile)
                    self.wait_for(pim, reads=[kvb], writes=[sl.sc])
                    self.ins(pim, "PIM_HEADER", channel=c, n_gemvs=nh)
                    self.ins(pim, "G_ACT", reads=[kvb], role="in", channel=c,
                             row=kp.key_row + lay.key_row(g, ck), bg_mask=0)
                    for k in range(nh):
                        r = (h0 + k - k0) * qpk + gi
                        self.ins(pim, "PIM_GEMV", writes=[sl.sc], role="out", macs=valid * hd,
                                 channel=c, col=k * lay.head_stride // lay.mults,
                                 n_comps=ncomp, dst=sl.sc.addr + (r * lp + g * lay.banks) * 4,
                                 dtype=dt, out_dtype="fp32")
                    self.ins(pim, "PIM_PRECHARGE", channel=c, bg_mask=0)

    def _softmax_pv_pim(self, l: int, unit: tuple[int, int, int], c: int, sl: Slot) -> None:
        """Softmax of the unit's score rows, probability gathers, and p.V on PIM into
        ``sl.part`` (fp32 ``[runs, rows, dim_tiles*B]``)."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1 = unit
        lay = plan.pim_layout
        assert lay is not None
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        eb, dt, hd, qpk = self.eb, self.dt, self.hd, self.qpk
        rows = (k1 - k0) * qpk
        L = kp.seq_len
        lp = lay.scores_cols(L)
        vu = self.s_vu(self._att_vu(c))
        pim = self.s_pim(c)
        kvb = self.hbm(f"kv.L{l}.r{rid}")
        B.set_part(self.unit_part(unit))
        B.set_op(f"L{l}.attn_softmax.r{rid}")
        _check_stride(lp, "softmax")
        self.ins(vu, "VU_SCALE", reads=[sl.sc], writes=[sl.sc], role="in", dst=sl.sc.addr,
                 src=sl.sc.addr, rows=rows, cols=lp, dtype="fp32", imm=1.0 / math.sqrt(hd))
        self.ins(vu, "VU_SOFTMAX", reads=[sl.sc], writes=[sl.sc], role="out", dst=sl.sc.addr,
                 src=sl.sc.addr, rows=rows, cols=lp, dtype="fp32", mask="length", len=L)
        B.set_op(f"L{l}.attn_context.r{rid}")
        U = lay.runs(L)
        R = lay.run
        sl.stage.new_gen()
        sl.part.new_gen()
        dkp = lay.dim_tiles * lay.banks
        idx = 0
        todo = []
        for u in range(U):
            valid = min(R, L - u * R)
            for gv in range(k0 // lay.slots, ceil_div(k1, lay.slots)):
                g0 = gv * lay.slots
                ns = min(k1, g0 + lay.slots) - g0
                for gi in range(qpk):
                    r0 = (g0 - k0) * qpk + gi
                    dst = sl.stage.addr + idx * lay.page_elems * eb
                    _check_stride(qpk * lp, "gather")
                    self.ins(vu, "VU_COPY", reads=[sl.sc], writes=[sl.stage], role="in",
                             dst=dst, src=sl.sc.addr + (r0 * lp + u * R) * 4, rows=ns, cols=R,
                             src_stride=qpk * lp, dst_stride=R, dtype="fp32", out_dtype=dt)
                    todo.append((u, valid, gv, g0, ns, gi, dst))
                    idx += 1
        for u, valid, gv, g0, ns, gi, dst in todo:
            self.ins(pim, "GWRITE", reads=[sl.stage], channel=c, src=dst, len=ns * R, dtype=dt)
            for j in range(lay.dim_tiles):
                nd = min(lay.banks, hd - j * lay.banks)
                # no WAIT while the PIM row is open (refresh is postponed meanwhile)
                self.wait_for(pim, reads=[kvb], writes=[sl.part])
                self.ins(pim, "PIM_HEADER", channel=c, n_gemvs=ns)
                self.ins(pim, "G_ACT", reads=[kvb], role="in", channel=c,
                         row=kp.value_row + lay.value_row(u, gv, j), bg_mask=0)
                for k in range(ns):
                    r = (g0 + k - k0) * qpk + gi
                    self.ins(pim, "PIM_GEMV", writes=[sl.part], macs=valid * nd, channel=c,
                             col=k * R // lay.mults, n_comps=ceil_div(valid, lay.mults),
                             dst=sl.part.addr + ((u * rows + r) * dkp + j * lay.banks) * 4,
                             dtype=dt, out_dtype="fp32")
                self.ins(pim, "PIM_PRECHARGE", channel=c, bg_mask=0)

    def _sum_pim(self, l: int, unit: tuple[int, int, int], st: SubState, c: int,
                 sl: Slot) -> None:
        """Add the run partials of the unit and copy its heads into the projection input."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1 = unit
        lay = plan.pim_layout
        assert lay is not None and st.ao is not None
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        B.set_part(self.unit_part(unit))
        B.set_op(f"L{l}.attn_context.r{rid}")
        rows = (k1 - k0) * self.qpk
        vu = self._att_vu(c)
        dkp = lay.dim_tiles * lay.banks
        for u in range(1, lay.runs(kp.seq_len)):
            self.ins(self.s_vu(vu), "VU_ADD", reads=[sl.part], writes=[sl.part], dst=sl.part.addr,
                     a=sl.part.addr, b=sl.part.addr + u * rows * dkp * 4, rows=rows, cols=dkp,
                     bcast=0, dtype="fp32")
        self._ao_copy(vu, sl.part, dkp, st.ao, ctx.rows_per_sub(ctx.sub_of(i)),
                      ctx.row_in_sub(i), range(k0 * self.qpk, k1 * self.qpk))

    def _attn_npu(self, l: int, s: int, st: SubState, members: list[int]) -> None:
        """Decode attention on the NPU's vector units through the memory bus (streaming KV).

        Per request (requests dealt round-robin to the attention VUs, each with its DMA queue):
        KV append (2 strided DMA stores), per KV head a DMA of its K block and one ``VU_DOT``
        per query head (scores, fp32), one ``VU_SCALE`` + ``VU_SOFTMAX`` over all heads, a
        ``VU_COPY`` of the probabilities to the model dtype, per KV head a DMA of its V block and
        per run of ``value_run`` tokens one ``VU_DOT`` per query head (fp32 partials, PIM
        reduction order), ``VU_ADD`` of the run partials in run order, and the copy into the
        projection input: the same arithmetic, in the same order, as the PIM path.
        """
        ctx, plan, B = self.ctx, self.plan, self.B
        assert st.qk is not None and st.v is not None and st.ao is not None
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        qkc = (Hq + Hkv) * hd
        m = ctx.rows_per_sub(s)
        nl = len(self.att_vus)
        R = ctx.value_run
        seq_max = int(ctx.seq.max())
        for n, i in enumerate(members):
            lane = n % nl
            vu = self.att_vus[lane]
            sv, sd = self.s_vu(vu), self.s_dv(vu)
            lb = self.lane_buffers(lane, seq_max)
            sl = lb["slots"][lb["next"] % 2]
            lb["next"] += 1
            kp = plan.kv[(l, i)]
            rid = ctx.request_id(i)
            L = kp.seq_len
            U = ceil_div(L, R)
            rho = ctx.row_in_sub(i)
            kvb = self.hbm(f"kv.L{l}.r{rid}")
            blk = kp.block_bytes(hd, eb)
            B.set_part(self.request_part(i))
            B.set_op(f"L{l}.kv_append.r{rid}")
            self.ins(sd, "DMA_STORE", reads=[st.qk], writes=[kvb], role="inout",
                     spad=st.qk.addr + (rho * qkc + Hq * hd) * eb,
                     hbm=kp.addr + (L - 1) * hd * eb, rows=Hkv, cols=hd, stride=blk, dtype=dt)
            self.ins(sd, "DMA_STORE", reads=[st.v], writes=[kvb], role="inout",
                     spad=st.v.addr + rho * Hkv * hd * eb,
                     hbm=kp.addr + Hkv * blk + (L - 1) * hd * eb, rows=Hkv, cols=hd, stride=blk,
                     dtype=dt)
            B.set_op(f"L{l}.attn_score.r{rid}")
            sl.sc.new_gen()
            for h in range(Hkv):
                kb = lb["kv"][lb["kvnext"] % 2]
                lb["kvnext"] += 1
                kb.new_gen()
                self.ins(sd, "DMA_LOAD", reads=[kvb], writes=[kb], spad=kb.addr,
                         hbm=kp.addr + h * blk, rows=L, cols=hd, stride=hd * eb, dtype=dt)
                for gi in range(qpk):
                    hq = h * qpk + gi
                    self.ins(sv, "VU_DOT", reads=[kb, st.qk], writes=[sl.sc], role="inout",
                             macs=L * hd, dst=sl.sc.addr + hq * L * 4, mat=kb.addr,
                             vec=st.qk.addr + (rho * qkc + hq * hd) * eb, rows=L, cols=hd,
                             trans=0, dtype=dt, out_dtype="fp32", order="pim")
            B.set_op(f"L{l}.attn_softmax.r{rid}")
            self.ins(sv, "VU_SCALE", reads=[sl.sc], writes=[sl.sc], role="in", dst=sl.sc.addr,
                     src=sl.sc.addr, rows=Hq, cols=L, dtype="fp32", imm=1.0 / math.sqrt(hd))
            self.ins(sv, "VU_SOFTMAX", reads=[sl.sc], writes=[sl.sc], role="out",
                     dst=sl.sc.addr, src=sl.sc.addr, rows=Hq, cols=L, dtype="fp32",
                     mask="none", len=0)
            B.set_op(f"L{l}.attn_context.r{rid}")
            sl.stage.new_gen()
            sl.part.new_gen()
            self.ins(sv, "VU_COPY", reads=[sl.sc], writes=[sl.stage], role="in",
                     dst=sl.stage.addr, src=sl.sc.addr, rows=Hq, cols=L, src_stride=0,
                     dst_stride=0, dtype="fp32", out_dtype=dt)
            for h in range(Hkv):
                vb = lb["kv"][lb["kvnext"] % 2]
                lb["kvnext"] += 1
                vb.new_gen()
                self.ins(sd, "DMA_LOAD", reads=[kvb], writes=[vb], spad=vb.addr,
                         hbm=kp.addr + (Hkv + h) * blk, rows=L, cols=hd, stride=hd * eb,
                         dtype=dt)
                # p.V run by run (as PIM does), partials added in run order: bit-identical
                for u in range(U):
                    valid = min(R, L - u * R)
                    for gi in range(qpk):
                        hq = h * qpk + gi
                        self.ins(sv, "VU_DOT", reads=[vb, sl.stage], writes=[sl.part],
                                 macs=valid * hd, dst=sl.part.addr + (u * Hq + hq) * hd * 4,
                                 mat=vb.addr + u * R * hd * eb,
                                 vec=sl.stage.addr + (hq * L + u * R) * eb, rows=valid,
                                 cols=hd, trans=1, dtype=dt, out_dtype="fp32", order="pim")
            for u in range(1, U):
                self.ins(sv, "VU_ADD", reads=[sl.part], writes=[sl.part], dst=sl.part.addr,
                         a=sl.part.addr, b=sl.part.addr + u * Hq * hd * 4, rows=Hq, cols=hd,
                         bcast=0, dtype="fp32")
            self._ao_copy(vu, sl.part, hd, st.ao, m, rho, range(Hq))

    def _attn_prefill(self, l: int, s: int, members: list[int]) -> None:
        """Prefill attention of layer ``l``, sub-batch ``s``, on the systolic arrays.

        Work units are ``(request, KV head)`` pairs, dealt round-robin to attention *lanes*
        (a vector unit, its DMA queue and its own buffers), so that one long prompt keeps the
        vector units busy and not only one. Lanes: the attention VUs (every VU with one
        sub-batch, as in prefill: the GEMM chain waits for attention then), fewer when their
        buffers (≈ ``2·L·head_dim + 3·128·L`` elements each for the longest prompt ``L``)
        would take more than half the scratchpad (the rest is the GEMM chain's); at least one.

        Per unit, on its lane: ``V_h`` and ``K_h`` ``[L, head_dim]`` are loaded from
        ``pf_qkv`` (``V_h`` is the ``O = P V`` weight tiles as is); the unit's KV append is
        queued (PIM layout: ``V_h`` transposed, one store per run and dimension tile of a
        packed ``[dims, tokens]`` tile, and the unit's share of the request's K: slabs ``k``
        with ``k % kv_heads == h`` of up to :data:`PREFILL_SLAB_BYTES` of K rows ``[tokens,
        heads of a key chunk × head_dim]``, each stored one token group per strided store
        across banks; streaming layout: ``K_h`` and ``V_h``, one store each); ``K_h`` is
        transposed block by block of W keys into ``K_h^T`` tiles (``VU_TRANSPOSE``); and per
        query head of the group and tile of up to ``PREFILL_Q_TILE`` query rows: the query
        tile is loaded, ``S = Q K^T`` on an array (tile by tile of W keys, fp32), ``VU_SCALE``
        and causal ``VU_SOFTMAX``, ``P`` re-blocked in the model dtype, ``O = P V``
        accumulated over blocks of H keys, and ``O`` stored to ``pf_ao``. Nothing in the layer
        reads the cache, so attention does not wait for the cache stores (bound by the one
        channel holding the request's KV cache in the PIM layout); they only occupy the lane's
        DMA queue ahead of its query tiles. (Queued after the attention instead, they collided
        with the FFN's weight loads on that channel: 578 k instead of 440 k cycles for a
        512-token layer.) Scores are computed for all keys (masked ones included), like the
        operator graph counts them; K and V are read from HBM twice (append and attention).

        Raises:
            UnsupportedError: ``head_dim`` larger than the array, not a whole number of COMP
                steps (PIM layout), or banks not a constant address distance apart.
        """
        ctx, plan, B = self.ctx, self.plan, self.B
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        H, W = self.H, self.W
        if hd > H or hd > W:
            raise UnsupportedError(f"prefill attention: head_dim {hd} larger than the array "
                                   f"({H}x{W})")
        if not members:
            return
        N = (Hq + 2 * Hkv) * hd
        qkc = (Hq + Hkv) * hd
        K = Hq * hd
        tq, to = plan.tensors["pf_qkv"], plan.tensors["pf_ao"]
        src, dst = self.hbm(f"pf_qkv.s{s}"), self.hbm(f"pf_ao.s{s}")
        dst.new_gen()
        B.set_part(part_tag(s))
        row0 = ctx.sub_row0(s)
        lay = plan.pim_layout
        if lay is not None:
            if lay.head_stride != hd:
                raise UnsupportedError(f"prefill KV append: head_dim {hd} is not a whole number "
                                       f"of {lay.mults}-element COMP steps")
            if self._bank_stride is None:
                raise UnsupportedError("PIM KV append needs a constant address distance "
                                       "between consecutive banks")
        # ---- lanes and their buffers, sized for the longest prompt
        Lmax = max(plan.kv[(l, i)].seq_len for i in members)
        mq_max = min(Lmax, PREFILL_Q_TILE)
        nb_max, kb_max = ceil_div(Lmax, W), ceil_div(Lmax, H)
        sizes = {"v": Lmax * hd * eb, "ktile": nb_max * hd * W * eb, "q": mq_max * hd * eb,
                 "sblk": nb_max * mq_max * W * 4, "srow": mq_max * Lmax * 4,
                 "pblk": kb_max * mq_max * H * eb, "o": mq_max * hd * 4,
                 "otile": mq_max * hd * eb}
        per_lane = sum(sizes.values())
        vus = self.att_vus if ctx.n_sub > 1 else list(range(self.V))
        n_lanes = max(1, min(len(vus), Hkv * len(members),
                             ctx.cfg.npu.scratchpad.size_bytes // 2 // per_lane))
        lanes = [{k: self.alloc(f"pf{k}.{j}", n) for k, n in sizes.items()}
                 for j in range(n_lanes)]
        units = [(i, h) for i in members for h in range(Hkv)]
        for u, (i, h) in enumerate(units):
            j = u % n_lanes
            lb = lanes[j]
            sv, sd = self.s_vu(vus[j]), self.s_dv(vus[j])
            kp = plan.kv[(l, i)]
            rid = ctx.request_id(i)
            L = kp.seq_len
            mq = min(L, PREFILL_Q_TILE)
            nq = ceil_div(L, mq)
            NB, KB = ceil_div(L, W), ceil_div(L, H)
            r = row0 + ctx.row_in_sub(i)
            kvb = self.hbm(f"kv.L{l}.r{rid}")
            kcol0 = tq.addr + (r * N + Hq * hd) * eb        # K_0 of the request's first token
            vcol0 = tq.addr + (r * N + qkc) * eb            # V_0 of it
            B.set_part(part_tag(s, unit=h * qpk * nq + 1))
            vh, ktile = lb["v"], lb["ktile"]
            vh.new_gen()
            kh = self.alloc(f"k.r{rid}.h{h}", L * hd * eb)     # [L, hd]
            for op, b, col in (("kv_append", vh, vcol0), ("attn_score", kh, kcol0)):
                B.set_op(f"L{l}.{op}.r{rid}")
                self.ins(sd, "DMA_LOAD", reads=[src], writes=[b], role="in", spad=b.addr,
                         hbm=col + h * hd * eb, rows=L, cols=hd, stride=N * eb, dtype=dt)
            # ---- KV append of the unit (its share of the request's K in the PIM layout)
            B.set_op(f"L{l}.kv_append.r{rid}")
            if lay is not None:
                self._v_store_pim_prefill(sv, sd, kp, kvb, vh, h)
                self._k_store_pim_prefill(sd, kp, kvb, src, kcol0, N * eb, h, Hkv)
            else:
                blk = kp.block_bytes(hd, eb)
                for which, b in ((0, kh), (1, vh)):
                    self.ins(sd, "DMA_STORE", reads=[b], writes=[kvb], role="out",
                             spad=b.addr, hbm=kp.addr + (which * Hkv + h) * blk, rows=L,
                             cols=hd, stride=hd * eb, dtype=dt)
            B.set_op(f"L{l}.attn_score.r{rid}")
            ktile.new_gen()
            for nb in range(NB):
                wn = min(W, L - nb * W)
                self.ins(sv, "VU_TRANSPOSE", reads=[kh], writes=[ktile], role="in",
                         dst=ktile.addr + nb * hd * W * eb, src=kh.addr + nb * W * hd * eb,
                         rows=wn, cols=hd, dtype=dt)
            self.free(kh)
            # ---- per query head of the group and query tile
            qb, sblk, srow, pblk = lb["q"], lb["sblk"], lb["srow"], lb["pblk"]
            ob, otile = lb["o"], lb["otile"]
            for hq in range(h * qpk, (h + 1) * qpk):
                for q0 in range(0, L, mq):
                    m = min(mq, L - q0)
                    B.set_part(part_tag(s, unit=hq * nq + q0 // mq + 1))
                    a = self._prefill_array
                    self._prefill_array = (a + 1) % self.A
                    sa = self.s_sa(a)
                    B.set_op(f"L{l}.attn_score.r{rid}")
                    qb.new_gen()
                    self.ins(sd, "DMA_LOAD", reads=[src], writes=[qb], role="in",
                             spad=qb.addr, hbm=tq.addr + ((r + q0) * N + hq * hd) * eb,
                             rows=m, cols=hd, stride=N * eb, dtype=dt)
                    sblk.new_gen()
                    for nb in range(NB):
                        wn = min(W, L - nb * W)
                        self.ins(sa, "SA_LOADW", reads=[ktile], array=a,
                                 w=ktile.addr + nb * hd * W * eb, k=hd, n=wn, dtype=dt)
                        self.ins(sa, "SA_MATMUL", reads=[qb], writes=[sblk], role="in",
                                 macs=m * hd * wn, array=a, src=qb.addr,
                                 dst=sblk.addr + nb * mq * W * 4, m=m, n=wn, k=hd, acc=0,
                                 dtype=dt, out_dtype="fp32")
                    srow.new_gen()
                    for nb in range(NB):
                        wn = min(W, L - nb * W)
                        self.ins(sv, "VU_COPY", reads=[sblk], writes=[srow], role="out",
                                 dst=srow.addr + nb * W * 4, src=sblk.addr + nb * mq * W * 4,
                                 rows=m, cols=wn, src_stride=wn, dst_stride=L, dtype="fp32",
                                 out_dtype="fp32")
                    B.set_op(f"L{l}.attn_softmax.r{rid}")
                    self.ins(sv, "VU_SCALE", reads=[srow], writes=[srow], role="in",
                             dst=srow.addr, src=srow.addr, rows=m, cols=L, dtype="fp32",
                             imm=1.0 / math.sqrt(hd))
                    self.ins(sv, "VU_SOFTMAX", reads=[srow], writes=[srow], role="out",
                             dst=srow.addr, src=srow.addr, rows=m, cols=L, dtype="fp32",
                             mask="causal", len=q0)
                    B.set_op(f"L{l}.attn_context.r{rid}")
                    pblk.new_gen()
                    for kb in range(KB):
                        kn = min(H, L - kb * H)
                        self.ins(sv, "VU_COPY", reads=[srow], writes=[pblk], role="in",
                                 dst=pblk.addr + kb * mq * H * eb, src=srow.addr + kb * H * 4,
                                 rows=m, cols=kn, src_stride=L, dst_stride=kn, dtype="fp32",
                                 out_dtype=dt)
                    ob.new_gen()
                    for kb in range(KB):
                        kn = min(H, L - kb * H)
                        self.ins(sa, "SA_LOADW", reads=[vh], array=a,
                                 w=vh.addr + kb * H * hd * eb, k=kn, n=hd, dtype=dt)
                        self.ins(sa, "SA_MATMUL", reads=[pblk], writes=[ob], macs=m * kn * hd,
                                 array=a, src=pblk.addr + kb * mq * H * eb, dst=ob.addr, m=m,
                                 n=hd, k=kn, acc=int(kb > 0), dtype=dt, out_dtype="fp32")
                    otile.new_gen()
                    self.ins(sv, "VU_COPY", reads=[ob], writes=[otile], dst=otile.addr,
                             src=ob.addr, rows=m, cols=hd, src_stride=0, dst_stride=0,
                             dtype="fp32", out_dtype=dt)
                    self.ins(sd, "DMA_STORE", reads=[otile], writes=[dst], role="out",
                             spad=otile.addr, hbm=to.addr + ((r + q0) * K + hq * hd) * eb,
                             rows=m, cols=hd, stride=K * eb, dtype=dt)
        for lb in lanes:
            for b in lb.values():
                self.free(b)
        B.set_part(part_tag(s))

    def _k_store_pim_prefill(self, sd: str, kp, kvb: Buf, src: Buf, kcol0: int,
                             row_bytes: int, part: int = 0, n_parts: int = 1) -> None:
        """K half of the KV append of a whole prompt in the PIM layout (see
        :meth:`_attn_prefill`): per key chunk, slabs of whole token groups (at most
        :data:`PREFILL_SLAB_BYTES`, at least one group) are loaded from ``pf_qkv`` (``kcol0``:
        HBM address of K head 0 of the request's first token; ``row_bytes``: the QKV row pitch)
        and stored one token group (``B`` tokens, one per bank) per strided store, on DMA queue
        ``sd``; only the slabs ``k`` with ``k % n_parts == part`` (the request's K append
        shared by its ``n_parts`` attention units). The caller checked the layout (whole COMP
        steps per head, a constant bank stride)."""
        plan = self.plan
        lay = plan.pim_layout
        stride = self._bank_stride
        assert lay is not None and stride is not None
        eb, dt, hd, Hkv = self.eb, self.dt, self.hd, self.Hkv
        L, c = kp.seq_len, kp.channel
        nb_ = lay.banks
        hpr = lay.heads_per_key_row
        groups = lay.token_groups(L)
        k = -1
        for ck in range(lay.key_chunks):
            h0 = ck * hpr
            nh = min(hpr, Hkv - h0)
            gps = max(1, PREFILL_SLAB_BYTES // (nb_ * nh * hd * eb))   # token groups per slab
            for g0 in range(0, groups, gps):
                k += 1
                if k % n_parts != part:
                    continue
                t0 = g0 * nb_
                nt = min(gps * nb_, L - t0)
                slab = self.alloc("kslab", nt * nh * hd * eb)
                self.ins(sd, "DMA_LOAD", reads=[src], writes=[slab], role="in", spad=slab.addr,
                         hbm=kcol0 + t0 * row_bytes + h0 * hd * eb, rows=nt, cols=nh * hd,
                         stride=row_bytes, dtype=dt)
                for g in range(g0, min(groups, g0 + gps)):
                    valid = min(nb_, L - g * nb_)
                    self.ins(sd, "DMA_STORE", reads=[slab], writes=[kvb], role="out",
                             spad=slab.addr + (g - g0) * nb_ * nh * hd * eb,
                             hbm=plan.pim_addr(c, kp.key_row + lay.key_row(g, ck), 0, 0),
                             rows=valid, cols=nh * hd, stride=stride, dtype=dt)
                self.free(slab)

    def _v_store_pim_prefill(self, sv: str, sd: str, kp, kvb: Buf, vh: Buf, h: int) -> None:
        """V half of the KV append in the PIM layout for KV head ``h`` (see
        :meth:`_attn_prefill`): ``vh`` ``[L, head_dim]`` is transposed and stored per run of
        ``value_run`` tokens and dimension tile of ``B`` dims (one per bank) as a packed
        ``[dims, tokens]`` tile."""
        plan = self.plan
        lay = plan.pim_layout
        assert lay is not None
        eb, dt, hd = self.eb, self.dt, self.hd
        L, c = kp.seq_len, kp.channel
        nb_ = lay.banks
        stride = self._bank_stride
        assert stride is not None          # checked by the caller
        vt = self.alloc("vt", hd * L * eb)
        self.ins(sv, "VU_TRANSPOSE", reads=[vh], writes=[vt], dst=vt.addr, src=vh.addr,
                 rows=L, cols=hd, dtype=dt)
        U = lay.runs(L)
        pack = self.alloc("vpack", U * lay.dim_tiles * nb_ * lay.run * eb)
        gv, si = divmod(h, lay.slots)
        k = 0
        for u in range(U):
            valid = min(lay.run, L - u * lay.run)
            for j in range(lay.dim_tiles):
                nd = min(nb_, hd - j * nb_)
                at = pack.addr + k * nb_ * lay.run * eb
                k += 1
                self.ins(sv, "VU_COPY", reads=[vt], writes=[pack], dst=at,
                         src=vt.addr + (j * nb_ * L + u * lay.run) * eb, rows=nd, cols=valid,
                         src_stride=L, dst_stride=valid, dtype=dt, out_dtype=dt)
                self.ins(sd, "DMA_STORE", reads=[pack], writes=[kvb], role="out", spad=at,
                         hbm=plan.pim_addr(c, kp.value_row + lay.value_row(u, gv, j), 0,
                                           si * lay.run),
                         rows=nd, cols=valid, stride=stride, dtype=dt)
        self.free(vt)
        self.free(pack)

    def lane_buffers(self, lane: int, seq_max: int) -> dict:
        """Buffers of NPU attention lane ``lane`` (two request slots, two K/V block buffers),
        sized for requests of up to ``seq_max`` tokens; allocated on first use."""
        lb = self.slots.get(1000 + lane)
        if lb is None:
            eb, hd, Hq = self.eb, self.hd, self.Hq
            U = ceil_div(seq_max, self.ctx.value_run)
            slots = [Slot(self.alloc(f"sc{lane}.{k}", Hq * seq_max * 4),
                          self.alloc(f"p{lane}.{k}", Hq * seq_max * eb),
                          self.alloc(f"out{lane}.{k}", U * Hq * hd * 4)) for k in range(2)]
            kv = [self.alloc(f"kvblk{lane}.{k}", seq_max * hd * eb) for k in range(2)]
            lb = self.slots[1000 + lane] = {"slots": slots, "kv": kv, "next": 0, "kvnext": 0}
        return lb


def _check_stride(cols: int, what: str) -> None:
    if cols > _VU_STRIDE_MAX:
        raise UnsupportedError(f"{what}: a row of {cols} elements exceeds the VU_COPY stride "
                               f"field ({_VU_STRIDE_MAX} elements)")


def _eps_exp(eps: float) -> int:
    """The ``eps_exp`` of VU_LAYERNORM/VU_RMSNORM for ``eps = 10**-eps_exp``."""
    e = round(-math.log10(eps))
    if not 0 <= e <= 15 or abs(10.0 ** -e - eps) > 1e-6 * eps:
        raise UnsupportedError(f"norm epsilon {eps} is not 10**-k for k in 0..15 (the norm "
                               "instructions encode eps as an exponent)")
    return e


__all__ = ["Codegen", "Buf"]
