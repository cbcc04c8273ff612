"""The compiler's output is fixed byte for byte (issue 17 item 2: faster emission, same bytes).

Each case compiles a workload and hashes the binary container (``Program.to_bytes``: streams,
data section, debug table) and the compiler's metadata of every instruction with SHA-256. The
recorded hashes were computed with the code of main at e1a30d4, before the emission of PIM
attention, KV appends and semaphore waits was made faster: a change of the emission path that
alters one instruction, one operand, the order of a stream, one debug or metadata entry fails
here. A deliberate change of the compiled programs updates the hashes in the same commit and
says why. The event loop's tables (:func:`archsim.npu.tables.build_tables`) are held to main's
the same way.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

import mapping.bufplan as bufplan
from archsim.config import load_config
from mapping import CompileOptions, compile_layer, compile_model
from workloads import get_model
from workloads.requests import Batch, Request, default_batch


def _batch(lens, channels=None, q=None):
    return Batch(tuple(Request(id=i, input_len=None, output_len=None, seq_len=L,
                               channel=None if channels is None else channels[i],
                               q_tokens=None if q is None else q[i])
                       for i, L in enumerate(lens)))


LENS = [3, 40, 250, 17, 96, 33, 64, 128]
MIXED = [(5, 1), (70, 30), (33, 1), (40, 8), (64, 1), (37, 37), (17, 1), (140, 100)]
"""The chunked iteration of tests/test_mapping_mixed.py: decode steps, chunks, a prompt."""


def _model(name, system, sets=(), lens=None, phase="decode", **opts):
    def build():
        m = get_model(name)
        b = default_batch(m, 8, n_channels=None) if lens is None else _batch(lens)
        return compile_model(m, b, load_config(system, list(sets)), phase,
                             options=CompileOptions(**opts))
    return build


def _spilled():
    m = get_model("tiny-gpt")
    b = _batch([250, 250, 250, 3], [0, 0, 0, 0])
    return compile_model(m, b, load_config("neupims", ["memory.org.rows=8"]),
                         options=CompileOptions(channels="keep"))


def _mixed(system):
    def build():
        b = Batch(tuple(Request(i, None, None, L, None, q_tokens=q)
                        for i, (L, q) in enumerate(MIXED)))
        return compile_layer(get_model("tiny-llama"), b, load_config(system), phase="mixed")
    return build


def _blocked(system, name="tiny-gpt", phase="decode"):
    """Key blocks: attention may take 1 % of a 2 MiB scratchpad (tests/test_mapping_longctx)."""
    def build():
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(bufplan, "ATTN_SHARE", 0.01)
            return compile_layer(get_model(name), _batch([3, 40, 250]),
                                 load_config(system, ["npu.scratchpad.size_bytes=2097152"]),
                                 phase)
    return build


def _staged(system):
    """64 requests on a 1 MiB scratchpad: the buffer plan stages q|k|v through HBM and cuts
    the longer requests into key blocks."""
    def build():
        b = _batch([20 + (i * 37) % 200 for i in range(64)])
        cp = compile_layer(get_model("tiny-gpt"), b,
                           load_config(system, ["npu.scratchpad.size_bytes=1048576"]))
        assert cp.buffer_plan.qkv_staged and cp.buffer_plan.attn_blocks_max == 2
        return cp
    return build


CASES = {
    "tiny-gpt-neupims-b8": _model("tiny-gpt", "neupims"),
    "tiny-gpt-neupims-lens": _model("tiny-gpt", "neupims", lens=LENS),
    "tiny-llama-neupims": _model("tiny-llama", "neupims", lens=LENS),
    "tiny-gpt-newton": _model("tiny-gpt", "npu-pim-blocked", lens=LENS),
    "tiny-llama-newton": _model("tiny-llama", "npu-pim-blocked", lens=LENS),
    "tiny-gpt-npu": _model("tiny-gpt", "npu-only", lens=LENS),
    "tiny-mixtral-neupims": _model("tiny-mixtral", "neupims", lens=LENS),
    "tiny-gpt-sub3": _model("tiny-gpt", "neupims", ["system.sub_batches=3"], lens=LENS),
    "tiny-gpt-prefill": _model("tiny-gpt", "neupims", lens=[3, 40, 77], phase="prefill"),
    "tiny-gpt-spilled": _spilled,
    "tiny-llama-mixed-neupims": _mixed("neupims"),
    "tiny-llama-mixed-newton": _mixed("npu-pim-blocked"),
    "tiny-gpt-blocked-neupims": _blocked("neupims"),
    "tiny-gpt-blocked-newton": _blocked("npu-pim-blocked"),
    "tiny-gpt-blocked-prefill": _blocked("neupims", phase="prefill"),
    "tiny-gpt-staged-neupims": _staged("neupims"),
    "tiny-gpt-staged-npu": _staged("npu-only"),
}

HASHES = {
    'tiny-gpt-neupims-b8': 'cf87116edfd2757577da1024895a73e740537d043d5f5b0bcbf9bf11abdc3829',
    'tiny-gpt-neupims-lens': 'f0ddc1b7886bdc494416e389801078a9bce8e0a13f631903bf3583042ab47f70',
    'tiny-llama-neupims': 'd3844b897a8f26414b48e98d064c7eae4034ea1561ffac1c7382a4153ee7582b',
    'tiny-gpt-newton': 'deeb6b47c335d33ff9515176555431cccff247e2e255717be4012765ed53df24',
    'tiny-llama-newton': 'fdc192c0982ea0a7790594fa96a02207cbdf503a8590e57e731b6e8b538de62b',
    'tiny-gpt-npu': '6f77783b8b1b6cb4d96bcc3d76bfcdc22fa38a348d54656e5f26108eff81adef',
    'tiny-mixtral-neupims': '83de52ba68985ba421e873677dd48623a15d4625cbc3f9f2c52360a0a1ce77bf',
    'tiny-gpt-sub3': 'e49110641492dec45b00b4ec4b61a4d6a761eb74d9f2b83709a91d8c97d058ce',
    'tiny-gpt-prefill': '6336b58485ba0e80c086317de133ab530e6cf79b138d80999ac48da29ecac83e',
    'tiny-gpt-spilled': '1d901ca6660c09feda5e5a63e406062bbeaa74fb873c94a66a57b03dcab6fe8f',
    'tiny-llama-mixed-neupims': 'c3c1a50b060e015b50c482dd3d358ff56eb3733178cd0a85773ab2d1ec9933b1',
    'tiny-llama-mixed-newton': 'd1ca4cf1901dfb23daa545981af46f8c848e72b7c8f93712f2807b5e0b3ba6b5',
    'tiny-gpt-blocked-neupims': '1685fb780bf2e7ecc78bd10a93de4ecb8e09ef2c0fde053de24db61ddeee917d',
    'tiny-gpt-blocked-newton': '9ed038d1207fffc38bdac0f6029678861b6586b6db3b7fe32b8041b8c7f52114',
    'tiny-gpt-blocked-prefill': 'e9b75412344ca4bf688875af4d35c81e54cc7fe888592bcd0a278c0e89b5a225',
    'tiny-gpt-staged-neupims': 'c83e92f46428e378042c6c38411e5cf9eb08f4e9ff0e149c03dcc354a1dcb212',
    'tiny-gpt-staged-npu': 'abec9374b64adcfb932944928747fff4169fac3013d691d0cb9e7222820c1fe4',
}


TABLE_HASHES = {
    'tiny-gpt-neupims-b8': '6d9b916158934f636e4ae810c7c8f58a6bafae2f90f374cff9c33037ecb8156d',
    'tiny-gpt-newton': '4dd67cb2411ec323e439c4bb5e34a8d3c03912a1e7bb09923eb7f4edee090aa7',
    'tiny-gpt-npu': '132818cc71dfae1c0a51e6db926bf045ef3ad6174ff88239f9cdc6123613f8d3',
    'tiny-gpt-spilled': '63293897dce294ce681da6cce3d10dfb7400d601b6a3440a22be9340762ace90',
    'tiny-llama-mixed-neupims': '1c98806981a4dbf5aca7e91371e6d67aef621103f8dc436168cc09324e487b6f',
}
"""SHA-256 of the compiled event loop's tables (:func:`archsim.npu.tables.build_tables`) of
some of the programs above, recorded at e1a30d4 (before the tables were built per opcode
from one key per distinct operand row and G_ACT rows grouped)."""


def program_sha256(cp) -> str:
    """SHA-256 of the compiled program's binary container and of the compiler's metadata of
    every instruction (operator, role, stage, MACs, part tag: what the graph check, the
    statistics and the sub-batch split read)."""
    h = hashlib.sha256(cp.program.to_bytes())
    for name in sorted(cp.meta):
        m = cp.meta[name]
        h.update(name.encode())
        for a in (m.op, m.role, m.stage, m.macs, m.part):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_program_bytes_are_unchanged(case):
    assert program_sha256(CASES[case]()) == HASHES[case]


def _tables(program, cfg, **kw):
    from archsim.memory.kernel import KernelMemory
    from archsim.npu.executor import Executor
    from archsim.npu.loader import load_program
    from archsim.npu.tables import build_tables

    ex = Executor(load_program(program, cfg, compiled=True), cfg, KernelMemory(cfg),
                  fast_forward=False)
    return build_tables(ex, **kw)


def tables_sha256(program, cfg, **kw) -> str:
    """SHA-256 of the tables of ``program`` on ``cfg`` and what they are sized by."""
    t, info = _tables(program, cfg, **kw)
    h = hashlib.sha256()
    for a in t:
        h.update(a.tobytes())
    h.update(repr((info.n_instructions, info.n_streams, info.n_dma, info.n_pim,
                   info.n_timed_signals, info.signals_per_stream, info.max_request_bytes,
                   sorted(info.pim_errors))).encode())
    return h.hexdigest()


@pytest.mark.parametrize("case", sorted(TABLE_HASHES))
def test_event_loop_tables_are_unchanged_and_equal_the_per_row_reference(case):
    cp = CASES[case]()
    got = tables_sha256(cp.program, cp.cfg)
    assert got == TABLE_HASHES[case]
    assert tables_sha256(cp.program, cp.cfg, group_rows=False) == got


def test_g_act_rows_out_of_range_are_marked_as_the_reference_marks_them():
    """G_ACT rows past the bank's rows (the memory rejects them: POK 0) among good ones: the
    grouped tables fall back to row by row and equal the reference."""
    from archsim.npu.cstate import I_POK, I_PROW
    from isa.encoding import Instruction
    from isa.program import Program

    cfg = load_config("neupims", ["memory.org.rows=64"])
    p = Program(spad_size_bytes=cfg.npu.scratchpad.size_bytes)
    for c, rows in ((0, (3, 63, 64, 5)), (1, (7, 2)), (2, (1000,))):
        for r in rows:
            p.emit(f"pim{c}", Instruction("G_ACT", channel=c, row=r, bg_mask=0))
            p.emit(f"pim{c}", Instruction("PIM_PRECHARGE", channel=c, bg_mask=0))
    for s in list(p.streams):
        p.emit(s, Instruction("END"))
    (t, info), (ref, rinfo) = _tables(p, cfg), _tables(p, cfg, group_rows=False)
    assert all(np.array_equal(a, b) for a, b in zip(t, ref))
    assert info.pim_errors == rinfo.pim_errors
    instrs = [ins for s in p.streams.values() for ins in s]
    g_act = t.IA[[g for g, ins in enumerate(instrs) if ins.mnemonic == "G_ACT"]]
    assert g_act[:, I_POK].tolist() == [1, 1, 0, 1, 1, 1, 0]
    assert g_act[[0, 1, 3, 4, 5], I_PROW].tolist() == [3, 63, 5, 7, 2]


def test_template_instructions_equal_make_instruction_and_name_bad_operands():
    from isa.errors import OperandError
    from mapping.builder import Template, make_instruction

    t = Template("VU_SCALE", dtype="bf16", imm=0.1)
    assert t.var == ("dst", "src", "rows", "cols")
    ref = make_instruction("VU_SCALE", dict(dst=64, src=0, rows=3, cols=5, dtype="bf16",
                                            imm=0.1))
    assert t.one(64, 0, 3, 5) == ref and t.many([64, 1], [0, 2], [3, 1], [5, 9])[0] == ref
    assert Template("PIM_PRECHARGE", channel=2, bg_mask=0).one() == make_instruction(
        "PIM_PRECHARGE", dict(channel=2, bg_mask=0))
    with pytest.raises(OperandError, match="operand rows = 0 out of range"):
        t.one(64, 0, 0, 5)
    with pytest.raises(OperandError, match="operand cols = 70000 out of range"):
        t.many([64, 64], [0, 0], [1, 1], [5, 70000])
    with pytest.raises(OperandError, match="operand channel = 5000 out of range"):
        Template("G_ACT", channel=5000)
    with pytest.raises(OperandError, match="unknown operand 'chan'"):
        Template("G_ACT", chan=1)
    with pytest.raises(OperandError, match="dtype = 'fp64' is not one of"):
        Template("VU_SCALE", dtype="fp64")


def _counts_one_by_one(program, cfg):
    """The reference of count_program: every instruction's actions added in program order."""
    from archsim.energy.counts import NpuActionCounts, _instruction_actions
    from archsim.npu.loader import _operands, spad_operands

    c, velem, vpass = NpuActionCounts(), {}, {}
    passes = cfg.npu.vector.passes_of
    for instrs in program.streams.values():
        for ins in instrs:
            rd, wr, macs, vop, vel, dma_r, dma_w, bus, lk = _instruction_actions(
                ins.mnemonic, _operands(ins), cfg.memory.org.banks_per_channel, passes,
                spad_operands)
            c.instructions += 1
            c.sram_read_bytes += rd
            c.sram_write_bytes += wr
            c.macs += macs
            c.dma_read_bytes += dma_r
            c.dma_write_bytes += dma_w
            c.pim_bus_bytes += bus
            c.link_bytes += lk
            if vop:
                velem[vop] = velem.get(vop, 0.0) + vel
                vpass[vop] = vpass.get(vop, 0.0) + vel * passes(vop)
    c.vector_elements, c.vector_element_passes = velem, vpass
    return c


@pytest.mark.parametrize("case", ["tiny-gpt-neupims-lens", "tiny-llama-newton", "tiny-gpt-npu",
                                  "tiny-mixtral-neupims", "tiny-gpt-prefill",
                                  "tiny-llama-mixed-neupims", "tiny-gpt-staged-neupims"])
def test_action_counts_equal_the_instruction_by_instruction_sum(case):
    """count_program counts each instruction shape once (addresses aside) and multiplies: the
    same numbers, and the vector ops in the same order, as adding every instruction."""
    from archsim.energy.counts import count_program

    cp = CASES[case]()
    got, ref = count_program(cp, cp.cfg), _counts_one_by_one(cp.program, cp.cfg)
    assert got == ref and list(got.vector_elements) == list(ref.vector_elements)
    assert got.macs > 0 and got.vector_elements


def test_unique_rows_is_numpys_unique_over_rows():
    from archsim.npu.tables import _unique_rows

    rng = np.random.default_rng(3)
    for hi in (3, 1 << 20, 1 << 40):          # the last: spans past one int64 key
        cols = [rng.integers(-5, hi, 500) for _ in range(3)]
        uk, inv = _unique_rows(cols)
        ref, rinv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        assert np.array_equal(uk, ref) and np.array_equal(inv, rinv.reshape(-1))


if __name__ == "__main__":      # print the hashes (to record them after a deliberate change)
    for name, build in CASES.items():
        print(f"    {name!r}: {program_sha256(build())!r},")
