"""NPU timing model: tile formula, double buffering, vector/DMA/PIM timing, semaphores,
stall accounting, deadlock and capacity errors."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.config import load_config
from archsim.npu.executor import Executor, run_timing
from archsim.errors import SimulationError
from archsim.memport import PimOpKind, PimRequest
from archsim.npu.loader import load_program
from archsim.npu.simple_memory import SimpleMemory
from archsim.npu.timing import (dma_request_addresses, tile_latency_cycles, vector_op_cycles,
                                weight_preload_cycles)
from isa.encoding import Instruction as I
from isa.program import DataAlloc, Program

CFG = load_config("neupims")


def small_cfg(**over):
    sets = [f"{k.replace('__', '.')}={v}" for k, v in over.items()]
    return load_config("neupims", sets)


def prog(streams: dict[str, list], data=()) -> Program:
    p = Program()
    for d in data:
        p.add_data(d)
    for name, ins in streams.items():
        for i in ins:
            p.emit(name, i)
    return p


def loadw(a=0, k=128, n=128, w=0):
    return I("SA_LOADW", array=a, w=w, k=k, n=n, dtype="fp16")


def matmul(a=0, m=64, n=128, k=128, src=0x10000, dst=0x80000, acc=0):
    return I("SA_MATMUL", array=a, src=src, dst=dst, m=m, n=n, k=k, acc=acc, dtype="fp16",
             out_dtype="fp32")


# ---- pure formulas ----
@pytest.mark.parametrize("H,W,n,expected", [(128, 128, 1024, 1278), (128, 128, 1, 258),
                                            (128, 128, 4, 258), (4, 8, 5, 15), (2, 2, 3, 6)])
def test_tile_latency_is_h_plus_w_minus_2_plus_max_n_4(H, W, n, expected):
    assert tile_latency_cycles(H, W, n) == expected


def test_vector_op_cycles_follow_the_config_rule():
    assert vector_op_cycles(8, 1, 128, 128) == 8
    assert vector_op_cycles(1, 4, 300, 128) == 1 + 4 * 3 - 1
    assert vector_op_cycles(8, 2, 128, 128, passes=3) == 8 + 6 - 1


@pytest.mark.parametrize("passes", [1, 3, 5])
def test_softmax_takes_the_configured_passes(passes):
    cfg = load_config("neupims", [f"npu.vector.passes.softmax={passes}"])
    op = I("VU_SOFTMAX", dst=0, src=0, rows=4, cols=300, dtype="fp32", mask="none", len=0, lse=0)
    st_ = run_timing(prog({"vu0": [op]}), cfg)
    assert st_.cycles == vector_op_cycles(cfg.npu.vector.latency_cycles["softmax"], 4, 300,
                                          128, passes) == 8 + passes * 4 * 3 - 1


def test_dma_requests_are_64b_at_real_addresses_and_partial_at_row_edges():
    addrs, sizes = dma_request_addresses(0x1000, 2, 128, 4096, 64)
    assert addrs.tolist() == [0x1000, 0x1040, 0x2000, 0x2040] and set(sizes.tolist()) == {64}
    addrs, sizes = dma_request_addresses(0x1010, 1, 100, 0, 64)
    assert addrs.tolist() == [0x1010, 0x1040] and sizes.tolist() == [48, 52]


def test_dma_interleaved_order_visits_every_channel_block_first():
    addrs, _ = dma_request_addresses(0, 1, 4096, 0, 64, interleave_bytes=1024)
    assert addrs[:4].tolist() == [0, 1024, 2048, 3072]
    assert sorted(addrs.tolist()) == list(range(0, 4096, 64))


# ---- systolic arrays in the executor ----
def test_single_tile_takes_preload_then_formula():
    st_ = run_timing(prog({"sa": [loadw(), matmul(m=64)]}), CFG)
    assert st_.cycles == weight_preload_cycles(128) + tile_latency_cycles(128, 128, 64)
    assert st_.arrays[0].macs == 64 * 128 * 128 and st_.arrays[0].tiles == 1


@settings(max_examples=25, deadline=None)
@given(H=st.integers(2, 16), W=st.integers(2, 16), m=st.integers(1, 40))
def test_executor_tile_timing_equals_formula_for_any_array_shape(H, W, m):
    cfg = small_cfg(npu__array_height=H, npu__array_width=W)
    p = prog({"sa": [loadw(k=H, n=W), matmul(m=m, n=W, k=H)]})
    assert run_timing(p, cfg).cycles == H + tile_latency_cycles(H, W, m)


def test_double_buffered_preload_overlaps_running_tile():
    # tile 1 (512 rows) starts at 128; the next preload starts when tile 1 takes its weights
    # (128) and is done at 256 < 128 + 512, so tile 2 starts right after tile 1's rows.
    p = prog({"sa": [loadw(), matmul(m=512), loadw(w=0x40000), matmul(m=512)]})
    st_ = run_timing(p, CFG)
    assert st_.cycles == 128 + 512 + tile_latency_cycles(128, 128, 512)


def test_short_tiles_wait_for_the_next_preload():
    # 8-row tiles: the second preload (128 cycles) cannot hide behind 8 rows
    p = prog({"sa": [loadw(), matmul(m=8), loadw(w=0x40000), matmul(m=8)]})
    assert run_timing(p, CFG).cycles == 128 + 128 + tile_latency_cycles(128, 128, 8)


def test_tiles_on_different_arrays_run_in_parallel():
    p = prog({"sa": [loadw(0), matmul(0, m=256), loadw(1), matmul(1, m=256)]})
    st_ = run_timing(p, CFG)
    assert st_.cycles == 128 + tile_latency_cycles(128, 128, 256)
    assert [a.tiles for a in st_.arrays[:2]] == [1, 1]


def test_full_array_queue_stalls_stream_with_cause_array():
    ins = []
    for i in range(4):
        ins += [loadw(w=0x1000 * i), matmul(m=1024)]
    st_ = run_timing(prog({"sa": ins}), CFG)
    assert st_.streams["sa"].stall_cycles["array"] > 0
    assert st_.cycles == 128 + 3 * 1024 + tile_latency_cycles(128, 128, 1024)


def test_array_any_uses_the_array_its_loadw_picked():
    p = prog({"sa": [loadw(a=63), matmul(a=63, m=256), loadw(a=63, w=0x8000), matmul(a=63, m=256)]})
    st_ = run_timing(p, CFG)
    assert sum(a.tiles for a in st_.arrays) == 2
    assert st_.arrays[0].tiles == 1 and st_.arrays[1].tiles == 1  # second picks a free array


def test_matmul_without_weights_is_an_error():
    with pytest.raises(SimulationError, match="array 0 has no weights"):
        run_timing(prog({"sa": [matmul()]}), CFG)


# ---- semaphores ----
def test_signal_fires_when_earlier_work_completes_and_wait_releases_consumer():
    p = prog({"sa": [loadw(), matmul(m=64), I("SIGNAL", sem=5, count=1)],
              "vu0": [I("WAIT", sem=5, count=1),
                      I("VU_SCALE", dst=0, src=0, rows=1, cols=128, dtype="fp16", imm=2.0)]})
    st_ = run_timing(p, CFG)
    sa_done = 128 + tile_latency_cycles(128, 128, 64)
    assert st_.cycles == sa_done + vector_op_cycles(1, 1, 128, 128)
    assert st_.streams["vu0"].stall_cycles["semaphore"] == sa_done


def test_counting_semaphore_needs_the_full_count():
    p = prog({"vu0": [I("SIGNAL", sem=1, count=1), I("SIGNAL", sem=1, count=2)],
              "vu1": [I("WAIT", sem=1, count=3), I("END")]})
    assert run_timing(p, CFG).streams["vu1"].instructions == 2


def test_semaphore_deadlock_names_waiting_streams_and_semaphores():
    p = prog({"sa": [I("WAIT", sem=1, count=1), I("SIGNAL", sem=2, count=1)],
              "vu0": [I("WAIT", sem=2, count=1), I("SIGNAL", sem=1, count=1)],
              "dma0": [I("NOP")]})
    with pytest.raises(SimulationError) as exc:
        run_timing(p, CFG)
    msg = str(exc.value)
    assert "deadlock" in msg
    assert "sa waits on semaphore 1 for 1 (value 0)" in msg
    assert "vu0 waits on semaphore 2 for 1 (value 0)" in msg
    assert "dma0" not in msg


# ---- DMA ----
A = DataAlloc("A", 0, 1 << 20, (512, 1024), "fp16", "activation")


def test_dma_load_time_is_setup_plus_latency_plus_bandwidth():
    mem = SimpleMemory(latency_cycles=20, bytes_per_cycle=32, channels=32, channel_shift=10)
    p = prog({"dma0": [I("DMA_LOAD", spad=0, hbm=0, rows=64, cols=512, stride=1024,
                         dtype="fp16")]}, [A])
    st_ = run_timing(p, CFG, mem)
    # 64 KiB over 32 channels at 32 B/cycle = 64 cycles of transfer, after setup + latency
    assert st_.cycles == CFG.npu.dma.setup_cycles + 20 + 64
    assert st_.dma.requests == 1024 and st_.dma.bytes_read == 65536
    assert mem.requests == 1024


def test_dma_outstanding_limit_bounds_bandwidth_littles_law():
    cfg = small_cfg(npu__dma__max_outstanding=8)
    mem = SimpleMemory(latency_cycles=100, bytes_per_cycle=1024, channels=1, channel_shift=40)
    p = prog({"dma0": [I("DMA_LOAD", spad=0, hbm=0, rows=1, cols=4096, stride=0,
                         dtype="fp16")]}, [A])
    st_ = run_timing(p, cfg, mem)
    # 128 requests, 8 in flight, ~100 cycles each round trip -> 16 rounds
    assert 16 * 100 <= st_.cycles <= 16 * 102 + cfg.npu.dma.setup_cycles
    assert st_.streams["dma0"].stall_cycles["memory"] > 1400


def test_memory_back_pressure_is_respected_and_counted():
    mem = SimpleMemory(latency_cycles=10, bytes_per_cycle=32, channels=1, channel_shift=40,
                       max_outstanding_per_channel=4)
    p = prog({"dma0": [I("DMA_LOAD", spad=0, hbm=0, rows=1, cols=2048, stride=0,
                         dtype="fp16")]}, [A])
    st_ = run_timing(p, CFG, mem)
    assert st_.dma.requests == 64 and st_.streams["dma0"].stall_cycles["memory"] > 0


def test_dma_store_counts_written_bytes_and_signal_waits_for_completion():
    p = prog({"dma1": [I("DMA_STORE", spad=0, hbm=0x100, rows=2, cols=64, stride=256,
                         dtype="fp32"), I("SIGNAL", sem=9, count=1)],
              "vu0": [I("WAIT", sem=9, count=1), I("END")]}, [A])
    st_ = run_timing(p, CFG)
    assert st_.dma.bytes_written == 512
    assert st_.streams["vu0"].finish_cycle == st_.streams["dma1"].finish_cycle


# ---- PIM ----
def test_pim_instruction_becomes_one_pim_request_and_waits_for_it():
    p = prog({"pim3": [I("PIM_HEADER", channel=3, n_gemvs=1),
                       I("G_ACT", channel=3, row=7, bg_mask=0),
                       I("PIM_GEMV", channel=3, col=0, n_comps=16, dst=0, dtype="fp16",
                         out_dtype="fp32")]})
    st_ = run_timing(p, CFG)
    t = CFG.memory.timing
    gact = SimpleMemory.pim_command_cycles(PimRequest(0, 3, PimOpKind.G_ACT, 0), CFG)
    gemv = max(CFG.memory.burst_cycles, t.tCCD_S) * (16 + 1)
    assert st_.cycles == 1 + gact + gemv
    assert st_.pim[3].commands == 3


# ---- static checks ----
def test_scratchpad_overflow_is_reported_before_running():
    p = prog({"dma0": [I("DMA_LOAD", spad=CFG.npu.scratchpad.size_bytes - 64, hbm=0, rows=1,
                         cols=64, stride=0, dtype="fp16")]}, [A])
    with pytest.raises(SimulationError, match="operand spad .* overflows the 33554432-byte"):
        load_program(p, CFG)


def test_declared_scratchpad_larger_than_machine_is_rejected():
    p = Program(spad_size_bytes=CFG.npu.scratchpad.size_bytes * 2)
    with pytest.raises(SimulationError, match="compiled for a"):
        load_program(p, CFG)


@pytest.mark.parametrize("streams,text", [
    ({"sa": [loadw(a=8)]}, "array 8 does not exist"),
    ({"sa": [loadw(k=129)]}, "exceeds the array height"),
    ({"dma0": [I("DMA_LOAD", spad=0, hbm=1 << 21, rows=1, cols=8, stride=0, dtype="fp16")]},
     "not inside one data allocation"),
    ({"pim2": [I("G_ACT", channel=3, row=0, bg_mask=0)]}, "differs from the stream's channel"),
    ({"pim2": [I("COMP", channel=2, col=30, n_comps=4, dtype="fp16")]}, "past the 512"),
    ({"vu8": [I("NOP")]}, "vector units 0..7"),
    ({"pim": [I("NOP")]}, "must name its channel"),
])
def test_loader_names_the_violated_limit(streams, text):
    with pytest.raises(SimulationError, match=text):
        load_program(prog(streams, [A]), CFG)


def test_executor_accepts_any_memory_port():
    class Port:
        """A minimal MemoryPort wrapping SimpleMemory by delegation (not a subclass)."""

        def __init__(self):
            self.inner = SimpleMemory(latency_cycles=5)
            self.accept_calls = 0

        def submit(self, req):
            self.inner.submit(req)

        def submit_pim(self, req):
            self.inner.submit_pim(req)

        def can_accept(self, addr, is_write=False):
            self.accept_calls += 1
            return True

        def next_event_cycle(self):
            return self.inner.next_event_cycle()

        def advance_to(self, cycle):
            return self.inner.advance_to(cycle)

    port = Port()
    p = prog({"dma0": [I("DMA_LOAD", spad=0, hbm=0, rows=4, cols=64, stride=128, dtype="fp16")]},
             [A])
    st_ = Executor(p, CFG, port).run()
    assert port.accept_calls == 8 and st_.dma.requests == 8


def test_npu_and_memory_clocks_are_converted_at_the_port():
    cfg = small_cfg(npu__freq_mhz=2000)  # NPU cycle = 0.5 memory cycle
    mem = SimpleMemory(latency_cycles=20, bytes_per_cycle=32, channels=32, channel_shift=10)
    p = prog({"dma0": [I("DMA_LOAD", spad=0, hbm=0, rows=64, cols=512, stride=1024,
                         dtype="fp16")]}, [A])
    st_ = run_timing(p, cfg, mem)
    # setup 10 NPU cycles = 5 memory cycles; + 20 latency + 64 transfer = 89 memory cycles
    assert st_.cycles == 2 * (5 + 20 + 64)
    assert st_.peak_memory_bytes_per_cycle == pytest.approx(32 * 32 / 2)


def test_loader_accepts_sync_instructions_in_pim_streams():
    """SIGNAL/WAIT/END carry no channel operand: a PIM stream may synchronise with others."""
    p = prog({"pim1": [I("WAIT", sem=1, count=1), I("G_ACT", channel=1, row=1, bg_mask=1),
                       I("SIGNAL", sem=2, count=1)],
              "vu0": [I("SIGNAL", sem=1, count=1), I("WAIT", sem=2, count=1)]})
    load_program(p, CFG)
    assert run_timing(p, CFG).cycles > 0
    bad = prog({"pim1": [I("G_ACT", channel=2, row=1, bg_mask=1)]})
    with pytest.raises(SimulationError, match="channel 2 differs"):
        load_program(bad, CFG)


def test_issue_rate_and_queue_depths_are_config_keys():
    """npu.dma.issue_per_cycle, npu.sa_queue_depth and npu.vector.queue_depth reach the executor
    (the same as passing the executor options) and change the timing when they bind."""
    from archsim.npu.gemm import build_gemm_program

    cfg = load_config("neupims")
    g = build_gemm_program(256, 1024, 1024, cfg)
    base = run_timing(g.program, cfg).cycles
    slow = load_config("neupims", ["npu.dma.issue_per_cycle=1"])
    assert run_timing(g.program, slow).cycles == run_timing(g.program, cfg,
                                                            dma_issue_per_cycle=1).cycles > base
    deep = load_config("neupims", ["npu.sa_queue_depth=1", "npu.vector.queue_depth=1"])
    assert run_timing(g.program, deep).cycles == run_timing(
        g.program, cfg, sa_queue_depth=1, vu_queue_depth=1).cycles >= base


def test_weight_ring_slots_cover_a_preload_bound_tile():
    from archsim.npu.timing import tile_latency_cycles, weight_ring_slots

    assert [weight_ring_slots(128, 128, m) for m in (1, 64, 128, 253, 254, 1024)] == \
        [5, 5, 5, 5, 4, 4]
    for m in (1, 4, 37, 64, 128, 200, 512):
        p = max(m, 4, 128)
        # buffers in use while a tile waits for its start, runs and drains, plus the loading one
        assert (weight_ring_slots(128, 128, m) - 1) * p >= p + tile_latency_cycles(128, 128, m)
        assert (weight_ring_slots(128, 128, m) - 2) * p < p + tile_latency_cycles(128, 128, m)


def test_gemm_compute_bound_is_preload_bound_below_the_array_height():
    from archsim.npu.timing import gemm_compute_bound_cycles

    assert gemm_compute_bound_cycles(128, 128, [64] * 768) == 128 + 768 * 128 + 128 + 126
    assert gemm_compute_bound_cycles(128, 128, [1024] * 3) == 128 + 3 * 1024 + 254
    assert gemm_compute_bound_cycles(128, 128, [1, 2]) == 128 + 2 * 128 + 254
    assert gemm_compute_bound_cycles(32, 16, [64, 8]) == 32 + 64 + 32 + 32 + 16 - 2


def test_the_compilers_weight_ring_covers_every_tile_height_on_the_reference_array():
    """mapping counts no cycle, so its smallest ring (kept whenever a GEMM row fits beside it)
    is a constant: it must be at least what the machine's rule asks for any number of rows on
    the reference 128 x 128 array."""
    from archsim.npu.timing import weight_ring_slots
    from mapping.bufplan import RING_MIN

    need = max(weight_ring_slots(128, 128, m) for m in range(1, 4097))
    assert RING_MIN >= need == 5
