"""Speed paths of the whole-system simulator change nothing simulated.

:class:`archsim.npu.executor.Executor` with ``fast_forward=True`` (the whole event loop
compiled beside :class:`archsim.memory.kernel.KernelMemory`, :mod:`archsim.npu.cloop`) must
give exactly what the same executor gives without it (``fast_forward=False``: every iteration
through the Python loop); ``tests/test_compiled_executor.py`` checks more programs:
the NPU statistics, the per-instruction times, the memory statistics and the command log.
"""
from __future__ import annotations

import numpy as np
import pytest

from archsim.config import load_config
from archsim.npu.loader import load_program
from archsim.npu.timing import dma_request_addresses
from archsim.npu.executor import Executor
from archsim.npu.observe import InstructionTimes
from archsim.memory.kernel import KernelMemory as FastMemorySystem
from mapping.compiler import compile_layers
from workloads import default_batch, get_model


def _run(cfg, lp, ff: bool):
    mem = FastMemorySystem(cfg, keep_log=True)
    rec = InstructionTimes(lp)
    ex = Executor(lp, cfg, mem, fast_forward=ff, observer=rec)
    stats = ex.run()
    ex.times = rec.times
    return ex, stats, mem


@pytest.mark.parametrize("preset,n,sets", [
    ("neupims", 24, []), ("npu-pim-blocked", 16, []), ("npu-only", 16, []),
    # PIM runs of several commands in flight, and an NPU clock other than the memory's
    ("neupims", 24, ["pim.command_queue_depth=4"]),
    ("npu-pim-blocked", 16, ["pim.command_queue_depth=3"]),
    ("neupims", 16, ["npu.freq_mhz=800", "pim.command_queue_depth=2"]),
    ("neupims-hbm3", 16, []),
])
def test_fast_forward_gives_identical_results(preset, n, sets):
    cfg = load_config(preset, sets)
    model = get_model("tiny-gpt")
    cp = compile_layers(model, default_batch(model, n, "sharegpt", seed=1), cfg, "decode",
                        [0, 1])
    lp = load_program(cp.program, cfg)
    ex0, s0, m0 = _run(cfg, lp, False)
    ex1, s1, m1 = _run(cfg, lp, True)
    assert ex0.ff is None and ex1.ff.steps > 0
    assert repr(s1) == repr(s0)
    assert ex1.times.keys() == ex0.times.keys()
    assert all(np.array_equal(a, b) for s in ex0.times for a, b in zip(ex1.times[s], ex0.times[s]))
    assert m1.stats() == m0.stats()
    assert np.array_equal(m1.command_log_array(), m0.command_log_array())
    assert ex1._pim_counter == ex0._pim_counter


@pytest.mark.parametrize("hbm,rows,row_bytes,stride,q,ib", [
    (0, 4, 256, 256, 64, 1024), (4096 + 64, 3, 192, 4096, 64, 1024),
    (100, 5, 130, 300, 64, 1024), (1 << 20, 7, 2048, 2048, 64, 0), (96, 2, 64, 64, 64, 256),
    (3 * 1024 + 32, 9, 1000, 1040, 64, 1024)])
def test_dma_request_addresses_memo_matches_the_formula(hbm, rows, row_bytes, stride, q, ib):
    """The memoised split equals a direct computation at every offset of its period."""
    from archsim.npu import timing

    for base in (hbm, hbm + 64 * 1024, hbm + 3 * 4096 * 1024):
        a1, s1 = dma_request_addresses(base, rows, row_bytes, stride, q, ib)
        a2, s2 = timing._dma_request_addresses_uncached(base, rows, row_bytes, stride, q, ib)
        assert a1.dtype == np.int64 and s1.dtype == np.int64
        assert np.array_equal(a1, a2) and np.array_equal(s1, s2)
        # a second call (from the memo) is the same and independent of the first
        a3, s3 = dma_request_addresses(base, rows, row_bytes, stride, q, ib)
        assert np.array_equal(a3, a2) and np.array_equal(s3, s2)
