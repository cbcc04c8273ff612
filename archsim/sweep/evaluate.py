"""Evaluation of one design point on a worker: :func:`evaluate_point` and :func:`run_point`.

:func:`evaluate_point` is the default evaluator. It runs what ``archsim run`` runs for one
iteration — the same machine config, model, batch and system — through the project's Python API
and returns the iteration's headline metrics (:meth:`archsim.results.IterationResult.summary`:
tokens/s, energy per token, utilisations, ...) plus the point's static metrics (area proxy,
memory capacity, see :mod:`archsim.energy.area`) and the KV-cache footprint
(:func:`kv_metrics`). It contains no performance model of its own:

:func:`archsim.serving.simulate_system_iteration` dispatches: ``system: gpu`` runs the roofline
baseline (:func:`archsim.gpu.simulate_gpu_iteration`); ``npu``, ``npu-pim`` and ``neupims`` run
the cycle-level simulator (``archsim.system.simulate_iteration``). Until that simulator exists
such points fail with the message saying so (re-run with ``--retry-failed`` once it does).

:func:`run_point` wraps any evaluator (``module:function``) for the executors: it never raises,
measures the wall time and returns an outcome dict that the coordinator writes to the database.
Workers need the project installed; they read no file (the point carries its whole config).
"""
from __future__ import annotations

import importlib
import math
import os
import socket
import time
import traceback
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Callable

from archsim.config import MachineConfig
from archsim.sweep.errors import SweepError
from archsim.sweep.space import Point

Evaluator = Callable[[Point], dict[str, Any]]


# ------------------------------------------------------------------------------------------
# Workload of a point
# ------------------------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _model(name: str) -> Any:
    from workloads.models import get_model, load_hf_config

    return load_hf_config(name) if name.endswith(".json") else get_model(name)


def _is_file(dataset: str) -> bool:
    return dataset not in ("sharegpt", "alpaca")


_BATCHES: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_BATCH_CACHE_SIZE = 16


def point_batch(cfg: MachineConfig, model_name: str, n: int, dataset: str, seed: int,
                phase: str, keep_channels: bool = False) -> Any:
    """The request batch of a point, cached per worker process (it is a pure function of its
    inputs and of the machine's channel count and policy, so points that differ elsewhere
    share it).

    Decode: :func:`archsim.serving.make_batch` — what ``archsim run --batch N --dataset D``
    (or ``--requests FILE`` when ``dataset`` is a file) runs: a warmed-up continuous-batching
    snapshot (channels placed by the compiler: the machine's policy, or the file's with
    ``keep_channels``).
    Prefill: ``n`` fresh prompts (:func:`workloads.requests.sample_requests`).

    Raises:
        WorkloadError / ArchsimError: unknown dataset, unreadable file, a request too long.
    """
    from archsim.serving import make_batch
    from workloads.requests import load_request_file, sample_requests

    placement = ("gpu",) if "gpu" in cfg.system.engines else (
        cfg.memory.org.channels, cfg.system.channel_policy)
    key = (model_name, n, dataset, seed, phase, placement, keep_channels)
    if key in _BATCHES:
        _BATCHES.move_to_end(key)
        return _BATCHES[key]
    model = _model(model_name)
    if phase == "prefill":
        source = load_request_file(dataset) if _is_file(dataset) else dataset
        batch = sample_requests(source, n, seed=seed, max_seq_len=model.max_seq_len)
    elif _is_file(dataset):
        batch = make_batch(model, n, seed=seed, path=dataset, cfg=cfg,
                           keep_channels=keep_channels)
    else:
        batch = make_batch(model, n, dataset, seed, cfg=cfg, keep_channels=keep_channels)
    _BATCHES[key] = batch
    while len(_BATCHES) > _BATCH_CACHE_SIZE:
        _BATCHES.popitem(last=False)
    return batch


def kv_metrics(cfg: MachineConfig, model: Any, batch: Any) -> dict[str, Any]:
    """KV-cache demand of ``batch`` against one device's KV budget.

    Uses :func:`archsim.serving.kv_budget` (device memory minus the weights one device holds,
    divided by the KV bytes of one token on one device) — the same budget ``archsim run``
    checks.

    Returns:
        ``kv_tokens`` (Σ seq_len of the batch, each at most the model's sliding window: the
        rolling buffer; tokens), ``kv_capacity_tokens`` (the budget,
        tokens), ``kv_capacity_fraction`` (demand ÷ budget; > 1: the batch does not fit),
        ``kv_bytes_per_device`` and ``weight_bytes_per_device`` (bytes). When the weights alone
        do not fit, the fraction is None and ``capacity_note`` says why.
    """
    from archsim.errors import ArchsimError
    from archsim.serving import kv_budget, kv_tokens_held

    need = int(kv_tokens_held([r.seq_len for r in batch],
                              getattr(model, "sliding_window", None)).sum())
    out: dict[str, Any] = {"kv_tokens": need}
    try:
        bud = kv_budget(cfg, model)
    except ArchsimError as exc:
        out.update(kv_capacity_fraction=None, kv_capacity_tokens=0, capacity_note=str(exc))
        return out
    out.update(kv_capacity_tokens=int(bud.capacity_tokens),
               kv_capacity_fraction=need / bud.capacity_tokens if bud.capacity_tokens else None,
               kv_bytes_per_device=float(need * bud.kv_bytes_per_token),
               weight_bytes_per_device=float(bud.weight_bytes))
    return out


def _jsonable(x: Any) -> Any:
    """numpy scalars → Python, NaN/inf → None, tuples → lists (metrics must be JSON)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 1) == 0:
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def evaluate_point(point: Point) -> dict[str, Any]:
    """The default evaluator: one iteration of the point's system on its workload, through
    :func:`archsim.serving.simulate_system_iteration` (the Python API of ``archsim run``).

    A batch that does not fit the device (``kv_capacity_fraction`` > 1, or the weights alone
    too large) is not simulated when ``workload.check_capacity`` is true, as ``archsim run``
    refuses it: its metrics are then only the static and KV metrics, and the constraint
    ``kv_capacity_fraction <= 1`` that :func:`~archsim.sweep.spec.load_spec` implies makes it
    infeasible.

    Args:
        point: a valid :class:`~archsim.sweep.space.Point` (``config`` not None).

    Returns:
        ``{metric: value}``: :meth:`IterationResult.summary` (``tokens_per_s`` system tokens/s,
        ``energy_per_token_uj`` µJ/token, ``tokens_per_joule``, ``power_per_device_w`` W,
        ``seconds_per_iteration`` s,
        ``cycles_per_iteration`` NPU cycles, utilisations as fractions, ``timing_source``),
        the static metrics of the point, :func:`kv_metrics`, ``tensor_parallel`` and
        ``pipeline_parallel``. Definitions: :data:`archsim.results.METRICS` and
        :data:`archsim.sweep.spec.SWEEP_METRICS`.

    Raises:
        SweepError: an invalid point.
        ArchsimError / WorkloadError / MappingError: from the simulator (including "the
            cycle-level simulator is not available" for non-GPU systems until it exists).
    """
    from archsim.serving import compile_options, parallel_degrees, simulate_system_iteration

    if point.config is None:
        raise SweepError(f"point {point.key[:12]} has an invalid config: {point.error}")
    cfg = MachineConfig.model_validate(point.config)
    wl = point.workload
    model = _model(wl["model"])
    keep = bool(wl.get("keep_channels", False))
    batch = point_batch(cfg, wl["model"], int(wl["batch"]), wl["dataset"], int(wl["seed"]),
                        wl["phase"], keep)
    metrics: dict[str, Any] = dict(point.static)
    tp, pp = parallel_degrees(cfg, model)
    metrics.update(tensor_parallel=tp, pipeline_parallel=pp)
    metrics.update(kv_metrics(cfg, model, batch))
    frac = metrics.get("kv_capacity_fraction")
    if wl.get("check_capacity", True) and (frac is None or frac > 1):
        return _jsonable(metrics)
    kw = {} if "gpu" in cfg.system.engines else {"compile_options": compile_options(keep)}
    result = simulate_system_iteration(cfg, model, batch, phase=wl["phase"],
                                       system=wl["system"], **kw)
    metrics.update(result.summary())
    return _jsonable(metrics)


# ------------------------------------------------------------------------------------------
# Worker wrapper
# ------------------------------------------------------------------------------------------
def tool_version() -> str:
    """``archsim <package version> (git <short commit>)`` of this process
    (:func:`archsim.version_string`; the commit only in a source checkout)."""
    from archsim import version_string

    return version_string()


@lru_cache(maxsize=32)
def resolve_evaluator(name: str) -> Evaluator:
    """Import ``module:function``.

    Raises:
        SweepError: malformed name, module not importable, or no such callable.
    """
    mod_name, _, fn_name = name.partition(":")
    if not mod_name or not fn_name:
        raise SweepError(f"evaluator {name!r}: expected 'module:function'")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise SweepError(f"evaluator {name!r}: cannot import {mod_name}: {exc}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise SweepError(f"evaluator {name!r}: {mod_name} has no function {fn_name}")
    return fn


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_point(point: Point) -> dict[str, Any]:
    """Evaluate ``point`` with its evaluator; never raises (except KeyboardInterrupt/SystemExit).

    Returns:
        ``{"key", "metrics" (dict or None), "error" (one line or None), "traceback",
        "wall_s" (seconds of the evaluation), "host" ("hostname:pid"), "tool_version"}``.
    """
    t0 = time.perf_counter()
    metrics, error, tb = None, None, None
    try:
        metrics = _jsonable(dict(resolve_evaluator(point.evaluator)(point)))
        metrics["eval_wall_s"] = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a point's failure is data, not a crash
        error, tb = _one_line(exc), traceback.format_exc()
    return {"key": point.key, "metrics": metrics, "error": error, "traceback": tb,
            "wall_s": time.perf_counter() - t0, "host": f"{socket.gethostname()}:{os.getpid()}",
            "tool_version": tool_version()}


__all__ = ["evaluate_point", "run_point", "resolve_evaluator", "point_batch", "kv_metrics",
           "tool_version"]
