"""pim_mac.v agrees bit for bit with archsim.functional.pim_comp_step and has the COMP pipeline
depth (FILL) of the PIM timing table."""
from __future__ import annotations

import pytest

from archsim import cosim

BLOCK = "pim_mac"
VARIANTS = [v.name for v in cosim.BLOCKS[BLOCK].variants]

pytestmark = pytest.mark.cosim


@pytest.mark.parametrize("variant", VARIANTS)
def test_ports_and_parameters_match_the_pim_config(variant):
    cosim.require_icarus_or_skip()  # pyverilog preprocesses with iverilog -E
    overrides = cosim.get_variant(cosim.BLOCKS[BLOCK], variant).overrides
    assert cosim.check_interface(BLOCK, cosim.load_cosim_config("neupims", overrides)) == []


def test_reference_pipeline_depth_is_one_multiply_four_tree_levels_one_accumulate():
    # the reference FILL of 6 is exactly 1 + log2(16) + 1 register stages: no padding stage
    p = cosim.verilog_parameters(BLOCK, cosim.load_cosim_config("neupims"))
    assert p["FILL_CYCLES"] == 2 + cosim.clog2(p["LANES"]) == 6


@pytest.mark.parametrize("simulator", cosim.bench_simulators())
@pytest.mark.parametrize("variant", VARIANTS)
def test_comp_steps_match_the_functional_pim_model_every_cycle(variant, simulator):
    cosim.assert_cosim_passes(BLOCK, variant, simulator=simulator)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mutation", cosim.BLOCKS[BLOCK].mutations)
def test_model_perturbed_by_one_cycle_or_bit_is_detected(variant, mutation):
    # bit: bit 0 of every adder-tree sum flipped; cycle: FILL + 1
    cosim.assert_mutation_detected(BLOCK, variant, mutation)
