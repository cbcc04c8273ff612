"""KV cache loads of a prompt chunk's cached prefix (chunked prefill): the inverse of the stores
of :mod:`mapping.codegen.kv_store` for one KV head, into the ``[P, head_dim]`` row-major buffer
that prefill attention reads (:meth:`mapping.codegen.prefill_attention.PrefillAttention.
_attn_prefill`, a whole prefix or, for a chunk attended in key blocks, a key block's part of
it).

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

    def _kv_block_load(self, sv: str, sd: str, kp, kvb: Buf, src: Buf, buf: Buf, col: int,
                       row_bytes: int, h: int, which: int, t0: int, n: int, P: int,
                       role: str = "in") -> None:
        """Load tokens ``t0 .. t0 + n - 1`` of KV head ``h``'s K (``which`` 0) or V (1) of the
        request placed at ``kp`` into rows ``0 .. n-1`` of ``buf`` (``[n, head_dim]``, model
        dtype): those before ``P`` (a prompt chunk's cached prefix) from the KV cache
        (:meth:`_kv_cached_load`), the others from ``pf_qkv`` (``src``; ``col``: HBM address
        of head 0's K or V column of token ``P``, the request's first row; ``row_bytes``: the
        QKV row pitch), one strided ``DMA_LOAD`` on DMA queue ``sd`` with role ``role``."""
        eb, hd = self.eb, self.hd
        e = t0 + n
        if t0 < P:
            self._kv_cached_load(sv, sd, kp, kvb, buf, h, which, t0, min(P, e))
        a = max(t0, P)
        if a < e:
            self.ins(sd, "DMA_LOAD", reads=[src], writes=[buf], role=role,
                     spad=buf.addr + (a - t0) * hd * eb, hbm=col + ((a - P) * row_bytes
                                                                   + h * hd * eb),
                     rows=e - a, cols=hd, stride=row_bytes, dtype=self.dt)

    def _kv_cached_load(self, sv: str, sd: str, kp, kvb: Buf, buf: Buf, h: int, which: int,
                        t0: int, t1: int) -> None:
        """Load cached tokens ``t0 .. t1-1`` of KV head ``h``'s K (``which`` 0) or V (1) of the
        request placed at ``kp`` into rows ``0 .. t1-t0-1`` of ``buf`` (``[t1 - t0, head_dim]``,
        model dtype), on DMA queue ``sd`` (and vector unit ``sv`` for the PIM-layout V).

        PIM layout (:mod:`mapping.kvlayout`; each token group or value run read from the KV
        segment, i.e. channel, holding it): K, one strided ``DMA_LOAD`` per token group (one
        token per bank, ``[valid, head_dim]`` lands as rows); V, per run of ``value_run``
        tokens and dimension tile of ``B`` dims one strided ``DMA_LOAD`` of the packed ``[dims,
        tokens]`` tile, a ``VU_COPY`` of it into ``V^T`` ``[head_dim, t1 - t0]`` and one
        ``VU_TRANSPOSE`` into ``buf``. Streaming layout: one ``DMA_LOAD`` of the head's rows.
        The caller checked the PIM layout (``head_stride == head_dim``, a constant bank
        stride). The instructions have the ``body`` role: they consume no edge of the layer's
        operator graph (``mapping.verify.check_graph_dependencies``)."""
        plan = self.plan
        lay = plan.pim_layout
        eb, dt, hd, Hkv = self.eb, self.dt, self.hd, self.Hkv
        n = t1 - t0
        cached = (kvb, {})     # written before this program: no wait
        if lay is None:
            blk = kp.block_bytes(hd, eb)
            self.ins(sd, "DMA_LOAD", reads=[cached], writes=[buf], spad=buf.addr,
                     hbm=kp.addr + (which * Hkv + h) * blk + t0 * hd * eb, rows=n, cols=hd,
                     stride=hd * eb, dtype=dt)
            return
        stride = self._bank_stride
        assert stride is not None
        nb_, R = lay.banks, lay.run
        if which == 0:
            for ta, rows, hbm in self._key_groups(kp, h // lay.heads_per_key_row, h,
                                                  t0 // nb_, ceil_div(t1, nb_), t0, t1):
                self.ins(sd, "DMA_LOAD", reads=[cached], writes=[buf],
                         spad=buf.addr + (ta - t0) * hd * eb, hbm=hbm,
                         rows=rows, cols=hd, stride=stride, dtype=dt)
            return
        vt = self.alloc("vtp", hd * n * eb)
        pack = self.alloc("vpackp", self._value_pack_tiles(t0, t1) * nb_ * R * eb)
        for k, ta, valid, j, nd, hbm in self._value_tiles(kp, h, t0, t1):
            at = pack.addr + k * nb_ * R * eb
            self.ins(sd, "DMA_LOAD", reads=[cached], writes=[pack], spad=at, hbm=hbm,
                     rows=nd, cols=valid, stride=stride, dtype=dt)
            self.ins(sv, "VU_COPY", reads=[pack], writes=[vt],
                     dst=vt.addr + (j * nb_ * n + ta - t0) * eb, src=at, rows=nd,
                     cols=valid, src_stride=valid, dst_stride=n, dtype=dt, out_dtype=dt)
        self.ins(sv, "VU_TRANSPOSE", reads=[vt], writes=[buf], dst=buf.addr,
                 src=vt.addr, rows=hd, cols=n, dtype=dt)
        self.free(vt)
        self.free(pack)
