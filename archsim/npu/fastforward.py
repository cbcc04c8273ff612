"""The executor's side of the fast-forward on the compiled memory (no timing rule of its own).

With :class:`archsim.memory.kernel.KernelMemory` and ``Executor(..., fast_forward=True)``,
:class:`KernelFastForward` is plugged into :class:`archsim.npu.executor.Executor`: while only
memory events, back-pressured DMA retries and PIM commands followed by another PIM command of
their stream happen, the compiled loop of :mod:`archsim.npu.dmaff` takes the executor's
iterations itself, in the executor's order and with its request ids, and hands back the
bookkeeping (DMA counters, a record per chained PIM command). The requests of a transfer the
executor issues itself go to the memory in one compiled call too
(:meth:`archsim.npu.dmaff.DmaFastForward.issue`, registered transfers of single-burst
requests); completions are counted against their transfers by the compiled table
(:meth:`archsim.npu.dmaff.DmaFastForward.tally`). ``tests/test_speed_identity.py`` pins it:
statistics, per-instruction times, memory statistics and command log equal those of
``fast_forward=False``. Speed: on the GPT3-7B layer of ``benchmarks/bench_system.py``
(558 k NPU cycles, 3.9 M DMA requests) ≈ 74 k round trips between this loop and the kernel
cost ≈ 2.7 s of Python next to ≈ 2.3 s in the kernel.

The component reads and writes the executor's run-time state (``streams``, ``recs``,
``pim_wait``, its DMA counters; :mod:`archsim.npu.state`) exactly where the executor's own
loop would; the executor calls it at six points: a new DMA transfer (:meth:`dma_new`), a DMA
instruction's issue (:meth:`dma_issue`), a PIM command sent (:meth:`send_pim`,
:meth:`pim_sent`), completions (:meth:`handle_completions`), and its two loop hooks
(:meth:`ready_hook`, :meth:`idle_hook`).
"""
from __future__ import annotations

import numpy as np

from archsim.errors import SimulationError
from archsim.npu import dmaff as fm
from archsim.npu.state import PIM_KINDS, PIM_RID_BASE, REC_SHIFT
from isa.spec import Engine


def _ds_layout_ok() -> bool:
    """The order of the fast-forward's DMA state vector (``archsim.npu.dmaff.D_*``) that
    :meth:`KernelFastForward._fast_forward` writes and reads positionally."""
    return (fm.D_NOW, fm.D_OUT, fm.D_IC, fm.D_IU, fm.D_BS, fm.D_BC, fm.D_REQ, fm.D_BR, fm.D_BW,
            fm.D_MAXO, fm.D_R, fm.D_TPY, fm.D_MAXC, fm.D_STOPPOS, fm.D_NREADY, fm.D_NSLW,
            fm.D_NMEMW, fm.D_RB, fm.D_STEPS, fm.D_START, fm.D_PIMON, fm.D_PIMCTR,
            fm.D_PEVN, fm.D_DEPTH, fm.D_UNIT) == tuple(range(fm.ND)) and fm.ND == 25


def make_fast_forward(ex) -> KernelFastForward | None:
    """The fast-forward for executor ``ex`` when its memory is the compiled one (None
    otherwise: the executor runs its own loop)."""
    from archsim.memory.kernel import KernelMemory

    if isinstance(ex.mem, KernelMemory) and ex._check_accept:
        return KernelFastForward(ex)
    return None


class KernelFastForward:
    """The fast-forward of one :class:`archsim.npu.executor.Executor` on a KernelMemory.

    Args:
        ex: the executor (constructed; its memory is a KernelMemory).

    Attributes:
        dff: the compiled table and loop (:class:`archsim.npu.dmaff.DmaFastForward`).
        calls, steps: compiled-loop calls and executor iterations they took over.

    Raises:
        SimulationError: the compiled loop's state layout changed (a dmaff edit).
    """

    def __init__(self, ex) -> None:
        if not _ds_layout_ok():     # pragma: no cover - a dmaff layout change
            raise SimulationError("dmaff's D_* layout changed: update KernelFastForward")
        self.ex = ex
        self.port = ex.mem
        self.dff = fm.DmaFastForward(self.port, len(ex.streams), ex._ratio)
        self._sidx = {id(st): i for i, st in enumerate(ex.streams)}
        self.calls = 0
        self.steps = 0
        self._pim = None
        self._pim_chains()
        # request ids are unique (transfer id << 32 | index, PIM counter) and at most
        # max_outstanding DMA requests are in flight
        self.port.expect_unique_ids(ex.max_outstanding)

    def _pim_chains(self) -> None:
        """Tables for the PIM command chains of the fast-forward (dmaff ``S_*``, ``T_*``):
        every PIM stream and, per instruction, what ``submit_pim``
        would queue for it (T_OK = 0 for non-PIM instructions and for requests the memory
        would reject, which then go through the executor and raise there)."""
        ex = self.ex
        port = self.port
        streams = ex.streams
        ks = [k for k, st in enumerate(streams) if st.kind is Engine.PIM]
        if not ks or fm.PIM_RID_BASE != PIM_RID_BASE:
            return
        pss = np.zeros((len(streams), fm.NSS), np.int64)
        pss[:, fm.S_RID] = -1
        pss[:, fm.S_STEP] = -1
        rows: list[tuple] = []
        memo: dict[tuple, tuple] = {}
        none = (0,) * fm.NPT
        for k in ks:
            st = streams[k]
            pss[k, fm.S_N] = st.n
            pss[k, fm.S_OFF] = len(rows)
            for op in st.ops:
                m = op.mnemonic
                if m not in PIM_KINDS:
                    rows.append(none)
                    continue
                o = op.ops
                # what pim_fields reads of the request (Executor._pim_request)
                key = (m, o["channel"], o.get("row", 0), o.get("n_comps", o.get("n_gemvs", 0)),
                       o.get("bg_mask", 0))
                row = memo.get(key)
                if row is None:
                    try:
                        row = (1,) + port.pim_fields(ex._pim_request(st, op, 0, 0))
                    except SimulationError:
                        row = none
                    memo[key] = row
                rows.append(row)
        pt = np.array(rows, np.int64).reshape(-1, fm.NPT)
        ring = np.zeros((len(streams), ex.pim_depth, 2), np.int64)
        self._pim = (pss, np.array(ks, np.int64), pt, np.zeros((1 << 14, fm.NPEV), np.int64),
                     ring, np.zeros(len(streams), np.int64))

    # ---- DMA
    def dma_new(self, rec) -> None:
        """A new (non-empty) transfer is registered with the table at once, so that its
        requests are queued by :meth:`archsim.npu.dmaff.DmaFastForward.issue`."""
        if rec.n:
            self.dff.register(rec.rec_id, rec.addr_arr, rec.is_write,
                              rec.size_const if rec.size_arr is None else rec.size_arr)

    def dma_issue(self, s, op, now: int) -> bool:
        """The executor's ``_dma_issue`` of ``op``, then the table's count of the requests
        issued of the stream's transfer."""
        ex = self.ex
        cur = s.dma_cur
        ok = ex._dma_issue(s, op, now)
        if cur is None:
            rec = ex.recs.get(ex._rec_counter)
            if rec is not None:           # (an empty transfer may have completed at once)
                self.dff.T.RISS[rec.rec_id] = rec.issued
        else:
            self.dff.T.RISS[cur.rec_id] = cur.issued
        return ok

    # ---- PIM
    def send_pim(self, s, op, rid: int, arrival: int) -> bool:
        """With the chain tables: queue PIM instruction ``op`` as request ``rid`` (arrival in
        memory cycles) from its precomputed fields (``PT``, what ``pim_fields`` gives for it)
        in one compiled call and return True; False: the executor submits it itself."""
        if self._pim is not None:
            row = self._pim[2][self._pim[0][self._sidx[id(s)], fm.S_OFF] + op.index]
            if row[fm.T_OK]:
                self.port.push_pim_fields(rid, row[1:], arrival)
                return True
        return False

    def pim_sent(self, s, op, rid: int, now: int) -> None:
        """The fast-forward's copy of the stream's commands in flight (dmaff S_*, RING) after
        the executor sent ``op`` as ``rid`` at ``now``."""
        if self._pim is None:
            return
        pss, ring = self._pim[0], self._pim[4]
        depth = self.ex.pim_depth
        k = self._sidx[id(s)]
        cnt = pss[k, fm.S_CNT]
        tail = (pss[k, fm.S_HEAD] + cnt) % depth
        ring[k, tail, 0] = rid
        ring[k, tail, 1] = now
        if cnt == 0:
            pss[k, fm.S_RID] = rid
            pss[k, fm.S_T0] = now
        pss[k, fm.S_CNT] = cnt + 1
        pss[k, fm.S_NEXT] = op.index + 1
        pss[k, fm.S_PC] = s.pc

    def _pim_left(self, s) -> None:
        """The fast-forward's copy of stream ``s`` after its oldest PIM command completed in
        the executor's own loop (dmaff S_*, RING)."""
        pss, ring = self._pim[0], self._pim[4]
        depth = self.ex.pim_depth
        k = self._sidx[id(s)]
        h = (pss[k, fm.S_HEAD] + 1) % depth
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
        ex = self.ex
        pss, _, pt, pev, ring, _ = self._pim
        streams = ex.streams
        obs = ex.observer
        pim_stats = ex.pim_stats
        pim_wait = ex.pim_wait
        touched = set()
        sent: dict[int, tuple[int, int]] = {}     # id -> (index, cycle) of commands sent here
        for k, pc, t0, t, old, new, now, nidx in pev[:n].tolist():
            s = streams[k]
            touched.add(k)
            if old >= 0:                          # a command completed
                if obs is not None:
                    obs(s.name, pc, s.index, t0, t)
                ex._pim_busy(s.index, t0, t)
                if t > s.max_done:
                    s.max_done = t
                ex._advance(s, now)
                if sent.pop(old, None) is None:   # sent by the executor: it waits for it
                    pim_wait.pop(old)
            if new >= 0:                          # a command sent
                pim_stats[int(pt[pss[k, fm.S_OFF] + nidx, fm.T_CH])].commands += 1
                sent[new] = (nidx, now)
        depth = ex.pim_depth
        for k in touched:
            s = streams[k]
            h, cnt = int(pss[k, fm.S_HEAD]), int(pss[k, fm.S_CNT])
            s.pim_out.clear()
            for j in range(cnt):
                rid = int(ring[k, (h + j) % depth, 0])
                s.pim_out.append(rid)
                x = sent.get(rid)
                if x is not None:                 # still in flight: the executor waits
                    pim_wait[rid] = (s, x[1], x[0])
            s.pim_next = int(pss[k, fm.S_NEXT])

    # ---- completions
    def handle_completions(self, now: int, taken=None) -> None:
        """The executor's completion handling with the transfer bookkeeping of the table;
        ``taken``: ``(completions, flags)`` that the fast-forward already took from the memory
        at ``now`` (else the memory is advanced)."""
        ex = self.ex
        if taken is None:
            comps = ex.mem.advance_to(ex._to_mem(now))
            if not comps:
                return
            flags = self.dff.tally(self.port.last_out).tolist()
        else:
            comps, flags = taken
            if not comps:
                return
        recs = ex.recs
        freed = 0
        for c, fl in zip(comps, flags):
            rid = c.req_id
            if rid >= PIM_RID_BASE:
                s = ex._pim_done(rid, c.cycle, now)[0]
                if self._pim is not None:
                    self._pim_left(s)
                ex._make_ready(s)
                continue
            freed += 1
            if fl:
                rec = recs[rid >> REC_SHIFT]
                rec.remaining = 0
                ex._dma_rec_done(rec, now)
        if freed:
            ex._dma_freed(freed, now)

    # ---- the compiled loop (archsim.npu.dmaff._dma_ff)
    def _fast_forward(self, now: int, first: list | None = None) -> tuple[int, bool]:
        """Let the fast memory run the executor's loop (back-pressured DMA retries, PIM
        command chains, memory events up to the next executor timer) until the executor is
        needed; returns ``(now, True)`` when at least one iteration was taken over.
        ``first``: ready DMA streams that retry at ``now`` before the loop (the executor's
        ready queue)."""
        ex = self.ex
        dff = self.dff
        sidx = self._sidx
        FREC, SLW, MEMW = dff.FREC, dff.SLW, dff.MEMW
        relig = dff.T.RELIG
        waiters = []
        lists = ((ex.slot_waiters, SLW), (ex.mem_waiters, MEMW))
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
        heap = ex.heap
        pim = self._pim
        dma = ex.dma
        first_n = len(first) if first else 0
        # the whole state vector at once (layout dmaff.D_*, checked by _ds_layout_ok)
        DS[:] = (now, ex.outstanding, ex.issue_cycle, ex.issue_used, ex.dma_busy_since,
                 dma.busy_cycles, dma.requests, dma.bytes_read,
                 dma.bytes_written, ex.max_outstanding, ex.dma_issue_per_cycle,
                 heap[0][0] if heap else fm.INF,
                 -1 if ex.max_cycles is None else ex.max_cycles,
                 0, first_n, len(ex.slot_waiters), len(ex.mem_waiters),
                 ex.request_bytes, 0, 1 if first else 0, 0 if pim is None else 1,
                 ex._pim_counter, 0, ex.pim_depth, 1 if ex._unit_clock else 0)
        st = dff.run(pim)
        self.calls += 1
        (dnow, out, ic, iu, bs, bc, req, br, bw, _, _, _, _, stoppos, nready, nslw, nmemw, _,
         steps, _, _, pimctr, nev, _, _) = DS.tolist()
        if steps == 0 and not first:
            return now, False
        if nev:
            ex._pim_counter = pimctr
            self._pim_chained(nev)
        self.steps += steps
        ex.outstanding = out
        ex.issue_cycle = ic
        ex.issue_used = iu
        ex.dma_busy_since = bs
        dma.busy_cycles = bc
        dma.requests = req
        dma.bytes_read = br
        dma.bytes_written = bw
        riss = dff.T.RISS
        for rec in waiters:
            rec.issued = int(riss[rec.rec_id])
        streams = ex.streams
        now = dnow
        ex.now = now
        ex.slot_waiters[:] = [streams[i] for i in SLW[:nslw].tolist()]
        ex.mem_waiters[:] = [streams[i] for i in MEMW[:nmemw].tolist()]
        if st == fm.FF_COMPLETIONS:
            port = self.port
            comps = port.take_completions()
            flags = dff.last_flags.tolist()
            if port.stopped_early():
                # the step stopped early (log or completion buffer full): the rest now
                comps = comps + port.advance_to(now)
                flags = flags + dff.tally(port.last_out).tolist()
            self.handle_completions(now, (comps, flags))
            if ex.mem_waiters:
                for w in ex.mem_waiters:
                    ex._make_ready(w)
                ex.mem_waiters.clear()
            ex._handle_timers(now)
        elif st == fm.FF_STREAM:
            ready = dff.READY[:nready].tolist()
            pos = stoppos
            x = streams[ready[pos]]
            x.dma_cur = None
            ex._advance(x, now)
            ex._make_ready(x)
            for i in ready[pos + 1:]:
                ex._make_ready(streams[i])
            ex._handle_timers(now)
        return now, True

    def _all_retries(self, ready, now: int, setup_ok: bool = False) -> bool:
        """True when every stream is a DMA stream resuming a transfer the fast memory can issue
        (so its retry is exactly the kernel's): blocked on memory, or (``setup_ok``, streams
        about to run) on a transfer set-up that is over."""
        relig = self.dff.T.RELIG
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

    # The fast-forward enters the executor's run loop (Executor._run) through two hooks: the
    # fast memory then runs the iterations until a PIM command completes whose stream does
    # not continue with another PIM command, a transfer completes, a stream finishes issuing
    # or an executor timer is due; that step's completions and timers are handled here.
    def ready_hook(self, now: int) -> int | None:
        """Several ready streams that all only retry a DMA transfer (and so do the slot and
        memory waiters): the kernel runs their retries from ``now`` and the new cycle is
        returned (None: the executor runs the next ready stream)."""
        ex = self.ex
        ready = ex.ready
        if not (len(ready) > 1 and self._all_retries(ready, now, True)
                and self._all_retries(ex.slot_waiters, now)
                and self._all_retries(ex.mem_waiters, now)):
            return None
        first = list(ready)
        for s in first:
            s.in_ready = False
            if s.blocked == "setup":
                # what _dma_issue does first when it retries: the set-up stall ends now, the
                # stream waits on memory from here
                ex._block(s, "memory", now)
        ready.clear()
        return self._fast_forward(now, first)[0]

    def idle_hook(self, now: int) -> int | None:
        """No stream ready: the kernel runs memory events (and DMA retries, PIM chains) from
        ``now`` when it can take at least one step; returns the new cycle (None: the
        executor takes the next event step)."""
        now, taken = self._fast_forward(now)
        return now if taken else None


__all__ = ["KernelFastForward", "make_fast_forward"]
