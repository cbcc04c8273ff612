"""Speed paths of the program loader and the DMA issue change nothing.

:func:`archsim.npu.loader.load_program` decodes and checks each distinct instruction of a stream
once (``_operands`` instead of ``Instruction.operands``), and the compiled executor queues
DMA requests with the memory kernel's ``_queue_request`` instead of the port's ``can_accept`` +
``submit``. Both must give what the plain paths give.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.npu.loader import _operands, load_program
from archsim.memory.kernel import KernelMemory as FastMemorySystem
from archsim.memport import MemRequest as _Req
from isa.encoding import Instruction
from isa.program import Program
from isa.spec import BY_MNEMONIC
from mapping.compiler import compile_layers
from workloads import default_batch, get_model

CFG = load_config("neupims")


def test_fast_operand_decoding_equals_instruction_operands():
    rng = random.Random(0)
    for spec in BY_MNEMONIC.values():
        for _ in range(30):
            codes = [rng.randrange(len(f.enum)) if f.kind == "enum"
                     else rng.randint(0, max(0, min(f.hi, 1 << 20))) for f in spec.fields]
            ins = Instruction.from_codes(spec, codes)
            a, b = ins.operands(), _operands(ins)
            assert a == b and list(a) == list(b)


def test_loaded_ops_equal_a_plain_decode():
    model = get_model("tiny-gpt")
    cp = compile_layers(model, default_batch(model, 16, "sharegpt", seed=3), CFG, "decode",
                        [0, 1])
    lp = load_program(cp.program, CFG)
    for ls in lp.streams:
        instrs = cp.program.streams[ls.name]
        assert len(ls.ops) == len(instrs)
        for i, (op, ins) in enumerate(zip(ls.ops, instrs)):
            assert op.index == i and op.ins is ins and op.mnemonic == ins.mnemonic
            assert op.ops == ins.operands()


@pytest.mark.parametrize("preset,sets", [
    ("neupims", []), ("neupims", ["system.sub_batches=3", "pim.command_queue_depth=4"]),
    ("npu-pim-blocked", []), ("npu-pim-blocked-fused", []), ("npu-only", []),
    ("neupims", ["system.tensor_parallel=2", "system.pipeline_parallel=2"])])
def test_compiled_programs_pass_every_check_so_loading_them_unchecked_is_safe(preset, sets):
    """``load_program(..., compiled=True)`` (what run_window does) skips the instruction
    checks: the compiler's programs pass all of them, and both loads give the same ops."""
    cfg = load_config(preset, sets)
    model = get_model("tiny-gpt")
    for phase in ("decode", "prefill"):
        cp = compile_layers(model, default_batch(model, 12, "sharegpt", seed=4), cfg, phase,
                            [0])
        full = load_program(cp.program, cfg)          # raises on any violation
        fast = load_program(cp.program, cfg, compiled=True)
        assert full.spad_footprint_bytes <= cfg.npu.scratchpad.size_bytes
        assert fast.spad_footprint_bytes is None
        assert [(s.name, s.kind, s.index, len(s.ops)) for s in full.streams] == \
            [(s.name, s.kind, s.index, len(s.ops)) for s in fast.streams]
        for a, b in zip(full.streams, fast.streams):
            assert type(b.ops).__name__ == "LazyOps" and b.ops._ops is None
            assert list(b.ops) == a.ops


def test_generated_instruction_makers_equal_the_constructor():
    """mapping.builder.make_instruction (one generated function per mnemonic, the compiler's
    hot path) builds the constructor's codes, and fails with the constructor's message, on
    random operands in and out of range, with enum names, aliases and missing operands."""
    from isa.errors import OperandError
    from mapping.builder import make_instruction

    rng = random.Random(7)
    for m, spec in BY_MNEMONIC.items():
        for _ in range(150):
            o = {}
            for f in spec.fields:
                if f.kind == "enum":
                    o[f.name] = rng.choice(list(f.enum) + [0, len(f.enum) - 1, "nope"])
                elif f.kind == "f32":
                    o[f.name] = rng.choice((0.5, -3.0, 1e39))
                else:
                    o[f.name] = rng.choice([f.lo, f.hi, (f.lo + f.hi) // 2, f.hi + 1, f.lo - 1]
                                           + [a for a, _ in f.aliases])
            if o and rng.random() < 0.05:
                o.pop(rng.choice(list(o)))
            got = []
            for fn in (lambda: Instruction(m, **o), lambda: make_instruction(m, dict(o))):
                try:
                    ins = fn()
                    got.append((ins.spec.opcode, ins.codes))
                except OperandError as exc:
                    got.append(str(exc))
            assert got[0] == got[1], (m, o)


def test_a_compare_cell_compiles_each_system_s_program_once(monkeypatch):
    """One compile per NPU system and cell (the GPU needs none)."""
    import mapping.compiler as mc
    from archsim import serving as sv

    calls = []
    orig = mc.compile_layers

    def counting(*a, **k):
        calls.append(a[2].name)
        return orig(*a, **k)

    monkeypatch.setattr(mc, "compile_layers", counting)
    sv.compare_systems(get_model("tiny-gpt"), None, batch_size=8, check_capacity=False)
    assert sorted(calls) == sorted(p for p in sv.SYSTEM_PRESETS.values() if "gpu" not in p)


def test_a_repeated_bad_instruction_is_reported_at_its_first_index():
    bad = Instruction("SA_LOADW", array=8, w=0, k=128, n=128, dtype="fp16")
    p = Program()
    p.emit("sa", Instruction("NOP"))
    p.emit("sa", bad)
    p.emit("sa", bad)
    with pytest.raises(SimulationError, match="instruction 1 .*array 8 does not exist"):
        load_program(p, CFG)


@pytest.mark.parametrize("preset,sets", [
    ("neupims", []), ("neupims", ["memory.controller.write_policy=drain",
                                  "memory.controller.queue_size_per_bank=3"])])
@pytest.mark.parametrize("size", [32, 64, 96, 256])
def test_kernel_queue_request_queues_what_can_accept_and_submit_queue(preset, sets, size):
    """The compiled executor's DMA queueing (``_queue_request``, any size, the queue-full
    check on its first burst) = ``can_accept`` + ``submit`` of the port: same requests,
    back-pressure stops, completions, command log and statistics."""
    from archsim.memory.kernel.drive import _queue_request
    from archsim.memory.kernel.layout import A_B, A_G, A_LTOT, A_QB, A_QC

    cfg = load_config(preset, sets)
    rng = np.random.default_rng(size)
    # one hot bank (to hit its queue limit) and random addresses, unaligned
    hot = 4096 * 1024 + 16 * rng.integers(0, 64, size=400)
    cold = 16 * rng.integers(0, 1 << 22, size=400)
    addrs = np.where(rng.random(400) < 0.5, hot, cold).astype(np.int64)
    writes = rng.random(400) < 0.4
    out = []
    for fast in (False, True):
        mem = FastMemorySystem(cfg, keep_log=True)
        mem.expect_unique_ids(4096)
        mem.reserve(4096 * 4, 64)
        PA = mem.PA
        queued = []
        for i, (a, w) in enumerate(zip(addrs.tolist(), writes.tolist())):
            arr = 3 + i // 8
            if fast:
                ok = bool(_queue_request(mem.S, int(PA[A_G] * PA[A_B]), int(PA[A_LTOT]),
                                         int(PA[A_QB]), int(PA[A_QC]), a, size, arr, i + 1,
                                         1 if w else 0))
            else:
                ok = mem.can_accept(a, w)
                if ok:
                    mem.submit(_Req(i + 1, a, size, w, arr))
            queued.append(ok)
        comps = mem.advance_to(50000)
        out.append((queued, [(c.req_id, c.cycle) for c in comps],
                    mem.command_log_array().tolist(), mem.stats()))
    assert not all(out[0][0]) and any(out[0][0])
    assert out[0] == out[1]
