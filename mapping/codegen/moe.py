"""The mixture-of-experts FFN of a row block (Mixtral; :mod:`workloads.moe`).

A mixin of :class:`mapping.codegen.Codegen`. For the ``m`` token rows of a GEMM-chain row block
(sub-batch ``s``, rows ``[b0, b1)``), after the FFN norm (``hn`` row-major, ``hb`` blocked):

1. **router**: GEMM ``hb [m, d] x W_r [d, E]`` on the arrays, logits kept in fp32;
   ``VU_TOPK`` per VU row chunk: the dense gate matrix ``[m, E]`` (top-k weights, zeros
   elsewhere); one ``VU_TRANSPOSE`` to ``[E, m]`` so that an expert's gates of consecutive rows
   are contiguous (the scale vector of ``VU_AXPY``);
2. expert parallelism (``ep > 1``): one ``ALL_TO_ALL`` (``moe_dispatch``) sends the block's
   rows routed to other devices' experts and receives the rows the other devices route to
   this device's experts (paired with this block: :func:`mapping.moe.pair_rows`);
3. per local expert with rows, in expert order: the rows routed to it are gathered
   (``VU_COPY``: one per row, straight into the blocked layout the arrays read) into
   ``[n_e, d]``; gate and up GEMMs, ``VU_SILU`` + ``VU_MUL``, re-block, down GEMM (rows in
   pieces of at most the accumulator's rows); the weights of an expert no row chose are never
   read;
4. **combine**: ``VU_AXPY`` per run of consecutive rows: ``out[r] (+)= g[r, e] y_e[j]`` (the
   first contribution of a row initialises it, ``acc = 0``), on the VU that owns the row's
   chunk so that a row's updates stay in order; with ``ep > 1`` the outputs of the received
   rows go back by a second ``ALL_TO_ALL`` (``moe_return``, after every local expert, as in
   GShard) and the rows the other devices computed for this block are added the same way.

The result ``[m, d]`` takes the place of the dense FFN's output (all-reduce and residual
follow in :meth:`mapping.codegen.gemm.GemmChains._pf_block`).
"""
from __future__ import annotations

import numpy as np

from mapping.codegen.core import _VU_STRIDE_MAX, Buf, _merge, part_tag
from mapping.kvlayout import ceil_div
from mapping.moe import pair_rows


def _runs(rows: np.ndarray, pos: np.ndarray, flags: np.ndarray, cut: np.ndarray):
    """Maximal runs ``(row0, pos0, n, flag)`` over which ``rows`` and ``pos`` both step by 1
    and ``flags`` and the chunk ``cut[row]`` stay equal (inputs aligned, ``rows`` ascending)."""
    out = []
    i = 0
    n = len(rows)
    while i < n:
        j = i + 1
        while (j < n and rows[j] == rows[j - 1] + 1 and pos[j] == pos[j - 1] + 1
               and flags[j] == flags[i] and cut[rows[j]] == cut[rows[i]]):
            j += 1
        out.append((int(rows[i]), int(pos[i]), j - i, bool(flags[i])))
        i = j
    return out


class MoeFfn:
    """Instruction generation: the mixture-of-experts FFN (module docstring)."""

    def _moe_pairs(self, layer: int) -> np.ndarray:
        cache = self.__dict__.setdefault("_moe_pair_cache", {})
        got = cache.get(layer)
        if got is None:
            got = cache[layer] = pair_rows(self.ctx.routing, len(self.ctx.token_rows))
        return got

    def moe_block_routes(self, l: int, s: int, b0: int, b1: int) -> dict:
        """Who goes where in rows ``[b0, b1)`` of sub-batch ``s``, layer ``l``:

        ``own[e]`` the block rows routed to local expert ``e`` (ascending); ``recv[e]`` the
        other devices' tokens paired with this block and routed to ``e`` (global token
        indices); ``sent`` the ``(row, expert)`` pairs of this block's rows routed to other
        devices' experts, in expert order (the rows the return brings back)."""
        ctx, model = self.ctx, self.model
        R = ctx.routing
        toks = ctx.block_tokens(s, b0, b1)
        ch = np.asarray(R.experts[l])
        mine = ch[toks]
        local = list(model.local_experts(R.expert_parallel))
        own = {e: np.flatnonzero((mine == e).any(axis=1)) for e in local}
        recv = {e: np.zeros(0, dtype=np.int64) for e in local}
        sent: list[tuple[int, int]] = []
        if R.expert_parallel > 1:
            pair = self._moe_pairs(l)
            h0 = ctx.sub_row0(s) + b0
            dev = R.token_device()
            rem = np.flatnonzero((dev != 0) & (pair >= h0) & (pair < h0 + b1 - b0))
            for e in local:
                recv[e] = rem[(ch[rem] == e).any(axis=1)]
            for e in range(model.n_experts):
                if e not in own:
                    sent += [(int(r), e) for r in np.flatnonzero((mine == e).any(axis=1))]
        return {"own": own, "recv": recv, "sent": sent}

    # ------------------------------------------------------------------ pieces
    def _gather_row(self, vu: int, src: Buf, src_row: int, dst: Buf, n: int, j: int,
                    extra_reads=()) -> None:
        """Copy row ``src_row`` of row-major ``src [*, d]`` into row ``j`` of blocked ``dst``
        (``[ceil(d/H)][n][kh]``): one ``VU_COPY`` over the full ``H``-wide blocks (block stride
        ``n H`` elements) when it fits the stride field, else one per block; the partial last
        block apart."""
        d, H, eb, dt = self.d, self.H, self.eb, self.dt
        full = d // H
        reads = [src, *extra_reads]
        sv = self.s_vu(vu)
        if full and n * H <= _VU_STRIDE_MAX:
            self.ins(sv, "VU_COPY", reads=reads, writes=[dst], role="in",
                     dst=dst.addr + j * H * eb, src=src.addr + src_row * d * eb, rows=full,
                     cols=H, src_stride=H, dst_stride=n * H, dtype=dt, out_dtype=dt)
        else:
            for kb in range(full):
                self.ins(sv, "VU_COPY", reads=reads, writes=[dst], role="in",
                         dst=dst.addr + (n * H * kb + j * H) * eb,
                         src=src.addr + (src_row * d + kb * H) * eb, rows=1, cols=H,
                         src_stride=0, dst_stride=0, dtype=dt, out_dtype=dt)
        if d % H:
            kh = d - full * H
            self.ins(sv, "VU_COPY", reads=reads, writes=[dst], role="in",
                     dst=dst.addr + (n * H * full + j * kh) * eb,
                     src=src.addr + (src_row * d + full * H) * eb, rows=1, cols=kh,
                     src_stride=0, dst_stride=0, dtype=dt, out_dtype=dt)

    def _pieces_gemm(self, op: str, x: Buf, n: int, K: int, N: int, w, dst: Buf) -> None:
        """``dst[n, N] = x[n, K] @ w`` in row pieces of at most the accumulators' rows."""
        eb = self.eb
        for r0 in range(0, n, self.m_max):
            mm = min(self.m_max, n - r0)
            part = dst if (r0 == 0 and mm == n) else dst.view(dst.name, r0 * N * eb,
                                                               mm * N * eb)
            self.gemm(op, x, mm, K, N, w, [(0, N, part, 0, N)], x_rows=n, x_row0=r0)

    def _expert(self, l: int, e: int, n: int, gathers, ye: Buf) -> None:
        """Expert ``e`` of layer ``l`` on ``n`` rows: ``gathers`` fills its blocked input
        (called with it), then gate/up GEMMs, SwiGLU, re-block, down GEMM into ``ye``."""
        d, eb, dt, ff = self.d, self.eb, self.dt, self.ff
        q = f"L{l}.e{e}."
        op = f"L{l}.expert_gate.e{e}"
        xe = self.alloc(f"moe_x.L{l}.e{e}", n * d * eb)
        self.B.set_op(op)
        gathers(xe)
        fg = self.alloc(f"moe_fg.L{l}.e{e}", n * ff * eb)
        f1 = self.alloc(f"moe_f1.L{l}.e{e}", n * ff * eb)
        self._pieces_gemm(op, xe, n, d, ff, self.plan.tensors[q + "gate_w"], fg)
        self._pieces_gemm(f"L{l}.expert_up.e{e}", xe, n, d, ff, self.plan.tensors[q + "up_w"],
                          f1)
        self.free(xe)
        snapg, snap1 = dict(fg.writes), dict(f1.writes)
        self.B.set_op(f"L{l}.expert_act.e{e}")
        fb = self.alloc(f"moe_fb.L{l}.e{e}", n * ff * eb)
        for vu, r0, r1 in self.row_chunks(n):
            self.swiglu_rows(self.s_vu(vu), fg, snapg, f1, snap1, r0, r1, ff)
            self.reblock(vu, f1, {}, fb, n, ff, r0, r1)
        self.free(fg)
        self.free(f1)
        self._pieces_gemm(f"L{l}.expert_down.e{e}", fb, n, ff, d,
                          self.plan.tensors[q + "down_w"], ye)
        self.free(fb)

    def _combine(self, op: str, mo: Buf, y: Buf, gT: Buf, m: int, e: int, rows: np.ndarray,
                 pos: np.ndarray, started: np.ndarray, chunk_of: np.ndarray, vu_of: dict,
                 s: int, bi: int) -> None:
        """``mo[r] (+)= gT[e, r] * y[pos]`` for the block rows ``rows`` (one ``VU_AXPY`` per
        run of consecutive rows), on the VU of each row's chunk (tagged with the chunk, so
        that the chained ``moe_combine`` operators are checked chunk by chunk)."""
        d, eb, dt = self.d, self.eb, self.dt
        B = self.B
        B.set_op(op)
        flags = started[rows].copy()
        for r, j, c, acc in _runs(rows, pos, flags, chunk_of):
            ck = int(chunk_of[r])
            B.set_part(part_tag(s, bi, ck))
            self.ins(self.s_vu(vu_of[ck]), "VU_AXPY",
                     reads=[y, gT] + ([(mo, {})] if acc else []), writes=[mo], role="inout",
                     dst=mo.addr + r * d * eb, x=y.addr + j * d * eb,
                     scale=gT.addr + (e * m + r) * eb, rows=c, cols=d, acc=int(acc), dtype=dt)
        B.set_part(part_tag(s, bi))
        started[rows] = True

    # ------------------------------------------------------------------ the block
    def moe_ffn(self, l: int, s: int, bi: int, b0: int, b1: int, hn: Buf, hb: Buf) -> Buf:
        """The MoE FFN of rows ``[b0, b1)`` of sub-batch ``s`` (module docstring); ``hn``
        (row-major) and ``hb`` (blocked) hold the FFN norm's output and are freed here.
        Returns the ``[m, d]`` output (model dtype), before all-reduce and residual."""
        ctx, B, model = self.ctx, self.B, self.model
        R = ctx.routing
        m = b1 - b0
        d, eb, dt = self.d, self.eb, self.dt
        E, k, ep = model.n_experts, model.experts_per_token, R.expert_parallel
        p = f"L{l}."
        blk = part_tag(s, bi)
        B.set_part(blk)
        routes = self.moe_block_routes(l, s, b0, b1)
        # 1. router logits (fp32), gates, gates transposed
        lg = self.alloc(f"moe_lg.L{l}.s{s}", m * E * 4)
        self.gemm(p + "moe_router", hb, m, d, E, self.plan.tensors[p + "moe_router_w"],
                  [(0, E, lg, 0, E)], out_dtype="fp32")
        B.set_op(p + "moe_topk")
        g = self.alloc(f"moe_g.L{l}.s{s}", m * E * eb)
        chunks = self.row_chunks(m)
        snap = dict(lg.writes)
        for vu, r0, r1 in chunks:
            self.ins(self.s_vu(vu), "VU_TOPK", reads=[(lg, snap)], writes=[g], role="in",
                     dst=g.addr + r0 * E * eb, src=lg.addr + r0 * E * 4, rows=r1 - r0, cols=E,
                     k=k, dtype="fp32", out_dtype=dt)
        gT = self.alloc(f"moe_gT.L{l}.s{s}", E * m * eb)
        self.ins(self.s_vu(chunks[0][0]), "VU_TRANSPOSE", reads=[g], writes=[gT], role="out",
                 dst=gT.addr, src=g.addr, rows=m, cols=E, dtype=dt)
        self.free(lg)
        self.free(g)
        chunk_of = np.zeros(m, dtype=np.int64)
        vu_of = {}
        for c, (vu, r0, r1) in enumerate(chunks):
            chunk_of[r0:r1] = c
            vu_of[c] = vu
        # 2. dispatch
        rv = None
        n_recv = sum(len(v) for v in routes["recv"].values())
        n_sent = len(routes["sent"])
        row_bytes = d * eb
        if ep > 1 and max(n_recv, n_sent):
            B.set_op(p + "moe_dispatch")
            rv = self.alloc(f"moe_rv.L{l}.s{s}", max(n_recv, 1) * row_bytes)
            self.ins(self.s_link, "ALL_TO_ALL", reads=[hn, hb, gT], writes=[rv], role="inout",
                     bytes=max(n_recv, n_sent) * row_bytes, group=ep)
        # 3. experts, 4. combine
        mo = self.alloc(f"moe_out.L{l}.s{s}", m * d * eb)
        started = np.zeros(m, dtype=bool)
        sb = self.alloc(f"moe_sb.L{l}.s{s}", n_recv * row_bytes) if rv is not None and n_recv \
            else None
        sb_row = 0
        rv_row = 0
        experts_done: dict[str, int] = {}
        vus = self.chain_vus
        for e in model.local_experts(ep):
            own, rec = routes["own"][e], routes["recv"][e]
            n = len(own) + len(rec)
            if n == 0:
                continue
            extra = [hb] + ([rv] if rv is not None else [])
            rv0 = rv_row

            def gathers(xe: Buf, own=own, rec=rec, n=n, rv0=rv0, extra=extra) -> None:
                for j, r in enumerate(own):
                    self._gather_row(vus[j % len(vus)], hn, int(r), xe, n, j, extra)
                for i in range(len(rec)):
                    j = len(own) + i
                    self._gather_row(vus[j % len(vus)], rv, rv0 + i, xe, n, j, [hn] + extra)
            rv_row += len(rec)
            ye = self.alloc(f"moe_y.L{l}.e{e}", n * d * eb)
            self._expert(l, e, n, gathers, ye)
            experts_done = _merge(experts_done, ye.writes)
            if len(own):
                self._combine(f"{p}moe_combine.e{e}", mo, ye, gT, m, e, own,
                              np.arange(len(own)), started, chunk_of, vu_of, s, bi)
            if len(rec):                    # results of the other devices' rows: to send back
                assert sb is not None
                B.set_op(p + "moe_return")
                self.ins(self.s_vu(vus[e % len(vus)]), "VU_COPY", reads=[ye], writes=[sb],
                         dst=sb.addr + sb_row * row_bytes,
                         src=ye.addr + len(own) * row_bytes, rows=len(rec), cols=d,
                         src_stride=0, dst_stride=0, dtype=dt, out_dtype=dt)
                sb_row += len(rec)
            self.free(ye)
        self.free(hn)
        self.free(hb)
        if rv is not None:
            # 4b. the return: this block's rows computed by the other devices' experts
            B.set_op(p + "moe_return")
            rb = self.alloc(f"moe_rb.L{l}.s{s}", max(n_sent, 1) * row_bytes)
            B.wait(self.s_link, experts_done)        # after every local expert (GShard order)
            self.ins(self.s_link, "ALL_TO_ALL", reads=[sb] if sb is not None else [gT],
                     writes=[rb], role="inout", bytes=max(n_recv, n_sent) * row_bytes,
                     group=ep)
            sent = routes["sent"]
            for e in sorted({ex for _, ex in sent}):
                idx = np.array([i for i, (_, ex) in enumerate(sent) if ex == e], dtype=np.int64)
                rows = np.array([sent[i][0] for i in idx], dtype=np.int64)
                self._combine(p + "moe_combine.remote", mo, rb, gT, m, e, rows, idx, started,
                              chunk_of, vu_of, s, bi)
            self.free(rb)
            self.free(sb)
            self.free(rv)
        self.free(gT)
        assert started.all(), "every row has at least one expert"
        B.set_part(blk)
        return mo
