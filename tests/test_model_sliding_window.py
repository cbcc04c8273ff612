"""Mistral sliding-window attention end to end: the window read from config.json, graph counts
(decode reads min(L, W) keys), rolling-buffer KV placement, cycles and capacity, and golden
checks (our reference, the validator's float64 evaluation and transformers' Mistral) with
prompts longer than the window and decode steps crossing it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from archsim.config import load_config
from mapping import CapacityError, UnsupportedError, compile_model
from workloads.errors import WorkloadError
from workloads.graph import build_layer_graph
from workloads.models import ModelSpec, get_model, load_hf_config
from workloads.requests import Batch, Request

MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "num_hidden_layers": 32,
              "max_position_embeddings": 32768, "vocab_size": 32000, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "sliding_window": 4096, "hidden_act": "silu",
              "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def _batch(lens):
    return Batch(tuple(Request(i, L, 4, L) for i, L in enumerate(lens)))


# ------------------------------------------------------------------------------ spec, config
def test_mistral_config_reads_the_window(tmp_path):
    spec = load_hf_config(_write(tmp_path, MISTRAL_7B), name="m")
    ref = get_model("mistral-7b")
    assert spec.sliding_window == 4096 == ref.sliding_window
    assert spec.param_count() == ref.param_count()
    assert abs(ref.param_count() / 7.24e9 - 1) < 0.01          # the model card's 7.24 B
    absent = {k: v for k, v in MISTRAL_7B.items() if k != "sliding_window"}
    assert load_hf_config(_write(tmp_path, absent)).sliding_window == 4096  # MistralConfig's
    for full in (None, 32768, 10 ** 6):                        # null, or >= the context
        cfg = {**MISTRAL_7B, "sliding_window": full}
        assert load_hf_config(_write(tmp_path, cfg)).sliding_window is None
    with pytest.raises(WorkloadError, match="'sliding_window' = 0 must be >= 1"):
        load_hf_config(_write(tmp_path, {**MISTRAL_7B, "sliding_window": 0}))


def test_the_window_is_validated_and_bounds_the_kv_length():
    with pytest.raises(WorkloadError, match="sliding_window must be a positive integer"):
        get_model("tiny-llama").replace(sliding_window=0)
    m = get_model("tiny-mistral")
    assert isinstance(m, ModelSpec) and m.sliding_window == 16
    assert [m.kv_len(L) for L in (1, 16, 17, 200)] == [1, 16, 16, 16]
    assert [m.kv_slot(p) for p in (0, 15, 16, 199)] == [0, 15, 0, 7]
    assert get_model("tiny-llama").kv_len(200) == 200


# ------------------------------------------------------------------------------ graph counts
def test_decode_attention_reads_min_of_length_and_window():
    m = get_model("tiny-mistral")
    kv, hd, h, b = m.n_kv_heads, m.head_dim, m.n_heads, m.dtype_bytes
    g = build_layer_graph(m, "decode", _batch([200, 10]))
    for rid, L in ((0, 16), (1, 10)):
        sc, cx = g.nodes[f"L0.attn_score.r{rid}"], g.nodes[f"L0.attn_context.r{rid}"]
        assert sc["shape"]["n"] == L and cx["shape"]["k"] == L
        assert sc["kv_bytes"] == cx["kv_bytes"] == L * kv * hd * b
        assert sc["flops"] == cx["flops"] == 2 * h * L * hd
        assert g.nodes[f"L0.attn_softmax.r{rid}"]["shape"]["cols"] == L
    at_w = build_layer_graph(m, "decode", _batch([16, 10]))
    full = build_layer_graph(m.replace(sliding_window=None), "decode", _batch([200, 10]))
    attn = ("attn_score", "attn_softmax", "attn_context")
    for role in attn:
        assert g.nodes[f"L0.{role}.r0"]["flops"] == at_w.nodes[f"L0.{role}.r0"]["flops"]
        assert g.nodes[f"L0.{role}.r0"]["flops"] < full.nodes[f"L0.{role}.r0"]["flops"]


def test_prefill_counts_stay_dense_and_the_append_keeps_the_window():
    m = get_model("tiny-mistral")
    g = build_layer_graph(m, "prefill", _batch([40]))
    full = build_layer_graph(m.replace(sliding_window=None), "prefill", _batch([40]))
    assert g.nodes["L0.attn_score.r0"]["flops"] == full.nodes["L0.attn_score.r0"]["flops"]
    assert g.nodes["L0.kv_append.r0"]["shape"]["rows"] == 16          # last W tokens kept
    assert full.nodes["L0.kv_append.r0"]["shape"]["rows"] == 40


# ------------------------------------------------------------------------------ mapping
@pytest.mark.parametrize("system", ["neupims", "npu-only"])
def test_kv_placements_are_rolling_buffers(system):
    m = get_model("tiny-mistral")
    cp = compile_model(m, _batch([200, 16, 5]), load_config(system))
    for i, (cached, slot) in enumerate(((16, 199 % 16), (16, 15), (5, 4))):
        p = cp.plan.kv[(0, i)]
        assert (p.seq_len, p.append_slot, p.capacity) == (cached, slot, cached)
    ka, _ = cp.kv_addresses(0, 0)
    assert ka.shape[0] == 16
    kp, _ = cp.kv_position_addresses(0, 0, range(184, 200))       # the window, slot order
    assert np.array_equal(np.sort(kp[:, 0, 0]), np.sort(ka[:, 0, 0]))
    assert np.array_equal(kp[199 - 184], ka[7])


def test_a_long_batch_runs_like_one_at_the_window_and_faster_than_full_attention():
    # exact: past the window the program is the one at L = W up to the append slot's address
    # (same instructions, same PIM row groups), so the cycles are equal too
    from archsim.system import simulate

    m = get_model("tiny-mistral")
    cfg = load_config("neupims")
    runs = {name: (simulate(cfg, spec, _batch([L] * 8)).result.cycles_per_iteration,
                   compile_model(spec, _batch([L] * 8), cfg).instruction_counts())
            for name, spec, L in (("long", m, 200), ("at_w", m, 16),
                                  ("full", m.replace(sliding_window=None), 200))}
    assert runs["long"] == runs["at_w"]
    assert runs["long"][0] < runs["full"][0]
    assert runs["long"][1]["PIM_GEMV"] < runs["full"][1]["PIM_GEMV"]


def test_a_batch_that_does_not_fit_with_full_attention_fits_with_the_window():
    # fp32: a key row holds 128 tokens of the 2 KV heads, a value row 128 (the packed PIM
    # layout), so 256 tokens take twice the rows of the window's 16
    cfg = load_config("neupims", ["memory.org.rows=32"])
    m = get_model("tiny-mistral").replace(dtype_bytes=4)
    b = _batch([256] * 200)
    with pytest.raises(CapacityError, match="KV cache does not fit"):
        compile_model(m.replace(sliding_window=None), b, cfg)
    cp = compile_model(m, b, cfg)
    assert max(cp.kv_footprint_per_channel()) > 0


def test_the_kv_budget_and_the_sweeps_count_the_rolling_buffer():
    # 64 x 256 tokens: 16 per request held with the window (the compiler's rolling buffer)
    from archsim.serving import check_batch_fits
    from archsim.sweep.evaluate import kv_metrics

    cfg = load_config("neupims", ["memory.org.rows=32"])
    m, b = get_model("tiny-mistral"), _batch([256] * 64)
    assert kv_metrics(cfg, m, b)["kv_tokens"] == 64 * 16
    assert kv_metrics(cfg, m.replace(sliding_window=None), b)["kv_tokens"] == 64 * 256
    check_batch_fits(cfg, m, b)


def test_prefill_longer_than_the_window_is_refused_shorter_compiles():
    m = get_model("tiny-mistral")
    cfg = load_config("neupims")
    with pytest.raises(UnsupportedError, match="longer than model 'tiny-mistral''s sliding "
                                               "window of 16"):
        compile_model(m, _batch([40]), cfg, "prefill")
    assert compile_model(m, _batch([16, 3]), cfg, "prefill").plan.kv[(0, 0)].seq_len == 16


# ------------------------------------------------------------------------------ golden checks
def test_the_reference_applies_the_window():
    import torch

    from workloads.reference import attention

    q = torch.randn(1, 2, 1, 8, dtype=torch.float64)
    k = torch.randn(1, 1, 40, 8, dtype=torch.float64)
    v = torch.randn(1, 1, 40, 8, dtype=torch.float64)
    win = attention(q, k, v, 39, window=16)
    assert torch.allclose(win, attention(q, k[:, :, 24:], v[:, :, 24:], 15))
    assert not torch.allclose(win, attention(q, k, v, 39))


@pytest.mark.parametrize("system", ["npu", "neupims"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_tiny_mistral_decode_matches_the_reference(system, dtype):
    from archsim.validation import validate

    # prompts below, at and past the window; 3 steps take the 15-token one across it
    rep = validate("tiny-mistral", system, dtype=dtype, steps=3, prompt_lens=[3, 15, 20, 40])
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]


def test_tiny_mistral_matches_hugging_face_mistral():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from archsim.validation import resolve_system, run_validation
    from archsim.validation.hf import hf_reference

    ref = hf_reference("tiny-mistral", "fp32", seed=2)
    assert "MistralForCausalLM" in ref.label and ref.spec.sliding_window == 16
    label, cfg = resolve_system("npu")
    rep = run_validation(ref, cfg, system=label, prompt_lens=[2, 15, 30], steps=3, seed=2)
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.top1_agreement == 1.0


def test_the_gpu_baseline_times_the_window_too():
    from archsim.gpu import simulate_gpu_iteration

    m = get_model("mistral-7b")
    cfg = load_config("gpu-a100")
    tps = [simulate_gpu_iteration(cfg, spec, _batch([L] * 16), with_events=False).tokens_per_s
           for spec, L in ((m, 8192), (m, 4096), (m.replace(sliding_window=None), 8192))]
    assert tps[0] == tps[1] > tps[2]
