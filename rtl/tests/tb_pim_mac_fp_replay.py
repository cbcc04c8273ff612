"""Replay of a functional run's COMP steps through rtl/pim_mac_fp.v, bit for bit.

The trace (``job().stimulus``, made by :func:`archsim.cosim.comp_trace`) holds every COMP step
one channel's banks computed in the golden validation of a tiny model in functional mode:
each step's row burst and global-buffer operands (storage bits), the bank's fp32 accumulator
before and after it, grouped by bank. The steps are fed to one ``pim_mac_fp`` back to back at
the COMP spacing of a PIM_GEMV (CSTEP = max(BL, tCCD_S) cycles), a dot product starting
(``in_first``) where the functional accumulator was +0.0 (after READRES). Every cycle
``out_valid``, ``acc`` and ``res`` are compared with the simulator's arithmetic
(:func:`archsim.cosim.pim_fp_mac_step`: ``archsim.functional.pim_comp_step`` and
``to_storage``, the functions a mutation perturbs), at the COMP pipeline depth FILL; and that
arithmetic must reproduce the functional run's recorded accumulator of every step, so the
RTL's ``acc`` equals the functional run's, and ``res`` its READRES rounding.
"""
from __future__ import annotations

import cocotb

from archsim import cosim
from archsim.memory import spec
from tb_common import check_parameters, job, rng_for, run_comp_stream, start_clock_and_reset

PARAMS = ["LANES", "EXP_W", "MAN_W", "FILL_CYCLES"]


@cocotb.test()
async def test_comp_steps_of_a_functional_run_match_bit_for_bit(dut):
    """Every COMP step of the trace: RTL accumulator = the model's = the functional run's."""
    name = "test_comp_steps_of_a_functional_run_match_bit_for_bit"
    tr = cosim.read_comp_trace(job().stimulus)
    dtype = job().dtype
    assert tr["header"]["dtype"] == dtype, (f"trace of {tr['header']['dtype']} for a "
                                            f"{dtype} variant")
    await start_clock_and_reset(dut, {"in_valid": 0, "in_first": 0, "bank_data": 0,
                                      "gb_data": 0})
    check_parameters(dut, PARAMS)
    p = job().parameters
    n = len(tr["first"])
    n = min(n, job().count(n))                 # --scale < 1: a prefix of the trace
    script = [(tr["bank"][i].tolist(), tr["gbuf"][i].tolist(), bool(tr["first"][i]))
              for i in range(n)]
    recorded = iter(tr["acc_out"].tolist())
    apart: list[str] = []              # steps where the model differs from the functional run

    def model_step(state, bank, gbuf, first):
        acc, res = cosim.pim_fp_mac_step(state[0], bank, gbuf, first, dtype)
        want = next(recorded)
        if acc != want and len(apart) < 5:
            apart.append(f"acc {acc:#010x} != functional run {want:#010x}")
        return acc, res

    def show(v):
        return f"({v[0]}, {v[1]:#010x}, {v[2]:#06x}) [{dtype}]"

    cstep = int(spec.latency_names(job().cfg)["CSTEP"])
    steps = await run_comp_stream(
        dut, name, rng_for(name), 0, p_valid=1.0, p_first=0.0, draw=None,
        bits=1 + p["EXP_W"] + p["MAN_W"], init=(0, 0), fields="(out_valid, acc, res)",
        show=show, spacing=cstep, script=script,
        model_step=lambda s, b, g, f: model_step(s, b, g, f),
        observe=lambda d: (int(d.out_valid.value), int(d.acc.value), int(d.res.value)))
    assert steps == len(script)
    assert not apart, (f"the simulator's arithmetic does not reproduce the functional run it "
                       f"recorded (a harness or simulator bug): {apart}")
