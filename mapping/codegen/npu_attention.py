"""Decode attention on the NPU (systems without PIM): K/V blocks streamed from HBM into
per-lane buffers, q.K and p.V on the systolic arrays, softmax on the attention VUs.

A mixin of :class:`mapping.codegen.Codegen`: it uses the state and helpers of
:class:`mapping.codegen.core.CodegenCore`.
"""
from __future__ import annotations

import math

from mapping.codegen.core import Slot, SubState
from mapping.kvlayout import ceil_div


class NpuAttention:
    """Instruction generation: decode attention on the NPU (module docstring)."""

    def _attn_npu(self, l: int, s: int, st: SubState, members: list[int]) -> None:
        """Decode attention on the NPU's vector units through the memory bus (streaming KV).

        Per request (requests dealt round-robin to the attention VUs, each with its DMA queue):
        KV append (2 strided DMA stores, at the placement's ``append_slot``: with a sliding
        window the rolling-buffer slot, and attention over its ``min(L, W)`` slots in slot
        order, exact since softmax is permutation invariant and RoPE is in the keys), per KV head a DMA of its K block and one ``VU_DOT``
        per query head (scores, fp32), one ``VU_SCALE`` + ``VU_SOFTMAX`` over all heads, a
        ``VU_COPY`` of the probabilities to the model dtype, per KV head a DMA of its V block and
        per run of ``value_run`` tokens one ``VU_DOT`` per query head (fp32 partials, PIM
        reduction order), ``VU_ADD`` of the run partials in run order, and the copy into the
        projection input: the same arithmetic, in the same order, as the PIM path.
        """
        ctx, plan, B = self.ctx, self.plan, self.B
        assert st.qk is not None and st.v is not None and st.ao is not None
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        qkc = (Hq + Hkv) * hd
        m = ctx.dec_rows(s)           # rows of the attention output (the decode steps)
        nl = len(self.att_vus)
        R = ctx.value_run
        seq_max = int(ctx.seq.max())       # cached tokens (min(L, W) with a sliding window)
        for n, i in enumerate(members):
            lane = n % nl
            vu = self.att_vus[lane]
            sv, sd = self.s_vu(vu), self.s_dv(vu)
            lb = self.lane_buffers(lane, seq_max)
            sl = lb["slots"][lb["next"] % 2]
            lb["next"] += 1
            kp = plan.kv[(l, i)]
            rid = ctx.request_id(i)
            L = kp.seq_len
            U = ceil_div(L, R)
            rho = ctx.row_in_sub(i)
            kvb = self.hbm(f"kv.L{l}.r{rid}")
            blk = kp.block_bytes(hd, eb)
            B.set_part(self.request_part(i))
            B.set_op(f"L{l}.kv_append.r{rid}")
            self.ins(sd, "DMA_STORE", reads=[st.qk], writes=[kvb], role="inout",
                     spad=st.qk.addr + (rho * qkc + Hq * hd) * eb,
                     hbm=kp.addr + kp.append_slot * hd * eb, rows=Hkv, cols=hd, stride=blk,
                     dtype=dt)
            self.ins(sd, "DMA_STORE", reads=[st.v], writes=[kvb], role="inout",
                     spad=st.v.addr + rho * Hkv * hd * eb,
                     hbm=kp.addr + Hkv * blk + kp.append_slot * hd * eb, rows=Hkv, cols=hd,
                     stride=blk, dtype=dt)
            B.set_op(f"L{l}.attn_score.r{rid}")
            sl.sc.new_gen()
            for h in range(Hkv):
                kb = lb["kv"][lb["kvnext"] % 2]
                lb["kvnext"] += 1
                kb.new_gen()
                self.ins(sd, "DMA_LOAD", reads=[kvb], writes=[kb], spad=kb.addr,
                         hbm=kp.addr + h * blk, rows=L, cols=hd, stride=hd * eb, dtype=dt)
                for gi in range(qpk):
                    hq = h * qpk + gi
                    self.ins(sv, "VU_DOT", reads=[kb, st.qk], writes=[sl.sc], role="inout",
                             macs=L * hd, dst=sl.sc.addr + hq * L * 4, mat=kb.addr,
                             vec=st.qk.addr + (rho * qkc + hq * hd) * eb, rows=L, cols=hd,
                             trans=0, dtype=dt, out_dtype="fp32", order="pim")
            B.set_op(f"L{l}.attn_softmax.r{rid}")
            self.ins(sv, "VU_SCALE", reads=[sl.sc], writes=[sl.sc], role="in", dst=sl.sc.addr,
                     src=sl.sc.addr, rows=Hq, cols=L, dtype="fp32", imm=1.0 / math.sqrt(hd))
            self.ins(sv, "VU_SOFTMAX", reads=[sl.sc], writes=[sl.sc], role="out",
                     dst=sl.sc.addr, src=sl.sc.addr, rows=Hq, cols=L, dtype="fp32",
                     mask="none", len=0)
            B.set_op(f"L{l}.attn_context.r{rid}")
            sl.stage.new_gen()
            sl.part.new_gen()
            self.ins(sv, "VU_COPY", reads=[sl.sc], writes=[sl.stage], role="in",
                     dst=sl.stage.addr, src=sl.sc.addr, rows=Hq, cols=L, src_stride=0,
                     dst_stride=0, dtype="fp32", out_dtype=dt)
            for h in range(Hkv):
                vb = lb["kv"][lb["kvnext"] % 2]
                lb["kvnext"] += 1
                vb.new_gen()
                self.ins(sd, "DMA_LOAD", reads=[kvb], writes=[vb], spad=vb.addr,
                         hbm=kp.addr + (Hkv + h) * blk, rows=L, cols=hd, stride=hd * eb,
                         dtype=dt)
                # p.V run by run (as PIM does), partials added in run order: bit-identical
                for u in range(U):
                    valid = min(R, L - u * R)
                    for gi in range(qpk):
                        hq = h * qpk + gi
                        self.ins(sv, "VU_DOT", reads=[vb, sl.stage], writes=[sl.part],
                                 macs=valid * hd, dst=sl.part.addr + (u * Hq + hq) * hd * 4,
                                 mat=vb.addr + u * R * hd * eb,
                                 vec=sl.stage.addr + (hq * L + u * R) * eb, rows=valid,
                                 cols=hd, trans=1, dtype=dt, out_dtype="fp32", order="pim")
            for u in range(1, U):
                self.ins(sv, "VU_ADD", reads=[sl.part], writes=[sl.part], dst=sl.part.addr,
                         a=sl.part.addr, b=sl.part.addr + u * Hq * hd * 4, rows=Hq, cols=hd,
                         bcast=0, dtype="fp32")
            self._ao_copy(vu, sl.part, hd, st.ao, m, rho, range(Hq))

    def lane_buffers(self, lane: int, seq_max: int) -> dict:
        """Buffers of NPU attention lane ``lane`` (two request slots, two K/V block buffers),
        sized for requests of up to ``seq_max`` tokens; allocated on first use."""
        lb = self.slots.get(1000 + lane)
        if lb is None:
            eb, hd, Hq = self.eb, self.hd, self.Hq
            U = ceil_div(seq_max, self.ctx.value_run)
            slots = [Slot(self.alloc(f"sc{lane}.{k}", Hq * seq_max * 4),
                          self.alloc(f"p{lane}.{k}", Hq * seq_max * eb),
                          self.alloc(f"out{lane}.{k}", U * Hq * hd * 4)) for k in range(2)]
            kv = [self.alloc(f"kvblk{lane}.{k}", seq_max * hd * eb) for k in range(2)]
            lb = self.slots[1000 + lane] = {"slots": slots, "kv": kv, "next": 0, "kvnext": 0}
        return lb
