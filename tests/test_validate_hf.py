"""Validation against Hugging Face ``transformers`` (the optional extra ``hf``): GPT-2, LLaMA and
Mixtral (routed by its own router) built from a config with random weights (no download), so the reference is code nobody here
wrote. Skipped with a reason when transformers is not installed.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers not installed: pip install 'archsim[hf]' to run the "
                           "Hugging Face reference checks")

from archsim.cli import main  # noqa: E402
from archsim.config import load_config  # noqa: E402
from archsim.validation import ValidationError, run_validation  # noqa: E402
from archsim.validation.hf import (HFReference, build_hf_model, hf_config_for,  # noqa: E402
                                   hf_layer_weights, hf_reference)
from workloads.models import get_model  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("model,system,dtype", [("tiny-gpt", "neupims", "fp16"),
                                                ("tiny-llama", "npu", "fp16"),
                                                ("tiny-llama", "neupims", "fp32"),
                                                ("tiny-mixtral", "neupims", "fp32")])
def test_compiled_programs_match_hugging_face(model, system, dtype):
    from archsim.validation import resolve_system

    ref = hf_reference(model, dtype, seed=3)
    label, cfg = resolve_system(system)
    rep = run_validation(ref, cfg, system=label, prompt_lens=[2, 35], steps=2, seed=3)
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert "transformers" in rep.reference
    assert rep.top1_agreement == 1.0
    # the reference is HF's own forward: its float64 results agree with ours to its precision
    assert max(c.reference_error for c in rep.checks) < 1e-5


def test_hf_weights_are_read_in_the_compilers_layout():
    spec = get_model("tiny-llama")
    model = build_hf_model(hf_config_for(spec), seed=0)
    w = hf_layer_weights(model, 1)
    d, hd = spec.d_model, spec.head_dim
    assert w["qkv_w"].shape == (d, (spec.n_heads + 2 * spec.n_kv_heads) * hd)
    assert w["proj_w"].shape == (spec.n_heads * hd, d)
    assert w["ffn_gate_w"].shape == (d, spec.d_ff) and w["ffn2_w"].shape == (spec.d_ff, d)
    # random initialisation redraws norm gains away from 1
    assert not np.allclose(w["attn_norm"], 1.0)
    gpt = build_hf_model(hf_config_for(get_model("tiny-gpt")), seed=0)
    wg = hf_layer_weights(gpt, 0)
    assert wg["attn_norm"].shape == (2, 128) and np.abs(wg["qkv_b"]).max() > 0


def test_a_wrong_weight_adapter_is_caught_by_the_self_check(monkeypatch):
    """Forgetting LLaMA's [out, in] -> [in, out] transpose of o_proj is an adapter bug, not a
    device error: run_validation refuses with a ValidationError."""
    import archsim.validation.hf as hf

    real = hf.hf_layer_weights

    def untransposed(model, layer):
        w = real(model, layer)
        w["proj_w"] = np.ascontiguousarray(w["proj_w"].T)
        return w
    monkeypatch.setattr(hf, "hf_layer_weights", untransposed)
    ref = hf_reference("tiny-llama", "fp32", seed=1)
    with pytest.raises(ValidationError, match="disagree"):
        run_validation(ref, load_config("neupims"), system="neupims", prompt_lens=[4], steps=1)


def test_unsupported_hf_options_are_refused():
    cfg = hf_config_for(get_model("tiny-gpt"))
    cfg.reorder_and_upcast_attn = True
    with pytest.raises(ValidationError, match="reorder_and_upcast_attn"):
        HFReference(build_hf_model(cfg, 0), "fp16")


def test_cli_validates_a_hugging_face_config_json(tmp_path, capsys):
    cfg = transformers.GPT2Config(n_embd=64, n_head=2, n_layer=1, n_positions=64,
                                  vocab_size=100, bos_token_id=0, eos_token_id=0)
    path = tmp_path / "config.json"
    cfg.to_json_file(str(path))
    out = tmp_path / "v.json"
    rc = main(["validate", "--model", str(path), "--reference", "hf", "--system", "npu-pim",
               "--dtype", "fp16", "--steps", "1", "--prompt-lens", "3,20", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    doc = json.loads(out.read_text())
    assert doc["passed"] and "GPT2LMHeadModel" in doc["runs"][0]["reference"]
