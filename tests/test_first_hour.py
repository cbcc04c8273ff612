"""What issue 21's new user tried that should work, and the checks that must come before any
simulated cycle."""
from __future__ import annotations

import json

import pytest

import archsim.serving as serving
from archsim.cli import main
from workloads.models import load_hf_config


def _no_simulation(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("a simulation started before the input was checked")
    for name in ("run_iterations", "serve_system", "compare_systems", "simulate_system_iteration"):
        monkeypatch.setattr(serving, name, forbidden)


@pytest.mark.parametrize("argv", [
    ["run", "--model", "tiny-gpt", "--batch", "2", "--quiet", "--json", "{f}/x.json"],
    ["run", "--model", "tiny-gpt", "--serve", "--quiet", "--system", "gpu", "--json", "{f}/x"],
    ["run", "--model", "tiny-gpt", "--batch", "2", "--quiet", "--trace", "{f}/t.json"],
    ["compare", "--model", "tiny-gpt", "--batch", "2", "--quiet", "--plots", "{f}"],
], ids=["run-json", "serve-json", "run-trace", "compare-plots"])
def test_a_bad_output_path_fails_before_any_simulation(argv, tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    _no_simulation(monkeypatch)
    assert main([a.format(f=tmp_path / "file") for a in argv]) == 2
    assert "file" in capsys.readouterr().err


def test_capacity_is_checked_before_channels_are_placed_or_anything_runs(monkeypatch, capsys):
    import mapping.channels as chans

    _no_simulation(monkeypatch)

    def no_placement(*a, **k):
        raise AssertionError("channels placed before the capacity check")
    monkeypatch.setattr(chans, "place_channels", no_placement)
    assert main(["run", "--batch", "2000", "--quiet"]) == 2     # GPT3-7B: ~600k tokens > 237k
    assert "memory capacity: the batch of 2000 requests" in capsys.readouterr().err


def test_the_valid_serving_flag_combinations_still_run(capsys, tmp_path):
    base = ["run", "--model", "tiny-gpt", "--system", "gpu", "--serve", "--quiet",
            "--num-requests", "8"]
    assert main(base) == 0
    assert "arrivals: all at t=0" in capsys.readouterr().out
    assert main(base + ["--arrival", "poisson", "--rate", "50"]) == 0
    assert "Poisson, 50 requests/s" in capsys.readouterr().out
    ts = tmp_path / "ts.txt"
    ts.write_text("\n".join(str(i * 0.01) for i in range(8)))
    assert main(base + ["--timestamps", str(ts), "--chunked-prefill", "256"]) == 0
    assert "arrivals: timestamps from" in capsys.readouterr().out


@pytest.mark.parametrize("system,preset", [("npu", "npu-only"), ("npu-pim", "npu-pim-blocked"),
                                           ("neupims", "neupims")])
def test_compile_accepts_the_system_names_of_the_other_commands(system, preset, tmp_path,
                                                                capsys):
    out = tmp_path / "c"
    assert main(["compile", "--system", system, "--model", "tiny-gpt", "--batch", "2", "-o",
                 str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["system"] == preset


def test_compile_verify_prints_the_verdict_and_the_real_wall_time(tmp_path, capsys):
    assert main(["compile", "--model", "tiny-gpt", "--batch", "2", "--verify", "-o",
                 str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "verification PASSED: every operator-graph dependency is ordered" in out
    wall = next(x for x in out.splitlines() if x.startswith("wall time "))
    assert "compile " in wall and "verification " in wall


def test_workload_show_takes_a_hugging_face_config(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
                               "n_positions": 128, "vocab_size": 1000}))
    assert main(["workload", "show", "--model", str(cfg), "--batch", "2"]) == 0
    assert "gpt2-64x2 decode" in capsys.readouterr().out


@pytest.mark.parametrize("extra,name", [
    ({"_name_or_path": "meta-llama/Llama-2-7b-hf"}, "meta-llama/Llama-2-7b-hf"),
    ({"_name_or_path": "/home/me/models/my-llama/"}, "my-llama"),
    ({}, "llama-64x2"),
])
def test_a_hugging_face_config_is_named_by_its_contents_not_its_folder(tmp_path, extra, name):
    d = tmp_path / "downloads"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "num_hidden_layers": 2, "max_position_embeddings": 128,
        "vocab_size": 100, **extra}))
    assert load_hf_config(d / "config.json").name == name
