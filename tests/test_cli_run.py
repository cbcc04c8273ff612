"""``archsim run`` / ``archsim compare`` end to end with the GPU system (and a stand-in for the
cycle-level simulator where the plumbing of the other systems is checked): return codes, JSON
keys, trace validity, plots, and the one-line messages of bad input."""
from __future__ import annotations

import json
import re

import pytest

from archsim import serving as sv
from archsim.cli import main
from archsim.errors import SimulationError
from archsim.results import IterationResult
from archsim.timeline import validate_chrome_trace
from mapping.errors import CapacityError

PNG = b"\x89PNG\r\n\x1a\n"
FACTORS = {"neupims": 1.0, "npu-pim-blocked": 1.6, "npu-only": 2.4}


def _fake_simulate(cfg, model, batch, phase="decode", **kw):
    cycles = int(FACTORS.get(cfg.name, 1.0) * (10_000 * len(batch)
                                               + sum(r.seq_len for r in batch)))
    return IterationResult(system=cfg.name, model=model.name, phase=phase, batch_size=len(batch),
                           tokens=len(batch), timing_source="cycle-level",
                           cycles_per_iteration=cycles, npu_freq_mhz=cfg.npu.freq_mhz,
                           npu_util=0.5, pim_util=0.25 if cfg.system.has_pim else None)


@pytest.fixture
def fake_simulator(monkeypatch):
    monkeypatch.setattr("archsim.serving.systems.simulate_iteration", _fake_simulate)


def _run(capsys, *args):
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_run_gpu_writes_json_trace_and_plots(tmp_path, capsys):
    rc, out, err = _run(capsys, "run", "--system", "gpu", "--model", "gpt3-7b", "--batch", "32",
                        "--json", str(tmp_path / "s.json"), "--trace", str(tmp_path / "t.json"),
                        "--plots", str(tmp_path / "plots"))
    assert rc == 0, err
    assert "tokens / seconds_per_iteration" in out and "calibrated mode" in out
    assert "µJ/token" in out and "power/dev" in out
    d = json.loads((tmp_path / "s.json").read_text())
    assert d["system"] == "gpu" and d["mode"] == "iterations"
    assert d["summary"]["tokens_per_s"] > 0
    it = d["iterations"][0]
    assert it["cycles_per_iteration"] is None and it["timing_source"] == "calibrated"
    assert it["batch_size"] == 32 and "npu_util" in d["definitions"]
    assert validate_chrome_trace(json.loads((tmp_path / "t.json").read_text())) == []
    for name in ("stages.png", "timeline_utilisation.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == PNG


def test_run_several_iterations(tmp_path, capsys):
    rc, out, err = _run(capsys, "run", "--system", "gpu", "--batch", "8", "--iterations", "3",
                        "--json", str(tmp_path / "s.json"))
    assert rc == 0, err
    d = json.loads((tmp_path / "s.json").read_text())
    assert len(d["iterations"]) == 3 and d["summary"]["iterations"] == 3


def test_run_serve_poisson_with_chunked_prefill(tmp_path, capsys):
    rc, out, err = _run(capsys, "run", "--system", "gpu", "--serve", "--num-requests", "60",
                        "--dataset", "alpaca", "--arrival", "poisson", "--rate", "20",
                        "--chunked-prefill", "256", "--json", str(tmp_path / "s.json"),
                        "--trace", str(tmp_path / "t.json"), "--plots", str(tmp_path / "p"))
    assert rc == 0, err
    assert "TTFT" in out and "iterations counted by what timed them" in out
    s = json.loads((tmp_path / "s.json").read_text())["serving"]
    assert s["n_requests"] == 60 and s["chunked_prefill_tokens"] == 256
    assert set(s["ttft_s"]) >= {"p50", "p90", "p99"} and s["ttft_s"]["p99"] > 0
    assert s["iterations_by_source"] == {"calibrated": s["iterations"]}
    assert "Poisson" in s["arrival"] and len(s["requests"]["finish_s"]) == 60
    assert validate_chrome_trace(json.loads((tmp_path / "t.json").read_text())) == []
    assert (tmp_path / "p" / "latency_cdf.png").read_bytes()[:8] == PNG


def test_run_serve_prefill_budget(tmp_path, capsys):
    rc, out, err = _run(capsys, "run", "--system", "gpu", "--serve", "--num-requests", "40",
                        "--max-prefill-tokens", "300", "--json", str(tmp_path / "s.json"),
                        "--quiet")
    assert rc == 0, err
    s = json.loads((tmp_path / "s.json").read_text())["serving"]
    assert s["max_prefill_tokens"] == 300 and "at most 300 tokens/iteration" in s["scheduler"]


def test_run_serve_from_files(tmp_path, capsys):
    req = tmp_path / "r.tsv"
    req.write_text("input_toks\toutput_toks\n10\t5\n20\t3\n7\t9\n")
    ts = tmp_path / "ts.txt"
    ts.write_text("0\n0.5\n2.0\n")
    rc, out, err = _run(capsys, "run", "--system", "gpu", "--serve", "--requests", str(req),
                        "--timestamps", str(ts), "--json", str(tmp_path / "s.json"))
    assert rc == 0, err
    s = json.loads((tmp_path / "s.json").read_text())["serving"]
    assert s["requests"]["arrival_s"] == [0.0, 0.5, 2.0] and s["output_tokens"] == 17


def test_compare_gpu_only_json_keys(tmp_path, capsys):
    rc, out, err = _run(capsys, "compare", "--model", "gpt3-7b", "--batch", "16",
                        "--systems", "gpu", "--json", str(tmp_path / "c.json"))
    assert rc == 0, err
    d = json.loads((tmp_path / "c.json").read_text())
    g = d["systems"]["gpu"]
    assert g["tokens_per_s"] > 0 and g["cycles_per_iteration"] is None
    assert g["npu_util"] is None and g["pim_util"] is None and d["speedup"] == {}


def test_compare_four_systems_speedups(tmp_path, capsys, fake_simulator):
    rc, out, err = _run(capsys, "compare", "--model", "gpt3-7b", "--batch", "16",
                        "--json", str(tmp_path / "c.json"), "--plots", str(tmp_path / "p"))
    assert rc == 0, err
    d = json.loads((tmp_path / "c.json").read_text())
    assert list(d["systems"]) == ["neupims", "npu-pim", "npu", "gpu"]
    sp = d["speedup"]
    assert sp["neupims"] == pytest.approx(1.0)
    assert sp["npu-pim"] == pytest.approx(1.6, rel=1e-4) and sp["npu"] == pytest.approx(
        2.4, rel=1e-4)
    assert sp["gpu"] == pytest.approx(d["systems"]["neupims"]["tokens_per_s"]
                                      / d["systems"]["gpu"]["tokens_per_s"])
    assert isinstance(d["systems"]["neupims"]["cycles_per_iteration"], (int, float))
    assert 0 <= d["systems"]["neupims"]["pim_util"] <= 1
    assert d["systems"]["npu"]["pim_util"] is None
    assert (tmp_path / "p" / "compare.png").read_bytes()[:8] == PNG


def test_compare_paper_grid_beside_the_headline(tmp_path, capsys, fake_simulator, monkeypatch):
    _small_paper_grid(monkeypatch, ("gpt3-7b",), ("alpaca",), (16, 32))
    rc, out, err = _run(capsys, "compare", "--paper", "--json", str(tmp_path / "p.json"))
    assert rc == 0, err
    assert "published" in out and "2.4×" in out and "geo. mean" in out
    d = json.loads((tmp_path / "p.json").read_text())
    assert len(d["paper"]) == 2 and d["published_speedup"] == {"gpu": 3.0, "npu": 2.4,
                                                               "npu-pim": 1.6}
    assert d["geomean_speedup"]["npu"] == pytest.approx(2.4, rel=1e-4)


def _small_paper_grid(monkeypatch, models, datasets, batches):
    # the CLI sizes its progress bar from sv.*, paper_grid reads archsim.serving.grid's own
    for mod in (sv, sv.grid):
        monkeypatch.setattr(mod, "PAPER_MODELS", models)
        monkeypatch.setattr(mod, "PAPER_DATASETS", datasets)
        monkeypatch.setattr(mod, "PAPER_BATCHES", batches)


def test_paper_grid_keeps_the_other_systems_of_a_point_one_system_cannot_hold(
        tmp_path, capsys, monkeypatch):
    def simulate(cfg, model, batch, phase="decode", **kw):
        if cfg.name == "npu-pim-blocked" and len(batch) == 32:
            raise CapacityError("KV cache does not fit channel 5: needs 2048 bytes, available "
                                "1024 bytes", resource="KV rows of channel 5",
                                needed_bytes=2048, available_bytes=1024)
        return _fake_simulate(cfg, model, batch, phase, **kw)

    monkeypatch.setattr("archsim.serving.systems.simulate_iteration", simulate)
    _small_paper_grid(monkeypatch, ("gpt3-7b",), ("alpaca",), (16, 32))
    rc, out, err = _run(capsys, "compare", "--paper", "--json", str(tmp_path / "p.json"))
    assert rc == 0, err
    assert "gpt3-7b alpaca 32, npu-pim: does not fit: KV rows of channel 5 (2,048 of 1,024 " \
           "bytes)" in out
    d = json.loads((tmp_path / "p.json").read_text())
    row = d["paper"][1]
    assert set(row["tokens_per_s"]) == {"neupims", "npu", "gpu"}
    assert set(row["speedup"]) == {"neupims", "npu", "gpu"}
    assert row["does_not_fit"]["npu-pim"] == {
        "resource": "KV rows of channel 5", "needed": 2048, "available": 1024, "unit": "bytes",
        "message": "KV cache does not fit channel 5: needs 2048 bytes, available 1024 bytes",
        "text": "does not fit: KV rows of channel 5 (2,048 of 1,024 bytes)"}
    assert d["paper"][0]["does_not_fit"] == {}
    assert d["grid_rows"] == 2
    assert d["geomean_rows"] == {"neupims": 2, "npu-pim": 1, "npu": 2, "gpu": 2}
    assert d["geomean_speedup"]["npu-pim"] == pytest.approx(1.6, rel=1e-4)
    assert d["geomean_speedup"]["npu"] == pytest.approx(2.4, rel=1e-4)


def test_paper_grid_on_a_machine_whose_pim_channels_cannot_hold_the_big_batch(
        tmp_path, capsys, monkeypatch):
    # tiny-gpt, 16 DRAM rows: 64 ShareGPT requests overflow the KV rows of the whole device on
    # both PIM systems, spilling included (the compiler's own CapacityError; with 32 rows a
    # request spills to a second channel and the batch fits); the NPU-only and GPU systems
    # still run them
    _small_paper_grid(monkeypatch, ("tiny-gpt",), ("sharegpt",), (8, 64))
    rc, out, err = _run(capsys, "compare", "--paper", "--set", "memory.org.rows=16", "--quiet",
                        "--json", str(tmp_path / "p.json"))
    assert rc == 0, err
    d = json.loads((tmp_path / "p.json").read_text())
    small, big = d["paper"]
    assert set(small["tokens_per_s"]) == {"neupims", "npu-pim", "npu", "gpu"}
    assert set(big["tokens_per_s"]) == {"npu", "gpu"} and big["speedup"] == {}
    assert all(v > 0 for v in big["tokens_per_s"].values())
    for s in ("neupims", "npu-pim"):
        rec = big["does_not_fit"][s]
        assert rec["resource"] == "KV rows of the device"
        # the device's KV bytes needed and free (equal when the free rows are split over the
        # channels so that no request's remainder finds a whole granule: the message says so)
        assert rec["needed"] >= rec["available"] > 0
        assert rec["text"] == (f"does not fit: {rec['resource']} ({rec['needed']:,} of "
                               f"{rec['available']:,} bytes)")
        assert f"tiny-gpt sharegpt 64, {s}: {rec['text']}" in out
    # the cells of the table say so too ("does not / fit" wrapped in the narrow column)
    assert re.search(r"│ tiny-gpt +│ sharegpt │ 64 +│ +does not +│ +does not +│ +[\d,]+ +│", out)
    assert d["geomean_rows"] == {"neupims": 1, "npu-pim": 1, "npu": 1, "gpu": 1}
    assert "rows in mean" in out and "1/2" in out


def test_paper_grid_does_not_swallow_a_simulator_bug(capsys, monkeypatch):
    def simulate(cfg, model, batch, phase="decode", **kw):
        if cfg.name == "npu-only":
            raise SimulationError("deadlock: injected")
        return _fake_simulate(cfg, model, batch, phase, **kw)

    monkeypatch.setattr("archsim.serving.systems.simulate_iteration", simulate)
    _small_paper_grid(monkeypatch, ("gpt3-7b",), ("alpaca",), (16,))
    rc, out, err = _run(capsys, "compare", "--paper", "--quiet")
    assert rc == 3 and "deadlock: injected" in err


@pytest.mark.parametrize("args,message", [
    (["run", "--system", "tpu"], "valid systems: neupims, npu-pim, npu, gpu"),
    (["run", "--system", "gpu", "--model", "gpt5"], "valid names: gpt3-7b"),
    (["run", "--system", "gpu", "--dataset", "wiki"], "valid datasets: sharegpt, alpaca"),
    (["compare", "--systems", "gpu,tpu"], "unknown system 'tpu'"),
    (["run", "--system", "gpu", "--batch", "4096"], "memory capacity: the batch of 4096"),
    (["run", "--system", "gpu", "--rate", "3"], "only to a serving run: add --serve"),
    (["run", "--system", "gpu", "--max-prefill-tokens", "512"],
     "only to a serving run: add --serve"),
    (["run", "--system", "gpu", "--serve", "--max-prefill-tokens", "0"],
     "--max-prefill-tokens 0: must be 1.."),
    (["run", "--system", "gpu", "--serve", "--arrival", "poisson"], "needs --rate"),
    (["run", "--system", "gpu", "--serve", "--arrival", "burst"], "not one of"),
    (["run", "--system", "gpu", "--set", "gpu.peak_flopz=1"], "gpu.peak_flops"),
])
def test_bad_input_is_one_line_with_the_valid_values(capsys, args, message):
    rc, out, err = _run(capsys, *args, "--quiet")
    assert rc == 2
    assert err.startswith("archsim: error:") and message in err and err.count("\n") == 1


def test_prompt_longer_than_the_context_is_rejected_with_its_index(tmp_path, capsys):
    req = tmp_path / "r.tsv"
    req.write_text("input_toks\toutput_toks\n10\t5\n3000\t3\n")
    rc, out, err = _run(capsys, "run", "--system", "gpu", "--serve", "--requests", str(req))
    assert rc == 2 and "request index 1 has a prompt of 3000 tokens" in err


def test_snapshot_longer_than_the_context_is_rejected_with_its_index(tmp_path, capsys):
    snap = tmp_path / "s.csv"
    snap.write_text("seq_len,ch_idx\n100,0\n5000,1\n")
    rc, out, err = _run(capsys, "run", "--system", "gpu", "--requests", str(snap))
    assert rc == 2 and "request index 1" in err and "max_seq_len 2048" in err


def test_compare_of_the_four_real_systems_reports_energy(tmp_path, capsys):
    """tiny-gpt, batch 8, the cycle-level simulator for the NPU systems: energy per token by
    part, tokens/J and power per device for all four, the GPU's mode stated."""
    rc, out, err = _run(capsys, "compare", "--model", "tiny-gpt", "--batch", "8", "--quiet",
                        "--json", str(tmp_path / "c.json"))
    assert rc == 0, err
    assert "energy per token by part" in out and "µJ/token" in out and "tokens/J" in out
    assert "gpu.mode calibrated" in out and "W" in out
    d = json.loads((tmp_path / "c.json").read_text())
    for name in ("neupims", "npu-pim", "npu", "gpu"):
        s = d["systems"][name]
        assert s["energy_per_token_uj"] > 0 and s["tokens_per_joule"] > 0
        assert s["power_per_device_w"] > 0
        parts = s["energy_per_token_uj_by_group"]
        assert sum(parts.values()) == pytest.approx(s["energy_per_token_uj"])
    assert d["systems"]["neupims"]["energy_per_token_uj_by_group"]["NPU compute"] > 0
    assert d["systems"]["neupims"]["energy_per_token_uj_by_group"]["PIM"] > 0
    assert "PIM" not in d["systems"]["npu"]["energy_per_token_uj_by_group"] or \
        d["systems"]["npu"]["energy_per_token_uj_by_group"]["PIM"] == 0
    assert d["systems"]["gpu"]["gpu_mode"] == "calibrated" and "gpu" in d["gpu_model"]
    assert set(d["energy_components"]) >= {"dram_background", "npu_mac", "leakage"}
