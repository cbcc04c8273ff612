"""GPU-only baseline: a per-operator roofline model of an A100 over the workloads operator graph.

This is a *model*, not a measurement and not a simulation: the NeuPIMs paper measured a real
NVIDIA A100 40 GB; we estimate it with a roofline per kernel whose efficiency factors are
calibration constants (``archsim.config.GpuConfig``; defaults from the A100 datasheet:
312 TFLOP/s dense fp16 tensor core, 1,555 GB/s HBM2e; achievable fractions 0.7 / 0.8 / 0.6).

Kernels. The operators of one decoder layer (:func:`workloads.graph.build_layer_graph`) are grouped
by ``(layer, sub_role)``: every batched operator is one kernel, and the per-request operators of a
layer (``kv_append``, ``attn_score``, ``attn_softmax``, ``attn_context``) are one batched kernel
each, as a serving stack runs attention for the whole batch in one launch (e.g. vLLM's paged
attention). Kernel time (:func:`kernel_time_s`)::

    time = max(FLOPs / (peak_flops · gemm_efficiency),
               bytes / (mem_bandwidth · efficiency of the kernel's class)) + kernel_launch

with the bandwidth efficiency ``gemv_efficiency`` for matrix kernels (GEMM, attention score and
context: streaming weights or KV cache) and ``vector_efficiency`` for element-wise kernels (norms,
softmax, activation, bias/residual adds, RoPE, KV append, embedding). Bytes are the graph's unfused
traffic (every operator reads its inputs and writes its output once).

Tensor parallel all-reduce (ring; Patarasuk & Yuan 2009), :func:`ring_allreduce_time_s`::

    time = 2 (p − 1) / p · bytes / link_bandwidth + 2 (p − 1) · link_latency

with ``system.interconnect`` bandwidth (per direction per device) and latency per step.

Whole model: ``n_layers × layer time`` (identical layers) plus the embedding and the final norm +
LM head (from :func:`workloads.graph.build_model_graph`), plus ``pp − 1`` pipeline hand-offs of
the activations (``tokens · d_model · dtype`` bytes over the interconnect + one latency) when the
model is pipeline parallel. One batch is in flight, so tokens/s = tokens / iteration time.

:class:`RooflineCostModel` is the fast path the serving loop uses: the FLOPs and bytes of every
kernel are affine in five batch features (:data:`FEATURES`); its coefficients are identified from
graph builds of small probe batches and then checked against further probes (it refuses to run when
they disagree), so its times equal :func:`simulate_gpu_iteration`'s for decode and prefill batches;
for prefill chunks (``q < seq_len``) it evaluates the same per-request formulas.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from archsim.config import GpuConfig, InterconnectConfig, MachineConfig
from archsim.errors import ArchsimError
from archsim.results import IterationResult, LayerTiming, TraceEvent

#: Bandwidth-efficiency class of each graph operator kind.
MATRIX_KINDS = frozenset({"gemm", "attention_score", "attention_context"})
VECTOR_KINDS = frozenset({"softmax", "layernorm", "rmsnorm", "activation", "elementwise",
                          "kv_append", "embedding"})
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
    "embedding": "embedding", "lm_head": "lm_head", "pipeline": "pipeline",
}

#: Batch features in which every kernel's FLOPs and bytes are affine (axis of the coefficient
#: matrices): 1, requests, Σ query tokens q, Σ context tokens L, Σ q·L.
FEATURES = ("one", "requests", "q_tokens", "context_tokens", "q_context_tokens")


# --------------------------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------------------------
def ring_allreduce_time_s(size_bytes: float, p: int, link: InterconnectConfig) -> float:
    """Ring all-reduce of ``size_bytes`` over ``p`` devices (seconds).

    ``2 (p − 1) / p · size / bandwidth + 2 (p − 1) · latency``: reduce-scatter then all-gather,
    ``2 (p − 1)`` steps each moving ``size / p`` bytes per device (Patarasuk & Yuan, "Bandwidth
    optimal all-reduce algorithms for clusters of workstations", JPDC 2009). 0 for ``p = 1``.
    """
    if p <= 1:
        return 0.0
    steps = 2 * (p - 1)
    return (steps / p * size_bytes / link.bandwidth_bytes_per_s
            + steps * link.latency_ns * 1e-9)


def kernel_time_s(flops: float, bytes_moved: float, kind_class: str, gpu: GpuConfig) -> float:
    """Roofline time of one kernel (seconds), launch overhead included.

    Args:
        flops: floating-point operations of the kernel.
        bytes_moved: bytes read + written in device memory.
        kind_class: ``"matrix"`` (bandwidth at ``gemv_efficiency``) or ``"vector"``
            (``vector_efficiency``).
        gpu: peak numbers and efficiencies.

    Returns:
        ``max(flops / (peak_flops · gemm_efficiency), bytes / (bandwidth · eff)) + launch``.
    """
    eff = gpu.gemv_efficiency if kind_class == "matrix" else gpu.vector_efficiency
    compute = flops / (gpu.peak_flops * gpu.gemm_efficiency)
    memory = bytes_moved / (gpu.mem_bandwidth_bytes_per_s * eff)
    return max(compute, memory) + gpu.kernel_launch_us * 1e-6


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
    """

    sub_role: str
    kind: str
    layer: int | None
    ops: int = 0
    flops: float = 0.0
    bytes_moved: float = 0.0
    comm_bytes: float = 0.0
    size_bytes: float = 0.0

    @property
    def stage(self) -> str:
        """Stage of the per-stage breakdown (:data:`STAGE_OF_ROLE`)."""
        return STAGE_OF_ROLE.get(self.sub_role, "other")

    def time_s(self, gpu: GpuConfig, link: InterconnectConfig, tp: int) -> float:
        """Roofline time of the kernel (s); all-reduces use :func:`ring_allreduce_time_s`.

        Raises:
            ArchsimError: an operator kind the model does not know.
        """
        if self.kind in COLLECTIVE_KINDS:
            return ring_allreduce_time_s(self.size_bytes, tp, link)
        if self.kind in MATRIX_KINDS:
            return kernel_time_s(self.flops, self.bytes_moved, "matrix", gpu)
        if self.kind in VECTOR_KINDS:
            return kernel_time_s(self.flops, self.bytes_moved, "vector", gpu)
        raise ArchsimError(f"GPU roofline: operator kind {self.kind!r} has no cost class; known: "
                           f"{sorted(MATRIX_KINDS | VECTOR_KINDS | COLLECTIVE_KINDS)}")


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
        k.flops += a["flops"]
        k.bytes_moved += a["bytes_read"] + a["bytes_written"]
        k.comm_bytes += a.get("comm_bytes", 0)
        if kind in COLLECTIVE_KINDS:
            k.size_bytes += a["bytes_read"]   # the local partial sum: the tensor reduced
    return list(kernels.values())


# --------------------------------------------------------------------------------------------
# One iteration from the graph (the reference path)
# --------------------------------------------------------------------------------------------
def _degrees(cfg: MachineConfig, model: Any, tp: int | None, pp: int | None) -> tuple[int, int]:
    tp = tp or cfg.system.tensor_parallel or model.tensor_parallel
    pp = pp or cfg.system.pipeline_parallel or model.pipeline_parallel
    if model.n_layers % pp:
        raise ArchsimError(f"pipeline_parallel={pp} does not divide the {model.n_layers} layers "
                           f"of model '{model.name}'")
    return int(tp), int(pp)


def _pipeline_handoff_s(tokens: int, model: Any, pp: int, link: InterconnectConfig) -> float:
    """``pp − 1`` sends of the hidden state (tokens × d_model × dtype bytes) between stages."""
    if pp <= 1:
        return 0.0
    size = tokens * model.d_model * model.dtype_bytes
    return (pp - 1) * (size / link.bandwidth_bytes_per_s + link.latency_ns * 1e-9)


def simulate_gpu_iteration(cfg: MachineConfig, model: Any, batch: Any, phase: str = "decode",
                           tp: int | None = None, pp: int | None = None,
                           system: str = "gpu", with_events: bool = True) -> IterationResult:
    """One iteration of the GPU-only baseline on ``batch`` (roofline model, see module doc).

    Args:
        cfg: machine configuration; ``cfg.gpu`` and ``cfg.system.interconnect`` are used.
        model: a :class:`workloads.models.ModelSpec`.
        batch: a :class:`workloads.requests.Batch` (``seq_len`` per request: prompt length in
            prefill, current context in decode).
        phase: ``"decode"`` (one token per request) or ``"prefill"`` (whole prompts).
        tp, pp: parallel degrees (default: the config's, else the model's reference degrees).
        system: name written into the result.
        with_events: also return one trace event per kernel (track ``gpu/stream0``, all-reduces
            and pipeline hand-offs on ``link/nvlink``; cycles are nanoseconds, clock 1000 MHz).

    Returns:
        :class:`IterationResult` with ``timing_source="roofline"``, ``cycles_per_iteration=None``,
        per-layer seconds (all layers identical), ``stage_seconds`` by kernel class,
        ``flops_util`` (graph FLOPs ÷ (peak × time)), no NPU/PIM/energy metrics.

    Raises:
        ArchsimError / WorkloadError: bad phase, a tensor-parallel degree that does not split the
            model, an empty batch or a request longer than the model's context (names its index).
    """
    from workloads.graph import build_model_graph

    tp, pp = _degrees(cfg, model, tp, pp)
    if phase not in ("decode", "prefill"):
        raise ArchsimError(f"GPU roofline: phase {phase!r} not one of ['decode', 'prefill']")
    one = model.replace(n_layers=1, pipeline_parallel=1)
    graph = build_model_graph(one, phase, batch, tp=tp, pp=1)
    kernels = graph_kernels(graph)
    gpu, link = cfg.gpu, cfg.system.interconnect
    layer_k = [k for k in kernels if k.layer is not None]
    other_k = [k for k in kernels if k.layer is None]
    layer_times = [k.time_s(gpu, link, tp) for k in layer_k]
    other_times = [k.time_s(gpu, link, tp) for k in other_k]
    layer_s = float(sum(layer_times))
    tokens_processed = int(graph.graph["tokens"])
    handoff = _pipeline_handoff_s(tokens_processed, model, pp, link)
    total = model.n_layers * layer_s + float(sum(other_times)) + handoff

    stages: dict[str, float] = {}
    for k, t in zip(layer_k, layer_times):
        stages[k.stage] = stages.get(k.stage, 0.0) + model.n_layers * t
    for k, t in zip(other_k, other_times):
        stages[k.stage] = stages.get(k.stage, 0.0) + t
    if handoff:
        stages["pipeline"] = handoff
    flops = model.n_layers * sum(k.flops for k in layer_k) + sum(k.flops for k in other_k)

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
        for tag, k, t in seq:
            dur = t * 1e9
            if k is None:
                events.append(TraceEvent("link/nvlink", tag, t_ns, t_ns + dur))
            else:
                track = "link/nvlink" if k.kind in COLLECTIVE_KINDS else "gpu/stream0"
                events.append(TraceEvent(track, f"{k.sub_role} {tag}".strip(), t_ns, t_ns + dur,
                                         {"flops": k.flops, "bytes": k.bytes_moved,
                                          "ops": k.ops}))
            t_ns += dur

    n_req = len(batch)
    return IterationResult(
        system=system, model=model.name, phase=phase, batch_size=n_req, tokens=n_req,
        timing_source="roofline", seconds_per_iteration=total, npu_freq_mhz=None,
        layers=[LayerTiming(i, layer_s, None, "roofline") for i in range(model.n_layers)],
        stage_seconds=stages,
        flops_util=min(1.0, flops / (gpu.peak_flops * total)),
        config_name=cfg.name, tensor_parallel=tp, pipeline_parallel=pp,
        context_tokens=int(sum(r.seq_len for r in batch)),
        notes=[f"GPU timing is a roofline model of {gpu.name} (peak {gpu.peak_flops / 1e12:g} "
               f"TFLOP/s, {gpu.mem_bandwidth_bytes_per_s / 1e9:g} GB/s, efficiencies "
               f"gemm {gpu.gemm_efficiency:g} / gemv {gpu.gemv_efficiency:g} / vector "
               f"{gpu.vector_efficiency:g}, launch {gpu.kernel_launch_us:g} µs), not a "
               "measurement; no energy model"],
        extra={"kernels_per_layer": len(layer_k), "layer_seconds": layer_s,
               "flops_per_iteration": flops},
        events=events, events_clock_mhz=1000.0 if events else None)


# --------------------------------------------------------------------------------------------
# Fast path for the serving loop
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
class RooflineCostModel:
    """Closed-form :func:`simulate_gpu_iteration` for the serving loop (no graph per iteration).

    For each kernel ``k`` of a layer (and the embedding / LM head), FLOPs, bytes and all-reduce
    sizes are ``coef[k] @ features`` (:func:`batch_features`). The coefficients are solved from
    graph builds of small probe batches (decode and prefill) and verified on further probes; a
    mismatch raises instead of silently mis-timing. Mixed iterations (decode requests plus prefill
    chunks) are timed as one pass: GEMMs over all tokens, one batched attention kernel.

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

    def __post_init__(self) -> None:
        self.tp, self.pp = _degrees(self.cfg, self.model, self.tp, self.pp)
        self._identify()

    # probes: (phase, seq_lens); decode q = 1, prefill q = seq_len
    _PROBES = (("decode", (3,)), ("decode", (5, 9)), ("decode", (2, 4, 11)),
               ("prefill", (3,)), ("prefill", (2, 7)), ("prefill", (4, 5, 6)),
               ("decode", (1, 1, 1, 1)), ("prefill", (1, 9)))
    _CHECKS = (("decode", (17, 2, 40)), ("prefill", (13, 3)), ("decode", (64,) * 5))

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
                raise ArchsimError("GPU roofline fast path: the kernel list differs between "
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
                        f"GPU roofline fast path: {attr} of kernel {self.roles[bad]!r} is not "
                        f"affine in {FEATURES} ({got[bad]:.6g} vs graph {want[bad]:.6g} on "
                        f"{phase} {lens}); use simulate_gpu_iteration")

    def kernel_times_s(self, features: np.ndarray) -> np.ndarray:
        """Roofline time of every kernel (s) for a batch with ``features``; float64 ``[kernels]``
        (per-layer kernels count once: multiply by layers for the model)."""
        gpu, link, tp = self.cfg.gpu, self.cfg.system.interconnect, int(self.tp or 1)
        fl = self.flops_coef @ features
        by = self.bytes_coef @ features
        sz = self.size_coef @ features
        out = np.empty(len(self.roles))
        compute = fl / (gpu.peak_flops * gpu.gemm_efficiency)
        launch = gpu.kernel_launch_us * 1e-6
        for i, kind in enumerate(self.kinds):
            if kind in COLLECTIVE_KINDS:
                out[i] = ring_allreduce_time_s(sz[i], tp, link)
            else:
                eff = gpu.gemv_efficiency if kind in MATRIX_KINDS else gpu.vector_efficiency
                out[i] = max(compute[i], by[i] / (gpu.mem_bandwidth_bytes_per_s * eff)) + launch
        return out

    def iteration_time_s(self, q_tokens: Sequence[int] | np.ndarray,
                         context_tokens: Sequence[int] | np.ndarray) -> float:
        """Seconds of one iteration of the whole model for a batch given per request by
        ``q_tokens`` and ``context_tokens`` (shape ``[n]`` each; see :func:`batch_features`).

        Equals ``simulate_gpu_iteration(...).seconds_per_iteration`` for decode (q = 1) and
        prefill (q = seq_len) batches.
        """
        x = batch_features(q_tokens, context_tokens)
        t = self.kernel_times_s(x)
        n_layers = self.model.n_layers
        total = float(n_layers * t[self.layered].sum() + t[~self.layered].sum())
        return total + _pipeline_handoff_s(int(x[2]), self.model, int(self.pp or 1),
                                           self.cfg.system.interconnect)


def describe_gpu_model(cfg: MachineConfig) -> str:
    """One line describing the GPU baseline's assumptions (for reports)."""
    g = cfg.gpu
    return (f"{g.name}: roofline per kernel, peak {g.peak_flops / 1e12:g} TFLOP/s × "
            f"{g.gemm_efficiency:g}, {g.mem_bandwidth_bytes_per_s / 1e9:g} GB/s × "
            f"{g.gemv_efficiency:g} (matrix) / {g.vector_efficiency:g} (vector), launch "
            f"{g.kernel_launch_us:g} µs, memory {g.memory_bytes / 2**30:g} GiB")


__all__ = ["ring_allreduce_time_s", "kernel_time_s", "Kernel", "graph_kernels",
           "simulate_gpu_iteration", "batch_features", "RooflineCostModel", "FEATURES",
           "STAGE_OF_ROLE", "MATRIX_KINDS", "VECTOR_KINDS", "COLLECTIVE_KINDS",
           "describe_gpu_model"]
