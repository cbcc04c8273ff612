"""bank_dual_rowbuf.v agrees cycle for cycle with archsim.memory.bank.BankTimingModel."""
from __future__ import annotations

import pytest

from archsim import cosim

BLOCK = "bank_dual_rowbuf"
VARIANTS = [v.name for v in cosim.BLOCKS[BLOCK].variants]

pytestmark = pytest.mark.cosim


@pytest.mark.parametrize("variant", VARIANTS)
def test_ports_and_parameters_match_the_timing_table(variant):
    cosim.require_icarus_or_skip()  # pyverilog preprocesses with iverilog -E
    overrides = cosim.get_variant(cosim.BLOCKS[BLOCK], variant).overrides
    cfg = cosim.load_cosim_config("neupims", overrides)
    assert cosim.check_interface(BLOCK, cfg) == []


@pytest.mark.parametrize("simulator", cosim.bench_simulators())
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_accept_and_reject_agrees_with_the_bank_model(variant, simulator):
    cosim.assert_cosim_passes(BLOCK, variant, simulator=simulator)


@pytest.mark.parametrize("variant", VARIANTS)
def test_one_cycle_longer_trcd_in_the_model_is_detected(variant):
    cosim.assert_mutation_detected(BLOCK, variant, "cycle")


def test_one_cycle_longer_tfaw_in_the_model_is_detected():
    # dual row buffers only: with one shared row buffer tRC (48) > tFAW (30) between the
    # bank's own activations, so a single bank can never see tFAW bind.
    cosim.assert_mutation_detected(BLOCK, "dual", "faw")
