"""Decode attention on PIM (DESIGN section 3): per request and KV unit, q.K on the PIM units
(GWRITE, then per row group PIM_HEADER, G_ACT, PIM_GEMV, PIM_PRECHARGE; on a Newton machine
G_ACT, COMP + READRES, PIM_PRECHARGE: :meth:`PimAttention._pim_row_group`), softmax on the attention VUs, p.V on
PIM and the partial-sum reduction, software-pipelined over two slots per channel.

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

import math

from mapping.codegen.core import _check_stride, Slot, SubState
from mapping.kvlayout import ceil_div


class PimAttention:
    """Instruction generation: decode attention on PIM (module docstring)."""

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
                    gemvs = [(k * lay.head_stride // lay.mults, ncomp, valid * hd,
                              sl.sc.addr + (((h0 + k - k0) * qpk + gi) * lp + g * lay.banks) * 4)
                             for k in range(nh)]
                    self._pim_row_group(pim, c, kvb, sl.sc, kp.key_row + lay.key_row(g, ck),
                                        gemvs, "out")

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
                gemvs = [(k * R // lay.mults, ceil_div(valid, lay.mults), valid * nd,
                          sl.part.addr + ((u * rows + (g0 + k - k0) * qpk + gi) * dkp
                                          + j * lay.banks) * 4)
                         for k in range(ns)]
                self._pim_row_group(pim, c, kvb, sl.part, kp.value_row + lay.value_row(u, gv, j),
                                    gemvs, "body")

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
        self._ao_copy(vu, sl.part, dkp, st.ao, ctx.dec_rows(ctx.sub_of(i)),
                      ctx.row_in_sub(i), range(k0 * self.qpk, k1 * self.qpk))
