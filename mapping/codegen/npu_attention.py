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
        projection input: the same arithmetic, in the same order, as the PIM path. A request
        longer than the buffer plan's attention block runs this block by block of K/V (each
        block's softmax with its log-sum-exp) and merges the block outputs as the PIM path does
        (:meth:`merge_block`, :mod:`mapping.codegen.pim_attention`).
        """
        ctx, plan, B = self.ctx, self.plan, self.B
        assert st.ao is not None
        eb, dt, hd, Hq, Hkv, qpk = self.eb, self.dt, self.hd, self.Hq, self.Hkv, self.qpk
        m = ctx.dec_rows(s)           # rows of the attention output (the decode steps)
        nl = len(self.att_vus)
        R = ctx.value_run
        seq_max = int(ctx.seq.max())       # cached tokens (min(L, W) with a sliding window)
        for n, i in enumerate(members):
            lane = n % nl
            vu = self.att_vus[lane]
            sv, sd = self.s_vu(vu), self.s_dv(vu)
            lb = self.lane_buffers(lane, seq_max)
            kp = plan.kv[(l, i)]
            rid = ctx.request_id(i)
            rho = ctx.row_in_sub(i)
            kvb = self.hbm(f"kv.L{l}.r{rid}")
            blk = kp.block_bytes(hd, eb)
            B.set_part(self.request_part(i))
            B.set_op(f"L{l}.kv_append.r{rid}")
            qb, q_row, v_row = self.qkv_row(i, st, sd)
            self.ins(sd, "DMA_STORE", reads=[qb], writes=[kvb], role="inout",
                     spad=q_row + Hq * hd * eb,
                     hbm=kp.addr + kp.append_slot * hd * eb, rows=Hkv, cols=hd, stride=blk,
                     dtype=dt)
            self.ins(sd, "DMA_STORE", reads=[qb], writes=[kvb], role="inout",
                     spad=v_row,
                     hbm=kp.addr + Hkv * blk + kp.append_slot * hd * eb, rows=Hkv, cols=hd,
                     stride=blk, dtype=dt)
            nb = self.attn_blocks(kp.seq_len)
            for b in range(nb):
                sl = lb["slots"][lb["next"] % 2]
                lb["next"] += 1
                t0 = b * self.block_tokens(kp.seq_len)
                L = min(kp.seq_len, t0 + self.block_tokens(kp.seq_len)) - t0
                U = ceil_div(L, R)
                if nb > 1:
                    B.set_part(self.request_part(i, b + 1))
                B.set_op(f"L{l}.attn_score.r{rid}")
                sl.sc.new_gen()
                for h in range(Hkv):
                    kb = lb["kv"][lb["kvnext"] % 2]
                    lb["kvnext"] += 1
                    kb.new_gen()
                    self.ins(sd, "DMA_LOAD", reads=[kvb], writes=[kb], spad=kb.addr,
                             hbm=kp.addr + h * blk + t0 * hd * eb, rows=L, cols=hd,
                             stride=hd * eb, dtype=dt)
                    for gi in range(qpk):
                        hq = h * qpk + gi
                        self.ins(sv, "VU_DOT", reads=[kb, qb], writes=[sl.sc], role="inout",
                                 macs=L * hd, dst=sl.sc.addr + hq * L * 4, mat=kb.addr,
                                 vec=q_row + hq * hd * eb, rows=L, cols=hd,
                                 trans=0, dtype=dt, out_dtype="fp32", order="pim")
                B.set_op(f"L{l}.attn_softmax.r{rid}")
                self.ins(sv, "VU_SCALE", reads=[sl.sc], writes=[sl.sc], role="in",
                         dst=sl.sc.addr, src=sl.sc.addr, rows=Hq, cols=L, dtype="fp32",
                         imm=1.0 / math.sqrt(hd))
                self.ins(sv, "VU_SOFTMAX", reads=[sl.sc], writes=[sl.sc], role="out",
                         dst=sl.sc.addr, src=sl.sc.addr, rows=Hq, cols=L, dtype="fp32",
                         mask="none", len=0, lse=int(nb > 1))
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
                             hbm=kp.addr + (Hkv + h) * blk + t0 * hd * eb, rows=L, cols=hd,
                             stride=hd * eb, dtype=dt)
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
                if nb == 1:
                    self._ao_copy(vu, sl.part, hd, st.ao, m, rho, range(Hq))
                    continue
                acc = self.merge_buffers(1000 + lane, Hq, hd)
                self.merge_block(sv, acc, sl.part, sl.sc.view("lse", Hq * L * 4, Hq * 4), Hq,
                                 hd, b == 0)
                if b == nb - 1:
                    self._ao_copy(vu, acc["o"], 2 * hd, st.ao, m, rho, range(Hq))
            self.qkv_row_done(i, st)

    def lane_buffers(self, lane: int, seq_max: int) -> dict:
        """Buffers of NPU attention lane ``lane`` (two request slots, two K/V block buffers),
        sized for key blocks of the buffer plan, or requests of up to ``seq_max`` tokens when
        shorter (:func:`mapping.bufplan.npu_lane_bytes`); allocated on first use."""
        from mapping.bufplan import npu_lane_bytes

        lb = self.slots.get(1000 + lane)
        if lb is None:
            tokens = self.block_tokens(seq_max)
            z = npu_lane_bytes(self.Hq, self.hd, self.eb, self.ctx.value_run, tokens,
                               self.attn_blocks(seq_max) > 1)
            slots = [Slot(self.alloc(f"sc{lane}.{k}", z["sc"]),
                          self.alloc(f"p{lane}.{k}", z["p"]),
                          self.alloc(f"out{lane}.{k}", z["out"])) for k in range(2)]
            kv = [self.alloc(f"kvblk{lane}.{k}", z["kvblk"]) for k in range(2)]
            self.attn_bytes += 2 * sum(self._aligned(v) for v in z.values())
            lb = self.slots[1000 + lane] = {"slots": slots, "kv": kv, "next": 0, "kvnext": 0}
        return lb
