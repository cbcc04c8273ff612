"""The ``--trace`` of a decode run and of a serving run pass the trace-event nesting rule.

Perfetto builds one slice stack per thread: complete events of a thread must be disjoint or
nested, or it drops or mis-nests them. Each trace is checked by
:func:`archsim.timeline.validate_chrome_trace` (which checks that rule itself, in whole
nanoseconds as Perfetto imports them) and, when the ``perfetto`` package and a
``trace_processor_shell`` binary are available, loaded with Perfetto's trace processor: every
complete event must come back as a slice and the import must report no error.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from archsim.cli import main
from archsim.timeline import validate_chrome_trace

RUNS = {
    "decode": ["run", "--model", "tiny-gpt", "--batch", "8", "--quiet"],
    "serve": ["run", "--model", "tiny-gpt", "--system", "gpu", "--serve", "--num-requests",
              "24", "--quiet"],
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def trace(request, tmp_path_factory):
    p = tmp_path_factory.mktemp("trace") / f"{request.param}.json"
    assert main(RUNS[request.param] + ["--trace", str(p)]) == 0
    return request.param, p, json.loads(p.read_text())


def test_trace_passes_the_nesting_rule(trace):
    kind, _, obj = trace
    assert validate_chrome_trace(obj) == []
    xs = [e for e in obj["traceEvents"] if e["ph"] == "X"]
    assert xs
    if kind == "serve":   # the serving trace is in µs of simulated time, and says so
        assert all("start_us" in e["args"] and "start_cycle" not in e["args"] for e in xs)
        assert obj["otherData"]["time_unit"] == "us"
    else:
        assert all("start_cycle" in e["args"] for e in xs)
        assert obj["otherData"]["clock_mhz"] > 0


def _trace_processor():
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError:
        pytest.skip("the 'perfetto' Python package is not installed (the nesting rule is "
                    "checked by test_trace_passes_the_nesting_rule)")
    binary = (os.environ.get("PERFETTO_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")
              or shutil.which("trace_processor"))
    if not binary:
        pytest.skip("no trace_processor_shell binary (set PERFETTO_TRACE_PROCESSOR or put it "
                    "on PATH; the perfetto package would download one, which this machine "
                    "cannot)")
    return TraceProcessor, TraceProcessorConfig(bin_path=binary)


def test_perfetto_trace_processor_imports_every_slice(trace):
    TraceProcessor, config = _trace_processor()
    _, path, obj = trace
    n = sum(1 for e in obj["traceEvents"] if e["ph"] == "X")
    tp = TraceProcessor(trace=str(path), config=config)
    try:
        slices = tp.query("SELECT COUNT(*) AS n FROM slice").as_pandas_dataframe()["n"][0]
        errors = tp.query("SELECT name, value FROM stats WHERE severity IN ('error', "
                          "'data_loss') AND value > 0").as_pandas_dataframe()
    finally:
        tp.close()
    assert slices == n
    assert errors.empty, errors.to_dict("records")
