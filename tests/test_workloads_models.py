"""Model specs: registry, parameter counts vs published sizes, TP shards, HF config files."""
from __future__ import annotations

import json

import pytest

from workloads.errors import WorkloadError
from workloads.models import (PUBLISHED_PARAM_COUNTS, ModelSpec, get_model, list_models,
                              load_hf_config)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAM_COUNTS))
def test_param_count_within_two_percent_of_published_size(name):
    got = get_model(name).param_count()
    want = PUBLISHED_PARAM_COUNTS[name]
    assert abs(got / want - 1) < 0.02, f"{name}: {got / 1e9:.3f}B vs published {want / 1e9}B"


def test_registry_holds_every_required_model():
    required = {"gpt3-7b", "gpt3-13b", "gpt3-30b", "gpt3-175b", "llama2-7b", "llama2-13b",
                "llama2-70b", "llama3-8b", "opt-66b", "tiny-gpt", "tiny-llama"}
    assert required <= set(list_models())


@pytest.mark.parametrize("name,d,heads,layers,tp,pp", [
    ("gpt3-7b", 4096, 32, 32, 4, 1), ("gpt3-13b", 5120, 40, 40, 4, 1),
    ("gpt3-30b", 7168, 56, 48, 4, 2), ("gpt3-175b", 12288, 96, 96, 8, 4)])
def test_gpt3_models_follow_the_neupims_evaluation(name, d, heads, layers, tp, pp):
    m = get_model(name)
    assert (m.d_model, m.n_heads, m.n_layers, m.tensor_parallel, m.pipeline_parallel) == \
        (d, heads, layers, tp, pp)
    assert (m.d_ff, m.vocab_size, m.max_seq_len, m.norm, m.activation) == \
        (4 * d, 50304, 2048, "layernorm", "gelu")
    assert m.n_kv_heads == m.n_heads and m.head_dim * m.n_heads == d


def test_llama_models_use_gqa_rmsnorm_swiglu_rope():
    m = get_model("llama2-70b")
    assert (m.n_heads, m.n_kv_heads, m.q_per_kv, m.d_ff) == (64, 8, 8, 28672)
    assert (m.norm, m.activation, m.positional) == ("rmsnorm", "swiglu", "rope")
    l3 = get_model("llama3-8b")
    assert (l3.n_kv_heads, l3.vocab_size, l3.rope_theta) == (8, 128256, 500000.0)


def test_layer_params_of_gpt3_7b_equal_the_closed_form():
    m = get_model("gpt3-7b")
    d = 4096
    # 12 d^2 weights + biases (3d + d + 4d + d) + two layernorms (4d)
    assert m.layer_param_count() == 12 * d * d + 13 * d
    assert m.layer_matmul_params() == 12 * d * d


def test_tensor_parallel_shards_columns_and_replicates_row_parallel_biases():
    m = get_model("gpt3-7b")
    d, tp = 4096, 4
    assert m.layer_matmul_params(tp) * tp == m.layer_matmul_params()
    # qkv (3d) and ffn1 (4d) biases are split; proj/ffn2 biases (2d) and the norms (4d) are
    # replicated on each device
    assert m.layer_param_count(tp) == (12 * d * d + 7 * d) // tp + 2 * d + 4 * d


def test_gqa_kv_heads_are_replicated_when_tp_exceeds_them():
    m = get_model("llama2-70b")
    assert m.kv_heads_per_device(16) == 1
    assert m.kv_heads_per_device(4) == 2
    odd = get_model("tiny-llama").replace(n_heads=12, n_kv_heads=4, head_dim=32, d_ff=384)
    with pytest.raises(WorkloadError, match="multiple of n_kv_heads=4"):
        odd.check_tensor_parallel(6)


def test_tp_that_does_not_divide_heads_is_rejected():
    with pytest.raises(WorkloadError, match="must divide n_heads=32"):
        get_model("gpt3-7b").heads_per_device(3)


def test_kv_cache_bytes_per_token_of_llama2_70b():
    # 2 (K,V) * 80 layers * 8 kv heads * 128 * 2 bytes = 327680 B (320 KiB) per token
    assert get_model("llama2-70b").kv_cache_bytes_per_token() == 327680


def test_unknown_model_lists_valid_names():
    with pytest.raises(WorkloadError) as exc:
        get_model("gpt4")
    assert "gpt3-7b" in str(exc.value) and "tiny-llama" in str(exc.value)


@pytest.mark.parametrize("field,value,match", [
    ("norm", "batchnorm", "not one of"), ("n_kv_heads", 3, "must divide n_heads"),
    ("d_model", 0, "positive integer"), ("dtype_bytes", 3, "dtype_bytes")])
def test_invalid_spec_fields_are_rejected_with_the_field_name(field, value, match):
    with pytest.raises(WorkloadError, match=match):
        get_model("tiny-gpt").replace(**{field: value})


def test_spec_is_frozen():
    with pytest.raises(AttributeError):
        get_model("tiny-gpt").d_model = 3  # type: ignore[misc]


# --------------------------------------------------------------------------- Hugging Face configs
LLAMA2_7B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "max_position_embeddings": 4096, "vocab_size": 32000,
    "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": False,
    "torch_dtype": "float16"}
GPT2_CONFIG = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12,
               "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new",
               "n_inner": None}
OPT_66B_CONFIG = {"model_type": "opt", "hidden_size": 9216, "num_attention_heads": 72,
                  "num_hidden_layers": 64, "ffn_dim": 36864, "max_position_embeddings": 2048,
                  "vocab_size": 50272, "activation_function": "relu",
                  "do_layer_norm_before": True, "word_embed_proj_dim": 9216,
                  "torch_dtype": "float16"}


def _write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return p


def test_hf_llama_config_matches_registry_entry(tmp_path):
    spec = load_hf_config(_write(tmp_path, LLAMA2_7B_CONFIG), name="llama2-7b")
    ref = get_model("llama2-7b")
    for key in ("d_model", "n_heads", "n_kv_heads", "head_dim", "n_layers", "d_ff", "vocab_size",
                "max_seq_len", "norm", "activation", "positional", "tied_embeddings"):
        assert getattr(spec, key) == getattr(ref, key), key
    assert spec.param_count() == ref.param_count()


def test_hf_gpt2_config_gives_124m_params(tmp_path):
    spec = load_hf_config(_write(tmp_path, GPT2_CONFIG))
    assert spec.d_ff == 3072 and spec.tied_embeddings
    assert spec.param_count() == 124_439_808  # GPT-2 small as counted by Hugging Face


def test_hf_opt_config_loads_from_a_directory(tmp_path):
    _write(tmp_path, OPT_66B_CONFIG)
    spec = load_hf_config(tmp_path)
    assert spec.activation == "relu" and spec.d_ff == 36864
    assert spec.param_count() == get_model("opt-66b").param_count()


def test_hf_config_missing_key_names_key_and_file(tmp_path):
    cfg = dict(LLAMA2_7B_CONFIG)
    del cfg["intermediate_size"]
    p = _write(tmp_path, cfg)
    with pytest.raises(WorkloadError) as exc:
        load_hf_config(p)
    assert "'intermediate_size'" in str(exc.value) and str(p) in str(exc.value)


def test_hf_config_unknown_model_type_lists_supported(tmp_path):
    with pytest.raises(WorkloadError, match="model_type 'bert' is not supported; supported: "
                                            "gpt2, llama"):
        load_hf_config(_write(tmp_path, {"model_type": "bert"}))


def test_hf_config_invalid_json_names_line(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{\n "model_type": "llama",\n "hidden_size": 4096,,\n}')
    with pytest.raises(WorkloadError, match=r"line 3: invalid JSON"):
        load_hf_config(p)


def test_hf_post_ln_opt_is_rejected(tmp_path):
    cfg = dict(OPT_66B_CONFIG, do_layer_norm_before=False)
    with pytest.raises(WorkloadError, match="do_layer_norm_before"):
        load_hf_config(_write(tmp_path, cfg))


def test_hf_missing_file_is_a_workload_error(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read"):
        load_hf_config(tmp_path / "nope.json")


def test_model_spec_from_hf_rejects_inconsistent_gqa(tmp_path):
    cfg = dict(LLAMA2_7B_CONFIG, num_key_value_heads=5)
    # the message names the config's keys, not the ModelSpec fields
    with pytest.raises(WorkloadError, match="num_attention_heads = 32 is not a multiple of "
                                            "num_key_value_heads = 5"):
        load_hf_config(_write(tmp_path, cfg))


def test_spec_round_trips_through_as_dict():
    m = get_model("llama3-8b")
    assert ModelSpec(**m.as_dict()) == m


def test_hf_llama_rope_theta_from_transformers5_rope_parameters(tmp_path):
    import json

    from workloads.models import load_hf_config

    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "num_hidden_layers": 2,
           "max_position_embeddings": 128, "vocab_size": 100,
           "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_hf_config(tmp_path).rope_theta == 500000.0
    cfg["rope_theta"] = 20000.0
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_hf_config(tmp_path).rope_theta == 20000.0
