"""Chrome / Perfetto trace writer for simulated timelines.

Input: busy intervals ``(track, name, start, end, args)`` (or
:class:`archsim.results.TraceEvent`) and the clock of their time numbers. Output: the Chrome
"Trace Event Format" JSON object (``{"traceEvents": [...], "otherData": {...}}``) that
https://ui.perfetto.dev and ``chrome://tracing`` open directly.

Tracks: ``track`` is ``"<process>/<thread>"``; each distinct process (engine class: ``npu``,
``dma``, ``pim``, ``gpu``, ...) becomes a trace process (``pid``), each thread (``array0``,
``vector0``, ``dma12``, ``ch07``, ...) a trace thread (``tid``) named by ``"M"`` metadata events.
A track without ``/`` is a thread of process ``"device"``. Every interval is a complete event
(``"ph": "X"``) with ``ts`` and ``dur`` in microseconds (``ts = start / clock_mhz``), rounded to
whole nanoseconds so that what touches stays touching.

Nesting: the format (and Perfetto, which builds a slice stack per thread) needs the complete
events of one thread to be disjoint or properly nested. Busy intervals of one unit can overlap
without nesting (a DMA stream keeps several transfers in flight), and a nesting would claim a
caller/callee relation that does not exist: so the intervals of a track that overlap are put on
extra rows of that unit — threads ``dma12``, ``dma12 (2)``, ``dma12 (3)``, ... (each interval on
the first row free at its start) — and no thread holds two overlapping events.
:func:`validate_chrome_trace` checks the rule.

Reference: "Trace Event Format", Google, https://docs.google.com/document/d/
1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU (complete events, metadata events).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from archsim.errors import ArchsimError
from archsim.results import TraceEvent

EventLike = Union[TraceEvent, Sequence[Any]]

#: Order of the engine classes (processes) in the viewer, top to bottom.
PROCESS_ORDER = ("npu", "dma", "vector", "pim", "hbm", "gpu", "link", "device")


def as_trace_event(e: EventLike, i: int = 0) -> TraceEvent:
    """Normalise a tuple ``(track, name, start, end[, args])`` or a TraceEvent.

    Raises:
        ArchsimError: wrong number of fields, or the interval ends before it starts (the
            message names event ``i``).
    """
    if isinstance(e, TraceEvent):
        ev = e
    else:
        if len(e) not in (4, 5):
            raise ArchsimError(f"trace event {i}: expected (track, name, start_cycle, "
                               f"end_cycle[, args]), got {len(e)} fields")
        ev = TraceEvent(str(e[0]), str(e[1]), float(e[2]), float(e[3]),
                        e[4] if len(e) == 5 else None)
    if ev.end_cycle < ev.start_cycle:
        raise ArchsimError(f"trace event {i} ({ev.track} {ev.name!r}): end_cycle "
                           f"{ev.end_cycle} < start_cycle {ev.start_cycle}")
    return ev


def split_track(track: str) -> tuple[str, str]:
    """``"npu/array3"`` → ``("npu", "array3")``; a track without ``/`` → ``("device", track)``."""
    if "/" in track:
        proc, _, thread = track.partition("/")
        return proc or "device", thread or proc
    return "device", track


def engine_class(track: str) -> str:
    """Engine class of a track, for utilisation over time: the thread name without its index
    for NPU-side units (``npu/array3`` → ``array``, ``npu/vector0`` → ``vector``, ``npu/dma`` →
    ``dma``); the process name for per-channel or whole-device tracks (``pim/ch07`` → ``pim``,
    ``gpu/stream0`` → ``gpu``)."""
    proc, thread = split_track(track)
    if proc in ("npu", "device"):
        m = re.match(r"[A-Za-z_]+", thread)
        return (m.group(0).rstrip("_") if m else thread) or proc
    return proc


def _natural_key(s: str) -> tuple[Any, ...]:
    """Sort ``array2`` before ``array10``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


#: Units of the time numbers of the events: ``cycle`` (of a clock of ``clock_mhz``) or ``us``.
TIME_UNITS = ("cycle", "us")


def _lanes(spans: list[tuple[int, int]]) -> list[int]:
    """Row of each interval ``(start_ns, end_ns)`` (given sorted by start): the lowest row whose
    last interval ends at or before its start (greedy interval partitioning: as many rows as
    the most intervals in flight at once)."""
    import heapq

    busy: list[tuple[int, int]] = []     # (end of the row's last interval, row)
    free: list[int] = []                 # rows whose last interval has ended
    out = []
    for start, end in spans:
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        row = heapq.heappop(free) if free else len(busy)
        heapq.heappush(busy, (end, row))
        out.append(row)
    return out


def chrome_trace(events: Iterable[EventLike], clock_mhz: float,
                 metadata: Mapping[str, Any] | None = None,
                 time_unit: str = "cycle") -> dict[str, Any]:
    """Build the Chrome trace object of ``events``.

    Args:
        events: busy intervals; time numbers in cycles of a ``clock_mhz`` MHz clock (or in µs
            with ``time_unit="us"``, then ``clock_mhz`` must be 1).
        clock_mhz: clock of the cycle numbers (1000 → one cycle is one nanosecond).
        metadata: put under ``"otherData"`` (e.g. system, model, batch).
        time_unit: ``cycle`` or ``us``; names the event args (``start_cycle``/``end_cycle`` or
            ``start_us``/``end_us``) and the ``otherData`` entry (``clock_mhz`` or
            ``time_unit``).

    Returns:
        ``{"traceEvents": [...], "otherData": {...}}``: metadata events (``ph="M"``:
        process_name, process_sort_index, thread_name, thread_sort_index) then one complete
        event per interval (``ph="X"``, ``ts``/``dur`` in µs rounded to whole ns, ``pid``/``tid``
        integers, ``cat`` = process name, ``args`` including the interval's time numbers);
        overlapping intervals of a track on extra rows (module docstring).

    Raises:
        ArchsimError: a non-positive clock, an unknown time unit, a malformed event, or one
            that ends before it starts (the message gives its index).
    """
    if not clock_mhz or clock_mhz <= 0:
        raise ArchsimError(f"trace clock must be > 0 MHz, got {clock_mhz!r}")
    if time_unit not in TIME_UNITS or (time_unit == "us" and clock_mhz != 1.0):
        raise ArchsimError(f"trace time unit {time_unit!r}: one of {list(TIME_UNITS)} "
                           "('us' with clock_mhz = 1)")
    evs = [as_trace_event(e, i) for i, e in enumerate(events)]
    ns_per_unit = 1000.0 / clock_mhz
    timed = sorted(((round(e.start_cycle * ns_per_unit), round(e.end_cycle * ns_per_unit), e)
                    for e in evs), key=lambda t: (t[0], t[1]))
    by_track: dict[tuple[str, str], list[tuple[int, int, TraceEvent]]] = {}
    for t in timed:
        by_track.setdefault(split_track(t[2].track), []).append(t)
    rows: dict[int, int] = {}            # id(event) -> row of its track
    n_rows: dict[tuple[str, str], int] = {}
    for key, lst in by_track.items():
        lanes = _lanes([(a, b) for a, b, _ in lst])
        for (_, _, e), r in zip(lst, lanes):
            rows[id(e)] = r
        n_rows[key] = max(lanes) + 1
    tracks = sorted(by_track, key=lambda pt: (PROCESS_ORDER.index(pt[0]) if pt[0] in
                                              PROCESS_ORDER else len(PROCESS_ORDER), pt[0],
                                              _natural_key(pt[1])))
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str, int], int] = {}
    out: list[dict[str, Any]] = []
    for proc, thread in tracks:
        if proc not in pids:
            pids[proc] = len(pids) + 1
            out.append({"ph": "M", "name": "process_name", "pid": pids[proc], "tid": 0,
                        "args": {"name": proc}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pids[proc], "tid": 0,
                        "args": {"sort_index": pids[proc]}})
        for row in range(n_rows[(proc, thread)]):
            tid = sum(1 for k in tids if k[0] == proc) + 1
            tids[(proc, thread, row)] = tid
            out.append({"ph": "M", "name": "thread_name", "pid": pids[proc], "tid": tid,
                        "args": {"name": thread if row == 0 else f"{thread} ({row + 1})"}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pids[proc], "tid": tid,
                        "args": {"sort_index": tid}})
    u = time_unit
    for start_ns, end_ns, e in timed:
        proc, thread = split_track(e.track)
        args: dict[str, Any] = {f"start_{u}": e.start_cycle, f"end_{u}": e.end_cycle}
        if e.args:
            args.update({str(k): v for k, v in e.args.items()})
        out.append({"ph": "X", "name": e.name, "cat": proc, "pid": pids[proc],
                    "tid": tids[(proc, thread, rows[id(e)])], "ts": start_ns / 1000.0,
                    "dur": (end_ns - start_ns) / 1000.0, "args": args})
    other = dict(metadata or {})
    other.update({"clock_mhz": clock_mhz} if u == "cycle" else {"time_unit": "us"})
    return {"traceEvents": out, "otherData": other}


def write_chrome_trace(events: Iterable[EventLike], path: str | Path, clock_mhz: float,
                       metadata: Mapping[str, Any] | None = None,
                       time_unit: str = "cycle") -> Path:
    """Write :func:`chrome_trace` of ``events`` as JSON to ``path`` (parents created).

    Raises:
        ArchsimError: as :func:`chrome_trace`, or when the file cannot be written.
    """
    obj = chrome_trace(events, clock_mhz, metadata, time_unit)
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(obj, separators=(",", ":"), default=str))
    except OSError as exc:
        raise ArchsimError(f"{p}: cannot write trace ({exc.strerror})") from None
    return p


def validate_chrome_trace(obj: Mapping[str, Any]) -> list[str]:
    """Check a trace object against the parts of the Trace Event Format this writer uses.

    Returns a list of problems (empty when valid): a missing ``traceEvents`` list, events
    without ``ph``/``pid``/``tid``/``name``, complete events without numeric non-negative
    ``ts``/``dur``, events on a pid/tid that no metadata event named, and complete events of one
    thread that overlap without nesting (times compared in whole nanoseconds, as Perfetto
    imports them).
    """
    problems: list[str] = []
    evs = obj.get("traceEvents") if isinstance(obj, Mapping) else None
    if not isinstance(evs, list):
        return ["'traceEvents' is missing or not a list"]
    named_p, named_t = set(), set()
    for i, e in enumerate(evs):
        for k in ("ph", "pid", "tid", "name"):
            if k not in e:
                problems.append(f"event {i}: missing '{k}'")
        if e.get("ph") == "M":
            if e.get("name") == "process_name":
                named_p.add(e.get("pid"))
            if e.get("name") == "thread_name":
                named_t.add((e.get("pid"), e.get("tid")))
    threads: dict[tuple[Any, Any], list[tuple[int, int, int]]] = {}
    for i, e in enumerate(evs):
        if e.get("ph") != "X":
            continue
        ok = True
        for k in ("ts", "dur"):
            v = e.get(k)
            if not isinstance(v, (int, float)) or v < 0:
                problems.append(f"event {i}: '{k}' = {v!r} is not a number >= 0")
                ok = False
        if e.get("pid") not in named_p:
            problems.append(f"event {i}: pid {e.get('pid')} has no process_name")
        if (e.get("pid"), e.get("tid")) not in named_t:
            problems.append(f"event {i}: tid {e.get('tid')} has no thread_name")
        if ok:
            ts = round(e["ts"] * 1000)
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(
                (ts, ts + round(e["dur"] * 1000), i))
    problems += nesting_problems(threads)
    return problems


def nesting_problems(threads: Mapping[Any, list[tuple[int, int, int]]],
                     limit: int = 20) -> list[str]:
    """Complete events of one thread that overlap without nesting.

    Args:
        threads: per thread key, its events as ``(start_ns, end_ns, index)``.
        limit: most problems reported.

    Returns:
        ``event J on thread K ([s, e) ns) overlaps event I ([s, e) ns) without nesting``.
    """
    out: list[str] = []
    for key, lst in threads.items():
        stack: list[tuple[int, int, int]] = []
        for s, e, i in sorted(lst, key=lambda t: (t[0], -t[1], t[2])):
            while stack and stack[-1][1] <= s:
                stack.pop()
            if stack and e > stack[-1][1]:
                ps, pe, pi = stack[-1]
                out.append(f"event {i} on thread {key} ([{s}, {e}) ns) overlaps event {pi} "
                           f"([{ps}, {pe}) ns) without nesting")
                if len(out) >= limit:
                    return out
                continue
            stack.append((s, e, i))
    return out


__all__ = ["chrome_trace", "write_chrome_trace", "validate_chrome_trace", "nesting_problems",
           "TIME_UNITS", "split_track",
           "as_trace_event", "engine_class", "PROCESS_ORDER"]
