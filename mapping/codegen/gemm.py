"""The GEMM chains of a layer: weight-stationary GEMMs on the systolic arrays (tiles, weight
DMA ring, epilogues), the vector work around them (norms, residuals, activations, RoPE,
reblocking) and the tensor-parallel all-reduce points.

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

from mapping.builder import ROLE_CODE
from mapping.codegen.core import Buf, _check_stride, _merge, part_tag, SubState
from mapping.errors import MappingError, UnsupportedError
from mapping.kvlayout import ceil_div
from mapping.memplan import DTYPE_BYTES, TensorPlacement


class GemmChains:
    """Instruction generation: the GEMM chains (module docstring)."""

    # ------------------------------------------------------------------ GEMM
    def gemm(self, op: str, x: Buf, m: int, K: int, N: int, w: TensorPlacement,
             dests: list[tuple[int, int, Buf, int, int]], x_rows: int | None = None,
             x_row0: int = 0, out_dtype: str | None = None) -> None:
        """``dest[m, N] = x[m, K] @ w[K, N]`` on the systolic arrays.

        Args:
            op: graph node name.
            x: blocked input ``[ceil(K/H)][x_rows][kh]`` in the scratchpad (model dtype); the
                GEMM reads its rows ``[x_row0, x_row0 + m)`` (``x_rows`` defaults to ``m``).
            m, K, N: rows, reduction length, output columns (elements).
            w: tiled weight ``[K, N]`` in HBM.
            dests: ``(c0, c1, buf, buf_col0, buf_cols)``: output columns ``[c0, c1)`` go to
                row-major ``buf`` ``[m, buf_cols]`` starting at column ``buf_col0``.
            out_dtype: element type of the destinations (default the model's; ``fp32`` keeps
                the accumulator's values, e.g. the MoE router logits).

        Output column block ``nb`` (width W) runs on array ``nb mod A``; blocks are issued in
        rounds so that the epilogues of different arrays interleave on the chain VUs.

        The weight ring (``self.wbuf[i]``, its slots used only here) is tracked with explicit
        events, not its buffers' hazard state: a slot's ``DMA_LOAD`` waits for the array's
        ``SA_LOADW`` of the slot's previous tile (``self._wfree``; first its allocation's
        release), the ``SA_LOADW`` for that load: the waits the buffers' reader/writer rules
        gave (the DMA stream never waits for itself). A block's matmuls wait for ``x`` and the
        accumulator at its first tile only (nothing else touches them in the block) and their
        accesses are recorded at its last (:meth:`accessed` with ``n_writes``).
        """
        B, H, W, eb, dt = self.B, self.H, self.W, self.eb, self.dt
        odt = out_dtype or dt
        oeb = DTYPE_BYTES[odt]
        B.set_op(op)
        KB, NB = ceil_div(K, H), ceil_div(N, W)
        if m > self.m_max:
            raise MappingError(f"internal: GEMM {op} with {m} rows > accumulator rows "
                               f"{self.m_max}")
        rounds = ceil_div(NB, self.A)
        load = self.template("DMA_LOAD", dtype=dt).one    # spad, hbm, rows, cols, stride
        wait, append = B.wait, B.append
        # dst, src, rows, cols, src_stride, dst_stride
        copy = self.template("VU_COPY", dtype="fp32", out_dtype=odt)
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
                # the tile's instructions from templates (positional operands, in field order)
                loadw = self.template("SA_LOADW", array=i, dtype=dt).one         # w, k, n
                # src, dst, m, n, k, acc
                matmul = self.template("SA_MATMUL", array=i, dtype=dt, out_dtype="fp32").one
                ring, free, tog = self.wbuf[i], self._wfree[i], self._wtog[i]
                xs, accs = (x,), (accb,)
                mm = -1
                for kb in range(KB):
                    kh = min(H, K - kb * H)
                    # the ring slot's load waits for the array's SA_LOADW of its previous tile,
                    # the SA_LOADW for the load (explicit events: no other access to the ring)
                    wait(dw, free[tog])
                    pos = append(dw, load(ring[tog].addr, w.addr + w.tile_offset(kb, nb), kh,
                                          wn, wn * eb), 0, 0)
                    wait(sa, {dw: pos})
                    free[tog] = {sa: append(sa, loadw(ring[tog].addr, kh, wn), 0, 0)}
                    tog = (tog + 1) % len(ring)
                    if not kb:      # the matmuls' waits: x and accb are not written meanwhile
                        self.wait_for(sa, xs, accs)
                    mm = append(sa, matmul(x.addr + ((x_rows or m) * H * kb + x_row0 * kh) * eb,
                                           accb.addr, m, wn, kh, int(kb > 0)), _IN, m * kh * wn)
                self.accessed(sa, mm, xs, accs, n_writes=KB)   # the KB matmuls' accesses
                self._wtog[i] = tog
                v = self.chain_vus[i % len(self.chain_vus)]
                for c0, c1, dbuf, bc0, bcols in dests:
                    a, e = max(c0, nb * W), min(c1, nb * W + wn)
                    if a >= e:
                        continue
                    _check_stride(bcols, op)
                    self.put(self.s_vu(v), copy.one(dbuf.addr + (a - c0 + bc0) * oeb,
                                                    accb.addr + (a - nb * W) * 4, m, e - a, wn,
                                                    bcols),
                             reads=(accb,), writes=(dbuf,), role=_OUT)

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
        md = self.ctx.dec_rows(s)
        if md < m:
            # q|k|v of the sub-batch's prompt tokens go to HBM (pf_qkv rows), block by block
            self.hbm(f"pf_qkv.s{s}").new_gen()
        if md and self.ctx.qkv_staged:
            # decode with q|k|v staged by the buffer plan (decode programs only): dq_qkv rows
            self.hbm(f"dq_qkv.s{s}").new_gen()
        elif md:    # those of its decode steps stay in the scratchpad for attention
            st.qk = self.alloc(f"qkv.L{l}.s{s}", md * N * eb)
            st.v = st.qk.view(f"v.L{l}.s{s}", md * qkc * eb, md * Hkv * hd * eb)
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
        md = ctx.dec_rows(s)
        staged = ctx.qkv_staged    # decode programs only (every row a decode step)
        assert not staged or md >= b1
        # the block has prompt rows (computed into a block buffer) or staged decode rows
        to_hbm = b1 > md or staged
        if to_hbm:
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
        if to_hbm:
            if b0 < md and not staged:     # the block's decode rows into the scratchpad q|k|v
                self._dec_rows_to_scratchpad(s, st, qk, v, snap_qk, snap_v, chunks, base, m,
                                             md - b0, b0)
            # to HBM: rows row0.. of pf_qkv (prompt rows) / dq_qkv (staged decode rows): q|k
            # columns, then v columns
            name = "dq_qkv" if staged else "pf_qkv"
            t = self.plan.tensors[name]
            dst = self.hbm(f"{name}.s{s}")
            for vu, r0, r1 in self.iter_chunks(s, chunks, base):
                if not staged:
                    r0 = max(r0, md - b0)
                    if r0 >= r1:
                        continue
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
        md = ctx.dec_rows(s)
        if b1 > md:
            # prompt rows' attention output comes from HBM (pf_ao rows), loaded straight into
            # blocks (after the block's decode rows, copied from the scratchpad)
            B.set_op(p + "proj")
            t = self.plan.tensors["pf_ao"]
            src = self.hbm(f"pf_ao.s{s}")
            xb = self.alloc(f"aob.L{l}.s{s}", m * K * eb)
            d0 = max(0, md - b0)
            if d0:
                self._dec_ao_to_block(chunks[0][0], st, xb, m, md, b0, d0)
            for kb in range(ceil_div(K, self.H)):
                kh = min(self.H, K - kb * self.H)
                self.ins(dv0, "DMA_LOAD", reads=[src], writes=[xb], role="body" if d0 else "in",
                         spad=xb.addr + (m * self.H * kb + d0 * kh) * eb,
                         hbm=t.addr + ((row0 + d0) * K + kb * self.H) * eb, rows=m - d0,
                         cols=kh, stride=K * eb, dtype=dt)
            self.gemm(p + "proj", xb, m, K, d, self.plan.tensors[p + "proj_w"],
                      [(0, d, po, 0, d)])
            self.free(xb)
        else:
            assert st.ao is not None
            self.gemm(p + "proj", st.ao, m, K, d, self.plan.tensors[p + "proj_w"],
                      [(0, d, po, 0, d)], x_rows=md, x_row0=b0)
        if ctx.tp > 1:
            self.allreduce(p + "proj_allreduce", po, m * d * eb)
        snap = dict(po.writes)
        # attention residual (+ projection bias)
        B.set_op(p + "attn_residual")
        hid_t = self.plan.tensors[f"hidden.{l}"]
        hid = self.hbm(f"hidden.{l}")
        xr = self.alloc(f"xres.L{l}.s{s}", m * d * eb)
        pb = self.load_param(p + "proj_b", dv0) if self.model.proj_bias else None
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
        if self.model.n_experts is not None:        # mixture of experts (codegen/moe.py)
            f2 = self.moe_ffn(l, s, bi, b0, b1, hn, hb)
        else:
            self.free(hn)
            f2 = self._dense_ffn(l, s, m, hb, chunks, base, dv0)
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

    def _dense_ffn(self, l: int, s: int, m: int, hb: Buf, chunks, base: int, dv0: str) -> Buf:
        """The dense FFN of a row block (``m`` rows of blocked ``hb``, freed here): gate and
        FFN1 GEMMs, biases, activation, FFN2; returns its ``[m, d]`` output (before the
        all-reduce and the residual)."""
        B = self.B
        d, eb, dt, ff = self.d, self.eb, self.dt, self.ff
        p = f"L{l}."
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
                self.swiglu_rows(sv, fg, snapg, f1, snap1, r0, r1, ff)
            else:  # pragma: no cover - placement rejects it first
                raise UnsupportedError(f"activation '{act}' has no vector instruction")
            self.reblock(vu, f1, {}, fb, m, ff, r0, r1)
        self.free(f1)
        self.free(fg)
        # FFN2
        f2 = self.alloc(f"f2.L{l}.s{s}", m * d * eb)
        self.gemm(p + "ffn2", fb, m, ff, d, self.plan.tensors[p + "ffn2_w"], [(0, d, f2, 0, d)])
        self.free(fb)
        return f2

    def swiglu_rows(self, sv: str, fg: Buf, snapg: dict, f1: Buf, snap1: dict, r0: int,
                    r1: int, ff: int) -> None:
        """SwiGLU of rows ``[r0, r1)`` on vector stream ``sv``, in place: ``fg = silu(fg)``,
        then ``f1 = fg * f1`` (row-major ``[*, ff]`` gate and up outputs, their writes
        ``snapg`` / ``snap1``); the product is the activation's input-role instruction."""
        eb, dt = self.eb, self.dt
        self.ins(sv, "VU_SILU", reads=[(fg, snapg)], writes=[fg], dst=fg.addr + r0 * ff * eb,
                 src=fg.addr + r0 * ff * eb, rows=r1 - r0, cols=ff, dtype=dt)
        self.ins(sv, "VU_MUL", reads=[(fg, {}), (f1, snap1)], writes=[f1], role="in",
                 dst=f1.addr + r0 * ff * eb, a=fg.addr + r0 * ff * eb, b=f1.addr + r0 * ff * eb,
                 rows=r1 - r0, cols=ff, bcast=0, dtype=dt)

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


_IN, _OUT = ROLE_CODE["in"], ROLE_CODE["out"]
