"""Memory sections of a machine: the HBM device (organisation, timing, refresh, controller,
power) and its per-bank PIM units.

Timings are memory-clock cycles (tCK) with JEDEC names; :data:`TIMING_RULES` lists the
cross-field rules of a timing table (one list, reused by ``archsim.memory.checker``). Defaults
of ``org``/``timing``/``power`` come from the memory standard ``memory.kind`` selects
(:mod:`archsim.memory.standards`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from archsim.config.base import CrossFieldError, FrozenSection
from archsim.memory.standards import STANDARDS

ADDRESS_FIELDS = ("ro", "ra", "bg", "ba", "ch", "co")


class OrgConfig(FrozenSection):
    """HBM organisation of one device (DESIGN §3; JEDEC JESD235 HBM2, NeuPIMs reference)."""

    channels: int = Field(32, ge=1, le=1024)
    ranks: int = Field(2, ge=1, le=16, description="ranks / stack ids per channel")
    bank_groups: int = Field(4, ge=1, le=16, description="bank groups per rank")
    banks_per_group: int = Field(4, ge=1, le=16)
    rows: int = Field(32768, ge=2, le=1 << 24, description="rows per bank")
    columns: int = Field(64, ge=2, le=1 << 16, description="columns per row")
    column_width_bits: int = Field(128, ge=8, le=4096, description="bits per column access")
    burst_length: int = Field(4, ge=1, le=64, description="columns per burst (BL)")
    page_size_bytes: int = Field(1024, ge=64, description="row (page) size in bytes")

    @property
    def banks_per_channel(self) -> int:
        """Banks in one channel (ranks × bank groups × banks per group)."""
        return self.ranks * self.bank_groups * self.banks_per_group

    @property
    def burst_bytes(self) -> int:
        """Bytes moved by one RD/WR burst: BL × column width."""
        return self.burst_length * self.column_width_bits // 8

    @property
    def channel_capacity_bytes(self) -> int:
        """Bytes per channel: banks × rows × page size."""
        return self.banks_per_channel * self.rows * self.page_size_bytes

    @property
    def capacity_bytes(self) -> int:
        """Bytes of the whole device (all channels)."""
        return self.channels * self.channel_capacity_bytes

    @model_validator(mode="after")
    def _consistent(self) -> "OrgConfig":
        if self.page_size_bytes * 8 != self.columns * self.column_width_bits:
            raise ValueError(
                f"page_size_bytes ({self.page_size_bytes}) must equal columns × column_width_bits"
                f" / 8 = {self.columns} × {self.column_width_bits} / 8 = "
                f"{self.columns * self.column_width_bits // 8}")
        if self.columns % self.burst_length:
            raise ValueError(f"columns ({self.columns}) must be a multiple of burst_length "
                             f"({self.burst_length})")
        return self


class TimingConfig(FrozenSection):
    """DRAM timing parameters in memory-clock cycles (tCK), JEDEC JESD235/JESD238 names.

    Defaults: the values of the memory standard ``memory.kind`` selects
    (:mod:`archsim.memory.standards`; HBM2: the NeuPIMs reference simulator's, DESIGN §3); the
    field defaults below are HBM2's. ``tRC`` defaults to ``tRAS + tRP`` when omitted.
    ``tREFI``/``tRFC`` drive all-bank refresh, ``tRFCpb``/``tRREFD``/``tREFIpb`` per-bank
    refresh (``tREFIpb`` defaults to ``ceil(tREFI / banks per channel)``: one REFpb every
    tREFIpb, each bank once per tREFI, as Ramulator 2.1's PerBank refresh manager and HBM2's
    tREFISB). ``tRTW`` and ``tPPD`` exist in HBM3 only.
    """

    tCK_ns: float = Field(1.0, gt=0, le=100, description="clock period in ns")
    CL: int = Field(14, ge=1, le=200, description="read latency (RD to first data)")
    CWL: int = Field(4, ge=0, le=200, description="write latency (WR to first data)")
    tRCDRD: int = Field(14, ge=1, le=200, description="ACT to RD, same bank")
    tRCDWR: int = Field(14, ge=1, le=200, description="ACT to WR, same bank")
    tRP: int = Field(14, ge=1, le=200, description="PRE to ACT, same bank")
    tRAS: int = Field(34, ge=1, le=500, description="ACT to PRE, same bank")
    tRC: int | None = Field(None, ge=1, le=1000, description="ACT to ACT, same bank")
    tRFC: int = Field(260, ge=1, le=10000, description="REFab to next command, same rank")
    tREFI: int = Field(3900, ge=10, le=10**6, description="average refresh interval")
    tRRD_S: int = Field(4, ge=1, le=200, description="ACT to ACT, different bank group")
    tRRD_L: int = Field(6, ge=1, le=200, description="ACT to ACT, same bank group")
    tWTR_S: int = Field(6, ge=1, le=200, description="end of write data to RD, diff. bank group")
    tWTR_L: int = Field(8, ge=1, le=200, description="end of write data to RD, same bank group")
    tFAW: int = Field(30, ge=1, le=1000, description="window for four ACTs, same rank")
    tWR: int = Field(16, ge=1, le=200, description="end of write data to PRE, same bank")
    tCCD_S: int = Field(1, ge=1, le=64, description="column to column, different bank group")
    tCCD_L: int = Field(2, ge=1, le=64, description="column to column, same bank group")
    tRTP_L: int = Field(6, ge=1, le=200, description="RD to PRE, same bank (JESD235 tRTPL)")
    tRFCpb: int = Field(160, ge=1, le=10000, description="REFpb (REFSB) to ACT, same bank")
    tRREFD: int = Field(8, ge=1, le=1000, description="REFpb to ACT/REFpb, other bank")
    tREFIpb: int | None = Field(None, ge=1, le=10**6,
                                description="interval between REFpb commands of a channel")
    tRTW: int | None = Field(None, ge=1, le=200, description="RD to WR turnaround (HBM3)")
    tPPD: int | None = Field(None, ge=1, le=64, description="PRE to PRE, same pseudo-channel "
                                                            "(HBM3)")

    @property
    def tRC_cycles(self) -> int:
        """ACT-to-ACT in one bank: ``tRC`` if given, else ``tRAS + tRP`` (JEDEC definition)."""
        return self.tRC if self.tRC is not None else self.tRAS + self.tRP

    @model_validator(mode="after")
    def _consistent(self) -> "TimingConfig":
        for rule in TIMING_RULES:
            if not rule.holds(self):
                raise CrossFieldError(rule.keys, rule.message(self))
        return self


@dataclass(frozen=True)
class TimingRule:
    """One cross-field rule of :class:`TimingConfig` (all values in tCK cycles).

    Attributes:
        keys: the parameters it relates; the first one is named in the error.
        lhs, op, rhs: the rule ``lhs op rhs``; each side is a key name or a ``+`` of key names
            (``tRC`` means :attr:`TimingConfig.tRC_cycles`); ``op`` is ``>=``, ``<=`` or ``<``.
        why: what breaks when it does not hold, and its source (JEDEC JESD235 HBM2 unless
            said otherwise).

    The memory checker and the controller read the same parameters; these rules are what a
    timing table must satisfy for both to mean what JEDEC means (one list, reused by
    ``archsim.memory.checker``).
    """

    keys: tuple[str, ...]
    lhs: str
    op: str
    rhs: str
    why: str

    @staticmethod
    def _value(t: "TimingConfig", expr: str) -> int:
        return sum(t.tRC_cycles if k == "tRC" else int(getattr(t, k))
                   for k in expr.split("+"))

    def holds(self, t: "TimingConfig") -> bool:
        """True when ``t`` satisfies the rule (a rule on an omitted ``tRC`` holds by its
        definition ``tRAS + tRP``)."""
        a, b = self._value(t, self.lhs), self._value(t, self.rhs)
        return {">=": a >= b, "<=": a <= b, "<": a < b}[self.op]

    def message(self, t: "TimingConfig") -> str:
        """``tRAS (5) must be >= tRCDRD (14): ...`` with the values of ``t``."""
        def side(expr: str) -> str:
            v = self._value(t, expr)
            return f"{expr.replace('+', ' + ')} ({v})" if "+" not in expr else \
                f"{expr.replace('+', ' + ')} = {v}"
        return f"{side(self.lhs)} must be {self.op} {side(self.rhs)}: {self.why}"


#: Every cross-field rule of the DRAM timing table, checked in this order.
TIMING_RULES: tuple[TimingRule, ...] = (
    TimingRule(("tRAS", "tRCDRD"), "tRAS", ">=", "tRCDRD",
               "a row opened by ACT must stay open until its first read can issue "
               "(ACT->RD tRCD <= ACT->PRE tRAS, JESD235)"),
    TimingRule(("tRAS", "tRCDWR"), "tRAS", ">=", "tRCDWR",
               "a row opened by ACT must stay open until its first write can issue "
               "(ACT->WR tRCD <= ACT->PRE tRAS, JESD235)"),
    TimingRule(("tRC", "tRAS", "tRP"), "tRC", ">=", "tRAS+tRP",
               "ACT to ACT of one bank includes the row's active time and its precharge "
               "(JESD235 tRC)"),
    TimingRule(("tRTP_L", "tRAS"), "tRTP_L", "<=", "tRAS",
               "a read's RD->PRE recovery cannot outlast the row's minimum active time "
               "(every JEDEC speed bin has tRTP < tRAS)"),
    TimingRule(("tWR", "tRAS"), "tWR", "<=", "tRAS",
               "write recovery before PRE cannot outlast the row's minimum active time "
               "(every JEDEC speed bin has tWR < tRAS)"),
    TimingRule(("CWL", "CL"), "CWL", "<=", "CL",
               "write latency is at most read latency (JESD235 WL <= RL); otherwise the RD->WR "
               "turnaround CL + BL - CWL of the data bus is negative"),
    TimingRule(("tCCD_L", "tCCD_S"), "tCCD_L", ">=", "tCCD_S",
               "the same-bank-group (long) spacing is at least the different-group one"),
    TimingRule(("tRRD_L", "tRRD_S"), "tRRD_L", ">=", "tRRD_S",
               "the same-bank-group (long) spacing is at least the different-group one"),
    TimingRule(("tWTR_L", "tWTR_S"), "tWTR_L", ">=", "tWTR_S",
               "the same-bank-group (long) spacing is at least the different-group one"),
    TimingRule(("tFAW", "tRRD_S"), "tFAW", ">=", "tRRD_S",
               "the four-activation window holds at least one ACT-to-ACT spacing"),
    TimingRule(("tRFC", "tRC"), "tRFC", ">=", "tRC",
               "a refresh activates and precharges rows internally, so it lasts at least one "
               "row cycle (JESD235 tRFC > tRC)"),
    TimingRule(("tRFC", "tREFI"), "tRFC", "<", "tREFI",
               "the device would refresh forever"),
)


def timing_rule_violations(t: "TimingConfig") -> list[str]:
    """Messages of every rule of :data:`TIMING_RULES` that ``t`` breaks (empty when none)."""
    return [r.message(t) for r in TIMING_RULES if not r.holds(t)]


class RefreshConfig(FrozenSection):
    """Refresh policy (the refresh manager of the controller, Ramulator 2-style).

    * ``all_bank``: one REFab per rank every tREFI, all ranks of a channel due together (DRAMsim3
      RANK_LEVEL_SIMULTANEOUS), each blocking its rank for tRFC;
    * ``rank_staggered``: the same REFab per rank, rank r due at ``(r + 1) · tREFI / ranks``
      then every tREFI (DRAMsim3 RANK_LEVEL_STAGGERED);
    * ``per_bank``: one REFpb every tREFIpb to the next bank in the JEDEC order (bank group
      fastest, then bank, then rank: DRAMsim3 BANK_LEVEL_STAGGERED), each bank once per
      ``banks × tREFIpb`` ≈ tREFI, blocking only that bank for tRFCpb.

    A due refresh is postponed while a PIM row of its banks is open, and pulled in before a
    PIM_HEADER's GEMV sequence that would run past it (JEDEC allows 8 of each); the checker
    enforces at most 9 × tREFI between two refreshes of a rank (per bank: of a bank).
    The memory standard must support the mode (``memory.kind``).
    """

    enabled: bool = True
    mode: Literal["all_bank", "rank_staggered", "per_bank"] = "all_bank"


class ControllerConfig(FrozenSection):
    """Memory controller: scheduler, page policy, write handling, queues, address mapping.

    Policies are units of the controller, each read by the reference controller
    (:mod:`archsim.memory.controller`), the compiled kernel (:mod:`archsim.memory.kernel`) and
    understood by the checker; their decisions live once in :mod:`archsim.memory.policy`.

    * ``scheduler``: ``fr_fcfs`` (row hits first, then the oldest; Rixner et al., ISCA 2000),
      ``fcfs`` (each bank serves its oldest request; across banks the oldest ready first),
      ``fr_fcfs_cap`` (FR-FCFS until the open row has served ``row_hit_cap`` column commands
      since its ACT, then FCFS: a starvation guard; Ramulator's FRFCFS_Cap, Mutlu & Moscibroda
      MICRO 2007).
    * ``page_policy``: ``open`` (a row stays open until a queued request needs another row),
      ``closed`` (every column command auto-precharges, RDA/WRA: DRAMsim3's CLOSE_PAGE),
      ``closed_adaptive`` (auto-precharge when no other queued request hits the row),
      ``timeout`` (open, and a row with no queued request is closed ``page_timeout_cycles``
      after its last column command; Ramulator's Timeout row policy, 50 cycles).
    * ``write_policy``: ``mixed`` (reads and writes share ``command_queue_size`` and one
      FR-FCFS queue) or ``drain`` (writes wait in a write queue of ``write_queue_size`` bursts
      beside ``command_queue_size`` reads; the controller serves reads until the write queue
      holds more than ``write_high_watermark`` of its size or no read waits, then writes until
      it holds fewer than ``write_low_watermark`` and a read waits: Ramulator 2's
      controller_base.cpp set_write_mode, defaults 0.8 / 0.2). The default is ``drain``, as
      in DRAMsim3, Ramulator 2 and the NeuPIMs reference.

    ``address_mapping`` lists the address fields from most to least significant bit, two
    letters each: ``ro`` row, ``ra`` rank, ``bg`` bank group, ``ba`` bank, ``ch`` channel,
    ``co`` column (the burst offset below ``co`` is implicit). Every field exactly once.
    A parameter of a policy that is not selected is rejected (it would do nothing).
    """

    page_policy: Literal["open", "closed", "closed_adaptive", "timeout"] = "open"
    page_timeout_cycles: int | None = Field(
        None, ge=1, le=1 << 20, description="timeout page policy: idle cycles before a row "
                                            "closes (default 50)")
    scheduler: Literal["fr_fcfs", "fcfs", "fr_fcfs_cap"] = "fr_fcfs"
    row_hit_cap: int | None = Field(
        None, ge=1, le=1 << 16, description="fr_fcfs_cap: column commands an open row serves "
                                            "first before FCFS (default 16)")
    write_policy: Literal["mixed", "drain"] = "drain"
    write_queue_size: int | None = Field(
        None, ge=2, le=1 << 16, description="drain write policy: write bursts queued per "
                                            "channel (default command_queue_size)")
    write_high_watermark: float | None = Field(
        None, gt=0, le=1, description="drain write policy: fraction of the write queue that "
                                      "starts a drain (default 0.8)")
    write_low_watermark: float | None = Field(
        None, ge=0, lt=1, description="drain write policy: fraction below which a drain "
                                      "ends (default 0.2)")
    queue_size_per_bank: int = Field(32, ge=1, le=1 << 16)
    command_queue_size: int = Field(128, ge=1, le=1 << 16)
    address_mapping: str = "rorabgbachco"

    @model_validator(mode="after")
    def _mapping(self) -> "ControllerConfig":
        s = self.address_mapping
        parts = [s[i:i + 2] for i in range(0, len(s), 2)]
        if len(s) % 2 or sorted(parts) != sorted(ADDRESS_FIELDS):
            raise ValueError(
                f"address_mapping '{s}' must name each of {', '.join(ADDRESS_FIELDS)} exactly "
                "once (two letters each, most significant first), e.g. 'rorabgbachco'")
        for key, owner, needed in (("page_timeout_cycles", "page_policy", "timeout"),
                                   ("row_hit_cap", "scheduler", "fr_fcfs_cap"),
                                   ("write_queue_size", "write_policy", "drain"),
                                   ("write_high_watermark", "write_policy", "drain"),
                                   ("write_low_watermark", "write_policy", "drain")):
            if getattr(self, key) is not None and getattr(self, owner) != needed:
                raise ValueError(f"{key} applies only with {owner}: {needed} (got "
                                 f"{owner}: {getattr(self, owner)}); remove it or set {owner}: "
                                 f"{needed}")
        if self.write_policy == "drain" and \
                self.write_low_fraction >= self.write_high_fraction:
            raise ValueError(f"write_low_watermark ({self.write_low_fraction}) must be below "
                             f"write_high_watermark ({self.write_high_fraction})")
        return self

    @property
    def address_fields(self) -> tuple[str, ...]:
        """The mapping's fields, most significant first, e.g. ('ro','ra','bg','ba','ch','co')."""
        s = self.address_mapping
        return tuple(s[i:i + 2] for i in range(0, len(s), 2))

    @property
    def timeout_cycles(self) -> int:
        """Idle cycles before the timeout page policy closes a row (50 when not given:
        Ramulator's Timeout row policy)."""
        return 50 if self.page_timeout_cycles is None else self.page_timeout_cycles

    @property
    def hit_cap(self) -> int:
        """Column commands an open row serves first under fr_fcfs_cap (16 when not given:
        Ramulator's FRFCFS_Cap)."""
        return 16 if self.row_hit_cap is None else self.row_hit_cap

    @property
    def write_queue_bursts(self) -> int:
        """Write bursts the channel queues under the drain write policy (default
        ``command_queue_size``, like the equal read/write buffers of DRAMsim3 and Ramulator 2)."""
        return self.command_queue_size if self.write_queue_size is None else \
            self.write_queue_size

    @property
    def write_high_fraction(self) -> float:
        """High watermark as a fraction of the write queue (0.8: Ramulator 2's default)."""
        return 0.8 if self.write_high_watermark is None else self.write_high_watermark

    @property
    def write_low_fraction(self) -> float:
        """Low watermark as a fraction of the write queue (0.2: Ramulator 2's default)."""
        return 0.2 if self.write_low_watermark is None else self.write_low_watermark


class PowerConfig(FrozenSection):
    """IDD currents (mA) and supply (V) per channel, for the DRAMPower/DRAMsim3 energy method.

    Defaults: HBM2 values of the NeuPIMs reference configuration (DESIGN §3).
    """

    vdd_v: float = Field(1.2, gt=0, le=5)
    idd0_ma: float = Field(65, ge=0, description="ACT-PRE cycling current")
    idd2n_ma: float = Field(40, ge=0, description="precharge standby current")
    idd3n_ma: float = Field(55, ge=0, description="active standby current")
    idd4r_ma: float = Field(390, ge=0, description="burst read current")
    idd4w_ma: float = Field(500, ge=0, description="burst write current")
    idd5ab_ma: float = Field(250, ge=0, description="all-bank refresh current")


class MemoryConfig(FrozenSection):
    """HBM device: standard, organisation, timing, refresh, controller and power.

    ``kind`` names the memory standard (:data:`archsim.memory.standards.STANDARDS`: ``hbm2``,
    ``hbm2e``, ``hbm3``): its organisation, timings and currents are the defaults of ``org``,
    ``timing`` and ``power`` (any key given here overrides them), its command set decides the
    refresh modes allowed, and the constraint rows of that standard apply.
    """

    kind: Literal["hbm2", "hbm2e", "hbm3"] = "hbm2"
    org: OrgConfig = OrgConfig()
    timing: TimingConfig = TimingConfig()
    refresh: RefreshConfig = RefreshConfig()
    controller: ControllerConfig = ControllerConfig()
    power: PowerConfig = PowerConfig()

    @model_validator(mode="before")
    @classmethod
    def _standard_defaults(cls, data: Any) -> Any:
        """Fill org / timing / power from the standard of ``kind`` under the given keys."""
        if not isinstance(data, dict):
            return data
        kind = data.get("kind", "hbm2")
        std = STANDARDS.get(kind) if isinstance(kind, str) else None
        if std is None:
            return data            # the Literal check reports the unknown kind
        out = dict(data)
        for section, defaults in (("org", std.org), ("timing", std.timing),
                                  ("power", std.power)):
            given = out.get(section)
            if given is None:
                out[section] = dict(defaults)
            elif isinstance(given, dict):
                out[section] = {**defaults, **given}
        return out

    @property
    def standard(self):
        """The :class:`archsim.memory.standards.Standard` of ``kind``."""
        return STANDARDS[self.kind]

    @property
    def burst_cycles(self) -> int:
        """Data-bus cycles of one burst: BL / beats per clock (BL/2 for double data rate;
        HBM3 moves 4 beats per tCK)."""
        return max(1, self.org.burst_length // self.standard.beats_per_clock)

    @property
    def peak_bandwidth_bytes_per_cycle_per_channel(self) -> float:
        """External peak per channel: burst bytes / burst cycles (32 B/cycle for HBM2 BL4)."""
        return self.org.burst_bytes / self.burst_cycles

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        """External peak of the whole device in B/s (all channels)."""
        return (self.peak_bandwidth_bytes_per_cycle_per_channel * self.org.channels
                / (self.timing.tCK_ns * 1e-9))

    @property
    def refi_pb_cycles(self) -> int:
        """Cycles between two REFpb commands of a channel under per-bank refresh: ``tREFIpb``,
        or ``ceil(tREFI / banks per channel)`` when not given (Ramulator 2.1 hbm2.py)."""
        t = self.timing
        if t.tREFIpb is not None:
            return t.tREFIpb
        return -(-t.tREFI // self.org.banks_per_channel)

    @model_validator(mode="after")
    def _consistent(self) -> "MemoryConfig":
        org = self.org
        for name, n in (("channels", org.channels), ("ranks", org.ranks),
                        ("bank_groups", org.bank_groups), ("banks_per_group", org.banks_per_group),
                        ("rows", org.rows), ("columns", org.columns)):
            if n & (n - 1):
                raise ValueError(
                    f"org.{name} = {n} is not a power of two, but address_mapping "
                    f"'{self.controller.address_mapping}' slices the address into bit fields")
        std = self.standard
        if self.refresh.mode not in std.refresh_modes:
            raise ValueError(f"refresh.mode '{self.refresh.mode}' is not supported by "
                             f"{self.kind} (its command set allows: "
                             f"{', '.join(std.refresh_modes)})")
        if self.refresh.mode == "rank_staggered" and org.ranks < 2:
            raise ValueError("refresh.mode 'rank_staggered' needs org.ranks >= 2 (got "
                             f"{org.ranks}); use all_bank")
        if self.refresh.mode == "per_bank" and self.refi_pb_cycles * org.banks_per_channel > \
                self.timing.tREFI + org.banks_per_channel:
            raise ValueError(f"timing.tREFIpb ({self.refi_pb_cycles}) × "
                             f"{org.banks_per_channel} banks exceeds tREFI "
                             f"({self.timing.tREFI}): a bank would not be refreshed once "
                             "per tREFI")
        if self.refresh.mode == "per_bank" and self.timing.tRFCpb > self.timing.tRFC:
            raise ValueError(f"timing.tRFCpb ({self.timing.tRFCpb}) must be <= tRFC "
                             f"({self.timing.tRFC}): one bank refreshes no slower than all")
        if self.refresh.mode == "per_bank" and self.timing.tRFCpb >= self.refi_pb_cycles * 8:
            raise ValueError(f"timing.tRFCpb ({self.timing.tRFCpb}) must be below 8 × tREFIpb "
                             f"({8 * self.refi_pb_cycles}): per-bank refreshes would pile up")
        need = [k for k in ("tRTW", "tPPD") if k in std.timing and getattr(self.timing, k) is None]
        if need:
            raise ValueError(f"timing.{need[0]} is required by {self.kind}")
        extra = [k for k in ("tRTW", "tPPD") if k not in std.timing and
                 getattr(self.timing, k) is not None]
        if extra:
            raise ValueError(f"timing.{extra[0]} does not exist in {self.kind} (its turnaround "
                             f"is CL + BL - CWL): remove it or set memory.kind: hbm3")
        if self.org.burst_length % self.standard.beats_per_clock:
            raise ValueError(f"org.burst_length ({self.org.burst_length}) must be a multiple "
                             f"of {self.standard.beats_per_clock} beats per clock of "
                             f"{self.kind}")
        return self


# --------------------------------------------------------------------------------------------
# PIM
# --------------------------------------------------------------------------------------------
class PimConfig(FrozenSection):
    """Per-bank PIM units (Newton-style, He et al. MICRO 2020) with the NeuPIMs additions.

    Command costs are in memory-clock cycles; ``gwrite_cycles`` defaults to the reference's
    32 × (tCCD_S + tCCD_L) = 96. ``gemv_pipeline_fill`` is the 6 of the reference's PIM_GEMV
    cost ``max(burst, tCCD_S) × (max(k, 6) + 1)``. ``mode_switch_cycles`` is what a
    single-row-buffer (blocked) channel pays to enter or leave PIM mode. The channel's global
    buffer holds one row's worth of vector (``memory.org.page_size_bytes``: what one GWRITE
    loads). ``readres_cycles`` times a stand-alone READRES (the ``newton`` command set; ``neupims``
    programs fuse it into PIM_GEMV, whose cost includes its read-out step); ``acc_bits`` is the accumulator width of
    the RTL PIM MAC (cosim; the timing and functional models accumulate in fp32).

    ``commands`` is the PIM command set attention is compiled to. ``neupims`` (NeuPIMs,
    ASPLOS 2024): per row group PIM_HEADER, G_ACT, one fused PIM_GEMV per head (k COMPs and
    the READRES in one command, cost ``max(BL, tCCD_S) × (max(k, FILL) + 1)``) and
    PIM_PRECHARGE. ``newton`` (Newton, He et al. MICRO 2020; the naive NPU+PIM baseline of
    NeuPIMs, ``DramType::NEWTON`` of its simulator): per row group G_ACT, per head k separate
    COMPs (one every ``max(BL, tCCD_S)``) and a READRES (``readres_cycles`` on the data bus),
    and the rows close with the standard all-bank precharge PREA; no PIM_HEADER, PIM_GEMV or
    PIM_PRECHARGE. Newton has one row buffer per bank shared by memory and PIM, so ``newton``
    needs ``row_buffer_mode: single`` (a dual-row-buffer Newton is a NeuPIMs feature without
    its commands, not a Newton machine).
    """

    multipliers_per_bank: int = Field(16, ge=1, le=1024)
    row_buffer_mode: Literal["dual", "single"] = "dual"
    commands: Literal["neupims", "newton"] = Field(
        "neupims", description="PIM command set: neupims (PIM_HEADER, fused PIM_GEMV, "
                               "PIM_PRECHARGE) or newton (G_ACT, COMPs, READRES, PREA)")
    gwrite_cycles: int = Field(96, ge=1, description="one GWRITE of a row's worth of vector")
    gemv_pipeline_fill: int = Field(6, ge=0, description="COMP pipeline depth (reference: 6)")
    readres_cycles: int = Field(4, ge=1, description="reading accumulated results of all banks")
    mode_switch_cycles: int = Field(28, ge=0,
                                    description="blocked mode: enter/leave PIM mode (tRP+tRCD)")
    acc_bits: int = Field(32, ge=8, le=64, description="accumulator width (fp32 or int32)")
    command_queue_depth: int = Field(
        1, ge=1, le=256, description="PIM commands in flight per channel (queued in the "
                                     "controller or executing); 1: each is sent when the "
                                     "previous one completed")

    @model_validator(mode="after")
    def _newton_single(self) -> "PimConfig":
        if self.commands == "newton" and self.row_buffer_mode != "single":
            raise ValueError(
                "commands: newton needs row_buffer_mode: single (Newton has one row buffer "
                "per bank, shared by memory and PIM; dual row buffers are a NeuPIMs feature)")
        return self


__all__ = ["ADDRESS_FIELDS", "OrgConfig", "TimingConfig", "TimingRule", "TIMING_RULES",
           "timing_rule_violations", "RefreshConfig", "ControllerConfig", "PowerConfig",
           "MemoryConfig", "PimConfig"]
