"""The machine: NPU, system composition, GPU baseline, and :class:`MachineConfig` that holds
them with the memory, PIM, energy and area sections.

Also :func:`parallel_degrees`, the tensor/pipeline-parallel degrees of a model on a machine.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from archsim.config.base import CrossFieldError, FrozenSection
from archsim.config.memory import MemoryConfig, PimConfig
from archsim.energy.schema import AreaConfig, EnergyConfig, ProcessConfig, VECTOR_OP_NAMES
from archsim.errors import ArchsimError


# --------------------------------------------------------------------------------------------
# NPU
# --------------------------------------------------------------------------------------------
VECTOR_OPS = ("add", "mul", "scale", "layernorm", "rmsnorm", "softmax", "gelu", "silu", "rope",
              "copy", "dot")
assert VECTOR_OP_NAMES == VECTOR_OPS, "archsim.energy.schema.VECTOR_OP_NAMES != VECTOR_OPS"


class VectorUnitConfig(FrozenSection):
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


class ScratchpadConfig(FrozenSection):
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


class DmaConfig(FrozenSection):
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


class NpuConfig(FrozenSection):
    """The NPU: weight-stationary systolic arrays, vector units, scratchpad, DMA.

    Defaults are the NeuPIMs NPU (Heo et al., ASPLOS 2024, §5): 8 arrays of 128×128 PEs at
    1 GHz, fp16 operands.
    """

    n_arrays: int = Field(8, ge=1, le=1024)
    array_height: int = Field(128, ge=2, le=4096, description="PE rows (H): weight rows")
    array_width: int = Field(128, ge=2, le=4096, description="PE columns (W): output columns")
    freq_mhz: float = Field(1000.0, ge=10, le=10000,
                            description="NPU clock, MHz (at least 10: a slower clock makes one "
                                        "NPU cycle span thousands of memory cycles and a run "
                                        "hours long)")
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
# System and GPU
# --------------------------------------------------------------------------------------------
class InterconnectConfig(FrozenSection):
    """Device-to-device links for tensor/pipeline parallel collectives (ring all-reduce)."""

    bandwidth_bytes_per_s: float = Field(300e9, gt=0, description="per direction per device")
    latency_ns: float = Field(1000.0, ge=0, description="per collective step")
    allreduce: bool = Field(True, description=(
        "time tensor-parallel all-reduces on the links (false: an ALL_REDUCE completes as it "
        "issues, as in the public NeuPIMs simulator, which models no collective)"))


class MoeRouterConfig(FrozenSection):
    """The router model of timing runs of mixture-of-experts models
    (:func:`workloads.moe.draw_routing`): each token draws ``experts_per_token`` distinct
    experts, expert ``e`` with probability ``∝ rank(e)^-zipf_exponent`` (a random ranking per
    layer), from ``seed`` and the layer. Timing runs have no activations to route; golden
    checks route by the router's values instead. Read only for models with experts (set on a
    dense model, it is rejected)."""

    zipf_exponent: float = Field(0.0, ge=0, le=10, description=(
        "skew of the expert loads: 0 = uniform draws, larger = a few hot experts"))
    seed: int = Field(0, ge=0, le=2**31 - 1, description="seed of the routing draws")


class SystemConfig(FrozenSection):
    """What the system has and how the mapper uses it.

    ``engines`` lists the compute engines present: ``[npu, pim]``, ``[npu]`` or ``[gpu]``.
    ``tensor_parallel`` / ``pipeline_parallel`` of ``null`` take the model's reference degrees.
    ``sub_batches: auto`` lets the runtime choose the count of every decode iteration: it
    simulates each count from 1 to ``max_sub_batches`` on the iteration's window and keeps the
    fastest (the cost model is the simulator itself, so ``auto`` is never slower than a fixed
    count in that range; it costs ``max_sub_batches`` simulations; :mod:`archsim.system.core`).
    ``micro_batches: M`` splits an iteration's batch into ``M`` micro-batches that flow through
    the ``pipeline_parallel`` stages one behind the other (GPipe, Huang et al., NeurIPS 2019;
    :mod:`archsim.system.pipeline`): the iteration lasts until the last micro-batch leaves the
    last stage; NPU systems only (the stage times are simulated).
    ``expert_parallel`` (mixture-of-experts models only): the experts are split over that many
    device groups, each running attention for its share of the batch and exchanging tokens by
    all-to-all (:mod:`workloads.moe`); ``moe_router`` is the router model of timing runs.
    """

    engines: tuple[Literal["npu", "pim", "gpu"], ...] = ("npu", "pim")
    sub_batches: int | Literal["auto"] = Field(
        2, description="sub-batches interleaved (1 = off; auto = the runtime picks per "
                       "iteration among 1..max_sub_batches)")
    max_sub_batches: int = Field(2, ge=1, le=64, description=(
        "with sub_batches: auto, the largest count the runtime tries"))
    sub_batch_policy: Literal["half", "balanced_kv"] = "half"
    channel_policy: Literal["round_robin", "min_load"] = "min_load"
    tensor_parallel: int | None = Field(None, ge=1, le=1024)
    pipeline_parallel: int | None = Field(None, ge=1, le=1024)
    micro_batches: int = Field(1, ge=1, le=64, description=(
        "micro-batches an iteration's batch is split into, in flight together through the "
        "pipeline stages (GPipe schedule, archsim.system.pipeline; 1 = one batch in flight)"))
    expert_parallel: int = Field(1, ge=1, le=1024, description=(
        "device groups the experts of a mixture-of-experts model are split over (1 = every "
        "device holds every expert; rejected for a dense model)"))
    moe_router: MoeRouterConfig = MoeRouterConfig()
    interconnect: InterconnectConfig = InterconnectConfig()

    @field_validator("sub_batches", mode="before")
    @classmethod
    def _sub_batches(cls, v: Any) -> Any:
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 64:
            raise ValueError(f"{v!r} is not an integer 1..64 or auto")
        return v

    @model_validator(mode="after")
    def _engines(self) -> "SystemConfig":
        default = type(self).model_fields["max_sub_batches"].default
        if self.sub_batches != "auto" and self.max_sub_batches != default:
            raise ValueError(f"max_sub_batches {self.max_sub_batches} applies only with "
                             f"sub_batches: auto (it is {self.sub_batches})")
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
        if "gpu" in e and self.micro_batches != 1:
            raise CrossFieldError(("micro_batches", "engines"), (
                f"micro_batches {self.micro_batches} applies to the NPU systems (their stage "
                "times are simulated); the GPU model times one batch in flight (allowed: 1)"))
        return self

    @property
    def has_pim(self) -> bool:
        """True when attention GEMVs may run on PIM."""
        return "pim" in self.engines


class GpuCalibration(FrozenSection):
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


class GpuConfig(FrozenSection):
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


class ServingConfig(FrozenSection):
    """The serving runtime's KV-cache manager (read by ``archsim run --serve``,
    :mod:`archsim.serving.kvcache`; a single-iteration run never allocates KV blocks).

    ``kv_allocation: paged`` (default, vLLM's PagedAttention, Kwon et al., SOSP 2023): the KV
    cache is cut into blocks of ``kv_block_tokens`` tokens; a request is admitted when the
    blocks of its prompt are free and takes one more block whenever its context crosses a
    block boundary; when a running request needs a block and none is free, the latest-admitted
    request of that pool is preempted (``preemption``: ``recompute`` drops its KV and queues it
    at the head of the waiting queue, to prefill its prompt and generated tokens again;
    ``swap`` copies its blocks to host memory over a link of ``swap_bandwidth_bytes_per_s`` and
    back before it resumes, the copies serialised with the iteration they precede, as vLLM
    V0's worker does). ``reserve``: a request reserves the blocks of its whole final context
    (prompt + output − 1 tokens) at admission and is never preempted; it needs the output length in
    advance (an oracle no server has) and holds blocks for tokens not yet generated.
    On PIM systems the blocks are pooled per channel (a request's KV lives in one channel,
    the PIM layout); elsewhere one pool per device.
    """

    kv_allocation: Literal["paged", "reserve"] = Field(
        "paged", description="paged: blocks as the context grows, preemption when full "
                             "(vLLM); reserve: the whole final context at admission")
    kv_block_tokens: int = Field(16, ge=1, le=65536, description=(
        "tokens per KV-cache block (vLLM's default block size is 16)"))
    preemption: Literal["recompute", "swap"] = Field(
        "recompute", description="what a preempted request loses: recompute (its KV, "
                                 "prefilled again) or swap (its blocks, copied to host and "
                                 "back); paged allocation only")
    swap_bandwidth_bytes_per_s: float = Field(
        31.5e9, gt=0, le=1e15, description=(
            "host link of one device, per direction (default PCIe 4.0 x16: 16 GT/s x 16 lanes "
            "x 128/130, PCI-SIG); preemption: swap only"))

    @model_validator(mode="after")
    def _applies(self) -> "ServingConfig":
        fields = type(self).model_fields
        if self.kv_allocation == "reserve" and self.preemption != fields["preemption"].default:
            raise CrossFieldError(("preemption", "kv_allocation"), (
                f"preemption {self.preemption} applies to kv_allocation: paged; reserve never "
                "preempts"))
        if (self.swap_bandwidth_bytes_per_s != fields["swap_bandwidth_bytes_per_s"].default
                and (self.preemption != "swap" or self.kv_allocation != "paged")):
            raise CrossFieldError(("swap_bandwidth_bytes_per_s", "preemption"), (
                "swap_bandwidth_bytes_per_s applies to preemption: swap (with kv_allocation: "
                f"paged); it is {self.preemption}"))
        return self


class MachineConfig(FrozenSection):
    """A whole machine: NPU, memory, PIM, system composition, GPU baseline, and the energy and
    area tables (required: every constant with its source, :mod:`archsim.energy.schema`)."""

    name: str = "custom"
    npu: NpuConfig = NpuConfig()
    memory: MemoryConfig = MemoryConfig()
    pim: PimConfig = PimConfig()
    system: SystemConfig = SystemConfig()
    serving: ServingConfig = ServingConfig()
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


def parallel_degrees(cfg: MachineConfig, model: Any) -> tuple[int, int]:
    """``(tensor_parallel, pipeline_parallel)`` of ``model`` on ``cfg``: the config's
    ``system.tensor_parallel`` / ``system.pipeline_parallel``, else the model's reference ones.

    Raises:
        ArchsimError / WorkloadError: the degrees do not split the model (pipeline stages must
            divide the layers; ``model.check_tensor_parallel`` checks the heads and widths);
            ``system.micro_batches > 1`` on one pipeline stage (micro-batches in flight need
            stages to flow through; on one stage they would only run one after the other).
    """
    tp = cfg.system.tensor_parallel or model.tensor_parallel
    pp = cfg.system.pipeline_parallel or model.pipeline_parallel
    model.check_tensor_parallel(tp)
    if model.n_layers % pp:
        raise ArchsimError(f"pipeline_parallel={pp} does not divide the {model.n_layers} "
                           f"layers of model '{model.name}'")
    if pp == 1 and cfg.system.micro_batches > 1:
        raise ArchsimError(f"system.micro_batches {cfg.system.micro_batches} needs pipeline "
                           f"parallelism: model '{model.name}' runs in one stage here (set "
                           "system.pipeline_parallel >= 2)")
    return tp, pp


__all__ = ["VECTOR_OPS", "VectorUnitConfig", "ScratchpadConfig", "DmaConfig", "NpuConfig",
           "InterconnectConfig", "MoeRouterConfig", "SystemConfig", "ServingConfig",
           "GpuCalibration", "GpuConfig", "GPU_MODE_KEYS", "MachineConfig", "parallel_degrees"]
