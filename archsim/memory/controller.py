"""Cycle-exact, event-driven HBM2 + PIM channel controller (the exact path).

One :class:`ChannelController` per channel; channels share nothing, so each is simulated on
its own clock and :class:`archsim.memory.system.MemorySystem` only routes requests.

Scheduling policy (documented here because the fast path and the tests mirror it):

* **Queues.** A request is split into bursts (``memory.org.burst_bytes``). Bursts enter the
  channel's input FIFO at their arrival cycle and move, in order, into bounded per-bank queues
  (``controller.queue_size_per_bank``; at most ``controller.command_queue_size`` bursts queued
  per channel). The FIFO head blocks when its queue is full (head-of-line), a slot freed by a
  column command at cycle t is usable from t + 1. ``can_accept`` reports whether the queue of an
  address has room.
* **Commands.** At most one command per cycle per channel (command bus). Every command issues
  at the earliest cycle at which all rules of :data:`archsim.memory.spec.CONSTRAINTS` hold; the
  controller jumps from one such cycle to the next (event driven, never a loop over idle cycles).
* **Choice among commands ready at the same cycle** (lower wins): 0 refresh (PRE to drain a
  rank, REF), 1 PIM and mode switches, 2 memory row hits (RD/WR to the open row), 3 other memory
  commands (PRE of a row with no queued hit, ACT of the oldest request's row); ties by age
  (oldest burst first) — FR-FCFS with an open-page policy (a row stays open until a queued
  request needs another row of that bank).
* **Refresh.** All-bank REF per rank every tREFI (ranks of a channel fall due together): from
  the due cycle the rank takes no new activation, its open memory rows are precharged and REF
  issues (then the rank is busy for tRFC). If a PIM row of the rank is open when the refresh
  falls due, the refresh is *postponed* until the PIM sequence closes it (PIM_PRECHARGE) and
  memory traffic continues meanwhile (JEDEC allows postponing up to 8 REFs).
  **PIM_HEADER** announces a GEMV sequence; if its estimated latency
  (:func:`pim_sequence_estimate_cycles`) would run past the next due refresh, the controller
  *pulls the refresh in*: it refreshes the channel's ranks first, then runs the GEMVs, so they
  fit before the following refresh (JEDEC allows pulling in up to 8 REFs).
* **PIM.** PIM requests are served in order from a per-channel queue; each is broadcast to all
  banks (lockstep). A G_ACT request becomes one G_ACT per (rank, bank group) of its mask
  (bank-group-major, ranks interleaved), each weighing ``banks_per_group`` activations in tFAW.
  ``dual`` mode: PIM state is separate per bank, PIM commands take priority on the command bus
  and memory traffic continues. ``single`` (blocked) mode: when a PIM request waits, memory
  traffic stops, open rows are precharged and PIM_ENTER issues (``pim.mode_switch_cycles``);
  when the PIM queue is empty, all PIM rows are closed and memory requests wait, PIM_EXIT
  issues (again ``mode_switch_cycles``).
* **Completion.** A read burst completes CL + BL after its RD, a write burst CWL + BL after its
  WR; a request completes with its last burst.

**Speed (same results).** With ``memo=True`` (``MemorySystem(engine="exact")``, the default) the
controller keeps its last decision until its state changes (a push into an empty FIFO, a PIM
push, an issue), caches each bank's candidate until its queue or open row changes and each
timing node's earliest-issue cycles until it records, and scans only banks with queued bursts;
``memo=False`` (``engine="exact-py"``) runs the reference :meth:`ChannelController._decide_ref`
at every query. ``tests/test_memport_speed_identity.py`` checks both call for call.

Sources: JEDEC JESD235 (HBM2); Rixner et al., ISCA 2000 (FR-FCFS); Newton (MICRO 2020);
NeuPIMs (ASPLOS 2024).
"""
from __future__ import annotations

import heapq
from collections import deque

from archsim.errors import SimulationError
from archsim.memory.bank import NCMD, BankTimingModel, TimingNode
from archsim.memory.spec import CMD_INDEX, CompiledTable, gemv_cycles

INF = 1 << 62
_UNKNOWN = object()   # ChannelController._dec: no memoised decision
ACT, PRE, RD, WR, REF = (CMD_INDEX[c] for c in ("ACT", "PRE", "RD", "WR", "REF"))
G_ACT, COMP, READRES, GEMV, PIM_PRE, GWRITE, HEADER, ENTER, EXIT = (
    CMD_INDEX[c] for c in ("G_ACT", "COMP", "READRES", "PIM_GEMV", "PIM_PRE", "GWRITE",
                           "PIM_HEADER", "PIM_ENTER", "PIM_EXIT"))


def pim_sequence_estimate_cycles(cfg, n_gemvs: int, k: int) -> int:
    """Estimated cycles (tCK) of ``n_gemvs`` row-GEMVs of ``k`` COMP steps each, as the
    controller estimates it for PIM_HEADER (NeuPIMs §4: the header lets the controller fit the
    GEMV before a refresh).

    Per row-GEMV: opening every bank group of a rank at one G_ACT per tFAW
    (``bank_groups × tFAW``), tRCDRD, the PIM_GEMV itself (:func:`gemv_cycles`) and tRP.
    """
    t = cfg.memory.timing
    per = (cfg.memory.org.bank_groups * t.tFAW + t.tRCDRD + gemv_cycles(k, cfg) + t.tRP)
    return max(0, n_gemvs) * per


class Burst:
    """One burst-sized piece of a request, queued at one bank. Cycles are tCK."""

    __slots__ = ("seq", "req", "bank", "ra", "bg", "ba", "row", "col", "is_write", "arrival")

    def __init__(self, seq, req, bank, ra, bg, ba, row, col, is_write, arrival):
        self.seq, self.req, self.bank = seq, req, bank
        self.ra, self.bg, self.ba, self.row, self.col = ra, bg, ba, row, col
        self.is_write, self.arrival = is_write, arrival


class ReqTracker:
    """Completion bookkeeping of one request: bursts still to go and the latest burst end."""

    __slots__ = ("req_id", "arrival", "remaining", "done", "is_write", "size_bytes")

    def __init__(self, req_id, arrival, remaining, is_write, size_bytes):
        self.req_id, self.arrival, self.remaining = req_id, arrival, remaining
        self.done, self.is_write, self.size_bytes = -1, is_write, size_bytes


class _PimOp:
    """A queued PIM request expanded into its DRAM commands ``(cmd, rank, bg, row, col)``."""

    __slots__ = ("req_id", "kind", "subs", "arrival", "est")

    def __init__(self, req_id, kind, subs, arrival, est=0):
        self.req_id, self.kind, self.subs, self.arrival, self.est = (
            req_id, kind, deque(subs), arrival, est)


class ChannelController:
    """The exact, event-driven controller of one channel (see the module docstring).

    Args:
        cfg: :class:`archsim.config.MachineConfig`.
        channel: channel index (for the log).
        table: the :class:`CompiledTable` for ``cfg`` and its row-buffer mode.

    The log is a list of tuples ``(cycle, channel, rank, bankgroup, bank, command, row,
    column)`` (-1 for fields a broadcast command does not name; ``column`` carries the COMP
    index, the k of a PIM_GEMV and the GEMV count of a PIM_HEADER).
    """

    def __init__(self, cfg, channel: int, table: CompiledTable, memo: bool = True) -> None:
        org, t = cfg.memory.org, cfg.memory.timing
        # Decision memo (speed only, results identical): the last result of _decide, valid
        # until the channel's state changes (a push, an issue). ``memo=False`` is the
        # reference behaviour (every query re-runs _decide).
        self.memo = memo
        self._dec = _UNKNOWN
        # memo engine: each bank's memory candidate (cmd, burst, key), valid until the bank's
        # queue or open row changes; timing nodes' earliest values cached until they record
        self._decide = self._decide_fast if memo else self._decide_ref
        self.cfg, self.channel = cfg, channel
        self.R, self.G, self.B = org.ranks, org.bank_groups, org.banks_per_group
        self.nb = self.R * self.G * self.B
        self.dual = table.mode == "dual"
        self.chan = TimingNode(table, ("channel",))
        self.rank_nodes = [TimingNode(table, ("rank",)) for _ in range(self.R)]
        self.bg_nodes = [TimingNode(table, ("bankgroup",)) for _ in range(self.R * self.G)]
        self.banks = [BankTimingModel(cfg, self.dual, ("bank",), table=table)
                      for _ in range(self.nb)]
        self.bank_q: list[list[Burst]] = [[] for _ in range(self.nb)]
        self._cand: list = [None] * self.nb
        self._busy: set[int] = set()     # banks with a non-empty queue
        self.staging: deque[Burst] = deque()
        self.nq = 0
        self.load = [0] * self.nb      # bursts per bank, queued or in the FIFO
        self.total_load = 0
        self.q_bank = cfg.memory.controller.queue_size_per_bank
        self.q_chan = cfg.memory.controller.command_queue_size
        self.pim_q: deque[_PimOp] = deque()
        self.now = -1
        self.t_min = 0
        self.refresh = cfg.memory.refresh.enabled
        self.tREFI = t.tREFI
        self.ref_due = [t.tREFI if self.refresh else INF] * self.R
        self.ref_pending = [False] * self.R
        self.mode_pim = False           # single mode: channel is in PIM mode
        self.log: list[tuple] = []
        self.completions: list[tuple[int, int]] = []
        self.counts = [0] * NCMD
        self.bytes_read = 0
        self.bytes_written = 0
        self.first_cycle = INF
        self.last_data_cycle = 0
        self.open_count = 0            # banks with any open row (for background energy)
        self.open_since = 0
        self.active_cycles = 0         # cycles with at least one open row
        self.pim_act_banks = self.pim_pre_banks = self.comp_bank_steps = 0
        n = table.names
        self.CL, self.CWL, self.BL = n["CL"], n["CWL"], n["BL"]
        self.burst_bytes = org.burst_bytes
        self.tRCDRD, self.tRP, self.CSTEP = n["tRCDRD"], n["tRP"], n["CSTEP"]
        self.readres, self.gwrite = n["READRES"], n["GWRITE"]
        self.tRFC = n["tRFC"]
        self.default_k = org.columns // org.burst_length

    # ------------------------------------------------------------------ input
    def room_for(self, bank: int) -> bool:
        """True when bank ``bank`` has fewer than ``queue_size_per_bank`` bursts waiting
        (queued or still in the input FIFO) and the channel fewer than
        ``command_queue_size`` — i.e. one more burst would enter its queue at once."""
        return self.load[bank] < self.q_bank and self.total_load < self.q_chan

    def push_burst(self, b: Burst) -> None:
        """Append a burst to the input FIFO (its ``arrival`` already >= now + 1)."""
        if not self.staging:
            # a burst queued behind a non-empty FIFO cannot change the next decision: _decide
            # looks only at the FIFO head, which stays blocked (or in the future) until an
            # issue or an advance changes the state
            self._dec = _UNKNOWN
        self.staging.append(b)
        self.load[b.bank] += 1
        self.total_load += 1
        if b.arrival < self.first_cycle:
            self.first_cycle = b.arrival

    def push_pim(self, req) -> None:
        """Queue a :class:`archsim.memport.PimRequest` (expanded into DRAM commands)."""
        kind = req.kind.value if hasattr(req.kind, "value") else str(req.kind)
        arrival = max(req.arrival_cycle, self.now + 1)
        est = 0
        if kind == "G_ACT":
            mask = req.bank_group_mask or ((1 << self.G) - 1)
            if not 0 <= req.row < self.cfg.memory.org.rows:
                raise SimulationError(f"G_ACT row {req.row} out of range "
                                      f"0..{self.cfg.memory.org.rows - 1}")
            subs = [(G_ACT, r, g, req.row, -1) for g in range(self.G) if mask >> g & 1
                    for r in range(self.R)]
            if not subs:
                raise SimulationError(f"G_ACT bank_group_mask {mask:#x} names no bank group")
        elif kind == "COMP":
            if req.n_comps < 1:
                raise SimulationError("COMP needs n_comps >= 1")
            subs = [(COMP, -1, -1, -1, i) for i in range(req.n_comps)]
        elif kind == "PIM_GEMV":
            if req.n_comps < 1:
                raise SimulationError("PIM_GEMV needs n_comps (k) >= 1")
            subs = [(GEMV, -1, -1, -1, req.n_comps)]
        elif kind == "PIM_HEADER":
            k = int(req.extra.get("k", self.default_k)) if req.extra else self.default_k
            est = pim_sequence_estimate_cycles(self.cfg, req.n_comps, k)
            subs = [(HEADER, -1, -1, -1, req.n_comps)]
        elif kind in ("READRES", "GWRITE", "PIM_PRECHARGE", "PIM_PRE"):
            cmd = {"READRES": READRES, "GWRITE": GWRITE}.get(kind, PIM_PRE)
            subs = [(cmd, -1, -1, -1, -1)]
        else:
            raise SimulationError(f"unknown PIM request kind '{kind}'")
        self.pim_q.append(_PimOp(req.req_id, kind, subs, arrival, est))
        self._dec = _UNKNOWN
        if arrival < self.first_cycle:
            self.first_cycle = arrival

    def has_work(self) -> bool:
        """True while requests wait in the FIFO, the bank queues or the PIM queue."""
        return bool(self.staging or self.nq or self.pim_q)

    # ------------------------------------------------------------------ timing helpers
    def _e_bank(self, q: int, b: int) -> int:
        G, B = self.G, self.B
        r = b // (G * B)
        e = self.chan.earliest(q)
        x = self.rank_nodes[r].earliest(q)
        if x > e:
            e = x
        x = self.bg_nodes[b // B].earliest(q)
        if x > e:
            e = x
        x = self.banks[b].earliest(q)
        return x if x > e else e

    def _e_bank_c(self, q: int, b: int) -> int:
        """:meth:`_e_bank` from the nodes' cached earliest values (same value)."""
        B = self.B
        e = self.chan.earliest_cached(q)
        x = self.rank_nodes[b // (self.G * B)].earliest_cached(q)
        if x > e:
            e = x
        x = self.bg_nodes[b // B].earliest_cached(q)
        if x > e:
            e = x
        x = self.banks[b].earliest_cached(q)
        return x if x > e else e

    def _scope(self, cmd: int, r: int, g: int):
        """(rank nodes, bank-group nodes, bank indices) covered by a command."""
        G, B = self.G, self.B
        if cmd == G_ACT:
            return [r], [r * G + g], range((r * G + g) * B, (r * G + g + 1) * B)
        if cmd == REF:
            return [r], range(r * G, (r + 1) * G), range(r * G * B, (r + 1) * G * B)
        return range(self.R), range(self.R * G), range(self.nb)

    def _e_scope(self, q: int, r: int, g: int) -> int:
        ranks, bgs, banks = self._scope(q, r, g)
        e = self.chan.earliest(q)
        for i in ranks:
            e = max(e, self.rank_nodes[i].earliest(q))
        for i in bgs:
            e = max(e, self.bg_nodes[i].earliest(q))
        for i in banks:
            e = max(e, self.banks[i].earliest(q))
        return e

    # ------------------------------------------------------------------ decision
    def _admit(self, t: int) -> None:
        st, bq = self.staging, self.bank_q
        while st:
            b = st[0]
            if b.arrival > t or len(bq[b.bank]) >= self.q_bank or self.nq >= self.q_chan:
                return
            st.popleft()
            bq[b.bank].append(b)
            self._cand[b.bank] = None
            self._busy.add(b.bank)
            self.nq += 1

    def _pim_rows_open(self, r: int) -> bool:
        n = self.G * self.B
        return any(bk.pim_row is not None for bk in self.banks[r * n:(r + 1) * n])

    def _decide_ref(self, limit: int):
        """Next action as ``(cycle, action)``; ``action`` None means an internal event (an
        arrival or a refresh falling due) at ``cycle``. Events at cycles <= ``limit`` are
        processed here; nothing is issued. Returns None when nothing can ever happen. The
        reference: every bank's candidate and every node's timing recomputed."""
        return self._decide_loop(limit, self._scan_ref, self._e_bank)

    def _decide_fast(self, limit: int):
        """:meth:`_decide_ref` with cached per-bank candidates and cached node timings (same
        answer, same state changes; the memo engine)."""
        return self._decide_loop(limit, self._scan_fast, self._e_bank_c)

    def _decide_loop(self, limit: int, scan, e_bank):
        """The decision of :meth:`_decide_ref`; ``scan(t0, drain, best)`` picks the best
        memory-request command (FR-FCFS: row hits first, then the oldest), ``e_bank(cmd, b)``
        is the earliest cycle of ``cmd`` at bank ``b``.

        Priorities at equal cycles (keys): a due refresh first (its ranks are drained: PRE of
        their open banks, then REF; postponed while a PIM row of the rank is open), then the
        PIM request at the head of the PIM queue (dual row buffers: beside memory traffic;
        blocked mode: memory traffic stops, rows close and PIM_ENTER issues, and PIM_EXIT when
        the PIM queue empties), then memory requests."""
        R = self.R
        nbr = self.G * self.B
        banks = self.banks
        ref_pending, ref_due = self.ref_pending, self.ref_due
        no_drain = [False] * R          # shared while no rank drains (never written)
        while True:
            t0 = self.t_min
            if t0 <= limit:
                if self.staging:
                    self._admit(t0)
                for r in range(R):
                    if not ref_pending[r] and ref_due[r] <= t0:
                        ref_pending[r] = True
            best_t, best_key, best = INF, (9, 0), None
            drain = no_drain
            # refresh: drain ranks whose REF is due (postponed while a PIM row is open)
            for r in range(R):
                if not ref_pending[r] or self._pim_rows_open(r):
                    continue
                if drain is no_drain:
                    drain = [False] * R
                drain[r] = True
                closed = True
                for b in range(r * nbr, (r + 1) * nbr):
                    if banks[b].open_row is not None:
                        closed = False
                        tt = max(t0, e_bank(PRE, b))
                        if (tt, (0, b)) < (best_t, best_key):
                            best_t, best_key, best = tt, (0, b), (PRE, b, None)
                if closed:
                    tt = max(t0, self._e_scope(REF, r, -1))
                    if (tt, (0, -1)) < (best_t, best_key):
                        best_t, best_key, best = tt, (0, -1), (REF, r, None)
            mem_ok = True
            if self.dual:
                if self.pim_q:
                    c = self._pim_candidate(t0, drain)
                    if c is not None and (c[0], (1, 0)) < (best_t, best_key):
                        best_t, best_key, best = c[0], (1, 0), c[1]
            else:
                if self.mode_pim:
                    mem_ok = False
                    if self.pim_q:
                        c = self._pim_candidate(t0, drain)
                        if c is not None and (c[0], (1, 0)) < (best_t, best_key):
                            best_t, best_key, best = c[0], (1, 0), c[1]
                    elif (self.staging or self.nq) and not any(
                            bk.pim_row is not None for bk in banks):
                        tt = max(t0, self._e_scope(EXIT, -1, -1))
                        if (tt, (1, 0)) < (best_t, best_key):
                            best_t, best_key, best = tt, (1, 0), (EXIT, -1, None)
                elif self.pim_q:
                    mem_ok = False
                    closed = True
                    for b in range(self.nb):
                        if banks[b].open_row is not None:
                            closed = False
                            tt = max(t0, e_bank(PRE, b))
                            if (tt, (1, b)) < (best_t, best_key):
                                best_t, best_key, best = tt, (1, b), (PRE, b, None)
                    if closed:
                        tt = max(t0, self._e_scope(ENTER, -1, -1))
                        if (tt, (1, 0)) < (best_t, best_key):
                            best_t, best_key, best = tt, (1, 0), (ENTER, -1, None)
            if mem_ok and self.nq:
                best_t, best_key, best = scan(t0, drain, best_t, best_key, best)
            # internal events that could change the choice
            t_ev = INF
            if self.staging:
                h = self.staging[0]
                if len(self.bank_q[h.bank]) < self.q_bank and self.nq < self.q_chan:
                    t_ev = h.arrival if h.arrival > t0 else t0
            for r in range(R):
                if not ref_pending[r]:
                    x = ref_due[r]
                    if x < t0:
                        x = t0
                    if x < t_ev:
                        t_ev = x
            if t_ev <= best_t and t_ev < INF:
                if t_ev <= limit:
                    self.t_min = t_ev       # process the event at the top of the loop
                    continue
                return (t_ev, None)
            if best is None:
                return None
            return (best_t, best)

    def _bank_candidate(self, b: int):
        """FR-FCFS choice at bank ``b`` (queue not empty): ``(cmd, burst, key)``: RD/WR of the
        oldest burst hitting the open row (key ``(2, seq)``), else PRE of the open row, or ACT
        for the oldest burst when the bank is closed (key ``(3, seq of the oldest)``)."""
        q = self.bank_q[b]
        orow = self.banks[b].open_row
        if orow is None:
            return ACT, q[0], (3, q[0].seq)
        for x in q:
            if x.row == orow:
                return (WR if x.is_write else RD), x, (2, x.seq)
        return PRE, None, (3, q[0].seq)

    def _scan_ref(self, t0: int, drain: list[bool], best_t: int, best_key, best):
        """Best memory-request command over every bank (reference scan in bank order):
        ``(cycle, key, (cmd, bank, burst))``, starting from the given best."""
        nbr = self.G * self.B
        for b in range(self.nb):
            if not self.bank_q[b] or drain[b // nbr]:
                continue
            cmd, hit, key = self._bank_candidate(b)
            tt = self._e_bank(cmd, b)
            if tt < t0:
                tt = t0
            if tt < best_t or (tt == best_t and key < best_key):
                best_t, best_key, best = tt, key, (cmd, b, hit)
        return best_t, best_key, best

    def _scan_fast(self, t0: int, drain: list[bool], best_t: int, best_key, best):
        """:meth:`_scan_ref` over the banks with queued bursts, from cached candidates and
        cached node timings (same result)."""
        B = self.B
        nbr = self.G * B
        banks = self.banks
        cand = self._cand
        chan_e = self.chan.earliest_cached
        ce = [-1] * NCMD        # channel-node earliest per command, this decision
        rank_nodes, bg_nodes = self.rank_nodes, self.bg_nodes
        # only banks with queued bursts; the order does not matter: every memory
        # candidate's key (2|3, seq) is unique, so the strict comparison below picks
        # the same winner as the reference's scan in bank order
        for b in self._busy:
            if drain[b // nbr]:
                continue
            c = cand[b]
            if c is None:
                c = cand[b] = self._bank_candidate(b)
            cmd, hit, key = c
            tt = ce[cmd]
            if tt < 0:
                tt = ce[cmd] = chan_e(cmd)
            for nd in (rank_nodes[b // nbr], bg_nodes[b // B], banks[b]):
                ec = nd.ec
                x = ec[cmd] if ec is not None else -1
                if x < 0:
                    x = nd.earliest_cached(cmd)
                if x > tt:
                    tt = x
            if tt < t0:
                tt = t0
            if tt < best_t or (tt == best_t and key < best_key):
                best_t, best_key, best = tt, key, (cmd, b, hit)
        return best_t, best_key, best

    def _pim_candidate(self, t0: int, drain: list[bool]):
        """Earliest cycle and action of the head PIM request's next DRAM command."""
        op = self.pim_q[0]
        cmd, r, g, row, col = op.subs[0]
        t0 = max(t0, op.arrival)
        if cmd == G_ACT:
            if drain[r]:
                return None          # the due refresh of this rank goes first
            base = (r * self.G + g) * self.B
            for bk in self.banks[base:base + self.B]:
                if bk.pim_row is not None or (not self.dual and bk.open_row is not None):
                    raise SimulationError(
                        f"channel {self.channel}: G_ACT (request {op.req_id}) to rank {r} bank "
                        f"group {g} whose PIM row {bk.pim_row} is open; send PIM_PRECHARGE "
                        "first")
        elif cmd in (COMP, GEMV):
            if not any(bk.pim_row is not None for bk in self.banks):
                raise SimulationError(f"channel {self.channel}: {op.kind} (request "
                                      f"{op.req_id}) with no PIM row open; send G_ACT first")
        tt = max(t0, self._e_scope(cmd, r, g))
        return tt, (cmd, -1, op)

    # ------------------------------------------------------------------ issue
    def _note_open(self, t: int, delta: int) -> None:
        if self.open_count == 0 and delta > 0:
            self.open_since = t
        self.open_count += delta
        if self.open_count == 0 and delta < 0:
            self.active_cycles += t - self.open_since

    def _issue(self, t: int, action) -> None:
        cmd, b, x = action
        self._dec = _UNKNOWN
        self.counts[cmd] += 1
        self.t_min = t + 1
        ch = self.channel
        if b >= 0 and cmd in (ACT, PRE, RD, WR):
            self._cand[b] = None
            G, B = self.G, self.B
            r, g, ba = b // (G * B), (b // B) % G, b % B
            bank = self.banks[b]
            self.chan.record(cmd, t)
            self.rank_nodes[r].record(cmd, t)
            self.bg_nodes[b // B].record(cmd, t)
            if cmd == ACT:
                row = x.row
                self._note_open(t, 1)
                bank.apply(cmd, t, row)
                self.log.append((t, ch, r, g, ba, "ACT", row, -1))
            elif cmd == PRE:
                row = bank.open_row
                bank.apply(cmd, t)
                self._note_open(t, -1)
                self.log.append((t, ch, r, g, ba, "PRE", row, -1))
            else:
                bank.apply(cmd, t)
                q = self.bank_q[b]
                q.remove(x)
                if not q:
                    self._busy.discard(b)
                self.nq -= 1
                self.load[b] -= 1
                self.total_load -= 1
                if cmd == RD:
                    done = t + self.CL + self.BL
                    self.bytes_read += self.burst_bytes
                    self.log.append((t, ch, r, g, ba, "RD", x.row, x.col))
                else:
                    done = t + self.CWL + self.BL
                    self.bytes_written += self.burst_bytes
                    self.log.append((t, ch, r, g, ba, "WR", x.row, x.col))
                if done > self.last_data_cycle:
                    self.last_data_cycle = done
                rq = x.req
                if done > rq.done:
                    rq.done = done
                rq.remaining -= 1
                if rq.remaining == 0:
                    heapq.heappush(self.completions, (rq.done, rq.req_id))
            return
        if cmd == REF:
            r = b
            self._record_scope(cmd, t, r, -1)
            self.log.append((t, ch, r, -1, -1, "REF", -1, -1))
            self.ref_pending[r] = False
            self.ref_due[r] += self.tREFI
            return
        if cmd in (ENTER, EXIT):
            self._record_scope(cmd, t, -1, -1)
            self.mode_pim = cmd == ENTER
            self.log.append((t, ch, -1, -1, -1, "PIM_ENTER" if cmd == ENTER else "PIM_EXIT",
                             -1, -1))
            return
        # a PIM command of the head request
        op = x
        c, r, g, row, col = op.subs.popleft()
        k = col if c == GEMV else 0
        if c == G_ACT:
            self._note_open(t, self.B)
            self.pim_act_banks += self.B
        else:
            n_open = sum(bk.pim_row is not None for bk in self.banks)
            if c == PIM_PRE and n_open:
                self._note_open(t, -n_open)
                self.pim_pre_banks += n_open
            elif c == COMP:
                self.comp_bank_steps += n_open
            elif c == GEMV:
                self.comp_bank_steps += n_open * k
        self._record_scope(c, t, r, g, row, k)
        name = {G_ACT: "G_ACT", COMP: "COMP", READRES: "READRES", GEMV: "PIM_GEMV",
                PIM_PRE: "PIM_PRE", GWRITE: "GWRITE", HEADER: "PIM_HEADER"}[c]
        self.log.append((t, ch, r, g, -1, name, row if c == G_ACT else -1, col))
        if c == HEADER:
            for rr in range(self.R):
                if not self.ref_pending[rr] and t + op.est > self.ref_due[rr] and \
                        op.est <= self.tREFI - self.tRFC:
                    self.ref_due[rr] = t + 1    # pull the refresh in before the GEMVs
        if not op.subs:
            self.pim_q.popleft()
            end = {G_ACT: self.tRCDRD, COMP: self.CSTEP, READRES: self.CL + self.readres,
                   GWRITE: self.CWL + self.gwrite, PIM_PRE: self.tRP, HEADER: 1}.get(c)
            if c == GEMV:
                end = gemv_cycles(k, self.cfg)
            heapq.heappush(self.completions, (t + end, op.req_id))
            if t + end > self.last_data_cycle:
                self.last_data_cycle = t + end

    def _record_scope(self, cmd: int, t: int, r: int, g: int, row=None, k: int = 0) -> None:
        ranks, bgs, banks = self._scope(cmd, r, g)
        self.chan.record(cmd, t, k)
        for i in ranks:
            self.rank_nodes[i].record(cmd, t, k)
        for i in bgs:
            self.bg_nodes[i].record(cmd, t, k)
        for i in banks:
            self.banks[i].apply(cmd, t, row, k)

    # ------------------------------------------------------------------ driving
    def next_event(self) -> int | None:
        """Earliest cycle (> now) at which something may happen, or None when idle."""
        nxt = self.completions[0][0] if self.completions else INF
        if self.has_work():
            d = self._dec
            if d is _UNKNOWN or not self.memo:
                d = self._decide(self.now)
                self._dec = d
            if d is not None and d[0] < nxt:
                nxt = d[0]
        return None if nxt >= INF else max(nxt, self.now + 1)

    def advance_to(self, t: int) -> list[tuple[int, int]]:
        """Issue every command up to and including cycle ``t``; return the
        ``(completion cycle, req_id)`` pairs with completion <= t.

        Refreshes keep running while idle (only up to ``t``)."""
        if t <= self.now:
            return self._pop_done(t)
        d = self._dec
        if d is _UNKNOWN or not self.memo or (d is not None and d[0] <= t):
            while True:
                d = self._decide(t)
                if d is None or d[0] > t:
                    break
                if d[1] is None:
                    continue
                self._issue(d[0], d[1])
        # else: the memoised decision says nothing happens up to t; _decide(t) would return it
        # again without changing any state (it processed every event before d[0] already)
        self.now = t
        if self.t_min <= t:
            self.t_min = t + 1
        # Raising t_min to t + 1 <= d[0] leaves _decide's answer unchanged: every candidate
        # and event is max(t_min, x) with an old value >= d[0] >= t + 1, so it is kept.
        self._dec = d
        return self._pop_done(t)

    def _pop_done(self, t: int) -> list[tuple[int, int]]:
        out = []
        c = self.completions
        while c and c[0][0] <= t:
            out.append(heapq.heappop(c))
        return out

    def run_to_idle(self) -> None:
        """Issue commands until every queued request has been served (batch runs).

        Raises SimulationError when work remains that can never issue (e.g. blocked mode with
        a PIM row left open and no PIM request to close it)."""
        while self.has_work():
            d = self._decide(INF - 1)
            if d is None or d[1] is None:
                raise SimulationError(
                    f"channel {self.channel}: deadlock at cycle {self.t_min}: "
                    f"{self.nq + len(self.staging)} bursts and {len(self.pim_q)} PIM requests "
                    "wait but no command can ever issue (a PIM row left open?)")
            self._issue(d[0], d[1])
        if self.t_min - 1 > self.now:
            self.now = self.t_min - 1
        self._dec = _UNKNOWN

    def finish_energy_window(self, t_end: int) -> int:
        """Cycles with at least one open row up to ``t_end`` (closes the running interval)."""
        extra = (t_end - self.open_since) if self.open_count > 0 else 0
        return self.active_cycles + max(0, extra)


__all__ = ["ChannelController", "Burst", "ReqTracker", "pim_sequence_estimate_cycles", "INF"]
