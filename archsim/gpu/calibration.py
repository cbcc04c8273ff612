"""Calibration of the GPU model's ``calibrated`` mode against published measurements.

Each :class:`CalibrationPoint` is one published number of a real serving stack on a real GPU —
a static-batch generation throughput, a time to first token, or a time per output token — with
the page it comes from. :func:`predict` runs the same workload through the GPU model
(:class:`archsim.gpu.GpuCostModel` with the point's GPU part, model and precision) and
:func:`fit` finds the efficiencies of ``gpu.calibrated`` (eight numbers, see
:class:`archsim.config.GpuCalibration`) that minimise the squared log errors over a GPU's
points (``scipy.optimize.least_squares``, bounded, several starts). The presets ``gpu-a100``
and ``gpu-h100`` carry the fitted values, and ``tests/test_gpu_calibration.py`` checks that they
reproduce their points within the preset's ``gpu.calibrated.max_error``.

How a point is predicted (one device; tensor parallel 1 for every point used):

* ``throughput`` (TensorRT-LLM ``gptSessionBenchmark``: a static batch of ``batch`` prompts of
  ``input_len`` tokens, ``output_len`` tokens generated each; output tokens ÷ total latency):
  ``batch · output_len / (prefill(batch × input_len) + Σ_{t=1}^{output_len−1}
  decode(batch, context input_len + t))`` — the first token comes from the prefill;
* ``ttft`` (seconds): one prefill iteration of ``batch`` prompts of ``input_len`` tokens;
* ``tpot`` (seconds): the mean decode iteration over contexts ``input_len + 1 …
  input_len + output_len − 1``.

FP8 points (TensorRT-LLM on H100 with FP8 weights and KV cache) run the model with 1-byte
elements on the part's FP8 peak; the fitted efficiencies are fractions of whichever peak
applies, and the preset applies them to fp16 (an assumption stated in ``docs/energy.md``).

Run ``python -m archsim.gpu.calibration --gpu a100`` to refit and print the table and the YAML.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Sequence

import numpy as np

from archsim.config import GpuCalibration, MachineConfig, load_config
from archsim.errors import ArchsimError
from archsim.gpu.roofline import GpuCostModel, batch_features


@dataclass(frozen=True)
class GpuPart:
    """A GPU product's datasheet numbers.

    Attributes:
        name: product name; peak_fp16_flops / peak_8bit_flops: dense tensor-core FLOP/s;
        bandwidth_bytes_per_s: HBM bandwidth; memory_bytes: HBM capacity; source: datasheet.
    """

    name: str
    peak_fp16_flops: float
    peak_8bit_flops: float
    bandwidth_bytes_per_s: float
    memory_bytes: int
    source: str


PARTS: dict[str, GpuPart] = {p.name: p for p in (
    GpuPart("A100-SXM4-80GB", 312e12, 624e12, 2.039e12, 80 * 2**30,
            "NVIDIA A100 datasheet: 312 TFLOP/s dense fp16/bf16 tensor, 624 TOPS int8, "
            "2,039 GB/s HBM2e (80 GB SXM)"),
    GpuPart("A100-SXM4-40GB", 312e12, 624e12, 1.555e12, 40 * 2**30,
            "NVIDIA A100 datasheet: 312 TFLOP/s dense fp16/bf16 tensor, 1,555 GB/s HBM2 (40 GB)"),
    GpuPart("H100-SXM5-80GB", 989.4e12, 1978.9e12, 3.35e12, 80 * 2**30,
            "NVIDIA H100 datasheet: 989.4 TFLOP/s dense fp16/bf16 tensor, 1,978.9 TFLOP/s "
            "dense fp8, 3.35 TB/s HBM3 (SXM5 80 GB)"),
)}

Metric = Literal["throughput", "ttft", "tpot"]


@dataclass(frozen=True)
class CalibrationPoint:
    """One published measurement.

    Attributes:
        part: key of :data:`PARTS`; model: registry name or ``gpt-j-6b`` (:func:`model_spec`);
        dtype_bytes: 2 (fp16/bf16) or 1 (fp8 weights and KV cache); batch, input_len,
        output_len: the workload; metric: ``throughput`` (output tokens/s), ``ttft`` or
        ``tpot`` (s); measured: the published value in that unit; stack: framework and version;
        source: where the number is printed.
    """

    part: str
    model: str
    dtype_bytes: int
    batch: int
    input_len: int
    output_len: int
    metric: Metric
    measured: float
    stack: str
    source: str

    def describe(self) -> str:
        """One line: part, model, precision, workload and metric."""
        prec = "fp8" if self.dtype_bytes == 1 else "fp16"
        return (f"{self.part} {self.model} {prec} batch {self.batch} in {self.input_len} / out "
                f"{self.output_len}: {self.metric}")


_TRT061 = ("TensorRT-LLM v0.6.1 docs/source/performance.md, 'Peak Throughput' tables "
           "(github.com/NVIDIA/TensorRT-LLM, commit 138f96d4), static batching "
           "(gptSessionBenchmark); GPUs are SXM 80 GB (TensorRT-LLM issue 281)")
_TRT05_TTFT = ("TensorRT-LLM release/0.5.0 docs/source/performance.md, 'Low Latency' tables: "
               "1st token latency at batch 1 (kept in the v0.6.1 page); SXM 80 GB (issue 281)")
_VLLM_A100 = ("johnmusgrave.com/p/vllm-throughput-latency-sweep-on: vLLM 0.23.0, "
              "Llama-3.1-8B-Instruct BF16 on one A100 40GB, 1024 in / 128 out, concurrency 1: "
              "'decode at one request per time runs at about 75 tokens/sec'")
_VLLM_H100 = ("yobitelcomm.github.io/bench/recipes/concurrency-sweep: vLLM 0.21.0, "
              "Llama-3.1-8B-Instruct fp16 on one H100-80GB-HBM3, concurrency 1: tpot_p50 "
              "6.48 ms; prompt lengths not given (taken as 256 in / 256 out, assumption: at "
              "batch 1 attention is < 1 % of the step)")

#: The published points per GPU family.
POINTS: dict[str, tuple[CalibrationPoint, ...]] = {
    "a100": (
        CalibrationPoint("A100-SXM4-80GB", "gpt-j-6b", 2, 512, 128, 128, "throughput", 6374,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": A100 FP16, GPT-J 6B, TP 1"),
        CalibrationPoint("A100-SXM4-80GB", "gpt-j-6b", 2, 60, 2048, 128, "throughput", 670,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": A100 FP16, GPT-J 6B, TP 1"),
        CalibrationPoint("A100-SXM4-80GB", "llama2-7b", 2, 384, 128, 128, "throughput", 5586,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": A100 FP16, LLaMA 7B, TP 1"),
        CalibrationPoint("A100-SXM4-80GB", "llama2-7b", 2, 60, 128, 2048, "throughput", 1928,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": A100 FP16, LLaMA 7B, TP 1"),
        CalibrationPoint("A100-SXM4-80GB", "llama2-7b", 2, 52, 2048, 128, "throughput", 591,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": A100 FP16, LLaMA 7B, TP 1"),
        CalibrationPoint("A100-SXM4-80GB", "gpt-j-6b", 2, 1, 128, 1, "ttft", 12e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": A100 FP16, GPT-J 6B, 12 ms"),
        CalibrationPoint("A100-SXM4-80GB", "gpt-j-6b", 2, 1, 2048, 1, "ttft", 129e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": A100 FP16, GPT-J 6B, 129 ms"),
        CalibrationPoint("A100-SXM4-80GB", "llama2-7b", 2, 1, 128, 1, "ttft", 16e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": A100 FP16, LLaMA 7B, 16 ms"),
        CalibrationPoint("A100-SXM4-80GB", "llama2-7b", 2, 1, 2048, 1, "ttft", 133e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": A100 FP16, LLaMA 7B, 133 ms"),
        CalibrationPoint("A100-SXM4-40GB", "llama3-8b", 2, 1, 1024, 128, "tpot", 1 / 75,
                         "vLLM 0.23.0", _VLLM_A100),
    ),
    "h100": (
        CalibrationPoint("H100-SXM5-80GB", "gpt-j-6b", 1, 1024, 128, 128, "throughput", 26150,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, GPT-J 6B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "gpt-j-6b", 1, 120, 128, 2048, "throughput", 8011,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, GPT-J 6B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "gpt-j-6b", 1, 64, 2048, 128, "throughput", 2551,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, GPT-J 6B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "gpt-j-6b", 1, 64, 2048, 2048, "throughput", 3327,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, GPT-J 6B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "llama2-7b", 1, 768, 128, 128, "throughput", 19694,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, LLaMA 7B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "llama2-7b", 1, 112, 128, 2048, "throughput", 6818,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, LLaMA 7B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "llama2-7b", 1, 80, 2048, 128, "throughput", 2244,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, LLaMA 7B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "llama2-7b", 1, 48, 2048, 2048, "throughput", 2740,
                         "TensorRT-LLM 0.6.1", _TRT061 + ": H100 FP8, LLaMA 7B, TP 1"),
        CalibrationPoint("H100-SXM5-80GB", "gpt-j-6b", 1, 1, 128, 1, "ttft", 7e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": H100 FP8, GPT-J 6B, 7 ms"),
        CalibrationPoint("H100-SXM5-80GB", "gpt-j-6b", 1, 1, 2048, 1, "ttft", 29e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": H100 FP8, GPT-J 6B, 29 ms"),
        CalibrationPoint("H100-SXM5-80GB", "llama2-7b", 1, 1, 128, 1, "ttft", 7e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": H100 FP8, LLaMA 7B, 7 ms"),
        CalibrationPoint("H100-SXM5-80GB", "llama2-7b", 1, 1, 2048, 1, "ttft", 36e-3,
                         "TensorRT-LLM 0.5", _TRT05_TTFT + ": H100 FP8, LLaMA 7B, 36 ms"),
        CalibrationPoint("H100-SXM5-80GB", "llama3-8b", 2, 1, 256, 256, "tpot", 6.48e-3,
                         "vLLM 0.21.0", _VLLM_H100),
    ),
}

#: The preset each family's fit is for.
PRESET_OF: dict[str, str] = {"a100": "gpu-a100", "h100": "gpu-h100"}

#: Fitted keys of ``gpu.calibrated`` with their bounds.
PARAMS: tuple[tuple[str, float, float], ...] = (
    ("gemm_efficiency", 0.2, 1.0), ("gemm_half_rows", 0.0, 4096.0),
    ("weight_bw_efficiency", 0.3, 1.0), ("attention_bw_efficiency", 0.1, 1.0),
    ("attention_half_context", 0.0, 8192.0), ("vector_bw_efficiency", 0.1, 1.0),
    ("kernel_launch_us", 0.0, 50.0), ("iteration_overhead_us", 0.0, 50_000.0))


def model_spec(name: str, dtype_bytes: int) -> Any:
    """The model of a point: a registry model, or GPT-J 6B as TensorRT-LLM built it (28 layers,
    16 heads of 256, d_model 4096, d_ff 16384, vocab 50400, rotary, GELU, parallel attention
    and MLP timed as sequential: the same operators), with ``dtype_bytes`` elements and a
    context of 4096 (the engines took 2048 in + 2048 out).

    Raises:
        WorkloadError: an unknown registry name.
    """
    from workloads.models import ModelSpec, get_model

    if name == "gpt-j-6b":
        m = ModelSpec(name="gpt-j-6b", d_model=4096, n_heads=16, n_kv_heads=16, head_dim=256,
                      n_layers=28, d_ff=16384, vocab_size=50400, max_seq_len=4096,
                      norm="layernorm", activation="gelu", positional="rope",
                      attention_bias=False, mlp_bias=True, tied_embeddings=False,
                      source="TensorRT-LLM performance.md GPT-J 6B build command "
                             "(n_layer 28, n_head 16, n_embd 4096); EleutherAI GPT-J-6B")
    else:
        m = get_model(name)
        if m.max_seq_len < 4096:
            m = m.replace(max_seq_len=4096)
    return m.replace(dtype_bytes=dtype_bytes, tensor_parallel=1, pipeline_parallel=1)


@lru_cache(maxsize=32)
def _cost(preset: str, model: str, dtype_bytes: int) -> GpuCostModel:
    cfg = load_config(preset, ["system.tensor_parallel=1", "system.pipeline_parallel=1"])
    return GpuCostModel(cfg, model_spec(model, dtype_bytes), 1, 1)


def _point_gpu(cfg_gpu: Any, point: CalibrationPoint, calibrated: GpuCalibration) -> Any:
    part = PARTS[point.part]
    peak = part.peak_8bit_flops if point.dtype_bytes == 1 else part.peak_fp16_flops
    return cfg_gpu.model_copy(update={
        "mode": "calibrated", "name": part.name, "peak_flops": peak,
        "mem_bandwidth_bytes_per_s": part.bandwidth_bytes_per_s,
        "memory_bytes": part.memory_bytes, "calibrated": calibrated})


def _features(point: CalibrationPoint) -> tuple[np.ndarray, np.ndarray]:
    """(prefill feature row [5], decode feature rows [steps, 5]) of a point."""
    B, n_in, n_out = point.batch, point.input_len, point.output_len
    pre = batch_features([n_in] * B, [n_in] * B)
    ctx = n_in + np.arange(1, max(n_out, 2), dtype=np.float64)
    dec = np.stack([np.ones_like(ctx), np.full_like(ctx, B), np.full_like(ctx, B), B * ctx,
                    B * ctx], axis=1)
    return pre, dec


def predict(point: CalibrationPoint, calibrated: GpuCalibration,
            preset: str = "gpu-a100") -> float:
    """The model's value of ``point`` with the efficiencies ``calibrated`` (unit of the metric:
    output tokens/s for ``throughput``, seconds for ``ttft`` / ``tpot``)."""
    cost = _cost(preset, point.model, point.dtype_bytes)
    cm = cost.with_gpu(_point_gpu(cost.cfg.gpu, point, calibrated))
    pre, dec = _features(point)
    t_pre = float(cm.iteration_times_s(pre)[0])
    if point.metric == "ttft":
        return t_pre
    t_dec = cm.iteration_times_s(dec)
    if point.metric == "tpot":
        return float(t_dec.mean())
    steps = t_dec[:point.output_len - 1].sum() if point.output_len > 1 else 0.0
    return point.batch * point.output_len / (t_pre + float(steps))


def relative_errors(points: Sequence[CalibrationPoint], calibrated: GpuCalibration,
                    preset: str = "gpu-a100") -> list[tuple[CalibrationPoint, float, float]]:
    """``[(point, predicted, (predicted − measured) / measured)]`` for every point."""
    out = []
    for p in points:
        v = predict(p, calibrated, preset)
        out.append((p, v, (v - p.measured) / p.measured))
    return out


@dataclass(frozen=True)
class FitResult:
    """A fit: the efficiencies, per-point errors, RMS and max |relative error|."""

    calibrated: GpuCalibration
    errors: list[tuple[CalibrationPoint, float, float]]
    rms_error: float
    max_error: float


def _with(params: np.ndarray, base: GpuCalibration) -> GpuCalibration:
    return base.model_copy(update={k: float(v) for (k, _, _), v in zip(PARAMS, params)})


def fit(family: str, starts: int = 6, seed: int = 0) -> FitResult:
    """Least-squares fit of ``gpu.calibrated`` to :data:`POINTS` ``[family]`` (log errors).

    Raises:
        ArchsimError: an unknown family.
    """
    from scipy.optimize import least_squares

    if family not in POINTS:
        raise ArchsimError(f"unknown GPU family {family!r}; known: {sorted(POINTS)}")
    preset = PRESET_OF[family]
    pts = POINTS[family]
    base = GpuCalibration()
    lo = np.array([b[1] for b in PARAMS])
    hi = np.array([b[2] for b in PARAMS])
    scale = np.maximum(hi - lo, 1e-9)

    def resid(u: np.ndarray) -> np.ndarray:
        cal = _with(lo + u * scale, base)
        return np.array([math.log(predict(p, cal, preset) / p.measured) for p in pts])

    rng = np.random.default_rng(seed)
    best = None
    for i in range(starts):
        u0 = np.full(len(PARAMS), 0.5) if i == 0 else rng.uniform(0.05, 0.95, len(PARAMS))
        r = least_squares(resid, u0, bounds=(0.0, 1.0), x_scale=1.0, diff_step=1e-4)
        if best is None or r.cost < best.cost:
            best = r
    cal = _with(lo + best.x * scale, base)
    errs = relative_errors(pts, cal, preset)
    e = np.array([x[2] for x in errs])
    return FitResult(cal, errs, float(np.sqrt(np.mean(e ** 2))), float(np.max(np.abs(e))))


def format_table(errors: Sequence[tuple[CalibrationPoint, float, float]]) -> str:
    """The points, measured and predicted values and errors as a Markdown table."""
    rows = ["| point | stack | measured | model | error |", "|---|---|---:|---:|---:|"]
    for p, v, e in errors:
        unit = (lambda x: f"{x:,.0f} tok/s") if p.metric == "throughput" else (
            lambda x: f"{x * 1e3:.2f} ms")
        rows.append(f"| {p.describe()} | {p.stack} | {unit(p.measured)} | {unit(v)} | "
                    f"{e:+.1%} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m archsim.gpu.calibration --gpu a100|h100 [--check]``: refit (or, with
    ``--check``, evaluate the preset's values) and print the table and the YAML."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", choices=sorted(POINTS), default="a100")
    ap.add_argument("--check", action="store_true", help="evaluate the preset, do not refit")
    a = ap.parse_args(argv)
    preset = PRESET_OF[a.gpu]
    if a.check:
        cal = load_config(preset).gpu.calibrated
        errs = relative_errors(POINTS[a.gpu], cal, preset)
        e = np.array([x[2] for x in errs])
        print(format_table(errs))
        print(f"rms {np.sqrt(np.mean(e ** 2)):.1%}, max {np.max(np.abs(e)):.1%} "
              f"(preset max_error {cal.max_error:.1%})")
        return 0
    res = fit(a.gpu)
    print(format_table(res.errors))
    print(f"\nrms {res.rms_error:.1%}, max {res.max_error:.1%} over {len(res.errors)} points\n")
    print("  calibrated:")
    for k, _, _ in PARAMS:
        print(f"    {k}: {getattr(res.calibrated, k):.4g}")
    return 0


__all__ = ["GpuPart", "PARTS", "CalibrationPoint", "POINTS", "PRESET_OF", "PARAMS",
           "model_spec", "predict", "relative_errors", "FitResult", "fit", "format_table",
           "main"]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
