"""Requests: loaders and their errors, length distributions, warm-up, channel assignment."""
from __future__ import annotations

import json

import numpy as np
import pytest

from workloads.errors import WorkloadError
from workloads.models import get_model
from mapping.channels import place_channels as assign_channels
from workloads.requests import (Batch, LengthTable, Request, approx_token_count,
                                channel_loads, default_batch, length_distribution,
                                load_decode_snapshot, load_length_table, load_request_file,
                                load_sharegpt_json, neupims_attention_cost, sample_requests,
                                warmup_decode_snapshot, write_decode_snapshot)

CLB0 = "neupims/request-traces/clb/share-gpt2-bs512-ms7B-tp4-clb-0.csv"


# ------------------------------------------------------------------------------ shared data
@pytest.mark.data
def test_neupims_clb_snapshot_has_512_requests_on_32_channels_mean_299_9(shared_file):
    batch = load_decode_snapshot(shared_file(CLB0))
    assert len(batch) == 512
    assert set(batch.channels.tolist()) == set(range(32))
    assert batch.seq_lens.mean() == pytest.approx(299.9, abs=0.05)
    batch.validate_for_model(get_model("gpt3-7b"))


@pytest.mark.data
def test_length_summary_matches_the_shared_tables(shared_file):
    """The committed summary is what the script computes from the shared tables."""
    for name in ("sharegpt", "alpaca"):
        table = load_length_table(shared_file(f"neupims/lengths/{name}.tsv"))
        keep = table.output_toks > 0
        dist = length_distribution(name)
        assert dist.mean_input == pytest.approx(table.input_toks[keep].mean(), abs=1e-3)
        assert dist.mean_output == pytest.approx(table.output_toks[keep].mean(), abs=1e-3)
        p50 = np.percentile(table.output_toks[keep], 50)
        assert np.interp(0.5, dist.output_q, dist.output_v) == pytest.approx(p50)


@pytest.mark.data
def test_min_load_balances_a_reference_snapshot_better_than_round_robin(shared_file):
    batch = load_decode_snapshot(shared_file(CLB0))
    rr = channel_loads(assign_channels(batch, 32, "round_robin"), 32)
    ml = channel_loads(assign_channels(batch, 32, "min_load"), 32)
    assert ml.sum() == rr.sum() == batch.seq_lens.sum()
    assert ml.max() - ml.min() < 0.2 * (rr.max() - rr.min())
    # greedy LPT bound: the busiest channel exceeds the mean by at most the largest request
    assert ml.max() <= batch.seq_lens.sum() / 32 + batch.seq_lens.max()


@pytest.mark.data
def test_warmup_seq_len_quantiles_match_the_reference_snapshots(shared_data):
    files = sorted((shared_data / "neupims" / "request-traces" / "clb").glob("*.csv"))
    if not files:
        pytest.skip("no NeuPIMs clb snapshots in the shared data")
    ref = np.concatenate([load_decode_snapshot(f).seq_lens for f in files])
    ours = np.concatenate([warmup_decode_snapshot("sharegpt", 512, seed=s,
                                                  iterations=6000).seq_lens for s in range(3)])
    q = [10, 25, 50, 75, 90]
    np.testing.assert_allclose(np.percentile(ours, q), np.percentile(ref, q), rtol=0.10)


@pytest.mark.data
def test_committed_length_summary_is_what_the_script_makes(shared_data, repo_root, tmp_path):
    import runpy

    script = runpy.run_path(str(repo_root / "scripts" / "make_length_summary.py"))
    for name in ("sharegpt", "alpaca"):
        if not (shared_data / "neupims" / "lengths" / f"{name}.tsv").is_file():
            pytest.skip(f"shared length table {name}.tsv not found")
    out = tmp_path / "summary.json"
    assert script["main"](["--shared", str(shared_data), "--out", str(out)]) == 0
    committed = repo_root / "workloads" / "data" / "length_summary.json"
    assert out.read_text() == committed.read_text()


# ---------------------------------------------------------------------------------- loaders
def test_length_table_loads_rows(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_text("input_toks\toutput_toks\n3\t5\n10\t0\n\n")
    t = load_length_table(p)
    assert t.input_toks.tolist() == [3, 10] and t.output_toks.tolist() == [5, 0]
    b = t.to_batch()
    assert b.seq_lens.tolist() == [3, 10] and b[1].output_len == 0


@pytest.mark.parametrize("body,match", [
    ("input_toks\toutput_toks\n3\t5\n7 8\n", r":3: expected 2 tab-separated fields"),
    ("input_toks\toutput_toks\n3\tx\n", r":2: output_toks = 'x' is not an integer"),
    ("input_toks\toutput_toks\n-3\t4\n", r":2: input_toks = -3 must be >= 0"),
    ("in\tout\n3\t4\n", r":1: expected header 'input_toks<TAB>output_toks'"),
    ("input_toks\toutput_toks\n", r"no rows after the header"),
])
def test_length_table_errors_name_file_and_line(tmp_path, body, match):
    p = tmp_path / "bad.tsv"
    p.write_text(body)
    with pytest.raises(WorkloadError, match=match) as exc:
        load_length_table(p)
    assert str(p) in str(exc.value)


def test_decode_snapshot_round_trips(tmp_path):
    batch = Batch((Request(0, None, None, 5, 1), Request(1, None, None, 2048, 0)))
    p = tmp_path / "snap.csv"
    write_decode_snapshot(batch, p)
    assert p.read_text() == "seq_len,ch_idx\n5,1\n2048,0\n"
    again = load_decode_snapshot(p)
    assert again.seq_lens.tolist() == [5, 2048] and again.channels.tolist() == [1, 0]


@pytest.mark.parametrize("body,match", [
    ("seq_len,ch_idx\n5,1\n0,2\n", r":3: seq_len = 0 must be >= 1"),
    ("seq_len,ch_idx\n5,1,3\n", r":2: expected 2 comma-separated fields"),
    ("seq_len;ch_idx\n5;1\n", r":1: expected header 'seq_len,ch_idx'"),
    ("seq_len,ch_idx\n5,-1\n", r":2: ch_idx = -1 must be >= 0"),
])
def test_decode_snapshot_errors_name_file_and_line(tmp_path, body, match):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(WorkloadError, match=match):
        load_decode_snapshot(p)


def test_sharegpt_json_pairs_each_human_turn_with_the_next_answer(tmp_path):
    convs = [
        {"conversations": [{"from": "system", "value": "be nice"},
                           {"from": "human", "value": "Hello there"},
                           {"from": "gpt", "value": "General Kenobi!"},
                           {"from": "human", "value": "unanswered"}]},
        {"conversations": [{"from": "human", "value": "one two three"},
                           {"from": "gpt", "value": "a"}]},
    ]
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(convs))
    t = load_sharegpt_json(p, count_tokens=lambda s: len(s.split()))
    assert t.input_toks.tolist() == [2, 3] and t.output_toks.tolist() == [2, 1]
    assert len(load_request_file(p)) == 2


def test_sharegpt_json_unknown_role_names_conversation_and_turn(tmp_path):
    p = tmp_path / "sg.json"
    p.write_text(json.dumps([{"conversations": [{"from": "human", "value": "x"}]},
                             {"conversations": [{"from": "robot", "value": "x"}]}]))
    with pytest.raises(WorkloadError, match=r"conversation index 1, turn 0: key 'from' = "
                                            r"'robot' not one of"):
        load_sharegpt_json(p)


def test_sharegpt_jsonl_invalid_line_is_reported(tmp_path):
    p = tmp_path / "sg.jsonl"
    p.write_text('{"conversations": []}\n{oops\n')
    with pytest.raises(WorkloadError, match=r"sg.jsonl:2: invalid JSON"):
        load_sharegpt_json(p)


def test_approx_token_count_rules():
    assert approx_token_count("") == 0
    assert approx_token_count("the cat sat") == 4          # 3 words * 4/3
    assert approx_token_count("Hello, world!") == 5         # 2 words (8/3) + 2 punctuation
    assert approx_token_count("12345") == 2                 # digits in groups of 3
    assert approx_token_count("你好") == 2                   # one per non-ASCII letter
    assert approx_token_count("internationalization") == 3  # 20 letters: 4/3 + 1, rounded up


def test_unknown_request_file_suffix_lists_allowed(tmp_path):
    with pytest.raises(WorkloadError, match=r"allowed: \.csv"):
        load_request_file(tmp_path / "x.parquet")


# ---------------------------------------------------------------------------- batch checks
def test_request_longer_than_model_context_is_reported_with_index():
    batch = Batch((Request(7, 10, 10, 100), Request(9, 10, 10, 300)), source="unit")
    with pytest.raises(WorkloadError, match=r"request index 1 \(id 9\) has seq_len 300 > "
                                            r"max_seq_len 256 of model 'tiny-gpt'"):
        batch.validate_for_model(get_model("tiny-gpt"))


def test_duplicate_request_ids_are_rejected():
    with pytest.raises(WorkloadError, match="duplicate request id 3 at indices 0 and 1"):
        Batch((Request(3, 1, 1, 1), Request(3, 1, 1, 1)))


def test_request_rejects_zero_seq_len():
    with pytest.raises(WorkloadError, match="seq_len must be >= 1"):
        Request(0, 0, 1, 0)


# ------------------------------------------------------------------------- distributions
@pytest.mark.parametrize("name,mean_in,mean_out", [("sharegpt", 80.0, 295.7),
                                                    ("alpaca", 12.1, 55.8)])
def test_builtin_distribution_reproduces_published_means(name, mean_in, mean_out):
    dist = length_distribution(name)
    assert dist.mean_input == pytest.approx(mean_in, rel=0.01)
    assert dist.mean_output == pytest.approx(mean_out, rel=0.01)
    inp, out = dist.sample(400_000, np.random.default_rng(1))
    # inverse-CDF sampling of the quantile grid: within 4 % (the heavy input tail is smeared)
    assert inp.mean() == pytest.approx(mean_in, rel=0.04)
    assert out.mean() == pytest.approx(mean_out, rel=0.02)
    assert inp.min() >= 1 and out.min() >= 1


def test_builtin_distribution_keeps_input_output_dependence():
    """The rank copula must not be the independence table (ShareGPT lengths are correlated)."""
    joint = length_distribution("sharegpt").joint
    expected = joint.sum(1, keepdims=True) * joint.sum(0, keepdims=True) / joint.sum()
    chi2 = ((joint - expected) ** 2 / expected).sum()
    assert chi2 > 1000  # independence would give ~ (B-1)^2 = 361


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(WorkloadError, match="valid: sharegpt, alpaca"):
        sample_requests("lmsys", 4)


def test_sample_requests_is_deterministic_and_respects_max_seq_len():
    a = sample_requests("sharegpt", 2000, seed=5, max_seq_len=512)
    b = sample_requests("sharegpt", 2000, seed=5, max_seq_len=512)
    assert a == b
    assert a.seq_lens.max() <= 512 and (a.seq_lens == np.array([r.input_len for r in a])).all()
    assert sample_requests("sharegpt", 50, seed=6) != sample_requests("sharegpt", 50, seed=7)


def test_sample_requests_from_a_table_draws_its_rows():
    t = LengthTable(np.array([5, 7, 9]), np.array([1, 0, 3]))
    b = sample_requests(t, 200, seed=0)
    pairs = {(r.input_len, r.output_len) for r in b}
    assert pairs == {(5, 1), (9, 3)}  # the zero-output row is never drawn


# ------------------------------------------------------------------------------- warm-up
def test_warmup_reaches_the_reference_steady_state_mean_seq_len():
    """NeuPIMs ShareGPT snapshots (bs 512): mean seq_len 286..326 (mean of ten: 308); the
    time-average of min(in + g, 2048) over the length table is 305.7."""
    means = [warmup_decode_snapshot("sharegpt", 512, seed=s, iterations=6000).seq_lens.mean()
             for s in range(3)]
    assert 285 < np.mean(means) < 330


def test_warmup_snapshot_is_consistent():
    b = warmup_decode_snapshot("alpaca", 64, max_seq_len=128, seed=3, iterations=500,
                               n_channels=8, policy="round_robin")
    assert len(b) == 64 and len(set(b.ids.tolist())) == 64
    assert b.ids.max() >= 64  # requests finished and were replaced
    for r in b:
        assert 1 <= r.seq_len <= 128
        assert r.input_len <= r.seq_len or r.seq_len == 128
        assert r.seq_len - r.input_len < r.output_len or r.seq_len == 128
        assert 0 <= r.channel < 8
    assert b == warmup_decode_snapshot("alpaca", 64, max_seq_len=128, seed=3, iterations=500,
                                       n_channels=8, policy="round_robin")


def test_warmup_with_zero_iterations_is_the_initial_batch():
    b = warmup_decode_snapshot("sharegpt", 16, seed=1, iterations=0, n_channels=None)
    assert all(r.seq_len == min(r.input_len, 2048) and r.channel is None for r in b)
    assert b.ids.tolist() == list(range(16))


def test_warmup_min_load_is_better_balanced_than_round_robin():
    kw = dict(max_batch=256, seed=2, iterations=3000, n_channels=32)
    rr = warmup_decode_snapshot("sharegpt", policy="round_robin", **kw)
    ml = warmup_decode_snapshot("sharegpt", policy="min_load", **kw)
    spread = lambda b: np.ptp(channel_loads(b, 32))  # noqa: E731
    assert (rr.seq_lens == ml.seq_lens).all()  # same request stream, only channels differ
    assert spread(ml) < spread(rr)


def test_warmup_rejects_bad_policy():
    with pytest.raises(WorkloadError, match=r"policy 'random' not one of \['round_robin', "
                                            r"'min_load'\]"):
        warmup_decode_snapshot("sharegpt", 8, policy="random")  # type: ignore[arg-type]


def test_default_batch_fits_the_model_and_uses_all_channels():
    m = get_model("gpt3-7b")
    b = default_batch(m, n=128, iterations=2000)
    b.validate_for_model(m)
    assert len(b) == 128 and len(np.unique(b.channels)) == 32


# ------------------------------------------------------------------------ channel assignment
def test_round_robin_assigns_index_mod_channels():
    b = sample_requests("alpaca", 10, seed=0)
    assert assign_channels(b, 4).channels.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]


def test_min_load_is_greedy_largest_first():
    b = Batch(tuple(Request(i, None, None, s) for i, s in enumerate([5, 9, 2, 7, 4])))
    # largest first: 9 -> ch0, 7 -> ch1, 5 -> ch1 (12), 4 -> ch0 (13), 2 -> ch1 (14)
    out = assign_channels(b, 2, "min_load")
    assert out.channels.tolist() == [1, 0, 1, 1, 0]
    assert channel_loads(out, 2).tolist() == [13.0, 14.0]


def test_min_load_with_neupims_cost_uses_tile_rounding():
    cost = neupims_attention_cost(get_model("gpt3-7b"), tp=4)
    # E/tp = 1024 -> 2 chunks; L=32 -> 1 tile; p.V: 1 chunk * 8 heads, hd 128 -> 4 tiles
    assert cost(np.array([32]))[0] == 2 * 100 + 2 * 1 * 184 + 8 * 100 + 8 * 4 * 184
    assert cost(np.array([1]))[0] == cost(np.array([32]))[0]  # same tile
    assert cost(np.array([33]))[0] > cost(np.array([32]))[0]
    b = assign_channels(sample_requests("sharegpt", 64, seed=1), 8, "min_load", cost=cost)
    assert len(np.unique(b.channels)) == 8


def test_assign_channels_rejects_bad_arguments():
    b = sample_requests("alpaca", 4, seed=0)
    with pytest.raises(WorkloadError, match="n_channels must be a positive integer"):
        assign_channels(b, 0)
    with pytest.raises(WorkloadError, match="policy 'lpt' not one of"):
        assign_channels(b, 2, "lpt")  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match="request index 0 has channel -1"):
        channel_loads(b, 2)
