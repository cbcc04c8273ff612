"""The NPU executor's DMA fast-forward: its back-pressured DMA loop, compiled, beside the memory.

Most of a decode layer's wall time went into one pattern of the executor's event loop
(:class:`archsim.npu.executor.Executor`; its Python side is
:class:`archsim.npu.fastforward.KernelFastForward`): DMA streams retrying transfers against a
full memory queue, memory events in between, and PIM streams whose command completes only to
issue the next PIM command. This module runs exactly those iterations in compiled code, in the
executor's order and with its request ids, and hands back its bookkeeping: it is a faster
interpreter of the executor's own rules, not a second timing model
(``tests/test_speed_identity.py`` keeps the statistics, per-instruction times and command logs
equal to those of the plain loop).

It owns the NPU's side of the contract — the table of registered DMA transfers
(:class:`DmaTable`: request addresses and sizes, requests issued and still in flight per
transfer) — and drives the memory only through the kernel's API
(:mod:`archsim.memory.kernel.drive`: ``_advance_all``, ``_next_event``, ``_queue_single``,
``_push_pim``) on the memory's state ``S`` (:attr:`archsim.memory.kernel.KernelMemory.S`); it
never writes the memory's arrays itself. All cycles are NPU cycles = memory cycles (the
fast-forward runs only when both clocks are equal).
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from archsim.memory.kernel.drive import _advance_all, _next_event, _push_pim, _queue_single
from archsim.memory.kernel.jit import njit, njit_inline
from archsim.memory.kernel.layout import (A_B, A_BB, A_G, A_LTOT, A_QB, A_QC, C_PH, C_PT, G_HEAP,
                                          G_NMLAT, G_NOUT, G_NPLAT, G_OUTP, G_STATUS, INF,
                                          ST_ERROR, ST_OK, ST_OUT_FULL)

# ---- the executor's DMA state vector DS (written and read back by the executor) -------------
(D_NOW, D_OUT, D_IC, D_IU, D_BS, D_BC, D_REQ, D_BR, D_BW, D_MAXO, D_R, D_TPY, D_MAXC,
 D_STOPPOS, D_NREADY, D_NSLW, D_NMEMW, D_RB, D_STEPS, D_START, D_PIMON, D_PIMCTR,
 D_PEVN, D_DEPTH, D_UNIT) = range(25)
ND = 25
FF_TIMER, FF_COMPLETIONS, FF_STREAM = 0, 1, 2
# PIM command chains in the fast-forward (see _dma_ff): per stream PSS[k, :]: the oldest
# command in flight (its id, submit cycle), the stream's pc (that command's index), length,
# offset into PT, the next instruction a PIM run would send (pim_next), commands in flight,
# ring head (RING[k, :, 0] ids, [..., 1] submit cycles, oldest at the head), the step of the
# last completion handled (one per stream and step)
S_RID, S_T0, S_PC, S_N, S_OFF, S_NEXT, S_CNT, S_HEAD, S_STEP, S_TCNT, S_TNEXT, S_TDONE = range(12)
NSS = 12
# (S_STEP, S_TCNT, S_TNEXT, S_TDONE: the pre-check of one step, which follows each stream's
# commands in flight through its completions of that step before anything is handled)
# per instruction PT[S_OFF + pc, :] (what submit_pim would queue; T_OK = 0: not chainable)
T_OK, T_CMD, T_CH, T_MASK, T_ROW, T_N, T_NSUB, T_EST = range(8)
NPT = 8
# one record per PIM command completed (E_NEW = -1) or sent (E_OLD = -1), in the executor's
# order, PEV[i, :]: stream, index of the completed command, its submit and completion NPU
# cycles, the ids, the cycle handled, the sent command's index
E_K, E_PC, E_T0, E_T, E_OLD, E_NEW, E_NOW, E_NIDX = range(8)
NPEV = 8
PIM_RID_BASE = 1 << 62
"""Request ids of PIM commands: ``PIM_RID_BASE + n`` for the executor's n-th command
(archsim.npu.state.PIM_RID_BASE)."""
REC_SHIFT = 32
"""A DMA request's id is ``transfer id << REC_SHIFT | index`` (archsim.npu.state.REC_SHIFT)."""

DmaTable = namedtuple("DmaTable", ["ARENA", "SIZES", "RO", "RN", "RISS", "RELIG", "RREM"])
"""Registered DMA transfers (int64 arrays, indexed by transfer id r unless said):
``ARENA``/``SIZES`` every request's byte address / size, transfer r's at ``RO[r, 0]``..;
``RO[r, 1]`` 1 for a store (write); ``RN[r]`` requests, ``RISS[r]`` issued so far,
``RREM[r]`` not yet completed; ``RELIG[r]`` 1 when every request lies inside one burst (only
those transfers are issued from compiled code)."""


@njit_inline
def _to_mem(t, unit, ratio):
    """NPU cycle -> memory cycle (archsim.npu.executor.Executor._to_mem: ceil(t × ratio))."""
    if unit:
        return t
    return int(math.ceil(t * ratio - 1e-9))


@njit_inline
def _from_mem(c, unit, ratio):
    """Memory cycle -> NPU cycle (archsim.npu.executor.Executor._from_mem: ceil(c / ratio))."""
    if unit:
        return c
    return int(math.ceil(c / ratio - 1e-9))


@njit
def _tally(T, OUT, n, FLAGS):
    """Count the memory completions ``OUT[:n]`` against their transfers: ``RREM`` drops, and
    ``FLAGS[i]`` = 1 where completion i is the last of its transfer (0 otherwise, and for PIM
    completions)."""
    RREM = T.RREM
    for i in range(n):
        FLAGS[i] = 0
        if OUT[i, 3] == 0:
            r = OUT[i, 1] >> REC_SHIFT
            if 0 < r < RREM.shape[0]:
                RREM[r] -= 1
                if RREM[r] == 0:
                    FLAGS[i] = 1


@njit
def _dma_issue_k(S, T, r, i0, k, t0, used, R, unit, ratio):
    """Queue up to k requests of registered transfer r from index i0 (:meth:`DmaFastForward.
    issue`); returns ``done << 40 | bytes``."""
    PA = S.PA
    ARENA, SIZES, RO, RISS = T.ARENA, T.SIZES, T.RO, T.RISS
    qb = PA[A_QB]
    qc = PA[A_QC]
    tot = PA[A_LTOT]
    GB = PA[A_G] * PA[A_B]
    bb = PA[A_BB]
    wr = RO[r, 1]
    base = RO[r, 0] + i0
    done = 0
    nbytes = 0
    for d in range(k):
        x = ARENA[base + d]
        x = (x // bb) * bb               # the one burst this request lies in
        if not _queue_single(S, GB, tot, qb, qc, True, x,
                             _to_mem(t0 + (used + d) // R, unit, ratio),
                             (r << REC_SHIFT) | (i0 + d), wr):
            break
        nbytes += SIZES[base + d]
        done += 1
    RISS[r] = i0 + done
    return (done << 40) | nbytes


@njit_inline
def _pim_stream_any(PSS, PSL, RING, rid, depth):
    """Stream (index into PSS) with PIM command ``rid`` in flight; -1 when none."""
    for j in range(PSL.shape[0]):
        k = PSL[j]
        h = PSS[k, S_HEAD]
        for m in range(PSS[k, S_CNT]):
            if RING[k, (h + m) % depth, 0] == rid:
                return k
    return -1


@njit_inline
def _pim_stream(PSS, PSL, rid):
    """Stream (index into PSS) whose outstanding PIM command is ``rid``; -1 when none."""
    for j in range(PSL.shape[0]):
        k = PSL[j]
        if PSS[k, S_RID] == rid:
            return k
    return -1


@njit
def _dma_ff(S, T, FREC, SLW, MEMW, READY, FLAGS, DS, PSS, PSL, PT, PEV, RING, POR, ratio):
    """Run the executor's loop while only memory events, back-pressured DMA retries and PIM
    command chains happen (no other PIM completion, no transfer completing, no executor timer).

    Each step is one executor iteration (NPU cycles; the memory in its own cycles, converted
    as the executor converts them, ``ratio`` = memory cycles per NPU cycle, exact integers
    when DS[D_UNIT] = 1): ``now`` = the next memory event or the executor's next timer
    DS[D_TPY], whichever is first (or now + 1), advance the memory, count the completions
    (``outstanding`` drops), then the waiting DMA streams retry in the executor's order (slot
    waiters when requests were freed, then memory waiters), each issuing a prefix of its
    transfer exactly as ``Executor._dma_issue`` does (budget ``max_outstanding -
    outstanding``; arrivals ``t0 + (used + i) // R``; stop at the first request whose queue is
    full). Returns FF_TIMER (stopped before a step), FF_COMPLETIONS (stopped after advancing
    to DS[D_NOW]: the completions in ``S.OUT`` and their transfer flags in FLAGS, or the
    timers due at DS[D_NOW] >= DS[D_TPY], need the executor) or FF_STREAM (a stream finished
    issuing its transfer at DS[D_NOW]: READY[DS[D_STOPPOS]]; the streams after it in READY
    still have to retry at that cycle).

    PIM command chains (DS[D_PIMON] = 1; ``Executor._pim_issue`` with
    ``pim.command_queue_depth`` = DS[D_DEPTH]): when the oldest in-flight command of a PIM
    stream (PSS row, listed in PSL; the ring RING[k] holds its commands in flight) completes,
    the stream's pc advances and — the stream being the first in the executor's ready order
    (PIM completions before the slot and memory waiters) — it sends the next instruction of its
    PIM run (PSS[k, S_NEXT], when PT[.., T_OK] = 1 and fewer than the depth are in flight) at
    the same cycle with the next request id (``PIM_RID_BASE + ++DS[D_PIMCTR]``) and arrival
    ``max(now, channel cycle + 1)``, exactly as ``submit_pim``. A stream left with nothing in
    flight whose pc is not a PIM instruction needs the executor: FF_COMPLETIONS, before
    anything of that step is handled.
    Each completion handled is recorded in PEV[DS[D_PEVN]++] (layout ``E_*``).
    """
    CS, PA, PQ, POFREE, GL, HP, OUT = S.CS, S.PA, S.PQ, S.POFREE, S.GL, S.HP, S.OUT
    MLAT, PLAT = S.MLAT, S.PLAT
    ARENA, SIZES, RO, RN, RISS = T.ARENA, T.SIZES, T.RO, T.RN, T.RISS
    maxo = DS[D_MAXO]
    R = DS[D_R]
    unit = DS[D_UNIT] == 1
    depth = DS[D_DEPTH]
    qb = PA[A_QB]
    qc = PA[A_QC]
    tot = PA[A_LTOT]
    GB = PA[A_G] * PA[A_B]
    bb = PA[A_BB]
    first = DS[D_START] == 1
    DS[D_START] = 0
    while True:
        if first:
            # the caller's ready streams (READY[:D_NREADY]) retry at D_NOW first
            first = False
            nr = DS[D_NREADY]
            now = DS[D_NOW]
        else:
            # room for this step's completions (latency buffers, PIM records)
            if GL[G_NMLAT] + maxo + 16 > MLAT.shape[0] or \
                    GL[G_NPLAT] + GL[G_OUTP] + 16 > PLAT.shape[0] or \
                    DS[D_PEVN] + 2 * depth * PSL.shape[0] + 2 > PEV.shape[0]:
                return FF_TIMER
            cm = _next_event(S)
            if GL[G_STATUS] == ST_ERROR:
                GL[G_STATUS] = ST_OK
                return FF_TIMER
            if GL[G_HEAP] > 0 and HP[0, 0] < cm:
                cm = HP[0, 0]
            cand = INF if cm >= INF else _from_mem(cm, unit, ratio)
            if DS[D_TPY] < cand:
                cand = DS[D_TPY]
            if cand >= INF:
                return FF_TIMER
            now = DS[D_NOW]
            now = cand if cand > now else now + 1
            if DS[D_MAXC] >= 0 and now > DS[D_MAXC]:
                return FF_TIMER
            GL[G_STATUS] = ST_OK
            _advance_all(S, _to_mem(now, unit, ratio))
            DS[D_NOW] = now
            DS[D_STEPS] += 1
            st = GL[G_STATUS]
            n = GL[G_NOUT] if st == ST_OK or st == ST_OUT_FULL else 0
            _tally(T, OUT, n, FLAGS)
            if GL[G_STATUS] != ST_OK or now >= DS[D_TPY]:
                # an executor timer is due at this step: the executor handles its completions
                # and timers (the step it would have taken itself)
                return FF_COMPLETIONS
            npim = 0
            for i in range(n):
                if FLAGS[i] == 1:
                    return FF_COMPLETIONS
                if OUT[i, 3] == 1:
                    if DS[D_PIMON] == 0:
                        return FF_COMPLETIONS
                    k = _pim_stream_any(PSS, PSL, RING, OUT[i, 1], depth)
                    if k < 0:
                        return FF_COMPLETIONS
                    if PSS[k, S_STEP] != DS[D_STEPS]:
                        PSS[k, S_STEP] = DS[D_STEPS]
                        PSS[k, S_TCNT] = PSS[k, S_CNT]
                        PSS[k, S_TNEXT] = PSS[k, S_NEXT]
                        PSS[k, S_TDONE] = 0
                    # completions of a stream come in the order it sent them
                    if RING[k, (PSS[k, S_HEAD] + PSS[k, S_TDONE]) % depth, 0] != OUT[i, 1]:
                        return FF_COMPLETIONS
                    PSS[k, S_TDONE] += 1
                    PSS[k, S_TCNT] -= 1
                    nxt = PSS[k, S_TNEXT]
                    sends = nxt < PSS[k, S_N] and PT[PSS[k, S_OFF] + nxt, T_OK] == 1
                    if PSS[k, S_TCNT] == 0 and not sends:
                        return FF_COMPLETIONS
                    if sends:
                        c = PT[PSS[k, S_OFF] + nxt, T_CH]
                        if CS[c, C_PT] - CS[c, C_PH] + npim >= PQ.shape[1]:
                            return FF_COMPLETIONS
                        npim += 1
                        PSS[k, S_TCNT] += 1
                        PSS[k, S_TNEXT] = nxt + 1
            if npim > POFREE[0]:
                return FF_COMPLETIONS
            GL[G_NOUT] = 0
            nd = 0
            npor = 0
            for i in range(n):
                if OUT[i, 3] == 1:
                    # the executor's _handle_completions for a PIM command (Executor._pim_done)
                    k = _pim_stream(PSS, PSL, OUT[i, 1])
                    t = _from_mem(OUT[i, 0], unit, ratio)
                    t0 = PSS[k, S_T0]
                    if t < t0:
                        t = t0
                    e = DS[D_PEVN]
                    DS[D_PEVN] = e + 1
                    PEV[e, E_K] = k
                    PEV[e, E_PC] = PSS[k, S_PC]
                    PEV[e, E_T0] = t0
                    PEV[e, E_T] = t
                    PEV[e, E_OLD] = OUT[i, 1]
                    PEV[e, E_NOW] = now
                    PEV[e, E_NEW] = -1
                    PEV[e, E_NIDX] = -1
                    PSS[k, S_PC] += 1
                    h = (PSS[k, S_HEAD] + 1) % depth
                    PSS[k, S_HEAD] = h
                    PSS[k, S_CNT] -= 1
                    if PSS[k, S_CNT] > 0:
                        PSS[k, S_RID] = RING[k, h, 0]
                        PSS[k, S_T0] = RING[k, h, 1]
                    else:
                        PSS[k, S_RID] = -1
                    if PSS[k, S_TDONE] >= 0:          # first completion of k this step:
                        POR[npor] = k                 # it joins the ready queue
                        npor += 1
                        PSS[k, S_TDONE] = -1
                    continue
                nd += 1
            # the ready PIM streams run in the order they became ready (Executor._pim_issue:
            # send the next instructions of the PIM run while fewer than the depth are in
            # flight); each send is a record with E_OLD = -1
            for j in range(npor):
                k = POR[j]
                while True:
                    nxt = PSS[k, S_NEXT]
                    if PSS[k, S_CNT] >= depth or nxt >= PSS[k, S_N] or \
                            PT[PSS[k, S_OFF] + nxt, T_OK] == 0:
                        break
                    row = PSS[k, S_OFF] + nxt
                    DS[D_PIMCTR] += 1
                    rid = PIM_RID_BASE + DS[D_PIMCTR]
                    _push_pim(S, PT[row, T_CH], rid, PT[row, T_CMD],
                              _to_mem(now, unit, ratio), PT[row, T_EST], PT[row, T_MASK],
                              PT[row, T_ROW], PT[row, T_N], PT[row, T_NSUB])
                    tail = (PSS[k, S_HEAD] + PSS[k, S_CNT]) % depth
                    RING[k, tail, 0] = rid
                    RING[k, tail, 1] = now
                    if PSS[k, S_CNT] == 0:
                        PSS[k, S_RID] = rid
                        PSS[k, S_T0] = now
                    PSS[k, S_CNT] += 1
                    PSS[k, S_NEXT] = nxt + 1
                    e = DS[D_PEVN]
                    DS[D_PEVN] = e + 1
                    PEV[e, E_K] = k
                    PEV[e, E_PC] = -1
                    PEV[e, E_OLD] = -1
                    PEV[e, E_NEW] = rid
                    PEV[e, E_NOW] = now
                    PEV[e, E_NIDX] = nxt
            # the executor's _handle_completions: requests freed
            nr = 0
            if nd > 0:
                DS[D_OUT] -= nd
                if DS[D_OUT] == 0:
                    DS[D_BC] += now - DS[D_BS]
                for i in range(DS[D_NSLW]):
                    READY[nr] = SLW[i]
                    nr += 1
                DS[D_NSLW] = 0
            for i in range(DS[D_NMEMW]):
                READY[nr] = MEMW[i]
                nr += 1
            DS[D_NMEMW] = 0
            DS[D_NREADY] = nr
        # the waiting streams retry in order (Executor._dma_issue)
        for j in range(nr):
            f = READY[j]
            r = FREC[f]
            budget = maxo - DS[D_OUT]
            if budget <= 0:
                SLW[DS[D_NSLW]] = f
                DS[D_NSLW] += 1
                continue
            k = RN[r] - RISS[r]
            if budget < k:
                k = budget
            t0 = now if now > DS[D_IC] else DS[D_IC]
            used = DS[D_IU] if t0 == DS[D_IC] else 0
            i0 = RISS[r]
            done = 0
            wr = RO[r, 1]
            nbytes = 0
            for d in range(k):
                x = ARENA[RO[r, 0] + i0 + d]
                nbytes += SIZES[RO[r, 0] + i0 + d]
                x = (x // bb) * bb           # the one burst this request lies in
                if not _queue_single(S, GB, tot, qb, qc, True, x,
                                     _to_mem(t0 + (used + d) // R, unit, ratio),
                                     (r << REC_SHIFT) | (i0 + d), wr):
                    nbytes -= SIZES[RO[r, 0] + i0 + d]
                    break
                done += 1
            if done:
                if DS[D_OUT] == 0:
                    DS[D_BS] = t0
                DS[D_OUT] += done
                RISS[r] += done
                total = used + done
                DS[D_IC] = t0 + total // R
                DS[D_IU] = total % R
                DS[D_REQ] += done
                if wr:
                    DS[D_BW] += nbytes
                else:
                    DS[D_BR] += nbytes
            if RISS[r] == RN[r]:
                DS[D_STOPPOS] = j
                DS[D_STEPS] += 1
                return FF_STREAM
            if done < k:
                MEMW[DS[D_NMEMW]] = f
                DS[D_NMEMW] += 1
            else:
                SLW[DS[D_NSLW]] = f
                DS[D_NSLW] += 1


class DmaFastForward:
    """The executor's registered DMA transfers and its compiled retry loop, on one
    :class:`archsim.memory.kernel.KernelMemory`.

    Args:
        port: the kernel memory the executor runs on.
        n_streams: the program's stream count (sizes the stream index arrays).

    The executor registers each transfer (:meth:`register`), issues requests of registered
    transfers in one call (:meth:`issue`), counts completions against their transfers
    (:meth:`tally`) and lets :meth:`run` take over its loop (:func:`_dma_ff`).
    """

    def __init__(self, port, n_streams: int, ratio: float = 1.0) -> None:
        self.port = port
        self._bb = port.cfg.memory.org.burst_bytes
        self.ratio = float(ratio)
        self.unit = abs(self.ratio - 1.0) < 1e-12
        n = max(1, int(n_streams))
        self.FREC = np.zeros(n, np.int64)
        self.SLW = np.zeros(n, np.int64)
        self.MEMW = np.zeros(n, np.int64)
        self.READY = np.zeros(n, np.int64)
        self.DS = np.zeros(ND, np.int64)
        self.FLAGS = np.zeros(4096, np.int64)
        self._arena_n = 0
        size = 1024
        self.T = DmaTable(np.zeros(1 << 16, np.int64), np.zeros(1 << 16, np.int64),
                          np.zeros((size, 2), np.int64), np.zeros(size, np.int64),
                          np.zeros(size, np.int64), np.zeros(size, np.int64),
                          np.zeros(size, np.int64))
        self._no_pim = (np.zeros((1, NSS), np.int64), np.zeros(0, np.int64),
                        np.zeros((1, NPT), np.int64), np.zeros((1, NPEV), np.int64),
                        np.zeros((1, 1, 2), np.int64), np.zeros(1, np.int64))

    # ---- transfers
    def register(self, rec_id: int, addrs: np.ndarray, is_write: bool, sizes) -> None:
        """Register DMA transfer ``rec_id`` (the executor's record id; request ids are
        ``rec_id << 32 | i``) with its request addresses and sizes (bytes), so that
        :meth:`tally` maintains its remaining count and :meth:`issue` / :meth:`run` can issue
        it. A transfer with a request spanning two bursts is never issued from compiled code
        (``RELIG`` = 0)."""
        T = self.T
        n = int(addrs.shape[0])
        bb = self._bb
        if np.ndim(sizes) == 0:
            # one size: every request inside one burst iff its offset in the burst + size fits
            sz = int(sizes)
            eligible = n == 0 or (sz > 0 and bool((addrs % bb + sz <= bb).all()))
        else:
            sz = np.asarray(sizes, dtype=np.int64)
            eligible = bool(n == 0 or (sz.min() > 0 and
                                       ((addrs // bb) == ((addrs + sz - 1) // bb)).all()))
        if rec_id >= T.RREM.shape[0]:
            size = max(2 * T.RREM.shape[0], rec_id + 1024)
            grown = {}
            for name in ("RO", "RN", "RISS", "RELIG", "RREM"):
                old = getattr(T, name)
                new = np.zeros((size,) + old.shape[1:], np.int64)
                new[:old.shape[0]] = old
                grown[name] = new
            T = self.T = T._replace(**grown)
        if self._arena_n + n > T.ARENA.shape[0]:
            size = max(2 * T.ARENA.shape[0], self._arena_n + n)
            grown = {}
            for name in ("ARENA", "SIZES"):
                new = np.zeros(size, np.int64)
                new[:self._arena_n] = getattr(T, name)[:self._arena_n]
                grown[name] = new
            T = self.T = T._replace(**grown)
        T.ARENA[self._arena_n:self._arena_n + n] = addrs
        T.SIZES[self._arena_n:self._arena_n + n] = sz
        T.RO[rec_id, 0] = self._arena_n
        T.RO[rec_id, 1] = 1 if is_write else 0
        self._arena_n += n
        T.RN[rec_id] = n
        T.RISS[rec_id] = 0
        T.RREM[rec_id] = n
        T.RELIG[rec_id] = 1 if eligible else 0

    def eligible(self, rec_id: int) -> bool:
        """True when registered transfer ``rec_id`` can be issued from compiled code."""
        relig = self.T.RELIG
        return rec_id < relig.shape[0] and bool(relig[rec_id])

    def issue(self, rec_id: int, i0: int, k: int, t0: int, used: int, R: int
              ) -> tuple[int, int]:
        """Queue up to ``k`` requests of registered transfer ``rec_id`` (``RELIG`` = 1) from
        index ``i0``, the i-th with id ``rec_id << 32 | (i0 + i)`` and arrival
        ``t0 + (used + i) // R`` (memory cycles), stopping at the first whose bank or channel
        queue is full: exactly what ``submit_many`` with ``check`` queues for them (the
        executor's ``_dma_issue``). Returns ``(requests queued, their bytes)``."""
        port = self.port
        port._flush()
        r = _dma_issue_k(port.S, self.T, rec_id, i0, k, t0, used, R, self.unit, self.ratio)
        return r >> 40, r & ((1 << 40) - 1)

    def tally(self, rows: np.ndarray) -> np.ndarray:
        """Count completions ``rows`` (``KernelMemory.last_out``: cycle, id, latency, is_pim)
        against their transfers; returns the flags (1 where a completion finished its
        transfer), shape (len(rows),)."""
        n = rows.shape[0]
        if self.FLAGS.shape[0] < n:
            self.FLAGS = np.zeros(2 * n, np.int64)
        _tally(self.T, rows, n, self.FLAGS)
        return self.FLAGS[:n]

    # ---- the loop
    def run(self, pim: tuple | None = None) -> int:
        """Run :func:`_dma_ff` on the state vector :attr:`DS` (layout ``D_*``) and the stream
        arrays (:attr:`FREC` current transfer per stream, waiting lists :attr:`SLW` /
        :attr:`MEMW`, :attr:`READY`). ``pim``: ``(PSS, PSL, PT, PEV, RING)`` of the PIM
        command chains (layouts ``S_*``, ``T_*``, ``E_*``; RING the commands in flight per
        stream), or None. Returns the FF_* status; on
        FF_COMPLETIONS the step's completions are :meth:`KernelMemory.take_completions` with
        flags :attr:`last_flags`."""
        port = self.port
        port._keep_room(int(self.DS[D_MAXO]))
        if self.FLAGS.shape[0] < port.OUT.shape[0]:
            self.FLAGS = np.zeros(port.OUT.shape[0], np.int64)
        self.DS[D_PEVN] = 0
        if pim is not None:
            pim[0][:, S_STEP] = -1             # no step pre-checked yet
        if pim is None:
            self.DS[D_PIMON] = 0
            pim = self._no_pim
        self.DS[D_UNIT] = 1 if self.unit else 0
        st = int(_dma_ff(port.S, self.T, self.FREC, self.SLW, self.MEMW, self.READY,
                         self.FLAGS, self.DS, *pim, self.ratio))
        if st == FF_COMPLETIONS:
            n = int(port.GL[G_NOUT]) if port.GL[G_STATUS] in (ST_OK, ST_OUT_FULL) else 0
            self.last_flags = self.FLAGS[:n].copy()
        return st


__all__ = ["DmaFastForward", "DmaTable", "FF_TIMER", "FF_COMPLETIONS", "FF_STREAM", "ND",
           "PIM_RID_BASE", "REC_SHIFT"]
