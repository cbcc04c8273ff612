"""Placement from the data table, and bad input rejected with messages that name the fault."""
from __future__ import annotations

import pytest

from archsim.errors import ArchsimError

from archsim.config import load_config
from mapping import MappingError, PlacementError, UnsupportedError, compile_layer
from mapping.placement import PLACEMENT_RULES, Rule, place_graph, place_op
from workloads.graph import build_layer_graph
from workloads.models import get_model
from workloads.requests import Batch, Request


def _batch(lens=(5, 9, 17)):
    return Batch(tuple(Request(i, None, None, L, i % 4) for i, L in enumerate(lens)))


def test_decode_placement_with_pim():
    g = build_layer_graph(get_model("tiny-gpt"), "decode", _batch())
    p = place_graph(g, ("npu", "pim"), 1, details={"ffn_act": "gelu"})
    assert p["L0.qkv"].engine == "sa" and p["L0.ffn2"].engine == "sa"
    assert p["L0.attn_score.r0"].engine == "pim" and p["L0.attn_context.r1"].engine == "pim"
    assert p["L0.attn_softmax.r0"].engine == "vu" and p["L0.attn_norm"].engine == "vu"
    assert p["L0.ffn_act"].kernel == "gelu" and p["L0.kv_append.r2"].engine == "dma"


def test_decode_attention_falls_back_to_the_npu_without_pim():
    g = build_layer_graph(get_model("tiny-llama"), "decode", _batch())
    p = place_graph(g, ("npu",), 1, details={"ffn_act": "swiglu"})
    assert p["L0.attn_score.r0"] == p["L0.attn_score.r0"].__class__("vu", "vu_dot_qk")
    assert p["L0.rope"].kernel == "rope" and p["L0.ffn_act"].kernel == "swiglu"


def test_prefill_attention_stays_on_the_npu_even_with_pim():
    g = build_layer_graph(get_model("tiny-gpt"), "prefill", _batch())
    p = place_graph(g, ("npu", "pim"), 1, details={"ffn_act": "gelu"})
    assert p["L0.attn_score.r0"].engine == "sa" and p["L0.attn_context.r0"].engine == "sa"


def test_tensor_parallel_allreduce_goes_to_the_link():
    g = build_layer_graph(get_model("tiny-gpt"), "decode", _batch(), tp=2)
    p = place_graph(g, ("npu", "pim"), 2, details={"ffn_act": "gelu"})
    assert p["L0.proj_allreduce"].engine == "link"


def test_policy_is_data_a_custom_table_changes_placement():
    rules = (Rule("attention_score", None, (("vu", "vu_dot_qk"),)),) + PLACEMENT_RULES
    pl = place_op("x", {"kind": "attention_score", "phase": "decode"}, {"sa", "vu", "pim"}, rules)
    assert pl.engine == "vu"


def test_unplaceable_op_names_the_op_and_the_engines_tried():
    model = get_model("tiny-gpt").replace(activation="relu")
    with pytest.raises(PlacementError, match=r"op 'L0.ffn_act' \(activation/relu, decode\) "
                                             r"cannot be placed; engines tried: vu \(kernel relu "
                                             r"needs VU_RELU, not in the ISA\)"):
        compile_layer(model, _batch(), load_config("neupims"))
    with pytest.raises(PlacementError, match=r"op 'x' \(attention_score, decode\) cannot be "
                                             r"placed; engines tried: pim \(not in this system\); "
                                             r"vu \(not in this system\)"):
        place_op("x", {"kind": "attention_score", "phase": "decode"}, {"sa"})
    with pytest.raises(PlacementError, match="op 'y' .*no placement rule"):
        place_op("y", {"kind": "teleport", "phase": "decode"}, {"sa"})


def test_bad_requests_and_systems_are_mapping_or_workload_errors():
    from workloads.errors import WorkloadError
    with pytest.raises(WorkloadError, match="request index 0 .* seq_len 999 > max_seq_len 256"):
        compile_layer(get_model("tiny-gpt"), _batch((999,)), load_config("neupims"))
    with pytest.raises(MappingError, match="GPU roofline"):
        compile_layer(get_model("tiny-gpt"), _batch(), load_config("gpu-a100"))
    with pytest.raises(UnsupportedError, match="phase 'training'"):
        compile_layer(get_model("tiny-gpt"), _batch(), load_config("neupims"), phase="training")
    with pytest.raises(MappingError, match=r"layers \[7\] must be consecutive layers"):
        compile_layer(get_model("tiny-gpt"), _batch(), load_config("neupims"), layer=7)
    from mapping import CompileOptions
    b = Batch(tuple(Request(i, None, None, 5, 40) for i in range(3)))
    with pytest.raises(ArchsimError, match="ch_idx 40 is outside the machine's channels 0..31"):
        compile_layer(get_model("tiny-gpt"), b, load_config("neupims"),
                      options=CompileOptions(channels="keep"))


def test_norm_epsilon_the_isa_cannot_encode():
    model = get_model("tiny-gpt").replace(norm_eps=3e-5)
    with pytest.raises(UnsupportedError, match="norm epsilon 3e-05 is not 10\\*\\*-k"):
        compile_layer(model, _batch(), load_config("neupims"))
