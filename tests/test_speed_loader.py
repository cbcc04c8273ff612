"""Speed paths of the program loader and the DMA issue change nothing.

:func:`archsim.npu.loader.load_program` decodes and checks each distinct instruction of a stream
once (``_operands`` instead of ``Instruction.operands``), and the fast-forwarding executor queues
DMA requests of registered transfers with :meth:`archsim.npu.dmaff.DmaFastForward.issue` instead of
``submit_many``. Both must give what the plain paths give.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.npu.loader import _operands, load_program
from archsim.memory.kernel import KernelMemory as FastMemorySystem
from archsim.npu.dmaff import DmaFastForward
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


def test_a_repeated_bad_instruction_is_reported_at_its_first_index():
    bad = Instruction("SA_LOADW", array=8, w=0, k=128, n=128, dtype="fp16")
    p = Program()
    p.emit("sa", Instruction("NOP"))
    p.emit("sa", bad)
    p.emit("sa", bad)
    with pytest.raises(SimulationError, match="instruction 1 .*array 8 does not exist"):
        load_program(p, CFG)


@pytest.mark.parametrize("check_full", [True, False])
def test_dma_issue_queues_what_submit_many_queues(check_full):
    """Same requests, ids, arrivals and back-pressure stop, on two fresh memories."""
    rng = np.random.default_rng(5)
    base = 64 * rng.integers(0, 1 << 20, size=3000)
    if check_full:          # one bank, to hit its queue limit
        base = np.full(3000, 4096 * 1024, np.int64) + 64 * (np.arange(3000) % 16)
    addrs = (base + rng.integers(0, 2, size=3000) * 16).astype(np.int64)  # inside one burst
    sizes = np.full(3000, 32, np.int64)
    out = []
    for fast in (False, True):
        mem = FastMemorySystem(CFG, keep_log=True)
        mem.expect_unique_ids(4096)
        dff = DmaFastForward(mem, 1)
        dff.register(7, addrs, False, sizes)
        i0, k, t0, used, R = 100, 2500, 40, 3, 32
        if fast:
            done, nbytes = dff.issue(7, i0, k, t0, used, R)
        else:
            d = np.arange(k, dtype=np.int64)
            done = mem.submit_many(addrs[i0:i0 + k], False, t0 + (used + d) // R,
                                   (7 << 32) | (i0 + d), sizes[i0:i0 + k], True)
            nbytes = int(sizes[i0:i0 + done].sum())
        assert 0 < done <= k and (done < k) == check_full
        comps = mem.advance_to(20000)
        out.append((done, nbytes, [(c.req_id, c.cycle) for c in comps],
                    mem.command_log_array().tolist(), mem.stats()))
    assert out[0] == out[1]
