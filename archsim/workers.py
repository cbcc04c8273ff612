"""Local worker processes for independent simulations: a sweep's points, the paper grid's cells,
the systems of ``archsim compare``.

:func:`process_pool` starts a ``concurrent.futures.ProcessPoolExecutor`` whose workers never
fork the calling process (which may hold threads — a progress bar — or open database
handles): they fork from a clean fork server that imported the modules of ``preload`` once
(``forkserver``, POSIX: a worker starts in milliseconds instead of a second of imports), else
they start fresh (``spawn``). :func:`stop_pool` shuts one down, killing its workers when asked;
:func:`run_tasks` runs a list of independent tasks on one (or in this process).

Workers die with the process that started them, however it dies. :func:`die_with_parent`
arranges that the calling process ends when its parent does: on Linux the kernel sends it
SIGKILL (``prctl(PR_SET_PDEATHSIG)``, nothing to run in Python, so it works while the process
computes), elsewhere a daemon thread polls the parent pid once a second. Both the fork server
and the workers need it, because a SIGKILL of the coordinator runs no clean-up and the pool's
own pipes stay open in every worker (each holds both ends of its call queue), so nothing else
would ever tell them:

* the fork server imports this module at its start (it is always first in the server's preload
  list), which calls :func:`die_with_parent` for the server: it dies with the coordinator;
* every worker calls it from the pool's initializer: it dies with the fork server.

Importing this module anywhere else does nothing (the call is made only inside the fork server
process, recognised by its command line).
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Sequence


def die_with_parent() -> None:
    """End this process when its parent exits (at once if the parent is already gone)."""
    parent = os.getppid()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0   # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="archsim-parent-watch", daemon=True).start()
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def usable_cpus() -> int:
    """The processors this process may run on (its affinity mask; the CPU count elsewhere)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def process_pool(jobs: int, preload: Sequence[str] = (),
                 fresh: bool = False) -> cf.ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes forked from a fork server that imported this module
    and the modules named in ``preload`` (``spawn`` where there is no fork server). Workers die
    with the caller (module docstring). With ``fresh`` each task runs in a new worker (the
    pool's ``max_tasks_per_child=1``; a fork from the server takes milliseconds): a worker that
    ran a large simulation keeps part of its peak (CPython's small-object allocator returns an
    arena to the system only when every block in it is free, and a few long-lived objects
    made during the run pin hundreds of them: ~0.2-0.4 GB after a GPT3-175B grid cell), which
    a reused worker would add to the next task's peak. Raises ValueError for ``jobs < 1``."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__, *preload])
    else:
        ctx = multiprocessing.get_context("spawn")
    return cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=die_with_parent,
                                  max_tasks_per_child=1 if fresh else None)


def stop_pool(pool: cf.ProcessPoolExecutor, abort: bool = False) -> None:
    """Shut ``pool`` down: wait for the running tasks, or with ``abort`` cancel what has not
    started and terminate the workers (a Ctrl-C, a broken pool)."""
    procs = list((getattr(pool, "_processes", None) or {}).values()) if abort else []
    pool.shutdown(wait=not abort, cancel_futures=True)
    for p in procs:  # our own worker processes, by handle
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)


def run_tasks(fn: Callable[..., Any], tasks: Sequence[tuple], jobs: int,
              done: Callable[[int, Any], None], *, order: Sequence[int] | None = None,
              preload: Sequence[str] = (), fresh: bool = False) -> None:
    """``fn(*tasks[i])`` for every index i of ``order`` (default: every task, as given), calling
    ``done(i, result)`` as each finishes.

    ``jobs`` 1 (or a single task) runs them in this process, in that order. Otherwise on
    ``min(jobs, tasks run)`` workers of :func:`process_pool` (``fn`` and the tasks must pickle;
    ``fresh``: a new worker for each task, see there), submitted in that order (e.g. the
    costliest first: a pool's makespan is set by the tasks that start last). A task that raises stops the run with the error the serial run would
    raise: that of the first failing task in ``order`` (the tasks before it are waited for,
    those after it cancelled or terminated), with its type and message. Ctrl-C terminates the
    workers and propagates. A script that calls this with ``jobs > 1`` guards its entry point
    (``if __name__ == "__main__":``): the fork server imports the main module again
    (``docs/sweeps.md``).

    Raises:
        WorkerDied: a worker process ended without a result (killed, e.g. out of memory, or it
            could not start).
    """
    order = list(range(len(tasks)) if order is None else order)
    if jobs <= 1 or len(order) <= 1:
        for i in order:
            done(i, fn(*tasks[i]))
        return
    from concurrent.futures.process import BrokenProcessPool

    from archsim.errors import WorkerDied

    pos = {i: k for k, i in enumerate(order)}
    pool = process_pool(min(jobs, len(order)), preload, fresh)
    first_fail: tuple[int, BaseException] | None = None     # (position in order, error)
    try:
        futs = {pool.submit(fn, *tasks[i]): i for i in order}
        waiting = set(futs)
        for f in cf.as_completed(futs):
            waiting.discard(f)
            k = pos[futs[f]]
            needed = not f.cancelled() and (first_fail is None or k < first_fail[0])
            if needed:
                try:
                    r = f.result()
                except BrokenProcessPool:
                    raise                         # the worker's death, below
                except Exception as exc:          # noqa: BLE001 - re-raised below, in order
                    first_fail = (k, exc)
                    for g in waiting:
                        if pos[futs[g]] > k:
                            g.cancel()
                else:
                    done(futs[f], r)
            if first_fail is not None and not any(pos[futs[g]] < first_fail[0]
                                                  for g in waiting):
                raise first_fail[1]
    except BrokenProcessPool:
        # a worker died: seen by a result, or by a submit when it died before all were queued
        stop_pool(pool, abort=True)
        raise WorkerDied(
            "a worker process died without a result (killed, e.g. out of memory, "
            f"or it could not start) while running {len(order)} simulations on "
            f"{min(jobs, len(order))} workers; run fewer at once (--jobs / jobs=; 1 "
            "runs them in this process). A script using worker processes must "
            "guard its entry point with if __name__ == '__main__':") from None
    except BaseException:
        stop_pool(pool, abort=True)
        raise
    stop_pool(pool)


def in_fork_server() -> bool:
    """True in a ``multiprocessing`` fork server (``python -c 'from multiprocessing.forkserver
    import main; ...'``), where this module is preloaded."""
    return sys.argv[:1] == ["-c"] and "multiprocessing.forkserver import main" in \
        " ".join(getattr(sys, "orig_argv", ()))


if in_fork_server():
    die_with_parent()

__all__ = ["die_with_parent", "usable_cpus", "process_pool", "stop_pool", "run_tasks",
           "in_fork_server"]
