"""Adapters around the NPU timing executor for whole-system runs (no new timing rules).

:class:`TracingExecutor` is :class:`archsim.engine.Executor` plus two things the system simulator
needs and the executor does not offer yet:

* **Per-instruction times.** For every instruction that does work, its start and completion in
  NPU cycles, taken from the executor's own state at the moment it decides them (SA: the tile's
  start and ``H + W − 2 + max(m, 4)`` later, the weight preload's ``H`` cycles; VU: start and end
  of the op; DMA: from the cycle the transfer is issued to the completion of its last memory
  request; PIM: from submission to the memory's completion of the command). They give the
  per-stage and per-layer breakdown, the busy intervals of every unit and the timeline.
* **Timed collectives.** The compiler emits each tensor-parallel all-reduce as a ``NOP`` on its
  collective stream (``CompiledProgram.collectives``: stream, index, bytes, group). Here such a
  NOP occupies its stream for the ring all-reduce time of its bytes over the configured
  interconnect (:func:`archsim.gpu.ring_allreduce_time_s`, converted to NPU cycles and rounded
  up), starting when the stream reaches it (its WAITs satisfied); the SIGNALs after it fire when
  it ends. Everything else runs exactly as in the executor.

:func:`load_for_system` loads a program like :func:`archsim.npu.loader.load_program` but accepts
the synchronisation instructions (WAIT/SIGNAL/NOP/END) that the compiler puts in PIM streams
(the loader reads a ``channel`` operand of every instruction of a PIM stream, which SYNC
instructions do not have); every other check is the loader's own.

These adapters use the executor's internal state (``arrays``, ``vus``, ``_rec_counter``,
``pim_wait``...): they belong to the system simulator and are pinned by its tests.
"""
from __future__ import annotations

import math

import numpy as np

from archsim.engine import Executor
from archsim.errors import SimulationError
from archsim.npu import loader as _loader
from archsim.npu.timing import tile_latency_cycles
from isa.errors import IsaError
from isa.program import Program, stream_kind
from isa.spec import Engine


def load_for_system(program: Program, cfg) -> _loader.LoadedProgram:
    """Check and load ``program`` for ``cfg`` (see the module docstring).

    Raises:
        SimulationError: the first violation found by the loader's checks.
    """
    try:
        return _loader.load_program(program, cfg)
    except KeyError:
        pass                      # a SYNC instruction in a PIM stream: load below
    try:
        program.validate()
    except IsaError as exc:
        raise SimulationError(f"invalid program: {exc}") from None
    cap = cfg.npu.scratchpad.size_bytes
    if program.spad_size_bytes > cap:
        raise SimulationError(f"the program was compiled for a {program.spad_size_bytes}-byte "
                              f"scratchpad; this machine has {cap} bytes")
    streams = []
    footprint = 0
    for name, instrs in program.streams.items():
        kind, index = stream_kind(name)
        if kind is Engine.PIM and (index is None or index >= cfg.memory.org.channels
                                   or not cfg.system.has_pim):
            # let the loader produce its own message for these
            _loader.load_program(Program(streams={name: []}, data=list(program.data),
                                         spad_size_bytes=program.spad_size_bytes), cfg)
        s = _loader.LoadedStream(name, kind, index)
        for i, ins in enumerate(instrs):
            op = _loader.LoadedOp(ins.mnemonic, ins.operands(), i, ins)
            if not (kind is Engine.PIM and ins.spec.engine is Engine.SYNC):
                footprint = max(footprint, _loader._check_op(cfg, program, s, op))
            s.ops.append(op)
        streams.append(s)
    return _loader.LoadedProgram(program, streams, footprint)


class _PimTap:
    """MemoryPort proxy recording the completion cycle (memory clock) of PIM requests."""

    def __init__(self, inner, pim_ids: dict) -> None:
        self.inner = inner
        self.pim_ids = pim_ids
        self.done: dict[int, int] = {}
        self.submit = inner.submit
        self.submit_pim = inner.submit_pim
        self.can_accept = inner.can_accept
        self.next_event_cycle = inner.next_event_cycle
        if hasattr(inner, "submit_many"):
            self.submit_many = inner.submit_many

    def advance_to(self, cycle: int):
        out = self.inner.advance_to(cycle)
        if self.pim_ids:
            ids, done = self.pim_ids, self.done
            for c in out:
                if c.req_id in ids:
                    done[c.req_id] = c.cycle
        return out


class TracingExecutor(Executor):
    """The executor with per-instruction times and timed collectives (module docstring).

    Args:
        program, cfg, memory: as :class:`archsim.engine.Executor`.
        collective_cycles: ``{(stream, instruction index): NPU cycles}`` of the collective NOPs.
        **options: forwarded to the executor.

    After :meth:`run`, ``times[stream]`` is a pair of lists ``(start, end)`` (NPU cycles, -1 for
    instructions that do no work: WAIT, SIGNAL, END, untimed NOP).
    """

    def __init__(self, program, cfg, memory, collective_cycles: dict | None = None,
                 **options) -> None:
        self._pim_ids: dict[int, tuple[str, int, int]] = {}
        tap = _PimTap(memory, self._pim_ids)
        super().__init__(program, cfg, tap, **options)
        self.tap = tap
        self.coll = dict(collective_cycles or {})
        self._coll_start: dict[tuple[str, int], int] = {}
        self.times = {s.name: ([-1] * s.n, [-1] * s.n) for s in self.streams}
        self._recs_open: dict[int, tuple[str, int, int]] = {}
        self._H, self._W = cfg.npu.array_height, cfg.npu.array_width
        self.coll_streams = {name for name, _ in self.coll}

    # ---- systolic arrays and vector units
    def _sa_issue(self, s, op, now):
        ok = super()._sa_issue(s, op, now)
        if ok:
            a = op.ops["array"]
            arr = self.arrays[s.last_array if a >= len(self.arrays) else a]
            st, en = self.times[s.name]
            if op.mnemonic == "SA_LOADW":
                en[op.index] = arr.preload_free_at
                st[op.index] = arr.preload_free_at - self._H
            else:
                en[op.index] = arr.busy_end
                st[op.index] = arr.busy_end - tile_latency_cycles(self._H, self._W,
                                                                  op.ops["m"])
        return ok

    def _vu_issue(self, s, op, now):
        unit = self.vus[s.index or 0]
        before = unit.free_at
        ok = super()._vu_issue(s, op, now)
        if ok:
            st, en = self.times[s.name]
            st[op.index] = max(now, before)
            en[op.index] = unit.free_at
        return ok

    # ---- DMA
    def _dma_issue(self, s, op, now):
        n0 = self._rec_counter
        ok = super()._dma_issue(s, op, now)
        if self._rec_counter != n0:
            self._recs_open[self._rec_counter] = (s.name, op.index, now)
            rec = self.recs.get(self._rec_counter)
            if rec is None:               # an empty transfer completed at once
                self._close_rec(self._rec_counter, now)
        return ok

    def _close_rec(self, rec_id: int, now: int) -> None:
        info = self._recs_open.pop(rec_id, None)
        if info is not None:
            name, idx, t0 = info
            st, en = self.times[name]
            st[idx] = t0
            en[idx] = now

    def _dma_rec_done(self, rec, now):
        super()._dma_rec_done(rec, now)
        self._close_rec(rec.rec_id, now)

    # ---- PIM
    def _pim_issue(self, s, op, now):
        super()._pim_issue(s, op, now)
        rid = s.pim_rid
        if rid is not None and rid not in self._pim_ids:
            self._pim_ids[rid] = (s.name, op.index, now)

    def _handle_completions(self, now):
        super()._handle_completions(now)
        done = self.tap.done
        if done:
            for rid, cyc in done.items():
                name, idx, t0 = self._pim_ids.pop(rid)
                st, en = self.times[name]
                st[idx] = t0
                en[idx] = max(self._from_mem(cyc), t0)
            done.clear()

    # ---- collectives
    def _run_stream(self, s, now):
        if s.name not in self.coll_streams:
            return super()._run_stream(s, now)
        while s.pc < s.n:
            op = s.ops[s.pc]
            m = op.mnemonic
            key = (s.name, op.index)
            if m == "NOP" and key in self.coll:
                t0 = self._coll_start.setdefault(key, now)
                end = t0 + self.coll[key]
                if now < end:
                    self._push(end, 0, s)
                    return
                st, en = self.times[s.name]
                st[op.index], en[op.index] = t0, end
                if end > s.max_done:
                    s.max_done = end
                self._advance(s, now)
                continue
            if m in ("WAIT", "SIGNAL", "NOP", "END"):
                # one synchronisation instruction at a time through the executor's own code:
                # temporarily end the stream right after it
                n = s.n
                s.n = s.pc + 1
                try:
                    Executor._run_stream(self, s, now)
                finally:
                    s.n = n
                    if s.finished and s.pc < n:
                        s.finished = False
                if s.pc < op.index + 1 or m == "END":
                    if m == "END":
                        s.pc = s.n
                        break
                    return            # blocked on a WAIT
                continue
            raise SimulationError(f"stream {s.name} instruction {op.index} ({m}): a collective "
                                  "stream may hold only WAIT, SIGNAL, NOP and END")
        self._try_finish(s, now)


def collective_cycles(compiled, cfg) -> dict[tuple[str, int], int]:
    """NPU cycles of every all-reduce of a compiled program: ring all-reduce of its bytes over
    its group on ``system.interconnect`` (:func:`archsim.gpu.ring_allreduce_time_s`), rounded
    up to whole NPU cycles."""
    from archsim.gpu import ring_allreduce_time_s

    link = cfg.system.interconnect
    out = {}
    op_index = {name: i for i, name in enumerate(compiled.ops)}
    seen: dict[tuple[str, str], int] = {}
    for c in compiled.collectives:
        sec = ring_allreduce_time_s(c["bytes"], int(c.get("group", 1)), link)
        cyc = int(math.ceil(sec * cfg.npu.freq_mhz * 1e6 - 1e-9))
        s = c["stream"]
        # the recorded index is the builder's (before SIGNALs were inserted): the k-th
        # collective of an operator on a stream is the k-th NOP of that operator there
        k = op_index.get(c["op"])
        instrs = compiled.program.streams[s]
        hits = [i for i in np.flatnonzero(compiled.meta[s].op == k).tolist()
                if instrs[i].mnemonic == "NOP"] if k is not None else []
        j = seen.get((s, c["op"]), 0)
        seen[(s, c["op"])] = j + 1
        if j >= len(hits):
            raise SimulationError(f"collective {c['op']}: no NOP #{j} of it in stream {s}")
        out[(s, hits[j])] = cyc
    return out


__all__ = ["TracingExecutor", "load_for_system", "collective_cycles"]
