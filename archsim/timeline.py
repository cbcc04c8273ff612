"""Chrome / Perfetto trace writer for simulated timelines.

Input: busy intervals ``(track, name, start_cycle, end_cycle, args)`` (or
:class:`archsim.results.TraceEvent`) and the clock of the cycle numbers. Output: the Chrome
"Trace Event Format" JSON object (``{"traceEvents": [...], "displayTimeUnit": "ns"}``) that
``chrome://tracing`` and https://ui.perfetto.dev open directly.

Tracks: ``track`` is ``"<process>/<thread>"``; each distinct process (engine class: ``npu``,
``pim``, ``gpu``, ...) becomes a trace process (``pid``), each thread (``array0``, ``vector0``,
``dma``, ``ch07``, ...) a trace thread (``tid``) named by ``"M"`` metadata events. A track
without ``/`` is a thread of process ``"device"``. Every interval is a complete event
(``"ph": "X"``) with ``ts`` and ``dur`` in microseconds: ``ts = start_cycle / clock_mhz``.

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


def chrome_trace(events: Iterable[EventLike], clock_mhz: float,
                 metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Build the Chrome trace object of ``events``.

    Args:
        events: busy intervals; cycle numbers on a clock of ``clock_mhz`` MHz.
        clock_mhz: clock of the cycle numbers (1000 → one cycle is one nanosecond).
        metadata: put under ``"otherData"`` (e.g. system, model, batch).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``: metadata events
        (``ph="M"``: process_name, process_sort_index, thread_name, thread_sort_index) then one
        complete event per interval (``ph="X"``, ``ts``/``dur`` in µs, ``pid``/``tid`` integers,
        ``cat`` = process name, ``args`` including the cycle numbers).

    Raises:
        ArchsimError: a non-positive clock, a malformed event, or one that ends before it starts
            (the message gives its index).
    """
    if not clock_mhz or clock_mhz <= 0:
        raise ArchsimError(f"trace clock must be > 0 MHz, got {clock_mhz!r}")
    evs = [as_trace_event(e, i) for i, e in enumerate(events)]
    tracks = sorted({split_track(e.track) for e in evs},
                    key=lambda pt: (PROCESS_ORDER.index(pt[0]) if pt[0] in PROCESS_ORDER
                                    else len(PROCESS_ORDER), pt[0], _natural_key(pt[1])))
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    out: list[dict[str, Any]] = []
    for proc, thread in tracks:
        if proc not in pids:
            pids[proc] = len(pids) + 1
            out.append({"ph": "M", "name": "process_name", "pid": pids[proc], "tid": 0,
                        "args": {"name": proc}})
            out.append({"ph": "M", "name": "process_sort_index", "pid": pids[proc], "tid": 0,
                        "args": {"sort_index": pids[proc]}})
        tid = sum(1 for k in tids if k[0] == proc) + 1
        tids[(proc, thread)] = tid
        out.append({"ph": "M", "name": "thread_name", "pid": pids[proc], "tid": tid,
                    "args": {"name": thread}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pids[proc], "tid": tid,
                    "args": {"sort_index": tid}})
    us_per_cycle = 1.0 / clock_mhz
    for e in sorted(evs, key=lambda e: (e.start_cycle, e.end_cycle)):
        proc, thread = split_track(e.track)
        args = {"start_cycle": e.start_cycle, "end_cycle": e.end_cycle}
        if e.args:
            args.update({str(k): v for k, v in e.args.items()})
        out.append({"ph": "X", "name": e.name, "cat": proc, "pid": pids[proc],
                    "tid": tids[(proc, thread)], "ts": e.start_cycle * us_per_cycle,
                    "dur": (e.end_cycle - e.start_cycle) * us_per_cycle, "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": dict(metadata or {}, clock_mhz=clock_mhz)}


def write_chrome_trace(events: Iterable[EventLike], path: str | Path, clock_mhz: float,
                       metadata: Mapping[str, Any] | None = None) -> Path:
    """Write :func:`chrome_trace` of ``events`` as JSON to ``path`` (parents created).

    Raises:
        ArchsimError: as :func:`chrome_trace`, or when the file cannot be written.
    """
    obj = chrome_trace(events, clock_mhz, metadata)
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
    ``ts``/``dur``, events on a pid/tid that no metadata event named.
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
    for i, e in enumerate(evs):
        if e.get("ph") != "X":
            continue
        for k in ("ts", "dur"):
            v = e.get(k)
            if not isinstance(v, (int, float)) or v < 0:
                problems.append(f"event {i}: '{k}' = {v!r} is not a number >= 0")
        if e.get("pid") not in named_p:
            problems.append(f"event {i}: pid {e.get('pid')} has no process_name")
        if (e.get("pid"), e.get("tid")) not in named_t:
            problems.append(f"event {i}: tid {e.get('tid')} has no thread_name")
    return problems


__all__ = ["chrome_trace", "write_chrome_trace", "validate_chrome_trace", "split_track",
           "as_trace_event", "engine_class", "PROCESS_ORDER"]
