"""Timing nodes of the compiled controller: the constraint table interpreted on flat arrays.

The same rules as :class:`archsim.memory.bank.TimingNode` (earliest issue cycle of every
command at every node of the hierarchy, the rank-level activation window tFAW with G_ACT
weighing ``banks_per_group``), read from the table that
:func:`archsim.memory.spec.compile_table` evaluates for the configuration
(:class:`archsim.memory.kernel.port.KernelMemory` turns it into ``S.LAT``/``S.LATK``).
Node numbering per channel: 0 the channel, 1..R the ranks, then R·G bank groups, then the
banks. All cycles are memory-clock cycles (tCK).
"""
from archsim.memory.kernel.jit import njit, njit_plain
from archsim.memory.kernel.layout import *  # noqa: F403  (state layout and command codes)


@njit_plain
def _earliest(S, c, node, q):
    """Earliest cycle of command q at node (0 channel, 1..R ranks, then bank groups, banks): its
    ``NXT`` entry, at a rank for an ACT / G_ACT no earlier than its activation window admits
    (``RS[c, r, R_WBA / R_WBG]``, :func:`_window_bound`)."""
    NXT, PA = S.NXT, S.PA
    e = NXT[c, node, q]
    if 1 <= node <= PA[A_R] and PA[A_WN] > 0 and (q == ACT or q == G_ACT):
        v = S.RS[c, node - 1, R_WBA if q == ACT else R_WBG]
        if v > e:
            e = v
    return e


@njit_plain
def _window_bound(S, c, r, w):
    """The earliest cycle at which rank r's activation window (tFAW: at most ``PA[A_WN]``
    activation weights within ``PA[A_WSPAN]`` cycles; an ACT weighs ``PA[A_WACT]``, a G_ACT
    ``PA[A_WGACT]``, JESD235) admits one more activation of weight ``w``; -INF when it admits one
    now. The admitted cycles form the interval from this bound on (the weight still in the
    window only falls with time), so the earliest cycle not before e is ``max(e, bound)``
    (TimingNode's walk over the window started at e gives the same: ``_earliest``). The ring
    holds the window's entries in issue order (cycles, weights)."""
    RS, WT, WW, PA = S.RS, S.WT, S.WW, S.PA
    n_max = PA[A_WN]
    span = PA[A_WSPAN]
    if w > n_max:
        w = n_max
    head = RS[c, r, R_WHEAD]
    ln = RS[c, r, R_WLEN]
    total = 0
    for j in range(ln):
        total += WW[c, r, (head + j) % WCAP]
    e = -INF
    for j in range(ln):
        if total + w <= n_max:
            break
        total -= WW[c, r, (head + j) % WCAP]
        e = WT[c, r, (head + j) % WCAP] + span
    return e


@njit_plain
def _record(S, c, node, level, p, t, k):
    """Note command p at cycle t on one node (rules of ``level``; k for PIM_GEMV).
    LAT[level, p] lists the rules of p at that level: ``[n, q_0, lat_0, ..., q_n-1, lat_n-1]``
    (only the commands q it constrains); LATK[level, p, q] = 1 where the latency is
    ``GEMV_BUSY`` (depends on k; only a PIM_GEMV's rules, ``port._latency_tables``)."""
    RS, NXT, LAT, LATK, WT, WW, PA = S.RS, S.NXT, S.LAT, S.LATK, S.WT, S.WW, S.PA
    R = PA[A_R]
    n = LAT[level, p, 0]
    for j in range(n):
        q = LAT[level, p, 1 + 2 * j]
        lat = LAT[level, p, 2 + 2 * j]
        if p == GEMV and LATK[level, p, q]:
            kk = k if k > PA[A_FILL] else PA[A_FILL]
            v2 = PA[A_CSTEP] * (kk + 1)
            if v2 > lat:
                lat = v2
        v = t + lat
        if v > NXT[c, node, q]:
            NXT[c, node, q] = v
    if 1 <= node <= R and PA[A_WN] > 0 and (p == ACT or p == G_ACT):
        r = node - 1
        span = PA[A_WSPAN]
        w = PA[A_WACT] if p == ACT else PA[A_WGACT]
        if w > PA[A_WN]:
            w = PA[A_WN]
        while RS[c, r, R_WLEN] > 0 and WT[c, r, RS[c, r, R_WHEAD]] + span <= t:
            RS[c, r, R_WHEAD] = (RS[c, r, R_WHEAD] + 1) % WCAP
            RS[c, r, R_WLEN] -= 1
        pos = (RS[c, r, R_WHEAD] + RS[c, r, R_WLEN]) % WCAP
        WT[c, r, pos] = t
        WW[c, r, pos] = w
        RS[c, r, R_WLEN] += 1
        RS[c, r, R_WBA] = _window_bound(S, c, r, PA[A_WACT])
        RS[c, r, R_WBG] = _window_bound(S, c, r, PA[A_WGACT])


@njit
def _et(S, c, r, q):
    """The channel- and rank-level earliest cycle of memory command q (ACT, PRE, RD, WR, RDA,
    WRA: command indices 0..5) at rank r of channel c: the later of its channel node's and its
    rank node's (:func:`_earliest`), from the channel's table ``CS[c, C_ET:]``. An entry is
    computed when a decision first asks for it after a command was recorded on the channel
    (bit ``NMQ·r + q`` of ``CS[c, C_ETOK]``; ``_issue`` clears them all): a decision mostly
    walks one or two queued banks, so most of the table is never read before the next
    command."""
    CS = S.CS
    i = NMQ * r + q
    if (CS[c, C_ETOK] >> i) & 1:
        return CS[c, C_ET + i]
    e = _earliest(S, c, 0, q)
    v = _earliest(S, c, 1 + r, q)
    if v > e:
        e = v
    CS[c, C_ET + i] = e
    CS[c, C_ETOK] |= 1 << i
    return e


@njit
def _eb(S, c, q, b, nbg0, nbk0):
    """Earliest cycle of memory command q at bank b (ChannelController._e_bank: the max over
    its channel, rank, bank-group and bank nodes), the channel and rank parts from the
    channel's table (:func:`_et`)."""
    NXT, BK = S.NXT, S.BK
    e = _et(S, c, BK[c, b, B_RK], q)
    x = NXT[c, nbg0 + BK[c, b, B_BGI], q]
    if x > e:
        e = x
    x = NXT[c, nbk0 + b, q]
    return x if x > e else e


@njit_plain
def _scope(PA, cmd, r, g):
    """(rank lo, rank hi, bg lo, bg hi, bank lo, bank hi) covered by a command (REFpb: ``r``
    is its flat bank index)."""
    R, G, B = PA[A_R], PA[A_G], PA[A_B]
    if cmd == G_ACT:
        return r, r + 1, r * G + g, r * G + g + 1, (r * G + g) * B, (r * G + g + 1) * B
    if cmd == REF:
        return r, r + 1, r * G, (r + 1) * G, r * G * B, (r + 1) * G * B
    if cmd == REFPB:
        rk = r // (G * B)
        return rk, rk + 1, r // B, r // B + 1, r, r + 1
    return 0, R, 0, R * G, 0, R * G * B


@njit_plain
def _e_scope(S, c, q, r, g):
    """Earliest cycle of command q over every node it covers (its scope: a G_ACT the rank and
    bank group ``r``/``g``, a REF the rank ``r``, any other broadcast command the channel)."""
    NXT, PA = S.NXT, S.PA
    R, G = PA[A_R], PA[A_G]
    r0, r1, g0, g1, b0, b1 = _scope(PA, q, r, g)
    e = _earliest(S, c, 0, q)
    for i in range(r0, r1):
        x = _earliest(S, c, 1 + i, q)
        if x > e:
            e = x
    for i in range(g0, g1):
        x = NXT[c, 1 + R + i, q]
        if x > e:
            e = x
    for i in range(b0, b1):
        x = NXT[c, 1 + R + R * G + i, q]
        if x > e:
            e = x
    return e


@njit_plain
def _record_scope(S, c, cmd, t, r, g, row, k):
    """Record command ``cmd`` at cycle ``t`` on every node of its scope and update the PIM row
    state of the banks it covers (G_ACT opens ``row``, PIM_PRE closes)."""
    BK, PA = S.BK, S.PA
    R, G = PA[A_R], PA[A_G]
    r0, r1, g0, g1, b0, b1 = _scope(PA, cmd, r, g)
    _record(S, c, 0, 0, cmd, t, k)
    for i in range(r0, r1):
        _record(S, c, 1 + i, 1, cmd, t, k)
    for i in range(g0, g1):
        _record(S, c, 1 + R + i, 2, cmd, t, k)
    for i in range(b0, b1):
        _record(S, c, 1 + R + R * G + i, 3, cmd, t, k)
        if BK[c, i, B_CV] == 2:
            BK[c, i, B_CV] = 1
        if cmd == G_ACT:
            BK[c, i, B_PIM] = row if row >= 0 else 0
        elif cmd == PIM_PRE:
            BK[c, i, B_PIM] = -1
