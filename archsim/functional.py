"""Functional mode: execute an ISA program on values.

The same programs the timing executor runs, executed for their results:

* **HBM** is :class:`FunctionalMemory`: one little-endian byte buffer per allocation of the
  program's data section, addressed by the program's byte addresses (a DMA outside every
  allocation is rejected by the loader; a PIM row outside every allocation reads as zeros).
* **Scratchpad**: a byte array of ``npu.scratchpad.size_bytes``; tiles are dense row-major.
* **Storage types**: fp16 (IEEE binary16), bf16 (upper half of binary32, round to nearest even),
  fp32. Values are converted to fp32 when read and rounded to the destination type once when
  written.
* **Arithmetic** (the rules RTL co-simulation and the bitwise-invariance tests rely on):

  - ``SA_MATMUL``: :func:`systolic_matmul` — products rounded to fp32 (exact for fp16/bf16
    inputs), partial sums accumulated in fp32 down the array in k order; with ``acc`` the
    existing destination value is added last, in fp32; one rounding to ``out_dtype``.
  - ``VU_DOT``: the same sequential fp32 accumulation in index order, or (``order=pim``)
    :func:`pim_order_dot`, bit-identical to the PIM COMP reduction.
  - ``VU_ADD``/``VU_MUL``/``VU_SCALE``: one fp32 operation per element; ``VU_AXPY``: an fp32
    product then (``acc``) an fp32 sum, rounded once to ``dtype``.
  - ``VU_TOPK``: float64 per row (selection of the k largest, ties to the lower column; softmax
    over them), rounded once to ``out_dtype``.
  - norms, softmax, GELU, SiLU, RoPE: computed in float64 per row, rounded once to ``dtype``.
  - PIM ``COMP``: :func:`pim_comp_step` — per bank, 16 (``multipliers_per_bank``) fp32
    products, a pairwise adder tree, then accumulation across COMP steps in fp32.
  - Special values (what ``rtl/pim_mac_fp.v`` implements too): IEEE 754 binary32 arithmetic,
    round to nearest even, gradual underflow (subnormal operands, products and sums are kept,
    never flushed), overflow to ±inf, NaN from inf - inf, 0 × inf or a NaN operand; a COMP
    step's NaN results are the canonical quiet NaN :data:`PIM_QNAN_BITS` (the host FPU's NaN
    sign and payload are not part of the model).

  Every result of a row depends only on that row's inputs (no reduction across rows), so a
  request's output does not depend on its batch companions.
* Streams interleave at semaphores: each stream runs until a ``WAIT`` cannot be satisfied;
  a program whose streams all wait is a deadlock (:class:`archsim.errors.SimulationError`
  naming the streams and semaphores, as in timing mode).
"""
from __future__ import annotations

import bisect
import contextlib
import math
from typing import Any, Callable, Iterator

import numpy as np

from archsim.errors import SimulationError
from archsim.memory.addrmap import AddressMapping
from archsim.npu.loader import LoadedOp, LoadedProgram, load_program
from isa.program import DataAlloc, Program
from isa.spec import ARRAY_ANY, DTYPE_BYTES, Engine

_NP_STORAGE = {"fp16": np.dtype("<f2"), "bf16": np.dtype("<u2"), "fp32": np.dtype("<f4")}


# ---- storage types ------------------------------------------------------------------------
def to_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round ``x`` to ``dtype`` and return it in its storage form (float16, uint16 bits of
    bf16, float32), same shape. Rounding: IEEE round to nearest even (bf16: of the fp32 value's
    upper 16 bits; NaN stays NaN)."""
    x32 = np.asarray(x, dtype=np.float32)
    if dtype == "fp32":
        return x32
    if dtype == "fp16":
        return x32.astype(np.float16)
    if dtype == "bf16":
        u = x32.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return np.where(np.isnan(x32), np.uint16(0x7FC0), r).astype(np.uint16)
    raise SimulationError(f"unknown dtype '{dtype}'")


def from_storage(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Values of a storage array (see :func:`to_storage`) as float32."""
    if dtype == "bf16":
        return (np.asarray(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(raw).astype(np.float32)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` and returned as float32 values."""
    return from_storage(to_storage(x, dtype), dtype)


def bytes_to_values(b: np.ndarray, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Little-endian bytes (uint8, length prod(shape) x size) -> float32 array of ``shape``."""
    raw = np.frombuffer(np.ascontiguousarray(b).tobytes(), dtype=_NP_STORAGE[dtype])
    return from_storage(raw, dtype).reshape(shape)


def values_to_bytes(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values -> little-endian bytes (uint8, 1-D) of ``dtype`` (rounded once)."""
    s = to_storage(np.asarray(x), dtype).astype(_NP_STORAGE[dtype], copy=False)
    return np.frombuffer(np.ascontiguousarray(s).tobytes(), dtype=np.uint8)


# ---- the arithmetic rules -------------------------------------------------------------------
def systolic_matmul(x: np.ndarray, w: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """One weight-stationary tile: ``[m, k] @ [k, n]`` the way the array computes it.

    Each PE row kk multiplies ``x[:, kk]`` by its stationary ``w[kk, :]`` (product rounded to
    fp32) and adds it to the fp32 partial sum arriving from row kk - 1; sums leave the bottom
    row after k steps. With ``acc`` (fp32 ``[m, n]``), the accumulator adds the tile's sums to
    it in fp32.

    Args:
        x: ``[m, k]`` float32 values (already rounded to the operand dtype).
        w: ``[k, n]`` float32 values.
        acc: optional ``[m, n]`` float32 values added after the column sums.

    Returns:
        ``[m, n]`` float32.
    """
    x = np.asarray(x, dtype=np.float32)
    w = np.asarray(w, dtype=np.float32)
    psum = np.zeros((x.shape[0], w.shape[1]), dtype=np.float32)
    for kk in range(x.shape[1]):
        psum += x[:, kk:kk + 1] * w[kk:kk + 1, :]
    if acc is not None:
        psum = np.asarray(acc, dtype=np.float32) + psum
    return psum


def sequential_dot(mat: np.ndarray, vec: np.ndarray, axis: int) -> np.ndarray:
    """Matrix-vector product with fp32 accumulation in index order along ``axis``.

    ``axis=1``: ``out[r] = sum_c mat[r, c] * vec[c]``; ``axis=0``: ``out[c] = sum_r vec[r] *
    mat[r, c]``; each product rounded to fp32, added to the running fp32 sum in order.
    """
    mat = np.asarray(mat, dtype=np.float32)
    vec = np.asarray(vec, dtype=np.float32)
    if axis == 1:
        out = np.zeros(mat.shape[0], dtype=np.float32)
        for c in range(mat.shape[1]):
            out += mat[:, c] * vec[c]
    else:
        out = np.zeros(mat.shape[1], dtype=np.float32)
        for r in range(mat.shape[0]):
            out += vec[r] * mat[r, :]
    return out


def pim_order_dot(mat: np.ndarray, vec: np.ndarray, axis: int, lanes: int) -> np.ndarray:
    """Matrix-vector product in the PIM reduction order (bit-identical to COMP steps).

    The reduction axis is cut into chunks of ``lanes`` elements (the last one zero-padded);
    each chunk's fp32 products are reduced by :func:`pim_adder_tree` and the chunk sums are
    accumulated in order with :func:`pim_comp_step`, starting from 0.

    Args:
        mat: ``[rows, cols]``; vec: ``[cols]`` (axis=1) or ``[rows]`` (axis=0).
        axis: 1 reduces over columns (``out[rows]``), 0 over rows (``out[cols]``).
        lanes: ``pim.multipliers_per_bank``.
    """
    m = np.asarray(mat, dtype=np.float32)
    if axis == 0:
        m = m.T
    v = np.asarray(vec, dtype=np.float32)
    n = m.shape[1]
    pad = (-n) % lanes
    if pad:
        m = np.concatenate([m, np.zeros((m.shape[0], pad), np.float32)], axis=1)
        v = np.concatenate([v, np.zeros(pad, np.float32)])
    acc = np.zeros(m.shape[0], dtype=np.float32)
    for lo in range(0, n + pad, lanes):
        acc = pim_comp_step(acc, m[:, lo:lo + lanes], v[lo:lo + lanes])
    return acc


def pim_adder_tree(products: np.ndarray) -> np.ndarray:
    """Reduce the last axis (the PIM lanes) with a pairwise adder tree.

    Level by level, neighbours are added: ``(p0+p1), (p2+p3), ...``, then the sums of those,
    until one value is left (16 lanes: 4 levels, 15 adders). An odd count is padded with one
    zero at the end of that level. Arithmetic stays in the array's dtype (float32 for the
    floating-point model; integers for the fixed-point RTL datapath).

    Args:
        products: ``[..., lanes]``.

    Returns:
        ``[...]``.
    """
    p = np.asarray(products)
    while p.shape[-1] > 1:
        if p.shape[-1] % 2:
            p = np.concatenate([p, np.zeros(p.shape[:-1] + (1,), dtype=p.dtype)], axis=-1)
        p = p[..., 0::2] + p[..., 1::2]
    return p[..., 0]


PIM_QNAN_BITS = 0x7FC00000
"""The one NaN a PIM COMP step produces (binary32 bits: sign 0, exponent all ones, only the
top fraction bit set). READRES rounds it to 0x7E00 in fp16 and 0x7FC0 in bf16."""


def pim_comp_step(acc: np.ndarray, row_chunk: np.ndarray, gbuf_chunk: np.ndarray) -> np.ndarray:
    """One COMP step of every bank of a channel (Newton-style PIM, DESIGN §3).

    ``acc[b] + tree(row_chunk[b, :] * gbuf_chunk[:])``: the bank's ``lanes`` multipliers
    (``pim.multipliers_per_bank``, 16) multiply the column burst of its open row with the
    same elements of the global buffer; :func:`pim_adder_tree` reduces the products; the sum is
    added to the bank's accumulator. Products and sums are in the arrays' dtype (float32: each
    product of fp16 operands is exact, a product of bf16 operands is rounded to fp32 only where
    it overflows or underflows fp32's normal range; each addition rounds to fp32).

    Special values (floating-point dtypes; ``rtl/pim_mac_fp.v`` does the same bit for bit):
    IEEE 754 round to nearest even in every product and addition; subnormals are kept
    everywhere (no flush to zero); overflow gives ±inf; inf - inf, 0 × inf and NaN operands
    give NaN, and every NaN result of the step is replaced by the canonical quiet NaN
    :data:`PIM_QNAN_BITS` (positive, no payload), so the result does not depend on how the
    host FPU chooses a NaN's sign and payload. Signed zeros follow IEEE (x + (-x) = +0).
    Integer dtypes (the fixed-point datapath) are exact and have no special values.

    Args:
        acc: ``[banks]`` accumulators.
        row_chunk: ``[banks, lanes]`` elements of each bank's open row for this step.
        gbuf_chunk: ``[lanes]`` global-buffer elements for this step.

    Returns:
        ``[banks]`` new accumulators.
    """
    out = acc + pim_adder_tree(row_chunk * gbuf_chunk)
    if out.dtype.kind == "f":
        nan = np.isnan(out)
        if nan.any():
            qnan = np.array(PIM_QNAN_BITS, dtype=np.uint32).view(np.float32)
            out = np.where(nan, qnan, out).astype(out.dtype, copy=False)
    return out


_COMP_OBSERVERS: list[Callable] = []


@contextlib.contextmanager
def observe_comp_steps(callback: Callable) -> Iterator[None]:
    """Call ``callback(channel, banks, acc_before, row_chunk, gbuf_chunk, acc_after)`` for
    every PIM COMP step (also those of a PIM_GEMV) that any :class:`FunctionalMachine`
    executes inside the ``with`` block: ``banks`` ``[n]`` the flat indices of the banks with an
    open PIM row, ``acc_before``/``acc_after`` ``[n]`` their fp32 accumulators,
    ``row_chunk`` ``[n, lanes]`` and ``gbuf_chunk`` ``[lanes]`` the step's operands (fp32
    values of the storage type). A trace hook (the RTL co-simulation replays a functional
    run's operands through ``pim_mac_fp``); it changes no result."""
    _COMP_OBSERVERS.append(callback)
    try:
        yield
    finally:
        _COMP_OBSERVERS.remove(callback)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


# ---- HBM ------------------------------------------------------------------------------------
class FunctionalMemory:
    """HBM contents for functional runs: one byte buffer per data allocation.

    Args:
        data: the program's data section (allocations must not overlap).
    """

    def __init__(self, data: list[DataAlloc]) -> None:
        self.allocs = sorted(data, key=lambda d: d.addr)
        self._bases = [d.addr for d in self.allocs]
        self.buffers = {d.name: np.zeros(d.size_bytes, dtype=np.uint8) for d in self.allocs}
        self._by_name = {d.name: d for d in self.allocs}

    def _locate(self, addr: int, nbytes: int) -> tuple[DataAlloc, int] | None:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i < 0:
            return None
        d = self.allocs[i]
        if addr + nbytes <= d.end:
            return d, addr - d.addr
        return None

    def read(self, addr: int, nbytes: int, strict: bool = True) -> np.ndarray:
        """Bytes ``[addr, addr + nbytes)`` (uint8 copy). Outside every allocation: SimulationError
        when ``strict``, else zeros."""
        hit = self._locate(addr, nbytes)
        if hit is None:
            if strict:
                raise SimulationError(f"HBM read [{addr:#x}, {addr + nbytes:#x}) is outside every "
                                      "data allocation")
            return np.zeros(nbytes, dtype=np.uint8)
        d, off = hit
        return self.buffers[d.name][off:off + nbytes].copy()

    def write(self, addr: int, data: np.ndarray) -> None:
        """Write bytes (uint8, 1-D) at ``addr``; SimulationError outside every allocation."""
        data = np.asarray(data, dtype=np.uint8).ravel()
        hit = self._locate(addr, data.size)
        if hit is None:
            raise SimulationError(f"HBM write [{addr:#x}, {addr + data.size:#x}) is outside every "
                                  "data allocation")
        d, off = hit
        self.buffers[d.name][off:off + data.size] = data

    def read_rows(self, addr: int, rows: int, row_bytes: int, stride: int) -> np.ndarray:
        """``[rows, row_bytes]`` uint8: row r at ``addr + r * stride``."""
        hit = self._locate(addr, (rows - 1) * stride + row_bytes)
        if hit is None:
            raise SimulationError(f"HBM rows at {addr:#x} leave every data allocation")
        d, off = hit
        buf = self.buffers[d.name]
        idx = off + np.arange(rows)[:, None] * stride + np.arange(row_bytes)[None, :]
        return buf[idx]

    def write_rows(self, addr: int, data: np.ndarray, stride: int) -> None:
        """Write ``data`` (``[rows, row_bytes]`` uint8), row r at ``addr + r * stride``."""
        rows, row_bytes = data.shape
        hit = self._locate(addr, (rows - 1) * stride + row_bytes)
        if hit is None:
            raise SimulationError(f"HBM rows at {addr:#x} leave every data allocation")
        d, off = hit
        buf = self.buffers[d.name]
        for r in range(rows):
            o = off + r * stride
            buf[o:o + row_bytes] = data[r]

    def write_tensor(self, name: str, values: np.ndarray) -> None:
        """Store ``values`` (any shape with prod(shape) elements of the allocation) rounded to
        the allocation's dtype, in row-major order from its base address."""
        d = self._by_name.get(name)
        if d is None:
            raise SimulationError(f"no data named '{name}'; data section has: "
                                  f"{', '.join(self._by_name)}")
        v = np.asarray(values)
        if v.size != math.prod(d.shape):
            raise SimulationError(f"data '{name}' holds {math.prod(d.shape)} elements "
                                  f"(shape {d.shape}), got {v.size}")
        b = values_to_bytes(v.ravel(), d.dtype)
        self.buffers[name][:b.size] = b

    def read_tensor(self, name: str) -> np.ndarray:
        """The allocation's contents as float32 values of its shape (row-major)."""
        d = self._by_name.get(name)
        if d is None:
            raise SimulationError(f"no data named '{name}'; data section has: "
                                  f"{', '.join(self._by_name)}")
        return bytes_to_values(self.buffers[name][:d.nbytes], d.dtype, d.shape)


# ---- the machine ----------------------------------------------------------------------------
class FunctionalMachine:
    """Executes a program on values (see the module docstring).

    Args:
        program: the ISA program (or an already loaded one).
        cfg: ``archsim.config.MachineConfig``.
        memory: HBM contents; default a zeroed :class:`FunctionalMemory` of the data section.

    Raises:
        SimulationError: when loading fails (see :func:`archsim.npu.loader.load_program`).
    """

    def __init__(self, program: Program | LoadedProgram, cfg,
                 memory: FunctionalMemory | None = None) -> None:
        self.loaded = program if isinstance(program, LoadedProgram) else load_program(program,
                                                                                       cfg)
        self.cfg = cfg
        self.hbm = memory or FunctionalMemory(self.loaded.program.data)
        self.spad = np.zeros(cfg.npu.scratchpad.size_bytes, dtype=np.uint8)
        self.sems: dict[int, int] = {}
        # systolic arrays: active weights and pending (shadow) weights; 'any' uses per-stream
        # virtual arrays keyed by (stream, n)
        self.active: dict[Any, np.ndarray] = {}
        self.shadow: dict[Any, np.ndarray] = {}
        self.last_array: dict[str, Any] = {}
        org = cfg.memory.org
        self.banks = org.banks_per_channel
        self.amap = AddressMapping(cfg.memory)
        self.lanes = cfg.pim.multipliers_per_bank
        self.gbuf: dict[int, np.ndarray] = {}
        self.open_row: dict[int, np.ndarray] = {}
        self.acc: dict[int, np.ndarray] = {}
        self.executed = 0

    # ---- scratchpad ----
    def spad_bytes(self, addr: int, nbytes: int) -> np.ndarray:
        """A view of scratchpad bytes (SimulationError past the end)."""
        if addr < 0 or addr + nbytes > self.spad.size:
            raise SimulationError(f"scratchpad access [{addr:#x}, {addr + nbytes:#x}) overflows "
                                  f"the {self.spad.size}-byte scratchpad")
        return self.spad[addr:addr + nbytes]

    def spad_get(self, addr: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """Dense row-major tile at ``addr`` as float32 values."""
        n = math.prod(shape) * DTYPE_BYTES[dtype]
        return bytes_to_values(self.spad_bytes(addr, n), dtype, shape)

    def spad_put(self, addr: int, values: np.ndarray, dtype: str) -> None:
        """Write ``values`` rounded to ``dtype`` densely at ``addr``."""
        b = values_to_bytes(values, dtype)
        self.spad_bytes(addr, b.size)[:] = b

    # ---- running ----
    def run(self) -> "FunctionalMachine":
        """Execute every stream to its end; returns self (results are in ``self.hbm``).

        Raises:
            SimulationError: deadlock (names waiting streams and semaphores), a matmul without
                weights or with other k/n than loaded, a scratchpad overflow.
        """
        streams = self.loaded.streams
        pcs = {s.name: 0 for s in streams}
        progress = True
        while progress:
            progress = False
            for s in streams:
                while pcs[s.name] < len(s.ops):
                    op = s.ops[pcs[s.name]]
                    if op.mnemonic == "WAIT":
                        v = self.sems.get(op.ops["sem"], 0)
                        if v < op.ops["count"]:
                            break
                        self.sems[op.ops["sem"]] = v - op.ops["count"]
                    elif op.mnemonic == "END":
                        pcs[s.name] = len(s.ops)
                        progress = True
                        break
                    else:
                        self._execute(s.name, s.kind, op)
                    pcs[s.name] += 1
                    self.executed += 1
                    progress = True
        waiting = [s for s in streams if pcs[s.name] < len(s.ops)]
        if waiting:
            parts = []
            for s in waiting:
                o = s.ops[pcs[s.name]].ops
                parts.append(f"{s.name} waits on semaphore {o['sem']} for {o['count']} "
                             f"(value {self.sems.get(o['sem'], 0)}) at instruction {pcs[s.name]}")
            raise SimulationError("deadlock: " + "; ".join(parts))
        return self

    def _execute(self, stream: str, kind: Engine, op: LoadedOp) -> None:
        m = op.mnemonic
        o = op.ops
        try:
            getattr(self, "_op_" + m.lower())(stream, o)
        except SimulationError as exc:
            raise SimulationError(f"stream {stream} instruction {op.index} ({m}): {exc}") from None

    # ---- sync ----
    def _op_nop(self, stream: str, o: dict) -> None:
        pass

    def _op_signal(self, stream: str, o: dict) -> None:
        self.sems[o["sem"]] = self.sems.get(o["sem"], 0) + o["count"]

    # ---- DMA ----
    def _op_dma_load(self, stream: str, o: dict) -> None:
        es = DTYPE_BYTES[o["dtype"]]
        rows = self.hbm.read_rows(o["hbm"], o["rows"], o["cols"] * es, o["stride"])
        self.spad_bytes(o["spad"], rows.size)[:] = rows.ravel()

    def _op_dma_store(self, stream: str, o: dict) -> None:
        es = DTYPE_BYTES[o["dtype"]]
        n = o["rows"] * o["cols"] * es
        data = self.spad_bytes(o["spad"], n).reshape(o["rows"], o["cols"] * es)
        self.hbm.write_rows(o["hbm"], data, o["stride"])

    # ---- systolic arrays ----
    def _array_key(self, stream: str, a: int, loading: bool) -> Any:
        if a != ARRAY_ANY:
            if loading:
                self.last_array[stream] = a
            return a
        if loading:
            key = ("any", stream)
            self.last_array[stream] = key
            return key
        if stream not in self.last_array:
            raise SimulationError("array=any but no SA_LOADW before it in this stream chose an "
                                  "array")
        return self.last_array[stream]

    def _op_sa_loadw(self, stream: str, o: dict) -> None:
        key = self._array_key(stream, o["array"], True)
        self.shadow[key] = self.spad_get(o["w"], (o["k"], o["n"]), o["dtype"])

    def _op_sa_matmul(self, stream: str, o: dict) -> None:
        key = self._array_key(stream, o["array"], False)
        if key in self.shadow:
            self.active[key] = self.shadow.pop(key)
        w = self.active.get(key)
        if w is None:
            raise SimulationError(f"array {key} has no weights (no SA_LOADW before it)")
        if w.shape != (o["k"], o["n"]):
            raise SimulationError(f"k={o['k']}, n={o['n']} differ from the loaded weights "
                                  f"{w.shape[0]}x{w.shape[1]}")
        x = self.spad_get(o["src"], (o["m"], o["k"]), o["dtype"])
        prev = self.spad_get(o["dst"], (o["m"], o["n"]), o["out_dtype"]) if o["acc"] else None
        self.spad_put(o["dst"], systolic_matmul(x, w, prev), o["out_dtype"])

    # ---- vector units ----
    def _binary(self, o: dict, fn) -> None:
        shape = (o["rows"], o["cols"])
        a = self.spad_get(o["a"], shape, o["dtype"])
        b = self.spad_get(o["b"], (1, o["cols"]) if o["bcast"] else shape, o["dtype"])
        self.spad_put(o["dst"], fn(a, b), o["dtype"])

    def _op_vu_add(self, stream: str, o: dict) -> None:
        self._binary(o, np.add)

    def _op_vu_mul(self, stream: str, o: dict) -> None:
        self._binary(o, np.multiply)

    def _unary(self, o: dict, fn) -> None:
        x = self.spad_get(o["src"], (o["rows"], o["cols"]), o["dtype"])
        self.spad_put(o["dst"], fn(x), o["dtype"])

    def _op_vu_scale(self, stream: str, o: dict) -> None:
        self._unary(o, lambda x: x * np.float32(o["imm"]))

    def _op_vu_layernorm(self, stream: str, o: dict) -> None:
        cols = o["cols"]
        p = self.spad_get(o["params"], (2, cols), o["dtype"]).astype(np.float64)
        eps = 10.0 ** -o["eps_exp"]

        def ln(x):
            x = x.astype(np.float64)
            mu = x.mean(axis=1, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
            return (x - mu) / np.sqrt(var + eps) * p[0] + p[1]
        self._unary(o, ln)

    def _op_vu_rmsnorm(self, stream: str, o: dict) -> None:
        g = self.spad_get(o["gamma"], (1, o["cols"]), o["dtype"]).astype(np.float64)
        eps = 10.0 ** -o["eps_exp"]

        def rms(x):
            x = x.astype(np.float64)
            return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * g
        self._unary(o, rms)

    def _op_vu_softmax(self, stream: str, o: dict) -> None:
        rows, cols, mask, ln = o["rows"], o["cols"], o["mask"], o["len"]
        j = np.arange(cols)[None, :]
        if mask == "none":
            keep = np.ones((rows, cols), dtype=bool)
        elif mask == "causal":
            keep = j <= (np.arange(rows)[:, None] + ln)
        else:
            keep = np.broadcast_to(j < ln, (rows, cols))

        x = np.where(keep, self.spad_get(o["src"], (rows, cols), o["dtype"]).astype(np.float64),
                     -np.inf)
        mx = x.max(axis=1, keepdims=True)
        mx = np.where(np.isfinite(mx), mx, 0.0)
        e = np.where(keep, np.exp(x - mx), 0.0)
        s = e.sum(axis=1, keepdims=True)
        self.spad_put(o["dst"], np.divide(e, s, out=np.zeros_like(e), where=s > 0), o["dtype"])
        if o.get("lse"):
            # log-sum-exp of the kept entries: max + log(sum exp(x - max)); -inf for none kept
            with np.errstate(divide="ignore"):
                lse = (mx + np.log(s)).reshape(rows)
            self.spad_put(o["dst"] + rows * cols * DTYPE_BYTES[o["dtype"]], lse, "fp32")

    def _op_vu_gelu(self, stream: str, o: dict) -> None:
        if o["form"] == "erf":
            self._unary(o, lambda x: 0.5 * x.astype(np.float64)
                        * (1.0 + _erf(x.astype(np.float64) / math.sqrt(2.0))))
        else:
            c = math.sqrt(2.0 / math.pi)
            self._unary(o, lambda x: 0.5 * x.astype(np.float64) * (1.0 + np.tanh(
                c * (x.astype(np.float64) + 0.044715 * x.astype(np.float64) ** 3))))

    def _op_vu_silu(self, stream: str, o: dict) -> None:
        self._unary(o, lambda x: x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64))))

    def _op_vu_rope(self, stream: str, o: dict) -> None:
        rows, cols, h = o["rows"], o["cols"], o["half_dim"]
        t = self.spad_get(o["table"], (rows, 2, h), "fp32").astype(np.float64)
        cos, sin = t[:, None, 0, :], t[:, None, 1, :]

        def rope(x):
            x = x.astype(np.float64).reshape(rows, cols // (2 * h), 2 * h)
            x1, x2 = x[..., :h], x[..., h:]
            return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin],
                                  axis=-1).reshape(rows, cols)
        self._unary(o, rope)

    def _op_vu_copy(self, stream: str, o: dict) -> None:
        rows, cols = o["rows"], o["cols"]
        ss = o["src_stride"] or cols
        ds = o["dst_stride"] or cols
        span = (rows - 1) * ss + cols
        src = self.spad_get(o["src"], (span,), o["dtype"])
        idx = np.arange(rows)[:, None] * ss + np.arange(cols)[None, :]
        vals = src[idx]
        if ds == cols:
            self.spad_put(o["dst"], vals, o["out_dtype"])
        else:
            es = DTYPE_BYTES[o["out_dtype"]]
            for r in range(rows):
                self.spad_put(o["dst"] + r * ds * es, vals[r], o["out_dtype"])

    def _op_vu_transpose(self, stream: str, o: dict) -> None:
        x = self.spad_get(o["src"], (o["rows"], o["cols"]), o["dtype"])
        self.spad_put(o["dst"], np.ascontiguousarray(x.T), o["dtype"])

    def _op_vu_dot(self, stream: str, o: dict) -> None:
        rows, cols = o["rows"], o["cols"]
        mat = self.spad_get(o["mat"], (rows, cols), o["dtype"])
        axis = 1 if o["trans"] == 0 else 0
        vec = self.spad_get(o["vec"], (cols if axis == 1 else rows,), o["dtype"])
        if o["order"] == "pim":
            out = pim_order_dot(mat, vec, axis, self.lanes)
        else:
            out = sequential_dot(mat, vec, axis)
        self.spad_put(o["dst"], out, o["out_dtype"])

    def _op_vu_topk(self, stream: str, o: dict) -> None:
        rows, cols, k = o["rows"], o["cols"], o["k"]
        z = self.spad_get(o["src"], (rows, cols), o["dtype"]).astype(np.float64)
        sel = np.argsort(-z, axis=1, kind="stable")[:, :k]       # ties: the lower column
        top = np.take_along_axis(z, sel, axis=1)
        w = np.exp(top - top[:, :1])
        out = np.zeros((rows, cols))
        np.put_along_axis(out, sel, w / w.sum(axis=1, keepdims=True), axis=1)
        self.spad_put(o["dst"], out, o["out_dtype"])

    def _op_vu_axpy(self, stream: str, o: dict) -> None:
        shape = (o["rows"], o["cols"])
        x = self.spad_get(o["x"], shape, o["dtype"])
        a = self.spad_get(o["scale"], (o["rows"], 1), o["dtype"])
        y = a * x                                                 # fp32 products
        if o["acc"]:
            y = self.spad_get(o["dst"], shape, o["dtype"]) + y    # fp32 sum, one rounding
        self.spad_put(o["dst"], y, o["dtype"])

    # ---- PIM ----
    def _pim_state(self, ch: int) -> tuple[np.ndarray, np.ndarray]:
        if ch not in self.open_row:
            self.open_row[ch] = np.full(self.banks, -1, dtype=np.int64)
            self.acc[ch] = np.zeros(self.banks, dtype=np.float32)
        return self.open_row[ch], self.acc[ch]

    def _banks_in(self, mask: int) -> np.ndarray:
        org = self.cfg.memory.org
        bgs = [g for g in range(org.bank_groups) if not mask or (mask >> g) & 1]
        return np.array([(r * org.bank_groups + g) * org.banks_per_group + b
                         for r in range(org.ranks) for g in bgs
                         for b in range(org.banks_per_group)], dtype=np.int64)

    def bank_coords(self, bank: int) -> tuple[int, int, int]:
        """Flat bank index of a channel -> (rank, bank group, bank); flat index is
        ``(rank * bank_groups + bank_group) * banks_per_group + bank``."""
        org = self.cfg.memory.org
        ba = bank % org.banks_per_group
        bg = (bank // org.banks_per_group) % org.bank_groups
        ra = bank // (org.banks_per_group * org.bank_groups)
        return ra, bg, ba

    def read_dram_row(self, ch: int, bank: int, row: int) -> np.ndarray:
        """The bytes of one DRAM row (``page_size_bytes``) of (channel, flat bank, row), column
        by column through the configured address mapping; zeros outside every allocation."""
        org = self.cfg.memory.org
        ra, bg, ba = self.bank_coords(bank)
        cb = org.column_width_bits // 8
        base = self.amap.encode(ch, ra, bg, ba, row, 0)
        if self.amap.encode(ch, ra, bg, ba, row, 1) == base + cb:  # columns contiguous
            return self.hbm.read(base, org.page_size_bytes, strict=False)
        return np.concatenate([self.hbm.read(self.amap.encode(ch, ra, bg, ba, row, c), cb,
                                             strict=False) for c in range(org.columns)])

    def _op_pim_header(self, stream: str, o: dict) -> None:
        pass

    def _op_gwrite(self, stream: str, o: dict) -> None:
        cap = self.cfg.memory.org.page_size_bytes // DTYPE_BYTES[o["dtype"]]   # one row
        g = np.zeros(cap, dtype=np.float32)
        g[:o["len"]] = self.spad_get(o["src"], (o["len"],), o["dtype"])
        self.gbuf[o["channel"]] = g

    def _op_g_act(self, stream: str, o: dict) -> None:
        rows, _ = self._pim_state(o["channel"])
        rows[self._banks_in(o["bg_mask"])] = o["row"]

    def _op_pim_precharge(self, stream: str, o: dict) -> None:
        rows, _ = self._pim_state(o["channel"])
        rows[self._banks_in(o["bg_mask"])] = -1

    def _op_comp(self, stream: str, o: dict) -> None:
        ch = o["channel"]
        rows, acc = self._pim_state(ch)
        g = self.gbuf.get(ch)
        if g is None:
            raise SimulationError(f"COMP on channel {ch} before any GWRITE")
        dt = o["dtype"]
        es = DTYPE_BYTES[dt]
        banks = np.nonzero(rows >= 0)[0]
        if not banks.size:
            return
        data = np.stack([bytes_to_values(self.read_dram_row(ch, int(b), int(rows[b])), dt,
                                         (self.cfg.memory.org.page_size_bytes // es,))
                         for b in banks])
        L = self.lanes
        a = acc[banks]
        for step in range(o["col"], o["col"] + o["n_comps"]):
            lo = step * L
            chunk = data[:, lo:lo + L]
            gch = g[lo:lo + L]
            if gch.size < L:  # the row is longer than the global buffer: missing lanes are 0
                gch = np.concatenate([gch, np.zeros(L - gch.size, dtype=np.float32)])
            a_new = pim_comp_step(a, chunk, gch)
            for observe in _COMP_OBSERVERS:
                observe(ch, banks, a, chunk, gch, a_new)
            a = a_new
        acc[banks] = a

    def _op_readres(self, stream: str, o: dict) -> None:
        _, acc = self._pim_state(o["channel"])
        self.spad_put(o["dst"], acc, o["dtype"])
        acc[:] = 0

    def _op_pim_gemv(self, stream: str, o: dict) -> None:
        self._op_comp(stream, o)
        self._op_readres(stream, {"channel": o["channel"], "dst": o["dst"],
                                  "dtype": o["out_dtype"]})


def run_functional(program: Program, cfg, inputs: dict[str, np.ndarray] | None = None
                   ) -> FunctionalMemory:
    """Run ``program`` on values and return the final HBM contents.

    Args:
        program: the ISA program.
        cfg: ``archsim.config.MachineConfig``.
        inputs: ``{allocation name: values}`` written (rounded to each allocation's dtype)
            before the run.

    Raises:
        SimulationError: see :meth:`FunctionalMachine.run`.
    """
    fm = FunctionalMachine(program, cfg)
    for name, v in (inputs or {}).items():
        fm.hbm.write_tensor(name, v)
    fm.run()
    return fm.hbm


__all__ = ["FunctionalMachine", "FunctionalMemory", "run_functional", "systolic_matmul",
           "sequential_dot", "pim_order_dot", "pim_adder_tree", "pim_comp_step", "to_storage",
           "observe_comp_steps",
           "PIM_QNAN_BITS",
           "from_storage",
           "round_to", "bytes_to_values", "values_to_bytes"]
