"""SLO attainment, goodput and the per-request CSV of a serving run (``archsim run --serve
--slo-ttft/--slo-tpot/--csv``), and the serving plots."""
from __future__ import annotations

import json

import pytest

from archsim.cli import main
from archsim.results import RequestRecord, ServingResult
from archsim.slo import CSV_COLUMNS, meets, slo_report, write_request_csv

SERVE = ["run", "--system", "gpu", "--model", "tiny-gpt", "--serve", "--num-requests", "6",
         "--dataset", "alpaca", "--quiet"]


def _result(records):
    return ServingResult("s", "m", "all", "fcfs", "t", records, makespan_s=10.0, iterations=5,
                         iterations_by_source={}, iterations_by_phase={}, mean_batch_size=1.0,
                         max_batch_size=2, kv_capacity_tokens=100, peak_kv_tokens=10)


def test_attainment_and_goodput_count_the_requests_that_meet_both_targets():
    recs = [RequestRecord(0, 4, 3, 0.0, 0.0, 0.5, 1.5, 0, 3, 3),     # ttft .5, tpot .5
            RequestRecord(1, 4, 5, 0.0, 0.0, 2.0, 2.4, 1, 4, 4),     # ttft 2, tpot .1
            RequestRecord(2, 4, 1, 1.0, 1.0, 1.2, 1.2, 2, 2, 1)]     # ttft .2, no tpot
    res = _result(recs)
    r = slo_report(res, 1.0, 0.2)
    assert r["ttft_attainment"] == pytest.approx(2 / 3)    # requests 0 and 2
    assert r["tpot_attainment"] == pytest.approx(2 / 3)    # 1 and 2 (2 has no TPOT)
    assert r["requests_met"] == 1 and r["attainment"] == pytest.approx(1 / 3)   # only 2
    assert r["goodput_requests_per_s"] == pytest.approx(0.1)
    assert r["goodput_tokens_per_s"] == pytest.approx(0.1)   # request 2: 1 token / 10 s
    assert slo_report(res, None, None)["attainment"] == 1.0
    assert meets(recs[0], 0.5, None) and not meets(recs[0], 0.49, None)


def test_the_csv_has_one_row_per_request_and_loads_in_pandas(tmp_path):
    pd = pytest.importorskip("pandas")
    recs = [RequestRecord(i, 4, 2 + i, 0.0, 0.0, 0.1 * (i + 1), 1.0, 0, 3, 4) for i in range(4)]
    p = write_request_csv(_result(recs), tmp_path / "r.csv", 0.25, None)
    df = pd.read_csv(p)
    assert list(df.columns) == list(CSV_COLUMNS) and len(df) == 4
    assert df["meets_slo"].tolist() == [True, True, False, False]
    assert df["ttft_s"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_archsim_run_serve_prints_and_writes_slo_goodput_and_the_csv(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    out, csv = tmp_path / "r.json", tmp_path / "req.csv"
    assert main(SERVE + ["--slo-ttft", "0.05", "--slo-tpot", "0.01", "--csv", str(csv),
                         "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SLO (TTFT ≤" in text and "goodput" in text
    slo = json.loads(out.read_text())["serving"]["slo"]
    assert 0.0 <= slo["attainment"] <= 1.0 and slo["ttft_target_s"] == 0.05
    df = pd.read_csv(csv)
    assert sorted(df["request"]) == list(range(6))           # every request exactly once
    assert (df["first_iteration"] >= 0).all() and (df["iterations"] >= 1).all()
    assert (df["last_iteration"] >= df["first_iteration"]).all()
    assert df["meets_slo"].sum() == slo["requests_met"]


@pytest.mark.parametrize("flags,why", [
    (["--slo-ttft", "0"], "--slo-ttft 0.0: must be a positive"),
    (["--slo-tpot", "-1"], "--slo-tpot -1.0: must be a positive"),
])
def test_bad_slo_targets_are_one_line_errors(flags, why, capsys):
    assert main(SERVE + flags) == 2
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1


def test_slo_and_csv_flags_need_serve(capsys, tmp_path):
    assert main(["run", "--system", "gpu", "--model", "tiny-gpt", "--batch", "4", "--quiet",
                 "--csv", str(tmp_path / "x.csv")]) == 2
    assert "only to a serving run" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_serving_plots_include_the_throughput_over_time(tmp_path):
    pytest.importorskip("matplotlib")
    d = tmp_path / "plots"
    assert main(SERVE + ["--slo-ttft", "0.05", "--plots", str(d)]) == 0
    assert (d / "latency_cdf.png").stat().st_size > 0
    assert (d / "throughput.png").stat().st_size > 0


@pytest.mark.parametrize("n, replicas", [(40, 1), (400, 1), (400, 4)])
def test_the_throughput_plot_draws_iterations_or_time_bins(tmp_path, monkeypatch, n,
                                                            replicas):
    """Few iterations of one replica are drawn one by one; a long run or several replicas in
    100 time bins with the prefill share on a second axis (the decode tokens of every bin sum to
    the run's decode tokens)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from archsim import plots
    its = [(0.01 * (k + 1), 0.01, k % 5, int(k % 7 == 0), k % replicas, int(k % 50 == 0))
           for k in range(n)]
    seen = {}
    real_save = plots._save

    def keep(fig, path):
        seen["axes"] = [[ln.get_ydata() for ln in ax.get_lines()] for ax in fig.axes]
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    out = plots.plot_serving_throughput(its, tmp_path / "t.png")
    plt.close("all")
    assert out.stat().st_size > 0
    binned = n > plots._PER_ITERATION_MAX or replicas > 1
    assert len(seen["axes"]) == (2 if binned else 1)
    if binned:           # whole system: Σ over bins of rate × width == decode tokens
        lines = seen["axes"][0]
        whole = lines[replicas if replicas > 1 else 0]
        width = max(e for e, *_ in its) / 100
        assert sum(whole) * width == pytest.approx(sum(d for _, _, d, *_ in its))
