"""The fast (numba) path gives the exact path's command log, cycle for cycle."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from archsim.config import load_config
from archsim.memory.checker import check_log
from archsim.memory.runner import run_requests


@pytest.mark.parametrize("seed,sets", [
    (0, []),
    (1, ["memory.controller.queue_size_per_bank=4", "memory.controller.command_queue_size=8"]),
    (2, ["memory.refresh.enabled=false"]),
    (3, ["memory.controller.address_mapping=rorabgbacoch"]),
    (4, ["memory.timing.tFAW=40", "memory.timing.tRC=60"]),
])
def test_fast_and_exact_paths_give_identical_logs_on_random_traces(seed, sets):
    cfg = load_config("neupims", ["memory.org.channels=2", *sets])
    rng = np.random.default_rng(seed)
    n = 1500
    cap = cfg.memory.org.capacity_bytes
    # mix of locality: half sequential runs, half random, some multi-burst requests
    seq = (rng.integers(0, cap // 4096, n) * 4096 + (np.arange(n) % 64) * 64)
    rnd = rng.integers(0, cap // 64, n) * 64
    addrs = np.where(rng.random(n) < 0.5, seq, rnd) % (cap - 256)
    sizes = rng.choice([32, 64, 128, 256], n)
    w = rng.random(n) < 0.35
    arr = np.sort(rng.integers(0, 12000, n))
    a = run_requests(cfg, addrs, sizes, w, arr, engine="exact")
    b = run_requests(cfg, addrs, sizes, w, arr, engine="fast")
    assert a.log() == b.log()
    assert (a.latencies == b.latencies).all()
    assert a.stats["energy_pj"] == pytest.approx(b.stats["energy_pj"])
    assert check_log(b.log(), cfg) == []


def test_latencies_past_the_kernels_histogram_give_the_exact_paths_statistics():
    """Requests queued long enough that their latencies pass the kernel's histogram bins
    (``LAT_BINS`` cycles) are listed after it: mean and p99 still equal the exact path's."""
    from archsim.memory.kernel.layout import LAT_BINS

    cfg = load_config("neupims", ["memory.org.channels=1"])
    n = 900
    step = cfg.memory.org.capacity_bytes // 1024         # a new row each time
    addrs = (np.arange(n) % 512) * step
    a = run_requests(cfg, addrs, np.full(n, 64), np.zeros(n, bool), np.zeros(n, np.int64),
                     engine="exact")
    b = run_requests(cfg, addrs, np.full(n, 64), np.zeros(n, bool), np.zeros(n, np.int64),
                     engine="fast")
    assert a.latencies.min() < LAT_BINS < a.latencies.max()      # both parts used
    assert (a.latencies == b.latencies).all()
    for k in ("requests", "latency_avg_cycles", "latency_p99_cycles"):
        assert a.stats[k] == b.stats[k], k


def test_the_completion_queue_pops_in_cycle_then_request_id_order_as_it_wraps_and_grows():
    """The completion ring (``issue._cq_push`` / ``_cq_pop``) pops exactly the order of a heap
    on (cycle, request id), ties in cycle included, while its head wraps around its slots and
    when ``KernelMemory._room`` grows it (unrolled into a bigger power of two) mid-wrap."""
    import heapq

    from archsim.memory.kernel import KernelMemory
    from archsim.memory.kernel.issue import _cq_pop, _cq_push
    from archsim.memory.kernel.layout import G_CQH, G_NCQ, G_OUTM

    mem = KernelMemory(load_config("neupims", ["memory.org.channels=2"]), keep_log=False)
    cap0 = mem.CQ.shape[0]
    rng = np.random.default_rng(0)
    ref, got, heap = [], [], []
    k = 0
    wrapped_at_growth = False
    for now in range(4000):
        many = 1500 <= now < 2500                  # the queue fills past its first capacity
        for _ in range(int(rng.integers(0, 40 if many else 6))):
            t = now + int(rng.integers(0, 100))
            rid = (k * 2654435761) % (1 << 32)       # unique, not in push order
            k += 1
            row = (t, rid, int(rng.integers(0, 500)), int(rng.integers(0, 3)))
            heapq.heappush(heap, row)
            mem.GL[G_OUTM] = mem.GL[G_NCQ] + 1
            if mem.CQ.shape[0] < mem.GL[G_OUTM] + 16:
                wrapped_at_growth |= mem.GL[G_CQH] + mem.GL[G_NCQ] > mem.CQ.shape[0]
            mem._room()
            _cq_push(mem.CQ, mem.GL, *row)
        while heap and heap[0][0] <= now:
            ref.append(heapq.heappop(heap))
            got.append(tuple(int(x) for x in _cq_pop(mem.CQ, mem.GL)))
    while heap:
        ref.append(heapq.heappop(heap))
        got.append(tuple(int(x) for x in _cq_pop(mem.CQ, mem.GL)))
    assert mem.GL[G_NCQ] == 0 and mem.CQ.shape[0] > cap0 and wrapped_at_growth
    assert got == ref


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 4)), max_size=12),
       st.integers(1, 8), st.integers(1, 60), st.integers(1, 4), st.integers(0, 400))
def test_window_bound_is_the_walk_of_timing_node(gaps, n_max, span, w, e):
    """The kernel's activation window as a bound (``max(e, _window_bound)``) is TimingNode's
    walk over the window from e, for any history of cycles and weights."""
    from collections import deque, namedtuple

    from archsim.memory.bank import TimingNode
    from archsim.memory.kernel import layout as L
    from archsim.memory.kernel.timing import _window_bound

    t, hist = 0, []
    for gap, wi in gaps[-L.WCAP:]:
        t += gap
        hist.append((t, min(wi, n_max)))
    node = TimingNode.__new__(TimingNode)
    node.next = [e] * L.NCMD
    node.wins = [("tFAW", None, n_max, span, {L.ACT: w})]
    node.hist = [deque(hist)]
    S = namedtuple("S", "RS WT WW PA")(
        RS=np.array([[[0, len(hist), 0, 0]]]), WT=np.zeros((1, 1, L.WCAP), np.int64),
        WW=np.zeros((1, 1, L.WCAP), np.int64), PA=np.zeros(L.NPA, np.int64))
    S.PA[L.A_WN], S.PA[L.A_WSPAN] = n_max, span
    for j, (ti, wi) in enumerate(hist):
        S.WT[0, 0, j], S.WW[0, 0, j] = ti, wi
    assert max(e, _window_bound.py_func(S, 0, 0, w)) == node.earliest(L.ACT)
