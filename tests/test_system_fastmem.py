"""The JIT twin of the memory system (archsim.system.fastmem) against the exact MemorySystem.

Both are driven by the same random call sequence (reads, writes, PIM GEMV sequences, advances to
event cycles) and must answer every call identically: can_accept, next_event_cycle, the
completions of every advance_to, the command log and the statistics.
"""
from __future__ import annotations

import random

import pytest

from archsim.config import load_config
from archsim.memory.checker import check_log
from archsim.memory.system import MemorySystem
from archsim.memport import MemRequest, PimOpKind, PimRequest
from archsim.memory.kernel import KernelMemory as FastMemorySystem


def _drive(cfg, seed: int, steps: int = 400, pim: bool = True):
    rng = random.Random(seed)
    exact, fast = MemorySystem(cfg), FastMemorySystem(cfg)
    org = cfg.memory.org
    cap = org.capacity_bytes
    C = org.channels
    rid = 0
    # per channel: list of pending PIM commands (issued one at a time, as the executor does)
    pim_todo = {c: [] for c in range(C)}
    pim_wait = {}
    now = 0
    trace = []
    hot_rows = [rng.randrange(org.rows) for _ in range(4)]
    for step in range(steps):
        # memory requests
        for _ in range(rng.randrange(0, 12)):
            if rng.random() < 0.7:
                row = rng.choice(hot_rows)
                addr = (row * (cap // org.rows) + rng.randrange(cap // org.rows)) // 64 * 64
            else:
                addr = rng.randrange(cap // 64) * 64
            size = rng.choice((64, 64, 64, 128, 256))
            if addr + size > cap:
                continue
            a1, a2 = exact.can_accept(addr), fast.can_accept(addr)
            assert a1 == a2, f"step {step}: can_accept({addr:#x}) {a1} != {a2}"
            if not a1:
                continue
            rid += 1
            r = MemRequest(rid, addr, size, rng.random() < 0.3, now + rng.randrange(3))
            exact.submit(r)
            fast.submit(MemRequest(rid, addr, size, r.is_write, r.arrival_cycle))
        # a batch of single-burst requests through submit_many (as the executor's DMA does)
        if rng.random() < 0.3:
            k = rng.randrange(1, 40)
            base = rng.randrange(cap // 4096) * 4096
            addrs = [base + 64 * j for j in range(k)]
            ids = list(range(rid + 1, rid + 1 + k))
            wr = rng.random() < 0.3
            arr = now + rng.randrange(2)
            n1 = exact.submit_many(addrs, wr, arr, ids)
            n2 = fast.submit_many(addrs, wr, arr, ids)
            assert n1 == n2, f"step {step}: submit_many queued {n1} != {n2}"
            rid += k
        # PIM sequences
        if pim and rng.random() < 0.15:
            c = rng.randrange(C)
            if not pim_todo[c] and c not in pim_wait:
                n = rng.randrange(1, 4)
                seq = [(PimOpKind.HEADER, 0, n, 0)]
                for _ in range(n):
                    seq.append((PimOpKind.GWRITE, 0, 0, 0))
                    seq.append((PimOpKind.G_ACT, rng.randrange(org.rows), 0,
                                rng.choice((0, 0, 1, 3, 5))))
                    if rng.random() < 0.5:
                        seq.append((PimOpKind.GEMV, 0, rng.randrange(1, 17), 0))
                    else:
                        seq.append((PimOpKind.COMP, 0, rng.randrange(1, 5), 0))
                        seq.append((PimOpKind.READRES, 0, 0, 0))
                    seq.append((PimOpKind.PRECHARGE, 0, 0, 0))
                pim_todo[c] = seq
        for c in range(C):
            if pim_todo[c] and c not in pim_wait:
                kind, row, n, mask = pim_todo[c].pop(0)
                rid += 1
                for m in (exact, fast):
                    m.submit_pim(PimRequest(rid, c, kind, now, row=row, n_comps=n,
                                            bank_group_mask=mask))
                pim_wait[c] = rid
        e1, e2 = exact.next_event_cycle(), fast.next_event_cycle()
        assert e1 == e2, f"step {step}: next_event_cycle {e1} != {e2}"
        if e1 is None:
            now += rng.randrange(1, 50)
        else:
            now = max(now + 1, e1 if rng.random() < 0.8 else e1 + rng.randrange(1, 40))
        c1, c2 = exact.advance_to(now), fast.advance_to(now)
        assert c1 == c2, f"step {step}: completions differ at cycle {now}"
        trace.append(len(c1))
        done = {x.req_id for x in c1}
        for c, r in list(pim_wait.items()):
            if r in done:
                del pim_wait[c]
    return exact, fast


@pytest.mark.parametrize("mode", ["dual", "single"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_memory_matches_exact_controller_call_for_call(mode, seed):
    cfg = load_config("neupims", [f"pim.row_buffer_mode={mode}", "memory.org.channels=4",
                                  "memory.timing.tREFI=900", "memory.timing.tRFC=120"])
    exact, fast = _drive(cfg, seed)
    l1 = [tuple(r) for r in exact.command_log()]
    l2 = [tuple(r) for r in fast.command_log()]
    assert len(l1) > 500
    assert l1 == l2
    s1, s2 = exact.stats(), fast.stats()
    assert s1 == s2
    assert check_log(l2, cfg) == []


def test_fast_memory_matches_exact_on_memory_only_traffic():
    cfg = load_config("neupims", ["memory.org.channels=2"])
    exact, fast = _drive(cfg, 7, steps=600, pim=False)
    assert [tuple(r) for r in exact.command_log()] == [tuple(r) for r in fast.command_log()]
    assert exact.stats() == fast.stats()


@pytest.mark.parametrize("preset", ["neupims", "npu-pim-blocked", "npu-only"])
def test_dma_fast_forward_leaves_the_executor_timing_unchanged(preset):
    """The executor's compiled loop on the fast memory = the plain executor."""
    from archsim.npu.executor import Executor
    from archsim.npu.loader import load_program
    from mapping.compiler import compile_layers
    from workloads import default_batch, get_model

    cfg = load_config(preset)
    model = get_model("tiny-gpt")
    cp = compile_layers(model, default_batch(model, 16, "sharegpt", seed=0), cfg, "decode",
                        [0, 1])
    lp = load_program(cp.program, cfg)
    plain = Executor(lp, cfg, FastMemorySystem(cfg)).run()
    ex = Executor(lp, cfg, FastMemorySystem(cfg), fast_forward=True)
    ff = ex.run()
    assert ex.ff.steps > 0
    assert ff.cycles == plain.cycles
    assert ff.dma == plain.dma
    assert {k: v.finish_cycle for k, v in ff.streams.items()} == \
        {k: v.finish_cycle for k, v in plain.streams.items()}
    assert ff.stall_cycles("memory") == plain.stall_cycles("memory")
    assert [p.busy_cycles for p in ff.pim.values()] == [p.busy_cycles for p in plain.pim.values()]


@pytest.mark.parametrize("sets", [[], ["memory.controller.write_policy=mixed"],
                                  ["memory.controller.scheduler=fr_fcfs_cap",
                                   "memory.controller.row_hit_cap=2",
                                   "pim.row_buffer_mode=single"]])
def test_the_admission_only_redecision_is_taken_and_changes_nothing(monkeypatch, sets):
    """The kernel's admission-only re-decision (scheduler._decide: the last best candidate and
    only the banks an admission touched) answers every call as the reference does, and as the
    kernel with it switched off; on this traffic it makes part of the decisions."""
    from archsim.memory.kernel.layout import A_FAST

    cfg = load_config("neupims", ["memory.org.channels=4", "memory.timing.tREFI=900",
                                  "memory.timing.tRFC=120", *sets])
    _, on = _drive(cfg, 4)
    decisions, short = on.decisions()
    assert 0 < short < decisions
    init = FastMemorySystem.__init__

    def without(self, *a, **k):
        init(self, *a, **k)
        self.PA[A_FAST] = 0

    monkeypatch.setattr(FastMemorySystem, "__init__", without)
    _, off = _drive(cfg, 4)
    assert off.decisions()[1] == 0
    assert [tuple(r) for r in on.command_log()] == [tuple(r) for r in off.command_log()]
    assert on.stats() == off.stats()
