"""Continuous-batching scheduler: hand-traced schedules, KV admission, chunked prefill, arrivals,
request validation, capacity and the system/workload plumbing of the Python API."""
from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import ArchsimError
from archsim.serving import (SYSTEM_PRESETS, IterationMix, KvPolicy, check_batch_fits, kv_budget,
                             load_request_set, load_timestamps, make_batch, make_request_set,
                             poisson_arrivals, resolve_system, run_iterations, serve,
                             serve_system)
from workloads.models import get_model
from workloads.requests import Batch, Request

MODEL = get_model("gpt3-7b")
#: whole-request reservation at token granularity: the hand-traced admissions below
RESERVE = KvPolicy("reserve", 1)


class FixedTimer:
    """Every iteration takes ``dt`` seconds; remembers the mixes."""

    def __init__(self, dt: float = 1.0) -> None:
        self.dt = dt
        self.mixes: list[IterationMix] = []

    def time(self, mix):
        self.mixes.append(mix)
        return self.dt, "roofline"

    def describe(self):
        return "fixed"


def _rs(inp, out, arr=None):
    rs = make_request_set(inp, out, MODEL)
    return rs if arr is None else rs.with_arrivals(np.array(arr, float), "given")


def test_prefill_then_decode_hand_trace():
    t = FixedTimer()
    res = serve(_rs([3, 4], [2, 3]), t, kv_capacity_tokens=100)
    assert [m.phase for m in t.mixes] == ["prefill", "decode", "decode"]
    assert t.mixes[0].q_tokens.tolist() == [3, 4] and t.mixes[0].context_tokens.tolist() == [3, 4]
    # decode 1: each request processes its first generated token, context = input + 1
    assert t.mixes[1].q_tokens.tolist() == [1, 1]
    assert t.mixes[1].context_tokens.tolist() == [4, 5]
    assert t.mixes[2].request_ids.tolist() == [1] and t.mixes[2].context_tokens.tolist() == [6]
    r0, r1 = res.requests
    assert (r0.first_token_s, r0.finish_s, r1.first_token_s, r1.finish_s) == (1, 2, 1, 3)
    assert res.tpot_s.p50 == pytest.approx(1.0) and res.ttft_s.max == 1.0
    assert res.iterations == 3 and res.iterations_by_phase == {"prefill": 1, "decode": 2}
    assert res.iterations_by_source == {"roofline": 3}
    assert res.makespan_s == 3 and res.output_tokens == 5


def test_single_token_requests_finish_with_their_prefill():
    res = serve(_rs([5, 5], [1, 1]), FixedTimer(), kv_capacity_tokens=100)
    assert res.iterations == 1 and [r.finish_s for r in res.requests] == [1, 1]


def test_kv_reservation_holds_back_a_request_until_space_frees():
    # request 0 reserves 3 + 2 - 1 = 4 tokens, request 1 needs 4 + 3 - 1 = 6; capacity 8
    res = serve(_rs([3, 4], [2, 3]), FixedTimer(), kv_capacity_tokens=8, kv=RESERVE)
    r0, r1 = res.requests
    assert r1.admitted_s == r0.finish_s == 2
    assert res.peak_kv_tokens == 6 and res.max_batch_size == 1


def test_a_sliding_window_reserves_at_most_the_window_per_request():
    # window 16: each request reserves min(10 + 20 - 1, 16) = 16 tokens, so both fit 32 at
    # once; with full attention (29 each) the second waits for the first
    rs = make_request_set([10, 10], [20, 20], get_model("tiny-mistral"))
    res = serve(rs, FixedTimer(), kv_capacity_tokens=32, kv_window=16, kv=RESERVE)
    assert res.max_batch_size == 2 and res.peak_kv_tokens == 32
    assert [r.admitted_s for r in res.requests] == [0, 0]
    full = serve(rs, FixedTimer(), kv_capacity_tokens=32, kv=RESERVE)
    assert full.max_batch_size == 1 and full.requests[1].admitted_s == full.requests[0].finish_s
    with pytest.raises(ArchsimError, match="needs 29 KV-cache tokens"):
        serve(rs, FixedTimer(), kv_capacity_tokens=20, kv=RESERVE)
    assert serve(rs, FixedTimer(), kv_capacity_tokens=20, kv_window=16,
                 kv=RESERVE).max_batch_size == 1


def test_serve_system_reserves_the_models_window():
    m = get_model("tiny-mistral")                      # window 16, context 256
    bud = kv_budget(load_config("gpu-a100"), m)
    mem = bud.weight_bytes + 40 * bud.kv_bytes_per_token           # room for 40 KV tokens
    rs = make_request_set([128, 128], [128, 128], m)   # 256 tokens each with full attention
    res = serve_system("gpu", m, rs, overrides=[f"gpu.memory_bytes={mem}"], timer=FixedTimer())
    assert res.kv_capacity_tokens == 40
    assert res.max_batch_size == 2 and res.peak_kv_tokens == 32
    with pytest.raises(ArchsimError, match="request index 0 needs 255 KV-cache tokens"):
        serve_system("gpu", m.replace(sliding_window=None), rs,
                     overrides=[f"gpu.memory_bytes={mem}"], timer=FixedTimer())


def test_a_batch_fits_the_kv_budget_only_because_of_the_window():
    m = get_model("tiny-mistral")                      # window 16
    cfg = load_config("neupims", ["memory.org.rows=32"])
    cap = kv_budget(cfg, m).capacity_tokens

    def batch(n):
        return Batch(tuple(Request(i, 256, 4, 256) for i in range(n)))

    n = cap // 16                                      # n x 16 <= cap < n x 256
    assert check_batch_fits(cfg, m, batch(n)).capacity_tokens == cap
    check_batch_fits(cfg, m, batch(n), extra_tokens_per_request=7)    # still 16 each
    with pytest.raises(ArchsimError, match=f"needs {n * 256:,} KV-cache tokens"):
        check_batch_fits(cfg, m.replace(sliding_window=None), batch(n))
    with pytest.raises(ArchsimError, match=f"needs {(n + 1) * 16:,} KV-cache tokens .at most "
                                           "16 per request: the sliding window"):
        check_batch_fits(cfg, m, batch(n + 1))


def test_max_batch_limits_requests_per_iteration():
    res = serve(_rs([2] * 5, [3] * 5), FixedTimer(), kv_capacity_tokens=10**6, max_batch=2)
    assert res.max_batch_size == 2
    assert res.requests[4].admitted_s > 0


def test_request_larger_than_the_kv_cache_is_rejected_with_its_index():
    with pytest.raises(ArchsimError, match="request index 1 needs 1,029 KV-cache tokens"):
        serve(_rs([3, 1000], [2, 30]), FixedTimer(), kv_capacity_tokens=1000)


def test_chunked_prefill_splits_prompts_and_mixes_in_decodes():
    t = FixedTimer()
    res = serve(_rs([10, 2], [2, 4], [0.0, 0.0]), t, kv_capacity_tokens=100,
                chunked_prefill_tokens=4)
    q = [m.q_tokens.tolist() for m in t.mixes]
    L = [m.context_tokens.tolist() for m in t.mixes]
    assert q[:3] == [[4], [4], [2, 2]] and L[:3] == [[4], [8], [10, 2]]
    assert t.mixes[3].phase == "decode"
    assert res.requests[0].first_token_s == 3 and res.requests[1].first_token_s == 3
    assert res.chunked_prefill_tokens == 4
    # a decode shares the next iteration with a prompt chunk
    t2 = FixedTimer()
    serve(_rs([2, 6], [5, 2], [0.0, 1.5]), t2, kv_capacity_tokens=100, chunked_prefill_tokens=4)
    mixed = [m for m in t2.mixes if m.phase == "mixed"]
    assert mixed and mixed[0].q_tokens.tolist() == [1, 3]


def test_token_gaps_show_the_decode_stall_behind_a_prefill_and_its_absence_with_chunks():
    """Request 0 decodes while request 1's 8-token prompt arrives: prefill-first stalls its
    decode behind the prompt's iteration (a 2-iteration gap), chunked prefill lets the chunks
    ride along (every gap one iteration) and counts the mixed iterations."""
    rs = _rs([2, 8], [6, 2], [0.0, 1.5])
    whole = serve(rs, FixedTimer(), kv_capacity_tokens=100)
    assert whole.requests[0].max_token_gap_s == 2.0
    chunked = serve(rs, FixedTimer(), kv_capacity_tokens=100, chunked_prefill_tokens=4)
    assert chunked.requests[0].max_token_gap_s == 1.0
    assert chunked.token_gap_s.max == 1.0 and whole.token_gap_s.max == 2.0
    assert chunked.iterations_by_phase["mixed"] == 3 == chunked.summary()[
        "decode_iterations_with_prefill"]
    assert chunked.decode_iterations == chunked.iterations - chunked.iterations_by_phase.get(
        "prefill", 0)
    assert np.isnan(serve(_rs([3], [1]), FixedTimer(), kv_capacity_tokens=100)
                    .requests[0].max_token_gap_s)


def test_idle_system_jumps_to_the_next_arrival():
    res = serve(_rs([2, 2], [2, 2], [0.0, 100.0]), FixedTimer(), kv_capacity_tokens=100)
    r1 = res.requests[1]
    assert r1.admitted_s == 100 and r1.first_token_s == 101 and r1.ttft_s == 1
    assert res.makespan_s == 102


def test_poisson_arrivals_are_seeded_with_the_requested_rate():
    a = poisson_arrivals(20000, rate_per_s=50.0, seed=3)
    assert np.array_equal(a, poisson_arrivals(20000, 50.0, seed=3))
    assert np.all(np.diff(a) >= 0)
    assert np.mean(np.diff(a)) == pytest.approx(1 / 50.0, rel=0.03)
    with pytest.raises(ArchsimError, match="rate"):
        poisson_arrivals(3, 0.0)


def test_timestamps_files(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_text("# seconds\n0.5\n\n1.25\n")
    assert load_timestamps(plain).tolist() == [0.5, 1.25]
    csv = tmp_path / "b.csv"
    csv.write_text("id,arrival_s\n0,0.1\n1,0.2\n")
    assert load_timestamps(csv).tolist() == [0.1, 0.2]
    bad = tmp_path / "c.txt"
    bad.write_text("0.1\nsoon\n")
    with pytest.raises(ArchsimError, match=r"c.txt:2"):
        load_timestamps(bad)


def test_request_validation_names_the_index_and_adjusts_with_notes():
    with pytest.raises(ArchsimError, match="request index 2 has a prompt of 4000 tokens"):
        make_request_set([5, 6, 4000], [1, 1, 1], MODEL)
    rs = make_request_set([5, 2000, 7], [0, 100, 3], MODEL)
    assert rs.index.tolist() == [1, 2] and rs.output_toks.tolist() == [49, 3]
    assert any("dropped" in n for n in rs.notes) and any("truncated" in n for n in rs.notes)


def test_built_in_and_file_request_sets(tmp_path):
    rs = load_request_set(MODEL, dataset="alpaca", n=50, seed=1)
    assert len(rs) == 50 and rs.input_toks.max() <= MODEL.max_seq_len
    f = tmp_path / "l.tsv"
    f.write_text("input_toks\toutput_toks\n10\t5\n20\t6\n30\t7\n")
    assert load_request_set(MODEL, path=f, n=2).input_toks.tolist() == [10, 20]


def test_kv_budget_is_memory_minus_weights_over_kv_bytes_per_token():
    cfg = load_config("gpu-a100")
    b = kv_budget(cfg, MODEL)
    weights = (32 * MODEL.layer_param_count(4) + -(-MODEL.embedding_param_count() // 4)
               + -(-MODEL.head_param_count() // 4)) * 2
    assert b.weight_bytes == weights
    assert b.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert b.capacity_tokens == (40 * 2**30 - weights) // b.kv_bytes_per_token
    assert kv_budget(load_config("neupims"), MODEL).device_bytes == 32 * 2**30


def test_weights_that_do_not_fit_say_so():
    cfg = load_config("gpu-a100", ["system.tensor_parallel=1", "system.pipeline_parallel=1"])
    with pytest.raises(ArchsimError, match="weights of model 'gpt3-175b' need .* GiB"):
        kv_budget(cfg, get_model("gpt3-175b"))


def test_system_names_map_to_presets_and_files(tmp_path):
    for name, preset in SYSTEM_PRESETS.items():
        label, cfg = resolve_system(name)
        assert label == name and cfg.name == preset
    f = tmp_path / "mine.yaml"
    f.write_text("base: neupims\nname: mine\npim:\n  multipliers_per_bank: 32\n")
    label, cfg = resolve_system(str(f))
    assert label == "mine" and cfg.pim.multipliers_per_bank == 32
    assert resolve_system("gpu", ["gpu.mode=roofline", "gpu.gemm_efficiency=0.5"]
                          )[1].gpu.gemm_efficiency == 0.5
    with pytest.raises(ArchsimError, match="valid systems: neupims, npu-pim, npu, gpu"):
        resolve_system("tpu")


def test_consecutive_decode_iterations_grow_the_context():
    b = make_batch(MODEL, 16, "sharegpt", seed=2)
    res = run_iterations("gpu", MODEL, b, iterations=3)
    ctx = [r.context_tokens for r in res]
    assert ctx[1] - ctx[0] == ctx[2] - ctx[1] == sum(1 for r in b if r.seq_len < 2048)
    assert res[2].seconds_per_iteration >= res[0].seconds_per_iteration


def test_make_batch_leaves_the_channels_to_the_compiler():
    b_rr = make_batch(MODEL, 64, "sharegpt", cfg=load_config("npu-pim-blocked"))
    b_ml = make_batch(MODEL, 64, "sharegpt", cfg=load_config("neupims"))
    assert b_rr.seq_lens.tolist() == b_ml.seq_lens.tolist()
    assert (b_rr.channels == -1).all() and (b_ml.channels == -1).all()


def test_prefill_token_budget_splits_prompts_into_iterations_in_admission_order():
    t = FixedTimer()
    res = serve(_rs([300, 500, 400, 900], [2, 2, 2, 2]), t, kv_capacity_tokens=10_000,
                max_prefill_tokens=800)
    pre = [m.q_tokens.tolist() for m in t.mixes if m.phase == "prefill"]
    assert pre == [[300, 500], [400], [900]]      # the 900-token prompt runs alone
    assert [m.phase for m in t.mixes][:3] == ["prefill"] * 3   # prefill first
    assert res.max_prefill_tokens == 800 and "at most 800 tokens" in res.scheduler
    assert [r.first_token_s for r in res.requests] == [1, 1, 2, 3]
    with pytest.raises(ArchsimError, match="prefill budget"):
        serve(_rs([3], [2]), FixedTimer(), kv_capacity_tokens=100, max_prefill_tokens=0)


def test_serving_defaults_to_vllms_prefill_budget():
    from archsim.serving import default_prefill_budget, serve_system

    assert default_prefill_budget(MODEL) == 2048
    t = FixedTimer(1e-3)
    res = serve_system("gpu", MODEL, _rs([1500, 1000, 40], [2, 2, 2]), timer=t)
    assert res.max_prefill_tokens == 2048
    assert [m.q_tokens.tolist() for m in t.mixes if m.phase == "prefill"] == [[1500], [1000, 40]]
