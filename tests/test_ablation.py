"""The NeuPIMs feature ablation (archsim.ablation, ``archsim compare --ablation``; issue 23)."""
from __future__ import annotations

import math

import pytest

from archsim.ablation import ABLATION_STEPS, run_ablation, step_configs
from archsim.config import load_config
from archsim.errors import ArchsimError
from archsim.serving import make_batch, simulate_system_iteration
from workloads import get_model
from mapping.channels import place_channels


def _machine(cfg) -> dict:
    d = cfg.to_dict()
    d.pop("name")
    return d


def test_steps_run_from_the_newton_baseline_through_the_presets_to_neupims():
    cfgs = [c for _, _, c in step_configs()]
    assert len(cfgs) == len(ABLATION_STEPS) >= 6
    assert _machine(cfgs[0]) == _machine(load_config("npu-pim-blocked"))
    assert _machine(cfgs[1]) == _machine(load_config("npu-pim-blocked-fused"))
    assert _machine(cfgs[4]) == _machine(load_config("neupims"))
    assert _machine(cfgs[5]) == _machine(load_config("neupims", ["system.sub_batches=auto"]))
    # every step changes the machine
    assert all(_machine(a) != _machine(b) for a, b in zip(cfgs, cfgs[1:]))


def test_an_override_of_a_varied_key_is_rejected_and_others_reach_every_step():
    with pytest.raises(ArchsimError, match="the ablation varies pim.row_buffer_mode"):
        step_configs(["pim.row_buffer_mode=single"])
    cfgs = [c for _, _, c in step_configs(["pim.multipliers_per_bank=32"])]
    assert {c.pim.multipliers_per_bank for c in cfgs} == {32}


def test_ablation_rows_are_the_steps_simulated_on_one_batch():
    model = get_model("tiny-gpt")
    batch = make_batch(model, 8, "sharegpt", 0)
    rows = run_ablation(model, batch)
    assert [r.step.name for r in rows] == [s.name for s in ABLATION_STEPS]
    assert rows[0].step_gain == rows[0].total_gain == 1.0
    assert math.isclose(math.prod(r.step_gain for r in rows), rows[-1].total_gain)
    # step 1 is exactly the npu-pim-blocked run of the same requests on its own channels
    cfg = load_config("npu-pim-blocked")
    b = place_channels(batch, cfg.memory.org.channels, cfg.system.channel_policy)
    ref = simulate_system_iteration(cfg, model, b, with_events=False)
    assert rows[0].cycles_per_iteration == ref.cycles_per_iteration
    assert rows[0].tokens_per_s == pytest.approx(ref.tokens_per_s)
