"""The COMP steps of a functional run (tiny-gpt's golden validation in fp16 and in bf16)
through pim_mac_fp.v: every accumulator bit for bit equal to the functional run's."""
from __future__ import annotations

import pytest

from archsim import cosim

BLOCK = "pim_mac_fp_replay"
VARIANTS = [v.name for v in cosim.BLOCKS[BLOCK].variants]

pytestmark = pytest.mark.cosim


@pytest.mark.parametrize("variant", VARIANTS)
def test_comp_steps_of_the_functional_run_match_the_rtl_bit_for_bit(variant):
    r = cosim.assert_cosim_passes(BLOCK, variant)
    assert r.stimuli > 3000, f"{variant}: only {r.stimuli} COMP steps"


def test_the_trace_holds_real_operands_and_dot_products(tmp_path):
    cfg = cosim.load_cosim_config("neupims")
    tr = cosim.read_comp_trace(cosim.comp_trace(cfg, "bf16", cosim.DEFAULT_BUILD_ROOT))
    assert tr["header"]["validation_passed"] and tr["header"]["banks"] > 1
    n = len(tr["first"])
    assert 0 < tr["first"].sum() < n                 # dot products of several steps
    assert (tr["bank"] != 0).mean() > 0.5 and tr["bank"].shape[1] == 16


@pytest.mark.parametrize("mutation", cosim.BLOCKS[BLOCK].mutations)
def test_the_replay_sees_a_bit_or_a_cycle_of_difference(mutation):
    cosim.assert_mutation_detected(BLOCK, "fp16", mutation)


def test_a_trace_needs_a_16_bit_operand_type():
    with pytest.raises(cosim.CosimError, match="needs dtype fp16 or bf16, got 'fp32'"):
        cosim.comp_trace(cosim.load_cosim_config("neupims"), "fp32", cosim.DEFAULT_BUILD_ROOT)
