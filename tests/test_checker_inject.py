"""The independent checker names every kind of injected violation (rule, both commands, cycles)."""
import pytest

from archsim.config import load_config
from archsim.memory.checker import check_log
from archsim.memory.runner import run_requests
from archsim.memory.selftest import pattern_requests


def R(t, cmd, ra=0, bg=0, ba=0, row=0, col=-1, ch=0):
    return (t, ch, ra, bg, ba, cmd, row, col)


def P(t, cmd, col=-1, ch=0):  # channel-wide PIM command
    return (t, ch, -1, -1, -1, cmd, -1, col)


def GA(t, ra=0, bg=0, row=7):
    return (t, 0, ra, bg, -1, "G_ACT", row, -1)


PB = ["memory.refresh.mode=per_bank"]
HBM3 = ["memory.kind=hbm3"]

# (rule, base log builder taking the variable cycle, good cycle, bad cycle, overrides, mode)
CASES = [
    ("tRCDRD", lambda x: [R(0, "ACT"), R(x, "RD", col=0)], 14, 13, [], "dual"),
    ("tRCDWR", lambda x: [R(0, "ACT"), R(x, "WR", col=0)], 14, 13, [], "dual"),
    ("tRAS", lambda x: [R(0, "ACT"), R(x, "PRE")], 34, 33, [], "dual"),
    ("tRP", lambda x: [R(0, "ACT"), R(40, "PRE"), R(x, "ACT")], 54, 53, [], "dual"),
    ("tRC", lambda x: [R(0, "ACT"), R(34, "PRE"), R(x, "ACT")], 60, 59,
     ["memory.timing.tRC=60"], "dual"),
    ("tWR", lambda x: [R(0, "ACT"), R(14, "WR", col=0), R(x, "PRE")], 36, 35, [], "dual"),
    ("tRTP_L", lambda x: [R(0, "ACT"), R(30, "RD", col=0), R(x, "PRE")], 36, 35, [], "dual"),
    ("tCCD_L", lambda x: [R(0, "ACT"), R(6, "ACT", ba=1), R(20, "RD", col=0),
                          R(x, "RD", ba=1, col=0)], 24, 23, ["memory.timing.tCCD_L=4"], "dual"),
    ("tCCD_S", lambda x: [R(0, "ACT"), R(4, "ACT", bg=1), R(20, "RD", col=0),
                          R(x, "RD", bg=1, col=0)], 22, 21, [], "dual"),
    ("tRTW", lambda x: [R(0, "ACT"), R(4, "ACT", bg=1), R(20, "RD", col=0),
                        R(x, "WR", bg=1, col=0)], 32, 31, [], "dual"),
    ("tWTR_S", lambda x: [R(0, "ACT"), R(4, "ACT", bg=1), R(20, "WR", col=0),
                          R(x, "RD", bg=1, col=0)], 32, 31, [], "dual"),
    ("tWTR_READRES", lambda x: [R(0, "ACT"), GA(4, ra=1, bg=1), R(20, "WR", col=0),
                                P(x, "READRES")], 32, 31, [], "dual"),
    ("tWTR_L", lambda x: [R(0, "ACT"), R(6, "ACT", ba=1), R(20, "WR", col=0),
                          R(x, "RD", ba=1, col=0)], 34, 33, [], "dual"),
    ("tRRD_S", lambda x: [R(0, "ACT"), R(x, "ACT", bg=1)], 4, 3, [], "dual"),
    ("tRRD_L", lambda x: [R(0, "ACT"), R(x, "ACT", ba=1)], 6, 5, [], "dual"),
    ("tFAW", lambda x: [R(0, "ACT"), R(4, "ACT", bg=1), R(8, "ACT", bg=2), R(12, "ACT", bg=3),
                        R(x, "ACT", ba=1)], 30, 29, [], "dual"),
    ("tFAW", lambda x: [GA(0), R(x, "ACT", bg=1)], 30, 29, [], "dual"),
    ("tRFC", lambda x: [R(0, "REF", bg=-1, ba=-1), R(x, "ACT")], 260, 259, [], "dual"),
    ("tRP_REF", lambda x: [R(0, "ACT"), R(34, "PRE"), R(x, "REF", bg=-1, ba=-1)], 48, 47, [],
     "dual"),
    ("tRC_REF", lambda x: [R(0, "ACT"), R(34, "PRE"), R(x, "REF", bg=-1, ba=-1)], 60, 59,
     ["memory.timing.tRC=60"], "dual"),
    ("CMD_BUS", lambda x: [R(0, "ACT"), R(x, "ACT", ra=1)], 1, 0, [], "dual"),
    ("tRCDRD_PIM", lambda x: [GA(0), P(x, "PIM_GEMV", 16)], 14, 13, [], "dual"),
    ("GEMV_BUSY", lambda x: [GA(0), P(14, "PIM_GEMV", 16), P(x, "PIM_PRE")], 48, 47, [], "dual"),
    ("tRAS_PIM", lambda x: [GA(0), P(14, "COMP", 0), P(x, "PIM_PRE")], 34, 33, [], "dual"),
    ("tRP_PIM", lambda x: [GA(0), P(34, "PIM_PRE"), GA(x)], 48, 47, [], "dual"),
    ("tRC_PIM", lambda x: [GA(0), P(34, "PIM_PRE"), GA(x)], 60, 59,
     ["memory.timing.tRC=60"], "dual"),
    ("COMP_STEP", lambda x: [GA(0), P(14, "COMP", 0), P(x, "COMP", 1)], 16, 15, [], "dual"),
    ("tRTP_PIM", lambda x: [GA(0), P(30, "COMP", 0), P(x, "PIM_PRE")], 36, 35, [], "dual"),
    ("GWRITE_LOAD", lambda x: [P(0, "GWRITE"), GA(1), P(x, "COMP", 0)], 100, 99, [], "dual"),
    ("GWRITE_BUS", lambda x: [P(0, "GWRITE"), R(1, "ACT"), R(x, "WR", col=0)], 96, 95, [],
     "dual"),
    ("READRES_BUS", lambda x: [R(0, "ACT"), P(20, "READRES"), R(x, "RD", col=0)], 24, 23, [],
     "dual"),
    ("PIM_ENTER", lambda x: [P(0, "PIM_ENTER"), GA(x)], 28, 27, [], "single"),
    ("PIM_EXIT", lambda x: [P(0, "PIM_ENTER"), GA(28), P(62, "PIM_PRE"), P(76, "PIM_EXIT"),
                            R(x, "ACT")], 104, 103, [], "single"),
    ("tRC_X", lambda x: [R(0, "ACT"), R(34, "PRE"), P(48, "PIM_ENTER"), GA(x)], 60, 59,
     ["memory.timing.tRC=60", "pim.mode_switch_cycles=0"], "single"),
    # auto-precharge (closed page policies): RDA/WRA close the row themselves
    ("tRDA_ACT", lambda x: [R(0, "ACT"), R(40, "RDA", col=0), R(x, "ACT")], 60, 59, [], "dual"),
    ("tWRA_ACT", lambda x: [R(0, "ACT"), R(30, "WRA", col=0), R(x, "ACT")], 66, 65, [], "dual"),
    ("tRDA_REF", lambda x: [R(0, "ACT"), R(40, "RDA", col=0), R(x, "REF", bg=-1, ba=-1)],
     60, 59, [], "dual"),
    ("tWRA_REF", lambda x: [R(0, "ACT"), R(30, "WRA", col=0), R(x, "REF", bg=-1, ba=-1)],
     66, 65, [], "dual"),
    # per-bank refresh (REFpb)
    ("tRFCpb", lambda x: [R(0, "REFpb"), R(x, "ACT")], 160, 159, PB, "dual"),
    ("tRREFD", lambda x: [R(0, "REFpb"), R(x, "ACT", bg=1)], 8, 7, PB, "dual"),
    ("tRREFD", lambda x: [R(0, "REFpb"), R(x, "REFpb", bg=1)], 8, 7, PB, "dual"),
    ("tRRD_REFpb", lambda x: [R(0, "ACT"), R(x, "REFpb", bg=1)], 4, 3, PB, "dual"),
    ("tRC_REFpb", lambda x: [R(0, "ACT"), R(34, "PRE"), R(x, "REFpb")], 60, 59,
     PB + ["memory.timing.tRC=60"], "dual"),
    ("tRP_REFpb", lambda x: [R(0, "ACT"), R(40, "PRE"), R(x, "REFpb")], 54, 53, PB, "dual"),
    ("tRDA_REFpb", lambda x: [R(0, "ACT"), R(40, "RDA", col=0), R(x, "REFpb")], 60, 59, PB,
     "dual"),
    ("tWRA_REFpb", lambda x: [R(0, "ACT"), R(30, "WRA", col=0), R(x, "REFpb")], 66, 65, PB,
     "dual"),
    # HBM3 rows (JESD238): the explicit read-to-write turnaround and PRE-to-PRE
    ("tRTW", lambda x: [R(0, "ACT"), R(4, "ACT", bg=1), R(40, "RD", col=0),
                        R(x, "WR", bg=1, col=0)], 60, 59, HBM3, "dual"),
    ("tPPD", lambda x: [R(0, "ACT"), R(4, "ACT", bg=1), R(50, "PRE"), R(x, "PRE", bg=1)],
     52, 51, HBM3, "dual"),
]


@pytest.mark.parametrize("rule,build,good,bad,sets,mode", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_checker_names_injected_timing_violation(rule, build, good, bad, sets, mode):
    cfg = load_config("neupims", sets + [f"pim.row_buffer_mode={mode}"])
    assert check_log(build(good), cfg) == []
    viol = check_log(build(bad), cfg)
    hit = [v for v in viol if v.rule == rule]
    assert hit, f"{rule} not reported; got {[str(v) for v in viol]}"
    v = hit[0]
    assert v.cycle == bad and v.prev_command is not None and v.prev_cycle is not None
    assert v.actual_cycles < v.required_cycles
    assert rule in str(v) and v.command in str(v) and v.prev_command in str(v)


STATE_CASES = [
    ("ACT_OPEN_BANK", [R(0, "ACT")], [R(0, "ACT"), R(48, "ACT")], "dual"),
    ("ACT_OPEN_BANK", [GA(0)], [GA(0), GA(48)], "dual"),
    ("COL_CLOSED_BANK", [R(0, "ACT")], [R(20, "RD", col=0)], "dual"),
    ("ROW_MISMATCH", [R(0, "ACT", row=5), R(14, "RD", row=5, col=0)],
     [R(0, "ACT", row=5), R(14, "RD", row=6, col=0)], "dual"),
    ("PIM_ROW_CLOSED", [GA(0), P(14, "COMP", 0)], [P(14, "COMP", 0)], "dual"),
    ("REF_OPEN_BANK", [R(0, "ACT"), R(34, "PRE"), R(300, "REF", bg=-1, ba=-1)],
     [R(0, "ACT"), R(300, "REF", bg=-1, ba=-1)], "dual"),
    ("REF_OPEN_BANK", [GA(0), P(34, "PIM_PRE"), R(300, "REF", bg=-1, ba=-1)],
     [GA(0), R(300, "REF", bg=-1, ba=-1)], "dual"),
    ("MODE", [P(0, "PIM_ENTER"), GA(28)], [GA(28)], "single"),
    ("MODE", [R(0, "ACT")], [P(0, "PIM_ENTER"), R(28, "ACT")], "single"),
    ("MODE", [R(0, "ACT")], [P(0, "PIM_ENTER")], "dual"),
    ("REFRESH_INTERVAL", [R(0, "REF", bg=-1, ba=-1), R(1, "REF", ra=1, bg=-1, ba=-1),
                          R(35000, "ACT")],
     [R(0, "REF", bg=-1, ba=-1), R(1, "REF", ra=1, bg=-1, ba=-1), R(40000, "ACT")], "dual"),
    ("UNKNOWN", [R(0, "ACT")], [R(0, "FOO")], "dual"),
    ("UNKNOWN", [R(0, "ACT")], [R(0, "ACT", bg=9)], "dual"),
    ("COL_CLOSED_BANK", [R(0, "ACT"), R(14, "RD", col=0), R(16, "RDA", col=1)],
     [R(0, "ACT"), R(14, "RDA", col=0), R(16, "RD", col=1)], "dual"),
    ("REFRESH_MODE", [R(0, "REF", bg=-1, ba=-1)], [R(0, "REFpb")], "dual"),
]

PB_STATE_CASES = [
    ("REF_OPEN_BANK", [R(0, "ACT"), R(34, "PRE"), R(300, "REFpb")],
     [R(0, "ACT"), R(300, "REFpb")]),
    ("REF_OPEN_BANK", [R(0, "ACT", bg=1), R(300, "REFpb")],
     [R(0, "ACT", bg=0), R(300, "REFpb")]),
    ("REFRESH_MODE", [R(0, "REFpb")], [R(0, "REF", bg=-1, ba=-1)]),
    ("REFRESH_INTERVAL", [R(0, "REFpb"), R(35000, "REFpb")], [R(0, "REFpb"), R(40000, "REFpb")]),
]


@pytest.mark.parametrize("rule,good,bad", PB_STATE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(PB_STATE_CASES)])
def test_checker_names_injected_per_bank_refresh_violation(rule, good, bad):
    cfg = load_config("neupims", PB + ["memory.refresh.enabled=false"]
                      if rule != "REFRESH_INTERVAL" else PB)
    assert not [v for v in check_log(good, cfg) if v.rule == rule], \
        [str(v) for v in check_log(good, cfg)]
    viol = check_log(bad, cfg)
    assert rule in {v.rule for v in viol}, [str(v) for v in viol]


@pytest.mark.parametrize("rule,good,bad,mode", STATE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(STATE_CASES)])
def test_checker_names_injected_state_violation(rule, good, bad, mode):
    cfg = load_config("neupims", [f"pim.row_buffer_mode={mode}"])
    assert check_log(good, cfg) == [], [str(v) for v in check_log(good, cfg)]
    viol = check_log(bad, cfg)
    assert rule in {v.rule for v in viol}, [str(v) for v in viol]


def test_every_timing_rule_of_the_table_has_an_injection_case():
    from archsim.memory.spec import CONSTRAINTS

    covered = {c[0] for c in CASES}
    # rules implied by others in every legal schedule (documented redundancies)
    # (tRDA_X/tWRA_X: a G_ACT after an RDA/WRA follows a PIM_ENTER that tRDA_ACT/tWRA_ACT
    # already keep as far)
    # (tWR_RD_BUS is negative for HBM2: implied by CMD_BUS)
    redundant = {"tCCD_S_WR", "tCCD_L_WR", "GWRITE_WTR", "READRES_RTW", "tRP_X", "tRDA_X",
                 "tWRA_X", "tWR_RD_BUS"}
    missing = {c.name for c in CONSTRAINTS} - covered - redundant
    assert not missing, f"no injection test for {sorted(missing)}"


def test_checker_catches_one_cycle_shift_in_a_simulated_log():
    cfg = load_config("neupims", ["memory.org.channels=1"])
    res = run_requests(cfg, *pattern_requests(cfg, "seq_read", 2000), engine="fast")
    log = res.log()
    assert check_log(log, cfg) == []
    i = next(i for i in range(1, len(log)) if log[i][5] == "RD" and log[i - 1][5] == "RD"
             and log[i][0] - log[i - 1][0] == 2)
    bad = list(log)
    bad[i] = (bad[i][0] - 1,) + tuple(bad[i][1:])
    rules = {v.rule for v in check_log(bad, cfg)}
    assert rules & {"tCCD_S", "tCCD_L"}


def test_a_read_does_not_delay_the_precharge_of_another_bank():
    """tRTP is a same-bank rule (JESD235; Ramulator 2.1, DRAMsim3): streaming reads of one
    bank must not starve the precharge of its neighbours."""
    cfg = load_config("neupims")
    log = [R(0, "ACT"), R(4, "ACT", bg=1), R(40, "RD", col=0), R(41, "PRE", bg=1),
           R(42, "RD", col=4), R(43, "PRE", ba=0, bg=2)]
    assert [v for v in check_log(log, cfg) if v.rule.startswith("tRTP")] == []


def test_a_write_does_not_delay_a_read_of_the_other_rank():
    """tWTR is a rule inside one die (a rank / stack id); the other rank's read only waits for
    the data bus (DRAMsim3 write_to_read_o, Ramulator 2's per-pseudo-channel tWTR)."""
    cfg = load_config("neupims")
    log = [R(0, "ACT"), R(4, "ACT", ra=1), R(20, "WR", col=0), R(21, "RD", ra=1, col=0)]
    assert check_log(log, cfg) == []


def test_the_checker_reports_a_configuration_that_breaks_a_timing_rule():
    """The configuration's cross-field rules (archsim.config.TIMING_RULES) are the checker's
    too: a configuration built without validation is reported, not silently checked."""
    cfg = load_config("neupims")
    bad_t = cfg.memory.timing.model_construct(**dict(cfg.memory.timing.__dict__, tRAS=5))
    bad = cfg.model_copy(update={"memory": cfg.memory.model_copy(update={"timing": bad_t})})
    viol = check_log([R(0, "ACT"), R(14, "RD", col=0)], bad)
    assert viol and viol[0].rule == "CONFIG" and "tRAS" in viol[0].detail
