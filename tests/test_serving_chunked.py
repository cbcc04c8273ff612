"""Chunked-prefill serving on an NPU+PIM system: mixed iterations simulated cycle by cycle as
one program each, and the stall-free decode they buy (the issue's Done-when, at test size)."""
from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.serving import CycleLevelTimer, make_request_set, serve_system
from workloads.models import get_model

MODEL = get_model("tiny-llama")


@pytest.fixture(scope="module")
def runs():
    # a decoding request, then prompts arriving while it decodes
    rs = make_request_set([20, 90, 60, 120], [12, 3, 3, 2], MODEL).with_arrivals(
        np.array([0.0, 3e-5, 4e-5, 5e-5]), "staggered")
    out = {}
    for budget in (None, 48):
        calls: list = []
        timer = CycleLevelTimer(load_config("neupims"), MODEL, window=3, log=calls)
        out[budget] = (serve_system("neupims", MODEL, rs, chunked_prefill_tokens=budget,
                                    timer=timer), calls)
    return out


def test_mixed_iterations_are_one_cycle_level_program_each(runs):
    res, calls = runs[48]
    by = res.iterations_by_phase
    assert by.get("mixed", 0) > 0 and res.iterations_by_source == {"cycle-level": res.iterations}
    # one simulator call per iteration, in the iteration's own phase (no prefill+decode split)
    assert len(calls) == res.iterations
    assert sum(1 for c in calls if c[0] == "mixed") >= by["mixed"]
    assert res.summary()["decode_iterations_with_prefill"] == by["mixed"]


def test_chunked_prefill_removes_the_decode_stalls(runs):
    plain, chunked = runs[None][0], runs[48][0]
    assert plain.iterations_by_phase.get("mixed", 0) == 0
    assert chunked.tpot_s.p99 < plain.tpot_s.p99
    assert chunked.token_gap_s.max < plain.token_gap_s.max
    assert all(r.finish_s > 0 for r in chunked.requests)
