"""A JIT-compiled, incremental twin of the exact HBM2 + PIM memory system (a MemoryPort).

:class:`archsim.memory.system.MemorySystem` (owner: the memory model) schedules every DRAM and
PIM command with a pure-Python, event-driven channel controller. Driven by the NPU executor on a
whole GPT-3 layer (millions of bursts, ~10^5 PIM commands) it needs minutes; this module is the
same controller ported line by line to numba so that the system simulator can run whole layers
in seconds. It is a *fast path of the same model*, not a different model:

* the policy is :mod:`archsim.memory.controller`'s, step by step (FR-FCFS with an open page,
  bounded per-bank queues fed by an in-order input FIFO, all-bank refresh drained per rank and
  postponed while a PIM row is open, PIM_HEADER pulling a refresh in, dual / single (blocked)
  row buffers with PIM_ENTER / PIM_EXIT, same tie-breaks);
* the timing rules are read from the same compiled constraint table
  (:func:`archsim.memory.spec.compile_table`) and turned into latency matrices per level; the one
  rule whose latency depends on the command (``GEMV_BUSY``, ``CSTEP × (max(k, FILL) + 1)``) is
  evaluated with :func:`archsim.memory.spec.gemv_cycles`, and the rank-level activation window
  (tFAW, ``G_ACT`` weighing ``banks_per_group``) is interpreted as :class:`TimingNode` does;
* ``tests/test_system_fastmem.py`` drives both implementations with the same random mixes of
  reads, writes and PIM sequences (dual and single mode, refresh on) and requires identical
  command logs, completions and statistics.

Speed (one core, GPT3-7B TP4 clb-0 layer of ``benchmarks/bench_system.py``: 5.0 M commands,
3.9 M DMA requests, 8.4 M scheduling decisions): ≈ 2.3 s in the kernels, ≈ 0.45 µs per issued
command. What it takes: the kernels run without numba's reference counting (``_nrt=False``; the
inlined helpers otherwise paid an atomic incref/decref per array argument, half the time); a
channel's decision is cached until it is due or the channel changes (``C_NEV``..``C_NX``), each
bank's FR-FCFS candidate until its queue, open row or bank-group timing changes (``B_CV``..),
only banks with a queue are walked (``C_QMASK``) and ``_record`` walks only the rules a command
has at a level. Loading the cached machine code costs ≈ 0.25 s once per process.

Restrictions: one activation window, at rank level (the HBM2 table has exactly tFAW); every
other table shape raises :class:`FastMemoryUnsupported` at construction and the caller uses the
exact :class:`MemorySystem` instead. All cycles are memory-clock cycles (tCK), as in
:mod:`archsim.memport`. The module does no I/O and prints nothing.
"""
from __future__ import annotations

import numpy as np

from archsim.errors import SimulationError
from archsim.memory.addrmap import AddressMapping
from archsim.memory.cmdlog import CommandRecord
from archsim.memory.spec import CMD_INDEX, COMMANDS, LEVELS, compile_table, gemv_cycles
from archsim.memory.system import summarize
from archsim.memport import Completion, MemRequest, PimRequest

try:  # pragma: no cover - exercised implicitly
    import numba

    # no reference counting (_nrt=False): the kernels never allocate, and with it the inlined
    # helpers paid an atomic incref/decref per array argument per call (measured: half of the
    # kernel's time on the GPT3-7B layer)
    _njit = numba.njit(cache=True, nogil=True, _nrt=False)
    _njit_inline = numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
    from llvmlite import ir as _llir
    from numba.core import cgutils as _cgutils, types as _nbtypes
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _ctz(typingctx, x):
        """Index of the lowest set bit of int64 ``x`` (x != 0): LLVM's cttz."""
        def codegen(context, builder, signature, args):
            i64 = _llir.IntType(64)
            fn = _cgutils.get_or_insert_function(
                builder.module, _llir.FunctionType(i64, [i64, _llir.IntType(1)]),
                "llvm.cttz.i64")
            return builder.call(fn, [args[0], _llir.Constant(_llir.IntType(1), 1)])
        return _nbtypes.int64(_nbtypes.int64), codegen
    HAVE_NUMBA = True
except Exception:  # pragma: no cover - numba absent: plain Python (same results, slow)
    def _njit(f):
        return f
    _njit_inline = _njit

    def _ctz(x):
        """Index of the lowest set bit of ``x`` (x != 0)."""
        return (x & -x).bit_length() - 1
    HAVE_NUMBA = False

INF = 1 << 62
NCMD = len(COMMANDS)
ACT, PRE, RD, WR, REF = (CMD_INDEX[c] for c in ("ACT", "PRE", "RD", "WR", "REF"))
HEADER, GWRITE, G_ACT, COMP, READRES, GEMV, PIM_PRE, ENTER, EXIT = (
    CMD_INDEX[c] for c in ("PIM_HEADER", "GWRITE", "G_ACT", "COMP", "READRES", "PIM_GEMV",
                           "PIM_PRE", "PIM_ENTER", "PIM_EXIT"))
_KIND_CMD = {"G_ACT": G_ACT, "COMP": COMP, "PIM_GEMV": GEMV, "PIM_HEADER": HEADER,
             "READRES": READRES, "GWRITE": GWRITE, "PIM_PRECHARGE": PIM_PRE, "PIM_PRE": PIM_PRE}


class FastMemoryUnsupported(Exception):
    """The configuration's constraint table has a shape the fast path does not interpret."""


# ---- layout of the state arrays ----------------------------------------------------------
# per-channel scalars CS[c, :]
C_NOW, C_TMIN, C_NQ, C_SH, C_ST, C_PH, C_PT, C_MODE, C_FIRST, C_LAST, C_OPEN, C_OSINCE, \
    C_ACTIVE, C_PACT, C_PPRE, C_CSTEPS, C_BR, C_BW, C_PBUSY, C_PBEND, C_PCOMP, C_PCEND, \
    C_NCMDS, C_NEV, C_NEVOK, C_NKIND, C_NCMD, C_NB, C_NX, C_QMASK = range(30)
NCS = 30
# C_NEV/C_NEVOK: the channel's cached decision (valid while C_NEVOK = 1): its cycle, and with
# C_NKIND = 2 the action itself (C_NCMD, C_NB, C_NX), reused by _advance_all instead of
# deciding again when that cycle is reached (nothing of the channel changed meanwhile).
# C_QMASK: bit b set when bank b's queue is not empty (channels of at most 63 banks; _decide
# walks only those banks)
# per-rank RS[c, r, :]
R_DUE, R_PEND, R_WHEAD, R_WLEN = range(4)
# per-bank BK[c, b, :] then the queue from column B_Q0. B_CV..B_CT: the bank's cached
# memory-command candidate of _decide: B_CV 0 = stale, 1 = command (B_CCMD, key B_CKEY, burst
# B_CX) valid but not its bank-group/bank part of the earliest cycle, 2 = that part (B_CT) too
B_OPEN, B_PIM, B_QLEN, B_CV, B_CCMD, B_CKEY, B_CX, B_CT, B_Q0 = range(9)
# bursts BU[i, :]
U_SEQ, U_REQ, U_BANK, U_ROW, U_COL, U_WR, U_ARR = range(7)
# requests RQ[i, :]
Q_RID, Q_ARR, Q_REM, Q_DONE, Q_WR = range(5)
# PIM ops PO[i, :]
P_RID, P_KIND, P_ARR, P_EST, P_MASK, P_ROW, P_N, P_CUR, P_NSUB = range(9)
# globals GL[:]
G_HEAP, G_SEQ, G_NLOG, G_STATUS, G_ERRC, G_ERRX, G_NOUT, G_LOGON = range(8)
# parameters PA[:]
(A_R, A_G, A_B, A_QB, A_QC, A_CL, A_CWL, A_BL, A_TRCD, A_TRP, A_CSTEP, A_RDRES, A_GWR,
 A_TRFC, A_TREFI, A_FILL, A_DUAL, A_WN, A_WSPAN, A_WACT, A_WGACT, A_BB, A_DEFK) = range(23)
NPA = 23
S_DRAIN, S_CE, S_RE = NPA, NPA + 16, NPA + 20   # scratch of _decide at the end of PA
NPA_SCRATCH = NPA + 20 + 4 * 16
WCAP = 16           # activation-window history per rank (entries within tFAW <= N)

ST_OK, ST_LOG_FULL, ST_OUT_FULL, ST_ERROR = 0, 1, 2, 3
ERR_GACT_OPEN, ERR_NO_PIM_ROW = 1, 2


# ---- timing nodes ---------------------------------------------------------------------------
@_njit_inline
def _earliest(NXT, WT, WW, RS, PA, c, node, q, R):
    """Earliest cycle of command q at node (0 channel, 1..R ranks, then bank groups, banks)."""
    e = NXT[c, node, q]
    if 1 <= node <= R and PA[A_WN] > 0 and (q == ACT or q == G_ACT):
        r = node - 1
        n_max = PA[A_WN]
        span = PA[A_WSPAN]
        w = PA[A_WACT] if q == ACT else PA[A_WGACT]
        if w > n_max:
            w = n_max
        head = RS[c, r, R_WHEAD]
        ln = RS[c, r, R_WLEN]
        total = 0
        for j in range(ln):
            total += WW[c, r, (head + j) % WCAP]
        for j in range(ln):
            ti = WT[c, r, (head + j) % WCAP]
            wi = WW[c, r, (head + j) % WCAP]
            if ti + span <= e:
                total -= wi
                continue
            if total + w <= n_max:
                break
            total -= wi
            e = ti + span
    return e


@_njit_inline
def _record(NXT, LAT, LATK, WT, WW, RS, PA, c, node, level, p, t, k, R):
    """Note command p at cycle t on one node (rules of ``level``; k for PIM_GEMV).
    LAT[level, p] lists the rules of p at that level: ``[n, q_0, lat_0, ..., q_n-1, lat_n-1]``
    (only the commands q it constrains); LATK[level, p, q] = 1 where the latency is
    ``GEMV_BUSY`` (depends on k)."""
    n = LAT[level, p, 0]
    for j in range(n):
        q = LAT[level, p, 1 + 2 * j]
        lat = LAT[level, p, 2 + 2 * j]
        if LATK[level, p, q]:
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


@_njit_inline
def _qi(cmd):
    """Index of a memory command in the per-decision tables (ACT, PRE, RD, WR)."""
    if cmd == ACT:
        return 0
    if cmd == PRE:
        return 1
    if cmd == RD:
        return 2
    return 3


@_njit_inline
def _eb(NXT, PA, c, q, qi, b, nbg0, nbk0, G, B):
    """Earliest cycle of memory command q at bank b (ChannelController._e_bank: the max over
    its channel, rank, bank-group and bank nodes), the channel and rank parts precomputed for
    this decision in PA's scratch."""
    r = b // (G * B)
    e = PA[S_CE + qi]
    x = PA[S_RE + 4 * r + qi]
    if x > e:
        e = x
    x = NXT[c, nbg0 + b // B, q]
    if x > e:
        e = x
    x = NXT[c, nbk0 + b, q]
    return x if x > e else e


@_njit_inline
def _scope(PA, cmd, r, g):
    """(rank lo, rank hi, bg lo, bg hi, bank lo, bank hi) covered by a command."""
    R, G, B = PA[A_R], PA[A_G], PA[A_B]
    if cmd == G_ACT:
        return r, r + 1, r * G + g, r * G + g + 1, (r * G + g) * B, (r * G + g + 1) * B
    if cmd == REF:
        return r, r + 1, r * G, (r + 1) * G, r * G * B, (r + 1) * G * B
    return 0, R, 0, R * G, 0, R * G * B


@_njit
def _e_scope(NXT, WT, WW, RS, PA, c, q, r, g):
    R, G = PA[A_R], PA[A_G]
    r0, r1, g0, g1, b0, b1 = _scope(PA, q, r, g)
    e = _earliest(NXT, WT, WW, RS, PA, c, 0, q, R)
    for i in range(r0, r1):
        x = _earliest(NXT, WT, WW, RS, PA, c, 1 + i, q, R)
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


@_njit
def _record_scope(NXT, LAT, LATK, WT, WW, RS, BK, PA, c, cmd, t, r, g, row, k):
    R, G = PA[A_R], PA[A_G]
    r0, r1, g0, g1, b0, b1 = _scope(PA, cmd, r, g)
    _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 0, 0, cmd, t, k, R)
    for i in range(r0, r1):
        _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 1 + i, 1, cmd, t, k, R)
    for i in range(g0, g1):
        _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 1 + R + i, 2, cmd, t, k, R)
    for i in range(b0, b1):
        _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 1 + R + R * G + i, 3, cmd, t, k, R)
        if BK[c, i, B_CV] == 2:
            BK[c, i, B_CV] = 1
        if cmd == G_ACT:
            BK[c, i, B_PIM] = row if row >= 0 else 0
        elif cmd == PIM_PRE:
            BK[c, i, B_PIM] = -1


# ---- PIM sub-commands ------------------------------------------------------------------------
@_njit
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


@_njit_inline
def _pim_rows_open_rank(BK, PA, c, r):
    n = PA[A_G] * PA[A_B]
    for b in range(r * n, (r + 1) * n):
        if BK[c, b, B_PIM] >= 0:
            return True
    return False


@_njit_inline
def _any_pim_open(BK, PA, c):
    nb = PA[A_R] * PA[A_G] * PA[A_B]
    for b in range(nb):
        if BK[c, b, B_PIM] >= 0:
            return True
    return False


# ---- the decision ----------------------------------------------------------------------------
@_njit_inline
def _key(k0, k1):
    return k0 * (1 << 50) + (k1 + 1)


@_njit_inline
def _admit(CS, BK, STG, BU, PA, c, t):
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


@_njit_inline
def _decide(CS, RS, BK, NXT, WT, WW, STG, BU, PO, PQ, GL, PA, c, limit):
    """Port of ChannelController._decide. Returns (cycle, cmd, b, x, kind) with kind 0 = none
    (nothing can happen), 1 = internal event at cycle, 2 = action (cmd, b, x)."""
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
                _admit(CS, BK, STG, BU, PA, c, t0)
            for r in range(R):
                if RS[c, r, R_PEND] == 0 and RS[c, r, R_DUE] <= t0:
                    RS[c, r, R_PEND] = 1
        # channel- and rank-level earliest cycles of the memory commands, once per decision
        for qi in range(4):
            PA[S_CE + qi] = _earliest(NXT, WT, WW, RS, PA, c, 0, QMAP[qi], R)
            for r in range(R):
                PA[S_RE + 4 * r + qi] = _earliest(NXT, WT, WW, RS, PA, c, 1 + r, QMAP[qi], R)
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
                    tt = _eb(NXT, PA, c, PRE, 1, b, nbg0, nbk0, G, B)
                    if tt < t0:
                        tt = t0
                    kk = _key(0, b)
                    if tt < best_t or (tt == best_t and kk < best_key):
                        best_t, best_key, best_cmd, best_b, best_x = tt, kk, PRE, b, -1
            if closed:
                tt = _e_scope(NXT, WT, WW, RS, PA, c, REF, r, -1)
                if tt < t0:
                    tt = t0
                kk = _key(0, -1)
                if tt < best_t or (tt == best_t and kk < best_key):
                    best_t, best_key, best_cmd, best_b, best_x = tt, kk, REF, r, -1
        mem_ok = True
        has_pim = CS[c, C_PH] != CS[c, C_PT]
        if dual:
            if has_pim:
                ok, tt, cmd, op = _pim_candidate(CS, BK, NXT, WT, WW, RS, PO, PQ, GL, PA, c,
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
                    ok, tt, cmd, op = _pim_candidate(CS, BK, NXT, WT, WW, RS, PO, PQ, GL, PA,
                                                     c, t0, dual)
                    if ok < 0:
                        return 0, -1, -1, -1, -1
                    kk = _key(1, 0)
                    if ok == 1 and (tt < best_t or (tt == best_t and kk < best_key)):
                        best_t, best_key, best_cmd, best_b, best_x = tt, kk, cmd, -1, op
                elif (CS[c, C_SH] != CS[c, C_ST] or CS[c, C_NQ] > 0) and \
                        not _any_pim_open(BK, PA, c):
                    tt = _e_scope(NXT, WT, WW, RS, PA, c, EXIT, -1, -1)
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
                        tt = _eb(NXT, PA, c, PRE, 1, b, nbg0, nbk0, G, B)
                        if tt < t0:
                            tt = t0
                        kk = _key(1, b)
                        if tt < best_t or (tt == best_t and kk < best_key):
                            best_t, best_key, best_cmd, best_b, best_x = tt, kk, PRE, b, -1
                if closed:
                    tt = _e_scope(NXT, WT, WW, RS, PA, c, ENTER, -1, -1)
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
                    b = _ctz(qmask)
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


@_njit_inline
def _pim_candidate(CS, BK, NXT, WT, WW, RS, PO, PQ, GL, PA, c, t0, dual):
    """(status, cycle, cmd, op): status 1 candidate, 0 none (refresh first), -1 error."""
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
    tt = _e_scope(NXT, WT, WW, RS, PA, c, cmd, r, g)
    if tt < t0:
        tt = t0
    return 1, tt, cmd, op


# ---- issuing ---------------------------------------------------------------------------------
@_njit_inline
def _heap_push(HP, GL, t, rid, lat, is_pim):
    i = GL[G_HEAP]
    HP[i, 0] = t
    HP[i, 1] = rid
    HP[i, 2] = lat
    HP[i, 3] = is_pim
    GL[G_HEAP] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if HP[p, 0] < HP[i, 0] or (HP[p, 0] == HP[i, 0] and HP[p, 1] <= HP[i, 1]):
            break
        for j in range(4):
            tmp = HP[p, j]
            HP[p, j] = HP[i, j]
            HP[i, j] = tmp
        i = p


@_njit_inline
def _heap_pop(HP, GL):
    n = GL[G_HEAP] - 1
    t, rid, lat, kind = HP[0, 0], HP[0, 1], HP[0, 2], HP[0, 3]
    for j in range(4):
        HP[0, j] = HP[n, j]
    GL[G_HEAP] = n
    i = 0
    while True:
        l = 2 * i + 1
        if l >= n:
            break
        m = l
        rr = l + 1
        if rr < n and (HP[rr, 0] < HP[l, 0] or (HP[rr, 0] == HP[l, 0] and HP[rr, 1] < HP[l, 1])):
            m = rr
        if HP[i, 0] < HP[m, 0] or (HP[i, 0] == HP[m, 0] and HP[i, 1] <= HP[m, 1]):
            break
        for j in range(4):
            tmp = HP[m, j]
            HP[m, j] = HP[i, j]
            HP[i, j] = tmp
        i = m
    return t, rid, lat, kind


@_njit_inline
def _note_open(CS, c, t, delta):
    if CS[c, C_OPEN] == 0 and delta > 0:
        CS[c, C_OSINCE] = t
    CS[c, C_OPEN] += delta
    if CS[c, C_OPEN] == 0 and delta < 0:
        CS[c, C_ACTIVE] += t - CS[c, C_OSINCE]


@_njit_inline
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


@_njit_inline
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


@_njit_inline
def _issue(CS, RS, BK, NXT, LAT, LATK, WT, WW, BU, BFREE, RQ, RQFREE, PO, PQ, POFREE, HP, GL,
           LOG, CNT, LD, PA, c, t, cmd, b, x):
    R, G, B = PA[A_R], PA[A_G], PA[A_B]
    CNT[c, cmd] += 1
    CS[c, C_NCMDS] += 1
    CS[c, C_TMIN] = t + 1
    if b >= 0 and (cmd == ACT or cmd == PRE or cmd == RD or cmd == WR):
        r = b // (G * B)
        g = (b // B) % G
        ba = b % B
        _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 0, 0, cmd, t, 0, R)
        _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 1 + r, 1, cmd, t, 0, R)
        _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 1 + R + b // B, 2, cmd, t, 0, R)
        _record(NXT, LAT, LATK, WT, WW, RS, PA, c, 1 + R + R * G + b, 3, cmd, t, 0, R)
        g0 = (b // B) * B
        for bb in range(g0, g0 + B):
            if BK[c, bb, B_CV] == 2:
                BK[c, bb, B_CV] = 1
        BK[c, b, B_CV] = 0
        if cmd == ACT:
            row = BU[x, U_ROW]
            _note_open(CS, c, t, 1)
            BK[c, b, B_OPEN] = row
            _log(LOG, GL, t, c, r, g, ba, ACT, row, -1)
        elif cmd == PRE:
            row = BK[c, b, B_OPEN]
            BK[c, b, B_OPEN] = -1
            _note_open(CS, c, t, -1)
            _log(LOG, GL, t, c, r, g, ba, PRE, row, -1)
        else:
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
            LD[c, LD.shape[1] - 1] -= 1
            if cmd == RD:
                done = t + PA[A_CL] + PA[A_BL]
                CS[c, C_BR] += PA[A_BB]
            else:
                done = t + PA[A_CWL] + PA[A_BL]
                CS[c, C_BW] += PA[A_BB]
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
                _heap_push(HP, GL, RQ[q, Q_DONE], RQ[q, Q_RID], RQ[q, Q_DONE] - RQ[q, Q_ARR], 0)
                RQFREE[0] += 1
                RQFREE[RQFREE[0]] = q
        return
    if cmd == REF:
        r = b
        _record_scope(NXT, LAT, LATK, WT, WW, RS, BK, PA, c, cmd, t, r, -1, -1, 0)
        _log(LOG, GL, t, c, r, -1, -1, REF, -1, -1)
        RS[c, r, R_PEND] = 0
        RS[c, r, R_DUE] += PA[A_TREFI]
        return
    if cmd == ENTER or cmd == EXIT:
        _record_scope(NXT, LAT, LATK, WT, WW, RS, BK, PA, c, cmd, t, -1, -1, -1, 0)
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
    _record_scope(NXT, LAT, LATK, WT, WW, RS, BK, PA, c, cc, t, r, g, row, k)
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
        for rr in range(R):
            if RS[c, rr, R_PEND] == 0 and t + est > RS[c, rr, R_DUE] and \
                    est <= PA[A_TREFI] - PA[A_TRFC]:
                RS[c, rr, R_DUE] = t + 1
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
        _heap_push(HP, GL, t + end, PO[op, P_RID], t + end - PO[op, P_ARR], 1)
        if t + end > CS[c, C_LAST]:
            CS[c, C_LAST] = t + end
        POFREE[0] += 1
        POFREE[POFREE[0]] = op


# ---- driving ---------------------------------------------------------------------------------
@_njit_inline
def _has_work(CS, c):
    return CS[c, C_SH] != CS[c, C_ST] or CS[c, C_NQ] > 0 or CS[c, C_PH] != CS[c, C_PT]


@_njit
def _advance_all(CS, RS, BK, NXT, LAT, LATK, WT, WW, STG, BU, BFREE, RQ, RQFREE, PO, PQ, POFREE,
                 HP, GL, LOG, CNT, LD, PA, OUT, RREM, t):
    """Advance every channel to cycle t (ChannelController.advance_to), then pop completions
    <= t into OUT (cycle, req_id, latency, is_pim, transfer done). Stops early with a status
    when the log is full. RREM: remaining requests per DMA transfer (request id >> 32), for
    the executor's DMA bookkeeping (column 4 = 1 when a completion finishes its transfer)."""
    C = CS.shape[0]
    logcap = LOG.shape[0]
    for c in range(C):
        if t <= CS[c, C_NOW]:
            continue
        if CS[c, C_NEVOK] == 1 and CS[c, C_NEV] > t:
            # nothing can happen on this channel up to t (cached decision still valid)
            CS[c, C_NOW] = t
            if CS[c, C_TMIN] <= t:
                CS[c, C_TMIN] = t + 1
            continue
        # a cached action due by t is what _decide would return again: the channel's state
        # is unchanged since, and admissions / refresh flags at its t_min change nothing
        # before that cycle (the action was chosen over them)
        cached = CS[c, C_NEVOK] == 1 and CS[c, C_NKIND] == 2
        while True:
            if GL[G_LOGON] == 1 and GL[G_NLOG] + 4 >= logcap:
                GL[G_STATUS] = ST_LOG_FULL
                return
            if cached:
                cached = False
                CS[c, C_NEVOK] = 0
                tt, cmd, b, x, kind = CS[c, C_NEV], CS[c, C_NCMD], CS[c, C_NB], CS[c, C_NX], 2
            else:
                tt, cmd, b, x, kind = _decide(CS, RS, BK, NXT, WT, WW, STG, BU, PO, PQ, GL,
                                              PA, c, t)
            if GL[G_STATUS] == ST_ERROR:
                return
            if kind == 0 or tt > t:
                CS[c, C_NEV] = INF if kind == 0 else tt
                CS[c, C_NEVOK] = 1
                CS[c, C_NKIND] = kind
                CS[c, C_NCMD] = cmd
                CS[c, C_NB] = b
                CS[c, C_NX] = x
                break
            if kind == 1:
                continue
            _issue(CS, RS, BK, NXT, LAT, LATK, WT, WW, BU, BFREE, RQ, RQFREE, PO, PQ, POFREE, HP,
                   GL, LOG, CNT, LD, PA, c, tt, cmd, b, x)
        CS[c, C_NOW] = t
        if CS[c, C_TMIN] <= t:
            CS[c, C_TMIN] = t + 1
    n = 0
    cap = OUT.shape[0]
    while GL[G_HEAP] > 0 and HP[0, 0] <= t:
        if n >= cap:
            GL[G_STATUS] = ST_OUT_FULL
            break
        tc, rid, lat, kind = _heap_pop(HP, GL)
        OUT[n, 0] = tc
        OUT[n, 1] = rid
        OUT[n, 2] = lat
        OUT[n, 3] = kind
        OUT[n, 4] = 0
        if kind == 0:
            r = rid >> 32
            if 0 < r < RREM.shape[0]:
                RREM[r] -= 1
                if RREM[r] == 0:
                    OUT[n, 4] = 1
        n += 1
    GL[G_NOUT] = n


@_njit
def _next_event(CS, RS, BK, NXT, WT, WW, STG, BU, PO, PQ, GL, PA):
    """Earliest cycle at which any channel may issue or any request completes; -1 when idle."""
    best = INF
    C = CS.shape[0]
    for c in range(C):
        if _has_work(CS, c):
            if CS[c, C_NEVOK] == 1:
                tt = CS[c, C_NEV]
                kind = 0 if tt >= INF else 2
            else:
                tt, cmd, b, x, kind = _decide(CS, RS, BK, NXT, WT, WW, STG, BU, PO, PQ, GL, PA,
                                              c, CS[c, C_NOW])
                if GL[G_STATUS] == ST_ERROR:
                    return -1
                CS[c, C_NEV] = INF if kind == 0 else tt
                CS[c, C_NEVOK] = 1
                CS[c, C_NKIND] = kind
                CS[c, C_NCMD] = cmd
                CS[c, C_NB] = b
                CS[c, C_NX] = x
            if kind != 0:
                v = tt if tt > CS[c, C_NOW] + 1 else CS[c, C_NOW] + 1
                if v < best:
                    best = v
    return best


class FastMemorySystem:
    """HBM2 (+ PIM) memory of one device: the exact controller's policy, JIT-compiled.

    Implements :class:`archsim.memport.MemoryPort` (``submit``, ``submit_pim``, ``can_accept``,
    ``next_event_cycle``, ``advance_to``) plus :meth:`command_log`, :meth:`stats` and
    :meth:`pim_busy_cycles`, like :class:`archsim.memory.system.MemorySystem`.

    Args:
        cfg: :class:`archsim.config.MachineConfig` (``memory`` and ``pim`` sections).
        keep_log: record the command log (needed by :meth:`command_log` and the timing checker;
            costs 64 B per command).

    Raises:
        FastMemoryUnsupported: the constraint table has windows other than one rank-level
            activation window, or a command-dependent latency other than ``GEMV_BUSY``.
    """

    submit_many_sizes = True
    """:meth:`submit_many` takes one size per request too (the executor's unaligned transfers
    then go in one call)."""

    def __init__(self, cfg, keep_log: bool = True) -> None:
        self.cfg = cfg
        org, t = cfg.memory.org, cfg.memory.timing
        self.map = AddressMapping(cfg.memory)
        table = compile_table(cfg)
        R, G, B = org.ranks, org.bank_groups, org.banks_per_group
        C = org.channels
        nb = R * G * B
        self.R, self.G, self.B, self.C, self.nb = R, G, B, C, nb
        lat = np.full((4, NCMD, NCMD), -1, np.int64)
        latk = np.zeros((4, NCMD, NCMD), np.int64)
        for li, lv in enumerate(LEVELS):
            for p in range(NCMD):
                for q, v in table.updates[lv][p]:
                    if isinstance(v, int):
                        lat[li, p, q] = max(lat[li, p, q], v)
                    else:
                        for kk in (1, 3, 6, 8, 31, 64):
                            if v(kk) != gemv_cycles(kk, cfg):
                                raise FastMemoryUnsupported(
                                    f"latency rule {COMMANDS[p]}->{COMMANDS[q]} at {lv} depends "
                                    "on k in a way the fast path does not model")
                        latk[li, p, q] = 1
        wins = [(lv, w) for lv in LEVELS for w in table.windows[lv]]
        wn = wspan = wact = wgact = 0
        if wins:
            if len(wins) != 1 or wins[0][0] != "rank":
                raise FastMemoryUnsupported(f"activation windows {[(lv, w[0]) for lv, w in wins]}"
                                            ": the fast path supports one rank-level window")
            _, (_, cmds, n_max, span, weights) = wins[0]
            if set(cmds) - {ACT, G_ACT}:
                raise FastMemoryUnsupported("the activation window counts commands other than "
                                            "ACT and G_ACT")
            wn, wspan = int(n_max), int(span)
            wact, wgact = int(weights.get(ACT, 0)), int(weights.get(G_ACT, 0))
            if wact == 0 or wgact == 0 or wn > WCAP:
                raise FastMemoryUnsupported("activation window shape not supported")
        n = table.names
        if R > 16:
            raise FastMemoryUnsupported(f"{R} ranks per channel: the fast path handles <= 16")
        pa = np.zeros(NPA_SCRATCH, np.int64)
        pa[[A_R, A_G, A_B]] = R, G, B
        pa[A_QB] = cfg.memory.controller.queue_size_per_bank
        pa[A_QC] = cfg.memory.controller.command_queue_size
        pa[A_CL], pa[A_CWL], pa[A_BL] = n["CL"], n["CWL"], n["BL"]
        pa[A_TRCD], pa[A_TRP], pa[A_CSTEP] = n["tRCDRD"], n["tRP"], n["CSTEP"]
        pa[A_RDRES], pa[A_GWR], pa[A_TRFC] = n["READRES"], n["GWRITE"], n["tRFC"]
        pa[A_TREFI], pa[A_FILL] = t.tREFI, n["FILL"]
        pa[A_DUAL] = 1 if table.mode == "dual" else 0
        pa[A_WN], pa[A_WSPAN], pa[A_WACT], pa[A_WGACT] = wn, wspan, wact, wgact
        pa[A_BB] = org.burst_bytes
        pa[A_DEFK] = org.columns // org.burst_length
        # sparse rule lists for _record: [n, q_0, lat_0, ...] per (level, p)
        lat_sp = np.zeros((4, NCMD, 1 + 2 * NCMD), np.int64)
        for li in range(4):
            for p in range(NCMD):
                qs = [q for q in range(NCMD) if lat[li, p, q] >= 0 or latk[li, p, q]]
                lat_sp[li, p, 0] = len(qs)
                for j, q in enumerate(qs):
                    lat_sp[li, p, 1 + 2 * j] = q
                    lat_sp[li, p, 2 + 2 * j] = lat[li, p, q]
        self.PA, self.LAT, self.LATK = pa, lat_sp, latk
        self.CS = np.zeros((C, NCS), np.int64)
        self.CS[:, C_NOW] = -1
        self.CS[:, C_FIRST] = INF
        self.RS = np.zeros((C, R, 4), np.int64)
        self.RS[:, :, R_DUE] = t.tREFI if cfg.memory.refresh.enabled else INF
        qb = int(pa[A_QB])
        self.BK = np.zeros((C, nb, B_Q0 + qb), np.int64)
        self.BK[:, :, B_OPEN] = -1
        self.BK[:, :, B_PIM] = -1
        self.NXT = np.zeros((C, 1 + R + R * G + nb, NCMD), np.int64)
        self.WT = np.zeros((C, R, WCAP), np.int64)
        self.WW = np.zeros((C, R, WCAP), np.int64)
        self.STG = np.zeros((C, 1024), np.int64)
        self.BU = np.zeros((1, 7), np.int64)
        self.BFREE = np.zeros(1, np.int64)
        self.RQ = np.zeros((1, 5), np.int64)
        self.RQFREE = np.zeros(1, np.int64)
        self.PO = np.zeros((1, 9), np.int64)
        self.POFREE = np.zeros(1, np.int64)
        self.PQ = np.zeros((C, 256), np.int64)
        self.HP = np.zeros((1024, 4), np.int64)
        self.GL = np.zeros(8, np.int64)
        self.GL[G_LOGON] = 1 if keep_log else 0
        self.LOG = np.zeros((1 << 16 if keep_log else 1, 8), np.int64)
        self.CNT = np.zeros((C, NCMD), np.int64)
        self.LD = np.zeros((C, nb + 1), np.int64)   # bursts per bank (queued or in the FIFO)
        self.OUT = np.zeros((4096, 5), np.int64)
        self.RREM = np.zeros(1, np.int64)         # DMA transfer bookkeeping (dma_* methods)
        self.last_flags: list[int] = []
        self._buffered: tuple[int, list, list] | None = None
        self._grow_bursts(4096)
        self._grow_reqs(4096)
        self._grow_pim(1024)
        self._req_buf: list[tuple] = []
        self._burst_buf: list[tuple] = []
        self._live_rids: set[int] = set()
        self._trusted = False           # expect_unique_ids: no duplicate-id bookkeeping
        self._pim_rids: set[int] = set()
        self._dma_slack = 0
        self.ARENA = np.zeros(1 << 16, np.int64)
        self.SIZES = np.zeros(1 << 16, np.int64)
        self._arena_n = 0
        self.RISS = np.zeros(1, np.int64)
        self.RN = np.zeros(1, np.int64)
        self.RO = np.zeros((1, 2), np.int64)
        self.RELIG = np.zeros(1, np.int64)
        self.LATBUF = np.zeros(1 << 16, np.int64)
        self._no_pim = (np.zeros((1, NSS), np.int64), np.zeros(0, np.int64),
                        np.zeros((1, NPT), np.int64), np.zeros((1, NPEV), np.int64))
        self._pim_lat: list[int] = []
        self._mem_lat: list[np.ndarray] = []
        s, m = self.map.shifts, self.map.masks
        self._dec = (s["ch"], m["ch"], s["ra"], m["ra"], s["bg"], m["bg"], s["ba"], m["ba"],
                     s["ro"], m["ro"], s["co"], m["co"])
        self._cap = self.map.capacity_bytes
        self._DEC = np.array([[s[f], m[f]] for f in ("ch", "ra", "bg", "ba", "ro", "co")],
                             dtype=np.int64)
        self._bb = org.burst_bytes
        self._GB = G * B
        self._last = (-1, None)
        self._qb, self._qc = int(pa[A_QB]), int(pa[A_QC])

    # ---------------------------------------------------------------- capacity management
    @staticmethod
    def _grow_pool(data: np.ndarray, free: np.ndarray, new_n: int):
        """Pool of slots 1..n (row 0 unused) with a free stack (``free[0]`` = entries)."""
        old_n = data.shape[0] - 1
        d = np.zeros((new_n + 1, data.shape[1]), np.int64)
        d[:old_n + 1] = data
        f = np.zeros(new_n + 1, np.int64)
        top = int(free[0])
        f[1:top + 1] = free[1:top + 1]
        extra = np.arange(new_n, old_n, -1, dtype=np.int64)
        f[top + 1:top + 1 + extra.size] = extra
        f[0] = top + extra.size
        return d, f

    def _grow_bursts(self, n: int) -> None:
        self.BU, self.BFREE = self._grow_pool(self.BU, self.BFREE, max(n, 2 * self.BU.shape[0]))

    def _grow_reqs(self, n: int) -> None:
        self.RQ, self.RQFREE = self._grow_pool(self.RQ, self.RQFREE,
                                               max(n, 2 * self.RQ.shape[0]))

    def _grow_pim(self, n: int) -> None:
        self.PO, self.POFREE = self._grow_pool(self.PO, self.POFREE,
                                               max(n, 2 * self.PO.shape[0]))

    # ---------------------------------------------------------------- address decoding
    def _decode(self, addr: int):
        if addr < 0 or addr >= self._cap:
            self.map._check(addr)
        sc, mc, sr, mr, sg, mg, sb, mb, so, mo, sl, ml = self._dec
        return ((addr >> sc) & mc, (addr >> sr) & mr, (addr >> sg) & mg, (addr >> sb) & mb,
                (addr >> so) & mo, (addr >> sl) & ml)

    # ---------------------------------------------------------------- MemoryPort
    def submit(self, req: MemRequest) -> None:
        """Queue a read/write (split into bursts); see MemorySystem.submit.

        Raises SimulationError for a non-positive size, a duplicate outstanding id or an
        address range beyond the capacity."""
        size = req.size_bytes
        if size <= 0:
            raise SimulationError(f"request {req.req_id}: size_bytes must be > 0, got {size}")
        rid = req.req_id
        trusted = self._trusted
        if not trusted and rid in self._live_rids:
            raise SimulationError(f"request id {rid} is already outstanding")
        addr = req.addr
        last = addr + size - 1
        if last >= self._cap or addr < 0:
            self.map._check(addr)
            self.map._check(last)
        bb = self._bb
        first_b, last_b = addr // bb, last // bb
        nbursts = last_b - first_b + 1
        ri = len(self._req_buf)
        wr = 1 if req.is_write else 0
        self._req_buf.append((rid, req.arrival_cycle, nbursts, wr))
        if not trusted:
            self._live_rids.add(rid)
        GB, B = self._GB, self.B
        for k in range(first_b, last_b + 1):
            a = k * bb
            if self._last[0] == a:
                ch, ra, bg, ba, row, col = self._last[1]
            else:
                ch, ra, bg, ba, row, col = self._decode(a)
            bank = ra * GB + bg * B + ba
            self._burst_buf.append((ri, ch, bank, row, col, wr, req.arrival_cycle))
            ld = self.LD
            ld[ch, bank] += 1
            ld[ch, -1] += 1

    def submit_many(self, addrs, is_write: bool, arrivals, ids, size_bytes: int | None = None,
                    check: bool = True) -> int:
        """Queue many requests of one direction in order, exactly as repeated :meth:`submit`
        calls (each preceded by :meth:`can_accept` when ``check``) would
        (MemorySystem.submit_many).

        Args:
            addrs: int array (N,) of byte addresses; arrivals: int array (N,) or one int (tCK);
            ids: int array (N,) of request ids; size_bytes: bytes per request, one int or an
            int array (N,) (default one burst); check: stop at the first request whose
            bank/channel queue is full.

        Returns:
            The number of requests queued (a prefix of the arrays).

        Raises:
            SimulationError: an address beyond the capacity or a duplicate outstanding id
                (both before anything is queued), or a non-positive size.
        """
        bb = self._bb
        a = np.asarray(addrs, dtype=np.int64)
        n = int(a.shape[0])
        if n == 0:
            return 0
        arr = np.ascontiguousarray(np.broadcast_to(np.asarray(arrivals, dtype=np.int64), (n,)))
        rid = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
        sizes = None
        if size_bytes is None or np.ndim(size_bytes) == 0:
            size = bb if size_bytes is None else int(size_bytes)
            off = a % bb
            one_burst = size == bb and not off.any()
            if not one_burst and 0 < size <= bb:
                one_burst = bool((off + size <= bb).all())
        else:
            sizes = np.asarray(size_bytes, dtype=np.int64)
            off = a % bb
            one_burst = bool(sizes.min() > 0 and (off + sizes <= bb).all())
        if one_burst and off.any():
            if int(a.min()) < 0 or int(a.max()) >= self._cap:
                one_burst = False           # submit raises, naming the address
            else:
                # every request inside one burst: it is that burst (submit splits by burst
                # and keeps no size), so the burst-aligned addresses queue exactly the same
                a = a - off
        if not one_burst:
            al, rl, il = a.tolist(), arr.tolist(), rid.tolist()
            sl = [size] * n if sizes is None else sizes.tolist()
            for i in range(n):
                if check and not self.can_accept(al[i]):
                    return i
                self.submit(MemRequest(il[i], al[i], sl[i], is_write, rl[i]))
            return n
        if int(a.min()) < 0 or int(a.max()) >= self._cap:
            self.map.decode_array(a)                     # raises naming the address
        trusted = self._trusted
        if not trusted:
            idl = rid.tolist()
            if not self._live_rids.isdisjoint(idl):
                dup = next(r for r in idl if r in self._live_rids)
                raise SimulationError(f"request id {dup} is already outstanding")
        self._flush()
        cs = self.CS
        # capacity for the worst case: every request queued
        if self.BFREE[0] < n:
            self._grow_bursts(n + self.BU.shape[0])
        if self.RQFREE[0] < n:
            self._grow_reqs(n + self.RQ.shape[0])
        if int((cs[:, C_ST] - cs[:, C_SH]).max()) + n > self.STG.shape[1]:
            while int((cs[:, C_ST] - cs[:, C_SH]).max()) + n > self.STG.shape[1]:
                self._grow_ring("STG", C_SH, C_ST)
        done = _submit_many(cs, self.BK, self.STG, self.BU, self.BFREE, self.RQ, self.RQFREE,
                            self.GL, self.LD, self.PA, self._DEC, a, arr, rid,
                            1 if is_write else 0, bool(check), self._qb, self._qc)
        if not trusted:
            self._live_rids.update(idl[:done] if done < n else idl)
        return int(done)

    def pim_fields(self, req: PimRequest) -> tuple[int, int, int, int, int, int, int]:
        """What :meth:`submit_pim` queues for ``req``: ``(command index, channel, bank-group
        mask, row, n, sub-commands, estimated sequence cycles)`` (state independent).

        Raises SimulationError for a channel out of range or a malformed request."""
        if not 0 <= req.channel < self.C:
            raise SimulationError(f"PIM request {req.req_id}: channel {req.channel} out of "
                                  f"range 0..{self.C - 1}")
        kind = req.kind.value if hasattr(req.kind, "value") else str(req.kind)
        cmd = _KIND_CMD.get(kind)
        if cmd is None:
            raise SimulationError(f"unknown PIM request kind '{kind}'")
        mask, row, n, nsub, est = 0, 0, 0, 1, 0
        if cmd == G_ACT:
            mask = req.bank_group_mask or ((1 << self.G) - 1)
            if not 0 <= req.row < self.cfg.memory.org.rows:
                raise SimulationError(f"G_ACT row {req.row} out of range "
                                      f"0..{self.cfg.memory.org.rows - 1}")
            ng = sum(1 for g in range(self.G) if mask >> g & 1)
            if not ng:
                raise SimulationError(f"G_ACT bank_group_mask {mask:#x} names no bank group")
            mask &= (1 << self.G) - 1
            nsub, row = ng * self.R, req.row
        elif cmd == COMP:
            if req.n_comps < 1:
                raise SimulationError("COMP needs n_comps >= 1")
            n = nsub = req.n_comps
        elif cmd == GEMV:
            if req.n_comps < 1:
                raise SimulationError("PIM_GEMV needs n_comps (k) >= 1")
            n = req.n_comps
        elif cmd == HEADER:
            from archsim.memory.controller import pim_sequence_estimate_cycles
            k = int(req.extra.get("k", self.PA[A_DEFK])) if req.extra else int(self.PA[A_DEFK])
            est = pim_sequence_estimate_cycles(self.cfg, req.n_comps, k)
            n = req.n_comps
        return cmd, req.channel, mask, row, n, nsub, est

    def submit_pim(self, req: PimRequest) -> None:
        """Queue a broadcast PIM command (see ChannelController.push_pim).

        Raises SimulationError for a channel out of range or a malformed request."""
        if not 0 <= req.channel < self.C:
            raise SimulationError(f"PIM request {req.req_id}: channel {req.channel} out of "
                                  f"range 0..{self.C - 1}")
        self._flush()
        cmd, c, mask, row, n, nsub, est = self.pim_fields(req)
        now = int(self.CS[c, C_NOW])
        arrival = max(req.arrival_cycle, now + 1)
        if self.POFREE[0] == 0:
            self._grow_pim(0)
        op = int(self.POFREE[self.POFREE[0]])
        self.POFREE[0] -= 1
        self.PO[op] = (req.req_id, cmd, arrival, est, mask, row, n, 0, nsub)
        pcap = self.PQ.shape[1]
        if self.CS[c, C_PT] - self.CS[c, C_PH] >= pcap:
            self._grow_ring("PQ", C_PH, C_PT)
            pcap = self.PQ.shape[1]
        self.PQ[c, self.CS[c, C_PT] % pcap] = op
        self.CS[c, C_PT] += 1
        self.CS[c, C_NEVOK] = 0
        if arrival < self.CS[c, C_FIRST]:
            self.CS[c, C_FIRST] = arrival
        self._pim_rids.add(req.req_id)

    def _grow_ring(self, name: str, hcol: int, tcol: int) -> None:
        ring = getattr(self, name)
        cap = ring.shape[1]
        new = np.zeros((ring.shape[0], cap * 2), np.int64)
        for c in range(ring.shape[0]):
            h, t = int(self.CS[c, hcol]), int(self.CS[c, tcol])
            items = [ring[c, i % cap] for i in range(h, t)]
            self.CS[c, hcol] = 0
            self.CS[c, tcol] = len(items)
            new[c, :len(items)] = items
        setattr(self, name, new)

    def can_accept(self, addr: int) -> bool:
        """False when the bank of ``addr`` already has ``queue_size_per_bank`` bursts waiting
        (queued or in the input FIFO) or its channel ``command_queue_size``
        (MemorySystem.can_accept)."""
        d = self._decode(addr)
        self._last = (addr, d)
        ld = self.LD[d[0]]
        return bool(ld[d[1] * self._GB + d[2] * self.B + d[3]] < self._qb and ld[-1] < self._qc)

    def _flush(self) -> None:
        if not self._req_buf:
            return
        reqs = np.asarray(self._req_buf, np.int64).reshape(-1, 4)
        bursts = np.asarray(self._burst_buf, np.int64).reshape(-1, 7)
        self._req_buf.clear()
        self._burst_buf.clear()
        while self.BFREE[0] < bursts.shape[0]:
            self._grow_bursts(0)
        while self.RQFREE[0] < reqs.shape[0]:
            self._grow_reqs(0)
        # staging ring capacity
        cs = self.CS
        cap = self.STG.shape[1]
        counts = np.bincount(bursts[:, 1], minlength=self.C)
        while ((cs[:, C_ST] - cs[:, C_SH]) + counts).max() > cap:
            self._grow_ring("STG", C_SH, C_ST)
            cap = self.STG.shape[1]
        _push_bursts(cs, self.BK, self.STG, self.BU, self.BFREE, self.RQ, self.RQFREE, self.GL,
                     self.PA, reqs, bursts, np.empty(reqs.shape[0], np.int64))

    def next_event_cycle(self) -> int | None:
        """Earliest cycle at which a command may issue or a request complete; None if idle."""
        self._flush()
        best = _next_event(self.CS, self.RS, self.BK, self.NXT, self.WT, self.WW, self.STG,
                           self.BU, self.PO, self.PQ, self.GL, self.PA)
        self._check_error()
        if self.GL[G_HEAP] > 0 and self.HP[0, 0] < best:
            best = int(self.HP[0, 0])
        return None if best >= INF else int(best)

    def advance_to(self, cycle: int) -> list[Completion]:
        """Simulate every channel up to and including ``cycle``; return the completed requests
        in (cycle, req_id) order. ``last_flags`` (aligned with the result) is 1 where a
        completion finished a DMA transfer registered with :meth:`dma_register`."""
        self._flush()
        out: list[Completion] = []
        flags: list[int] = []
        if self._buffered is not None:
            bt, bout, bflags = self._buffered
            self._buffered = None
            if bt == cycle:
                out, flags = bout, bflags
            else:                              # pragma: no cover - caller skipped the cycle
                raise SimulationError(f"fast memory: completions of cycle {bt} not collected")
        while True:
            need = self.GL[G_HEAP] + len(self._live_rids) + len(self._pim_rids) + 16 + \
                self._dma_slack
            while self.HP.shape[0] < need:
                self.HP = np.concatenate([self.HP, np.zeros_like(self.HP)])
            self.GL[G_STATUS] = ST_OK
            _advance_all(self.CS, self.RS, self.BK, self.NXT, self.LAT, self.LATK, self.WT,
                         self.WW, self.STG, self.BU, self.BFREE, self.RQ, self.RQFREE, self.PO,
                         self.PQ, self.POFREE, self.HP, self.GL, self.LOG, self.CNT, self.LD,
                         self.PA, self.OUT, self.RREM, int(cycle))
            st = int(self.GL[G_STATUS])
            if st == ST_ERROR:
                self._check_error()
            n = int(self.GL[G_NOUT]) if st in (ST_OK, ST_OUT_FULL) else 0
            if n:
                self._collect(n, out, flags)
            if st == ST_LOG_FULL:
                self.LOG = np.concatenate([self.LOG, np.zeros_like(self.LOG)])
                continue
            if st == ST_OUT_FULL:
                continue
            break
        self.last_flags = flags
        return out

    def _collect(self, n: int, out: list, flags: list) -> None:
        o = self.OUT[:n]
        ids = o[:, 1].tolist()
        out.extend(map(Completion, ids, o[:, 0].tolist()))
        flags.extend(o[:, 4].tolist())
        pim = o[:, 3] == 1
        if pim.any():
            self._pim_rids.difference_update(o[pim, 1].tolist())
            self._pim_lat.extend(o[pim, 2].tolist())
            mem = ~pim
            if not self._trusted:
                self._live_rids.difference_update(o[mem, 1].tolist())
            self._mem_lat.append(o[mem, 2].copy())
        else:
            if not self._trusted:
                self._live_rids.difference_update(ids)
            self._mem_lat.append(o[:, 2].copy())

    # ---------------------------------------------------------------- DMA fast-forward
    def expect_unique_ids(self, max_outstanding: int) -> None:
        """The caller (the NPU executor) never reuses a request id and never has more than
        ``max_outstanding`` memory requests in flight: the duplicate-id check of
        :meth:`submit` / :meth:`submit_many` and its bookkeeping are skipped from now on, and
        the completion heap is sized for that bound (as for :meth:`dma_fast_forward`)."""
        self._trusted = True
        self._live_rids.clear()
        self._provision(int(max_outstanding))

    def dma_register(self, rec_id: int, addrs: np.ndarray, is_write: bool,
                     sizes: np.ndarray | int) -> None:
        """Register DMA transfer ``rec_id`` (the executor's record id; request ids are
        ``rec_id << 32 | i``) with its request addresses and sizes (bytes), so that
        completions maintain its remaining count (``last_flags``) and
        :meth:`dma_fast_forward` can issue it. A transfer with a request spanning two bursts
        is never fast-forwarded (``RELIG`` = 0)."""
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
        if rec_id >= self.RREM.shape[0]:
            size = max(2 * self.RREM.shape[0], rec_id + 1024)
            for name, shape in (("RREM", (size,)), ("RISS", (size,)), ("RN", (size,)),
                                ("RO", (size, 2)), ("RELIG", (size,))):
                old = getattr(self, name, None)
                new = np.zeros(shape, np.int64)
                if old is not None:
                    new[:old.shape[0]] = old
                setattr(self, name, new)
        if self._arena_n + n > self.ARENA.shape[0]:
            size = max(2 * self.ARENA.shape[0], self._arena_n + n)
            for name in ("ARENA", "SIZES"):
                new = np.zeros(size, np.int64)
                new[:self._arena_n] = getattr(self, name)[:self._arena_n]
                setattr(self, name, new)
        self.ARENA[self._arena_n:self._arena_n + n] = addrs
        self.SIZES[self._arena_n:self._arena_n + n] = sz
        self.RO[rec_id, 0] = self._arena_n
        self.RO[rec_id, 1] = 1 if is_write else 0
        self._arena_n += n
        self.RN[rec_id] = n
        self.RISS[rec_id] = 0
        self.RREM[rec_id] = n
        self.RELIG[rec_id] = 1 if eligible else 0

    def dma_issue(self, rec_id: int, i0: int, k: int, t0: int, used: int, R: int
                  ) -> tuple[int, int]:
        """Queue up to ``k`` requests of registered DMA transfer ``rec_id`` (one burst each,
        ``RELIG`` = 1) from index ``i0``, the i-th with id ``rec_id << 32 | (i0 + i)`` and
        arrival ``t0 + (used + i) // R`` (memory cycles), stopping at the first whose bank or
        channel queue is full: exactly what :meth:`submit_many` with ``check`` queues for them
        (the executor's ``_dma_issue``; the loop of :func:`_dma_ff`). Needs
        :meth:`expect_unique_ids` first (capacity for ``max_outstanding`` requests).

        Returns ``(requests queued, their bytes)``."""
        if self._req_buf:
            self._flush()
        if not self._dma_slack:
            raise SimulationError("dma_issue needs expect_unique_ids first")
        r = _dma_issue_k(self.CS, self.BK, self.STG, self.BU, self.BFREE, self.RQ, self.RQFREE,
                         self.GL, self.LD, self.PA, self._DEC, self.ARENA, self.SIZES, self.RO,
                         self.RISS, rec_id, i0, k, t0, used, R)
        return r >> 40, r & ((1 << 40) - 1)

    def _provision(self, maxo: int) -> None:
        """Capacity for the fast-forward once: live bursts, requests, FIFO entries and heap
        entries are bounded by the executor's ``max_outstanding`` DMA requests (one burst
        each) plus the channels' queues and PIM commands."""
        self._dma_slack = maxo
        extra = 2 * maxo + 64
        if self.BFREE[0] < extra:
            self._grow_bursts(extra + self.BU.shape[0])
        if self.RQFREE[0] < extra:
            self._grow_reqs(extra + self.RQ.shape[0])
        if self.POFREE[0] < 8 * self.C:
            self._grow_pim(8 * self.C + self.PO.shape[0])
        cs = self.CS
        while int((cs[:, C_ST] - cs[:, C_SH]).max()) + extra > self.STG.shape[1]:
            self._grow_ring("STG", C_SH, C_ST)
        need = self.GL[G_HEAP] + len(self._live_rids) + len(self._pim_rids) + 64 + 4 * maxo \
            + 8 * self.C
        while self.HP.shape[0] < need:
            self.HP = np.concatenate([self.HP, np.zeros_like(self.HP)])
        if self.OUT.shape[0] < 2 * maxo + 8 * self.C:
            self.OUT = np.zeros((2 * maxo + 8 * self.C, 5), np.int64)
        if self.LATBUF.shape[0] < 4 * maxo:
            self.LATBUF = np.zeros(max(1 << 16, 4 * maxo), np.int64)

    def dma_fast_forward(self, ds: np.ndarray, frec: np.ndarray, slw: np.ndarray,
                         memw: np.ndarray, ready: np.ndarray, pim: tuple | None = None) -> int:
        """Run :func:`_dma_ff` (the executor's DMA retry loop, see there) on state ``ds``
        (layout ``D_*``), ``frec`` (current transfer per stream), waiting lists ``slw`` /
        ``memw`` (stream indices, counts in ``ds``) and scratch ``ready``. On FF_COMPLETIONS
        the completions are kept for the next :meth:`advance_to` of that cycle.

        ``pim``: ``(PSS, PSL, PT, PEV)`` of the PIM command chains (layouts ``S_*``, ``T_*``,
        ``E_*``; see :func:`_dma_ff`), or None for none. The chained commands are accounted
        here as :meth:`submit_pim` and :meth:`advance_to` would (outstanding ids, latencies);
        the caller reads the records ``PEV[:ds[D_PEVN]]``."""
        self._flush()
        maxo = int(ds[D_MAXO])
        if self._dma_slack != maxo or self.POFREE[0] < 4 * self.C:
            self._provision(maxo)
        ds[D_LATN] = 0
        ds[D_PEVN] = 0
        if pim is None:
            ds[D_PIMON] = 0
            pim = self._no_pim
        st = _dma_ff(self.CS, self.RS, self.BK, self.NXT, self.LAT, self.LATK, self.WT, self.WW,
                     self.STG, self.BU, self.BFREE, self.RQ, self.RQFREE, self.PO, self.PQ,
                     self.POFREE, self.HP, self.GL, self.LOG, self.CNT, self.LD, self.PA,
                     self.OUT, self.RREM, self._DEC, self.ARENA, self.SIZES, self.RO, self.RN,
                     self.RISS, frec, slw, memw, ready, self.LATBUF, ds, *pim)
        nl = int(ds[D_LATN])
        if nl:
            self._mem_lat.append(self.LATBUF[:nl].copy())
        ne = int(ds[D_PEVN])
        if ne:
            ev = pim[3][:ne]
            self._pim_lat.extend(ev[:, E_LAT].tolist())
            old = ev[:, E_OLD].tolist()
            # a command both issued and completed within the call was never outstanding
            self._pim_rids.difference_update(old)
            self._pim_rids.update(set(ev[:, E_NEW].tolist()).difference(old))
        if st == FF_COMPLETIONS:
            gst = int(self.GL[G_STATUS])
            out: list[Completion] = []
            flags: list[int] = []
            n = int(self.GL[G_NOUT]) if gst in (ST_OK, ST_OUT_FULL) else 0
            if n:
                self._collect(n, out, flags)
            self._buffered = (int(ds[D_NOW]), out, flags)
            if gst == ST_ERROR:
                self._check_error()
        return int(st)

    def _check_error(self) -> None:
        if self.GL[G_STATUS] != ST_ERROR:
            return
        code, op = int(self.GL[G_ERRC]), int(self.GL[G_ERRX])
        kind, ch = divmod(code, 1000)
        rid = int(self.PO[op, P_RID])
        if kind == ERR_GACT_OPEN:
            raise SimulationError(f"channel {ch}: G_ACT (request {rid}) to a bank group whose "
                                  "PIM row is open; send PIM_PRECHARGE first")
        raise SimulationError(f"channel {ch}: PIM command (request {rid}) with no PIM row "
                              "open; send G_ACT first")

    # ---------------------------------------------------------------- results
    def command_log(self) -> list[CommandRecord]:
        """Every issued command, ordered by (cycle, channel) (MemorySystem.command_log).

        Raises SimulationError when the memory was built with ``keep_log=False``."""
        if not self.GL[G_LOGON]:
            raise SimulationError("the command log was not kept (keep_log=False)")
        n = int(self.GL[G_NLOG])
        L = self.LOG[:n]
        order = np.lexsort((L[:, 1], L[:, 0]))
        names = COMMANDS
        return [CommandRecord(t, c, r, g, b, names[cmd], row, col)
                for t, c, r, g, b, cmd, row, col in L[order].tolist()]

    def command_log_array(self) -> np.ndarray:
        """The raw log as int64 ``[n, 8]`` (cycle, channel, rank, bank group, bank, command
        index into :data:`archsim.memory.spec.COMMANDS`, row, column), issue order per channel."""
        return self.LOG[:int(self.GL[G_NLOG])].copy()

    def pim_busy_cycles(self) -> tuple[np.ndarray, np.ndarray]:
        """Per channel (axis 0), memory cycles with a PIM command executing: ``(all PIM
        commands, COMP/PIM_GEMV only)``; union of [issue, issue + occupancy) intervals with
        occupancies GEMV ``CSTEP·(max(k, FILL)+1)``, COMP ``CSTEP``, GWRITE ``gwrite_cycles``,
        READRES ``readres_cycles``, G_ACT ``tRCDRD``."""
        return self.CS[:, C_PBUSY].copy(), self.CS[:, C_PCOMP].copy()

    def channel_views(self) -> list[dict]:
        """Raw per-channel counters in the form :func:`archsim.memory.system.summarize` takes."""
        views = []
        for c in range(self.C):
            cs = self.CS[c]
            counts = {COMMANDS[i]: int(v) for i, v in enumerate(self.CNT[c]) if v}
            counts.update(pim_act_banks=int(cs[C_PACT]), pim_pre_banks=int(cs[C_PPRE]),
                          comp_bank_steps=int(cs[C_CSTEPS]))
            first = int(cs[C_FIRST]) if cs[C_FIRST] < INF else 0
            end = max(int(cs[C_LAST]), int(cs[C_NOW]) + 1 if cs[C_NCMDS] else 0)
            active = int(cs[C_ACTIVE]) + (max(0, end - int(cs[C_OSINCE]))
                                          if cs[C_OPEN] > 0 else 0)
            views.append({"channel": c, "counts": counts, "bytes_read": int(cs[C_BR]),
                          "bytes_written": int(cs[C_BW]), "first_cycle": first,
                          "end_cycle": end, "active_cycles": active})
        return views

    def stats(self) -> dict:
        """Statistics of everything simulated so far (:func:`archsim.memory.system.summarize`)."""
        lat = (np.concatenate(self._mem_lat) if self._mem_lat else np.zeros(0, np.int64))
        return summarize(self.cfg, self.channel_views(), lat.astype(np.int64),
                         np.asarray(self._pim_lat, dtype=np.int64))


@_njit
def _push_bursts(CS, BK, STG, BU, BFREE, RQ, RQFREE, GL, PA, reqs, bursts, slots):
    """Enter buffered requests ``reqs[i] = (req_id, arrival, n_bursts, is_write)`` and their
    bursts ``bursts[j] = (request index, channel, bank, row, column, is_write, arrival)``
    (``slots``: scratch of ``len(reqs)`` entries)."""
    for i in range(reqs.shape[0]):
        slot = RQFREE[RQFREE[0]]
        RQFREE[0] -= 1
        slots[i] = slot
        RQ[slot, Q_RID] = reqs[i, 0]
        RQ[slot, Q_ARR] = reqs[i, 1]
        RQ[slot, Q_REM] = reqs[i, 2]
        RQ[slot, Q_DONE] = -1
        RQ[slot, Q_WR] = reqs[i, 3]
    for j in range(bursts.shape[0]):
        c = bursts[j, 1]
        bi = BFREE[BFREE[0]]
        BFREE[0] -= 1
        GL[G_SEQ] += 1
        arr = bursts[j, 6]
        if arr < CS[c, C_NOW] + 1:
            arr = CS[c, C_NOW] + 1
        BU[bi, U_SEQ] = GL[G_SEQ]
        BU[bi, U_REQ] = slots[bursts[j, 0]]
        BU[bi, U_BANK] = bursts[j, 2]
        BU[bi, U_ROW] = bursts[j, 3]
        BU[bi, U_COL] = bursts[j, 4]
        BU[bi, U_WR] = bursts[j, 5]
        BU[bi, U_ARR] = arr
        _stage_push(CS, BK, STG, PA, c, bi, arr, bursts[j, 2])


@_njit_inline
def _queue_single(CS, BK, STG, BU, BFREE, RQ, RQFREE, GL, LD, PA, DEC, GB, tot, qb, qc, check,
                  x, arr, rid, wr):
    """Queue one single-burst request (burst address ``x``, arrival ``arr`` in memory cycles,
    id ``rid``, write flag ``wr``) on its channel's input FIFO. With ``check``, returns False and
    queues nothing when its bank already holds ``qb`` bursts or its channel ``qc``
    (MemorySystem.can_accept). DEC: (shift, mask) of ch, ra, bg, ba, ro, co; GB: banks per
    rank; tot: the column of LD that counts the channel's bursts."""
    c = (x >> DEC[0, 0]) & DEC[0, 1]
    b = ((x >> DEC[1, 0]) & DEC[1, 1]) * GB + ((x >> DEC[2, 0]) & DEC[2, 1]) * PA[A_B] \
        + ((x >> DEC[3, 0]) & DEC[3, 1])
    if check and not (LD[c, b] < qb and LD[c, tot] < qc):
        return False
    LD[c, b] += 1
    LD[c, tot] += 1
    slot = RQFREE[RQFREE[0]]
    RQFREE[0] -= 1
    RQ[slot, Q_RID] = rid
    RQ[slot, Q_ARR] = arr
    RQ[slot, Q_REM] = 1
    RQ[slot, Q_DONE] = -1
    RQ[slot, Q_WR] = wr
    bi = BFREE[BFREE[0]]
    BFREE[0] -= 1
    GL[G_SEQ] += 1
    a = arr
    if a < CS[c, C_NOW] + 1:
        a = CS[c, C_NOW] + 1
    BU[bi, U_SEQ] = GL[G_SEQ]
    BU[bi, U_REQ] = slot
    BU[bi, U_BANK] = b
    BU[bi, U_ROW] = (x >> DEC[4, 0]) & DEC[4, 1]
    BU[bi, U_COL] = (x >> DEC[5, 0]) & DEC[5, 1]
    BU[bi, U_WR] = wr
    BU[bi, U_ARR] = a
    _stage_push(CS, BK, STG, PA, c, bi, a, b)
    return True


@_njit
def _dma_issue_k(CS, BK, STG, BU, BFREE, RQ, RQFREE, GL, LD, PA, DEC, ARENA, SIZES, RO, RISS, r,
                 i0, k, t0, used, R):
    """Queue up to k requests of registered transfer r from index i0 (FastMemorySystem.dma_issue);
    returns ``done << 40 | bytes``."""
    qb = PA[A_QB]
    qc = PA[A_QC]
    tot = LD.shape[1] - 1
    GB = PA[A_G] * PA[A_B]
    bb = PA[A_BB]
    wr = RO[r, 1]
    base = RO[r, 0] + i0
    done = 0
    nbytes = 0
    for d in range(k):
        x = ARENA[base + d]
        x = (x // bb) * bb               # the one burst this request lies in
        if not _queue_single(CS, BK, STG, BU, BFREE, RQ, RQFREE, GL, LD, PA, DEC, GB, tot, qb, qc,
                             True, x, t0 + (used + d) // R, (r << 32) | (i0 + d), wr):
            break
        nbytes += SIZES[base + d]
        done += 1
    RISS[r] = i0 + done
    return (done << 40) | nbytes


@_njit
def _submit_many(CS, BK, STG, BU, BFREE, RQ, RQFREE, GL, LD, PA, DEC, addr, arr, rid, wr, check,
                 qb, qc):
    """Queue single-burst requests in order until one finds its queue full (``check``).
    DEC: (shift, mask) of ch, ra, bg, ba, ro, co (the address mapping)."""
    GB = PA[A_G] * PA[A_B]
    tot = LD.shape[1] - 1
    for i in range(addr.shape[0]):
        if not _queue_single(CS, BK, STG, BU, BFREE, RQ, RQFREE, GL, LD, PA, DEC, GB, tot, qb, qc,
                             check, addr[i], arr[i], rid[i], wr):
            return i
    return addr.shape[0]


@_njit_inline
def _stage_push(CS, BK, STG, PA, c, bi, arr, bank):
    """Append burst ``bi`` to channel c's input FIFO and keep its cached decision exact: a
    burst behind others changes nothing; a new head adds the internal event of its admission
    (at ``max(arrival, t_min)`` when its queue has room), exactly as ``_decide`` would."""
    cap = STG.shape[1]
    was_empty = CS[c, C_SH] == CS[c, C_ST]
    STG[c, CS[c, C_ST] % cap] = bi
    CS[c, C_ST] += 1
    if arr < CS[c, C_FIRST]:
        CS[c, C_FIRST] = arr
    if was_empty and CS[c, C_NEVOK] == 1:
        if BK[c, bank, B_QLEN] < PA[A_QB] and CS[c, C_NQ] < PA[A_QC]:
            t0 = CS[c, C_TMIN]
            ev = arr if arr > t0 else t0
            if ev <= CS[c, C_NEV]:
                # the admission comes first (it wins a tie with an action)
                CS[c, C_NEV] = ev
                CS[c, C_NKIND] = 1

# ---- DMA fast-forward (the NPU executor's back-pressured DMA loop, see dma_fast_forward) ----
(D_NOW, D_OUT, D_IC, D_IU, D_BS, D_BC, D_REQ, D_BR, D_BW, D_MAXO, D_R, D_TPY, D_MAXC,
 D_STOPPOS, D_NREADY, D_NSLW, D_NMEMW, D_LATN, D_RB, D_STEPS, D_START, D_PIMON, D_PIMCTR,
 D_PEVN) = range(24)
ND = 24
FF_TIMER, FF_COMPLETIONS, FF_STREAM = 0, 1, 2
# PIM command chains in the fast-forward (see _dma_ff): per stream PSS[k, :]
S_RID, S_T0, S_PC, S_N, S_OFF = range(5)
NSS = 5
# per instruction PT[S_OFF + pc, :] (what submit_pim would queue; T_OK = 0: not chainable)
T_OK, T_CMD, T_CH, T_MASK, T_ROW, T_N, T_NSUB, T_EST = range(8)
NPT = 8
# one record per PIM command completed and its successor issued, PEV[i, :]
E_K, E_PC, E_T0, E_T, E_OLD, E_NEW, E_NOW, E_LAT = range(8)
NPEV = 8
PIM_RID_BASE = 1 << 62
"""Request ids of PIM commands: ``PIM_RID_BASE + n`` for the executor's n-th command
(archsim.engine._PIM_RID_BASE)."""


@_njit_inline
def _pim_stream(PSS, PSL, rid):
    """Stream (index into PSS) whose outstanding PIM command is ``rid``; -1 when none."""
    for j in range(PSL.shape[0]):
        k = PSL[j]
        if PSS[k, S_RID] == rid:
            return k
    return -1


@_njit
def _dma_ff(CS, RS, BK, NXT, LAT, LATK, WT, WW, STG, BU, BFREE, RQ, RQFREE, PO, PQ, POFREE, HP,
            GL, LOG, CNT, LD, PA, OUT, RREM, DEC, ARENA, SIZES, RO, RN, RISS, FREC, SLW, MEMW,
            READY, LATBUF, DS, PSS, PSL, PT, PEV):
    """Run the executor's loop while only memory events, back-pressured DMA retries and PIM
    command chains happen (no other PIM completion, no transfer completing, no executor timer).

    Each step is one executor iteration: ``now`` = the next memory event or the executor's
    next timer DS[D_TPY], whichever is first (or now + 1), advance
    the memory, count the completions (``outstanding`` drops), then the waiting DMA streams
    retry in the executor's order (slot waiters when requests were freed, then memory
    waiters), each issuing a prefix of its transfer exactly as ``Executor._dma_issue`` does
    (budget ``max_outstanding - outstanding``; arrivals ``t0 + (used + i) // R``; stop at the
    first request whose queue is full). Returns FF_TIMER (stopped before a step),
    FF_COMPLETIONS (stopped after advancing to DS[D_NOW]: the completions in OUT, or the
    timers due at DS[D_NOW] >= DS[D_TPY], need the executor) or FF_STREAM (a stream finished
    issuing its transfer at DS[D_NOW]: READY[DS[D_STOPPOS]]; the streams after it in READY
    still have to retry at that cycle).

    PIM command chains (DS[D_PIMON] = 1): a completing PIM command whose stream (PSS row,
    listed in PSL, outstanding request PSS[k, S_RID]) continues with another PIM command
    (PT[PSS[k, S_OFF] + pc + 1, T_OK] = 1) is handled here as the executor would: the stream
    advances and, being the first in the executor's ready order (PIM completions before the
    slot and memory waiters), issues its next command at the same cycle with the next request
    id (``PIM_RID_BASE + ++DS[D_PIMCTR]``) and arrival ``max(now, channel cycle + 1)``, exactly
    as ``submit_pim``. Each such completion is recorded in PEV[DS[D_PEVN]++] (layout ``E_*``)
    for the executor's bookkeeping. Any other PIM completion stops with FF_COMPLETIONS, before
    anything of that step is handled.
    """
    maxo = DS[D_MAXO]
    R = DS[D_R]
    qb = PA[A_QB]
    qc = PA[A_QC]
    tot = LD.shape[1] - 1
    GB = PA[A_G] * PA[A_B]
    first = DS[D_START] == 1
    DS[D_START] = 0
    while True:
        if first:
            # the caller's ready streams (READY[:D_NREADY]) retry at D_NOW first
            first = False
            nr = DS[D_NREADY]
            now = DS[D_NOW]
        else:
            if DS[D_LATN] + maxo > LATBUF.shape[0] or \
                    DS[D_PEVN] + PSL.shape[0] > PEV.shape[0]:
                return FF_TIMER
            cand = _next_event(CS, RS, BK, NXT, WT, WW, STG, BU, PO, PQ, GL, PA)
            if GL[G_STATUS] == ST_ERROR:
                GL[G_STATUS] = ST_OK
                return FF_TIMER
            if GL[G_HEAP] > 0 and HP[0, 0] < cand:
                cand = HP[0, 0]
            if DS[D_TPY] < cand:
                cand = DS[D_TPY]
            if cand >= INF:
                return FF_TIMER
            now = DS[D_NOW]
            now = cand if cand > now else now + 1
            if DS[D_MAXC] >= 0 and now > DS[D_MAXC]:
                return FF_TIMER
            GL[G_STATUS] = ST_OK
            _advance_all(CS, RS, BK, NXT, LAT, LATK, WT, WW, STG, BU, BFREE, RQ, RQFREE, PO, PQ,
                         POFREE, HP, GL, LOG, CNT, LD, PA, OUT, RREM, now)
            DS[D_NOW] = now
            DS[D_STEPS] += 1
            if GL[G_STATUS] != ST_OK or now >= DS[D_TPY]:
                # an executor timer is due at this step: the executor handles its completions
                # and timers (the step it would have taken itself)
                return FF_COMPLETIONS
            n = GL[G_NOUT]
            npim = 0
            for i in range(n):
                if OUT[i, 4] == 1:
                    return FF_COMPLETIONS
                if OUT[i, 3] == 1:
                    if DS[D_PIMON] == 0:
                        return FF_COMPLETIONS
                    k = _pim_stream(PSS, PSL, OUT[i, 1])
                    if k < 0:
                        return FF_COMPLETIONS
                    nxt = PSS[k, S_PC] + 1
                    if nxt >= PSS[k, S_N] or PT[PSS[k, S_OFF] + nxt, T_OK] == 0:
                        return FF_COMPLETIONS
                    c = PT[PSS[k, S_OFF] + nxt, T_CH]
                    if CS[c, C_PT] - CS[c, C_PH] + npim >= PQ.shape[1]:
                        return FF_COMPLETIONS
                    npim += 1
            if npim > POFREE[0]:
                return FF_COMPLETIONS
            GL[G_NOUT] = 0
            nd = 0
            for i in range(n):
                if OUT[i, 3] == 1:
                    # the executor's _handle_completions for a PIM command, then the stream's
                    # next PIM command (Executor._pim_issue + FastMemorySystem.submit_pim)
                    k = _pim_stream(PSS, PSL, OUT[i, 1])
                    t = OUT[i, 0]
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
                    PEV[e, E_LAT] = OUT[i, 2]
                    PSS[k, S_PC] += 1
                    row = PSS[k, S_OFF] + PSS[k, S_PC]
                    DS[D_PIMCTR] += 1
                    rid = PIM_RID_BASE + DS[D_PIMCTR]
                    c = PT[row, T_CH]
                    arrival = now
                    if arrival < CS[c, C_NOW] + 1:
                        arrival = CS[c, C_NOW] + 1
                    op = POFREE[POFREE[0]]
                    POFREE[0] -= 1
                    PO[op, P_RID] = rid
                    PO[op, P_KIND] = PT[row, T_CMD]
                    PO[op, P_ARR] = arrival
                    PO[op, P_EST] = PT[row, T_EST]
                    PO[op, P_MASK] = PT[row, T_MASK]
                    PO[op, P_ROW] = PT[row, T_ROW]
                    PO[op, P_N] = PT[row, T_N]
                    PO[op, P_CUR] = 0
                    PO[op, P_NSUB] = PT[row, T_NSUB]
                    PQ[c, CS[c, C_PT] % PQ.shape[1]] = op
                    CS[c, C_PT] += 1
                    CS[c, C_NEVOK] = 0
                    if arrival < CS[c, C_FIRST]:
                        CS[c, C_FIRST] = arrival
                    PSS[k, S_RID] = rid
                    PSS[k, S_T0] = now
                    PEV[e, E_NEW] = rid
                    continue
                LATBUF[DS[D_LATN]] = OUT[i, 2]
                DS[D_LATN] += 1
                nd += 1
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
            bb = PA[A_BB]
            for d in range(k):
                x = ARENA[RO[r, 0] + i0 + d]
                nbytes += SIZES[RO[r, 0] + i0 + d]
                x = (x // bb) * bb           # the one burst this request lies in
                if not _queue_single(CS, BK, STG, BU, BFREE, RQ, RQFREE, GL, LD, PA, DEC, GB,
                                     tot, qb, qc, True, x, t0 + (used + d) // R,
                                     (r << 32) | (i0 + d), wr):
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



__all__ = ["FastMemorySystem", "FastMemoryUnsupported", "HAVE_NUMBA"]
