"""The executor's observer hook: every instruction that does work, and every WAIT and SIGNAL,
is reported once, with start <= end, and observing changes nothing simulated (statistics,
command log)."""
from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.memory.kernel import KernelMemory
from archsim.npu.executor import Executor
from archsim.npu.loader import load_program
from archsim.npu.observe import SYNC_UNIT, InstructionTimes
from archsim.npu.simple_memory import SimpleMemory
from mapping.compiler import compile_layers
from workloads import default_batch, get_model

_NO_WORK = {"WAIT", "SIGNAL", "NOP", "END"}
_SYNC = {"WAIT", "SIGNAL"}


class _Calls:
    """Observer keeping every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, int, int]] = []

    def __call__(self, stream, index, unit, start, end) -> None:
        self.calls.append((stream, index, unit, start, end))


def _program(preset: str):
    cfg = load_config(preset)
    model = get_model("tiny-gpt")
    cp = compile_layers(model, default_batch(model, 8, "sharegpt", seed=3), cfg, "decode", [0])
    return cfg, load_program(cp.program, cfg)


@pytest.mark.parametrize("preset,memory,ff", [
    ("neupims", "kernel", True), ("neupims", "kernel", False),
    ("npu-pim-blocked", "kernel", True), ("neupims", "simple", False)])
def test_observer_sees_every_instruction_once_and_changes_nothing(preset, memory, ff):
    cfg, lp = _program(preset)

    def mem():
        return KernelMemory(cfg, keep_log=True) if memory == "kernel" \
            else SimpleMemory.from_config(cfg)

    m0, m1 = mem(), mem()
    plain = Executor(lp, cfg, m0, fast_forward=ff).run()
    obs = _Calls()
    ex = Executor(lp, cfg, m1, fast_forward=ff, observer=obs)
    seen = ex.run()
    assert repr(seen) == repr(plain)
    if memory == "kernel":
        assert m1.stats() == m0.stats()
        assert np.array_equal(m1.command_log_array(), m0.command_log_array())
    keys = [(s, i) for s, i, _, _, _ in obs.calls]
    assert len(keys) == len(set(keys)), "an instruction was reported twice"
    mnem = {(ls.name, op.index): op.mnemonic for ls in lp.streams for op in ls.ops}
    want = {k for k, m in mnem.items() if m not in _NO_WORK or m in _SYNC}
    assert set(keys) == want
    assert all(0 <= st <= en <= seen.cycles for _, _, _, st, en in obs.calls)
    assert all((u == SYNC_UNIT) == (mnem[(s, i)] in _SYNC) for s, i, u, _, _ in obs.calls)
    # a WAIT passes when its semaphore has the count: some SIGNAL of it fired by then
    fired: dict[int, list[int]] = {}
    ops = {(ls.name, op.index): op.ops for ls in lp.streams for op in ls.ops}
    for s, i, u, _, en in obs.calls:
        if mnem[(s, i)] == "SIGNAL":
            fired.setdefault(ops[(s, i)]["sem"], []).append(en)
    for s, i, u, st, en in obs.calls:
        if mnem[(s, i)] == "WAIT" and en > st:
            assert en in fired[ops[(s, i)]["sem"]], "a blocked WAIT passed without a SIGNAL"
    # units: the array of an SA instruction, the channel of a PIM command
    for s, i, unit, _, _ in obs.calls:
        if unit == SYNC_UNIT:
            continue
        if s.startswith("pim"):
            assert unit == lp.streams[[x.name for x in lp.streams].index(s)].ops[i].ops["channel"]
        elif s.startswith("sa"):
            assert 0 <= unit < cfg.npu.n_arrays


def test_instruction_times_keeps_the_observed_times():
    cfg, lp = _program("neupims")
    obs, rec = _Calls(), InstructionTimes(lp)
    Executor(lp, cfg, KernelMemory(cfg), fast_forward=True, observer=obs).run()
    Executor(lp, cfg, KernelMemory(cfg), fast_forward=True, observer=rec).run()
    for s, i, u, st, en in obs.calls:
        kept = rec.sync if u == SYNC_UNIT else rec.times
        assert kept[s][0][i] == st and kept[s][1][i] == en
    assert sum(x >= 0 for d in (rec.times, rec.sync) for _, en in d.values()
               for x in en) == len(obs.calls)
