"""A small GEMM program builder: C[M, N] = A[M, K] @ B[K, N] on the NPU's arrays.

A test and benchmark kernel beside the compiler (whose GEMMs are :meth:`mapping.codegen.
CodeGen.gemm`): it emits a double-buffered, weight-stationary schedule with explicit semaphores,
so that the timing executor, functional mode and benchmarks have a realistic program to run.
It lives in ``mapping`` because it invents instructions (``archsim`` never does); it counts no
cycle. :func:`archsim.npu.gemm.build_gemm_program` is the machine-side entry: it sizes the
weight ring with :func:`archsim.npu.timing.weight_ring_slots` and attaches the compute bound
(:func:`archsim.npu.timing.gemm_compute_bound_cycles`).

Schedule. The output is cut into ``W``-wide column tiles; groups of ``n_arrays`` tiles run at
once, tile j of a group on array j. The rows are cut into M blocks of ``m_block`` rows (the
largest that fits the scratchpad). For each (M block, group) "item" and each ``H``-high K slice:

* stream ``dma0`` loads the A slice ``[m, k]`` into a ring of ``a_slots`` buffers (or, when
  there is one M block and the whole of A fits, once into a resident copy reused by every
  group) and each array's B tile ``[k, n]`` into its ring of ``b_slots`` buffers (waiting for a
  free slot);
* stream ``sa`` waits for them, then ``SA_LOADW`` + ``SA_MATMUL`` per array, accumulating in
  fp32 into the item's accumulator (two per array, alternating between items);
* after the last K slice, vector unit j (stream ``vuj``) converts the accumulator to the output
  dtype (skipped for fp32 output) and stream ``dma1`` stores it to C.

Semaphores: 1 A full, 2 A free; for array j: 16+8j B full, 17+8j B free, 18+8j accumulator
done, 19+8j accumulator free, 20+8j output full, 21+8j output free.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.errors import SimulationError
from mapping.errors import CapacityError
from isa.encoding import Instruction as I
from isa.program import DataAlloc, Program
from isa.spec import DTYPE_BYTES

_ALIGN = 64 * 1024


def _align(x: int, a: int = _ALIGN) -> int:
    return -(-x // a) * a


@dataclass
class GemmProgram:
    """A built GEMM: the program and what a test needs to check it.

    Attributes:
        program: the ISA program (streams dma0, dma1, sa, vu0.. and data A, B, C).
        M, K, N: problem size (C[M, N] = A[M, K] @ B[K, N]).
        m_block: rows per M block.
        dma_bytes: bytes the schedule moves (A per group, B once, C once).
        tile_rows: per array, the rows (M of the tile) of each ``SA_MATMUL`` in issue order;
            the machine's timing rules turn it into a bound.
        b_slots: depth of each array's ring of weight-tile buffers.
        compute_bound_cycles: lower bound on the cycles with ideal memory, set by
            :func:`archsim.npu.gemm.build_gemm_program` (None when built here directly).
    """

    program: Program
    M: int
    K: int
    N: int
    m_block: int
    dma_bytes: int
    layout: str = "tiled"
    H: int = 128
    W: int = 128
    tile_rows: tuple[tuple[int, ...], ...] = ()
    b_slots: int = 0
    compute_bound_cycles: int | None = None

    def pack(self, A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
        """HBM contents of the inputs in this program's layout.

        Args:
            A: ``[M, K]`` and B: ``[K, N]`` arrays (any float dtype; converted by the caller's
                functional memory to the program's dtype).

        Returns:
            ``{"A": 1-D array, "B": 1-D array}`` of elements in HBM order (length M*K, K*N).
        """
        if self.layout == "rowmajor":
            return {"A": np.ascontiguousarray(A).ravel(), "B": np.ascontiguousarray(B).ravel()}
        H, W = self.H, self.W
        a = [A[:, k0:k0 + H].ravel() for k0 in range(0, self.K, H)]
        b = [B[k0:k0 + H, n0:n0 + W].ravel() for k0 in range(0, self.K, H)
             for n0 in range(0, self.N, W)]
        return {"A": np.concatenate(a), "B": np.concatenate(b)}

    def unpack_c(self, flat: np.ndarray) -> np.ndarray:
        """``[M, N]`` result from the elements of allocation C in HBM order."""
        if self.layout == "rowmajor":
            return flat.reshape(self.M, self.N)
        cols = []
        pos = 0
        for n0 in range(0, self.N, self.W):
            nw = min(self.W, self.N - n0)
            cols.append(flat[pos:pos + self.M * nw].reshape(self.M, nw))
            pos += self.M * nw
        return np.concatenate(cols, axis=1)


def _spad_need(m: int, H: int, W: int, n_arr: int, es: int, es_out: int, a_slots: int,
               b_slots: int, convert: bool) -> int:
    need = a_slots * m * H * es + n_arr * b_slots * H * W * es + n_arr * 2 * m * W * 4
    if convert:
        need += n_arr * 2 * m * W * es_out
    return need


def build_gemm_program(M: int, K: int, N: int, cfg, *, b_slots: int, dtype: str = "fp16",
                       out_dtype: str | None = None, a_slots: int = 3,
                       m_block: int | None = None, base_addr: int = 0,
                       layout: str = "tiled") -> GemmProgram:
    """Build the GEMM program described in the module docstring.

    Args:
        M, K, N: sizes (any positive values; edge tiles handle remainders).
        cfg: ``archsim.config.MachineConfig`` (arrays, H, W, scratchpad size).
        dtype: element type of A and B ("fp16", "bf16", "fp32").
        out_dtype: element type of C (default ``dtype``); fp32 skips the vector conversion.
        b_slots: ring depth of each array's B (weight) tiles (>= 1; a slot is freed when the
            tile's matmul completes, so a shallow ring stalls the weight DMA: the machine side
            sizes it, see :func:`archsim.npu.timing.weight_ring_slots`).
        a_slots: ring depth of the A slices (when A is not resident).
        m_block: rows per M block (default: largest that fits the scratchpad, <= 16383).
        base_addr: HBM byte address of A (B and C follow, 64 KiB aligned).
        layout: ``"tiled"`` (default): every tile the schedule moves is contiguous in HBM, so
            consecutive requests sweep all channels (A as K slices ``[KT][M][kh]``, B as tiles
            ``[KT][NT][kh][nw]``, C as column tiles ``[NT][M][nw]``; see
            :meth:`GemmProgram.pack` / :meth:`GemmProgram.unpack_c`). ``"rowmajor"``: plain
            row-major matrices; a tile's rows then sit ``K*size`` / ``N*size`` bytes apart and,
            with the channel bits just above the 1 KiB page, touch only a few channels.

    Returns:
        A :class:`GemmProgram`.

    Raises:
        mapping.errors.CapacityError: not even one row block fits the scratchpad (the
            machine's size; ``resource="scratchpad"`` with the bytes needed and available).
        SimulationError: ``b_slots`` < 1 or an unknown layout (a caller's bug).
    """
    if b_slots < 1:
        raise SimulationError(f"GEMM builder: b_slots = {b_slots}: at least 1")
    out_dtype = out_dtype or dtype
    npu = cfg.npu
    H, W, n_arr = npu.array_height, npu.array_width, npu.n_arrays
    es, es_out = DTYPE_BYTES[dtype], DTYPE_BYTES[out_dtype]
    convert = out_dtype != "fp32"
    cap = npu.scratchpad.size_bytes
    if m_block is None:
        m_block = min(M, 16383)
        while m_block > 1 and _spad_need(m_block, H, W, n_arr, es, es_out, a_slots, b_slots,
                                         convert) > cap:
            m_block = max(1, m_block // 2)
    need = _spad_need(m_block, H, W, n_arr, es, es_out, a_slots, b_slots, convert)
    if need > cap:      # the machine's scratchpad, not a simulator fault
        raise CapacityError(f"GEMM builder: even {m_block} rows need {need} bytes of "
                            f"scratchpad, more than the {cap}-byte scratchpad "
                            "(npu.scratchpad.size_bytes)", resource="scratchpad",
                            needed_bytes=need, available_bytes=cap)
    KT = -(-K // H)
    # A stays resident (loaded once, reused by every column group) when there is one M block
    # and all its K slices fit next to the other buffers.
    resident = m_block >= M and (
        _spad_need(m_block, H, W, n_arr, es, es_out, 0, b_slots, convert) + M * K * es <= cap)
    # spad layout
    off = 0
    a_buf = []
    for _ in range(KT if resident else a_slots):
        a_buf.append(off)
        off += m_block * H * es
    b_buf = [[0] * b_slots for _ in range(n_arr)]
    for j in range(n_arr):
        for s in range(b_slots):
            b_buf[j][s] = off
            off += H * W * es
    acc_buf = [[0, 0] for _ in range(n_arr)]
    for j in range(n_arr):
        for s in range(2):
            acc_buf[j][s] = off
            off += m_block * W * 4
    out_buf = [[0, 0] for _ in range(n_arr)]
    if convert:
        for j in range(n_arr):
            for s in range(2):
                out_buf[j][s] = off
                off += m_block * W * es_out
    prog = Program(spad_size_bytes=cap)
    a_addr = base_addr
    b_addr = _align(a_addr + M * K * es)
    c_addr = _align(b_addr + K * N * es)
    prog.add_data(DataAlloc("A", a_addr, M * K * es, (M, K), dtype, "activation"))
    prog.add_data(DataAlloc("B", b_addr, K * N * es, (K, N), dtype, "weight"))
    prog.add_data(DataAlloc("C", c_addr, M * N * es_out, (M, N), out_dtype, "activation"))

    def sem(j: int, k: int) -> int:
        return 16 + 8 * j + k

    tiled = layout == "tiled"
    if layout not in ("tiled", "rowmajor"):
        raise SimulationError(f"GEMM builder: layout '{layout}' is not tiled or rowmajor")

    def a_at(m0: int, k0: int, kh: int) -> tuple[int, int]:
        """HBM address and row stride of A[m0, k0:k0+kh]."""
        if tiled:
            return a_addr + (M * k0 + m0 * kh) * es, kh * es
        return a_addr + (m0 * K + k0) * es, K * es

    def b_at(k0: int, kh: int, n0: int, nw: int) -> tuple[int, int]:
        if tiled:
            return b_addr + (k0 * N + kh * n0) * es, nw * es
        return b_addr + (k0 * N + n0) * es, N * es

    def c_at(m0: int, n0: int, nw: int) -> tuple[int, int]:
        if tiled:
            return c_addr + (M * n0 + m0 * nw) * es_out, nw * es_out
        return c_addr + (m0 * N + n0) * es_out, N * es_out

    A_FULL, A_FREE = 1, 2
    NT = -(-N // W)
    groups = [list(range(g, min(g + n_arr, NT))) for g in range(0, NT, n_arr)]
    m_blocks = [(m0, min(m_block, M - m0)) for m0 in range(0, M, m_block)]
    items = [(mb, grp) for mb in m_blocks for grp in groups]
    dma0, dma1, sa = "dma0", "dma1", "sa"
    for name in (dma0, sa, dma1):
        prog.stream(name)
    a_loads = 0
    b_loads = [0] * n_arr
    rows: list[list[int]] = [[] for _ in range(n_arr)]
    out_uses = [0] * n_arr
    acc_uses = [0] * n_arr
    for i, ((m0, mr), grp) in enumerate(items):
        for kt in range(KT):
            k0 = kt * H
            kh = min(H, K - k0)
            # --- loads ---
            load_a = not resident or i == 0
            slot = kt if resident else a_loads % a_slots
            if load_a:
                if not resident and a_loads >= a_slots:
                    prog.emit(dma0, I("WAIT", sem=A_FREE, count=1))
                ah, astr = a_at(m0, k0, kh)
                prog.emit(dma0, I("DMA_LOAD", spad=a_buf[slot], hbm=ah, rows=mr, cols=kh,
                                  stride=astr, dtype=dtype))
                prog.emit(dma0, I("SIGNAL", sem=A_FULL, count=1))
                a_loads += 1
            for j, nt in enumerate(grp):
                n0 = nt * W
                nw = min(W, N - n0)
                bs = b_loads[j] % b_slots
                if b_loads[j] >= b_slots:
                    prog.emit(dma0, I("WAIT", sem=sem(j, 1), count=1))
                bh, bstr = b_at(k0, kh, n0, nw)
                prog.emit(dma0, I("DMA_LOAD", spad=b_buf[j][bs], hbm=bh, rows=kh, cols=nw,
                                  stride=bstr, dtype=dtype))
                prog.emit(dma0, I("SIGNAL", sem=sem(j, 0), count=1))
                b_loads[j] += 1
            # --- compute ---
            if load_a:
                prog.emit(sa, I("WAIT", sem=A_FULL, count=1))
            for j, nt in enumerate(grp):
                nw = min(W, N - nt * W)
                bs = (b_loads[j] - 1) % b_slots
                if kt == 0 and acc_uses[j] >= 2:  # accumulator reused: wait until drained
                    prog.emit(sa, I("WAIT", sem=sem(j, 3), count=1))
                prog.emit(sa, I("WAIT", sem=sem(j, 0), count=1))
                prog.emit(sa, I("SA_LOADW", array=j, w=b_buf[j][bs], k=kh, n=nw, dtype=dtype))
                acc_dst = acc_buf[j][acc_uses[j] % 2]
                prog.emit(sa, I("SA_MATMUL", array=j, src=a_buf[slot], dst=acc_dst,
                                m=mr, n=nw, k=kh, acc=int(kt > 0), dtype=dtype,
                                out_dtype="fp32"))
                prog.emit(sa, I("SIGNAL", sem=sem(j, 1), count=1))
                rows[j].append(mr)
            if not resident:
                prog.emit(sa, I("SIGNAL", sem=A_FREE, count=1))
        # --- epilogue of the item ---
        for j, nt in enumerate(grp):
            nw = min(W, N - nt * W)
            prog.emit(sa, I("SIGNAL", sem=sem(j, 2), count=1))
            c_hbm, cstr = c_at(m0, nt * W, nw)
            if convert:
                vu = f"vu{j % npu.vector.count}"
                prog.emit(vu, I("WAIT", sem=sem(j, 2), count=1))
                if out_uses[j] >= 2:
                    prog.emit(vu, I("WAIT", sem=sem(j, 5), count=1))
                prog.emit(vu, I("VU_COPY", dst=out_buf[j][out_uses[j] % 2],
                                src=acc_buf[j][acc_uses[j] % 2],
                                rows=mr, cols=nw, src_stride=0, dst_stride=0, dtype="fp32",
                                out_dtype=out_dtype))
                prog.emit(vu, I("SIGNAL", sem=sem(j, 3), count=1))
                prog.emit(vu, I("SIGNAL", sem=sem(j, 4), count=1))
                prog.emit(dma1, I("WAIT", sem=sem(j, 4), count=1))
                prog.emit(dma1, I("DMA_STORE", spad=out_buf[j][out_uses[j] % 2], hbm=c_hbm,
                                  rows=mr, cols=nw, stride=cstr, dtype=out_dtype))
                prog.emit(dma1, I("SIGNAL", sem=sem(j, 5), count=1))
            else:
                prog.emit(dma1, I("WAIT", sem=sem(j, 2), count=1))
                prog.emit(dma1, I("DMA_STORE", spad=acc_buf[j][acc_uses[j] % 2], hbm=c_hbm, rows=mr,
                                  cols=nw, stride=cstr, dtype=out_dtype))
                prog.emit(dma1, I("SIGNAL", sem=sem(j, 3), count=1))
            out_uses[j] += 1
            acc_uses[j] += 1
    for name in list(prog.streams):
        prog.emit(name, I("END"))
    dma_bytes = (M * K * es * (1 if resident else len(groups)) + K * N * es * len(m_blocks)
                 + M * N * es_out)
    return GemmProgram(prog, M, K, N, m_block, dma_bytes, layout, H, W,
                       tuple(tuple(r) for r in rows), b_slots)


__all__ = ["GemmProgram", "build_gemm_program"]
