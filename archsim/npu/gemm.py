"""The machine side of the GEMM test kernel: ring depth and compute bound from the timing rules.

The instructions come from :func:`mapping.gemm.build_gemm_program` (an instruction is never
invented in ``archsim``); this module only decides what depends on the machine's timing — the
depth of each array's weight-tile ring (:func:`archsim.npu.timing.weight_ring_slots`, so that
a preload-bound tile never waits for a buffer) — and attaches the ideal-memory bound
(:func:`archsim.npu.timing.gemm_compute_bound_cycles` of the busiest array).
"""
from __future__ import annotations

from dataclasses import replace

from archsim.npu.timing import gemm_compute_bound_cycles, weight_ring_slots
from mapping.gemm import GemmProgram
from mapping.gemm import build_gemm_program as _build


def build_gemm_program(M: int, K: int, N: int, cfg, *, b_slots: int | None = None,
                       **kwargs) -> GemmProgram:
    """C[M, N] = A[M, K] @ B[K, N] on ``cfg``'s arrays, with its compute bound.

    Args:
        M, K, N: sizes (elements).
        cfg: ``archsim.config.MachineConfig``.
        b_slots: weight-tile buffers per array (default: :func:`weight_ring_slots` for the
            array and ``min(M, m_block)`` rows).
        **kwargs: the other options of :func:`mapping.gemm.build_gemm_program` (dtype,
            out_dtype, a_slots, m_block, base_addr, layout).

    Returns:
        The :class:`mapping.gemm.GemmProgram` with ``compute_bound_cycles`` set: the largest
        :func:`gemm_compute_bound_cycles` over the arrays (ideal memory, no DMA prologue).

    Raises:
        SimulationError: from the builder (scratchpad too small, bad layout).
    """
    npu = cfg.npu
    H, W = npu.array_height, npu.array_width
    if b_slots is None:
        rows = min(M, kwargs.get("m_block") or M)
        b_slots = weight_ring_slots(H, W, rows)
    g = _build(M, K, N, cfg, b_slots=b_slots, **kwargs)
    bound = max(gemm_compute_bound_cycles(H, W, r) for r in g.tile_rows if r)
    return replace(g, compute_bound_cycles=bound)


__all__ = ["GemmProgram", "build_gemm_program"]
