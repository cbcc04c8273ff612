"""Memory trace files: the DRAMsim3 and Ramulator formats.

* ``dramsim3`` (DRAMsim3 ``TraceBasedCPU``): ``0xADDR READ|WRITE CYCLE`` per line; the request
  enters the controller at CYCLE (memory-clock cycles). DRAMsim3 reads the lines in file order,
  so the cycles must not decrease: a line whose cycle is earlier than the previous line's is an
  error naming both lines (sort the file by its third column).
* ``ramulator`` (Ramulator's DRAM trace mode): ``0xADDR R|W`` per line, optionally preceded by
  a bubble count ``N 0xADDR R|W``: the request arrives N + 1 cycles after the previous one
  (without N, one request per cycle, as Ramulator's trace driver offers them). Ramulator 2's
  load/store form ``LD|ST 0xADDR`` is accepted too. Such a trace carries no arrival cycles: at
  most one request (one burst) arrives per cycle, which caps the bandwidth far below the
  device's peak; :func:`arrival_rate_note` says so.

A trace without any request line is an error (there is nothing to measure).

Every request moves one burst (``memory.org.burst_bytes``, 64 B on HBM2), the transaction
size of both simulators. Addresses may be hex (``0x``) or decimal. ``#`` starts a comment.
Errors name the file and the 1-based line number (:class:`archsim.errors.ArchsimError`); an
address at or beyond the capacity is a :class:`archsim.errors.SimulationError` with the line.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from archsim.errors import ArchsimError, SimulationError

FORMATS = ("dramsim3", "ramulator")


def _int(tok: str) -> int:
    return int(tok, 16) if tok.lower().startswith("0x") else int(tok)


def detect_format(line: str) -> str | None:
    """Guess the format of one non-comment trace line (None when it fits neither)."""
    parts = line.split()
    if len(parts) == 3 and parts[1].upper() in ("READ", "WRITE"):
        return "dramsim3"
    if parts and (parts[-1].upper() in ("R", "W") or parts[0].upper() in ("LD", "ST")):
        return "ramulator"
    return None


def arrival_rate_note(fmt: str, burst_bytes: int, peak_bytes_per_cycle: float,
                      source: str = "the trace") -> str | None:
    """The note a Ramulator-format trace needs (None for other formats): its requests arrive
    at most one per memory cycle, so the run cannot move more than ``burst_bytes`` per cycle
    (``peak_bytes_per_cycle`` is the device's external peak, all channels)."""
    if fmt != "ramulator":
        return None
    return (f"{source} is in Ramulator format (no arrival cycles): requests arrive one per "
            f"memory cycle at most, so at most {burst_bytes} B/cycle reach the controllers, "
            f"{burst_bytes / peak_bytes_per_cycle:.1%} of the device's peak of "
            f"{peak_bytes_per_cycle:g} B/cycle; the arrival rate, not the memory, limits this "
            "run's bandwidth (a DRAMsim3 trace '0xADDR READ|WRITE CYCLE' can offer several "
            "requests per cycle)")


def detect_trace_format(text: str) -> str | None:
    """Format of the first request line of ``text`` (None when there is none)."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            return detect_format(line)
    return None


def parse_trace_text(text: str, fmt: str | None = None, source: str = "<trace>",
                     capacity_bytes: int | None = None):
    """Parse trace text into arrays.

    Args:
        text: the file contents.
        fmt: ``dramsim3``, ``ramulator`` or None (detected from the first request line).
        source: file name used in error messages.
        capacity_bytes: when given, an address at or beyond it raises SimulationError.

    Returns:
        ``(addrs, is_write, arrivals)``: int64 / bool / int64 arrays of shape (N,) in file
        order, which is arrival order (arrivals non-decreasing).

    Raises:
        ArchsimError naming ``source`` and the line for a malformed line, an unknown format,
        a DRAMsim3 cycle earlier than the previous line's, or no request at all.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ArchsimError(f"unknown trace format '{fmt}'; choose one of {', '.join(FORMATS)}")
    addrs: list[int] = []
    writes: list[bool] = []
    cycles: list[int] = []
    lines_no: list[int] = []
    t = -1
    prev_cycle, prev_line = -1, 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if fmt is None:
            fmt = detect_format(line)
            if fmt is None:
                raise ArchsimError(f"{source}:{lineno}: cannot tell the trace format from "
                                   f"'{line}'; expected '0xADDR READ|WRITE CYCLE' (dramsim3) "
                                   "or '[N] 0xADDR R|W' (ramulator)")
        parts = line.split()
        try:
            if fmt == "dramsim3":
                if len(parts) != 3:
                    raise ValueError("expected 3 fields: 0xADDR READ|WRITE CYCLE")
                op = parts[1].upper()
                if op not in ("READ", "WRITE"):
                    raise ValueError(f"operation '{parts[1]}' is not READ or WRITE")
                addr, w, cyc = _int(parts[0]), op == "WRITE", _int(parts[2])
                if cyc < 0:
                    raise ValueError(f"negative cycle {cyc}")
                if cyc < prev_cycle:
                    raise ArchsimError(
                        f"{source}:{lineno}: cycle {cyc} is earlier than cycle {prev_cycle} of "
                        f"line {prev_line}; DRAMsim3 reads a trace in file order, so its "
                        "cycles must not decrease (sort the file by its third column)")
                prev_cycle, prev_line = cyc, lineno
            else:
                if len(parts) == 2 and parts[0].upper() in ("LD", "ST"):
                    addr, w, bubbles = _int(parts[1]), parts[0].upper() == "ST", 0
                elif len(parts) in (2, 3):
                    op = parts[-1].upper()
                    if op not in ("R", "W"):
                        raise ValueError(f"operation '{parts[-1]}' is not R or W")
                    addr, w = _int(parts[-2]), op == "W"
                    bubbles = _int(parts[0]) if len(parts) == 3 else 0
                    if bubbles < 0:
                        raise ValueError(f"negative bubble count {bubbles}")
                else:
                    raise ValueError("expected '[N] 0xADDR R|W' or 'LD|ST 0xADDR'")
                t = t + 1 + bubbles
                cyc = t
            if addr < 0:
                raise ValueError(f"negative address {addr}")
        except ValueError as exc:
            raise ArchsimError(f"{source}:{lineno}: malformed {fmt} trace line '{line}': "
                               f"{exc}") from None
        if capacity_bytes is not None and addr >= capacity_bytes:
            raise SimulationError(f"{source}:{lineno}: address {addr:#x} is beyond the memory "
                                  f"capacity {capacity_bytes:#x} bytes")
        addrs.append(addr)
        writes.append(w)
        cycles.append(cyc)
        lines_no.append(lineno)
    if not addrs:
        raise ArchsimError(f"{source}: no request in the trace (empty, or only comments); "
                           "expected lines '0xADDR READ|WRITE CYCLE' (dramsim3) or "
                           "'[N] 0xADDR R|W' (ramulator)")
    return (np.asarray(addrs, np.int64), np.asarray(writes, np.bool_),
            np.asarray(cycles, np.int64))


def read_trace_text(path: str | Path) -> str:
    """The text of a trace file. Raises ArchsimError when unreadable or not text."""
    from archsim.yamlfile import read_text_file

    return read_text_file(path, "memory trace", ArchsimError)


def load_trace(path: str | Path, fmt: str | None = None, capacity_bytes: int | None = None):
    """Read a trace file; see :func:`parse_trace_text`. Raises ArchsimError when unreadable."""
    return parse_trace_text(read_trace_text(path), fmt, str(path), capacity_bytes)


def format_trace(addrs, is_write, arrivals, fmt: str = "dramsim3") -> str:
    """Write arrays as trace text (inverse of :func:`parse_trace_text` for these formats)."""
    out = []
    prev = -1
    for a, w, c in zip(np.asarray(addrs).tolist(), np.asarray(is_write).tolist(),
                       np.asarray(arrivals).tolist()):
        if fmt == "dramsim3":
            out.append(f"{a:#x} {'WRITE' if w else 'READ'} {c}")
        else:
            out.append(f"{max(0, c - prev - 1)} {a:#x} {'W' if w else 'R'}")
            prev = max(c, prev + 1)
    return "\n".join(out) + ("\n" if out else "")


__all__ = ["FORMATS", "parse_trace_text", "load_trace", "format_trace", "detect_format",
           "detect_trace_format", "arrival_rate_note", "read_trace_text"]
