"""Result types: derived metrics, validation, strict JSON round trips, metric definitions."""
from __future__ import annotations

import json
import math

import pytest

from archsim.errors import ArchsimError
from archsim.results import (METRICS, IterationResult, LayerTiming, Percentiles, RequestRecord,
                             ServingResult, compare_to_dict, metric_definitions, write_json)


def _it(**kw):
    base = dict(system="neupims", model="gpt3-7b", phase="decode", batch_size=4, tokens=4,
                timing_source="cycle-level", cycles_per_iteration=2_000_000, npu_freq_mhz=1000.0,
                tensor_parallel=4, pipeline_parallel=1)
    base.update(kw)
    return IterationResult(**base)


def test_seconds_follow_from_cycles_and_the_npu_clock():
    r = _it()
    assert r.seconds_per_iteration == pytest.approx(2e-3)
    assert r.tokens_per_s == pytest.approx(2000.0)
    assert r.tokens_per_s_per_device == pytest.approx(500.0)
    assert r.stage_cycles == {}


def test_cycles_without_a_clock_and_no_time_at_all_are_rejected():
    with pytest.raises(ArchsimError, match="npu_freq_mhz"):
        _it(npu_freq_mhz=None)
    with pytest.raises(ArchsimError, match="seconds_per_iteration or cycles"):
        _it(cycles_per_iteration=None)
    with pytest.raises(ArchsimError, match="> 0"):
        _it(cycles_per_iteration=None, seconds_per_iteration=0.0)
    with pytest.raises(ArchsimError, match="disagrees"):
        _it(seconds_per_iteration=1.0)
    assert _it(seconds_per_iteration=2e-3).tokens_per_s == pytest.approx(2000.0)


@pytest.mark.parametrize("field,value", [("npu_util", 1.2), ("pim_util", -0.1),
                                         ("flops_util", float("nan"))])
def test_utilisation_outside_zero_one_is_rejected(field, value):
    with pytest.raises(ArchsimError, match=field):
        _it(**{field: value})


def test_channel_bandwidth_fraction_outside_range_names_the_channel():
    with pytest.raises(ArchsimError, match=r"channel_bw_util\[1\]"):
        _it(channel_bw_util=[0.5, 1.5])


def test_unknown_phase_and_timing_source_list_the_valid_ones():
    with pytest.raises(ArchsimError, match="decode"):
        _it(phase="warmup")
    with pytest.raises(ArchsimError, match="roofline"):
        _it(timing_source="guess")


def test_layer_counts_and_energy_per_token():
    r = _it(layers=[LayerTiming(0, 1e-4, 1e5, "cycle-level"),
                    LayerTiming(1, 1e-4, 1e5, "reused", reused_from=0)],
            energy_j={"dram": 3e-6, "pim": 1e-6})
    assert (r.layers_simulated, r.layers_reused) == (1, 1)
    assert r.layer_cycles == [1e5, 1e5]
    assert r.energy_per_token_uj == pytest.approx(4e-6 / 4 * 1e6)


def test_iteration_json_is_strict_round_trips_and_defines_every_metric(tmp_path):
    r = _it(npu_util=0.5, pim_util=0.25, channel_bw_util=[0.1, 0.3],
            stage_seconds={"A": 1e-3, "B": 1e-3}, extra={"nan": float("nan")})
    p = write_json(r, tmp_path / "out" / "it.json")
    d = json.loads(p.read_text())
    assert d["extra"]["nan"] is None
    assert d["derived"]["tokens_per_s"] == pytest.approx(2000.0)
    assert d["derived"]["mean_channel_bw_util"] == pytest.approx(0.2)
    assert d["derived"]["stage_cycles"] == {"A": pytest.approx(1e6), "B": pytest.approx(1e6)}
    for key in ("npu_util", "pim_util", "cycles_per_iteration", "tokens_per_s"):
        assert key in d["definitions"] and d["definitions"][key]
    back = IterationResult.from_dict(d)
    assert back.tokens_per_s == pytest.approx(r.tokens_per_s)
    assert back.channel_bw_util == r.channel_bw_util


def test_every_metric_has_a_one_line_definition_with_scope():
    for key, m in METRICS.items():
        assert m.key == key and m.definition and "\n" not in m.definition
    defs = metric_definitions(["npu_util", "unknown"])
    assert list(defs) == ["npu_util"] and "[fraction]" in defs["npu_util"]
    assert "device" in METRICS["npu_util"].definition
    assert "NPU clock" in METRICS["npu_util"].definition


def test_percentiles_ignore_nan_and_empty_gives_nan():
    p = Percentiles.of([1.0, 2.0, 3.0, float("nan")])
    assert (p.p50, p.mean, p.max, p.n) == (2.0, 2.0, 3.0, 3)
    assert math.isnan(Percentiles.of([]).p99)


def _serving():
    recs = [RequestRecord(0, 10, 1, 0.0, 0.0, 0.5, 0.5),
            RequestRecord(1, 20, 3, 0.0, 0.0, 1.0, 2.0)]
    return ServingResult(system="gpu", model="gpt3-7b", arrival="all at t=0", scheduler="s",
                         timer="t", requests=recs, makespan_s=2.0, iterations=4,
                         iterations_by_source={"roofline": 4},
                         iterations_by_phase={"prefill": 1, "decode": 3}, mean_batch_size=1.5,
                         max_batch_size=2, kv_capacity_tokens=100, peak_kv_tokens=34)


def test_serving_latencies_follow_their_definitions():
    s = _serving()
    assert s.output_tokens == 4 and s.throughput_tokens_per_s == pytest.approx(2.0)
    assert s.ttft_s.max == 1.0 and s.e2e_s.max == 2.0
    assert s.tpot_s.n == 1 and s.tpot_s.p50 == pytest.approx(0.5)  # (2.0 - 1.0) / (3 - 1)
    assert math.isnan(s.requests[0].tpot_s)


def test_serving_json_round_trips(tmp_path):
    s = _serving()
    d = json.loads(write_json(s, tmp_path / "s.json").read_text())
    assert d["ttft_s"]["p99"] == pytest.approx(s.ttft_s.p99)
    assert d["requests"]["finish_s"] == [0.5, 2.0]
    assert "ttft_s" in d["definitions"]
    back = ServingResult.from_dict(d)
    assert back.e2e_s == s.e2e_s and back.iterations_by_source == {"roofline": 4}


def test_compare_json_speedups_are_reference_over_system():
    a = _it(system="neupims", cycles_per_iteration=1_000_000, pim_util=0.4)
    b = IterationResult(system="gpu", model="gpt3-7b", phase="decode", batch_size=4, tokens=4,
                        timing_source="roofline", seconds_per_iteration=3e-3)
    d = compare_to_dict({"neupims": a, "gpu": b})
    assert d["systems"]["gpu"]["cycles_per_iteration"] is None
    assert d["systems"]["neupims"]["pim_util"] == 0.4
    assert d["speedup"]["gpu"] == pytest.approx(3.0)
    assert d["speedup"]["neupims"] == pytest.approx(1.0)
    assert compare_to_dict({"gpu": b})["speedup"] == {}
    json.dumps(d, allow_nan=False)


def test_write_json_reports_unwritable_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ArchsimError, match="cannot write"):
        write_json({"a": 1}, blocker / "sub" / "x.json")
