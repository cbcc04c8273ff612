"""The scheduling decision of the compiled controller: what one channel issues next.

:func:`_decide` is the policy of :mod:`archsim.memory.controller` (the readable reference) on
flat arrays, step by step with the same event order and tie-breaks: admissions from the input
FIFO into the bank queues, the write mode, refresh drains per refresh unit, the PIM queue (dual
row buffers: PIM first on the command bus; single: PIM_ENTER / PIM_EXIT mode switches), then
the memory requests of the banks, each bank's candidate cached until its queue, open row or
bank-group timing changes, then timeout precharges. Every decision is a policy function of
:mod:`archsim.memory.policy`, compiled here from the very same source the reference calls. ``tests/test_system_fastmem.py`` keeps both identical call for
call. All cycles are memory-clock cycles (tCK).
"""
from archsim.memory import policy as _pol
from archsim.memory.kernel.jit import ctz, njit, njit_inline
from archsim.memory.kernel.layout import *  # noqa: F403  (state layout and command codes)
from archsim.memory.kernel.timing import _e_scope, _eb, _et


# ---- PIM sub-commands ------------------------------------------------------------------------
@njit
def _pim_sub(PO, PA, op):
    """The op's current sub-command as (cmd, rank, bank group, row, col)."""
    kind = PO[op, P_KIND]
    cur = PO[op, P_CUR]
    if kind == G_ACT:
        R, G = PA[A_R], PA[A_G]
        gi = cur // R
        r = cur % R
        mask = PO[op, P_MASK]
        cnt = -1
        g = 0
        for gg in range(G):
            if (mask >> gg) & 1:
                cnt += 1
                if cnt == gi:
                    g = gg
                    break
        return G_ACT, r, g, PO[op, P_ROW], -1
    if kind == COMP:
        return COMP, -1, -1, -1, cur
    if kind == GEMV or kind == HEADER:
        return kind, -1, -1, -1, PO[op, P_N]
    return kind, -1, -1, -1, -1


@njit
def _pim_open_in(BK, c, b0, n):
    """True when one of banks b0..b0+n-1 of channel c has its PIM row open."""
    for b in range(b0, b0 + n):
        if BK[c, b, B_PIM] >= 0:
            return True
    return False


@njit
def _any_pim_open(BK, PA, c):
    nb = PA[A_R] * PA[A_G] * PA[A_B]
    for b in range(nb):
        if BK[c, b, B_PIM] >= 0:
            return True
    return False


# ---- the policies (archsim.memory.policy, compiled) ------------------------------------------
bank_pick = njit(_pol.bank_pick)
key_class = njit(_pol.key_class)
auto_precharge = njit(_pol.auto_precharge)
idle_close_cycle = njit(_pol.idle_close_cycle)
write_mode_next = njit(_pol.write_mode_next)
refresh_pull_in = njit(_pol.refresh_pull_in)


# ---- the decision ----------------------------------------------------------------------------
@njit
def _key(k0, k1):
    return k0 * (1 << 50) + (k1 + 1)


@njit
def _admissible(S, c, bank, wr):
    """True when a burst for ``bank`` (write flag ``wr``) leaving the FIFO head finds room at
    its bank and in its channel budget (ChannelController._admissible)."""
    CS, BK, PA = S.CS, S.BK, S.PA
    if BK[c, bank, B_QLEN] >= PA[A_QB]:
        return False
    if PA[A_WPOL] == _pol.WRITE_DRAIN:
        if wr:
            return CS[c, C_NQW] < PA[A_QW]
        return CS[c, C_NQ] - CS[c, C_NQW] < PA[A_QC]
    return CS[c, C_NQ] < PA[A_QC]


@njit_inline
def _admit(S, c, t):
    CS, BK, STG, BU, PA = S.CS, S.BK, S.STG, S.BU, S.PA
    cap = STG.shape[1]
    default = PA[A_DEFAULT] == 1
    drain = PA[A_WPOL] == _pol.WRITE_DRAIN
    while CS[c, C_SH] != CS[c, C_ST]:
        bi = STG[c, CS[c, C_SH] & (cap - 1)]
        bank = BU[bi, U_BANK]
        if BU[bi, U_ARR] > t or not _admissible(S, c, bank, BU[bi, U_WR]):
            return
        CS[c, C_SH] += 1
        n = BK[c, bank, B_QLEN]
        # a burst behind others changes the bank's FR-FCFS open-page candidate (the oldest row
        # hit of the direction served, else the oldest burst of it) only when it is of that
        # direction and the bank had none of it or it is the first row hit; under the other
        # policies any new burst may change it
        if not default or n == 0 or (
                (not drain or BU[bi, U_WR] == CS[c, C_WMODE])
                and (BK[c, bank, B_CCMD] == -1 or (BK[c, bank, B_CCMD] == PRE and
                                                   BU[bi, U_ROW] == BK[c, bank, B_OPEN]))):
            BK[c, bank, B_CV] = 0
            if bank < 63:
                CS[c, C_DIRTY] |= 1 << bank
        if n == 0 and bank < 63:
            CS[c, C_QMASK] |= 1 << bank
        BK[c, bank, B_Q0 + n] = bi
        BK[c, bank, B_QLEN] = n + 1
        CS[c, C_NQ] += 1
        if BU[bi, U_WR]:
            CS[c, C_NQW] += 1


@njit_inline
def _bank_candidate(S, c, b):
    """The choice at bank b (queue not empty; ChannelController._bank_candidate): stores
    B_CCMD (-1: no burst of the direction served), B_CKEY and B_CX (the burst served, -1 for
    PRE)."""
    CS, BK, BU, PA = S.CS, S.BK, S.BU, S.PA
    n = BK[c, b, B_QLEN]
    orow = BK[c, b, B_OPEN]
    mixed = PA[A_WPOL] != _pol.WRITE_DRAIN
    wdir = CS[c, C_WMODE]
    oldest = -1
    hit = -1
    hits = 0
    # the scan stops once the oldest burst and the first hit are known (closed_adaptive:
    # also whether a second burst hits the row)
    need = 2 if PA[A_PAGE] == _pol.PAGE_CLOSED_ADAPTIVE else 1
    for j in range(n):
        xi = BK[c, b, B_Q0 + j]
        mine = mixed or BU[xi, U_WR] == wdir
        if orow >= 0 and BU[xi, U_ROW] == orow:
            hits += 1
            if hit < 0 and mine:
                hit = xi
        if oldest < 0 and mine:
            oldest = xi
        if oldest >= 0 and (orow < 0 or (hit >= 0 and hits >= need)):
            break
    if oldest < 0:
        BK[c, b, B_CCMD] = -1
        return
    sched = PA[A_SCHED]
    pick = bank_pick(sched, PA[A_CAP], orow >= 0, BK[c, b, B_STREAK], hit >= 0,
                     orow >= 0 and BU[oldest, U_ROW] == orow)
    if pick == _pol.PICK_ACT:
        BK[c, b, B_CCMD] = ACT
        BK[c, b, B_CKEY] = _key(key_class(sched, 0), BU[oldest, U_SEQ])
        BK[c, b, B_CX] = oldest
        return
    if pick == _pol.PICK_PRE:
        BK[c, b, B_CCMD] = PRE
        BK[c, b, B_CKEY] = _key(key_class(sched, 0), BU[oldest, U_SEQ])
        BK[c, b, B_CX] = -1
        return
    x = hit if pick == _pol.PICK_HIT else oldest
    ap = auto_precharge(PA[A_PAGE], hits > 1)
    if BU[x, U_WR]:
        BK[c, b, B_CCMD] = WRA if ap else WR
    else:
        BK[c, b, B_CCMD] = RDA if ap else RD
    BK[c, b, B_CKEY] = _key(key_class(sched, 1), BU[x, U_SEQ])
    BK[c, b, B_CX] = x


@njit_inline
def _decide(S, c, limit):
    """Port of ChannelController._decide_loop. Returns (cycle, cmd, b, x, kind) with kind 0 =
    none (nothing can happen), 1 = internal event at cycle, 2 = action (cmd, b, x)."""
    CS, BK, NXT, STG, BU, PA, RF, RU = S.CS, S.BK, S.NXT, S.STG, S.BU, S.PA, S.RF, S.RU
    R, G, B = PA[A_R], PA[A_G], PA[A_B]
    nbr = G * B
    nb = R * nbr
    dual = PA[A_DUAL] == 1
    cap = STG.shape[1]
    nbg0 = 1 + R
    nbk0 = 1 + R + R * G
    NU = PA[A_NU]
    while True:
        t0 = CS[c, C_TMIN]
        due = False                     # a refresh unit fell due
        if t0 <= limit:
            if CS[c, C_SH] != CS[c, C_ST]:
                _admit(S, c, t0)
            for u in range(NU):
                if RF[c, u, F_PEND] == 0 and RF[c, u, F_DUE] <= t0:
                    RF[c, u, F_PEND] = 1
                    due = True
        if PA[A_WPOL] == _pol.WRITE_DRAIN:
            if t0 <= limit:
                CS[c, C_WTENT] = 0
            nw = CS[c, C_NQW]
            w = write_mode_next(PA[A_WPOL], CS[c, C_WMODE], CS[c, C_NQ] - nw, nw, PA[A_WHI],
                                PA[A_WLO])
            if w != CS[c, C_WMODE]:
                CS[c, C_WMODE] = w
                CS[c, C_PBOK] = 0
                for b in range(nb):
                    BK[c, b, B_CV] = 0
                if t0 > limit:
                    CS[c, C_WTENT] ^= 1
        has_pim = CS[c, C_PH] != CS[c, C_PT]
        # Admission-only re-decision: when nothing but admissions into the bank queues happened
        # since the channel's last decision (no command, PIM request, refresh falling due or
        # write-mode change: C_PBOK), every candidate of that decision is unchanged except those
        # of the banks an admission touched (C_DIRTY), and none lies before t0 (C_PBT >= t0, so
        # no clamp to t0 reorders them). Its best stays the best of the rest, and the walk below
        # visits only the touched banks: the same result as the full decision (the candidates'
        # keys are unique, so the order of the comparisons does not matter;
        # tests/test_system_fastmem.py checks call for call). Not when the last best is a bank
        # an admission touched, or while PIM requests hold the memory commands back (single
        # row buffer), or under policies whose other candidates follow the queues (A_FAST).
        fast = (CS[c, C_PBOK] == 1 and not due and PA[A_FAST] == 1 and CS[c, C_PBT] >= t0
                and (dual or (CS[c, C_MODE] == 0 and not has_pim))
                and (CS[c, C_PBW] == 0 or (CS[c, C_DIRTY] >> CS[c, C_PBB]) & 1 == 0))
        S.GL[G_NDEC] += 1
        if fast:
            S.GL[G_NFAST] += 1
            best_t, best_key, best_cmd = CS[c, C_PBT], CS[c, C_PBK], CS[c, C_PBC]
            best_b, best_x, best_w = CS[c, C_PBB], CS[c, C_PBX], CS[c, C_PBW]
            dmask = CS[c, C_PDM]
        else:
            best_t = INF
            best_key = _key(9, -1)
            best_cmd = -1
            best_b = -1
            best_x = -1
            best_w = 0                  # the best came from the walk over the banks
            dmask = 0                   # banks whose due refresh drains them
        mem_ok = True
        # the refresh and PIM candidates (kept in the last best when fast)
        for u in range(0 if fast else NU):
            if RF[c, u, F_PEND] == 0:
                continue
            b0 = RU[u, RU_B0]
            span = RU[u, RU_SPAN]
            if _pim_open_in(BK, c, b0, span):
                continue
            closed = True
            for b in range(b0, b0 + span):
                dmask |= 1 << b
                if BK[c, b, B_OPEN] >= 0:
                    closed = False
                    tt = _eb(S, c, PRE, b, nbg0, nbk0)
                    if tt < t0:
                        tt = t0
                    kk = _key(0, b)
                    if tt < best_t or (tt == best_t and kk < best_key):
                        best_t, best_key, best_cmd, best_b, best_x = tt, kk, PRE, b, -1
            if closed:
                if span == 1:
                    tt = _e_scope(S, c, REFPB, b0, -1)
                    rc = REFPB
                else:
                    tt = _e_scope(S, c, REF, u, -1)
                    rc = REF
                if tt < t0:
                    tt = t0
                kk = _key(0, -1)
                if tt < best_t or (tt == best_t and kk < best_key):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, rc, u, -1
        if fast:
            pass
        elif dual:
            if has_pim:
                ok, tt, cmd, op = _pim_candidate(S, c, t0, dual, dmask)
                if ok < 0:
                    return 0, -1, -1, -1, -1
                kk = _key(1, 0)
                if ok == 1 and (tt < best_t or (tt == best_t and kk < best_key)):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, cmd, -1, op
        else:
            if CS[c, C_MODE] == 1:
                mem_ok = False
                if has_pim:
                    ok, tt, cmd, op = _pim_candidate(S, c, t0, dual, dmask)
                    if ok < 0:
                        return 0, -1, -1, -1, -1
                    kk = _key(1, 0)
                    if ok == 1 and (tt < best_t or (tt == best_t and kk < best_key)):
                        best_t, best_key, best_cmd, best_b, best_x = tt, kk, cmd, -1, op
                elif (CS[c, C_SH] != CS[c, C_ST] or CS[c, C_NQ] > 0) and \
                        not _any_pim_open(BK, PA, c):
                    tt = _e_scope(S, c, EXIT, -1, -1)
                    if tt < t0:
                        tt = t0
                    kk = _key(1, 0)
                    if tt < best_t or (tt == best_t and kk < best_key):
                        best_t, best_key, best_cmd, best_b, best_x = tt, kk, EXIT, -1, -1
            elif has_pim:
                mem_ok = False
                closed = True
                for b in range(nb):
                    if BK[c, b, B_OPEN] >= 0:
                        closed = False
                        tt = _eb(S, c, PRE, b, nbg0, nbk0)
                        if tt < t0:
                            tt = t0
                        kk = _key(1, b)
                        if tt < best_t or (tt == best_t and kk < best_key):
                            best_t, best_key, best_cmd, best_b, best_x = tt, kk, PRE, b, -1
                if closed:
                    tt = _e_scope(S, c, ENTER, -1, -1)
                    if tt < t0:
                        tt = t0
                    kk = _key(1, 0)
                    if tt < best_t or (tt == best_t and kk < best_key):
                        best_t, best_key, best_cmd, best_b, best_x = tt, kk, ENTER, -1, -1
        if mem_ok and CS[c, C_NQ] > 0:
            qmask = CS[c, C_QMASK]
            if fast:
                qmask &= CS[c, C_DIRTY]
            for b in range(nb):
                if nb <= 63:
                    # the banks with a queue, lowest first (same order as the full walk)
                    if qmask == 0:
                        break
                    b = ctz(qmask)
                    qmask &= qmask - 1
                if BK[c, b, B_QLEN] == 0 or (dmask >> b) & 1:
                    continue
                cv = BK[c, b, B_CV]
                if cv == 0:
                    _bank_candidate(S, c, b)
                    BK[c, b, B_CV] = 1
                    cv = 1
                cmd = BK[c, b, B_CCMD]
                if cmd < 0:
                    continue
                kk = BK[c, b, B_CKEY]
                x = BK[c, b, B_CX]
                if cv == 2:
                    tt = BK[c, b, B_CT]
                else:
                    tt = NXT[c, nbg0 + BK[c, b, B_BGI], cmd]
                    v = NXT[c, nbk0 + b, cmd]
                    if v > tt:
                        tt = v
                    BK[c, b, B_CT] = tt
                    BK[c, b, B_CV] = 2
                v = _et(S, c, BK[c, b, B_RK], cmd)
                if v > tt:
                    tt = v
                if tt < t0:
                    tt = t0
                if tt < best_t or (tt == best_t and kk < best_key):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, cmd, b, x
                    best_w = 1
        CS[c, C_DIRTY] = 0
        if mem_ok and PA[A_PAGE] == _pol.PAGE_TIMEOUT:
            # an open row with no queued burst closes page_timeout_cycles after its last use
            idle = CS[c, C_OMASK] & ~CS[c, C_QMASK] & ~dmask
            while idle != 0:
                b = ctz(idle)
                idle &= idle - 1
                tt = _eb(S, c, PRE, b, nbg0, nbk0)
                v = idle_close_cycle(PA[A_PAGE], PA[A_TMO], BK[c, b, B_LAST])
                if v > tt:
                    tt = v
                if tt < t0:
                    tt = t0
                kk = _key(4, b)
                if tt < best_t or (tt == best_t and kk < best_key):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, PRE, b, -1
                    best_w = 0
        CS[c, C_PBOK] = 1
        CS[c, C_PBT], CS[c, C_PBK], CS[c, C_PBC] = best_t, best_key, best_cmd
        CS[c, C_PBB], CS[c, C_PBX], CS[c, C_PBW], CS[c, C_PDM] = best_b, best_x, best_w, dmask
        t_ev = INF
        if CS[c, C_SH] != CS[c, C_ST]:
            h = STG[c, CS[c, C_SH] & (cap - 1)]
            if _admissible(S, c, BU[h, U_BANK], BU[h, U_WR]):
                t_ev = BU[h, U_ARR] if BU[h, U_ARR] > t0 else t0
        for u in range(NU):
            if RF[c, u, F_PEND] == 0:
                v = RF[c, u, F_DUE] if RF[c, u, F_DUE] > t0 else t0
                if v < t_ev:
                    t_ev = v
        if t_ev <= best_t and t_ev < INF:
            if t_ev <= limit:
                CS[c, C_TMIN] = t_ev
                continue
            return t_ev, -1, -1, -1, 1
        if best_cmd < 0:
            return 0, -1, -1, -1, 0
        return best_t, best_cmd, best_b, best_x, 2


@njit_inline
def _pim_candidate(S, c, t0, dual, dmask):
    """(status, cycle, cmd, op): status 1 candidate, 0 none (refresh first), -1 error."""
    CS, BK, PO, PQ, GL, PA = S.CS, S.BK, S.PO, S.PQ, S.GL, S.PA
    pcap = PQ.shape[1]
    op = PQ[c, CS[c, C_PH] & (pcap - 1)]
    cmd, r, g, row, col = _pim_sub(PO, PA, op)
    if PO[op, P_ARR] > t0:
        t0 = PO[op, P_ARR]
    if cmd == G_ACT:
        B = PA[A_B]
        base = (r * PA[A_G] + g) * B
        if (dmask >> base) & ((1 << B) - 1):
            return 0, 0, cmd, op         # the due refresh of these banks goes first
        for b in range(base, base + B):
            if BK[c, b, B_PIM] >= 0 or (not dual and BK[c, b, B_OPEN] >= 0):
                GL[G_STATUS] = ST_ERROR
                GL[G_ERRC] = ERR_GACT_OPEN * 1000 + c
                GL[G_ERRX] = op
                return -1, 0, cmd, op
    elif cmd == COMP or cmd == GEMV:
        if not _any_pim_open(BK, PA, c):
            GL[G_STATUS] = ST_ERROR
            GL[G_ERRC] = ERR_NO_PIM_ROW * 1000 + c
            GL[G_ERRX] = op
            return -1, 0, cmd, op
    tt = _e_scope(S, c, cmd, r, g)
    if tt < t0:
        tt = t0
    return 1, tt, cmd, op
