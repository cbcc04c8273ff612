"""Every controller policy (scheduler, page policy, write policy, refresh mode, PIM queue) is
honoured identically by the reference controller and the compiled kernel, passes the checker,
and changes what it says it changes."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import ConfigError
from archsim.memory.checker import check_log
from archsim.memory.runner import run_requests

SCHEDULERS = ("fr_fcfs", "fcfs", "fr_fcfs_cap")
PAGES = ("open", "closed", "closed_adaptive", "timeout")
WRITES = ("mixed", "drain")
REFRESH = ("all_bank", "rank_staggered", "per_bank")


def _sets(sched, page, write, refresh):
    out = [f"memory.controller.scheduler={sched}", f"memory.controller.page_policy={page}",
           f"memory.controller.write_policy={write}", f"memory.refresh.mode={refresh}"]
    if sched == "fr_fcfs_cap":
        out.append("memory.controller.row_hit_cap=3")
    if page == "timeout":
        out.append("memory.controller.page_timeout_cycles=20")
    if write == "drain":
        out += ["memory.controller.write_queue_size=16",
                "memory.controller.write_high_watermark=0.5",
                "memory.controller.write_low_watermark=0.25"]
    return out


def _trace(cfg, n: int, seed: int):
    """Mixed locality (runs in a few hot rows, random), a third writes, some multi-burst
    requests, bursty arrivals with idle gaps (so timeouts and refreshes matter)."""
    rng = np.random.default_rng(seed)
    cap = cfg.memory.org.capacity_bytes
    hot = rng.integers(0, cap // 4096, 6) * 4096
    addrs = np.where(rng.random(n) < 0.6, rng.choice(hot, n) + (rng.integers(0, 64, n) * 64),
                     rng.integers(0, cap // 64, n) * 64) % (cap - 256)
    sizes = rng.choice([64, 64, 64, 128, 256], n)
    w = rng.random(n) < 0.33
    gaps = np.where(rng.random(n) < 0.05, rng.integers(50, 400, n), rng.integers(0, 3, n))
    return addrs, sizes, w, np.cumsum(gaps)


COMBOS = list(itertools.product(SCHEDULERS, PAGES, WRITES, REFRESH))


@pytest.mark.parametrize("sched,page,write,refresh", COMBOS,
                         ids=["-".join(c) for c in COMBOS])
def test_every_policy_combination_gives_identical_logs_in_both_engines(sched, page, write,
                                                                       refresh):
    cfg = load_config("neupims", ["memory.org.channels=2", "memory.timing.tREFI=1900",
                                  "memory.timing.tRFC=200", "memory.timing.tRFCpb=100",
                                  *_sets(sched, page, write, refresh)])
    seed = COMBOS.index((sched, page, write, refresh))
    reqs = _trace(cfg, 700, seed)
    a = run_requests(cfg, *reqs, engine="exact")
    b = run_requests(cfg, *reqs, engine="fast")
    assert a.log() == b.log()
    assert (a.latencies == b.latencies).all()
    assert a.stats["energy_pj"] == pytest.approx(b.stats["energy_pj"])
    assert check_log(b.log(), cfg) == []


PIM_COMBOS = [("fcfs", "closed", "drain", "per_bank"),
              ("fr_fcfs_cap", "timeout", "mixed", "rank_staggered"),
              ("fr_fcfs", "closed_adaptive", "drain", "all_bank"),
              ("fr_fcfs", "timeout", "drain", "per_bank")]


@pytest.mark.parametrize("mode", ["dual", "single"])
@pytest.mark.parametrize("sched,page,write,refresh", PIM_COMBOS,
                         ids=["-".join(c) for c in PIM_COMBOS])
def test_policies_with_pim_traffic_match_call_for_call(sched, page, write, refresh, mode):
    """The MemoryPort calls of a random mix of reads, writes and PIM GEMV sequences answer
    identically on the reference and the kernel under every policy unit."""
    from test_system_fastmem import _drive

    cfg = load_config("neupims", [f"pim.row_buffer_mode={mode}", "memory.org.channels=4",
                                  "memory.timing.tREFI=900", "memory.timing.tRFC=120",
                                  "memory.timing.tRFCpb=60",
                                  *_sets(sched, page, write, refresh)])
    exact, fast = _drive(cfg, PIM_COMBOS.index((sched, page, write, refresh)) + 11)
    l1 = [tuple(r) for r in exact.command_log()]
    l2 = [tuple(r) for r in fast.command_log()]
    assert len(l1) > 500
    assert l1 == l2
    assert exact.stats() == fast.stats()
    assert check_log(l2, cfg) == []


# ---- what each policy changes (one channel, one bank; the ping-pong) ---------------
def _one_bank(cfg, rows, cols, arrivals, writes=None):
    """Requests of one burst each to bank 0 of channel 0: ``rows``/``cols`` per request."""
    from archsim.memory.addrmap import AddressMapping

    n = len(rows)
    f = np.zeros((n, 6), np.int64)
    f[:, 4] = rows
    f[:, 5] = np.asarray(cols) * cfg.memory.org.burst_length
    w = np.zeros(n, bool) if writes is None else np.asarray(writes, bool)
    return (AddressMapping(cfg.memory).encode_array(f), np.full(n, cfg.memory.org.burst_bytes),
            w, np.asarray(arrivals, np.int64))


def _run(sets, build):
    cfg = load_config("neupims", ["memory.org.channels=1", *sets])
    r = run_requests(cfg, *build(cfg), engine="fast")
    assert check_log(r.log(), cfg) == []
    acts = sum(1 for x in r.log() if x[5] == "ACT")
    return r.stats["sim_cycles"], acts, r


def _pingpong(cfg, n=4000):
    """Two rows of one bank alternating, one request per cycle (the issue's trace)."""
    i = np.arange(n)
    return _one_bank(cfg, i % 2, (i // 2) % 16, i)


def test_closed_page_needs_about_one_activation_per_access():
    _, open_acts, _ = _run([], _pingpong)
    cyc, acts, r = _run(["memory.controller.page_policy=closed"], _pingpong)
    assert acts >= 0.99 * 4000 and open_acts < 0.1 * 4000
    assert {x[5] for x in r.log()} >= {"RDA"} and not any(x[5] == "RD" for x in r.log())


def test_fcfs_differs_from_fr_fcfs_where_reordering_matters():
    c1, a1, _ = _run([], _pingpong)
    c2, a2, _ = _run(["memory.controller.scheduler=fcfs"], _pingpong)
    c3, a3, _ = _run(["memory.controller.scheduler=fr_fcfs_cap",
                      "memory.controller.row_hit_cap=4"], _pingpong)
    assert a2 > 10 * a1 and c2 > c1       # strict arrival order: a row switch per access
    assert a1 < a3 < a2                   # the cap bounds each run of hits to 4


def _row_runs(cfg, groups=240):
    """Runs of 4 accesses to one row, rows A A B B A A ..., 100 idle cycles between runs."""
    rows, cols, arr = [], [], []
    t = 0
    for g in range(groups):
        for j in range(4):
            rows.append((g // 2) % 2)
            cols.append(j)
            arr.append(t)
            t += 2
        t += 100
    return _one_bank(cfg, rows, cols, arr)


def test_timeout_page_policy_lies_between_open_and_closed():
    _, a_open, _ = _run([], _row_runs)
    _, a_to, _ = _run(["memory.controller.page_policy=timeout",
                       "memory.controller.page_timeout_cycles=50"], _row_runs)
    _, a_long, _ = _run(["memory.controller.page_policy=timeout",
                         "memory.controller.page_timeout_cycles=500"], _row_runs)
    _, a_closed, _ = _run(["memory.controller.page_policy=closed"], _row_runs)
    assert a_open < a_to < a_closed
    assert a_long == a_open               # a timeout longer than the gaps never closes a row


def test_closed_adaptive_closes_only_rows_without_queued_hits():
    _, a_open, _ = _run([], _row_runs)
    _, a_ad, r = _run(["memory.controller.page_policy=closed_adaptive"], _row_runs)
    names = [x[5] for x in r.log()]
    assert "RDA" in names and "RD" in names      # the last of each run auto-precharges
    assert a_ad > a_open


def _seq_rrw(cfg, n=6000):
    """Sequential bursts of one channel, every third a write, one request per cycle."""
    from archsim.memory.selftest import channel_sequential_addrs
    from archsim.memory.addrmap import AddressMapping

    a = channel_sequential_addrs(AddressMapping(cfg.memory), 0, n)
    return a, np.full(n, cfg.memory.org.burst_bytes), np.arange(n) % 3 == 2, np.arange(n)


def test_write_drain_batches_writes_and_saves_turnarounds():
    c_mixed, _, r1 = _run(["memory.controller.write_policy=mixed"], _seq_rrw)
    c_drain, _, r2 = _run(["memory.controller.write_policy=drain"], _seq_rrw)
    assert c_drain < c_mixed

    def switches(r):
        cols = [x[5] for x in r.log() if x[5] in ("RD", "WR")]
        return sum(1 for a, b in zip(cols, cols[1:]) if a != b)
    assert switches(r2) < switches(r1) / 4


def _seq(cfg, n=40000):
    from archsim.memory.selftest import channel_sequential_addrs
    from archsim.memory.addrmap import AddressMapping

    a = channel_sequential_addrs(AddressMapping(cfg.memory), 0, n)
    return a, np.full(n, cfg.memory.org.burst_bytes), np.zeros(n, bool), np.zeros(n, np.int64)


def test_per_bank_refresh_loses_less_bandwidth_than_all_bank_refresh():
    c_off, _, _ = _run(["memory.refresh.enabled=false"], _seq)
    c_ab, _, r_ab = _run([], _seq)
    c_st, _, _ = _run(["memory.refresh.mode=rank_staggered"], _seq)
    c_pb, _, r_pb = _run(["memory.refresh.mode=per_bank"], _seq)
    assert c_off < c_pb < c_ab
    assert c_off < c_st
    assert any(x[5] == "REFpb" for x in r_pb.log()) and not any(x[5] == "REF" for x in r_pb.log())
    assert any(x[5] == "REF" for x in r_ab.log())


# ---- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("sets,needle", [
    (["memory.controller.page_timeout_cycles=10"], "page_timeout_cycles applies only with "
                                                   "page_policy: timeout"),
    (["memory.controller.row_hit_cap=4"], "row_hit_cap applies only with scheduler: fr_fcfs_cap"),
    (["memory.controller.write_policy=mixed", "memory.controller.write_queue_size=64"],
     "write_queue_size applies only with "
                                                "write_policy: drain"),
    (["memory.controller.write_policy=drain", "memory.controller.write_high_watermark=0.1",
      "memory.controller.write_low_watermark=0.5"], "must be below write_high_watermark"),
    (["memory.controller.page_policy=timeout", "memory.controller.page_timeout_cycles=0"],
     "page_timeout_cycles"),
    (["memory.controller.scheduler=frfcfs"], "scheduler"),
    (["memory.refresh.mode=per_rank"], "refresh.mode"),
    (["memory.kind=ddr4"], "memory.kind"),
    (["memory.refresh.mode=rank_staggered", "memory.org.ranks=1"], "rank_staggered"),
    (["pim.command_queue_depth=0"], "command_queue_depth"),
    (["memory.timing.tRTW=20"], "tRTW does not exist in hbm2"),
])
def test_a_bad_policy_parameter_is_a_one_line_error_naming_the_key(sets, needle):
    with pytest.raises(ConfigError) as e:
        load_config("neupims", sets)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_a_refresh_mode_the_standard_lacks_is_rejected(monkeypatch):
    from dataclasses import replace

    from archsim.memory import standards

    no_refpb = replace(standards.STANDARDS["hbm2"], refresh_modes=("all_bank", "rank_staggered"))
    monkeypatch.setitem(standards.STANDARDS, "hbm2", no_refpb)
    with pytest.raises(ConfigError) as e:
        load_config("neupims", ["memory.refresh.mode=per_bank"])
    assert "not supported by hbm2" in str(e.value) and "all_bank, rank_staggered" in str(e.value)


@pytest.mark.parametrize("sets", [["memory.controller.write_queue_size=4"],
                                  ["memory.controller.write_low_watermark=0"]])
def test_a_drain_with_a_low_watermark_under_one_burst_still_ends(sets):
    """Ramulator 2's rule ends a drain only below the low watermark; one under a burst would
    never end (both engines livelocked). A drain with no write left ends too."""
    cfg = load_config("neupims", ["memory.org.channels=1",
                                  "memory.controller.write_policy=drain", *sets])
    reqs = _trace(cfg, 600, 3)
    a = run_requests(cfg, *reqs, engine="exact")
    b = run_requests(cfg, *reqs, engine="fast")
    assert a.log() == b.log() and check_log(b.log(), cfg) == []
