"""Decode attention on PIM (DESIGN section 3): per request and KV unit, q.K on the PIM units
(GWRITE, then per row group PIM_HEADER, G_ACT, PIM_GEMV, PIM_PRECHARGE; on a Newton machine
G_ACT, COMP + READRES, PIM_PRECHARGE: :meth:`PimAttention._pim_row_groups`), softmax on the
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

import numpy as np

from mapping.builder import ROLE_CODE, template
from mapping.codegen.core import _check_stride, Buf, Slot, SubState
from mapping.kvlayout import ceil_div

Item = tuple[int, int, int, int]
"""A pipeline item of PIM attention: ``(batch position, first KV head, end KV head, block)``."""


class PimAttention:
    """Instruction generation: decode attention on PIM (module docstring)."""

    def _attn_pim(self, l: int, s: int, st: SubState, members: list[int]) -> None:
        """Decode attention of sub-batch ``s``'s ``members`` in layer ``l`` on PIM: per channel,
        the pieces (:meth:`pieces`) of its requests' KV units software-pipelined over two
        slots (module docstring), the KV appends interleaved across channels."""
        uh = self.unit_heads()
        by_ch: dict[int, list[Item]] = {}
        for i in members:
            for k0 in range(0, self.Hkv, uh):
                for b, (seg, _, _) in enumerate(self.pieces(l, i)):
                    by_ch.setdefault(seg.channel, []).append((i, k0, min(k0 + uh, self.Hkv), b))
        chans = sorted(by_ch)
        # readers of a request's q|k|v row: its KV append and each of its items' q.K
        self._qkv_uses = {i: 1 for i in members}
        for items in by_ch.values():
            for item in items:
                self._qkv_uses[item[0]] += 1
        # the merges of a unit's pieces run in the order their sum stages are emitted below
        # (step k + 2 of their channel's list, channels in order): first and last of each unit
        order = sorted(((k, ci), item) for ci, c in enumerate(chans)
                       for k, item in enumerate(by_ch[c]))
        self._merge_first, self._merge_last = {}, {}
        for _, item in order:
            self._merge_first.setdefault(item[:3], item)
            self._merge_last[item[:3]] = item
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
                    cohort.append(self._kv_append_pim(l, by_ch[c][k][0], st))
            while cohort:
                cohort = [g for g in cohort if next(g, None) is not None]
            for c in chans:
                if k < len(by_ch[c]):
                    item = by_ch[c][k]
                    sl = self.slots_for(c, self.ctx.seq_max_on_channel(c),
                                        lse=self.ctx.lse_on_channel(c))[k % 2]
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

    def pieces(self, l: int, i: int) -> list[tuple]:
        """Attention pieces of batch position ``i`` in layer ``l``
        (:func:`mapping.bufplan.attention_pieces`: key blocks of its KV segments)."""
        from mapping.bufplan import attention_pieces

        got = self._pieces.get((l, i))
        if got is None:      # the plan is frozen: computed once per request and layer
            got = self._pieces[(l, i)] = attention_pieces(self.plan.kv[(l, i)],
                                                          self.ctx.attn_block)
        return got

    def _qk_pim(self, l: int, item: Item, c: int, st: SubState, sl: Slot) -> None:
        """q.K^T of KV heads ``[k0, k1)`` of request ``i`` over its attention piece ``b`` (a
        key block of one of its KV segments) on channel ``c`` into ``sl.sc`` (fp32
        ``[(k1-k0)*q_per_kv, lp]``, row = query head - k0*q_per_kv, column = token - first
        token of the piece)."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1, b = item
        lay = plan.pim_layout
        assert lay is not None
        rid = ctx.request_id(i)
        B.set_part(self.unit_part(item))
        B.set_op(f"L{l}.attn_score.r{rid}")
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        seg, t0, L = self.pieces(l, i)[b]
        assert seg.channel == c
        g0 = t0 // lay.banks
        lp = lay.scores_cols(L)
        pim = self.s_pim(c)
        vu = self.s_vu(self._att_vu(c))
        qb, q_row, _ = self.qkv_row(i, st, self.s_dv(self._att_vu(c)), self._qkv_uses[i])
        kvb = self.hbm(f"kv.L{l}.r{rid}")
        sl.sc.new_gen()
        sl.stage.new_gen()
        G = lay.token_groups(L)
        ncomp = ceil_div(hd, lay.mults)
        hpr = lay.heads_per_key_row
        tpk = lay.key_pack     # token groups per key row (packed layout), else 1
        for ck in range(k0 // hpr, ceil_div(k1, hpr)):
            h0 = ck * hpr
            nh = min(hpr, Hkv - h0)
            for gi in range(qpk):
                hq0 = h0 * qpk + gi
                if qpk == 1 and lay.head_stride == hd and tpk == 1:
                    src_buf, src = qb, q_row + hq0 * hd * eb
                else:   # the group's heads, once per token group of a packed row
                    src_buf = sl.stage
                    src = sl.stage.addr + ((ck - k0 // hpr) * qpk + gi) * lay.page_elems * eb
                    for o in range(tpk):
                        self.ins(vu, "VU_COPY", reads=[qb], writes=[sl.stage],
                                 dst=src + o * nh * lay.head_stride * eb,
                                 src=q_row + hq0 * hd * eb, rows=nh,
                                 cols=hd, src_stride=qpk * hd, dst_stride=lay.head_stride,
                                 dtype=dt, out_dtype=dt)
                self.ins(pim, "GWRITE", reads=[src_buf], channel=c, src=src,
                         len=tpk * nh * lay.head_stride, dtype=dt)
                # per token group g of the piece (tpk per key row) and head h0 + k of the
                # chunk, g-major: one row-GEMV of the head's keys into its scores columns
                g = np.repeat(np.arange(G), nh)
                k = np.tile(np.arange(nh), G)
                valid = np.minimum(lay.banks, L - g * lay.banks)
                gemvs = ((lay.key_col(g0 + g, h0 + k) // lay.mults).tolist(), [ncomp] * len(g),
                         (valid * hd).tolist(),
                         (sl.sc.addr + (((h0 + k - k0) * qpk + gi) * lp
                                        + g * lay.banks) * 4).tolist())
                groups = [(seg.key_row + lay.key_row(g0 + r * tpk, ck),
                           (min(G, (r + 1) * tpk) - r * tpk) * nh)
                          for r in range(ceil_div(G, tpk))]
                self._pim_row_groups(pim, c, kvb, sl.sc, groups, gemvs, "out")
        self.qkv_row_done(i, st)

    def _softmax_pv_pim(self, l: int, item: Item, c: int, sl: Slot) -> None:
        """Softmax of the item's score rows (and, with several key blocks, their log-sum-exp
        after them), probability gathers, and p.V on PIM into ``sl.part`` (fp32 ``[runs, rows,
        dim_tiles*B]``)."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1, b = item
        lay = plan.pim_layout
        assert lay is not None
        rid = ctx.request_id(i)
        eb, dt, hd, qpk = self.eb, self.dt, self.hd, self.qpk
        rows = (k1 - k0) * qpk
        pieces = self.pieces(l, i)
        seg, t0, L = pieces[b]
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
        blocked = len(pieces) > 1
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
        rpk = lay.value_pack   # runs per value row (packed layout), else 1
        # dst, src, rows, cols, src_stride, dst_stride
        gather = self.template("VU_COPY", dtype="fp32", out_dtype=dt)
        gathers = []
        for ur in range(0, U, rpk):
            runs = range(ur, min(U, ur + rpk))
            for gv in range(k0 // lay.slots, ceil_div(k1, lay.slots)):
                g0 = gv * lay.slots
                ns = min(k1, g0 + lay.slots) - g0
                for gi in range(qpk):
                    r0 = (g0 - k0) * qpk + gi
                    dst = sl.stage.addr + idx * lay.page_elems * eb
                    _check_stride(qpk * lp, "gather")
                    gathers += [gather.one(dst + o * ns * R * eb,
                                           sl.sc.addr + (r0 * lp + u * R) * 4, ns, R,
                                           qpk * lp, R) for o, u in enumerate(runs)]
                    todo.append((runs, gv, g0, ns, gi, dst))
                    idx += 1
        self.put_run(vu, gathers, reads=(sl.sc,), writes=(sl.stage,), role=_IN)
        for runs, gv, g0, ns, gi, dst in todo:
            self.ins(pim, "GWRITE", reads=[sl.stage], channel=c, src=dst,
                     len=len(runs) * ns * R, dtype=dt)
            # per dimension tile j (one row group each), run u and head g0 + k: one row-GEMV
            # of the run's values of the tile's dims, weighted by the run's probabilities
            gemvs = ([], [], [], [])
            for j in range(lay.dim_tiles):
                nd = min(lay.banks, hd - j * lay.banks)
                for u in runs:
                    valid = min(R, L - u * R)
                    gemvs[0].extend(lay.value_col(u0 + u, g0 + k) // lay.mults
                                    for k in range(ns))
                    gemvs[1].extend([ceil_div(valid, lay.mults)] * ns)
                    gemvs[2].extend([valid * nd] * ns)
                    at = sl.part.addr + ((u * rows + gi) * dkp + j * lay.banks) * 4
                    gemvs[3].extend(at + (g0 + k - k0) * qpk * dkp * 4 for k in range(ns))
            groups = [(seg.value_row + lay.value_row(u0 + runs[0], gv, j), len(runs) * ns)
                      for j in range(lay.dim_tiles)]
            self._pim_row_groups(pim, c, kvb, sl.part, groups, gemvs, "body")

    def _pim_row_groups(self, pim: str, c: int, kvb, out, groups: list[tuple[int, int]],
                        gemvs: tuple[list[int], list[int], list[int], list[int]],
                        role: str) -> None:
        """Row groups on PIM channel ``c``, one after the other: per ``(row, n)`` of ``groups``,
        open KV ``row`` in every bank, the group's ``n`` row-GEMVs (the next ``n`` entries of
        the columns ``gemvs = (col, n_comps, macs, dst)``: ``n_comps`` COMP steps from column
        step ``col``, the fp32 ``[banks]`` results to scratchpad ``dst``), close the row.

        ``pim.commands: neupims`` — PIM_HEADER (the GEMV count, so the controller can fit the
        group before a refresh), G_ACT, a fused PIM_GEMV per row-GEMV, PIM_PRECHARGE.
        ``newton`` — G_ACT, per row-GEMV one COMP of ``n_comps`` steps (the controller issues
        ``n_comps`` COMP commands) and a READRES, then PIM_PRECHARGE, which a Newton controller
        sends as the all-bank precharge PREA (:data:`archsim.memory.spec.NEWTON_NAMES`).
        Functionally identical: PIM_GEMV is COMP then READRES (:mod:`archsim.functional`).
        ``role`` is the builder role of the result-writing instructions.

        The stream's waits for the KV reads and the result writes come first, before any row
        is open (none is needed between the groups: only this stream touches them meanwhile);
        the instructions are built from the channel's templates and appended at once."""
        # no WAIT while the PIM row is open (refresh is postponed meanwhile)
        self.wait_for(pim, reads=[kvb], writes=[out])
        t = self._row_templates(c)
        cols, ns, macs, dsts = gemvs
        rc = ROLE_CODE[role]
        act, pre = t.act.one, t.pre
        seq, roles, mac = [], [], []
        at = 0
        if t.newton:     # G_ACT, (COMP, READRES) per row-GEMV, PIM_PRECHARGE
            pairs = [x for pair in zip(t.comp.many(cols, ns), t.readres.many(dsts))
                     for x in pair]
            zmac = [x for m in macs for x in (m, 0)]
            for row, k in groups:
                seq += (act(row), *pairs[2 * at:2 * (at + k)], pre)
                roles += (_IN, *[_BODY, rc] * k, _BODY)
                mac += (0, *zmac[2 * at:2 * (at + k)], 0)
                at += k
            n_act_from_end = 2 + 2 * groups[-1][1]
        else:            # PIM_HEADER, G_ACT, PIM_GEMV per row-GEMV, PIM_PRECHARGE
            gv = t.gemv.many(cols, ns, dsts)
            header = t.header.one
            for row, k in groups:
                seq += (header(k), act(row), *gv[at:at + k], pre)
                roles += (_BODY, _IN, *[rc] * k, _BODY)
                mac += (0, 0, *macs[at:at + k], 0)
                at += k
            n_act_from_end = 2 + groups[-1][1]
        assert at == len(cols)
        first = self.B.extend(pim, seq, roles, mac)
        end = first + len(seq) - 1                   # the last PIM_PRECHARGE
        self.accessed(pim, end + 1 - n_act_from_end, reads=[kvb])      # the last G_ACT
        self.accessed(pim, end - 1, writes=[out], n_writes=len(cols))  # the last result

    def _row_templates(self, c: int) -> "_RowTemplates":
        """The instruction templates of :meth:`_pim_row_groups` on channel ``c`` (made once)."""
        t = self.templates.get(("pim_row", c))
        if t is None:
            t = self.templates[("pim_row", c)] = _RowTemplates(
                c, self.dt, self.ctx.cfg.pim.commands == "newton")
        return t

    def _sum_pim(self, l: int, item: Item, st: SubState, c: int, sl: Slot) -> None:
        """Add the run partials of the item; one piece: copy its heads into the projection
        input; several: merge the piece into the unit's running output (module docstring;
        started by the unit's first merge, copied out and freed after its last)."""
        ctx, plan, B = self.ctx, self.plan, self.B
        i, k0, k1, b = item
        lay = plan.pim_layout
        assert lay is not None and st.ao is not None
        rid = ctx.request_id(i)
        B.set_part(self.unit_part(item))
        B.set_op(f"L{l}.attn_context.r{rid}")
        rows = (k1 - k0) * self.qpk
        vu = self._att_vu(c)
        dkp = lay.dim_tiles * lay.banks
        pieces = self.pieces(l, i)
        _, _, L = pieces[b]
        add = self.template("VU_ADD", bcast=0, dtype="fp32")      # dst, a, b, rows, cols
        self.put_run(self.s_vu(vu), [add.one(sl.part.addr, sl.part.addr,
                                             sl.part.addr + u * rows * dkp * 4, rows, dkp)
                                     for u in range(1, lay.runs(L))],
                     reads=(sl.part,), writes=(sl.part,))
        if len(pieces) == 1:
            self._ao_copy(vu, sl.part, dkp, st.ao, ctx.dec_rows(ctx.sub_of(i)),
                          ctx.row_in_sub(i), range(k0 * self.qpk, k1 * self.qpk))
            return
        unit = item[:3]
        first = self._merge_first[unit] == item
        if first:
            self._unit_merges[unit] = self.merge_alloc(f"merge.L{l}.r{rid}.h{k0}", rows, dkp)
        acc = self._unit_merges[unit]
        lse_b = sl.part.view("lse", lay.runs(L) * rows * dkp * 4, rows * 4)
        self.merge_block(self.s_vu(vu), acc, sl.part, lse_b, rows, dkp, first)
        if self._merge_last[unit] == item:
            self._ao_copy(vu, acc["o"], 2 * dkp, st.ao, ctx.dec_rows(ctx.sub_of(i)),
                          ctx.row_in_sub(i), range(k0 * self.qpk, k1 * self.qpk))
            self.merge_free(self._unit_merges.pop(unit))

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

    def merge_alloc(self, name: str, rows: int, cols: int) -> dict:
        """A running-output buffer set (as :meth:`merge_buffers`) for one merged unit, freed by
        :meth:`merge_free`; the largest number of bytes held at once counts as attention."""
        from mapping.bufplan import merge_bytes

        n = merge_bytes(rows, cols)
        root = self.alloc(name, n)
        got = self.merge_views(root, rows, cols)
        got["root"] = root
        self.merge_live += self._aligned(n)
        self.merge_peak = max(self.merge_peak, self.merge_live)
        got["bytes"] = self._aligned(n)
        return got

    def merge_free(self, acc: dict) -> None:
        """Free a buffer set of :meth:`merge_alloc` (reusable once its accesses completed)."""
        self.merge_live -= acc["bytes"]
        self.free(acc["root"])

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
                    cols: int, first: bool) -> None:
        """Merge a key block's output ``part`` (fp32 ``[rows, cols]``, dense) and its
        log-sum-exp ``lse_b`` (fp32 ``[rows]``) into the running output ``acc`` on vector
        stream ``sv`` (module docstring); the ``first`` block starts the running output."""
        o, lse, w = acc["o"], acc["lse"], acc["w"]
        slot = 0 if first else 1
        if first:
            o.new_gen()
        self.ins(sv, "VU_COPY", reads=[part], writes=[o], dst=o.addr + slot * cols * 4,
                 src=part.addr, rows=rows, cols=cols, src_stride=cols, dst_stride=2 * cols,
                 dtype="fp32", out_dtype="fp32")
        self.ins(sv, "VU_COPY", reads=[lse_b], writes=[lse], dst=lse.addr + slot * 4,
                 src=lse_b.addr, rows=rows, cols=1, src_stride=1, dst_stride=2, dtype="fp32",
                 out_dtype="fp32")
        if first:
            return
        # w = softmax([lse, lse_b]) per row, its log-sum-exp the merged lse
        self.ins(sv, "VU_SOFTMAX", reads=[lse], writes=[w], dst=w.addr, src=lse.addr,
                 rows=rows, cols=2, dtype="fp32", mask="none", len=0, lse=1)
        self.ins(sv, "VU_COPY", reads=[w], writes=[lse], dst=lse.addr, src=w.addr + rows * 8,
                 rows=rows, cols=1, src_stride=1, dst_stride=2, dtype="fp32", out_dtype="fp32")
        # o[r] <- w[r, 0] o[r] + w[r, 1] o_b[r], row by row
        dot = self.template("VU_DOT", rows=2, trans=1, dtype="fp32", out_dtype="fp32",
                            order="seq")                            # dst, mat, vec, cols
        self.put_run(sv, [dot.one(o.addr + r * 2 * cols * 4, o.addr + r * 2 * cols * 4,
                                  w.addr + r * 8, cols) for r in range(rows)],
                     reads=(o, w), writes=(o,))


_IN, _BODY = ROLE_CODE["in"], ROLE_CODE["body"]


class _RowTemplates:
    """The instructions of a PIM row group on one channel (:meth:`PimAttention._pim_row_groups`)
    as templates: the channel and data types fixed, rows, columns, counts and destinations
    per instruction; ``pre`` the row's PIM_PRECHARGE (all operands fixed)."""

    def __init__(self, c: int, dt: str, newton: bool) -> None:
        self.newton = newton
        self.act = template("G_ACT", channel=c, bg_mask=0)
        self.pre = template("PIM_PRECHARGE", channel=c, bg_mask=0).one()
        if newton:
            self.comp = template("COMP", channel=c, dtype=dt)
            self.readres = template("READRES", channel=c, dtype="fp32")
        else:
            self.header = template("PIM_HEADER", channel=c)
            self.gemv = template("PIM_GEMV", channel=c, dtype=dt, out_dtype="fp32")
