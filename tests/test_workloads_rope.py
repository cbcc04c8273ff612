"""RoPE frequencies with LLaMA 3.1's scaling (workloads.rope), its config import and its use by
the reference and the device's RoPE table (issue 18 item 1: a 128 k-context model)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from workloads import get_model
from workloads.errors import WorkloadError
from workloads.models import load_hf_config
from workloads.rope import LLAMA31_ROPE, RopeScaling, parse_hf_rope_scaling, rope_inv_freq

SCALED = {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 352, "num_hidden_layers": 2,
          "max_position_embeddings": 4096, "vocab_size": 512, "rms_norm_eps": 1e-5,
          "torch_dtype": "float16", "rope_theta": 500000.0,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 256}}
"""A tiny LLaMA-3.1-shaped config whose scaling acts within its 4,096 positions (original
context 256)."""


def test_the_registry_has_a_128k_llama_with_the_llama3_scaling():
    m = get_model("llama3.1-8b")
    assert m.max_seq_len == 131072 and m.rope_scaling == LLAMA31_ROPE
    assert get_model("llama3-8b").rope_scaling is None


def test_llama3_scaling_matches_transformers():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=131072, rope_parameters={
                          "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192})
    inv, scale = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    mine = rope_inv_freq(128, 5e5, LLAMA31_ROPE)
    assert scale == 1.0
    np.testing.assert_allclose(mine, inv.double().numpy(), rtol=1e-6)
    plain = rope_inv_freq(128, 5e5)
    assert mine[0] == plain[0] and np.isclose(mine[-1], plain[-1] / 8)   # high kept, low / 8


def test_config_import_reads_the_scaling_and_refuses_others(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(SCALED))
    assert load_hf_config(p).rope_scaling == RopeScaling(original_max_position_embeddings=256)
    v5 = dict(SCALED, rope_scaling=None, rope_parameters={**SCALED["rope_scaling"],
                                                           "rope_theta": 5e5})
    p.write_text(json.dumps(v5))
    assert load_hf_config(p).rope_scaling.original_max_position_embeddings == 256
    for bad, msg in (({"rope_type": "yarn", "factor": 4.0}, "rope_type 'yarn' is not supported"),
                     ({"type": "linear", "factor": 2.0}, "supported: default, llama3"),
                     ({"rope_type": "llama3", "factor": 8.0}, "needs 'low_freq_factor'")):
        p.write_text(json.dumps(dict(SCALED, rope_scaling=bad)))
        with pytest.raises(WorkloadError, match=msg):
            load_hf_config(p)
    assert parse_hf_rope_scaling({"rope_scaling": {"rope_type": "default"}}, "x") is None


def test_scaled_model_passes_the_golden_check_and_the_scaling_matters(tmp_path,
                                                                      torch_one_thread):
    """The device's RoPE table and the reference both use the scaled frequencies: the check
    passes at positions past the original context, and an unscaled table is caught."""
    import archsim.validation.reference as vref
    from archsim.validation import validate

    p = tmp_path / "config.json"
    p.write_text(json.dumps(SCALED))
    rep = validate(str(p), "neupims", dtype="fp32", steps=1, prompt_lens=[3, 700])
    assert rep.passed
    real = vref.rope_half_tables

    def unscaled(spec, pos):
        return real(spec.replace(rope_scaling=None), pos)
    from archsim.validation import ValidationError

    try:
        vref.rope_half_tables = unscaled
        with pytest.raises(ValidationError, match="disagree on the layer outputs"):
            validate(str(p), "neupims", dtype="fp32", steps=1, prompt_lens=[3, 700])
    finally:
        vref.rope_half_tables = real
