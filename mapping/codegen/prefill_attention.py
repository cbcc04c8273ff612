"""Prefill (prompt) attention on the NPU: per KV head and query tile of up to
``PREFILL_Q_TILE`` rows, scores ``[tile, L]`` on the arrays, causal softmax on the VUs, and
the KV append of the whole prompt — or of a prompt chunk (chunked prefill), whose attention
also covers the prompt's cached prefix (:meth:`PrefillAttention._attn_prefill`).

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

import math

from mapping import bufplan
from mapping.bufplan import prefill_lane_bytes
from mapping.codegen.core import part_tag, PREFILL_Q_TILE
from mapping.errors import UnsupportedError
from mapping.kvlayout import ceil_div


class PrefillAttention:
    """Instruction generation: prefill attention (module docstring)."""

    def _attn_prefill(self, l: int, s: int, members: list[int]) -> None:
        """Prefill attention of layer ``l``, sub-batch ``s``, on the systolic arrays.

        Work units are ``(request, KV head)`` pairs, dealt round-robin to attention *lanes*
        (a vector unit, its DMA queue and its own buffers), so that one long prompt keeps the
        vector units busy and not only one. Lanes: the attention VUs (every VU with one
        sub-batch, as in prefill: the GEMM chain waits for attention then), fewer when their
        buffers (≈ ``2·L·head_dim + 3·128·L`` elements each for the longest prompt ``L``, or
        its key block: :func:`mapping.bufplan.prefill_lane_bytes`) would take more than
        :data:`mapping.bufplan.ATTN_SHARE` (half) of the scratchpad (the rest is the GEMM
        chain's); at least one.

        A prompt chunk (mixed phase: ``q = q_tokens < L``, its first ``P = L - q`` tokens cached)
        runs the same way over ``q`` query rows (tiles at positions ``P + q0``, the causal
        offset of the softmax ``P + q0``): the first ``P`` rows of ``K_h`` and ``V_h`` are
        loaded from the KV cache (:meth:`_kv_cached_load`, written by earlier iterations, so
        the loads wait for nothing in the program), the other ``q`` from ``pf_qkv``, and only
        tokens ``P .. L-1`` are appended. With ``P = 0`` it is the whole prompt. A chunk longer
        than the plan's key block (prefix included) goes block by block the same way
        (:meth:`_prefill_unit_blocked`). Lanes are also limited to what is free (a mixed
        sub-batch's decode attention holds buffers too).

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
        # ---- lanes and their buffers, sized for the longest prompt (or its key blocks)
        Lmax = max(plan.kv[(l, i)].seq_len for i in members)
        mq_max = min(max(int(ctx.q_tokens[i]) for i in members), PREFILL_Q_TILE)
        blocked = self.attn_blocks(Lmax) > 1
        sizes = prefill_lane_bytes(Lmax, self.block_tokens(Lmax), mq_max, hd, eb, H, W,
                                   blocked, qpk)
        per_lane = sum(sizes.values())
        vus = self.att_vus if ctx.n_sub > 1 else list(range(self.V))
        spad = self.spad
        n_lanes = max(1, min(len(vus), Hkv * len(members),
                             int(bufplan.ATTN_SHARE * spad.size) // per_lane,
                             (spad.size - spad.used_bytes) // per_lane))
        lanes = [{k: self.alloc(f"pf{k}.{j}", n) for k, n in sizes.items()}
                 for j in range(n_lanes)]
        self.attn_bytes = max(self.attn_bytes,
                              n_lanes * sum(self._aligned(n) for n in sizes.values()))
        units = [(i, h) for i in members for h in range(Hkv)]
        for u, (i, h) in enumerate(units):
            j = u % n_lanes
            lb = lanes[j]
            sv, sd = self.s_vu(vus[j]), self.s_dv(vus[j])
            kp = plan.kv[(l, i)]
            rid = ctx.request_id(i)
            L = kp.seq_len
            if self.attn_blocks(L) > 1:
                self._prefill_unit_blocked(l, s, i, h, lb, sv, sd)
                continue
            q = int(ctx.q_tokens[i])
            P = L - q                       # cached prefix (0: a whole prompt)
            mq = min(q, PREFILL_Q_TILE)
            nq = ceil_div(q, mq)
            r = row0 + ctx.row_in_sub(i)
            kvb = self.hbm(f"kv.L{l}.r{rid}")
            kcol0 = tq.addr + (r * N + Hq * hd) * eb        # K_0 of the request's first row
            vcol0 = tq.addr + (r * N + qkc) * eb            # V_0 of it
            B.set_part(part_tag(s, unit=h * qpk * nq + 1))
            vh, ktile = lb["v"], lb["ktile"]
            vh.new_gen()
            kh = self.alloc(f"k.r{rid}.h{h}", L * hd * eb)     # [L, hd]
            for op, b, col, which in (("kv_append", vh, vcol0, 1), ("attn_score", kh, kcol0, 0)):
                B.set_op(f"L{l}.{op}.r{rid}")
                self._kv_block_load(sv, sd, kp, kvb, src, b, col, N * eb, h, which, 0, L, P)
            # ---- KV append of the unit (its share of the request's K in the PIM layout)
            B.set_op(f"L{l}.kv_append.r{rid}")
            if lay is not None:
                self._v_store_pim_prefill(sv, sd, kp, kvb, vh, h, 0, L, first=P)
                self._k_store_pim_prefill(sd, kp, kvb, src, kcol0, N * eb, h, Hkv, P)
            else:
                blk = kp.block_bytes(hd, eb)
                for which, b in ((0, kh), (1, vh)):
                    self.ins(sd, "DMA_STORE", reads=[b], writes=[kvb], role="out",
                             spad=b.addr + P * hd * eb,
                             hbm=kp.addr + (which * Hkv + h) * blk + P * hd * eb, rows=q,
                             cols=hd, stride=hd * eb, dtype=dt)
            B.set_op(f"L{l}.attn_score.r{rid}")
            self._k_transpose(sv, kh, ktile, L)
            # ---- per query head of the group and query tile
            ob, otile = lb["o"], lb["otile"]
            for hq in range(h * qpk, (h + 1) * qpk):
                for q0 in range(0, q, mq):
                    m = min(mq, q - q0)
                    B.set_part(part_tag(s, unit=hq * nq + q0 // mq + 1))
                    self._prefill_tile(l, rid, sv, sd, lb, src,
                                       tq.addr + ((r + q0) * N + hq * hd) * eb, N * eb, m, mq,
                                       L, "causal", P + q0, 0)
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

    def _prefill_unit_blocked(self, l: int, s: int, i: int, h: int, lb: dict, sv: str,
                              sd: str) -> None:
        """Prefill attention of KV head ``h`` of batch position ``i`` whose prompt is longer
        than the buffer plan's key block (:mod:`mapping.bufplan`), on the lane ``lb`` (vector
        stream ``sv``, DMA queue ``sd``): FlashAttention-2's loop order (Dao, 2023) with the
        block merge of decode (:meth:`merge_block`).

        The KV append runs first, key block by key block (V block loaded, stored in the
        cache's layout; in the PIM layout the request's K slabs as for a whole prompt). Then
        per query tile of up to ``PREFILL_Q_TILE`` rows (cut where a key block starts) and key
        block of ``Lk`` keys: the K
        block is loaded and transposed into K^T tiles and the V block loaded, once for the
        ``q_per_kv`` query heads of the group; per query head: the query tile, ``S = Q K^T``
        on an array, ``VU_SCALE``, the causal ``VU_SOFTMAX`` of the block (offset ``q0 - k0``;
        a block wholly after the tile is masked whole: ``length`` mask of 0) with the rows'
        log-sum-exp, ``P`` re-blocked, ``O_b = P V_b`` and its merge into the head's running
        output; after the last block the output is stored to ``pf_ao``. A prompt chunk
        (``P`` cached tokens) appends tokens ``P .. L-1`` only, its ``q`` query rows sit at
        positions ``P + q0`` (the causal offset), and the part of a key block before ``P`` is
        loaded from the KV cache (:meth:`_kv_block_load`). Scores and p.V are
        computed for every key block, masked ones included, as for a whole prompt (the
        operator graph counts them so); K and V are read from HBM once for the append and once
        per query tile.
        """
        ctx, plan, B = self.ctx, self.plan, self.B
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        N = (Hq + 2 * Hkv) * hd
        qkc = (Hq + Hkv) * hd
        K = Hq * hd
        tq, to = plan.tensors["pf_qkv"], plan.tensors["pf_ao"]
        src, dst = self.hbm(f"pf_qkv.s{s}"), self.hbm(f"pf_ao.s{s}")
        lay = plan.pim_layout
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        L = kp.seq_len
        q = int(ctx.q_tokens[i])
        P = L - q                       # cached prefix of a prompt chunk (0: a whole prompt)
        Lk = self.block_tokens(L)
        nk = self.attn_blocks(L)
        mq = min(q, PREFILL_Q_TILE)
        # query tiles (first row, rows): of at most mq rows, cut where a key block starts (a
        # chunk's rows start at P, not on a block: a block starting inside a tile could be
        # masked neither whole nor by one causal offset)
        tiles, t = [], P
        while t < L:
            e = min(t + mq, (t // Lk + 1) * Lk, L)
            tiles.append((t - P, e - t))
            t = e
        nq = len(tiles)
        r = ctx.sub_row0(s) + ctx.row_in_sub(i)
        kvb = self.hbm(f"kv.L{l}.r{rid}")
        kcol0 = tq.addr + (r * N + Hq * hd) * eb        # K_0 of the request's first row (token P)
        vcol0 = tq.addr + (r * N + qkc) * eb
        vh, ktile, srow, ob, otile = lb["v"], lb["ktile"], lb["srow"], lb["o"], lb["otile"]
        mrg = [self.merge_views(lb["merge"], mq, hd, k) for k in range(qpk)]

        def unit(hq: int, qt: int, kb: int) -> int:
            return ((hq * nq + qt) * nk + kb) + 1
        if unit(Hq - 1, nq - 1, nk - 1) >= 1 << 20:
            raise UnsupportedError(f"prefill attention of a {L}-token prompt in {nk} key blocks "
                                   "needs more part tags than the program metadata has (2^20)")
        # ---- KV append of tokens P .. L-1, key block by key block
        B.set_part(part_tag(s, unit=unit(h * qpk, 0, 0)))
        B.set_op(f"L{l}.kv_append.r{rid}")
        for kb in range(P // Lk, nk):
            t0 = max(kb * Lk, P)
            n = min((kb + 1) * Lk, L) - t0
            vh.new_gen()
            self.ins(sd, "DMA_LOAD", reads=[src], writes=[vh], role="in", spad=vh.addr,
                     hbm=vcol0 + ((t0 - P) * N + h * hd) * eb, rows=n, cols=hd, stride=N * eb,
                     dtype=dt)
            if lay is not None:
                self._v_store_pim_prefill(sv, sd, kp, kvb, vh, h, t0, n)
                continue
            blk = kp.block_bytes(hd, eb)
            kh = self.alloc(f"k.r{rid}.h{h}", n * hd * eb)
            self.ins(sd, "DMA_LOAD", reads=[src], writes=[kh], role="in", spad=kh.addr,
                     hbm=kcol0 + ((t0 - P) * N + h * hd) * eb, rows=n, cols=hd, stride=N * eb,
                     dtype=dt)
            for which, b in ((0, kh), (1, vh)):
                self.ins(sd, "DMA_STORE", reads=[b], writes=[kvb], role="out", spad=b.addr,
                         hbm=kp.addr + (which * Hkv + h) * blk + t0 * hd * eb, rows=n,
                         cols=hd, stride=hd * eb, dtype=dt)
            self.free(kh)
        if lay is not None:
            self._k_store_pim_prefill(sd, kp, kvb, src, kcol0, N * eb, h, Hkv, P)
        # ---- attention: query tile by query tile, key block by key block
        for qt, (q0, m) in enumerate(tiles):
            p0 = P + q0                 # position of the tile's first query
            for kb in range(nk):
                t0 = kb * Lk
                n = min(Lk, L - t0)
                B.set_part(part_tag(s, unit=unit(h * qpk, qt, kb)))
                B.set_op(f"L{l}.attn_score.r{rid}")
                kh = self.alloc(f"k.r{rid}.h{h}", n * hd * eb)
                self._kv_block_load(sv, sd, kp, kvb, src, kh, kcol0, N * eb, h, 0, t0, n, P)
                self._k_transpose(sv, kh, ktile, n)
                B.set_op(f"L{l}.attn_context.r{rid}")
                vh.new_gen()
                self._kv_block_load(sv, sd, kp, kvb, src, vh, vcol0, N * eb, h, 1, t0, n, P,
                                    role="body")
                for g, hq in enumerate(range(h * qpk, (h + 1) * qpk)):
                    B.set_part(part_tag(s, unit=unit(hq, qt, kb)))
                    # causal: row q keeps keys t0 + j <= p0 + q: all of a block before the
                    # tile, none of a block after it (no block starts inside a tile)
                    mask, off = (("none", 0) if t0 + n - 1 <= p0 else
                                 ("causal", p0 - t0) if t0 <= p0 else ("length", 0))
                    self._prefill_tile(l, rid, sv, sd, lb, src,
                                       tq.addr + ((r + q0) * N + hq * hd) * eb, N * eb, m, mq,
                                       n, mask, off, 1)
                    self.merge_block(sv, mrg[g], ob, srow.view("lse", m * n * 4, m * 4), m,
                                     hd, kb == 0)
                    if kb == nk - 1:
                        otile.new_gen()
                        self.ins(sv, "VU_COPY", reads=[mrg[g]["o"]], writes=[otile],
                                 dst=otile.addr, src=mrg[g]["o"].addr, rows=m, cols=hd,
                                 src_stride=2 * hd, dst_stride=hd, dtype="fp32", out_dtype=dt)
                        self.ins(sd, "DMA_STORE", reads=[otile], writes=[dst], role="out",
                                 spad=otile.addr, hbm=to.addr + ((r + q0) * K + hq * hd) * eb,
                                 rows=m, cols=hd, stride=K * eb, dtype=dt)

    def _k_transpose(self, sv: str, kh, ktile, n: int) -> None:
        """``kh`` ``[n, head_dim]`` (freed after) into the K^T tiles ``ktile`` (``[head_dim,
        W]`` per block of W keys) on vector stream ``sv``."""
        eb, dt, hd, W = self.eb, self.dt, self.hd, self.W
        ktile.new_gen()
        for nb in range(ceil_div(n, W)):
            wn = min(W, n - nb * W)
            self.ins(sv, "VU_TRANSPOSE", reads=[kh], writes=[ktile], role="in",
                     dst=ktile.addr + nb * hd * W * eb, src=kh.addr + nb * W * hd * eb,
                     rows=wn, cols=hd, dtype=dt)
        self.free(kh)

    def _prefill_tile(self, l: int, rid: int, sv: str, sd: str, lb: dict, src, q_hbm: int,
                      q_stride: int, m: int, mq: int, n: int, mask: str, off: int,
                      lse: int) -> None:
        """One query tile of ``m`` rows (of the request's tiles of ``mq``; at HBM ``q_hbm``, row
        pitch ``q_stride`` bytes) against
        the ``n`` keys whose K^T tiles are in ``lb['ktile']`` and V rows in ``lb['v']``, on
        the lane's vector stream ``sv`` / DMA queue ``sd`` and the next systolic array: the
        query load, ``S = Q K^T`` (fp32, tile by tile of W keys), the scores re-blocked into
        ``lb['srow']`` ``[m, n]``, ``VU_SCALE``, ``VU_SOFTMAX`` (``mask``/``off``; with ``lse``
        the rows' log-sum-exp after the scores), ``P`` re-blocked in the model dtype and
        ``O = P V`` accumulated into ``lb['o']`` (fp32 ``[m, head_dim]``)."""
        B = self.B
        eb, dt, hd, H, W = self.eb, self.dt, self.hd, self.H, self.W
        qb, sblk, srow, pblk, ob, vh, ktile = (lb[k] for k in ("q", "sblk", "srow", "pblk", "o",
                                                               "v", "ktile"))
        NB, KB = ceil_div(n, W), ceil_div(n, H)
        a = self._prefill_array
        self._prefill_array = (a + 1) % self.A
        sa = self.s_sa(a)
        B.set_op(f"L{l}.attn_score.r{rid}")
        qb.new_gen()
        self.ins(sd, "DMA_LOAD", reads=[src], writes=[qb], role="in", spad=qb.addr, hbm=q_hbm,
                 rows=m, cols=hd, stride=q_stride, dtype=dt)
        sblk.new_gen()
        for nb in range(NB):
            wn = min(W, n - nb * W)
            self.ins(sa, "SA_LOADW", reads=[ktile], array=a, w=ktile.addr + nb * hd * W * eb,
                     k=hd, n=wn, dtype=dt)
            self.ins(sa, "SA_MATMUL", reads=[qb], writes=[sblk], role="in", macs=m * hd * wn,
                     array=a, src=qb.addr, dst=sblk.addr + nb * mq * W * 4, m=m, n=wn, k=hd,
                     acc=0, dtype=dt, out_dtype="fp32")
        srow.new_gen()
        for nb in range(NB):
            wn = min(W, n - nb * W)
            self.ins(sv, "VU_COPY", reads=[sblk], writes=[srow], role="out",
                     dst=srow.addr + nb * W * 4, src=sblk.addr + nb * mq * W * 4, rows=m,
                     cols=wn, src_stride=wn, dst_stride=n, dtype="fp32", out_dtype="fp32")
        B.set_op(f"L{l}.attn_softmax.r{rid}")
        self.ins(sv, "VU_SCALE", reads=[srow], writes=[srow], role="in", dst=srow.addr,
                 src=srow.addr, rows=m, cols=n, dtype="fp32", imm=1.0 / math.sqrt(hd))
        self.ins(sv, "VU_SOFTMAX", reads=[srow], writes=[srow], role="out", dst=srow.addr,
                 src=srow.addr, rows=m, cols=n, dtype="fp32", mask=mask, len=off, lse=lse)
        B.set_op(f"L{l}.attn_context.r{rid}")
        pblk.new_gen()
        for kb in range(KB):
            kn = min(H, n - kb * H)
            self.ins(sv, "VU_COPY", reads=[srow], writes=[pblk], role="in",
                     dst=pblk.addr + kb * mq * H * eb, src=srow.addr + kb * H * 4, rows=m,
                     cols=kn, src_stride=n, dst_stride=kn, dtype="fp32", out_dtype=dt)
        ob.new_gen()
        for kb in range(KB):
            kn = min(H, n - kb * H)
            self.ins(sa, "SA_LOADW", reads=[vh], array=a, w=vh.addr + kb * H * hd * eb, k=kn,
                     n=hd, dtype=dt)
            self.ins(sa, "SA_MATMUL", reads=[pblk], writes=[ob], macs=m * kn * hd, array=a,
                     src=pblk.addr + kb * mq * H * eb, dst=ob.addr, m=m, n=hd, k=kn,
                     acc=int(kb > 0), dtype=dt, out_dtype="fp32")
