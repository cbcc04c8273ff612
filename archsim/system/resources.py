"""Which resource bounded each stage of a simulated window: a busy-time account per resource.

Every instruction that does work occupies one *resource* from its start to its end (the times
the executor's observer reports, :mod:`archsim.npu.observe`), named by its stream:

=============  ==========================================================================
resource       streams (instructions)
=============  ==========================================================================
``arrays``     ``sa*``: systolic-array tiles and weight preloads
``vector``     ``vu*``: vector-unit operations (norms, softmax, residuals, copies)
``dma``        ``dma*``: DMA transfers between HBM and the scratchpad, set-up to last completion
               (so HBM bandwidth and latency seen by the NPU)
``pim``        ``pim*``: PIM commands (GWRITE, row groups of PIM_GEMV / COMP + READRES)
``allreduce``  ``link``: ``ALL_REDUCE`` (ring all-reduce on the interconnect) and
               ``ALL_TO_ALL`` (the expert-parallel token exchange): the collectives
``handoff``    ``link``: ``SEND`` / ``RECV`` (the pipeline hand-off)
=============  ==========================================================================

For each stage interval ``[t0, t1)`` of the window (NPU cycles; the stage schedule's
completion times, :func:`archsim.system.core.execute_program`), and summed over the intervals
of each stage name:

* ``busy[r]``: cycles in which at least one instruction of resource ``r`` was in flight, as a
  share of the stage's cycles (resources overlap, so shares do not add up to 1);
* ``exclusive[r]``: cycles in which ``r`` was the *only* busy resource — time no other resource
  hides, the part of the stage that shortening ``r`` would certainly remove;
* ``idle``: cycles with no resource busy (semaphore waits, issue latency);
* ``bound``: the busiest resource (largest ``busy``), or ``waits`` when ``idle`` exceeds every
  busy share.

This is an occupancy account, not a dependency-tracked critical path: a resource busy 100 % of a
stage bounds it, but two resources each busy 60 % may or may not be on one chain. Cost: one sort
of all instruction intervals, O(n log n).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np

#: Resources in report order (bit ``i`` of an occupancy mask is ``RESOURCES[i]``).
RESOURCES = ("arrays", "vector", "dma", "pim", "allreduce", "handoff")
_PREFIX = (("sa", "arrays"), ("vu", "vector"), ("dma", "dma"), ("pim", "pim"))
#: Link instructions of the pipeline hand-off (the others on ``link`` are all-reduces).
HANDOFF_MNEMONICS = ("SEND", "RECV")


def stream_resource(stream: str, mnemonic: str = "") -> str:
    """The resource of an instruction of ``stream`` (module table).

    Raises:
        ValueError: a stream name of no known engine (a simulator bug: the loader names them).
    """
    if stream.startswith("link"):
        return "handoff" if mnemonic in HANDOFF_MNEMONICS else "allreduce"
    for p, r in _PREFIX:
        if stream.startswith(p):
            return r
    raise ValueError(f"stream {stream!r} belongs to no resource of {list(RESOURCES)}")


def _merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals ``[starts[i], ends[i])`` as sorted, disjoint ``(starts, ends)``."""
    if starts.size == 0:
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    last = np.append(idx[1:] - 1, s.size - 1)
    return s[idx], reach[last]


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of intervals ``[starts[i], ends[i])`` (same unit as given)."""
    ms, me = _merged(np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64))
    return float((me - ms).sum())


def stage_resource_account(times: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                           mnemonics: Mapping[str, Sequence[str]],
                           intervals: Iterable[tuple[str, float, float]]) -> dict[str, Any]:
    """Busy, exclusive and idle shares of each resource per stage (module docstring).

    Args:
        times: ``{stream: (start, end)}`` per instruction (NPU cycles; -1 = no work).
        mnemonics: ``{stream: [mnemonic per instruction]}`` (only ``link`` streams are read).
        intervals: ``(stage name, t0, t1)`` of the window in schedule order (NPU cycles);
            several intervals of one name are summed.

    Returns:
        ``{stage: {"cycles", "bound", "busy": {resource: share}, "exclusive": {resource:
        share}, "idle": share}}`` in first-appearance order; resources never busy in the stage
        are left out of ``busy`` and ``exclusive``.
    """
    per: dict[str, tuple[list, list]] = {r: ([], []) for r in RESOURCES}
    for stream, (st, en) in times.items():
        s = np.asarray(st, dtype=np.float64)
        e = np.asarray(en, dtype=np.float64)
        work = (e >= 0) & (e > s)
        if not work.any():
            continue
        if stream.startswith("link"):
            names = mnemonics.get(stream, ())
            for i in np.flatnonzero(work).tolist():
                r = stream_resource(stream, names[i] if i < len(names) else "")
                per[r][0].append(s[i:i + 1])
                per[r][1].append(e[i:i + 1])
        else:
            r = stream_resource(stream)
            per[r][0].append(s[work])
            per[r][1].append(e[work])
    ev_t, ev_v = [], []
    for bit, r in enumerate(RESOURCES):
        if not per[r][0]:
            continue
        ms, me = _merged(np.concatenate(per[r][0]), np.concatenate(per[r][1]))
        ev_t += [ms, me]
        ev_v += [np.full(ms.size, 1 << bit, np.int64), np.full(me.size, -(1 << bit), np.int64)]
    ivs = [(n, float(a), float(b)) for n, a, b in intervals if b > a]
    bounds = np.array(sorted({t for _, a, b in ivs for t in (a, b)}), dtype=np.float64)
    ev_t.append(bounds)
    ev_v.append(np.zeros(bounds.size, np.int64))
    t = np.concatenate(ev_t) if ev_t else np.zeros(0)
    v = np.concatenate(ev_v) if ev_v else np.zeros(0, np.int64)
    o = np.argsort(t, kind="stable")
    t, v = t[o], v[o]
    # occupancy mask on each elementary segment [t[k], t[k+1]) (ends sorted before starts at
    # the same time do not matter: the segment between them has zero length)
    mask = np.cumsum(v)[:-1] if t.size else np.zeros(0, np.int64)
    seg0, seg1 = t[:-1], t[1:]
    dur = seg1 - seg0
    out: dict[str, dict[str, Any]] = {}
    acc: dict[str, np.ndarray] = {}
    for name, a, b in ivs:
        sel = (seg0 >= a) & (seg1 <= b) & (dur > 0)
        d, m = dur[sel], mask[sel]
        row = acc.setdefault(name, np.zeros(2 * len(RESOURCES) + 2))
        row[-2] += b - a
        row[-1] += float(d[m == 0].sum())
        for bit in range(len(RESOURCES)):
            row[bit] += float(d[(m >> bit) & 1 == 1].sum())
            row[len(RESOURCES) + bit] += float(d[m == (1 << bit)].sum())
    for name, row in acc.items():
        cyc = row[-2]
        busy = {r: row[i] / cyc for i, r in enumerate(RESOURCES) if row[i] > 0}
        excl = {r: row[len(RESOURCES) + i] / cyc for i, r in enumerate(RESOURCES)
                if row[len(RESOURCES) + i] > 0}
        idle = row[-1] / cyc
        top = max(busy, key=busy.get) if busy else "waits"
        bound = "waits" if not busy or idle > busy[top] else top
        out[name] = {"cycles": cyc, "bound": bound, "busy": busy, "exclusive": excl,
                     "idle": idle}
    return out


__all__ = ["RESOURCES", "HANDOFF_MNEMONICS", "stream_resource", "union_length", "stage_resource_account"]
