"""Pipeline parallelism with micro-batches in flight: the GPipe schedule (fill and drain
bubbles, hand-offs, link occupancy, LM head) and the iteration of a batch split into
``system.micro_batches`` micro-batches, each simulated cycle-level."""
from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.errors import ArchsimError, ConfigError
from archsim.system import simulate_iteration
from archsim.system.pipeline import gpipe_schedule
from workloads.models import get_model
from workloads.requests import default_batch


@pytest.mark.parametrize("M,S", [(1, 1), (1, 4), (4, 4), (8, 2), (3, 5)])
def test_equal_micro_batches_take_m_plus_s_minus_one_stage_times(M, S):
    s = gpipe_schedule([10.0] * M, S)
    assert s.makespan_cycles == pytest.approx((M + S - 1) * 10.0)
    assert s.bubble_fraction == pytest.approx((S - 1) / (M + S - 1))
    assert s.finish_cycles.tolist() == pytest.approx([(S + m) * 10.0 for m in range(M)])


def test_one_batch_in_flight_is_stages_hand_offs_and_the_lm_head():
    s = gpipe_schedule([100.0], 4, handoff_cycles=7.0, last_stage_extra_cycles=30.0)
    assert s.makespan_cycles == pytest.approx(4 * 100 + 3 * 7 + 30)


def test_a_slow_hand_off_holds_the_link_and_delays_the_next_micro_batch():
    # stage 10 cycles, hand-off 25: micro-batch 1 leaves stage 0 at 20 but the link is busy
    # with micro-batch 0's hand-off until 35, so it reaches stage 1 at 60, not 45
    s = gpipe_schedule([10.0, 10.0], 2, handoff_cycles=25.0)
    assert s.finish_cycles.tolist() == pytest.approx([45.0, 70.0])


def test_unequal_micro_batches_follow_the_recurrence():
    # stage times 5 then 20 over 2 stages: mb0 0-5, 5-10; mb1 5-25, 25-45
    s = gpipe_schedule([5.0, 20.0], 2)
    assert s.finish_cycles.tolist() == pytest.approx([10.0, 45.0])
    assert s.busy_cycles == pytest.approx(50.0)
    with pytest.raises(ArchsimError, match="0 micro-batches"):
        gpipe_schedule([], 2)


@pytest.fixture(scope="module")
def pp2():
    m = get_model("tiny-gpt").replace(n_layers=4, pipeline_parallel=2)
    return m, default_batch(m, 16, "sharegpt", seed=0)


def test_one_micro_batch_is_the_one_batch_schedule(pp2):
    m, b = pp2
    r = simulate_iteration(load_config("neupims"), m, b, with_events=False)
    x = r.extra
    assert r.cycles_per_iteration == pytest.approx(
        2 * x["stage_cycles"] + x["pipeline_handoff_cycles"] + x["lm_head"]["cycles"])
    assert x["pipeline"]["micro_batches"] == 1


def test_four_micro_batches_in_flight(pp2):
    m, b = pp2
    r = simulate_iteration(load_config("neupims", ["system.micro_batches=4"]), m, b,
                           with_events=False)
    mbs = r.extra["micro_batches"]
    p = r.extra["pipeline"]
    assert len(mbs) == 4 and sum(x["requests"] for x in mbs) == 16 and r.tokens == 16
    # the schedule of the simulated micro-batches is the iteration
    sched = gpipe_schedule([x["stage_cycles"] for x in mbs], 2,
                           [x["pipeline_handoff_cycles"] for x in mbs],
                           [x["lm_head_cycles"] for x in mbs])
    assert r.cycles_per_iteration == pytest.approx(sched.makespan_cycles)
    assert p["finish_cycles"][-1] == pytest.approx(r.cycles_per_iteration)
    assert p["request_latency_cycles"]["mean"] < r.cycles_per_iteration
    assert 0.0 < p["bubble_fraction"] < 0.5 and p["gpipe_bubble_fraction"] == pytest.approx(0.2)
    assert sum(r.stage_seconds.values()) == pytest.approx(r.seconds_per_iteration)
    assert any("4 micro-batches in flight" in n for n in r.notes)


def test_more_micro_batches_than_requests_run_one_per_request(pp2):
    m, b = pp2
    r = simulate_iteration(load_config("neupims", ["system.micro_batches=32"]), m, b.head(2),
                           with_events=False)
    assert r.extra["pipeline"]["micro_batches"] == 2
    assert any("only 2 requests, so 2 micro-batches ran" in n for n in r.notes)


def test_micro_batches_are_refused_on_the_gpu_model():
    with pytest.raises(ConfigError, match="micro_batches 2 applies to the NPU systems"):
        load_config("gpu-a100", ["system.micro_batches=2"])
    with pytest.raises(ConfigError, match="system.micro_batches"):
        load_config("neupims", ["system.micro_batches=0"])
