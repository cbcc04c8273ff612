"""Functional mode: every instruction's semantics on tiny inputs, the arithmetic rules
(systolic accumulation order, PIM adder tree), and GEMM programs against numpy.matmul."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.functional import (FunctionalMachine, pim_adder_tree, pim_comp_step, round_to,
                                run_functional, systolic_matmul, to_storage)
from archsim.memory.addrmap import AddressMapping
from archsim.npu.gemm import build_gemm_program
from isa.encoding import Instruction as I
from isa.program import DataAlloc, Program

CFG = load_config("neupims")
RNG = np.random.default_rng(7)


def machine(streams: dict[str, list], data=(), cfg=CFG) -> FunctionalMachine:
    p = Program()
    for d in data:
        p.add_data(d)
    for name, ins in streams.items():
        for i in ins:
            p.emit(name, i)
    return FunctionalMachine(p, cfg)


def run_vu(ins, inputs: dict[int, tuple[np.ndarray, str]], out: tuple[int, tuple, str]):
    m = machine({"vu0": ins if isinstance(ins, list) else [ins]})
    for addr, (v, dt) in inputs.items():
        m.spad_put(addr, v, dt)
    m.run()
    return m.spad_get(out[0], out[1], out[2])


# ---- storage ----
def test_bf16_rounds_to_nearest_even_and_fp16_rounds():
    x = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5], dtype=np.float32)
    assert round_to(x, "bf16").tolist() == [1.0, 1.0, 1.0 + 2 ** -6, -2.5]
    assert to_storage(np.float32(np.nan), "bf16") == 0x7FC0
    assert round_to(np.float32(1 / 3), "fp16") == np.float32(np.float16(1 / 3))


# ---- DMA ----
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_dma_load_and_store_move_strided_rows(dtype):
    d = DataAlloc("X", 0x1000, 4096, (8, 64), "fp32")
    es = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    m = machine({"dma0": [
        I("DMA_LOAD", spad=0x100, hbm=0x1000 + 8, rows=3, cols=4, stride=64, dtype=dtype),
        I("DMA_STORE", spad=0x100, hbm=0x1800, rows=3, cols=4, stride=32, dtype=dtype)]}, [d])
    m.hbm.buffers["X"][:] = np.arange(4096) % 251
    m.run()
    src = m.hbm.buffers["X"]
    for r in range(3):
        want = src[8 + r * 64: 8 + r * 64 + 4 * es]
        assert (m.spad[0x100 + r * 4 * es: 0x100 + (r + 1) * 4 * es] == want).all()
        assert (src[0x800 + r * 32: 0x800 + r * 32 + 4 * es] == want).all()


# ---- systolic arrays ----
def test_systolic_matmul_accumulates_down_the_array_in_k_order():
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    w = RNG.standard_normal((50, 4)).astype(np.float32)
    ref = np.zeros((3, 4), dtype=np.float32)
    for k in range(50):
        ref = (ref + (x[:, k:k + 1] * w[k:k + 1, :]).astype(np.float32)).astype(np.float32)
    assert np.array_equal(systolic_matmul(x, w), ref)
    acc = np.ones((3, 4), dtype=np.float32)
    assert np.array_equal(systolic_matmul(x, w, acc), acc + ref)


def test_sa_loadw_matmul_and_accumulate():
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    w1 = RNG.standard_normal((6, 3)).astype(np.float32)
    w2 = RNG.standard_normal((6, 3)).astype(np.float32)
    m = machine({"sa": [
        I("SA_LOADW", array=2, w=0x1000, k=6, n=3, dtype="fp32"),
        I("SA_MATMUL", array=2, src=0, dst=0x3000, m=5, n=3, k=6, acc=0, dtype="fp32",
          out_dtype="fp32"),
        I("SA_LOADW", array="any", w=0x2000, k=6, n=3, dtype="fp32"),
        I("SA_MATMUL", array="any", src=0, dst=0x3000, m=5, n=3, k=6, acc=1, dtype="fp32",
          out_dtype="fp32")]})
    m.spad_put(0, x, "fp32")
    m.spad_put(0x1000, w1, "fp32")
    m.spad_put(0x2000, w2, "fp32")
    m.run()
    got = m.spad_get(0x3000, (5, 3), "fp32")
    np.testing.assert_allclose(got, x @ w1 + x @ w2, rtol=1e-5, atol=1e-6)
    assert np.array_equal(got, systolic_matmul(x, w2, systolic_matmul(x, w1)))


def test_matmul_with_other_shape_than_loaded_weights_is_an_error():
    m = machine({"sa": [I("SA_LOADW", array=0, w=0, k=4, n=4, dtype="fp16"),
                        I("SA_MATMUL", array=0, src=0, dst=0x100, m=1, n=4, k=3, acc=0,
                          dtype="fp16", out_dtype="fp32")]})
    with pytest.raises(SimulationError, match="differ from the loaded weights 4x4"):
        m.run()


# ---- vector units ----
A = RNG.standard_normal((3, 8)).astype(np.float32)
B = RNG.standard_normal((3, 8)).astype(np.float32)


def test_vu_add_mul_with_and_without_broadcast():
    got = run_vu(I("VU_ADD", dst=0x800, a=0, b=0x400, rows=3, cols=8, bcast=0, dtype="fp32"),
                 {0: (A, "fp32"), 0x400: (B, "fp32")}, (0x800, (3, 8), "fp32"))
    assert np.array_equal(got, A + B)
    got = run_vu(I("VU_MUL", dst=0x800, a=0, b=0x400, rows=3, cols=8, bcast=1, dtype="fp32"),
                 {0: (A, "fp32"), 0x400: (B[:1], "fp32")}, (0x800, (3, 8), "fp32"))
    assert np.array_equal(got, A * B[:1])


def test_vu_scale_rounds_to_fp16_once():
    got = run_vu(I("VU_SCALE", dst=0x800, src=0, rows=3, cols=8, dtype="fp16", imm=0.3),
                 {0: (A, "fp16")}, (0x800, (3, 8), "fp16"))
    assert np.array_equal(got, round_to(round_to(A, "fp16") * np.float32(0.3), "fp16"))


def test_vu_layernorm_and_rmsnorm():
    gb = np.stack([B[0], B[1]])
    got = run_vu(I("VU_LAYERNORM", dst=0x800, src=0, params=0x400, rows=3, cols=8, dtype="fp32",
                   eps_exp=5), {0: (A, "fp32"), 0x400: (gb, "fp32")}, (0x800, (3, 8), "fp32"))
    x = A.astype(np.float64)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * B[0] + B[1]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    got = run_vu(I("VU_RMSNORM", dst=0x800, src=0, gamma=0x400, rows=3, cols=8, dtype="fp32",
                   eps_exp=6), {0: (A, "fp32"), 0x400: (B[:1], "fp32")}, (0x800, (3, 8), "fp32"))
    ref = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * B[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mask,ln", [("none", 0), ("causal", 2), ("length", 5), ("length", 0)])
@pytest.mark.parametrize("lse", [0, 1])
def test_vu_softmax_masks(mask, ln, lse):
    m = machine({"vu0": [I("VU_SOFTMAX", dst=0x800, src=0, rows=3, cols=8, dtype="fp32",
                           mask=mask, len=ln, lse=lse)]})
    m.spad_put(0, A, "fp32")
    m.spad_put(0x800 + 3 * 8 * 4, np.full(3, 7.0), "fp32")     # where the lse goes
    m.run()
    got = m.spad_get(0x800, (3, 8), "fp32")
    lse_got = m.spad_get(0x800 + 3 * 8 * 4, (3,), "fp32")
    for i in range(3):
        keep = np.ones(8, bool) if mask == "none" else (
            np.arange(8) <= i + ln if mask == "causal" else np.arange(8) < ln)
        ref = np.zeros(8)
        lse_ref = -np.inf
        if keep.any():
            e = np.exp(A[i][keep] - A[i][keep].max())
            ref[keep] = e / e.sum()
            lse_ref = float(np.log(np.exp(A[i][keep].astype(np.float64)).sum()))
        np.testing.assert_allclose(got[i], ref, rtol=1e-6, atol=1e-7)
        # lse=0 leaves the bytes after the result alone; lse=1 writes log(sum(exp(kept)))
        assert lse_got[i] == 7.0 if not lse else np.isclose(lse_got[i], lse_ref, rtol=1e-6)


def test_softmax_of_block_log_sum_exps_merges_block_softmaxes():
    """The blocked-attention identity the compiler relies on: the softmax over the whole row
    equals the per-block softmaxes weighted by the softmax of the blocks' log-sum-exps."""
    x = np.random.default_rng(3).normal(size=(2, 12)).astype(np.float32) * 4
    prog = [I("VU_SOFTMAX", dst=0x1000, src=0, rows=2, cols=12, dtype="fp32", mask="none",
              len=0, lse=0)]
    for b in range(3):   # blocks of 4 columns, copied out dense first
        prog += [I("VU_COPY", dst=0x2000 + b * 0x100, src=b * 16, rows=2, cols=4, src_stride=12,
                   dst_stride=4, dtype="fp32", out_dtype="fp32"),
                 I("VU_SOFTMAX", dst=0x2000 + b * 0x100, src=0x2000 + b * 0x100, rows=2, cols=4,
                   dtype="fp32", mask="none", len=0, lse=1)]
    m = machine({"vu0": prog})
    m.spad_put(0, x, "fp32")
    m.run()
    whole = m.spad_get(0x1000, (2, 12), "fp32")
    lse = np.stack([m.spad_get(0x2000 + b * 0x100 + 32, (2,), "fp32") for b in range(3)], 1)
    w = np.exp(lse - lse.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    blocks = np.concatenate([m.spad_get(0x2000 + b * 0x100, (2, 4), "fp32") * w[:, b:b + 1]
                             for b in range(3)], 1)
    np.testing.assert_allclose(blocks, whole, rtol=1e-5, atol=1e-7)


def test_vu_gelu_forms_and_silu():
    x = A.astype(np.float64)
    got = run_vu(I("VU_GELU", dst=0x800, src=0, rows=3, cols=8, dtype="fp32", form="erf"),
                 {0: (A, "fp32")}, (0x800, (3, 8), "fp32"))
    ref = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    got = run_vu(I("VU_GELU", dst=0x800, src=0, rows=3, cols=8, dtype="fp32", form="tanh"),
                 {0: (A, "fp32")}, (0x800, (3, 8), "fp32"))
    ref = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
    got = run_vu(I("VU_SILU", dst=0x800, src=0, rows=3, cols=8, dtype="fp32"),
                 {0: (A, "fp32")}, (0x800, (3, 8), "fp32"))
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)), rtol=1e-6, atol=1e-7)


def test_vu_rope_rotates_half_of_each_head():
    # 3 rows, 2 heads of head_dim 4 (half 2); table [rows, 2, half]
    ang = RNG.standard_normal((3, 2)).astype(np.float32)
    table = np.stack([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)
    got = run_vu(I("VU_ROPE", dst=0x800, src=0, table=0x400, rows=3, cols=8, half_dim=2,
                   dtype="fp32"), {0: (A, "fp32"), 0x400: (table, "fp32")},
                 (0x800, (3, 8), "fp32"))
    x = A.reshape(3, 2, 4).astype(np.float64)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], 1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], 1)[:, None, :]
    rot = np.concatenate([-x[..., 2:], x[..., :2]], -1)  # HF rotate_half
    np.testing.assert_allclose(got, (x * cos + rot * sin).reshape(3, 8), rtol=1e-6, atol=1e-6)


def test_vu_copy_strides_and_converts_and_transpose():
    got = run_vu(I("VU_COPY", dst=0x800, src=0, rows=2, cols=3, src_stride=8, dst_stride=4,
                   dtype="fp32", out_dtype="fp16"), {0: (A, "fp32")}, (0x800, (2, 4), "fp16"))
    assert np.array_equal(got[:, :3], round_to(A[:2, :3], "fp16"))
    got = run_vu(I("VU_TRANSPOSE", dst=0x800, src=0, rows=3, cols=8, dtype="fp32"),
                 {0: (A, "fp32")}, (0x800, (8, 3), "fp32"))
    assert np.array_equal(got, A.T)


def test_vu_dot_both_orientations_accumulate_in_index_order():
    v8 = B[0]
    got = run_vu(I("VU_DOT", dst=0x800, mat=0, vec=0x400, rows=3, cols=8, trans=0, dtype="fp32",
                   out_dtype="fp32", order="seq"), {0: (A, "fp32"), 0x400: (v8, "fp32")}, (0x800, (3,), "fp32"))
    ref = np.zeros(3, np.float32)
    for c in range(8):
        ref = ref + A[:, c] * v8[c]
    assert np.array_equal(got, ref)
    v3 = B[1, :3]
    got = run_vu(I("VU_DOT", dst=0x800, mat=0, vec=0x400, rows=3, cols=8, trans=1, dtype="fp32",
                   out_dtype="fp32", order="seq"), {0: (A, "fp32"), 0x400: (v3, "fp32")}, (0x800, (8,), "fp32"))
    np.testing.assert_allclose(got, v3 @ A, rtol=1e-6)


def test_vu_dot_in_pim_order_is_bit_identical_to_pim_gemv():
    d, addrs, vals = _kv_setup()
    q = RNG.standard_normal(512).astype(np.float16)
    m = machine({"pim3": [I("GWRITE", channel=3, src=0, len=512, dtype="fp16"),
                          I("G_ACT", channel=3, row=5, bg_mask=0),
                          I("PIM_GEMV", channel=3, col=0, n_comps=32, dst=0x1000, dtype="fp16",
                            out_dtype="fp32")],
                 "vu0": [I("VU_DOT", dst=0x3000, mat=0x4000, vec=0, rows=32, cols=512, trans=0,
                           dtype="fp16", out_dtype="fp32", order="pim"),
                         I("VU_TRANSPOSE", dst=0x10000, src=0x4000, rows=32, cols=512,
                           dtype="fp16"),
                         I("VU_DOT", dst=0x3100, mat=0x10000, vec=0, rows=512, cols=32, trans=1,
                           dtype="fp16", out_dtype="fp32", order="pim")]}, [d])
    m.spad_put(0, q, "fp16")
    m.spad_put(0x4000, vals.astype(np.float32), "fp16")
    for b, a in enumerate(addrs):
        m.hbm.buffers["KV"][a - d.addr: a - d.addr + 1024] = np.frombuffer(vals[b].tobytes(),
                                                                           np.uint8)
    m.run()
    pim = m.spad_get(0x1000, (32,), "fp32")
    assert np.array_equal(m.spad_get(0x3000, (32,), "fp32"), pim)
    assert np.array_equal(m.spad_get(0x3100, (32,), "fp32"), pim)


# ---- PIM ----
def test_pim_adder_tree_is_pairwise_and_order_matters():
    p = np.array([1e8, 1.0, -1e8, 1.0], dtype=np.float32)
    # ((1e8 + 1) + (-1e8 + 1)) in fp32 = 1e8 + -1e8 = 0 ; sequential would give 1
    assert pim_adder_tree(p) == np.float32(0.0)
    ints = np.arange(16, dtype=np.int64).reshape(1, 16)
    assert pim_adder_tree(ints).tolist() == [120]
    assert pim_adder_tree(np.ones((2, 5), np.float32)).tolist() == [5.0, 5.0]


def test_pim_comp_step_accumulates_tree_sums():
    acc = np.array([1.0, 2.0], np.float32)
    row = np.ones((2, 16), np.float32)
    g = np.arange(16, dtype=np.float32)
    assert pim_comp_step(acc, row, g).tolist() == [121.0, 122.0]


def _kv_setup(ch=3, row=5):
    """A KV allocation covering row ``row`` of every bank of channel ``ch``, filled with fp16
    values placed through the address mapping; returns (machine, per-bank row values)."""
    amap = AddressMapping(CFG.memory)
    org = CFG.memory.org
    addrs = [amap.encode(ch, ra, bg, ba, row, 0) for ra in range(org.ranks)
             for bg in range(org.bank_groups) for ba in range(org.banks_per_group)]
    lo, hi = min(addrs), max(addrs) + org.page_size_bytes
    d = DataAlloc("KV", lo, hi - lo, ((hi - lo) // 2,), "fp16", "kv")
    vals = RNG.standard_normal((len(addrs), 512)).astype(np.float16)
    return d, addrs, vals


def test_pim_gemv_reads_each_banks_row_through_the_address_mapping():
    d, addrs, vals = _kv_setup()
    q = RNG.standard_normal(512).astype(np.float16)
    m = machine({"pim3": [
        I("PIM_HEADER", channel=3, n_gemvs=1),
        I("GWRITE", channel=3, src=0, len=512, dtype="fp16"),
        I("G_ACT", channel=3, row=5, bg_mask=0),
        I("PIM_GEMV", channel=3, col=0, n_comps=32, dst=0x1000, dtype="fp16", out_dtype="fp32"),
        I("PIM_PRECHARGE", channel=3, bg_mask=0),
        I("G_ACT", channel=3, row=5, bg_mask=0b0010),
        I("COMP", channel=3, col=2, n_comps=3, dtype="fp16"),
        I("READRES", channel=3, dst=0x2000, dtype="fp32"),
        I("PIM_PRECHARGE", channel=3, bg_mask=0)]}, [d])
    m.spad_put(0, q, "fp16")
    for b, a in enumerate(addrs):
        m.hbm.buffers["KV"][a - d.addr: a - d.addr + 1024] = np.frombuffer(vals[b].tobytes(),
                                                                           np.uint8)
    m.run()
    got = m.spad_get(0x1000, (32,), "fp32")
    ref = np.zeros(32, np.float32)
    v32, q32 = vals.astype(np.float32), q.astype(np.float32)
    for step in range(32):
        ref = pim_comp_step(ref, v32[:, step * 16:(step + 1) * 16], q32[step * 16:(step + 1) * 16])
    assert np.array_equal(got, ref)
    np.testing.assert_allclose(got, v32 @ q32, rtol=1e-4, atol=1e-3)
    # second READRES: only banks of bank group 1 (of both ranks) computed, steps 2..4
    got2 = m.spad_get(0x2000, (32,), "fp32")
    banks = [b for b in range(32) if (b // 4) % 4 == 1]
    assert all(got2[b] == 0 for b in range(32) if b not in banks)
    for b in banks:
        want = np.float32(0)
        for step in range(2, 5):
            want = pim_comp_step(np.array([want]), v32[b:b + 1, step * 16:(step + 1) * 16],
                                 q32[step * 16:(step + 1) * 16])[0]
        assert got2[b] == want
    assert (m.open_row[3] == -1).all()


def test_comp_before_gwrite_is_an_error():
    m = machine({"pim0": [I("G_ACT", channel=0, row=0, bg_mask=0),
                          I("COMP", channel=0, col=0, n_comps=1, dtype="fp16")]})
    with pytest.raises(SimulationError, match="before any GWRITE"):
        m.run()


# ---- streams ----
def test_functional_deadlock_names_streams():
    m = machine({"sa": [I("WAIT", sem=4, count=2)], "vu0": [I("SIGNAL", sem=4, count=1)]})
    with pytest.raises(SimulationError, match=r"deadlock: sa waits on semaphore 4 for 2 \(value 1\)"):
        m.run()


# ---- GEMM programs ----
@pytest.mark.parametrize("M,K,N,dtype,kw", [
    (100, 300, 200, "fp32", {}),
    (37, 129, 257, "fp16", {}),
    (64, 64, 64, "bf16", {"layout": "rowmajor"}),
    (300, 40, 300, "fp32", {"m_block": 128, "a_slots": 2, "b_slots": 2}),
])
def test_gemm_program_run_functionally_equals_numpy_matmul(M, K, N, dtype, kw):
    g = build_gemm_program(M, K, N, CFG, dtype=dtype, **kw)
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    a, b = round_to(a, dtype), round_to(b, dtype)
    hbm = run_functional(g.program, CFG, g.pack(a, b))
    c = g.unpack_c(hbm.read_tensor("C").ravel())
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if dtype == "fp32":
        np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)
    else:  # one rounding of the fp32 sum to the output type
        np.testing.assert_allclose(c, round_to(ref.astype(np.float32), dtype), rtol=1e-2,
                                   atol=1e-2)
        assert np.abs(c - ref).max() <= np.abs(ref).max() * 2 ** -7 + 1e-3


@settings(max_examples=10, deadline=None)
@given(M=st.integers(1, 20), K=st.integers(1, 20), N=st.integers(1, 20))
def test_gemm_with_small_arrays_and_edge_tiles_equals_numpy(M, K, N):
    cfg = load_config("neupims", ["npu.array_height=4", "npu.array_width=8", "npu.n_arrays=3",
                                  "npu.vector.count=3"])
    g = build_gemm_program(M, K, N, cfg, dtype="fp32")
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = g.unpack_c(run_functional(g.program, cfg, g.pack(a, b)).read_tensor("C").ravel())
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)


def test_result_rows_do_not_depend_on_batch_companions():
    rng = np.random.default_rng(1)
    b = round_to(rng.standard_normal((200, 130)).astype(np.float32), "fp16")
    row = round_to(rng.standard_normal((1, 200)).astype(np.float32), "fp16")
    outs = []
    for m in (1, 7, 33):
        a = np.concatenate([row, round_to(rng.standard_normal((m - 1, 200)), "fp16")])
        g = build_gemm_program(m, 200, 130, CFG)
        outs.append(g.unpack_c(run_functional(g.program, CFG, g.pack(a, b))
                               .read_tensor("C").ravel())[0])
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
