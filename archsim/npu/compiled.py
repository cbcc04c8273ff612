"""The Python edges of the compiled event loop: build its state, run it, report like the executor.

:class:`CompiledRun` is what :class:`archsim.npu.executor.Executor` runs instead of its own loop
when ``fast_forward=True`` and the memory is the compiled one
(:class:`archsim.memory.kernel.KernelMemory`): the program's tables
(:func:`archsim.npu.tables.build_tables`), the loop's state (:class:`archsim.npu.cloop.ExecState`)
and the memory's buffers are prepared here, :func:`archsim.npu.cloop._loop` runs the whole
program (returning only to grow a memory buffer), and the results are written back into the
executor's own records (stream, array, vector-unit, DMA and PIM statistics), so that
``Executor._stats`` assembles the same :class:`archsim.npu.stats.NpuStats`. The observer
receives the same calls in the same order, after the run. A fault is the executor's error,
with its message: a deadlock names every waiting stream, its semaphore, the count it needs and
the semaphore's value; ``max_cycles``; an SA_MATMUL without weights; a PIM command the memory
rejects; a memory fault (:meth:`KernelMemory._check_error`).

Speed (one core; GPT3-7B TP4 clb-0 layer of ``benchmarks/bench_system.py``): see the module
docstring of :mod:`archsim.system.core`.
"""
from __future__ import annotations

import weakref

import numpy as np

from archsim.errors import ProgramFault, SimulationError
from archsim.npu import cloop as cl
from archsim.npu import cstate as cs
from archsim.npu.cstate import K_PIM, SK_IDX, SK_KIND, SK_N, SK_OFF
from archsim.npu.observe import SYNC_UNIT
from archsim.npu.tables import build_tables

assert cs.U_SYNC == SYNC_UNIT, "archsim.npu.cstate.U_SYNC must equal observe.SYNC_UNIT"

_SEMS = 1 << 16
"""Semaphore numbers are 16-bit (isa.spec ``sem``)."""


def kernels_cached() -> bool:
    """True when numba's cache holds the compiled event loop (with the memory kernel inside it),
    or numba is absent: the next cycle-level run starts without the one-time JIT."""
    from archsim.memory.kernel import jit

    return not jit.HAVE_NUMBA or jit.is_cached("cloop", "_loop")


def _compile_once(S, T, E, ratio: float) -> None:
    """Compile (or load from numba's cache) the loop for these argument types before the run,
    with a progress note (:mod:`archsim.notes`) when it is really compiled: the one-time JIT
    after installing or editing a kernel source takes about half a minute (26-27 s measured on
    one core of the 2-core reference machine of 2026-12-05, 51-60 s on the slower one before;
    :mod:`archsim.memory.kernel.jit` says why).

    The note comes at once when the cache holds no code of the loop, and after
    :data:`_STALE_NOTE_AFTER_S` of loading otherwise: numba also compiles again when its cached
    code is stale (its index keys each source file's modification time and size: a fresh
    checkout of the same sources, a copied cache), which only the time it takes tells."""
    global _READY
    from archsim.memory.kernel import jit

    if _READY or not jit.HAVE_NUMBA:
        return
    import threading
    import time

    from numba import typeof

    from archsim import notes

    def say() -> None:
        notes.note("compiling the simulator's event loop and memory kernel once (numba JIT, "
                   f"about half a minute; cached in {jit.CACHE_DIR}) ...")

    timer = None
    if not kernels_cached():
        say()
    else:
        timer = threading.Timer(_STALE_NOTE_AFTER_S, say)
        timer.daemon = True
        timer.start()
    t = time.perf_counter()
    try:
        cl._loop.compile(tuple(typeof(x) for x in (S, T, E, ratio)))
    finally:
        if timer is not None:
            timer.cancel()
    took = time.perf_counter() - t
    if timer is None or took > _STALE_NOTE_AFTER_S:
        notes.note(f"compiled in {took:.0f} s")
    _READY = True


_STALE_NOTE_AFTER_S = 3.0
"""Seconds of loading the cached loop after which :func:`_compile_once` says it is compiling
(a warm load takes well under a second)."""

_READY = False
"""True once :func:`_compile_once` ran in this process."""


def compiled_run(ex) -> "CompiledRun | None":
    """The compiled loop for executor ``ex`` when its memory is a
    :class:`archsim.memory.kernel.KernelMemory` (None otherwise: the executor runs its own)."""
    from archsim.memory.kernel import KernelMemory

    if isinstance(ex.mem, KernelMemory):
        return CompiledRun(ex)
    return None


class CompiledRun:
    """One run of executor ``ex``'s program in the compiled loop (module docstring).

    Attributes:
        tables, info: the program's tables (:func:`archsim.npu.tables.build_tables`).
        E: the loop's state (:class:`archsim.npu.cloop.ExecState`).
        calls: calls into the compiled loop (1 unless a memory buffer had to grow).
        steps: event steps of the loop (memory advances).
    """

    def __init__(self, ex) -> None:
        # a weak reference: the executor holds this run (``ex.ff``), and a cycle between them
        # would leave the whole program (every instruction, ~10^5-10^6 objects) to the cyclic
        # garbage collector instead of freeing it with the executor
        self.ex = weakref.proxy(ex)
        self.port = ex.mem
        self.tables, self.info = build_tables(ex)
        info = self.info
        T = self.tables
        ns = info.n_streams
        port = self.port
        bb = port.cfg.memory.org.burst_bytes
        self.max_bursts = max(1, -(-info.max_request_bytes // bb) + 1)
        n_pim_streams = int((T.SK[:, SK_KIND] == K_PIM).sum())
        depth = max(1, int(ex.pim_depth))
        self.pim_room = depth * n_pim_streams + 8
        X = np.zeros((max(ns, 1), cs.NX), np.int64)
        X[:ns, cs.X_KIND] = T.SK[:, SK_KIND]
        X[:ns, cs.X_IDX] = T.SK[:, SK_IDX]
        X[:ns, cs.X_OFF] = T.SK[:, SK_OFF]
        X[:ns, cs.X_N] = T.SK[:, SK_N]
        X[:, cs.X_BLK] = -1
        X[:, cs.X_WSEM] = -1
        X[:, cs.X_LASTA] = -1
        X[:, cs.X_SNX] = -1
        caps = np.array(info.signals_per_stream + [0] * (X.shape[0] - ns), np.int64) + 1
        X[:, cs.X_PSCAP] = caps
        X[:, cs.X_PSOFF] = np.concatenate(([0], np.cumsum(caps)[:-1]))
        X = X[:ns]
        na, nv = len(ex.arrays), len(ex.vus)
        G = np.zeros(cs.NE, np.int64)
        G[cs.E_PHASE] = cs.PH_INIT
        P = np.zeros(cs.NP, np.int64)
        P[cs.P_H] = ex.H
        P[cs.P_SADEPTH] = ex.sa_depth
        P[cs.P_VUDEPTH] = ex.vu_depth
        P[cs.P_MAXO] = ex.max_outstanding
        P[cs.P_R] = ex.dma_issue_per_cycle
        P[cs.P_SETUP] = ex.setup_cycles
        P[cs.P_PDEPTH] = depth
        P[cs.P_UNIT] = 1 if ex._unit_clock else 0
        P[cs.P_MAXC] = -1 if ex.max_cycles is None else int(ex.max_cycles)
        P[cs.P_MAXB] = self.max_bursts
        P[cs.P_PIMROOM] = self.pim_room
        AR = np.zeros((max(na, 1), cs.NAA), np.int64)
        N = info.n_instructions
        TIMES = np.full((max(N, 1), cs.NT), -1, np.int64)
        heap_cap = 2 * ns + info.n_timed_signals + 64
        self.E = cs.ExecState(
            X=X, REC=np.zeros((info.n_dma + 2, cs.NRC), np.int64),
            PSIG=np.zeros((int(caps.sum()) + 1, 4), np.int64),
            PRING=np.zeros((max(ns, 1), depth), np.int64),
            PW=np.zeros((info.n_pim + 2, 3), np.int64),
            AR=AR, AQ=np.zeros((AR.shape[0], ex.sa_depth + 1), np.int64),
            VS=np.zeros((max(nv, 1), cs.NV), np.int64),
            VQ=np.zeros((max(nv, 1), ex.vu_depth + 1), np.int64),
            SEMV=np.zeros(_SEMS, np.int64), SEMH=np.full(_SEMS, -1, np.int64),
            SEMT=np.full(_SEMS, -1, np.int64), HEAP=np.zeros((heap_cap, 7), np.int64),
            READY=np.zeros(max(ns, 1), np.int64), SLW=np.zeros(max(ns, 1), np.int64),
            MEMW=np.zeros(max(ns, 1), np.int64),
            PIMST=np.zeros((port.C, cs.NPM), np.int64), TIMES=TIMES, G=G, P=P)
        self.calls = 0
        self.steps = 0
        # request ids are unique (transfer id << 32 | index, PIM counter) and at most
        # max_outstanding DMA requests are in flight
        port.expect_unique_ids(ex.max_outstanding)
        port.reserve(ex.max_outstanding * self.max_bursts, self.pim_room)

    # ------------------------------------------------------------------ running
    def run(self):
        """Run the program to its end; returns ``ex._stats()`` (:class:`NpuStats`).

        Raises:
            SimulationError: the executor's errors (module docstring)."""
        ex, port, E = self.ex, self.port, self.E
        self.info.opcode_groups = None    # the tables' groups are not kept through the run
        ratio = float(ex._ratio)
        _compile_once(port.S, self.tables, E, ratio)
        while True:
            port._flush()
            st = int(cl._loop(port.S, self.tables, E, ratio))
            self.calls += 1
            if st == cs.RUN_DONE:
                break
            if st == cs.RUN_NEED_LOG:
                port.LOG = np.concatenate([port.LOG, np.zeros_like(port.LOG)])
                port._rebuild()
            elif st == cs.RUN_NEED_ROOM:
                port._room(ex.max_outstanding * self.max_bursts, self.pim_room)
            else:
                self._write_back()
                raise self._error(st)
        self.steps = int(E.G[cs.E_STEPS])
        self._write_back()
        self._replay_observer()
        return ex._stats()

    # ------------------------------------------------------------------ results
    def _write_back(self) -> None:
        """The run's state into the executor's records (what its own loop would have left)."""
        ex, E = self.ex, self.E
        G = E.G
        ex.now = int(G[cs.E_NOW])
        ex._pim_counter = int(G[cs.E_PIMC])
        ex._rec_counter = int(G[cs.E_RECC])
        ex.outstanding = int(G[cs.E_OUT])
        ex.issue_cycle, ex.issue_used = int(G[cs.E_IC]), int(G[cs.E_IU])
        ex.dma_busy_since = int(G[cs.E_BS])
        d = ex.dma
        d.instructions, d.requests = int(G[cs.E_DI]), int(G[cs.E_DREQ])
        d.bytes_read, d.bytes_written = int(G[cs.E_DBR]), int(G[cs.E_DBW])
        d.busy_cycles = int(G[cs.E_DBUSY])
        from archsim.npu.stats import STALL_CAUSES

        X = E.X.tolist()
        for s, x in zip(ex.streams, X):
            s.pc = x[cs.X_PC]
            s.finished = bool(x[cs.X_FIN])
            s.max_done = x[cs.X_MAXD]
            s.wait_info = None if x[cs.X_WSEM] < 0 else (x[cs.X_WSEM], x[cs.X_WCNT])
            s.blocked = None if x[cs.X_BLK] < 0 else STALL_CAUSES[x[cs.X_BLK]]
            s.block_since = x[cs.X_SINCE]
            st = s.stats
            st.instructions = x[cs.X_NI]
            st.finish_cycle = x[cs.X_FC]
            for i, c in enumerate(STALL_CAUSES):
                st.stall_cycles[c] = x[cs.X_ST0 + i]
        for a, row in zip(ex.arrays, E.AR.tolist()):
            st = a.stats
            st.tiles, st.preloads, st.macs = row[cs.AA_TILES], row[cs.AA_PRELOADS], row[cs.AA_MACS]
            st.feed_cycles, st.busy_cycles = row[cs.AA_FEED], row[cs.AA_BUSY]
        for v, row in zip(ex.vus, E.VS.tolist()):
            st = v.stats
            st.ops, st.elements, st.busy_cycles = row[cs.V_OPS], row[cs.V_ELEMS], row[cs.V_BUSY]
        from archsim.npu.stats import PimChannelStats

        ex.pim_stats = {c: PimChannelStats(row[cs.PM_CMDS], row[cs.PM_BUSY])
                        for c, row in enumerate(E.PIMST.tolist()) if row[cs.PM_SEEN]}
        sv = E.SEMV
        ex.sems = {int(i): int(sv[i]) for i in np.flatnonzero(sv)}

    def records(self) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Every instruction's record after the run, per stream: ``(start, end, unit)`` int64
        arrays of the stream's length (NPU cycles; -1 where not reached). Work instructions
        (SA, VU, DMA, PIM, link) have the observer's times and units; a WAIT the cycle its
        stream reached it and the cycle it was released, a SIGNAL the cycle it was issued and
        the cycle it fired, both with unit ``SYNC_UNIT`` (the observer's WAIT/SIGNAL calls);
        NOP/END the cycle passed (:class:`archsim.npu.cstate.ExecState`)."""
        TM, SK = self.E.TIMES, self.tables.SK
        out = {}
        for s, (off, n) in zip(self.ex.streams, SK[:, [SK_OFF, SK_N]].tolist()):
            r = TM[off:off + n]
            out[s.name] = (r[:, cs.T_START].copy(), r[:, cs.T_END].copy(),
                           r[:, cs.T_UNIT].copy())
        return out

    def _replay_observer(self) -> None:
        """The observer's calls, in the order the executor makes them (an observer with a
        ``record_many(stream, index, unit, start, end)`` method gets each stream's calls at
        once, as int64 arrays: observers that keep times need no order)."""
        obs = self.ex.observer
        if obs is None:
            return
        TM = self.E.TIMES
        many = getattr(obs, "record_many", None)
        if many is not None:
            SK = self.tables.SK
            for s, (off, n) in zip(self.ex.streams, SK[:, [SK_OFF, SK_N]].tolist()):
                r = TM[off:off + n]
                i = np.flatnonzero(r[:, cs.T_OBS] >= 0)
                if i.size:
                    many(s.name, i, r[i, cs.T_UNIT], r[i, cs.T_START], r[i, cs.T_END])
            return
        g = np.flatnonzero(TM[:, cs.T_OBS] >= 0)
        g = g[np.argsort(TM[g, cs.T_OBS], kind="stable")]
        SK = self.tables.SK
        names = [s.name for s in self.ex.streams]
        k = np.searchsorted(SK[:, SK_OFF], g, side="right") - 1
        idx = g - SK[k, SK_OFF]
        rows = TM[g]
        for kk, i, st, en, un in zip(k.tolist(), idx.tolist(), rows[:, cs.T_START].tolist(),
                                     rows[:, cs.T_END].tolist(), rows[:, cs.T_UNIT].tolist()):
            obs(names[kk], i, un, st, en)

    def _error(self, st: int) -> SimulationError:
        """The executor's error for loop status ``st``."""
        ex, E = self.ex, self.E
        G = E.G
        if st == cs.RUN_DEADLOCK:
            return ex._deadlock()
        if st == cs.RUN_MAXCYC:
            return ProgramFault(f"simulation passed max_cycles = {ex.max_cycles}")
        if st == cs.RUN_MEM_ERROR:
            try:
                self.port._check_error()
            except SimulationError as exc:
                return exc
        k, g = int(G[cs.E_ERRK]), int(G[cs.E_ERRG])
        if st in (cs.RUN_SA_ANY, cs.RUN_SA_NOW, cs.RUN_PIM_BAD):
            s = ex.streams[k]
            op = s.ops[g - int(self.tables.SK[k, SK_OFF])]
            if st == cs.RUN_SA_ANY:
                return ex._no_array_error(s, op)
            if st == cs.RUN_SA_NOW:
                return ex._no_weights_error(s, op, int(G[cs.E_ERRA]))
            from archsim.npu.state import PIM_RID_BASE

            rid = PIM_RID_BASE + int(G[cs.E_PIMC])
            try:
                self.port.pim_fields(ex._pim_request(s, op, rid, ex._to_mem(ex.now)))
            except SimulationError as exc:
                return exc
        return SimulationError(f"compiled executor: internal status {st} at cycle {ex.now} "
                               "(a simulator bug)")


__all__ = ["CompiledRun", "compiled_run"]
