"""Decode attention on PIM (DESIGN section 3): per request and KV unit, q.K on the PIM units
(GWRITE, then per row group PIM_HEADER, G_ACT, PIM_GEMV, PIM_PRECHARGE; on a Newton machine
G_ACT, COMP + READRES, PIM_PRECHARGE: :meth:`PimAttention._pim_row_group`), softmax on the
attention VUs, p.V on PIM and the partial-sum reduction, software-pipelined over two slots per
channel.

**Key blocks.** A request whose cached tokens exceed the buffer plan's attention block
(``ctx.attn_block``, :mod:`mapping.bufplan`: sized from the scratchpad) is attended block by
block of ``attn_block`` tokens (a multiple of the banks and of the value run, so that token
groups and value runs never straddle blocks): each block's scores, softmax and p.V run as one
pipeline item with the buffers of one block, the softmax also writing each row's log-sum-exp
(``VU_SOFTMAX lse=1``), and the block results are merged on the NPU as they arrive: with ``o``
and ``lse`` the running output and log-sum-exp of the blocks so far and ``o_b``, ``lse_b`` the new
block's, ``w = softmax([lse, lse_b])`` (``VU_SOFTMAX lse=1`` over the two, which also gives the
new ``lse``) and ``o <- w_0 o + w_1 o_b`` (one ``VU_DOT`` per query row). This is the
numerically safe block merge of online softmax (Milakov & Gimelshein, "Online normalizer
calculation for softmax", 2018; Dao et al., "Flash-Decoding for long-context inference",
2023): exact up to rounding, and the scratchpad a request needs no longer grows with its
context. A request that fits one block runs exactly as before (no merge).

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

import math

from mapping.codegen.core import _check_stride, Buf, Slot, SubState
from mapping.kvlayout import ceil_div

Item = tuple[int, int, int, int]
"""A pipeline item of PIM attention: ``(batch position, first KV head, end KV head, block)``."""


class PimAttention:
    """Instruction generation: decode attention on PIM (module docstring)."""

    def _attn_pim(self, l: int, s: int, st: SubState, members: list[int]) -> None:
        plan = self.plan
        uh = self.unit_heads()
        by_ch: dict[int, list[Item]] = {}
        for i in members:
            nb = self.attn_blocks(plan.kv[(l, i)].seq_len)
            for k0 in range(0, self.Hkv, uh):
                for b in range(nb):
                    by_ch.setdefault(plan.kv[(l, i)].channel, []).append(
                        (i, k0, min(k0 + uh, self.Hkv), b))
        chans = sorted(by_ch)
        depth = max(len(v) for v in by_ch.values())
        state: dict[Item, tuple] = {}
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
                    item = by_ch[c][k]
                    sl = self.slots_for(c, self.block_tokens(self.ctx.seq_max_on_channel(c)),
                                        lse=self.attn_blocks(self.ctx.seq_max_on_channel(c)) > 1
                                        )[k % 2]
                    self._qk_pim(l, item, c, st, sl)
                    state[item] = (c, sl)
            for c in chans:
                if 0 <= k - 1 < len(by_ch[c]):
                    item = by_ch[c][k - 1]
                    self._softmax_pv_pim(l, item, *state[item])
            for c in chans:
                if 0 <= k - 2 < len(by_ch[c]):
                    item = by_ch[c][k - 2]
                    self._sum_pim(l, item, st, *state.pop(item))

    def _block_span(self, L: int, b: int) -> tuple[int, int]:
        """First token and token count of key block ``b`` of a request of ``L`` cached
        tokens."""
        t0 = b * self.block_tokens(L)
        return t0, min(L, t0 + self.block_tokens(L)) - t0

    def _qk_pim(self, l: int, item: Item, c: int, st: SubState, sl: Slot) -> None:
        """q.K^T of KV heads ``[k0, k1)`` of request ``i`` over key block ``b`` on channel
        ``c`` into ``sl.sc`` (fp32 ``[(k1-k0)*q_per_kv, lp]``, row = query head - k0*q_per_kv,
        column = token - first token of the block)."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1, b = item
        lay = plan.pim_layout
        assert lay is not None and st.qk is not None
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        B.set_part(self.unit_part(item))
        B.set_op(f"L{l}.attn_score.r{rid}")
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        t0, L = self._block_span(kp.seq_len, b)
        g0 = t0 // lay.banks
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
                    gemvs = [(k * lay.head_stride // lay.mults, ncomp, valid * hd,
                              sl.sc.addr + (((h0 + k - k0) * qpk + gi) * lp + g * lay.banks) * 4)
                             for k in range(nh)]
                    self._pim_row_group(pim, c, kvb, sl.sc,
                                        kp.key_row + lay.key_row(g0 + g, ck), gemvs, "out")

    def _softmax_pv_pim(self, l: int, item: Item, c: int, sl: Slot) -> None:
        """Softmax of the item's score rows (and, with several key blocks, their log-sum-exp
        after them), probability gathers, and p.V on PIM into ``sl.part`` (fp32 ``[runs, rows,
        dim_tiles*B]``)."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1, b = item
        lay = plan.pim_layout
        assert lay is not None
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        eb, dt, hd, qpk = self.eb, self.dt, self.hd, self.qpk
        rows = (k1 - k0) * qpk
        t0, L = self._block_span(kp.seq_len, b)
        u0 = t0 // lay.run
        lp = lay.scores_cols(L)
        vu = self.s_vu(self._att_vu(c))
        pim = self.s_pim(c)
        kvb = self.hbm(f"kv.L{l}.r{rid}")
        B.set_part(self.unit_part(item))
        B.set_op(f"L{l}.attn_softmax.r{rid}")
        _check_stride(lp, "softmax")
        self.ins(vu, "VU_SCALE", reads=[sl.sc], writes=[sl.sc], role="in", dst=sl.sc.addr,
                 src=sl.sc.addr, rows=rows, cols=lp, dtype="fp32", imm=1.0 / math.sqrt(hd))
        blocked = self.attn_blocks(kp.seq_len) > 1
        self.ins(vu, "VU_SOFTMAX", reads=[sl.sc], writes=[sl.sc], role="out", dst=sl.sc.addr,
                 src=sl.sc.addr, rows=rows, cols=lp, dtype="fp32", mask="length", len=L,
                 lse=int(blocked))
        B.set_op(f"L{l}.attn_context.r{rid}")
        U = lay.runs(L)
        R = lay.run
        sl.stage.new_gen()
        sl.part.new_gen()
        dkp = lay.dim_tiles * lay.banks
        if blocked:   # the block's log-sum-exp after its partials (the slot's scores are
            # overwritten by the item two steps later before this item's merge runs)
            self.ins(vu, "VU_COPY", reads=[sl.sc], writes=[sl.part],
                     dst=sl.part.addr + U * rows * dkp * 4, src=sl.sc.addr + rows * lp * 4,
                     rows=rows, cols=1, src_stride=1, dst_stride=1, dtype="fp32",
                     out_dtype="fp32")
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
                gemvs = [(k * R // lay.mults, ceil_div(valid, lay.mults), valid * nd,
                          sl.part.addr + ((u * rows + (g0 + k - k0) * qpk + gi) * dkp
                                          + j * lay.banks) * 4)
                         for k in range(ns)]
                self._pim_row_group(pim, c, kvb, sl.part,
                                    kp.value_row + lay.value_row(u0 + u, gv, j), gemvs, "body")

    def _pim_row_group(self, pim: str, c: int, kvb, out, row: int,
                       gemvs: list[tuple[int, int, int, int]], role: str) -> None:
        """One row group on PIM channel ``c``: open KV ``row`` in every bank, one row-GEMV per
        ``(col, n_comps, macs, dst)`` of ``gemvs`` (``n_comps`` COMP steps from column step
        ``col``; the fp32 ``[banks]`` results to scratchpad ``dst``), close the row.

        ``pim.commands: neupims`` — PIM_HEADER (the GEMV count, so the controller can fit the
        group before a refresh), G_ACT, a fused PIM_GEMV per row-GEMV, PIM_PRECHARGE.
        ``newton`` — G_ACT, per row-GEMV one COMP of ``n_comps`` steps (the controller issues
        ``n_comps`` COMP commands) and a READRES, then PIM_PRECHARGE, which a Newton controller
        sends as the all-bank precharge PREA (:data:`archsim.memory.spec.NEWTON_NAMES`).
        Functionally identical: PIM_GEMV is COMP then READRES (:mod:`archsim.functional`).
        ``role`` is the builder role of the result-writing instructions."""
        dt = self.dt
        # no WAIT while the PIM row is open (refresh is postponed meanwhile)
        self.wait_for(pim, reads=[kvb], writes=[out])
        newton = self.ctx.cfg.pim.commands == "newton"
        if not newton:
            self.ins(pim, "PIM_HEADER", channel=c, n_gemvs=len(gemvs))
        self.ins(pim, "G_ACT", reads=[kvb], role="in", channel=c, row=row, bg_mask=0)
        for col, n, macs, dst in gemvs:
            if newton:
                self.ins(pim, "COMP", macs=macs, channel=c, col=col, n_comps=n, dtype=dt)
                self.ins(pim, "READRES", writes=[out], role=role, channel=c, dst=dst,
                         dtype="fp32")
            else:
                self.ins(pim, "PIM_GEMV", writes=[out], role=role, macs=macs, channel=c,
                         col=col, n_comps=n, dst=dst, dtype=dt, out_dtype="fp32")
        self.ins(pim, "PIM_PRECHARGE", channel=c, bg_mask=0)

    def _sum_pim(self, l: int, item: Item, st: SubState, c: int, sl: Slot) -> None:
        """Add the run partials of the item; one key block: copy its heads into the projection
        input; several: merge the block into the channel's running output (module docstring)
        and copy that after the last block."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1, b = item
        lay = plan.pim_layout
        assert lay is not None and st.ao is not None
        kp = plan.kv[(l, i)]
        rid = ctx.request_id(i)
        B.set_part(self.unit_part(item))
        B.set_op(f"L{l}.attn_context.r{rid}")
        rows = (k1 - k0) * self.qpk
        vu = self._att_vu(c)
        dkp = lay.dim_tiles * lay.banks
        _, L = self._block_span(kp.seq_len, b)
        for u in range(1, lay.runs(L)):
            self.ins(self.s_vu(vu), "VU_ADD", reads=[sl.part], writes=[sl.part], dst=sl.part.addr,
                     a=sl.part.addr, b=sl.part.addr + u * rows * dkp * 4, rows=rows, cols=dkp,
                     bcast=0, dtype="fp32")
        nb = self.attn_blocks(kp.seq_len)
        if nb == 1:
            self._ao_copy(vu, sl.part, dkp, st.ao, ctx.rows_per_sub(ctx.sub_of(i)),
                          ctx.row_in_sub(i), range(k0 * self.qpk, k1 * self.qpk))
            return
        acc = self.merge_buffers(c, rows, dkp)
        lse_b = sl.part.view("lse", lay.runs(L) * rows * dkp * 4, rows * 4)
        self.merge_block(self.s_vu(vu), acc, sl.part, lse_b, rows, dkp, b)
        if b == nb - 1:
            self._ao_copy(vu, acc["o"], 2 * dkp, st.ao, ctx.rows_per_sub(ctx.sub_of(i)),
                          ctx.row_in_sub(i), range(k0 * self.qpk, k1 * self.qpk))

    # ------------------------------------------------------------------ block merge
    def merge_buffers(self, key: int, rows: int, cols: int) -> dict[str, Buf]:
        """The running-output buffers of attention lane / channel ``key`` for blocks of
        ``rows`` query rows of ``cols`` fp32 outputs (allocated on first use, sized for the
        largest unit; :func:`mapping.bufplan.merge_bytes`): ``o`` ``[rows, 2, cols]`` (running
        output, then the new block's), ``lse`` ``[rows, 2]`` (their log-sum-exps), ``w``
        ``[rows, 2]`` weights followed by the merged ``[rows]`` log-sum-exp."""
        from mapping.bufplan import merge_bytes

        got = self.merges.get(key)
        if got is None:
            root = self.alloc(f"merge{key}", merge_bytes(rows, cols))
            self.attn_bytes += self._aligned(merge_bytes(rows, cols))
            got = self.merges[key] = self.merge_views(root, rows, cols)
        assert got["rows"] >= rows
        return got

    @staticmethod
    def merge_views(root: Buf, rows: int, cols: int, k: int = 0) -> dict:
        """The ``k``-th set of running-output views (see :meth:`merge_buffers`) in ``root``,
        sets of :func:`mapping.bufplan.merge_bytes` ``(rows, cols)`` bytes one after another
        (they share ``root``'s hazard state)."""
        from mapping.bufplan import merge_bytes

        base, o = k * merge_bytes(rows, cols), rows * 2 * cols * 4
        return {"o": root.view("o", base, o), "lse": root.view("lse", base + o, rows * 8),
                "w": root.view("w", base + o + rows * 8, rows * 12), "rows": rows}

    def merge_block(self, sv: str, acc: dict, part: Buf, lse_b: Buf, rows: int,
                    cols: int, b: int) -> None:
        """Merge key block ``b``'s output ``part`` (fp32 ``[rows, cols]``, dense) and its
        log-sum-exp ``lse_b`` (fp32 ``[rows]``) into the running output ``acc`` on vector
        stream ``sv`` (module docstring). Block 0 starts the running output."""
        o, lse, w = acc["o"], acc["lse"], acc["w"]
        slot = 0 if b == 0 else 1
        if b == 0:
            o.new_gen()
        self.ins(sv, "VU_COPY", reads=[part], writes=[o], dst=o.addr + slot * cols * 4,
                 src=part.addr, rows=rows, cols=cols, src_stride=cols, dst_stride=2 * cols,
                 dtype="fp32", out_dtype="fp32")
        self.ins(sv, "VU_COPY", reads=[lse_b], writes=[lse], dst=lse.addr + slot * 4,
                 src=lse_b.addr, rows=rows, cols=1, src_stride=1, dst_stride=2, dtype="fp32",
                 out_dtype="fp32")
        if b == 0:
            return
        # w = softmax([lse, lse_b]) per row, its log-sum-exp the merged lse
        self.ins(sv, "VU_SOFTMAX", reads=[lse], writes=[w], dst=w.addr, src=lse.addr,
                 rows=rows, cols=2, dtype="fp32", mask="none", len=0, lse=1)
        self.ins(sv, "VU_COPY", reads=[w], writes=[lse], dst=lse.addr, src=w.addr + rows * 8,
                 rows=rows, cols=1, src_stride=1, dst_stride=2, dtype="fp32", out_dtype="fp32")
        for r in range(rows):   # o[r] <- w[r, 0] o[r] + w[r, 1] o_b[r]
            self.ins(sv, "VU_DOT", reads=[o, w], writes=[o],
                     dst=o.addr + r * 2 * cols * 4, mat=o.addr + r * 2 * cols * 4,
                     vec=w.addr + r * 8, rows=2, cols=cols, trans=1, dtype="fp32",
                     out_dtype="fp32", order="seq")
