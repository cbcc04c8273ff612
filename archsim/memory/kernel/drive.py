"""Driving the compiled controller: advancing channels in time, queueing requests.

The kernel's API, called by :class:`archsim.memory.kernel.port.KernelMemory` (the MemoryPort)
and by the NPU's compiled event loop (:mod:`archsim.npu.cloop`); every function takes the state
``S`` (:class:`archsim.memory.kernel.layout.MemState`):

* :func:`_drive`, the body of :func:`_advance_all` (``advance_to``) and :func:`_next_event`
  (``next_event_cycle``); :func:`_run_to_idle` + :func:`_pop_all` (batch replay of a known
  trace);
* :func:`_push_bursts` (requests split into bursts by the port), :func:`_queue_single` /
  :func:`_submit_many` (single-burst requests straight from their addresses, with the
  queue-full check of ``can_accept``), :func:`_queue_request` (a request of any size, the
  compiled executor's DMA), :func:`_push_pim` (``submit_pim``).

The caller provides capacity (pools, rings, completion queue, latency buffers) before each
call; a full command log or completion buffer stops a call with a status and the next call
resumes.
All cycles are memory-clock cycles (tCK).
"""
from archsim.memory.kernel.issue import _cq_pop, _issue, _note_latency
from archsim.memory.kernel.jit import njit, njit_inline
from archsim.memory.kernel.layout import *  # noqa: F403  (state layout and command codes)
from archsim.memory.kernel.scheduler import _admissible, _decide
from archsim.memory.policy import WRITE_DRAIN as _WRITE_DRAIN


@njit
def _has_work(CS, c):
    """True while channel c has bursts in its FIFO or bank queues, or PIM requests queued."""
    return CS[c, C_SH] != CS[c, C_ST] or CS[c, C_NQ] > 0 or CS[c, C_PH] != CS[c, C_PT]


@njit
def _drive(S, t, peek):
    """The channels' scheduling step, one body for both uses (one inlined copy of
    :func:`archsim.memory.kernel.scheduler._decide`, whose compilation dominates the one-time
    JIT):

    * ``peek == 0`` (:func:`_advance_all`, ``advance_to``): advance every channel to cycle t
      (ChannelController.advance_to), then pop the completions <= t into ``OUT[:GL[G_NOUT]]``
      (cycle, request id, latency, is_pim) and count their latencies in MLAT / PLAT. Stops
      early with a status in ``GL[G_STATUS]`` when the log (ST_LOG_FULL) or OUT
      (ST_OUT_FULL) is full; calling again resumes. The caller keeps room in MLAT / PLAT for
      every outstanding request (``GL[G_OUTM]``, ``GL[G_OUTP]``). Returns 0.
    * ``peek == 1`` (:func:`_next_event`, ``t`` unused): the earliest cycle (memory clock) at
      which any channel may issue, decided at each channel's current cycle and cached for the
      advance that follows; INF when no channel can; -1 on a kernel error (``GL[G_STATUS]``).
      Completions are not looked at (the caller reads the completion queue's head).
    """
    CS, CQ, GL, LOG, OUT, MLAT, PLAT = S.CS, S.CQ, S.GL, S.LOG, S.OUT, S.MLAT, S.PLAT
    C = CS.shape[0]
    logcap = LOG.shape[0]
    best = INF
    for c in range(C):
        if peek:
            if not _has_work(CS, c):
                continue
            tq = CS[c, C_NOW]
            # a cached decision of either kind gives the channel's next cycle
            cached = CS[c, C_NEVOK] == 1
        else:
            if t <= CS[c, C_NOW]:
                continue
            CS[c, C_WTENT] = 0          # no request arriving at or before t can come any more
            if CS[c, C_NEVOK] == 1 and CS[c, C_NEV] > t:
                # nothing can happen on this channel up to t (cached decision still valid)
                CS[c, C_NOW] = t
                if CS[c, C_TMIN] <= t:
                    CS[c, C_TMIN] = t + 1
                continue
            tq = t
            # a cached action due by t is what _decide would return again: the channel's
            # state is unchanged since, and admissions / refresh flags at its t_min change
            # nothing before that cycle (the action was chosen over them)
            cached = CS[c, C_NEVOK] == 1 and CS[c, C_NKIND] == 2
        while True:
            if not peek and GL[G_LOGON] == 1 and GL[G_NLOG] + 4 >= logcap:
                GL[G_STATUS] = ST_LOG_FULL
                return 0
            if cached:
                if peek:
                    tt = CS[c, C_NEV]
                    kind = 0 if tt >= INF else 2
                    break
                cached = False
                CS[c, C_NEVOK] = 0
                tt, cmd, b, x, kind = CS[c, C_NEV], CS[c, C_NCMD], CS[c, C_NB], CS[c, C_NX], 2
            else:
                tt, cmd, b, x, kind = _decide(S, c, tq)
            if GL[G_STATUS] == ST_ERROR:
                return -1
            if peek or kind == 0 or tt > tq:
                CS[c, C_NEV] = INF if kind == 0 else tt
                CS[c, C_NEVOK] = 1
                CS[c, C_NKIND] = kind
                CS[c, C_NCMD] = cmd
                CS[c, C_NB] = b
                CS[c, C_NX] = x
                break
            if kind == 1:
                continue
            _issue(S, c, tt, cmd, b, x)
        if peek:
            if kind != 0:
                v = tt if tt > CS[c, C_NOW] + 1 else CS[c, C_NOW] + 1
                if v < best:
                    best = v
        else:
            CS[c, C_NOW] = t
            if CS[c, C_TMIN] <= t:
                CS[c, C_TMIN] = t + 1
    if peek:
        return best
    n = 0
    cap = OUT.shape[0]
    while GL[G_NCQ] > 0 and CQ[GL[G_CQH], 0] <= t:
        if n >= cap:
            GL[G_STATUS] = ST_OUT_FULL
            break
        tc, rid, lat, kind = _cq_pop(CQ, GL)
        OUT[n, 0] = tc
        OUT[n, 1] = rid
        OUT[n, 2] = lat
        if kind == 0:
            OUT[n, 3] = 0
            _note_latency(MLAT, GL, G_NMLAT, lat)
            GL[G_OUTM] -= 1
        else:
            OUT[n, 3] = 1
            CS[kind - 1, C_PINF] -= 1
            _note_latency(PLAT, GL, G_NPLAT, lat)
            GL[G_OUTP] -= 1
        n += 1
    GL[G_NOUT] = n
    return 0


@njit
def _advance_all(S, t):
    """:func:`_drive` advancing every channel to cycle t (``advance_to``; see there)."""
    _drive(S, t, 0)


@njit
def _next_event(S):
    """Earliest cycle at which any channel may issue (:func:`_drive` peeking; INF when none,
    -1 on a kernel error); the caller compares it with the completion queue's head."""
    return _drive(S, 0, 1)


@njit
def _push_bursts(S, reqs, bursts, slots):
    """Enter buffered requests ``reqs[i] = (req_id, arrival, n_bursts, is_write)`` and their
    bursts ``bursts[j] = (request index, channel, bank, row, column, is_write, arrival)``
    (``slots``: scratch of ``len(reqs)`` entries)."""
    CS, BU, BFREE, RQ, RQFREE, GL = S.CS, S.BU, S.BFREE, S.RQ, S.RQFREE, S.GL
    for i in range(reqs.shape[0]):
        slot = RQFREE[RQFREE[0]]
        RQFREE[0] -= 1
        slots[i] = slot
        RQ[slot, Q_RID] = reqs[i, 0]
        RQ[slot, Q_ARR] = reqs[i, 1]
        RQ[slot, Q_REM] = reqs[i, 2]
        RQ[slot, Q_DONE] = -1
        RQ[slot, Q_WR] = reqs[i, 3]
    GL[G_OUTM] += reqs.shape[0]
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
        _stage_push(S, c, bi, arr, bursts[j, 2])


@njit_inline
def _push_burst(S, tot, slot, x, c, b, arr, wr):
    """One burst (address ``x`` on channel c, flat bank b) of the request in slot ``slot``
    onto its channel's input FIFO: the bank's and channel's burst counts (``LD``), a burst
    record with the next sequence number and the arrival ``arr`` raised to the channel's next
    cycle, staged by :func:`_stage_push`."""
    CS, BU, BFREE, GL, LD, DEC = S.CS, S.BU, S.BFREE, S.GL, S.LD, S.DEC
    LD[c, b] += 1
    LD[c, tot] += 1
    LD[c, tot + 1 + wr] += 1
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
    _stage_push(S, c, bi, a, b)


@njit
def _full(S, tot, qb, qc, c, b, wr):
    """``MemorySystem.can_accept`` refused for a burst to bank b of channel c: the bank holds
    ``qb`` bursts or the channel ``qc`` (the drain write policy: ``qc`` reads or
    ``write_queue_size`` writes)."""
    LD, PA = S.LD, S.PA
    if LD[c, b] >= qb:
        return True
    if PA[A_WPOL] == _WRITE_DRAIN:
        return (LD[c, tot + 2] >= PA[A_QW]) if wr else (LD[c, tot + 1] >= qc)
    return LD[c, tot] >= qc


@njit
def _new_request(S, rid, arr, n_bursts, wr):
    """A request slot (id, arrival, bursts outstanding, write flag); returns the slot."""
    RQ, RQFREE = S.RQ, S.RQFREE
    slot = RQFREE[RQFREE[0]]
    RQFREE[0] -= 1
    RQ[slot, Q_RID] = rid
    RQ[slot, Q_ARR] = arr
    RQ[slot, Q_REM] = n_bursts
    RQ[slot, Q_DONE] = -1
    RQ[slot, Q_WR] = wr
    S.GL[G_OUTM] += 1
    return slot


@njit_inline
def _queue_single(S, GB, tot, qb, qc, check,
                  x, arr, rid, wr):
    """Queue one single-burst request (burst address ``x``, arrival ``arr`` in memory cycles,
    id ``rid``, write flag ``wr``) on its channel's input FIFO. With ``check``, returns False and
    queues nothing when its bank already holds ``qb`` bursts or its channel ``qc``
    (:func:`_full`). DEC: (shift, mask) of ch, ra, bg, ba, ro, co; GB: banks per rank; tot: the
    column of LD that counts the channel's bursts (reads and writes in the next two)."""
    PA, DEC = S.PA, S.DEC
    c = (x >> DEC[0, 0]) & DEC[0, 1]
    b = ((x >> DEC[1, 0]) & DEC[1, 1]) * GB + ((x >> DEC[2, 0]) & DEC[2, 1]) * PA[A_B] \
        + ((x >> DEC[3, 0]) & DEC[3, 1])
    if check and _full(S, tot, qb, qc, c, b, wr):
        return False
    _push_burst(S, tot, _new_request(S, rid, arr, 1, wr), x, c, b, arr, wr)
    return True


@njit_inline
def _queue_request(S, GB, tot, qb, qc, addr, size, arr, rid, wr):
    """Queue one request of ``size`` bytes at byte ``addr`` (arrival ``arr`` in memory cycles,
    id ``rid``, write flag ``wr``) split into the bursts it touches, after the queue-full check
    of ``can_accept`` on its first burst (returns False and queues nothing when that check
    fails): what ``KernelMemory.can_accept`` + ``submit`` and the next ``_push_bursts`` queue
    for it (burst counts per bank and channel, one request slot with the burst count, the
    bursts in address order, each arrival raised to the channel's next cycle; for a request
    inside one burst exactly what :func:`_queue_single` queues)."""
    PA, DEC = S.PA, S.DEC
    bb = PA[A_BB]
    first = addr // bb
    nb = (addr + size - 1) // bb - first + 1
    slot = -1
    for j in range(nb):
        x = (first + j) * bb
        c = (x >> DEC[0, 0]) & DEC[0, 1]
        b = ((x >> DEC[1, 0]) & DEC[1, 1]) * GB + ((x >> DEC[2, 0]) & DEC[2, 1]) * PA[A_B] \
            + ((x >> DEC[3, 0]) & DEC[3, 1])
        if j == 0:
            if _full(S, tot, qb, qc, c, b, wr):
                return False
            slot = _new_request(S, rid, arr, nb, wr)
        _push_burst(S, tot, slot, x, c, b, arr, wr)
    return True


@njit
def _submit_many(S, addr, arr, rid, wr, check,
                 qb, qc):
    """Queue single-burst requests in order until one finds its queue full (``check``).
    DEC: (shift, mask) of ch, ra, bg, ba, ro, co (the address mapping)."""
    PA = S.PA
    GB = PA[A_G] * PA[A_B]
    tot = PA[A_LTOT]
    for i in range(addr.shape[0]):
        if not _queue_single(S, GB, tot, qb, qc,
                             check, addr[i], arr[i], rid[i], wr):
            return i
    return addr.shape[0]


@njit_inline
def _stage_push(S, c, bi, arr, bank):
    """Append burst ``bi`` to channel c's input FIFO and keep its cached decision exact: a
    burst behind others changes nothing; a new head adds the internal event of its admission
    (at ``max(arrival, t_min)`` when its queue has room), exactly as ``_decide`` would."""
    CS, STG = S.CS, S.STG
    cap = STG.shape[1]
    was_empty = CS[c, C_SH] == CS[c, C_ST]
    STG[c, CS[c, C_ST] & (cap - 1)] = bi
    CS[c, C_ST] += 1
    if arr < CS[c, C_FIRST]:
        CS[c, C_FIRST] = arr
    if CS[c, C_WTENT] == 1:
        # the write mode was chosen by a query without this burst: choose again
        CS[c, C_WMODE] ^= 1
        CS[c, C_WTENT] = 0
        CS[c, C_NEVOK] = 0
        CS[c, C_PBOK] = 0
        for b in range(S.BK.shape[1]):
            S.BK[c, b, B_CV] = 0
        return
    if was_empty and CS[c, C_NEVOK] == 1:
        if _admissible(S, c, bank, S.BU[bi, U_WR]):
            t0 = CS[c, C_TMIN]
            ev = arr if arr > t0 else t0
            if ev <= CS[c, C_NEV]:
                # the admission comes first (it wins a tie with an action)
                CS[c, C_NEV] = ev
                CS[c, C_NKIND] = 1


@njit
def _push_pim(S, c, rid, cmd, arrival, est, mask, row, n, nsub):
    """Queue a PIM request on channel c's PIM queue (MemorySystem.submit_pim): command index
    ``cmd``, arrival ``max(arrival, now + 1)`` (tCK), the PIM_HEADER's sequence estimate
    ``est`` (cycles), G_ACT bank-group ``mask`` and ``row``, ``n`` COMPs / GEMV k / header
    GEMVs, ``nsub`` sub-commands. The caller guarantees a free PO slot and room in PQ."""
    CS, PO, PQ, POFREE, GL = S.CS, S.PO, S.PQ, S.POFREE, S.GL
    if arrival < CS[c, C_NOW] + 1:
        arrival = CS[c, C_NOW] + 1
    op = POFREE[POFREE[0]]
    POFREE[0] -= 1
    PO[op, P_RID] = rid
    PO[op, P_KIND] = cmd
    PO[op, P_ARR] = arrival
    PO[op, P_EST] = est
    PO[op, P_MASK] = mask
    PO[op, P_ROW] = row
    PO[op, P_N] = n
    PO[op, P_CUR] = 0
    PO[op, P_NSUB] = nsub
    PQ[c, CS[c, C_PT] & (PQ.shape[1] - 1)] = op
    CS[c, C_PT] += 1
    CS[c, C_NEVOK] = 0
    CS[c, C_PBOK] = 0
    if arrival < CS[c, C_FIRST]:
        CS[c, C_FIRST] = arrival
    CS[c, C_PINF] += 1
    GL[G_OUTP] += 1


@njit
def _run_to_idle(S):
    """Issue commands on every channel until its queues are empty (ChannelController.
    run_to_idle; channels are independent). Returns -1 when done, ST_LOG_FULL (call again after
    growing LOG), or the channel + 16 of a deadlock (work left that can never issue)."""
    CS, GL, LOG = S.CS, S.GL, S.LOG
    logcap = LOG.shape[0]
    for c in range(CS.shape[0]):
        while _has_work(CS, c):
            if GL[G_LOGON] == 1 and GL[G_NLOG] + 4 >= logcap:
                return ST_LOG_FULL
            tt, cmd, b, x, kind = _decide(S, c, INF - 1)
            if GL[G_STATUS] == ST_ERROR:
                return ST_ERROR
            if kind != 2:
                return 16 + c
            _issue(S, c, tt, cmd, b, x)
        if CS[c, C_TMIN] - 1 > CS[c, C_NOW]:
            CS[c, C_NOW] = CS[c, C_TMIN] - 1
        CS[c, C_NEVOK] = 0
    return -1


@njit
def _pop_all(S, done):
    """Pop every completion in the queue; ``done[request id] = completion cycle`` (request ids
    0..N-1, trace replay) and the latencies counted in MLAT / PLAT."""
    CS, CQ, GL, MLAT, PLAT = S.CS, S.CQ, S.GL, S.MLAT, S.PLAT
    while GL[G_NCQ] > 0:
        tc, rid, lat, kind = _cq_pop(CQ, GL)
        if 0 <= rid < done.shape[0]:
            done[rid] = tc
        if kind == 0:
            _note_latency(MLAT, GL, G_NMLAT, lat)
            GL[G_OUTM] -= 1
        else:
            CS[kind - 1, C_PINF] -= 1
            _note_latency(PLAT, GL, G_NPLAT, lat)
            GL[G_OUTP] -= 1
