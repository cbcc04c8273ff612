"""Busy intervals per hardware unit of a simulated window, and its timeline events.

:func:`unit_intervals` turns the per-instruction times of a window
(:class:`archsim.system.core.WindowRun`, from the executor's observer) into busy intervals per
track (``npu/array{i}``, ``npu/vector{j}``, ``dma/dma{k}``, ``pim/ch{c}``, ``link/allreduce``,
``link/pipeline``); :func:`timeline_events` merges them into at most ``limit`` trace events.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from archsim.results import TraceEvent
from archsim.system.resources import HANDOFF_MNEMONICS

#: Most timeline events one result keeps (the rest are cut; the result says so).
MAX_EVENTS = 200_000


def unit_intervals(win: Any) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Busy intervals per hardware unit: ``{track: (start, end, op index)}`` (NPU cycles).

    Tracks: ``npu/array{i}`` (SA_LOADW + SA_MATMUL of array i), ``npu/vector{j}``,
    ``dma/{stream}`` (transfers of each DMA queue), ``pim/ch{c:02d}`` (PIM commands of channel c,
    submission to completion), ``link/allreduce`` (all-reduces), ``link/pipeline`` (hand-off).
    """
    prog = win.program
    dbg = prog.debug
    n_arr = win.stats.arrays and len(win.stats.arrays) or 1
    out: dict[str, list] = {}
    for s, (st, en) in win.times.items():
        st_a = np.asarray(st, dtype=np.float64)
        en_a = np.asarray(en, dtype=np.float64)
        sel = np.flatnonzero(en_a >= 0)
        if sel.size == 0:
            continue
        ops = dbg.streams[s][0].astype(np.int64)
        kind = s.rstrip("0123456789")
        idx = s[len(kind):]
        if kind == "sa":
            instrs = prog.streams[s]
            arrays = np.array([instrs[i]["array"] for i in sel.tolist()], dtype=np.int64)
            if idx:
                arrays[arrays >= n_arr] = int(idx)
            for a in np.unique(arrays).tolist():
                m = sel[arrays == a]
                out.setdefault(f"npu/array{a}", []).append((st_a[m], en_a[m], ops[m]))
            continue
        if kind == "vu":
            track = f"npu/vector{idx or 0}"
        elif kind == "pim":
            track = f"pim/ch{int(idx):02d}"
        elif kind == "link":
            instrs = prog.streams[s]
            ho = np.array([instrs[i].mnemonic in HANDOFF_MNEMONICS for i in sel.tolist()], dtype=bool)
            for track, m in (("link/allreduce", sel[~ho]), ("link/pipeline", sel[ho])):
                if m.size:
                    out.setdefault(track, []).append((st_a[m], en_a[m], ops[m]))
            continue
        else:
            track = f"dma/{s}"
        out.setdefault(track, []).append((st_a[sel], en_a[sel], ops[sel]))
    res = {}
    for k, parts in out.items():
        res[k] = tuple(np.concatenate([p[i] for p in parts]) for i in range(3))
    return res


def timeline_events(win: Any, units: dict, limit: int = MAX_EVENTS) -> tuple[list[TraceEvent],
                                                                           bool]:
    """Timeline events: per unit, consecutive instructions of one operator merged into one
    event (gaps of up to 64 cycles bridged). Returns (events, truncated)."""
    ops = win.program.debug.ops
    events: list[TraceEvent] = []
    for track, (st, en, op) in sorted(units.items()):
        o = np.lexsort((en, st))
        st, en, op = st[o], en[o], op[o]
        i, n = 0, st.size
        while i < n:
            j = i
            end = en[i]
            while j + 1 < n and op[j + 1] == op[i] and st[j + 1] <= end + 64:
                j += 1
                end = max(end, en[j])
            name = ops[op[i]] if 0 <= op[i] < len(ops) else "sync"
            events.append(TraceEvent(track, name, float(st[i]), float(end),
                                     {"instructions": int(j - i + 1)}))
            i = j + 1
            if len(events) >= limit:
                return events, True
    return events, False


__all__ = ["MAX_EVENTS", "unit_intervals", "timeline_events"]
