"""The serving surrogate measured against the cycle-level simulator (issue target: <= 3 %).

A serving run on the neupims machine with a small GPT-3-structured model (two layers of
d_model 512, so that one cycle-level iteration takes about a second) is timed by the
Gaussian-process surrogate over cycle-level samples; then iterations sampled from the whole run
are simulated cycle-level and compared with the surrogate's prediction for them.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from archsim import serving as sv
from archsim.config import load_config
from workloads.models import get_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_model():
    return dataclasses.replace(get_model("gpt3-7b"), name="gpt3-small-test", d_model=512,
                               n_heads=4, n_kv_heads=4, head_dim=128, n_layers=2, d_ff=2048,
                               max_seq_len=512, tensor_parallel=1)


def test_surrogate_error_against_cycle_level_on_sampled_iterations(small_model):
    cfg = load_config("neupims")
    rs = sv.load_request_set(small_model, dataset="sharegpt", n=60, seed=0)
    exact = sv.CycleLevelTimer(cfg, small_model, "neupims")
    sur = sv.SurrogateTimer(sv.CachingTimer(exact), check_every=40, check_growth=1)
    mixes: list[sv.IterationMix] = []
    res = sv.serve_system(cfg, small_model, rs, timer=sur, max_batch=32,
                          on_iteration=lambda r: mixes.append(r.mix))
    by = res.iterations_by_source
    assert sum(by.values()) == res.iterations
    assert by.get("surrogate", 0) > 0.7 * res.iterations       # the surrogate does the work
    assert by["cycle-level"] == exact.calls              # one simulator call per iteration
    online = res.surrogate_error
    assert online["checked"] >= 5 and online["mean"] <= 0.03
    rng = np.random.default_rng(11)
    sample = [mixes[i] for i in rng.choice(len(mixes), 12, replace=False)]
    err = sv.measure_surrogate_error(sur, sv.CycleLevelTimer(cfg, small_model, "neupims"),
                                     sample)
    assert err["n"] == 12 and err["uncalibrated"] == 0
    assert err["mean"] <= 0.03 and err["p95"] <= 0.03, err
