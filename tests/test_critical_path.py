"""The critical path of a simulated window (archsim/system/critical.py): a hand-made chain, the
path's coverage of the window, and the all-reduce's share against switching it off."""
from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.system import simulate_iteration
from archsim.system.critical import LABELS, critical_path, path_shares, path_totals
from workloads import default_batch, get_model


class _Ins:
    """A stand-in for an ISA instruction: a mnemonic and its operands."""

    def __init__(self, mnemonic: str, **ops) -> None:
        self.mnemonic = mnemonic
        self.ops = ops

    def __getitem__(self, k):
        return self.ops[k]


def _chain():
    """sa0: a tile [0, 30), then SIGNAL 1 (fires at 30); link: WAIT 1, ALL_REDUCE [30, 80),
    SIGNAL 2; vu0: WAIT 2, an add [80, 100); vu1: an unrelated add [0, 90)."""
    prog = {"sa0": [_Ins("SA_MATMUL"), _Ins("SIGNAL", sem=1)],
            "link": [_Ins("WAIT", sem=1), _Ins("ALL_REDUCE"), _Ins("SIGNAL", sem=2)],
            "vu0": [_Ins("WAIT", sem=2), _Ins("VU_ADD")],
            "vu1": [_Ins("VU_ADD")]}
    times = {"sa0": ([0, -1], [30, -1]), "link": ([-1, 30, -1], [-1, 80, -1]),
             "vu0": ([-1, 80], [-1, 100]), "vu1": ([0], [90])}
    sync = {"sa0": ([-1, 0], [-1, 30]), "link": ([0, -1, 80], [30, -1, 80]),
            "vu0": ([0, -1], [80, -1]), "vu1": ([-1], [-1])}
    return prog, times, sync


def test_a_hand_made_chain_follows_the_semaphores_not_the_busy_unit():
    segs = critical_path(*_chain())
    assert segs == [(0.0, 30.0, "arrays"), (30.0, 80.0, "allreduce"), (80.0, 100.0, "vector")]
    assert path_totals(segs) == {"arrays": 30.0, "allreduce": 50.0, "vector": 20.0}
    assert path_shares(segs, [("x", 0, 50), ("y", 50, 100)]) == {
        "x": {"arrays": 30.0, "allreduce": 20.0}, "y": {"allreduce": 30.0, "vector": 20.0}}


def test_a_blocked_wait_with_no_signal_is_reported_as_a_simulator_bug():
    prog, times, sync = _chain()
    sync["sa0"] = ([-1, -1], [-1, -1])          # the SIGNAL never fired
    with pytest.raises(ValueError, match="simulator bug"):
        critical_path(prog, times, sync)


def test_queueing_after_the_previous_instruction_counts_for_the_units_resource():
    """dma0: transfer [0, 10), then one that could only start at 25 (slots): the gap is dma."""
    prog = {"dma0": [_Ins("DMA_LOAD"), _Ins("DMA_LOAD")]}
    segs = critical_path(prog, {"dma0": ([0, 25], [10, 40])}, {})
    assert path_totals(segs) == {"dma": 40.0}


def _run(sets):
    m = get_model("tiny-gpt")
    b = default_batch(m, 64, "sharegpt", seed=0, n_channels=32)
    return simulate_iteration(load_config("neupims", sets), m, b, with_events=False)


@pytest.mark.parametrize("subs", [1, 2])
def test_the_path_covers_the_window_and_names_a_bound_per_stage(subs):
    r = _run(["system.tensor_parallel=2", f"system.sub_batches={subs}"])
    tot = r.extra["critical_path_cycles"]
    assert set(tot) <= set(LABELS)
    assert sum(tot.values()) == pytest.approx(r.extra["window_cycles"])
    for st in r.extra["stage_resources"].values():
        if "critical" in st:
            assert st["bound"] == max(st["critical"], key=st["critical"].get)
            assert sum(st["critical"].values()) <= 1 + 1e-9


def test_switching_the_all_reduce_off_saves_exactly_its_critical_path_share():
    """tiny-gpt, TP2, one sub-batch (the all-reduce is on the chain of every layer), refresh
    off (a refresh falls at fixed cycles, so shifting work by the all-reduce's time would move
    it against other commands): the window shrinks by exactly the all-reduce's cycles on the
    critical path."""
    sets = ["system.tensor_parallel=2", "system.sub_batches=1", "memory.refresh.enabled=false"]
    on = _run(sets)
    off = _run(sets + ["system.interconnect.allreduce=false"])
    share = on.extra["critical_path_cycles"]["allreduce"]
    assert share > 0
    assert on.extra["stage_resources"]["proj_ffn"]["bound"] == "allreduce"
    saved = on.extra["window_cycles"] - off.extra["window_cycles"]
    assert saved == pytest.approx(share, abs=1e-6)
    assert "allreduce" not in off.extra["critical_path_cycles"]


def test_the_operands_from_the_tables_pass_give_the_path_of_the_instructions():
    """A compiled run hands critical_path each instruction's mnemonic and semaphore from the
    tables' pass (stream_operands); read from the instructions instead, the path is the same."""
    from archsim.system import run_window

    m = get_model("tiny-gpt")
    cfg = load_config("neupims", ["system.tensor_parallel=2"])
    win = run_window(cfg, m, default_batch(m, 32, "sharegpt", seed=1, n_channels=32), [0, 1],
                     fast_forward=True)
    assert win.operands is not None
    for name, (mn, sems) in win.operands.items():
        ins = win.program.streams[name]
        assert list(mn) == [i.mnemonic for i in ins]
        assert list(sems) == [i["sem"] if i.mnemonic in ("WAIT", "SIGNAL") else -1 for i in ins]
    segs = critical_path(win.program.streams, win.times, win.sync, win.operands)
    assert segs and segs == critical_path(win.program.streams, win.times, win.sync)
