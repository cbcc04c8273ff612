"""Co-simulation of rtl/bank_dual_rowbuf.v against archsim.memory.bank.BankTimingModel.

The model is the simulator's own per-bank timing object, built from the same configuration as
the Verilog parameters (dual or single row buffer from ``pim.row_buffer_mode``). Every cycle a
seeded random command (and row) is offered to both; the RTL's ``can_issue`` vector (all seven
commands), ``accept`` and the row-buffer state must equal the model's ``can_issue`` answers and
state; an accepted command is then issued to the model at the same cycle.
"""
from __future__ import annotations

import cocotb

from archsim import cosim
from tb_common import (check_parameters, end_cycle, job, next_cycle_drive, rng_for, settle,
                       start_clock_and_reset)

CMDS = cosim.BANK_COMMANDS          # index = RTL command code
RTL_NAMES = cosim.BANK_RTL_NAMES
PARAMS = ["DUAL", "ROW_W", "T_RCDRD", "T_RAS", "T_RP", "T_FAW", "FAW_ACTS", "GACT_WEIGHT"]


async def _drive(dut, name, rng, n_cycles, weights, p_legal=0.6, n_rows=4):
    """Offer ``n_cycles`` random commands; compare every decision. Returns commands issued.

    ``weights``: relative frequency of each command code when drawing a random command;
    with probability ``p_legal`` the command is drawn among those the model allows now.
    """
    model = cosim.bank_model(job().cfg)
    row_w = job().parameters["ROW_W"]
    rows = [rng.getrandbits(row_w) for _ in range(n_rows)]
    codes = [c for c in range(1, 8) if weights[c] > 0]
    issued = 0
    history: list[str] = []
    for cycle in range(n_cycles):
        open_row = model.open_row
        # the row the RD/WR (and the activations) of this cycle carry
        if open_row is not None and rng.random() < 0.85:
            row = open_row
        else:
            row = rng.choice(rows)
        allowed = [c for c in codes if model.can_issue(CMDS[c], cycle, row)]
        if rng.random() < 0.15:
            code = 0
        elif allowed and rng.random() < p_legal:
            code = rng.choices(allowed, [weights[c] for c in allowed])[0]
        else:
            code = rng.choices(codes, [weights[c] for c in codes])[0]
        await next_cycle_drive()
        dut.cmd.value = code
        dut.row.value = row
        await settle()
        want_vec = [int(c != 0 and model.can_issue(CMDS[c], cycle, row)) for c in range(8)]
        vec = int(dut.can_issue.value)
        got_vec = [(vec >> c) & 1 for c in range(8)]
        state = (int(dut.mem_open.value), int(dut.pim_open.value))
        want_state = (int(model.open_row is not None), int(model.pim_row is not None))
        ctx = (f"{name}: cycle {cycle}, offered {RTL_NAMES[code]} row {row}; model open row "
               f"{model.open_row}, PIM row {model.pim_row}; last commands {history[-6:]}")
        assert state == want_state, f"{ctx}: (mem_open, pim_open) {state} != model {want_state}"
        if model.open_row is not None:
            assert int(dut.mem_row.value) == model.open_row, f"{ctx}: mem_row differs"
        if model.pim_row is not None:
            assert int(dut.pim_row.value) == model.pim_row, f"{ctx}: pim_row differs"
        diff = [RTL_NAMES[c] + ("=rtl-yes" if got_vec[c] else "=rtl-no")
                for c in range(8) if got_vec[c] != want_vec[c]]
        assert not diff, f"{ctx}: can_issue disagrees with the bank model: {diff}"
        assert int(dut.accept.value) == want_vec[code], f"{ctx}: accept differs"
        if code and want_vec[code]:
            model.issue(CMDS[code], cycle, row)
            issued += 1
            history.append(f"{cycle}:{RTL_NAMES[code]}")
        await end_cycle()
    job().record(name, stimuli=n_cycles, cycles=n_cycles, issued=issued)
    return issued


async def _setup(dut):
    await start_clock_and_reset(dut, {"cmd": 0, "row": 0})
    check_parameters(dut, PARAMS)


@cocotb.test()
async def test_random_mixed_commands_accepted_like_bank_model(dut):
    """Mixed memory and PIM traffic: every accept/reject of all seven commands agrees."""
    name = "test_random_mixed_commands_accepted_like_bank_model"
    await _setup(dut)
    await _drive(dut, name, rng_for(name), job().count(3000), [0, 3, 4, 4, 2, 3, 4, 2])


@cocotb.test()
async def test_memory_row_buffer_timing_matches_bank_model(dut):
    """ACT/RD/WR/PRE only: tRCDRD/WR, tRAS, tRP, tRC, tCCD, tWTR, tRTW, tRTP, tWR."""
    name = "test_memory_row_buffer_timing_matches_bank_model"
    await _setup(dut)
    await _drive(dut, name, rng_for(name), job().count(2000), [0, 2, 5, 5, 2, 0, 0, 0])


@cocotb.test()
async def test_pim_row_buffer_timing_matches_bank_model(dut):
    """PIM_ACT/COMP/PIM_PRE only: tRCDRD, tRAS, tRP, tRC, COMP step, COMP -> PIM_PRE."""
    name = "test_pim_row_buffer_timing_matches_bank_model"
    await _setup(dut)
    await _drive(dut, name, rng_for(name), job().count(2000), [0, 0, 0, 0, 0, 2, 6, 2])


@cocotb.test()
async def test_activation_window_and_row_conflicts_match_bank_model(dut):
    """Activation-heavy traffic of both kinds: tRRD, tFAW (PIM_ACT weighs a bank group) and,
    with one row buffer, memory/PIM row conflicts."""
    name = "test_activation_window_and_row_conflicts_match_bank_model"
    await _setup(dut)
    await _drive(dut, name, rng_for(name), job().count(2000), [0, 5, 1, 1, 5, 5, 1, 5],
                 p_legal=0.8)
