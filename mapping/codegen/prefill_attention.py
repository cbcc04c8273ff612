"""Prefill (prompt) attention on the NPU: per KV head and query tile of up to
``PREFILL_Q_TILE`` rows, scores ``[tile, L]`` on the arrays, causal softmax on the VUs, and
the KV append of the whole prompt — or of a prompt chunk (chunked prefill), whose attention
also covers the prompt's cached prefix (:meth:`PrefillAttention._attn_prefill`).

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

import math

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
        buffers (≈ ``2·L·head_dim + 3·128·L`` elements each for the longest prompt ``L``)
        would take more than half the scratchpad (the rest is the GEMM chain's) or more than
        is free (a mixed sub-batch's decode attention holds buffers too); at least one.

        A prompt chunk (mixed phase: ``q = q_tokens < L``, its first ``P = L - q`` tokens cached)
        runs the same way over ``q`` query rows (tiles at positions ``P + q0``, the causal
        offset of the softmax ``P + q0``): the first ``P`` rows of ``K_h`` and ``V_h`` are
        loaded from the KV cache (:meth:`_kv_prefix_load`, written by earlier iterations, so
        the loads wait for nothing in the program), the other ``q`` from ``pf_qkv``, and only
        tokens ``P .. L-1`` are appended. With ``P = 0`` it is the whole prompt.

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
        mq_max = min(max(int(ctx.q_tokens[i]) for i in members), PREFILL_Q_TILE)
        nb_max, kb_max = ceil_div(Lmax, W), ceil_div(Lmax, H)
        sizes = {"v": Lmax * hd * eb, "ktile": nb_max * hd * W * eb, "q": mq_max * hd * eb,
                 "sblk": nb_max * mq_max * W * 4, "srow": mq_max * Lmax * 4,
                 "pblk": kb_max * mq_max * H * eb, "o": mq_max * hd * 4,
                 "otile": mq_max * hd * eb}
        per_lane = sum(sizes.values())
        vus = self.att_vus if ctx.n_sub > 1 else list(range(self.V))
        spad = self.spad
        n_lanes = max(1, min(len(vus), Hkv * len(members), spad.size // 2 // per_lane,
                             (spad.size - spad.used_bytes) // per_lane))
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
            q = int(ctx.q_tokens[i])
            P = L - q                       # cached prefix (0: a whole prompt)
            mq = min(q, PREFILL_Q_TILE)
            nq = ceil_div(q, mq)
            NB, KB = ceil_div(L, W), ceil_div(L, H)
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
                if P:
                    self._kv_prefix_load(sv, sd, kp, kvb, b, h, which, P)
                self.ins(sd, "DMA_LOAD", reads=[src], writes=[b], role="in",
                         spad=b.addr + P * hd * eb, hbm=col + h * hd * eb, rows=q, cols=hd,
                         stride=N * eb, dtype=dt)
            # ---- KV append of the unit (its share of the request's K in the PIM layout)
            B.set_op(f"L{l}.kv_append.r{rid}")
            if lay is not None:
                self._v_store_pim_prefill(sv, sd, kp, kvb, vh, h, P)
                self._k_store_pim_prefill(sd, kp, kvb, src, kcol0, N * eb, h, Hkv, P)
            else:
                blk = kp.block_bytes(hd, eb)
                for which, b in ((0, kh), (1, vh)):
                    self.ins(sd, "DMA_STORE", reads=[b], writes=[kvb], role="out",
                             spad=b.addr + P * hd * eb,
                             hbm=kp.addr + (which * Hkv + h) * blk + P * hd * eb, rows=q,
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
                for q0 in range(0, q, mq):
                    m = min(mq, q - q0)
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
                             mask="causal", len=P + q0)
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
