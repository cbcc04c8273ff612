"""Running systems on workloads: one iteration, K iterations, a serving run, a comparison.

This is the Python API behind ``archsim run`` and ``archsim compare`` (sweeps call it directly):

* :func:`resolve_system` — a system name (``neupims``, ``npu-pim``, ``npu``, ``gpu``), preset or
  YAML file, plus ``--set`` overrides → ``(label, MachineConfig)``.
* :func:`simulate_system_iteration` — one iteration of one system: the GPU model
  (:func:`archsim.gpu.simulate_gpu_iteration`) or the cycle-level simulator
  (``archsim.system.simulate_iteration``, imported lazily; an :class:`ArchsimError` says so when it
  is not available). Nothing here counts a cycle.
* :func:`run_iterations`, :func:`compare_systems`, :func:`paper_grid`.
* :func:`serve` / :func:`serve_system` — an iteration-level (continuous) batching scheduler.

Serving model (ORCA / vLLM style iteration-level scheduling):

* Requests (prompt ``input_toks``, ``output_toks`` to generate, ``arrival_s``) wait in arrival
  order (FCFS, no overtaking). At each iteration boundary, arrived requests are admitted while the
  batch has fewer than ``max_batch`` requests and the KV cache can hold the request's whole final
  context (``input + output`` tokens are reserved at admission, so nothing is ever preempted).
* Without chunked prefill, an iteration either prefills admitted requests whose prompt is not
  processed yet (whole prompts, in admission order, while their tokens fit the prefill budget
  ``max_prefill_tokens``, at least one prompt; decode requests wait), or decodes one token for
  every running request. The budget is vLLM's ``max_num_batched_tokens`` (its default,
  ``max(context limit, 2048)``, is :func:`default_prefill_budget`); ``None`` prefills every
  waiting prompt at once. With ``chunked_prefill_tokens = N`` every iteration decodes all running requests and
  fills the rest of a budget of ``N`` tokens with prompt chunks in admission order (Sarathi-Serve
  / vLLM chunked prefill).
* The iteration that finishes a request's prompt produces its first token (TTFT); each decode
  produces one more; a request leaves (freeing its KV reservation) with its last token.
* Context of a request in an iteration (what attention reads): ``prefilled + chunk`` in prefill,
  ``input + generated`` in decode (the convention of :mod:`workloads.requests`).
* KV capacity (:func:`kv_budget`): the device's memory (``memory.org`` capacity, or
  ``gpu.memory_bytes`` for the GPU) minus the weights one device holds (its tensor-parallel share
  of its pipeline stage's layers, plus the embedding or LM head share), divided by the KV bytes of
  one token on one device (``ModelSpec.kv_cache_bytes_per_token(tp)`` × layers of a stage /
  layers). Activations and PIM row-alignment padding are not reserved.

Iteration timers (:class:`IterationTimer`: ``time(mix) -> (seconds, source)``):

* :class:`GpuTimer` — the GPU model in closed form (``calibrated`` or ``roofline``: its mode).
* :class:`CycleLevelTimer` — the cycle-level simulator per iteration (``cycle-level``).
* :class:`CachingTimer` — reuses the time of an earlier iteration with the same key (``reused``);
  the key is documented there (``exact``: the multiset of (query tokens, context, channel) per
  request, identical inputs only; ``aggregate``: request counts and token sums bucketed to 1 %).
* :class:`SurrogateTimer` — a Gaussian-process surrogate (``surrogate``) calibrated online on
  iterations timed by the exact timer, with an out-of-sample error report (:meth:`error_report`) and
  :func:`measure_surrogate_error` to check it against the exact timer on sampled iterations.

The result says how many iterations each source timed (``iterations_by_source``).
"""
from __future__ import annotations

import math
import time as _time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from archsim.config import MachineConfig, list_presets, load_config, parallel_degrees
from archsim.errors import ArchsimError
from archsim.gpu import GpuCostModel, kernel_efficiency, simulate_gpu_iteration
from archsim.results import IterationResult, RequestRecord, ServingResult

#: ``archsim run --system`` names → preset names.
SYSTEM_PRESETS: dict[str, str] = {
    "neupims": "neupims",
    "npu-pim": "npu-pim-blocked",
    "npu": "npu-only",
    "gpu": "gpu-a100",
}
#: The reference system of speedups.
REFERENCE_SYSTEM = "neupims"
#: NeuPIMs (Heo et al., ASPLOS 2024), abstract: throughput of NeuPIMs over each baseline.
PAPER_HEADLINE: dict[str, float] = {"gpu": 3.0, "npu": 2.4, "npu-pim": 1.6}
#: The reference evaluation grid of the paper (models × datasets × batch sizes).
PAPER_MODELS = ("gpt3-7b", "gpt3-13b", "gpt3-30b", "gpt3-175b")
PAPER_DATASETS = ("sharegpt", "alpaca")
PAPER_BATCHES = (64, 128, 256, 384, 512)


# --------------------------------------------------------------------------------------------
# Systems
# --------------------------------------------------------------------------------------------
def resolve_system(system: str | MachineConfig,
                   overrides: Sequence[str] = ()) -> tuple[str, MachineConfig]:
    """Turn a system name, preset name or YAML path (or a config) into ``(label, config)``.

    ``neupims``, ``npu-pim``, ``npu`` and ``gpu`` map to the presets of :data:`SYSTEM_PRESETS`
    (label = the system name); any other preset or a ``.yaml`` file is loaded as such (label =
    the config's ``name``).

    Raises:
        ArchsimError: unknown name (lists the systems and presets) or an invalid config /
            override (:class:`archsim.errors.ConfigError`, naming file, key and allowed values).
    """
    if isinstance(system, MachineConfig):
        if overrides:
            raise ArchsimError("overrides need a system name or file, not a loaded config")
        return system.name, system
    s = str(system).strip()
    if s in SYSTEM_PRESETS:
        return s, load_config(SYSTEM_PRESETS[s], list(overrides))
    if s in list_presets() or s.endswith((".yaml", ".yml")) or Path(s).is_file():
        cfg = load_config(s, list(overrides))
        label = next((k for k, v in SYSTEM_PRESETS.items() if v == s), cfg.name)
        return label, cfg
    raise ArchsimError(f"unknown system {s!r}; valid systems: {', '.join(SYSTEM_PRESETS)} "
                       f"(or a preset: {', '.join(list_presets())}, or a YAML config file)")


def is_gpu(cfg: MachineConfig) -> bool:
    """True when the configuration is the GPU-only baseline (``system.engines: [gpu]``)."""
    return "gpu" in cfg.system.engines


def _cycle_level_simulator() -> Callable[..., IterationResult]:
    """``archsim.system.simulate_iteration``, or an ArchsimError when it is not built."""
    try:
        from archsim.system import simulate_iteration  # type: ignore[attr-defined]
    except ImportError as exc:
        raise ArchsimError(
            "cycle-level system simulator not available (archsim.system.simulate_iteration "
            f"could not be imported: {exc}); only --system gpu (the GPU model) runs") from None
    return simulate_iteration


def simulate_system_iteration(cfg: MachineConfig, model: Any, batch: Any,
                              phase: str = "decode", system: str | None = None,
                              **kwargs: Any) -> IterationResult:
    """One iteration of ``batch`` on the system described by ``cfg``.

    GPU configurations use :func:`archsim.gpu.simulate_gpu_iteration` (its gpu.mode); every
    other one calls ``archsim.system.simulate_iteration(cfg, model, batch, phase=phase,
    **kwargs)`` (cycle-level). ``system`` (default ``cfg.name``) is written into the result.

    Args:
        cfg: the machine; model: a ``ModelSpec``; batch: a ``workloads.requests.Batch``.
        phase: ``decode`` or ``prefill``.

    Raises:
        ArchsimError: the cycle-level simulator is not available, or the simulation fails.
        WorkloadError: a request longer than the model's context (names its index).
    """
    label = system or cfg.name
    if is_gpu(cfg):
        res = simulate_gpu_iteration(cfg, model, batch, phase=phase, system=label,
                                     with_events=kwargs.get("with_events", True))
    else:
        res = _cycle_level_simulator()(cfg, model, batch, phase=phase, **kwargs)
    res.system = label
    return res


# --------------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KvBudget:
    """Memory of one device split between weights and KV cache.

    Attributes:
        device_bytes: memory of one device; device_key: the config key it comes from.
        weight_bytes: weights held by the most loaded device (tensor-parallel share of a
            pipeline stage's layers plus the embedding or LM head share).
        kv_bytes_per_token: KV-cache bytes of one token on one device (its stage's layers, its
            KV heads).
        capacity_tokens: ``(device_bytes − weight_bytes) // kv_bytes_per_token``.
    """

    device_bytes: int
    device_key: str
    weight_bytes: int
    kv_bytes_per_token: int
    capacity_tokens: int

    def describe(self) -> str:
        """One line: capacity, weights and what remains for the KV cache."""
        gib = 2**30
        return (f"{self.device_bytes / gib:.1f} GiB per device ({self.device_key}) − "
                f"{self.weight_bytes / gib:.2f} GiB weights = "
                f"{(self.device_bytes - self.weight_bytes) / gib:.2f} GiB KV cache = "
                f"{self.capacity_tokens:,} tokens at {self.kv_bytes_per_token:,} B/token")


def kv_budget(cfg: MachineConfig, model: Any) -> KvBudget:
    """KV-cache capacity of one device of the system (see the module docstring).

    Raises:
        ArchsimError: the weights alone do not fit the device (names both sizes and the key).
    """
    tp, pp = parallel_degrees(cfg, model)
    if is_gpu(cfg):
        dev, key = int(cfg.gpu.memory_bytes), "gpu.memory_bytes"
    else:
        dev, key = int(cfg.memory.org.capacity_bytes), "memory.org (channels × banks × rows × page)"
    per_stage = model.n_layers // pp
    layers = per_stage * model.layer_param_count(tp)
    emb = math.ceil(model.embedding_param_count() / tp)
    head = math.ceil(model.head_param_count() / tp)
    params = layers + (emb + head if pp == 1 else max(emb, head))
    weight = params * model.dtype_bytes
    kv_tok = model.kv_cache_bytes_per_token(tp) * per_stage // model.n_layers
    if weight >= dev:
        raise ArchsimError(
            f"memory capacity: the weights of model '{model.name}' need {weight / 2**30:.2f} GiB "
            f"per device (tensor_parallel={tp}, pipeline_parallel={pp}) but a device has "
            f"{dev / 2**30:.2f} GiB ({key})")
    return KvBudget(dev, key, weight, kv_tok, (dev - weight) // kv_tok)


def check_batch_fits(cfg: MachineConfig, model: Any, batch: Any,
                     extra_tokens_per_request: int = 0) -> KvBudget:
    """Check that ``batch``'s KV cache (Σ seq_len + extra per request) fits one device.

    Raises:
        ArchsimError: naming the resource (KV cache after weights), what the batch needs and
            what is available.
    """
    bud = kv_budget(cfg, model)
    need = int(sum(r.seq_len for r in batch)) + extra_tokens_per_request * len(batch)
    if need > bud.capacity_tokens:
        raise ArchsimError(
            f"memory capacity: the batch of {len(batch)} requests needs {need:,} KV-cache tokens "
            f"({need * bud.kv_bytes_per_token / 2**30:.2f} GiB per device) but only "
            f"{bud.capacity_tokens:,} fit: {bud.describe()}; use a smaller --batch or "
            f"--ignore-capacity")
    return bud


# --------------------------------------------------------------------------------------------
# Requests and arrivals
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestSet:
    """Requests of a serving run.

    Attributes:
        input_toks, output_toks: int64 ``[n]`` prompt and output lengths (tokens).
        arrival_s: float64 ``[n]`` arrival times (seconds).
        index: int64 ``[n]`` position of each request in its source (reported back).
        source: where the lengths came from; arrival: how arrivals were made.
        notes: adjustments made (outputs truncated to the context, zero-output rows dropped).
        channels: int64 ``[n]`` KV channel of each request from the request file (a ``.tsv``
            ``ch_idx`` column), or None; used only with ``keep_channels``.
        lines: line of ``source`` of each request (empty when not from a file).
    """

    input_toks: np.ndarray
    output_toks: np.ndarray
    arrival_s: np.ndarray
    index: np.ndarray
    source: str = ""
    arrival: str = "all at t=0"
    notes: tuple[str, ...] = ()
    channels: np.ndarray | None = None
    lines: tuple[int, ...] = ()

    def __len__(self) -> int:
        return int(self.input_toks.size)

    def with_arrivals(self, arrival_s: np.ndarray, description: str) -> "RequestSet":
        """A copy with new arrival times (float64 ``[n]``, seconds).

        Raises:
            ArchsimError: wrong length, negative or non-finite times.
        """
        a = np.asarray(arrival_s, dtype=np.float64)
        if a.shape != self.input_toks.shape:
            raise ArchsimError(f"arrivals: {a.size} timestamps for {len(self)} requests")
        bad = ~np.isfinite(a) | (a < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ArchsimError(f"arrivals: timestamp of request index {i} is {a[i]!r}; "
                               "must be a finite number >= 0")
        return RequestSet(self.input_toks, self.output_toks, a, self.index, self.source,
                          description, self.notes, self.channels, self.lines)


def make_request_set(input_toks: Sequence[int] | np.ndarray,
                     output_toks: Sequence[int] | np.ndarray, model: Any,
                     source: str = "", channels: Sequence[int] | np.ndarray | None = None,
                     lines: Sequence[int] = ()) -> RequestSet:
    """Validate lengths against ``model`` and build a :class:`RequestSet` (all arrive at 0).

    Requests with ``output_toks == 0`` are dropped (they never decode; the NeuPIMs trace
    generator drops them too); outputs are truncated so that the last decode's context
    ``input + output − 1`` fits ``model.max_seq_len`` (a server stops at the context limit).
    Both adjustments are listed in ``notes``. ``channels`` (int ``[n]``) and ``lines`` (the
    file line of each row) follow the kept rows.

    Raises:
        ArchsimError: a prompt longer than the model's maximum context (names the request index
            and both lengths), negative lengths, or no request left.
    """
    inp = np.asarray(input_toks, dtype=np.int64).ravel()
    out = np.asarray(output_toks, dtype=np.int64).ravel()
    if inp.shape != out.shape:
        raise ArchsimError(f"requests: {inp.size} prompt lengths but {out.size} output lengths")
    if (inp < 0).any() or (out < 0).any():
        i = int(np.argmax((inp < 0) | (out < 0)))
        raise ArchsimError(f"request index {i}: negative length ({inp[i]}, {out[i]})")
    too_long = inp > model.max_seq_len
    if too_long.any():
        i = int(np.argmax(too_long))
        raise ArchsimError(f"request index {i} has a prompt of {int(inp[i])} tokens, longer "
                           f"than the maximum context {model.max_seq_len} of model "
                           f"'{model.name}'")
    notes = []
    idx = np.arange(inp.size, dtype=np.int64)
    ch = None if channels is None else np.asarray(channels, dtype=np.int64).ravel()
    ln = np.asarray(lines, dtype=np.int64) if len(lines) == inp.size else None
    keep = out > 0
    if not keep.all():
        notes.append(f"{int((~keep).sum())} requests with 0 output tokens dropped")
        inp, out, idx = inp[keep], out[keep], idx[keep]
        ch = None if ch is None else ch[keep]
        ln = None if ln is None else ln[keep]
    if inp.size == 0:
        raise ArchsimError("requests: no request with output tokens")
    inp = np.maximum(inp, 1)
    limit = model.max_seq_len - inp + 1
    cut = out > limit
    if cut.any():
        notes.append(f"{int(cut.sum())} outputs truncated to the context limit "
                     f"{model.max_seq_len}")
        out = np.minimum(out, limit)
    return RequestSet(inp, out, np.zeros(inp.size), idx, source, "all at t=0", tuple(notes), ch,
                      () if ln is None else tuple(int(x) for x in ln))


def load_request_set(model: Any, path: str | Path | None = None,
                     dataset: str | None = None, n: int | None = None,
                     seed: int = 0) -> RequestSet:
    """Requests for a serving run: from a length file, or drawn from a built-in distribution.

    Args:
        model: the ``ModelSpec`` (context limit).
        path: ``.tsv`` length table or ShareGPT ``.json`` (:func:`workloads.requests.
            load_request_file`); the first ``n`` rows are used when ``n`` is given.
        dataset: ``sharegpt`` or ``alpaca`` when no path: ``n`` (default 1000) requests drawn
            with ``seed`` (:func:`workloads.requests.sample_requests`).

    Raises:
        ArchsimError / WorkloadError: unknown dataset (lists the valid ones), unreadable file, a
            decode snapshot (it has no output lengths), a prompt longer than the context.
    """
    from workloads.requests import Batch, LengthTable, load_request_file, sample_requests

    if path is not None:
        data = load_request_file(path)
        if isinstance(data, Batch):
            raise ArchsimError(f"{path}: a decode snapshot (seq_len,ch_idx) has no prompt/output "
                               "lengths, so it cannot be served; use it with --batch/--iterations"
                               " runs, or give a .tsv length table / ShareGPT .json")
        assert isinstance(data, LengthTable)
        k = len(data) if n is None else min(int(n), len(data))
        return make_request_set(data.input_toks[:k], data.output_toks[:k], model, str(path),
                                None if data.channels is None else data.channels[:k],
                                data.lines[:k])
    batch = sample_requests(dataset or "sharegpt", 1000 if n is None else int(n), seed=seed,
                            max_seq_len=model.max_seq_len)
    return make_request_set([r.input_len for r in batch], [r.output_len for r in batch],
                            model, batch.source)


def poisson_arrivals(n: int, rate_per_s: float, seed: int = 0) -> np.ndarray:
    """Arrival times (s) of a Poisson process: cumulative sums of exponential gaps of mean
    ``1 / rate_per_s``; float64 ``[n]``, non-decreasing, the first at its first gap.

    Raises:
        ArchsimError: ``rate_per_s <= 0``.
    """
    if not rate_per_s or rate_per_s <= 0 or not math.isfinite(rate_per_s):
        raise ArchsimError(f"Poisson arrival rate must be > 0 requests/s, got {rate_per_s!r}")
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))


def load_timestamps(path: str | Path) -> np.ndarray:
    """Arrival times (s) from a file: one number per line, or a CSV whose header has a column
    ``arrival_s`` / ``timestamp`` / ``time``. Blank lines and ``#`` comments are skipped.

    Returns float64 ``[n]`` in file order.

    Raises:
        ArchsimError: unreadable file, no usable column, or a bad value (names file and line).
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchsimError(f"{p}: cannot read timestamps ({exc})") from None
    col = None
    out: list[float] = []
    for lineno, line in enumerate(lines, start=1):
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        fields = [f.strip() for f in s.split(",")]
        if col is None and not out:
            try:
                float(fields[0])
                col = 0
            except ValueError:
                names = [f.lower() for f in fields]
                for cand in ("arrival_s", "timestamp", "time"):
                    if cand in names:
                        col = names.index(cand)
                        break
                else:
                    raise ArchsimError(f"{p}:{lineno}: header {s!r} has no column arrival_s, "
                                       "timestamp or time") from None
                continue
        try:
            v = float(fields[col or 0])
        except (ValueError, IndexError):
            raise ArchsimError(f"{p}:{lineno}: {s!r} is not a timestamp in seconds") from None
        if not math.isfinite(v) or v < 0:
            raise ArchsimError(f"{p}:{lineno}: timestamp {v!r} must be a finite number >= 0")
        out.append(v)
    if not out:
        raise ArchsimError(f"{p}: no timestamps")
    return np.array(out)


# --------------------------------------------------------------------------------------------
# Iterations and timers
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IterationMix:
    """What one serving iteration runs (axis 0 of every array = request in the iteration).

    Attributes:
        request_ids: int64 ``[n]`` request indices.
        q_tokens: int64 ``[n]`` tokens processed (1 for decode; the prompt or a chunk of it).
        context_tokens: int64 ``[n]`` KV positions attended, new ones included.
        is_prefill: bool ``[n]`` request is (still) in its prefill.
        channels: int64 ``[n]`` KV channel of each request, or None (no channel model).
    """

    request_ids: np.ndarray
    q_tokens: np.ndarray
    context_tokens: np.ndarray
    is_prefill: np.ndarray
    channels: np.ndarray | None = None

    @property
    def phase(self) -> str:
        """``prefill`` (all requests prefilling), ``decode`` (none) or ``mixed``."""
        n_pre = int(self.is_prefill.sum())
        return "decode" if n_pre == 0 else ("prefill" if n_pre == self.is_prefill.size
                                            else "mixed")

    @property
    def size(self) -> int:
        """Requests in the iteration."""
        return int(self.q_tokens.size)

    def stats(self) -> tuple[int, int, int, int, int]:
        """``(decode requests, prefill requests, Σ q, Σ context, Σ q·context)``."""
        q, L = self.q_tokens, self.context_tokens
        n_pre = int(self.is_prefill.sum())
        return (q.size - n_pre, n_pre, int(q.sum()), int(L.sum()), int(q @ L))

    def to_batches(self) -> dict[str, Any]:
        """``{"decode": Batch, "prefill": Batch}`` (absent parts omitted) for the cycle-level
        simulator: ``seq_len`` = context, ids = request indices, channels when known.

        Raises:
            ArchsimError: a prefill chunk shorter than its context (chunked prefill), which the
                simulator's batch format cannot express.
        """
        from workloads.requests import Batch, Request

        out: dict[str, Any] = {}
        ch = self.channels
        for phase, sel in (("decode", ~self.is_prefill), ("prefill", self.is_prefill)):
            idx = np.flatnonzero(sel)
            if idx.size == 0:
                continue
            if phase == "prefill" and (self.q_tokens[idx] != self.context_tokens[idx]).any():
                raise ArchsimError("chunked prefill: a prompt chunk that does not start at "
                                   "token 0 cannot be passed to the cycle-level simulator "
                                   "(its batch format has whole prompts only)")
            out[phase] = Batch(tuple(
                Request(int(self.request_ids[i]), None, None, int(self.context_tokens[i]),
                        None if ch is None or ch[i] < 0 else int(ch[i])) for i in idx))
        return out


class IterationTimer(Protocol):
    """Times one serving iteration.

    ``time(mix)`` returns ``(seconds, source)`` where ``source`` is one of
    :data:`archsim.results.TIMING_SOURCES`; ``describe()`` says what the timer is, in words.
    """

    def time(self, mix: IterationMix) -> tuple[float, str]: ...  # pragma: no cover

    def describe(self) -> str: ...  # pragma: no cover


class GpuTimer:
    """The GPU model (:class:`archsim.gpu.GpuCostModel`) per iteration; the source is its mode
    (``calibrated`` or ``roofline``).

    Decode and prefill requests of one iteration run as one pass (GEMMs over all tokens, one
    batched attention kernel). About 0.1 ms per call.
    """

    def __init__(self, cfg: MachineConfig, model: Any) -> None:
        self.cfg, self.model = cfg, model
        self.cost = GpuCostModel(cfg, model, *parallel_degrees(cfg, model))
        self.mode = kernel_efficiency(cfg.gpu).mode

    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, mode)`` of ``mix``."""
        return self.cost.iteration_time_s(mix.q_tokens, mix.context_tokens), self.mode

    def describe(self) -> str:
        """What the timer is."""
        return f"{self.mode} model of {self.cfg.gpu.name} ({self.cfg.name})"


class CycleLevelTimer:
    """Each iteration simulated by the cycle-level simulator (``cycle-level``).

    A mixed iteration is simulated as its prefill part followed by its decode part (the
    simulator takes one phase per call); that serialisation is an approximation and is counted
    in ``mixed_split``. ``window`` is the simulator's layer window (None: its default; see
    ``archsim.system.core``); ``log`` collects ``(phase, shape, seconds, wall seconds)`` per
    call when given (how much each sample cost). ``keep_channels``: the compiler keeps the
    mix's channels (the request file's) instead of placing them by the system's policy.

    Raises:
        ArchsimError: ``cfg`` is the GPU baseline (constructor); from :meth:`time`: the
            simulator is missing, or a chunked-prefill chunk.
    """

    def __init__(self, cfg: MachineConfig, model: Any, system: str | None = None,
                 window: int | None = None, log: list | None = None,
                 keep_channels: bool = False) -> None:
        if is_gpu(cfg):
            raise ArchsimError(f"{cfg.name} is the GPU baseline: time it with "
                               "GpuTimer, not the cycle-level simulator")
        self.cfg, self.model, self.system = cfg, model, system or cfg.name
        self.window, self.log = window, log
        self.options = compile_options(keep_channels)
        self.mixed_split = 0
        self.calls = 0
        self.wall_s = 0.0

    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, "cycle-level")`` of ``mix``."""
        total = 0.0
        parts = mix.to_batches()
        if len(parts) > 1:
            self.mixed_split += 1
        kw = {} if self.window is None else {"window": self.window}
        for phase, batch in parts.items():
            self.calls += 1
            w0 = _time.perf_counter()
            res = simulate_system_iteration(self.cfg, self.model, batch, phase=phase,
                                            system=self.system, with_events=False,
                                            compile_options=self.options, **kw)
            wall = _time.perf_counter() - w0
            self.wall_s += wall
            total += float(res.seconds_per_iteration)  # type: ignore[arg-type]
            if self.log is not None:
                self.log.append((phase, mix.stats(), float(res.seconds_per_iteration), wall))
        return total, "cycle-level"

    def describe(self) -> str:
        """What the timer is."""
        return f"cycle-level simulation ({self.cfg.name})"


def _log_bucket(x: float, rel: float) -> int:
    return -1 if x <= 0 else int(math.floor(math.log(x) / math.log1p(rel)))


class CachingTimer:
    """Reuses the time of an iteration already timed by ``inner`` when the key matches.

    Keys:

    * ``exact`` (default): ``(phase, sorted multiset of (q_tokens, context_tokens, channel))``
      — identical inputs, so the reuse is exact for a deterministic simulator.
    * ``aggregate``: ``(phase, decode requests, prefill requests, bucket(Σ q), bucket(Σ
      context), bucket(Σ q·context))`` with logarithmic buckets of relative width
      ``rel_bucket`` (default 1 %): iterations of nearly the same shape share one simulated
      time; the error is that of the bucket and is measured by the caller.

    A hit returns ``(seconds, "reused")``; a miss is timed by ``inner`` and stored.
    """

    def __init__(self, inner: IterationTimer, key: str = "exact",
                 rel_bucket: float = 0.01) -> None:
        if key not in ("exact", "aggregate"):
            raise ArchsimError(f"cache key {key!r} not one of ['exact', 'aggregate']")
        self.inner, self.key_kind, self.rel = inner, key, rel_bucket
        self.cache: dict[Any, float] = {}
        self.hits = 0
        self.misses = 0

    def key(self, mix: IterationMix) -> Any:
        """The cache key of ``mix`` (see the class docstring)."""
        if self.key_kind == "exact":
            ch = mix.channels if mix.channels is not None else np.full(mix.size, -1)
            rows = np.stack([mix.q_tokens, mix.context_tokens, ch,
                             mix.is_prefill.astype(np.int64)], axis=1)
            rows = rows[np.lexsort(rows.T[::-1])]
            return (mix.phase, rows.tobytes())
        n_dec, n_pre, sq, sl, sql = mix.stats()
        return (mix.phase, n_dec, n_pre, _log_bucket(sq, self.rel), _log_bucket(sl, self.rel),
                _log_bucket(sql, self.rel))

    def lookup(self, mix: IterationMix) -> float | None:
        """The cached time of ``mix``'s key, or None (does not count as a hit)."""
        return self.cache.get(self.key(mix))

    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, "reused")`` on a hit, else the inner timer's answer."""
        k = self.key(mix)
        if k in self.cache:
            self.hits += 1
            return self.cache[k], "reused"
        self.misses += 1
        s, src = self.inner.time(mix)
        self.cache[k] = s
        return s, src

    def describe(self) -> str:
        """What the timer is."""
        return f"{self.inner.describe()} + reuse of identical shapes (key: {self.key_kind})"


def surrogate_point(mix: IterationMix) -> np.ndarray:
    """The shape of ``mix`` that :class:`SurrogateTimer` regresses on, float64 ``[6]``:
    ``(decode requests, prefill requests, Σ q, Σ context, Σ q·context, peak channel context)``.

    The last is the largest Σ context of the decode requests that share one KV channel (0 without
    channels): PIM attention runs per channel, so the most loaded channel bounds the attention
    stage (NeuPIMs §5.3, the reason for min-load channel balancing).
    """
    n_dec, n_pre, sq, sl, sql = mix.stats()
    peak = 0.0
    if mix.channels is not None and n_dec:
        dec = ~mix.is_prefill
        ch = mix.channels[dec]
        if (ch >= 0).all():
            peak = float(np.bincount(ch, weights=mix.context_tokens[dec]).max())
    return np.array([n_dec, n_pre, sq, sl, sql, peak], dtype=np.float64)


def _log_point(points: np.ndarray, request_cap: int = 4) -> np.ndarray:
    """Positions of shape rows ``[..., 6]`` in the surrogate's log space ``[..., 4]``:
    ``ln(1 + min(requests, request_cap)), ln(1 + Σ q), ln(1 + Σ context),
    ½ ln(1 + Σ q·context)``.

    Every axis grows like a token count (the square root of the attention work). The request
    count matters most below the machine's sub-batch count: a decode batch with fewer requests
    runs fewer sub-batches, each streaming the weights once (a step in time; prefill, when it
    was still split into sub-batches: 4.3 ms for one request of up to 19 tokens, 8.5 ms for
    two, GPT3-7B on neupims). The cap (default 4, at least the sub-batch count) keeps small
    counts apart; beyond it the size of a batch is on the Σ q (decode) and Σ q·context
    (prefill) axes. (A cap of 2 on neupims let the surrogate time 3-request prefills from
    2-request ones with up to 6.4 % error on a replay of a GPT3-7B serving run; 4 kept that
    below 1.8 %.)"""
    p = np.asarray(points, dtype=np.float64)
    return np.log1p(np.stack([np.minimum(p[..., 0] + p[..., 1], float(request_cap)),
                              p[..., 2], p[..., 3], p[..., 4]], axis=-1)) * np.array(
        [1.0, 1.0, 1.0, 0.5])


#: Hyper-parameter bounds of the surrogate's GP kernel (ln-seconds units; inputs in the
#: ``ln(1 + x)`` space of :func:`_gp_inputs`). The amplitude is at least 0.1 (10 % deviations)
#: and the length scales at most 3: a prior that keeps the GP uncertain away from its samples
#: even when those few samples happen to be nearly equal (a GP fitted to nearly constant data
#: would otherwise extrapolate them with false confidence). Noise up to 3 % std.
AMPLITUDE_BOUNDS = (1e-2, 10.0)
LENGTH_SCALE_BOUNDS = (0.1, 3.0)
NOISE_BOUNDS = (1e-8, 1e-3)


def _gp_inputs(points: np.ndarray, request_cap: int = 4) -> np.ndarray:
    """GP inputs of shape rows ``[k, 6]`` → ``[k, 5]``: :func:`_log_point` and
    ``ln(1 + peak channel context)``."""
    p = np.atleast_2d(np.asarray(points, dtype=np.float64))
    return np.concatenate([_log_point(p, request_cap), np.log1p(p[:, 5:6])], axis=1)


@dataclass
class _PhaseFit:
    S: list[np.ndarray] = field(default_factory=list)   # shape rows (surrogate_point)
    y: list[float] = field(default_factory=list)        # exact seconds
    gp: Any = None                                       # fitted regressor
    fitted_on: int = 0                                   # samples the regressor has seen
    tuned_on: int = 0                                    # samples at the last hyper-fit
    y_mean: float = 0.0                                  # mean ln(seconds) of the samples
    eligible: int = 0                                    # iterations the surrogate could time
    next_check: float = 0.0                              # eligible count of the next check
    check_gap: float = 0.0                               # eligible iterations to the one after
    checks: list[float] = field(default_factory=list)  # out-of-sample relative errors
    reasons: dict[str, int] = field(default_factory=dict)  # exact iterations by gate reason


class SurrogateTimer:
    """Times most iterations with a Gaussian-process surrogate calibrated online on exact ones.

    Model. Per phase (decode / prefill / mixed) the samples are the iterations timed by
    ``exact``. A Gaussian process (Rasmussen & Williams, *Gaussian Processes for Machine
    Learning*, 2006, ch. 2 and 5; scikit-learn's ``GaussianProcessRegressor``) regresses
    ``ln(seconds)`` on the shape of :func:`_gp_inputs` (request count capped at
    ``request_cap``, see :func:`_log_point`; Σ q, Σ context,
    √Σ q·context, peak channel context, all ``ln(1 + x)``) with the kernel
    ``constant × RBF(one length scale per input) + white noise`` around the samples' mean (bounds
    :data:`AMPLITUDE_BOUNDS`, :data:`LENGTH_SCALE_BOUNDS`, :data:`NOISE_BOUNDS`);
    hyper-parameters are refitted by maximum marginal likelihood whenever the samples grew by a
    quarter, the conditioning after every new sample. Working in ``ln(seconds)`` makes the
    errors relative. The white-noise term absorbs what the shape does not determine (e.g. how
    the requests of a channel split into sub-batches).

    Gate. An iteration is timed exactly when: its phase has fewer than ``min_samples`` samples;
    the posterior standard deviation of the *latent* ``ln(seconds)`` (white noise excluded) at
    its shape exceeds ``tolerance`` (0.02 ≈ 2 % relative), i.e. the samples do not determine its
    time well enough (far from every sample, or where the time bends); it is farther than
    ``max_distance`` from every sample in the log space of :func:`_log_point` (Chebyshev; 0.5 ≈
    65 % in the most different axis: a guard against confident extrapolation from few
    samples, whose hyper-parameters are poorly determined); or it is a check: the
    ``check_every``-th iteration of its phase that the surrogate would have timed, then with
    gaps growing ``check_growth``-fold (default 2: the 100th, 300th, 700th, 1,500th...; 1:
    every ``check_every``-th), so that a long steady run does not spend most of its exact
    samples on checks (1,000 ShareGPT requests, GPT3-7B: 20 of 41 decode samples at a fixed
    100, ≈ 10 s each). A check keeps the surrogate's prediction, uses the exact time and makes
    it a sample. The checks' out-of-sample relative errors are :meth:`error_report`: the error
    of what the surrogate delivers.
    Other iterations get ``(prediction, "surrogate")`` (the posterior mean). If ``exact`` has a
    ``lookup(mix)`` method (:class:`CachingTimer`), a cached time is returned as ``reused`` first.

    Raises:
        ArchsimError: ``min_samples`` or ``check_every`` below 1, ``check_growth`` below 1,
            or ``tolerance`` or ``max_distance`` not > 0.
    """

    def __init__(self, exact: IterationTimer, min_samples: int = 3, check_every: int = 100,
                 tolerance: float = 0.02, max_distance: float = 0.5,
                 request_cap: int = 4, check_growth: float = 2.0) -> None:
        if (min_samples < 1 or check_every < 1 or not check_growth >= 1 or not tolerance > 0
                or not max_distance > 0):
            raise ArchsimError("surrogate: min_samples and check_every must be >= 1, "
                               "check_growth >= 1, tolerance and max_distance > 0 (got "
                               f"{min_samples}, {check_every}, {check_growth}, {tolerance}, "
                               f"{max_distance})")
        self.exact = exact
        self.min_samples, self.check_every = int(min_samples), int(check_every)
        self.check_growth = float(check_growth)
        self.tolerance, self.max_distance = float(tolerance), float(max_distance)
        self.request_cap = max(1, int(request_cap))
        self.fits: dict[str, _PhaseFit] = {}

    # -- model ---------------------------------------------------------------------------
    def _fit(self, f: _PhaseFit) -> None:
        """Refit the phase's GP; the kernel hyper-parameters are re-optimised when the samples
        grew by a quarter since the last optimisation (else the conditioning only, O(n³) with
        n samples)."""
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        X = _gp_inputs(np.array(f.S), self.request_cap)
        y = np.log(np.maximum(np.array(f.y), 1e-30))
        n = len(f.y)
        f.y_mean = float(y.mean())
        if f.gp is None or n >= 1.25 * f.tuned_on:
            kernel = (ConstantKernel(0.1, AMPLITUDE_BOUNDS)
                      * RBF(np.ones(X.shape[1]), LENGTH_SCALE_BOUNDS)
                      + WhiteKernel(1e-5, NOISE_BOUNDS))
            gp = GaussianProcessRegressor(kernel, normalize_y=False, n_restarts_optimizer=0)
            f.tuned_on = n
        else:
            gp = GaussianProcessRegressor(f.gp.kernel_, normalize_y=False, optimizer=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(X, y - f.y_mean)
        f.gp, f.fitted_on = gp, n

    def _posterior(self, f: _PhaseFit, s: np.ndarray) -> tuple[float, float] | None:
        """``(predicted seconds, latent std of ln seconds)`` at shape ``s``, or None without
        samples."""
        if not f.y:
            return None
        if len(f.y) == 1:
            return f.y[0], math.inf
        if f.gp is None or f.fitted_on != len(f.y):
            self._fit(f)
        gp = f.gp
        mu, sd = gp.predict(_gp_inputs(s, self.request_cap), return_std=True)
        noise = float(gp.kernel_.k2.noise_level)
        latent = math.sqrt(max(float(sd[0]) ** 2 - noise, 0.0))
        return float(np.exp(mu[0] + f.y_mean)), latent

    def _near(self, f: _PhaseFit, s: np.ndarray) -> bool:
        """A sample lies within ``max_distance`` of ``s`` (Chebyshev, :func:`_log_point`)."""
        c = self.request_cap
        d = np.abs(_log_point(np.array(f.S), c) - _log_point(s, c)).max(axis=1)
        return bool(d.min() <= self.max_distance)

    def predict(self, mix: IterationMix) -> float | None:
        """Surrogate time of ``mix`` (s), or None when its phase has no samples yet."""
        f = self.fits.get(mix.phase)
        post = None if f is None else self._posterior(f, surrogate_point(mix))
        return None if post is None else post[0]

    # -- timer ---------------------------------------------------------------------------
    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, source)``: reused, exact (the exact timer's source) or ``surrogate``."""
        lookup = getattr(self.exact, "lookup", None)
        if lookup is not None:
            hit = lookup(mix)
            if hit is not None:
                self.exact.hits += 1  # type: ignore[attr-defined]
                return hit, "reused"
        f = self.fits.setdefault(mix.phase, _PhaseFit())
        s = surrogate_point(mix)
        post = self._posterior(f, s) if len(f.y) >= self.min_samples else None
        check = False
        if post is None or not post[0] > 0:
            why = "calibrating"
        elif post[1] > self.tolerance:
            why = "uncertain"
        elif not self._near(f, s):
            why = "far"
        else:
            why = "check"
            f.eligible += 1
            if f.check_gap == 0:
                f.next_check = f.check_gap = float(self.check_every)
            check = f.eligible >= f.next_check
            if not check:
                return post[0], "surrogate"
            f.check_gap *= self.check_growth
            f.next_check += f.check_gap
        f.reasons[why] = f.reasons.get(why, 0) + 1
        t, src = self.exact.time(mix)
        if check and post is not None and t > 0:
            f.checks.append(abs(post[0] - t) / t)
        f.S.append(s)
        f.y.append(t)
        return t, src

    def error_report(self) -> dict[str, Any]:
        """Out-of-sample relative error of the surrogate on its check iterations:
        ``{"checked": n, "mean": ..., "p95": ..., "max": ..., "by_phase": {...}}`` (fractions;
        None when nothing was checked; ``by_phase`` adds the exact ``samples`` per phase and
        ``samples_by_reason``: how many were timed exactly because the phase was still
        ``calibrating`` (fewer than ``min_samples``), the surrogate was ``uncertain`` (latent std
        above ``tolerance``), the shape was ``far`` from every sample, or as a ``check``)."""
        allc = [e for f in self.fits.values() for e in f.checks]

        def stats(v: list[float]) -> dict[str, Any]:
            if not v:
                return {"checked": 0, "mean": None, "p95": None, "max": None}
            a = np.array(v)
            return {"checked": int(a.size), "mean": float(a.mean()),
                    "p95": float(np.percentile(a, 95)), "max": float(a.max())}

        out = stats(allc)
        out["by_phase"] = {p: dict(stats(f.checks), samples=len(f.y),
                                   samples_by_reason=dict(f.reasons))
                           for p, f in self.fits.items()}
        return out

    def describe(self) -> str:
        """What the timer is."""
        return (f"{self.exact.describe()} + Gaussian-process surrogate (online; exact while "
                f"a phase has fewer than {self.min_samples} samples (calibrating), where the "
                f"posterior std of ln time exceeds {self.tolerance:g} (uncertain), where the "
                f"shape is farther than {math.exp(self.max_distance) - 1:.0%} from every "
                f"sample in some axis (far), and as a check the {self.check_every}th "
                f"iteration it could time, then at gaps growing {self.check_growth:g}-fold)")


def measure_surrogate_error(surrogate: SurrogateTimer, exact: IterationTimer,
                            mixes: Iterable[IterationMix]) -> dict[str, Any]:
    """Relative error ``|surrogate − exact| / exact`` on ``mixes`` (e.g. a sample of a run's
    iterations), without changing the surrogate.

    Returns ``{"n", "mean", "p95", "max", "uncalibrated"}`` (fractions; ``uncalibrated`` counts
    mixes whose phase the surrogate cannot predict).
    """
    errs, unc = [], 0
    for mix in mixes:
        p = surrogate.predict(mix)
        if p is None:
            unc += 1
            continue
        t, _ = exact.time(mix)
        errs.append(abs(p - t) / t)
    a = np.array(errs) if errs else np.array([np.nan])
    return {"n": len(errs), "mean": float(np.nanmean(a)) if errs else None,
            "p95": float(np.nanpercentile(a, 95)) if errs else None,
            "max": float(np.nanmax(a)) if errs else None, "uncalibrated": unc}


#: Layer window of the cycle-level samples of a serving run: the smallest window with a
#: steady-state layer between the pipeline prologue and epilogue (``archsim.system.core``).
#: Measured on GPT3-7B decode (neupims): within 0.4 % of the 4-layer window of ``archsim run``
#: at batch 256 and 0.2 % at batch 2 (against 8 layers), for 3/4 of its cost; a 2-layer window
#: is 16 % off at batch 124 and a 1-layer one 4 % off at batch 256.
SERVING_WINDOW = 3


def make_timer(cfg: MachineConfig, model: Any, timing: str = "surrogate",
               system: str | None = None, log: list | None = None,
               keep_channels: bool = False) -> IterationTimer:
    """The iteration timer of a serving run on ``cfg``.

    GPU configurations always use :class:`GpuTimer` (already closed form). Others:
    ``exact`` → :class:`CycleLevelTimer` (layer window :data:`SERVING_WINDOW`);
    ``reuse`` → ``CachingTimer(CycleLevelTimer)``;
    ``surrogate`` → ``SurrogateTimer(CachingTimer(CycleLevelTimer))``. ``log`` is passed to
    the :class:`CycleLevelTimer` (what each sample cost), and so is ``keep_channels``.

    Raises:
        ArchsimError: unknown ``timing`` (lists the valid ones).
    """
    if timing not in ("exact", "reuse", "surrogate"):
        raise ArchsimError(f"timing {timing!r} not one of ['exact', 'reuse', 'surrogate']")
    if is_gpu(cfg):
        return GpuTimer(cfg, model)
    exact: IterationTimer = CycleLevelTimer(cfg, model, system, window=SERVING_WINDOW,
                                            log=log, keep_channels=keep_channels)
    if timing == "exact":
        return exact
    cached = CachingTimer(exact)
    return cached if timing == "reuse" else SurrogateTimer(
        cached, request_cap=max(4, cfg.system.sub_batches))


# --------------------------------------------------------------------------------------------
# The scheduler
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One finished serving iteration (passed to ``on_iteration``).

    ``index`` (0-based), the ``mix``, its ``seconds`` and timing ``source``, ``end_s`` (simulated
    time at its end), ``finished`` (requests done so far), ``kv_tokens`` (reserved now).
    """

    index: int
    mix: IterationMix
    seconds: float
    source: str
    end_s: float
    finished: int
    kv_tokens: int


def serve(requests: RequestSet, timer: IterationTimer, *, kv_capacity_tokens: int,
          max_batch: int = 256, chunked_prefill_tokens: int | None = None,
          max_prefill_tokens: int | None = None, n_channels: int | None = None,
          channel_policy: str = "round_robin", keep_channels: bool = False,
          system: str = "", model_name: str = "", config_name: str = "",
          on_iteration: Callable[[IterationRecord], None] | None = None,
          max_iterations: int = 50_000_000) -> ServingResult:
    """Run the continuous-batching scheduler (module docstring) until every request finishes.

    Args:
        requests: the :class:`RequestSet` (lengths and arrivals).
        timer: times each iteration (:class:`IterationTimer`).
        kv_capacity_tokens: KV-cache tokens the system can hold (:func:`kv_budget`).
        max_batch: most requests in one iteration (running requests).
        chunked_prefill_tokens: token budget per iteration for chunked prefill, or None.
        max_prefill_tokens: without chunked prefill, most prompt tokens in one prefill
            iteration (whole prompts in admission order, at least one), or None (no limit).
        n_channels, channel_policy: when given, each admitted request gets a KV channel
            (``round_robin``: a rotating pointer; ``min_load``: admitted largest first onto the
            channel with the fewest reserved tokens; :class:`mapping.channels.OnlinePlacer`)
            that it keeps, passed in the mixes.
        keep_channels: each request keeps ``requests.channels`` (the request file's) instead.
        system, model_name, config_name: written into the result.
        on_iteration: called after every iteration with an :class:`IterationRecord`.
        max_iterations: safety limit.

    Returns:
        :class:`ServingResult` with one :class:`RequestRecord` per request (in input order).

    Raises:
        ArchsimError: a request whose ``input + output`` tokens exceed the KV capacity (names its
            index), bad limits, or the iteration limit reached.
    """
    n = len(requests)
    if max_batch < 1:
        raise ArchsimError(f"max batch must be >= 1, got {max_batch}")
    if chunked_prefill_tokens is not None and chunked_prefill_tokens < 1:
        raise ArchsimError(f"chunked prefill budget must be >= 1 token, got "
                           f"{chunked_prefill_tokens}")
    if max_prefill_tokens is not None and max_prefill_tokens < 1:
        raise ArchsimError(f"prefill budget must be >= 1 token, got {max_prefill_tokens}")
    from mapping.channels import OnlinePlacer

    if keep_channels and (requests.channels is None or not n_channels):
        raise ArchsimError(f"--keep-channels: {requests.source or 'the requests'} give no "
                           "channel per request (a .tsv with a ch_idx column does), or the "
                           "system has no channels")
    placer = OnlinePlacer(len(requests), n_channels or 0, channel_policy)
    inp = requests.input_toks.astype(np.int64)
    out = requests.output_toks.astype(np.int64)
    arr = requests.arrival_s.astype(np.float64)
    need = inp + out
    if (need > kv_capacity_tokens).any():
        i = int(np.argmax(need > kv_capacity_tokens))
        raise ArchsimError(f"memory capacity: request index {int(requests.index[i])} needs "
                           f"{int(need[i]):,} KV-cache tokens (prompt {int(inp[i])} + output "
                           f"{int(out[i])}) but the KV cache holds {kv_capacity_tokens:,}")
    wall0 = _time.perf_counter()
    order = np.argsort(arr, kind="stable")
    prefilled = np.zeros(n, np.int64)
    generated = np.zeros(n, np.int64)
    admitted_t = np.full(n, np.nan)
    first_t = np.full(n, np.nan)
    finish_t = np.full(n, np.nan)
    ch = placer.channels
    if keep_channels:
        assert requests.channels is not None
        ch[:] = requests.channels
    running = np.zeros(0, np.int64)
    ptr = 0
    t = float(arr[order[0]]) if n else 0.0
    t_start = t
    kv_used = 0
    peak_kv = 0
    done = 0
    it = 0
    by_source: Counter[str] = Counter()
    by_phase: Counter[str] = Counter()
    batch_sum = 0
    batch_max = 0
    eps = 1e-12

    while done < n:
        # -- admission (FCFS, whole-request KV reservation)
        new: list[int] = []
        while (ptr < n and arr[order[ptr]] <= t + eps and running.size + len(new) < max_batch
               and kv_used + need[order[ptr]] <= kv_capacity_tokens):
            i = int(order[ptr])
            new.append(i)
            kv_used += int(need[i])
            admitted_t[i] = t
            ptr += 1
        if new:
            new_a = np.array(new, np.int64)
            if n_channels and not keep_channels:
                placer.admit(new_a, need)
            running = np.concatenate([running, new_a])
            peak_kv = max(peak_kv, kv_used)
        if running.size == 0:
            if ptr >= n:
                break
            t = max(t, float(arr[order[ptr]]))
            continue

        # -- compose the iteration
        pre_mask = prefilled[running] < inp[running]
        if chunked_prefill_tokens is None:
            if pre_mask.any():
                sel = running[pre_mask]
                if max_prefill_tokens is not None:
                    fits = np.cumsum(inp[sel] - prefilled[sel]) <= max_prefill_tokens
                    fits[0] = True
                    sel = sel[fits]
                q = inp[sel] - prefilled[sel]
                L = inp[sel].copy()
                isp = np.ones(sel.size, bool)
            else:
                sel = running
                q = np.ones(sel.size, np.int64)
                L = inp[sel] + generated[sel]
                isp = np.zeros(sel.size, bool)
        else:
            dec = running[~pre_mask]
            pre = running[pre_mask]
            budget = chunked_prefill_tokens - dec.size
            rem = inp[pre] - prefilled[pre]
            before = np.cumsum(rem) - rem
            take = np.clip(budget - before, 0, rem)
            pre, take = pre[take > 0], take[take > 0]
            sel = np.concatenate([dec, pre])
            q = np.concatenate([np.ones(dec.size, np.int64), take])
            L = np.concatenate([inp[dec] + generated[dec], prefilled[pre] + take])
            isp = np.concatenate([np.zeros(dec.size, bool), np.ones(pre.size, bool)])
        mix = IterationMix(sel, q, L, isp, ch[sel] if n_channels else None)
        seconds, source = timer.time(mix)
        if not seconds > 0:
            raise ArchsimError(f"iteration {it}: timer {timer.describe()} returned "
                               f"{seconds!r} s")
        t += seconds
        it += 1
        by_source[source] += 1
        by_phase[mix.phase] += 1
        batch_sum += sel.size
        batch_max = max(batch_max, int(sel.size))

        # -- advance request states
        p_idx = sel[isp]
        if p_idx.size:
            prefilled[p_idx] += q[isp]
            fin_p = p_idx[prefilled[p_idx] >= inp[p_idx]]
            first_t[fin_p] = t
            generated[fin_p] = 1
        d_idx = sel[~isp]
        if d_idx.size:
            generated[d_idx] += 1
        gone = sel[(prefilled[sel] >= inp[sel]) & (generated[sel] >= out[sel])]
        if gone.size:
            finish_t[gone] = t
            kv_used -= int(need[gone].sum())
            if n_channels and not keep_channels:
                placer.release(gone, need)
            running = running[~np.isin(running, gone)]
            done += int(gone.size)
        if on_iteration is not None:
            on_iteration(IterationRecord(it - 1, mix, seconds, source, t, done, kv_used))
        if it >= max_iterations:
            raise ArchsimError(f"serving: stopped after {max_iterations} iterations with "
                               f"{n - done} requests unfinished")

    recs = [RequestRecord(int(requests.index[i]), int(inp[i]), int(out[i]), float(arr[i]),
                          float(admitted_t[i]), float(first_t[i]), float(finish_t[i]))
            for i in range(n)]
    sched = (f"continuous batching, FCFS admission with whole-request KV reservation, "
             f"max batch {max_batch}, "
             + (f"chunked prefill {chunked_prefill_tokens} tokens/iteration"
                if chunked_prefill_tokens else
                "prefill-first (whole prompts"
                + (f", at most {max_prefill_tokens} tokens/iteration" if max_prefill_tokens
                   else "") + "), no preemption"))
    if n_channels:
        sched += (f", KV channels kept from {requests.source or 'the requests'}" if keep_channels
                  else f", KV channels {channel_policy} over {n_channels}")
    res = ServingResult(
        system=system, model=model_name, arrival=requests.arrival, scheduler=sched,
        timer=timer.describe(), requests=recs,
        makespan_s=float(np.nanmax(finish_t) - t_start) if n else 0.0,
        iterations=it, iterations_by_source=dict(by_source), iterations_by_phase=dict(by_phase),
        mean_batch_size=batch_sum / it if it else 0.0, max_batch_size=batch_max,
        kv_capacity_tokens=int(kv_capacity_tokens), peak_kv_tokens=int(peak_kv),
        config_name=config_name, chunked_prefill_tokens=chunked_prefill_tokens,
        max_prefill_tokens=None if chunked_prefill_tokens else max_prefill_tokens,
        notes=list(requests.notes))
    if isinstance(timer, SurrogateTimer):
        res.surrogate_error = timer.error_report()
    res.wall_s = _time.perf_counter() - wall0
    return res


def default_prefill_budget(model: Any) -> int:
    """Prompt tokens per prefill iteration by default: ``max(context limit, 2048)``, vLLM's
    default ``max_num_batched_tokens`` without chunked prefill (so any single prompt fits)."""
    return max(int(model.max_seq_len), 2048)


def serve_system(system: str | MachineConfig, model: Any, requests: RequestSet, *,
                 overrides: Sequence[str] = (), max_batch: int = 256,
                 chunked_prefill_tokens: int | None = None,
                 max_prefill_tokens: int | None | str = "auto", timing: str = "surrogate",
                 timer: IterationTimer | None = None,
                 on_iteration: Callable[[IterationRecord], None] | None = None,
                 keep_channels: bool = False) -> ServingResult:
    """Serve ``requests`` on a system: resolves the config (``system`` may be an already
    resolved ``MachineConfig``), KV budget, channels and timer, then calls :func:`serve`.
    ``model`` is a ``ModelSpec`` or a registry name; ``max_prefill_tokens="auto"`` is
    :func:`default_prefill_budget`. The request file's channels are checked against the
    machine before the run; ``keep_channels`` keeps them (scheduler and compiler) instead of
    the system's policy.

    Raises:
        ArchsimError / ConfigError / WorkloadError: unknown system or model, weights or a request
            that do not fit, a ``ch_idx`` outside the machine (names file and line),
            ``keep_channels`` on the GPU baseline or on requests without channels.
    """
    from mapping.channels import check_channels, describe_placement

    from workloads.models import get_model

    label, cfg = resolve_system(system, overrides)
    model = get_model(model) if isinstance(model, str) else model
    bud = kv_budget(cfg, model)
    n_ch = None if is_gpu(cfg) else cfg.memory.org.channels
    if keep_channels and n_ch is None:
        raise ArchsimError(f"--keep-channels: system '{label}' is the GPU baseline, which has "
                           "no KV channels to keep")
    if n_ch is not None and requests.channels is not None:
        check_channels(requests.channels, n_ch, requests.source, requests.lines)
    timer = timer or make_timer(cfg, model, timing, label, keep_channels=keep_channels)
    if max_prefill_tokens == "auto":
        max_prefill_tokens = default_prefill_budget(model)
    elif isinstance(max_prefill_tokens, str):
        raise ArchsimError(f"max_prefill_tokens {max_prefill_tokens!r} not 'auto', None or a "
                           "token count")
    res = serve(requests, timer, kv_capacity_tokens=bud.capacity_tokens, max_batch=max_batch,
                chunked_prefill_tokens=chunked_prefill_tokens,
                max_prefill_tokens=max_prefill_tokens, n_channels=n_ch,
                channel_policy=cfg.system.channel_policy, keep_channels=keep_channels,
                system=label, model_name=model.name,
                config_name=cfg.name, on_iteration=on_iteration)
    res.notes.append(f"KV capacity: {bud.describe()}")
    if n_ch is not None:
        res.notes.append("channels: " + describe_placement(
            keep_channels, cfg.system.channel_policy, requests.source))
    if isinstance(timer, CachingTimer):
        res.notes.append(f"reuse cache: {timer.hits} hits, {timer.misses} simulated")
    inner: Any = timer
    while not isinstance(inner, CycleLevelTimer) and inner is not None:
        inner = getattr(inner, "exact", None) or getattr(inner, "inner", None)
    if inner is not None:
        win = "simulator default" if inner.window is None else f"{inner.window} layers"
        res.notes.append(f"cycle-level samples: {inner.calls} simulator calls (window "
                         f"{win}) took {inner.wall_s:.1f} s of the {res.wall_s:.1f} s wall time")
    return res


# --------------------------------------------------------------------------------------------
# Fixed batches: K iterations, compare, the paper grid
# --------------------------------------------------------------------------------------------
def make_batch(model: Any, batch_size: int = 256, dataset: str = "sharegpt", seed: int = 0,
               path: str | Path | None = None, cfg: MachineConfig | None = None,
               keep_channels: bool = False,
               capacity_iterations: int | None = None) -> Any:
    """The decode batch of ``run``/``compare``, loaded and checked once (nothing placed here).

    From ``path``: a ``.csv`` decode snapshot is used as is (first ``batch_size`` rows when a
    size is given); a ``.tsv``/``.json`` length table seeds a warm-up
    (:func:`workloads.requests.warmup_decode_snapshot`) of ``batch_size`` slots. Without a path:
    ``workloads.requests.default_batch(model, batch_size, dataset, seed)`` (a warmed-up
    continuous-batching snapshot).

    Channels are placed by the compiler (:mod:`mapping.channels`: ``cfg``'s policy, or the
    batch's own channels with ``keep_channels``), not here. With ``keep_channels`` a warm-up
    records the channels it gives each admitted request (``cfg``'s channels and policy, like the
    NeuPIMs trace generator); without it the warm-up places nothing (the lengths are the same;
    placing each admission is what makes a large warm-up slow). With a non-GPU ``cfg`` the
    batch's channels are checked against the machine here, before anything is simulated.
    ``capacity_iterations``: when given (with ``cfg``), the KV cache of the batch grown by that
    many decode iterations is checked against the device (:func:`check_batch_fits`).

    Raises:
        WorkloadError / ArchsimError: unknown dataset (lists the valid ones), unreadable file,
            a request longer than the model's context (names its index), a ``ch_idx`` outside
            the machine (names file and line), ``keep_channels`` on a batch without channels,
            or the capacity check.
    """
    from mapping.channels import check_batch_channels
    from workloads.requests import (Batch, default_batch, load_request_file,
                                    warmup_decode_snapshot)

    if batch_size is not None and batch_size < 1:
        raise ArchsimError(f"batch size must be >= 1, got {batch_size}")
    npu = cfg is not None and not is_gpu(cfg)
    warm_channels: dict[str, Any] = {"n_channels": None}
    if keep_channels and npu:
        assert cfg is not None
        warm_channels = {"n_channels": cfg.memory.org.channels,
                         "policy": cfg.system.channel_policy}
    elif keep_channels:
        warm_channels = {}                # the warm-up's defaults (32 channels, min_load)
    if path is not None:
        data = load_request_file(path)
        if isinstance(data, Batch):
            batch = data if batch_size is None or batch_size >= len(data) else data.head(
                batch_size)
        else:
            batch = warmup_decode_snapshot(data, max_batch=batch_size or 256,
                                           max_seq_len=model.max_seq_len, seed=seed,
                                           **warm_channels)
    else:
        batch = default_batch(model, batch_size, dataset, seed=seed, **warm_channels)
    batch.validate_for_model(model)
    if capacity_iterations is not None and cfg is not None:
        check_batch_fits(cfg, model, batch, extra_tokens_per_request=capacity_iterations - 1)
    if npu:
        assert cfg is not None
        check_batch_channels(batch, cfg.memory.org.channels)
        if keep_channels and not (bool(len(batch)) and (batch.channels >= 0).all()):
            raise ArchsimError(f"--keep-channels: {path or 'the batch'} has no channel for every "
                               "request (a .csv snapshot with a ch_idx column has)")
    return batch


def compile_options(keep_channels: bool = False) -> Any:
    """The ``mapping.compiler.CompileOptions`` of a run: the trace's channels kept, or placed
    by the machine's policy (:mod:`mapping.channels`)."""
    from mapping.compiler import CompileOptions

    return CompileOptions(channels="keep" if keep_channels else "policy")


def _advance(batch: Any, steps: int, max_seq_len: int) -> Any:
    from dataclasses import replace

    from workloads.requests import Batch

    return Batch(tuple(replace(r, seq_len=min(r.seq_len + steps, max_seq_len)) for r in batch),
                 batch.source)


def run_iterations(system: str | MachineConfig, model: Any, batch: Any, iterations: int = 1,
                   phase: str = "decode", overrides: Sequence[str] = (),
                   check_capacity: bool = True,
                   progress: Callable[[int, int], None] | None = None,
                   keep_channels: bool = False,
                   **sim_kwargs: Any) -> list[IterationResult]:
    """``iterations`` consecutive iterations of ``batch`` on a system (decode: every request's
    context grows by one token per iteration, clamped to the model's context).

    ``system`` is a name, file or an already resolved ``MachineConfig`` (then ``overrides``
    must be empty). ``keep_channels``: the compiler keeps the batch's channels instead of the
    system's policy (rejected for the GPU baseline, which has no channels).

    Returns one :class:`IterationResult` per iteration. ``progress(done, total)`` is called after
    each. Raises as :func:`simulate_system_iteration` and :func:`check_batch_fits`.
    """
    from workloads.models import get_model

    label, cfg = resolve_system(system, overrides)
    model = get_model(model) if isinstance(model, str) else model
    if iterations < 1:
        raise ArchsimError(f"iterations must be >= 1, got {iterations}")
    if check_capacity:
        check_batch_fits(cfg, model, batch, extra_tokens_per_request=iterations - 1)
    if is_gpu(cfg):
        if keep_channels:
            raise ArchsimError(f"--keep-channels: system '{label}' is the GPU baseline, which "
                               "has no KV channels to keep")
    else:
        sim_kwargs.setdefault("compile_options", compile_options(keep_channels))
    out = []
    for k in range(iterations):
        b = batch if k == 0 or phase != "decode" else _advance(batch, k, model.max_seq_len)
        out.append(simulate_system_iteration(cfg, model, b, phase=phase, system=label,
                                             **sim_kwargs))
        if progress:
            progress(k + 1, iterations)
    return out


def compare_systems(model: Any, batch: Any | None = None,
                    systems: Sequence[str | tuple[str, MachineConfig]] = tuple(SYSTEM_PRESETS),
                    overrides: Sequence[str] = (), batch_size: int = 256,
                    dataset: str = "sharegpt", seed: int = 0, path: str | Path | None = None,
                    check_capacity: bool = True,
                    progress: Callable[[str], None] | None = None,
                    keep_channels: bool = False) -> dict[str, IterationResult]:
    """One decode iteration of the same workload on each system.

    ``systems``: names/files (resolved here, once each, with ``overrides``) or already resolved
    ``(label, MachineConfig)`` pairs. The request lengths are the same for every system
    (``batch``, else :func:`make_batch`); the compiler places the channels by each system's
    policy, or keeps the batch's with ``keep_channels`` (the GPU baseline has no channels: it
    runs as usual and its result carries a note saying the flag does not apply to it).
    ``progress(system)`` is called after each.

    Returns ``{system label: IterationResult}`` in the order of ``systems``.

    Raises:
        ArchsimError: an unknown system, capacity exceeded, ``keep_channels`` when every system
            is a GPU.
    """
    from workloads.models import get_model

    model = get_model(model) if isinstance(model, str) else model
    resolved = [s if isinstance(s, tuple) else resolve_system(s, overrides) for s in systems]
    if keep_channels and all(is_gpu(c) for _, c in resolved):
        raise ArchsimError("--keep-channels: every compared system is a GPU baseline, which has "
                           "no KV channels to keep")
    out: dict[str, IterationResult] = {}
    for label, cfg in resolved:
        b = make_batch(model, batch_size, dataset, seed, path, cfg, keep_channels) \
            if batch is None else batch
        if check_capacity:
            check_batch_fits(cfg, model, b)
        kw = {} if is_gpu(cfg) else {"compile_options": compile_options(keep_channels)}
        out[label] = simulate_system_iteration(cfg, model, b, system=label, **kw)
        if keep_channels and is_gpu(cfg):
            out[label].notes.append("--keep-channels does not apply to the GPU baseline (no KV "
                                    "channels); ignored for this system")
        if progress:
            progress(label)
    return out


def paper_grid(models: Sequence[str] | None = None, datasets: Sequence[str] | None = None,
               batches: Sequence[int] | None = None,
               systems: Sequence[str] = tuple(SYSTEM_PRESETS), seed: int = 0,
               overrides: Sequence[str] = (),
               progress: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """The NeuPIMs reference grid: :func:`compare_systems` on every (model, dataset, batch)
    (defaults :data:`PAPER_MODELS` × :data:`PAPER_DATASETS` × :data:`PAPER_BATCHES`).

    KV capacity is not enforced (the paper evaluates every point); a point whose batch exceeds a
    system's KV capacity says so in ``over_capacity``. A point that fails records ``error``.

    Returns one row per point: ``{"model", "dataset", "batch", "tokens_per_s": {system: ...},
    "cycles_per_iteration": {...}, "speedup": {system: neupims ÷ system}, "over_capacity":
    [systems], "error": str | None}``. ``progress(row)`` is called after each point.
    """
    from workloads.errors import WorkloadError
    from workloads.models import get_model

    resolved = [resolve_system(s, overrides) for s in systems]   # once, not per grid point
    rows = []
    for mname in models or PAPER_MODELS:
        model = get_model(mname)
        for ds in datasets or PAPER_DATASETS:
            for bs in batches or PAPER_BATCHES:
                row: dict[str, Any] = {"model": mname, "dataset": ds, "batch": bs,
                                       "tokens_per_s": {}, "cycles_per_iteration": {},
                                       "speedup": {}, "over_capacity": [], "error": None}
                try:
                    batch = make_batch(model, bs, ds, seed)
                    for s, (_, cfg) in zip(systems, resolved):
                        try:
                            check_batch_fits(cfg, model, batch)
                        except ArchsimError:
                            row["over_capacity"].append(s)
                    res = compare_systems(model, batch, resolved, check_capacity=False)
                    row["tokens_per_s"] = {k: r.tokens_per_s for k, r in res.items()}
                    row["cycles_per_iteration"] = {k: r.cycles_per_iteration
                                                   for k, r in res.items()}
                    if REFERENCE_SYSTEM in res:
                        ref = res[REFERENCE_SYSTEM].tokens_per_s
                        row["speedup"] = {k: ref / r.tokens_per_s for k, r in res.items()}
                except (ArchsimError, WorkloadError) as exc:
                    row["error"] = str(exc)
                rows.append(row)
                if progress:
                    progress(row)
    return rows


def geometric_mean_speedups(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Geometric mean over grid rows of each system's speedup (rows without one are skipped)."""
    acc: dict[str, list[float]] = {}
    for r in rows:
        for k, v in (r.get("speedup") or {}).items():
            if v and v > 0:
                acc.setdefault(k, []).append(math.log(v))
    return {k: math.exp(sum(v) / len(v)) for k, v in acc.items()}


__all__ = [
    "SYSTEM_PRESETS", "REFERENCE_SYSTEM", "PAPER_HEADLINE", "PAPER_MODELS", "PAPER_DATASETS",
    "PAPER_BATCHES", "resolve_system", "is_gpu", "parallel_degrees", "simulate_system_iteration",
    "KvBudget", "kv_budget", "check_batch_fits", "RequestSet", "make_request_set",
    "load_request_set", "poisson_arrivals", "load_timestamps", "IterationMix", "IterationTimer",
    "GpuTimer", "CycleLevelTimer", "CachingTimer", "SurrogateTimer", "surrogate_point",
    "SERVING_WINDOW", "default_prefill_budget",
    "measure_surrogate_error", "make_timer", "IterationRecord", "serve", "serve_system",
    "make_batch", "run_iterations", "compare_systems", "paper_grid", "geometric_mean_speedups",
]
