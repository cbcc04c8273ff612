"""Sweep results: export round trips, Pareto front, report tables and plots, CLI messages."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from archsim.cli import main
from archsim.sweep.analysis import (export_results, load_results, make_report, non_dominated,
                                    pareto_front, read_results_file)
from archsim.sweep.runner import run_sweep
from archsim.sweep.spec import load_spec
from test_sweep_helpers import write_spec


@pytest.fixture(scope="module")
def toy_sweep(tmp_path_factory):
    """A finished toy sweep: n_arrays × multipliers, one failing column (n_arrays == 3) and an
    infeasible corner (area constraint)."""
    d = tmp_path_factory.mktemp("toy")
    spec = load_spec(write_spec(d / "toy.yaml", arrays=[1, 2, 3, 4, 16], mults=[8, 16],
                                constraints=["area_npu_arrays_mm2 <= 30"]))
    run_sweep(spec, d / "out", jobs=1)
    return spec, d / "out"


def test_non_dominated_keeps_the_trade_off_and_ties():
    y = np.array([[1.0, 5.0], [2.0, 4.0], [1.5, 3.0], [2.0, 4.0], [0.5, 5.0]])
    assert non_dominated(y).tolist() == [True, True, False, True, False]


def test_pareto_front_of_the_toy_sweep(toy_sweep):
    spec, out = toy_sweep
    df = load_results(out)
    assert sorted(df["status"].value_counts().items()) == [("done", 6), ("failed", 2),
                                                           ("infeasible", 2)]
    front = pareto_front(df, spec)
    # tokens_per_s = 100 a + 10 m (max), energy = 1000 / a + m (min) over the feasible
    # a in {1, 2, 4} (a = 16 exceeds the area bound, a = 3 fails): (4, 8) beats every a < 4
    # point in both; (4, 16) trades 8 pJ for 80 tokens/s
    assert front["status"].eq("done").all() and front["feasible"].all()
    pairs = set(zip(front["param.npu.n_arrays"], front["param.pim.multipliers_per_bank"]))
    assert pairs == {(4, 8), (4, 16)}
    assert front["metric.tokens_per_s"].is_monotonic_decreasing


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_round_trips(toy_sweep, tmp_path, fmt):
    _, out = toy_sweep
    path = export_results(out, fmt, tmp_path / f"r.{fmt}")
    back = read_results_file(path)
    pd.testing.assert_frame_equal(back, load_results(out))
    assert {"param.npu.n_arrays", "metric.tokens_per_s", "error", "wall_s",
            "tool_version"} <= set(back.columns)
    assert back.loc[back["status"] == "failed", "error"].str.contains("injected fault").all()


def test_report_writes_the_pngs(toy_sweep, tmp_path):
    rep = make_report(toy_sweep[1], plots_dir=tmp_path)
    assert [p.name for p in rep.plots] == ["pareto.png", "sensitivity.png", "perf_per_watt.png"]
    for p in rep.plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    assert rep.counts == {"done": 6, "failed": 2, "infeasible": 2, "feasible": 6}
    assert list(rep.best) == ["tokens_per_s", "energy_per_token_uj"]
    assert rep.best["tokens_per_s"]["param.npu.n_arrays"].iloc[0] == 4


def test_perf_per_watt_front_is_the_throughput_efficiency_trade_off(toy_sweep):
    from archsim.sweep.analysis import perf_per_watt_front

    df = load_results(toy_sweep[1])
    front = perf_per_watt_front(df)
    # feasible a in {1, 2, 4}, m in {8, 16}: (4, 16) is the fastest, (4, 8) the most efficient
    got = sorted(zip(front["param.npu.n_arrays"], front["param.pim.multipliers_per_bank"]))
    assert got == [(4, 8), (4, 16)]


def test_cli_run_report_export(tmp_path, capsys, monkeypatch):
    spec = write_spec(tmp_path / "toy.yaml", arrays=[1, 2], mults=[8])
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "2 points evaluated (2 ok), 0 failed" in text and "points/min" in text
    assert main(["sweep", str(spec), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    assert "2 already in the database" in capsys.readouterr().out
    assert main(["sweep", "report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Pareto front" in text and "pareto.png" in text and (out / "sensitivity.png").exists()
    assert main(["sweep", "export", str(out), "--parquet", "-o", str(tmp_path / "x.parquet")]) \
        == 0
    assert (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("argv,fragment", [
    (["sweep", "export", "{out}"], "give exactly one of --csv or --parquet"),
    (["sweep", "report", "{tmp}/nowhere"], "no sweep results here"),
    (["sweep", "{tmp}/bad.yaml", "--out", "{out}"], "bad.yaml:3: objectives.0.goal"),
    (["sweep", "{tmp}/missing.yaml", "--out", "{out}"], "cannot read sweep spec"),
])
def test_cli_user_errors_are_one_line(tmp_path, capsys, argv, fragment):
    (tmp_path / "bad.yaml").write_text("name: b\nobjectives:\n  - {metric: tokens_per_s, "
                                       "goal: up}\n")
    out = tmp_path / "out"
    write_spec(tmp_path / "toy.yaml", arrays=[1], mults=[8])
    main(["sweep", str(tmp_path / "toy.yaml"), "--out", str(out), "--jobs", "1", "--quiet"])
    capsys.readouterr()
    args = [a.format(out=out, tmp=tmp_path) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("archsim: error:") and fragment in err and "\n" not in err
