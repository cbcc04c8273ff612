"""Iteration timers: roofline, reuse cache, the calibrated surrogate and its measured error,
the cycle-level adapter, and the speed of a 1,000-request serving run."""
from __future__ import annotations

import time

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import ArchsimError
from archsim.gpu import simulate_gpu_iteration
from archsim.results import IterationResult
from archsim.serving import (CachingTimer, CycleLevelTimer, IterationMix, GpuTimer,
                             SurrogateTimer, kv_budget, load_request_set, measure_surrogate_error,
                             poisson_arrivals, serve, serve_system)
from workloads.models import get_model
from workloads.requests import Batch, Request

MODEL = get_model("gpt3-7b")
GPU = load_config("gpu-a100")


def _mix(q, L, pre=None, ch=None):
    q, L = np.asarray(q), np.asarray(L)
    pre = np.zeros(q.size, bool) if pre is None else np.asarray(pre)
    return IterationMix(np.arange(q.size), q, L, pre, None if ch is None else np.asarray(ch))


@pytest.fixture(scope="module")
def sharegpt_1000():
    return load_request_set(MODEL, dataset="sharegpt", n=1000, seed=0)


@pytest.fixture(scope="module")
def exact():
    return GpuTimer(GPU, MODEL)


@pytest.mark.parametrize("mode", ["roofline", "calibrated"])
def test_gpu_timer_equals_the_gpu_baseline(mode):
    cfg = load_config("gpu-a100", [f"gpu.mode={mode}"])
    lens = [120, 7, 900]
    b = Batch(tuple(Request(i, L, 5, L) for i, L in enumerate(lens)))
    s, src = GpuTimer(cfg, MODEL).time(_mix([1, 1, 1], lens))
    assert src == mode
    assert s == pytest.approx(simulate_gpu_iteration(cfg, MODEL, b).seconds_per_iteration,
                              rel=1e-9)


class CountingTimer:
    def __init__(self):
        self.calls = 0

    def time(self, mix):
        self.calls += 1
        return 1e-3 * (1 + mix.context_tokens.sum() / 1e4), "cycle-level"

    def describe(self):
        return "counting"


def test_exact_cache_reuses_only_identical_shapes():
    inner = CountingTimer()
    c = CachingTimer(inner)
    assert c.time(_mix([1, 1], [10, 20], ch=[0, 1]))[1] == "cycle-level"
    assert c.time(_mix([1, 1], [20, 10], ch=[1, 0]))[1] == "reused"     # same multiset
    assert c.time(_mix([1, 1], [10, 20], ch=[1, 0]))[1] == "cycle-level"  # other placement
    assert c.time(_mix([1, 1], [10, 21], ch=[0, 1]))[1] == "cycle-level"
    assert (c.hits, c.misses, inner.calls) == (1, 3, 3)


def test_aggregate_cache_buckets_token_sums_to_one_percent():
    c = CachingTimer(CountingTimer(), key="aggregate")
    c.time(_mix([1] * 4, [1000, 1000, 1000, 1000]))
    assert c.time(_mix([1] * 4, [1001, 1000, 1000, 1002]))[1] == "reused"
    assert c.time(_mix([1] * 4, [1100, 1000, 1000, 1000]))[1] != "reused"
    assert c.time(_mix([1] * 5, [800] * 5))[1] != "reused"      # request count is exact
    with pytest.raises(ArchsimError, match="cache key"):
        CachingTimer(CountingTimer(), key="fuzzy")


def test_surrogate_within_three_percent_of_the_exact_timer(sharegpt_1000, exact):
    """The machinery the cycle-level target (<= 3 %) will be tested with, proven against the
    roofline as the exact timer: online out-of-sample checks, 200 sampled iterations of a
    reference run, and the serving metrics themselves."""
    cap = kv_budget(GPU, MODEL).capacity_tokens
    for arrivals, chunk in ((None, None), (20.0, 512)):
        rs = sharegpt_1000 if arrivals is None else sharegpt_1000.with_arrivals(
            poisson_arrivals(len(sharegpt_1000), arrivals, seed=1), "poisson")
        mixes: list[IterationMix] = []
        ref = serve(rs, exact, kv_capacity_tokens=cap, chunked_prefill_tokens=chunk,
                    on_iteration=lambda r: mixes.append(r.mix))
        sur = SurrogateTimer(exact, check_every=20, check_growth=1)
        res = serve(rs, sur, kv_capacity_tokens=cap, chunked_prefill_tokens=chunk)
        by = res.iterations_by_source
        assert sum(by.values()) == res.iterations and by["surrogate"] > 0.8 * res.iterations
        online = res.surrogate_error
        assert online["checked"] >= 30 and online["mean"] <= 0.03 and online["p95"] <= 0.03
        rng = np.random.default_rng(7)
        sample = [mixes[i] for i in rng.choice(len(mixes), 200, replace=False)]
        err = measure_surrogate_error(sur, exact, sample)
        assert err["n"] >= 190 and err["mean"] <= 0.03 and err["p95"] <= 0.03
        assert res.makespan_s == pytest.approx(ref.makespan_s, rel=0.01)
        assert res.ttft_s.p50 == pytest.approx(ref.ttft_s.p50, rel=0.03)
        assert res.tpot_s.p50 == pytest.approx(ref.tpot_s.p50, rel=0.03)


def test_surrogate_times_exactly_until_calibrated_and_outside_its_range(exact):
    sur = SurrogateTimer(exact, min_samples=4, check_every=1000)
    for n in range(10, 14):
        assert sur.time(_mix([1] * n, [100] * n))[1] == "calibrated"
    assert sur.time(_mix([1] * 11, [101] * 11))[1] == "surrogate"
    assert sur.time(_mix([1] * 40, [100] * 40))[1] == "calibrated"  # more requests than seen
    assert sur.predict(_mix([5], [5], pre=[True])) is None           # prefill not calibrated


def test_surrogate_reuses_cached_exact_times_first():
    inner = CountingTimer()
    sur = SurrogateTimer(CachingTimer(inner))
    m = _mix([1, 1], [10, 20])
    sur.time(m)
    assert sur.time(m)[1] == "reused" and inner.calls == 1


def test_thousand_request_sharegpt_run_takes_seconds(sharegpt_1000):
    t0 = time.perf_counter()
    res = serve_system("gpu", MODEL, sharegpt_1000)
    wall = time.perf_counter() - t0
    assert res.n_requests == 1000 and all(r.finish_s > 0 for r in res.requests)
    assert res.iterations > 2000 and wall < 10.0
    assert res.iterations_by_source == {"calibrated": res.iterations}
    assert res.peak_kv_tokens <= res.kv_capacity_tokens


def _fake_simulate(cfg, model, batch, phase="decode", **kw):
    cycles = 1000 * len(batch) + sum(r.seq_len for r in batch)
    return IterationResult(system=cfg.name, model=model.name, phase=phase, batch_size=len(batch),
                           tokens=len(batch), timing_source="cycle-level",
                           cycles_per_iteration=cycles, npu_freq_mhz=cfg.npu.freq_mhz)


def test_cycle_level_timer_simulates_a_mixed_iteration_as_one_program(monkeypatch):
    calls = []

    def fake(cfg, model, batch, phase="decode", **kw):
        calls.append((phase, [(r.seq_len, r.q_tokens, r.channel) for r in batch]))
        return _fake_simulate(cfg, model, batch, phase, **kw)

    monkeypatch.setattr("archsim.serving.systems.simulate_iteration", fake)
    t = CycleLevelTimer(load_config("neupims"), MODEL)
    s, src = t.time(_mix([1, 1, 7], [50, 60, 7], pre=[False, False, True], ch=[3, 4, 5]))
    assert src == "cycle-level" and t.calls == 1
    assert calls[-1] == ("mixed", [(50, 1, 3), (60, 1, 4), (7, 7, 5)])
    assert s == pytest.approx((3000 + 117) * 1e-9)
    t.time(_mix([4], [9], pre=[True]))             # a chunk after 5 cached tokens
    assert calls[-1] == ("mixed", [(9, 4, None)])
    t.time(_mix([9, 3], [9, 3], pre=[True, True]))   # whole prompts
    assert calls[-1] == ("prefill", [(9, None, None), (3, None, None)])
    t.time(_mix([1], [9]))
    assert calls[-1] == ("decode", [(9, None, None)])


def test_serving_an_npu_system_counts_sources(monkeypatch, sharegpt_1000):
    monkeypatch.setattr("archsim.serving.systems.simulate_iteration", _fake_simulate)
    res = serve_system("neupims", MODEL, sharegpt_1000, timing="surrogate")
    by = res.iterations_by_source
    assert set(by) <= {"cycle-level", "reused", "surrogate"} and by["surrogate"] > by.get(
        "cycle-level", 0)
    assert "KV channels min_load over 32" in res.scheduler


def test_surrogate_checks_at_growing_gaps(exact):
    """Default cadence: the 5th eligible iteration, then gaps of 10, 20, 40 (check_growth 2);
    check_growth 1 keeps a fixed gap."""
    for growth, want in ((2.0, 4), (1.0, 20)):
        sur = SurrogateTimer(exact, min_samples=3, check_every=5, check_growth=growth)
        for n in (10, 12, 14, 16):
            sur.time(_mix([1] * n, [100] * n))
        for _ in range(100):
            sur.time(_mix([1] * 13, [100] * 13))
        f = sur.fits["decode"]
        assert len(f.checks) == want, (growth, f.eligible, len(f.checks))
    with pytest.raises(ArchsimError, match="check_growth"):
        SurrogateTimer(exact, check_growth=0.5)


def test_pim_lockstep_tokens_walk_each_channels_list_in_step_per_sub_batch():
    """The lock-step input of the surrogate (``pim_lockstep_tokens``): the compiler's sub-batch
    split (``mapping.subbatch.split_sub_batches``), then per sub-batch Σ over steps k of the
    largest (context + LOCKSTEP_REQUEST_TOKENS) among the channels' k-th requests, batch order
    within a channel; the largest sub-batch counts. Prefill requests and mixes without
    channels give 0, and a surrogate built without sub-batches leaves the input at 0."""
    from archsim.serving.surrogate import (LOCKSTEP_REQUEST_TOKENS as A, pim_lockstep_tokens,
                                           surrogate_point)
    from mapping.subbatch import split_sub_batches

    rng = np.random.default_rng(3)
    for n, n_ch, subs in ((1, 4, 2), (7, 3, 2), (40, 8, 2), (33, 5, 3), (12, 4, 1)):
        L = rng.integers(1, 3000, n)
        ch = rng.integers(0, n_ch, n)
        mix = _mix(np.ones(n, np.int64), L, ch=ch)
        sub = split_sub_batches(L, ch, min(subs, n), "half").sub_batch
        want = 0
        for s in range(min(subs, n)):
            lists: dict[int, list[int]] = {}
            for i in range(n):                        # batch order
                if sub[i] == s:
                    lists.setdefault(int(ch[i]), []).append(int(L[i]) + A)
            depth = max(map(len, lists.values()))
            want = max(want, sum(max(v[k] for v in lists.values() if k < len(v))
                                 for k in range(depth)))
        assert pim_lockstep_tokens(mix, subs) == want
        assert surrogate_point(mix, subs)[6] == want and surrogate_point(mix)[6] == 0
    pre = _mix([5, 9], [5, 9], pre=[True, True], ch=[0, 1])
    assert pim_lockstep_tokens(pre, 2) == 0
    assert pim_lockstep_tokens(_mix([1, 1], [10, 20]), 2) == 0
    with pytest.raises(ArchsimError, match="sub_batch_policy"):
        SurrogateTimer(None, sub_batches=2, sub_batch_policy="even")
