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
from array import array

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
        got = self._pieces.get((l, i))
        if got is None:      # the plan is frozen: computed once per request and layer
            from mapping.bufplan import attention_pieces

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
                self.put(pim, self._gwrite(c).one(src, tpk * nh * lay.head_stride),
                         reads=(src_buf,))
                pat = self._qk_pattern(c, sl.sc, lay, ck, gi, k0, G, lp, g0, h0, nh)
                # the scores of token group g, head h0 + k: valid keys x head_dim MACs
                # (a partial last group; g-major)
                valid = L - (G - 1) * lay.banks
                macs = pat.macs(valid, lambda: [lay.banks * hd] * ((G - 1) * nh)
                                + [valid * hd] * nh)
                rows = [seg.key_row + lay.key_row(g0 + r * tpk, ck)
                        for r in range(ceil_div(G, tpk))]
                self._pim_row_groups(pim, c, kvb, sl.sc, rows, pat, macs)
        self.qkv_row_done(i, st)

    def _qk_pattern(self, c: int, sc: Buf, lay, ck: int, gi: int, k0: int, G: int, lp: int,
                    g0: int, h0: int, nh: int) -> "_RowPattern":
        """The row groups of :meth:`_qk_pim`'s q.K of key chunk ``ck`` (heads ``h0 .. h0 +
        nh - 1``), query head ``gi`` of each KV head, over ``G`` token groups from group
        ``g0`` into scores ``sc`` (``lp`` columns) on channel ``c``: made once per operands
        (they repeat across requests and layers; the keys' rows and the MACs are per call).
        The row groups of ``G`` token groups are the first of those of more (of the same
        ``lp``), so one pattern serves every ``G`` of whole key rows (:meth:`_RowPattern.
        prefix`): it is made for the most of them ``lp`` holds."""
        tpk = lay.key_pack
        Gb = G if G % tpk else lp // lay.banks // tpk * tpk
        key = ("qk", c, sc.addr, ck, gi, k0, lp, g0 % tpk, Gb)
        pat = self._patterns.get(key)
        if pat is None:
            hd, qpk = self.hd, self.qpk
            # per token group g of the piece (tpk per key row) and head h0 + k of the chunk,
            # g-major: one row-GEMV of the head's keys into its scores columns
            g = np.repeat(np.arange(Gb), nh)
            k = np.tile(np.arange(nh), Gb)
            gemvs = ((lay.key_col(g0 + g, h0 + k) // lay.mults).tolist(),
                     [ceil_div(hd, lay.mults)] * len(g),
                     (sc.addr + (((h0 + k - k0) * qpk + gi) * lp + g * lay.banks) * 4).tolist())
            sizes = [(min(Gb, (r + 1) * tpk) - r * tpk) * nh for r in range(ceil_div(Gb, tpk))]
            pat = self._patterns[key] = self._row_pattern(c, sizes, gemvs, "out")
        return pat.prefix(ceil_div(G, tpk))

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
        gwrite = self._gwrite(c)
        for runs, gv, g0, ns, gi, dst in todo:
            self.put(pim, gwrite.one(dst, len(runs) * ns * R), reads=(sl.stage,))
            valid = tuple(min(R, L - u * R) for u in runs)
            pat = self._pv_pattern(c, sl.part, lay, rows, k0, gi, g0, ns, runs, u0, valid)
            # per dimension tile j, run u and head g0 + k: the run's valid tokens x the tile's
            # dims MACs
            macs = pat.macs(valid, lambda: [v * min(lay.banks, hd - j * lay.banks)
                                            for j in range(lay.dim_tiles)
                                            for v in valid for _ in range(ns)])
            act_rows = [seg.value_row + lay.value_row(u0 + runs[0], gv, j)
                        for j in range(lay.dim_tiles)]
            self._pim_row_groups(pim, c, kvb, sl.part, act_rows, pat, macs)

    def _pv_pattern(self, c: int, part: Buf, lay, rows: int, k0: int, gi: int, g0: int,
                    ns: int, runs: range, u0: int, valid: tuple[int, ...]) -> "_RowPattern":
        """The row groups of :meth:`_softmax_pv_pim`'s p.V of value runs ``runs`` (``valid``
        tokens each) of the piece starting at run ``u0``, heads ``g0 .. g0 + ns - 1``, query
        head ``gi`` of each (``rows`` rows from KV head ``k0``) into partials ``part`` on
        channel ``c``: made once per operands (the rows and the MACs are per call)."""
        mults = lay.mults
        ncomp = tuple(ceil_div(v, mults) for v in valid)
        key = ("pv", c, part.addr, rows, k0, gi, g0, ns, runs.start, len(runs),
               (u0 + runs.start) % lay.value_pack, ncomp)
        pat = self._patterns.get(key)
        if pat is not None:
            return pat
        qpk = self.qpk
        dkp = lay.dim_tiles * lay.banks
        # per dimension tile j (one row group each), run u and head g0 + k: one row-GEMV
        # of the run's values of the tile's dims, weighted by the run's probabilities
        gemvs = ([], [], [])
        cols = [[lay.value_col(u0 + u, g0 + k) // mults for k in range(ns)] for u in runs]
        heads = [(g0 + k - k0) * qpk * dkp * 4 for k in range(ns)]
        for j in range(lay.dim_tiles):
            for u, n, col in zip(runs, ncomp, cols):
                gemvs[0].extend(col)
                gemvs[1].extend([n] * ns)
                at = part.addr + ((u * rows + gi) * dkp + j * lay.banks) * 4
                gemvs[2].extend([at + h for h in heads])
        pat = self._patterns[key] = self._row_pattern(c, [len(runs) * ns] * lay.dim_tiles,
                                                       gemvs, "body")
        return pat

    def _row_pattern(self, c: int, sizes: list[int],
                     gemvs: tuple[list[int], list[int], list[int]], role: str) -> "_RowPattern":
        """Row groups on PIM channel ``c``, one after the other, their rows left open (the
        caller's, per :meth:`_pim_row_groups`): per group of ``sizes``, open a KV row in every
        bank, the group's ``n`` row-GEMVs (the next ``n`` entries of the columns ``gemvs =
        (col, n_comps, dst)``: ``n_comps`` COMP steps from column step ``col``, the fp32
        ``[banks]`` results to scratchpad ``dst``), close the row.

        ``pim.commands: neupims`` — PIM_HEADER (the GEMV count, so the controller can fit the
        group before a refresh), G_ACT, a fused PIM_GEMV per row-GEMV, PIM_PRECHARGE.
        ``newton`` — G_ACT, per row-GEMV one COMP of ``n_comps`` steps (the controller issues
        ``n_comps`` COMP commands) and a READRES, then PIM_PRECHARGE, which a Newton controller
        sends as the all-bank precharge PREA (:data:`archsim.memory.spec.NEWTON_NAMES`).
        Functionally identical: PIM_GEMV is COMP then READRES (:mod:`archsim.functional`).
        ``role`` is the builder role of the result-writing instructions."""
        t = self._row_templates(c)
        cols, ns, dsts = gemvs
        rc = ROLE_CODE[role]
        pre = t.pre
        seq, roles, acts, res, ends = [], [], [], [], []
        at = 0
        if t.newton:     # G_ACT, (COMP, READRES) per row-GEMV, PIM_PRECHARGE
            pairs = [x for pair in zip(t.comp.many(cols, ns), t.readres.many(dsts))
                     for x in pair]
            for k in sizes:
                acts.append(len(seq))
                res += range(len(seq) + 1, len(seq) + 1 + 2 * k, 2)     # the COMPs' MACs
                seq += (None, *pairs[2 * at:2 * (at + k)], pre)
                roles += (_IN, *[_BODY, rc] * k, _BODY)
                at += k
                ends.append((len(seq), len(res)))
        else:            # PIM_HEADER, G_ACT, PIM_GEMV per row-GEMV, PIM_PRECHARGE
            gv = t.gemv.many(cols, ns, dsts)
            header = t.header.one
            for k in sizes:
                acts.append(len(seq) + 1)
                res += range(len(seq) + 2, len(seq) + 2 + k)
                seq += (header(k), None, *gv[at:at + k], pre)
                roles += (_BODY, _IN, *[rc] * k, _BODY)
                at += k
                ends.append((len(seq), len(res)))
        assert at == len(cols)
        return _RowPattern(seq, acts, roles, res, ends)

    def _pim_row_groups(self, pim: str, c: int, kvb, out, rows: list[int],
                        pat: "_RowPattern", macs: array) -> None:
        """The row groups ``pat`` (:meth:`_row_pattern`) on PIM channel ``c`` (stream ``pim``)
        with KV rows ``rows`` (one per group) of ``kvb``, results into ``out``, ``macs`` the
        instructions' useful MACs (:meth:`_RowPattern.macs`).

        The stream's waits for the KV reads and the result writes come first, before any row
        is open (none is needed between the groups: only this stream touches them meanwhile);
        the instructions are appended at once."""
        # no WAIT while the PIM row is open (refresh is postponed meanwhile)
        self.wait_for(pim, reads=[kvb], writes=[out])
        act = self._row_templates(c).act.one
        seq = pat.seq.copy()
        for p, row in zip(pat.acts, rows, strict=True):
            seq[p] = act(row)
        first = self.B.extend(pim, seq, pat.roles, macs)
        self.accessed(pim, first + pat.acts[-1], reads=[kvb])        # the last G_ACT
        self.accessed(pim, first + len(seq) - 2, writes=[out],       # the last result
                      n_writes=len(pat.res))

    def _gwrite(self, c: int):
        """The GWRITE template of channel ``c`` (``one(src, len)``, the model's dtype)."""
        return self._row_templates(c).gwrite

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


class _RowPattern:
    """PIM row groups on one channel with their rows left open (:meth:`PimAttention.
    _row_pattern`): the instructions ``seq`` (None at the positions ``acts`` of each group's
    G_ACT, in group order), their builder ``roles``, the positions ``res`` of the row-GEMVs'
    MAC counts (in column order); ``ends[r]``: the instructions and row-GEMVs of the first
    ``r + 1`` groups."""

    __slots__ = ("seq", "acts", "roles", "res", "ends", "_prefixes", "_macs")

    def __init__(self, seq: list, acts: list[int], roles, res: list[int],
                 ends: list[tuple[int, int]]) -> None:
        self.seq, self.acts, self.res, self.ends = seq, acts, res, ends
        self.roles = roles if type(roles) is array else array("i", roles)
        self._prefixes: dict[int, _RowPattern] = {}
        self._macs: dict = {}

    def macs(self, key, column) -> array:
        """The MACs of the instructions (int64, one each) when the row-GEMVs' MACs are
        ``column()`` (in column order; 0 for the other instructions), made once per ``key``
        (what the column depends on besides the pattern)."""
        got = self._macs.get(key)
        if got is None:
            got = self._macs[key] = array("q", bytes(8 * len(self.seq)))
            for p, m in zip(self.res, column(), strict=True):
                got[p] = m
        return got

    def prefix(self, n: int) -> "_RowPattern":
        """The pattern of the first ``n`` groups (made once)."""
        if n == len(self.acts):
            return self
        got = self._prefixes.get(n)
        if got is None:
            m, r = self.ends[n - 1]
            got = self._prefixes[n] = _RowPattern(self.seq[:m], self.acts[:n], self.roles[:m],
                                                  self.res[:r], self.ends[:n])
        return got


class _RowTemplates:
    """The instructions of a PIM row group on one channel (:meth:`PimAttention._pim_row_groups`)
    as templates: the channel and data types fixed, rows, columns, counts and destinations
    per instruction; ``pre`` the row's PIM_PRECHARGE (all operands fixed)."""

    def __init__(self, c: int, dt: str, newton: bool) -> None:
        self.newton = newton
        self.act = template("G_ACT", channel=c, bg_mask=0)
        self.gwrite = template("GWRITE", channel=c, dtype=dt)
        self.pre = template("PIM_PRECHARGE", channel=c, bg_mask=0).one()
        if newton:
            self.comp = template("COMP", channel=c, dtype=dt)
            self.readres = template("READRES", channel=c, dtype="fp32")
        else:
            self.header = template("PIM_HEADER", channel=c)
            self.gemv = template("PIM_GEMV", channel=c, dtype=dt, out_dtype="fp32")
