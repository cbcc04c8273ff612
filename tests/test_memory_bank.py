"""BankTimingModel: cycle-exact accept/reject, as the RTL co-simulation drives it."""
import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.memory.bank import BankTimingModel
from archsim.memory.spec import compile_table, gemv_cycles

CFG = load_config("neupims")
RTL_RULES = {"tRCDRD", "tRCDWR", "tRP", "tRAS", "tRC", "tCCD_L", "tCCD_L_WR",
             "tRCDRD_PIM", "tRAS_PIM", "tRC_PIM", "tRP_PIM", "COMP_STEP", "tRC_X", "tRP_X"}


def first_accept(bank, cmd, start=0, row=None):
    t = start
    while not bank.can_issue(cmd, t, row):
        t += 1
        assert t < start + 10_000
    return t


def test_row_hit_issues_after_trcd_then_tccd_l_in_same_bank():
    b = BankTimingModel(CFG)
    b.issue("ACT", 0, row=3)
    assert first_accept(b, "RD", row=3) == 14
    b.issue("RD", 14, row=3)
    assert first_accept(b, "RD", 14, row=3) == 16
    assert not b.can_issue("RD", 15, 3) and b.can_issue("RD", 16, 3)


def test_precharge_waits_tras_and_activate_waits_trp():
    b = BankTimingModel(CFG)
    b.issue("ACT", 0, row=1)
    assert first_accept(b, "PRE") == 34
    b.issue("PRE", 34)
    assert first_accept(b, "ACT", 34, row=2) == 48


def test_state_rules_reject_rd_on_closed_bank_and_double_act():
    b = BankTimingModel(CFG)
    assert not b.can_issue("RD", 100, 0)
    with pytest.raises(SimulationError, match="COL_CLOSED_BANK"):
        b.issue("RD", 100, row=0)
    b.issue("ACT", 0, row=1)
    assert b.state_error("ACT") == "ACT_OPEN_BANK"
    assert b.state_error("RD", row=2) == "ROW_MISMATCH"
    with pytest.raises(SimulationError, match="too early"):
        b.issue("PRE", 10)


def test_dual_mode_pim_row_is_independent_of_memory_row():
    b = BankTimingModel(CFG, dual=True, rule_names=RTL_RULES)
    b.issue("ACT", 0, row=1)
    assert b.can_issue("PIM_ACT", 1, row=9)
    b.issue("PIM_ACT", 1, row=9)
    assert first_accept(b, "COMP", 1) == 15
    b.issue("RD", 14, row=1)
    b.issue("COMP", 15)
    assert b.open_row == 1 and b.pim_row == 9
    assert first_accept(b, "PIM_PRECHARGE", 15) == 35


def test_single_mode_shares_one_row_buffer():
    b = BankTimingModel(CFG, dual=False, rule_names=RTL_RULES)
    b.issue("ACT", 0, row=1)
    assert not b.can_issue("PIM_ACT", 100, row=9)     # memory row still open
    b.issue("PRE", 34)
    assert first_accept(b, "PIM_ACT", 34, row=9) == 48   # tRP (and tRC) shared
    b.issue("PIM_ACT", 48, row=9)
    assert not b.can_issue("ACT", 500, row=1)


def test_gemv_occupancy_follows_reference_formula():
    assert gemv_cycles(16, CFG) == 2 * (16 + 1)
    assert gemv_cycles(3, CFG) == 2 * (6 + 1)
    b = BankTimingModel(CFG)
    b.issue("G_ACT", 0, row=4)
    b.issue("PIM_GEMV", 14, k=16)
    assert first_accept(b, "PIM_PRE", 14) == 14 + 34


def test_unknown_command_and_rule_names_fail_clearly():
    b = BankTimingModel(CFG)
    with pytest.raises(SimulationError, match="unknown bank command"):
        b.can_issue("NOP", 0)
    from archsim.errors import ConfigError
    with pytest.raises(ConfigError, match="unknown timing rules"):
        compile_table(CFG, rule_names={"tFOO"})
