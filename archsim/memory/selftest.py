"""Standard memory patterns with analytic bounds, PIM GEMV and concurrency experiments.

Pure functions returning plain dicts (no I/O); ``archsim mem selftest`` prints them. Every
experiment runs the independent checker on its command log (key ``violations``).
All bandwidths are bytes per memory-clock cycle (tCK) **per channel**; cycles are tCK.
"""
from __future__ import annotations

import numpy as np

from archsim.memory.addrmap import AddressMapping
from archsim.memory.checker import check_log
from archsim.memory.runner import run_requests
from archsim.memory.spec import activation_weight, gemv_cycles
from archsim.memory.system import MemorySystem
from archsim.memport import MemRequest, PimOpKind, PimRequest

PATTERNS = ("seq_read", "seq_write", "random_read", "rw_mix", "strided")


def refresh_factor(cfg) -> float:
    """Fraction of time a rank is not refreshing: 1 − tRFC/tREFI (1 when refresh is off)."""
    t = cfg.memory.timing
    return 1.0 - t.tRFC / t.tREFI if cfg.memory.refresh.enabled else 1.0


def refresh_blocked_cycles(cfg, span_cycles: int) -> int:
    """Cycles of a run's first ``span_cycles`` (from cycle 0) in which every rank of a channel
    must be refreshing, so no data moves.

    All-bank REF falls due every tREFI from cycle tREFI, for all ranks of a channel together,
    and memory traffic does not postpone it (see :mod:`archsim.memory.controller`); each blocks
    tRFC (a REF due near the end of the span counts only up to the span's end). A run shorter
    than tREFI meets no refresh. 0 when refresh is off, and for refresh modes that never stop a
    whole channel (ranks refreshed in turn on a multi-rank channel, per-bank refresh): the bound
    is then the refresh-free one.
    """
    ref = cfg.memory.refresh
    mode = getattr(ref, "mode", "all_bank")
    if not ref.enabled or not (mode == "all_bank" or (mode == "rank_staggered"
                                                     and cfg.memory.org.ranks == 1)):
        return 0
    t = cfg.memory.timing
    due, blocked = t.tREFI, 0
    while due < span_cycles:
        blocked += min(t.tRFC, span_cycles - due)
        due += t.tREFI
    return blocked


def act_limited_bandwidth(cfg) -> float:
    """Upper bound (bytes/cycle/channel) when every access needs its own activation.

    min over: the data bus peak; tFAW (N activations per tFAW per rank); tRRD_S (one per
    tRRD_S per rank); tRC (one per tRC per bank) — each times one burst.
    """
    org, t = cfg.memory.org, cfg.memory.timing
    peak = cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel
    acts = min(org.ranks * 4 / t.tFAW, org.ranks / t.tRRD_S, org.banks_per_channel / t.tRC_cycles)
    return min(peak, acts * org.burst_bytes)


def analytic_bandwidth(cfg, pattern: str, span_cycles: int | None = None) -> float:
    """Analytic upper bound, bytes/cycle/channel, for a pattern of :data:`PATTERNS`.

    Sequential (and the read/write mix, a loose bound): the data-bus peak; random and strided
    (a new row per access): :func:`act_limited_bandwidth`; either times the fraction of time
    the channel is not refreshing. That fraction is the long-run ``1 − tRFC/tREFI`` without
    ``span_cycles``; for a run of ``span_cycles`` (starting at cycle 0) it is what that span
    must contain (:func:`refresh_blocked_cycles`) — a run shorter than tREFI meets no refresh,
    so its bound is the refresh-free one, and an achieved bandwidth never exceeds it.
    """
    peak = cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel
    base = act_limited_bandwidth(cfg) if pattern in ("random_read", "strided") else peak
    if span_cycles is None:
        return base * refresh_factor(cfg)
    if span_cycles <= 0:
        return base
    return base * (1.0 - refresh_blocked_cycles(cfg, span_cycles) / span_cycles)


def channel_sequential_addrs(amap: AddressMapping, channel: int, n_bursts: int,
                             first_row: int = 0) -> np.ndarray:
    """Byte addresses of ``n_bursts`` consecutive bursts inside one channel, walking the
    mapping's fields from least to most significant (column bursts, then the others)."""
    j = np.arange(n_bursts, dtype=np.int64)
    bursts_per_row = amap.counts["co"] * amap.column_bytes // amap.burst_bytes
    fields = np.zeros((n_bursts, 6), np.int64)
    order = ["ch", "ra", "bg", "ba", "ro", "co"]
    fields[:, 0] = channel
    fields[:, 5] = (j % bursts_per_row) * (amap.burst_bytes // amap.column_bytes)
    rest = j // bursts_per_row
    for f in sorted(("ra", "bg", "ba", "ro"), key=lambda f: amap.shifts[f]):
        cnt = amap.counts[f]
        v = rest % cnt if f != "ro" else rest + first_row
        fields[:, order.index(f)] = v
        if f != "ro":
            rest = rest // cnt
    return amap.encode_array(fields)


def pattern_requests(cfg, pattern: str, n: int, seed: int = 0):
    """Requests of a standard pattern: arrays (addrs, sizes, is_write, arrivals), shape (N,).

    All arrive at cycle 0 (a saturating source), one burst each. ``seq_*``: consecutive
    addresses; ``random_read``: uniform over the device; ``rw_mix``: consecutive addresses, a
    third of them writes (random); ``strided``: stride ``channels × page_size_bytes`` (with the
    default mapping: the next bank of the same channel, a new row every access).
    Raises ValueError for an unknown pattern.
    """
    org = cfg.memory.org
    rng = np.random.default_rng(seed)
    bb = org.burst_bytes
    idx = np.arange(n, dtype=np.int64)
    w = np.zeros(n, np.bool_)
    if pattern == "seq_read":
        addrs = idx * bb
    elif pattern == "seq_write":
        addrs = idx * bb
        w[:] = True
    elif pattern == "random_read":
        addrs = rng.integers(0, org.capacity_bytes // bb, n) * bb
    elif pattern == "rw_mix":
        addrs = idx * bb
        w = rng.random(n) < 1 / 3
    elif pattern == "strided":
        addrs = (idx * org.channels * org.page_size_bytes) % org.capacity_bytes
    else:
        raise ValueError(f"unknown pattern '{pattern}'; choose one of {', '.join(PATTERNS)}")
    return addrs, np.full(n, bb, np.int64), w, np.zeros(n, np.int64)


def run_pattern(cfg, pattern: str, n: int = 20000, engine: str = "fast", seed: int = 0,
                check: bool = True) -> dict:
    """Run one pattern; return achieved vs analytic bandwidth (bytes/cycle/channel, averaged
    over the channels that moved data; the bound of each channel counts the refreshes its busy
    span contains, see :func:`analytic_bandwidth`), the peak fraction, stats and checker
    violations."""
    res = run_requests(cfg, *pattern_requests(cfg, pattern, n, seed), engine=engine)
    s = res.stats
    achieved = s["mean_channel_bandwidth_bytes_per_cycle"]
    peak = cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel
    used = [c for c in s["channels"] if c["bytes_read"] + c["bytes_written"]]
    bound = (float(np.mean([analytic_bandwidth(cfg, pattern, c["busy_span_cycles"])
                            for c in used])) if used else analytic_bandwidth(cfg, pattern))
    viol = check_log(res.log(), cfg) if check else []
    return {"pattern": pattern, "requests": n, "engine": engine,
            "achieved_bytes_per_cycle_per_channel": achieved,
            "analytic_bound_bytes_per_cycle_per_channel": bound,
            "peak_bytes_per_cycle_per_channel": peak,
            "fraction_of_peak": achieved / peak, "fraction_of_bound": achieved / bound,
            "row_hit_rate": s["row_hit_rate"], "latency_avg_cycles": s["latency_avg_cycles"],
            "latency_p99_cycles": s["latency_p99_cycles"], "stats": s,
            "violations": len(viol), "violation_examples": [str(v) for v in viol[:5]]}


# ------------------------------------------------------------------------------ PIM
def gemv_row_cycles(cfg, k: int) -> int:
    """Cycles (tCK) of one row-GEMV step ``G_ACT(all bank groups) → PIM_GEMV(k) → PIM_PRE``
    repeated back to back, refresh excluded:

    ``(G − 1)·s + (R − 1) + max(tRCDRD + gemv_cycles(k), tRAS) + tRP`` with G bank groups,
    R ranks, s = tFAW when a G_ACT's activation weight (banks_per_group) fills the tFAW window
    (else max(tRRD_L, tRRD_S)): the G_ACTs of one rank are tFAW apart, ranks interleave one
    cycle apart, the GEMV starts tRCDRD after the last G_ACT and runs
    ``max(BL, tCCD_S) × (max(k, fill) + 1)`` (NeuPIMs reference), then PIM_PRECHARGE (no
    earlier than tRAS after the last G_ACT) and tRP.
    Valid while R ≤ s (the ranks' G_ACTs interleave without stalling each other).
    """
    org, t = cfg.memory.org, cfg.memory.timing
    s = t.tFAW if activation_weight("G_ACT", cfg) >= 4 else max(t.tRRD_L, t.tRRD_S)
    last_gact = (org.bank_groups - 1) * s + (org.ranks - 1)
    return last_gact + max(t.tRCDRD + gemv_cycles(k, cfg), t.tRAS) + t.tRP


def pim_gemv_requests(cfg, channel: int, n_rows: int, k: int, first_row: int = 0,
                      header: bool = False, start_id: int = 0, arrival: int = 0):
    """PIM requests of a GEMV whose matrix occupies ``n_rows`` row groups (one DRAM row in
    every bank of ``channel``): per row ``[PIM_HEADER], G_ACT, PIM_GEMV(k), PIM_PRECHARGE``."""
    reqs, rid = [], start_id
    for i in range(n_rows):
        seq = []
        if header:
            seq.append(PimRequest(rid, channel, PimOpKind.HEADER, arrival, n_comps=1,
                                  extra={"k": k}))
            rid += 1
        seq += [PimRequest(rid, channel, PimOpKind.G_ACT, arrival, row=first_row + i),
                PimRequest(rid + 1, channel, PimOpKind.GEMV, arrival, n_comps=k),
                PimRequest(rid + 2, channel, PimOpKind.PRECHARGE, arrival)]
        rid += 3
        reqs += seq
    return reqs


def comp_bytes_per_bank(cfg) -> int:
    """Bytes one COMP step reads in each bank: ``pim.multipliers_per_bank`` operands of the
    storage type (``npu.dtype_bytes``; fp16: 16 x 2 B = 32 B, Newton MICRO 2020)."""
    return cfg.pim.multipliers_per_bank * cfg.npu.dtype_bytes


def run_pim_gemv(cfg, n_rows: int = 64, k: int | None = None, header: bool = True,
                 check: bool = True) -> dict:
    """Simulate one channel's GEMV over ``n_rows`` row groups, ``k`` COMP steps per row group
    (default: a whole row, ``page_size_bytes / comp_bytes_per_bank``). Matrix bytes =
    n_rows × banks × k × :func:`comp_bytes_per_bank`. Returns simulated cycles, the
    refresh-free formula, the PIM effective internal bandwidth (matrix bytes / cycles)
    against the external peak and the COMP peak (banks × COMP bytes per COMP step), and
    checker violations."""
    org = cfg.memory.org
    cb = comp_bytes_per_bank(cfg)
    k = k if k is not None else max(1, org.page_size_bytes // cb)
    mem = MemorySystem(cfg)
    for r in pim_gemv_requests(cfg, 0, n_rows, k, header=header):
        mem.submit_pim(r)
    comps = mem.run_to_idle()
    cycles = max(c.cycle for c in comps)
    log = mem.command_log()
    viol = check_log(log, cfg) if check else []
    matrix_bytes = n_rows * org.banks_per_channel * k * cb
    peak = cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel
    return {"n_rows": n_rows, "k": k, "cycles": cycles, "comp_bytes_per_bank": cb,
            "formula_cycles_no_refresh": n_rows * gemv_row_cycles(cfg, k),
            "refreshes": sum(1 for r in log if r.command in ("REF", "REFpb") and r.channel == 0),
            "matrix_bytes": matrix_bytes,
            "pim_effective_bytes_per_cycle": matrix_bytes / cycles,
            "pim_peak_internal_bytes_per_cycle": (org.banks_per_channel * cb
                                                  / max(cfg.memory.burst_cycles,
                                                        cfg.memory.timing.tCCD_S)),
            "external_peak_bytes_per_cycle": peak,
            "violations": len(viol), "violation_examples": [str(v) for v in viol[:5]],
            "log": log}


def run_concurrency(cfg, n_reads: int = 8192, n_rows: int = 96, k: int | None = None,
                    check: bool = True) -> dict:
    """NPU-style streaming reads and a PIM GEMV on the same channel (channel 0).

    Runs reads alone, the GEMV alone, and both submitted at cycle 0, in the configured
    row-buffer mode. Returns the three makespans (cycles) and their ratios to max and sum.
    """
    org = cfg.memory.org
    k = k if k is not None else max(1, org.page_size_bytes // comp_bytes_per_bank(cfg))
    amap = AddressMapping(cfg.memory)
    addrs = channel_sequential_addrs(amap, 0, n_reads)
    pim_first_row = org.rows // 2

    def run(with_mem: bool, with_pim: bool):
        mem = MemorySystem(cfg)
        if with_mem:
            for i, a in enumerate(addrs.tolist()):
                mem.submit(MemRequest(i, a, org.burst_bytes, False, 0, "npu"))
        if with_pim:
            for r in pim_gemv_requests(cfg, 0, n_rows, k, first_row=pim_first_row,
                                       header=True, start_id=10 * n_reads + 1):
                mem.submit_pim(r)
        comps = mem.run_to_idle()
        viol = check_log(mem.command_log(), cfg) if check else []
        return max(c.cycle for c in comps), len(viol)

    t_mem, v1 = run(True, False)
    t_pim, v2 = run(False, True)
    t_both, v3 = run(True, True)
    return {"mode": cfg.pim.row_buffer_mode, "reads": n_reads, "gemv_rows": n_rows,
            "mem_alone_cycles": t_mem, "pim_alone_cycles": t_pim, "together_cycles": t_both,
            "ratio_to_max": t_both / max(t_mem, t_pim),
            "ratio_to_sum": t_both / (t_mem + t_pim), "violations": v1 + v2 + v3}


def run_selftest(cfg, per_channel: int = 8192, engine: str = "fast", pim_rows: int = 64,
                 patterns=PATTERNS) -> dict:
    """All standard patterns, the PIM GEMV and the dual/single concurrency experiment.

    ``per_channel`` requests per channel (8192 bursts ≈ 17,000 cycles ≈ 4.4 tREFI of
    streaming, so refresh is included); the device-wide patterns get ``per_channel ×
    channels`` requests, ``strided`` (one channel) ``per_channel``.

    The PIM GEMV and the concurrency experiment issue NeuPIMs commands (PIM_HEADER, G_ACT,
    PIM_GEMV, PIM_PRECHARGE): on a machine with ``pim.commands: newton`` they are not run and
    ``out["pim_skipped"]`` says why (``pim_gemv`` None, ``concurrency`` empty).
    """
    nch = cfg.memory.org.channels
    out = {"patterns": [run_pattern(cfg, p, per_channel * (1 if p == "strided" else nch),
                                    engine) for p in patterns]}
    if cfg.pim.commands != "neupims":
        out.update(pim_gemv=None, concurrency=[], pim_skipped=(
            "PIM GEMV and dual/single concurrency not run: they issue NeuPIMs commands "
            f"(PIM_HEADER, PIM_GEMV) and this machine has pim.commands: {cfg.pim.commands}"))
        return out
    pim = run_pim_gemv(cfg, pim_rows)
    pim.pop("log")
    out["pim_gemv"] = pim
    one = cfg.model_copy(update={"memory": cfg.memory.model_copy(
        update={"org": cfg.memory.org.model_copy(update={"channels": 1})})})
    out["concurrency"] = [
        run_concurrency(one.model_copy(update={"pim": one.pim.model_copy(
            update={"row_buffer_mode": m})})) for m in ("dual", "single")]
    return out


__all__ = ["PATTERNS", "refresh_factor", "refresh_blocked_cycles", "act_limited_bandwidth", "analytic_bandwidth",
           "pattern_requests", "run_pattern", "gemv_row_cycles", "pim_gemv_requests",
           "run_pim_gemv", "run_concurrency", "run_selftest", "channel_sequential_addrs"]
