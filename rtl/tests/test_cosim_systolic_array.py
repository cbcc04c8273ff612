"""systolic_array.v agrees cycle for cycle with the NPU timing model (archsim.npu.timing) and
its outputs equal numpy's matmul."""
from __future__ import annotations

import pytest

from archsim import cosim

BLOCK = "systolic_array"
VARIANTS = [v.name for v in cosim.BLOCKS[BLOCK].variants]

pytestmark = pytest.mark.cosim


@pytest.mark.parametrize("variant", VARIANTS)
def test_ports_and_parameters_match_the_npu_config(variant):
    cosim.require_icarus_or_skip()  # pyverilog preprocesses with iverilog -E
    overrides = cosim.get_variant(cosim.BLOCKS[BLOCK], variant).overrides
    assert cosim.check_interface(BLOCK, cosim.load_cosim_config("neupims", overrides)) == []


@pytest.mark.parametrize("simulator", cosim.bench_simulators())
@pytest.mark.parametrize("variant", VARIANTS)
def test_tiles_match_npu_timing_model_and_numpy_every_cycle(variant, simulator):
    cosim.assert_cosim_passes(BLOCK, variant, simulator=simulator)


@pytest.mark.parametrize("mutation", cosim.BLOCKS[BLOCK].mutations)
def test_model_perturbed_by_one_cycle_or_bit_is_detected(mutation):
    # cycle: tile_latency_cycles + 1; preload: weight_preload_cycles + 1;
    # interval: tile_issue_interval_cycles + 1; bit: one bit of the numpy reference flipped
    cosim.assert_mutation_detected(BLOCK, "4x4", mutation)
