"""Machine configuration: typed, validated, immutable.

A machine is described by one YAML document with seven sections — ``npu``, ``memory``, ``pim``,
``system``, ``gpu``, ``energy`` and ``area`` — validated by pydantic v2 into frozen objects
(:class:`MachineConfig`). ``energy`` and ``area`` (the per-action energy table and the per-unit
areas, :mod:`archsim.energy.schema`) have no defaults: every constant comes from the preset with
its ``source``.
Presets ship in ``archsim/presets/`` and may inherit (``base: neupims``); any key can be
overridden with ``--set dotted.key=value`` (the value is parsed as YAML).

This module is a leaf: it imports nothing else from the project but the leaves
:mod:`archsim.errors`, :mod:`archsim.yamlfile` (reading the files), the memory standards
(:mod:`archsim.memory.standards`), the controller's policy formulas (:mod:`archsim.memory.policy`,
for the write-drain watermarks) and the energy schema (:mod:`archsim.energy.schema`), so
every layer (including ``mapping``, which must know the machine it compiles for) may import it.
Each config file is parsed once per process (cached by path, modification time and size).

Errors are :class:`archsim.errors.ConfigError` whose message names the file (or preset /
override), the dotted key, its line when known, and the allowed values or range; an unknown key
also lists the closest valid keys.

Units are in the names: ``*_cycles`` are cycles of the clock named by the section (NPU cycles
in ``npu``, memory-clock cycles ``tCK`` in ``memory``/``pim``), ``*_bytes`` bytes,
``*_mhz`` MHz, ``*_ma`` milliamperes, ``*_v`` volts, ``*_pj`` picojoules, ``*_bytes_per_s`` B/s.
"""
from __future__ import annotations

import copy
import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from archsim.energy.schema import AreaConfig, EnergyConfig, ProcessConfig, VECTOR_OP_NAMES
from archsim.errors import ArchsimError, ConfigError
from archsim.memory.standards import STANDARDS
from archsim.yamlfile import (DuplicateKeyError, UniqueKeyLoader, parse_yaml_mapping,  # noqa: F401
                              read_text_file, yaml_key_lines)

PRESET_DIR = Path(__file__).resolve().parent / "presets"


class _Frozen(BaseModel):
    """Base of every config section: immutable and strict about unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


# --------------------------------------------------------------------------------------------
# NPU
# --------------------------------------------------------------------------------------------
VECTOR_OPS = ("add", "mul", "scale", "layernorm", "rmsnorm", "softmax", "gelu", "silu", "rope",
              "copy", "dot")
assert VECTOR_OP_NAMES == VECTOR_OPS, "archsim.energy.schema.VECTOR_OP_NAMES != VECTOR_OPS"


class VectorUnitConfig(_Frozen):
    """SIMD vector units, one paired with each systolic array (NeuPIMs §5).

    ``latency_cycles[op]`` is the pipeline latency of one vector instruction of ``op`` on one
    chunk of ``lanes`` elements; ``passes[op]`` (default 1) how often a multi-pass op reads its
    data (layernorm: mean, variance, normalise; softmax: max, exp-sum, scale); a ``[rows, cols]``
    operand takes ``latency + passes · rows · ceil(cols/lanes) − 1`` NPU cycles (fully
    pipelined, ``archsim.npu.timing.vector_op_cycles``). Latencies follow the NeuPIMs reference
    simulator's vector-unit table (add/mul 1 cycle; transcendental ops a few cycles); the passes
    are this model's assumption (the reference charges two adder-tree passes plus a few vector
    passes for layernorm and softmax). Both are meant to be swept.
    """

    count: int = Field(8, ge=1, le=1024, description="number of vector units")
    queue_depth: int = Field(2, ge=1, le=64,
                             description="instructions a vector unit accepts ahead of their "
                                         "start (assumption)")
    lanes: int = Field(128, ge=1, le=65536, description="elements processed per cycle per unit")
    latency_cycles: dict[Literal[VECTOR_OPS], int] = Field(  # type: ignore[valid-type]
        default_factory=lambda: {"add": 1, "mul": 1, "scale": 1, "layernorm": 8, "rmsnorm": 6,
                                 "softmax": 8, "gelu": 4, "silu": 4, "rope": 4, "copy": 1,
                                 "dot": 4})
    passes: dict[Literal[VECTOR_OPS], int] = Field(  # type: ignore[valid-type]
        default_factory=lambda: {"layernorm": 3, "rmsnorm": 2, "softmax": 3},
        description="passes over the data of multi-pass ops (ops not listed: 1; assumption)")

    def passes_of(self, op: str) -> int:
        """Passes over the data of vector op ``op`` (1 unless listed in ``passes``)."""
        return self.passes.get(op, 1)

    @model_validator(mode="after")
    def _all_ops_and_positive(self) -> "VectorUnitConfig":
        missing = [op for op in VECTOR_OPS if op not in self.latency_cycles]
        if missing:
            raise ValueError(f"latency_cycles is missing ops {missing}; all of {list(VECTOR_OPS)}"
                             " are required")
        for name, table in (("latency_cycles", self.latency_cycles), ("passes", self.passes)):
            bad = [f"{name}.{k} must be >= 1 (got {v})" for k, v in table.items() if v < 1]
            if bad:
                raise ValueError("; ".join(bad))
        return self


class ScratchpadConfig(_Frozen):
    """On-chip SRAM shared by the arrays and vector units (double buffered by the compiler).

    ``size_bytes`` bounds what the compiler keeps on chip (a GEMM chain that does not fit runs
    in row blocks, each streaming the weights again). ``banks`` splits it into banks of
    ``size_bytes / banks``, the capacity an access is priced at (``energy.npu.sram``); the
    timing model has no SRAM port or bank conflicts (the arrays, vector units and DMA never
    wait for the scratchpad).
    """

    size_bytes: int = Field(32 * 2**20, ge=1024, description="capacity in bytes")
    banks: int = Field(32, ge=1, le=4096,
                       description="SRAM banks: an access is priced at one bank's capacity "
                                   "(energy only; no bank conflicts are timed)")


class DmaConfig(_Frozen):
    """DMA engine between HBM and the scratchpad.

    ``max_outstanding`` is sized by Little's law: sustaining the HBM peak of 1 KiB per cycle
    (16 requests of 64 B) through a loaded read latency of a few hundred cycles needs thousands
    of requests in flight; 512 held weight streaming to about 30 % of peak in whole-layer runs.
    """

    request_bytes: int = Field(64, ge=16, description="bytes per memory request (one burst)")
    max_outstanding: int = Field(4096, ge=1, le=1 << 20,
                                 description="memory requests in flight at once")
    setup_cycles: int = Field(10, ge=0, description="NPU cycles to start one 2-D tile transfer")
    issue_per_cycle: int = Field(32, ge=1, le=4096,
                                 description="memory requests the DMA engine issues per NPU "
                                             "cycle (assumption: twice the 16 x 64 B per cycle "
                                             "that reach the HBM2 peak of 1 TB/s at 1 GHz)")


class NpuConfig(_Frozen):
    """The NPU: weight-stationary systolic arrays, vector units, scratchpad, DMA.

    Defaults are the NeuPIMs NPU (Heo et al., ASPLOS 2024, §5): 8 arrays of 128×128 PEs at
    1 GHz, fp16 operands.
    """

    n_arrays: int = Field(8, ge=1, le=1024)
    array_height: int = Field(128, ge=2, le=4096, description="PE rows (H): weight rows")
    array_width: int = Field(128, ge=2, le=4096, description="PE columns (W): output columns")
    freq_mhz: float = Field(1000.0, gt=0, le=10000)
    dataflow: Literal["weight_stationary"] = Field(
        "weight_stationary", description="the one dataflow modelled (the tile formula of "
                                         "archsim.npu.timing); any other value is rejected")
    dtype_bytes: Literal[1, 2, 4] = Field(
        2, description="operand width of the hardware datapath: the bytes a PIM COMP step reads "
                       "(energy) and the data width of the RTL blocks (cosim); the simulated "
                       "workload's element type is the model's dtype_bytes")
    sa_queue_depth: int = Field(2, ge=1, le=64,
                                description="instructions a systolic array accepts ahead of "
                                            "their start (assumption: one running + one queued, "
                                            "matching its double-buffered weights)")
    vector: VectorUnitConfig = VectorUnitConfig()
    scratchpad: ScratchpadConfig = ScratchpadConfig()
    dma: DmaConfig = DmaConfig()
    process: ProcessConfig = ProcessConfig()


# --------------------------------------------------------------------------------------------
# Memory (HBM2)
# --------------------------------------------------------------------------------------------
ADDRESS_FIELDS = ("ro", "ra", "bg", "ba", "ch", "co")


class OrgConfig(_Frozen):
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


class TimingConfig(_Frozen):
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


class CrossFieldError(ValueError):
    """A rule between several keys of one config section is broken.

    ``keys`` are the section's keys the rule relates (the first is the one reported, e.g.
    ``tRAS``); :func:`load_config` turns it into ``FILE:LINE: memory.timing.tRAS: ...`` with
    the line of that key (or the ``--set`` that changed any of them).
    """

    def __init__(self, keys: tuple[str, ...], text: str) -> None:
        super().__init__(text)
        self.keys = keys


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


class RefreshConfig(_Frozen):
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


class ControllerConfig(_Frozen):
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


class PowerConfig(_Frozen):
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


class MemoryConfig(_Frozen):
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
class PimConfig(_Frozen):
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


# --------------------------------------------------------------------------------------------
# System and GPU
# --------------------------------------------------------------------------------------------
class InterconnectConfig(_Frozen):
    """Device-to-device links for tensor/pipeline parallel collectives (ring all-reduce)."""

    bandwidth_bytes_per_s: float = Field(300e9, gt=0, description="per direction per device")
    latency_ns: float = Field(1000.0, ge=0, description="per collective step")


class SystemConfig(_Frozen):
    """What the system has and how the mapper uses it.

    ``engines`` lists the compute engines present: ``[npu, pim]``, ``[npu]`` or ``[gpu]``.
    ``tensor_parallel`` / ``pipeline_parallel`` of ``null`` take the model's reference degrees.
    """

    engines: tuple[Literal["npu", "pim", "gpu"], ...] = ("npu", "pim")
    sub_batches: int = Field(2, ge=1, le=64, description="sub-batches interleaved (1 = off)")
    sub_batch_policy: Literal["half", "balanced_kv"] = "half"
    channel_policy: Literal["round_robin", "min_load"] = "min_load"
    tensor_parallel: int | None = Field(None, ge=1, le=1024)
    pipeline_parallel: int | None = Field(None, ge=1, le=1024)
    interconnect: InterconnectConfig = InterconnectConfig()

    @model_validator(mode="after")
    def _engines(self) -> "SystemConfig":
        e = set(self.engines)
        if len(e) != len(self.engines):
            raise ValueError(f"engines {list(self.engines)} lists an engine twice")
        if "gpu" in e and len(e) > 1:
            raise ValueError(f"engines {list(self.engines)}: 'gpu' is a system of its own and "
                             "cannot be combined with 'npu' or 'pim'")
        if "pim" in e and "npu" not in e:
            raise ValueError(f"engines {list(self.engines)}: 'pim' needs an 'npu' to run GEMMs")
        if not e:
            raise ValueError("engines must not be empty; allowed: [npu, pim], [npu], [gpu]")
        return self

    @property
    def has_pim(self) -> bool:
        """True when attention GEMVs may run on PIM."""
        return "pim" in self.engines


class GpuCalibration(_Frozen):
    """Per-kernel efficiencies of the calibrated GPU mode (``gpu.mode: calibrated``).

    Kernel times (:mod:`archsim.gpu.roofline`, ``kernel_times_s``): a GEMM of ``M`` token rows
    takes ``max(FLOPs / (peak · gemm_efficiency · M / (M + gemm_half_rows)),
    bytes / (bandwidth · weight_bw_efficiency))``; decode attention over a mean context ``L``
    per request ``max(FLOPs / (peak · gemm_efficiency), bytes / (bandwidth ·
    attention_bw_efficiency · L / (L + attention_half_context)))``; element-wise kernels
    ``bytes / (bandwidth · vector_bw_efficiency)``; each kernel adds ``kernel_launch_us``, each
    iteration ``iteration_overhead_us`` (scheduler, sampling, framework). The values are the
    least-squares fit of :mod:`archsim.gpu.calibration` to published measurements; ``fit``
    states its points and errors.
    """

    gemm_efficiency: float = Field(0.7, gt=0, le=1, description="large-GEMM fraction of peak")
    gemm_half_rows: float = Field(0.0, ge=0, le=1e5,
                                  description="GEMM rows at half of gemm_efficiency")
    weight_bw_efficiency: float = Field(0.8, gt=0, le=1,
                                        description="bandwidth fraction streaming weights")
    attention_bw_efficiency: float = Field(0.8, gt=0, le=1,
                                           description="decode attention bandwidth asymptote")
    attention_half_context: float = Field(0.0, ge=0, le=1e6,
                                          description="context (tokens) at half of it")
    vector_bw_efficiency: float = Field(0.6, gt=0, le=1, description="element-wise kernels")
    kernel_launch_us: float = Field(5.0, ge=0, le=1e4)
    iteration_overhead_us: float = Field(0.0, ge=0, le=1e6,
                                         description="framework time per iteration")
    fit: str = Field("not fitted: the defaults equal the roofline mode's factors",
                     min_length=12, description="which points were fitted and the fit's error")
    max_error: float = Field(1.0, gt=0, le=10,
                             description="largest |relative error| on the calibration points")


class GpuConfig(_Frozen):
    """GPU baseline: a per-kernel model over the workloads operator graph (``archsim.gpu``).

    ``mode: roofline`` — per kernel ``max(FLOPs / compute, bytes / bandwidth) + launch`` with
    the constant efficiencies ``gemm_efficiency`` / ``gemv_efficiency`` / ``vector_efficiency``
    and ``kernel_launch_us`` (an optimistic bound). ``mode: calibrated`` — efficiencies that
    depend on the GEMM's rows and the attention's context plus a framework overhead per
    iteration, fitted to measured serving stacks (:class:`GpuCalibration`, ``calibrated``).
    Each mode reads only its own keys; an override of the other mode's keys is rejected.
    Defaults: NVIDIA A100 40 GB SXM datasheet — 312 TFLOP/s dense fp16 tensor core, 1,555 GB/s
    HBM2e. Board power for the energy model: ``energy.gpu``.
    """

    name: str = "A100-40GB"
    mode: Literal["roofline", "calibrated"] = "roofline"
    peak_flops: float = Field(312e12, gt=0, description="dense fp16 tensor FLOP/s")
    mem_bandwidth_bytes_per_s: float = Field(1.555e12, gt=0)
    gemm_efficiency: float = Field(0.7, gt=0, le=1)
    gemv_efficiency: float = Field(0.8, gt=0, le=1, description="of bandwidth, attention/GEMV")
    vector_efficiency: float = Field(0.6, gt=0, le=1, description="of bandwidth, elementwise")
    kernel_launch_us: float = Field(5.0, ge=0)
    memory_bytes: int = Field(40 * 2**30, ge=1)
    calibrated: GpuCalibration = GpuCalibration()


#: Keys of ``gpu`` each mode reads (an override of the other mode's keys is rejected).
GPU_MODE_KEYS: dict[str, tuple[str, ...]] = {
    "roofline": ("gemm_efficiency", "gemv_efficiency", "vector_efficiency", "kernel_launch_us"),
    "calibrated": ("calibrated",),
}


class MachineConfig(_Frozen):
    """A whole machine: NPU, memory, PIM, system composition, GPU baseline, and the energy and
    area tables (required: every constant with its source, :mod:`archsim.energy.schema`)."""

    name: str = "custom"
    npu: NpuConfig = NpuConfig()
    memory: MemoryConfig = MemoryConfig()
    pim: PimConfig = PimConfig()
    system: SystemConfig = SystemConfig()
    gpu: GpuConfig = GpuConfig()
    energy: EnergyConfig
    area: AreaConfig

    def npu_to_mem_cycles(self, npu_cycles: float) -> float:
        """Convert NPU-clock cycles to memory-clock cycles (ratio of the two clock periods)."""
        return npu_cycles * (1000.0 / self.npu.freq_mhz) / self.memory.timing.tCK_ns

    def mem_to_npu_cycles(self, mem_cycles: float) -> float:
        """Convert memory-clock cycles to NPU-clock cycles."""
        return mem_cycles * self.memory.timing.tCK_ns / (1000.0 / self.npu.freq_mhz)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (YAML/JSON friendly), with every default filled in."""
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------------------------
# Loading, overrides, error messages
# --------------------------------------------------------------------------------------------
def list_presets() -> list[str]:
    """Names of the presets shipped in ``archsim/presets`` (file stems)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


#: Parsed config files of this process: (resolved path, mtime_ns, size) -> (data, key lines).
#: A sweep resolves thousands of points against the same preset: it is parsed once.
_YAML_CACHE: dict[tuple[str, int, int], tuple[dict[str, Any], dict[tuple[str, ...], int]]] = {}


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """Read one YAML config file into a dict (and its key→line map); ConfigError on failure.

    The parse is cached per process by the file's resolved path, modification time and size
    (a changed file is parsed again); callers get their own deep copy of the data.
    """
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    hit = _YAML_CACHE.get(key) if key else None
    if hit is None:
        text = read_text_file(path, "YAML config file", ConfigError)
        hit = (parse_yaml_mapping(text, str(path), ConfigError,
                                  "sections (npu, memory, pim, system, gpu)"),
               yaml_key_lines(text))
        if key:
            _YAML_CACHE[key] = hit
    return copy.deepcopy(hit[0]), hit[1]


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``top`` over ``base`` (mappings merge, everything else replaces)."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def valid_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every dotted key path that ``model`` accepts (for 'did you mean' suggestions)."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys.extend(valid_keys(ann, dotted + "."))
    return keys


@functools.lru_cache(maxsize=1)
def _machine_keys() -> tuple[str, ...]:
    """:func:`valid_keys` of :class:`MachineConfig` (computed once per process)."""
    return tuple(valid_keys(MachineConfig))


#: Keys that existed and were removed because no model reads them: ``{dotted key: what the
#: model does instead}``. A file or ``--set`` still giving one is rejected with that reason
#: rather than as an unknown key (``tests/test_config_keywalk.py`` walks every other key).
REMOVED_KEYS: dict[str, str] = {
    "npu.scratchpad.bytes_per_cycle_per_bank":
        "the timing model has no scratchpad port bandwidth: the arrays, vector units and DMA "
        "never wait for SRAM ports",
    "pim.global_buffer_bytes":
        "the PIM global buffer holds one row's worth of vector, memory.org.page_size_bytes "
        "(what one GWRITE loads)",
}


def _removed_key_error(dotted: str, where: str) -> ConfigError:
    return ConfigError(f"{where}: {dotted} is not modelled ({REMOVED_KEYS[dotted]}); "
                       "remove it")


def _check_removed_keys(data: dict[str, Any], source: str,
                        lines: dict[tuple[str, ...], int]) -> None:
    """Reject a key of :data:`REMOVED_KEYS` given in a config file (or its ``base``)."""
    for dotted in REMOVED_KEYS:
        cur: Any = data
        path = tuple(dotted.split("."))
        for p in path:
            if not isinstance(cur, dict) or p not in cur:
                break
            cur = cur[p]
        else:
            line = lines.get(path)
            raise _removed_key_error(dotted, f"{source}:{line}" if line else source)


def closest_keys(key: str, candidates: list[str]) -> str:
    """'; did you mean: a, b' for the keys nearest ``key`` (empty when none is near).

    Falls back to '; valid keys here: …' (the siblings of ``key``) when nothing is close.
    """
    leaf = key.rsplit(".", 1)[-1]
    parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
    siblings = [c for c in candidates if c.startswith(parent) and "." not in c[len(parent):]]
    near = difflib.get_close_matches(key, candidates, n=3, cutoff=0.6)
    near += [c for c in difflib.get_close_matches(parent + leaf, siblings, n=3, cutoff=0.5)
             if c not in near]
    if not near:
        near = [c for c in candidates if c.rsplit(".", 1)[-1].lower() == leaf.lower()]
    return f"; did you mean: {', '.join(near[:3])}" if near else (
        f"; valid keys here: {', '.join(s.rsplit('.', 1)[-1] for s in siblings)}"
        if siblings else "")


def _format_validation_error(exc: ValidationError, source: str,
                             lines: dict[tuple[str, ...], int],
                             overrides: dict[tuple[str, ...], str]) -> str:
    """One message per pydantic error: where (file:line or the --set), dotted key, what is
    allowed. ``overrides`` maps overridden key paths to the ``--set`` text that set them."""
    valid = list(_machine_keys())
    msgs = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        if loc and loc[-1] == "[key]":          # a bad key of a dict-valued setting
            loc = loc[:-1]
        cross = (err.get("ctx") or {}).get("error")
        related = [loc]
        if isinstance(cross, CrossFieldError):  # name the key, find its line or --set
            related = [loc + (k,) for k in cross.keys]
            loc = related[0]
        key = ".".join(loc) or "(top level)"
        hits = [t for path, t in overrides.items()
                if any(path[:len(r)] == r for r in related)]
        if hits:
            where = f"{source} with --set {' '.join(hits)}"
        else:
            line = lines.get(loc)
            where = f"{source}" + (f":{line}" if line else "")
        kind = err["type"]
        if kind == "extra_forbidden":
            msgs.append(f"{where}: unknown key '{key}'{closest_keys(key, valid)}")
        elif kind in ("value_error", "assertion_error"):
            text = err["msg"].removeprefix("Value error, ")
            msgs.append(f"{where}: {key or 'config'}: {text}")
        else:
            got = err.get("input")
            got_s = "" if isinstance(got, dict) else f" (got {got!r})"
            msgs.append(f"{where}: {key}: {err['msg']}{got_s}")
    return "; ".join(msgs)


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Parse one ``--set dotted.key=value`` override; the value is read as YAML.

    Returns the key path and the parsed value. Raises ConfigError when there is no ``=`` or the
    key is empty.
    """
    if "=" not in text:
        raise ConfigError(f"override '{text}': expected KEY=VALUE, e.g. "
                          "memory.timing.tRCDRD=16")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key):
        raise ConfigError(f"override '{text}': '{key}' is not a dotted key like "
                          "pim.multipliers_per_bank")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return tuple(key.split(".")), value


def _apply_override(data: dict[str, Any], path: tuple[str, ...], value: Any,
                    text: str) -> dict[str, Any]:
    """Set ``path`` to ``value`` in a nested dict, checking the key exists in the schema."""
    valid = list(_machine_keys())
    dotted = ".".join(path)
    if dotted in REMOVED_KEYS:
        raise _removed_key_error(dotted, f"override '{text}'")
    if dotted not in valid and not any(dotted.startswith(v + ".") for v in valid
                                       if v.endswith(("latency_cycles", "passes", "ops"))):
        raise ConfigError(f"override '{text}': unknown key '{dotted}'{closest_keys(dotted, valid)}")
    out = dict(data)
    cur = out
    for p in path[:-1]:
        nxt = cur.get(p)
        nxt = dict(nxt) if isinstance(nxt, dict) else {}
        cur[p] = nxt
        cur = nxt
    cur[path[-1]] = value
    return out


def _load_raw(name_or_path: str | Path, seen: tuple[str, ...] = ()) -> tuple[
        dict[str, Any], str, dict[tuple[str, ...], int]]:
    """Resolve a preset name or file path (following ``base:``) into merged raw data."""
    s = str(name_or_path)
    path = Path(s)
    if s in list_presets():
        path = PRESET_DIR / f"{s}.yaml"
        source = f"preset '{s}' ({path.name})"
    elif path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ConfigError(f"{path}: config file not found")
        source = str(path)
    else:
        raise ConfigError(f"unknown config '{s}': not a preset and not a file; "
                          f"presets: {', '.join(list_presets())}")
    if s in seen:
        raise ConfigError(f"{source}: 'base' inheritance loops through {' -> '.join(seen)}")
    data, lines = _read_yaml(path)
    own_name = data.get("name", path.stem)
    base = data.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise ConfigError(f"{source}: base: must be a preset name or file path")
        base_path = base
        if base not in list_presets() and not Path(base).is_absolute():
            base_path = str(path.parent / base)
        base_data, _, _ = _load_raw(base_path if Path(base_path).exists() else base, seen + (s,))
        data = _deep_merge(base_data, data)
    data["name"] = own_name
    return data, source, lines


def load_config(name_or_path: str | Path = "neupims",
                overrides: list[str] | tuple[str, ...] = ()) -> MachineConfig:
    """Load a preset (by name) or a YAML file, apply ``--set`` overrides, validate.

    Args:
        name_or_path: a preset name from :func:`list_presets` or a path to a YAML file
            (which may itself say ``base: <preset or file>``).
        overrides: ``dotted.key=value`` strings applied in order after the file.

    Returns:
        The frozen :class:`MachineConfig`.

    Raises:
        ConfigError: unknown preset/file, bad YAML, unknown key (with the closest valid keys),
            wrong type or out-of-range value (with the allowed range), or an inconsistent
            combination (with the reason). The message names the file and line when known.
    """
    data, source, lines = _load_raw(name_or_path)
    _check_removed_keys(data, source, lines)
    overridden: dict[tuple[str, ...], str] = {}
    for text in overrides:
        path, value = parse_override(text)
        data = _apply_override(data, path, value, text)
        overridden[path] = text
    try:
        cfg = MachineConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, source, lines, overridden)) from None
    _check_gpu_mode_overrides(cfg, overridden, source)
    return cfg


def _check_gpu_mode_overrides(cfg: MachineConfig, overridden: dict[tuple[str, ...], str],
                              source: str) -> None:
    """Reject an override of a ``gpu`` key that the configured ``gpu.mode`` does not read
    (it would silently do nothing)."""
    mode = cfg.gpu.mode
    for path, text in overridden.items():
        if len(path) < 2 or path[0] != "gpu":
            continue
        for other, keys in GPU_MODE_KEYS.items():
            if other != mode and path[1] in keys:
                raise ConfigError(
                    f"{source} with --set {text}: gpu.{path[1]} is read only with gpu.mode: "
                    f"{other}, but gpu.mode is {mode} (keys of {mode} mode: "
                    f"{', '.join('gpu.' + k for k in GPU_MODE_KEYS[mode])}; or set "
                    f"gpu.mode={other})")


def config_to_yaml(cfg: MachineConfig) -> str:
    """The effective configuration as YAML text (every key, defaults included)."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


def parallel_degrees(cfg: MachineConfig, model: Any) -> tuple[int, int]:
    """``(tensor_parallel, pipeline_parallel)`` of ``model`` on ``cfg``: the config's
    ``system.tensor_parallel`` / ``system.pipeline_parallel``, else the model's reference ones.

    Raises:
        ArchsimError / WorkloadError: the degrees do not split the model (pipeline stages must
            divide the layers; ``model.check_tensor_parallel`` checks the heads and widths).
    """
    tp = cfg.system.tensor_parallel or model.tensor_parallel
    pp = cfg.system.pipeline_parallel or model.pipeline_parallel
    model.check_tensor_parallel(tp)
    if model.n_layers % pp:
        raise ArchsimError(f"pipeline_parallel={pp} does not divide the {model.n_layers} "
                           f"layers of model '{model.name}'")
    return tp, pp


__all__ = [
    "MachineConfig", "parallel_degrees", "NpuConfig", "VectorUnitConfig", "ScratchpadConfig",
    "DmaConfig",
    "MemoryConfig", "OrgConfig", "TimingConfig", "RefreshConfig", "ControllerConfig",
    "PowerConfig", "PimConfig", "SystemConfig", "InterconnectConfig", "GpuConfig",
    "GpuCalibration", "GPU_MODE_KEYS", "EnergyConfig", "AreaConfig", "ProcessConfig",
    "load_config", "list_presets", "parse_override", "config_to_yaml", "ADDRESS_FIELDS",
    "parse_yaml_mapping", "yaml_key_lines", "read_text_file", "valid_keys", "closest_keys",
    "VECTOR_OPS", "TIMING_RULES", "TimingRule", "timing_rule_violations", "CrossFieldError",
    "REMOVED_KEYS",
]
