"""The state every kernel family of :mod:`mapping.codegen` shares: streams, scratchpad
buffers with their hazards, instruction emission with semaphore waits, row chunks and
part tags, vector DMA and parameter loads."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mapping.builder import ROLE_CODE, ProgramBuilder, Template, make_instruction, template
from mapping.errors import UnsupportedError
from mapping.kvlayout import ceil_div
from mapping.memplan import DTYPE_BYTES, HbmPlan, SpadAllocator

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
    """The union of event sets: per stream the highest position (events at positions below
    0 mean nothing and are left out)."""
    first = dicts[0]
    if first and min(first.values()) >= 0:
        out = dict(first)       # a copy in C: the first set is often the largest
        rest = dicts[1:]
    else:
        out, rest = {}, dicts
    for d in rest:
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


class CodegenCore:
    """Shared state and helpers of the code generator (module docstring).

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
        # decode, q|k|v staged: readers of each batch position's row (mapping.codegen.pim_attention)
        self._qkv_uses: dict[int, int] = {}
        # per-kernel sets of templates (the PIM row groups of a channel); single templates:
        # template()
        self.templates: dict = {}
        # PIM attention's row-group patterns by operands (mapping.codegen.pim_attention)
        self._patterns: dict[tuple, object] = {}
        self._pieces: dict[tuple[int, int], list] = {}     # (layer, i) -> attention pieces
        self._request_parts: dict[tuple[int, int], int] = {}   # (i, unit) -> part tag
        self._unit_parts: dict[tuple, int] = {}               # PIM attention item -> part tag

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

    def qkv_row(self, i: int, st: SubState, stream: str, uses: int = 1) -> tuple[Buf, int, int]:
        """Decode: batch position ``i``'s q|k and v in the scratchpad, as ``(buffer, address of
        its q|k row [(Hq + Hkv) head_dim], address of its v row [Hkv head_dim])``.

        q|k|v resident (the default plan): rows of the sub-batch's QKV output. Staged through
        HBM (``ctx.qkv_staged``, :func:`mapping.bufplan.search_buffer_plan`): the first call
        loads the request's ``dq_qkv`` row into a buffer of its own on DMA queue ``stream``
        (role ``in`` of the caller's op); the buffer is freed after ``uses`` calls of
        :meth:`qkv_row_done` (its readers' events).
        """
        ctx = self.ctx
        Hq, Hkv, hd, eb = self.Hq, self.Hkv, self.hd, self.eb
        qkc = (Hq + Hkv) * hd
        rho = ctx.row_in_sub(i)
        if not ctx.qkv_staged:
            assert st.qk is not None and st.v is not None
            return st.qk, st.qk.addr + rho * qkc * eb, st.v.addr + rho * Hkv * hd * eb
        ent = st.extra.get(("qkv", i))
        if ent is None:
            N = qkc + Hkv * hd
            s = ctx.sub_of(i)
            buf = self.alloc(f"qkv.r{ctx.request_id(i)}", N * eb)
            t = self.plan.tensors["dq_qkv"]
            self.dma_vec(stream, "DMA_LOAD", buf.addr,
                         t.addr + (ctx.sub_row0(s) + rho) * N * eb, N, self.dt,
                         reads=[self.hbm(f"dq_qkv.s{s}")], writes=[buf], role="in")
            ent = st.extra[("qkv", i)] = [buf, uses]
        return ent[0], ent[0].addr, ent[0].addr + qkc * eb

    def qkv_row_done(self, i: int, st: SubState) -> None:
        """One reader of :meth:`qkv_row`'s staged row of ``i`` is emitted (no-op when q|k|v
        are resident); the last one frees it."""
        if not self.ctx.qkv_staged:
            return
        ent = st.extra[("qkv", i)]
        ent[1] -= 1
        if ent[1] == 0:
            self.free(ent[0])
            del st.extra[("qkv", i)]

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
        nw = ctx.weight_buffers          # the buffer plan's ring (mapping.bufplan)
        self.wbuf = [[self.alloc(f"w{i}.{k}", self.H * self.W * eb) for k in range(nw)]
                     for i in range(self.A)]
        # the weight ring's hazards, per array and slot: the events after which the slot may
        # be loaded again (its allocation's release, then its last SA_LOADW); the slots' Buf
        # hazard state is not used (mapping.codegen.gemm.GemmChains.gemm)
        self._wfree = [[dict(b.release) for b in ring] for ring in self.wbuf]
        self.acc = [[self.alloc(f"acc{i}.{k}", self.m_max * self.W * 4) for k in range(2)]
                    for i in range(self.A)]
        self._wtog = [0] * self.A
        self._atog = [0] * self.A
        self.slots: dict[int, list[Slot]] = {}
        self.merges: dict[int, dict] = {}
        self._unit_merges: dict[tuple, dict] = {}
        self.attn_bytes = 0
        self.merge_live = self.merge_peak = 0

    def slots_for(self, key: int, tokens: int, lse: bool = False) -> list[Slot]:
        """The two attention buffer slots of PIM channel ``key``, sized for key blocks of up to
        ``tokens`` tokens (with room for the blocks' log-sum-exps when ``lse``; sizes:
        :func:`mapping.bufplan.pim_slot_bytes`), allocated on first use."""
        from mapping.bufplan import pim_slot_bytes

        s = self.slots.get(key)
        if s is not None:
            return s
        lay = self.plan.pim_layout
        assert lay is not None
        sizes = pim_slot_bytes(lay, self.unit_heads(), tokens, lse)
        out = [Slot(*(self.alloc(f"{n}{key}.{k}", sizes[n]) for n in ("sc", "st", "part")))
               for k in range(2)]
        self.attn_bytes += 2 * sum(self._aligned(v) for v in sizes.values())
        self.slots[key] = out
        return out

    @staticmethod
    def _aligned(n: int) -> int:
        from mapping.memplan import SPAD_ALIGN
        return ceil_div(max(int(n), 1), SPAD_ALIGN) * SPAD_ALIGN

    def attention_bytes(self) -> int:
        """Scratchpad bytes held by attention buffers (decode slots, lanes and merge buffers
        allocated so far; the largest set of prefill lanes)."""
        return self.attn_bytes + self.merge_peak

    def block_tokens(self, seq_len: int) -> int:
        """Tokens of a full key block of a request of ``seq_len`` cached tokens: the buffer
        plan's attention block (:mod:`mapping.bufplan`), or ``seq_len`` when shorter."""
        return min(int(seq_len), self.ctx.attn_block)

    def attn_blocks(self, seq_len: int) -> int:
        """Key blocks of a request of ``seq_len`` cached tokens (1: attended in one piece)."""
        return ceil_div(int(seq_len), self.ctx.attn_block)

    # ------------------------------------------------------------------ emission primitive
    def ins(self, stream: str, mnemonic: str, reads=(), writes=(), role: str = "body",
            macs: int = 0, **operands) -> int:
        """Emit one instruction after the waits its buffer accesses need.

        ``reads`` items are :class:`Buf` (wait for all its writes) or ``(Buf, events)`` (wait
        for the given events only, e.g. the writes this instruction's rows depend on);
        ``writes`` items are :class:`Buf` (wait for its release). Returns the position.
        """
        return self.put(stream, make_instruction(mnemonic, operands), reads, writes,
                        ROLE_CODE[role], macs)

    @staticmethod
    def template(mnemonic: str, **fixed) -> Template:
        """The :class:`mapping.builder.Template` of ``mnemonic`` with operands ``fixed`` (made
        once per process: :func:`mapping.builder.template`)."""
        return template(mnemonic, **fixed)

    def put(self, stream: str, instr, reads=(), writes=(), role: int = 0,
            macs: int = 0) -> int:
        """:meth:`ins` of the built instruction ``instr`` (from
        :func:`mapping.builder.make_instruction` or a :class:`mapping.builder.Template`),
        ``role`` an index into :data:`mapping.builder.ROLES`. Returns the position."""
        if type(macs) is not int:
            macs = int(macs)
        if reads or writes:
            self.wait_for(stream, reads, writes)
            pos = self.B.append(stream, instr, role, macs)
            self.accessed(stream, pos, reads, writes)
            return pos
        return self.B.append(stream, instr, role, macs)

    def put_run(self, stream: str, instrs: list, reads=(), writes=(), role: int = 0) -> None:
        """:meth:`put` of each of the built ``instrs`` in turn, all with these ``reads`` /
        ``writes`` (:class:`Buf` items only), ``role`` and no MACs, at once: the waits come
        before the first (the others need none: the run's own accesses are all the buffers
        see meanwhile, and a stream never waits for itself), the accesses are recorded at the
        last (each write once per instruction). The same instructions, waits and hazard state
        as the :meth:`put` of each."""
        if not instrs:
            return
        n = len(instrs)
        self.wait_for(stream, reads, writes)
        end = self.B.extend(stream, instrs, [role] * n, [0] * n) + n - 1
        self.accessed(stream, end, reads, writes, n_writes=n)

    def accessed(self, stream: str, pos: int, reads=(), writes=(), n_writes: int = 1) -> None:
        """Record that instruction ``pos`` of ``stream`` read ``reads`` and wrote ``writes``
        (as in :meth:`ins`), each write ``n_writes`` times (a run of instructions of the stream
        ending at ``pos``, each writing them: PIM row groups)."""
        for r in reads:
            (r[0] if isinstance(r, tuple) else r).hz.reads[stream] = pos
        for w in writes:
            h = w.hz
            h.writes[stream] = pos
            # the stream has seen every write of the value only if it had seen all the others
            # (another stream may have written another part of it meanwhile, unordered)
            seen_all = h.wseen.get(stream, 0) == h.wcount
            h.wcount += n_writes
            if seen_all:
                h.wseen[stream] = h.wcount

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
        got = self._request_parts.get((i, unit))
        if got is not None:
            return got
        ctx = self.ctx
        s = ctx.sub_of(i)
        rho = ctx.row_in_sub(i)
        got = part_tag(s, unit=unit)
        for bi, (b0, b1) in enumerate(self.row_blocks(ctx.rows_per_sub(s))):
            if b0 <= rho < b1:
                for k, (_, r0, r1) in enumerate(self.row_chunks(b1 - b0)):
                    if r0 <= rho - b0 < r1:
                        got = part_tag(s, bi, k, unit)
                        break
                break
        self._request_parts[(i, unit)] = got
        return got

    def unit_part(self, item: tuple[int, int, int, int]) -> int:
        """Part tag of the PIM attention item ``(i, k0, k1, b)`` (KV heads ``[k0, k1)`` of
        batch position ``i``, key block ``b``): the items of one request share their operators
        but not their data (each has its own scores / partials slot generation), so the graph
        check must pair score, softmax and context item by item
        (``mapping.verify.rows_meet``)."""
        got = self._unit_parts.get(item)
        if got is None:
            i, k0, _, b = item
            nb = len(self.pieces(self.ctx.layers[0], i))
            got = self._unit_parts[item] = self.request_part(
                i, (k0 // self.unit_heads()) * nb + b + 1)
        return got

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


