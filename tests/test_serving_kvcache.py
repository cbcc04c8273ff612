"""The serving KV cache: paged blocks, admission by free blocks, growth, preemption by
recompute and by swap (latest-admitted first), per-channel pools on PIM systems, and a serving
run whose KV cache is too small for its load (it preempts and still finishes every request)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from archsim.cli import main
from archsim.config import load_config
from archsim.errors import ArchsimError, ConfigError
from archsim.serving import (KvCache, KvPolicy, kv_budget, make_request_set, preemption_victim,
                             serve, serve_system)
from workloads.models import get_model

MODEL = get_model("gpt3-7b")


class FixedTimer:
    """Every iteration takes ``dt`` seconds; remembers the mixes."""

    def __init__(self, dt: float = 1.0) -> None:
        self.dt = dt
        self.mixes = []

    def time(self, mix):
        self.mixes.append(mix)
        return self.dt, "roofline"

    def describe(self):
        return "fixed"


def _rs(inp, out, arr=None, model=MODEL):
    rs = make_request_set(inp, out, model)
    return rs if arr is None else rs.with_arrivals(np.array(arr, float), "given")


def test_blocks_round_up_and_a_window_caps_them():
    kv = KvCache(KvPolicy("paged", 16), 100, 3)
    assert kv.blocks_per_pool == 6 and kv.pool_tokens == 96
    assert kv.blocks_for(1) == 1 and kv.blocks_for(16) == 1 and kv.blocks_for(17) == 2
    assert kv.blocks_for(np.array([0, 33])).tolist() == [0, 3]
    assert KvCache(KvPolicy("paged", 16), 100, 3, window=20).blocks_for(1000) == 2
    with pytest.raises(ArchsimError, match="holds no block of serving.kv_block_tokens = 16"):
        KvCache(KvPolicy("paged", 16), 15, 1)


def test_the_latest_admitted_request_is_the_victim():
    seq = np.array([5, 9, 2, 7])
    assert preemption_victim(np.array([0, 2, 3]), seq) == 3
    assert preemption_victim(np.array([1, 0]), seq) == 1
    with pytest.raises(ArchsimError, match="simulator bug"):
        preemption_victim(np.array([], np.int64), seq)


def test_paged_admission_growth_and_recompute_preemption_hand_trace():
    # 2-token blocks, 4 blocks; both prompts (1 block each) are admitted at once. At the
    # fourth iteration both contexts cross into a third block with no block free: request 0
    # (admitted first) grows, request 1 (the latest) is preempted, drops its 4 cached tokens,
    # waits at the head of the queue and prefills prompt + 3 generated = 5 tokens again; that
    # prefill yields its last token.
    t = FixedTimer()
    res = serve(_rs([2, 2], [4, 4]), t, kv_capacity_tokens=8, kv=KvPolicy("paged", 2))
    assert [m.phase for m in t.mixes] == ["prefill", "decode", "decode", "decode", "prefill"]
    assert [m.request_ids.tolist() for m in t.mixes] == [[0, 1], [0, 1], [0, 1], [0], [1]]
    assert t.mixes[3].context_tokens.tolist() == [5]
    assert t.mixes[4].q_tokens.tolist() == [5] and t.mixes[4].context_tokens.tolist() == [5]
    r0, r1 = res.requests
    assert (r0.finish_s, r1.finish_s) == (4, 5)
    assert r1.first_token_s == 1 and r1.admitted_s == 0           # first admission, first token
    assert (r0.preemptions, r1.preemptions) == (0, 1)
    assert res.preemptions == 1 and res.recomputed_tokens == 4
    assert r1.n_iterations == 4 and r1.last_iteration == 4
    assert res.peak_kv_tokens == 8 and res.swap_out_bytes == 0
    assert "paged KV cache (2-token blocks), preemption by recompute" in res.scheduler


def test_swap_preemption_copies_the_blocks_out_and_back_over_the_host_link():
    # the same load with swap: request 1's 2 blocks (2 tokens x 1000 B each) go out over a
    # 4000 B/s link (1 s, added to the iteration that preempts it) and come back (1 s) before
    # it decodes its last token; its state is kept, so no prefill is repeated
    t = FixedTimer()
    pol = KvPolicy("paged", 2, "swap", 4000.0, kv_bytes_per_token=1000)
    res = serve(_rs([2, 2], [4, 4]), t, kv_capacity_tokens=8, kv=pol)
    assert [m.phase for m in t.mixes] == ["prefill", "decode", "decode", "decode", "decode"]
    r0, r1 = res.requests
    assert (r0.finish_s, r1.finish_s) == (5, 7)
    assert res.swap_out_bytes == res.swap_in_bytes == 4000
    assert res.swap_s == pytest.approx(2.0) and res.recomputed_tokens == 0
    assert t.mixes[4].context_tokens.tolist() == [5]


def test_reserve_never_preempts_and_holds_the_second_request_back():
    t = FixedTimer()
    res = serve(_rs([2, 2], [4, 4]), t, kv_capacity_tokens=8, kv=KvPolicy("reserve", 2))
    assert res.preemptions == 0
    r0, r1 = res.requests
    assert r1.admitted_s == r0.finish_s == 4 and res.max_batch_size == 1


def test_per_channel_pools_keep_a_request_in_its_channel_and_preempt_only_there():
    # 2 channels of 6 one-token blocks; round robin puts 0 and 2 on channel 0, 1 on channel 1
    # (3 + 3 tokens fill channel 0). Channel 0 is full at the first decode: its latest request
    # (2) is preempted; request 1 grows in channel 1 untouched.
    t = FixedTimer()
    res = serve(_rs([3, 3, 3], [3, 3, 3]), t, kv_capacity_tokens=12,
                kv=KvPolicy("paged", 1), n_channels=2, channel_policy="round_robin",
                kv_pools_per_channel=True)
    assert t.mixes[0].channels.tolist() == [0, 1, 0]
    assert [r.preemptions for r in res.requests] == [0, 0, 1]
    assert all(np.isfinite(r.finish_s) for r in res.requests)
    assert "a block pool per channel" in res.scheduler
    # a request that fits the device but no channel's pool is refused up front
    with pytest.raises(ArchsimError, match="one channel's KV pool holds 6 .a request's KV lives "
                                           "in one PIM channel"):
        serve(_rs([5], [3]), FixedTimer(), kv_capacity_tokens=12, kv=KvPolicy("paged", 1),
              n_channels=2, kv_pools_per_channel=True)


def test_round_robin_skips_a_channel_without_room():
    # channel 0 holds one 4-token prompt; the pointer would put request 2 there, it goes on
    t = FixedTimer()
    serve(_rs([4, 1, 2], [1, 1, 1]), t, kv_capacity_tokens=10, kv=KvPolicy("paged", 1),
          n_channels=2, channel_policy="round_robin", kv_pools_per_channel=True)
    assert t.mixes[0].channels.tolist() == [0, 1, 1]


def test_a_kv_cache_too_small_for_the_load_preempts_and_finishes_every_request():
    # 120 ShareGPT-like requests at once on a GPU whose memory leaves ~2,900 KV tokens
    m = get_model("tiny-gpt")
    rs = make_request_set(*_sharegpt(120, m), m)
    res = serve_system("gpu", m, rs, overrides=["gpu.memory_bytes=4000000"],
                       timer=FixedTimer(1e-3))
    assert res.preemptions > 0 and res.recomputed_tokens > 0
    assert all(np.isfinite([r.finish_s for r in res.requests]))
    assert sorted(r.index for r in res.requests) == list(range(120))
    assert res.peak_kv_tokens <= res.kv_capacity_tokens
    swap = serve_system("gpu", m, rs, timer=FixedTimer(1e-3),
                        overrides=["gpu.memory_bytes=4000000", "serving.preemption=swap"])
    assert swap.preemptions > 0 and swap.swap_out_bytes == swap.swap_in_bytes > 0
    assert all(np.isfinite([r.finish_s for r in swap.requests]))


def test_pim_channel_pools_on_neupims_preempt_and_finish_every_request():
    # a neupims device with 16 rows per bank: 481 KV tokens per channel pool, 15,417 in all
    m = get_model("tiny-gpt")
    rs = make_request_set(*_sharegpt(150, m), m)
    cfg = load_config("neupims", ["memory.org.rows=16"])
    bud = kv_budget(cfg, m)
    res = serve_system(cfg, m, rs, timer=FixedTimer(1e-3))
    assert res.preemptions > 0 and "a block pool per channel" in res.scheduler
    assert all(np.isfinite([r.finish_s for r in res.requests]))
    assert res.kv_capacity_tokens == bud.capacity_tokens


def test_archsim_run_serve_reports_preemptions_in_the_output_json_and_csv(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    out, csv = tmp_path / "r.json", tmp_path / "r.csv"
    assert main(["run", "--system", "gpu", "--model", "tiny-gpt", "--serve", "--num-requests",
                 "60", "--quiet", "--set", "gpu.memory_bytes=4000000", "--json", str(out),
                 "--csv", str(csv)]) == 0
    text = capsys.readouterr().out
    assert "preemptions" in text and "recomputed KV" in text
    d = json.loads(out.read_text())["serving"]
    assert d["preemptions"] > 0 and "preemptions" in d["definitions"]
    df = pd.read_csv(csv)
    assert sorted(df["request"]) == list(range(60))            # every request exactly once
    assert df["preemptions"].sum() == d["preemptions"]
    assert df["finish_s"].notna().all()


@pytest.mark.parametrize("sets,why", [
    (["serving.kv_block_tokens=0"], "serving.kv_block_tokens"),
    (["serving.kv_allocation=reserve", "serving.preemption=swap"],
     "preemption swap applies to kv_allocation: paged"),
    (["serving.swap_bandwidth_bytes_per_s=1e9"],
     "swap_bandwidth_bytes_per_s applies to preemption: swap"),
    (["serving.kv_allocation=lru"], "serving.kv_allocation"),
])
def test_bad_serving_keys_are_refused_naming_the_key(sets, why):
    with pytest.raises(ConfigError, match=why):
        load_config("neupims", sets)


def _sharegpt(n, model):
    from workloads.requests import sample_requests

    b = sample_requests("sharegpt", n, seed=0, max_seq_len=model.max_seq_len)
    return [r.input_len for r in b], [r.output_len for r in b]
