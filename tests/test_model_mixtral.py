"""Mixture of experts (Mixtral) end to end: registry and config.json import, the router model,
graph counts, the compiled program (only the chosen experts' weights read, dependencies and
races checked, expert parallelism's all-to-alls), golden checks (our reference on every NPU
system in fp32 and fp16, transformers' MixtralSparseMoeBlock, a wrong routing caught; the whole
MixtralForCausalLM: tests/test_validate_hf.py), the cycle-level run and the GPU baseline."""
from __future__ import annotations

import json

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import ArchsimError
from mapping import MappingError, compile_model
from workloads.errors import WorkloadError
from workloads.graph import OpKind, build_layer_graph, iter_ops
from workloads.models import get_model, load_hf_config
from workloads.moe import Routing, draw_routing, routing_from_choices, top_k_experts
from workloads.requests import Batch, Request

MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "num_attention_heads": 32,
                "num_key_value_heads": 8, "intermediate_size": 14336, "num_hidden_layers": 32,
                "max_position_embeddings": 32768, "vocab_size": 32000, "rms_norm_eps": 1e-5,
                "rope_theta": 1e6, "sliding_window": None, "hidden_act": "silu",
                "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
                "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
TINY = "tiny-mixtral"


def _write(tmp_path, cfg):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


def _batch(lens, decode=True):
    return Batch(tuple(Request(i, L, 4, L) for i, L in enumerate(lens)))


# ------------------------------------------------------------------------------ spec, config
def test_the_registry_has_mixtral_with_its_published_shape_and_sizes():
    m = get_model("mixtral-8x7b")
    assert (m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.d_ff, m.vocab_size,
            m.max_seq_len) == (4096, 32, 32, 8, 14336, 32000, 32768)
    assert (m.n_experts, m.experts_per_token, m.sliding_window) == (8, 2, None)
    assert abs(m.param_count() / 46.7e9 - 1) < 0.005          # 46.7 B in all
    assert abs(m.active_param_count() / 12.9e9 - 1) < 0.01     # 12.9 B used per token
    t = get_model(TINY)
    assert t.is_moe and t.n_experts == 8 and t.experts_per_token == 2
    assert not get_model("tiny-llama").is_moe


def test_mixtral_config_json_imports_like_the_registry(tmp_path):
    spec = load_hf_config(_write(tmp_path, MIXTRAL_8X7B), name="mx")
    ref = get_model("mixtral-8x7b")
    assert (spec.n_experts, spec.experts_per_token, spec.rope_theta) == (8, 2, 1e6)
    assert spec.param_count() == ref.param_count()
    assert spec.layer_param_breakdown() == ref.layer_param_breakdown()
    # transformers' MixtralConfig defaults: 8 experts, top-2, no window, rope_theta 1e6
    bare = {k: v for k, v in MIXTRAL_8X7B.items()
            if k not in ("num_local_experts", "num_experts_per_tok", "sliding_window",
                         "rope_theta")}
    d = load_hf_config(_write(tmp_path, bare))
    assert (d.n_experts, d.experts_per_token, d.sliding_window, d.rope_theta) == (8, 2, None,
                                                                                  1e6)


@pytest.mark.parametrize("change, keys", [
    ({"num_experts_per_tok": 9}, ("num_experts_per_tok", "num_local_experts")),
    ({"num_key_value_heads": 5}, ("num_attention_heads", "num_key_value_heads")),
    ({"hidden_size": 4100}, ("hidden_size", "num_attention_heads")),
    ({"model_type": "deepseek_v3"}, ("model_type", "mixtral, opt")),
])
def test_bad_config_values_are_one_line_errors_naming_the_keys(tmp_path, change, keys):
    with pytest.raises(WorkloadError) as e:
        load_hf_config(_write(tmp_path, {**MIXTRAL_8X7B, **change}))
    msg = str(e.value)
    assert "\n" not in msg and "config.json" in msg
    for k in keys:
        assert k in msg


def test_the_spec_refuses_inconsistent_expert_fields():
    t = get_model("tiny-llama")
    with pytest.raises(WorkloadError, match="experts_per_token=3 .* larger than n_experts=2"):
        t.replace(n_experts=2, experts_per_token=3)
    with pytest.raises(WorkloadError, match="both n_experts and experts_per_token"):
        t.replace(n_experts=4)
    with pytest.raises(WorkloadError, match="SwiGLU experts without biases"):
        get_model("tiny-gpt").replace(n_experts=4, experts_per_token=2)
    with pytest.raises(WorkloadError, match="must divide n_experts=8"):
        get_model(TINY).check_expert_parallel(3)
    with pytest.raises(WorkloadError, match="has no experts"):
        t.check_expert_parallel(2)


# ------------------------------------------------------------------------------ router model
def test_the_router_model_draws_distinct_experts_reproducibly_and_skews_with_zipf():
    m = get_model(TINY)
    b = _batch([50] * 256)
    u = draw_routing(m, b, "decode", [0, 1], seed=3)
    ch = u.experts[0]
    assert ch.shape == (256, 2) and (ch[:, 0] != ch[:, 1]).all()
    assert u.tokens_per_expert(0).sum() == 512
    # a layer's draw depends on (seed, layer) only
    assert np.array_equal(draw_routing(m, b, "decode", [1], seed=3).experts[1], u.experts[1])
    assert not np.array_equal(draw_routing(m, b, "decode", [0], seed=4).experts[0], ch)
    assert u.imbalance(0) < 1.5                                 # uniform: near the mean
    z = draw_routing(m, b, "decode", [0, 1], zipf_exponent=2.0, seed=3)
    assert z.imbalance(0) > 2.5 and z.imbalance(1) > 2.5        # a few hot experts
    assert np.argmax(z.tokens_per_expert(0)) != np.argmax(z.tokens_per_expert(1))
    with pytest.raises(WorkloadError, match="lists an expert twice"):
        routing_from_choices(m, {0: np.zeros((2, 2), dtype=int)}, np.arange(2), "x")


def test_the_router_on_values_takes_the_k_largest_and_softmax_over_them():
    logits = np.array([[0.1, 2.0, -1.0, 2.0], [3.0, 1.0, 0.0, 0.5]])
    ex, w = top_k_experts(logits, 2)
    assert ex.tolist() == [[1, 3], [0, 1]]                      # ties: the lower index first
    assert np.allclose(w[0], [0.5, 0.5]) and np.allclose(w[1], [1, np.exp(-2)] / (1 + np.exp(-2)))


# ------------------------------------------------------------------------------ graph
def test_the_graph_counts_the_active_parameters_and_only_the_chosen_experts():
    m = get_model(TINY)
    b = _batch([9, 30, 3, 60, 17])
    r = draw_routing(m, b, "decode", [0], seed=1)
    g = build_layer_graph(m, "decode", b, routing=r)
    gemm = sum(o.flops for o in iter_ops(g) if o.kind is OpKind.GEMM)
    assert gemm == 2 * m.layer_matmul_params() * 5              # active parameters, exactly
    chosen = set(np.unique(r.experts[0]).tolist())
    present = {int(n.rsplit(".e", 1)[1]) for n in g.nodes if ".expert_gate.e" in n}
    assert present == chosen and len(chosen) < 8               # unchosen experts: no node
    expert_w = sum(o.weight_bytes for o in iter_ops(g) if o.sub_role.startswith("expert_"))
    assert expert_w == len(chosen) * 3 * m.d_model * m.d_ff * m.dtype_bytes
    comb = sum(o.flops for o in iter_ops(g) if o.sub_role == "moe_combine")
    assert comb == (2 * 2 - 1) * 5 * m.d_model                 # 2k - 1 per output element
    assert g.graph["routing"] == r.source


def test_expert_parallel_graphs_are_device_0s_with_the_all_to_all_bytes():
    m = get_model(TINY)
    b = _batch([20] * 8)
    r = draw_routing(m, b, "decode", [0], seed=5, expert_parallel=2)
    g = build_layer_graph(m, "decode", b, routing=r)
    assert g.graph["requests"] == 4                              # positions 0, 2, 4, 6
    ch = r.experts[0]
    own = np.arange(8) % 2 == 0
    local = ch < 4
    sent = int((own[:, None] & ~local).sum())
    received = int((~own[:, None] & local).sum())
    d = g.nodes["L0.moe_dispatch"]
    assert d["comm_bytes"] == max(sent, received) * m.d_model * m.dtype_bytes
    assert d["bytes_read"] == sent * m.d_model * m.dtype_bytes
    rows = sum(g.nodes[n]["shape"]["m"] for n in g.nodes if ".expert_gate.e" in n)
    assert rows == int(local.sum())                              # every token to experts 0..3
    with pytest.raises(WorkloadError, match="routing of 8 tokens"):
        build_layer_graph(m, "decode", _batch([20] * 6), routing=r)


# ------------------------------------------------------------------------------ compiler
def _weight_reads(cp, name):
    t = cp.tensors[name]
    n = 0
    for s, instrs in cp.program.streams.items():
        for ins in instrs:
            if ins.mnemonic == "DMA_LOAD" and t.addr <= ins["hbm"] < t.addr + t.size_bytes:
                n += ins["rows"] * ins["cols"] * 2
    return n


def test_the_program_reads_only_the_chosen_experts_weights_once_each():
    m = get_model(TINY)
    b = _batch([9, 30, 3])
    cfg = load_config("neupims", ["system.sub_batches=1"])
    cp = compile_model(m, b, cfg)
    for l in cp.layers:
        chosen = set(np.unique(cp.routing.experts[l]).tolist())
        for e in range(8):
            got = _weight_reads(cp, f"L{l}.e{e}.gate_w")
            assert got == (cp.tensors[f"L{l}.e{e}.gate_w"].size_bytes if e in chosen else 0)
        assert _weight_reads(cp, f"L{l}.moe_router_w") == cp.tensors[f"L{l}.moe_router_w"].size_bytes
    assert cp.summary()["routing"]["tokens"] == 3


@pytest.mark.parametrize("phase, sets", [
    ("decode", []), ("decode", ["system.expert_parallel=2"]),
    ("decode", ["system.expert_parallel=4", "system.tensor_parallel=2"]),
    ("prefill", ["system.expert_parallel=2"])])
def test_moe_programs_enforce_every_graph_edge_and_have_no_races(phase, sets):
    from mapping.verify import check_graph_dependencies, find_races, happens_before

    m = get_model(TINY)
    b = _batch([5, 17, 40, 9, 3, 12, 7, 21])
    cfg = load_config("neupims", sets)
    cp = compile_model(m, b, cfg, phase)
    hb = happens_before(cp.program)
    assert check_graph_dependencies(cp, hb) == []
    assert find_races(cp.program, cfg, hb) == []
    n_a2a = cp.instruction_counts().get("ALL_TO_ALL", 0)
    assert (n_a2a > 0) == (cp.expert_parallel > 1)


def test_the_moe_keys_are_refused_where_they_cannot_act():
    b = _batch([10, 20])
    with pytest.raises(MappingError, match="system.expert_parallel = 2: .*has no experts"):
        compile_model(get_model("tiny-llama"), b, load_config("neupims",
                                                             ["system.expert_parallel=2"]))
    with pytest.raises(MappingError, match="system.moe_router .* has no experts"):
        compile_model(get_model("tiny-llama"), b,
                      load_config("neupims", ["system.moe_router.seed=3"]))
    with pytest.raises(MappingError, match="must divide n_experts=8"):
        compile_model(get_model(TINY), b, load_config("neupims", ["system.expert_parallel=3"]))


# ------------------------------------------------------------------------------ golden checks
def test_the_reference_moe_block_equals_transformers_mixtral_sparse_moe_block():
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    from workloads.reference import moe_experts

    cfg = tf.MixtralConfig(hidden_size=16, intermediate_size=24, num_local_experts=4,
                           num_experts_per_tok=2)
    cfg._experts_implementation = "eager"
    blk = MixtralSparseMoeBlock(cfg).double().eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in blk.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)
    y = torch.randn(1, 7, 16, generator=g, dtype=torch.float64)
    ff = 24
    gu, down = blk.experts.gate_up_proj, blk.experts.down_proj
    ours, ex = moe_experts(y[0], blk.gate.weight.T, gu[:, :ff].transpose(1, 2),
                           gu[:, ff:].transpose(1, 2), down.transpose(1, 2), 2)
    with torch.no_grad():
        theirs = blk(y)[0]
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6)   # HF routes in fp32


@pytest.mark.parametrize("system", ["npu", "npu-pim", "neupims"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_tiny_mixtral_decode_matches_the_reference(system, dtype):
    from archsim.validation import validate

    rep = validate(TINY, system, dtype=dtype, steps=1, prompt_lens=[3, 40, 17])
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.top1_agreement == 1.0


def test_a_program_compiled_for_a_routing_the_router_did_not_choose_fails(monkeypatch):
    import archsim.validation.core as core
    from archsim.validation import validate

    real = core._reference_routing

    def swapped(spec, refs, label):      # token 0 of layer 1: its second expert replaced
        r = real(spec, refs, label)
        ch = {l: v.copy() for l, v in r.experts.items()}
        ch[1][0, 1] = next(e for e in range(8) if e not in ch[1][0])
        return Routing(r.n_experts, r.top_k, ch, r.token_request, 1, "wrong")
    monkeypatch.setattr(core, "_reference_routing", swapped)
    rep = validate(TINY, "neupims", dtype="fp32", steps=1, prompt_lens=[3, 20])
    assert not rep.passed
    assert {c.name for c in rep.failures()} >= {"L1.out"}
    assert all(c.passed for c in rep.checks if c.name == "L0.out")


def test_validation_refuses_expert_parallelism():
    from archsim.validation import ValidationError, validate

    with pytest.raises(ValidationError, match="system.expert_parallel 2"):
        validate(TINY, "neupims", overrides=["system.expert_parallel=2"], steps=1,
                 prompt_lens=[3, 4])


# ------------------------------------------------------------------------------ timing
def test_tiny_mixtral_runs_cycle_level_and_the_moe_keys_change_its_time():
    from archsim.system import simulate

    m = get_model(TINY)
    b = _batch([9, 30, 3, 60, 17, 25, 44, 12])

    def run(*sets):
        return simulate(load_config("neupims", list(sets)), m, b).result
    base = run()
    assert base.cycles_per_iteration > 0 and base.devices == 1
    assert any("mixture of experts: 8 experts, top-2" in n for n in base.notes)
    assert base.extra["moe"]["tokens"] == 8
    seed = run("system.moe_router.seed=7")
    skew = run("system.moe_router.zipf_exponent=3")
    ep = run("system.expert_parallel=2")
    assert len({base.cycles_per_iteration, seed.cycles_per_iteration,
                skew.cycles_per_iteration, ep.cycles_per_iteration}) == 4
    assert ep.devices == 2 and ep.expert_parallel == 2 and ep.tokens == 8
    assert ep.extra["compile"]["collectives"] > 0
    slow = run("system.expert_parallel=2", "system.interconnect.latency_ns=20000")
    assert slow.cycles_per_iteration > ep.cycles_per_iteration   # the all-to-all is timed


def test_the_gpu_baseline_counts_only_the_chosen_experts_and_refuses_what_it_cannot_time():
    from archsim.gpu import simulate_gpu_iteration
    from archsim.gpu.roofline import GpuCostModel

    m = get_model("mixtral-8x7b")
    cfg = load_config("gpu-a100", ["system.tensor_parallel=4"])
    few = simulate_gpu_iteration(cfg, m, _batch([500] * 2), with_events=False)
    many = simulate_gpu_iteration(cfg, m, _batch([500] * 64), with_events=False)
    dense = m.replace(n_experts=None, experts_per_token=None)
    d = simulate_gpu_iteration(cfg, dense, _batch([500] * 2), with_events=False)
    # 2 tokens read at most 4 experts' weights per layer, 64 tokens nearly all 8: time grows
    # far more than the dense model's, whose one FFN is always read
    assert few.seconds_per_iteration < many.seconds_per_iteration
    assert few.seconds_per_iteration < 3 * d.seconds_per_iteration
    assert few.extra["flops_per_iteration"] < many.extra["flops_per_iteration"]
    with pytest.raises(ArchsimError, match="mixture of experts"):
        GpuCostModel(cfg, m)
    with pytest.raises(ArchsimError, match="expert_parallel = 2 is not modelled on the GPU"):
        simulate_gpu_iteration(load_config("gpu-a100", ["system.expert_parallel=2"]), m,
                               _batch([10]))
