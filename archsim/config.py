"""Machine configuration: typed, validated, immutable.

A machine is described by one YAML document with seven sections — ``npu``, ``memory``, ``pim``,
``system``, ``gpu``, ``energy`` and ``area`` — validated by pydantic v2 into frozen objects
(:class:`MachineConfig`). ``energy`` and ``area`` (the per-action energy table and the per-unit
areas, :mod:`archsim.energy.schema`) have no defaults: every constant comes from the preset with
its ``source``.
Presets ship in ``archsim/presets/`` and may inherit (``base: neupims``); any key can be
overridden with ``--set dotted.key=value`` (the value is parsed as YAML).

This module is a leaf: it imports nothing else from the project but :mod:`archsim.errors` and
the schema leaf :mod:`archsim.energy.schema`, so every layer (including ``mapping``, which must
know the machine it compiles for) may import it.

Errors are :class:`archsim.errors.ConfigError` whose message names the file (or preset /
override), the dotted key, its line when known, and the allowed values or range; an unknown key
also lists the closest valid keys.

Units are in the names: ``*_cycles`` are cycles of the clock named by the section (NPU cycles
in ``npu``, memory-clock cycles ``tCK`` in ``memory``/``pim``), ``*_bytes`` bytes,
``*_mhz`` MHz, ``*_ma`` milliamperes, ``*_v`` volts, ``*_pj`` picojoules, ``*_bytes_per_s`` B/s.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from archsim.energy.schema import AreaConfig, EnergyConfig, ProcessConfig, VECTOR_OP_NAMES
from archsim.errors import ArchsimError, ConfigError

PRESET_DIR = Path(__file__).resolve().parent / "presets"
#: libyaml's loader when PyYAML has it (a preset with its sources loads ~10x faster), else the
#: pure-Python one; both read the same YAML and report the same line numbers.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    """On-chip SRAM shared by the arrays and vector units (double buffered by the compiler)."""

    size_bytes: int = Field(32 * 2**20, ge=1024, description="capacity in bytes")
    banks: int = Field(32, ge=1, le=4096, description="SRAM banks (parallel ports)")
    bytes_per_cycle_per_bank: int = Field(64, ge=1, description="read/write width of a bank")


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
    dataflow: Literal["weight_stationary"] = "weight_stationary"
    dtype_bytes: Literal[1, 2, 4] = 2
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
    """DRAM timing parameters in memory-clock cycles (tCK), JEDEC JESD235 names.

    Defaults: the HBM2 parameters of the NeuPIMs reference simulator (DESIGN §3).
    ``tRC`` defaults to ``tRAS + tRP`` when omitted. ``tREFI``/``tRFC`` drive all-bank refresh.
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
    tRTP_S: int = Field(4, ge=1, le=200, description="RD to PRE (short)")
    tRTP_L: int = Field(6, ge=1, le=200, description="RD to PRE, same bank group")

    @property
    def tRC_cycles(self) -> int:
        """ACT-to-ACT in one bank: ``tRC`` if given, else ``tRAS + tRP`` (JEDEC definition)."""
        return self.tRC if self.tRC is not None else self.tRAS + self.tRP

    @model_validator(mode="after")
    def _consistent(self) -> "TimingConfig":
        if self.tRC is not None and self.tRC < self.tRAS + self.tRP:
            raise ValueError(f"tRC ({self.tRC}) must be >= tRAS + tRP = {self.tRAS + self.tRP}")
        if self.tCCD_L < self.tCCD_S:
            raise ValueError(f"tCCD_L ({self.tCCD_L}) must be >= tCCD_S ({self.tCCD_S})")
        if self.tRRD_L < self.tRRD_S:
            raise ValueError(f"tRRD_L ({self.tRRD_L}) must be >= tRRD_S ({self.tRRD_S})")
        if self.tRFC >= self.tREFI:
            raise ValueError(f"tRFC ({self.tRFC}) must be < tREFI ({self.tREFI}): the device "
                             "would refresh forever")
        if self.tFAW < self.tRRD_S:
            raise ValueError(f"tFAW ({self.tFAW}) must be >= tRRD_S ({self.tRRD_S})")
        return self


class RefreshConfig(_Frozen):
    """Refresh policy. ``all_bank``: one REFab per rank every tREFI, blocking it for tRFC."""

    enabled: bool = True
    mode: Literal["all_bank"] = "all_bank"


class ControllerConfig(_Frozen):
    """Memory controller: page policy, scheduler, queues, address mapping.

    ``address_mapping`` lists the address fields from most to least significant bit, two
    letters each: ``ro`` row, ``ra`` rank, ``bg`` bank group, ``ba`` bank, ``ch`` channel,
    ``co`` column (the burst offset below ``co`` is implicit). Every field exactly once.
    """

    page_policy: Literal["open", "closed"] = "open"
    scheduler: Literal["fr_fcfs", "fcfs"] = "fr_fcfs"
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
        return self

    @property
    def address_fields(self) -> tuple[str, ...]:
        """The mapping's fields, most significant first, e.g. ('ro','ra','bg','ba','ch','co')."""
        s = self.address_mapping
        return tuple(s[i:i + 2] for i in range(0, len(s), 2))


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
    """HBM device: organisation, timing, refresh, controller and power."""

    kind: Literal["hbm2"] = "hbm2"
    org: OrgConfig = OrgConfig()
    timing: TimingConfig = TimingConfig()
    refresh: RefreshConfig = RefreshConfig()
    controller: ControllerConfig = ControllerConfig()
    power: PowerConfig = PowerConfig()

    @property
    def burst_cycles(self) -> int:
        """Data-bus cycles of one burst: BL/2 (double data rate)."""
        return max(1, self.org.burst_length // 2)

    @property
    def peak_bandwidth_bytes_per_cycle_per_channel(self) -> float:
        """External peak per channel: burst bytes / burst cycles (32 B/cycle for HBM2 BL4)."""
        return self.org.burst_bytes / self.burst_cycles

    @property
    def peak_bandwidth_bytes_per_s(self) -> float:
        """External peak of the whole device in B/s (all channels)."""
        return (self.peak_bandwidth_bytes_per_cycle_per_channel * self.org.channels
                / (self.timing.tCK_ns * 1e-9))

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
        return self


# --------------------------------------------------------------------------------------------
# PIM
# --------------------------------------------------------------------------------------------
class PimConfig(_Frozen):
    """Per-bank PIM units (Newton-style, He et al. MICRO 2020) with the NeuPIMs additions.

    Command costs are in memory-clock cycles; ``gwrite_cycles`` defaults to the reference's
    32 × (tCCD_S + tCCD_L) = 96. ``gemv_pipeline_fill`` is the 6 of the reference's PIM_GEMV
    cost ``max(burst, tCCD_S) × (max(k, 6) + 1)``. ``mode_switch_cycles`` is what a
    single-row-buffer (blocked) channel pays to enter or leave PIM mode.
    """

    multipliers_per_bank: int = Field(16, ge=1, le=1024)
    row_buffer_mode: Literal["dual", "single"] = "dual"
    global_buffer_bytes: int = Field(1024, ge=32, description="per-channel global buffer")
    gwrite_cycles: int = Field(96, ge=1, description="one GWRITE of a row's worth of vector")
    gemv_pipeline_fill: int = Field(6, ge=0, description="COMP pipeline depth (reference: 6)")
    readres_cycles: int = Field(4, ge=1, description="reading accumulated results of all banks")
    mode_switch_cycles: int = Field(28, ge=0,
                                    description="blocked mode: enter/leave PIM mode (tRP+tRCD)")
    acc_bits: int = Field(32, ge=8, le=64, description="accumulator width (fp32 or int32)")


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

    @model_validator(mode="after")
    def _consistent(self) -> "MachineConfig":
        gb = self.pim.global_buffer_bytes
        if self.system.has_pim and gb < self.memory.org.burst_bytes:
            raise ValueError(f"pim.global_buffer_bytes ({gb}) is smaller than one burst "
                             f"({self.memory.org.burst_bytes} B)")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (YAML/JSON friendly), with every default filled in."""
        return self.model_dump(mode="json")


# --------------------------------------------------------------------------------------------
# Loading, overrides, error messages
# --------------------------------------------------------------------------------------------
def list_presets() -> list[str]:
    """Names of the presets shipped in ``archsim/presets`` (file stems)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def yaml_key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each dotted key path of a YAML mapping document to its 1-based line number."""
    lines: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=_YAML_LOADER)
    except yaml.YAMLError:
        return lines

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = path + (str(k.value),)
                lines[key] = k.start_mark.line + 1
                walk(v, key)

    walk(root, ())
    return lines


def parse_yaml_mapping(text: str, source: str, error: type[Exception], what: str) -> dict[str, Any]:
    """Parse YAML ``text`` that must be a mapping (an empty document is ``{}``).

    Args:
        text: the YAML document.
        source: how to name it in messages (a file path or preset).
        error: the exception type to raise (ConfigError, SweepSpecError, ...).
        what: what the mapping should hold, for the message (e.g. "sections npu, memory, ...").

    Raises:
        error: not valid YAML (``source:line:column: not valid YAML: ...``), or not a mapping.
    """
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise error(f"{source}{where}: not valid YAML: "
                    f"{getattr(exc, 'problem', exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise error(f"{source}: must be a YAML mapping of {what}, got {type(data).__name__}")
    return data


def _read_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """Read one YAML config file into a dict (and its key→line map); ConfigError on failure."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from None
    data = parse_yaml_mapping(text, str(path), ConfigError,
                              "sections (npu, memory, pim, system, gpu)")
    return data, yaml_key_lines(text)


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
    valid = valid_keys(MachineConfig)
    msgs = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        if loc and loc[-1] == "[key]":          # a bad key of a dict-valued setting
            loc = loc[:-1]
        key = ".".join(loc) or "(top level)"
        hits = [t for path, t in overrides.items() if path[:len(loc)] == loc]
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
    valid = valid_keys(MachineConfig)
    dotted = ".".join(path)
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
    "parse_yaml_mapping", "yaml_key_lines", "valid_keys", "closest_keys",
    "VECTOR_OPS",
]
