"""The seams of a mixed (chunked-prefill) sub-batch: decode rows and prompt rows in one GEMM.

A sub-batch of a mixed program holds its decode steps first (``ctx.dec_rows(s)`` rows), then its
prompt chunks (:class:`mapping.compiler.Context`). The GEMM chains run over all its rows
together, block by block; where a row block holds both kinds, its QKV output is computed into a
block buffer as in prefill and split here: decode rows are copied into the sub-batch's
scratchpad ``q|k|v`` (read by decode attention, as in a decode program), prompt rows are stored
to ``pf_qkv`` in HBM (read by prefill attention). Before the projection, the block's input is
assembled the other way: decode rows from the scratchpad attention output ``ao``, prompt rows
from ``pf_ao``. A block of decode rows only, or of prompt rows only, is exactly the decode or
the prefill code, so a mixed program without prompt chunks is a decode program and one without
decode steps a prefill program (``tests/test_mapping_mixed.py`` checks both).

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

from mapping.codegen.core import Buf, SubState, _check_stride
from mapping.kvlayout import ceil_div


class MixedRows:
    """Instruction generation: decode rows of a mixed row block (module docstring)."""

    def _dec_rows_to_scratchpad(self, s: int, st: SubState, qk: Buf, v: Buf, snap_qk: dict,
                                snap_v: dict, chunks: list[tuple[int, int, int]], block: int,
                                m: int, nd: int, b0: int) -> None:
        """Copy rows ``[0, nd)`` of a QKV block buffer (``qk`` ``[m, (Hq+Hkv)·hd]`` and ``v``
        ``[m, Hkv·hd]``, row-major) into rows ``[b0, b0 + nd)`` of the sub-batch's scratchpad
        ``st.qk`` / ``st.v``: one ``VU_COPY`` per part and VU row chunk, on that chunk's VU
        (after the GEMM epilogues ``snap_*``; bias and RoPE of the rows ran on the same VU)."""
        assert st.qk is not None and st.v is not None
        eb, dt = self.eb, self.dt
        qkc = (self.Hq + self.Hkv) * self.hd
        vc = self.Hkv * self.hd
        _check_stride(qkc, "mixed q|k copy")
        for vu, r0, r1 in self.iter_chunks(s, chunks, block):
            r1 = min(r1, nd)
            if r0 >= r1:
                continue
            for src, snap, dst, cols in ((qk, snap_qk, st.qk, qkc), (v, snap_v, st.v, vc)):
                self.ins(self.s_vu(vu), "VU_COPY", reads=[(src, snap)], writes=[dst],
                         dst=dst.addr + (b0 + r0) * cols * eb, src=src.addr + r0 * cols * eb,
                         rows=r1 - r0, cols=cols, src_stride=cols, dst_stride=cols, dtype=dt,
                         out_dtype=dt)

    def _dec_ao_to_block(self, vu: int, st: SubState, xb: Buf, m: int, md: int, b0: int,
                         nd: int) -> None:
        """Copy the attention output of decode rows ``[b0, b0 + nd)`` of the sub-batch (blocked
        ``st.ao`` ``[ceil(K/H)][md][kh]``, ``md`` decode rows) into the first ``nd`` rows of
        the projection's blocked input ``xb`` ``[ceil(K/H)][m][kh]`` (``K = Hq·hd``), one
        ``VU_COPY`` per column block on vector unit ``vu``. Role ``body`` (as the block's loads
        of prompt rows from ``pf_ao``): each reads the attention output of some of the
        block's requests only, so the projection's GEMM, which waits for both, is what
        consumes the attention (``mapping.verify.check_graph_dependencies``)."""
        assert st.ao is not None
        H, eb, dt = self.H, self.eb, self.dt
        K = self.Hq * self.hd
        for kb in range(ceil_div(K, H)):
            kh = min(H, K - kb * H)
            self.ins(self.s_vu(vu), "VU_COPY", reads=[st.ao], writes=[xb],
                     dst=xb.addr + m * H * kb * eb, src=st.ao.addr + (md * H * kb + b0 * kh) * eb,
                     rows=nd, cols=kh, src_stride=kh, dst_stride=kh, dtype=dt, out_dtype=dt)
