"""Progress notes from the simulator core to whoever listens.

The core does no I/O and prints nothing; a few of its steps take long enough that a user must
be told they are happening (the one-time compilation of the numba kernels,
:mod:`archsim.npu.compiled`). It calls :func:`note`; the CLI registers a listener that prints
each note on stderr (:func:`archsim.cli.main`). Without a listener a note goes nowhere.
"""
from __future__ import annotations

from typing import Callable

_LISTENERS: list[Callable[[str], None]] = []


def listen(fn: Callable[[str], None]) -> None:
    """Call ``fn(message)`` for every later :func:`note` (once per distinct ``fn``)."""
    if fn not in _LISTENERS:
        _LISTENERS.append(fn)


def note(message: str) -> None:
    """Tell every listener ``message`` (one line, no trailing newline)."""
    for fn in list(_LISTENERS):
        fn(message)


__all__ = ["listen", "note"]
