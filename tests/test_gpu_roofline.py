"""GPU-only baseline: roofline and calibrated formulas against hand-computed numbers, the
whole-model sum, the fast closed form against the graph path in both modes, board energy."""
from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.errors import ArchsimError
from archsim.errors import ConfigError
from archsim.gpu import (GpuCostModel, graph_kernels, kernel_times_s, ring_allreduce_time_s,
                         simulate_gpu_iteration)
from archsim.timeline import chrome_trace, validate_chrome_trace
from workloads.graph import build_layer_graph
from workloads.models import get_model
from workloads.requests import Batch, Request

CFG = load_config("gpu-a100", ["gpu.mode=roofline"])
CAL = load_config("gpu-a100")                 # the preset's mode: calibrated
GPU = CFG.gpu
LINK = CFG.system.interconnect


def _batch(lens):
    return Batch(tuple(Request(i, L, 8, L) for i, L in enumerate(lens)))


def test_ring_allreduce_hand_computed():
    # p = 4, 1 MB: 2*3/4 * 1e6 B / 300e9 B/s = 5 us, plus 6 steps * 1 us
    assert ring_allreduce_time_s(1e6, 4, LINK) == pytest.approx(5e-6 + 6e-6)
    assert ring_allreduce_time_s(1e6, 1, LINK) == 0.0


def _one(cls, flops, nbytes, gpu, rows=64.0, ctx=100.0):
    t, u = kernel_times_s([cls], np.array([flops]), np.array([nbytes]), np.array([0.0]),
                          np.float64(rows), np.float64(ctx), gpu, LINK, 1)
    return float(t[0]), float(u[0])


def test_kernel_time_is_the_slower_roof_plus_launch():
    # compute bound: 1e12 FLOP / (312e12 * 0.7) = 4.5788 ms > 1e9 B / (1.555e12 * 0.8) = 0.804 ms
    t, u = _one("gemm", 1e12, 1e9, GPU)
    assert t == pytest.approx(1e12 / 218.4e12 + 5e-6)
    assert u == pytest.approx(1e12 / 312e12 / t)
    # memory bound, vector efficiency 0.6: 1e9 / (1.555e12 * 0.6)
    assert _one("vector", 1e6, 1e9, GPU)[0] == pytest.approx(1e9 / 0.933e12 + 5e-6)


def test_calibrated_kernel_efficiencies_follow_rows_and_context():
    c = CAL.gpu.calibrated
    half = c.gemm_half_rows
    t, _ = _one("gemm", 1e12, 1e3, CAL.gpu, rows=half)          # half the asymptote at M_half
    assert t == pytest.approx(1e12 / (312e12 * c.gemm_efficiency / 2) + c.kernel_launch_us * 1e-6)
    h100 = load_config("gpu-h100").gpu
    lh = h100.calibrated.attention_half_context
    t, _ = _one("attention", 1.0, 1e9, h100, ctx=lh)
    assert t == pytest.approx(1e9 / (3.35e12 * h100.calibrated.attention_bw_efficiency / 2)
                              + h100.calibrated.kernel_launch_us * 1e-6)


def test_an_override_of_the_other_modes_keys_is_rejected():
    with pytest.raises(ConfigError, match="gpu.gemm_efficiency is read only with gpu.mode: "
                                          "roofline"):
        load_config("gpu-a100", ["gpu.gemm_efficiency=0.5"])
    with pytest.raises(ConfigError, match="read only with gpu.mode: calibrated"):
        load_config("gpu-a100", ["gpu.mode=roofline", "gpu.calibrated.gemm_half_rows=3"])


def test_qkv_stage_of_tiny_gpt_matches_hand_computation():
    m = get_model("tiny-gpt")          # d 128, 2 layers, heads 4 x 32, qkv bias
    res = simulate_gpu_iteration(CFG, m, _batch([5, 7, 9]), "decode", tp=1)
    T = 3
    gemm = max(2 * T * 128 * 384 / (312e12 * 0.7),
               (T * 128 + 128 * 384 + T * 384) * 2 / (1.555e12 * 0.8)) + 5e-6
    bias = max(T * 384 / (312e12 * 0.7), (T * 384 + 384 + T * 384) * 2 / (1.555e12 * 0.6)) + 5e-6
    assert res.stage_seconds["qkv"] == pytest.approx(2 * (gemm + bias))
    assert sum(res.stage_seconds.values()) == pytest.approx(res.seconds_per_iteration)
    assert "allreduce" not in res.stage_seconds


def test_per_request_attention_runs_as_one_batched_kernel():
    m = get_model("tiny-gpt")
    one = graph_kernels(build_layer_graph(m, "decode", _batch([5]), tp=1))
    many = graph_kernels(build_layer_graph(m, "decode", _batch([5, 6, 7, 8]), tp=1))
    assert [k.sub_role for k in one] == [k.sub_role for k in many]
    assert next(k for k in many if k.sub_role == "attn_score").ops == 4


def test_whole_model_is_layers_times_layer_plus_head_and_allreduces():
    m = get_model("gpt3-7b")
    b = _batch([100, 200, 300, 400])
    res = simulate_gpu_iteration(CFG, m, b, "decode")
    assert res.tensor_parallel == 4 and len(res.layers) == 32
    layer = res.layers[0].seconds
    assert res.seconds_per_iteration == pytest.approx(
        32 * layer + res.stage_seconds["embedding"] + res.stage_seconds["lm_head"])
    # two ring all-reduces of T x d fp16 per layer
    assert res.stage_seconds["allreduce"] == pytest.approx(
        32 * 2 * ring_allreduce_time_s(4 * 4096 * 2, 4, LINK))
    assert res.cycles_per_iteration is None and res.npu_util is None and res.pim_util is None
    assert 0 < res.flops_util <= 1 and res.timing_source == "roofline"
    assert res.tokens == 4 and res.extra["gpu_mode"] == "roofline"


def test_gpu_energy_is_board_power_times_time():
    m = get_model("gpt3-7b")
    res = simulate_gpu_iteration(CAL, m, _batch([300] * 64), "decode", with_events=False)
    e = res.extra["energy"]
    devices = res.devices
    assert res.timing_source == "calibrated" and res.extra["gpu_mode"] == "calibrated"
    assert res.energy_j["gpu_idle"] == pytest.approx(60 * res.seconds_per_iteration * devices)
    assert 0 < e["board_activity"] <= 1
    assert res.power_per_device_w == pytest.approx(60 + 340 * e["board_activity"])
    assert 60 < res.power_per_device_w <= 400
    assert res.tokens_per_joule == pytest.approx(64 / sum(res.energy_j.values()))


def test_pipeline_parallel_adds_stage_handoffs():
    m = get_model("gpt3-30b")                       # TP4, PP2
    b = _batch([50, 60])
    res = simulate_gpu_iteration(CFG, m, b, "decode")
    size = 2 * 7168 * 2
    assert res.stage_seconds["pipeline"] == pytest.approx(size / 300e9 + 1e-6)
    assert res.pipeline_parallel == 2 and res.devices == 8


def test_events_cover_the_iteration_and_form_a_valid_trace():
    m = get_model("tiny-gpt")
    res = simulate_gpu_iteration(CFG, m, _batch([5, 9]), "decode", tp=1)
    assert res.events[-1].end_cycle == pytest.approx(res.seconds_per_iteration * 1e9)
    assert validate_chrome_trace(chrome_trace(res.events, res.events_clock_mhz)) == []


def test_longer_contexts_and_bigger_batches_behave_like_a_roofline():
    m = get_model("gpt3-7b")
    short = simulate_gpu_iteration(CFG, m, _batch([100] * 64), with_events=False)
    long = simulate_gpu_iteration(CFG, m, _batch([1000] * 64), with_events=False)
    big = simulate_gpu_iteration(CFG, m, _batch([100] * 256), with_events=False)
    assert long.stage_seconds["attention"] > 5 * short.stage_seconds["attention"]
    assert big.tokens_per_s > 2 * short.tokens_per_s      # weights amortised over the batch


@pytest.mark.parametrize("cfg", [CFG, CAL], ids=["roofline", "calibrated"])
@pytest.mark.parametrize("name", ["gpt3-7b", "tiny-llama", "gpt3-30b"])
def test_closed_form_equals_the_graph_path(name, cfg):
    m = get_model(name)
    fast = GpuCostModel(cfg, m)
    rng = np.random.default_rng(1)
    for phase in ("decode", "prefill"):
        for n in (1, 7, 33):
            lens = rng.integers(1, min(m.max_seq_len, 900), size=n)
            ref = simulate_gpu_iteration(cfg, m, _batch(lens), phase, with_events=False)
            q = np.ones(n) if phase == "decode" else lens
            assert fast.iteration_time_s(q, lens) == pytest.approx(
                ref.seconds_per_iteration, rel=1e-9)


def test_unknown_phase_is_rejected():
    with pytest.raises(ArchsimError, match="phase"):
        simulate_gpu_iteration(CFG, get_model("tiny-gpt"), _batch([3]), "mixed")
