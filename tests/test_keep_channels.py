"""--keep-channels reaches the compiler on every command, and a ch_idx the machine does not have
is a one-line input error (exit 2) before anything is simulated (issue 16, item 3).

The traces put every request on channel 0: kept, all PIM attention runs on one channel of 32, so
the iteration must take longer than with the policy's placement (min-load spreads them)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import archsim.serving as serving
from archsim.cli import main
from archsim.config import load_config
from archsim.errors import ArchsimError
from mapping import compile_layer
from mapping.channels import (OnlinePlacer, assign_channels, check_channels, describe_placement,
                              place_channels)
from workloads.models import get_model
from workloads.requests import Batch, Request, load_decode_snapshot, load_length_table

TINY = ["--model", "tiny-gpt", "--quiet"]
N = 32
BAD_LINE = 5          # header on line 1, request rows from line 2


def _snapshot(path, channel=0, bad_row=None):
    rows = ["seq_len,ch_idx"] + [f"{100 + 3 * i},{40 if i == bad_row else channel}"
                                 for i in range(N)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _table(path, bad_row=None):
    rows = ["input_toks\toutput_toks\tch_idx"] + [
        f"{60 + i}\t3\t{40 if i == bad_row else 0}" for i in range(16)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture()
def trace(tmp_path):
    return _snapshot(tmp_path / "all_ch0.csv")


@pytest.fixture()
def bad_trace(tmp_path):
    return _snapshot(tmp_path / "ch40.csv", bad_row=BAD_LINE - 2)


def _json(argv, tmp_path, name):
    out = tmp_path / f"{name}.json"
    assert main(argv + ["--json", str(out)]) == 0
    return json.loads(out.read_text())


def _no_simulation(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("a simulation started before the channels were checked")
    for name in ("run_iterations", "serve_system", "compare_systems",
                 "simulate_system_iteration"):
        monkeypatch.setattr(serving, name, forbidden)


# ------------------------------------------------------------------------------ the module
def test_policy_placement_spreads_and_keep_returns_the_trace(trace):
    cfg = load_config("neupims")
    b = load_decode_snapshot(trace)
    placed, how = assign_channels(b, cfg)
    assert how == "policy min-load" and len(set(placed.channels.tolist())) == N
    kept, how = assign_channels(b, cfg, keep=True)
    assert kept.channels.tolist() == [0] * N and how == f"kept from {trace}"
    assert place_channels(b, 4, "round_robin").channels.tolist() == [i % 4 for i in range(N)]


def test_keep_without_channels_is_an_error():
    b = Batch(tuple(Request(i, None, None, 10) for i in range(3)))
    with pytest.raises(ArchsimError, match="no channel for every request"):
        assign_channels(b, load_config("neupims"), keep=True)


def test_out_of_range_channel_names_file_and_line(bad_trace):
    b = load_decode_snapshot(bad_trace)
    with pytest.raises(ArchsimError, match=rf"ch40.csv:{BAD_LINE}: ch_idx 40 is outside the "
                                           r"machine's channels 0..31$"):
        assign_channels(b, load_config("neupims"))           # also under the policy
    with pytest.raises(ArchsimError, match=r"^request index 1: ch_idx 7 is outside the "
                                           r"machine's channels 0..3$"):
        check_channels([0, 7], 4)


def test_length_table_reads_an_optional_channel_column(tmp_path):
    t = load_length_table(_table(tmp_path / "t.tsv"))
    assert t.channels.tolist() == [0] * 16 and t.lines[0] == 2
    (tmp_path / "u.tsv").write_text("input_toks\toutput_toks\n5\t2\n")
    assert load_length_table(tmp_path / "u.tsv").channels is None


def test_online_placer_round_robin_and_min_load():
    need = (10, 1, 5, 7)
    rr = OnlinePlacer(4, 2, "round_robin")
    rr.admit(np.arange(4), np.array(need))
    assert rr.channels.tolist() == [0, 1, 0, 1]
    ml = OnlinePlacer(4, 2, "min_load")
    ml.admit(np.arange(4), np.array(need))
    assert ml.channels.tolist() == [0, 0, 1, 1]          # 10 + 1 on 0, 7 + 5 on 1
    with pytest.raises(ArchsimError, match="channel policy 'lpt'"):
        OnlinePlacer(1, 2, "lpt")


def test_describe_placement_words():
    assert describe_placement(False, "round_robin") == "policy round-robin"
    assert describe_placement(True, "min_load", "a.csv") == "kept from a.csv"


# ------------------------------------------------------------------------------ commands
def test_run_keep_channels_changes_the_cycles(trace, tmp_path):
    base = ["run", *TINY, "--requests", str(trace)]
    pol = _json(base, tmp_path, "pol")
    kept = _json(base + ["--keep-channels"], tmp_path, "kept")
    assert pol["summary"]["channels"] == "policy min-load"
    assert kept["summary"]["channels"] == f"kept from {trace}"
    assert kept["summary"]["cycles_per_iteration"] > pol["summary"]["cycles_per_iteration"]


def test_run_prints_the_placement(trace, capsys):
    assert main(["run", *TINY, "--requests", str(trace), "--keep-channels"]) == 0
    assert f"channels: kept from {trace}" in capsys.readouterr().out


def test_run_keep_channels_on_the_gpu_is_refused(trace, capsys):
    assert main(["run", *TINY, "--system", "gpu", "--requests", str(trace),
                 "--keep-channels"]) == 2
    assert "the gpu system has no KV channels" in capsys.readouterr().err


def test_compare_keep_channels_changes_the_cycles_and_says_the_gpu_ignores_it(trace, tmp_path,
                                                                              capsys):
    base = ["compare", *TINY, "--requests", str(trace), "--systems", "neupims,gpu"]
    pol = _json(base, tmp_path, "pol")
    kept = _json(base + ["--keep-channels"], tmp_path, "kept")
    a, b = pol["systems"]["neupims"], kept["systems"]["neupims"]
    assert a["channels"] == "policy min-load" and b["channels"] == f"kept from {trace}"
    assert b["cycles_per_iteration"] > a["cycles_per_iteration"]
    assert kept["systems"]["gpu"]["channels"] is None
    assert "channels (gpu): none (GPU baseline; --keep-channels ignored)" in \
        capsys.readouterr().out
    assert main(["compare", *TINY, "--requests", str(trace), "--systems", "gpu",
                 "--keep-channels"]) == 2


def test_serve_keep_channels_changes_the_time(tmp_path):
    tsv = _table(tmp_path / "serve.tsv")
    base = ["run", *TINY, "--serve", "--requests", str(tsv), "--timing", "exact"]
    pol = _json(base, tmp_path, "pol")["serving"]
    kept = _json(base + ["--keep-channels"], tmp_path, "kept")["serving"]
    assert ("channels: policy min-load at admission, kept while the request runs"
            in pol["notes"])
    assert f"channels: kept from {tsv}" in kept["notes"]
    assert kept["makespan_s"] > pol["makespan_s"]


def test_serve_keep_channels_needs_a_channel_column(tmp_path, capsys):
    tsv = tmp_path / "no_ch.tsv"
    tsv.write_text("input_toks\toutput_toks\n5\t2\n6\t2\n")
    assert main(["run", *TINY, "--serve", "--requests", str(tsv), "--keep-channels"]) == 2
    assert "ch_idx column" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "run-keep", "compare", "compare-keep", "compile",
                                     "compile-keep"])
def test_ch_idx_40_is_an_exit_2_error_before_any_simulation(command, bad_trace, tmp_path,
                                                            monkeypatch, capsys):
    _no_simulation(monkeypatch)
    name, _, keep = command.partition("-")
    argv = {"run": ["run", *TINY], "compare": ["compare", *TINY, "--systems", "neupims,gpu"],
            "compile": ["compile", "--model", "tiny-gpt", "-o", str(tmp_path / "out")]}[name]
    argv = argv + ["--requests", str(bad_trace)] + (["--keep-channels"] if keep else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"ch40.csv:{BAD_LINE}: ch_idx 40 is outside the machine's channels 0..31" in err


def test_ch_idx_40_in_a_serving_table_is_an_exit_2_error(tmp_path, monkeypatch, capsys):
    def forbidden(*a, **k):
        raise AssertionError("served before the channels were checked")
    monkeypatch.setattr("archsim.serving.scheduler.serve", forbidden)   # where serve_system looks
    tsv = _table(tmp_path / "bad.tsv", bad_row=2)
    for extra in ([], ["--keep-channels"]):
        assert main(["run", *TINY, "--serve", "--requests", str(tsv), *extra]) == 2
        assert "bad.tsv:4: ch_idx 40 is outside the machine's channels 0..31" in \
            capsys.readouterr().err


# ------------------------------------------------------------------------------ sweeps
def _spec(tmp_path, dataset, keep=True, system="neupims"):
    p = tmp_path / "spec.yaml"
    p.write_text(f"name: keep\n"
                 f"workload: {{system: {system}, model: tiny-gpt, batch: {N}, "
                 f"dataset: {dataset}, keep_channels: {str(keep).lower()}}}\n"
                 "parameters:\n  pim.multipliers_per_bank: [16]\n"
                 "objectives:\n  - {metric: tokens_per_s, goal: maximize}\n")
    return p


def test_sweep_keep_channels_reaches_the_compiler(trace, tmp_path):
    from archsim.sweep.evaluate import evaluate_point
    from archsim.sweep.space import resolve_point
    from archsim.sweep.spec import load_spec

    cyc = {}
    for keep in (False, True):
        spec = load_spec(_spec(tmp_path, trace, keep))
        pt = resolve_point(spec, {"pim.multipliers_per_bank": 16})
        cyc[keep] = evaluate_point(pt)["cycles_per_iteration"]
    assert cyc[True] > cyc[False]


def test_sweep_keep_channels_is_validated(trace, bad_trace, tmp_path, capsys):
    from archsim.sweep.errors import SweepSpecError
    from archsim.sweep.spec import load_spec

    with pytest.raises(SweepSpecError, match="keep_channels: keeps the channels of a request "
                                             "file, but dataset 'sharegpt'"):
        load_spec(_spec(tmp_path, "sharegpt"))
    with pytest.raises(SweepSpecError, match="gpu system has no KV channels"):
        load_spec(_spec(tmp_path, trace, system="gpu"))
    for keep in (False, True):
        assert main(["sweep", str(_spec(tmp_path, bad_trace, keep)), "--out",
                     str(tmp_path / f"out{keep}")]) == 2
        assert f"ch40.csv:{BAD_LINE}: ch_idx 40 is outside the machine's channels 0..31" in \
            capsys.readouterr().err


def test_compile_api_keeps_or_places():
    m = get_model("tiny-gpt")
    b = Batch(tuple(Request(i, None, None, 50 + i, 0) for i in range(8)), "t")
    from mapping import CompileOptions
    kept = compile_layer(m, b, load_config("neupims"), options=CompileOptions(channels="keep"))
    pol = compile_layer(m, b, load_config("neupims"))
    assert kept.batch.channels.tolist() == [0] * 8 and kept.channel_placement == "kept from t"
    assert len(set(pol.batch.channels.tolist())) == 8
    assert pol.summary()["channel_placement"] == "policy min-load"
