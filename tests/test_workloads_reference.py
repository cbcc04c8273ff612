"""PyTorch golden references: KV-cache correctness, determinism, operator math, graph agreement."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from workloads.errors import WorkloadError
from workloads.graph import OpKind, build_layer_graph
from workloads.models import get_model
from workloads.reference import (DecoderLayer, GPT3DecoderLayer, KVCache, LlamaDecoderLayer,
                                 ReferenceModel, apply_rope, attention, gelu_tanh, layer_norm,
                                 reference_layer, rms_norm, rope_cos_sin, silu)
from workloads.requests import Batch, Request

TINY = ["tiny-gpt", "tiny-llama"]


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Toy-sized tensors gain nothing from intra-op threads and slow down badly when the two
    cores of a CI machine are shared with other test workers."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tokens(b, t, seed=0, vocab=512):
    return torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", TINY)
def test_prefill_then_decode_equals_full_prefill(name):
    model = ReferenceModel(get_model(name), seed=1, dtype=torch.float64)
    tok = _tokens(2, 24)
    full = model(tok)
    cache = model.new_cache()
    steps = [model(tok[:, :10], cache)]
    for i in range(10, 24):
        steps.append(model(tok[:, i:i + 1], cache))
    assert cache.length == 24
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", TINY)
def test_multi_token_continuation_of_the_cache_is_causal(name):
    """A chunk of several tokens appended to a cache (chunked prefill) matches the full run."""
    model = ReferenceModel(get_model(name), seed=2, dtype=torch.float64)
    tok = _tokens(1, 30, seed=3)
    cache = model.new_cache()
    a = model(tok[:, :7], cache)
    b = model(tok[:, 7:30], cache)
    torch.testing.assert_close(torch.cat([a, b], 1), model(tok), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", TINY)
def test_later_tokens_do_not_change_earlier_logits(name):
    model = ReferenceModel(get_model(name), seed=0, dtype=torch.float64)
    tok = _tokens(1, 12)
    other = tok.clone()
    other[0, 8:] = (other[0, 8:] + 1) % 512
    la, lb = model(tok), model(other)
    torch.testing.assert_close(la[:, :8], lb[:, :8], rtol=0, atol=0)
    assert not torch.allclose(la[:, 8:], lb[:, 8:])


@pytest.mark.parametrize("name", TINY)
def test_initialisation_is_deterministic_from_the_seed(name):
    spec = get_model(name)
    a, b, c = (ReferenceModel(spec, seed=s) for s in (7, 7, 8))
    for (na, pa), (_, pb), (_, pc) in zip(a.named_parameters(), b.named_parameters(),
                                          c.named_parameters()):
        assert torch.equal(pa, pb), na
        assert not torch.equal(pa, pc), na
    tok = _tokens(1, 5)
    assert torch.equal(a.generate_greedy(tok, 6), b.generate_greedy(tok, 6))
    # different layers draw different weights
    assert not torch.equal(a.layers[0].qkv_weight, a.layers[1].qkv_weight)


@pytest.mark.parametrize("name", TINY)
def test_parameter_shapes_match_the_spec_breakdown(name):
    spec = get_model(name)
    model = ReferenceModel(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.param_count()
    layer = model.layers[0]
    by_role: dict[str, int] = {}
    for pname, p in layer.named_parameters():
        role = pname.removesuffix("_weight")
        if pname.endswith("_bias") and not pname.startswith(("attn_norm", "ffn_norm")):
            role = pname
        elif pname.startswith(("attn_norm", "ffn_norm")):
            role = pname.rsplit("_", 1)[0]
        by_role[role] = by_role.get(role, 0) + p.numel()
    assert by_role == spec.layer_param_breakdown()


def test_generate_greedy_matches_argmax_of_full_forward():
    model = ReferenceModel(get_model("tiny-llama"), seed=4, dtype=torch.float64)
    prompt = _tokens(2, 6, seed=9)
    gen = model.generate_greedy(prompt, 5)
    seq = prompt
    for i in range(5):
        nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
        assert torch.equal(nxt, gen[:, i:i + 1])
        seq = torch.cat([seq, nxt], 1)


# ----------------------------------------------------------------------- operator math
def test_operator_math_matches_torch_functional():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g, dtype=torch.float64)
    w, b = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g,
                                                                           dtype=torch.float64)
    torch.testing.assert_close(layer_norm(x, w, b, 1e-5), F.layer_norm(x, (16,), w, b, 1e-5))
    torch.testing.assert_close(rms_norm(x, w, 1e-6),
                               x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
    torch.testing.assert_close(gelu_tanh(x), F.gelu(x, approximate="tanh"))
    torch.testing.assert_close(silu(x), F.silu(x))


def test_attention_matches_sdpa_with_causal_mask_and_gqa():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64)
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                          is_causal=True)
    torch.testing.assert_close(attention(q, k, v, q_start=0), want)
    # the last query row alone, continuing 8 cached positions, sees every key
    torch.testing.assert_close(attention(q[:, :, 8:], k, v, q_start=8), want[:, :, 8:])


def test_rope_scores_depend_only_on_relative_position():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 1, 1, 32, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 32, generator=g, dtype=torch.float64)

    def score(pq, pk):
        cq, sq = rope_cos_sin(torch.tensor([pq]), 32, 10000.0, torch.float64)
        ck, sk = rope_cos_sin(torch.tensor([pk]), 32, 10000.0, torch.float64)
        return float((apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum())

    assert score(5, 3) == pytest.approx(score(105, 103), abs=1e-10)
    assert score(5, 3) != pytest.approx(score(5, 4), abs=1e-6)
    cos, sin = rope_cos_sin(torch.tensor([7]), 32, 10000.0, torch.float64)
    torch.testing.assert_close(apply_rope(q, cos, sin).norm(), q.norm())


def test_layer_with_cache_equals_layer_without():
    layer = LlamaDecoderLayer(get_model("tiny-llama"), seed=5, dtype=torch.float64)
    x = torch.randn(2, 11, 128, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    cache = KVCache()
    parts = [layer(x[:, :6], cache)] + [layer(x[:, i:i + 1], cache) for i in range(6, 11)]
    torch.testing.assert_close(torch.cat(parts, 1), layer(x), rtol=0, atol=1e-12)
    assert cache.k.shape == (2, 2, 11, 32)  # GQA: 2 KV heads cached


# ------------------------------------------------------------------- agreement with the graph
@pytest.mark.parametrize("name", TINY)
def test_reference_matmul_flops_equal_graph_gemm_plus_attention_flops(name):
    """torch's own FLOP counter (2 per MAC) on one decode step of the reference layer equals the
    graph's GEMM + attention FLOPs for the same batch (tp = 1)."""
    spec = get_model(name)
    layer = reference_layer(spec, seed=0, dtype=torch.float64)
    n_req, L = 3, 20
    cache = KVCache()
    with torch.no_grad():
        layer(torch.randn(n_req, L - 1, spec.d_model, dtype=torch.float64), cache)
        with FlopCounterMode(display=False) as counter:
            layer(torch.randn(n_req, 1, spec.d_model, dtype=torch.float64), cache)
    g = build_layer_graph(spec, "decode", Batch(tuple(Request(i, None, None, L)
                                                      for i in range(n_req))), tp=1)
    matmul_kinds = (OpKind.GEMM, OpKind.ATTENTION_SCORE, OpKind.ATTENTION_CONTEXT)
    graph_flops = sum(d["flops"] for _, d in g.nodes(data=True) if d["kind"] in matmul_kinds)
    assert counter.get_total_flops() == graph_flops


def test_style_specific_layers_check_the_spec():
    assert isinstance(reference_layer(get_model("tiny-gpt")), GPT3DecoderLayer)
    assert isinstance(reference_layer(get_model("tiny-llama")), LlamaDecoderLayer)
    with pytest.raises(WorkloadError, match="not LLaMA style"):
        LlamaDecoderLayer(get_model("tiny-gpt"))
    with pytest.raises(WorkloadError, match="not GPT-3 style"):
        GPT3DecoderLayer(get_model("tiny-llama"))
    assert type(reference_layer(get_model("opt-66b").replace(
        d_model=64, n_heads=2, n_kv_heads=2, head_dim=32, d_ff=128, n_layers=1,
        tensor_parallel=1))) is DecoderLayer


def test_oversized_reference_is_refused_before_allocating():
    with pytest.raises(WorkloadError, match="max_params"):
        ReferenceModel(get_model("gpt3-7b"))
    with pytest.raises(WorkloadError, match="max_params"):
        DecoderLayer(get_model("gpt3-175b"))


def test_positions_beyond_the_context_are_rejected():
    model = ReferenceModel(get_model("tiny-gpt"))
    with pytest.raises(WorkloadError, match="exceed max_seq_len 256"):
        model(_tokens(1, 257))
    with pytest.raises(WorkloadError, match="token ids must be in 0..511"):
        model(torch.tensor([[512]]))
