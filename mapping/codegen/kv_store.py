"""KV cache stores into the PIM layout of :mod:`mapping.kvlayout`: the decode step's K row and
V elements of one request, and the whole prompt's (or a prompt chunk's) K and V of prefill.

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

from mapping.builder import ROLE_CODE
from mapping.codegen.core import Buf, PREFILL_SLAB_BYTES, SubState
from mapping.errors import UnsupportedError
from mapping.kvlayout import ceil_div


_INOUT = ROLE_CODE["inout"]


class KvStore:
    """Instruction generation: KV cache stores into the PIM layout (module docstring)."""

    def _key_groups(self, kp, ck: int, h: int, g0: int, g1: int, t0: int, t1: int):
        """The PIM-layout K of tokens ``t0 .. t1-1`` of the request placed at ``kp``, token
        groups ``g0 .. g1-1`` (``B`` tokens each, one per bank), key chunk ``ck``, from KV head
        ``h``'s column: yields ``(ta, n, hbm)`` per group: its first token in range, how many
        of its tokens are in range, and the HBM address of token ``ta`` in the KV segment
        (channel) holding the group (a group's tokens before ``t0`` are skipped: the address
        starts at their bank). The one walk of the K layout, for the stores
        (:meth:`_k_store_pim_prefill`) and the loads
        (:meth:`mapping.codegen.kv_load.KvLoad._kv_cached_load`)."""
        plan = self.plan
        lay = plan.pim_layout
        nb_ = lay.banks
        for g in range(g0, g1):
            ta = max(g * nb_, t0)
            seg = kp.segment_of(g * nb_)          # the KV segment (channel) of the group
            gl = g - seg.token0 // nb_
            yield ta, min((g + 1) * nb_, t1) - ta, plan.pim_addr(
                seg.channel, seg.key_row + lay.key_row(gl, ck), ta - g * nb_,
                lay.key_col(gl, h))

    def _value_tiles(self, kp, h: int, a: int, e: int):
        """The PIM-layout V of KV head ``h``'s tokens ``a .. e-1`` of the request placed at
        ``kp``, as packed ``[dims, tokens]`` tiles: per run of ``value_run`` tokens (in the KV
        segment holding the run) and dimension tile ``j`` of ``B`` dims, yields ``(k, ta,
        valid, j, nd, hbm)``: the tile's index in a pack buffer (tiles of ``B x value_run``
        elements, in this order), the run's first token in range and how many are in range,
        the tile, its dims, and the HBM address of token ``ta``'s column (a run's tokens
        before ``a`` are skipped). The one walk of the V layout, for the stores
        (:meth:`_v_store_pim_prefill`) and the loads (``KvLoad._kv_cached_load``); the pack
        buffer holds :meth:`_value_pack_tiles` tiles."""
        plan = self.plan
        lay = plan.pim_layout
        R, nb_ = lay.run, lay.banks
        gv = h // lay.slots
        k = 0
        for u in range(a // R, ceil_div(e, R)):
            ta = max(u * R, a)
            valid = min((u + 1) * R, e) - ta
            seg = kp.segment_of(u * R)            # the KV segment of the run
            ul = u - seg.token0 // R
            for j in range(lay.dim_tiles):
                yield k, ta, valid, j, min(nb_, self.hd - j * nb_), plan.pim_addr(
                    seg.channel, seg.value_row + lay.value_row(ul, gv, j), 0,
                    lay.value_col(ul, h) + ta - u * R)
                k += 1

    def _value_pack_tiles(self, a: int, e: int) -> int:
        """Tiles :meth:`_value_tiles` yields for tokens ``a .. e-1`` (runs x dimension tiles)."""
        lay = self.plan.pim_layout
        return (ceil_div(e, lay.run) - a // lay.run) * lay.dim_tiles

    def _kv_append_pim(self, l: int, i: int, st: SubState):
        """Store request ``i``'s new K and V (this step's token) into its PIM KV layout, at
        slot ``append_slot`` of its placement (the token's position, or position mod window in
        a sliding-window rolling buffer), in the KV segment holding that slot (its channel
        ``c``). A generator: emits one ``DMA_STORE`` per step (yielding True), so that
        :meth:`_attn_pim` can interleave the appends of several channels. V stores are ordered
        row by row (the heads sharing a bank row back to back: row-buffer hits).

        The stores all read the request's q|k|v row and write its KV: the first waits for
        them, the others need no wait (nothing else touches those buffers while the appends
        are interleaved), and their accesses are recorded at the last (as
        :meth:`mapping.codegen.core.CodegenCore.put_run` does for a run)."""
        ctx, plan = self.ctx, self.plan
        lay = plan.pim_layout
        assert lay is not None
        kp = plan.kv[(l, i)]
        seg = kp.segment_of(kp.append_slot)
        c = seg.channel
        rid = ctx.request_id(i)
        part, opname = self.request_part(i), f"L{l}.kv_append.r{rid}"
        stream = self.s_dv(self._att_vu(c))
        kvb = self.hbm(f"kv.L{l}.r{rid}")
        eb, hd, Hq, Hkv = self.eb, self.hd, self.Hq, self.Hkv
        B = self.B
        B.set_part(part)
        B.set_op(opname)
        src, qk_row, v_row = self.qkv_row(i, st, stream, self._qkv_uses.get(i, 1))
        store = self.template("DMA_STORE", dtype=self.dt)    # spad, hbm, rows, cols, stride
        t = kp.append_slot - seg.token0   # seq_len - 1 (or (L - 1) mod W), in the segment
        g, b = divmod(t, lay.banks)
        stores = []
        for ck in range(lay.key_chunks):
            h0 = ck * lay.heads_per_key_row
            h1 = min(h0 + lay.heads_per_key_row, Hkv)
            pieces = [(h0, h1)] if lay.head_stride == hd else [(h, h + 1) for h in range(h0, h1)]
            for a, e in pieces:
                hbm = plan.pim_addr(c, seg.key_row + lay.key_row(g, ck), b, lay.key_col(g, a))
                stores.append(store.one(qk_row + (Hq * hd + a * hd) * eb, hbm, 1,
                                        (e - a) * hd, 0))
        stride = self._bank_stride
        if stride is not None:
            u, tt = divmod(t, lay.run)
            for gv in range(ceil_div(Hkv, lay.slots)):
                for j in range(lay.dim_tiles):
                    nd = min(lay.banks, hd - j * lay.banks)
                    for h in range(gv * lay.slots, min(Hkv, (gv + 1) * lay.slots)):
                        hbm = plan.pim_addr(c, seg.value_row + lay.value_row(u, gv, j), 0,
                                            lay.value_col(u, h) + tt)
                        stores.append(store.one(v_row + (h * hd + j * lay.banks) * eb, hbm,
                                                nd, 1, stride))
        last = len(stores) - 1
        for n, ins in enumerate(stores):
            B.set_part(part)
            B.set_op(opname)
            if n == 0:
                self.put(stream, ins, reads=(src,), writes=(kvb,), role=_INOUT)
            else:
                pos = B.append(stream, ins, _INOUT)
                if n == last:
                    self.accessed(stream, pos, reads=(src,), writes=(kvb,), n_writes=n)
            yield True
        if stride is None:            # after the K stores, as the V stores would start
            raise UnsupportedError("PIM KV append needs a constant address distance between "
                                   "consecutive banks; address_mapping "
                                   f"'{ctx.cfg.memory.controller.address_mapping}' has none")
        self.qkv_row_done(i, st)

    def _k_store_pim_prefill(self, sd: str, kp, kvb: Buf, src: Buf, kcol0: int,
                             row_bytes: int, part: int = 0, n_parts: int = 1,
                             first: int = 0) -> None:
        """K half of the KV append of a whole prompt, or of tokens ``first .. L-1`` of it (a
        prompt chunk), in the PIM layout (see :meth:`_attn_prefill`): per key chunk, slabs of
        the token groups holding them (at most :data:`PREFILL_SLAB_BYTES`, at least one group)
        are loaded from ``pf_qkv`` (``kcol0``: HBM address of K head 0 of token ``first``;
        ``row_bytes``: the QKV row pitch) and stored one token group (``B`` tokens, one per
        bank; a group's tokens before ``first`` are skipped, the store starting at their bank)
        per strided store (into the KV segment holding the group), on DMA queue ``sd``; only
        the slabs ``k`` with ``k % n_parts == part`` (the request's K append shared by its
        ``n_parts`` attention units). The caller checked the layout (whole COMP steps per
        head, a constant bank stride)."""
        plan = self.plan
        lay = plan.pim_layout
        stride = self._bank_stride
        assert lay is not None and stride is not None
        eb, dt, hd, Hkv = self.eb, self.dt, self.hd, self.Hkv
        L = kp.seq_len
        nb_ = lay.banks
        hpr = lay.heads_per_key_row
        groups = lay.token_groups(L)
        k = -1
        for ck in range(lay.key_chunks):
            h0 = ck * hpr
            nh = min(hpr, Hkv - h0)
            gps = max(1, PREFILL_SLAB_BYTES // (nb_ * nh * hd * eb))   # token groups per slab
            for g0 in range(first // nb_, groups, gps):
                k += 1
                if k % n_parts != part:
                    continue
                t0 = max(g0 * nb_, first)
                nt = min((g0 + gps) * nb_, L) - t0
                slab = self.alloc("kslab", nt * nh * hd * eb)
                self.ins(sd, "DMA_LOAD", reads=[src], writes=[slab], role="in", spad=slab.addr,
                         hbm=kcol0 + (t0 - first) * row_bytes + h0 * hd * eb, rows=nt,
                         cols=nh * hd, stride=row_bytes, dtype=dt)
                for ta, valid, hbm in self._key_groups(kp, ck, h0, g0,
                                                       min(groups, g0 + gps), first, L):
                    self.ins(sd, "DMA_STORE", reads=[slab], writes=[kvb], role="out",
                             spad=slab.addr + (ta - t0) * nh * hd * eb, hbm=hbm,
                             rows=valid, cols=nh * hd, stride=stride, dtype=dt)
                self.free(slab)

    def _v_store_pim_prefill(self, sv: str, sd: str, kp, kvb: Buf, vh: Buf, h: int,
                             t0: int = 0, n: int | None = None, first: int = 0) -> None:
        """V half of the KV append in the PIM layout for KV head ``h`` (see
        :meth:`_attn_prefill`): ``vh`` ``[n, head_dim]`` holds tokens ``t0 .. t0 + n - 1``
        (default: the whole prompt); those from ``first`` on (a prompt chunk after its cached
        prefix; all by default) are transposed and stored per run of ``value_run`` tokens and
        dimension tile of ``B`` dims (one per bank) as a packed ``[dims, tokens]`` tile, into
        the KV segment holding the run (a run's tokens before them are skipped, the store
        starting at their column)."""
        plan = self.plan
        lay = plan.pim_layout
        assert lay is not None
        eb, dt, hd = self.eb, self.dt, self.hd
        e = kp.seq_len if n is None else t0 + n           # one past the last token
        a = max(t0, first)                                # first token stored
        if a >= e:
            return
        cnt = e - a
        R = lay.run
        nb_ = lay.banks
        stride = self._bank_stride
        assert stride is not None          # checked by the caller
        vt = self.alloc("vt", hd * cnt * eb)
        self.ins(sv, "VU_TRANSPOSE", reads=[vh], writes=[vt], dst=vt.addr,
                 src=vh.addr + (a - t0) * hd * eb, rows=cnt, cols=hd, dtype=dt)
        pack = self.alloc("vpack", self._value_pack_tiles(a, e) * nb_ * R * eb)
        for k, ta, valid, j, nd, hbm in self._value_tiles(kp, h, a, e):
            at = pack.addr + k * nb_ * R * eb
            self.ins(sv, "VU_COPY", reads=[vt], writes=[pack], dst=at,
                     src=vt.addr + (j * nb_ * cnt + ta - a) * eb, rows=nd, cols=valid,
                     src_stride=cnt, dst_stride=valid, dtype=dt, out_dtype=dt)
            self.ins(sd, "DMA_STORE", reads=[pack], writes=[kvb], role="out", spad=at,
                     hbm=hbm, rows=nd, cols=valid, stride=stride, dtype=dt)
        self.free(vt)
        self.free(pack)
