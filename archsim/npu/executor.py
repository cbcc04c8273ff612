"""Event-driven timing executor of ISA programs on the NPU and a memory port: one event loop
whose handlers (stream issue, DMA, systolic array, vector unit, PIM, link, completions) share
the event heap, the stream states and the statistics of one run. It is the readable reference
of the model below; :mod:`archsim.npu.cloop` is the same loop compiled.

Model (NPU clock cycles; memory traffic converted to memory-clock cycles at the port):

* **Streams** issue their instructions in program order. Issuing takes no time; an instruction
  may complete long after later ones issued. ``WAIT`` blocks issue until its semaphore is large
  enough; ``SIGNAL`` never blocks: it fires when every earlier instruction of its stream has
  completed (DMA: all requests of earlier transfers done; SA/VU: latest completion time of
  earlier ops; PIM: immediately, since PIM streams wait for each command). ``END`` (or the end
  of the list) makes the stream finish once all its work has completed.
* **Systolic arrays** (``sa``/``saN`` streams name the array in each instruction): closed-form
  weight-stationary pipeline of :mod:`archsim.npu.timing`. ``SA_LOADW`` shifts weights into the
  array's shadow buffer in H cycles, starting once the previous shadow has been taken by a
  matmul (double buffering: the preload overlaps the running tile). ``SA_MATMUL`` starts when the
  array's input is free (previous start + max(m, 4)) and its weights are in place, and completes
  ``H + W - 2 + max(m, 4)`` cycles after its start. Each array accepts up to
  ``npu.sa_queue_depth`` instructions that have not started yet; beyond that the stream stalls
  (cause ``array``).
* **Vector units** (``vuN``): one op at a time per unit, ``latency + passes * rows *
  ceil(cols / lanes) - 1`` cycles (queue of ``npu.vector.queue_depth``; stall cause ``vector``).
* **DMA** (``dmaN`` streams share one engine): a transfer costs ``npu.dma.setup_cycles``, then
  its rows are cut into ``npu.dma.request_bytes`` requests at their real addresses and submitted
  to the memory port (interleaved across the channel blocks of the address mapping), at most
  ``npu.dma.issue_per_cycle`` per cycle and at most
  ``npu.dma.max_outstanding`` in flight (stall cause ``memory`` when out of slots or when the
  port refuses with ``can_accept``).
* **PIM** (``pimN``): each instruction becomes one :class:`archsim.memport.PimRequest` to
  channel N. A run of consecutive PIM instructions is sent ahead while fewer than
  ``pim.command_queue_depth`` of the stream's commands are in flight (the controller queues
  them in order); the stream's other instructions (WAIT, SIGNAL, NOP, END) wait until every
  earlier PIM command completed. With depth 1 each command is sent when the previous one
  completed. The stream's busy time is the union of its commands' submit-to-completion
  intervals.
* **Links** (``link``): ``ALL_REDUCE``, ``ALL_TO_ALL``, ``SEND`` and ``RECV`` occupy their
  stream, one at a time, from the cycle the stream reaches them (its WAITs satisfied) for the
  link time of their operands on ``system.interconnect``
  (:func:`archsim.npu.timing.link_op_cycles`): a ring all-reduce, a pairwise all-to-all, a
  hand-off; ``RECV`` takes 0 cycles (one device is simulated: it starts with its input
  received). The SIGNALs after them fire at the end.
* Time jumps from event to event (memory completions, array/vector/timer wake-ups). When no
  event is left and streams still wait on semaphores, the run is a deadlock:
  :class:`archsim.errors.ProgramFault` names every waiting stream, its semaphore, the count
  it needs and the semaphore's value.

Pluggable parts, chosen by constructor arguments (none changes a cycle): ``observer`` receives
every instruction's start and end (:mod:`archsim.npu.observe`; the system simulator's per-stage
and per-layer breakdown, busy intervals and timeline come from
:class:`archsim.npu.observe.InstructionTimes`); ``fast_forward=True`` on the compiled memory
runs the whole loop compiled instead (:mod:`archsim.npu.cloop`, the same rules on typed
arrays beside the memory kernel; :mod:`archsim.npu.compiled` its Python edges): this class is
its readable reference and the path for every other memory. The run-time records are in
:mod:`archsim.npu.state`.

"""
from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from archsim.errors import ProgramFault, SimulationError
from archsim.memport import MemoryPort, MemRequest, PimRequest
from archsim.npu.loader import LoadedOp, LoadedProgram, gc_paused, load_program
from archsim.npu.observe import SYNC_UNIT, InstructionObserver
from archsim.npu.simple_memory import SimpleMemory
from archsim.npu.state import (INF, PIM_KINDS, PIM_RID_BASE, REC_SHIFT, ArrayState, DmaRec,
                               StreamState, VectorState, channel_interleave_bytes)
from archsim.npu.stats import DmaStats, NpuStats, PimChannelStats
from archsim.npu.timing import (dma_request_addresses, link_op_cycles,
                                tile_issue_interval_cycles, tile_latency_cycles,
                                vector_op_cycles, weight_preload_cycles)
from isa.program import Program
from isa.spec import ARRAY_ANY, BY_MNEMONIC, DTYPE_BYTES, Engine


class Executor:
    """Timing executor: runs one program on one NPU and a memory port (see module docstring).

    Args:
        program: the ISA program.
        cfg: the machine (``archsim.config.MachineConfig``).
        memory: any :class:`archsim.memport.MemoryPort` (the HBM model, or
            :class:`archsim.npu.simple_memory.SimpleMemory`).
        dma_issue_per_cycle: requests the DMA can issue per NPU cycle (None:
            ``npu.dma.issue_per_cycle``).
        sa_queue_depth / vu_queue_depth: instructions accepted ahead of their start (None:
            ``npu.sa_queue_depth`` / ``npu.vector.queue_depth``).
        max_cycles: abort with ProgramFault past this many cycles (None: no limit).
        dma_interleave: issue each transfer's requests interleaved across the address
            mapping's channel blocks (see :func:`archsim.npu.timing.dma_request_addresses`);
            False issues them in address order.
        collectives: time ``ALL_REDUCE`` on the interconnect (False: it completes when its
            stream reaches it, the all-reduce-free bound).
        fast_forward: on the compiled memory (:class:`archsim.memory.kernel.KernelMemory`),
            run the whole event loop compiled (:class:`archsim.npu.compiled.CompiledRun`:
            identical timing, statistics, observer calls and command log;
            ``tests/test_speed_identity.py``, ``tests/test_compiled_executor.py``). Ignored
            on other memories.
        observer: called once per instruction that does work (SA, VU, DMA, PIM, link) and
            per WAIT and SIGNAL as ``observer(stream, index, unit, start, end)``: stream name,
            index in the stream, hardware unit (array, vector unit, DMA queue, PIM channel, 0
            for links, ``SYNC_UNIT`` for WAIT/SIGNAL), start and end NPU cycles (see
            :mod:`archsim.npu.observe`). None: no calls.

    After construction ``ff`` is the compiled run (None when off).

    Raises:
        SimulationError: at construction when the program does not fit the machine
            (:func:`archsim.npu.loader.load_program`).
    """

    def __init__(self, program: Program | LoadedProgram, cfg, memory: MemoryPort, *,
                 dma_issue_per_cycle: int | None = None,
                 sa_queue_depth: int | None = None,
                 vu_queue_depth: int | None = None,
                 max_cycles: int | None = None, dma_interleave: bool = True,
                 collectives: bool = True, fast_forward: bool = False,
                 observer: InstructionObserver | None = None) -> None:
        self.loaded = program if isinstance(program, LoadedProgram) else load_program(program,
                                                                                       cfg)
        self.cfg = cfg
        self.mem = memory
        npu = cfg.npu
        self.H, self.W = npu.array_height, npu.array_width
        self.dma_issue_per_cycle = max(1, int(dma_issue_per_cycle if dma_issue_per_cycle
                                              is not None else npu.dma.issue_per_cycle))
        self.sa_depth = max(1, sa_queue_depth if sa_queue_depth is not None
                            else npu.sa_queue_depth)
        self.vu_depth = max(1, vu_queue_depth if vu_queue_depth is not None
                            else npu.vector.queue_depth)
        self.max_cycles = max_cycles
        self.interleave_bytes = channel_interleave_bytes(cfg) if dma_interleave else 0
        self.max_outstanding = npu.dma.max_outstanding
        self.request_bytes = npu.dma.request_bytes
        self.setup_cycles = npu.dma.setup_cycles
        self.time_collectives = bool(collectives)
        self._link_start: dict[tuple[str, int], int] = {}
        self.lanes = npu.vector.lanes
        self.vlat = dict(npu.vector.latency_cycles)
        self.vpass = dict(npu.vector.passes)
        ratio = cfg.npu_to_mem_cycles(1.0)
        self._ratio = ratio
        self._unit_clock = abs(ratio - 1.0) < 1e-12
        self.streams = [StreamState(ls) for ls in self.loaded.streams]
        self.arrays = [ArrayState() for _ in range(npu.n_arrays)]
        self.vus = [VectorState() for _ in range(npu.vector.count)]
        self.sems: dict[int, int] = {}
        self.sem_waiters: dict[int, list[StreamState]] = {}
        self.slot_waiters: list[StreamState] = []
        self.mem_waiters: list[StreamState] = []
        self.heap: list[tuple[int, int, int, object, int, int]] = []
        self._hseq = 0
        self.recs: dict[int, DmaRec] = {}
        self._rec_counter = 0
        self._pim_counter = 0
        self.pim_wait: dict[int, tuple[StreamState, int, int]] = {}  # (stream, submit, index)
        self.pim_depth = cfg.pim.command_queue_depth
        self._pim_last_end: dict[int, int] = {}
        self.outstanding = 0
        self.issue_cycle = 0
        self.issue_used = 0
        self.dma_busy_since = 0
        self.ready: deque[StreamState] = deque()
        self.dma = DmaStats()
        self.pim_stats: dict[int, PimChannelStats] = {}
        self.now = 0
        # SimpleMemory without a queue bound always accepts: skip the per-request call
        self._check_accept = not (isinstance(memory, SimpleMemory)
                                  and memory.max_outstanding_per_channel is None)
        # batch submission of a DMA transfer when the port offers it (same requests, ids,
        # arrivals and back-pressure as the per-request loop; see MemorySystem.submit_many)
        self._submit_many = getattr(memory, "submit_many", None)
        # ports whose submit_many also takes one size per request (KernelMemory)
        self._many_sizes = bool(getattr(memory, "submit_many_sizes", False))
        self.observer = observer
        self.ff = None
        if fast_forward:
            from archsim.npu.compiled import compiled_run
            self.ff = compiled_run(self)

    # ---- clocks ----
    def _to_mem(self, t: int) -> int:
        if self._unit_clock:
            return t
        return int(math.ceil(t * self._ratio - 1e-9))

    def _from_mem(self, c: int) -> int:
        if self._unit_clock:
            return c
        return int(math.ceil(c / self._ratio - 1e-9))

    # ---- helpers ----
    def _push(self, t: int, kind: int, a: object, b: int = 0, c: int = 0) -> None:
        self._hseq += 1
        heapq.heappush(self.heap, (t, self._hseq, kind, a, b, c))

    def _make_ready(self, s: StreamState) -> None:
        if not s.in_ready and not s.finished:
            s.in_ready = True
            self.ready.append(s)

    @staticmethod
    def _block(s: StreamState, cause: str, now: int) -> None:
        if s.blocked != cause:
            if s.blocked is not None:
                s.stats.stall_cycles[s.blocked] += now - s.block_since
            s.blocked = cause
            s.block_since = now

    @staticmethod
    def _advance(s: StreamState, now: int) -> None:
        if s.blocked is not None:
            s.stats.stall_cycles[s.blocked] += now - s.block_since
            s.blocked = None
        s.pc += 1
        s.stats.instructions += 1

    def _fire(self, sem: int, count: int, now: int) -> None:
        self.sems[sem] = self.sems.get(sem, 0) + count
        waiters = self.sem_waiters.pop(sem, None)
        if waiters:
            for w in waiters:
                self._make_ready(w)

    # ---- stream stepping ----
    def _run_stream(self, s: StreamState, now: int) -> None:
        """Issue as many instructions of ``s`` as possible at cycle ``now``."""
        while s.pc < s.n:
            op = s.ops[s.pc]
            m = op.mnemonic
            o = op.ops
            if m == "WAIT":
                sem, cnt = o["sem"], o["count"]
                v = self.sems.get(sem, 0)
                if v >= cnt:
                    self.sems[sem] = v - cnt
                    s.wait_info = None
                    if self.observer is not None:
                        self.observer(s.name, op.index, SYNC_UNIT,
                                      s.block_since if s.blocked == "semaphore" else now, now)
                    self._advance(s, now)
                    continue
                self._block(s, "semaphore", now)
                s.wait_info = (sem, cnt)
                self.sem_waiters.setdefault(sem, []).append(s)
                return
            if m == "SIGNAL":
                self._signal(s, o["sem"], o["count"], now, op.index)
                self._advance(s, now)
                continue
            if m == "NOP":
                self._advance(s, now)
                continue
            if m == "END":
                self._advance(s, now)
                s.pc = s.n
                break
            kind = s.kind
            if kind is Engine.DMA:
                if not self._dma_issue(s, op, now):
                    return
            elif kind is Engine.SA:
                if not self._sa_issue(s, op, now):
                    return
            elif kind is Engine.VU:
                if not self._vu_issue(s, op, now):
                    return
            elif kind is Engine.LINK:
                if not self._link_issue(s, op, now):
                    return
            else:
                self._pim_issue(s, op, now)
                return
            self._advance(s, now)
        self._try_finish(s, now)

    def _try_finish(self, s: StreamState, now: int) -> None:
        if s.finished or s.pc < s.n:
            return
        if s.kind is Engine.DMA:
            if s.inflight or s.dma_cur is not None or s.pending_signals:
                return
            s.finished = True
            s.stats.finish_cycle = max(s.max_done, now)
        elif s.kind is Engine.PIM:
            if s.pim_out:
                return
            s.finished = True
            s.stats.finish_cycle = max(s.max_done, now)
        else:
            if s.max_done > now:
                self._push(s.max_done, 0, s)  # wake to finish
                return
            s.finished = True
            s.stats.finish_cycle = max(s.max_done, now) if s.n else 0

    def _signal(self, s: StreamState, sem: int, cnt: int, now: int, index: int) -> None:
        """SIGNAL ``index`` of ``s`` reached at ``now``: it fires now, or once every earlier
        instruction of ``s`` has completed (module docstring)."""
        if s.kind is Engine.DMA:
            if s.inflight or s.dma_cur is not None:
                s.pending_signals.append((s.seq, sem, cnt, index, now))
                return
            self._fire(sem, cnt, now)
        elif s.kind in (Engine.SA, Engine.VU):
            if s.max_done > now:
                self._push(s.max_done, 1, (s, index, now), sem, cnt)
                return
            self._fire(sem, cnt, now)
        else:
            self._fire(sem, cnt, now)
        if self.observer is not None:
            self.observer(s.name, index, SYNC_UNIT, now, now)

    # ---- links ----
    def link_cycles(self, op: LoadedOp) -> int:
        """NPU cycles ``op`` (ALL_REDUCE, ALL_TO_ALL, SEND or RECV) occupies its link stream:
        :func:`archsim.npu.timing.link_op_cycles` (module docstring)."""
        return link_op_cycles(self.cfg, op.mnemonic, op.ops, self.time_collectives)

    def _link_issue(self, s: StreamState, op: LoadedOp, now: int) -> bool:
        """Occupy the link stream with ``op`` from the cycle it is reached; True once done."""
        key = (s.name, op.index)
        t0 = self._link_start.setdefault(key, now)
        end = t0 + self.link_cycles(op)
        if now < end:
            self._push(end, 0, s)
            return False
        if end > s.max_done:
            s.max_done = end
        if self.observer is not None:
            self.observer(s.name, op.index, 0, t0, end)
        return True

    # ---- DMA ----
    def _dma_issue(self, s: StreamState, op: LoadedOp, now: int) -> bool:
        rec = s.dma_cur
        if rec is None:
            o = op.ops
            es = DTYPE_BYTES[o["dtype"]]
            addrs, sizes = dma_request_addresses(o["hbm"], o["rows"], o["cols"] * es, o["stride"],
                                                 self.request_bytes, self.interleave_bytes)
            self._rec_counter += 1
            rec = DmaRec(s, s.seq, self._rec_counter, addrs, sizes, op.mnemonic == "DMA_STORE",
                         now + self.setup_cycles)
            rec.index = op.index
            rec.start = now
            s.seq += 1
            s.dma_cur = rec
            s.inflight.append(rec)
            self.recs[rec.rec_id] = rec
            self.dma.instructions += 1
        if rec.ready_at > now:
            self._block(s, "setup", now)
            self._push(rec.ready_at, 0, s)
            return False
        budget = self.max_outstanding - self.outstanding
        if budget <= 0:
            self._block(s, "memory", now)
            self.slot_waiters.append(s)
            return False
        k = min(budget, rec.n - rec.issued)
        R = self.dma_issue_per_cycle
        t0 = now if now > self.issue_cycle else self.issue_cycle
        used = self.issue_used if t0 == self.issue_cycle else 0
        i0 = rec.issued
        is_write = rec.is_write
        done, nbytes = self._dma_submit(rec, i0, k, t0, used, R)
        if done:
            if self.outstanding == 0:
                self.dma_busy_since = t0
            self.outstanding += done
            rec.issued += done
            total = used + done
            self.issue_cycle = t0 + total // R
            self.issue_used = total % R
            self.dma.requests += done
            if is_write:
                self.dma.bytes_written += nbytes
            else:
                self.dma.bytes_read += nbytes
        if rec.issued == rec.n:
            s.dma_cur = None
            if rec.n == 0:
                self._dma_rec_done(rec, now)
            return True
        self._block(s, "memory", now)
        if done < k:  # back-pressure from the memory: retry at its next event
            self.mem_waiters.append(s)
        else:
            self.slot_waiters.append(s)
        return False

    def _dma_submit(self, rec: DmaRec, i0: int, k: int, t0: int, used: int, R: int
                    ) -> tuple[int, int]:
        """Submit up to ``k`` requests of ``rec`` from index ``i0`` to the memory port, the
        i-th with arrival NPU cycle ``t0 + (used + i) // R`` (memory clock at the port),
        stopping at the first the port refuses (``can_accept``). Returns ``(requests
        submitted, their bytes)``."""
        base_rid = rec.rec_id << REC_SHIFT
        size_const = rec.size_const
        is_write = rec.is_write
        submit = self.mem.submit
        check = self._check_accept
        can_accept = self.mem.can_accept
        to_mem = self._to_mem
        unit = self._unit_clock
        nbytes = 0
        done = 0
        many = self._submit_many
        if many is not None and k > 1 and (size_const or self._many_sizes):
            # one batch call; the port queues exactly what the loop below would have queued
            d = np.arange(k, dtype=np.int64)
            arr = t0 + (used + d) // R
            if not unit:
                arr = np.ceil(arr * self._ratio - 1e-9).astype(np.int64)
            done = many(rec.addr_arr[i0:i0 + k], is_write, arr, base_rid | (i0 + d),
                        size_const or rec.size_arr[i0:i0 + k], check)
            nbytes = done * size_const if size_const else \
                int(rec.size_arr[i0:i0 + done].sum())
        else:
            addrs = rec.addrs
            sizes = rec.sizes
            for j in range(i0, i0 + k):
                addr = addrs[j]
                if check and not can_accept(addr, is_write):
                    break
                size = size_const or sizes[j]
                t = t0 + (used + done) // R
                submit(MemRequest(base_rid | j, addr, size, is_write, t if unit else to_mem(t)))
                nbytes += size
                done += 1
        return done, nbytes

    def _dma_rec_done(self, rec: DmaRec, now: int) -> None:
        """Transfer ``rec`` completed at ``now``: the SIGNALs behind it fire."""
        s = rec.stream
        self.recs.pop(rec.rec_id, None)
        if self.observer is not None:
            self.observer(s.name, rec.index, s.index or 0, rec.start, now)
        if now > s.max_done:
            s.max_done = now
        infl = s.inflight
        while infl and infl[0].remaining == 0 and infl[0].issued == infl[0].n:
            infl.popleft()
        frontier = infl[0].seq if infl else s.seq
        ps = s.pending_signals
        while ps and ps[0][0] <= frontier:
            _, sem, cnt, index, reached = ps.popleft()
            self._fire(sem, cnt, now)
            if self.observer is not None:
                self.observer(s.name, index, SYNC_UNIT, reached, now)
        if s.pc >= s.n:
            self._make_ready(s)

    # ---- systolic arrays ----
    def _sa_issue(self, s: StreamState, op: LoadedOp, now: int) -> bool:
        o = op.ops
        m = op.mnemonic
        a = o["array"]
        if a == ARRAY_ANY:
            if m == "SA_LOADW":
                a = self._pick_array(now)
            else:
                a = s.last_array
                if a is None:
                    raise self._no_array_error(s, op)
        arr = self.arrays[a]
        q = arr.unstarted
        if q:
            q[:] = [t for t in q if t > now]
            if len(q) >= self.sa_depth:
                self._block(s, "array", now)
                self._push(min(q), 0, s)
                return False
        H = self.H
        if m == "SA_LOADW":
            # a pending, unconsumed preload is simply replaced (its shadow slot is reused)
            start = max(now, arr.shadow_free_at, arr.preload_free_at)
            done = start + weight_preload_cycles(H)
            arr.preload_free_at = done
            arr.pending_done = done
            arr.stats.preloads += 1
            s.last_array = a
        else:
            if arr.pending_done is not None:
                w_ready = arr.pending_done
            elif arr.has_weights:
                w_ready = arr.active_ready
            else:
                raise self._no_weights_error(s, op, a)
            start = max(now, arr.rows_free_at, w_ready)
            if arr.pending_done is not None:
                arr.active_ready = arr.pending_done
                arr.pending_done = None
                arr.shadow_free_at = start
                arr.has_weights = True
            mm = o["m"]
            feed = tile_issue_interval_cycles(mm)
            done = start + tile_latency_cycles(H, self.W, mm)
            arr.rows_free_at = start + feed
            st = arr.stats
            st.tiles += 1
            st.macs += mm * o["n"] * o["k"]
            st.feed_cycles += feed
            st.busy_cycles += done - max(start, arr.busy_end)
            arr.busy_end = done
        if start > now:
            q.append(start)
        if done > s.max_done:
            s.max_done = done
        if self.observer is not None:
            self.observer(s.name, op.index, a, start, done)
        return True

    @staticmethod
    def _no_array_error(s: StreamState, op: LoadedOp) -> ProgramFault:
        """SA_MATMUL ``array=any`` with no SA_LOADW before it in its stream."""
        return ProgramFault(f"stream {s.name} instruction {op.index} (SA_MATMUL array=any): "
                            "no SA_LOADW before it in this stream chose an array")

    @staticmethod
    def _no_weights_error(s: StreamState, op: LoadedOp, a: int) -> ProgramFault:
        """SA_MATMUL on array ``a`` that never received weights."""
        return ProgramFault(f"stream {s.name} instruction {op.index} (SA_MATMUL): array {a} "
                            "has no weights (no SA_LOADW before it)")

    def _pick_array(self, now: int) -> int:
        best, best_t = 0, INF
        for i, arr in enumerate(self.arrays):
            pend = [t for t in arr.unstarted if t > now]
            if len(pend) >= self.sa_depth:
                continue
            t = max(now, arr.shadow_free_at if arr.pending_done is None else INF,
                    arr.preload_free_at, arr.rows_free_at - self.H)
            if t < best_t:
                best, best_t = i, t
        if best_t == INF:  # every array is full or holds unconsumed weights: least loaded
            best = min(range(len(self.arrays)), key=lambda i: self.arrays[i].rows_free_at)
        return best

    # ---- vector units ----
    def _vu_issue(self, s: StreamState, op: LoadedOp, now: int) -> bool:
        unit = self.vus[s.index or 0]
        q = unit.unstarted
        if q:
            q[:] = [t for t in q if t > now]
            if len(q) >= self.vu_depth:
                self._block(s, "vector", now)
                self._push(min(q), 0, s)
                return False
        o = op.ops
        key = BY_MNEMONIC[op.mnemonic].latency_key
        rows, cols = o["rows"], o["cols"]
        dur = vector_op_cycles(self.vlat[key], rows, cols, self.lanes, self.vpass.get(key, 1))
        start = max(now, unit.free_at)
        done = start + dur
        unit.free_at = done
        if start > now:
            q.append(start)
        unit.stats.ops += 1
        unit.stats.elements += rows * cols
        unit.stats.busy_cycles += dur
        if done > s.max_done:
            s.max_done = done
        if self.observer is not None:
            self.observer(s.name, op.index, s.index or 0, start, done)
        return True

    # ---- PIM ----
    @staticmethod
    def _pim_request(s: StreamState, op: LoadedOp, rid: int, arrival: int) -> PimRequest:
        """The :class:`archsim.memport.PimRequest` of PIM instruction ``op`` of stream ``s``
        (request id ``rid``, arrival in memory cycles)."""
        o = op.ops
        n_comps = o.get("n_comps", o.get("n_gemvs", 0))
        return PimRequest(rid, o["channel"], PIM_KINDS[op.mnemonic], arrival,
                          row=o.get("row", 0), n_comps=n_comps,
                          bank_group_mask=o.get("bg_mask", 0),
                          extra={"col": o.get("col", 0), "dtype": o.get("dtype", ""),
                                 "stream": s.name, "index": op.index})

    def _pim_issue(self, s: StreamState, op: LoadedOp, now: int) -> None:
        """Send the PIM command at the stream's pc (when none of its commands is in flight)
        and the PIM commands right after it, up to ``pim.command_queue_depth`` in flight."""
        out = s.pim_out
        if not out:
            s.pim_next = s.pc
        ops, depth = s.ops, self.pim_depth
        while s.pim_next < s.n and len(out) < depth:
            nop = ops[s.pim_next]
            if nop.mnemonic not in PIM_KINDS:
                break
            self._pim_submit(s, nop, now)
            s.pim_next += 1

    def _pim_submit(self, s: StreamState, op: LoadedOp, now: int) -> None:
        """Submit one PIM instruction of ``s`` to the memory (request id from the counter)."""
        self._pim_counter += 1
        rid = PIM_RID_BASE + self._pim_counter
        arrival = self._to_mem(now)
        self.mem.submit_pim(self._pim_request(s, op, rid, arrival))
        s.pim_out.append(rid)
        self.pim_wait[rid] = (s, now, op.index)
        st = self.pim_stats.setdefault(op.ops["channel"], PimChannelStats())
        st.commands += 1

    def _pim_busy(self, ch: int, t0: int, t: int) -> None:
        """Add the part of [t0, t) (NPU cycles) not yet counted to channel ``ch``'s PIM busy
        time (commands complete in order, so the union is kept by its last end)."""
        last = self._pim_last_end.get(ch, 0)
        if t > last:
            self.pim_stats[ch].busy_cycles += t - (t0 if t0 > last else last)
            self._pim_last_end[ch] = t

    def _pim_done(self, rid: int, cycle: int, now: int):
        """Bookkeeping of PIM request ``rid`` completed at memory cycle ``cycle``: its stream
        leaves the command (its pc advances), the channel's busy time grows by the part of
        [submit, completion) not yet counted. Returns ``(stream, submit cycle, completion
        NPU cycle)``."""
        s, t0, index = self.pim_wait.pop(rid)
        t = max(self._from_mem(cycle), t0)
        self._pim_busy(s.index, t0, t)
        if self.observer is not None:
            self.observer(s.name, index, s.index, t0, t)
        out = s.pim_out
        if out[0] == rid:
            out.popleft()
        else:       # with pim.command_queue_depth > 1 a PIM_HEADER may overtake the command
            # before it (e.g. a PIM_PRECHARGE): the others keep their order
            out.remove(rid)
        if t > s.max_done:
            s.max_done = t
        self._advance(s, now)
        return s, t0, t

    # ---- events ----
    def _handle_completions(self, now: int) -> None:
        comps = self.mem.advance_to(self._to_mem(now))
        if not comps:
            return
        recs = self.recs
        freed = 0
        for c in comps:
            rid = c.req_id
            if rid >= PIM_RID_BASE:
                s = self._pim_done(rid, c.cycle, now)[0]
                self._make_ready(s)
                continue
            rec = recs[rid >> REC_SHIFT]
            freed += 1
            rec.remaining -= 1
            if rec.remaining == 0 and rec.issued == rec.n:
                self._dma_rec_done(rec, now)
        if freed:
            self._dma_freed(freed, now)

    def _dma_freed(self, freed: int, now: int) -> None:
        """``freed`` DMA requests completed at ``now``: their slots free up (the DMA's busy time
        closes when none is left in flight) and the streams waiting for a slot retry."""
        self.outstanding -= freed
        if self.outstanding == 0:
            self.dma.busy_cycles += now - self.dma_busy_since
        if self.slot_waiters:
            for w in self.slot_waiters:
                self._make_ready(w)
            self.slot_waiters.clear()

    def _handle_timers(self, now: int) -> None:
        heap = self.heap
        while heap and heap[0][0] <= now:
            _, _, kind, s, b, c = heapq.heappop(heap)
            if kind == 0:
                self._make_ready(s)
            else:                     # a deferred SIGNAL: s = (stream, index, cycle reached)
                self._fire(b, c, now)
                if self.observer is not None:
                    self.observer(s[0].name, s[1], SYNC_UNIT, s[2], now)

    def _deadlock(self) -> ProgramFault:
        waiting = []
        other = []
        for s in self.streams:
            if s.finished:
                continue
            if s.wait_info is not None:
                sem, cnt = s.wait_info
                waiting.append(f"{s.name} waits on semaphore {sem} for {cnt} "
                               f"(value {self.sems.get(sem, 0)}) at instruction {s.pc}")
            else:
                other.append(s.name)
        msg = f"deadlock at cycle {self.now}: " + ("; ".join(waiting) or "no stream can proceed")
        if other:
            msg += f"; also unfinished: {', '.join(other)}"
        return ProgramFault(msg)

    def run(self) -> NpuStats:
        """Run to completion and return the statistics.

        Raises:
            ProgramFault: deadlock on semaphores (names the waiting streams, semaphores,
                needed counts and values), ``max_cycles`` exceeded, or a run-time fault (e.g.
                SA_MATMUL on an array that never received weights).
        """
        with gc_paused():
            return self._run() if self.ff is None else self.ff.run()

    def _run(self) -> NpuStats:
        """The loop of :meth:`run` (NPU cycles), with the cyclic GC paused around it: run the
        ready streams, then step to the next executor timer or memory event, handle its
        completions and timers. (:mod:`archsim.npu.cloop` is this loop compiled.)"""
        for s in self.streams:
            if not isinstance(s.ops, list):
                s.ops = s.ops.decoded()
            self._make_ready(s)
        now = 0
        ready = self.ready
        mem = self.mem
        heap = self.heap
        streams = self.streams
        handle_completions = self._handle_completions
        while True:
            while ready:
                s = ready.popleft()
                s.in_ready = False
                if not s.finished:
                    self._run_stream(s, now)
            if all(s.finished for s in streams):
                break
            cand = heap[0][0] if heap else None
            nm = mem.next_event_cycle()
            if nm is not None:
                t_mem = self._from_mem(nm)
                cand = t_mem if cand is None or t_mem < cand else cand
            if cand is None:
                self.now = now
                raise self._deadlock()
            now = cand if cand > now else now + 1
            if self.max_cycles is not None and now > self.max_cycles:
                self.now = now
                raise ProgramFault(f"simulation passed max_cycles = {self.max_cycles}")
            self.now = now
            handle_completions(now)
            if self.mem_waiters:
                for w in self.mem_waiters:
                    self._make_ready(w)
                self.mem_waiters.clear()
            self._handle_timers(now)
        self.now = now
        return self._stats()

    def _stats(self) -> NpuStats:
        cfg = self.cfg
        npu = cfg.npu
        end = max((s.stats.finish_cycle for s in self.streams), default=0)
        peak = 0.0
        peak_fn = getattr(self.mem, "peak_bytes_per_cycle", None)
        if isinstance(peak_fn, (int, float)):
            peak = float(peak_fn) * self._ratio
        else:
            peak = (cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel
                    * cfg.memory.org.channels * self._ratio)
        return NpuStats(cycles=end, freq_mhz=npu.freq_mhz,
                        array_macs_per_cycle=npu.n_arrays * npu.array_height * npu.array_width,
                        peak_memory_bytes_per_cycle=peak,
                        streams={s.name: s.stats for s in self.streams},
                        arrays=[a.stats for a in self.arrays],
                        vector_units=[v.stats for v in self.vus], dma=self.dma,
                        pim=dict(sorted(self.pim_stats.items())))


def run_timing(program: Program, cfg, memory: MemoryPort | None = None, **options) -> NpuStats:
    """Run ``program`` on the machine ``cfg`` and return its :class:`NpuStats`.

    Args:
        program: the ISA program.
        cfg: ``archsim.config.MachineConfig``.
        memory: a MemoryPort; default :meth:`SimpleMemory.from_config(cfg)
            <archsim.npu.simple_memory.SimpleMemory.from_config>` (ideal-ish memory).
        **options: forwarded to :class:`Executor` (``dma_issue_per_cycle``, queue depths,
            ``max_cycles``).

    Raises:
        SimulationError: see :meth:`Executor.run` and :func:`archsim.npu.loader.load_program`.
    """
    if memory is None:
        memory = SimpleMemory.from_config(cfg)
    return Executor(program, cfg, memory, **options).run()


__all__ = ["Executor", "run_timing"]
