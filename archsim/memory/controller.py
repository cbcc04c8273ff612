"""Cycle-exact, event-driven HBM + PIM channel controller: the readable reference. Over 800
lines because it is one class, :class:`ChannelController`, whose decision loop and command
issue (about 120 lines each) read and update the same queues, bank and refresh state, and
which the compiled kernel (:mod:`archsim.memory.kernel`) mirrors call for call; the rules it
applies already live outside (:mod:`archsim.memory.spec`, :mod:`archsim.memory.policy`).

One :class:`ChannelController` per channel; channels share nothing, so each is simulated on
its own clock and :class:`archsim.memory.system.MemorySystem` only routes requests. The
compiled controller (:mod:`archsim.memory.kernel`) implements exactly this policy on flat
arrays; both take every decision from :mod:`archsim.memory.policy`.

Scheduling policy (documented here because the compiled controller and the tests mirror it):

* **Queues.** A request is split into bursts (``memory.org.burst_bytes``). Bursts enter the
  channel's input FIFO at their arrival cycle and move, in order, into bounded per-bank queues
  (``controller.queue_size_per_bank``; at most ``controller.command_queue_size`` bursts queued
  per channel — with the ``drain`` write policy that many reads plus ``write_queue_size``
  writes). The FIFO head blocks when its queue is full (head-of-line), a slot freed by a
  column command at cycle t is usable from t + 1. ``can_accept`` reports whether the queue of an
  address has room.
* **Commands.** At most one command per cycle per channel (command bus). Every command issues
  at the earliest cycle at which all rules of :data:`archsim.memory.spec.CONSTRAINTS` hold; the
  controller jumps from one such cycle to the next (event driven, never a loop over idle cycles).
* **Choice among commands ready at the same cycle** (lower wins): 0 refresh (PRE to drain a
  refresh unit, REF/REFpb), 1 PIM and mode switches, 2 memory column commands, 3 other memory
  commands (PRE of a row the oldest request does not hit, ACT of the oldest request's row), 4
  timeout precharges; ties by age (oldest burst first). Each bank's candidate comes from
  :func:`archsim.memory.policy.bank_pick` (``scheduler``: FR-FCFS, FCFS or FR-FCFS with a
  row-hit cap) over the bursts of the direction being served (``write_policy`` ``drain``:
  reads or writes, switched between watermarks by :func:`~archsim.memory.policy.
  write_mode_next`; ``mixed``: both), the column command auto-precharges (RDA/WRA) when
  :func:`~archsim.memory.policy.auto_precharge` says so (``page_policy`` closed or
  closed_adaptive), and under the timeout page policy an open row with no queued burst is
  precharged ``page_timeout_cycles`` after its last use.
* **Refresh.** Refresh units (a rank for REFab, a bank for REFpb) fall due by
  ``memory.refresh.mode`` (:mod:`archsim.memory.policy`: all ranks together, ranks staggered,
  or one bank every tREFIpb): from the due cycle the unit takes no new activation, its open
  memory rows are precharged and REF/REFpb issues (then it is busy for tRFC/tRFCpb). If a PIM
  row of the unit is open when the refresh falls due, the refresh is *postponed* until the PIM
  sequence closes it (PIM_PRECHARGE) and memory traffic continues meanwhile (JEDEC allows
  postponing up to 8 REFs). **PIM_HEADER** announces a GEMV sequence; if its estimated latency
  (:func:`pim_sequence_estimate_cycles`) would run past a unit's next due refresh, the
  controller *pulls the refresh in*: it refreshes first, then runs the GEMVs, so they fit
  before the following refresh (JEDEC allows pulling in up to 8 REFs).
* **Newton commands** (``pim.commands: newton``, single row buffer only). There is no
  PIM_HEADER, so nothing pulls a refresh in: a refresh that falls due while a G_ACT's rows are
  open is postponed (the rule above) until the sequence's precharge closes them — the program's
  PIM_PRECHARGE request, sent as the standard all-bank precharge **PREA** (logged so; the
  timing rules of PIM_PRE, which in a single row buffer are those of a precharge) — and then
  issues before the next G_ACT, which waits for the drained unit. A postponement thus lasts
  one row group (one G_ACT, its COMPs and READRESes), far below the 8 postponed REFs JEDEC
  allows; the checker's REFRESH_INTERVAL rule checks it. PIM_HEADER and PIM_GEMV requests are
  rejected (SimulationError: :func:`archsim.memory.spec.newton_request_error`).
* **PIM.** PIM requests are served in order from a per-channel queue holding at most
  ``pim.command_queue_depth`` requests in flight (queued or executing; the sender asks
  :meth:`ChannelController.pim_room`); the controller never reorders them. Each is broadcast to
  all banks (lockstep). A G_ACT request becomes one G_ACT per (rank, bank group) of its mask
  (bank-group-major, ranks interleaved), each weighing ``banks_per_group`` activations in tFAW.
  ``dual`` mode: PIM state is separate per bank, PIM commands take priority on the command bus
  and memory traffic continues. ``single`` (blocked) mode: when a PIM request waits, memory
  traffic stops, open rows are precharged and PIM_ENTER issues (``pim.mode_switch_cycles``);
  when the PIM queue is empty, all PIM rows are closed and memory requests wait, PIM_EXIT
  issues (again ``mode_switch_cycles``).
* **Completion.** A read burst completes CL + BL after its RD/RDA, a write burst CWL + BL after
  its WR/WRA; a request completes with its last burst.

**Speed (same results).** With ``memo=True`` (``MemorySystem(engine="exact")``, the default) the
controller keeps its last decision until its state changes (a push into an empty FIFO, a PIM
push, an issue), caches each bank's candidate until its queue or open row changes and each
timing node's earliest-issue cycles until it records, and scans only banks with queued bursts;
``memo=False`` (``engine="exact-py"``) runs the reference :meth:`ChannelController._decide_ref`
at every query. ``tests/test_memport_speed_identity.py`` checks both call for call.

Sources: JEDEC JESD235 (HBM2), JESD238 (HBM3); Rixner et al., ISCA 2000 (FR-FCFS); Newton
(MICRO 2020); NeuPIMs (ASPLOS 2024); the policy sources in :mod:`archsim.memory.policy`.
"""
from __future__ import annotations

import heapq
from collections import deque

from archsim.errors import SimulationError
from archsim.memory import policy as pol
from archsim.memory.bank import NCMD, BankTimingModel, TimingNode
from archsim.memory.spec import (CMD_INDEX, COMMANDS, CompiledTable, command_names,
                                 gemv_cycles, newton_request_error)

INF = 1 << 62
_UNKNOWN = object()   # ChannelController._dec: no memoised decision
ACT, PRE, RD, WR, RDA, WRA, REF, REFPB = (
    CMD_INDEX[c] for c in ("ACT", "PRE", "RD", "WR", "RDA", "WRA", "REF", "REFpb"))
_MEM = (ACT, PRE, RD, WR, RDA, WRA)
_COL = (RD, WR, RDA, WRA)
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
        self.nq_dir = [0, 0]            # bursts queued at the banks: reads, writes
        self.load = [0] * self.nb      # bursts per bank, queued or in the FIFO
        self.total_load = 0
        self.load_dir = [0, 0]          # bursts queued or in the FIFO: reads, writes
        ctl = cfg.memory.controller
        self.q_bank = ctl.queue_size_per_bank
        self.q_chan = ctl.command_queue_size
        self.pol = pc = pol.codes(cfg)
        self.sched, self.cap, self.page = pc["scheduler"], pc["row_hit_cap"], pc["page"]
        self.timeout = pc["timeout"]
        self.drain_w = pc["write"] == pol.WRITE_DRAIN
        # queue budget per direction under the drain write policy (reads, writes)
        self.q_dir = [self.q_chan, pc["write_queue"]]
        self.wmode = 0                  # direction being served (1: writes; drain policy)
        # wmode chosen at a cycle not yet committed (a query, _decide's t_min > limit): the
        # caller may still queue requests arriving at that cycle, so the choice is undone
        # when a burst is pushed (push_burst) and final once the cycle is committed
        self.wtent = False
        self.streak = [0] * self.nb     # column commands on the open row since its ACT
        self.last_use = [0] * self.nb   # cycle of the open row's ACT or last column command
        self.pim_q: deque[_PimOp] = deque()
        self.pim_depth = pc["pim_depth"]
        self.pim_inflight = 0           # PIM requests pushed and not yet completed
        self._pim_ids: set[int] = set()
        self.now = -1
        self.t_min = 0
        self.refresh = cfg.memory.refresh.enabled
        self.tREFI = t.tREFI
        # refresh units (a rank, or a bank under per-bank refresh): due cycle, pending flag,
        # first bank and bank count, the command that refreshes them
        self.ref_mode = mode = pc["refresh"]
        U = pol.refresh_units(mode, self.R, self.G * self.B)
        refi_pb = cfg.memory.refi_pb_cycles
        self.ref_period = pol.refresh_period(mode, U, t.tREFI, refi_pb)
        self.ref_due = [pol.refresh_first_due(mode, u, U, t.tREFI, refi_pb) if self.refresh
                        else INF for u in range(U)]
        self.ref_pending = [False] * U
        span = pol.refresh_unit_span(mode, self.G, self.B)
        self.ref_banks = [range(b0, b0 + span) for b0 in
                          (pol.refresh_unit_bank(mode, u, self.G, self.B) for u in range(U))]
        self.ref_cmd = REFPB if mode == pol.REF_PER_BANK else REF
        self.ref_trfc = t.tRFCpb if mode == pol.REF_PER_BANK else t.tRFC
        self.mode_pim = False           # single mode: channel is in PIM mode
        self.log: list[tuple] = []
        self.names = command_names(cfg)   # log names (newton: PIM_PRE is logged as PREA)
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
    def room_for(self, bank: int, is_write: bool = False) -> bool:
        """True when bank ``bank`` has fewer than ``queue_size_per_bank`` bursts waiting
        (queued or still in the input FIFO) and the channel fewer than
        ``command_queue_size`` (drain write policy: fewer than that many reads, or fewer than
        ``write_queue_size`` writes) — i.e. one more burst would enter its queue at once."""
        if self.load[bank] >= self.q_bank:
            return False
        if self.drain_w:
            d = 1 if is_write else 0
            return self.load_dir[d] < self.q_dir[d]
        return self.total_load < self.q_chan

    def _admissible(self, b: Burst) -> bool:
        """True when the FIFO head ``b`` has room at its bank and in its channel budget."""
        if len(self.bank_q[b.bank]) >= self.q_bank:
            return False
        if self.drain_w:
            d = 1 if b.is_write else 0
            return self.nq_dir[d] < self.q_dir[d]
        return self.nq < self.q_chan

    def push_burst(self, b: Burst) -> None:
        """Append a burst to the input FIFO (its ``arrival`` already >= now + 1)."""
        if self.wtent:
            # the write mode was chosen by a query without this burst: choose again
            self.wmode ^= 1
            self.wtent = False
            self._cand = [None] * self.nb
            self._dec = _UNKNOWN
        if not self.staging:
            # a burst queued behind a non-empty FIFO cannot change the next decision: _decide
            # looks only at the FIFO head, which stays blocked (or in the future) until an
            # issue or an advance changes the state
            self._dec = _UNKNOWN
        self.staging.append(b)
        self.load[b.bank] += 1
        self.total_load += 1
        self.load_dir[1 if b.is_write else 0] += 1
        if b.arrival < self.first_cycle:
            self.first_cycle = b.arrival

    def pim_room(self) -> bool:
        """True when the channel takes another PIM request (fewer than
        ``pim.command_queue_depth`` in flight: :func:`archsim.memory.policy.pim_accepts`)."""
        return bool(pol.pim_accepts(self.pim_depth, self.pim_inflight))

    def push_pim(self, req) -> None:
        """Queue a :class:`archsim.memport.PimRequest` (expanded into DRAM commands).

        Raises SimulationError for a malformed request. The queue depth is the sender's
        protocol (:meth:`pim_room`; the NPU executor keeps to it); a batch run may queue a
        whole sequence at once, which the controller serves in the same order."""
        kind = req.kind.value if hasattr(req.kind, "value") else str(req.kind)
        err = newton_request_error(self.cfg, kind)
        if err is not None:
            raise SimulationError(f"channel {self.channel}: {err}")
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
        self.pim_inflight += 1
        self._pim_ids.add(req.req_id)
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
        """(rank nodes, bank-group nodes, bank indices) covered by a command (REFpb: ``r``
        is its flat bank index)."""
        G, B = self.G, self.B
        if cmd == G_ACT:
            return [r], [r * G + g], range((r * G + g) * B, (r * G + g + 1) * B)
        if cmd == REF:
            return [r], range(r * G, (r + 1) * G), range(r * G * B, (r + 1) * G * B)
        if cmd == REFPB:
            return [r // (G * B)], [r // B], range(r, r + 1)
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
            if b.arrival > t or not self._admissible(b):
                return
            st.popleft()
            bq[b.bank].append(b)
            self._cand[b.bank] = None
            self._busy.add(b.bank)
            self.nq += 1
            self.nq_dir[1 if b.is_write else 0] += 1

    def _pim_open_in(self, banks) -> bool:
        """True when a bank of ``banks`` (indices) has its PIM row open."""
        bk = self.banks
        return any(bk[b].pim_row is not None for b in banks)

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
        memory-request command (:meth:`_bank_candidate` at every bank with queued bursts),
        ``e_bank(cmd, b)`` is the earliest cycle of ``cmd`` at bank ``b``.

        Priorities at equal cycles (keys): a due refresh first (its unit is drained: PRE of
        its open banks, then REF/REFpb; postponed while a PIM row of the unit is open), then
        the PIM request at the head of the PIM queue (dual row buffers: beside memory traffic;
        blocked mode: memory traffic stops, rows close and PIM_ENTER issues, and PIM_EXIT when
        the PIM queue empties), then memory requests, then timeout precharges."""
        nb = self.nb
        banks = self.banks
        ref_pending, ref_due, ref_banks = self.ref_pending, self.ref_due, self.ref_banks
        U = len(ref_due)
        no_drain = [False] * nb         # shared while no unit drains (never written)
        while True:
            t0 = self.t_min
            if t0 <= limit:
                if self.staging:
                    self._admit(t0)
                for u in range(U):
                    if not ref_pending[u] and ref_due[u] <= t0:
                        ref_pending[u] = True
            if self.drain_w:
                if t0 <= limit:
                    self.wtent = False
                w = pol.write_mode_next(pol.WRITE_DRAIN, self.wmode, self.nq_dir[0], self.nq_dir[1],
                                        self.pol["write_hi"], self.pol["write_lo"])
                if w != self.wmode:
                    self.wmode = w
                    self._cand = [None] * nb
                    if t0 > limit:
                        self.wtent = not self.wtent
            best_t, best_key, best = INF, (9, 0), None
            drain = no_drain
            # refresh: drain units whose REF is due (postponed while a PIM row is open)
            for u in range(U):
                if not ref_pending[u] or self._pim_open_in(ref_banks[u]):
                    continue
                if drain is no_drain:
                    drain = [False] * nb
                closed = True
                for b in ref_banks[u]:
                    drain[b] = True
                    if banks[b].open_row is not None:
                        closed = False
                        tt = max(t0, e_bank(PRE, b))
                        if (tt, (0, b)) < (best_t, best_key):
                            best_t, best_key, best = tt, (0, b), (PRE, b, None)
                if closed:
                    if self.ref_cmd == REF:
                        tt = max(t0, self._e_scope(REF, u, -1))
                    else:
                        tt = max(t0, e_bank(REFPB, ref_banks[u][0]))
                    if (tt, (0, -1)) < (best_t, best_key):
                        best_t, best_key, best = tt, (0, -1), (self.ref_cmd, u, None)
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
                    for b in range(nb):
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
            if mem_ok and self.page == pol.PAGE_TIMEOUT:
                # an open row with no queued burst closes page_timeout_cycles after its use
                for b in range(nb):
                    if banks[b].open_row is None or self.bank_q[b] or drain[b]:
                        continue
                    tt = max(t0, e_bank(PRE, b),
                             pol.idle_close_cycle(self.page, self.timeout, self.last_use[b]))
                    if (tt, (4, b)) < (best_t, best_key):
                        best_t, best_key, best = tt, (4, b), (PRE, b, None)
            # internal events that could change the choice
            t_ev = INF
            if self.staging:
                h = self.staging[0]
                if self._admissible(h):
                    t_ev = h.arrival if h.arrival > t0 else t0
            for u in range(U):
                if not ref_pending[u]:
                    x = ref_due[u]
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
        """The choice at bank ``b`` (queue not empty) as ``(cmd, burst, key)``, or None when
        no queued burst is of the direction being served: the scheduler's pick
        (:func:`archsim.memory.policy.bank_pick` over the oldest burst and the oldest one
        hitting the open row) — a column command (RD/WR, or RDA/WRA when
        :func:`~archsim.memory.policy.auto_precharge`), PRE of the open row, or ACT for the
        oldest burst; key ``(class, seq)`` with the class of
        :func:`~archsim.memory.policy.key_class` and the age of the burst served (the oldest
        burst's for PRE/ACT)."""
        q = self.bank_q[b]
        orow = self.banks[b].open_row
        mixed = not self.drain_w
        wdir = self.wmode == 1
        oldest = hit = None
        hits = 0
        for x in q:
            if orow is not None and x.row == orow:
                hits += 1
                if hit is None and (mixed or x.is_write == wdir):
                    hit = x
            if oldest is None and (mixed or x.is_write == wdir):
                oldest = x
        if oldest is None:
            return None
        sched = self.sched
        pick = pol.bank_pick(sched, self.cap, orow is not None, self.streak[b],
                             hit is not None, orow is not None and oldest.row == orow)
        if pick == pol.PICK_ACT:
            return ACT, oldest, (pol.key_class(sched, 0), oldest.seq)
        if pick == pol.PICK_PRE:
            return PRE, None, (pol.key_class(sched, 0), oldest.seq)
        x = hit if pick == pol.PICK_HIT else oldest
        if pol.auto_precharge(self.page, hits > 1):
            cmd = WRA if x.is_write else RDA
        else:
            cmd = WR if x.is_write else RD
        return cmd, x, (pol.key_class(sched, 1), x.seq)

    def _scan_ref(self, t0: int, drain: list[bool], best_t: int, best_key, best):
        """Best memory-request command over every bank (reference scan in bank order):
        ``(cycle, key, (cmd, bank, burst))``, starting from the given best."""
        for b in range(self.nb):
            if not self.bank_q[b] or drain[b]:
                continue
            c = self._bank_candidate(b)
            if c is None:
                continue
            cmd, hit, key = c
            tt = self._e_bank(cmd, b)
            if tt < t0:
                tt = t0
            if tt < best_t or (tt == best_t and key < best_key):
                best_t, best_key, best = tt, key, (cmd, b, hit)
        return best_t, best_key, best

    _NONE = (None,)      # cached "no candidate in this direction" (see _scan_fast)

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
        none = self._NONE
        # only banks with queued bursts; the order does not matter: every memory
        # candidate's key (class, seq) is unique, so the strict comparison below picks
        # the same winner as the reference's scan in bank order
        for b in self._busy:
            if drain[b]:
                continue
            c = cand[b]
            if c is None:
                c = self._bank_candidate(b)
                c = cand[b] = none if c is None else c
            if c is none:
                continue
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
        """Earliest cycle and action of the head PIM request's next DRAM command (None while
        a due refresh of the banks a G_ACT opens goes first)."""
        op = self.pim_q[0]
        cmd, r, g, row, col = op.subs[0]
        t0 = max(t0, op.arrival)
        if cmd == G_ACT:
            base = (r * self.G + g) * self.B
            if any(drain[base:base + self.B]):
                return None          # the due refresh of these banks goes first
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
        self.wtent = False
        self.counts[cmd] += 1
        self.t_min = t + 1
        ch = self.channel
        if b >= 0 and cmd in _MEM:
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
                self.streak[b] = 0
                self.last_use[b] = t
                self.log.append((t, ch, r, g, ba, "ACT", row, -1))
            elif cmd == PRE:
                row = bank.open_row
                bank.apply(cmd, t)
                self._note_open(t, -1)
                self.log.append((t, ch, r, g, ba, "PRE", row, -1))
            else:
                bank.apply(cmd, t)
                if cmd == RDA or cmd == WRA:       # the auto-precharge closes the row
                    self._note_open(t, -1)
                self.streak[b] += 1
                self.last_use[b] = t
                q = self.bank_q[b]
                q.remove(x)
                if not q:
                    self._busy.discard(b)
                d = 1 if x.is_write else 0
                self.nq -= 1
                self.nq_dir[d] -= 1
                self.load[b] -= 1
                self.total_load -= 1
                self.load_dir[d] -= 1
                if not d:
                    done = t + self.CL + self.BL
                    self.bytes_read += self.burst_bytes
                else:
                    done = t + self.CWL + self.BL
                    self.bytes_written += self.burst_bytes
                self.log.append((t, ch, r, g, ba, COMMANDS[cmd], x.row, x.col))
                if done > self.last_data_cycle:
                    self.last_data_cycle = done
                rq = x.req
                if done > rq.done:
                    rq.done = done
                rq.remaining -= 1
                if rq.remaining == 0:
                    heapq.heappush(self.completions, (rq.done, rq.req_id))
            return
        if cmd == REF or cmd == REFPB:
            u = b
            if cmd == REF:
                self._record_scope(cmd, t, u, -1)
                self.log.append((t, ch, u, -1, -1, "REF", -1, -1))
            else:
                bb = self.ref_banks[u][0]
                self._cand[bb] = None
                self._record_scope(cmd, t, bb, -1)
                G, B = self.G, self.B
                self.log.append((t, ch, bb // (G * B), (bb // B) % G, bb % B, "REFpb", -1,
                                 -1))
            self.ref_pending[u] = False
            self.ref_due[u] += self.ref_period
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
        name = self.names[c]
        self.log.append((t, ch, r, g, -1, name, row if c == G_ACT else -1, col))
        if c == HEADER:
            due = self.ref_due
            for u in range(len(due)):
                if not self.ref_pending[u]:     # pull the refresh in before the GEMVs
                    due[u] = pol.refresh_pull_in(op.est, due[u], t, self.tREFI, self.ref_trfc)
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
        self.wtent = False              # no request arriving at or before t can come any more
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
        ids = self._pim_ids
        while c and c[0][0] <= t:
            x = heapq.heappop(c)
            if x[1] in ids:
                ids.discard(x[1])
                self.pim_inflight -= 1
            out.append(x)
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
