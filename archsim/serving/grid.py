"""Fixed batches: K iterations of one system, one iteration of several, the paper's grid.

* :func:`run_iterations` — ``archsim run`` without ``--serve``: consecutive decode iterations of
  one batch (each request's context grows by one token per iteration).
* :func:`compare_systems` — ``archsim compare``: one decode iteration of the same batch on each
  system.
* :func:`paper_grid`, :func:`geometric_mean_speedups`, :func:`speedup_row_counts` —
  ``archsim compare --paper``: the NeuPIMs reference grid (:data:`PAPER_MODELS` ×
  :data:`PAPER_DATASETS` × :data:`PAPER_BATCHES`; a system that cannot hold a point is recorded
  by :func:`does_not_fit`, the others keep their numbers) and the speedups of
  :data:`REFERENCE_SYSTEM` beside :data:`PAPER_HEADLINE`.
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
                    keep_channels: bool = False, jobs: int = 1) -> dict[str, IterationResult]:
    """One decode iteration of the same workload on each system.

    ``systems``: names/files (resolved here, once each, with ``overrides``) or already resolved
    ``(label, MachineConfig)`` pairs. The request lengths are the same for every system
    (``batch``, else :func:`make_batch`); the compiler places the channels by each system's
    policy, or keeps the batch's with ``keep_channels`` (the GPU baseline has no channels: it
    runs as usual and its result carries a note saying the flag does not apply to it).
    Every system's batch and capacity are checked before the first simulation; no timeline
    events are built (``IterationResult.events`` empty: compare writes no trace). ``jobs``:
    worker processes (:mod:`archsim.workers`; 1 = in this process): the systems are
    independent simulations, so the results are the same for any ``jobs``.
    ``progress(system)`` is called as each finishes.

    Returns ``{system label: IterationResult}`` in the order of ``systems``.

    Raises:
        ArchsimError: an unknown system, capacity exceeded, ``keep_channels`` when every system
            is a GPU, ``jobs < 1``.
    """
    from workloads.models import get_model

    model = get_model(model) if isinstance(model, str) else model
    resolved = [s if isinstance(s, tuple) else resolve_system(s, overrides) for s in systems]
    if keep_channels and all(is_gpu(c) for _, c in resolved):
        raise ArchsimError("--keep-channels: every compared system is a GPU baseline, which has "
                           "no KV channels to keep")
    tasks = []
    for label, cfg in resolved:
        b = make_batch(model, batch_size, dataset, seed, path, cfg, keep_channels) \
            if batch is None else batch
        if check_capacity:
            check_batch_fits(cfg, model, b)
        kw = {} if is_gpu(cfg) else {"compile_options": compile_options(keep_channels)}
        tasks.append((cfg, model, b, label, {**kw, "with_events": False}))
    results: dict[str, IterationResult] = {}

    def done(i: int, r: IterationResult) -> None:
        label, cfg = resolved[i]
        if keep_channels and is_gpu(cfg):
            r.notes.append("--keep-channels does not apply to the GPU baseline (no KV "
                           "channels); ignored for this system")
        results[label] = r
        if progress:
            progress(label)

    run_simulations(system_cell, tasks, [c for _, c in resolved], jobs, done)
    return {label: results[label] for label, _ in resolved}


def system_cell(cfg: MachineConfig, model: Any, batch: Any, label: str,
                 kw: dict[str, Any]) -> IterationResult:
    """One iteration of ``batch`` on system ``cfg`` labelled ``label``
    (:func:`simulate_system_iteration` with ``kw``): a task of :func:`run_simulations`
    (:func:`compare_systems`, :func:`archsim.ablation.run_ablation`)."""
    return simulate_system_iteration(cfg, model, batch, system=label, **kw)


def does_not_fit(exc: Any) -> dict[str, Any]:
    """The record of a system that cannot hold a grid point: ``{"resource", "needed",
    "available", "unit": "bytes", "message", "text"}`` from a
    :class:`mapping.errors.CapacityError` (its fields; None when the raiser gave none).
    ``text`` is the cell printed in place of the system's number: ``does not fit: <resource>
    (<needed> of <available> bytes)``, or ``does not fit: <message>`` without fields."""
    res, need, avail = (getattr(exc, k, None) for k in ("resource", "needed_bytes",
                                                         "available_bytes"))
    text = (f"does not fit: {res} ({need:,} of {avail:,} bytes)"
            if None not in (res, need, avail) else f"does not fit: {exc}")
    return {"resource": res, "needed": need, "available": avail, "unit": "bytes",
            "message": str(exc), "text": text}


def _grid_cell(model_name: str, dataset: str, batch_size: int, seed: int, label: str,
               cfg: MachineConfig) -> dict[str, Any]:
    """One system on one grid point: ``{"over_capacity": bool}`` plus ``"tokens_per_s"`` and
    ``"cycles_per_iteration"``, or ``"does_not_fit"`` (:func:`does_not_fit`). The task of a
    :func:`paper_grid` worker process, and its serial path."""
    from mapping.errors import CapacityError
    from workloads.models import get_model

    model = get_model(model_name)
    batch = make_batch(model, batch_size, dataset, seed)
    out: dict[str, Any] = {"over_capacity": False}
    try:
        check_batch_fits(cfg, model, batch)
    except ArchsimError:
        out["over_capacity"] = True
    try:
        r = compare_systems(model, batch, [(label, cfg)], check_capacity=False)[label]
    except CapacityError as exc:
        out["does_not_fit"] = does_not_fit(exc)
        return out
    out["tokens_per_s"] = r.tokens_per_s
    out["cycles_per_iteration"] = r.cycles_per_iteration
    return out


#: Modules the fork server of :func:`paper_grid`'s and :func:`compare_systems`' workers
#: imports once (:func:`archsim.workers.process_pool`); with the kernels' module it also sets
#: numba up once (:func:`archsim.memory.kernel.jit.warm_target`).
PRELOAD = ["archsim.serving", "archsim.gpu", "mapping.compiler", "archsim.npu.compiled"]


def run_simulations(fn: Callable[..., Any], tasks: list[tuple], cfgs: Sequence[MachineConfig],
                    jobs: int, done: Callable[[int, Any], None],
                    order: Sequence[int] | None = None, fresh: bool = False) -> None:
    """:func:`archsim.workers.run_tasks` for simulations; ``cfgs[i]`` is task i's system. With
    numba's cache of the kernels still empty and workers to start, the cheapest NPU task (the
    last of ``order``) runs first in this process: the one-time JIT happens once, with its
    progress note on this process's listener, instead of in every worker (a minute or two and
    over a gigabyte apiece, silently). ``fresh``: each task in a new worker process
    (:func:`archsim.workers.process_pool`).

    Raises:
        ArchsimError: ``jobs < 1`` (before any simulation); the tasks' own errors.
    """
    from archsim.workers import run_tasks

    if jobs < 1:
        raise ArchsimError(f"jobs must be >= 1, got {jobs}")
    order = list(range(len(tasks)) if order is None else order)
    if jobs > 1 and len(order) > 1:
        from archsim.system import kernels_cached

        if not kernels_cached():
            warm = next((i for i in reversed(order) if not is_gpu(cfgs[i])), None)
            if warm is not None:
                try:
                    r = fn(*tasks[warm])
                except Exception:   # noqa: BLE001 - it fails again in its place in the order
                    pass            # on the workers, where the first failure in order is raised
                else:
                    order.remove(warm)
                    done(warm, r)
    run_tasks(fn, tasks, jobs, done, order=order, preload=PRELOAD, fresh=fresh)


def paper_grid(models: Sequence[str] | None = None, datasets: Sequence[str] | None = None,
               batches: Sequence[int] | None = None,
               systems: Sequence[str] = tuple(SYSTEM_PRESETS), seed: int = 0,
               overrides: Sequence[str] = (),
               progress: Callable[[dict[str, Any]], None] | None = None,
               jobs: int = 1) -> list[dict[str, Any]]:
    """The NeuPIMs reference grid: one decode iteration of every system
    (:func:`compare_systems`, one system at a time) on every (model, dataset, batch) (defaults
    :data:`PAPER_MODELS` × :data:`PAPER_DATASETS` × :data:`PAPER_BATCHES`).

    KV capacity is not enforced (the paper evaluates every point); a point whose batch exceeds a
    system's KV capacity (:func:`check_batch_fits`) says so in ``over_capacity`` and still runs.
    A system the compiler cannot map the point onto (:class:`mapping.errors.CapacityError`: a
    channel's KV rows, HBM, the scratchpad) is recorded in ``does_not_fit`` (see
    :func:`does_not_fit`) and the row's other systems keep their numbers.

    ``jobs``: worker processes (:mod:`archsim.workers`); each (point, system) cell is one
    independent simulation, so the rows are the same for any ``jobs`` (only the order in which
    points finish, and so ``progress``, differs). Peak memory grows with ``jobs``: the largest
    cells (GPT3-175B) take about 1.1 GB each, so each cell runs in a new worker process (a
    reused worker keeps 0.2-0.4 GB of the cell before: :func:`archsim.workers.process_pool`).

    Returns one row per point, in grid order: ``{"model", "dataset", "batch", "tokens_per_s":
    {system: ...}, "cycles_per_iteration": {...}, "speedup": {system: neupims ÷ system},
    "over_capacity": [systems], "does_not_fit": {system: record}}``; systems are keyed by their
    label (:func:`resolve_system`) in the order of ``systems``; a speedup exists only where both
    numbers do. ``progress(row)`` is called as each point's last system finishes.

    Raises:
        ArchsimError: an unknown system or bad override, ``jobs < 1``; SimulationError and every
            error other than a capacity error propagate (a failing point is a bug, not a data
            point).
    """
    resolved = [resolve_system(s, overrides) for s in systems]   # once, not per grid point
    points = [(m, ds, bs) for m in models or PAPER_MODELS for ds in datasets or PAPER_DATASETS
              for bs in batches or PAPER_BATCHES]
    tasks = [(m, ds, bs, seed, label, cfg) for m, ds, bs in points for label, cfg in resolved]
    n_sys = len(resolved)
    rank = {m: k for k, m in enumerate(PAPER_MODELS)}     # costliest first: model, then batch
    order = sorted(range(len(tasks)), key=lambda i: (-rank.get(tasks[i][0], len(rank)),
                                                     -tasks[i][2], i))
    cells: list[dict[str, Any] | None] = [None] * len(tasks)
    left = [n_sys] * len(points)

    def row_of(p: int) -> dict[str, Any]:
        m, ds, bs = points[p]
        row: dict[str, Any] = {"model": m, "dataset": ds, "batch": bs, "tokens_per_s": {},
                               "cycles_per_iteration": {}, "speedup": {}, "over_capacity": [],
                               "does_not_fit": {}}
        for k, (label, _) in enumerate(resolved):
            cell = cells[p * n_sys + k]
            assert cell is not None
            if cell["over_capacity"]:
                row["over_capacity"].append(label)
            if "does_not_fit" in cell:
                row["does_not_fit"][label] = cell["does_not_fit"]
                continue
            row["tokens_per_s"][label] = cell["tokens_per_s"]
            row["cycles_per_iteration"][label] = cell["cycles_per_iteration"]
        ref = row["tokens_per_s"].get(REFERENCE_SYSTEM)
        if ref is not None:
            row["speedup"] = {k: ref / v for k, v in row["tokens_per_s"].items() if v}
        return row

    def done(i: int, cell: dict[str, Any]) -> None:
        cells[i] = cell
        p = i // n_sys
        left[p] -= 1
        if left[p] == 0 and progress:
            progress(row_of(p))

    run_simulations(_grid_cell, tasks, [t[5] for t in tasks], jobs, done, order, fresh=True)
    return [row_of(p) for p in range(len(points))]


def _log_speedups(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    acc: dict[str, list[float]] = {}
    for r in rows:
        for k, v in (r.get("speedup") or {}).items():
            if v and v > 0:
                acc.setdefault(k, []).append(math.log(v))
    return acc


def geometric_mean_speedups(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Geometric mean over grid rows of each system's speedup (rows without one — the
    reference or the system did not fit — are skipped; :func:`speedup_row_counts` says how
    many rows each mean covers)."""
    return {k: math.exp(sum(v) / len(v)) for k, v in _log_speedups(rows).items()}


def speedup_row_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many grid rows each system's :func:`geometric_mean_speedups` covers (rows where
    both the reference and the system have a number)."""
    return {k: len(v) for k, v in _log_speedups(rows).items()}


__all__ = ["REFERENCE_SYSTEM", "PAPER_HEADLINE", "PAPER_MODELS", "PAPER_DATASETS",
           "PAPER_BATCHES", "run_iterations", "compare_systems", "paper_grid",
           "geometric_mean_speedups", "speedup_row_counts", "does_not_fit", "run_simulations",
           "system_cell"]
