"""Issuing a command in the compiled controller: timing records, row state, queues, completions.

:func:`_issue` commits the action :func:`archsim.memory.kernel.scheduler._decide` chose, as
:meth:`archsim.memory.controller.ChannelController._issue` does: it records the command on the
timing nodes of its scope, updates the row buffers, removes a served burst from its bank queue
(a request completes with its last burst: reads CL + BL after the RD, writes CWL + BL after
the WR), advances the head PIM request, and keeps the statistics (command counts, bytes,
open-row time for background energy, PIM busy time). Completions go to a queue kept sorted by
(cycle, request id) (:func:`_cq_push`). All cycles are memory-clock cycles (tCK).
"""
from archsim.memory.kernel.jit import njit, njit_inline, njit_plain
from archsim.memory.kernel.layout import *  # noqa: F403  (state layout and command codes)
from archsim.memory.kernel.scheduler import _pim_sub, refresh_pull_in
from archsim.memory.kernel.timing import _record, _record_scope


@njit
def _note_latency(X, GL, g, lat):
    """Count a completed request's latency ``lat`` (cycles) in ``X`` (``MLAT`` or ``PLAT``):
    its histogram bin below ``LAT_BINS``, else appended to the spill list (``GL[g]`` entries)."""
    if 0 <= lat < LAT_BINS:
        X[lat] += 1
    else:
        X[LAT_BINS + GL[g]] = lat
        GL[g] += 1


@njit
def _cq_push(CQ, GL, t, rid, lat, is_pim):
    """Add completion (cycle t, request id, latency in cycles, kind) to the completion queue:
    the ring ``CQ[cap, 4]`` (cap a power of two) holding ``GL[G_NCQ]`` entries sorted by
    (cycle, request id) from slot ``GL[G_CQH]`` on. The entries after the new one move one slot
    towards the tail, scanned from the tail: a completion is pushed about when its command
    issues, a fixed latency ahead, so it lands at or near the tail (the layer: 6 moves per
    push on average, 201 entries queued, none more than 100 cycles after the earliest).

    This replaced a binary min-heap ordered the same way: its pop sifted through ~8 levels, a
    tenth of the layer's event loop; the sorted ring pops in O(1) and keeps the pop order
    exactly (request ids are unique, so (cycle, request id) is a total order; the order of
    the completions of one cycle is observable: the NPU handles them, waking its streams,
    in that order)."""
    mask = CQ.shape[0] - 1
    h = GL[G_CQH]
    i = h + GL[G_NCQ]
    GL[G_NCQ] += 1
    while i > h:
        p = (i - 1) & mask
        if CQ[p, 0] < t or (CQ[p, 0] == t and CQ[p, 1] <= rid):
            break
        q = i & mask
        for j in range(4):
            CQ[q, j] = CQ[p, j]
        i -= 1
    q = i & mask
    CQ[q, 0] = t
    CQ[q, 1] = rid
    CQ[q, 2] = lat
    CQ[q, 3] = is_pim


@njit
def _cq_pop(CQ, GL):
    """Remove and return the earliest completion (cycle, request id, latency, kind), the one
    at the head ``CQ[GL[G_CQH]]`` (the queue must not be empty)."""
    h = GL[G_CQH]
    GL[G_CQH] = (h + 1) & (CQ.shape[0] - 1)
    GL[G_NCQ] -= 1
    return CQ[h, 0], CQ[h, 1], CQ[h, 2], CQ[h, 3]


@njit
def _note_open(CS, c, t, delta):
    if CS[c, C_OPEN] == 0 and delta > 0:
        CS[c, C_OSINCE] = t
    CS[c, C_OPEN] += delta
    if CS[c, C_OPEN] == 0 and delta < 0:
        CS[c, C_ACTIVE] += t - CS[c, C_OSINCE]


@njit_plain
def _log(LOG, GL, t, c, r, g, ba, cmd, row, col):
    if GL[G_LOGON] == 0:
        return
    i = GL[G_NLOG]
    LOG[i, 0] = t
    LOG[i, 1] = c
    LOG[i, 2] = r
    LOG[i, 3] = g
    LOG[i, 4] = ba
    LOG[i, 5] = cmd
    LOG[i, 6] = row
    LOG[i, 7] = col
    GL[G_NLOG] = i + 1


@njit
def _pim_busy(CS, c, t, dur, compute):
    """Union of PIM-busy intervals per channel (all PIM commands; COMP/GEMV separately)."""
    end = t + dur
    s = t if t > CS[c, C_PBEND] else CS[c, C_PBEND]
    if end > s:
        CS[c, C_PBUSY] += end - s
    if end > CS[c, C_PBEND]:
        CS[c, C_PBEND] = end
    if compute:
        s = t if t > CS[c, C_PCEND] else CS[c, C_PCEND]
        if end > s:
            CS[c, C_PCOMP] += end - s
        if end > CS[c, C_PCEND]:
            CS[c, C_PCEND] = end


@njit_inline
def _issue(S, c, t, cmd, b, x):
    """Commit action (cmd, b, x) at cycle t on channel c (ChannelController._issue): b the bank
    of a memory command, the refresh unit of REF/REFpb; x the burst slot of ACT/column
    commands, the PIM op of a PIM command."""
    CS, BK, BU, BFREE, RQ, RQFREE = S.CS, S.BK, S.BU, S.BFREE, S.RQ, S.RQFREE
    PO, POFREE, CQ, GL, LOG, CNT, LD, PA = S.PO, S.POFREE, S.CQ, S.GL, S.LOG, S.CNT, S.LD, S.PA
    RF, RU = S.RF, S.RU
    R, G, B = PA[A_R], PA[A_G], PA[A_B]
    CNT[c, cmd] += 1
    CS[c, C_NCMDS] += 1
    CS[c, C_TMIN] = t + 1
    CS[c, C_WTENT] = 0
    CS[c, C_PBOK] = 0               # the channel changed: the next decision starts afresh
    CS[c, C_ETOK] = 0               # its timing nodes are recorded below: the C_ET table is stale
    if b >= 0 and (cmd == ACT or cmd == PRE or cmd == RD or cmd == WR or cmd == RDA
                   or cmd == WRA):
        r = BK[c, b, B_RK]
        g = BK[c, b, B_G]
        ba = BK[c, b, B_BA]
        gi = BK[c, b, B_BGI]
        _record(S, c, 0, 0, cmd, t, 0)
        _record(S, c, 1 + r, 1, cmd, t, 0)
        _record(S, c, 1 + R + gi, 2, cmd, t, 0)
        _record(S, c, 1 + R + R * G + b, 3, cmd, t, 0)
        g0 = gi * B
        for bb in range(g0, g0 + B):
            if BK[c, bb, B_CV] == 2:
                BK[c, bb, B_CV] = 1
        BK[c, b, B_CV] = 0
        if cmd == ACT:
            row = BU[x, U_ROW]
            _note_open(CS, c, t, 1)
            BK[c, b, B_OPEN] = row
            BK[c, b, B_STREAK] = 0
            BK[c, b, B_LAST] = t
            if b < 63:
                CS[c, C_OMASK] |= 1 << b
            _log(LOG, GL, t, c, r, g, ba, ACT, row, -1)
        elif cmd == PRE:
            row = BK[c, b, B_OPEN]
            BK[c, b, B_OPEN] = -1
            if b < 63:
                CS[c, C_OMASK] &= ~(1 << b)
            _note_open(CS, c, t, -1)
            _log(LOG, GL, t, c, r, g, ba, PRE, row, -1)
        else:
            if cmd == RDA or cmd == WRA:      # the auto-precharge closes the row
                BK[c, b, B_OPEN] = -1
                if b < 63:
                    CS[c, C_OMASK] &= ~(1 << b)
                _note_open(CS, c, t, -1)
            BK[c, b, B_STREAK] += 1
            BK[c, b, B_LAST] = t
            n = BK[c, b, B_QLEN]
            j = 0
            while BK[c, b, B_Q0 + j] != x:
                j += 1
            for jj in range(j, n - 1):
                BK[c, b, B_Q0 + jj] = BK[c, b, B_Q0 + jj + 1]
            BK[c, b, B_QLEN] = n - 1
            if n == 1 and b < 63:
                CS[c, C_QMASK] &= ~(1 << b)
            CS[c, C_NQ] -= 1
            LD[c, b] -= 1
            tot = PA[A_LTOT]
            LD[c, tot] -= 1
            if BU[x, U_WR]:
                CS[c, C_NQW] -= 1
                LD[c, tot + 2] -= 1
                done = t + PA[A_CWL] + PA[A_BL]
                CS[c, C_BW] += PA[A_BB]
            else:
                LD[c, tot + 1] -= 1
                done = t + PA[A_CL] + PA[A_BL]
                CS[c, C_BR] += PA[A_BB]
            _log(LOG, GL, t, c, r, g, ba, cmd, BU[x, U_ROW], BU[x, U_COL])
            if done > CS[c, C_LAST]:
                CS[c, C_LAST] = done
            q = BU[x, U_REQ]
            if done > RQ[q, Q_DONE]:
                RQ[q, Q_DONE] = done
            RQ[q, Q_REM] -= 1
            # free the burst slot
            BFREE[0] += 1
            BFREE[BFREE[0]] = x
            if RQ[q, Q_REM] == 0:
                if GL[G_DIRECT] == 1:            # trace replay: straight to its slot
                    S.DONE[RQ[q, Q_RID]] = RQ[q, Q_DONE]
                    _note_latency(S.MLAT, GL, G_NMLAT, RQ[q, Q_DONE] - RQ[q, Q_ARR])
                    GL[G_OUTM] -= 1
                else:
                    _cq_push(CQ, GL, RQ[q, Q_DONE], RQ[q, Q_RID], RQ[q, Q_DONE] - RQ[q, Q_ARR],
                             0)
                RQFREE[0] += 1
                RQFREE[RQFREE[0]] = q
        return
    if cmd == REF or cmd == REFPB:
        u = b
        if cmd == REF:
            _record_scope(S, c, cmd, t, u, -1, -1, 0)
            _log(LOG, GL, t, c, u, -1, -1, REF, -1, -1)
        else:
            bb = RU[u, RU_B0]
            BK[c, bb, B_CV] = 0
            _record_scope(S, c, cmd, t, bb, -1, -1, 0)
            _log(LOG, GL, t, c, bb // (G * B), (bb // B) % G, bb % B, REFPB, -1, -1)
        RF[c, u, F_PEND] = 0
        RF[c, u, F_DUE] += PA[A_REFPER]
        return
    if cmd == ENTER or cmd == EXIT:
        _record_scope(S, c, cmd, t, -1, -1, -1, 0)
        CS[c, C_MODE] = 1 if cmd == ENTER else 0
        _log(LOG, GL, t, c, -1, -1, -1, cmd, -1, -1)
        return
    op = x
    cc, r, g, row, col = _pim_sub(PO, PA, op)
    PO[op, P_CUR] += 1
    k = col if cc == GEMV else 0
    nb = R * G * B
    if cc == G_ACT:
        _note_open(CS, c, t, B)
        CS[c, C_PACT] += B
    else:
        n_open = 0
        for bb in range(nb):
            if BK[c, bb, B_PIM] >= 0:
                n_open += 1
        if cc == PIM_PRE and n_open > 0:
            _note_open(CS, c, t, -n_open)
            CS[c, C_PPRE] += n_open
        elif cc == COMP:
            CS[c, C_CSTEPS] += n_open
        elif cc == GEMV:
            CS[c, C_CSTEPS] += n_open * k
    _record_scope(S, c, cc, t, r, g, row, k)
    _log(LOG, GL, t, c, r, g, -1, cc, row if cc == G_ACT else -1, col)
    if cc == GEMV:
        kk = k if k > PA[A_FILL] else PA[A_FILL]
        _pim_busy(CS, c, t, PA[A_CSTEP] * (kk + 1), True)
    elif cc == COMP:
        _pim_busy(CS, c, t, PA[A_CSTEP], True)
    elif cc == GWRITE:
        _pim_busy(CS, c, t, PA[A_GWR], False)
    elif cc == READRES:
        _pim_busy(CS, c, t, PA[A_RDRES], False)
    elif cc == G_ACT:
        _pim_busy(CS, c, t, PA[A_TRCD], False)
    if cc == HEADER:
        est = PO[op, P_EST]
        for u in range(PA[A_NU]):
            if RF[c, u, F_PEND] == 0:        # pull the refresh in before the GEMVs
                RF[c, u, F_DUE] = refresh_pull_in(est, RF[c, u, F_DUE], t, PA[A_TREFI],
                                                  PA[A_TRFCU])
    if PO[op, P_CUR] >= PO[op, P_NSUB]:
        CS[c, C_PH] += 1
        if cc == G_ACT:
            end = PA[A_TRCD]
        elif cc == COMP:
            end = PA[A_CSTEP]
        elif cc == READRES:
            end = PA[A_CL] + PA[A_RDRES]
        elif cc == GWRITE:
            end = PA[A_CWL] + PA[A_GWR]
        elif cc == PIM_PRE:
            end = PA[A_TRP]
        elif cc == GEMV:
            kk = k if k > PA[A_FILL] else PA[A_FILL]
            end = PA[A_CSTEP] * (kk + 1)
        else:
            end = 1
        _cq_push(CQ, GL, t + end, PO[op, P_RID], t + end - PO[op, P_ARR], 1 + c)
        if t + end > CS[c, C_LAST]:
            CS[c, C_LAST] = t + end
        POFREE[0] += 1
        POFREE[POFREE[0]] = op
