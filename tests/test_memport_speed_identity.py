"""The optimised MemoryPort path of MemorySystem (engine "exact") against the unoptimised
reference path (engine "exact-py"): the same random call sequence (reads, writes, PIM GEMV
sequences, batch submissions, advances to event cycles and past them, idle gaps) must get the
same answer to every call, the same command log, completions and statistics (energy
included), and the log must pass the independent timing checker."""
from __future__ import annotations

import random

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.memory.checker import check_log
from archsim.memory.system import MemorySystem
from archsim.memport import MemRequest, PimOpKind, PimRequest


def _pim_sequence(rng, org):
    n = rng.randrange(1, 4)
    seq = [(PimOpKind.HEADER, 0, n, 0)]
    for _ in range(n):
        seq.append((PimOpKind.GWRITE, 0, 0, 0))
        seq.append((PimOpKind.G_ACT, rng.randrange(org.rows), 0, rng.choice((0, 0, 1, 3, 5))))
        if rng.random() < 0.5:
            seq.append((PimOpKind.GEMV, 0, rng.randrange(1, 17), 0))
        else:
            seq.append((PimOpKind.COMP, 0, rng.randrange(1, 5), 0))
            seq.append((PimOpKind.READRES, 0, 0, 0))
        seq.append((PimOpKind.PRECHARGE, 0, 0, 0))
    return seq


def _drive(cfg, seed: int, steps: int = 400, pim: bool = True, batch: bool = False):
    """Drive the reference and the optimised memory system with one random call sequence,
    asserting equal answers call for call; returns both systems."""
    rng = random.Random(seed)
    ref, new = MemorySystem(cfg, engine="exact-py"), MemorySystem(cfg)
    org = cfg.memory.org
    cap = org.capacity_bytes
    C = org.channels
    rid = 0
    pim_todo = {c: [] for c in range(C)}
    pim_wait = {}
    now = 0
    hot_rows = [rng.randrange(org.rows) for _ in range(4)]
    for step in range(steps):
        reqs = []
        for _ in range(rng.randrange(0, 14)):
            if rng.random() < 0.7:
                row = rng.choice(hot_rows)
                addr = (row * (cap // org.rows) + rng.randrange(cap // org.rows)) // 64 * 64
            else:
                addr = rng.randrange(cap // 64) * 64
            size = 64 if batch else rng.choice((64, 64, 64, 128, 256))
            rid += 1
            reqs.append(MemRequest(rid, addr, size, rng.random() < 0.3,
                                   now + 1 + rng.randrange(3)))
        if batch and reqs and rng.random() < 0.7:
            # one DMA-like batch: same direction, arrivals non-decreasing
            w = rng.random() < 0.3
            addrs = np.array([r.addr for r in reqs], dtype=np.int64)
            arr = np.array(sorted(r.arrival_cycle for r in reqs), dtype=np.int64)
            ids = np.array([r.req_id for r in reqs], dtype=np.int64)
            n_ref = 0
            for i in range(len(reqs)):
                if not ref.can_accept(int(addrs[i])):
                    break
                ref.submit(MemRequest(int(ids[i]), int(addrs[i]), 64, w, int(arr[i])))
                n_ref += 1
            n_new = new.submit_many(addrs, w, arr, ids, check=True)
            assert n_ref == n_new, f"step {step}: submit_many accepted {n_new} != {n_ref}"
        else:
            for r in reqs:
                a1, a2 = ref.can_accept(r.addr), new.can_accept(r.addr)
                assert a1 == a2, f"step {step}: can_accept({r.addr:#x}) {a1} != {a2}"
                if not a1:
                    continue
                ref.submit(r)
                new.submit(MemRequest(r.req_id, r.addr, r.size_bytes, r.is_write,
                                      r.arrival_cycle))
        if pim and rng.random() < 0.15:
            c = rng.randrange(C)
            if not pim_todo[c] and c not in pim_wait:
                pim_todo[c] = _pim_sequence(rng, org)
        for c in range(C):
            if pim_todo[c] and c not in pim_wait:
                kind, row, n, mask = pim_todo[c].pop(0)
                rid += 1
                for m in (ref, new):
                    m.submit_pim(PimRequest(rid, c, kind, now, row=row, n_comps=n,
                                            bank_group_mask=mask))
                pim_wait[c] = rid
        e1, e2 = ref.next_event_cycle(), new.next_event_cycle()
        assert e1 == e2, f"step {step}: next_event_cycle {e1} != {e2}"
        if rng.random() < 0.2:                  # query twice: the memo must not drift
            assert new.next_event_cycle() == e1
        if e1 is None or rng.random() < 0.05:
            now += rng.randrange(1, 3000)       # idle gap (refreshes run meanwhile)
        else:
            now = max(now + 1, e1 if rng.random() < 0.8 else e1 + rng.randrange(1, 40))
        c1, c2 = ref.advance_to(now), new.advance_to(now)
        assert c1 == c2, f"step {step}: completions differ at cycle {now}"
        done = {x.req_id for x in c1}
        for c, r in list(pim_wait.items()):
            if r in done:
                del pim_wait[c]
    return ref, new


def _same(cfg, ref, new, min_log: int = 500):
    l1 = [tuple(r) for r in ref.command_log()]
    l2 = [tuple(r) for r in new.command_log()]
    assert len(l1) > min_log
    assert l1 == l2
    s1, s2 = ref.stats(), new.stats()
    assert s1 == s2                                    # energy, counts, latencies
    assert ref.latencies == new.latencies
    assert check_log(l2, cfg) == []


@pytest.mark.parametrize("mode", ["dual", "single"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_optimised_port_matches_reference_call_for_call_with_pim_and_refresh(mode, seed):
    cfg = load_config("neupims", [f"pim.row_buffer_mode={mode}", "memory.org.channels=4",
                                  "memory.timing.tREFI=900", "memory.timing.tRFC=120"])
    ref, new = _drive(cfg, seed)
    _same(cfg, ref, new)


@pytest.mark.parametrize("mode", ["dual", "single"])
def test_batch_submission_matches_request_by_request_submission(mode):
    cfg = load_config("neupims", [f"pim.row_buffer_mode={mode}", "memory.org.channels=4",
                                  "memory.timing.tREFI=900", "memory.timing.tRFC=120"])
    ref, new = _drive(cfg, 11, batch=True)
    _same(cfg, ref, new)


def test_optimised_port_matches_reference_on_memory_only_traffic_default_refresh():
    cfg = load_config("neupims", ["memory.org.channels=2"])
    ref, new = _drive(cfg, 7, steps=600, pim=False)
    _same(cfg, ref, new)


def test_unknown_engine_is_a_clear_error():
    with pytest.raises(SimulationError, match="exact-py"):
        MemorySystem(load_config("neupims"), engine="warp")


class _PerRequestPort:
    """MemorySystem seen through the plain MemoryPort methods only (no submit_many)."""

    def __init__(self, mem):
        self.mem = mem
        self.submit, self.submit_pim = mem.submit, mem.submit_pim
        self.can_accept, self.next_event_cycle = mem.can_accept, mem.next_event_cycle
        self.advance_to = mem.advance_to


@pytest.mark.parametrize("overrides", [[], ["npu.freq_mhz=700"]])
def test_executor_batch_dma_gives_the_same_run_as_per_request_dma(overrides):
    from archsim.npu.executor import Executor
    from archsim.npu.gemm import build_gemm_program

    cfg = load_config("neupims", ["memory.timing.tREFI=900", "memory.timing.tRFC=120",
                                  *overrides])
    g = build_gemm_program(128, 512, 256, cfg)
    ref = MemorySystem(cfg, engine="exact-py")
    st1 = Executor(g.program, cfg, _PerRequestPort(ref)).run()
    new = MemorySystem(cfg)
    st2 = Executor(g.program, cfg, new).run()
    assert st1 == st2
    l1 = [tuple(r) for r in ref.command_log()]
    assert len(l1) > 1000
    assert l1 == [tuple(r) for r in new.command_log()]
    assert ref.stats() == new.stats()
    assert check_log(l1, cfg) == []


@pytest.mark.parametrize("size", [64, 128, 96])
def test_submit_many_of_any_size_equals_submit_loop(size):
    cfg = load_config("neupims", ["memory.org.channels=2"])
    rng = np.random.default_rng(size)
    addrs = rng.integers(0, cfg.memory.org.capacity_bytes // 256, 300) * 256
    ids = np.arange(1, 301)
    ref, new = MemorySystem(cfg, engine="exact-py"), MemorySystem(cfg)
    n_ref = 0
    for a, i in zip(addrs.tolist(), ids.tolist()):
        if not ref.can_accept(a, is_write=True):
            break
        ref.submit(MemRequest(i, a, size, True, 5))
        n_ref += 1
    assert new.submit_many(addrs, True, 5, ids, size_bytes=size) == n_ref
    assert ref.run_to_idle() == new.run_to_idle()
    assert [tuple(r) for r in ref.command_log()] == [tuple(r) for r in new.command_log()]


def test_submit_many_rejects_an_address_beyond_capacity_before_queueing_anything():
    cfg = load_config("neupims", ["memory.org.channels=2"])
    mem = MemorySystem(cfg)
    cap = cfg.memory.org.capacity_bytes
    with pytest.raises(SimulationError, match="outside the memory"):
        mem.submit_many(np.array([0, cap]), False, 0, np.array([1, 2]))
    assert not mem._trackers
