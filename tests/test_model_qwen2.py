"""Qwen2 end to end: registry, Hugging Face config import, graph, compile, cycle-level run and
golden checks (our reference and transformers' Qwen2 on random weights), and how Qwen2's
sliding-window keys are read (sliding-window attention itself: test_model_sliding_window.py)."""
from __future__ import annotations

import json

import pytest

from archsim.config import load_config
from workloads import default_batch
from workloads.errors import WorkloadError
from workloads.graph import build_layer_graph
from workloads.models import get_model, load_hf_config

QWEN2_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "num_hidden_layers": 28,
            "max_position_embeddings": 32768, "vocab_size": 152064, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "tie_word_embeddings": False, "use_sliding_window": False,
            "sliding_window": 131072, "max_window_layers": 28, "hidden_act": "silu",
            "torch_dtype": "bfloat16"}


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def test_qwen2_config_imports_with_qkv_bias_and_no_output_bias(tmp_path):
    spec = load_hf_config(_write(tmp_path, QWEN2_7B), name="q")
    ref = get_model("qwen2-7b")
    assert spec.attention_bias and not spec.proj_bias and not spec.mlp_bias
    assert spec.rope_theta == 1e6 and spec.n_kv_heads == 4 and spec.head_dim == 128
    assert spec.param_count() == ref.param_count()
    shards = spec.layer_param_breakdown(1)
    assert "qkv_bias" in shards and "proj_bias" not in shards


def test_the_graph_adds_the_qkv_bias_but_no_projection_bias():
    spec = get_model("tiny-qwen2")
    g = build_layer_graph(spec, "decode", default_batch(spec, 2, "sharegpt", seed=0))
    assert "L0.qkv_bias" in g.nodes
    llama = spec.replace(attention_bias=False)      # the link carries proj_bias along
    assert not llama.proj_bias
    gpt_like = spec.replace(proj_bias=True)
    r_q = g.nodes["L0.attn_residual"]["flops"]
    g2 = build_layer_graph(gpt_like, "decode", default_batch(spec, 2, "sharegpt", seed=0))
    assert g2.nodes["L0.attn_residual"]["flops"] > r_q   # the residual adds the bias too


def test_qwen2_sliding_window_layers_are_read_as_transformers_does(tmp_path):
    # layers >= max_window_layers slide (Qwen2Config.layer_types): 28 of 28 -> none slides
    cfg = {**QWEN2_7B, "use_sliding_window": True, "sliding_window": 4096}
    assert load_hf_config(_write(tmp_path, cfg)).sliding_window is None
    cfg["max_window_layers"] = 0                      # every layer slides
    assert load_hf_config(_write(tmp_path, cfg)).sliding_window == 4096
    cfg["max_window_layers"] = 14                     # a per-layer mix is refused
    with pytest.raises(WorkloadError, match="mixes sliding-window and full-attention") as e:
        load_hf_config(_write(tmp_path, cfg))
    assert "config.json" in str(e.value) and "max_window_layers" in str(e.value)


def test_a_window_as_long_as_the_context_is_full_attention(tmp_path):
    cfg = {**QWEN2_7B, "model_type": "mistral", "sliding_window": 32768}
    spec = load_hf_config(_write(tmp_path, cfg))
    assert spec.max_seq_len == 32768 and spec.sliding_window is None
    cfg = {**QWEN2_7B, "model_type": "mistral", "sliding_window": None}
    assert load_hf_config(_write(tmp_path, cfg)).sliding_window is None


@pytest.mark.parametrize("system", ["npu", "neupims"])
def test_tiny_qwen2_decode_matches_the_reference(system):
    from archsim.validation import validate

    rep = validate("tiny-qwen2", system, dtype="fp32", steps=1, prompt_lens=[3, 20])
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.top1_agreement == 1.0


def test_tiny_qwen2_runs_cycle_level_and_its_bias_costs_cycles():
    from archsim.system import simulate

    spec = get_model("tiny-qwen2")
    batch = default_batch(spec, 4, "sharegpt", seed=0)
    cfg = load_config("neupims")
    with_bias = simulate(cfg, spec, batch).result.cycles_per_iteration
    without = simulate(cfg, spec.replace(attention_bias=False), batch).result.cycles_per_iteration
    assert with_bias > without > 0


def test_tiny_qwen2_matches_hugging_face_qwen2():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from archsim.validation import resolve_system, run_validation
    from archsim.validation.hf import hf_reference

    ref = hf_reference("tiny-qwen2", "fp32", seed=2)
    assert "Qwen2" in ref.label and ref.spec.attention_bias and not ref.spec.proj_bias
    label, cfg = resolve_system("neupims")
    rep = run_validation(ref, cfg, system=label, prompt_lens=[2, 17], steps=2, seed=2)
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.top1_agreement == 1.0
