"""The compiled controller behind the :class:`archsim.memport.MemoryPort` contract.

:class:`KernelMemory` owns the state arrays of the kernel (:mod:`archsim.memory.kernel.layout`),
grows them, converts requests and results at the boundary, and calls the kernel's API
(:mod:`archsim.memory.kernel.drive`). It answers every MemoryPort call exactly as the reference
:class:`archsim.memory.system.MemorySystem` does (``tests/test_system_fastmem.py``: same
completions, command log and statistics call for call), and it replays whole traces
(:meth:`KernelMemory.run_to_idle`, ``archsim mem run``) with the same results as the reference's
batch run (``tests/test_memory_fast.py``). The module does no I/O and prints nothing.

Speed (one core, GPT3-7B TP4 clb-0 layer of ``benchmarks/bench_system.py``: 5.0 M commands,
3.9 M DMA requests, 8.5 M scheduling decisions): ≈ 1.6 s in the kernels on the 2026-12-05
machine, ≈ 0.3 µs per issued command. What it takes: no reference counting in the kernels; a
channel's decision cached until it is due or the channel changes (``C_NEV``..``C_NX``), each
bank's FR-FCFS candidate until its queue, open row or bank-group timing changes (``B_CV``..),
only banks with a queue walked (``C_QMASK``), ``_record`` walking only the rules a command has
at a level; a decision that follows only admissions re-examining only the banks they touched
(``C_PBOK``..``C_DIRTY``; 3.1 M of the 8.5 M decisions); the channel- and rank-level
earliest-cycle table kept until a command is recorded (``C_ET``); the completion queue a sorted
ring (``issue._cq_push``); no runtime division in the hot paths (the banks' constant columns
``B_RK``..``B_BA``, rings indexed by mask); the tFAW window a per-rank bound (``R_WBA``).
"""
from __future__ import annotations

import numpy as np

from archsim.errors import SimulationError
from archsim.memory import policy as pol
from archsim.memory.addrmap import AddressMapping
from archsim.memory.cmdlog import CommandRecord
from archsim.memory.kernel.drive import (_advance_all, _next_event, _pop_all, _push_bursts,
                                         _push_pim, _run_to_idle, _submit_many)
from archsim.memory.kernel.layout import (A_B, A_BB, A_BL, A_CAP, A_CL, A_CSTEP, A_CWL,
                                          A_DEFAULT, A_DEFK, A_FAST, A_DUAL, A_FILL, A_G, A_GWR,
                                          A_LTOT, A_NU, A_PAGE, A_PDEPTH, A_QB, A_QC, A_QW,
                                          A_R, A_RDRES, A_REFM, A_REFPER, A_SCHED, A_TMO,
                                          A_TRCD, A_TREFI, A_TRFC, A_TRFCU, A_TRP, A_WACT,
                                          A_WGACT, A_WHI, A_WLO, A_WN, A_WPOL, A_WSPAN, ACT,
                                          B_BA, B_OPEN, B_PIM, B_Q0, B_RK, NRS, R_WBA, C_PINF,
                                          line_array, C_ACTIVE, C_BR, C_BW, C_CSTEPS, C_FIRST,
                                          C_LAST, C_NCMDS, C_NOW, C_OPEN, C_OSINCE, C_PACT,
                                          C_PBUSY, C_PCOMP, C_PH, C_PPRE, C_PT, C_SH, C_ST,
                                          COMP, G_ACT, G_CQH, G_ERRC, G_ERRX, G_LOGON,
                                          G_DIRECT, G_NCQ, G_NDEC, G_NFAST, G_NLOG, G_NMLAT, G_NOUT,
                                          G_NPLAT, G_OUTM, G_OUTP, G_STATUS, GEMV, HEADER, INF,
                                          KIND_CMD, LAT_BINS, NCMD, NCS, NGL, NMQ, NPA, P_RID,
                                          ST_ERROR, ST_LOG_FULL, ST_OK, ST_OUT_FULL, WCAP,
                                          ERR_GACT_OPEN, MemState)
from archsim.memory.spec import (COMMANDS, LEVELS, command_names, compile_table, gemv_cycles,
                                 newton_request_error)
from archsim.memory.system import LatencyCounts, summarize
from archsim.memport import Completion, MemRequest, PimRequest


class KernelUnsupported(Exception):
    """The configuration's constraint table has a shape the kernel does not interpret."""


def _latency_tables(cfg, table) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]:
    """The compiled constraint table as the kernel's arrays: ``LAT[level, p]`` sparse rule
    lists ``[n, q_0, lat_0, ...]`` (cycles), ``LATK[level, p, q]`` = 1 where the latency is
    ``GEMV_BUSY`` (a function of k), and the rank-level activation window ``(N, span,
    weight of ACT, weight of G_ACT)``.

    Raises KernelUnsupported for windows other than one rank-level window over ACT/G_ACT, or
    a k-dependent latency other than :func:`archsim.memory.spec.gemv_cycles` (of a PIM_GEMV)."""
    lat = np.full((4, NCMD, NCMD), -1, np.int64)
    latk = np.zeros((4, NCMD, NCMD), np.int64)
    for li, lv in enumerate(LEVELS):
        for p in range(NCMD):
            for q, v in table.updates[lv][p]:
                if isinstance(v, int):
                    lat[li, p, q] = max(lat[li, p, q], v)
                    continue
                for kk in (1, 3, 6, 8, 31, 64):
                    if v(kk) != gemv_cycles(kk, cfg):
                        raise KernelUnsupported(
                            f"latency rule {COMMANDS[p]}->{COMMANDS[q]} at {lv} depends on k "
                            "in a way the kernel does not model")
                latk[li, p, q] = 1
    if latk.sum() != latk[:, GEMV].sum():     # timing._record looks only at a PIM_GEMV's rules
        raise KernelUnsupported("a latency depends on k for a command other than PIM_GEMV")
    wins = [(lv, w) for lv in LEVELS for w in table.windows[lv]]
    window = (0, 0, 0, 0)
    if wins:
        if len(wins) != 1 or wins[0][0] != "rank":
            raise KernelUnsupported(f"activation windows {[(lv, w[0]) for lv, w in wins]}: "
                                    "the kernel supports one rank-level window")
        _, (_, cmds, n_max, span, weights) = wins[0]
        if set(cmds) - {ACT, G_ACT}:
            raise KernelUnsupported("the activation window counts commands other than ACT "
                                    "and G_ACT")
        window = (int(n_max), int(span), int(weights.get(ACT, 0)), int(weights.get(G_ACT, 0)))
        if window[2] == 0 or window[3] == 0 or window[0] > WCAP:
            raise KernelUnsupported("activation window shape not supported")
    sparse = np.zeros((4, NCMD, 1 + 2 * NCMD), np.int64)
    for li in range(4):
        for p in range(NCMD):
            qs = [q for q in range(NCMD) if lat[li, p, q] >= 0 or latk[li, p, q]]
            sparse[li, p, 0] = len(qs)
            for j, q in enumerate(qs):
                sparse[li, p, 1 + 2 * j] = q
                sparse[li, p, 2 + 2 * j] = lat[li, p, q]
    return sparse, latk, window


def _grow_pool(data: np.ndarray, free: np.ndarray, new_n: int):
    """Pool of slots 1..n (row 0 unused) with a free stack (``free[0]`` = entries), grown to
    ``new_n`` slots; returns the new ``(data, free)``."""
    old_n = data.shape[0] - 1
    d = line_array(new_n + 1, data.shape[1])
    d[:old_n + 1] = data
    f = np.zeros(new_n + 1, np.int64)
    top = int(free[0])
    f[1:top + 1] = free[1:top + 1]
    extra = np.arange(new_n, old_n, -1, dtype=np.int64)
    f[top + 1:top + 1 + extra.size] = extra
    f[0] = top + extra.size
    return d, f


class KernelMemory:
    """HBM (+ PIM) memory of one device: the reference controller's policy, JIT-compiled.

    Implements :class:`archsim.memport.MemoryPort` (``submit``, ``submit_many``,
    ``submit_pim``, ``can_accept``, ``next_event_cycle``, ``advance_to``) plus
    :meth:`run_to_idle`, :meth:`command_log`, :meth:`stats` and :meth:`pim_busy_cycles`, like
    :class:`archsim.memory.system.MemorySystem`. The kernel's state is :attr:`S`
    (:class:`archsim.memory.kernel.layout.MemState`), for callers that drive the kernel from
    compiled code themselves (the NPU's compiled event loop, :mod:`archsim.npu.cloop`): they
    call :meth:`reserve` first and grow the buffers with :meth:`_room` when their loop asks.

    Args:
        cfg: :class:`archsim.config.MachineConfig` (``memory`` and ``pim`` sections).
        keep_log: record the command log (needed by :meth:`command_log` and the timing checker;
            costs 64 B per command).

    Raises:
        KernelUnsupported: the constraint table has windows other than one rank-level
            activation window, a command-dependent latency other than ``GEMV_BUSY``, more
            than 10 ranks per channel (the validity bits of the decision's earliest-cycle
            table, ``timing._et``) or more than 63 banks.
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
        if NMQ * R > 63:           # the earliest-cycle table's validity bits (timing._et)
            raise KernelUnsupported(f"{R} ranks per channel: the kernel handles <= {63 // NMQ}")
        if nb > 63:
            raise KernelUnsupported(f"{nb} banks per channel: the kernel's bank masks hold 63")
        lat_sp, latk, (wn, wspan, wact, wgact) = _latency_tables(cfg, table)
        n = table.names
        pa = np.zeros(NPA, np.int64)
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
        pc = pol.codes(cfg)
        pa[A_SCHED], pa[A_CAP], pa[A_PAGE], pa[A_TMO] = (pc["scheduler"], pc["row_hit_cap"],
                                                         pc["page"], pc["timeout"])
        pa[A_WPOL], pa[A_QW], pa[A_WHI], pa[A_WLO] = (pc["write"], pc["write_queue"],
                                                      pc["write_hi"], pc["write_lo"])
        pa[A_PDEPTH] = pc["pim_depth"]
        pa[A_DEFAULT] = int(pc["scheduler"] == pol.FR_FCFS and pc["page"] == pol.PAGE_OPEN)
        pa[A_LTOT] = nb
        pa[A_FAST] = int(pc["page"] != pol.PAGE_TIMEOUT and nb <= 63)
        # refresh units (the policy's): due cycle and pending flag per channel, scope
        mode = pc["refresh"]
        U = pol.refresh_units(mode, R, G * B)
        refi_pb = cfg.memory.refi_pb_cycles
        pa[A_REFM], pa[A_NU] = mode, U
        pa[A_REFPER] = pol.refresh_period(mode, U, t.tREFI, refi_pb)
        pa[A_TRFCU] = t.tRFCpb if mode == pol.REF_PER_BANK else t.tRFC
        span = pol.refresh_unit_span(mode, G, B)
        self.RU = np.array([[pol.refresh_unit_bank(mode, u, G, B), span] for u in range(U)],
                           np.int64).reshape(U, 2)
        self.RF = np.zeros((C, U, 2), np.int64)
        self.RF[:, :, 0] = [pol.refresh_first_due(mode, u, U, t.tREFI, refi_pb)
                            if cfg.memory.refresh.enabled else INF for u in range(U)]
        self.PA, self.LAT, self.LATK = pa, lat_sp, latk
        self.CS = line_array(C, NCS + NMQ * R)
        self.CS[:, C_NOW] = -1
        self.CS[:, C_FIRST] = INF
        self.RS = np.zeros((C, R, NRS), np.int64)
        self.RS[:, :, R_WBA:] = -INF
        qb = int(pa[A_QB])
        self.BK = line_array(C, nb, B_Q0 + qb)
        self.BK[:, :, B_OPEN] = -1
        self.BK[:, :, B_PIM] = -1
        flat = np.arange(nb)         # each bank's rank, bank group (flat, in rank), bank in group
        self.BK[:, :, B_RK:B_BA + 1] = np.stack([flat // (G * B), flat // B, flat // B % G,
                                                 flat % B], axis=1)
        self.NXT = np.zeros((C, 1 + R + R * G + nb, NCMD), np.int64)
        self.WT = np.zeros((C, R, WCAP), np.int64)
        self.WW = np.zeros((C, R, WCAP), np.int64)
        self.STG = np.zeros((C, 1024), np.int64)
        self.BU = line_array(1, 7)
        self.BFREE = np.zeros(1, np.int64)
        self.RQ = line_array(1, 5)
        self.RQFREE = np.zeros(1, np.int64)
        self.PO = line_array(1, 9)
        self.POFREE = np.zeros(1, np.int64)
        self.PQ = np.zeros((C, 256), np.int64)
        self.CQ = np.zeros((1024, 4), np.int64)        # a power of two (issue._cq_push)
        self.GL = np.zeros(NGL, np.int64)
        self.GL[G_LOGON] = 1 if keep_log else 0
        self.LOG = np.zeros((1 << 16 if keep_log else 1, 8), np.int64)
        self.CNT = np.zeros((C, NCMD), np.int64)
        # bursts per bank (queued or in the FIFO), then the channel's total, reads, writes
        self.LD = np.zeros((C, nb + 3), np.int64)
        self.OUT = np.zeros((4096, 4), np.int64)
        s, m = self.map.shifts, self.map.masks
        self.DEC = np.array([[s[f], m[f]] for f in ("ch", "ra", "bg", "ba", "ro", "co")],
                            dtype=np.int64)
        self.MLAT = np.zeros(LAT_BINS + (1 << 12), np.int64)   # histogram, spill list
        self.DONE = np.full(1, -1, np.int64)
        self.PLAT = np.zeros(LAT_BINS + (1 << 12), np.int64)
        self.BU, self.BFREE = _grow_pool(self.BU, self.BFREE, 4096)
        self.RQ, self.RQFREE = _grow_pool(self.RQ, self.RQFREE, 4096)
        self.PO, self.POFREE = _grow_pool(self.PO, self.POFREE, 1024)
        self._rebuild()
        self._req_buf: list[tuple] = []
        self._burst_buf: list[tuple] = []
        self._live_rids: set[int] = set()
        self._trusted = False           # expect_unique_ids: no duplicate-id bookkeeping
        self._dec = (s["ch"], m["ch"], s["ra"], m["ra"], s["bg"], m["bg"], s["ba"], m["ba"],
                     s["ro"], m["ro"], s["co"], m["co"])
        self._cap = self.map.capacity_bytes
        self._bb = org.burst_bytes
        self._GB = G * B
        self._last = (-1, None)
        self._qb, self._qc, self._qw = int(pa[A_QB]), int(pa[A_QC]), int(pa[A_QW])
        self._drain = pc["write"] == pol.WRITE_DRAIN
        self._slack = 0                 # reserve(): extra outstanding requests to provision
        self._slack_pim = 0

    # ---------------------------------------------------------------- state and capacity
    def _rebuild(self) -> None:
        """Rebuild :attr:`S` from the current arrays (after one was replaced)."""
        self.S = MemState(*(getattr(self, f) for f in MemState._fields))

    def _grow_ring(self, name: str, hcol: int, tcol: int) -> None:
        """Double a per-channel ring (``STG`` or ``PQ``), re-basing its head/tail counters."""
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
        self._rebuild()

    def _room(self, n_mem: int = 0, n_pim: int = 0) -> None:
        """Capacity for ``n_mem`` more single-burst memory requests and ``n_pim`` more PIM
        requests on top of the outstanding ones, and for every completion to come: the burst,
        request and PIM pools, the FIFO and PIM rings, the completion queue, the latency
        buffers and OUT. Cheap when there is room (integer checks only)."""
        gl = self.GL
        changed = False
        used_b = self.BU.shape[0] - 1 - int(self.BFREE[0])
        if self.STG.shape[1] < used_b + n_mem:
            # a channel's FIFO holds at most the live bursts: check the exact occupancy only
            # when that bound does not already fit
            cs = self.CS
            while int((cs[:, C_ST] - cs[:, C_SH]).max()) + n_mem > self.STG.shape[1]:
                self._grow_ring("STG", C_SH, C_ST)
        if n_pim and int((self.CS[:, C_PT] - self.CS[:, C_PH]).max()) + n_pim > \
                self.PQ.shape[1]:
            self._grow_ring("PQ", C_PH, C_PT)
        if self.BFREE[0] < n_mem + 64:
            self.BU, self.BFREE = _grow_pool(self.BU, self.BFREE,
                                             max(2 * self.BU.shape[0], self.BU.shape[0] + n_mem))
            changed = True
        if self.RQFREE[0] < n_mem + 64:
            self.RQ, self.RQFREE = _grow_pool(self.RQ, self.RQFREE,
                                              max(2 * self.RQ.shape[0], self.RQ.shape[0] + n_mem))
            changed = True
        if self.POFREE[0] < n_pim + 8:
            self.PO, self.POFREE = _grow_pool(self.PO, self.POFREE,
                                              max(2 * self.PO.shape[0], self.PO.shape[0] + n_pim))
            changed = True
        out_m = int(gl[G_OUTM]) + n_mem
        out_p = int(gl[G_OUTP]) + n_pim
        need = out_m + out_p + 16
        if self.CQ.shape[0] < need:
            # the completion ring unrolled into the next power of two (the kernels wrap its
            # slots with a mask), its head at slot 0
            cap = self.CQ.shape[0]
            n, h = int(gl[G_NCQ]), int(gl[G_CQH])
            new = np.zeros((1 << (need - 1).bit_length(), 4), np.int64)
            new[:n] = self.CQ[(h + np.arange(n)) & (cap - 1)]
            gl[G_CQH] = 0
            self.CQ = new
            changed = True
        for name, used, out in (("MLAT", G_NMLAT, out_m), ("PLAT", G_NPLAT, out_p)):
            arr = getattr(self, name)
            need = LAT_BINS + int(gl[used]) + out + 16
            if arr.shape[0] < need:
                new = np.zeros(max(need, 2 * arr.shape[0] - LAT_BINS), np.int64)
                new[:arr.shape[0]] = arr
                setattr(self, name, new)
                changed = True
        if self.OUT.shape[0] < n_mem + n_pim + 8 * self.C:
            self.OUT = np.zeros((n_mem + n_pim + 8 * self.C, 4), np.int64)
            changed = True
        if changed:
            self._rebuild()

    def reserve(self, n_mem: int, n_pim: int = 0) -> None:
        """Provision for a caller that queues up to ``n_mem`` single-burst memory requests and
        ``n_pim`` PIM requests from compiled code between two port calls (the DMA
        compiled event loop): pools, rings, completion queue and latency buffers get that much
        room, and every later port call keeps it."""
        self._flush()
        self._slack = max(self._slack, int(n_mem))
        self._slack_pim = max(self._slack_pim, int(n_pim))
        self._room(int(n_mem), int(n_pim))

    def _keep_room(self, n_mem: int = 0, n_pim: int = 0) -> None:
        """:meth:`_room` for the hot paths: once :meth:`expect_unique_ids` bounded the requests
        in flight (pools, rings and completion queue provisioned for them), only the latency
        buffers grow (every completion appends one): two integer checks unless they are nearly
        full."""
        if self._trusted and n_mem <= self._slack and n_pim <= self._slack_pim:
            gl = self.GL
            if LAT_BINS + gl[G_NMLAT] + self._slack + 64 <= self.MLAT.shape[0] and \
                    LAT_BINS + gl[G_NPLAT] + self._slack_pim + 64 <= self.PLAT.shape[0]:
                return
        self._room(max(n_mem, self._slack), max(n_pim, self._slack_pim))

    def expect_unique_ids(self, max_outstanding: int) -> None:
        """The caller (the NPU executor) never reuses a request id and never has more than
        ``max_outstanding`` memory requests in flight: the duplicate-id check of
        :meth:`submit` / :meth:`submit_many` and its bookkeeping are skipped from now on, and
        capacity for that many requests is provisioned (:meth:`reserve`)."""
        self._trusted = True
        self._live_rids.clear()
        self.reserve(int(max_outstanding), (int(self.PA[A_PDEPTH]) + 4) * self.C)

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
            ld[ch, self.nb] += 1
            ld[ch, self.nb + 1 + wr] += 1

    def submit_many(self, addrs, is_write: bool, arrivals, ids, size_bytes=None,
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
                if check and not self.can_accept(al[i], is_write):
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
        self._keep_room(n)
        done = _submit_many(self.S, a, arr, rid, 1 if is_write else 0, bool(check), self._qb,
                            self._qc)
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
        err = newton_request_error(self.cfg, kind)
        if err is not None:
            raise SimulationError(f"channel {req.channel}: {err}")
        cmd = KIND_CMD.get(kind)
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
        self._flush()
        cmd, c, mask, row, n, nsub, est = self.pim_fields(req)
        self._keep_room(0, 1)
        _push_pim(self.S, c, req.req_id, cmd, int(req.arrival_cycle), est, mask, row, n, nsub)

    def can_accept(self, addr: int, is_write: bool = False) -> bool:
        """False when the bank of ``addr`` already has ``queue_size_per_bank`` bursts waiting
        (queued or in the input FIFO) or its channel ``command_queue_size`` (drain write
        policy: that many reads, or ``write_queue_size`` writes; MemorySystem.can_accept)."""
        d = self._decode(addr)
        self._last = (addr, d)
        ld = self.LD[d[0]]
        if ld[d[1] * self._GB + d[2] * self.B + d[3]] >= self._qb:
            return False
        nb = self.nb
        if self._drain:
            return bool(ld[nb + 2] < self._qw) if is_write else bool(ld[nb + 1] < self._qc)
        return bool(ld[nb] < self._qc)

    def can_accept_pim(self, channel: int) -> bool:
        """False while ``channel`` has ``pim.command_queue_depth`` PIM requests in flight
        (MemorySystem.can_accept_pim)."""
        if not 0 <= channel < self.C:
            return True
        return bool(pol.pim_accepts(int(self.PA[A_PDEPTH]), int(self.CS[channel, C_PINF])))

    def _flush(self) -> None:
        """Enter the requests :meth:`submit` buffered (one kernel call for all of them)."""
        if not self._req_buf:
            return
        reqs = np.asarray(self._req_buf, np.int64).reshape(-1, 4)
        bursts = np.asarray(self._burst_buf, np.int64).reshape(-1, 7)
        self._req_buf.clear()
        self._burst_buf.clear()
        self._room(max(bursts.shape[0], reqs.shape[0]) + self._slack)
        counts = np.bincount(bursts[:, 1], minlength=self.C)
        cs = self.CS
        while ((cs[:, C_ST] - cs[:, C_SH]) + counts).max() > self.STG.shape[1]:
            self._grow_ring("STG", C_SH, C_ST)
        _push_bursts(self.S, reqs, bursts, np.empty(reqs.shape[0], np.int64))

    def next_event_cycle(self) -> int | None:
        """Earliest cycle at which a command may issue or a request complete; None if idle."""
        self._flush()
        best = _next_event(self.S)
        self._check_error()
        if self.GL[G_NCQ] > 0 and self.CQ[self.GL[G_CQH], 0] < best:
            best = int(self.CQ[self.GL[G_CQH], 0])
        return None if best >= INF else int(best)

    def advance_to(self, cycle: int) -> list[Completion]:
        """Simulate every channel up to and including ``cycle``; return the completed requests
        in (cycle, req_id) order (:attr:`last_out` holds their raw rows)."""
        self._flush()
        out: list[Completion] = []
        rows = []
        while True:
            self._keep_room()
            self.GL[G_STATUS] = ST_OK
            _advance_all(self.S, int(cycle))
            st = int(self.GL[G_STATUS])
            if st == ST_ERROR:
                self._check_error()
            if st in (ST_OK, ST_OUT_FULL) and self.GL[G_NOUT]:
                rows.append(self.OUT[:int(self.GL[G_NOUT])].copy())
            if st == ST_LOG_FULL:
                self.LOG = np.concatenate([self.LOG, np.zeros_like(self.LOG)])
                self._rebuild()
                continue
            if st == ST_OUT_FULL:
                continue
            break
        self.last_out = rows[0] if len(rows) == 1 else (
            np.concatenate(rows) if rows else self.OUT[:0].copy())
        if len(self.last_out):
            out = self._completions(self.last_out)
        return out

    def _completions(self, rows: np.ndarray) -> list[Completion]:
        ids = rows[:, 1].tolist()
        if not self._trusted:
            mem = rows[rows[:, 3] == 0, 1].tolist()
            self._live_rids.difference_update(mem)
        return list(map(Completion, ids, rows[:, 0].tolist()))

    # ---------------------------------------------------------------- batch replay
    def submit_arrays(self, addrs, sizes, is_write, arrivals) -> None:
        """Queue N requests with ids 0..N-1 in array order (a trace replay), exactly as N
        :meth:`submit` calls would, split into bursts with numpy and entered in one kernel call;
        :meth:`run_to_idle` then serves them.

        Args: int arrays of shape (N,): byte addresses, sizes (bytes, > 0), write flags,
        arrival cycles (tCK). Raises SimulationError for an address range beyond the capacity
        or a non-positive size (before anything is queued)."""
        addrs = np.asarray(addrs, np.int64)
        sizes = np.asarray(sizes, np.int64)
        n = int(addrs.shape[0])
        if n == 0:
            return
        if int(sizes.min()) <= 0:
            i = int(np.argmin(sizes))
            raise SimulationError(f"request {i}: size_bytes must be > 0, got {int(sizes[i])}")
        bb = self._bb
        lastb = addrs + sizes - 1
        if int(addrs.min()) < 0 or int(lastb.max()) >= self._cap:
            self.map.decode_array(addrs)
            self.map.decode_array(lastb)              # raises naming the address
        first = addrs // bb
        nper = lastb // bb - first + 1
        if int(nper.max()) == 1:                      # every request inside one burst
            req = np.arange(n, dtype=np.int64)
            f = self.map.decode_array(first * bb)
        else:
            req = np.repeat(np.arange(n, dtype=np.int64), nper)
            offs = np.arange(req.shape[0], dtype=np.int64) - np.repeat(np.cumsum(nper) - nper,
                                                                        nper)
            f = self.map.decode_array((first[req] + offs) * bb)
        m = req.shape[0]
        ch = f[:, 0]
        bank = (f[:, 1] * self.G + f[:, 2]) * self.B + f[:, 3]
        wr = np.asarray(is_write, np.bool_).astype(np.int64)
        arr = np.asarray(arrivals, np.int64)
        reqs = np.empty((n, 4), np.int64)
        reqs[:, 0] = np.arange(n)
        reqs[:, 1] = arr
        reqs[:, 2] = nper
        reqs[:, 3] = wr
        bursts = np.empty((m, 7), np.int64)
        bursts[:, 0] = req
        bursts[:, 1] = ch
        bursts[:, 2] = bank
        bursts[:, 3] = f[:, 4]
        bursts[:, 4] = f[:, 5]
        bursts[:, 5] = wr[req]
        bursts[:, 6] = arr[req]
        nb, C = self.nb, self.C
        self.LD[:, :nb] += np.bincount(ch * nb + bank, minlength=C * nb).reshape(C, nb)
        counts = np.bincount(ch, minlength=C)
        self.LD[:, nb] += counts
        nw = np.bincount(ch, weights=bursts[:, 5], minlength=C).astype(np.int64)
        self.LD[:, nb + 2] += nw
        self.LD[:, nb + 1] += counts - nw
        self._flush()
        self._room(m)
        if self.GL[G_LOGON] and self.LOG.shape[0] < m + m // 4 + 4096:
            # about one command per burst plus activations and refreshes: one allocation
            # instead of doubling the log on the way
            new = np.zeros((m + m // 4 + 4096, 8), np.int64)
            new[:self.LOG.shape[0]] = self.LOG
            self.LOG = new
            self._rebuild()
        cs = self.CS
        while ((cs[:, C_ST] - cs[:, C_SH]) + counts).max() > self.STG.shape[1]:
            self._grow_ring("STG", C_SH, C_ST)
        self._trusted = True
        _push_bursts(self.S, reqs, bursts, np.empty(n, np.int64))

    def run_to_idle(self, n_requests: int) -> np.ndarray:
        """Serve everything queued (channels independently, as MemorySystem.run_to_idle),
        then bring every channel to the cycle the busiest one ended at (idle channels
        refresh over the same span). The request ids are 0..n-1 (a trace replay); returns the
        completion cycle of every request, shape (n,) (-1 for an id never submitted).

        Raises SimulationError when work remains that can never issue (a deadlock)."""
        self._flush()
        if self.DONE.shape[0] < int(n_requests):
            self.DONE = np.full(int(n_requests), -1, np.int64)
            self._rebuild()
        self.GL[G_DIRECT] = 1 if self.GL[G_NCQ] == 0 else 0
        while True:
            self.GL[G_STATUS] = ST_OK
            st = int(_run_to_idle(self.S))
            if st == ST_LOG_FULL:
                self.LOG = np.concatenate([self.LOG, np.zeros_like(self.LOG)])
                self._rebuild()
                continue
            if st == ST_ERROR:
                self._check_error()
            if st >= 16:
                c = st - 16
                raise SimulationError(
                    f"channel {c}: deadlock at cycle {int(self.CS[c, 1])}: work waits but no "
                    "command can ever issue (a PIM row left open?)")
            break
        direct = self.GL[G_DIRECT] == 1
        self.GL[G_DIRECT] = 0
        done = self.DONE[:int(n_requests)].copy() if direct else \
            np.full(int(n_requests), -1, np.int64)
        self._room()
        _pop_all(self.S, done)
        self._live_rids.clear()
        end = int(self.CS[:, C_NOW].max())
        while True:
            self._room()
            self.GL[G_STATUS] = ST_OK
            _advance_all(self.S, end)
            if int(self.GL[G_STATUS]) == ST_LOG_FULL:
                self.LOG = np.concatenate([self.LOG, np.zeros_like(self.LOG)])
                self._rebuild()
                continue
            break
        return done

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
    def decisions(self) -> tuple[int, int]:
        """``(scheduling decisions, of them admission-only re-decisions)`` so far: how often
        the kernel chose a channel's next action, and how often it could start from the last
        decision's best candidate (:func:`archsim.memory.kernel.scheduler._decide`)."""
        return int(self.GL[G_NDEC]), int(self.GL[G_NFAST])

    def command_log(self) -> list[CommandRecord]:
        """Every issued command, ordered by (cycle, channel) (MemorySystem.command_log).

        Raises SimulationError when the memory was built with ``keep_log=False``."""
        if not self.GL[G_LOGON]:
            raise SimulationError("the command log was not kept (keep_log=False)")
        n = int(self.GL[G_NLOG])
        L = self.LOG[:n]
        order = np.lexsort((L[:, 1], L[:, 0]))
        names = command_names(self.cfg)
        return [CommandRecord(t, c, r, g, b, names[cmd], row, col)
                for t, c, r, g, b, cmd, row, col in L[order].tolist()]

    def command_log_array(self) -> np.ndarray:
        """The raw log as int64 ``[n, 8]`` (cycle, channel, rank, bank group, bank, command
        index into :data:`archsim.memory.spec.COMMANDS`, row, column), issue order per
        channel."""
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
        names = command_names(self.cfg)
        for c in range(self.C):
            cs = self.CS[c]
            counts = {names[i]: int(v) for i, v in enumerate(self.CNT[c]) if v}
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

    def latencies(self) -> tuple[LatencyCounts, LatencyCounts]:
        """Latencies (cycles, arrival to completion) of the completed memory and PIM requests,
        as counts per latency (the kernel keeps a histogram, not a list)."""
        return (LatencyCounts.from_kernel(self.MLAT, int(self.GL[G_NMLAT])),
                LatencyCounts.from_kernel(self.PLAT, int(self.GL[G_NPLAT])))

    def stats(self) -> dict:
        """Statistics of everything simulated so far (:func:`archsim.memory.system.summarize`)."""
        mlat, plat = self.latencies()
        return summarize(self.cfg, self.channel_views(), mlat, plat)


__all__ = ["KernelMemory", "KernelUnsupported"]
