"""Memory trace files: the DRAMsim3 and Ramulator formats.

* ``dramsim3`` (DRAMsim3 ``TraceBasedCPU``): ``0xADDR READ|WRITE CYCLE`` per line; the request
  enters the controller at CYCLE (memory-clock cycles). Lines are replayed in cycle order
  (stable sort).
* ``ramulator`` (Ramulator's DRAM trace mode): ``0xADDR R|W`` per line, optionally preceded by
  a bubble count ``N 0xADDR R|W``: the request arrives N + 1 cycles after the previous one
  (without N, one request per cycle, as Ramulator's trace driver offers them). Ramulator 2's
  load/store form ``LD|ST 0xADDR`` is accepted too.

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


def parse_trace_text(text: str, fmt: str | None = None, source: str = "<trace>",
                     capacity_bytes: int | None = None):
    """Parse trace text into arrays.

    Args:
        text: the file contents.
        fmt: ``dramsim3``, ``ramulator`` or None (detected from the first request line).
        source: file name used in error messages.
        capacity_bytes: when given, an address at or beyond it raises SimulationError.

    Returns:
        ``(addrs, is_write, arrivals)``: int64 / bool / int64 arrays of shape (N,), ordered by
        arrival cycle. An empty trace gives empty arrays.

    Raises:
        ArchsimError naming ``source`` and the line for a malformed line or unknown format.
    """
    if fmt is not None and fmt not in FORMATS:
        raise ArchsimError(f"unknown trace format '{fmt}'; choose one of {', '.join(FORMATS)}")
    addrs: list[int] = []
    writes: list[bool] = []
    cycles: list[int] = []
    lines_no: list[int] = []
    t = -1
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
    a = np.asarray(addrs, np.int64)
    w_ = np.asarray(writes, np.bool_)
    c = np.asarray(cycles, np.int64)
    order = np.argsort(c, kind="stable")
    return a[order], w_[order], c[order]


def load_trace(path: str | Path, fmt: str | None = None, capacity_bytes: int | None = None):
    """Read a trace file; see :func:`parse_trace_text`. Raises ArchsimError when unreadable."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ArchsimError(f"{path}: cannot read trace: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ArchsimError(f"{path}: not a text trace file") from None
    return parse_trace_text(text, fmt, str(path), capacity_bytes)


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


__all__ = ["FORMATS", "parse_trace_text", "load_trace", "format_trace", "detect_format"]
