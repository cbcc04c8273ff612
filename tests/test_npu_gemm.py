"""The 1024x4096 @ 4096x4096 GEMM on 8 arrays of 128x128: compute bound with full-bandwidth
memory, memory bound (and reported so) when the weights cannot stream fast enough."""
from __future__ import annotations

import pytest

from archsim.config import load_config
from archsim.npu.executor import run_timing
from archsim.npu.gemm import build_gemm_program
from archsim.npu.simple_memory import SimpleMemory

CFG = load_config("neupims")


@pytest.fixture(scope="module")
def big_gemm():
    return build_gemm_program(1024, 4096, 4096, CFG)


def test_big_gemm_with_full_bandwidth_is_within_5_percent_of_compute_bound(big_gemm):
    ideal_macs = 1024 * 4096 * 4096 // (8 * 128 * 128)
    assert big_gemm.compute_bound_cycles >= ideal_macs
    assert big_gemm.compute_bound_cycles <= ideal_macs * 1.005
    st = run_timing(big_gemm.program, CFG, SimpleMemory.from_config(CFG))
    assert st.macs == 1024 * 4096 * 4096
    assert st.cycles <= 1.05 * big_gemm.compute_bound_cycles, st.cycles
    assert st.bound == "compute"
    assert st.array_utilisation > 0.95
    assert st.bytes_moved == big_gemm.dma_bytes


def test_big_gemm_with_starved_memory_is_memory_bound_and_reported_so(big_gemm):
    mem = SimpleMemory.from_config(CFG, bytes_per_cycle=4.0)  # 128 B/cycle for 32 channels
    st = run_timing(big_gemm.program, CFG, mem)
    memory_bound = big_gemm.dma_bytes / (4.0 * 32)
    assert memory_bound > 2 * big_gemm.compute_bound_cycles
    assert memory_bound <= st.cycles <= 1.05 * memory_bound
    assert st.bound == "memory"
    assert st.busy_fractions()["memory"] > 0.95
    assert st.memory_bandwidth_utilisation == pytest.approx(st.bytes_moved / (128 * st.cycles))
    assert st.streams["sa"].stall_cycles["semaphore"] > 0.9 * st.cycles


def test_row_major_weights_hit_few_channels_and_run_slower():
    # With a bounded DMA window (512 requests in flight), requests queued on the few channels a
    # row-major tile touches hold the window, so the tiled layout is clearly faster.
    cfg = load_config("neupims", ["npu.dma.max_outstanding=512"])
    tiled = build_gemm_program(256, 1024, 1024, cfg)
    rowmajor = build_gemm_program(256, 1024, 1024, cfg, layout="rowmajor")
    a = run_timing(tiled.program, cfg)
    b = run_timing(rowmajor.program, cfg)
    assert b.cycles > 1.2 * a.cycles


@pytest.mark.parametrize("M,K,N", [(100, 300, 200), (1, 129, 257), (513, 128, 128)])
def test_odd_sizes_build_and_run(M, K, N):
    g = build_gemm_program(M, K, N, CFG)
    st = run_timing(g.program, CFG)
    assert st.macs == M * K * N
    assert st.bytes_moved == g.dma_bytes


# --- the weight-tile ring and the compute bound (issue 16, item 6; found against SCALE-Sim) ---
IDEAL_4 = load_config("neupims", ["npu.n_arrays=4", "npu.dma.setup_cycles=0"])


def _ideal_memory(cfg):
    return SimpleMemory.from_config(cfg, latency_cycles=0, bytes_per_cycle=1e6)


def _closed_form(H, W, F, M):
    return H + F * max(M, H) + H + W - 2


@pytest.mark.parametrize("M", [64, 128])
def test_preload_bound_gemm_runs_at_the_closed_form_with_ideal_memory(M):
    H = W = 128
    K, N = 2048, 4096
    F = (K // H) * (N // W) // 4                      # tiles per array
    g = build_gemm_program(M, K, N, IDEAL_4)
    assert g.compute_bound_cycles == _closed_form(H, W, F, M)
    st = run_timing(g.program, IDEAL_4, _ideal_memory(IDEAL_4))
    # below the bound by at most the last tile's unused preload slot; above it only by the
    # prologue (the first A slice and weight tile through the DMA)
    assert g.compute_bound_cycles - (H - max(M, 4)) <= st.cycles <= 1.02 * g.compute_bound_cycles


@pytest.mark.parametrize("M", [64, 128])
def test_a_ring_of_three_weight_tiles_stalls_preload_bound_tiles(M):
    deep = build_gemm_program(M, 2048, 4096, IDEAL_4)
    shallow = build_gemm_program(M, 2048, 4096, IDEAL_4, b_slots=3)
    assert deep.b_slots == 5
    a = run_timing(deep.program, IDEAL_4, _ideal_memory(IDEAL_4)).cycles
    b = run_timing(shallow.program, IDEAL_4, _ideal_memory(IDEAL_4)).cycles
    assert b > 1.15 * a, (a, b)


def test_qkv_gemm_bound_counts_the_preload_of_small_tiles():
    # GPT3-7B QKV (K = 4096, N = 3 x 4096) at M = 64 on 4 arrays: 768 tiles per array, each
    # bound by its 128-cycle weight preload, not by its 64 rows (49,534 before the fix)
    g = build_gemm_program(64, 4096, 12288, load_config("neupims", ["npu.n_arrays=4"]))
    assert g.compute_bound_cycles == _closed_form(128, 128, 768, 64) == 98_686
