"""Operator graphs: structure, and FLOPs/bytes against closed-form formulas (exact)."""
from __future__ import annotations

import networkx as nx
import pytest

from workloads.errors import WorkloadError
from workloads.graph import (OpKind, aggregate_ops, build_layer_graph, build_model_graph,
                             graph_totals, iter_ops, op_of, totals_by)
from workloads.models import get_model
from workloads.requests import Batch, Request, sample_requests

SEQ = [1, 17, 300, 2048, 64, 999]


def _batch(lens=SEQ, channels=None, max_seq_len=None):
    if max_seq_len is not None:
        lens = [min(L, max_seq_len) for L in lens]
    return Batch(tuple(Request(10 + i, None, None, L, None if channels is None else channels[i])
                       for i, L in enumerate(lens)))


def _sum(g, kind=None, role=None, key="flops"):
    return sum(d[key] for _, d in g.nodes(data=True)
               if (kind is None or d["kind"] is kind) and (role is None or d["sub_role"] == role))


# ----------------------------------------------------------------------- decode closed forms
@pytest.mark.parametrize("name,tp", [("gpt3-7b", 4), ("gpt3-7b", 1), ("llama2-70b", 8),
                                     ("llama3-8b", 2), ("tiny-llama", 1), ("opt-66b", 8)])
def test_decode_gemm_flops_are_two_params_tokens(name, tp):
    m = get_model(name)
    g = build_layer_graph(m, "decode", _batch(max_seq_len=m.max_seq_len), tp=tp)
    tokens = len(SEQ)
    assert _sum(g, OpKind.GEMM) == 2 * m.layer_matmul_params(tp) * tokens


def test_gpt3_7b_tp4_decode_layer_matches_hand_formulas():
    m = get_model("gpt3-7b")
    g = build_layer_graph(m, "decode", _batch(), tp=4)
    T, d, b, hd = len(SEQ), 4096, 2, 128
    h = kv = 8                      # 32 heads / tp 4
    ff = 4096                       # 16384 / 4
    qkv_n = 3 * h * hd              # 3072
    # GEMMs: (k, n) of qkv, proj, ffn1, ffn2
    kn = [(d, qkv_n), (h * hd, d), (d, ff), (ff, d)]
    assert _sum(g, OpKind.GEMM) == sum(2 * T * k * n for k, n in kn)
    assert _sum(g, OpKind.GEMM, key="bytes_read") == sum((T * k + k * n) * b for k, n in kn)
    assert _sum(g, OpKind.GEMM, key="bytes_written") == sum(T * n * b for _, n in kn)
    # attention: score and context 2 * heads * head_dim * L each, per request
    assert _sum(g, OpKind.ATTENTION_SCORE) == sum(2 * h * hd * L for L in SEQ)
    assert _sum(g, OpKind.ATTENTION_CONTEXT) == sum(2 * h * hd * L for L in SEQ)
    # score reads q (h hd) and K (L kv hd); writes h L scores
    assert _sum(g, OpKind.ATTENTION_SCORE, key="bytes_read") == \
        sum((h * hd + L * kv * hd) * b for L in SEQ)
    assert _sum(g, OpKind.ATTENTION_SCORE, key="bytes_written") == sum(h * L * b for L in SEQ)
    # context reads p (h L) and V (L kv hd); writes h hd
    assert _sum(g, OpKind.ATTENTION_CONTEXT, key="bytes_read") == \
        sum((h * L + L * kv * hd) * b for L in SEQ)
    assert _sum(g, OpKind.SOFTMAX) == sum(6 * h * L for L in SEQ)
    # one token of K and V appended per request
    assert _sum(g, OpKind.KV_APPEND, key="bytes_written") == T * 2 * kv * hd * b
    # two layernorms (7 FLOP/element), GELU (9), biases, residual adds incl. row-parallel biases
    assert _sum(g, OpKind.LAYERNORM) == 2 * 7 * T * d
    assert _sum(g, OpKind.ACTIVATION) == 9 * T * ff
    assert _sum(g, OpKind.ELEMENTWISE) == T * qkv_n + T * ff + 2 * (2 * T * d)
    # ring all-reduce after proj and ffn2: 2 (tp-1)/tp of the activation sent per device
    ar = [op_of(g, n) for n in g if g.nodes[n]["kind"] is OpKind.ALLREDUCE]
    assert [op.sub_role for op in ar] == ["proj_allreduce", "ffn_allreduce"]
    assert all(op.comm_bytes == 2 * 3 * T * d * b // 4 for op in ar)
    # every parameter on the device is read exactly once
    assert _sum(g, key="weight_bytes") == m.layer_param_count(4) * b


@pytest.mark.parametrize("name,tp", [("llama2-70b", 8), ("llama2-70b", 4), ("llama3-8b", 1),
                                     ("tiny-llama", 2)])
def test_gqa_kv_bytes_use_kv_heads(name, tp):
    m = get_model(name)
    seq = [min(L, m.max_seq_len) for L in SEQ]
    g = build_layer_graph(m, "decode", _batch(seq), tp=tp)
    kv, h, hd, b = m.kv_heads_per_device(tp), m.heads_per_device(tp), m.head_dim, 2
    per_key = kv * hd * b
    assert _sum(g, OpKind.ATTENTION_SCORE, key="kv_bytes") == sum(seq) * per_key
    assert _sum(g, OpKind.ATTENTION_CONTEXT, key="kv_bytes") == sum(seq) * per_key
    # cross-check with the model's own KV footprint: K+V of all positions, one layer
    assert _sum(g, key="kv_bytes") - _sum(g, OpKind.KV_APPEND, key="kv_bytes") == \
        sum(seq) * m.kv_cache_bytes_per_token(tp) // m.n_layers
    assert _sum(g, OpKind.ATTENTION_SCORE) == sum(2 * h * hd * L for L in seq)


def test_gqa_decode_attention_stacks_the_query_group():
    m = get_model("llama2-70b")
    g = build_layer_graph(m, "decode", _batch([100]), tp=4)
    sc = op_of(g, "L0.attn_score.r10")
    assert sc.shape == {"batch": 2, "m": 8, "n": 100, "k": 128}
    cx = op_of(g, "L0.attn_context.r10")
    assert cx.shape == {"batch": 2, "m": 8, "n": 128, "k": 100}
    assert sc.flops == 2 * sc.shape["batch"] * sc.shape["m"] * sc.shape["n"] * sc.shape["k"]


def test_mha_decode_attention_is_a_gemv_per_head():
    g = build_layer_graph(get_model("gpt3-7b"), "decode", _batch([50]), tp=4)
    assert op_of(g, "L0.attn_score.r10").shape == {"batch": 8, "m": 1, "n": 50, "k": 128}


# ------------------------------------------------------------------------------ prefill
def test_prefill_processes_every_prompt_token_with_dense_attention():
    m = get_model("tiny-llama")
    lens = [3, 5, 40]
    g = build_layer_graph(m, "prefill", _batch(lens), tp=1)
    T = sum(lens)
    h, kv, hd, b, d = 4, 2, 32, 2, 128
    assert g.graph["tokens"] == T
    assert _sum(g, OpKind.GEMM) == 2 * m.layer_matmul_params() * T
    assert _sum(g, OpKind.ATTENTION_SCORE) == sum(2 * h * hd * L * L for L in lens)
    assert _sum(g, OpKind.SOFTMAX) == sum(6 * h * L * L for L in lens)
    assert _sum(g, OpKind.KV_APPEND, key="bytes_written") == sum(2 * L * kv * hd * b for L in lens)
    # RoPE rotates q and k of every token: 3 FLOPs per element
    assert _sum(g, role="rope") == 3 * T * (h + kv) * hd
    # RMSNorm 4 FLOP/element, SwiGLU 6 FLOP/element of the d_ff output
    assert _sum(g, OpKind.RMSNORM) == 2 * 4 * T * d
    assert _sum(g, OpKind.ACTIVATION) == 6 * T * m.d_ff
    assert op_of(g, "L0.attn_score.r12").shape == {"batch": kv, "m": 2 * 40, "n": 40, "k": hd}


# ---------------------------------------------------------------------------- structure
def test_layer_graph_is_a_dag_with_the_expected_dependencies():
    m = get_model("tiny-llama")
    g = build_layer_graph(m, "decode", _batch([4, 9], channels=[3, 1]), layer=1)
    assert nx.is_directed_acyclic_graph(g)
    for r in (10, 11):
        assert set(g.predecessors(f"L1.attn_score.r{r}")) == {"L1.rope", f"L1.kv_append.r{r}"}
        assert set(g.predecessors(f"L1.attn_context.r{r}")) == {f"L1.attn_softmax.r{r}",
                                                                f"L1.kv_append.r{r}"}
        assert g.has_edge(f"L1.attn_context.r{r}", "L1.proj")
    assert set(g.predecessors("L1.ffn_act")) == {"L1.ffn_gate", "L1.ffn1"}
    assert [n for n in g if g.in_degree(n) == 0] == ["L1.attn_norm"]
    assert [n for n in g if g.out_degree(n) == 0] == ["L1.ffn_residual"]
    assert "L1.proj_allreduce" not in g  # tp = 1
    ops = {op.name: op for op in iter_ops(g)}
    assert ops["L1.attn_score.r11"].request_id == 11 and ops["L1.attn_score.r11"].channel == 1
    assert ops["L1.qkv"].request_id is None and ops["L1.qkv"].layer == 1
    assert ops["L1.qkv"].phase == "decode" and ops["L1.qkv"].dtype == "fp16"
    # RoPE receives q and k (4 + 2 heads of 32) of 2 tokens
    assert g.edges["L1.qkv", "L1.rope"]["size_bytes"] == 2 * (4 + 2) * 32 * 2


def test_gpt_layer_has_bias_nodes_and_tp_allreduces_in_order():
    g = build_layer_graph(get_model("gpt3-7b"), "decode", _batch([8]), tp=4)
    path = nx.dag_longest_path(g)
    roles = [g.nodes[n]["sub_role"] for n in path]
    assert roles[:3] == ["attn_norm", "qkv", "qkv_bias"]
    assert roles.index("proj") < roles.index("proj_allreduce") < roles.index("attn_residual")
    assert roles[-3:] == ["ffn2", "ffn_allreduce", "ffn_residual"]


def test_model_graph_chains_layers_and_adds_embedding_and_head():
    m = get_model("tiny-gpt")
    batch = _batch([3, 7])
    g = build_model_graph(m, "decode", batch)
    assert nx.is_directed_acyclic_graph(g)
    assert g.has_edge("embedding", "L0.attn_norm") and g.has_edge("L0.ffn_residual",
                                                                   "L1.attn_norm")
    assert g.has_edge("L0.ffn_residual", "L1.attn_residual")
    assert nx.has_path(g, "embedding", "lm_head") and g.out_degree("lm_head") == 0
    layer = build_layer_graph(m, "decode", batch)
    head = op_of(g, "lm_head")
    assert head.shape == {"m": 2, "k": 128, "n": 512}
    assert _sum(g, OpKind.GEMM) == m.n_layers * _sum(layer, OpKind.GEMM) + 2 * 2 * 128 * 512
    # learned positions: token + position rows gathered, one add per element
    emb = op_of(g, "embedding")
    assert (emb.flops, emb.bytes_read) == (2 * 128, 2 * 2 * 128 * 2)


def test_model_graph_pipeline_stage_holds_its_layers_only():
    m = get_model("gpt3-30b")   # 48 layers, PP 2
    batch = _batch([5, 6])
    first = build_model_graph(m, "decode", batch, stage=0)
    last = build_model_graph(m, "decode", batch, stage=1)
    assert first.graph["layers"] == list(range(24)) and last.graph["layers"] == list(range(24, 48))
    assert "embedding" in first and "lm_head" not in first
    assert "embedding" not in last and "lm_head" in last
    assert op_of(last, "lm_head").shape["n"] == 50304 // 4


def test_aggregate_ops_collapses_per_request_attention():
    batch = sample_requests("alpaca", 32, seed=0)
    g = build_layer_graph(get_model("gpt3-7b"), "decode", batch)
    groups = {grp.sub_role: grp for grp in aggregate_ops(g)}
    assert groups["attn_score"].count == 32 and groups["qkv"].count == 1
    assert groups["attn_score"].flops == _sum(g, OpKind.ATTENTION_SCORE)
    assert groups["attn_score"].seq_len_min == batch.seq_lens.min()
    assert groups["attn_score"].seq_len_max == batch.seq_lens.max()
    assert sum(grp.flops for grp in groups.values()) == graph_totals(g)["flops"]
    by_kind = totals_by(g, "kind")
    assert by_kind[OpKind.ATTENTION_SCORE]["ops"] == 32


def test_arithmetic_intensity_separates_decode_gemm_from_attention():
    batch = sample_requests("sharegpt", 256, 0, max_seq_len=2048)
    g = build_layer_graph(get_model("gpt3-7b"), "decode", batch)
    assert op_of(g, "L0.ffn1").arithmetic_intensity > 100
    assert all(op.arithmetic_intensity < 1.1 for op in iter_ops(g)
               if op.kind is OpKind.ATTENTION_SCORE)


# -------------------------------------------------------------------------------- errors
def test_graph_rejects_unknown_phase():
    with pytest.raises(WorkloadError,
                       match=r"phase 'train' not one of \['prefill', 'decode', 'mixed'\]"):
        build_layer_graph(get_model("tiny-gpt"), "train", _batch([3]))


def test_graph_rejects_tp_that_does_not_split_the_model():
    with pytest.raises(WorkloadError, match="tensor-parallel degree 3 must divide n_heads=4"):
        build_layer_graph(get_model("tiny-gpt"), "decode", _batch([3]), tp=3)


def test_graph_rejects_requests_beyond_the_context():
    with pytest.raises(WorkloadError, match=r"request index 1 \(id 11\) has seq_len 300"):
        build_layer_graph(get_model("tiny-gpt"), "decode", _batch([3, 300]))


def test_graph_rejects_empty_batch_and_bad_layer():
    with pytest.raises(WorkloadError, match="empty"):
        build_layer_graph(get_model("tiny-gpt"), "decode", Batch(()))
    with pytest.raises(WorkloadError, match=r"layer 2 not in 0..1"):
        build_layer_graph(get_model("tiny-gpt"), "decode", _batch([3]), layer=2)
    with pytest.raises(WorkloadError, match="pipeline stage 2 not in 0..1"):
        build_model_graph(get_model("gpt3-30b"), "decode", _batch([3]), stage=2)
