"""The NPU executor's event loop, compiled: a second interpreter of the executor's rules.

:class:`archsim.npu.executor.Executor` is the readable reference; this module runs the same
loop over typed arrays with numba, together with the memory kernel
(:mod:`archsim.memory.kernel.drive`: ``_drive`` (``_advance_all`` and ``_next_event``),
``_queue_request``, ``_push_pim`` on the kernel's state ``S``), so that a whole program runs
without returning to Python. It owns no timing rule: every duration comes from the program's tables
(:mod:`archsim.npu.tables`, computed with :mod:`archsim.npu.timing`), and each function below
names the executor method whose bookkeeping it repeats, in the same order (streams run in
the same ready order, requests get the same ids and arrivals, semaphores fire at the same
cycles). ``tests/test_compiled_executor.py`` keeps both identical (statistics, per-instruction
times, memory statistics and command log) on random and compiled programs.

The state is :class:`archsim.npu.cstate.ExecState` (int64 arrays and their layouts); the
engines' issue rules are :mod:`archsim.npu.cunits`; :mod:`archsim.npu.compiled` builds the
state, calls :func:`_loop`
and turns its statuses (``RUN_*``) into the executor's results and errors. The loop can stop
and resume at two points: before a step (the caller grows the memory's buffers) and inside
the memory advance of a step (the command log is full). NPU cycles throughout, the memory's
converted with the executor's rounding (``P_UNIT`` = 1: equal clocks).
"""
from __future__ import annotations

from archsim.memory.kernel.drive import _drive
from archsim.memory.kernel.jit import njit, njit_inline
from archsim.memory.kernel.layout import (G_CQH, G_NCQ, G_NMLAT, G_NOUT, G_NPLAT, G_OUTM, G_OUTP,
                                          G_STATUS, INF, LAT_BINS, ST_ERROR, ST_LOG_FULL,
                                          ST_OK)
from archsim.npu.cstate import *  # noqa: F403  (state layout and statuses)
from archsim.npu.cunits import (_advance, _block, _dma_issue, _dma_rec_done, _fire,
                                _from_mem, _heap_pop, _link_issue, _make_ready, _observe_sync,
                                _pim_done, _pim_issue, _sa_issue, _signal, _to_mem,
                                _try_finish, _vu_issue)
from archsim.npu.cstate import (I_CNT, I_SEM, K_DMA, K_LINK, K_SA, K_VU, OP_END, OP_LOADW,
                                OP_NOP, OP_SIGNAL, OP_WAIT)


# ---------------------------------------------------------------- streams
@njit_inline
def _run_stream(S, T, E, k, now, unit, ratio):
    """Executor._run_stream: issue as many instructions of stream k as possible at ``now``.
    Returns OK or a RUN_* error status."""
    X, TM = E.X, E.TIMES
    OPS, IA = T.OP, T.IA
    off = X[k, X_OFF]
    n = X[k, X_N]
    kind = X[k, X_KIND]
    while X[k, X_PC] < n:
        g = off + X[k, X_PC]
        op = OPS[g]
        if op == OP_WAIT:
            sem = IA[g, I_SEM]
            cnt = IA[g, I_CNT]
            v = E.SEMV[sem]
            if TM[g, T_START] < 0:              # its record: reached, released
                TM[g, T_START] = now
            if v >= cnt:
                E.SEMV[sem] = v - cnt
                X[k, X_WSEM] = -1
                _observe_sync(E, g, now)
                _advance(X, k, now)
                continue
            _block(X, k, B_SEM, now)
            X[k, X_WSEM] = sem
            X[k, X_WCNT] = cnt
            # join the semaphore's waiters (X_INW = sem + 1 while in its list; a stream
            # already waiting there is not listed twice: a second entry would only make it
            # ready again, which it already is then)
            if X[k, X_INW] == 0:
                X[k, X_INW] = sem + 1
                X[k, X_SNX] = -1
                if E.SEMH[sem] < 0:
                    E.SEMH[sem] = k
                else:
                    X[E.SEMT[sem], X_SNX] = k
                E.SEMT[sem] = k
            elif X[k, X_INW] != sem + 1:      # pragma: no cover - waits on one at a time
                return RUN_INTERNAL
            return OK
        if op == OP_SIGNAL:
            _signal(E, k, g, IA[g, I_SEM], IA[g, I_CNT], now)
            _advance(X, k, now)
            continue
        if op == OP_NOP or op == OP_END:
            TM[g, T_START] = now
            TM[g, T_END] = now
            _advance(X, k, now)
            if op == OP_END:
                X[k, X_PC] = n
                break
            continue
        if kind == K_DMA:
            if _dma_issue(S, T, E, k, g, now, unit, ratio) == 0:
                return OK
        elif kind == K_SA:
            st = _sa_issue(T, E, k, g, op == OP_LOADW, now)
            if st <= 0:
                if st < 0:
                    E.G[E_ERRK] = k
                    E.G[E_ERRG] = g
                    return -st
                return OK
        elif kind == K_VU:
            if _vu_issue(T, E, k, g, now) == 0:
                return OK
        elif kind == K_LINK:
            if _link_issue(T, E, k, g, now) == 0:
                return OK
        else:
            return _pim_issue(S, T, E, k, now, unit, ratio)
        _advance(X, k, now)
    _try_finish(E, k, now)
    return OK


# ---------------------------------------------------------------- the loop
@njit
def _loop(S, T, E, ratio):
    """Executor._run on the arrays, from where the last call stopped (``E.G[E_PHASE]``).

    Each step: run the ready streams; stop when every stream finished (RUN_DONE); else go to
    the earlier of the next timer and the memory's next event (``now + 1`` when that is not
    later), advance the memory to it, handle its completions (PIM commands, DMA requests and
    transfers), wake the memory waiters, handle the due timers. Returns a RUN_* status:
    RUN_NEED_ROOM before a step whose completions might not fit the memory's latency buffers
    or pools, RUN_NEED_LOG inside the advance of a step (the command log is full; call again
    after growing it); the others end the run (RUN_DONE, or an error the caller reports)."""
    X, G, P = E.X, E.G, E.P
    GL, CQ = S.GL, S.CQ
    unit = P[P_UNIT] == 1
    ns = X.shape[0]
    if G[E_PHASE] == PH_INIT:
        for k in range(ns):
            _make_ready(E, k)
        G[E_NOW] = 0
        G[E_PHASE] = PH_TOP
    while True:
        now = G[E_NOW]
        if G[E_PHASE] == PH_TOP:
            R = E.READY
            while G[E_RN] > 0:
                k = R[G[E_RH]]
                G[E_RH] = (G[E_RH] + 1) % R.shape[0]
                G[E_RN] -= 1
                X[k, X_INR] = 0
                if X[k, X_FIN] == 0:
                    st = _run_stream(S, T, E, k, now, unit, ratio)
                    if st != OK:
                        return st
                    if G[E_HOVF]:             # pragma: no cover - sized for the program
                        return RUN_INTERNAL
            if G[E_NFIN] == ns:
                return RUN_DONE
            # room for every completion to come (latency buffers) and for the requests the
            # DMA may queue before the next check (pools); else the caller provisions it
            room = (P[P_MAXO] - G[E_OUT]) * P[P_MAXB] + 64
            if LAT_BINS + GL[G_NMLAT] + GL[G_OUTM] + 16 > S.MLAT.shape[0] or \
                    LAT_BINS + GL[G_NPLAT] + GL[G_OUTP] + 16 > S.PLAT.shape[0] or \
                    S.BFREE[0] < room or S.RQFREE[0] < room or \
                    S.POFREE[0] < P[P_PIMROOM] or \
                    GL[G_OUTM] + GL[G_OUTP] + room + P[P_PIMROOM] > CQ.shape[0]:
                return RUN_NEED_ROOM
            if G[E_HN] == 0:
                cand = INF
            else:
                cand = E.HEAP[0, 0]
            GL[G_STATUS] = ST_OK
            nm = _drive(S, 0, 1)               # _next_event
            if GL[G_STATUS] == ST_ERROR:
                return RUN_MEM_ERROR
            if GL[G_NCQ] > 0 and CQ[GL[G_CQH], 0] < nm:
                nm = CQ[GL[G_CQH], 0]
            if nm < INF:
                tm = _from_mem(nm, unit, ratio)
                if tm < cand:
                    cand = tm
            if cand >= INF:
                return RUN_DEADLOCK
            now = cand if cand > now else now + 1
            G[E_NOW] = now
            if P[P_MAXC] >= 0 and now > P[P_MAXC]:
                return RUN_MAXCYC
            G[E_PHASE] = PH_ADVANCE
        # the memory advance of the step (Executor._handle_completions)
        GL[G_STATUS] = ST_OK
        _drive(S, _to_mem(now, unit, ratio), 0)    # _advance_all
        st = GL[G_STATUS]
        if st == ST_ERROR:
            return RUN_MEM_ERROR
        if st == ST_LOG_FULL:
            return RUN_NEED_LOG
        if st != ST_OK:                       # pragma: no cover - OUT holds every request
            return RUN_INTERNAL
        G[E_PHASE] = PH_TOP
        G[E_STEPS] += 1
        OUT = S.OUT
        REC = E.REC
        freed = 0
        for i in range(GL[G_NOUT]):
            rid = OUT[i, 1]
            if rid >= PIM_RID_BASE:
                k = _pim_done(E, rid - PIM_RID_BASE, OUT[i, 0], now, unit, ratio)
                if k < 0:                     # pragma: no cover - a simulator bug
                    return RUN_INTERNAL
                _make_ready(E, k)
                continue
            r = rid >> REC_SHIFT
            freed += 1
            REC[r, RC_REM] -= 1
            if REC[r, RC_REM] == 0 and REC[r, RC_ISS] == REC[r, RC_N]:
                _dma_rec_done(E, r, now)
        if freed:
            # Executor._dma_freed
            G[E_OUT] -= freed
            if G[E_OUT] == 0:
                G[E_DBUSY] += now - G[E_BS]
            for i in range(G[E_NSLW]):
                _make_ready(E, E.SLW[i])
            G[E_NSLW] = 0
        for i in range(G[E_NMEMW]):
            _make_ready(E, E.MEMW[i])
        G[E_NMEMW] = 0
        # Executor._handle_timers
        H = E.HEAP
        last = H.shape[0] - 1
        while G[E_HN] > 0 and H[0, 0] <= now:
            _heap_pop(E)
            if H[last, 2] == 0:
                _make_ready(E, H[last, 3])
            else:
                _fire(E, H[last, 4], H[last, 5])
                _observe_sync(E, H[last, 6], now)
