"""Grouped-query attention on PIM: one K/V head serving several query heads is checked for
values (golden, a group of 4 query heads per K/V head on neupims) and for its PIM command count.

The count (docs/model.md): a Newton/NeuPIMs channel has one global buffer, which holds one query
vector per K/V head of an open key row (or one probability run per value slot), so each K/V row
group is opened once per query head of its group: ``G_ACT = q_per_kv x stored row groups``,
and the row-GEMVs are those of multi-head attention with as many query heads. Grouping saves
KV capacity and bytes written, not PIM activations.
"""
from __future__ import annotations

import pytest

from archsim.config import load_config
from mapping import compile_layer
from workloads.models import get_model
from workloads.requests import Batch, Request

LENS = [40, 130, 7]


def _batch():
    return Batch(tuple(Request(i, L, 1, L) for i, L in enumerate(LENS)))


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_each_kv_row_group_is_opened_once_per_query_head_of_its_group(kv_heads):
    m = get_model("tiny-llama").replace(n_kv_heads=kv_heads)
    cp = compile_layer(m, _batch(), load_config("neupims"))
    lay = cp.plan.pim_layout
    counts = cp.instruction_counts()
    stored = sum(lay.key_rows(L) + lay.value_rows(L) for L in LENS)
    assert lay.q_per_kv == 4 // kv_heads
    assert counts["G_ACT"] == lay.q_per_kv * stored
    # row-GEMVs: per query head, one per key row group and one per (run, dimension tile)
    gemvs = sum(4 * (lay.token_groups(L) + lay.runs(L) * lay.dim_tiles) for L in LENS)
    assert counts["PIM_GEMV"] == gemvs
    # what grouping saves: the KV bytes the requests keep (every layer of the stage placed)
    assert cp.summary()["kv_useful_bytes"] == m.n_layers * sum(2 * L * kv_heads * 32 * 2
                                                               for L in LENS)


def test_a_kv_head_serving_four_query_heads_matches_the_reference_on_pim():
    from archsim.validation import resolve_system, run_validation
    from archsim.validation.reference import ModelReference

    spec = get_model("tiny-llama").replace(name="tiny-llama-gqa4", n_kv_heads=1)
    label, cfg = resolve_system("neupims")
    rep = run_validation(ModelReference(spec, seed=1, dtype="fp16"), cfg, system=label,
                         prompt_lens=[3, 40, 130], steps=2, seed=1)
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.attention_engine == "pim"
