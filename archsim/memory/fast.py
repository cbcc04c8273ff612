"""Fast path: the same scheduling policy as :class:`ChannelController`, JIT-compiled.

For memory-only traffic (RD/WR with all-bank refresh; no PIM request) a whole channel's burst
list is scheduled by one numba-compiled loop over flat arrays. The constraint table is the
same (:func:`archsim.memory.spec.compile_table` is turned into latency matrices per level), and
the policy mirrors the exact path step by step (same event order, same tie-breaks), so both
produce *identical command logs*; ``tests/test_memory_fast.py`` checks that on random traces.
Without numba the kernel runs as plain Python (same results, slower).

Restrictions (the exact path has none): no PIM requests; every burst must be known in
advance with its arrival cycle (trace replay, self-tests). Cycles are tCK.
"""
from __future__ import annotations

import numpy as np

from archsim.memory.addrmap import AddressMapping
from archsim.memory.spec import CMD_INDEX, compile_table

try:  # pragma: no cover - exercised implicitly
    import numba

    _njit = numba.njit(cache=True, nogil=True)
    HAVE_NUMBA = True
except Exception:  # pragma: no cover - numba absent
    def _njit(f):
        return f
    HAVE_NUMBA = False

NMEM = 5  # ACT, PRE, RD, WR, REF (the first five commands of spec.COMMANDS)
LEVEL_ORDER = ("channel", "rank", "bankgroup", "bank")
BIG = 1 << 62


def latency_matrices(cfg) -> tuple[np.ndarray, int, int]:
    """Latency matrix ``lat[level, p, q]`` (cycles, -1 = no rule) over the five memory commands,
    and the tFAW window (span, N), from the compiled constraint table."""
    table = compile_table(cfg)
    lat = np.full((4, NMEM, NMEM), -1, dtype=np.int64)
    for li, lv in enumerate(LEVEL_ORDER):
        for p in range(NMEM):
            for q, v in table.updates[lv][p]:
                if q < NMEM:
                    lat[li, p, q] = max(lat[li, p, q], int(v))
    span, n = 0, 0
    for name, cmds, n_max, sp, weights in table.windows["rank"]:
        if CMD_INDEX["ACT"] in weights:
            span, n = sp, n_max
    return lat, span, n


@_njit
def _run_channel(arrival, bank, row, col, is_write, R, G, B, q_bank, q_chan, refresh,
                 tREFI, lat, faw_span, faw_n, CL, CWL, BL):  # pragma: no cover - JIT
    nbursts = arrival.shape[0]
    nb = R * G * B
    nbr = G * B
    ncmd = 5
    nxt_ch = np.zeros(ncmd, np.int64)
    nxt_ra = np.zeros((R, ncmd), np.int64)
    nxt_bg = np.zeros((R * G, ncmd), np.int64)
    nxt_ba = np.zeros((nb, ncmd), np.int64)
    fawn = max(faw_n, 1)
    faw = np.full((R, fawn), -BIG, np.int64)
    faw_cnt = np.zeros(R, np.int64)
    open_row = np.full(nb, -1, np.int64)
    qbuf = np.zeros((nb, q_bank), np.int64)
    qlen = np.zeros(nb, np.int64)
    done = np.full(nbursts, -1, np.int64)
    cap = 2 * nbursts + 64
    log_t = np.zeros(cap, np.int64)
    log_c = np.zeros(cap, np.int64)
    log_b = np.zeros(cap, np.int64)
    log_r = np.zeros(cap, np.int64)
    log_col = np.zeros(cap, np.int64)
    nlog = 0
    counts = np.zeros(ncmd, np.int64)
    ref_due = np.full(R, tREFI if refresh else BIG, np.int64)
    ref_pend = np.zeros(R, np.bool_)
    head = 0
    nq = 0
    t_min = 0
    open_count = 0
    open_since = 0
    active = 0
    last_data = 0
    served = 0
    while served < nbursts:
        t0 = t_min
        # admission and refresh marking at t0
        while head < nbursts:
            bk = bank[head]
            if arrival[head] > t0 or qlen[bk] >= q_bank or nq >= q_chan:
                break
            qbuf[bk, qlen[bk]] = head
            qlen[bk] += 1
            nq += 1
            head += 1
        for r in range(R):
            if not ref_pend[r] and ref_due[r] <= t0:
                ref_pend[r] = True
        best_t = BIG
        best_p = 9
        best_a = 0
        best_cmd = -1
        best_b = -1
        best_i = -1
        # refresh drains
        for r in range(R):
            if not ref_pend[r]:
                continue
            closed = True
            for b in range(r * nbr, (r + 1) * nbr):
                if open_row[b] >= 0:
                    closed = False
                    g = b // B
                    e = max(nxt_ch[1], nxt_ra[r, 1], nxt_bg[g, 1], nxt_ba[b, 1], t0)
                    if e < best_t or (e == best_t and (0 < best_p or (0 == best_p and b < best_a))):
                        best_t, best_p, best_a, best_cmd, best_b, best_i = e, 0, b, 1, b, -1
            if closed:
                e = max(nxt_ch[4], nxt_ra[r, 4], t0)
                for g in range(r * G, (r + 1) * G):
                    e = max(e, nxt_bg[g, 4])
                for b in range(r * nbr, (r + 1) * nbr):
                    e = max(e, nxt_ba[b, 4])
                if e < best_t or (e == best_t and (0 < best_p or (0 == best_p and -1 < best_a))):
                    best_t, best_p, best_a, best_cmd, best_b, best_i = e, 0, -1, 4, r, -1
        # memory candidates (FR-FCFS)
        if nq > 0:
            for b in range(nb):
                n = qlen[b]
                if n == 0:
                    continue
                r = b // nbr
                if ref_pend[r]:
                    continue
                orow = open_row[b]
                hit = -1
                if orow >= 0:
                    for j in range(n):
                        if row[qbuf[b, j]] == orow:
                            hit = j
                            break
                    if hit >= 0:
                        idx = qbuf[b, hit]
                        cmd = 3 if is_write[idx] else 2
                        pr = 2
                    else:
                        idx = qbuf[b, 0]
                        cmd = 1
                        pr = 3
                else:
                    idx = qbuf[b, 0]
                    cmd = 0
                    pr = 3
                g = b // B
                e = max(nxt_ch[cmd], nxt_ra[r, cmd], nxt_bg[g, cmd], nxt_ba[b, cmd])
                if cmd == 0 and faw_n > 0 and faw_cnt[r] >= faw_n:
                    w = faw[r, (faw_cnt[r] - faw_n) % fawn] + faw_span
                    if w > e:
                        e = w
                if e < t0:
                    e = t0
                if e < best_t or (e == best_t and (pr < best_p or (pr == best_p and idx < best_a))):
                    best_t, best_p, best_a, best_cmd, best_b, best_i = e, pr, idx, cmd, b, hit
        # events
        t_ev = BIG
        if head < nbursts:
            bk = bank[head]
            if qlen[bk] < q_bank and nq < q_chan:
                t_ev = max(arrival[head], t0)
        for r in range(R):
            if not ref_pend[r]:
                v = max(ref_due[r], t0)
                if v < t_ev:
                    t_ev = v
        if t_ev <= best_t and t_ev < BIG:
            t_min = t_ev
            continue
        if best_cmd < 0:
            return log_t[:0], log_c[:0], log_b[:0], log_r[:0], log_col[:0], done, counts, \
                -1, active, last_data
        t = best_t
        cmd = best_cmd
        # issue
        if nlog >= cap:
            cap2 = cap * 2
            a1 = np.zeros(cap2, np.int64); a1[:cap] = log_t; log_t = a1
            a2 = np.zeros(cap2, np.int64); a2[:cap] = log_c; log_c = a2
            a3 = np.zeros(cap2, np.int64); a3[:cap] = log_b; log_b = a3
            a4 = np.zeros(cap2, np.int64); a4[:cap] = log_r; log_r = a4
            a5 = np.zeros(cap2, np.int64); a5[:cap] = log_col; log_col = a5
            cap = cap2
        counts[cmd] += 1
        t_min = t + 1
        if cmd == 4:
            r = best_b
            for q in range(ncmd):
                v = lat[0, 4, q]
                if v >= 0 and t + v > nxt_ch[q]:
                    nxt_ch[q] = t + v
                v = lat[1, 4, q]
                if v >= 0 and t + v > nxt_ra[r, q]:
                    nxt_ra[r, q] = t + v
                v = lat[2, 4, q]
                if v >= 0:
                    for g in range(r * G, (r + 1) * G):
                        if t + v > nxt_bg[g, q]:
                            nxt_bg[g, q] = t + v
                v = lat[3, 4, q]
                if v >= 0:
                    for b in range(r * nbr, (r + 1) * nbr):
                        if t + v > nxt_ba[b, q]:
                            nxt_ba[b, q] = t + v
            log_t[nlog] = t; log_c[nlog] = 4; log_b[nlog] = r * nbr; log_r[nlog] = -1
            log_col[nlog] = -1
            nlog += 1
            ref_pend[r] = False
            ref_due[r] += tREFI
            continue
        b = best_b
        r = b // nbr
        g = b // B
        for q in range(ncmd):
            v = lat[0, cmd, q]
            if v >= 0 and t + v > nxt_ch[q]:
                nxt_ch[q] = t + v
            v = lat[1, cmd, q]
            if v >= 0 and t + v > nxt_ra[r, q]:
                nxt_ra[r, q] = t + v
            v = lat[2, cmd, q]
            if v >= 0 and t + v > nxt_bg[g, q]:
                nxt_bg[g, q] = t + v
            v = lat[3, cmd, q]
            if v >= 0 and t + v > nxt_ba[b, q]:
                nxt_ba[b, q] = t + v
        log_t[nlog] = t; log_c[nlog] = cmd; log_b[nlog] = b
        if cmd == 0:
            if faw_n > 0:
                faw[r, faw_cnt[r] % fawn] = t
                faw_cnt[r] += 1
            idx = best_a
            open_row[b] = row[idx]
            if open_count == 0:
                open_since = t
            open_count += 1
            log_r[nlog] = row[idx]; log_col[nlog] = -1
        elif cmd == 1:
            log_r[nlog] = open_row[b]; log_col[nlog] = -1
            open_row[b] = -1
            open_count -= 1
            if open_count == 0:
                active += t - open_since
        else:
            idx = best_a
            j = best_i
            for m in range(j, qlen[b] - 1):
                qbuf[b, m] = qbuf[b, m + 1]
            qlen[b] -= 1
            nq -= 1
            d = t + (CL if cmd == 2 else CWL) + BL
            done[idx] = d
            if d > last_data:
                last_data = d
            served += 1
            log_r[nlog] = row[idx]; log_col[nlog] = col[idx]
        nlog += 1
    if open_count > 0:
        end = max(last_data, t_min)
        active += end - open_since
    return (log_t[:nlog], log_c[:nlog], log_b[:nlog], log_r[:nlog], log_col[:nlog], done,
            counts, t_min - 1, active, last_data)


def split_requests(amap: AddressMapping, addrs, sizes, is_write, arrivals):
    """Split requests into bursts (vectorised).

    Args: int arrays of shape (N,): byte addresses, sizes (bytes, > 0), write flags,
    arrival cycles. Returns a dict of burst arrays (``req`` index, ``ch``, ``bank`` (flat
    index within the channel), ``ra``, ``bg``, ``ba``, ``row``, ``col``, ``is_write``,
    ``arrival``), in request order. Raises SimulationError for an address beyond capacity.
    """
    addrs = np.asarray(addrs, np.int64)
    sizes = np.asarray(sizes, np.int64)
    bb = amap.burst_bytes
    first = addrs // bb
    last = (addrs + np.maximum(sizes, 1) - 1) // bb
    nper = last - first + 1
    req = np.repeat(np.arange(addrs.shape[0], dtype=np.int64), nper)
    offs = np.arange(req.shape[0], dtype=np.int64) - np.repeat(np.cumsum(nper) - nper, nper)
    baddr = (first[req] + offs) * bb
    if addrs.size:
        amap.decode_array(addrs + np.maximum(sizes, 1) - 1)   # range check of the last byte
    f = amap.decode_array(baddr)
    c = amap.counts
    flat = (f[:, 1] * c["bg"] + f[:, 2]) * c["ba"] + f[:, 3]
    return {"req": req, "ch": f[:, 0], "bank": flat, "ra": f[:, 1], "bg": f[:, 2],
            "ba": f[:, 3], "row": f[:, 4], "col": f[:, 5],
            "is_write": np.asarray(is_write, np.bool_)[req],
            "arrival": np.asarray(arrivals, np.int64)[req]}


def run_channel_fast(cfg, arrival, bank, row, col, is_write):
    """Schedule one channel's bursts (arrays in arrival/submission order) with the fast path.

    Returns ``(log, done, counts, last_issue, active_cycles, last_data)`` where ``log`` is a
    dict of arrays ``cycle, cmd (index into spec.COMMANDS), bank (flat), row, col``, ``done``
    the completion cycle of each burst, ``counts`` the command counts (ACT, PRE, RD, WR, REF).
    """
    lat, span, n = latency_matrices(cfg)
    org, t = cfg.memory.org, cfg.memory.timing
    ctl = cfg.memory.controller
    res = _run_channel(np.ascontiguousarray(arrival, np.int64), np.ascontiguousarray(bank, np.int64),
                       np.ascontiguousarray(row, np.int64), np.ascontiguousarray(col, np.int64),
                       np.ascontiguousarray(is_write, np.bool_), org.ranks, org.bank_groups,
                       org.banks_per_group, ctl.queue_size_per_bank, ctl.command_queue_size,
                       bool(cfg.memory.refresh.enabled), t.tREFI, lat, span, n, t.CL, t.CWL,
                       cfg.memory.burst_cycles)
    lt, lc, lb, lr, lcol, done, counts, last_issue, active, last_data = res
    return ({"cycle": lt, "cmd": lc, "bank": lb, "row": lr, "col": lcol}, done, counts,
            int(last_issue), int(active), int(last_data))


__all__ = ["HAVE_NUMBA", "latency_matrices", "split_requests", "run_channel_fast"]
