"""Observers of the NPU executor: who receives each instruction's start and end.

:class:`archsim.npu.executor.Executor` takes an optional ``observer`` and calls it once for
every instruction that does work, and once for every WAIT and SIGNAL, with
``(stream, index, unit, start, end)``:

* ``stream`` (str): the stream's name (``sa0``, ``dma1``, ``pim07``, ``link``...);
* ``index`` (int): the instruction's index in that stream;
* ``unit`` (int): the hardware unit: the systolic array (after ``array=any`` is resolved), the
  vector unit, the DMA queue (the stream's number), the PIM channel, 0 for the link;
  :data:`SYNC_UNIT` (-1) for WAIT and SIGNAL;
* ``start``, ``end`` (int): NPU cycles, ``start <= end``. SA: the tile's start and
  ``H + W - 2 + max(m, 4)`` later, a weight preload's ``H`` cycles; VU: the op's start and end;
  DMA: from the cycle the transfer is issued (its set-up included) to the completion of its last
  memory request; PIM: from submission to the memory's completion of the command; link: the
  occupation of the link stream. WAIT: the cycle the stream reached it and the cycle its
  semaphore let it pass (equal when the count was already there); SIGNAL: the cycle the stream
  reached it and the cycle it fired (later when it waits for earlier work of its stream).

NOP and END are not reported. SA and VU times are closed form, so they are reported when the
instruction issues; DMA, PIM and link instructions when they complete; WAIT when released and
SIGNAL when fired. Observing changes nothing simulated (``tests/test_npu_observer.py``).
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from archsim.npu.loader import LoadedProgram

#: The ``unit`` of a WAIT or SIGNAL report (no hardware unit: a synchronisation).
SYNC_UNIT = -1


class InstructionObserver(Protocol):
    """What the executor calls per instruction (module docstring)."""

    def __call__(self, stream: str, index: int, unit: int, start: int, end: int) -> None:
        ...


class InstructionTimes:
    """Observer that keeps every instruction's start and end.

    Args:
        program: the loaded program the executor runs (names and lengths of its streams).

    ``times[stream]`` is a pair of int64 arrays ``(start, end)`` of the stream's length (NPU
    cycles; -1 for instructions that do no work or were not reached; arrays, not lists of
    Python integers: a GPT3-175B window has ~10^6 instructions); ``sync[stream]`` the same for
    WAIT (reached, passed) and SIGNAL (reached, fired), -1 elsewhere.
    """

    def __init__(self, program: LoadedProgram) -> None:
        def unset(n: int) -> tuple[np.ndarray, np.ndarray]:
            return np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        self.times: dict[str, tuple[np.ndarray, np.ndarray]] = {
            ls.name: unset(len(ls.ops)) for ls in program.streams}
        self.sync: dict[str, tuple[np.ndarray, np.ndarray]] = {
            ls.name: unset(len(ls.ops)) for ls in program.streams}

    def __call__(self, stream: str, index: int, unit: int, start: int, end: int) -> None:
        st, en = (self.sync if unit == SYNC_UNIT else self.times)[stream]
        st[index] = start
        en[index] = end

    def record_many(self, stream: str, index, unit, start, end) -> None:
        """The calls of many instructions of ``stream`` at once (int64 arrays of equal
        length: index, unit, start, end), as the compiled executor reports them; the same
        times as one call each (WAIT/SIGNAL, ``unit == SYNC_UNIT``, into ``sync``)."""
        sync = np.asarray(unit) == SYNC_UNIT
        for keep, sel in ((self.times, ~sync), (self.sync, sync)):
            if sel.any():
                st, en = keep[stream]
                st[index[sel]] = start[sel]
                en[index[sel]] = end[sel]


__all__ = ["SYNC_UNIT", "InstructionObserver", "InstructionTimes"]
