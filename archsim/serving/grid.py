"""Fixed batches: K iterations of one system, one iteration of several, the paper's grid.

* :func:`run_iterations` — ``archsim run`` without ``--serve``: consecutive decode iterations of
  one batch (each request's context grows by one token per iteration).
* :func:`compare_systems` — ``archsim compare``: one decode iteration of the same batch on each
  system.
* :func:`paper_grid`, :func:`geometric_mean_speedups` — ``archsim compare --paper``: the NeuPIMs
  reference grid (:data:`PAPER_MODELS` × :data:`PAPER_DATASETS` × :data:`PAPER_BATCHES`) and the
  speedups of :data:`REFERENCE_SYSTEM` beside :data:`PAPER_HEADLINE`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from archsim.config import MachineConfig
from archsim.errors import ArchsimError
from archsim.results import IterationResult
from archsim.serving.requests import make_batch
from archsim.serving.systems import (SYSTEM_PRESETS, check_batch_fits, compile_options, is_gpu,
                                     resolve_system, simulate_system_iteration)

#: The reference system of speedups.
REFERENCE_SYSTEM = "neupims"
#: NeuPIMs (Heo et al., ASPLOS 2024), abstract: throughput of NeuPIMs over each baseline.
PAPER_HEADLINE: dict[str, float] = {"gpu": 3.0, "npu": 2.4, "npu-pim": 1.6}
#: The reference evaluation grid of the paper (models × datasets × batch sizes).
PAPER_MODELS = ("gpt3-7b", "gpt3-13b", "gpt3-30b", "gpt3-175b")
PAPER_DATASETS = ("sharegpt", "alpaca")
PAPER_BATCHES = (64, 128, 256, 384, 512)


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


__all__ = ["REFERENCE_SYSTEM", "PAPER_HEADLINE", "PAPER_MODELS", "PAPER_DATASETS",
           "PAPER_BATCHES", "run_iterations", "compare_systems", "paper_grid",
           "geometric_mean_speedups"]
