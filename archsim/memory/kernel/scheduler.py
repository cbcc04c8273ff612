"""The scheduling decision of the compiled controller: what one channel issues next.

:func:`_decide` is the policy of :mod:`archsim.memory.controller` (the readable reference) on
flat arrays, step by step with the same event order and tie-breaks: admissions from the input
FIFO into the bank queues, refresh drains per rank, the PIM queue (dual row buffers: PIM first
on the command bus; single: PIM_ENTER / PIM_EXIT mode switches), then the memory requests of
the banks (FR-FCFS over an open page), each bank's candidate cached until its queue, open row
or bank-group timing changes. ``tests/test_system_fastmem.py`` keeps both identical call for
call. All cycles are memory-clock cycles (tCK).
"""
from archsim.memory.kernel.jit import ctz, njit, njit_inline
from archsim.memory.kernel.layout import *  # noqa: F403  (state layout and command codes)
from archsim.memory.kernel.timing import _e_scope, _earliest, _eb, _qi


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


@njit_inline
def _pim_rows_open_rank(BK, PA, c, r):
    n = PA[A_G] * PA[A_B]
    for b in range(r * n, (r + 1) * n):
        if BK[c, b, B_PIM] >= 0:
            return True
    return False


@njit_inline
def _any_pim_open(BK, PA, c):
    nb = PA[A_R] * PA[A_G] * PA[A_B]
    for b in range(nb):
        if BK[c, b, B_PIM] >= 0:
            return True
    return False


# ---- the decision ----------------------------------------------------------------------------
@njit_inline
def _key(k0, k1):
    return k0 * (1 << 50) + (k1 + 1)


@njit_inline
def _admit(S, c, t):
    CS, BK, STG, BU, PA = S.CS, S.BK, S.STG, S.BU, S.PA
    cap = STG.shape[1]
    while CS[c, C_SH] != CS[c, C_ST]:
        bi = STG[c, CS[c, C_SH] % cap]
        bank = BU[bi, U_BANK]
        if BU[bi, U_ARR] > t or BK[c, bank, B_QLEN] >= PA[A_QB] or CS[c, C_NQ] >= PA[A_QC]:
            return
        CS[c, C_SH] += 1
        n = BK[c, bank, B_QLEN]
        # a burst behind others changes the bank's candidate only when it is the first row hit
        if n == 0 or (BK[c, bank, B_CCMD] == PRE and BU[bi, U_ROW] == BK[c, bank, B_OPEN]):
            BK[c, bank, B_CV] = 0
        if n == 0 and bank < 63:
            CS[c, C_QMASK] |= 1 << bank
        BK[c, bank, B_Q0 + n] = bi
        BK[c, bank, B_QLEN] = n + 1
        CS[c, C_NQ] += 1


@njit_inline
def _decide(S, c, limit):
    """Port of ChannelController._decide. Returns (cycle, cmd, b, x, kind) with kind 0 = none
    (nothing can happen), 1 = internal event at cycle, 2 = action (cmd, b, x)."""
    CS, RS, BK, NXT, STG, BU, PA = S.CS, S.RS, S.BK, S.NXT, S.STG, S.BU, S.PA
    R, G, B = PA[A_R], PA[A_G], PA[A_B]
    nbr = G * B
    nb = R * nbr
    dual = PA[A_DUAL] == 1
    cap = STG.shape[1]
    QMAP = (ACT, PRE, RD, WR)
    nbg0 = 1 + R
    nbk0 = 1 + R + R * G
    while True:
        t0 = CS[c, C_TMIN]
        if t0 <= limit:
            if CS[c, C_SH] != CS[c, C_ST]:
                _admit(S, c, t0)
            for r in range(R):
                if RS[c, r, R_PEND] == 0 and RS[c, r, R_DUE] <= t0:
                    RS[c, r, R_PEND] = 1
        # channel- and rank-level earliest cycles of the memory commands, once per decision
        for qi in range(4):
            PA[S_CE + qi] = _earliest(S, c, 0, QMAP[qi])
            for r in range(R):
                PA[S_RE + 4 * r + qi] = _earliest(S, c, 1 + r, QMAP[qi])
        best_t = INF
        best_key = _key(9, -1)
        best_cmd = -1
        best_b = -1
        best_x = -1
        for r in range(R):
            PA[S_DRAIN + r] = 0
        for r in range(R):
            if RS[c, r, R_PEND] == 0 or _pim_rows_open_rank(BK, PA, c, r):
                continue
            PA[S_DRAIN + r] = 1
            closed = True
            for b in range(r * nbr, (r + 1) * nbr):
                if BK[c, b, B_OPEN] >= 0:
                    closed = False
                    tt = _eb(S, c, PRE, 1, b, nbg0, nbk0, G, B)
                    if tt < t0:
                        tt = t0
                    kk = _key(0, b)
                    if tt < best_t or (tt == best_t and kk < best_key):
                        best_t, best_key, best_cmd, best_b, best_x = tt, kk, PRE, b, -1
            if closed:
                tt = _e_scope(S, c, REF, r, -1)
                if tt < t0:
                    tt = t0
                kk = _key(0, -1)
                if tt < best_t or (tt == best_t and kk < best_key):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, REF, r, -1
        mem_ok = True
        has_pim = CS[c, C_PH] != CS[c, C_PT]
        if dual:
            if has_pim:
                ok, tt, cmd, op = _pim_candidate(S, c,
                                                 t0, dual)
                if ok < 0:
                    return 0, -1, -1, -1, -1
                kk = _key(1, 0)
                if ok == 1 and (tt < best_t or (tt == best_t and kk < best_key)):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, cmd, -1, op
        else:
            if CS[c, C_MODE] == 1:
                mem_ok = False
                if has_pim:
                    ok, tt, cmd, op = _pim_candidate(S, c, t0, dual)
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
                        tt = _eb(S, c, PRE, 1, b, nbg0, nbk0, G, B)
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
            for b in range(nb):
                if nb <= 63:
                    # the banks with a queue, lowest first (same order as the full walk)
                    if qmask == 0:
                        break
                    b = ctz(qmask)
                    qmask &= qmask - 1
                n = BK[c, b, B_QLEN]
                if n == 0 or PA[S_DRAIN + b // nbr]:
                    continue
                cv = BK[c, b, B_CV]
                if cv == 0:
                    orow = BK[c, b, B_OPEN]
                    if orow >= 0:
                        hit = -1
                        for j in range(n):
                            xi = BK[c, b, B_Q0 + j]
                            if BU[xi, U_ROW] == orow:
                                hit = xi
                                break
                        if hit >= 0:
                            cmd = WR if BU[hit, U_WR] else RD
                            kk = _key(2, BU[hit, U_SEQ])
                            x = hit
                        else:
                            cmd = PRE
                            x = -1
                            kk = _key(3, BU[BK[c, b, B_Q0], U_SEQ])
                    else:
                        cmd = ACT
                        x = BK[c, b, B_Q0]
                        kk = _key(3, BU[x, U_SEQ])
                    BK[c, b, B_CCMD] = cmd
                    BK[c, b, B_CKEY] = kk
                    BK[c, b, B_CX] = x
                else:
                    cmd = BK[c, b, B_CCMD]
                    kk = BK[c, b, B_CKEY]
                    x = BK[c, b, B_CX]
                if cv == 2:
                    tt = BK[c, b, B_CT]
                else:
                    tt = NXT[c, nbg0 + b // B, cmd]
                    v = NXT[c, nbk0 + b, cmd]
                    if v > tt:
                        tt = v
                    BK[c, b, B_CT] = tt
                    BK[c, b, B_CV] = 2
                qi = _qi(cmd)
                v = PA[S_CE + qi]
                if v > tt:
                    tt = v
                v = PA[S_RE + 4 * (b // nbr) + qi]
                if v > tt:
                    tt = v
                if tt < t0:
                    tt = t0
                if tt < best_t or (tt == best_t and kk < best_key):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, cmd, b, x
        t_ev = INF
        if CS[c, C_SH] != CS[c, C_ST]:
            h = STG[c, CS[c, C_SH] % cap]
            if BK[c, BU[h, U_BANK], B_QLEN] < PA[A_QB] and CS[c, C_NQ] < PA[A_QC]:
                t_ev = BU[h, U_ARR] if BU[h, U_ARR] > t0 else t0
        for r in range(R):
            if RS[c, r, R_PEND] == 0:
                v = RS[c, r, R_DUE] if RS[c, r, R_DUE] > t0 else t0
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
def _pim_candidate(S, c, t0, dual):
    """(status, cycle, cmd, op): status 1 candidate, 0 none (refresh first), -1 error."""
    CS, BK, PO, PQ, GL, PA = S.CS, S.BK, S.PO, S.PQ, S.GL, S.PA
    pcap = PQ.shape[1]
    op = PQ[c, CS[c, C_PH] % pcap]
    cmd, r, g, row, col = _pim_sub(PO, PA, op)
    if PO[op, P_ARR] > t0:
        t0 = PO[op, P_ARR]
    if cmd == G_ACT:
        if PA[S_DRAIN + r]:
            return 0, 0, cmd, op
        B = PA[A_B]
        base = (r * PA[A_G] + g) * B
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
