"""Running systems on workloads: one iteration, K iterations, a serving run, a comparison.

This is the Python API behind ``archsim run`` and ``archsim compare`` (sweeps call it directly).
Every public name of the modules below is re-exported here, so ``import archsim.serving as sv;
sv.serve_system(...)`` is the way to call it; a test that replaces a function must replace it in
the module that looks it up (for example ``archsim.serving.scheduler.serve``).

Modules, each depending only on those listed before it:

* :mod:`archsim.serving.systems` — a system name, preset or YAML file → ``(label,
  MachineConfig)`` (:func:`resolve_system`), one iteration of one system
  (:func:`simulate_system_iteration`: the GPU model or the cycle-level simulator; nothing here
  counts a cycle), the KV-cache budget of a device (:func:`kv_budget`, :func:`check_batch_fits`).
* :mod:`archsim.serving.requests` — the requests of a serving run (:class:`RequestSet`, arrivals)
  and the decode batch of a fixed-batch run (:func:`make_batch`).
* :mod:`archsim.serving.kvcache` — the KV-cache manager: blocks, per-channel pools on PIM
  systems, paged or reserved allocation, the preemption victim, swap times (:class:`KvPolicy`,
  :class:`KvCache`).
* :mod:`archsim.serving.router` — which replica receives a request (:func:`choose_replica`).
* :mod:`archsim.serving.timers` — what one serving iteration runs (:class:`IterationMix`) and the
  timers that time it exactly (GPU model, cycle-level simulator, reuse of identical shapes).
* :mod:`archsim.serving.surrogate` — the Gaussian-process surrogate timer and its error checks.
* :mod:`archsim.serving.scheduler` — the iteration-level (continuous) batching scheduler
  (:func:`serve`, :func:`serve_system`; admission, composition :func:`compose_iteration`,
  preemption, replicas side by side) and the timer of a serving run (:func:`make_timer`).
* :mod:`archsim.serving.grid` — fixed batches: :func:`run_iterations`, :func:`compare_systems`,
  :func:`paper_grid` (the NeuPIMs reference grid: a system that cannot hold a point is
  recorded, not fatal) and its speedups.

Nothing here imports torch, matplotlib or scikit-learn at import time (the surrogate imports
scikit-learn when it first fits).
"""
from __future__ import annotations

from archsim.serving.grid import (PAPER_BATCHES, PAPER_DATASETS, PAPER_HEADLINE, PAPER_MODELS,
                                  REFERENCE_SYSTEM, compare_systems, does_not_fit,
                                  geometric_mean_speedups, paper_grid, run_iterations,
                                  run_simulations, speedup_row_counts, system_cell)
from archsim.serving.kvcache import KvCache, KvPolicy, preemption_victim
from archsim.serving.requests import (RequestSet, load_request_set, load_timestamps, make_batch,
                                      make_request_set, poisson_arrivals)
from archsim.serving.router import (MAX_REPLICAS, ROUTERS, ReplicaLoad, check_router,
                                    choose_replica)
from archsim.serving.scheduler import (SERVING_WINDOW, IterationRecord, compose_iteration,
                                       default_prefill_budget, make_timer, serve, serve_system)
from archsim.serving.surrogate import (AMPLITUDE_BOUNDS, LENGTH_SCALE_BOUNDS, NOISE_BOUNDS,
                                       SurrogateTimer, measure_surrogate_error, surrogate_point)
from archsim.serving.systems import (SYSTEM_PRESETS, KvBudget, check_batch_fits,
                                     compile_options, is_gpu, kv_budget, kv_tokens_held,
                                     parallel_degrees,
                                     resolve_system, simulate_system_iteration)
from archsim.serving.timers import (CachingTimer, CycleLevelTimer, GpuTimer, IterationMix,
                                    IterationTimer)

__all__ = [
    "SYSTEM_PRESETS", "REFERENCE_SYSTEM", "PAPER_HEADLINE", "PAPER_MODELS", "PAPER_DATASETS",
    "PAPER_BATCHES", "resolve_system", "is_gpu", "parallel_degrees", "simulate_system_iteration",
    "compile_options", "KvBudget", "kv_budget", "kv_tokens_held", "check_batch_fits",
    "RequestSet",
    "make_request_set", "load_request_set", "poisson_arrivals", "load_timestamps",
    "IterationMix", "IterationTimer", "GpuTimer", "CycleLevelTimer", "CachingTimer",
    "SurrogateTimer", "surrogate_point", "AMPLITUDE_BOUNDS", "LENGTH_SCALE_BOUNDS",
    "NOISE_BOUNDS", "SERVING_WINDOW", "default_prefill_budget", "measure_surrogate_error",
    "make_timer", "IterationRecord", "serve", "serve_system", "make_batch", "run_iterations",
    "compare_systems", "paper_grid", "geometric_mean_speedups", "speedup_row_counts",
    "does_not_fit", "run_simulations", "system_cell", "KvPolicy", "KvCache", "preemption_victim", "ROUTERS", "MAX_REPLICAS",
    "ReplicaLoad", "check_router", "choose_replica", "compose_iteration",
]
