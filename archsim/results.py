"""Result types every simulated system returns, with the definition of every metric. Over 800
lines because the metric table (:data:`METRICS`) and the two result types whose tables and
JSON read it are kept in one file, so that a metric's definition and the code that computes
and prints it are read and changed together.

Two results exist:

* :class:`IterationResult` — one iteration (one forward pass over the whole model for a batch of
  requests) of one system: its time in seconds and, for NPU systems, in NPU-clock cycles; the
  per-layer and per-stage breakdown; utilisation, bandwidth and energy; and where its timing came
  from (``cycle-level`` simulation, ``reused`` from an identical simulated iteration/layer, a
  calibrated ``surrogate``, or the GPU ``roofline`` model).
* :class:`ServingResult` — a whole serving run (continuous batching until every request is done):
  latency percentiles (TTFT, TPOT, end to end), throughput, and how many iterations each timing
  source timed.

:data:`METRICS` holds one :class:`Metric` per reported quantity: a one-line definition that says
its scope (per device or per system, per layer or per iteration) and its clock. The printed
tables and the JSON (``"definitions"``) both take their text from there, so a number is never
shown without what it means.

Conventions (the cycle-level simulator, the GPU roofline and the serving loop all follow them):

* A *device* is one NPU + HBM(-PIM) package (or one GPU). A *system* is ``tensor_parallel ×
  pipeline_parallel`` devices serving one model replica (× ``expert_parallel`` for a mixture of
  experts split over device groups, each running attention for its share of the batch). One
  device is simulated; tensor- and expert-parallel peers are taken as symmetric, so per-device
  times are system times.
* ``seconds_per_iteration`` is the latency of one iteration of the system: every layer of every
  pipeline stage, tensor-parallel all-reduces and the LM head included. With
  ``system.micro_batches: 1`` one batch is in flight (the stages in sequence); with ``M > 1``
  micro-batches flow through the stages one behind the other and the iteration ends when the
  last leaves the last stage (GPipe, :mod:`archsim.system.pipeline`). Throughput is
  ``tokens / seconds_per_iteration``.
* Cycle counts are NPU-clock cycles (``npu_freq_mhz``) unless a name says otherwise; utilisation
  and bandwidth values are fractions in ``[0, 1]``.

This module does no I/O except :func:`write_json`, and prints nothing.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np

from archsim.energy.components import (ENERGY_COMPONENTS, ENERGY_GROUPS, energy_definitions,
                                       group_energy)
from archsim.errors import ArchsimError

TimingSource = Literal["cycle-level", "reused", "surrogate", "calibrated", "roofline"]
#: Where a time came from: the cycle-level simulator (or reuse of it, or its surrogate), or the
#: GPU model in its calibrated or roofline mode.
TIMING_SOURCES: tuple[str, ...] = ("cycle-level", "reused", "surrogate", "calibrated",
                                   "roofline")
Phase = Literal["prefill", "decode", "mixed"]
PHASES: tuple[str, ...] = ("prefill", "decode", "mixed")

#: Tolerance when checking that a fraction lies in [0, 1] (floating-point sums of busy times).
_FRACTION_SLACK = 1e-6


# --------------------------------------------------------------------------------------------
# Metric definitions
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Metric:
    """One reported quantity.

    Attributes:
        key: name in the JSON and in the Python objects (``tokens_per_s``).
        label: short column title for tables.
        unit: unit of the value (``tokens/s``, ``NPU cycles``, ``fraction``, ``s``, ``pJ``).
        definition: one line: what is counted, over which scope (per device / per system, per layer
            / per iteration / per run) and on which clock.
    """

    key: str
    label: str
    unit: str
    definition: str


METRICS: dict[str, Metric] = {m.key: m for m in (
    # ---- one iteration
    Metric("cycles_per_iteration", "cycles/iter", "NPU cycles",
           "NPU-clock cycles of one iteration over all layers (all pipeline stages, "
           "all-reduces and LM head included; with micro-batches until the last leaves the "
           "last stage), one device; – for the GPU (null in JSON)"),
    Metric("seconds_per_iteration", "time/iter", "s",
           "simulated time of one iteration of the system over all layers (cycles_per_iteration "
           "÷ NPU clock, or the GPU model's sum of kernel times); not the simulator's wall time"),
    Metric("tokens", "tokens/iter", "tokens",
           "output tokens the iteration produces, whole system (one per request that finishes "
           "its prefill or decodes a token)"),
    Metric("tokens_per_s", "tokens/s", "tokens/s",
           "throughput of the system: tokens / seconds_per_iteration (one batch in flight, or "
           "system.micro_batches of it through the pipeline stages)"),
    Metric("tokens_per_s_per_device", "tokens/s/dev", "tokens/s",
           "tokens_per_s divided by the devices of the system (tensor_parallel × "
           "pipeline_parallel × expert_parallel)"),
    Metric("layer_cycles", "cycles/layer", "NPU cycles",
           "NPU-clock cycles of one decoder layer in this iteration, one device (simulated or "
           "reused from an identical layer)"),
    Metric("stage_seconds", "stage time", "s",
           "simulated time of each stage of the iteration summed over layers; stages are "
           "consecutive intervals, so they add up to seconds_per_iteration"),
    Metric("npu_util", "NPU util", "fraction",
           "NPU systolic-array busy fraction: Σ over arrays of cycles computing or loading "
           "weights ÷ (arrays × cycles_per_iteration), one device, NPU clock"),
    Metric("flops_util", "FLOP util", "fraction",
           "useful FLOPs of the iteration ÷ (peak FLOP/s of the compute engine × "
           "seconds_per_iteration), one device (NPU arrays or GPU tensor cores)"),
    Metric("pim_util", "PIM util", "fraction",
           "PIM busy fraction: Σ over channels of memory cycles in which the channel's PIM units "
           "execute a command (GWRITE, G_ACT, COMP, READRES, PIM_GEMV) ÷ (channels × memory "
           "cycles of the iteration), one device, memory clock"),
    Metric("channel_bw_util", "BW util/ch", "fraction",
           "per HBM channel: bytes moved on the channel's external data bus ÷ (peak bytes/cycle "
           "× memory cycles of the iteration), one device; PIM-internal reads not counted"),
    Metric("mean_channel_bw_util", "mean BW util", "fraction",
           "mean of channel_bw_util over the channels of one device"),
    Metric("energy_per_token_uj", "energy/token", "µJ/token",
           "energy of the iteration of the whole system (all devices, every component) ÷ "
           "tokens produced"),
    Metric("tokens_per_joule", "tokens/J", "tokens/J",
           "tokens produced ÷ energy of the iteration of the whole system (= tokens/s per W)"),
    Metric("power_per_device_w", "power/dev", "W",
           "average power of one device over the iteration: system energy ÷ (seconds_per_"
           "iteration × devices); NPU systems: HBM + NPU die, GPU: board power"),
    Metric("energy_j", "energy/iter", "J",
           "energy of one iteration of the whole system by component (ENERGY_COMPONENTS: "
           "DRAM, PIM, NPU compute, SRAM, interconnect, leakage, GPU board)"),
    Metric("layers_simulated", "layers sim.", "layers",
           "decoder layers timed by cycle-level simulation in this iteration"),
    Metric("layers_reused", "layers reused", "layers",
           "decoder layers whose time was reused from an identical simulated layer (same batch, "
           "lengths and placement)"),
    Metric("timing_source", "timing", "",
           "what timed the iteration: cycle-level simulation, reuse of an identical simulated "
           "iteration, a calibrated surrogate, or the GPU model (calibrated to measured "
           "serving stacks, or the roofline bound)"),
    # ---- serving run
    Metric("ttft_s", "TTFT", "s",
           "time to first token per request: end of the iteration that completes its prefill − "
           "its arrival; percentiles over requests"),
    Metric("tpot_s", "TPOT", "s",
           "time per output token per request after the first: (finish − first token) / "
           "(output tokens − 1), requests with ≥ 2 output tokens; percentiles over requests"),
    Metric("e2e_s", "E2E latency", "s",
           "end-to-end latency per request: finish − arrival; percentiles over requests"),
    Metric("token_gap_s", "max token gap", "s",
           "largest time between two consecutive tokens of a request (a decode stall, e.g. "
           "behind a prefill iteration); percentiles over requests with ≥ 2 output tokens"),
    Metric("decode_iterations", "decode iters", "iterations",
           "serving iterations that ran decode steps (decode and mixed phases)"),
    Metric("decode_iterations_with_prefill", "decode iters + prefill", "iterations",
           "decode iterations that also ran a prefill chunk (mixed phase, chunked prefill)"),
    Metric("makespan_s", "makespan", "s",
           "simulated time from the first arrival to the last request's last token"),
    Metric("throughput_tokens_per_s", "output tokens/s", "tokens/s",
           "output tokens of all requests ÷ makespan, whole system"),
    Metric("request_throughput_per_s", "requests/s", "requests/s",
           "finished requests ÷ makespan, whole system"),
    Metric("iterations", "iterations", "iterations",
           "iterations of the serving run (prefill, decode and mixed)"),
    Metric("iterations_by_source", "iterations by timing", "iterations",
           "iterations counted by what timed them (cycle-level, reused, surrogate, "
           "calibrated, roofline)"),
    Metric("mean_batch_size", "mean batch", "requests",
           "requests per iteration, mean over iterations"),
    Metric("peak_kv_tokens", "peak KV", "tokens",
           "largest number of KV-cache tokens allocated at once: blocks in use × block size "
           "(per system, the largest replica; every device holds its tensor-parallel share of "
           "each)"),
    Metric("preemptions", "preemptions", "preemptions",
           "times a running request lost its KV blocks because its pool was full (paged KV "
           "cache; latest-admitted first), all requests of all replicas"),
    Metric("recomputed_tokens", "recomputed KV", "tokens",
           "KV-cache tokens dropped by recompute preemptions, prefilled again on re-admission"),
    Metric("swap_out_bytes", "swapped out", "bytes",
           "KV bytes one device copied to host memory for swap preemptions (each device copies "
           "its tensor-parallel share over its own host link)"),
    Metric("swap_in_bytes", "swapped in", "bytes",
           "KV bytes one device copied back from host memory when swapped requests resumed"),
    Metric("swap_s", "swap time", "s",
           "simulated time the swap copies added to the iterations they preceded (serialised "
           "with the iteration), summed over replicas"),
    Metric("replicas", "replicas", "",
           "per replica (a whole copy of the system with its own scheduler and KV cache): "
           "requests the router sent it, output tokens, iterations, busy seconds, "
           "preemptions, peak KV tokens, its output tokens ÷ the run's makespan"),
    Metric("kv_capacity_tokens", "KV capacity", "tokens",
           "KV-cache tokens the system holds: one device's memory after its weights ÷ that "
           "device's KV bytes per token (tensor-parallel peers hold the other shares)"),
    # ---- compare
    Metric("speedup", "speedup", "×",
           "tokens/s of the reference system (neupims) ÷ tokens/s of this system, same workload"),
)}


def metric_definitions(keys: Iterable[str] | None = None) -> dict[str, str]:
    """``{key: "definition [unit]"}`` for ``keys`` (all metrics when None); unknown keys skipped."""
    sel = METRICS if keys is None else {k: METRICS[k] for k in keys if k in METRICS}
    return {k: (f"{m.definition} [{m.unit}]" if m.unit else m.definition) for k, m in sel.items()}


# --------------------------------------------------------------------------------------------
# Stages of an iteration (what the per-stage tables and stages.png show)
# --------------------------------------------------------------------------------------------
#: ``{stage: (short label, what runs)}``. A–F are the stages of NeuPIMs sub-batch interleaving
#: with two sub-batches (#1, #2) over consecutive layers (``mapping.schedule``, DESIGN §3):
#: the NPU (systolic arrays + vector units) and PIM work at the same time; ' means the next
#: layer. Without interleaving a layer is qkv → attention → proj_ffn in sequence; the GPU
#: roofline reports its operator classes. Every stage sums its intervals over all layers.
STAGES: dict[str, tuple[str, str]] = {
    "A": ("QKV#1 | –", "NPU: QKV generation of sub-batch 1; PIM idle (pipeline fill)"),
    "B": ("QKV#2 | MHA#1", "NPU: QKV generation of sub-batch 2; PIM: attention of sub-batch 1"),
    "C": ("FFN#1+QKV#1' | MHA#2", "NPU: projection + FFN of sub-batch 1, then its QKV for the "
          "next layer; PIM: attention of sub-batch 2 (C and D repeat for every further layer)"),
    "D": ("FFN#2+QKV#2' | MHA#1'", "NPU: projection + FFN of sub-batch 2, then its QKV for the "
          "next layer; PIM: attention of sub-batch 1 in that layer"),
    "E": ("FFN#1' | MHA#2'", "NPU: projection + FFN of sub-batch 1 (last layer); PIM: attention "
          "of sub-batch 2"),
    "F": ("FFN#2' | –", "NPU: projection + FFN of sub-batch 2 (last layer); PIM idle (drain)"),
    "S": ("NPU k | PIM k-1", "interleaving of 3 or more sub-batches: NPU unit k beside PIM "
          "attention unit k - 1"),
    "qkv": ("QKV", "attention norm, QKV generation (+ bias, RoPE) on the NPU"),
    "attention": ("attention", "KV append, q·Kᵀ, softmax, p·V: on PIM (npu-pim) or the NPU's "
                  "vector units (npu)"),
    "proj_ffn": ("proj+FFN", "output projection, residual, FFN norm, FFN, residual on the NPU "
                 "(all-reduces included)"),
    "lm_head": ("LM head", "final norm + LM head (timed analytically)"),
    "norm": ("norms", "layer norms (GPU roofline)"),
    "proj": ("proj", "output projection GEMM (GPU roofline)"),
    "residual": ("residual", "residual adds (GPU roofline)"),
    "ffn": ("FFN", "FFN GEMMs and activation (GPU roofline)"),
    "embedding": ("embedding", "token embedding lookup (GPU roofline)"),
    "total": ("total", "the whole iteration (no per-stage breakdown)"),
}


def stage_label(stage: str) -> str:
    """``'C: FFN#1+QKV#1' | MHA#2'`` — the stage with its short meaning (legends)."""
    short = STAGES.get(stage, (None,))[0]
    return f"{stage}: {short}" if short and short != stage else stage


def stage_description(stage: str) -> str:
    """What runs in ``stage`` (tables); '' for a stage this table does not know."""
    return STAGES.get(stage, ("", ""))[1]


# --------------------------------------------------------------------------------------------
# Trace events (filled by the simulator, written by archsim.timeline)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One busy interval of one hardware unit, for the timeline trace and utilisation plots.

    Attributes:
        track: ``"<process>/<thread>"``, e.g. ``"npu/array3"``, ``"npu/vector3"``, ``"npu/dma"``,
            ``"pim/ch07"``, ``"gpu/stream0"``. The part before ``/`` is the engine class.
        name: what ran (``"GEMM qkv L0"``, ``"PIM_GEMV req 12"``).
        start_cycle: first cycle of the interval (clock given to the writer).
        end_cycle: first cycle after the interval (``>= start_cycle``).
        args: small JSON-able details shown by the trace viewer.
    """

    track: str
    name: str
    start_cycle: float
    end_cycle: float
    args: Mapping[str, Any] | None = None


# --------------------------------------------------------------------------------------------
# Iteration result
# --------------------------------------------------------------------------------------------
@dataclass(slots=True)
class LayerTiming:
    """Time of one decoder layer within an iteration (one device).

    Attributes:
        index: layer index in the model, 0-based across all pipeline stages.
        seconds: wall time of the layer.
        cycles: the same in NPU-clock cycles (None for the GPU).
        source: ``cycle-level`` (simulated), ``reused`` (copied from layer ``reused_from`` whose
            inputs were identical), ``surrogate`` or ``roofline``.
        reused_from: index of the simulated layer whose time was reused, else None.
    """

    index: int
    seconds: float
    cycles: float | None = None
    source: str = "cycle-level"
    reused_from: int | None = None


def _check_fraction(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    v = float(value)
    if not (-_FRACTION_SLACK <= v <= 1 + _FRACTION_SLACK) or math.isnan(v):
        raise ArchsimError(f"{name} = {v!r} is not a fraction in [0, 1]")
    return min(1.0, max(0.0, v))


@dataclass(slots=True)
class IterationResult:
    """One iteration of one system on one batch. Filled by ``archsim.system.simulate_iteration``
    (cycle-level), :func:`archsim.gpu.simulate_gpu_iteration` (roofline) or the serving timers.

    Required:
        system: system name (``neupims``, ``npu-pim``, ``npu``, ``gpu`` or a config name).
        model: model name (``gpt3-7b``).
        phase: ``prefill``, ``decode`` or ``mixed`` (prefill chunks and decodes together).
        batch_size: requests in the iteration.
        tokens: output tokens produced by the iteration (see :data:`METRICS`).
        timing_source: one of :data:`TIMING_SOURCES`.

    Time (give cycles with ``npu_freq_mhz``, or seconds, or both):
        cycles_per_iteration: NPU-clock cycles of the whole iteration (all layers, all stages,
            all-reduces, LM head), one device; None for the GPU.
        seconds_per_iteration: wall time of the whole iteration; computed from the cycles when
            omitted. Must be > 0.
        npu_freq_mhz: the NPU clock of the cycle counts (None for the GPU).

    Breakdown:
        layers: one :class:`LayerTiming` per decoder layer (may be empty when not broken down).
        stage_seconds: ``{stage: seconds}`` summed over layers; consecutive intervals whose sum
            is ``seconds_per_iteration`` (the GPU uses operator classes; the NPU systems the
            interleaving stages, e.g. ``A``..``F``, or ``qkv``/``attention``/``ffn``/...).

    Utilisation (fractions in [0, 1], one device; definitions in :data:`METRICS`):
        npu_util, flops_util, pim_util: None where the engine is absent or not measured.
        channel_bw_util: one value per HBM channel (axis 0 = channel index), or None.

    Energy:
        energy_j: ``{component: joules}`` of one iteration of the whole system (keys of
            :data:`ENERGY_COMPONENTS`), or None when not modelled.

    Context:
        config_name: the machine configuration's name (preset or file).
        tensor_parallel, pipeline_parallel: degrees used (devices = their product, times
            ``expert_parallel``).
        expert_parallel: device groups a mixture of experts' experts are split over
            (``system.expert_parallel``; 1 otherwise).
        context_tokens: Σ over requests of KV tokens attended in the iteration (0 if unknown).
        notes: human-readable remarks (assumptions, reuse, warnings) printed with the result.
        extra: further JSON-able statistics of the producer (kept in the JSON under ``extra``).
        events: :class:`TraceEvent` list for the timeline (not written to the JSON).
        events_clock_mhz: clock of the events' cycle numbers (NPU clock; 1000 = nanoseconds).

    Raises:
        ArchsimError: a fraction outside [0, 1], no time given, a non-positive time, cycles and
            seconds that disagree by more than 0.1 %, an unknown phase or timing source, or
            ``cycles`` without ``npu_freq_mhz``.
    """

    system: str
    model: str
    phase: str
    batch_size: int
    tokens: int
    timing_source: str
    cycles_per_iteration: float | None = None
    seconds_per_iteration: float | None = None
    npu_freq_mhz: float | None = None
    layers: list[LayerTiming] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    npu_util: float | None = None
    flops_util: float | None = None
    pim_util: float | None = None
    channel_bw_util: list[float] | None = None
    energy_j: dict[str, float] | None = None
    config_name: str = ""
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    context_tokens: int = 0
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    events: list[TraceEvent] = field(default_factory=list)
    events_clock_mhz: float | None = None
    expert_parallel: int = 1

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ArchsimError(f"phase {self.phase!r} not one of {list(PHASES)}")
        if self.timing_source not in TIMING_SOURCES:
            raise ArchsimError(f"timing_source {self.timing_source!r} not one of "
                               f"{list(TIMING_SOURCES)}")
        if self.cycles_per_iteration is not None and not self.npu_freq_mhz:
            raise ArchsimError("cycles_per_iteration given without npu_freq_mhz (the clock "
                               "that converts it to seconds)")
        if self.seconds_per_iteration is None:
            if self.cycles_per_iteration is None:
                raise ArchsimError("an IterationResult needs seconds_per_iteration or "
                                   "cycles_per_iteration")
            self.seconds_per_iteration = self.cycles_per_iteration / (self.npu_freq_mhz * 1e6)
        elif self.cycles_per_iteration is not None:
            implied = self.cycles_per_iteration / (self.npu_freq_mhz * 1e6)
            if not math.isclose(implied, self.seconds_per_iteration, rel_tol=1e-3):
                raise ArchsimError(
                    f"seconds_per_iteration {self.seconds_per_iteration!r} disagrees with "
                    f"cycles_per_iteration {self.cycles_per_iteration!r} at "
                    f"{self.npu_freq_mhz} MHz ({implied!r} s)")
        if not self.seconds_per_iteration > 0:
            raise ArchsimError(f"seconds_per_iteration must be > 0, got "
                               f"{self.seconds_per_iteration!r}")
        for name in ("npu_util", "flops_util", "pim_util"):
            setattr(self, name, _check_fraction(name, getattr(self, name)))
        if self.channel_bw_util is not None:
            self.channel_bw_util = [_check_fraction(f"channel_bw_util[{i}]", v)  # type: ignore
                                    for i, v in enumerate(self.channel_bw_util)]
        if self.events and self.events_clock_mhz is None:
            self.events_clock_mhz = self.npu_freq_mhz or 1000.0

    # ---------------------------------------------------------------- derived metrics
    @property
    def devices(self) -> int:
        """Devices of the system: tensor_parallel × pipeline_parallel × expert_parallel."""
        return self.tensor_parallel * self.pipeline_parallel * self.expert_parallel

    @property
    def tokens_per_s(self) -> float:
        """System throughput: tokens / seconds_per_iteration (tokens/s)."""
        return self.tokens / self.seconds_per_iteration  # type: ignore[operator]

    @property
    def tokens_per_s_per_device(self) -> float:
        """tokens_per_s / devices (tokens/s per device)."""
        return self.tokens_per_s / self.devices

    @property
    def layer_cycles(self) -> list[float] | None:
        """NPU-clock cycles per layer (axis 0 = layer index), None when not available."""
        if not self.layers or any(lt.cycles is None for lt in self.layers):
            return None
        return [float(lt.cycles) for lt in self.layers]  # type: ignore[arg-type]

    @property
    def stage_cycles(self) -> dict[str, float] | None:
        """``stage_seconds`` in NPU-clock cycles (None for the GPU)."""
        if not self.npu_freq_mhz:
            return None
        return {k: v * self.npu_freq_mhz * 1e6 for k, v in self.stage_seconds.items()}

    @property
    def layers_simulated(self) -> int:
        """Layers timed by cycle-level simulation."""
        return sum(1 for lt in self.layers if lt.source == "cycle-level")

    @property
    def layers_reused(self) -> int:
        """Layers whose time was reused from an identical simulated layer."""
        return sum(1 for lt in self.layers if lt.source == "reused")

    @property
    def mean_channel_bw_util(self) -> float | None:
        """Mean of channel_bw_util over channels (None when not measured)."""
        if not self.channel_bw_util:
            return None
        return float(np.mean(self.channel_bw_util))

    @property
    def energy_total_j(self) -> float | None:
        """Energy of one iteration of the whole system (J), None when not modelled."""
        return None if self.energy_j is None else float(sum(self.energy_j.values()))

    @property
    def energy_per_token_uj(self) -> float | None:
        """System energy of the iteration ÷ tokens produced, in µJ (None when not modelled)."""
        total = self.energy_total_j
        if total is None or self.tokens == 0:
            return None
        return total / self.tokens * 1e6

    @property
    def energy_per_token_uj_by_group(self) -> dict[str, float] | None:
        """``{group: µJ/token}`` (:data:`ENERGY_GROUPS`), None when energy is not modelled."""
        if self.energy_j is None or self.tokens == 0:
            return None
        return {g: j / self.tokens * 1e6 for g, j in group_energy(self.energy_j).items()}

    @property
    def tokens_per_joule(self) -> float | None:
        """Tokens ÷ system energy of the iteration (tokens/J), None when not modelled."""
        total = self.energy_total_j
        return None if not total else self.tokens / total

    @property
    def power_per_device_w(self) -> float | None:
        """System energy ÷ (seconds_per_iteration × devices), W; None when not modelled."""
        total = self.energy_total_j
        if total is None:
            return None
        return total / (float(self.seconds_per_iteration) * self.devices)  # type: ignore[arg-type]

    # ---------------------------------------------------------------- serialisation
    def summary(self) -> dict[str, Any]:
        """The headline metrics as ``{key: value}`` (keys of :data:`METRICS`), for tables."""
        return {
            "cycles_per_iteration": self.cycles_per_iteration,
            "seconds_per_iteration": self.seconds_per_iteration,
            "tokens": self.tokens,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "npu_util": self.npu_util,
            "flops_util": self.flops_util,
            "pim_util": self.pim_util,
            "mean_channel_bw_util": self.mean_channel_bw_util,
            "energy_per_token_uj": self.energy_per_token_uj,
            "tokens_per_joule": self.tokens_per_joule,
            "power_per_device_w": self.power_per_device_w,
            "layers_simulated": self.layers_simulated,
            "layers_reused": self.layers_reused,
            "timing_source": self.timing_source,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: every field except ``events``, the derived metrics, and
        ``definitions`` (one line per metric)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "events"}
        d["layers"] = [asdict(lt) for lt in self.layers]
        d["derived"] = {k: v for k, v in self.summary().items() if k not in d}
        d["derived"]["layer_cycles"] = self.layer_cycles
        d["derived"]["stage_cycles"] = self.stage_cycles
        d["derived"]["energy_total_j"] = self.energy_total_j
        d["derived"]["energy_per_token_uj_by_group"] = self.energy_per_token_uj_by_group
        d["definitions"] = metric_definitions(
            ["cycles_per_iteration", "seconds_per_iteration", "tokens", "tokens_per_s",
             "tokens_per_s_per_device", "layer_cycles", "stage_seconds", "npu_util",
             "flops_util", "pim_util", "channel_bw_util", "mean_channel_bw_util",
             "energy_j", "energy_per_token_uj", "tokens_per_joule", "power_per_device_w",
             "layers_simulated", "layers_reused", "timing_source"])
        if self.energy_j:
            d["definitions"]["energy_components"] = energy_definitions(self.energy_j)
        return _jsonable(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "IterationResult":
        """Inverse of :meth:`to_dict` (derived values and definitions are ignored; no events)."""
        names = {f.name for f in fields(cls)} - {"events"}
        kw = {k: v for k, v in d.items() if k in names}
        kw["layers"] = [LayerTiming(**lt) for lt in d.get("layers", [])]
        return cls(**kw)


# --------------------------------------------------------------------------------------------
# Serving result
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Percentiles:
    """Summary of a latency distribution over requests (seconds).

    ``p50``/``p90``/``p99`` use numpy's ``linear`` percentile method; ``n`` is the number of
    samples (0 gives NaN everywhere).
    """

    p50: float
    p90: float
    p99: float
    mean: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> "Percentiles":
        """Percentiles of ``values`` (1-D, seconds); NaN entries are ignored."""
        a = np.asarray(values, dtype=float)
        a = a[~np.isnan(a)]
        if a.size == 0:
            nan = float("nan")
            return cls(nan, nan, nan, nan, nan, 0)
        p = np.percentile(a, [50, 90, 99], method="linear")
        return cls(float(p[0]), float(p[1]), float(p[2]), float(a.mean()), float(a.max()),
                   int(a.size))


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request in a serving run (times in simulated seconds).

    Attributes:
        index: position of the request in the input list (0-based).
        input_toks, output_toks: prompt and generated lengths (tokens).
        arrival_s: arrival time; admitted_s: when KV space was reserved and it joined the batch;
        first_token_s: end of the iteration that completed its prefill; finish_s: end of the
        iteration that produced its last token.
        first_iteration, last_iteration: 0-based indices of the first and last serving
            iteration the request took part in (-1: not recorded; iterations of its replica);
            n_iterations: how many iterations it took part in (prefill chunks and decode steps,
            recomputed prefills included).
        preemptions: how often its KV cache was preempted (recomputed or swapped out).
        replica: the replica the router sent it to (0 with one replica).
        max_token_gap_s: the largest time between two consecutive tokens of the request (a
            decode stall, e.g. behind a prefill iteration or a preemption; NaN with one output
            token).
    """

    index: int
    input_toks: int
    output_toks: int
    arrival_s: float
    admitted_s: float
    first_token_s: float
    finish_s: float
    first_iteration: int = -1
    last_iteration: int = -1
    n_iterations: int = 0
    preemptions: int = 0
    replica: int = 0
    max_token_gap_s: float = float("nan")

    @property
    def ttft_s(self) -> float:
        """Time to first token: first_token_s − arrival_s."""
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        """End-to-end latency: finish_s − arrival_s."""
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first (NaN when only one token is produced)."""
        if self.output_toks < 2:
            return float("nan")
        return (self.finish_s - self.first_token_s) / (self.output_toks - 1)


@dataclass(slots=True)
class ServingResult:
    """A whole serving run of one system (continuous batching until every request finished).

    Attributes:
        system, model, config_name: what ran.
        arrival: how requests arrived (``all at t=0``, ``poisson rate=R/s seed=K``,
            ``timestamps FILE``).
        scheduler: scheduling policy in words (admission rule, prefill policy, limits).
        timer: what timed iterations (e.g. ``roofline (gpu-a100)``, ``cycle-level + reuse``).
        requests: one :class:`RequestRecord` per request (axis 0 = request index).
        makespan_s: first arrival to last token (simulated seconds).
        iterations: iterations run; iterations_by_source: ``{timing source: count}``;
        iterations_by_phase: ``{prefill|decode|mixed: count}``.
        mean_batch_size, max_batch_size: requests per iteration.
        kv_capacity_tokens: KV tokens that fit per device after the weights; peak_kv_tokens:
            the most allocated at once (blocks × block size; the largest of the replicas).
        kv_policy: the KV-cache allocation in words (:mod:`archsim.serving.kvcache`).
        preemptions: preemptions of all requests; recomputed_tokens: KV tokens dropped by
            recompute preemptions (prefilled again); swap_out_bytes, swap_in_bytes: KV bytes
            copied to and from host memory by one device; swap_s: time the copies added.
        router: how requests were split across replicas (empty with one replica);
            replicas: one dict per replica (``replica``, ``requests``, ``output_tokens``,
            ``iterations``, ``busy_s``, ``preemptions``, ``peak_kv_tokens``,
            ``throughput_tokens_per_s``: its output tokens ÷ the run's makespan), empty with
            one replica.
        chunked_prefill_tokens: token budget per iteration when chunked prefill is on, else None.
        max_prefill_tokens: prompt-token budget of a prefill iteration without chunked prefill
            (None: unlimited).
        surrogate_error: error report of the surrogate against the exact timer, when one was used.
        wall_s: wall-clock seconds the simulation took.
        notes: remarks printed with the result.
    """

    system: str
    model: str
    arrival: str
    scheduler: str
    timer: str
    requests: list[RequestRecord]
    makespan_s: float
    iterations: int
    iterations_by_source: dict[str, int]
    iterations_by_phase: dict[str, int]
    mean_batch_size: float
    max_batch_size: int
    kv_capacity_tokens: int
    peak_kv_tokens: int
    config_name: str = ""
    chunked_prefill_tokens: int | None = None
    max_prefill_tokens: int | None = None
    surrogate_error: dict[str, Any] | None = None
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    kv_policy: str = ""
    preemptions: int = 0
    recomputed_tokens: int = 0
    swap_out_bytes: int = 0
    swap_in_bytes: int = 0
    swap_s: float = 0.0
    router: str = ""
    replicas: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_requests(self) -> int:
        """Requests served."""
        return len(self.requests)

    @property
    def output_tokens(self) -> int:
        """Σ output tokens of all requests."""
        return sum(r.output_toks for r in self.requests)

    @property
    def input_tokens(self) -> int:
        """Σ prompt tokens of all requests."""
        return sum(r.input_toks for r in self.requests)

    @property
    def throughput_tokens_per_s(self) -> float:
        """Output tokens ÷ makespan (tokens/s, whole system)."""
        return self.output_tokens / self.makespan_s if self.makespan_s > 0 else float("nan")

    @property
    def request_throughput_per_s(self) -> float:
        """Finished requests ÷ makespan (requests/s)."""
        return self.n_requests / self.makespan_s if self.makespan_s > 0 else float("nan")

    @property
    def ttft_s(self) -> Percentiles:
        """TTFT percentiles over requests (s)."""
        return Percentiles.of([r.ttft_s for r in self.requests])

    @property
    def tpot_s(self) -> Percentiles:
        """TPOT percentiles over requests with ≥ 2 output tokens (s)."""
        return Percentiles.of([r.tpot_s for r in self.requests])

    @property
    def e2e_s(self) -> Percentiles:
        """End-to-end latency percentiles over requests (s)."""
        return Percentiles.of([r.e2e_s for r in self.requests])

    @property
    def token_gap_s(self) -> Percentiles:
        """Percentiles over requests (with >= 2 output tokens) of each one's largest gap
        between two consecutive tokens (s): how long decode stalled (Sarathi-Serve's
        stall-free batching keeps it near one iteration)."""
        return Percentiles.of([r.max_token_gap_s for r in self.requests])

    @property
    def decode_iterations(self) -> int:
        """Iterations that ran decode steps (``decode`` and ``mixed`` phases)."""
        by = self.iterations_by_phase
        return int(by.get("decode", 0) + by.get("mixed", 0))

    @property
    def decode_iterations_with_prefill(self) -> int:
        """Decode iterations that also ran a prefill chunk (the ``mixed`` phase)."""
        return int(self.iterations_by_phase.get("mixed", 0))

    def summary(self) -> dict[str, Any]:
        """Headline metrics ``{key: value}`` (keys of :data:`METRICS`)."""
        return {
            "makespan_s": self.makespan_s,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "request_throughput_per_s": self.request_throughput_per_s,
            "ttft_s": asdict(self.ttft_s),
            "tpot_s": asdict(self.tpot_s),
            "e2e_s": asdict(self.e2e_s),
            "token_gap_s": asdict(self.token_gap_s),
            "decode_iterations": self.decode_iterations,
            "decode_iterations_with_prefill": self.decode_iterations_with_prefill,
            "iterations": self.iterations,
            "iterations_by_source": dict(self.iterations_by_source),
            "mean_batch_size": self.mean_batch_size,
            "peak_kv_tokens": self.peak_kv_tokens,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "preemptions": self.preemptions,
            "recomputed_tokens": self.recomputed_tokens,
            "swap_out_bytes": self.swap_out_bytes,
            "swap_in_bytes": self.swap_in_bytes,
            "swap_s": self.swap_s,
        }

    def to_dict(self, include_requests: bool = True) -> dict[str, Any]:
        """JSON-able dict: the summary, run description, definitions and (optionally) the
        per-request records as columns (``requests.<field>`` = list over requests)."""
        d: dict[str, Any] = {
            "system": self.system, "model": self.model, "config_name": self.config_name,
            "arrival": self.arrival, "scheduler": self.scheduler, "timer": self.timer,
            "n_requests": self.n_requests, "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "iterations_by_phase": dict(self.iterations_by_phase),
            "max_batch_size": self.max_batch_size,
            "chunked_prefill_tokens": self.chunked_prefill_tokens,
            "max_prefill_tokens": self.max_prefill_tokens,
            "surrogate_error": self.surrogate_error, "wall_s": self.wall_s,
            "notes": list(self.notes), "kv_policy": self.kv_policy, "router": self.router,
            "replicas": [dict(r) for r in self.replicas],
        }
        d.update(self.summary())
        if include_requests:
            d["requests"] = {f.name: [getattr(r, f.name) for r in self.requests]
                             for f in fields(RequestRecord)}
        d["definitions"] = metric_definitions(
            ["ttft_s", "tpot_s", "e2e_s", "token_gap_s", "decode_iterations",
             "decode_iterations_with_prefill", "makespan_s", "throughput_tokens_per_s",
             "request_throughput_per_s", "iterations", "iterations_by_source",
             "mean_batch_size", "peak_kv_tokens", "kv_capacity_tokens", "preemptions",
             "recomputed_tokens", "swap_out_bytes", "swap_in_bytes", "swap_s"]
            + (["replicas"] if self.replicas else []))
        return _jsonable(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ServingResult":
        """Inverse of :meth:`to_dict` (needs the per-request columns)."""
        cols = d.get("requests")
        if not isinstance(cols, Mapping):
            raise ArchsimError("serving result JSON has no per-request columns ('requests')")
        n = len(cols["index"])
        reqs = [RequestRecord(**{k: cols[k][i] for k in cols}) for i in range(n)]
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names and k != "requests"}
        return cls(requests=reqs, **kw)


# --------------------------------------------------------------------------------------------
# Compare
# --------------------------------------------------------------------------------------------
def compare_to_dict(results: Mapping[str, IterationResult],
                    reference: str = "neupims") -> dict[str, Any]:
    """The ``archsim compare`` JSON of a set of systems run on the same workload.

    Args:
        results: ``{system name: IterationResult}`` of one decode iteration each.
        reference: the system whose tokens/s is the numerator of every speedup.

    Returns:
        ``{"systems": {name: {tokens_per_s, tokens_per_s_per_device, cycles_per_iteration,
        seconds_per_iteration, npu_util, pim_util, flops_util, mean_channel_bw_util,
        energy_per_token_uj, energy_per_token_uj_by_group, energy_per_token_uj_by_component,
        tokens_per_joule, power_per_device_w, timing_source, config_name, npu_freq_mhz,
        gpu_mode, channels}}, "speedup": {name: reference tokens/s ÷ name tokens/s}, "reference":
        reference, "definitions": {...}}``. ``speedup`` is empty when the reference is missing.
        ``cycles_per_iteration`` is null for the GPU; ``gpu_mode`` (``roofline`` or
        ``calibrated``) is null for the other systems; ``channels`` (how the KV channels were
        placed: ``policy min-load``, ``kept from FILE``) is null for the GPU.
    """
    systems = {}
    for name, r in results.items():
        systems[name] = {
            "tokens_per_s": r.tokens_per_s,
            "tokens_per_s_per_device": r.tokens_per_s_per_device,
            "cycles_per_iteration": r.cycles_per_iteration,
            "seconds_per_iteration": r.seconds_per_iteration,
            "npu_util": r.npu_util,
            "pim_util": r.pim_util,
            "flops_util": r.flops_util,
            "mean_channel_bw_util": r.mean_channel_bw_util,
            "energy_per_token_uj": r.energy_per_token_uj,
            "energy_per_token_uj_by_group": r.energy_per_token_uj_by_group,
            "energy_per_token_uj_by_component": (
                None if r.energy_j is None or not r.tokens else
                {k: v / r.tokens * 1e6 for k, v in r.energy_j.items()}),
            "tokens_per_joule": r.tokens_per_joule,
            "power_per_device_w": r.power_per_device_w,
            "timing_source": r.timing_source,
            "config_name": r.config_name,
            "npu_freq_mhz": r.npu_freq_mhz,
            "gpu_mode": r.extra.get("gpu_mode"),
            "channels": (r.extra.get("compile") or {}).get("channel_placement"),
        }
    speedup = {}
    if reference in results:
        ref = results[reference].tokens_per_s
        speedup = {name: ref / r.tokens_per_s for name, r in results.items()}
    return _jsonable({
        "reference": reference,
        "systems": systems,
        "speedup": speedup,
        "definitions": metric_definitions(
            ["tokens_per_s", "tokens_per_s_per_device", "cycles_per_iteration",
             "seconds_per_iteration", "npu_util", "pim_util", "flops_util",
             "mean_channel_bw_util", "energy_per_token_uj", "tokens_per_joule",
             "power_per_device_w", "timing_source", "speedup"]),
        "energy_components": energy_definitions(),
    })


# --------------------------------------------------------------------------------------------
# JSON helpers
# --------------------------------------------------------------------------------------------
def _jsonable(x: Any) -> Any:
    """Recursively convert numpy scalars/arrays, tuples and NaN/inf into JSON-safe values
    (NaN and ±inf become None, so that the output is strict JSON)."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_jsonable(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(obj: Any, path: str | Path) -> Path:
    """Write a result (anything with ``to_dict()``) or a plain dict as strict JSON to ``path``.

    Raises:
        ArchsimError: the file cannot be written (the message names it).
    """
    data = obj.to_dict() if hasattr(obj, "to_dict") else _jsonable(obj)
    p = Path(path)
    try:
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    except OSError as exc:
        raise ArchsimError(f"{p}: cannot write JSON ({exc.strerror})") from None
    return p


__all__ = [
    "Metric", "METRICS", "metric_definitions", "ENERGY_COMPONENTS", "ENERGY_GROUPS",
    "group_energy", "energy_definitions", "TraceEvent", "LayerTiming", "IterationResult",
    "Percentiles", "RequestRecord", "ServingResult", "compare_to_dict", "write_json",
    "TIMING_SOURCES", "PHASES", "STAGES", "stage_label", "stage_description",
]
