"""KV cache loads of a prompt chunk's cached prefix (chunked prefill): the inverse of the stores
of :mod:`mapping.codegen.kv_store` for one KV head, into the ``[P, head_dim]`` row-major buffer
that prefill attention reads (:meth:`mapping.codegen.prefill_attention.PrefillAttention.
_attn_prefill`).

The prefix was written by earlier iterations (programs), so the loads wait for nothing in this
program, and nothing in it writes those tokens: the chunk's own append writes tokens ``P ..
L-1`` only (disjoint addresses; ``mapping.verify.find_races`` checks it in the tests).

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

from mapping.codegen.core import Buf
from mapping.kvlayout import ceil_div


class KvLoad:
    """Instruction generation: cached-prefix loads (module docstring)."""

    def _kv_prefix_load(self, sv: str, sd: str, kp, kvb: Buf, buf: Buf, h: int, which: int,
                        P: int) -> None:
        """Load tokens ``0 .. P-1`` of KV head ``h``'s K (``which`` 0) or V (1) of the request
        placed at ``kp`` into rows ``0 .. P-1`` of ``buf`` (``[P, head_dim]``, model dtype), on
        DMA queue ``sd`` (and vector unit ``sv`` for the PIM-layout V).

        PIM layout (:mod:`mapping.kvlayout`): K, one strided ``DMA_LOAD`` per token group (one
        token per bank, ``[valid, head_dim]`` lands as rows); V, per run of ``value_run`` tokens
        and dimension tile of ``B`` dims one strided ``DMA_LOAD`` of the packed ``[dims,
        tokens]`` tile, a ``VU_COPY`` of it into ``V^T`` ``[head_dim, P]`` and one
        ``VU_TRANSPOSE`` into ``buf``. Streaming layout: one ``DMA_LOAD`` of the head's block.
        The caller checked the PIM layout (``head_stride == head_dim``, a constant bank
        stride). The instructions have the ``body`` role: they consume no edge of the layer's
        operator graph (``mapping.verify.check_graph_dependencies``)."""
        plan = self.plan
        lay = plan.pim_layout
        eb, dt, hd, Hkv = self.eb, self.dt, self.hd, self.Hkv
        cached = (kvb, {})     # written before this program: no wait
        if lay is None:
            blk = kp.block_bytes(hd, eb)
            self.ins(sd, "DMA_LOAD", reads=[cached], writes=[buf], spad=buf.addr,
                     hbm=kp.addr + (which * Hkv + h) * blk, rows=P, cols=hd, stride=hd * eb,
                     dtype=dt)
            return
        stride = self._bank_stride
        assert stride is not None
        c, nb_, R = kp.channel, lay.banks, lay.run
        if which == 0:
            ck, hk = divmod(h, lay.heads_per_key_row)
            for g in range(lay.token_groups(P)):
                self.ins(sd, "DMA_LOAD", reads=[cached], writes=[buf],
                         spad=buf.addr + g * nb_ * hd * eb,
                         hbm=plan.pim_addr(c, kp.key_row + lay.key_row(g, ck), 0,
                                           hk * lay.head_stride),
                         rows=min(nb_, P - g * nb_), cols=hd, stride=stride, dtype=dt)
            return
        gv, si = divmod(h, lay.slots)
        U = ceil_div(P, R)
        vt = self.alloc("vtp", hd * P * eb)
        pack = self.alloc("vpackp", U * lay.dim_tiles * nb_ * R * eb)
        k = 0
        for u in range(U):
            valid = min(R, P - u * R)
            for j in range(lay.dim_tiles):
                nd = min(nb_, hd - j * nb_)
                at = pack.addr + k * nb_ * R * eb
                k += 1
                self.ins(sd, "DMA_LOAD", reads=[cached], writes=[pack], spad=at,
                         hbm=plan.pim_addr(c, kp.value_row + lay.value_row(u, gv, j), 0,
                                           si * R),
                         rows=nd, cols=valid, stride=stride, dtype=dt)
                self.ins(sv, "VU_COPY", reads=[pack], writes=[vt],
                         dst=vt.addr + (j * nb_ * P + u * R) * eb, src=at, rows=nd,
                         cols=valid, src_stride=valid, dst_stride=P, dtype=dt, out_dtype=dt)
        self.ins(sv, "VU_TRANSPOSE", reads=[vt], writes=[buf], dst=buf.addr,
                 src=vt.addr, rows=hd, cols=P, dtype=dt)
        self.free(vt)
        self.free(pack)
