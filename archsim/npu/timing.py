"""Closed-form timing rules of the NPU's engines (pure functions, NPU clock cycles).

Each rule is one small function with its source, so that the executor, the RTL co-simulation
(``rtl/systolic_array``) and the tests all use the same formula.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

MIN_TILE_ROWS = 4
"""A tile occupies the array's input for at least 4 cycles (NeuPIMs reference:
``MAX(inst.size, 4)`` in ``SystolicWS::get_inst_compute_cycles``)."""

def tile_latency_cycles(H: int, W: int, n_rows: int) -> int:
    """Cycles from the first input row entering a weight-stationary array until the last
    output row leaves it, once the weights are in place.

    ``H + W - 2 + max(n_rows, 4)``: the skewed wavefront needs H - 1 cycles to cross the
    rows and W - 1 to cross the columns, and the n rows enter one per cycle (at least 4).

    Args:
        H: array height (PE rows; weight rows, i.e. the reduction length held).
        W: array width (PE columns; output columns).
        n_rows: input rows streamed through (the M of the tile), >= 1.

    Source: NeuPIMs reference simulator (Heo et al., ASPLOS 2024),
    ``SystolicWS::get_inst_compute_cycles`` = ``core_height + core_width - 2 + MAX(size, 4)``.
    """
    return H + W - 2 + max(n_rows, MIN_TILE_ROWS)


def tile_issue_interval_cycles(n_rows: int) -> int:
    """Cycles after a tile starts before the next tile may start on the same array.

    Tiles pipeline: the next tile's first row follows the current tile's last row
    (``max(n, 4)``). Source: NeuPIMs reference ``SystolicWS::issue_ex_inst`` (next start =
    previous start + ``MAX(size, 4)``).
    """
    return max(n_rows, MIN_TILE_ROWS)


def weight_preload_cycles(H: int) -> int:
    """Cycles to shift one weight tile into the array's shadow buffer: ``H`` (one weight row
    per cycle). With double buffering it overlaps the running tile. Source: DESIGN §3 and the
    NeuPIMs reference (``GEMM_PRELOAD`` adds ``core_height``)."""
    return H


def weight_ring_slots(H: int, W: int, n_rows: int) -> int:
    """Weight-tile buffers per array that a stream of tiles of ``n_rows`` rows needs so that a
    preload-bound tile never waits for a free buffer (ideal memory).

    Tiles start every ``P = max(max(n_rows, 4), H)`` cycles (the next ``SA_LOADW`` starts when
    the running tile takes the shadow weights and needs ``H`` cycles; the rows need
    ``max(n_rows, 4)``). A buffer is held from its DMA until the tile that used it completes,
    ``tile_latency_cycles(H, W, n_rows)`` after the tile's start, and its weights must be
    preloaded (``<= P``) before the tile starts: ``ceil((P + tile latency) / P)`` buffers are
    in use at once, plus one being loaded by the DMA:

        ``1 + ceil((P + H + W - 2 + max(n_rows, 4)) / P)``

    5 on a 128 x 128 array for every ``n_rows`` up to 253 (4 from 254 rows on). With the
    former fixed ring of 3, tiles of 64 / 128 rows took about 158 / 180 cycles each with ideal
    memory instead of the 128 the array allows (found against SCALE-Sim's weight-stationary
    model, issue 16; ``tests/test_npu_gemm.py``).

    Args:
        H, W: array height and width (PEs).
        n_rows: rows of each tile (>= 1).
    """
    p = max(tile_issue_interval_cycles(n_rows), weight_preload_cycles(H))
    return 1 + -(-(p + tile_latency_cycles(H, W, n_rows)) // p)


def gemm_compute_bound_cycles(H: int, W: int, tile_rows) -> int:
    """Cycles of one array's sequence of weight-stationary tiles with ideal memory.

    The first weights are preloaded (``H``), every tile then occupies the array for
    ``max(max(m, 4), H)`` cycles (its rows, or the ``H``-cycle preload of the next tile's
    weights when the tile has fewer than ``H`` rows), and the last one drains through the array
    (``H + W - 2``)::

        H + sum_t max(max(m_t, 4), H) + H + W - 2

    For F tiles of M rows: ``H + F * max(M, H) + H + W - 2``; e.g. the QKV GEMM of GPT3-7B
    (K = 4096, N = 12288) at M = 64 on 4 arrays of 128 x 128 (768 tiles each): 98,686. The
    executor's schedule matches it to within the prologue DMA and the last tile's
    ``H - max(M, 4)`` (its preload-bound slot is not needed at the end).

    Args:
        H, W: array height and width.
        tile_rows: rows of each tile on the array, in issue order (iterable of int).
    """
    p_min = weight_preload_cycles(H)
    feed = sum(max(tile_issue_interval_cycles(m), p_min) for m in tile_rows)
    return weight_preload_cycles(H) + feed + H + W - 2


def vector_op_cycles(latency_cycles: int, rows: int, cols: int, lanes: int,
                     passes: int = 1) -> int:
    """Cycles of one vector instruction over a ``[rows, cols]`` operand on one vector unit.

    Each row is processed in ``ceil(cols / lanes)`` chunks per pass, fully pipelined:
    ``latency + passes * rows * ceil(cols / lanes) - 1`` (the config's rule
    ``latency + ceil(n / lanes) - 1`` for one vector of n elements, applied per row and pass).

    Args:
        latency_cycles: pipeline latency of the op (``npu.vector.latency_cycles[op]``).
        rows, cols: operand shape in elements.
        lanes: elements per cycle (``npu.vector.lanes``).
        passes: passes over the data (config ``npu.vector.passes``).
    """
    chunks = -(-cols // lanes)
    return latency_cycles + passes * rows * chunks - 1


def ring_allreduce_time_s(size_bytes: float, p: int, bandwidth_bytes_per_s: float,
                          latency_ns: float) -> float:
    """Seconds of a ring all-reduce of ``size_bytes`` (per device) over ``p`` devices.

    ``2 (p − 1)`` steps (reduce-scatter, then all-gather), each moving ``size / p`` bytes per
    device over a link of ``bandwidth_bytes_per_s`` (per direction) and paying one link
    latency: ``2 (p − 1) / p · size / bandwidth + 2 (p − 1) · latency``; 0 for ``p = 1``.
    Source: Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", J. Parallel Distrib. Comput. 69(2), 2009 (the ring algorithm of NCCL).
    The GPU roofline (:mod:`archsim.gpu.roofline`) and the NPU's ``ALL_REDUCE`` both use it.
    """
    if p <= 1:
        return 0.0
    steps = 2 * (p - 1)
    return steps / p * size_bytes / bandwidth_bytes_per_s + steps * latency_ns * 1e-9


def link_cycles(seconds: float, freq_mhz: float) -> int:
    """Whole NPU cycles a link instruction occupies its stream: ``ceil(seconds × f)`` (a
    1e-9-cycle tolerance keeps an exact product from rounding up by float noise)."""
    return int(math.ceil(seconds * freq_mhz * 1e6 - 1e-9))


def ring_allreduce_cycles(size_bytes: int, p: int, bandwidth_bytes_per_s: float,
                          latency_ns: float, freq_mhz: float) -> int:
    """NPU cycles of ``ALL_REDUCE bytes=size_bytes, group=p, algo=ring``: the seconds of
    :func:`ring_allreduce_time_s` rounded up by :func:`link_cycles` (``system.interconnect``
    supplies the bandwidth and the per-step latency)."""
    return link_cycles(ring_allreduce_time_s(size_bytes, p, bandwidth_bytes_per_s,
                                             latency_ns), freq_mhz)


def all_to_all_time_s(size_bytes: float, p: int, bandwidth_bytes_per_s: float,
                      latency_ns: float) -> float:
    """Seconds of an all-to-all in which one device sends and receives at most ``size_bytes``
    in all over ``p`` devices (the expert-parallel dispatch or return of token rows).

    Pairwise exchange: ``p − 1`` rounds, in round ``i`` a device sends its rows for device
    ``rank + i`` and receives from ``rank − i``; with full-duplex links of
    ``bandwidth_bytes_per_s`` per direction its link carries all its bytes once:
    ``size / bandwidth + (p − 1) · latency``; 0 for ``p = 1``. Source: Thakur, Rabenseifner &
    Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005
    (pairwise exchange for long messages, cost ``(p − 1) α + n β``).
    """
    if p <= 1:
        return 0.0
    return size_bytes / bandwidth_bytes_per_s + (p - 1) * latency_ns * 1e-9


def all_to_all_cycles(size_bytes: int, p: int, bandwidth_bytes_per_s: float, latency_ns: float,
                      freq_mhz: float) -> int:
    """NPU cycles of ``ALL_TO_ALL bytes=size_bytes, group=p``: :func:`all_to_all_time_s`
    rounded up by :func:`link_cycles` (``system.interconnect`` supplies bandwidth and latency).
    Timed whatever ``system.interconnect.allreduce`` says (that key is the all-reduce's)."""
    return link_cycles(all_to_all_time_s(size_bytes, p, bandwidth_bytes_per_s, latency_ns),
                       freq_mhz)


def pipeline_handoff_time_s(size_bytes: float, bandwidth_bytes_per_s: float,
                            latency_ns: float) -> float:
    """Seconds of one pipeline-parallel hand-off (``SEND``) of ``size_bytes``: one transfer
    over a point-to-point link plus one link latency, ``size / bandwidth + latency`` (the
    hidden state of every token of the batch, ``tokens × d_model × dtype`` bytes, between two
    stages; the usual alpha-beta cost of one message, e.g. Hockney, Parallel Computing 20,
    1994)."""
    return size_bytes / bandwidth_bytes_per_s + latency_ns * 1e-9


def pipeline_handoff_cycles(size_bytes: int, bandwidth_bytes_per_s: float, latency_ns: float,
                            freq_mhz: float) -> int:
    """Whole NPU cycles a ``SEND`` occupies the link stream (:func:`pipeline_handoff_time_s`
    rounded up by :func:`link_cycles`)."""
    return link_cycles(pipeline_handoff_time_s(size_bytes, bandwidth_bytes_per_s, latency_ns),
                       freq_mhz)


def dma_request_addresses(hbm_addr: int, rows: int, row_bytes: int, stride_bytes: int,
                          request_bytes: int, interleave_bytes: int = 0
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Split a 2-D tile transfer into memory requests at their real byte addresses.

    Every row ``r`` covers ``[hbm_addr + r * stride, + row_bytes)``; it is cut at multiples of
    ``request_bytes`` (aligned requests, the first and last of a row possibly partial).

    Issue order: row-major address order, or, with ``interleave_bytes`` > 0 (the bytes one
    channel holds before the address mapping moves to the next channel), interleaved across
    those blocks: first every block's first request, then every block's second, and so on
    (address order within a block is kept, so each channel still sees its row in order). A
    contiguous transfer then keeps all channels busy at once instead of filling one channel's
    queue after another.

    The split is memoised per (offset of ``hbm_addr`` within the period
    ``lcm(request_bytes, interleave_bytes)``, shape arguments): cutting and interleaving are
    invariant under a shift of the whole transfer by a multiple of that period, so a cached
    split shifted by ``hbm_addr - offset`` is exactly the direct computation.

    Returns:
        ``(addrs, sizes)``: int64 arrays of shape ``(n_requests,)``, in issue order; ``addrs``
        is a new array, ``sizes`` may be shared between calls and is read-only.
    """
    rel, sizes, shift = dma_request_pattern(hbm_addr, rows, row_bytes, stride_bytes,
                                            request_bytes, interleave_bytes)
    return rel + shift, sizes


def dma_request_pattern(hbm_addr: int, rows: int, row_bytes: int, stride_bytes: int,
                        request_bytes: int, interleave_bytes: int = 0
                        ) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`dma_request_addresses` as a shared pattern and a shift: ``(rel, sizes, shift)``
    with the request addresses ``rel + shift`` (bytes). ``rel`` and ``sizes`` (int64, shape
    ``(n_requests,)``, read-only) are the same objects for every transfer of the same shape
    and offset within the period (the memo), so a caller can keep one copy per pattern (the
    compiled executor's DMA table, :mod:`archsim.npu.tables`)."""
    q = request_bytes
    ib = interleave_bytes if interleave_bytes > q else 0
    off = hbm_addr % dma_pattern_period(q, interleave_bytes)
    key = (off, rows, row_bytes, stride_bytes, q, ib)
    hit = _DMA_MEMO.get(key)
    if hit is None:
        rel, sizes = _dma_request_addresses_uncached(off, rows, row_bytes, stride_bytes, q, ib)
        rel.setflags(write=False)
        sizes = np.array(sizes, dtype=np.int64)
        sizes.setflags(write=False)
        if len(_DMA_MEMO) >= _DMA_MEMO_MAX:
            _DMA_MEMO.clear()
        hit = _DMA_MEMO[key] = (rel, sizes)
    rel, sizes = hit
    return rel, sizes, hbm_addr - off


def dma_pattern_period(request_bytes: int, interleave_bytes: int = 0) -> int:
    """Bytes by which a transfer can be shifted without changing its split into requests
    (relative addresses and sizes, :func:`dma_request_pattern`): ``request_bytes``, or the
    least common multiple with ``interleave_bytes`` when requests are interleaved."""
    q = request_bytes
    ib = interleave_bytes if interleave_bytes > q else 0
    return math.lcm(q, ib) if ib else q


_DMA_MEMO: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
_DMA_MEMO_MAX = 1 << 14
"""Memo of :func:`dma_request_addresses` (relative addresses, sizes) per transfer shape;
cleared when it reaches this many entries."""


def _dma_request_addresses_uncached(hbm_addr: int, rows: int, row_bytes: int,
                                    stride_bytes: int, request_bytes: int,
                                    interleave_bytes: int = 0
                                    ) -> tuple[np.ndarray, np.ndarray]:
    """The computation of :func:`dma_request_addresses` (no memo)."""
    q = request_bytes
    starts = hbm_addr + np.arange(rows, dtype=np.int64) * stride_bytes
    if hbm_addr % q == 0 and stride_bytes % q == 0 and row_bytes % q == 0:
        per_row = row_bytes // q
        addrs = (starts[:, None] + np.arange(per_row, dtype=np.int64) * q).ravel()
        sizes = np.full(addrs.shape, q, dtype=np.int64)
        return _interleave(addrs, sizes, interleave_bytes, q)
    a_list: list[np.ndarray] = []
    s_list: list[np.ndarray] = []
    for s in starts.tolist():
        end = s + row_bytes
        cuts = np.arange((s // q + 1) * q, end, q, dtype=np.int64)
        b = np.concatenate(([s], cuts))
        e = np.concatenate((cuts, [end]))
        a_list.append(b)
        s_list.append(e - b)
    return _interleave(np.concatenate(a_list), np.concatenate(s_list), interleave_bytes, q)


def _interleave(addrs: np.ndarray, sizes: np.ndarray, interleave_bytes: int,
                q: int) -> tuple[np.ndarray, np.ndarray]:
    """Reorder requests by their index inside their interleave block (stable)."""
    if interleave_bytes <= q or len(addrs) <= 1:
        return addrs, sizes
    order = np.argsort((addrs % interleave_bytes) // q, kind="stable")
    return addrs[order], sizes[order]


def link_op_cycles(cfg, mnemonic: str, ops: dict, collectives: bool = True) -> int:
    """NPU cycles a link instruction occupies its link stream on ``cfg.system.interconnect``
    (bandwidth B/s, latency ns; clock ``npu.freq_mhz``): ``ALL_REDUCE`` a ring all-reduce of
    ``ops["bytes"]`` over ``ops["group"]`` devices (:func:`ring_allreduce_cycles`; 0 when
    ``collectives`` is False, the all-reduce-free bound), ``ALL_TO_ALL`` a pairwise exchange
    (:func:`all_to_all_cycles`), ``SEND`` a hand-off (:func:`pipeline_handoff_cycles`),
    ``RECV`` 0 (one device is simulated: it starts with its input received)."""
    link = cfg.system.interconnect
    bw, lat, f = link.bandwidth_bytes_per_s, link.latency_ns, cfg.npu.freq_mhz
    if mnemonic == "ALL_REDUCE":
        return ring_allreduce_cycles(ops["bytes"], ops["group"], bw, lat, f) if collectives else 0
    if mnemonic == "ALL_TO_ALL":
        return all_to_all_cycles(ops["bytes"], ops["group"], bw, lat, f)
    if mnemonic == "SEND":
        return pipeline_handoff_cycles(ops["bytes"], bw, lat, f)
    return 0


__all__ = ["MIN_TILE_ROWS", "tile_latency_cycles", "tile_issue_interval_cycles",
           "weight_preload_cycles", "weight_ring_slots", "gemm_compute_bound_cycles",
           "vector_op_cycles", "dma_request_addresses", "dma_request_pattern",
           "dma_pattern_period", "ring_allreduce_time_s", "ring_allreduce_cycles", "link_cycles",
           "all_to_all_time_s", "all_to_all_cycles",
           "pipeline_handoff_time_s", "pipeline_handoff_cycles", "link_op_cycles",
           "lm_head_cycles"]


def lm_head_cycles(cfg: Any, model: Any, tp: int, tokens: int) -> dict[str, float]:
    """NPU cycles of the final norm and the LM head GEMM of one device (analytic; ``cfg`` an
    :class:`archsim.config.MachineConfig`, ``model`` a :class:`workloads.models.ModelSpec`).

    GEMM ``[tokens, d_model] × [d_model, vocab / tp]`` on the weight-stationary arrays: the
    ``ceil(d/H) × ceil(V/W)`` weight tiles are spread over the arrays; each tile streams the
    tokens in ``max(tokens, 4)`` cycles (:func:`tile_issue_interval_cycles`),
    plus one pipeline fill ``H + W − 2`` and one weight preload ``H``; weights stream from HBM at
    the peak bandwidth (``vocab/tp × d × dtype`` bytes ÷ peak bytes per NPU cycle). With double
    buffering the two overlap: ``max(compute, weight streaming)``. The final norm is one vector
    op over ``[tokens, d_model]`` split across the vector units (:func:`vector_op_cycles`).
    Tokens beyond 16383 rows are cut into blocks (the ISA's ``m`` field), each re-streaming the
    weights' tiles.

    Returns ``{"cycles", "compute_cycles", "memory_cycles", "norm_cycles", "macs",
    "weight_bytes", "array_busy_cycles"}`` (NPU cycles; MACs; bytes).
    """
    npu = cfg.npu
    H, W, A = npu.array_height, npu.array_width, npu.n_arrays
    d = model.d_model
    V = model.vocab_per_device(tp)
    tiles = math.ceil(d / H) * math.ceil(V / W)
    per_tile = tile_issue_interval_cycles(tokens)
    compute = math.ceil(tiles / A) * per_tile + tile_latency_cycles(H, W, tokens) - per_tile \
        + weight_preload_cycles(H)
    wbytes = d * V * model.dtype_bytes
    peak = (cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel * cfg.memory.org.channels
            * cfg.npu_to_mem_cycles(1.0))          # bytes per NPU cycle
    memory = wbytes / peak
    key = "layernorm" if model.norm == "layernorm" else "rmsnorm"
    rows = math.ceil(tokens / npu.vector.count)
    norm = vector_op_cycles(npu.vector.latency_cycles[key], rows, d, npu.vector.lanes,
                            npu.vector.passes_of(key))
    cyc = max(compute, memory) + norm
    return {"cycles": float(cyc), "compute_cycles": float(compute), "memory_cycles": memory,
            "norm_cycles": float(norm), "macs": float(tokens * d * V), "weight_bytes": wbytes,
            "array_busy_cycles": float(tiles * per_tile)}
