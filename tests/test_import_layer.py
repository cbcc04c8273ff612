"""Import from PyTorch (issue 7 item 5): a user's decoder layer -> workloads spec, operator graph
and weights through torch.export; the traced graph equals workloads.build_layer_graph; the
imported layer validates like `archsim validate`; the first unsupported operator is named."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from archsim.validation import ValidationError  # noqa: E402
from archsim.validation.importer import (UnsupportedOpError, graph_differences,  # noqa: E402
                                         import_decoder_layer, validate_imported_layer)
from workloads.graph import build_layer_graph  # noqa: E402
from workloads.models import get_model  # noqa: E402
from workloads.reference import reference_layer  # noqa: E402

try:
    import transformers
except ImportError:  # pragma: no cover - the hf extra is optional
    transformers = None
needs_hf = pytest.mark.skipif(transformers is None, reason="transformers not installed: pip "
                              "install 'archsim[hf]' to import Hugging Face layers")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_reference_layer_imports_to_the_workloads_graph_and_spec(name):
    spec = get_model(name)
    layer = reference_layer(spec, seed=2)
    imp = import_decoder_layer(layer, torch.randn(3, 6, spec.d_model), name=name)
    s = imp.spec
    for key in ("d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "norm", "activation",
                "positional", "attention_bias", "mlp_bias", "norm_eps"):
        assert getattr(s, key) == getattr(spec, key), key
    assert graph_differences(imp.traced, imp.graph) == []
    assert len(imp.traced) == len(build_layer_graph(s, "prefill", imp.batch))
    assert {n.rsplit(".", 1)[-1] for n in imp.traced
            if n.rsplit(".", 1)[-1][1:].isdigit()} == {"r0", "r1", "r2"}
    np.testing.assert_array_equal(imp.weights["qkv_w"], layer.qkv_weight.detach().double())
    np.testing.assert_array_equal(imp.weights["ffn2_w"], layer.ffn2_weight.detach().double())


def test_imported_layer_validates_through_the_compiled_programs():
    spec = get_model("tiny-llama")
    imp = import_decoder_layer(reference_layer(spec, seed=1), torch.randn(2, 4, spec.d_model))
    rep = validate_imported_layer(imp, "neupims", "fp16", prompt_lens=[3, 40], steps=2)
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert {c.name for c in rep.checks} == {"L0.out", "L0.k_new", "L0.v_new"}
    assert rep.top1_agreement is None


class _Cumsum(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return torch.cumsum(x @ self.w, dim=-1)


def test_the_first_unsupported_operator_is_named_with_its_source_line():
    with pytest.raises(UnsupportedOpError, match=r"aten\.cumsum.*test_import_layer\.py"):
        import_decoder_layer(_Cumsum(), torch.randn(1, 4, 16))


def test_erf_gelu_is_refused_naming_the_variant():
    spec = get_model("tiny-gpt")

    class ErfGelu(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = reference_layer(spec)
            self.inner.ffn_block = self.ffn_block

        def ffn_block(self, x):
            i = self.inner
            y = nn.functional.layer_norm(x, (spec.d_model,), i.ffn_norm_weight, i.ffn_norm_bias)
            return nn.functional.gelu(y @ i.ffn1_weight + i.ffn1_bias) @ i.ffn2_weight \
                + i.ffn2_bias

        def forward(self, x):
            return self.inner(x)
    with pytest.raises(UnsupportedOpError, match="approximate='none'"):
        import_decoder_layer(ErfGelu(), torch.randn(1, 4, spec.d_model))


def test_a_layer_outside_the_supported_shapes_is_a_clear_error():
    class NoAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            return x + self.a(nn.functional.layer_norm(x, (8,)))
    with pytest.raises(ValidationError, match="attention"):
        import_decoder_layer(NoAttention(), torch.randn(1, 3, 8))


def test_graph_differences_name_nodes_attributes_and_edges():
    spec = get_model("tiny-gpt")
    imp = import_decoder_layer(reference_layer(spec), torch.randn(1, 3, spec.d_model))
    g = imp.traced.copy()
    g.remove_edge("L0.attn_norm", "L0.qkv")
    g.nodes["L0.proj"]["shape"] = {"m": 3, "k": 1, "n": 128}
    diff = graph_differences(g, imp.graph)
    assert "edge L0.attn_norm -> L0.qkv only in workloads.build_layer_graph" in diff
    assert any(d.startswith("node L0.proj: shape") for d in diff)


@needs_hf
def test_hugging_face_gpt2_block_imports_and_validates():
    from archsim.validation.hf import build_hf_model

    cfg = transformers.GPT2Config(n_embd=64, n_head=4, n_layer=1, n_positions=128,
                                  vocab_size=100, bos_token_id=0, eos_token_id=0)
    block = build_hf_model(cfg, seed=4).transformer.h[0]
    imp = import_decoder_layer(block, torch.randn(2, 5, 64), name="gpt2-block",
                               max_seq_len=128)
    assert (imp.spec.norm, imp.spec.activation, imp.spec.n_heads) == ("layernorm", "gelu", 4)
    assert imp.param_names["qkv_w"] == ["attn.c_attn.weight"]
    assert graph_differences(imp.traced, imp.graph) == []
    for system in ("neupims", "npu"):
        rep = validate_imported_layer(imp, system, "fp16", prompt_lens=[3, 40], steps=2)
        assert rep.passed, (system, [(c.name, c.usage) for c in rep.failures()])
        assert max(c.reference_error for c in rep.checks) < 1e-12


@needs_hf
def test_hugging_face_llama_layer_imports_with_gqa_rope_and_swiglu():
    from archsim.validation.hf import build_hf_model

    cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=96,
                                   num_hidden_layers=1, max_position_embeddings=64,
                                   vocab_size=100, bos_token_id=0, eos_token_id=0,
                                   pad_token_id=None)
    model = build_hf_model(cfg, seed=0)
    x = torch.randn(2, 5, 64)
    cos, sin = model.model.rotary_emb(x, torch.arange(5)[None])
    imp = import_decoder_layer(model.model.layers[0], x, {"position_embeddings": (cos, sin)})
    s = imp.spec
    assert (s.n_heads, s.n_kv_heads, s.positional, s.activation, s.norm) == \
        (4, 2, "rope", "swiglu", "rmsnorm")
    assert s.norm_eps == cfg.rms_norm_eps
    assert imp.param_names["qkv_w"] == ["self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                        "self_attn.v_proj.weight"]
    assert graph_differences(imp.traced, imp.graph) == []
    assert any("fused" in n for n in imp.notes)
    with pytest.raises(ValidationError, match="position_embeddings"):
        validate_imported_layer(imp, "npu")
