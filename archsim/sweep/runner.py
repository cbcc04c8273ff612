"""Running a sweep: point generation, executors, the results database, resume.

:func:`run_sweep` is the coordinator. It

1. opens (or creates) ``DIR/sweep.sqlite`` and takes an exclusive lock on ``DIR/sweep.lock``
   (a second coordinator on the same directory is refused; the lock dies with the process);
2. generates the points of the spec (grid / random up front; optuna in rounds of
   ``search.batch_size`` asked trials), validates each point's config (:func:`resolve_point`),
   and skips points the database already has as ``done`` or ``infeasible`` (and ``failed``
   unless ``retry_failed``);
3. records an invalid point as ``failed`` and a point that violates a constraint on a static
   metric (area proxy, capacity) as ``infeasible`` without running it;
4. evaluates the rest on an executor — in-process (``jobs=1``), a local process pool
   (``jobs=N``, workers forked from a clean fork server) or an existing Dask cluster (``dask_address``) — with a
   bounded number of points in flight, and commits each result the moment it arrives.

Points are resolved lazily, as the evaluation loop asks for them (the first point starts at
once, and the ``total`` of the progress counters is known from the start). Local worker
processes die with the coordinator, even when it is killed with SIGKILL
(:mod:`archsim.workers`).

A worker process that dies (segfault, OOM kill) breaks a process pool: the pool is rebuilt and
the points that were in flight are re-run one at a time, so the point that kills its worker is
identified and recorded as ``failed``; the others complete normally. On Dask, the scheduler
retries a task whose worker died and gives up with ``KilledWorker`` (recorded as ``failed``).

Everything the coordinator reports goes through the ``progress`` callback; it prints nothing.
"""
from __future__ import annotations

import concurrent.futures as cf
import fcntl
import json
import logging
import os
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from archsim import workers
from archsim.sweep.db import ResultsDB
from archsim.sweep.errors import SweepError
from archsim.sweep.evaluate import run_point, tool_version
from archsim.sweep.space import Point, grid_points, random_points, resolve_point
from archsim.sweep.spec import ConstraintSpec, RangeSpec, SweepSpec
from archsim.energy.area import STATIC_METRICS

LOCK_NAME = "sweep.lock"

#: Modules the fork server imports once, so that a worker forked from it evaluates its first
#: point without importing anything (the default evaluator and what it runs, the kernels with
#: numba set up: :func:`archsim.memory.kernel.jit.warm_target`).
#: (:mod:`archsim.workers` itself is always preloaded: it makes the fork server die with the
#: coordinator.)
PRELOAD = ["archsim.sweep.evaluate", "archsim.serving", "archsim.gpu", "archsim.npu.compiled"]


# ------------------------------------------------------------------------------------------
# Progress and summary
# ------------------------------------------------------------------------------------------
@dataclass
class Progress:
    """Counters of a running sweep, passed to the ``progress`` callback after every change.

    Attributes:
        total: points of this run (optuna: trials requested), previously finished included.
        skipped: points found finished in the database (not run again).
        done: points evaluated successfully in this run (feasible or not).
        failed: points that failed in this run (invalid config, evaluator error, dead worker).
        infeasible: points rejected before running by a static constraint in this run.
        running: points currently on workers.
        elapsed_s: wall time since the run started (s).
        last: the last finished point's outcome (``key``, ``status``, ``error``) or None.
    """

    total: int = 0
    skipped: int = 0
    done: int = 0
    failed: int = 0
    infeasible: int = 0
    running: int = 0
    elapsed_s: float = 0.0
    last: dict[str, Any] | None = None

    @property
    def finished(self) -> int:
        """Points accounted for: skipped + done + failed + infeasible."""
        return self.skipped + self.done + self.failed + self.infeasible


@dataclass
class SweepSummary:
    """What :func:`run_sweep` did.

    Attributes:
        out_dir: the results directory.
        progress: the final :class:`Progress` counters.
        evaluated: points sent to an evaluator in this run (retries of a crashed worker's points
            count once).
        wall_s: wall time of the run (s).
        executor: ``inline``, ``processes(N)`` or ``dask(ADDRESS)``.
        tool_version: the coordinator's version (rows carry the version of the worker that
            computed them).
    """

    out_dir: Path
    progress: Progress
    evaluated: int
    wall_s: float
    executor: str
    tool_version: str
    failures: list[str] = field(default_factory=list)

    @property
    def points_per_minute(self) -> float:
        """Evaluated points per minute of wall time (0 when nothing ran)."""
        return 60.0 * self.evaluated / self.wall_s if self.wall_s > 0 and self.evaluated else 0.0


# ------------------------------------------------------------------------------------------
# Executors
# ------------------------------------------------------------------------------------------
class _Executor:
    """Submit points, wait for any to finish. ``workers`` sizes the in-flight window."""

    name = "executor"
    workers = 1

    def submit(self, point: Point) -> Any:
        raise NotImplementedError

    def wait_any(self, futures: list[Any], timeout: float) -> list[Any]:
        raise NotImplementedError

    def result(self, fut: Any) -> dict[str, Any]:
        raise NotImplementedError

    def close(self, abort: bool = False) -> None:
        pass


class _InlineFuture:
    def __init__(self, point: Point) -> None:
        self.point = point


class _InlineExecutor(_Executor):
    """Evaluates in the coordinator process, one point at a time (``--jobs 1``)."""

    name = "inline"

    def submit(self, point: Point) -> Any:
        return _InlineFuture(point)

    def wait_any(self, futures: list[Any], timeout: float) -> list[Any]:
        return futures[:1]

    def result(self, fut: Any) -> dict[str, Any]:
        return run_point(fut.point)


class _ProcessExecutor(_Executor):
    """A local process pool (:func:`archsim.workers.process_pool`): workers fork from a clean
    fork server that imported the evaluator once, never from the coordinator, and die with
    it, even after a SIGKILL."""

    def __init__(self, jobs: int) -> None:
        self.workers = jobs
        self.name = f"processes({jobs})"
        self.pool: cf.ProcessPoolExecutor | None = None  # started at the first submit

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        return workers.process_pool(self.workers, PRELOAD)

    def submit(self, point: Point) -> Any:
        if self.pool is None:
            self.pool = self._new_pool()
        return self.pool.submit(run_point, point)

    def wait_any(self, futures: list[Any], timeout: float) -> list[Any]:
        done, _ = cf.wait(futures, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, fut: Any) -> dict[str, Any]:
        return fut.result()

    def rebuild(self) -> None:
        """Replace a broken pool (a worker died) with a fresh one."""
        self.close(abort=True)
        self.pool = None

    def close(self, abort: bool = False) -> None:
        if self.pool is not None:
            workers.stop_pool(self.pool, abort)


class _DaskExecutor(_Executor):
    """An existing Dask cluster through ``dask.distributed.Client(address)``. The cluster is
    not shut down at the end; only the client is closed."""

    def __init__(self, address: str | Any, timeout_s: float = 30.0) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise SweepError("--dask needs dask.distributed: pip install 'archsim[sweep]'") \
                from None
        try:
            self.client = address if hasattr(address, "submit") else Client(
                address, timeout=timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise SweepError(f"cannot connect to the Dask scheduler at {address}: {exc}") \
                from None
        self._own_client = not hasattr(address, "submit")
        self.workers = max(1, self._workers())
        self.name = f"dask({getattr(self.client.scheduler, 'address', address)})"

    def _workers(self) -> int:
        try:
            return sum(int(w.get("nthreads", 1)) for w in
                       self.client.scheduler_info(n_workers=-1)["workers"].values())
        except Exception:  # noqa: BLE001
            return 1

    def submit(self, point: Point) -> Any:
        return self.client.submit(run_point, point, key=f"archsim-sweep-{point.key}",
                                  pure=False)

    def wait_any(self, futures: list[Any], timeout: float) -> list[Any]:
        # distributed.wait() needs a default client; this client is not one (set_as_default
        # =False, so that a user's own client is left alone): poll the futures instead.
        end = time.monotonic() + timeout
        while True:
            done = [f for f in futures if f.done()]
            if done or time.monotonic() >= end:
                return done
            time.sleep(0.02)

    def result(self, fut: Any) -> dict[str, Any]:
        return fut.result()

    def close(self, abort: bool = False) -> None:
        if self._own_client:
            self.client.close()


def make_executor(jobs: int | None = None, dask_address: str | Any | None = None) -> _Executor:
    """The executor for ``--jobs`` / ``--dask``.

    Args:
        jobs: worker processes of the local pool (default: the CPUs this process may use,
            :func:`archsim.workers.usable_cpus`); 1 runs in-process.
        dask_address: ``tcp://HOST:PORT`` of a running scheduler (or a ``Client``); overrides
            ``jobs``.

    Raises:
        SweepError: jobs < 1, or the scheduler is unreachable.
    """
    if dask_address is not None:
        return _DaskExecutor(dask_address)
    n = workers.usable_cpus() if jobs is None else jobs
    if n < 1:
        raise SweepError(f"--jobs must be >= 1, got {n}")
    return _InlineExecutor() if n == 1 else _ProcessExecutor(n)


# ------------------------------------------------------------------------------------------
# Constraints and objectives of a finished point
# ------------------------------------------------------------------------------------------
def check_constraints(constraints: Iterable[ConstraintSpec], metrics: dict[str, Any],
                      only: Iterable[str] | None = None) -> tuple[list[float], list[str]]:
    """Violation amount of every constraint (0 = met; a missing or non-numeric metric counts
    as violated by +inf) and the texts of the violated ones.

    ``only`` restricts the check to constraints on those metrics (the static ones before a
    point runs)."""
    sel = set(only) if only is not None else None
    amounts, texts = [], []
    for c in constraints:
        if sel is not None and c.metric not in sel:
            continue
        v = c.violation(metrics.get(c.metric))
        if v is None:
            amounts.append(float("inf"))
            texts.append(f"{c.describe()} (metric missing)")
        else:
            amounts.append(v)
            if v > 0:
                texts.append(f"{c.describe()} (got {metrics.get(c.metric):.6g})")
    return amounts, texts


def objective_values(spec: SweepSpec, metrics: dict[str, Any] | None) -> list[float] | None:
    """The objectives of a point in spec order, or None when one is missing / not a number."""
    if metrics is None:
        return None
    out = []
    for o in spec.objectives:
        v = metrics.get(o.metric)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            return None
        out.append(float(v))
    return out


# ------------------------------------------------------------------------------------------
# The coordinator
# ------------------------------------------------------------------------------------------
class _DirLock:
    """Exclusive ``flock`` on ``DIR/sweep.lock`` (released by the OS if the process dies)."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / LOCK_NAME
        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.fh.seek(0)
            who = self.fh.read().strip() or "another process"
            self.fh.close()
            raise SweepError(f"{out_dir}: another sweep is running on this directory "
                             f"({who}); wait for it or use another --out") from None
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"pid {os.getpid()}")
        self.fh.flush()

    def release(self) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


class _Coordinator:
    def __init__(self, spec: SweepSpec, out_dir: Path, executor: _Executor, retry_failed: bool,
                 progress: Callable[[Progress], None] | None) -> None:
        self.spec, self.out_dir, self.ex = spec, out_dir, executor
        self.retry_failed = retry_failed
        self.cb = progress
        self.db = ResultsDB(out_dir, create=True)
        self.version = tool_version()
        self.p = Progress()
        self.t0 = time.perf_counter()
        self.evaluated = 0
        self.statuses = self.db.statuses()
        self.origin = spec.search.kind
        self.failures: list[str] = []
        # process-pool crash isolation
        self.crash_suspects: list[Point] = []
        self.isolating = False

    # -------------------------------------------------------------- bookkeeping
    def emit(self) -> None:
        self.p.elapsed_s = time.perf_counter() - self.t0
        if self.cb is not None:
            self.cb(self.p)

    def needs_run(self, point: Point) -> bool:
        st = self.statuses.get(point.key)
        return st is None or (st == "failed" and self.retry_failed)

    def record(self, point: Point, outcome: dict[str, Any] | None, *, status: str | None = None,
               metrics: dict[str, Any] | None = None, error: str | None = None) -> str:
        """Write one finished point; returns its status."""
        tb = wall = host = None
        if outcome is not None:
            metrics, error = outcome["metrics"], outcome["error"]
            tb, wall, host = outcome["traceback"], outcome["wall_s"], outcome["host"]
        if metrics is None and point.static:
            metrics = dict(point.static)  # a failed point still shows its area, capacity
        feasible, violations = None, None
        if status is None:
            status = "failed" if error is not None else "done"
        if status in ("done", "infeasible") and metrics is not None:
            only = STATIC_METRICS if status == "infeasible" else None
            amounts, violations = check_constraints(self.spec.constraints, metrics, only)
            feasible = not violations
        version = (outcome or {}).get("tool_version") or self.version  # the worker's
        self.db.record(key=point.key, params=point.params, workload=point.workload,
                       config=point.config, metrics=metrics, status=status, feasible=feasible,
                       violations=violations, error=error, traceback=tb, wall_s=wall,
                       tool_version=version, host=host, origin=self.origin)
        self.statuses[point.key] = status
        if status == "failed":
            self.p.failed += 1
            if len(self.failures) < 20:
                self.failures.append(f"{json.dumps(point.params)}: {error}")
        elif status == "infeasible":
            self.p.infeasible += 1
        else:
            self.p.done += 1
        self.p.last = {"key": point.key, "status": status, "error": error}
        self.emit()
        return status

    def pre_run(self, point: Point) -> str | None:
        """Record points that must not run; return their status, or None to run it."""
        if point.error is not None:
            return self.record(point, None, status="failed", error=point.error)
        _, violated = check_constraints(self.spec.constraints, point.static, STATIC_METRICS)
        if violated:
            return self.record(point, None, status="infeasible", metrics=dict(point.static))
        return None

    # -------------------------------------------------------------- evaluation loop
    def evaluate(self, points: Iterable[Point]) -> None:
        """Run every point of ``points`` (already filtered: they need running), committing
        each as it finishes."""
        queue: Iterator[Point] = iter(points)
        inflight: dict[Any, Point] = {}
        window = max(2, 2 * self.ex.workers)
        exhausted = False
        unsent: list[Point] = []   # refused by a pool that broke before it could take them
        while True:
            limit = 1 if self.isolating else window
            while len(inflight) < limit:
                if self.crash_suspects:
                    point = self.crash_suspects.pop(0)
                elif unsent and not self.isolating:
                    point = unsent.pop(0)
                elif self.isolating or exhausted:
                    break
                else:
                    point = next(queue, None)
                    if point is None:
                        exhausted = True
                        break
                    if self.pre_run(point) is not None:
                        continue
                    self.evaluated += 1
                try:
                    inflight[self.ex.submit(point)] = point
                except BrokenProcessPool:
                    # a worker died since the last wait: this point never ran; the in-flight
                    # futures report the break below (or, with none in flight, rebuild now)
                    unsent.insert(0, point)
                    if not inflight:
                        assert isinstance(self.ex, _ProcessExecutor)
                        self.ex.rebuild()
                    break
                self.p.running = len(inflight)
            if not inflight:
                if self.isolating:
                    self.isolating = False
                    continue
                if exhausted and not unsent:
                    break
                continue
            for fut in self.ex.wait_any(list(inflight), timeout=1.0):
                point = inflight.pop(fut)
                try:
                    outcome = self.ex.result(fut)
                except BrokenProcessPool:
                    self._pool_broke(point, inflight)
                    break
                except Exception as exc:  # noqa: BLE001 - run_point itself never raises
                    if isinstance(self.ex, _DaskExecutor) and type(exc).__name__ != \
                            "KilledWorker":
                        # cancelled / connection lost: the cluster failed, not the point
                        why = " ".join(str(exc).split())
                        raise SweepError(
                            f"the Dask cluster failed ({type(exc).__name__}: {why}); every "
                            f"finished point is saved in {self.db.path}; re-run to resume") \
                            from None
                    outcome = {"key": point.key, "metrics": None,
                               "error": f"{type(exc).__name__}: {exc}", "traceback": None,
                               "wall_s": None, "host": None}
                self.p.running = len(inflight)
                self.record(point, outcome)
            self.emit()

    def _pool_broke(self, point: Point, inflight: dict[Any, Point]) -> None:
        """A worker process died. Alone in flight: that point killed it. Otherwise re-run every
        point that was in flight one at a time to find the culprit."""
        assert isinstance(self.ex, _ProcessExecutor)
        others = []
        for fut, pt in inflight.items():  # points that finished before the break keep results
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.record(pt, fut.result())
            else:
                others.append(pt)
        inflight.clear()
        self.ex.rebuild()
        if self.isolating or not others:
            self.record(point, {"key": point.key, "metrics": None, "traceback": None,
                                "error": "worker process died while evaluating this point "
                                         "(crash, out of memory or killed)",
                                "wall_s": None, "host": None})
            self.crash_suspects = others + self.crash_suspects
        else:
            self.crash_suspects = [point] + others + self.crash_suspects
        self.isolating = bool(self.crash_suspects)
        self.p.running = 0

    # -------------------------------------------------------------- searches
    def run_listed(self, params_list: list[dict[str, Any]]) -> None:
        """Evaluate the listed points; each is resolved (config validated, key hashed) only
        when the evaluation loop needs the next one, so the first point starts at once."""
        self.p.total = len(params_list)
        self.emit()
        seen: set[str] = set()

        def todo() -> Iterator[Point]:
            for params in params_list:
                point = resolve_point(self.spec, params)
                if point.key in seen or not self.needs_run(point):
                    self.p.skipped += 1
                    continue
                seen.add(point.key)
                yield point

        self.evaluate(todo())

    def run_optuna(self) -> None:
        import optuna

        optuna.logging.set_verbosity(logging.WARNING)
        spec = self.spec
        dists = optuna_distributions(spec)
        count = spec.search.count or 0
        self.p.total = count
        # replay what the database already knows (earlier runs), in id order
        known = []
        for row in self.db.rows(with_config=False):
            if row["status"] == "failed" and self.retry_failed:
                continue
            trial = self._frozen_trial(row, dists)
            if trial is not None:
                known.append(trial)
        # A resumed study must not restart the sampler's random stream (it would ask the
        # replayed points again): its seed depends on how many trials were replayed.
        study = optuna.create_study(directions=spec.directions,
                                    sampler=self._sampler(spec.search.seed + 7919 * len(known)))
        for trial in known:
            study.add_trial(trial)
        self.p.skipped += len(known)
        self.emit()
        asked = self.p.skipped
        while asked < count:
            k = min(spec.search.batch_size, count - asked)
            trials = [study.ask(dists) for _ in range(k)]
            asked += k
            points = [resolve_point(spec, dict(t.params)) for t in trials]
            todo: dict[str, Point] = {}
            for pt in points:
                if pt.key in todo or not self.needs_run(pt):
                    self.p.skipped += 1  # asked again: the database has its result
                    continue
                todo[pt.key] = pt
            self.evaluate(todo.values())
            rows = self.db.get([p.key for p in points])
            for t, pt in zip(trials, points):
                row = rows.get(pt.key)
                values = objective_values(spec, row["metrics"]) if row and \
                    row["status"] == "done" else None
                if values is None:
                    study.tell(t, state=optuna.trial.TrialState.FAIL)
                else:
                    amounts, _ = check_constraints(spec.constraints, row["metrics"])
                    for i, a in enumerate(amounts):  # > 0: violated (optuna's convention)
                        t.set_constraint(str(i), min(a, 1e300))
                    study.tell(t, values)
            self.emit()

    def _sampler(self, seed: int) -> Any:
        import optuna

        spec = self.spec
        kind = spec.search.sampler
        if kind == "auto":
            kind = "tpe" if len(spec.objectives) == 1 else "nsga2"
        # constraints reach the samplers through each trial's constraint values
        # (Trial.set_constraint / create_trial(constraints=...), optuna >= 5)
        if kind == "tpe":
            return optuna.samplers.TPESampler(seed=seed, constant_liar=False)
        return optuna.samplers.NSGAIISampler(
            seed=seed, population_size=max(4, min(50, (spec.search.count or 50) // 4)))

    def _frozen_trial(self, row: dict[str, Any], dists: dict[str, Any]) -> Any:
        """An optuna trial of a database row, or None when it is outside the current space."""
        import optuna

        params = row["params"]
        if set(params) != set(dists):
            return None
        try:
            for k, v in params.items():
                if not dists[k]._contains(dists[k].to_internal_repr(v)):
                    return None
        except (ValueError, TypeError):
            return None
        values = objective_values(self.spec, row["metrics"]) if row["status"] == "done" \
            else None
        if values is None:
            return optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params=params,
                                             distributions=dists)
        amounts, _ = check_constraints(self.spec.constraints, row["metrics"])
        return optuna.trial.create_trial(
            params=params, distributions=dists, values=values,
            constraints={str(i): min(a, 1e300) for i, a in enumerate(amounts)} or None)


def optuna_distributions(spec: SweepSpec) -> dict[str, Any]:
    """Optuna distribution of every parameter: a list is categorical, an integer range
    ``IntDistribution``, a float range ``FloatDistribution`` (step and log as given)."""
    from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                      IntDistribution)

    out: dict[str, Any] = {}
    for k, v in spec.parameters.items():
        if isinstance(v, list):
            out[k] = CategoricalDistribution(v)
        elif isinstance(v, RangeSpec) and v.is_int:
            out[k] = IntDistribution(int(v.low), int(v.high), step=int(v.step or 1))
        elif v.num is not None:
            from archsim.sweep.spec import range_values

            out[k] = CategoricalDistribution(range_values(v))
        else:
            out[k] = FloatDistribution(float(v.low), float(v.high), log=v.log,
                                       step=None if v.step is None else float(v.step))
    return out


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, jobs: int | None = None,
              dask_address: str | Any | None = None, retry_failed: bool = False,
              progress: Callable[[Progress], None] | None = None,
              spec_text: str | None = None) -> SweepSummary:
    """Run (or resume) a sweep and store every point in ``out_dir/sweep.sqlite``.

    Args:
        spec: a validated :class:`SweepSpec` (:func:`archsim.sweep.spec.load_spec`).
        out_dir: results directory (created if missing).
        jobs: local worker processes (default: CPU count; 1 = in-process).
        dask_address: ``tcp://HOST:8786`` of an existing Dask scheduler, or a
            ``distributed.Client``; when given, ``jobs`` is ignored.
        retry_failed: evaluate again the points recorded as ``failed``.
        progress: called with the :class:`Progress` counters after every finished point.
        spec_text: the spec's YAML (stored in the database for reports); read from
            ``spec.source`` when omitted.

    Returns:
        :class:`SweepSummary`.

    Raises:
        SweepError: the directory is locked by another running sweep, the database cannot be
            written, or the Dask scheduler is unreachable.
    """
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SweepError(f"{out}: cannot create the results directory: {exc.strerror}") from None
    lock = _DirLock(out)
    executor: _Executor | None = None
    aborted = True
    try:
        executor = make_executor(jobs, dask_address)
        co = _Coordinator(spec, out, executor, retry_failed, progress)
        if spec_text is None and spec.source and Path(spec.source).exists():
            spec_text = Path(spec.source).read_text()
        co.db.set_meta(spec_json=json.dumps(spec.model_dump(mode="json", by_alias=True)),
                       spec_yaml=spec_text or "", spec_path=spec.source,
                       spec_fingerprint=spec.fingerprint(), tool_version=co.version)
        if spec.search.kind == "grid":
            co.run_listed(list(grid_points(spec)))
        elif spec.search.kind == "random":
            co.run_listed(random_points(spec))
        else:
            co.run_optuna()
        co.p.running = 0
        co.emit()
        aborted = False
        return SweepSummary(out, co.p, co.evaluated, time.perf_counter() - co.t0,
                            executor.name, co.version, co.failures)
    finally:
        if executor is not None:
            executor.close(abort=aborted)
        lock.release()


__all__ = ["run_sweep", "Progress", "SweepSummary", "make_executor", "tool_version",
           "check_constraints", "objective_values", "optuna_distributions", "LOCK_NAME"]
