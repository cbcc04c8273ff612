"""The critical path of a simulated window: the chain of instructions that set its length.

The executor's observer (:mod:`archsim.npu.observe`) gives every instruction's start and end
(work: SA, VU, DMA, PIM, link) and every WAIT's and SIGNAL's reached and passed/fired cycles.
From these and the program, :func:`critical_path` walks back from the instruction that
finished last to cycle 0, at each step following the constraint that was binding
(last-arrival critical path, as in trace analysers of parallel programs: Schulz, "Extracting
critical path graphs from MPI applications", Cluster 2005; Böhme et al., "Identifying the root
causes of wait states in large-scale parallel applications", TOPC 2016):

* a **work instruction** covers ``[start, t]`` of the path with its resource
  (:func:`archsim.system.resources.stream_resource`: arrays, vector, dma, pim, allreduce,
  handoff); it started at ``start`` because of the instruction before it in its stream: that
  one's end when it had ended by then (the path continues there; the gap between that end and
  ``start`` is time the instruction queued for its unit — an array taken by another stream, DMA
  slots, the memory's queue — and counts for the instruction's own resource), or, when the two
  overlap (pipelined tiles, DMA transfers in flight together), that one's start (the unit was
  still feeding it: the path continues inside it);
* a **WAIT** that blocked was released by a SIGNAL of its semaphore firing at that cycle: the
  path jumps to that SIGNAL's stream; a WAIT that did not block passes the path to the
  instruction before it;
* a **SIGNAL** fires once the earlier work of its stream has completed: the path continues at
  the earlier instruction that completed last (or, when the SIGNAL fired as soon as reached,
  at the instruction before it).

Each cycle of ``[0, end]`` is thereby charged to exactly one label: a resource, or ``waits``
for the rare stretch no recorded instruction covers (a stream's start before its first
instruction). The per-label sums are the *critical-path shares*: shortening a resource's work on
the path shortens the window by up to its share (exactly its share while the path stays
critical: ``tests/test_critical_path.py`` switches the all-reduce off on a serial layer and
sees the window shrink by the all-reduce's share). Unlike the occupancy account
(:func:`archsim.system.resources.stage_resource_account`), two resources busy at once are not
both charged. Cost: O(n) preprocessing over the instructions, then O(path · log n).
"""
from __future__ import annotations

import bisect
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from archsim.system.resources import RESOURCES, stream_resource

#: Labels of the path, in report order: the resources, then ``waits``.
LABELS = RESOURCES + ("waits",)
_WORK, _WAIT, _SIGNAL = 1, 2, 3


class _Stream:
    """One stream's records for the walk (arrays indexed by instruction)."""

    __slots__ = ("name", "kind", "start", "end", "sem", "res", "prev", "best")

    def __init__(self, name: str, mnemonics: Sequence[str], sems: Sequence[int],
                 work: tuple[Sequence[float], Sequence[float]],
                 sync: tuple[Sequence[float], Sequence[float]]) -> None:
        n = len(mnemonics)
        ws, we = np.asarray(work[0], np.float64), np.asarray(work[1], np.float64)
        ss, se = np.asarray(sync[0], np.float64), np.asarray(sync[1], np.float64)
        kind = np.zeros(n, np.int8)
        kind[we >= 0] = _WORK
        mn = np.asarray(mnemonics, dtype=object)
        kind[(mn == "WAIT") & (se >= 0)] = _WAIT
        kind[(mn == "SIGNAL") & (se >= 0)] = _SIGNAL
        self.name = name
        self.kind = kind
        self.start = np.where(kind == _WORK, ws, ss)
        self.end = np.where(kind == _WORK, we, se)
        self.sem = np.asarray(sems, np.int64)
        self.res = [stream_resource(name, m) if k == _WORK else "" for m, k in
                    zip(mnemonics, kind.tolist())] if name.startswith("link") else \
            [stream_resource(name) if n else ""] * n
        # prev[i]: the nearest j < i with a record (-1: none)
        has = kind > 0
        idx = np.where(has, np.arange(n), -1)
        run = np.maximum.accumulate(idx) if n else idx
        self.prev = np.concatenate(([-1], run[:-1])) if n else run
        # best[i]: among work j < i, the one that ended last (-1: none)
        wend = np.where(kind == _WORK, self.end, -np.inf)
        if n:
            top = np.maximum.accumulate(wend)
            new = np.concatenate(([wend[0] > -np.inf], wend[1:] > top[:-1]))
            arg = np.maximum.accumulate(np.where(new, np.arange(n), -1))
            self.best = np.concatenate(([-1], arg[:-1]))
        else:
            self.best = np.zeros(0, np.int64)


def stream_operands(groups: Iterable[tuple[Any, np.ndarray, np.ndarray]],
                    program_streams: Mapping[str, Sequence[Any]]
                    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What :func:`critical_path` reads of each instruction, for a whole program at once.

    Args:
        groups: the program's instructions grouped by opcode, ``(spec, gi, C)`` as
            :func:`archsim.npu.tables.codes_by_opcode` yields them for ``program_streams``'
            instructions in order (``gi`` global indices, ``C[n, fields]`` operand codes).
        program_streams: ``{stream: [instruction, ...]}`` (only the names and lengths are read).

    Returns:
        ``{stream: (mnemonics, sems)}``: per instruction its mnemonic (object array) and, for a
        WAIT or SIGNAL, its semaphore (int64; -1 elsewhere).
    """
    sizes = [len(v) for v in program_streams.values()]
    mn = np.empty(sum(sizes), dtype=object)
    sem = np.full(len(mn), -1, np.int64)
    for spec, gi, C in groups:
        mn[gi] = spec.mnemonic
        if spec.mnemonic in ("WAIT", "SIGNAL"):
            sem[gi] = C[:, spec.field_names.index("sem")]     # an integer field: code = value
    ends = np.cumsum(sizes).tolist()
    return {name: (mn[e - n:e], sem[e - n:e])
            for name, n, e in zip(program_streams, sizes, ends)}


def critical_path(program_streams: Mapping[str, Sequence[Any]],
                  times: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                  sync: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                  operands: Mapping[str, tuple[Sequence[str], Sequence[int]]] | None = None
                  ) -> list[tuple[float, float, str]]:
    """The critical path of one executed program as segments (module docstring).

    Args:
        program_streams: ``{stream: [instruction, ...]}`` (each with ``.mnemonic`` and, for
            WAIT/SIGNAL, ``["sem"]``), as :class:`isa.program.Program` holds them.
        times: ``{stream: (start, end)}`` of work instructions (NPU cycles, -1 = none),
            :attr:`archsim.npu.observe.InstructionTimes.times`.
        sync: the same for WAIT/SIGNAL, :attr:`archsim.npu.observe.InstructionTimes.sync`.
        operands: ``{stream: (mnemonics, sems)}`` of the instructions when known
            (:func:`stream_operands`); None reads them from ``program_streams``.

    Returns:
        ``[(t0, t1, label), ...]`` in time order, contiguous from 0 to the last completion
        (NPU cycles), ``label`` one of :data:`LABELS`. Empty for a program that did nothing.

    Raises:
        ValueError: the records contradict the program (a blocked WAIT with no SIGNAL of its
            semaphore at or before its release: a simulator bug).
    """
    streams: dict[str, _Stream] = {}
    fires: dict[int, list[tuple[float, str, int]]] = {}
    for name, instrs in program_streams.items():
        if name not in times:
            continue
        if operands is not None:
            mn, sems = operands[name]
        else:
            mn = [ins.mnemonic for ins in instrs]
            sems = [ins["sem"] if m in ("WAIT", "SIGNAL") else -1 for ins, m in zip(instrs, mn)]
        st = _Stream(name, mn, sems, times[name], sync.get(name, ([-1] * len(mn),) * 2))
        streams[name] = st
        for i in np.flatnonzero(st.kind == _SIGNAL).tolist():
            fires.setdefault(int(st.sem[i]), []).append((float(st.end[i]), name, i))
    fire_t: dict[int, list[float]] = {}
    for sem, lst in fires.items():
        lst.sort()
        fire_t[sem] = [f[0] for f in lst]
    # the instruction that completed last
    last: tuple[float, str, int] | None = None
    for name, st in streams.items():
        ok = np.flatnonzero((st.kind == _WORK) | (st.kind == _SIGNAL))
        if ok.size:
            i = int(ok[np.argmax(st.end[ok])])
            if last is None or st.end[i] > last[0]:
                last = (float(st.end[i]), name, i)
    if last is None or last[0] <= 0:
        return []
    segs: list[tuple[float, float, str]] = []

    def charge(a: float, b: float, label: str) -> None:
        if b > a:
            segs.append((a, b, label))

    t, name, i = last
    seen: set[tuple[str, int]] = set()
    steps = 2 * sum(len(x.kind) for x in streams.values()) + 2
    while True:
        steps -= 1
        if steps < 0:
            raise ValueError("critical path: the walk does not end (a simulator bug)")
        st = streams[name]
        k = st.kind[i]
        if k == _WORK:
            s0, e0 = float(st.start[i]), float(st.end[i])
            if t > e0:                    # not reached by the walk's rules; kept contiguous
                charge(e0, t, "waits")
                t = e0
            charge(s0, t, st.res[i])
            t, label = min(t, s0), st.res[i]
        elif k == _WAIT and st.end[i] > st.start[i]:
            sem = int(st.sem[i])
            j = bisect.bisect_right(fire_t.get(sem, []), float(st.end[i])) - 1
            # several SIGNALs of one semaphore may fire in the cycle of the release: take the
            # latest not yet on the path (one on it already fired after this WAIT, causally)
            while j >= 0 and (fires[sem][j][1], fires[sem][j][2]) in seen:
                j -= 1
            if j < 0:
                raise ValueError(f"critical path: WAIT {name}[{i}] on semaphore {sem} passed "
                                 f"at {st.end[i]:.0f} with no SIGNAL fired by then "
                                 "(a simulator bug)")
            ft, name, i = fires[sem][j]
            seen.add((name, i))
            charge(ft, t, "waits")
            t = ft
            continue
        elif k == _SIGNAL and st.end[i] > st.start[i] and st.best[i] >= 0:
            i = int(st.best[i])           # the earlier work that completed last
            t = min(t, float(st.end[i]))
            continue
        else:                             # a WAIT/SIGNAL that did not hold the stream
            t = min(t, float(st.start[i]))
            label = "waits"
        # the instruction before this one in the stream; a SIGNAL never holds the stream (it
        # fires later, by itself), and one issued earlier may have started later (another
        # array): neither is what this instruction waited for
        j = int(st.prev[i])
        while j >= 0 and (st.kind[j] == _SIGNAL or st.start[j] > t):
            j = int(st.prev[j])
        if j < 0:
            charge(0.0, t, "waits" if k != _WORK else label)
            break
        e = float(st.end[j])              # a work instruction's end, a WAIT's release
        if e <= t:
            charge(e, t, label)           # queued for its unit after the previous finished
            t = e
        i = j
    segs.reverse()
    return segs


def path_shares(segments: Sequence[tuple[float, float, str]],
                intervals: Iterable[tuple[str, float, float]]) -> dict[str, dict[str, float]]:
    """Critical-path cycles per label inside each stage interval.

    Args:
        segments: :func:`critical_path`'s output.
        intervals: ``(stage name, t0, t1)`` (NPU cycles); several intervals of one name add up.

    Returns:
        ``{stage: {label: cycles}}`` (labels with zero cycles left out), in first-appearance
        order of the stages.
    """
    if not segments:
        return {}
    a = np.array([s[0] for s in segments])
    b = np.array([s[1] for s in segments])
    lab = np.array([LABELS.index(s[2]) for s in segments])
    out: dict[str, dict[str, float]] = {}
    for name, t0, t1 in intervals:
        if t1 <= t0:
            continue
        ov = np.clip(np.minimum(b, t1) - np.maximum(a, t0), 0, None)
        row = out.setdefault(name, {})
        for li in np.flatnonzero(np.bincount(lab, weights=ov, minlength=len(LABELS)) > 0):
            row[LABELS[li]] = row.get(LABELS[li], 0.0) + float(
                ov[lab == li].sum())
    return out


def path_totals(segments: Sequence[tuple[float, float, str]]) -> dict[str, float]:
    """Critical-path cycles per label over the whole path (labels with zero left out)."""
    out: dict[str, float] = {}
    for a, b, lab in segments:
        out[lab] = out.get(lab, 0.0) + (b - a)
    return out


def annotate_stages(stage_resources: dict[str, dict[str, Any]],
                    segments: Sequence[tuple[float, float, str]],
                    intervals: Iterable[tuple[str, float, float]]) -> None:
    """Add the critical path to an occupancy account, in place.

    Each stage of ``stage_resources`` (:func:`archsim.system.resources.stage_resource_account`)
    gains ``critical``: ``{label: share of the stage's cycles on the critical path}``, and its
    ``bound`` becomes the label with the largest critical share (the resource that set the
    stage's length); stages the path does not cross keep the occupancy bound.
    """
    shares = path_shares(segments, intervals)
    for name, row in stage_resources.items():
        c = shares.get(name)
        if not c or row["cycles"] <= 0:
            continue
        row["critical"] = {k: v / row["cycles"] for k, v in c.items()}
        row["bound"] = max(c, key=c.get)


__all__ = ["LABELS", "critical_path", "path_shares", "path_totals", "annotate_stages"]
