"""Attention entry point: chooses PIM, NPU or prefill attention per the placement, and
the copy of attention outputs into the output projection's blocked input.

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

from mapping.builder import ROLE_CODE
from mapping.codegen.core import Buf, part_tag
from mapping.memplan import DTYPE_BYTES


class Attention:
    """Instruction generation: the decode attention entry, its output copy (module docstring)."""

    # ------------------------------------------------------------------ attention
    def emit_attn(self, l: int, s: int) -> None:
        """Attention of layer ``l`` for sub-batch ``s``: its decode steps' (PIM or NPU per
        placement) then its prompts' or prompt chunks' (on the arrays, :meth:`_attn_prefill`;
        a mixed sub-batch has both)."""
        ctx = self.ctx
        m = ctx.rows_per_sub(s)
        if m == 0:
            return
        st = self.subs[(l, s)]
        self.B.set_part(part_tag(s))
        members = ctx.members(s)
        md = ctx.dec_rows(s)           # decode steps first, then prompts (chunks)
        if md:
            st.ao = self.alloc(f"ao.L{l}.s{s}", md * self.Hq * self.hd * self.eb)
            if ctx.attention_on_pim:
                self._attn_pim(l, s, st, members[:md])
            else:
                self._attn_npu(l, s, st, members[:md])
            self.free(st.qk)
            st.qk = st.v = None
        if md < len(members):
            self.B.set_part(part_tag(s))
            self._attn_prefill(l, s, members[md:])

    def _ao_copy(self, vu: int, src: Buf, src_stride: int, ao: Buf, m: int, rho: int,
                 heads: range, role: str = "out", src_dtype: str = "fp32") -> None:
        """Copy ``[len(heads), hd]`` rows (row stride ``src_stride`` elements) of one request
        into the blocked projection input ``ao`` at row ``rho``."""
        H, hd, eb, dt = self.H, self.hd, self.eb, self.dt
        K = self.Hq * hd
        segs: list[tuple[int, int, int]] = []   # (head index in src, col start, length)
        for k, h in enumerate(heads):
            c, e = h * hd, h * hd + hd
            while c < e:
                kb = c // H
                n = min(e, (kb + 1) * H) - c
                segs.append((k, c, n))
                c += n
        copy = self.template("VU_COPY", dtype=src_dtype, out_dtype=dt)
        # dst, src, rows, cols, src_stride, dst_stride
        out = []
        i = 0
        while i < len(segs):
            k, c, n = segs[i]
            kb = c // H
            kh = min(H, K - kb * H)
            j = i + 1
            # merge whole heads that follow contiguously in the same block
            while (n == hd and j < len(segs) and segs[j][2] == hd and segs[j][0] == k + (j - i)
                   and segs[j][1] == c + (j - i) * hd and segs[j][1] // H == kb):
                j += 1
            out.append(copy.one(ao.addr + (m * H * kb + rho * kh + (c - kb * H)) * eb,
                                src.addr + (k * src_stride + (c - heads[k] * hd))
                                * DTYPE_BYTES[src_dtype], j - i, n, src_stride, n))
            i = j
        self.put_run(self.s_vu(vu), out, reads=(src,), writes=(ao,), role=ROLE_CODE[role])

    def unit_heads(self) -> int:
        """KV heads of one PIM attention unit (:func:`mapping.bufplan.unit_heads`)."""
        from mapping.bufplan import unit_heads

        lay = self.plan.pim_layout
        assert lay is not None
        return unit_heads(lay, self.Hkv)

    def _att_vu(self, key: int) -> int:
        return self.att_vus[key % len(self.att_vus)]
