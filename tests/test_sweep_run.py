"""Running sweeps: process pool vs Dask give identical results, resume after a kill loses and
recomputes nothing, faults become failed rows, optuna searches are deterministic."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from archsim.sweep.db import ResultsDB
from archsim.sweep.errors import SweepError
from archsim.sweep.runner import run_sweep
from archsim.sweep.spec import load_spec
from test_sweep_helpers import LOG_ENV, SLEEP_ENV, log_lines, write_spec

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _rows(out: Path) -> dict[str, dict]:
    with ResultsDB(out) as db:
        return {r["key"]: r for r in db.rows()}


def _comparable(rows: dict[str, dict]) -> dict[str, tuple]:
    """What must not depend on the executor: status, error, metrics (minus wall times)."""
    out = {}
    for k, r in rows.items():
        m = {a: b for a, b in (r["metrics"] or {}).items() if a != "eval_wall_s"}
        out[k] = (r["status"], r["feasible"], r["error"], m, r["params"])
    return out


GPU_SPEC = """\
name: gpu-small
workload: {system: gpu, model: gpt3-7b, dataset: sharegpt, seed: 0}
parameters:
  batch: [16, 64]
  gpu.calibrated.weight_bw_efficiency: [0.6, 0.8]
  gpu.memory_bytes: [2147483648, 42949672960]   # 2 GiB: the weights alone do not fit
objectives:
  - {metric: tokens_per_s, goal: maximize}
  - {metric: seconds_per_iteration, goal: minimize}
"""


def test_dask_local_cluster_and_process_pool_give_identical_results(tmp_path):
    distributed = pytest.importorskip("distributed")
    spec_path = tmp_path / "gpu.yaml"
    spec_path.write_text(GPU_SPEC)
    spec = load_spec(spec_path)
    pool = run_sweep(spec, tmp_path / "pool", jobs=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        dask = run_sweep(spec, tmp_path / "dask", dask_address=cluster.scheduler_address)
    assert dask.executor.startswith("dask(tcp://") and pool.executor == "processes(2)"
    a, b = _rows(tmp_path / "pool"), _rows(tmp_path / "dask")
    assert len(a) == 8 and _comparable(a) == _comparable(b)
    done = [r for r in a.values() if r["status"] == "done"]
    assert {r["feasible"] for r in done} == {True, False}
    # 2 GiB points: not simulated, infeasible through the implied KV-capacity constraint
    small = [r for r in done if r["params"]["gpu.memory_bytes"] == 2147483648]
    assert len(small) == 4 and all(not r["feasible"] and "tokens_per_s" not in r["metrics"]
                                   and "weights" in r["metrics"]["capacity_note"] for r in small)
    assert all(r["metrics"]["tokens_per_s"] > 0 for r in done if r["feasible"])


def _coordinator_cmd(spec: Path, out: Path, jobs: int = 2) -> list[str]:
    code = ("import sys; from archsim.cli import main; "
            f"sys.exit(main(['sweep', {str(spec)!r}, '--out', {str(out)!r}, "
            f"'--jobs', '{jobs}', '--quiet']))")
    return [sys.executable, "-c", code]


def _done_count(out: Path) -> int:
    try:
        con = sqlite3.connect(out / "sweep.sqlite", timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM points WHERE status = 'done'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_killed_sweep_resumes_without_recomputing_or_losing_points(tmp_path, monkeypatch):
    spec_path = write_spec(tmp_path / "toy.yaml", arrays=[1, 2, 3, 4, 6, 8],
                           mults=[8, 16, 32], workload={"system": "neupims",
                                                        "check_capacity": False})
    out, log = tmp_path / "out", tmp_path / "evals.log"
    env = dict(os.environ, PYTHONPATH=f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               **{LOG_ENV: str(log), SLEEP_ENV: "0.25"})
    proc = subprocess.Popen(_coordinator_cmd(spec_path, out), env=env, cwd=tmp_path,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 40
        while _done_count(out) < 4:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "sweep made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the coordinator and its workers, all at once
        proc.wait(timeout=10)
    before = _rows(out)
    finished = {k: r for k, r in before.items() if r["status"] in ("done", "failed")}
    assert 4 <= len(finished) < 18, "the kill should land midway"
    evaluated_before = {k for tag, k in log_lines(log) if tag == "start"}

    # resume in-process, counting evaluations from here on
    monkeypatch.setenv(LOG_ENV, str(log))
    monkeypatch.setenv(SLEEP_ENV, "0")
    log.write_text("")
    summary = run_sweep(load_spec(spec_path), out, jobs=1)
    after = _rows(out)
    again = [k for tag, k in log_lines(log) if tag == "start"]
    assert len(after) == 18 and summary.progress.skipped == len(finished)
    assert not set(again) & set(finished), "a finished point was recomputed"
    assert len(again) == len(set(again)) == 18 - len(finished)
    for k, r in finished.items():  # none lost, none rewritten
        assert after[k]["id"] == r["id"] and after[k]["finished_at"] == r["finished_at"]
        assert after[k]["attempts"] == 1 and after[k]["metrics"] == r["metrics"]
    assert evaluated_before  # the first run really evaluated points before the kill
    # the injected fault (n_arrays == 3) is a failed row with its message, not a crash
    failed = [r for r in after.values() if r["status"] == "failed"]
    assert len(failed) == 3 and all("injected fault at n_arrays=3" in r["error"] and
                                    "RuntimeError" in r["traceback"] for r in failed)
    assert all(r["params"]["npu.n_arrays"] == 3 for r in failed)


def test_failed_points_are_retried_only_with_retry_failed(tmp_path, monkeypatch):
    log = tmp_path / "evals.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    spec = load_spec(write_spec(tmp_path / "toy.yaml", arrays=[2, 3], mults=[8]))
    first = run_sweep(spec, tmp_path / "out", jobs=1)
    assert (first.progress.done, first.progress.failed) == (1, 1)
    log.write_text("")
    second = run_sweep(spec, tmp_path / "out", jobs=1)
    assert second.evaluated == 0 and log_lines(log) == []
    third = run_sweep(spec, tmp_path / "out", jobs=1, retry_failed=True)
    assert third.evaluated == 1 and len(log_lines(log)) == 1
    rows = list(_rows(tmp_path / "out").values())
    assert sorted(r["attempts"] for r in rows) == [1, 2]


def test_dying_worker_process_fails_only_its_own_point(tmp_path):
    spec = load_spec(write_spec(tmp_path / "toy.yaml", arrays=[1, 2, 4, 5, 6],
                                mults=[8], evaluator="test_sweep_helpers:crash_evaluate"))
    summary = run_sweep(spec, tmp_path / "out", jobs=2)
    rows = _rows(tmp_path / "out").values()
    by_arrays = {r["params"]["npu.n_arrays"]: r for r in rows}
    assert by_arrays[5]["status"] == "failed"
    assert "worker process died" in by_arrays[5]["error"]
    assert all(by_arrays[a]["status"] == "done" for a in (1, 2, 4, 6))
    assert summary.progress.failed == 1


def test_second_coordinator_on_the_same_directory_is_refused(tmp_path):
    from archsim.sweep.runner import _DirLock

    (tmp_path / "out").mkdir()
    lock = _DirLock(tmp_path / "out")
    try:
        spec = load_spec(write_spec(tmp_path / "toy.yaml", arrays=[1], mults=[8]))
        with pytest.raises(SweepError, match="another sweep is running on this directory"):
            run_sweep(spec, tmp_path / "out", jobs=1)
    finally:
        lock.release()


def test_static_constraint_skips_the_simulation(tmp_path, monkeypatch):
    log = tmp_path / "evals.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    spec = load_spec(write_spec(tmp_path / "toy.yaml", arrays=[4, 16], mults=[8],
                                constraints=["area_proxy_mm2 <= 560"]))
    summary = run_sweep(spec, tmp_path / "out", jobs=1)
    rows = {r["params"]["npu.n_arrays"]: r for r in _rows(tmp_path / "out").values()}
    assert rows[16]["status"] == "infeasible" and rows[16]["feasible"] is False
    assert "area_proxy_mm2 <= 560" in rows[16]["violations"][0]
    assert rows[4]["status"] == "done" and rows[4]["feasible"] is True
    assert summary.evaluated == 1 and len(log_lines(log)) == 2  # start + end of one point


def test_optuna_search_is_deterministic_and_resumes(tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    log = tmp_path / "evals.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    search = {"kind": "optuna", "seed": 7, "count": 10, "batch_size": 3}
    kw = dict(parameters={"npu.n_arrays": {"low": 1, "high": 16},
                          "pim.multipliers_per_bank": [8, 16, 32]},
              constraints=["area_proxy_mm2 <= 1500", "energy_per_token_uj <= 400"])
    spec = load_spec(write_spec(tmp_path / "o.yaml", search=search, **kw))
    run_sweep(spec, tmp_path / "a", jobs=1)
    run_sweep(spec, tmp_path / "b", jobs=1)
    a, b = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert _comparable(a) == _comparable(b) and 1 <= len(a) <= 10
    assert {r["feasible"] for r in a.values() if r["status"] == "done"} == {True, False}
    assert any(r["status"] == "infeasible" for r in a.values())  # area bound, not run
    # more trials in the same directory: the first ones are replayed, not recomputed
    log.write_text("")
    more = load_spec(write_spec(tmp_path / "o.yaml", search={**search, "count": 16}, **kw))
    summary = run_sweep(more, tmp_path / "a", jobs=1)
    again = {k for tag, k in log_lines(log) if tag == "start"}
    assert not again & set(a) and summary.progress.skipped >= 10
    assert len(_rows(tmp_path / "a")) > len(a)


def test_a_pool_that_breaks_between_two_submits_loses_no_point(tmp_path, monkeypatch):
    """A worker can die after the last wait and before the next submit; the pool then refuses
    the submit itself (BrokenProcessPool from submit, not from a result): that point never
    ran and must be sent again to the rebuilt pool (a race the full suite hit under load)."""
    from concurrent.futures.process import BrokenProcessPool

    import archsim.sweep.runner as runner

    class Flaky(runner._ProcessExecutor):
        refused = 0

        def submit(self, point):
            if Flaky.refused < 2 and point.params["npu.n_arrays"] in (2, 6):
                Flaky.refused += 1
                raise BrokenProcessPool("a child process terminated abruptly")
            return super().submit(point)

    monkeypatch.setattr(runner, "make_executor", lambda jobs=None, dask_address=None:
                        Flaky(2))
    spec = load_spec(write_spec(tmp_path / "toy.yaml", arrays=[1, 2, 4, 6], mults=[8]))
    summary = run_sweep(spec, tmp_path / "out", jobs=2)
    assert Flaky.refused == 2
    rows = _rows(tmp_path / "out").values()
    assert sorted(r["params"]["npu.n_arrays"] for r in rows if r["status"] == "done") == \
        [1, 2, 4, 6]
    assert summary.progress.failed == 0 and summary.evaluated == 4
