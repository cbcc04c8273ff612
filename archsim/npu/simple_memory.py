"""A simple memory: fixed latency plus per-channel bandwidth, implementing ``MemoryPort``.

This is *not* the HBM model (``archsim.memory`` schedules every DRAM command). It is an honest,
documented stand-in for tests and an "ideal memory" option:

* Reads and writes: each request goes to the channel its address maps to (the ``ch`` field of
  the configured address mapping). A channel moves ``bytes_per_cycle`` bytes per cycle on its
  data bus, in arrival order; the first data of a request cannot come back earlier than
  ``latency_cycles`` after its arrival. A request of ``size`` bytes on channel ``c`` therefore
  completes at ``max(arrival + latency, bus_free[c]) + size / bytes_per_cycle``. There are no
  rows, banks, refresh or read/write turnarounds: with enough requests in flight it delivers the
  peak bandwidth exactly.
* PIM commands: one queue per channel, executed in order, each for a fixed cost derived from
  the config (see :meth:`SimpleMemory.pim_command_cycles`); PIM never conflicts with reads and
  writes (an ideal dual-row-buffer device).
* ``can_accept`` is always True unless ``max_outstanding_per_channel`` is set.

All cycles are memory-clock cycles, as in :mod:`archsim.memport`.
"""
from __future__ import annotations

import heapq
import math

from archsim.errors import SimulationError
from archsim.memport import Completion, MemRequest, PimOpKind, PimRequest


class SimpleMemory:
    """Fixed-latency, bandwidth-limited memory (see the module docstring).

    Args:
        latency_cycles: cycles from a request's arrival to its first data (>= 0).
        bytes_per_cycle: data-bus bandwidth of one channel (bytes per memory cycle, > 0).
        channels: number of channels (power of two when ``channel_shift`` is used).
        channel_shift: the channel of byte address ``a`` is ``(a >> channel_shift) % channels``.
        capacity_bytes: addresses must be below this (SimulationError otherwise).
        pim_cycles: cost of each PIM command kind in cycles; a callable
            ``(PimRequest) -> int`` or None for :meth:`pim_command_cycles` defaults.
        max_outstanding_per_channel: back-pressure bound for ``can_accept`` (None: unbounded).
    """

    def __init__(self, latency_cycles: int = 30, bytes_per_cycle: float = 32.0,
                 channels: int = 32, channel_shift: int = 10,
                 capacity_bytes: int = 32 * 2**30, pim_cycles=None,
                 max_outstanding_per_channel: int | None = None) -> None:
        if latency_cycles < 0 or bytes_per_cycle <= 0 or channels < 1:
            raise SimulationError("SimpleMemory needs latency >= 0, bandwidth > 0, channels >= 1")
        self.latency_cycles = latency_cycles
        self.bytes_per_cycle = float(bytes_per_cycle)
        self.channels = channels
        self.channel_shift = channel_shift
        self.capacity_bytes = capacity_bytes
        self._pim_cycles = pim_cycles or self._default_pim_cycles
        self.max_outstanding_per_channel = max_outstanding_per_channel
        self._bus_free = [0.0] * channels
        self._pim_free = [0] * channels
        self._outstanding = [0] * channels
        self._heap: list[tuple[int, int, int]] = []  # (cycle, req_id, channel or -1 for PIM)
        self.bytes_read = 0
        self.bytes_written = 0
        self.requests = 0
        self.pim_commands = 0
        self._now = 0
        self._cfg = None

    @classmethod
    def from_config(cls, cfg, latency_cycles: int | None = None,
                    bytes_per_cycle: float | None = None) -> "SimpleMemory":
        """A SimpleMemory matching ``cfg`` (an ``archsim.config.MachineConfig``).

        Defaults: latency = tRCDRD + CL + burst cycles (a row-miss read without queueing;
        30 cycles for the NeuPIMs HBM2 preset), bandwidth per channel = the config's external
        peak (burst bytes / burst cycles = 32 B/cycle), channels and the channel bit position
        from the configured address mapping, PIM costs from the ``pim`` section.
        """
        mem = cfg.memory
        org = mem.org
        lat = latency_cycles if latency_cycles is not None else (
            mem.timing.tRCDRD + mem.timing.CL + mem.burst_cycles)
        bw = bytes_per_cycle if bytes_per_cycle is not None else (
            mem.peak_bandwidth_bytes_per_cycle_per_channel)
        counts = {"ch": org.channels, "ra": org.ranks, "bg": org.bank_groups,
                  "ba": org.banks_per_group, "ro": org.rows, "co": org.columns}
        shift = (org.column_width_bits // 8).bit_length() - 1
        ch_shift = shift
        for f in reversed(mem.controller.address_fields):
            if f == "ch":
                ch_shift = shift
            shift += counts[f].bit_length() - 1
        m = cls(lat, bw, org.channels, ch_shift, org.capacity_bytes)
        m._cfg = cfg
        return m

    # ---- PIM costs ----
    def _default_pim_cycles(self, req: PimRequest) -> int:
        return self.pim_command_cycles(req, self._cfg)

    @staticmethod
    def pim_command_cycles(req: PimRequest, cfg=None) -> int:
        """Fixed cost of one broadcast PIM command (memory cycles).

        With ``cfg`` (a MachineConfig), following DESIGN §3 and the NeuPIMs reference:
        PIM_HEADER 1; GWRITE ``pim.gwrite_cycles``; G_ACT ``tRCDRD + tFAW * (ceil(banks/4) - 1)``
        for the banks of the selected bank groups in one rank (4 ACTs per tFAW window);
        COMP ``max(tBL, tCCD_S) * max(n, fill)``; READRES ``pim.readres_cycles``;
        PIM_GEMV ``max(tBL, tCCD_S) * (max(n, fill) + 1)``; PIM_PRECHARGE ``tRP``.
        Without ``cfg`` every command costs 1 cycle.
        """
        if cfg is None:
            return 1
        t = cfg.memory.timing
        org = cfg.memory.org
        p = cfg.pim
        step = max(cfg.memory.burst_cycles, t.tCCD_S)
        k = req.kind
        if k is PimOpKind.HEADER:
            return 1
        if k is PimOpKind.GWRITE:
            return p.gwrite_cycles
        if k is PimOpKind.G_ACT:
            groups = bin(req.bank_group_mask).count("1") if req.bank_group_mask else org.bank_groups
            banks = min(groups, org.bank_groups) * org.banks_per_group
            return t.tRCDRD + t.tFAW * (math.ceil(banks / 4) - 1)
        if k is PimOpKind.COMP:
            return step * max(req.n_comps, p.gemv_pipeline_fill)
        if k is PimOpKind.READRES:
            return p.readres_cycles
        if k is PimOpKind.GEMV:
            return step * (max(req.n_comps, p.gemv_pipeline_fill) + 1)
        if k is PimOpKind.PRECHARGE:
            return t.tRP
        raise SimulationError(f"unknown PIM command {k!r}")  # pragma: no cover

    # ---- MemoryPort ----
    def submit(self, req: MemRequest) -> None:
        """Queue a read/write (see the module docstring for its completion time).

        Raises SimulationError when the request leaves the address space or has size <= 0.
        """
        addr, size = req.addr, req.size_bytes
        if addr < 0 or size <= 0 or addr + size > self.capacity_bytes:
            raise SimulationError(f"memory request {req.req_id}: bytes [{addr:#x}, "
                                  f"{addr + size:#x}) outside the memory "
                                  f"(capacity {self.capacity_bytes:#x})")
        ch = (addr >> self.channel_shift) % self.channels
        last = (addr + size - 1) >> self.channel_shift
        if last != addr >> self.channel_shift:  # spans channels: split per interleave block
            done = 0
            a = addr
            end = addr + size
            while a < end:
                nxt = min(end, ((a >> self.channel_shift) + 1) << self.channel_shift)
                done = max(done, self._transfer((a >> self.channel_shift) % self.channels,
                                                req.arrival_cycle, nxt - a))
                a = nxt
        else:
            done = self._transfer(ch, req.arrival_cycle, size)
        self._outstanding[ch] += 1
        heapq.heappush(self._heap, (done, req.req_id, ch))
        self.requests += 1
        if req.is_write:
            self.bytes_written += size
        else:
            self.bytes_read += size

    def _transfer(self, ch: int, arrival: int, size: int) -> int:
        start = max(arrival + self.latency_cycles, self._bus_free[ch])
        end = start + size / self.bytes_per_cycle
        self._bus_free[ch] = end
        return math.ceil(end - 1e-9)

    def submit_pim(self, req: PimRequest) -> None:
        """Queue a broadcast PIM command on its channel (in order, fixed cost)."""
        if not 0 <= req.channel < self.channels:
            raise SimulationError(f"PIM command {req.kind.value} to channel {req.channel}: the "
                                  f"memory has channels 0..{self.channels - 1}")
        start = max(req.arrival_cycle, self._pim_free[req.channel])
        done = start + max(1, int(self._pim_cycles(req)))
        self._pim_free[req.channel] = done
        heapq.heappush(self._heap, (done, req.req_id, -1))
        self.pim_commands += 1

    def can_accept(self, addr: int, is_write: bool = False) -> bool:
        """True unless ``max_outstanding_per_channel`` requests are in flight on the channel
        (either direction)."""
        if self.max_outstanding_per_channel is None:
            return True
        ch = (addr >> self.channel_shift) % self.channels
        return self._outstanding[ch] < self.max_outstanding_per_channel

    def next_event_cycle(self) -> int | None:
        """Cycle of the earliest pending completion; None when idle."""
        return self._heap[0][0] if self._heap else None

    def advance_to(self, cycle: int) -> list[Completion]:
        """Completions at or before ``cycle``, in completion order."""
        out = []
        heap = self._heap
        pop = heapq.heappop
        outstanding = self._outstanding
        while heap and heap[0][0] <= cycle:
            c, rid, ch = pop(heap)
            if ch >= 0:
                outstanding[ch] -= 1
            out.append(Completion(rid, c))
        self._now = max(self._now, cycle)
        return out

    @property
    def peak_bytes_per_cycle(self) -> float:
        """Peak bandwidth of the whole memory: channels x bytes_per_cycle."""
        return self.channels * self.bytes_per_cycle


__all__ = ["SimpleMemory"]
