"""The compiled event loop (archsim.npu.cloop) is the executor, bit for bit.

:class:`archsim.npu.executor.Executor` with ``fast_forward=True`` on the compiled memory runs the
whole program in :func:`archsim.npu.cloop._loop`; without it, the readable Python loop runs it
on the same memory. Both must give the same NPU statistics (stalls by cause, array, vector,
DMA and PIM channel counters), the same observer calls in the same order, the same memory
statistics and command log, and the same errors — on random programs (every engine, random
synchronisation, unaligned and multi-burst DMA, PIM command sequences, collectives, deadlocks)
and on programs the compiler produces for every NPU system.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.memory.kernel import KernelMemory
from archsim.npu.executor import Executor
from archsim.npu.loader import load_program
from isa.encoding import Instruction
from isa.program import DataAlloc, Program
from mapping.compiler import CompileOptions, compile_layers
from workloads import default_batch, get_model

_VU_OPS = ("VU_ADD", "VU_SCALE", "VU_SOFTMAX", "VU_GELU", "VU_LAYERNORM", "VU_COPY", "VU_DOT",
           "VU_TOPK", "VU_AXPY")


class _Calls:
    """Observer keeping every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, *args) -> None:
        self.calls.append(args)


def _vu(rng, m: str) -> Instruction:
    rows, cols = rng.randrange(1, 64), rng.randrange(1, 300)
    common = dict(dst=0, rows=rows, cols=cols, dtype="fp16")
    if m == "VU_ADD":
        return Instruction(m, a=0, b=0, bcast=rng.randrange(2), **common)
    if m == "VU_SCALE":
        return Instruction(m, src=0, imm=0.5, **common)
    if m == "VU_SOFTMAX":
        return Instruction(m, src=0, mask="none", len=0, lse=rng.randrange(2), **common)
    if m == "VU_GELU":
        return Instruction(m, src=0, form="tanh", **common)
    if m == "VU_LAYERNORM":
        return Instruction(m, src=0, params=0, eps_exp=5, **common)
    if m == "VU_COPY":
        return Instruction(m, src=0, src_stride=0, dst_stride=0, out_dtype="fp16", **common)
    if m == "VU_TOPK":
        return Instruction(m, src=0, k=rng.randrange(1, min(cols, 255) + 1), out_dtype="fp16",
                           **common)
    if m == "VU_AXPY":
        return Instruction(m, x=0, scale=0, acc=rng.randrange(2), **common)
    return Instruction(m, mat=0, vec=0, trans=rng.randrange(2), out_dtype="fp16", order="seq",
                       **common)


def _pim_run(rng, ch: int, rows: int, newton: bool) -> list[Instruction]:
    n = rng.randrange(1, 3)
    out = [] if newton else [Instruction("PIM_HEADER", channel=ch, n_gemvs=n)]
    for _ in range(n):
        out.append(Instruction("GWRITE", channel=ch, src=0, len=rng.randrange(1, 512),
                               dtype="fp16"))
        out.append(Instruction("G_ACT", channel=ch, row=rng.randrange(rows),
                               bg_mask=rng.choice((0, 0, 1, 3, 5))))
        if rng.random() < 0.5 and not newton:
            out.append(Instruction("PIM_GEMV", channel=ch, col=0, n_comps=rng.randrange(1, 17),
                                   dst=0, dtype="fp16", out_dtype="fp16"))
        else:
            out.append(Instruction("COMP", channel=ch, col=0, n_comps=rng.randrange(1, 5),
                                   dtype="fp16"))
            out.append(Instruction("READRES", channel=ch, dst=0, dtype="fp16"))
        out.append(Instruction("PIM_PRECHARGE", channel=ch, bg_mask=0))
    return out


def random_program(seed: int, cfg, *, n_events: int = 160, deadlock: bool = False) -> Program:
    """A random program over every engine kind. Work instructions are drawn one after the
    other onto random streams; a SIGNAL is placed on one stream and its WAIT on another stream
    later in that order, so the drawing order is a valid schedule (no deadlock) unless
    ``deadlock`` adds a WAIT nobody signals."""
    rng = random.Random(seed)
    org = cfg.memory.org
    size = 1 << 24
    p = Program(spad_size_bytes=cfg.npu.scratchpad.size_bytes)
    p.add_data(DataAlloc("w", 0, size, (size // 2,), "fp16", "weight"))
    pims = [f"pim{c}" for c in rng.sample(range(org.channels), 2)] if cfg.system.has_pim \
        else []
    names = ["dma0", "dma1", "sa", "vu0", "vu1", "link"] + pims
    for s in names:
        p.stream(s)
    arrays = cfg.npu.n_arrays
    sem = 0
    loaded = {a: False for a in range(arrays)}
    pending: list[tuple[int, str]] = []
    for _ in range(n_events):
        s = rng.choice(names)
        r = rng.random()
        if pending and r < 0.2:
            sm, src = pending.pop(rng.randrange(len(pending)))
            if src != s:
                p.emit(s, Instruction("WAIT", sem=sm, count=1))
            else:
                pending.append((sm, src))
        elif r < 0.35:
            sem += 1
            p.emit(s, Instruction("SIGNAL", sem=sem, count=1))
            pending.append((sem, s))
        elif s.startswith("dma"):
            cols = rng.choice((1, 7, 64, 100, 512, 1024))
            rows = rng.randrange(1, 20)
            dt = rng.choice(("fp16", "fp32"))
            es = 2 if dt == "fp16" else 4
            stride = cols * es + rng.choice((0, 0, 6, 64, 2048))
            hbm = rng.randrange(0, size - rows * stride - cols * es) // 2 * 2
            if rng.random() < 0.5:
                hbm = hbm // 64 * 64
            m = rng.choice(("DMA_LOAD", "DMA_LOAD", "DMA_STORE"))
            p.emit(s, Instruction(m, spad=0, hbm=hbm, rows=rows, cols=cols, stride=stride,
                                  dtype=dt))
        elif s == "sa":
            a = rng.randrange(arrays)
            if not loaded[a] or rng.random() < 0.3:
                p.emit(s, Instruction("SA_LOADW", array=a, w=0, k=rng.randrange(1, 129),
                                      n=rng.randrange(1, 129), dtype="fp16"))
                loaded[a] = True
            p.emit(s, Instruction("SA_MATMUL", array=a, src=0, dst=0, m=rng.randrange(1, 300),
                                  n=rng.randrange(1, 129), k=rng.randrange(1, 129), acc=0,
                                  dtype="fp16", out_dtype="fp16"))
        elif s.startswith("vu"):
            p.emit(s, _vu(rng, rng.choice(_VU_OPS)))
        elif s == "link":
            m = rng.choice(("ALL_REDUCE", "ALL_TO_ALL", "SEND", "RECV"))
            if m == "ALL_REDUCE":
                p.emit(s, Instruction(m, bytes=rng.randrange(1, 1 << 20), group=4, algo="ring"))
            elif m == "ALL_TO_ALL":
                p.emit(s, Instruction(m, bytes=rng.randrange(1, 1 << 20), group=4))
            else:
                p.emit(s, Instruction(m, bytes=rng.randrange(1, 1 << 20), peer=1))
        else:
            for ins in _pim_run(rng, int(s[3:]), org.rows, cfg.pim.commands == "newton"):
                p.emit(s, ins)
    if deadlock:
        p.emit(rng.choice(names), Instruction("WAIT", sem=sem + 7, count=2))
    for s in names:
        if rng.random() < 0.5:
            p.emit(s, Instruction("END"))
    return p


def _run(cfg, program, compiled: bool, **opts):
    mem = KernelMemory(cfg, keep_log=True)
    obs = _Calls()
    ex = Executor(program, cfg, mem, fast_forward=compiled, observer=obs, **opts)
    assert (ex.ff is not None) == compiled
    try:
        stats = ex.run()
    except SimulationError as exc:
        return ("error", str(exc), ex.now)
    return stats, obs.calls, mem.stats(), mem.command_log_array(), ex._pim_counter, ex.now


def _same(cfg, program, **opts):
    ref = _run(cfg, program, False, **opts)
    new = _run(cfg, program, True, **opts)
    assert len(ref) == len(new)
    if ref[0] == "error":
        assert new == ref
        return ref
    assert repr(new[0]) == repr(ref[0])
    assert new[1] == ref[1], "observer calls differ"
    assert new[2] == ref[2]
    assert np.array_equal(new[3], ref[3])
    assert new[4:] == ref[4:]
    return ref


@pytest.mark.parametrize("preset,sets", [
    ("neupims", []), ("npu-pim-blocked", []), ("npu-only", []),
    ("neupims", ["pim.command_queue_depth=4", "npu.dma.max_outstanding=64"]),
    ("neupims", ["npu.freq_mhz=800", "npu.dma.request_bytes=96"]),
    ("neupims", ["npu.dma.request_bytes=256", "npu.sa_queue_depth=1",
                 "npu.vector.queue_depth=1", "npu.dma.issue_per_cycle=1"]),
    ("neupims-hbm3", ["memory.controller.write_policy=drain"]),
    # back-pressure: full bank and channel queues, many requests in flight
    ("neupims", ["memory.controller.queue_size_per_bank=2",
                 "memory.controller.command_queue_size=8", "npu.dma.max_outstanding=512"]),
    ("npu-only", ["memory.controller.queue_size_per_bank=1",
                  "memory.controller.command_queue_size=4", "npu.dma.request_bytes=128"]),
])
@pytest.mark.parametrize("seed", range(3))
def test_random_programs_run_identically(preset, sets, seed):
    cfg = load_config(preset, sets)
    ref = _same(cfg, random_program(seed, cfg))
    assert ref[0] != "error" and ref[0].cycles > 0


@pytest.mark.parametrize("seed", range(2))
def test_a_deadlock_is_the_same_error(seed):
    cfg = load_config("neupims")
    ref = _same(cfg, random_program(seed, cfg, deadlock=True))
    assert ref[0] == "error" and "deadlock" in ref[1] and "semaphore" in ref[1]


def test_max_cycles_and_a_missing_weight_load_are_the_same_errors():
    cfg = load_config("neupims")
    ref = _same(cfg, random_program(4, cfg), max_cycles=300)
    assert ref[0] == "error" and "max_cycles = 300" in ref[1]
    p = Program()
    p.emit("sa", Instruction("SA_MATMUL", array=2, src=0, dst=0, m=8, n=8, k=8, acc=0,
                             dtype="fp16", out_dtype="fp16"))
    ref = _same(cfg, p)
    assert ref[0] == "error" and "array 2 has no weights" in ref[1]
    p = Program()
    p.emit("sa", Instruction("SA_MATMUL", array="any", src=0, dst=0, m=8, n=8, k=8, acc=0,
                             dtype="fp16", out_dtype="fp16"))
    ref = _same(cfg, p)
    assert ref[0] == "error" and "no SA_LOADW before it" in ref[1]


def test_a_pim_command_the_memory_rejects_is_the_same_error():
    cfg = load_config("neupims")
    p = Program()
    p.emit("pim3", Instruction("COMP", channel=3, col=0, n_comps=2, dtype="fp16"))
    ref = _same(cfg, p)
    assert ref[0] == "error" and "channel 3" in ref[1]


_SYSTEMS = [
    ("neupims", [], 1), ("neupims", [], 3), ("npu-pim-blocked-fused", [], 2), ("npu-pim-blocked", [], 1),
    ("npu-only", [], 1), ("neupims", ["pim.command_queue_depth=4"], 2),
    ("neupims", ["npu.freq_mhz=700"], 2),
]


@pytest.mark.parametrize("preset,sets,sub_batches", _SYSTEMS)
def test_compiled_programs_run_identically(preset, sets, sub_batches):
    cfg = load_config(preset, [*sets, f"system.sub_batches={sub_batches}"])
    model = get_model("tiny-gpt")
    cp = compile_layers(model, default_batch(model, 20, "sharegpt", seed=2), cfg, "decode",
                        [0, 1])
    ref = _same(cfg, load_program(cp.program, cfg))
    assert ref[0].cycles > 0 and len(ref[1]) > 100


def test_tensor_and_pipeline_parallel_programs_run_identically():
    """TP2 PP2: all-reduces on the link stream, the hand-off of stage 0 to stage 1."""
    cfg = load_config("neupims", ["system.tensor_parallel=2", "system.pipeline_parallel=2"])
    model = get_model("tiny-gpt")
    batch = default_batch(model, 12, "sharegpt", seed=5)
    for stage, layers in ((0, [0]), (1, [1])):
        cp = compile_layers(model, batch, cfg, "decode", layers, CompileOptions(stage=stage))
        names = set(cp.program.streams)
        assert "link" in names
        _same(cfg, load_program(cp.program, cfg))


def test_the_critical_path_is_the_same_on_both_loops():
    """The WAIT releases and SIGNAL firings the compiled loop reports make the same critical
    path (archsim/system/critical.py) as the Python loop's, stage by stage."""
    from archsim.system import simulate_iteration

    cfg = load_config("neupims", ["system.tensor_parallel=2", "system.sub_batches=2"])
    model = get_model("tiny-gpt")
    batch = default_batch(model, 24, "sharegpt", seed=0, n_channels=32)
    runs = [simulate_iteration(cfg, model, batch, with_events=False, fast_forward=ff)
            for ff in (True, False)]
    assert runs[0].extra["critical_path_cycles"] == runs[1].extra["critical_path_cycles"]
    assert runs[0].extra["stage_resources"] == runs[1].extra["stage_resources"]
    assert runs[0].cycles_per_iteration == runs[1].cycles_per_iteration


def test_the_one_time_jit_is_announced_on_stderr(monkeypatch, capsys):
    """``archsim`` says when the kernels are compiled (not silence): here the cache is made to
    look cold; the code is then loaded from it as usual."""
    from archsim.cli import main
    from archsim.memory.kernel import jit
    from archsim.npu import compiled

    monkeypatch.setattr(jit, "is_cached", lambda *a: False)
    monkeypatch.setattr(compiled, "_READY", False)
    assert main(["run", "--model", "tiny-gpt", "--batch", "4", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "archsim: compiling the simulator's event loop and memory kernel once" in err
    assert "archsim: compiled in" in err
    monkeypatch.setattr(jit, "is_cached", lambda *a: True)
    monkeypatch.setattr(compiled, "_READY", False)
    assert main(["run", "--model", "tiny-gpt", "--batch", "4", "--quiet"]) == 0
    assert "compiling" not in capsys.readouterr().err


def test_every_instruction_has_a_record_and_the_semaphores_add_up():
    """The compiled loop records every instruction (CompiledRun.records): work instructions
    with the observer's times; a WAIT is released only once the SIGNALs fired by then cover
    it (per semaphore, counts fired by the cycle of each release >= counts taken)."""
    cfg = load_config("neupims", ["system.sub_batches=2"])
    model = get_model("tiny-gpt")
    cp = compile_layers(model, default_batch(model, 16, "sharegpt", seed=6), cfg, "decode",
                        [0, 1])
    lp = load_program(cp.program, cfg)
    obs = _Calls()
    ex = Executor(lp, cfg, KernelMemory(cfg), fast_forward=True, observer=obs)
    ex.run()
    rec = ex.ff.records()
    for s, i, unit, st, en in obs.calls:
        assert (rec[s][0][i], rec[s][1][i], rec[s][2][i]) == (st, en, unit)
    fires, takes = {}, {}
    for ls in lp.streams:
        st, en, _ = rec[ls.name]
        assert (st >= 0).all() and (en >= st).all(), ls.name
        for op in ls.ops:
            if op.mnemonic in ("SIGNAL", "WAIT"):
                d = fires if op.mnemonic == "SIGNAL" else takes
                d.setdefault(op.ops["sem"], []).append((int(en[op.index]), op.ops["count"]))
    assert takes
    for sem, ts in takes.items():
        fired = sorted(fires.get(sem, []))
        taken = 0
        for t, n in sorted(ts):
            taken += n
            assert sum(c for tf, c in fired if tf <= t) >= taken, (sem, t)


def test_a_stale_cache_that_compiles_again_is_announced_too(monkeypatch, capsys):
    """numba recompiles cached code whose source stamp changed: the cache looks warm but the
    load takes long, and the note comes after ``_STALE_NOTE_AFTER_S`` (here a slow stand-in)."""
    import time

    from archsim import notes
    from archsim.memory.kernel import jit
    from archsim.npu import compiled

    class SlowLoop:
        def compile(self, sig):
            time.sleep(0.5)

    said: list[str] = []
    monkeypatch.setattr(notes, "_LISTENERS", [said.append])
    monkeypatch.setattr(jit, "is_cached", lambda *a: True)
    monkeypatch.setattr(compiled, "_STALE_NOTE_AFTER_S", 0.05)
    monkeypatch.setattr(compiled.cl, "_loop", SlowLoop())
    monkeypatch.setattr(compiled, "_READY", False)
    compiled._compile_once(1, 2, 3, 1.0)
    assert said[0].startswith("compiling the simulator's event loop") and \
        said[1].startswith("compiled in")


def test_an_executor_and_its_compiled_run_are_freed_by_reference_counting():
    """The compiled run holds its executor weakly: no reference cycle keeps the program (every
    instruction) alive for the cyclic collector, which simulate_iteration pauses."""
    import gc
    import weakref

    cfg = load_config("neupims")
    was = gc.isenabled()
    gc.disable()
    try:
        ex = Executor(random_program(0, cfg), cfg, KernelMemory(cfg), fast_forward=True)
        ex.run()
        gone_ex, gone_ff = weakref.ref(ex), weakref.ref(ex.ff)
        del ex
        assert gone_ex() is None and gone_ff() is None
    finally:
        if was:
            gc.enable()
