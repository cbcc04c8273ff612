"""pim_mac_fp.v agrees bit for bit with archsim.functional.pim_comp_step (fp16/bf16 operands,
fp32 products, pairwise fp32 adder tree, fp32 accumulator, IEEE special values) and with
to_storage's READRES rounding, at the COMP pipeline depth (FILL) of the PIM timing table."""
from __future__ import annotations

import pytest

from archsim import cosim

BLOCK = "pim_mac_fp"
VARIANTS = [v.name for v in cosim.BLOCKS[BLOCK].variants]

pytestmark = pytest.mark.cosim


def _variant(name):
    return cosim.get_variant(cosim.BLOCKS[BLOCK], name)


@pytest.mark.parametrize("variant", VARIANTS)
def test_ports_and_parameters_match_the_pim_config(variant):
    cosim.require_icarus_or_skip()  # pyverilog preprocesses with iverilog -E
    v = _variant(variant)
    assert cosim.check_interface(BLOCK, cosim.load_cosim_config("neupims", v.overrides),
                                 v.dtype) == []


def test_parameters_come_from_the_config_and_the_operand_type():
    cfg = cosim.load_cosim_config("neupims", ["pim.multipliers_per_bank=12",
                                              "pim.gemv_pipeline_fill=7"])
    assert cosim.verilog_parameters(BLOCK, cfg, "bf16") == {
        "LANES": 12, "EXP_W": 8, "MAN_W": 7, "FILL_CYCLES": 7}
    assert (cosim.verilog_parameters(BLOCK, cfg, "fp16")["EXP_W"],
            cosim.verilog_parameters(BLOCK, cfg, "fp16")["MAN_W"]) == (5, 10)


@pytest.mark.parametrize("call, message", [
    (lambda: cosim.verilog_parameters(BLOCK, cosim.load_cosim_config("neupims"), "fp32"),
     "no operand type 'fp32'; allowed: fp16, bf16"),
    (lambda: cosim.verilog_parameters(BLOCK, cosim.load_cosim_config(
        "neupims", ["pim.acc_bits=24"]), "fp16"), "pim.acc_bits must be 32, got 24"),
])
def test_an_unsupported_operand_type_or_accumulator_is_a_cosim_error(call, message):
    with pytest.raises(cosim.CosimError, match=message):
        call()


@pytest.mark.parametrize("simulator", cosim.bench_simulators())
@pytest.mark.parametrize("variant", VARIANTS)
def test_comp_steps_match_the_functional_pim_model_bit_for_bit_every_cycle(variant, simulator):
    r = cosim.assert_cosim_passes(BLOCK, variant, simulator=simulator)
    assert r.stimuli >= 10_000, f"{variant}: only {r.stimuli} COMP steps"


@pytest.mark.parametrize("variant", ["fp16", "bf16"])
@pytest.mark.parametrize("mutation", cosim.BLOCKS[BLOCK].mutations)
def test_model_perturbed_in_rounding_order_or_special_values_is_detected(variant, mutation):
    # bit: bit 0 of every adder-tree sum; cycle: FILL + 1; order: sequential instead of a
    # pairwise tree; subnormal: subnormal operands read as zero; nan: x86's default NaN
    # (0xFFC00000) instead of the canonical one; inf: infinities saturate to FLT_MAX
    cosim.assert_mutation_detected(BLOCK, variant, mutation)
