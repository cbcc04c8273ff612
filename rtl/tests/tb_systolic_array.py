"""Co-simulation of rtl/systolic_array.v against the NPU timing model and numpy's matmul.

The expected behaviour of every cycle is derived from the simulator's own NPU timing rules
(``archsim.npu.timing``, looked up at call time): a tile started in cycle f issues
``tile_issue_interval_cycles(n)`` rows (the next tile may start right after), its last row
leaves in cycle ``f + tile_latency_cycles(H, W, n)`` (``done``), a preload takes
``weight_preload_cycles(H)`` cycles and the next preload may begin once the previous one is
done and the tile that consumed it has started (the rules of ``archsim.npu.executor``'s
systolic arrays). Every output row must equal the matching row of numpy's ``A @ B``. A further test runs
random SA_LOADW / SA_MATMUL programs through the simulator's executor
(``archsim.npu.executor.run_timing``) and checks that the RTL, issuing the same instructions as
early as it accepts them, completes each one in the same cycle.

Stimulus: seeded random preloads and tiles (n from 1 up to 3H, operands random or extreme),
offered whether or not the array is ready (a refused offer must be ignored), with garbage on
every data input the array must not read.
"""
from __future__ import annotations

import cocotb
import numpy as np

from archsim import cosim
from tb_common import (check_parameters, end_cycle, job, next_cycle_drive, pack, reset,
                       rng_for, settle, start_clock_and_reset, unpack)

PARAMS = ["H", "W", "DATA_W", "ACC_W", "MIN_ROWS", "NROWS_W"]
IDLE = {"load": 0, "w_data": 0, "start": 0, "swap": 0, "n_rows": 0, "a_data": 0}
SIGNALS = ("load_ready", "shadow_valid", "start_ready", "w_ready", "a_ready", "c_valid", "done")


def _params():
    p = job().parameters
    return p["H"], p["W"], p["DATA_W"], p["ACC_W"], p["MIN_ROWS"], p["NROWS_W"]


def _matrix(rng, rows, cols, extreme):
    _, _, dw, _, _, _ = _params()
    lo, hi = -(1 << (dw - 1)), (1 << (dw - 1)) - 1
    if extreme:
        vals = [rng.choice((lo, hi, lo + 1, hi - 1, 0, -1, 1)) for _ in range(rows * cols)]
    else:
        vals = [rng.randint(lo, hi) for _ in range(rows * cols)]
    return np.array(vals, dtype=np.int64).reshape(rows, cols)


class _Expected:
    """What the NPU model says the array must do, cycle by cycle."""

    def __init__(self, h, w):
        self.h, self.w = h, w
        self.next_start_at = 0        # start_ready from this cycle
        self.load_started_at = -1
        self.load_done_at = 0         # no preload running from this cycle
        self.shadow_loaded = False    # a preload since the last swap
        self.shadow_free_at = 0       # the tile that took the last preload has started
        self.active_b = np.zeros((h, w), dtype=np.int64)
        self.shadow_b = np.zeros((h, w), dtype=np.int64)
        self.load_b = None
        self.out_rows: dict[int, tuple[int, int, np.ndarray]] = {}   # cycle -> (tile, i, row)
        self.done_at: dict[int, int] = {}                             # cycle -> tile
        self.feed: list[np.ndarray] = []   # rows of A still to feed, one per cycle
        self.tiles = 0

    def shadow_valid(self, c):
        return self.shadow_loaded and c >= self.load_done_at

    def start_ready(self, c):
        return c >= self.next_start_at


async def _run(dut, name, rng, n_cycles, p_load, p_start, p_swap, extreme=False,
               serial=False, max_rows=None):
    """Drive random preloads and tiles for ``n_cycles`` cycles; compare every output every
    cycle with the NPU model. Returns (tiles started, rows fed, cycles)."""
    h, w, dw, acc_w, _, nrows_w = _params()
    timing = cosim.npu_timing_module()
    max_rows = max_rows or 3 * h
    exp = _Expected(h, w)
    rows_fed = 0
    for c in range(n_cycles):
        # ---- what to offer this cycle
        in_flight = bool(exp.out_rows) or bool(exp.feed)
        want_load = rng.random() < (p_load if not exp.shadow_loaded else p_load / 4)
        want_start = rng.random() < p_start and not (serial and in_flight)
        if serial:
            want_load = want_load and not exp.shadow_loaded and c >= exp.load_done_at
        n = rng.randint(1, max_rows)
        swap = int(rng.random() < p_swap)
        a = _matrix(rng, n, h, extreme)
        new_b = _matrix(rng, h, w, extreme)
        # ---- the model's answers for this cycle
        start_ready = exp.start_ready(c)
        shadow_valid = exp.shadow_valid(c)
        start_ok = want_start and start_ready and (not swap or shadow_valid)
        swap_now = start_ok and swap
        load_ready = c >= max(exp.load_done_at, exp.shadow_free_at)
        load_ok = want_load and load_ready
        loading = exp.load_started_at < c < exp.load_done_at
        if start_ok:
            exp.feed = [a[i] for i in range(n)]
        feed_row = exp.feed.pop(0) if (exp.feed and (start_ok or not start_ready)) else None
        want = {"load_ready": load_ready, "shadow_valid": shadow_valid,
                "start_ready": start_ready, "w_ready": load_ok or loading,
                "a_ready": feed_row is not None, "c_valid": c in exp.out_rows,
                "done": c in exp.done_at}
        # ---- drive
        await next_cycle_drive()
        dut.load.value = int(want_load)
        if load_ok:
            exp.load_b = new_b
        if load_ok or loading:
            k = c - (c if load_ok else exp.load_started_at)
            dut.w_data.value = pack(exp.load_b[h - 1 - k], dw)
        else:
            dut.w_data.value = rng.getrandbits(w * dw)
        dut.start.value = int(want_start)
        dut.swap.value = swap
        dut.n_rows.value = n if want_start else rng.getrandbits(nrows_w)
        dut.a_data.value = (pack(feed_row, dw) if feed_row is not None
                            else pack(a[0], dw) if want_start else rng.getrandbits(h * dw))
        await settle()
        got = {s: int(getattr(dut, s).value) for s in SIGNALS}
        want = {k: int(v) for k, v in want.items()}
        ctx = (f"{name}: cycle {c}, offered load={int(want_load)} start={int(want_start)} "
               f"swap={swap} n={n}; tiles so far {exp.tiles}")
        assert got == want, f"{ctx}: outputs {got} != NPU model {want}"
        if c in exp.out_rows:
            t, i, ref = exp.out_rows.pop(c)
            row = unpack(int(dut.c_data.value), w, acc_w)
            assert row == [int(x) for x in ref], (
                f"{ctx}: tile {t} output row {i} = {row} != numpy A@B row {ref.tolist()}")
        exp.done_at.pop(c, None)
        # ---- advance the expected state past this cycle's edge (a swap takes the shadow it
        # finds; a preload starting in the same cycle fills the shadow after it)
        if start_ok:
            if swap_now:
                exp.active_b = exp.shadow_b
                exp.shadow_loaded = False
                exp.shadow_free_at = c
            interval = timing.tile_issue_interval_cycles(n)
            done = c + timing.tile_latency_cycles(h, w, n)
            ref = cosim.models.reference_matmul(a, exp.active_b)
            for i in range(n):
                exp.out_rows[done - (interval - 1 - i)] = (exp.tiles, i, ref[i])
            exp.done_at[done] = exp.tiles
            exp.next_start_at = c + interval
            exp.tiles += 1
            rows_fed += n
        if load_ok:
            exp.load_started_at = c
            exp.load_done_at = c + timing.weight_preload_cycles(h)
            exp.shadow_loaded = True
            exp.shadow_b = new_b
        await end_cycle()
    return exp.tiles, rows_fed, n_cycles


async def _setup(dut):
    await start_clock_and_reset(dut, IDLE)
    check_parameters(dut, PARAMS)


@cocotb.test()
async def test_tile_cycle_count_equals_npu_model_latency(dut):
    """One tile at a time after its preload: done comes tile_latency_cycles(H, W, n) cycles
    after start and weight_preload_cycles(H) after the preload begins."""
    name = "test_tile_cycle_count_equals_npu_model_latency"
    await _setup(dut)
    h = _params()[0]
    tiles, rows, cycles = await _run(dut, name, rng_for(name), job().count(100 * h),
                                     p_load=0.5, p_start=0.5, p_swap=0.9, serial=True)
    job().record(name, stimuli=rows, cycles=cycles, tiles=tiles)


@cocotb.test()
async def test_outputs_equal_numpy_matmul_with_extreme_operands(dut):
    """Full-scale operands (min/max of DATA_W, 0, +-1): every output row equals numpy's A @ B
    (the sums are exact in ACC_W bits)."""
    name = "test_outputs_equal_numpy_matmul_with_extreme_operands"
    await _setup(dut)
    h = _params()[0]
    tiles, rows, cycles = await _run(dut, name, rng_for(name), job().count(100 * h),
                                     p_load=0.4, p_start=0.4, p_swap=0.6, extreme=True)
    job().record(name, stimuli=rows, cycles=cycles, tiles=tiles)


@cocotb.test()
async def test_pipelined_tiles_issue_every_model_interval(dut):
    """start offered every cycle: tiles follow each other every tile_issue_interval_cycles(n)
    (short tiles padded to MIN_ROWS), each finishing at its own model latency."""
    name = "test_pipelined_tiles_issue_every_model_interval"
    await _setup(dut)
    h = _params()[0]
    tiles, rows, cycles = await _run(dut, name, rng_for(name), job().count(100 * h),
                                     p_load=0.2, p_start=1.0, p_swap=0.3, max_rows=6)
    job().record(name, stimuli=rows, cycles=cycles, tiles=tiles)


@cocotb.test()
async def test_preload_overlaps_running_tiles_and_swaps_weights(dut):
    """Preloads offered at random while tiles run: accepted exactly when the model allows; a
    swap tile computes with the new weights, others with the old."""
    name = "test_preload_overlaps_running_tiles_and_swaps_weights"
    await _setup(dut)
    h = _params()[0]
    tiles, rows, cycles = await _run(dut, name, rng_for(name), job().count(150 * h),
                                     p_load=0.6, p_start=0.5, p_swap=0.5)
    job().record(name, stimuli=rows, cycles=cycles, tiles=tiles)


def _executor_finish_cycles(items, cfg):
    """Finish cycle of every prefix of an SA program on the simulator's executor.

    ``items``: ``("L",)`` for SA_LOADW of a full H x W tile, ``("M", m)`` for SA_MATMUL of m
    rows. Returns ``stats.cycles`` of ``run_timing`` on items[:1], items[:2], ...: the cycle at
    which the last instruction of the prefix has completed (NPU cycles from 0)."""
    from archsim.npu.executor import run_timing
    from isa.encoding import Instruction
    from isa.program import Program

    h, w = cfg.npu.array_height, cfg.npu.array_width
    out = []
    for i in range(1, len(items) + 1):
        prog = Program()
        for it in items[:i]:
            if it[0] == "L":
                prog.emit("sa", Instruction("SA_LOADW", array=0, w=0, k=h, n=w, dtype="fp16"))
            else:
                prog.emit("sa", Instruction("SA_MATMUL", array=0, src=1 << 16, dst=1 << 20,
                                            m=it[1], n=w, k=h, acc=0, dtype="fp16",
                                            out_dtype="fp16"))
        out.append(int(run_timing(prog, cfg).cycles))
    return out


@cocotb.test()
async def test_sa_programs_complete_in_the_cycles_of_the_simulator_executor(dut):
    """Random SA_LOADW / SA_MATMUL programs on one array, issued to the RTL as early as it
    accepts them under the executor's ordering rules (tiles in order, preloads in order, a
    preload only once the tile consuming the previous one has started, a tile swaps iff a
    preload precedes it). After every instruction, the RTL's latest completion (a tile's done
    pulse, a preload's shadow_valid) equals archsim.npu.executor.run_timing's cycles for that
    program prefix; every output row equals numpy's A @ B."""
    name = "test_sa_programs_complete_in_the_cycles_of_the_simulator_executor"
    await _setup(dut)
    rng = rng_for(name)
    h, w, dw, acc_w, _, nrows_w = _params()
    total_cycles = total_rows = 0
    for prog_i in range(job().count(12)):
        items = [("L",)]
        for _ in range(rng.randint(3, 9)):
            items.append(("L",) if rng.random() < 0.4 else ("M", rng.randint(1, 3 * h)))
        if items[-1][0] == "L":
            items.append(("M", rng.randint(1, 3 * h)))
        want = _executor_finish_cycles(items, job().cfg)      # the simulator's executor
        mm = [i for i, it in enumerate(items) if it[0] == "M"]
        ld = [i for i, it in enumerate(items) if it[0] == "L"]
        # the load a tile consumes (latest load since the previous tile), and its consumer
        consumes = {}
        last_load = None
        for i, it in enumerate(items):
            if it[0] == "L":
                last_load = i
            else:
                consumes[i] = last_load
                last_load = None
        consumer = {l: m for m, l in consumes.items() if l is not None}
        weights = {i: _matrix(rng, h, w, False) for i in ld}
        acts = {i: _matrix(rng, items[i][1], h, False) for i in mm}
        await reset(dut, IDLE)
        started: dict[int, int] = {}       # item -> accept cycle
        completed: dict[int, int] = {}     # item -> completion cycle seen on the RTL
        awaiting_done: list[int] = []      # started tiles in start order
        out_rows: list[tuple[int, int, np.ndarray]] = []   # expected rows in order
        feed: list[np.ndarray] = []
        load_data = None
        load_cycle = -1
        active = np.zeros((h, w), dtype=np.int64)
        mi = li = 0
        cycle = 0
        limit = 50 + sum(2 * h + w + 4 + (it[1] if it[0] == "M" else 0) for it in items)
        while len(completed) < len(items):
            missing = sorted(set(range(len(items))) - set(completed))
            assert cycle < limit, (f"{name}: program {prog_i} {items}: cycle {cycle}, still "
                                   f"waiting for items {missing}")
            await next_cycle_drive()          # registered ready flags are final here
            load_ready = int(dut.load_ready.value)
            start_ready = int(dut.start_ready.value)
            shadow_valid = int(dut.shadow_valid.value)
            # ---- next tile (program order among tiles)
            do_start = False
            if mi < len(mm):
                i = mm[mi]
                need = consumes[i]
                loads_before = all(l in started for l in ld if l < i)
                do_start = (start_ready and loads_before
                            and (need is None or shadow_valid))
            # ---- next preload (program order among preloads)
            do_load = False
            if li < len(ld):
                j = ld[li]
                prev_loads = [l for l in ld if l < j]
                prev_consumer = consumer.get(prev_loads[-1]) if prev_loads else None
                consumer_ok = (prev_consumer is None or prev_consumer > j
                               or prev_consumer in started
                               or (do_start and prev_consumer == mm[mi]))
                do_load = bool(load_ready) and consumer_ok
            dut.start.value = int(do_start)
            dut.swap.value = int(do_start and consumes[mm[mi]] is not None)
            if do_start:
                i = mm[mi]
                dut.n_rows.value = items[i][1]
                feed = [acts[i][r] for r in range(items[i][1])]
                if consumes[i] is not None:
                    active = weights[consumes[i]]
                ref = cosim.models.reference_matmul(acts[i], active)
                out_rows += [(i, r, ref[r]) for r in range(items[i][1])]
                started[i] = cycle
                awaiting_done.append(i)
                mi += 1
            else:
                dut.n_rows.value = rng.getrandbits(nrows_w)
            row = feed.pop(0) if feed else None
            dut.a_data.value = pack(row, dw) if row is not None else rng.getrandbits(h * dw)
            dut.load.value = int(do_load)
            if do_load:
                load_data = weights[ld[li]]
                load_cycle = cycle
                started[ld[li]] = cycle
                li += 1
            k = cycle - load_cycle
            dut.w_data.value = (pack(load_data[h - 1 - k], dw) if 0 <= k < h
                                else rng.getrandbits(w * dw))
            await settle()
            ctx = f"{name}: program {prog_i} {items}, cycle {cycle}"
            assert int(dut.w_ready.value) == int(0 <= k < h), f"{ctx}: w_ready differs"
            if int(dut.c_valid.value):
                assert out_rows, f"{ctx}: an output row nobody expects"
                i, r, ref = out_rows.pop(0)
                got = unpack(int(dut.c_data.value), w, acc_w)
                assert got == [int(x) for x in ref], (
                    f"{ctx}: item {i} output row {r} = {got} != numpy {ref.tolist()}")
            if int(dut.done.value):
                assert awaiting_done, f"{ctx}: done without a tile in flight"
                completed[awaiting_done.pop(0)] = cycle
            if int(dut.shadow_valid.value):     # a preload is complete from this cycle on
                for j in ld:
                    if j in started and j not in completed and cycle > started[j]:
                        completed[j] = cycle
            # prefix check as soon as every item of a prefix has completed
            p = 0
            while p < len(items) and p in completed:
                p += 1
            for q in range(p):
                rtl = max(completed[x] for x in range(q + 1))
                assert rtl == want[q], (
                    f"{ctx}: after item {q} {items[q]} the RTL has completed everything at "
                    f"cycle {rtl}, the executor (run_timing) at cycle {want[q]}; RTL "
                    f"completions {completed}, accepts {started}")
            await end_cycle()
            cycle += 1
        total_cycles += cycle
        total_rows += sum(items[i][1] for i in mm)
    job().record(name, stimuli=total_rows, cycles=total_cycles)
