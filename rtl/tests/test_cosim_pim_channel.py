"""pim_channel.v agrees cycle for cycle with the simulator's channel-level legality check
(archsim.cosim.ChannelReference: the ChannelController's timing nodes and banks) on seeded
protocol-aware random traffic of both ports, in every row-buffer mode, refresh policy,
standard and organisation of its variants."""
from __future__ import annotations

import pytest

from archsim import cosim

BLOCK = "pim_channel"
VARIANTS = [v.name for v in cosim.BLOCKS[BLOCK].variants]

pytestmark = pytest.mark.cosim


def _cfg(variant, extra=()):
    v = cosim.get_variant(cosim.BLOCKS[BLOCK], variant)
    return cosim.load_cosim_config("neupims", tuple(v.overrides) + tuple(extra))


@pytest.mark.parametrize("variant", VARIANTS)
def test_ports_and_parameters_match_the_timing_table(variant):
    cosim.require_icarus_or_skip()  # pyverilog preprocesses with iverilog -E
    assert cosim.check_interface(BLOCK, _cfg(variant)) == []


def test_parameters_come_from_the_configuration_and_the_command_table():
    from archsim.memory.spec import CMD_INDEX, COMMANDS

    p = cosim.verilog_parameters(BLOCK, _cfg("dual", ["memory.timing.tRCDRD=17",
                                                      "pim.gwrite_cycles=80"]))
    assert (p["T_RCDRD"], p["GWRITE"], p["DUAL"], p["HBM3"], p["REF_PER_BANK"]) == (
        17, 80, 1, 0, 0)
    assert p["NCMD"] == len(COMMANDS) and p["C_GEMV"] == CMD_INDEX["PIM_GEMV"]
    assert (p["T_RTW"], p["T_PPD"]) == (0, 0)          # JESD235 rows: unused
    p = cosim.verilog_parameters(BLOCK, _cfg("hbm3"))
    assert p["HBM3"] == 1 and p["T_RTW"] > 0 and p["T_PPD"] > 0
    p = cosim.verilog_parameters(BLOCK, _cfg("r4_bg2_b2"))
    assert (p["RANKS"], p["BGS"], p["BANKS_PER_BG"], p["RANK_W"], p["GACT_WEIGHT"]) == (
        4, 2, 2, 2, 2)
    assert cosim.verilog_parameters(BLOCK, _cfg("per_bank"))["REF_PER_BANK"] == 1
    assert cosim.verilog_parameters(BLOCK, _cfg("single"))["DUAL"] == 0


def test_a_table_rule_the_rtl_does_not_implement_is_refused(monkeypatch):
    from archsim.memory import spec

    extra = spec.Constraint("tNEW", "bank", ("ACT",), ("RD",), "tRCDRD + 1")
    monkeypatch.setattr(spec, "CONSTRAINTS", spec.CONSTRAINTS + (extra,))
    with pytest.raises(cosim.CosimError, match="does not implement: tNEW"):
        cosim.verilog_parameters(BLOCK, _cfg("dual"))


def test_the_reference_is_the_controllers_composition_of_the_table():
    # a G_ACT weighs banks_per_group = 4 activations in its rank's tFAW window: it waits
    # until an ACT of its rank has left the window, and blocks the rank's next activation
    # for tFAW
    from archsim.memory.spec import CMD_INDEX as C

    cfg = _cfg("dual")
    ref = cosim.ChannelReference(cfg)
    t = cfg.memory.timing
    ref.issue(C["ACT"], 10, 0, 0, 0, row=5)
    assert ref.earliest(C["G_ACT"], 0, 1, 0) == 10 + t.tFAW
    assert ref.earliest(C["G_ACT"], 1, 1, 0) == 11          # another rank: the bus only
    ref.issue(C["G_ACT"], 40, 1, 2, 0, row=7)
    assert ref.earliest(C["ACT"], 1, 0, 0) == 40 + t.tFAW
    assert ref.state_error(C["PIM_GEMV"]) is None
    assert ref.state_error(C["G_ACT"], 1, 2) == "ACT_OPEN_BANK"
    assert ref.state_error(C["REFpb"], 0, 0, 1) == "REFRESH_MODE"


@pytest.mark.parametrize("simulator", cosim.bench_simulators())
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_can_issue_bit_and_grant_agrees_with_the_channel_reference(variant, simulator):
    # the reference organisation in both modes at full length, the others at half
    scale = 1.0 if variant in ("dual", "single") else 0.5
    r = cosim.assert_cosim_passes(BLOCK, variant, simulator=simulator, stimulus_scale=scale)
    issued = sum(t.extra.get("issued", 0) for t in r.tests)
    assert issued > 500, f"{variant}: only {issued} commands issued"


@pytest.mark.parametrize("variant, mutation", [
    ("dual", m) for m in cosim.BLOCKS[BLOCK].mutations] + [("single", "cycle"),
                                                          ("single", "gemv")])
def test_a_timing_rule_one_cycle_longer_in_the_reference_is_detected(variant, mutation):
    # cycle: ACT -> RD (bank); faw: the tFAW window (rank); gemv: PIM_GEMV occupancy
    # (channel); trfc: REF -> ACT (rank); tccd_l: RD -> RD in a bank group
    cosim.assert_mutation_detected(BLOCK, variant, mutation, stimulus_scale=0.5)
