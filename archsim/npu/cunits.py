"""The engines of the compiled event loop: each function repeats one executor method on the
arrays of :mod:`archsim.npu.cstate` (named in its docstring), in the same order, with the same
results (inlined where they have one caller: a call that passes the state's arrays costs
~0.2 µs, measured): stream bookkeeping, timers, semaphores, DMA transfers (requests queued by the memory
kernel's ``_queue_request``), systolic arrays, vector units, links and PIM commands
(``_push_pim``). Durations come from the program's tables (:mod:`archsim.npu.tables`); the loop
itself is :mod:`archsim.npu.cloop`. NPU cycles; memory cycles converted with the executor's
rounding.
"""
from __future__ import annotations

import math

from archsim.memory.kernel.drive import _push_pim, _queue_request
from archsim.memory.kernel.jit import njit, njit_inline, njit_plain
from archsim.memory.kernel.layout import A_B, A_G, A_LTOT, A_QB, A_QC, INF
from archsim.npu.cstate import *  # noqa: F403  (state layout and statuses)
from archsim.npu.cstate import (I_ARR, I_DN, I_DOFF, I_DSHIFT, I_DUR, I_DWR, I_ELEMS,
                                I_FEED, I_LAT, I_LCYC, I_MACS, I_PCH, I_PCMD, I_PEST, I_PMASK,
                                I_PN, I_PNSUB, I_POK, I_PRE, I_PROW, K_DMA, K_PIM, K_SA,
                                K_VU, OP_PIM)


@njit
def _to_mem(t, unit, ratio):
    """NPU cycle -> memory cycle (Executor._to_mem: ceil(t × ratio))."""
    if unit:
        return t
    return int(math.ceil(t * ratio - 1e-9))


@njit
def _from_mem(c, unit, ratio):
    """Memory cycle -> NPU cycle (Executor._from_mem: ceil(c / ratio))."""
    if unit:
        return c
    return int(math.ceil(c / ratio - 1e-9))


# ---------------------------------------------------------------- small helpers
@njit
def _make_ready(E, k):
    """Executor._make_ready."""
    X, G = E.X, E.G
    if X[k, X_INR] == 0 and X[k, X_FIN] == 0:
        X[k, X_INR] = 1
        R = E.READY
        R[(G[E_RH] + G[E_RN]) % R.shape[0]] = k
        G[E_RN] += 1


@njit_plain
def _block(X, k, cause, now):
    """Executor._block."""
    b = X[k, X_BLK]
    if b != cause:
        if b >= 0:
            X[k, X_ST0 + b] += now - X[k, X_SINCE]
        X[k, X_BLK] = cause
        X[k, X_SINCE] = now


@njit
def _advance(X, k, now):
    """Executor._advance."""
    b = X[k, X_BLK]
    if b >= 0:
        X[k, X_ST0 + b] += now - X[k, X_SINCE]
        X[k, X_BLK] = -1
    X[k, X_PC] += 1
    X[k, X_NI] += 1


@njit
def _observe(E, g, start, end, unit):
    """The observer call of instruction g (recorded; replayed in this order by the caller)."""
    T, G = E.TIMES, E.G
    T[g, T_START] = start
    T[g, T_END] = end
    T[g, T_UNIT] = unit
    T[g, T_OBS] = G[E_OBS]
    G[E_OBS] += 1


@njit_inline
def _observe_sync(E, g, now):
    """The observer call of the WAIT or SIGNAL at g, released or fired at ``now`` (its start,
    the cycle its stream reached it, is already in ``T_START``)."""
    _observe(E, g, E.TIMES[g, T_START], now, U_SYNC)


@njit
def _heap_push(E, t, kind, k, sem, cnt, g):
    """Executor._push: a timer (cycle t, kind 0 wake stream k / 1 fire sem += cnt for the
    SIGNAL at global index g), ordered by (cycle, push order)."""
    H, G = E.HEAP, E.G
    i = G[E_HN]
    if i >= H.shape[0] - 1:             # pragma: no cover - sized for the program
        G[E_HOVF] = 1
        return
    G[E_HSEQ] += 1
    G[E_HN] = i + 1
    seq = G[E_HSEQ]
    while i > 0:
        p = (i - 1) >> 1
        if H[p, 0] < t or (H[p, 0] == t and H[p, 1] < seq):
            break
        for j in range(7):
            H[i, j] = H[p, j]
        i = p
    H[i, 0] = t
    H[i, 1] = seq
    H[i, 2] = kind
    H[i, 3] = k
    H[i, 4] = sem
    H[i, 5] = cnt
    H[i, 6] = g


@njit
def _heap_pop(E):
    """Remove the earliest timer (its fields are left in HEAP[cap - 1])."""
    H, G = E.HEAP, E.G
    last = H.shape[0] - 1
    for j in range(7):
        H[last, j] = H[0, j]
    n = G[E_HN] - 1
    G[E_HN] = n
    if n == 0:
        return
    t, seq = H[n, 0], H[n, 1]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (H[c + 1, 0] < H[c, 0] or
                          (H[c + 1, 0] == H[c, 0] and H[c + 1, 1] < H[c, 1])):
            c += 1
        if t < H[c, 0] or (t == H[c, 0] and seq < H[c, 1]):
            break
        for j in range(7):
            H[i, j] = H[c, j]
        i = c
    for j in range(7):
        H[i, j] = H[n, j]


@njit
def _fire(E, sem, cnt):
    """Executor._fire: the semaphore grows, its waiting streams become ready in order."""
    X = E.X
    E.SEMV[sem] += cnt
    k = E.SEMH[sem]
    E.SEMH[sem] = -1
    while k >= 0:
        nxt = X[k, X_SNX]
        X[k, X_INW] = 0
        _make_ready(E, k)
        k = nxt


@njit_inline
def _signal(E, k, g, sem, cnt, now):
    """Executor._signal of the SIGNAL at global index g (its record: issued ``now``, fired
    when the semaphore grows)."""
    X = E.X
    E.TIMES[g, T_START] = now
    kind = X[k, X_KIND]
    if kind == K_DMA:
        if X[k, X_IH] != 0 or X[k, X_CUR] != 0:
            cap = X[k, X_PSCAP]
            i = X[k, X_PSOFF] + (X[k, X_PSH] + X[k, X_PSN]) % cap
            E.PSIG[i, 0] = X[k, X_SEQ]
            E.PSIG[i, 1] = sem
            E.PSIG[i, 2] = cnt
            E.PSIG[i, 3] = g
            X[k, X_PSN] += 1
            return
    elif kind == K_SA or kind == K_VU:
        if X[k, X_MAXD] > now:
            _heap_push(E, X[k, X_MAXD], 1, k, sem, cnt, g)
            return
    _fire(E, sem, cnt)
    _observe_sync(E, g, now)


@njit_inline
def _try_finish(E, k, now):
    """Executor._try_finish."""
    X = E.X
    if X[k, X_FIN] != 0 or X[k, X_PC] < X[k, X_N]:
        return
    kind = X[k, X_KIND]
    if kind == K_DMA:
        if X[k, X_IH] != 0 or X[k, X_CUR] != 0 or X[k, X_PSN] != 0:
            return
        fc = X[k, X_MAXD] if X[k, X_MAXD] > now else now
    elif kind == K_PIM:
        if X[k, X_PCNT] != 0:
            return
        fc = X[k, X_MAXD] if X[k, X_MAXD] > now else now
    else:
        if X[k, X_MAXD] > now:
            _heap_push(E, X[k, X_MAXD], 0, k, 0, 0, -1)
            return
        fc = (X[k, X_MAXD] if X[k, X_MAXD] > now else now) if X[k, X_N] else 0
    X[k, X_FIN] = 1
    X[k, X_FC] = fc
    E.G[E_NFIN] += 1


# ---------------------------------------------------------------- DMA
@njit
def _dma_rec_done(E, r, now):
    """Executor._dma_rec_done: transfer r completed at ``now``; the SIGNALs behind it fire."""
    X, REC = E.X, E.REC
    k = REC[r, RC_K]
    unit = X[k, X_IDX] if X[k, X_IDX] > 0 else 0
    _observe(E, REC[r, RC_G], REC[r, RC_START], now, unit)
    if now > X[k, X_MAXD]:
        X[k, X_MAXD] = now
    h = X[k, X_IH]
    while h != 0 and REC[h, RC_REM] == 0 and REC[h, RC_ISS] == REC[h, RC_N]:
        h = REC[h, RC_NEXT]
    X[k, X_IH] = h
    if h == 0:
        X[k, X_IT] = 0
    frontier = REC[h, RC_SEQ] if h != 0 else X[k, X_SEQ]
    cap = X[k, X_PSCAP]
    while X[k, X_PSN] > 0:
        i = X[k, X_PSOFF] + X[k, X_PSH]
        if E.PSIG[i, 0] > frontier:
            break
        X[k, X_PSH] = (X[k, X_PSH] + 1) % cap
        X[k, X_PSN] -= 1
        _fire(E, E.PSIG[i, 1], E.PSIG[i, 2])
        _observe_sync(E, E.PSIG[i, 3], now)
    if X[k, X_PC] >= X[k, X_N]:
        _make_ready(E, k)


@njit_inline
def _dma_issue(S, T, E, k, g, now, unit, ratio):
    """Executor._dma_issue of instruction g (stream k) at ``now``, its requests queued by the
    memory kernel (``_queue_request``: what ``KernelMemory.submit_many`` / ``submit`` with the
    ``can_accept`` check queue). Returns 1 when the stream moves on, 0 when it waits."""
    X, REC, G, P = E.X, E.REC, E.G, E.P
    IA = T.IA
    r = X[k, X_CUR]
    if r == 0:
        G[E_RECC] += 1
        r = G[E_RECC]
        n = IA[g, I_DN]
        REC[r, RC_K] = k
        REC[r, RC_SEQ] = X[k, X_SEQ]
        REC[r, RC_N] = n
        REC[r, RC_ISS] = 0
        REC[r, RC_REM] = n
        REC[r, RC_WR] = IA[g, I_DWR]
        REC[r, RC_READY] = now + P[P_SETUP]
        REC[r, RC_G] = g
        REC[r, RC_START] = now
        REC[r, RC_OFF] = IA[g, I_DOFF]
        REC[r, RC_SHIFT] = IA[g, I_DSHIFT]
        REC[r, RC_NEXT] = 0
        X[k, X_SEQ] += 1
        X[k, X_CUR] = r
        if X[k, X_IH] == 0:
            X[k, X_IH] = r
        else:
            REC[X[k, X_IT], RC_NEXT] = r
        X[k, X_IT] = r
        G[E_DI] += 1
    if REC[r, RC_READY] > now:
        _block(X, k, B_SETUP, now)
        _heap_push(E, REC[r, RC_READY], 0, k, 0, 0, -1)
        return 0
    budget = P[P_MAXO] - G[E_OUT]
    if budget <= 0:
        _block(X, k, B_MEM, now)
        E.SLW[G[E_NSLW]] = k
        G[E_NSLW] += 1
        return 0
    n = REC[r, RC_N]
    i0 = REC[r, RC_ISS]
    kk = n - i0
    if budget < kk:
        kk = budget
    R = P[P_R]
    t0 = now if now > G[E_IC] else G[E_IC]
    used = G[E_IU] if t0 == G[E_IC] else 0
    wr = REC[r, RC_WR]
    base = REC[r, RC_OFF] + i0
    shift = REC[r, RC_SHIFT]
    DREL, DSZ = T.DREL, T.DSZ
    PA = S.PA
    GB = PA[A_G] * PA[A_B]
    tot = PA[A_LTOT]
    qb = PA[A_QB]
    qc = PA[A_QC]
    done = 0
    nbytes = 0
    rid0 = r << REC_SHIFT
    # request d leaves at cycle t0 + (used + d) // R (R per cycle, ``used`` < R of t0's slots
    # taken): counted up instead of divided
    cyc = t0
    slot = used
    for d in range(kk):
        size = DSZ[base + d]
        if not _queue_request(S, GB, tot, qb, qc, DREL[base + d] + shift, size,
                              _to_mem(cyc, unit, ratio), rid0 | (i0 + d), wr):
            break
        nbytes += size
        done += 1
        slot += 1
        if slot == R:
            slot = 0
            cyc += 1
    if done:
        if G[E_OUT] == 0:
            G[E_BS] = t0
        G[E_OUT] += done
        REC[r, RC_ISS] = i0 + done
        total = used + done
        G[E_IC] = t0 + total // R
        G[E_IU] = total % R
        G[E_DREQ] += done
        if wr:
            G[E_DBW] += nbytes
        else:
            G[E_DBR] += nbytes
    if REC[r, RC_ISS] == n:
        X[k, X_CUR] = 0
        if n == 0:
            _dma_rec_done(E, r, now)
        return 1
    _block(X, k, B_MEM, now)
    if done < kk:
        E.MEMW[G[E_NMEMW]] = k
        G[E_NMEMW] += 1
    else:
        E.SLW[G[E_NSLW]] = k
        G[E_NSLW] += 1
    return 0


# ---------------------------------------------------------------- systolic arrays, vector units
@njit
def _queue_free(Q, N, cols, a, now):
    """Keep the entries > now of row a's queue (order kept); returns how many remain."""
    n = N[a, cols]
    j = 0
    for i in range(n):
        if Q[a, i] > now:
            Q[a, j] = Q[a, i]
            j += 1
    N[a, cols] = j
    return j


@njit_inline
def _queue_full(E, Q, N, cols, a, depth, k, cause, now):
    """Whether unit a's queue (row a of Q, N[a, cols] entries) holds ``depth`` instructions
    still to start after ``now``; if so stream k blocks on ``cause`` and wakes when the
    earliest of them starts (Executor._sa_issue / _vu_issue)."""
    if N[a, cols] == 0 or _queue_free(Q, N, cols, a, now) < depth:
        return False
    _block(E.X, k, cause, now)
    m = Q[a, 0]
    for j in range(1, N[a, cols]):
        if Q[a, j] < m:
            m = Q[a, j]
    _heap_push(E, m, 0, k, 0, 0, -1)
    return True


@njit_inline
def _issued(E, Q, N, cols, a, k, g, start, done, now):
    """Instruction g of stream k issued on unit a for [start, done): queued on the unit while
    it starts after ``now``, the stream's latest completion, the observer's record."""
    if start > now:
        Q[a, N[a, cols]] = start
        N[a, cols] += 1
    if done > E.X[k, X_MAXD]:
        E.X[k, X_MAXD] = done
    _observe(E, g, start, done, a)


@njit
def _pick_array(E, now):
    """Executor._pick_array."""
    AR, AQ, P = E.AR, E.AQ, E.P
    best = 0
    best_t = INF
    for i in range(AR.shape[0]):
        pend = 0
        for j in range(AR[i, AA_QN]):
            if AQ[i, j] > now:
                pend += 1
        if pend >= P[P_SADEPTH]:
            continue
        t = now
        x = AR[i, AA_SHADOW] if AR[i, AA_HASPEND] == 0 else INF
        if x > t:
            t = x
        if AR[i, AA_PRE] > t:
            t = AR[i, AA_PRE]
        if AR[i, AA_ROWS] - P[P_H] > t:
            t = AR[i, AA_ROWS] - P[P_H]
        if t < best_t:
            best = i
            best_t = t
    if best_t == INF:
        for i in range(AR.shape[0]):
            if AR[i, AA_ROWS] < AR[best, AA_ROWS]:
                best = i
    return best


@njit_inline
def _sa_issue(T, E, k, g, loadw, now):
    """Executor._sa_issue of instruction g. Returns 1 (issued), 0 (array queue full: wait) or
    RUN_SA_ANY / RUN_SA_NOW negated (no array chosen / no weights)."""
    X, AR, AQ, P = E.X, E.AR, E.AQ, E.P
    IA = T.IA
    a = IA[g, I_ARR]
    if a < 0:
        if loadw:
            a = _pick_array(E, now)
        else:
            a = X[k, X_LASTA]
            if a < 0:
                return -RUN_SA_ANY
    if _queue_full(E, AQ, AR, AA_QN, a, P[P_SADEPTH], k, B_ARRAY, now):
        return 0
    if loadw:
        start = now
        if AR[a, AA_SHADOW] > start:
            start = AR[a, AA_SHADOW]
        if AR[a, AA_PRE] > start:
            start = AR[a, AA_PRE]
        done = start + IA[g, I_PRE]
        AR[a, AA_PRE] = done
        AR[a, AA_PEND] = done
        AR[a, AA_HASPEND] = 1
        AR[a, AA_PRELOADS] += 1
        X[k, X_LASTA] = a
    else:
        if AR[a, AA_HASPEND] != 0:
            w_ready = AR[a, AA_PEND]
        elif AR[a, AA_HASW] != 0:
            w_ready = AR[a, AA_ACTIVE]
        else:
            E.G[E_ERRA] = a
            return -RUN_SA_NOW
        start = now
        if AR[a, AA_ROWS] > start:
            start = AR[a, AA_ROWS]
        if w_ready > start:
            start = w_ready
        if AR[a, AA_HASPEND] != 0:
            AR[a, AA_ACTIVE] = AR[a, AA_PEND]
            AR[a, AA_HASPEND] = 0
            AR[a, AA_SHADOW] = start
            AR[a, AA_HASW] = 1
        feed = IA[g, I_FEED]
        done = start + IA[g, I_LAT]
        AR[a, AA_ROWS] = start + feed
        AR[a, AA_TILES] += 1
        AR[a, AA_MACS] += IA[g, I_MACS]
        AR[a, AA_FEED] += feed
        be = AR[a, AA_BUSYEND]
        AR[a, AA_BUSY] += done - (start if start > be else be)
        AR[a, AA_BUSYEND] = done
    _issued(E, AQ, AR, AA_QN, a, k, g, start, done, now)
    return 1


@njit_inline
def _vu_issue(T, E, k, g, now):
    """Executor._vu_issue of instruction g. Returns 1 (issued) or 0 (queue full: wait)."""
    X, VS, VQ, P = E.X, E.VS, E.VQ, E.P
    u = X[k, X_IDX] if X[k, X_IDX] > 0 else 0
    if _queue_full(E, VQ, VS, V_QN, u, P[P_VUDEPTH], k, B_VECTOR, now):
        return 0
    dur = T.IA[g, I_DUR]
    start = now if now > VS[u, V_FREE] else VS[u, V_FREE]
    done = start + dur
    VS[u, V_FREE] = done
    VS[u, V_OPS] += 1
    VS[u, V_ELEMS] += T.IA[g, I_ELEMS]
    VS[u, V_BUSY] += dur
    _issued(E, VQ, VS, V_QN, u, k, g, start, done, now)
    return 1


@njit_inline
def _link_issue(T, E, k, g, now):
    """Executor._link_issue of instruction g. Returns 1 once the link time has passed."""
    X, TM = E.X, E.TIMES
    if TM[g, T_LINK0] < 0:
        TM[g, T_LINK0] = now
    t0 = TM[g, T_LINK0]
    end = t0 + T.IA[g, I_LCYC]
    if now < end:
        _heap_push(E, end, 0, k, 0, 0, -1)
        return 0
    if end > X[k, X_MAXD]:
        X[k, X_MAXD] = end
    _observe(E, g, t0, end, 0)
    return 1


# ---------------------------------------------------------------- PIM
@njit_inline
def _pim_issue(S, T, E, k, now, unit, ratio):
    """Executor._pim_issue + _pim_submit: send the PIM commands of the stream's run while
    fewer than ``pim.command_queue_depth`` are in flight. Returns OK or RUN_PIM_BAD (the
    memory rejects the instruction; E_ERRK/E_ERRG name it, E_PIMC its command number)."""
    X, G, IA, OPS = E.X, E.G, T.IA, T.OP
    depth = E.P[P_PDEPTH]
    if X[k, X_PCNT] == 0:
        X[k, X_PNEXT] = X[k, X_PC]
    off = X[k, X_OFF]
    while X[k, X_PNEXT] < X[k, X_N] and X[k, X_PCNT] < depth:
        g = off + X[k, X_PNEXT]
        if OPS[g] != OP_PIM:
            break
        G[E_PIMC] += 1
        c = G[E_PIMC]
        if IA[g, I_POK] == 0:
            G[E_ERRK] = k
            G[E_ERRG] = g
            return RUN_PIM_BAD
        ch = IA[g, I_PCH]
        _push_pim(S, ch, PIM_RID_BASE + c, IA[g, I_PCMD], _to_mem(now, unit, ratio),
                  IA[g, I_PEST], IA[g, I_PMASK], IA[g, I_PROW], IA[g, I_PN], IA[g, I_PNSUB])
        E.PRING[k, (X[k, X_PH] + X[k, X_PCNT]) % depth] = c
        X[k, X_PCNT] += 1
        E.PW[c, 0] = k
        E.PW[c, 1] = now
        E.PW[c, 2] = X[k, X_PNEXT]
        E.PIMST[ch, PM_CMDS] += 1
        E.PIMST[ch, PM_SEEN] = 1
        X[k, X_PNEXT] += 1
    return OK


@njit_inline
def _pim_done(E, c, cycle, now, unit, ratio):
    """Executor._pim_done of PIM command number c completed at memory cycle ``cycle``;
    returns its stream (-1: not one of its stream's commands in flight, a simulator bug)."""
    X, PW, PIMST = E.X, E.PW, E.PIMST
    k = PW[c, 0]
    t0 = PW[c, 1]
    t = _from_mem(cycle, unit, ratio)
    if t < t0:
        t = t0
    ch = X[k, X_IDX]
    last = PIMST[ch, PM_LAST]
    if t > last:
        PIMST[ch, PM_BUSY] += t - (t0 if t0 > last else last)
        PIMST[ch, PM_LAST] = t
    _observe(E, X[k, X_OFF] + PW[c, 2], t0, t, ch)
    # leave the stream's commands in flight (usually the oldest; a PIM_HEADER may complete
    # after the commands behind it: then the others keep their order)
    depth = E.P[P_PDEPTH]
    h = X[k, X_PH]
    n = X[k, X_PCNT]
    j = 0
    while j < n and E.PRING[k, (h + j) % depth] != c:
        j += 1
    if j == n:                              # pragma: no cover - a command of the stream
        return -1
    if j == 0:
        X[k, X_PH] = (h + 1) % depth
    else:
        for m in range(j, n - 1):
            E.PRING[k, (h + m) % depth] = E.PRING[k, (h + m + 1) % depth]
    X[k, X_PCNT] = n - 1
    if t > X[k, X_MAXD]:
        X[k, X_MAXD] = t
    _advance(X, k, now)
    return k
