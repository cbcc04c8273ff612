"""The Newton command set (``pim.commands: newton``, issue 23): the compiled attention, both
memory controllers and the timing checker on a Newton machine."""
from __future__ import annotations

from collections import Counter

import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.memory.checker import check_log
from archsim.memory.kernel import KernelMemory
from archsim.memory.system import MemorySystem
from archsim.memport import PimOpKind, PimRequest
from mapping.compiler import compile_layer
from workloads import Batch, Request, get_model

NEUPIMS_ONLY = {"PIM_HEADER", "PIM_GEMV", "PIM_PRECHARGE", "PIM_PRE"}


def _counts(system: str) -> Counter:
    batch = Batch(tuple(Request(i, None, None, n) for i, n in enumerate([3, 40, 130])))
    cp = compile_layer(get_model("tiny-gpt"), batch, load_config(system))
    return Counter(ins.mnemonic for s, v in cp.program.streams.items() if s.startswith("pim")
                   for ins in v)


def test_newton_attention_is_g_act_comps_readres_and_a_precharge_per_row_group():
    newton, fused = _counts("npu-pim-blocked"), _counts("npu-pim-blocked-fused")
    assert newton["PIM_GEMV"] == newton["PIM_HEADER"] == 0
    assert fused["PIM_HEADER"] > 0
    # one COMP + READRES for every fused PIM_GEMV, the same row groups and row closes
    assert newton["COMP"] == newton["READRES"] == fused["PIM_GEMV"] > 0
    assert newton["G_ACT"] == fused["G_ACT"] == newton["PIM_PRECHARGE"] == fused["PIM_HEADER"]
    assert newton["GWRITE"] == fused["GWRITE"]


def _pim(rid, kind, t, **kw):
    return PimRequest(rid, 0, kind, t, **kw)


@pytest.mark.parametrize("engine", ["exact", "exact-py", "fast"])
def test_newton_controller_logs_comps_readres_and_prea_and_rejects_neupims_commands(engine):
    cfg = load_config("npu-pim-blocked")
    mem = KernelMemory(cfg) if engine == "fast" else MemorySystem(cfg, engine=engine)
    seq = [_pim(1, PimOpKind.GWRITE, 0), _pim(2, PimOpKind.G_ACT, 0, row=5),
           _pim(3, PimOpKind.COMP, 0, n_comps=4), _pim(4, PimOpKind.READRES, 0),
           _pim(5, PimOpKind.PRECHARGE, 0), _pim(6, PimOpKind.G_ACT, 0, row=6),
           _pim(7, PimOpKind.COMP, 0, n_comps=2), _pim(8, PimOpKind.READRES, 0),
           _pim(9, PimOpKind.PRECHARGE, 0)]
    for r in seq:
        mem.submit_pim(r)
    mem.run_to_idle(0) if engine == "fast" else mem.run_to_idle()
    log = mem.command_log()
    names = [r.command for r in log if r.command not in ("PIM_ENTER", "PIM_EXIT", "REF")]
    assert names == (["GWRITE"] + ["G_ACT"] * cfg.memory.org.bank_groups * cfg.memory.org.ranks
                     + ["COMP"] * 4 + ["READRES", "PREA"]
                     + ["G_ACT"] * cfg.memory.org.bank_groups * cfg.memory.org.ranks
                     + ["COMP"] * 2 + ["READRES", "PREA"])
    assert check_log(log, cfg) == []
    assert mem.stats()["commands"].get("PREA") == 2
    for kind in (PimOpKind.GEMV, PimOpKind.HEADER):
        with pytest.raises(SimulationError, match="pim.commands: newton"):
            mem.submit_pim(_pim(20, kind, 10 ** 6, n_comps=2))


def test_checker_reads_prea_only_on_a_newton_machine():
    newton, fused = load_config("npu-pim-blocked"), load_config("npu-pim-blocked-fused")
    log = [(0, 0, -1, -1, -1, "PIM_ENTER", -1, -1), (100, 0, -1, -1, -1, "PREA", -1, -1)]
    assert check_log(log, newton) == []
    assert [v.rule for v in check_log(log, fused)] == ["UNKNOWN"]
    gemv = [(0, 0, -1, -1, -1, "PIM_ENTER", -1, -1), (100, 0, -1, -1, -1, "PIM_PRE", -1, -1)]
    assert check_log(gemv, fused) == []
    assert [v.rule for v in check_log(gemv, newton)] == ["UNKNOWN"]
