"""Whole-system simulation of one iteration: compile, execute on NPU + HBM/PIM, report.

``simulate_iteration(cfg, model, batch)`` is the cycle-level path behind ``archsim run`` /
``archsim compare``, the serving timers and the sweeps. It does no I/O and prints nothing.

Pipeline (one device of the system is simulated):

1. **Compile** (:func:`mapping.compiler.compile_layers`): the batch's requests are placed on
   PIM channels by ``system.channel_policy`` (or keep the batch's, ``CompileOptions(channels=
   'keep')``; :mod:`mapping.channels`), split into ``system.sub_batches`` sub-batches, and
   a *window* of consecutive decoder layers of pipeline stage 0 is compiled into one ISA program
   (interleaved across layers by the stage schedule of DESIGN §3 when ``sub_batches > 1``).
2. **Execute** the program with the NPU timing executor (:class:`archsim.npu.executor.Executor`
   with its fast-forward, per-instruction times from
   :class:`archsim.npu.observe.InstructionTimes`) against the HBM model
   (:class:`archsim.memory.kernel.KernelMemory`, the compiled twin of
   :class:`archsim.memory.system.MemorySystem`; ``memory="exact"`` uses the latter). NPU DMA
   requests and PIM commands go through the same per-channel controllers, so they contend for
   command bus, banks and data bus under the configured row-buffer mode (dual: separate memory
   and PIM row buffers; single: the channel switches between memory and PIM mode).
   Tensor-parallel all-reduces occupy their collective stream for the ring all-reduce time.
3. **Assemble** an :class:`archsim.results.IterationResult`.

Identical layers (the only reuse, stated in the result). Every decoder layer of a decode
iteration sees the same batch, lengths, sub-batches and channel placement (the compiler's
``CompiledProgram.layer_key``; with ``kv_placement`` ``fixed`` the KV of a request is on the same
channel in every layer), so layer programs differ only in base addresses. With the default
``window = 4`` layers 0..3 are simulated as one program: layer 0 carries the pipeline prologue
(stages A, B), layers 1 and 2 are periods of the steady state (stages C + D: projection/FFN of
a layer overlapping QKV of the next on the NPU while PIM runs attention; layer 1 is still
settling), layer 3 the epilogue (E, F). A stage of ``L`` layers is then ``layers 0, 1 +
(L − 3) × layer 2 + layer 3``: layers 0, 1, 2 and ``L − 1`` are cycle-level (``L − 1`` is timed
by the window's last layer), layers ``3 … L − 2`` are *reused* from layer 2 (in general
:func:`archsim.system.reuse.steady_layers`: the window's middle layer ``window // 2``, or
with five layers or more its layers ``2 … window − 2`` in turn, so that a longer window
averages the spread of identical layers' times). ``layers="all"`` simulates every layer of the
stage instead. A layer's cycles are the interval between the completion of the previous
layer's last instruction and the completion of its own (so layer times add up to the stage).
Work-proportional quantities of reused layers (bytes per channel, DRAM/PIM command energy,
array and PIM busy cycles) are those of an average simulated layer; background DRAM energy is
time-proportional.

Parallelism. Tensor-parallel devices are symmetric: the simulated device's time is the
system's. Pipeline parallelism (``pp`` stages) is a pipeline of devices holding ``L / pp``
layers each, timed by the GPipe schedule of :mod:`archsim.system.pipeline`: with one batch in
flight (``system.micro_batches: 1``) an iteration is ``pp × stage time + (pp − 1) × hand-off
+ LM head`` (hand-off: ``tokens × d_model × dtype`` bytes over ``system.interconnect`` plus one
link latency); with ``micro_batches: M > 1`` the micro-batches flow through the stages one behind
the other (:func:`archsim.system.pipeline.simulate_micro_batches`); ``extra["pipeline"]`` holds
the schedule (bubble fraction, when each micro-batch's tokens are out).

LM head. The compiled program covers the decoder layers only; the final norm and LM head GEMM
(``[tokens, d_model] × [d_model, vocab / tp]``) of the last stage are timed *analytically* with
the NPU's own closed-form rules (:func:`archsim.npu.timing.lm_head_cycles`) and reported as
stage ``lm_head``; ``include_lm_head=False`` leaves them out (the NeuPIMs evaluation times the
decoder blocks).

Speed. The memory is :class:`archsim.memory.kernel.KernelMemory` (the reference controller's
policy in numba) and the executor's whole event loop runs compiled beside it
(:mod:`archsim.npu.cloop` over :mod:`archsim.npu.tables`, tested identical to the Python
executor); numbers: ``benchmarks/bench_system.py``; JIT cached: :mod:`archsim.memory.kernel.jit`.

Energy (:mod:`archsim.energy.model`). DRAM and PIM command energy come from the memory model
(IDD method, :mod:`archsim.memory.energy`); the NPU's actions (MACs, scratchpad bytes, vector
element-passes, DMA/bus bytes, link bytes) are counted from the window's program
(:func:`archsim.energy.counts.count_program`) and checked against the executor's statistics
(a mismatch is a simulator bug), the analytic LM head's by :func:`archsim.energy.counts.lm_head_counts`;
the preset's energy table prices them; leakage is the NPU die area × W/mm² × time. Energy per
token is system energy (all devices) ÷ tokens; ``extra["energy"]`` has the counts, the
per-action table and the reconciliation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archsim.config import MachineConfig, parallel_degrees
from archsim.errors import ArchsimError
from archsim.npu.executor import Executor
from archsim.npu.observe import InstructionTimes
from archsim.npu.stats import NpuStats
from archsim.npu.timing import lm_head_cycles
from archsim.results import IterationResult, LayerTiming, TraceEvent
from archsim.npu.loader import gc_paused, load_program
from archsim.system.events import MAX_EVENTS, timeline_events, unit_intervals
from archsim.system.pipeline import gpipe_schedule
from archsim.system.reuse import stage_layer_times, steady_layers
from archsim.system.resources import HANDOFF_MNEMONICS, stage_resource_account, union_length
from archsim.system.critical import annotate_stages, critical_path, path_totals, stream_operands

DEFAULT_WINDOW = 4
"""Consecutive layers simulated per iteration: prologue (0), transient (1), steady state (2),
epilogue (3); measured: layer 1 is still ~3 % faster than the steady state on small models."""


# --------------------------------------------------------------------------------------------
# Analytic pieces (documented formulas)
# --------------------------------------------------------------------------------------------
def output_tokens(batch: Any, phase: str) -> int:
    """Tokens an iteration of ``batch`` produces (the LM head's rows): one per request, except
    in a ``mixed`` iteration a prompt chunk that does not reach the end of its prompt
    (``input_len`` known and ``seq_len < input_len``: Sarathi-Serve samples no token for it)."""
    if phase != "mixed":
        return len(batch)
    return sum(1 for r in batch if r.input_len is None or r.seq_len >= r.input_len)


def pipeline_handoff_cycles(cfg: MachineConfig, size_bytes: int) -> float:
    """NPU cycles (unrounded) of one hand-off of ``size_bytes`` between pipeline stages (the
    ``bytes`` of a ``SEND``): :func:`archsim.npu.timing.pipeline_handoff_time_s` on
    ``system.interconnect`` times the NPU clock."""
    from archsim.npu.timing import pipeline_handoff_time_s

    link = cfg.system.interconnect
    return pipeline_handoff_time_s(size_bytes, link.bandwidth_bytes_per_s,
                                   link.latency_ns) * cfg.npu.freq_mhz * 1e6


# --------------------------------------------------------------------------------------------
# One simulated window of layers
# --------------------------------------------------------------------------------------------
@dataclass
class WindowRun:
    """A window of consecutive layers executed as one program (one device).

    Attributes:
        compiled: the :class:`mapping.compiler.CompiledProgram` (None when the program was
            loaded, not compiled: :func:`execute_program`).
        program: the executed :class:`isa.program.Program` (with its debug table).
        stats: the executor's :class:`archsim.npu.stats.NpuStats` (NPU cycles).
        memory: the memory system after the run (``KernelMemory`` or ``MemorySystem``).
        mem_stats: ``memory.stats()`` (memory clock; units in every key).
        times: per stream ``(start, end)`` lists of every instruction (NPU cycles, -1: no work).
        sync: per stream ``(reached, passed/fired)`` lists of every WAIT and SIGNAL (NPU cycles,
            -1 elsewhere; :class:`archsim.npu.observe.InstructionTimes`).
        layer_end: ``{layer: NPU cycle}`` completion of the layer's last instruction.
        stage_end: ``[(stage name, NPU cycle)]`` in schedule order, monotone (prefix max).
        body_cycles: NPU cycles until the last instruction other than a pipeline hand-off
            (``SEND``/``RECV``) completed (= ``stats.cycles`` without a hand-off).
        send_bytes / send_cycles: bytes and simulated NPU cycles of the program's ``SEND``
            (0 when it has none).
        wall_s: wall-clock seconds of compile + execution.
        compile_s: wall-clock seconds of the compile (0 for a loaded program).
        phase_s: wall-clock seconds of the execution's parts: ``load`` (program checks),
            ``prepare`` (executor and memory set-up; the compiled loop's tables), ``run``
            (the event loop), ``report`` (per-layer and per-stage times, memory statistics).
        action_counts / operands: the program's :class:`archsim.energy.counts.NpuActionCounts`
            and per stream its instructions' mnemonics and WAIT/SIGNAL semaphores
            (:func:`archsim.system.critical.stream_operands`), from the compiled loop's pass
            over them (None without it: read from the instructions).
    """

    compiled: Any
    program: Any
    stats: NpuStats
    memory: Any
    mem_stats: dict
    times: dict
    layer_end: dict[int, float]
    stage_end: list[tuple[str, float]]
    body_cycles: float = 0.0
    send_bytes: int = 0
    send_cycles: int = 0
    wall_s: float = 0.0
    compile_s: float = 0.0
    phase_s: dict = field(default_factory=dict)
    sync: dict = field(default_factory=dict)
    action_counts: Any = None
    operands: dict | None = None


def _make_memory(cfg: MachineConfig, kind: str, keep_log: bool):
    if kind == "exact":
        from archsim.memory.system import MemorySystem
        return MemorySystem(cfg)
    if kind != "fast":
        raise ArchsimError(f"memory model {kind!r} not one of ['fast', 'exact']")
    from archsim.memory.kernel import KernelMemory, KernelUnsupported
    try:
        return KernelMemory(cfg, keep_log=keep_log)
    except KernelUnsupported:
        from archsim.memory.system import MemorySystem
        return MemorySystem(cfg)


# no cyclic GC while a program runs and is reported: it kept traversing the program's 10^5-10^6
# live instructions (~1 s of make demo's job; the compiler pauses it itself)
@gc_paused()
def execute_program(program: Any, cfg: MachineConfig, *, memory: str = "fast",
                    keep_log: bool = False, allreduce: bool = True, compiled: bool = False,
                    **executor_options: Any) -> WindowRun:
    """Execute one device's ISA ``program`` and break its time down by layer and stage.

    The layer and stage of every instruction come from the program's debug table
    (:class:`isa.program.DebugTable`, written by the compiler into the container); the layers
    of the window are those the table names. ``allreduce=False`` leaves ``ALL_REDUCE`` untimed.
    ``compiled=True``: ``program`` is the one :mod:`mapping.compiler` just produced for ``cfg``
    (its instructions are not checked again: :func:`archsim.npu.loader.load_program`).

    Raises:
        ArchsimError: the program has no debug table (a hand-written program: run it with
            ``archsim run --program``, which needs none, or compile one).
        SimulationError: the program does not fit the machine or deadlocks.
    """
    import time as _time

    dbg = program.debug
    if dbg is None:
        raise ArchsimError("the program has no debug table (op, layer, stage per instruction), "
                           "so its time cannot be split by layer: compile it with "
                           "`archsim compile -o DIR`")
    t0 = _time.perf_counter()
    loaded = load_program(program, cfg, compiled=compiled)
    t_load = _time.perf_counter()
    mem = _make_memory(cfg, memory, keep_log)
    rec = InstructionTimes(loaded)
    opts = {"fast_forward": True, **executor_options}
    # system.interconnect.allreduce: false leaves every ALL_REDUCE untimed, like allreduce=False
    ex = Executor(loaded, cfg, mem, collectives=allreduce and cfg.system.interconnect.allreduce,
                  observer=rec, **opts)
    counts = operands = None
    if ex.ff is not None:             # the energy counts etc. from the tables' pass (freed by
        from archsim.energy.counts import count_program   # the run)
        counts = count_program(program, cfg, ex.ff.info.opcode_groups)
        operands = stream_operands(ex.ff.info.opcode_groups, program.streams)
    t_prep = _time.perf_counter()
    stats = ex.run()
    t_run = _time.perf_counter()
    times = rec.times
    lay_all = sorted({int(x) for _, l, _ in dbg.streams.values() for x in np.unique(l) if x >= 0})
    layers = lay_all or [0]
    layer_end: dict[int, float] = {l: 0.0 for l in layers}
    stage_raw = np.zeros(len(dbg.stages), dtype=np.float64)
    body = 0.0
    send_bytes = send_cycles = 0
    for s, (st, en) in times.items():
        e = np.asarray(en, dtype=np.float64)
        o_arr, l_arr, g_arr = dbg.streams[s]
        sel = e >= 0
        if s.startswith("link"):
            instrs = program.streams[s]
            for i in np.flatnonzero(sel).tolist():
                if instrs[i].mnemonic in HANDOFF_MNEMONICS:
                    sel[i] = False
                    if instrs[i].mnemonic == "SEND":
                        send_bytes += instrs[i]["bytes"]
                        send_cycles += int(en[i] - st[i])
        if not sel.any():
            continue
        lo = l_arr[sel]
        ee = e[sel]
        body = max(body, float(ee.max()))
        for l in layers:
            m = lo == l
            if m.any():
                layer_end[l] = max(layer_end[l], float(ee[m].max()))
        sg = g_arr[sel].astype(np.int64)
        ok = sg >= 0
        if ok.any():
            np.maximum.at(stage_raw, sg[ok], ee[ok])
    if not send_bytes:
        body = float(stats.cycles)
    stage_end = []
    run = 0.0
    for name, v in zip(dbg.stages, stage_raw):
        run = max(run, float(v))
        stage_end.append((name, run))
    prev = 0.0
    for l in layers:                      # completion times are monotone over layers
        layer_end[l] = max(layer_end[l], prev)
        prev = layer_end[l]
    layer_end[layers[-1]] = max(layer_end[layers[-1]], body)
    mem_stats = mem.stats()
    t1 = _time.perf_counter()
    return WindowRun(None, program, stats, mem, mem_stats, times, layer_end, stage_end,
                     body, send_bytes, send_cycles, t1 - t0, 0.0,
                     {"load": t_load - t0, "prepare": t_prep - t_load, "run": t_run - t_prep,
                      "report": t1 - t_run}, rec.sync, counts, operands)


def run_window(cfg: MachineConfig, model: Any, batch: Any, layers: list[int], *,
               memory: str = "fast", keep_log: bool = False, allreduce: bool = True,
               compile_options: Any = None, phase: str = "decode",
               **executor_options: Any) -> WindowRun:
    """Compile ``layers`` (consecutive, pipeline stage 0) for ``batch`` in ``phase``
    (``decode``, ``prefill`` or ``mixed``) and execute them (:func:`execute_program`).

    Raises:
        mapping.errors.MappingError: the compiler cannot map the batch (CapacityError names the
            memory that ran out: a channel's KV rows, HBM, or the scratchpad).
        SimulationError: the program does not fit the machine or deadlocks.
    """
    import time as _time

    from mapping.compiler import compile_layers

    t0 = _time.perf_counter()
    cp = compile_layers(model, batch, cfg, phase, layers, compile_options)
    t1 = _time.perf_counter()
    win = execute_program(cp.program, cfg, memory=memory, keep_log=keep_log,
                          allreduce=allreduce, compiled=True, **executor_options)
    win.compiled = cp
    win.compile_s = t1 - t0
    win.wall_s += t1 - t0
    return win


# --------------------------------------------------------------------------------------------
# Busy intervals and events
# --------------------------------------------------------------------------------------------
def _stage_letter(name: str) -> str:
    """``'2:C'`` -> ``C``; ``'4:PF(L1)'`` -> ``pf``; ``'1:ATTN(L0)'`` -> ``attention``."""
    tail = name.split(":", 1)[-1]
    if "(" in tail:
        return {"QKV": "qkv", "ATTN": "attention", "PF": "proj_ffn"}.get(
            tail.split("(")[0], tail.split("(")[0].lower())
    return tail


# --------------------------------------------------------------------------------------------
# The public entry point
# --------------------------------------------------------------------------------------------
@dataclass
class SystemRun:
    """Everything one :func:`simulate` call produced.

    Attributes:
        result: the :class:`archsim.results.IterationResult`.
        window: the simulated :class:`WindowRun` (compiled program, executor statistics, memory).
        command_log: the memory command log of the window (``command_log=True``), else None.
        violations: timing-checker violations (``check_timing=True``), else None.
    """

    result: IterationResult
    window: WindowRun
    command_log: list | None = None
    violations: list | None = None
    details: dict = field(default_factory=dict)


def simulate(cfg: MachineConfig, model: Any, batch: Any, phase: str = "decode", *,
             system: str | None = None, layers: str = "window", window: int = DEFAULT_WINDOW,
             with_events: bool = True, command_log: bool = False, check_timing: bool = False,
             memory: str = "fast", allreduce: bool = True, include_lm_head: bool = True,
             compile_options: Any = None, **executor_options: Any) -> SystemRun:
    """Simulate one iteration and return the result with its artefacts (see
    :func:`simulate_iteration` for the arguments)."""
    from workloads.requests import Batch

    if isinstance(model, str):
        from workloads.models import get_model
        model = get_model(model)
    if "gpu" in cfg.system.engines:
        raise ArchsimError(f"system '{cfg.name}' is the GPU baseline: use "
                           "archsim.gpu.simulate_gpu_iteration (archsim.serving dispatches it)")
    if phase not in ("decode", "prefill", "mixed"):
        raise ArchsimError(f"phase {phase!r} not one of ['decode', 'prefill', 'mixed']")
    if layers not in ("window", "all"):
        raise ArchsimError(f"layers={layers!r} not one of ['window', 'all']")
    if window < 1:
        raise ArchsimError(f"window must be >= 1 layer, got {window}")
    if not isinstance(batch, Batch):
        batch = Batch(tuple(batch))
    if cfg.system.micro_batches > 1 and len(batch) > 1:
        from archsim.system.pipeline import simulate_micro_batches
        return simulate_micro_batches(cfg, model, batch, phase, system=system, layers=layers,
                                      window=window, with_events=with_events,
                                      command_log=command_log, check_timing=check_timing,
                                      memory=memory, allreduce=allreduce,
                                      include_lm_head=include_lm_head,
                                      compile_options=compile_options, **executor_options)
    if cfg.system.sub_batches == "auto":
        return _simulate_auto(cfg, model, batch, phase, system=system, layers=layers,
                              window=window, with_events=with_events, command_log=command_log,
                              check_timing=check_timing, memory=memory, allreduce=allreduce,
                              include_lm_head=include_lm_head, compile_options=compile_options,
                              **executor_options)
    # the batch is validated by the compiler (compile_layers), before anything is simulated
    tp, pp = parallel_degrees(cfg, model)
    per = model.n_layers // pp
    n_sim = per if layers == "all" or per <= window else window
    win_layers = list(range(n_sim))
    keep_log = bool(command_log or check_timing)
    win = run_window(cfg, model, batch, win_layers, memory=memory, keep_log=keep_log,
                     allreduce=allreduce, compile_options=compile_options, phase=phase,
                     **executor_options)
    return assemble_iteration(win, cfg, model, batch, phase, program_info(win.compiled),
                              system=system, with_events=with_events, command_log=command_log,
                              check_timing=check_timing, allreduce=allreduce,
                              include_lm_head=include_lm_head)


def _with_sub_batches(cfg: MachineConfig, n: int) -> MachineConfig:
    """``cfg`` with ``system.sub_batches = n`` (and no ``max_sub_batches`` of its own)."""
    default = type(cfg.system).model_fields["max_sub_batches"].default
    sysc = cfg.system.model_copy(update={"sub_batches": int(n), "max_sub_batches": default})
    return cfg.model_copy(update={"system": sysc})


def _simulate_auto(cfg: MachineConfig, model: Any, batch: Any, phase: str,
                   **kwargs: Any) -> SystemRun:
    """``system.sub_batches: auto``: the iteration with the fastest count of sub-batches.

    Decode: every count ``n = 1 .. system.max_sub_batches`` (at most the batch size) is
    compiled and simulated on the same window and the run with the fewest cycles per iteration
    is returned (ties: the smaller count) — the runtime's cost model is the simulator itself,
    so the choice is never slower than a fixed count in the range, and the run costs one
    simulation per candidate. Prefill compiles with one sub-batch whatever the key says; a
    mixed iteration tries counts up to its number of decode steps (its prompt chunks join
    sub-batches, :func:`mapping.subbatch.split_with_chunks`), one without decode steps only 1.
    ``result.extra["sub_batches_auto"]`` = ``{"chosen": n, "cycles_by_count": {n: cycles}}``
    and a note say what was tried.
    """
    steps = len(batch) if phase == "decode" else (
        0 if phase == "prefill" else int((batch.q_tokens(phase) == 1).sum()))
    cands = list(range(1, min(cfg.system.max_sub_batches, max(steps, 1)) + 1))
    runs: dict[int, SystemRun] = {}
    for n in cands:
        runs[n] = simulate(_with_sub_batches(cfg, n), model, batch, phase, **kwargs)
    best = min(cands, key=lambda n: (runs[n].result.cycles_per_iteration, n))
    run = runs[best]
    by = {n: float(r.result.cycles_per_iteration) for n, r in runs.items()}
    run.result.extra["sub_batches_auto"] = {"chosen": best, "cycles_by_count": by}
    run.result.notes.append(
        "sub_batches auto: chose " + str(best) + " of " + ", ".join(
            f"{n} ({c:,.0f} cycles)" for n, c in by.items()) + " (each count simulated)")
    return run


def program_info(compiled: Any) -> dict[str, Any]:
    """What the iteration's report needs of a compile besides the program itself:
    ``kv_placement`` (fixed/rotate/spill), ``kv_spilled_requests`` and ``kv_placement_text``,
    ``sub_batches``, the requests' ``channels`` and how they were chosen,
    ``channel_placement``, the scratchpad's ``buffer_plan`` (:class:`mapping.bufplan.BufferPlan`
    as a dict) and ``buffer_plan_text`` (the program directory's manifest stores the same
    keys)."""
    bp = compiled.buffer_plan
    return {"kv_placement": compiled.plan.kv_placement,
            "kv_spilled_requests": int(compiled.plan.kv_spilled),
            "kv_placement_text": compiled.kv_placement_text,
            "sub_batches": int(compiled.sub_batches.n_sub_batches),
            "channels": [int(c) for c in compiled.batch.channels],
            "channel_placement": compiled.channel_placement,
            "buffer_plan": bp.to_dict() if bp else None,
            "buffer_plan_text": bp.describe() if bp else ""}


@gc_paused()                    # as for execute_program
def assemble_iteration(win: WindowRun, cfg: MachineConfig, model: Any, batch: Any,
                       phase: str, info: dict[str, Any], *, system: str | None = None,
                       with_events: bool = True, command_log: bool = False,
                       check_timing: bool = False, allreduce: bool = True,
                       include_lm_head: bool = True) -> SystemRun:
    """The iteration of ``batch`` from one executed window of stage 0 (layer reuse,
    pipeline stages and hand-offs, LM head, utilisation, energy, events; module docstring).
    ``info``: :func:`program_info`. Used by :func:`simulate` and by
    :func:`archsim.system.program_dir.simulate_program`."""
    import time as _time

    t_report = _time.perf_counter()
    tp, pp = parallel_degrees(cfg, model)
    per = model.n_layers // pp
    win_layers = sorted(win.layer_end)
    n_sim = len(win_layers)
    keep_log = bool(command_log or check_timing)
    f_mhz = cfg.npu.freq_mhz
    n_tok = output_tokens(batch, phase)
    notes: list[str] = []
    cp = win.compiled
    routing = getattr(cp, "routing", None)
    ep = int(getattr(cp, "expert_parallel", 1) or 1)
    n_dev_tok = (output_tokens(cp.batch, phase) if cp is not None and ep > 1
                 else n_tok)                                # device 0's requests' tokens
    if routing is not None:
        imb = [routing.imbalance(l) for l in win_layers]
        notes.append(
            f"mixture of experts: {model.n_experts} experts, top-{model.experts_per_token}; "
            f"routing from the {routing.source}; simulated layers' expert load max/mean "
            + ", ".join(f"{x:.2f}" for x in imb)
            + ("" if n_sim == per else "; reused layers take the steady-state layer's routing "
               "(one sample of the router model)"))
    if ep > 1:
        notes.append(
            f"expert parallel {ep}: {ep} device groups of {tp} x {pp} device(s), each running "
            f"attention for its share of the {n_tok} requests (device 0: {n_dev_tok}) and "
            f"{model.n_experts // ep} experts, tokens exchanged by ALL_TO_ALL (pairwise "
            "exchange on system.interconnect); device 0 simulated, the others taken alike")

    # ---- per-layer times of one stage
    ends = [win.layer_end[l] for l in win_layers]
    sim_cycles = [ends[0]] + [ends[i] - ends[i - 1] for i in range(1, len(ends))]
    stage_layer_timing, note = stage_layer_times(sim_cycles, per)   # (cycles, source, from)
    if note:
        notes.append(note)
    if n_sim < min(3, per):
        notes.append(
            f"window of {n_sim} layer(s) has no steady-state layer between the pipeline "
            "prologue and epilogue, so the reused layer time is biased (GPT3-7B decode on "
            "neupims, against a 4-layer window: +4 % with 1 layer at batch 256, -16 % with 2 "
            "layers at batch 124); use window >= 3 for numbers to report")
    if info["kv_placement"] == "spill":
        notes.append("KV placement 'spill': " + info.get("kv_placement_text", ""))
    if info["kv_placement"] == "rotate" and n_sim < per:
        notes.append("KV placement 'rotate' (fixed did not fit): reused layers have their KV on "
                     "rotated channels; the per-channel loads are a permutation of the simulated "
                     "layer's, so its time is reused as equivalent (not bit-identical)")
    stage_cycles_dev = float(sum(c for c, _, _ in stage_layer_timing))
    work_scale = per / n_sim                                       # scaling of per-layer work

    # ---- the iteration: pp stages, hand-offs, LM head
    lm = lm_head_cycles(cfg, model, tp, n_dev_tok) if include_lm_head and n_dev_tok else None
    # the hand-off is the program's SEND (bytes in the instruction); the iteration adds the
    # unrounded rule (the executor holds the link for whole cycles: win.send_cycles)
    handoff = (pipeline_handoff_cycles(cfg, win.send_bytes) if pp > 1 and win.send_bytes
               else 0.0)
    # one batch in flight: S stages, S - 1 hand-offs, the LM head (archsim.system.pipeline)
    sched = gpipe_schedule([stage_cycles_dev], pp, handoff, lm["cycles"] if lm else 0.0)
    total = sched.makespan_cycles
    layer_timings: list[LayerTiming] = []
    for s in range(pp):
        for i, (c, src, frm) in enumerate(stage_layer_timing):
            if s == 0:
                layer_timings.append(LayerTiming(i, c / (f_mhz * 1e6), c, src, frm))
            else:
                layer_timings.append(LayerTiming(s * per + i, c / (f_mhz * 1e6), c, "reused", i))
    if pp > 1:
        notes.append(f"pipeline parallel: {pp} stages of {per} layers; stages 1..{pp - 1} reuse "
                     "stage 0's layer times (same batch, same layer shapes); one batch in flight "
                     "(system.micro_batches splits it: archsim.system.pipeline)")

    # ---- stages
    stage_cyc: dict[str, float] = {}
    prev = 0.0
    steady = {}
    win_intervals: list[tuple[str, float, float]] = []     # (stage, t0, t1) of the window
    for name, e in win.stage_end:
        letter = _stage_letter(name)
        stage_cyc[letter] = stage_cyc.get(letter, 0.0) + (e - prev)
        win_intervals.append((letter, prev, e))
        prev = e
    tail = max(0.0, float(ends[-1]) - prev)
    if tail:
        stage_cyc["drain"] = stage_cyc.get("drain", 0.0) + tail
        win_intervals.append(("drain", prev, float(ends[-1])))
    if n_sim < per:
        # reused layers: their time is split like the steady-state layers' stages
        reused_of = steady_layers(n_sim)
        lo = win.layer_end[reused_of[0] - 1] if reused_of[0] else 0.0
        hi = win.layer_end[reused_of[-1]]
        prev = 0.0
        for name, e in win.stage_end:
            a, b = max(prev, lo), min(e, hi)
            if b > a:
                letter = _stage_letter(name)
                steady[letter] = steady.get(letter, 0.0) + (b - a)
            prev = e
        span = sum(steady.values()) or 1.0
        extra_cyc = stage_cycles_dev - float(ends[-1])
        for k, v in steady.items():
            stage_cyc[k] = stage_cyc.get(k, 0.0) + extra_cyc * v / span
    stage_cyc = {k: v * pp for k, v in stage_cyc.items()}
    if handoff:
        stage_cyc["pipeline"] = (pp - 1) * handoff
    if lm:
        stage_cyc["lm_head"] = lm["cycles"]
    stage_seconds = {k: v / (f_mhz * 1e6) for k, v in stage_cyc.items() if v > 0}

    # ---- utilisation
    units = unit_intervals(win)
    npu = cfg.npu
    arr_busy = sum(union_length(st, en) for k, (st, en, _) in units.items()
                   if k.startswith("npu/array"))
    arr_busy_iter = arr_busy * work_scale * pp + (lm["array_busy_cycles"] if lm else 0.0)
    npu_util = arr_busy_iter / (npu.n_arrays * total)
    macs = win.stats.macs * work_scale * pp + (lm["macs"] if lm else 0.0)
    flops_util = macs / (npu.n_arrays * npu.array_height * npu.array_width * total)
    ratio = cfg.npu_to_mem_cycles(1.0)
    mem_total = total * ratio
    C = cfg.memory.org.channels
    peak = cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel
    chans = win.mem_stats["channels"]
    lm_bytes_per_ch = (lm["weight_bytes"] / C) if lm else 0.0
    bw = [min(1.0, ((c["bytes_read"] + c["bytes_written"]) * work_scale * pp + lm_bytes_per_ch)
              / (peak * mem_total)) for c in chans]
    pim_util = None
    pim_busy_ch = None
    if cfg.system.has_pim:
        pim_busy_ch = _pim_busy(win)
        if pim_busy_ch is not None:
            pim_util = min(1.0, float(np.sum(pim_busy_ch)) * work_scale * pp / (C * mem_total))

    # ---- energy (counts x energy per action: archsim.energy.model)
    from archsim.energy.counts import NpuActionCounts, count_program, lm_head_counts, reconcile
    from archsim.energy.model import npu_iteration_energy

    win_counts = (win.action_counts if win.action_counts is not None
                  else count_program(win.program, cfg))
    extra_counts = NpuActionCounts(link_bytes=float((pp - 1) * win.send_bytes))
    lm_bursts = 0.0
    if lm:
        extra_counts = extra_counts.plus(lm_head_counts(cfg, model, tp, n_dev_tok).scaled(tp))
        lm_bursts = lm["weight_bytes"] / cfg.memory.org.burst_bytes * tp
    energy = npu_iteration_energy(
        cfg, mem_energy_pj=win.mem_stats["energy_pj"], window_counts=win_counts,
        work_scale=work_scale, pp=pp, tp=tp * ep,
        window_mem_cycles=max(float(win.body_cycles) * ratio, 1.0),
        iteration_s=total / (f_mhz * 1e6), extra_counts=extra_counts, extra_rd_bursts=lm_bursts)
    energy_j = energy.joules
    recon = reconcile(win_counts, win.stats)
    bad = {k: v for k, v in recon.items() if v["counted"] != v["executed"]}
    if bad:
        raise ArchsimError(f"simulator bug: the energy model's action counts of the program "
                           f"disagree with the executor's statistics: {bad}")
    notes.append("energy: DRAM/PIM commands from the memory model (IDD method), NPU actions "
                 "counted from the program and reconciled with the executor's statistics, "
                 "priced by the preset's energy table (docs/energy.md); work of reused layers "
                 "= simulated average per layer, background and leakage scale with time")
    if lm:
        notes.append(f"LM head + final norm timed analytically ({lm['cycles']:.0f} NPU cycles: "
                     f"max(compute {lm['compute_cycles']:.0f}, weight streaming "
                     f"{lm['memory_cycles']:.0f}) + norm {lm['norm_cycles']:.0f}); not part of "
                     "the compiled program")
    if allreduce and cfg.system.interconnect.allreduce and tp > 1:
        notes.append(f"all-reduce: ring over {tp} devices on the interconnect "
                     f"({cfg.system.interconnect.bandwidth_bytes_per_s / 1e9:g} GB/s, "
                     f"{cfg.system.interconnect.latency_ns:g} ns/step), timed on the "
                     "collective stream inside the program")
    elif tp > 1:
        notes.append("all-reduce not timed (" + ("allreduce=False" if not allreduce else
                                                 "system.interconnect.allreduce: false") + ")")

    # ---- events, command log, checker
    events: list[TraceEvent] = []
    if with_events:
        events, cut = timeline_events(win, units)
        if cut:
            notes.append(f"timeline truncated to {MAX_EVENTS} events")
        notes.append(f"timeline shows the {n_sim} simulated layer(s) of stage 0 only")
    log = None
    violations = None
    if keep_log:
        log = win.memory.command_log()
    if check_timing:
        from archsim.memory.checker import check_log
        violations = check_log(log, cfg)
    ctx_tokens = int(np.sum(batch.seq_lens))
    stage_res = stage_resource_account(
        win.times, {s: [i.mnemonic for i in ins] for s, ins in win.program.streams.items()
                    if s.startswith("link")}, win_intervals)
    crit = critical_path(win.program.streams, win.times, win.sync, win.operands)
    annotate_stages(stage_res, crit, win_intervals)
    extra: dict[str, Any] = {
        "stage_resources": stage_res,
        "critical_path_cycles": path_totals(crit),
        "window_layers": n_sim, "stage_layers": per,
        "window_cycles": float(win.body_cycles),
        "stage_cycles": stage_cycles_dev,
        "lm_head": lm, "pipeline_handoff_cycles": handoff,
        "pipeline": {**sched.report(f_mhz),
                     "request_latency_cycles": {"mean": total, "max": total},
                     "request_latency_s": {"mean": total / (f_mhz * 1e6),
                                           "max": total / (f_mhz * 1e6)}},
        "moe": None if routing is None else {**routing.summary(), "expert_parallel": ep},
        "npu": {"array_utilisation_window": win.stats.array_utilisation,
                "busy_fractions_window": win.stats.busy_fractions(),
                "bound_window": win.stats.bound,
                "dma_bytes_window": win.stats.bytes_moved,
                "stall_cycles": {c: win.stats.stall_cycles(c) for c in
                                 ("semaphore", "memory", "array", "vector", "setup")}},
        "memory": {k: v for k, v in win.mem_stats.items() if k != "channels"},
        "pim_busy_mem_cycles_window": (None if pim_busy_ch is None else
                                       [float(x) for x in pim_busy_ch]),
        "compile": {"instructions": win.program.n_instructions,
                    "kv_placement": info["kv_placement"],
                    "sub_batches": int(info["sub_batches"]),
                    "channels": [int(c) for c in info["channels"]],
                    "channel_placement": info.get("channel_placement", ""),
                    "kv_spilled_requests": info.get("kv_spilled_requests", 0),
                    "kv_placement_text": info.get("kv_placement_text", ""),
                    "buffer_plan": info.get("buffer_plan"),
                    "buffer_plan_text": info.get("buffer_plan_text", ""),
                    "collectives": sum(1 for s, v in win.program.streams.items()
                                       if s.startswith("link") for i in v
                                       if i.mnemonic in ("ALL_REDUCE", "ALL_TO_ALL"))},
        # wall-clock seconds: the compile and the rest, that rest's parts (the executor's
        # phases, WindowRun.phase_s), and this function up to here (the iteration's report)
        "wall_s": {"compile": win.compile_s, "simulate": win.wall_s - win.compile_s,
                   **{k: float(v) for k, v in win.phase_s.items()},
                   "iteration_report": _time.perf_counter() - t_report},
        "memory_model": type(win.memory).__name__,
        "energy": {**energy.report(), "window_counts": win_counts.as_dict(),
                   "reconciliation": recon},
    }
    if violations is not None:
        extra["timing_check"] = {"commands": len(log), "violations": len(violations),
                                 "first": [str(v) for v in violations[:5]]}
        notes.append(f"timing checker: {len(log)} commands, {len(violations)} violations")
    res = IterationResult(
        system=system or cfg.name, model=model.name, phase=phase, batch_size=len(batch),
        tokens=n_tok, timing_source="cycle-level", cycles_per_iteration=total,
        npu_freq_mhz=f_mhz, layers=layer_timings, stage_seconds=stage_seconds,
        npu_util=min(1.0, npu_util), flops_util=min(1.0, flops_util), pim_util=pim_util,
        channel_bw_util=bw, energy_j=energy_j, config_name=cfg.name, tensor_parallel=tp,
        pipeline_parallel=pp, context_tokens=ctx_tokens, notes=notes, extra=extra,
        events=events, events_clock_mhz=f_mhz, expert_parallel=ep)
    return SystemRun(res, win, log, violations)


def _pim_busy(win: WindowRun) -> np.ndarray | None:
    """Per-channel memory cycles with a PIM command executing (from the memory model)."""
    fn = getattr(win.memory, "pim_busy_cycles", None)
    if fn is not None:
        return fn()[0].astype(np.float64)
    # exact MemorySystem: from its command log
    from archsim.memory.spec import gemv_cycles
    cfg = win.memory.cfg
    names = {"GWRITE": cfg.pim.gwrite_cycles, "READRES": cfg.pim.readres_cycles,
             "G_ACT": cfg.memory.timing.tRCDRD,
             "COMP": max(cfg.memory.burst_cycles, cfg.memory.timing.tCCD_S)}
    C = cfg.memory.org.channels
    per: list[list[tuple[int, int]]] = [[] for _ in range(C)]
    for r in win.memory.command_log():
        if r.command == "PIM_GEMV":
            per[r.channel].append((r.cycle, r.cycle + gemv_cycles(r.column, cfg)))
        elif r.command in names:
            per[r.channel].append((r.cycle, r.cycle + names[r.command]))
    out = np.zeros(C)
    for c, iv in enumerate(per):
        if iv:
            a = np.asarray(iv, dtype=np.float64)
            out[c] = union_length(a[:, 0], a[:, 1])
    return out


def simulate_iteration(cfg: MachineConfig, model: Any, batch: Any, phase: str = "decode",
                       **kwargs: Any) -> IterationResult:
    """Cycle-level simulation of one iteration of ``batch`` on the NPU(+PIM) system ``cfg``.

    Args:
        cfg: the machine (``archsim.config.load_config``); not a GPU configuration.
        model: a ``workloads.models.ModelSpec`` (or its registry name).
        batch: a ``workloads.requests.Batch`` (``seq_len`` = KV positions including this step's
            token; channels are (re)assigned by ``system.channel_policy``, see
            ``compile_options``).
        phase: ``"decode"`` (one new token per request; ``seq_len`` counts the context
            including it) or ``"prefill"`` (each request's whole prompt of ``seq_len`` tokens:
            the compiled prefill program, attention on the NPU, K/V stored into the cache) or
            ``"mixed"`` (chunked prefill: each request its ``q_tokens``, decode steps and prompt
            chunks in one program, :func:`mapping.compiler.compile_layers`). Layer reuse is the
            same for every phase.
        system: name written into the result (default ``cfg.name``).
        layers: ``"window"`` (default: simulate ``window`` consecutive layers and reuse the
            steady-state layer for the identical others, see the module docstring) or ``"all"``
            (every layer of a pipeline stage, one program).
        window: layers per window (default :data:`DEFAULT_WINDOW` = 4; 3 is within 0.5 % of it
            on GPT3-7B decode; below 3 the result carries a note on its bias).
        with_events: return timeline events (tracks ``npu/array{i}``, ``npu/vector{j}``,
            ``dma/dma{k}``, ``pim/ch{c}``, ``link/allreduce``; NPU cycles) in ``result.events``.
        command_log: keep the memory command log (see :func:`simulate` for getting it).
        check_timing: run the independent timing checker on the command log; the outcome is in
            ``result.extra["timing_check"]`` (commands, violations, first few).
        memory: ``"fast"`` (JIT twin, default) or ``"exact"`` (pure-Python controller).
        allreduce: time tensor-parallel all-reduces (default True).
        include_lm_head: add the analytic LM head (default True).
        compile_options: a ``mapping.compiler.CompileOptions``.
        **executor options: ``dma_issue_per_cycle``, ``sa_queue_depth``, ``vu_queue_depth``,
            ``max_cycles``, ``fast_forward`` of :class:`archsim.npu.executor.Executor`.

    Returns:
        :class:`archsim.results.IterationResult` (``timing_source="cycle-level"``; metric
        definitions in :data:`archsim.results.METRICS`; ``layers_simulated`` /
        ``layers_reused`` say how each layer was timed; ``notes`` list every approximation).

    Raises:
        ArchsimError: a GPU configuration, a phase other than decode/prefill/mixed, bad
            options.
        mapping.errors.CapacityError: the batch does not fit; the message names the resource
            (a channel's KV rows, HBM, scratchpad), the bytes needed and available.
        workloads.errors.WorkloadError: an empty batch or a request longer than the model's
            context (names its index).
        SimulationError: the program does not fit the machine or deadlocks.
    """
    return simulate(cfg, model, batch, phase, **kwargs).result


__all__ = ["simulate_iteration", "simulate", "SystemRun", "WindowRun", "run_window",
           "execute_program", "assemble_iteration", "program_info", "lm_head_cycles",
           "pipeline_handoff_cycles", "output_tokens", "DEFAULT_WINDOW"]
