"""The compiler's output is fixed byte for byte (issue 17 item 2: faster emission, same bytes).

Each case compiles a workload and hashes the binary container (``Program.to_bytes``: streams,
data section, debug table) with SHA-256. The recorded hashes were computed with the code of
main at e1a30d4, before the emission of PIM attention, KV appends and semaphore waits was made
faster: a change of the emission path that alters one instruction, one operand, the order of a
stream or one debug entry fails here. A deliberate change of the compiled programs updates the
hashes in the same commit and says why.
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
    """q|k|v staged through HBM in every decode buffer plan (tests/test_mapping_longctx)."""
    import mapping.compiler as compiler

    real = bufplan.search_buffer_plan

    def staged_search(attempt, *args, can_stage=False, **kw):
        got, rows, attn, _ = real(lambda r, w, a, st: attempt(r, w, a, can_stage), *args,
                                  can_stage=False, **kw)
        return got, rows, attn, can_stage

    def build():
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(bufplan, "ATTN_SHARE", 0.01)
            mp.setattr(compiler, "search_buffer_plan", staged_search)
            cp = compile_layer(get_model("tiny-gpt"), _batch([3, 40, 250]),
                               load_config(system, ["npu.scratchpad.size_bytes=2097152"]))
        assert cp.buffer_plan.qkv_staged
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
    'tiny-gpt-neupims-b8': '68f81b9af1518c6d333c67909f6e97ec7f485ab62118134068b24b48c943b846',
    'tiny-gpt-neupims-lens': '01b74d39f7022349be9c22bf08b6a02f5cefa95541f3c6bc1187cf1c3afb451e',
    'tiny-llama-neupims': '3e343c2be33d0a562f2f37cf29fc6e3c009356fb783af15190cbed3fb4af96f5',
    'tiny-gpt-newton': '69e0a11d80ce02fd9e0e0d125e2ace2f569fc2efc33cad9fe670c69dd6b63c0e',
    'tiny-llama-newton': 'cebd8993b34f1c1e9c6e86f559f0d51fd8fe7842f69ba61bb40da628540d5d78',
    'tiny-gpt-npu': '4fd4f79082b2fcd009305ba76d776dca19d19d920c6c76a16f8abe6f6acbc249',
    'tiny-mixtral-neupims': '598c7d9d95d2a37fa303428b084c4b375c8879414a34f549ef2be91414dcc4c4',
    'tiny-gpt-sub3': '95b70ed633a75282f1881b411358a8248efe4016a3bc61554cf788e4313739f8',
    'tiny-gpt-prefill': '6e8a56224c7ac6038c8a21860839cea8637f3c884bb2dd4dea5f527b030ca724',
    'tiny-gpt-spilled': '73ed08490f582d94784b8d1131e5d117ef4af958c124264eb4d15758ac9caf4d',
    'tiny-llama-mixed-neupims': 'f57991fbd79ed515f4bc59f736ed411a60d9511ace4b1e8885af7d5599a3724b',
    'tiny-llama-mixed-newton': 'beb1b38eab7fa30bf042b3cabb267b9e10fb8bd879862347fcada752a07ce888',
    'tiny-gpt-blocked-neupims': 'ff5211772b2a88a5480d476fae294cea93e81325e889b86558f2ca0cfb287be3',
    'tiny-gpt-blocked-newton': 'e6db0712d43ffb43cfe4d7069c62fbdeba87f8a6e5f741b8f0e021ce241d7d04',
    'tiny-gpt-blocked-prefill': 'b2a8966c566a2bfd0457a0647cfe560ee975f59f5c538dd2d59899d95c2fd266',
    'tiny-gpt-staged-neupims': '1780e91c58c2a9e03bf5074e84384cf9a6350dd9a7e4df96d123fc6697154e3b',
    'tiny-gpt-staged-npu': '0ee171941311d30f0a46712c3ca0c26ec956d48fd4d81ebc76369e2e24d38ea6',
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
    """SHA-256 of the compiled program's binary container."""
    return hashlib.sha256(cp.program.to_bytes()).hexdigest()


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
