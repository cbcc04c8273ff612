"""Chrome/Perfetto trace writer and the utilisation plots built on the same events."""
from __future__ import annotations

import json

import numpy as np
import pytest

from archsim.errors import ArchsimError
from archsim.plots import (plot_compare, plot_stage_breakdown, plot_timeline_utilisation,
                           utilisation_over_time)
from archsim.results import IterationResult, TraceEvent
from archsim.timeline import (chrome_trace, engine_class, split_track, validate_chrome_trace,
                              write_chrome_trace)

EVENTS = [
    ("npu/array10", "GEMM qkv", 0, 100, {"layer": 0}),
    ("npu/array2", "GEMM qkv", 0, 50),
    TraceEvent("npu/vector0", "softmax", 100, 150),
    ("npu/dma", "load W", 0, 200),
    ("pim/ch07", "PIM_GEMV r3", 40, 240),
]
PNG = b"\x89PNG\r\n\x1a\n"


def test_complete_events_use_microseconds_of_the_given_clock():
    tr = chrome_trace(EVENTS, clock_mhz=2000.0, metadata={"system": "neupims"})
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    pim = next(e for e in xs if e["name"] == "PIM_GEMV r3")
    assert pim["ts"] == pytest.approx(40 / 2000.0) and pim["dur"] == pytest.approx(0.1)
    assert pim["args"]["start_cycle"] == 40
    assert tr["otherData"] == {"system": "neupims", "clock_mhz": 2000.0}
    assert validate_chrome_trace(tr) == []


def test_each_unit_is_a_named_thread_of_its_engine_process_in_natural_order():
    tr = chrome_trace(EVENTS, clock_mhz=1000.0)
    meta = tr["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = [(procs[e["pid"]], e["args"]["name"]) for e in meta if e["name"] == "thread_name"]
    assert threads == [("npu", "array2"), ("npu", "array10"), ("npu", "dma"),
                       ("npu", "vector0"), ("pim", "ch07")]


def test_written_trace_is_valid_json(tmp_path):
    p = write_chrome_trace(EVENTS, tmp_path / "t" / "timeline.json", clock_mhz=1000.0)
    assert validate_chrome_trace(json.loads(p.read_text())) == []


def test_bad_events_are_rejected_with_their_index():
    with pytest.raises(ArchsimError, match="event 1"):
        chrome_trace([("npu/array0", "a", 0, 1), ("npu/array0", "b", 5, 2)], 1000.0)
    with pytest.raises(ArchsimError, match="event 0"):
        chrome_trace([("npu/array0", "a")], 1000.0)
    with pytest.raises(ArchsimError, match="clock"):
        chrome_trace(EVENTS, 0)


def test_validator_reports_missing_names_and_negative_durations():
    bad = {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "name": "a", "ts": 0, "dur": -1}]}
    problems = validate_chrome_trace(bad)
    assert any("dur" in p for p in problems) and any("process_name" in p for p in problems)
    assert validate_chrome_trace({}) == ["'traceEvents' is missing or not a list"]


def test_track_names_split_into_engine_classes():
    assert split_track("solo") == ("device", "solo")
    assert [engine_class(t) for t in ("npu/array3", "npu/vector0", "npu/dma", "pim/ch07",
                                      "gpu/stream0")] == ["array", "vector", "dma", "pim", "gpu"]


def test_utilisation_over_time_matches_hand_count():
    edges, frac = utilisation_over_time(EVENTS, bins=2)   # 0..240, bins of 120 cycles
    assert np.allclose(edges, [0, 120, 240])
    # arrays: array10 busy 100 in bin 0, array2 busy 50 -> (100 + 50) / (2 * 120)
    assert frac["array"] == pytest.approx([150 / 240, 0.0])
    assert frac["dma"] == pytest.approx([1.0, 80 / 120])
    assert frac["pim"] == pytest.approx([80 / 120, 1.0])
    assert frac["vector"] == pytest.approx([20 / 120, 30 / 120])


def test_plots_are_written_as_png(tmp_path):
    a = plot_timeline_utilisation(EVENTS, 1000.0, tmp_path / "p" / "util.png", bins=20)
    r = IterationResult(system="gpu", model="m", phase="decode", batch_size=1, tokens=1,
                        timing_source="roofline", seconds_per_iteration=1e-3,
                        stage_seconds={"qkv": 4e-4, "attention": 6e-4})
    b = plot_stage_breakdown({"gpu": r}, tmp_path / "stages.png")
    c = plot_compare({"neupims": 30.0, "gpu": 10.0}, tmp_path / "cmp.png")
    for p in (a, b, c):
        assert p.read_bytes()[:8] == PNG
    with pytest.raises(ArchsimError, match="no trace events"):
        plot_timeline_utilisation([], 1000.0, tmp_path / "x.png")


# ------------------------------------------------------------------ the nesting rule
OVERLAPPING = [  # three transfers in flight on one DMA stream, partly overlapping
    ("dma/dma12", "load W0", 0, 100), ("dma/dma12", "load W1", 50, 150),
    ("dma/dma12", "load W2", 120, 200), ("dma/dma12", "load W3", 150, 160),
    ("npu/array0", "GEMM", 0, 100), ("npu/array0", "GEMM", 100, 180),   # back to back
]


def _naive_threads(events):
    """What the writer did before: every interval of a track on one thread."""
    out = {}
    for i, (track, _, s, e) in enumerate(events):
        out.setdefault(track, []).append((s, e, i))
    return out


def test_partly_overlapping_intervals_would_break_the_nesting_rule():
    from archsim.timeline import nesting_problems

    assert nesting_problems(_naive_threads(OVERLAPPING))   # the bug of issue 21


def test_overlapping_intervals_go_to_extra_rows_and_touching_ones_stay_on_one():
    tr = chrome_trace(OVERLAPPING, clock_mhz=1000.0)
    assert validate_chrome_trace(tr) == []
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in tr["traceEvents"]
             if e["name"] == "thread_name"}
    rows = {}
    for e in tr["traceEvents"]:
        if e["ph"] == "X":
            rows.setdefault(names[(e["pid"], e["tid"])], []).append(e["name"])
    assert rows == {"array0": ["GEMM", "GEMM"], "dma12": ["load W0", "load W2"],
                    "dma12 (2)": ["load W1", "load W3"]}


def test_times_are_whole_nanoseconds_so_touching_events_do_not_overlap():
    evs = [("mem/ch00", f"op{i}", i * 3, i * 3 + 3) for i in range(50)]   # 3 cycles of 1/0.9 ns
    tr = chrome_trace(evs, clock_mhz=900.0)
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len({e["tid"] for e in xs}) == 1 and validate_chrome_trace(tr) == []
    for e in xs:
        assert abs(e["ts"] * 1000 - round(e["ts"] * 1000)) < 1e-6


def test_microsecond_events_are_named_as_such():
    tr = chrome_trace([("serve/iterations", "decode x4", 0.0, 12.5)], 1.0, time_unit="us")
    x = next(e for e in tr["traceEvents"] if e["ph"] == "X")
    assert x["args"]["start_us"] == 0.0 and x["args"]["end_us"] == 12.5
    assert "start_cycle" not in x["args"] and tr["otherData"]["time_unit"] == "us"
    assert "clock_mhz" not in tr["otherData"]
    with pytest.raises(ArchsimError, match="time unit"):
        chrome_trace([], 1000.0, time_unit="us")
