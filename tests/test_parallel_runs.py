"""Worker processes (:mod:`archsim.workers`) for ``archsim compare`` and the paper grid: the
same results as one process, a point that does not fit still recorded, errors of a worker
raised in the caller with their type and message, and the flags checked."""
from __future__ import annotations

import os

import pytest

from archsim import serving as sv
from archsim.ablation import run_ablation
from archsim import workers
from archsim.cli import main
from archsim.errors import ArchsimError


def test_compare_on_two_workers_equals_one_process():
    kw = dict(batch_size=8, systems=["neupims", "npu", "gpu"])
    one = sv.compare_systems("tiny-gpt", jobs=1, **kw)
    two = sv.compare_systems("tiny-gpt", jobs=2, **kw)
    assert list(two) == list(one) == ["neupims", "npu", "gpu"]
    for k in one:
        assert two[k].tokens_per_s == one[k].tokens_per_s
        assert two[k].cycles_per_iteration == one[k].cycles_per_iteration
        assert two[k].energy_j == one[k].energy_j


def test_paper_grid_on_two_workers_equals_one_process_does_not_fit_included():
    # memory.org.rows=16: the 64-request point does not fit the PIM systems (the compiler's
    # CapacityError crosses the process boundary with its fields)
    kw = dict(models=["tiny-gpt"], datasets=["sharegpt"], batches=[8, 64],
              systems=["neupims", "npu", "gpu"], overrides=["memory.org.rows=16"])
    seen: list[tuple] = []
    one = sv.paper_grid(jobs=1, **kw)
    two = sv.paper_grid(jobs=2, progress=lambda row: seen.append((row["batch"], row)), **kw)
    assert two == one
    assert sorted(b for b, _ in seen) == [8, 64]
    assert one[1]["does_not_fit"]["neupims"]["resource"] == "KV rows of the device"
    assert set(one[1]["tokens_per_s"]) == {"npu", "gpu"}


def test_a_failing_task_raises_its_own_error_in_the_caller():
    with pytest.raises(ArchsimError, match="tpu"):
        workers.run_tasks(sv.resolve_system, [("gpu",), ("tpu",), ("npu",)], 2,
                          lambda i, r: None)
    done = []
    workers.run_tasks(int, [("1",), ("2",), ("3",)], 2, lambda i, r: done.append((i, r)),
                      order=[2, 0])
    assert sorted(done) == [(0, 1), (2, 3)]
    with pytest.raises(ValueError):
        workers.process_pool(0)


@pytest.mark.parametrize("args,message", [
    (["compare", "--model", "tiny-gpt", "--batch", "8", "--jobs", "0"], "--jobs 0: must be >= 1"),
    (["compare", "--ablation", "--model", "tiny-gpt", "--jobs", "0"], "--jobs 0: must be >= 1"),
])
def test_bad_jobs_is_one_line(capsys, args, message):
    assert main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_with_the_jit_cache_cold_one_npu_task_runs_here_first(monkeypatch):
    import os

    from archsim.serving import run_simulations

    monkeypatch.setattr("archsim.system.kernels_cached", lambda: False)
    gpu, npu = (sv.resolve_system(s)[1] for s in ("gpu", "npu"))
    got: dict[int, int] = {}
    run_simulations(os.getpid, [()] * 4, [npu, npu, npu, gpu], 2, got.__setitem__)
    # the last NPU task of the order runs in this process (its JIT note reaches the CLI's
    # listener), the others on the workers
    assert got[2] == os.getpid() and os.getpid() not in (got[0], got[1], got[3])


def test_ablation_on_two_workers_equals_one_process():
    from workloads.models import get_model

    model = get_model("tiny-gpt")
    batch = sv.make_batch(model, 8, "sharegpt", 0)
    one, two = (run_ablation(model, batch, jobs=j) for j in (1, 2))
    assert [(r.step.name, r.tokens_per_s, r.step_gain) for r in two] == \
        [(r.step.name, r.tokens_per_s, r.step_gain) for r in one]


def _fail_after(seconds: float, tag: str) -> None:
    import time

    time.sleep(seconds)
    raise ValueError(tag)


def test_the_error_raised_is_that_of_the_first_failing_task_in_order():
    # the first task in order fails last on the workers: its error is raised, as one process
    # would raise it, not the one that arrived first
    tasks = [(0.5, "first in order"), (0.0, "second in order"), (0.0, "third")]
    for jobs in (1, 2):
        with pytest.raises(ValueError, match="first in order"):
            workers.run_tasks(_fail_after, tasks, jobs, lambda i, r: None)
    with pytest.raises(ValueError, match="second in order"):
        workers.run_tasks(_fail_after, tasks, 2, lambda i, r: None, order=[1, 0, 2])


def test_fresh_workers_run_each_task_in_a_new_process():
    got: dict[int, int] = {}
    workers.run_tasks(os.getpid, [()] * 6, 2, got.__setitem__, fresh=True)
    assert len(set(got.values())) == 6 and os.getpid() not in got.values()
    reused: dict[int, int] = {}
    workers.run_tasks(os.getpid, [()] * 6, 2, reused.__setitem__)
    assert len(set(reused.values())) <= 2


def test_a_worker_that_dies_is_one_clear_error():
    from archsim.errors import WorkerDied

    with pytest.raises(WorkerDied, match="worker process died"):
        workers.run_tasks(os._exit, [(1,), (1,), (1,)], 2, lambda i, r: None)
    # many tasks: the pool often breaks while they are still being submitted (the submit raises)
    with pytest.raises(WorkerDied, match="worker process died"):
        workers.run_tasks(os._exit, [(1,)] * 300, 2, lambda i, r: None)
