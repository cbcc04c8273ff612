"""Adapters around the NPU timing executor for whole-system runs (no new timing rules).

:class:`TracingExecutor` is :class:`archsim.engine.Executor` plus what the system simulator
needs and the executor does not offer yet:

* **Per-instruction times.** For every instruction that does work, its start and completion in
  NPU cycles, taken from the executor's own state at the moment it decides them (SA: the tile's
  start and ``H + W − 2 + max(m, 4)`` later, the weight preload's ``H`` cycles; VU: start and end
  of the op; DMA: from the cycle the transfer is issued to the completion of its last memory
  request; PIM: from submission to the memory's completion of the command). They give the
  per-stage and per-layer breakdown, the busy intervals of every unit and the timeline.
* **Link instructions** (``ALL_REDUCE``, ``SEND``, ``RECV`` on the ``link`` stream) are timed by
  the executor itself (:meth:`archsim.engine.Executor.link_cycles`); here they get their
  start and end like every other instruction.

With the compiled memory (:class:`archsim.memory.kernel.KernelMemory`) the loop is also
*fast-forwarded* (no timing rule of its own): while only memory events, back-pressured DMA
retries and PIM commands followed by another PIM command of their stream happen, the compiled
loop of :mod:`archsim.npu.dmaff` takes the executor's iterations itself, in the executor's
order and with its request ids, and hands back the bookkeeping (DMA counters, a record per
chained PIM command). The requests of a transfer the executor issues itself go to the memory
in one compiled call too (:meth:`archsim.npu.dmaff.DmaFastForward.issue`, registered transfers
of single-burst requests). ``tests/test_speed_identity.py`` pins it: statistics,
per-instruction times, memory statistics and command log equal those of
``fast_forward=False``. Speed: on the GPT3-7B layer of ``benchmarks/bench_system.py``
(558 k NPU cycles, 3.9 M DMA requests) ≈ 74 k round trips between this loop and the kernel
cost ≈ 2.7 s of Python next to ≈ 2.3 s in the kernel.

These adapters use the executor's internal state (``arrays``, ``vus``, ``_rec_counter``,
``pim_wait``...): they belong to the system simulator and are pinned by its tests.
"""
from __future__ import annotations

import numpy as np

from archsim.engine import _PIM_KINDS, _PIM_RID_BASE, _REC_SHIFT, Executor
from archsim.errors import SimulationError
from archsim.npu.timing import tile_latency_cycles
from isa.spec import Engine


def _ds_layout_ok() -> bool:
    """The order of the fast-forward's DMA state vector (``archsim.npu.dmaff.D_*``) that
    :meth:`TracingExecutor._fast_forward` writes and reads positionally."""
    from archsim.npu import dmaff as fm
    return (fm.D_NOW, fm.D_OUT, fm.D_IC, fm.D_IU, fm.D_BS, fm.D_BC, fm.D_REQ, fm.D_BR, fm.D_BW,
            fm.D_MAXO, fm.D_R, fm.D_TPY, fm.D_MAXC, fm.D_STOPPOS, fm.D_NREADY, fm.D_NSLW,
            fm.D_NMEMW, fm.D_RB, fm.D_STEPS, fm.D_START, fm.D_PIMON, fm.D_PIMCTR,
            fm.D_PEVN, fm.D_DEPTH, fm.D_UNIT) == tuple(range(fm.ND)) and fm.ND == 25


class _PimTap:
    """MemoryPort proxy recording the completion cycle (memory clock) of PIM requests."""

    def __init__(self, inner, pim_ids: dict) -> None:
        self.inner = inner
        self.pim_ids = pim_ids
        self.done: dict[int, int] = {}
        self.submit = inner.submit
        self.submit_pim = inner.submit_pim
        self.can_accept = inner.can_accept
        self.next_event_cycle = inner.next_event_cycle
        if hasattr(inner, "submit_many"):
            self.submit_many = inner.submit_many

    def advance_to(self, cycle: int):
        out = self.inner.advance_to(cycle)
        if self.pim_ids:
            ids, done = self.pim_ids, self.done
            for c in out:
                if c.req_id in ids:
                    done[c.req_id] = c.cycle
        return out


class TracingExecutor(Executor):
    """The executor with per-instruction times (module docstring).

    Args:
        program, cfg, memory: as :class:`archsim.engine.Executor`.
        fast_forward: hand memory-only stretches to the compiled loop (identical timing).
        **options: forwarded to the executor (``collectives=False``: untimed all-reduces).

    After :meth:`run`, ``times[stream]`` is a pair of lists ``(start, end)`` (NPU cycles, -1 for
    instructions that do no work: WAIT, SIGNAL, NOP, END).
    """

    def __init__(self, program, cfg, memory, fast_forward: bool = True, **options) -> None:
        self._pim_ids: dict[int, tuple[str, int, int]] = {}
        # on the compiled memory the executor's DMA transfers are registered with the
        # fast-forward's table (archsim.npu.dmaff), which counts their completions: they are
        # handled here; other ports keep the executor's own handling
        from archsim.memory.kernel import KernelMemory

        self._port = memory
        self._flags = isinstance(memory, KernelMemory)
        tap = memory if self._flags else _PimTap(memory, self._pim_ids)
        super().__init__(program, cfg, tap, **options)
        self.tap = tap
        self._ff = bool(fast_forward and self._flags and self._check_accept)
        self._burst = cfg.memory.org.burst_bytes
        if self._flags:
            from archsim.npu import dmaff as _fm
            self._fm = _fm
            self._dff = _fm.DmaFastForward(memory, len(self.streams), self._ratio)
            self._sidx = {id(st): i for i, st in enumerate(self.streams)}
            if not _ds_layout_ok():     # pragma: no cover - a dmaff layout change
                raise SimulationError("dmaff's D_* layout changed: update _fast_forward")
        self.ff_calls = 0
        self.ff_steps = 0
        self.times = {s.name: ([-1] * s.n, [-1] * s.n) for s in self.streams}
        self._recs_open: dict[int, tuple[str, int, int]] = {}
        self._H, self._W = cfg.npu.array_height, cfg.npu.array_width
        self._pim = None
        if self._ff:
            self._pim_chains()
            # request ids are unique (transfer id << 32 | index, PIM counter) and at most
            # max_outstanding DMA requests are in flight
            memory.expect_unique_ids(self.max_outstanding)

    def _pim_chains(self) -> None:
        """Tables for the PIM command chains of the fast-forward (dmaff ``S_*``, ``T_*``):
        every PIM stream and, per instruction, what ``submit_pim``
        would queue for it (T_OK = 0 for non-PIM instructions and for requests the memory
        would reject, which then go through the executor and raise there)."""
        fm = self._fm
        port = self._port
        ks = [k for k, st in enumerate(self.streams)
              if st.kind is Engine.PIM]
        if not ks or fm.PIM_RID_BASE != _PIM_RID_BASE:
            return
        pss = np.zeros((len(self.streams), fm.NSS), np.int64)
        pss[:, fm.S_RID] = -1
        pss[:, fm.S_STEP] = -1
        rows: list[tuple] = []
        memo: dict[tuple, tuple] = {}
        none = (0,) * fm.NPT
        for k in ks:
            st = self.streams[k]
            pss[k, fm.S_N] = st.n
            pss[k, fm.S_OFF] = len(rows)
            for op in st.ops:
                m = op.mnemonic
                if m not in _PIM_KINDS:
                    rows.append(none)
                    continue
                o = op.ops
                # what pim_fields reads of the request (Executor._pim_request)
                key = (m, o["channel"], o.get("row", 0), o.get("n_comps", o.get("n_gemvs", 0)),
                       o.get("bg_mask", 0))
                row = memo.get(key)
                if row is None:
                    try:
                        row = (1,) + port.pim_fields(self._pim_request(st, op, 0, 0))
                    except SimulationError:
                        row = none
                    memo[key] = row
                rows.append(row)
        pt = np.array(rows, np.int64).reshape(-1, fm.NPT)
        ring = np.zeros((len(self.streams), self.pim_depth, 2), np.int64)
        self._pim = (pss, np.array(ks, np.int64), pt, np.zeros((1 << 14, fm.NPEV), np.int64),
                     ring, np.zeros(len(self.streams), np.int64))

    # ---- systolic arrays and vector units
    def _sa_issue(self, s, op, now):
        ok = super()._sa_issue(s, op, now)
        if ok:
            a = op.ops["array"]
            arr = self.arrays[s.last_array if a >= len(self.arrays) else a]
            st, en = self.times[s.name]
            if op.mnemonic == "SA_LOADW":
                en[op.index] = arr.preload_free_at
                st[op.index] = arr.preload_free_at - self._H
            else:
                en[op.index] = arr.busy_end
                st[op.index] = arr.busy_end - tile_latency_cycles(self._H, self._W,
                                                                  op.ops["m"])
        return ok

    def _vu_issue(self, s, op, now):
        unit = self.vus[s.index or 0]
        before = unit.free_at
        ok = super()._vu_issue(s, op, now)
        if ok:
            st, en = self.times[s.name]
            st[op.index] = max(now, before)
            en[op.index] = unit.free_at
        return ok

    # ---- DMA
    def _dma_issue(self, s, op, now):
        n0 = self._rec_counter
        cur = s.dma_cur
        ok = super()._dma_issue(s, op, now)
        if self._rec_counter != n0:
            rid = self._rec_counter
            self._recs_open[rid] = (s.name, op.index, now)
            rec = self.recs.get(rid)
            if rec is None:               # an empty transfer completed at once
                self._close_rec(rid, now)
            elif self._ff:                # registered by _dma_new
                self._dff.T.RISS[rid] = rec.issued
            elif self._flags:
                sizes = rec.size_const if rec.size_arr is None else rec.size_arr
                self._dff.register(rid, rec.addr_arr, rec.is_write, sizes)
                self._dff.T.RISS[rid] = rec.issued
        elif self._flags and cur is not None:
            self._dff.T.RISS[cur.rec_id] = cur.issued
        return ok

    def _dma_new(self, rec) -> None:
        """With the fast-forward, a new (non-empty) transfer is registered with its table at
        once, so that its requests are queued by :meth:`archsim.npu.dmaff.DmaFastForward.issue`."""
        if self._ff and rec.n:
            self._dff.register(rec.rec_id, rec.addr_arr, rec.is_write,
                               rec.size_const if rec.size_arr is None else rec.size_arr)

    def _dma_submit(self, rec, i0, k, t0, used, R):
        """The executor's submission of ``k`` requests of ``rec`` (see
        :meth:`archsim.engine.Executor._dma_submit`), in one JIT call for a registered
        transfer of single-burst requests (same requests, ids, arrivals, back-pressure)."""
        if self._ff and self._dff.eligible(rec.rec_id):
            return self._dff.issue(rec.rec_id, i0, k, t0, used, R)
        return super()._dma_submit(rec, i0, k, t0, used, R)

    def _close_rec(self, rec_id: int, now: int) -> None:
        info = self._recs_open.pop(rec_id, None)
        if info is not None:
            name, idx, t0 = info
            st, en = self.times[name]
            st[idx] = t0
            en[idx] = now

    def _dma_rec_done(self, rec, now):
        super()._dma_rec_done(rec, now)
        self._close_rec(rec.rec_id, now)

    # ---- PIM
    def _pim_submit(self, s, op, now):
        super()._pim_submit(s, op, now)
        rid = s.pim_out[-1]
        self._pim_ids[rid] = (s.name, op.index, now)
        if self._pim is not None:
            # the fast-forward's copy of the stream's commands in flight (dmaff S_*, RING)
            fm = self._fm
            pss, ring = self._pim[0], self._pim[4]
            k = self._sidx[id(s)]
            cnt = pss[k, fm.S_CNT]
            tail = (pss[k, fm.S_HEAD] + cnt) % self.pim_depth
            ring[k, tail, 0] = rid
            ring[k, tail, 1] = now
            if cnt == 0:
                pss[k, fm.S_RID] = rid
                pss[k, fm.S_T0] = now
            pss[k, fm.S_CNT] = cnt + 1
            pss[k, fm.S_NEXT] = op.index + 1
            pss[k, fm.S_PC] = s.pc

    def _send_pim(self, s, op, rid, arrival):
        """With the fast-forward's tables: the request's fields are precomputed (``PT``, what
        ``pim_fields`` gives for it), queued in one compiled call; same request otherwise."""
        if self._pim is not None:
            fm = self._fm
            row = self._pim[2][self._pim[0][self._sidx[id(s)], fm.S_OFF] + op.index]
            if row[fm.T_OK]:
                self._port.push_pim_fields(rid, row[1:], arrival)
                return
        super()._send_pim(s, op, rid, arrival)

    def _pim_left(self, s) -> None:
        """The fast-forward's copy of stream ``s`` after its oldest PIM command completed in
        the executor's own loop (dmaff S_*, RING)."""
        fm = self._fm
        pss, ring = self._pim[0], self._pim[4]
        k = self._sidx[id(s)]
        h = (pss[k, fm.S_HEAD] + 1) % self.pim_depth
        pss[k, fm.S_HEAD] = h
        pss[k, fm.S_CNT] -= 1
        if pss[k, fm.S_CNT] > 0:
            pss[k, fm.S_RID] = ring[k, h, 0]
            pss[k, fm.S_T0] = ring[k, h, 1]
        else:
            pss[k, fm.S_RID] = -1
        pss[k, fm.S_PC] = s.pc

    def _pim_chained(self, n: int) -> None:
        """The executor's bookkeeping of the ``n`` PIM commands the fast-forward completed
        (and whose successors it issued), records ``PEV[:n]`` (dmaff ``E_*``), in order:
        what ``_handle_completions`` and ``_pim_issue`` would have done for them."""
        fm = self._fm
        pss, _, pt, pev, ring, _ = self._pim
        streams = self.streams
        times = self.times
        pim_stats = self.pim_stats
        pim_wait = self.pim_wait
        pim_ids = self._pim_ids
        touched = set()
        sent: dict[int, tuple[int, int]] = {}     # id -> (index, cycle) of commands sent here
        for k, pc, t0, t, old, new, now, nidx in pev[:n].tolist():
            s = streams[k]
            touched.add(k)
            if old >= 0:                          # a command completed
                st, en = times[s.name]
                st[pc] = t0
                en[pc] = t
                self._pim_busy(s.index, t0, t)
                if t > s.max_done:
                    s.max_done = t
                self._advance(s, now)
                if sent.pop(old, None) is None:   # sent by the executor: it waits for it
                    pim_wait.pop(old)
                    pim_ids.pop(old, None)
            if new >= 0:                          # a command sent
                pim_stats[int(pt[pss[k, fm.S_OFF] + nidx, fm.T_CH])].commands += 1
                sent[new] = (nidx, now)
        depth = self.pim_depth
        for k in touched:
            s = streams[k]
            h, cnt = int(pss[k, fm.S_HEAD]), int(pss[k, fm.S_CNT])
            s.pim_out.clear()
            for j in range(cnt):
                rid = int(ring[k, (h + j) % depth, 0])
                s.pim_out.append(rid)
                x = sent.get(rid)
                if x is not None:                 # still in flight: the executor waits
                    pim_wait[rid] = (s, x[1])
                    pim_ids[rid] = (s.name, x[0], x[1])
            s.pim_next = int(pss[k, fm.S_NEXT])

    def _handle_completions(self, now, taken=None):
        """The executor's completion handling; ``taken``: ``(completions, flags)`` that the
        fast-forward already took from the memory at ``now`` (else the memory is advanced)."""
        if not self._flags:
            super()._handle_completions(now)
            done = self.tap.done
            if done:
                for rid, cyc in done.items():
                    name, idx, t0 = self._pim_ids.pop(rid)
                    st, en = self.times[name]
                    st[idx] = t0
                    en[idx] = max(self._from_mem(cyc), t0)
                done.clear()
            return
        # the executor's handling, with the transfer bookkeeping of the fast-forward's table
        if taken is None:
            comps = self.mem.advance_to(self._to_mem(now))
            if not comps:
                return
            flags = self._dff.tally(self._port.last_out).tolist()
        else:
            comps, flags = taken
            if not comps:
                return
        recs = self.recs
        freed = 0
        for c, fl in zip(comps, flags):
            rid = c.req_id
            if rid >= _PIM_RID_BASE:
                s, _, t = self._pim_done(rid, c.cycle, now)
                if self._pim is not None:
                    self._pim_left(s)
                info = self._pim_ids.pop(rid, None)
                if info is not None:
                    st, en = self.times[info[0]]
                    st[info[1]] = info[2]
                    en[info[1]] = t
                self._make_ready(s)
                continue
            freed += 1
            if fl:
                rec = recs[rid >> _REC_SHIFT]
                rec.remaining = 0
                self._dma_rec_done(rec, now)
        if freed:
            self.outstanding -= freed
            if self.outstanding == 0:
                self.dma.busy_cycles += now - self.dma_busy_since
            if self.slot_waiters:
                for w in self.slot_waiters:
                    self._make_ready(w)
                self.slot_waiters.clear()

    # ---- DMA fast-forward (archsim.npu.dmaff._dma_ff)
    def _fast_forward(self, now: int, first: list | None = None) -> tuple[int, bool]:
        """Let the fast memory run the executor's loop (back-pressured DMA retries, PIM
        command chains, memory events up to the next executor timer) until the executor is
        needed; returns ``(now, True)`` when at least one iteration was taken over.
        ``first``: ready DMA streams that retry at ``now`` before the loop (the executor's
        ready queue)."""
        fm = self._fm
        dff = self._dff
        sidx = self._sidx
        FREC, SLW, MEMW = dff.FREC, dff.SLW, dff.MEMW
        relig = dff.T.RELIG
        waiters = []
        lists = ((self.slot_waiters, SLW), (self.mem_waiters, MEMW))
        if first:
            lists = lists + ((first, dff.READY),)
        for lst, arr in lists:
            for i, w in enumerate(lst):
                rec = w.dma_cur
                if rec is None or rec.ready_at > now or rec.rec_id >= relig.shape[0] \
                        or not relig[rec.rec_id]:
                    return now, False
                k = sidx[id(w)]
                FREC[k] = rec.rec_id
                arr[i] = k
                waiters.append(rec)
        DS = dff.DS
        heap = self.heap
        pim = self._pim
        first_n = len(first) if first else 0
        # the whole state vector at once (layout dmaff.D_*, checked by _ds_layout_ok)
        DS[:] = (now, self.outstanding, self.issue_cycle, self.issue_used, self.dma_busy_since,
                 self.dma.busy_cycles, self.dma.requests, self.dma.bytes_read,
                 self.dma.bytes_written, self.max_outstanding, self.dma_issue_per_cycle,
                 heap[0][0] if heap else fm.INF,
                 -1 if self.max_cycles is None else self.max_cycles,
                 0, first_n, len(self.slot_waiters), len(self.mem_waiters),
                 self.request_bytes, 0, 1 if first else 0, 0 if pim is None else 1,
                 self._pim_counter, 0, self.pim_depth, 1 if self._unit_clock else 0)
        st = dff.run(pim)
        self.ff_calls += 1
        (dnow, out, ic, iu, bs, bc, req, br, bw, _, _, _, _, stoppos, nready, nslw, nmemw, _,
         steps, _, _, pimctr, nev, _, _) = DS.tolist()
        if steps == 0 and not first:
            return now, False
        if nev:
            self._pim_counter = pimctr
            self._pim_chained(nev)
        self.ff_steps += steps
        self.outstanding = out
        self.issue_cycle = ic
        self.issue_used = iu
        self.dma_busy_since = bs
        self.dma.busy_cycles = bc
        self.dma.requests = req
        self.dma.bytes_read = br
        self.dma.bytes_written = bw
        riss = dff.T.RISS
        for rec in waiters:
            rec.issued = int(riss[rec.rec_id])
        streams = self.streams
        now = dnow
        self.now = now
        self.slot_waiters[:] = [streams[i] for i in SLW[:nslw].tolist()]
        self.mem_waiters[:] = [streams[i] for i in MEMW[:nmemw].tolist()]
        if st == fm.FF_COMPLETIONS:
            port = self._port
            comps = port.take_completions()
            flags = dff.last_flags.tolist()
            if port.stopped_early():
                # the step stopped early (log or completion buffer full): the rest now
                comps = comps + port.advance_to(now)
                flags = flags + dff.tally(port.last_out).tolist()
            self._handle_completions(now, (comps, flags))
            if self.mem_waiters:
                for w in self.mem_waiters:
                    self._make_ready(w)
                self.mem_waiters.clear()
            self._handle_timers(now)
        elif st == fm.FF_STREAM:
            ready = dff.READY[:nready].tolist()
            pos = stoppos
            x = streams[ready[pos]]
            x.dma_cur = None
            self._advance(x, now)
            self._make_ready(x)
            for i in ready[pos + 1:]:
                self._make_ready(streams[i])
            self._handle_timers(now)
        return now, True

    def _all_retries(self, ready, now: int, setup_ok: bool = False) -> bool:
        """True when every stream is a DMA stream resuming a transfer the fast memory can issue
        (so its retry is exactly the kernel's): blocked on memory, or (``setup_ok``, streams
        about to run) on a transfer set-up that is over."""
        relig = self._dff.T.RELIG
        n = relig.shape[0]
        for s in ready:
            rec = s.dma_cur
            if rec is None or s.finished or rec.ready_at > now or rec.rec_id >= n \
                    or not relig[rec.rec_id]:
                return False
            b = s.blocked
            if b != "memory" and not (setup_ok and b == "setup"):
                return False
        return True

    # The fast-forward enters the engine's run loop (archsim.engine.Executor._run) through its
    # two hooks: the fast memory then runs the iterations until a PIM command completes whose
    # stream does not continue with another PIM command, a transfer completes, a stream
    # finishes issuing or an executor timer is due; that step's completions and timers are
    # handled here.
    def _ready_hook(self, now: int) -> int | None:
        """Several ready streams that all only retry a DMA transfer (and so do the slot and
        memory waiters): the kernel runs their retries from ``now``."""
        ready = self.ready
        if not (self._ff and len(ready) > 1 and self._all_retries(ready, now, True)
                and self._all_retries(self.slot_waiters, now)
                and self._all_retries(self.mem_waiters, now)):
            return None
        first = list(ready)
        for s in first:
            s.in_ready = False
            if s.blocked == "setup":
                # what _dma_issue does first when it retries: the set-up stall ends now, the
                # stream waits on memory from here
                self._block(s, "memory", now)
        ready.clear()
        return self._fast_forward(now, first)[0]

    def _idle_hook(self, now: int) -> int | None:
        """No stream ready: the kernel runs memory events (and DMA retries, PIM chains) from
        ``now`` when it can take at least one step."""
        if not self._ff:
            return None
        now, taken = self._fast_forward(now)
        return now if taken else None

    # ---- link instructions
    def _link_done(self, s, op, start, end):
        st, en = self.times[s.name]
        st[op.index], en[op.index] = start, end


__all__ = ["TracingExecutor"]
