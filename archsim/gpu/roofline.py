"""GPU-only baseline: a per-kernel model of a GPU over the workloads operator graph.

This is a *model*, not a measurement and not a simulation: the NeuPIMs paper measured a real
NVIDIA A100 40 GB. Two modes (``gpu.mode``, :class:`archsim.config.GpuConfig`):

* ``roofline`` — per kernel ``max(FLOPs / (peak · gemm_efficiency), bytes / (bandwidth ·
  efficiency of its class)) + kernel_launch``: the optimistic bound (defaults from the A100
  datasheet: 312 TFLOP/s dense fp16 tensor core, 1,555 GB/s HBM2e; fractions 0.7 / 0.8 / 0.6);
* ``calibrated`` — the same kernels with efficiencies that depend on the kernel's shape, fitted
  to published measurements of serving stacks on A100 and H100 (:mod:`archsim.gpu.calibration`;
  ``gpu.calibrated``): a GEMM of ``M`` token rows reaches ``gemm_efficiency · M / (M +
  gemm_half_rows)`` of peak FLOP/s and ``weight_bw_efficiency`` of the bandwidth; decode
  attention over a mean context ``L`` per request ``attention_bw_efficiency · L / (L +
  attention_half_context)`` of the bandwidth (paged attention reads short contexts badly);
  element-wise kernels ``vector_bw_efficiency``; every kernel ``kernel_launch_us`` and every
  iteration ``iteration_overhead_us`` of framework time (scheduling, sampling, launch gaps).
  The roofline is the special case ``gemm_half_rows = attention_half_context = 0``,
  ``weight_bw = attention_bw = gemv_efficiency``, no iteration overhead
  (:func:`kernel_efficiency`).

Kernels. The operators of one decoder layer (:func:`workloads.graph.build_layer_graph`) are grouped
by ``(layer, sub_role)``: every batched operator is one kernel, and the per-request operators of a
layer (``kv_append``, ``attn_score``, ``attn_softmax``, ``attn_context``) are one batched kernel
each, as a serving stack runs attention for the whole batch in one launch (e.g. vLLM's paged
attention). Kernel time: :func:`kernel_times_s`. Bytes are the graph's unfused traffic (every
operator reads its inputs and writes its output once).

Tensor parallel all-reduce (ring; Patarasuk & Yuan 2009), :func:`ring_allreduce_time_s`::

    time = 2 (p − 1) / p · bytes / link_bandwidth + 2 (p − 1) · link_latency

with ``system.interconnect`` bandwidth (per direction per device) and latency per step.

Mixture of experts (``model.n_experts``): the layer graph's experts follow the routing of
``system.moe_router``'s router model (layer 0's draw, timed for every layer); each expert
sub-role (``expert_gate``, ``expert_up``, ``expert_act``, ``expert_down``) is one grouped
kernel over the experts any token chose (vLLM's fused MoE kernel), whose bytes count only those
experts' weights and whose calibrated GEMM efficiency uses the mean rows per chosen expert, not
the batch's tokens. ``system.expert_parallel > 1`` is not modelled on the GPU (refused), nor
is the GPU serving fast path (:class:`GpuCostModel`: its batch features do not describe the
routing; refused).

Whole model: ``n_layers × layer time`` (identical layers) plus the embedding and the final norm +
LM head (from :func:`workloads.graph.build_model_graph`), plus ``pp − 1`` pipeline hand-offs of
the activations (``tokens · d_model · dtype`` bytes over the interconnect + one latency) when the
model is pipeline parallel, plus the iteration overhead. One batch is in flight, so tokens/s =
tokens / iteration time. Energy: board power (:func:`archsim.energy.model.gpu_iteration_energy`).

:class:`GpuCostModel` is the fast path the serving loop and the calibration fit use: the FLOPs and
bytes of every kernel are affine in five batch features (:data:`FEATURES`); its coefficients are
identified from graph builds of small probe batches and then checked against further probes (it
refuses to run when they disagree), so its times equal :func:`simulate_gpu_iteration`'s for
decode and prefill batches; for prefill chunks (``q < seq_len``) it evaluates the same
per-request formulas. It is vectorised over batches (one feature row each).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from archsim.config import GpuConfig, InterconnectConfig, MachineConfig
from archsim.errors import ArchsimError
from archsim.results import IterationResult, LayerTiming, TraceEvent

#: Operator kinds by cost class (:func:`kernel_class`).
ATTENTION_KINDS = frozenset({"attention_score", "attention_context"})
MATRIX_KINDS = frozenset({"gemm"}) | ATTENTION_KINDS
VECTOR_KINDS = frozenset({"softmax", "layernorm", "rmsnorm", "activation", "elementwise",
                          "kv_append", "embedding", "topk"})
COLLECTIVE_KINDS = frozenset({"allreduce"})

#: Stage of the per-stage breakdown for each graph ``sub_role`` (unknown roles: ``other``).
STAGE_OF_ROLE: dict[str, str] = {
    "attn_norm": "norm", "ffn_norm": "norm", "final_norm": "lm_head",
    "qkv": "qkv", "qkv_bias": "qkv", "rope": "qkv",
    "kv_append": "attention", "attn_score": "attention", "attn_softmax": "attention",
    "attn_context": "attention",
    "proj": "proj", "proj_allreduce": "allreduce", "ffn_allreduce": "allreduce",
    "attn_residual": "residual", "ffn_residual": "residual",
    "ffn_gate": "ffn", "ffn_gate_bias": "ffn", "ffn1": "ffn", "ffn1_bias": "ffn",
    "ffn_act": "ffn", "ffn2": "ffn",
    "moe_router": "ffn", "moe_topk": "ffn", "expert_gate": "ffn", "expert_up": "ffn",
    "expert_act": "ffn", "expert_down": "ffn", "moe_combine": "ffn",
    "embedding": "embedding", "lm_head": "lm_head", "pipeline": "pipeline",
}

#: Batch features in which every kernel's FLOPs and bytes are affine (axis of the coefficient
#: matrices): 1, requests, Σ query tokens q, Σ context tokens L, Σ q·L.
FEATURES = ("one", "requests", "q_tokens", "context_tokens", "q_context_tokens")


# --------------------------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------------------------
def ring_allreduce_time_s(size_bytes: float, p: int, link: InterconnectConfig) -> float:
    """Ring all-reduce of ``size_bytes`` over ``p`` devices on ``link`` (seconds): the one rule
    :func:`archsim.npu.timing.ring_allreduce_time_s` (``2 (p − 1) / p · size / bandwidth +
    2 (p − 1) · latency``; Patarasuk & Yuan, JPDC 2009). 0 for ``p = 1`` and when
    ``link.allreduce`` is false (all-reduces not timed, as on the NPU systems).
    """
    from archsim.npu.timing import ring_allreduce_time_s as _ring

    if not link.allreduce:
        return 0.0
    return _ring(size_bytes, p, link.bandwidth_bytes_per_s, link.latency_ns)


@dataclass(frozen=True, slots=True)
class KernelEfficiency:
    """The efficiencies of the configured mode (fractions of peak; seconds).

    Attributes:
        mode: ``roofline`` or ``calibrated``.
        gemm: asymptotic fraction of peak FLOP/s of a GEMM (and of attention's compute).
        gemm_half_rows: GEMM rows at which the compute fraction is half of ``gemm``.
        weight_bw: fraction of peak bandwidth of GEMMs (streaming weights).
        attention_bw: asymptotic bandwidth fraction of attention kernels.
        attention_half_context: mean context per request at half of ``attention_bw``.
        vector_bw: bandwidth fraction of element-wise kernels.
        launch_s: per kernel; iteration_overhead_s: per iteration (framework).
    """

    mode: str
    gemm: float
    gemm_half_rows: float
    weight_bw: float
    attention_bw: float
    attention_half_context: float
    vector_bw: float
    launch_s: float
    iteration_overhead_s: float


def kernel_efficiency(gpu: GpuConfig) -> KernelEfficiency:
    """The efficiencies ``gpu.mode`` reads: the roofline keys, or ``gpu.calibrated``."""
    if gpu.mode == "roofline":
        return KernelEfficiency("roofline", gpu.gemm_efficiency, 0.0, gpu.gemv_efficiency,
                                gpu.gemv_efficiency, 0.0, gpu.vector_efficiency,
                                gpu.kernel_launch_us * 1e-6, 0.0)
    c = gpu.calibrated
    return KernelEfficiency("calibrated", c.gemm_efficiency, c.gemm_half_rows,
                            c.weight_bw_efficiency, c.attention_bw_efficiency,
                            c.attention_half_context, c.vector_bw_efficiency,
                            c.kernel_launch_us * 1e-6, c.iteration_overhead_us * 1e-6)


def kernel_class(kind: str) -> str:
    """Cost class of a graph operator kind: ``gemm``, ``attention``, ``vector`` or
    ``collective``.

    Raises:
        ArchsimError: a kind the model does not know.
    """
    if kind == "gemm":
        return "gemm"
    if kind in ATTENTION_KINDS:
        return "attention"
    if kind in VECTOR_KINDS:
        return "vector"
    if kind in COLLECTIVE_KINDS:
        return "collective"
    raise ArchsimError(f"GPU model: operator kind {kind!r} has no cost class; known: "
                       f"{sorted(MATRIX_KINDS | VECTOR_KINDS | COLLECTIVE_KINDS)}")


#: Passes over the attention-score tensor in each attention kernel's bytes (the graph is
#: unfused: scores written by attn_score, read and written by the softmax, read by attn_context).
SCORE_PASSES: dict[str, int] = {"attn_score": 1, "attn_softmax": 2, "attn_context": 1}


def score_tensor_bytes(model: Any, tp: int, q_context_tokens: Any) -> Any:
    """Bytes of one attention-score tensor summed over requests: heads per device × Σ q·L ×
    dtype bytes (``q_context_tokens`` = Σ over requests of query tokens × context)."""
    return model.heads_per_device(tp) * model.dtype_bytes * np.asarray(q_context_tokens,
                                                                       dtype=np.float64)


def kernel_times_s(classes: Sequence[str], flops: np.ndarray, bytes_moved: np.ndarray,
                   size_bytes: np.ndarray, rows: np.ndarray, context: np.ndarray,
                   gpu: GpuConfig, link: InterconnectConfig, tp: int,
                   score_passes: Sequence[int] | None = None,
                   score_bytes: np.ndarray | float = 0.0,
                   kernel_rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Time and utilisation of kernels, vectorised over batches (the one kernel formula).

    Args:
        classes: cost class of each kernel (:func:`kernel_class`), length ``K``.
        flops, bytes_moved, size_bytes: per kernel, shape ``[..., K]`` (FLOPs, bytes read +
            written in device memory, all-reduce tensor bytes).
        rows: GEMM rows (tokens processed) of each batch, shape ``[...]`` (broadcast over K).
        context: mean context per request (tokens) of each batch, shape ``[...]``.
        gpu: peak numbers and the mode's efficiencies (:func:`kernel_efficiency`).
        link, tp: interconnect and tensor-parallel degree (all-reduces).
        score_passes, score_bytes: per kernel the passes over the attention-score tensor in
            its bytes (:data:`SCORE_PASSES`) and that tensor's bytes per batch
            (:func:`score_tensor_bytes`). The calibrated mode runs attention fused, as serving
            stacks do (FlashAttention / paged attention keep the scores on chip): it removes
            those passes from the bytes; the roofline mode keeps the graph's unfused bytes.
        kernel_rows: optional GEMM rows per kernel ``[K]`` replacing ``rows`` where it is not
            NaN (a mixture of experts' grouped expert GEMMs: mean rows per chosen expert).

    Returns:
        ``(seconds, utilisation)``, both ``[..., K]``: per kernel ``max(compute, memory) +
        launch`` (all-reduce: :func:`ring_allreduce_time_s`, utilisation 0) and the larger of
        its fractions of peak FLOP/s and peak bandwidth over its time.
    """
    e = kernel_efficiency(gpu)
    fl = np.asarray(flops, dtype=np.float64)
    by = np.asarray(bytes_moved, dtype=np.float64)
    if e.mode == "calibrated" and score_passes is not None:
        sp = np.asarray(score_passes, dtype=np.float64)
        by = np.maximum(by - sp * np.asarray(score_bytes, dtype=np.float64)[..., None], 0.0)
    sz = np.asarray(size_bytes, dtype=np.float64)
    m = np.asarray(rows, dtype=np.float64)[..., None]
    if kernel_rows is not None:
        kr = np.asarray(kernel_rows, dtype=np.float64)
        m = np.where(np.isnan(kr), m, kr)
    L = np.asarray(context, dtype=np.float64)[..., None]
    cls = np.asarray(classes)
    is_gemm, is_attn = cls == "gemm", cls == "attention"
    is_coll = cls == "collective"
    peak, bw = gpu.peak_flops, gpu.mem_bandwidth_bytes_per_s
    gemm_eff = e.gemm * m / np.maximum(m + e.gemm_half_rows, 1e-30)
    comp_eff = np.where(is_gemm, gemm_eff, e.gemm)
    attn_eff = e.attention_bw * L / np.maximum(L + e.attention_half_context, 1e-30)
    bw_eff = np.where(is_gemm, e.weight_bw, np.where(is_attn, attn_eff, e.vector_bw))
    compute = fl / (peak * np.maximum(comp_eff, 1e-30))
    memory = by / (bw * np.maximum(bw_eff, 1e-30))
    t = np.maximum(compute, memory) + e.launch_s
    util = np.maximum(fl / peak, by / bw) / np.maximum(t, 1e-30)
    if is_coll.any():
        steps = 2 * (tp - 1)
        ring = (0.0 if tp <= 1 else
                steps / tp * sz / link.bandwidth_bytes_per_s + steps * link.latency_ns * 1e-9)
        t = np.where(is_coll, ring, t)
        util = np.where(is_coll, 0.0, util)
    return t, np.minimum(util, 1.0)


# --------------------------------------------------------------------------------------------
# Kernels of a graph
# --------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Kernel:
    """One GPU kernel: the operators of one ``(layer, sub_role)`` of the graph.

    Attributes:
        sub_role: the graph's sub-role (``qkv``, ``attn_score``, ``ffn_allreduce``...).
        kind: the graph's operator kind (``gemm``, ``softmax``, ``allreduce``...).
        layer: decoder-layer index, or None for embedding / final norm / LM head.
        ops: operators fused into the kernel (per-request ops of a layer: one per request).
        flops, bytes_moved, comm_bytes: sums over the operators.
        size_bytes: for all-reduce kernels, the tensor reduced (bytes), else 0.
        rows: GEMM kernels: the ``m`` (token rows) of its operators, summed.
    """

    sub_role: str
    kind: str
    layer: int | None
    ops: int = 0
    flops: float = 0.0
    bytes_moved: float = 0.0
    comm_bytes: float = 0.0
    size_bytes: float = 0.0
    rows: float = 0.0

    @property
    def grouped_rows(self) -> float:
        """Mean GEMM rows per operator of a grouped expert kernel (``expert_*`` roles); NaN
        for every other kernel (it runs at the batch's rows)."""
        if self.kind == "gemm" and self.sub_role.startswith("expert_") and self.ops:
            return self.rows / self.ops
        return float("nan")

    @property
    def stage(self) -> str:
        """Stage of the per-stage breakdown (:data:`STAGE_OF_ROLE`)."""
        return STAGE_OF_ROLE.get(self.sub_role, "other")

    @property
    def cost_class(self) -> str:
        """Cost class of the kernel (:func:`kernel_class`)."""
        return kernel_class(self.kind)


def graph_kernels(graph: Any) -> list[Kernel]:
    """Group the operators of a workloads graph into GPU kernels, in topological order.

    Args:
        graph: a :func:`workloads.graph.build_layer_graph` / ``build_model_graph`` DiGraph (node
            attributes ``kind``, ``sub_role``, ``layer``, ``flops``, ``bytes_read``,
            ``bytes_written``, ``comm_bytes``, ``shape``).

    Returns:
        One :class:`Kernel` per ``(layer, sub_role)``.
    """
    import networkx as nx

    kernels: dict[tuple[Any, str], Kernel] = {}
    for name in nx.topological_sort(graph):
        a = graph.nodes[name]
        kind = str(getattr(a["kind"], "value", a["kind"]))
        key = (a["layer"], a["sub_role"])
        k = kernels.get(key)
        if k is None:
            k = kernels[key] = Kernel(a["sub_role"], kind, a["layer"])
        k.ops += 1
        if kind == "gemm":
            k.rows += a["shape"]["m"]
        k.flops += a["flops"]
        k.bytes_moved += a["bytes_read"] + a["bytes_written"]
        k.comm_bytes += a.get("comm_bytes", 0)
        if kind in COLLECTIVE_KINDS:
            k.size_bytes += a["bytes_read"]   # the local partial sum: the tensor reduced
    return list(kernels.values())


# --------------------------------------------------------------------------------------------
# One iteration from the graph (the reference path)
# --------------------------------------------------------------------------------------------
def _gpu_routing(cfg: MachineConfig, model: Any, batch: Any, phase: str) -> Any:
    """The routing of a mixture of experts on the GPU (``system.moe_router``'s router model,
    layer 0), None for a dense model.

    Raises:
        ArchsimError: ``system.expert_parallel > 1`` (not modelled on the GPU) or the MoE keys
            on a dense model (:func:`mapping.moe.resolve_routing`).
    """
    from mapping.errors import MappingError
    from mapping.moe import resolve_routing

    if cfg.system.expert_parallel != 1:
        raise ArchsimError(f"GPU model: system.expert_parallel = {cfg.system.expert_parallel} "
                           "is not modelled on the GPU (its experts and all-to-all are the NPU "
                           "systems'); set system.expert_parallel=1")
    try:
        return resolve_routing(model, batch, cfg, phase, [0])
    except MappingError as exc:
        raise ArchsimError(f"GPU model: {exc}") from None


def _degrees(cfg: MachineConfig, model: Any, tp: int | None, pp: int | None) -> tuple[int, int]:
    tp = tp or cfg.system.tensor_parallel or model.tensor_parallel
    pp = pp or cfg.system.pipeline_parallel or model.pipeline_parallel
    if model.n_layers % pp:
        raise ArchsimError(f"pipeline_parallel={pp} does not divide the {model.n_layers} layers "
                           f"of model '{model.name}'")
    return int(tp), int(pp)


def _pipeline_handoff_s(tokens: Any, model: Any, pp: int, link: InterconnectConfig) -> Any:
    """``pp − 1`` sends of the hidden state (tokens × d_model × dtype bytes) between stages
    (``tokens`` a number or an array of them)."""
    if pp <= 1:
        return 0.0
    from archsim.npu.timing import pipeline_handoff_time_s

    size = tokens * model.d_model * model.dtype_bytes
    return (pp - 1) * pipeline_handoff_time_s(size, link.bandwidth_bytes_per_s, link.latency_ns)


def _kernel_arrays(kernels: Sequence[Kernel]) -> tuple[list[str], np.ndarray, np.ndarray,
                                                       np.ndarray]:
    return ([k.cost_class for k in kernels], np.array([k.flops for k in kernels]),
            np.array([k.bytes_moved for k in kernels]), np.array([k.size_bytes for k in kernels]))


def simulate_gpu_iteration(cfg: MachineConfig, model: Any, batch: Any, phase: str = "decode",
                           tp: int | None = None, pp: int | None = None,
                           system: str = "gpu", with_events: bool = True) -> IterationResult:
    """One iteration of the GPU-only baseline on ``batch`` (``gpu.mode``, see module doc).

    Args:
        cfg: machine configuration; ``cfg.gpu``, ``cfg.energy.gpu`` and
            ``cfg.system.interconnect`` are used.
        model: a :class:`workloads.models.ModelSpec`.
        batch: a :class:`workloads.requests.Batch` (``seq_len`` per request: prompt length in
            prefill, current context in decode).
        phase: ``"decode"`` (one token per request) or ``"prefill"`` (whole prompts).
        tp, pp: parallel degrees (default: the config's, else the model's reference degrees).
        system: name written into the result.
        with_events: also return one trace event per kernel (track ``gpu/stream0``, all-reduces
            and pipeline hand-offs on ``link/nvlink``; cycles are nanoseconds, clock 1000 MHz).

    Returns:
        :class:`IterationResult` with ``timing_source`` ``"roofline"`` or ``"calibrated"``
        (the mode), ``cycles_per_iteration=None``, per-layer seconds (all layers identical),
        ``stage_seconds`` by kernel class (``framework``: the iteration overhead),
        ``flops_util`` (graph FLOPs ÷ (peak × time)), ``energy_j`` from board power
        (``gpu_idle``, ``gpu_dynamic``) and ``extra["gpu_mode"]``.

    Raises:
        ArchsimError / WorkloadError: bad phase, a tensor-parallel degree that does not split the
            model, an empty batch or a request longer than the model's context (names its index).
    """
    from archsim.energy.model import gpu_iteration_energy
    from workloads.graph import build_model_graph

    tp, pp = _degrees(cfg, model, tp, pp)
    if phase not in ("decode", "prefill"):
        raise ArchsimError(f"GPU model: phase {phase!r} not one of ['decode', 'prefill']")
    one = model.replace(n_layers=1, pipeline_parallel=1)
    graph = build_model_graph(one, phase, batch, tp=tp, pp=1,
                              routing=_gpu_routing(cfg, one, batch, phase))
    kernels = graph_kernels(graph)
    gpu, link = cfg.gpu, cfg.system.interconnect
    eff = kernel_efficiency(gpu)
    n_req = len(batch)
    tokens_processed = int(graph.graph["tokens"])
    # keys a decode token attends to: seq_len, or min(seq_len, W) with a sliding window
    ctx = [model.kv_len(r.seq_len) if phase == "decode" else r.seq_len for r in batch]
    ctx_mean = float(sum(ctx)) / max(n_req, 1)
    qL = float(sum(ctx)) if phase == "decode" else float(
        sum(r.seq_len * r.seq_len for r in batch))
    times, utils = kernel_times_s(*_kernel_arrays(kernels), np.float64(tokens_processed),
                                  np.float64(ctx_mean), gpu, link, tp,
                                  [SCORE_PASSES.get(k.sub_role, 0) for k in kernels],
                                  score_tensor_bytes(model, tp, qL),
                                  np.array([k.grouped_rows for k in kernels]))
    layer_idx = [i for i, k in enumerate(kernels) if k.layer is not None]
    other_idx = [i for i, k in enumerate(kernels) if k.layer is None]
    layer_k = [kernels[i] for i in layer_idx]
    other_k = [kernels[i] for i in other_idx]
    layer_times = [float(times[i]) for i in layer_idx]
    other_times = [float(times[i]) for i in other_idx]
    layer_s = float(sum(layer_times))
    handoff = _pipeline_handoff_s(tokens_processed, model, pp, link)
    overhead = eff.iteration_overhead_s
    total = model.n_layers * layer_s + float(sum(other_times)) + handoff + overhead

    stages: dict[str, float] = {}
    for k, t in zip(layer_k, layer_times):
        stages[k.stage] = stages.get(k.stage, 0.0) + model.n_layers * t
    for k, t in zip(other_k, other_times):
        stages[k.stage] = stages.get(k.stage, 0.0) + t
    if handoff:
        stages["pipeline"] = handoff
    if overhead:
        stages["framework"] = overhead
    flops = model.n_layers * sum(k.flops for k in layer_k) + sum(k.flops for k in other_k)
    kern_s = [model.n_layers * t for t in layer_times] + other_times
    kern_u = [float(utils[i]) for i in layer_idx] + [float(utils[i]) for i in other_idx]
    energy = gpu_iteration_energy(cfg, kern_s, kern_u, total, tp * pp)

    events: list[TraceEvent] = []
    if with_events:
        t_ns = 0.0
        emb = [(k, t) for k, t in zip(other_k, other_times) if k.sub_role == "embedding"]
        head = [(k, t) for k, t in zip(other_k, other_times) if k.sub_role != "embedding"]
        per = model.n_layers // pp
        seq: list[tuple[str, Kernel | None, float]] = [("", k, t) for k, t in emb]
        for layer in range(model.n_layers):
            if layer and layer % per == 0:
                seq.append((f"pipeline send to stage {layer // per}", None,
                            handoff / (pp - 1)))
            seq += [(f"L{layer}", k, t) for k, t in zip(layer_k, layer_times)]
        seq += [("", k, t) for k, t in head]
        if overhead:
            seq.append(("framework overhead", None, overhead))
        for tag, k, t in seq:
            dur = t * 1e9
            if k is None:
                track = "gpu/host" if tag == "framework overhead" else "link/nvlink"
                events.append(TraceEvent(track, tag, t_ns, t_ns + dur))
            else:
                track = "link/nvlink" if k.kind in COLLECTIVE_KINDS else "gpu/stream0"
                events.append(TraceEvent(track, f"{k.sub_role} {tag}".strip(), t_ns, t_ns + dur,
                                         {"flops": k.flops, "bytes": k.bytes_moved,
                                          "ops": k.ops}))
            t_ns += dur

    return IterationResult(
        system=system, model=model.name, phase=phase, batch_size=n_req, tokens=n_req,
        timing_source=eff.mode, seconds_per_iteration=total, npu_freq_mhz=None,
        layers=[LayerTiming(i, layer_s, None, eff.mode) for i in range(model.n_layers)],
        stage_seconds=stages,
        flops_util=min(1.0, flops / (gpu.peak_flops * total)),
        energy_j=energy.joules,
        config_name=cfg.name, tensor_parallel=tp, pipeline_parallel=pp,
        context_tokens=int(sum(r.seq_len for r in batch)),
        notes=[f"GPU timing: {describe_gpu_model(cfg)}; a model, not a measurement",
               f"GPU energy: board power {energy.details['idle_w']:g} W idle + "
               f"({energy.details['max_w']:g} − {energy.details['idle_w']:g}) W × kernel "
               f"activity {energy.details['board_activity']:.2f} = "
               f"{energy.details['board_power_w']:.0f} W per GPU (energy.gpu)"],
        extra={"kernels_per_layer": len(layer_k), "layer_seconds": layer_s,
               "flops_per_iteration": flops, "gpu_mode": eff.mode,
               "energy": energy.report()},
        events=events, events_clock_mhz=1000.0 if events else None)


# --------------------------------------------------------------------------------------------
# Fast path for the serving loop and the calibration fit
# --------------------------------------------------------------------------------------------
def batch_features(q_tokens: Sequence[int] | np.ndarray,
                   context_tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """Feature vector of a batch (:data:`FEATURES`), float64 ``[5]``.

    Args:
        q_tokens: tokens each request processes in the iteration (1 in decode, the prompt or a
            chunk of it in prefill), shape ``[n]``.
        context_tokens: KV positions each request attends (cached + new), shape ``[n]``.
    """
    q = np.asarray(q_tokens, dtype=np.float64)
    L = np.asarray(context_tokens, dtype=np.float64)
    return np.array([1.0, q.size, q.sum(), L.sum(), float(q @ L)])


@dataclass
class GpuCostModel:
    """Closed-form :func:`simulate_gpu_iteration` (no graph per iteration), vectorised.

    For each kernel ``k`` of a layer (and the embedding / LM head), FLOPs, bytes and all-reduce
    sizes are ``coef[k] @ features`` (:func:`batch_features`). The coefficients are solved from
    graph builds of small probe batches (decode and prefill) and verified on further probes; a
    mismatch raises instead of silently mis-timing. They do not depend on ``cfg.gpu``, so one
    model serves any efficiencies (:meth:`with_gpu`). Mixed iterations (decode requests plus
    prefill chunks) are timed as one pass: GEMMs over all tokens, one batched attention kernel.

    Attributes:
        cfg, model: the machine and model; tp, pp: parallel degrees.
        roles, kinds: kernel sub-roles / kinds, axis 0 of the coefficient matrices; ``layered``
            says whether the kernel is per layer (True) or once per model (False).
        flops_coef, bytes_coef, size_coef: float64 ``[kernels, 5]``.

    Raises:
        ArchsimError: the graph's costs are not affine in the features (coefficient check fails).
    """

    cfg: MachineConfig
    model: Any
    tp: int | None = None
    pp: int | None = None
    roles: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    layered: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    flops_coef: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    bytes_coef: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    size_coef: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    identify: bool = True

    def __post_init__(self) -> None:
        if getattr(self.model, "n_experts", None) is not None:
            raise ArchsimError(
                f"GPU serving model: '{self.model.name}' is a mixture of experts; its kernels' "
                "bytes depend on which experts the tokens chose, not on the batch features "
                "this fast path is affine in: serving a mixture of experts on the GPU model is "
                "not supported (archsim run / compare time one iteration)")
        self.tp, self.pp = _degrees(self.cfg, self.model, self.tp, self.pp)
        if self.identify:
            self._identify()

    # probes: (phase, seq_lens); decode q = 1, prefill q = seq_len
    _PROBES = (("decode", (3,)), ("decode", (5, 9)), ("decode", (2, 4, 11)),
               ("prefill", (3,)), ("prefill", (2, 7)), ("prefill", (4, 5, 6)),
               ("decode", (1, 1, 1, 1)), ("prefill", (1, 9)))
    _CHECKS = (("decode", (17, 2, 40)), ("prefill", (13, 3)), ("decode", (64,) * 5))

    def with_gpu(self, gpu: GpuConfig) -> "GpuCostModel":
        """The same coefficients on a machine whose ``gpu`` section is ``gpu``."""
        twin = GpuCostModel(self.cfg.model_copy(update={"gpu": gpu}), self.model, self.tp,
                            self.pp, identify=False)
        twin.roles, twin.kinds, twin.layered = self.roles, self.kinds, self.layered
        twin.flops_coef, twin.bytes_coef, twin.size_coef = (self.flops_coef, self.bytes_coef,
                                                            self.size_coef)
        return twin

    def _probe(self, phase: str, lens: Sequence[int]) -> tuple[np.ndarray, list[Kernel]]:
        from workloads.graph import build_model_graph
        from workloads.requests import Batch, Request

        one = self.model.replace(n_layers=1, pipeline_parallel=1)
        batch = Batch(tuple(Request(i, L, 1, L) for i, L in enumerate(lens)))
        ks = graph_kernels(build_model_graph(one, phase, batch, tp=self.tp, pp=1))
        q = [1] * len(lens) if phase == "decode" else list(lens)
        return batch_features(q, lens), ks

    def _identify(self) -> None:
        rows, kernel_sets = [], []
        for phase, lens in self._PROBES:
            x, ks = self._probe(phase, lens)
            rows.append(x)
            kernel_sets.append(ks)
        ref = kernel_sets[0]
        self.roles = [k.sub_role for k in ref]
        self.kinds = [k.kind for k in ref]
        self.layered = np.array([k.layer is not None for k in ref])
        for ks in kernel_sets:
            if [k.sub_role for k in ks] != self.roles:
                raise ArchsimError("GPU cost model: the kernel list differs between "
                                   "probe batches; use simulate_gpu_iteration instead")
        X = np.array(rows)

        def solve(attr: str) -> np.ndarray:
            Y = np.array([[getattr(k, attr) for k in ks] for ks in kernel_sets])
            coef, *_ = np.linalg.lstsq(X, Y, rcond=None)
            return coef.T

        self.flops_coef = solve("flops")
        self.bytes_coef = solve("bytes_moved")
        self.size_coef = solve("size_bytes")
        for phase, lens in self._CHECKS:
            x, ks = self._probe(phase, lens)
            for attr, coef in (("flops", self.flops_coef), ("bytes_moved", self.bytes_coef),
                               ("size_bytes", self.size_coef)):
                want = np.array([getattr(k, attr) for k in ks])
                got = coef @ x
                if not np.allclose(got, want, rtol=1e-6, atol=2.0):
                    bad = int(np.argmax(np.abs(got - want)))
                    raise ArchsimError(
                        f"GPU cost model: {attr} of kernel {self.roles[bad]!r} is not "
                        f"affine in {FEATURES} ({got[bad]:.6g} vs graph {want[bad]:.6g} on "
                        f"{phase} {lens}); use simulate_gpu_iteration")

    def kernel_times_s(self, features: np.ndarray) -> np.ndarray:
        """Time of every kernel (s) for batches with ``features`` (``[5]`` or ``[n, 5]``);
        float64 ``[kernels]`` or ``[n, kernels]`` (per-layer kernels count once)."""
        x = np.asarray(features, dtype=np.float64)
        fl, by, sz = x @ self.flops_coef.T, x @ self.bytes_coef.T, x @ self.size_coef.T
        ctx = x[..., 3] / np.maximum(x[..., 1], 1.0)
        classes = [kernel_class(k) for k in self.kinds]
        tp = int(self.tp or 1)
        t, _ = kernel_times_s(classes, fl, by, sz, x[..., 2], ctx, self.cfg.gpu,
                              self.cfg.system.interconnect, tp,
                              [SCORE_PASSES.get(r, 0) for r in self.roles],
                              score_tensor_bytes(self.model, tp, x[..., 4]))
        return t

    def iteration_times_s(self, features: np.ndarray) -> np.ndarray:
        """Seconds of one iteration of the whole model for each feature row ``[n, 5]`` → ``[n]``
        (layers × per-layer kernels + the others + hand-offs + the iteration overhead)."""
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        t = self.kernel_times_s(x)
        n_layers = self.model.n_layers
        total = n_layers * t[:, self.layered].sum(axis=1) + t[:, ~self.layered].sum(axis=1)
        total = total + _pipeline_handoff_s(x[:, 2], self.model, int(self.pp or 1),
                                            self.cfg.system.interconnect)
        return total + kernel_efficiency(self.cfg.gpu).iteration_overhead_s

    def iteration_time_s(self, q_tokens: Sequence[int] | np.ndarray,
                         context_tokens: Sequence[int] | np.ndarray) -> float:
        """Seconds of one iteration of the whole model for a batch given per request by
        ``q_tokens`` and ``context_tokens`` (shape ``[n]`` each; see :func:`batch_features`).

        Equals ``simulate_gpu_iteration(...).seconds_per_iteration`` for decode (q = 1) and
        prefill (q = seq_len) batches.
        """
        return float(self.iteration_times_s(batch_features(q_tokens, context_tokens))[0])


def describe_gpu_model(cfg: MachineConfig) -> str:
    """One line describing the GPU baseline's mode and assumptions (for reports)."""
    g = cfg.gpu
    e = kernel_efficiency(g)
    hw = (f"{g.name}: peak {g.peak_flops / 1e12:g} TFLOP/s, "
          f"{g.mem_bandwidth_bytes_per_s / 1e9:g} GB/s, memory {g.memory_bytes / 2**30:g} GiB")
    if e.mode == "roofline":
        return (f"{hw}; roofline mode: per kernel max(FLOPs / (peak × {e.gemm:g}), bytes / "
                f"(bandwidth × {e.weight_bw:g} matrix / {e.vector_bw:g} vector)) + launch "
                f"{e.launch_s * 1e6:g} µs")
    return (f"{hw}; calibrated mode: GEMM {e.gemm:.3g} × M/(M + {e.gemm_half_rows:.3g}) of "
            f"peak FLOP/s for M token rows, {e.weight_bw:.3g} of bandwidth streaming weights, "
            f"fused attention {e.attention_bw:.3g} × L/(L + {e.attention_half_context:.3g}) of "
            f"bandwidth at mean context L, element-wise {e.vector_bw:.3g}, launch "
            f"{e.launch_s * 1e6:.3g} µs/kernel, framework {e.iteration_overhead_s * 1e6:.3g} "
            f"µs/iteration; fitted to published measurements within "
            f"{g.calibrated.max_error:.0%} (gpu.calibrated.fit)")


__all__ = ["ring_allreduce_time_s", "KernelEfficiency", "kernel_efficiency", "kernel_class",
           "kernel_times_s", "SCORE_PASSES", "score_tensor_bytes", "Kernel", "graph_kernels", "simulate_gpu_iteration",
           "batch_features", "GpuCostModel", "FEATURES", "STAGE_OF_ROLE", "MATRIX_KINDS",
           "ATTENTION_KINDS", "VECTOR_KINDS", "COLLECTIVE_KINDS", "describe_gpu_model"]
