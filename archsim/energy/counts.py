"""Action counts of a compiled program: what the NPU does, for the energy table to price.

The programs are straight-line (no branches), and the executor runs every instruction once, so
the actions of a run are those of its instruction stream (:func:`count_program`):

* **MACs** — ``m · n · k`` of every ``SA_MATMUL`` (the executor's ``ArrayStats.macs``).
* **Scratchpad bytes** — every operand of :func:`archsim.npu.loader.spad_operands`:
  ``DMA_LOAD`` writes its tile, ``DMA_STORE`` reads it; ``SA_LOADW`` reads the weight tile,
  ``SA_MATMUL`` reads its input rows and writes its outputs (and reads them first when it
  accumulates, ``acc = 1``); vector ops read their inputs and write their result; ``GWRITE``
  reads the query vector, ``READRES`` / ``PIM_GEMV`` write the banks' results.
* **Vector work** — ``rows · cols`` elements per vector op (``VectorStats.elements``) and
  element-passes (× ``npu.vector.passes`` of multi-pass ops), by op.
* **DMA bytes** — tile bytes of ``DMA_LOAD`` (read from HBM) and ``DMA_STORE`` (written), the
  executor's ``DmaStats.bytes_read`` / ``bytes_written``.
* **PIM bus bytes** — the query vectors a ``GWRITE`` sends to a channel and the results a
  ``READRES`` / ``PIM_GEMV`` returns (they cross the HBM interface).
* **Link bytes** — bytes this device sends for its tensor-parallel all-reduces: a ring
  all-reduce of ``S`` bytes over ``p`` devices sends ``2 (p − 1) / p · S`` per device
  (Patarasuk & Yuan, JPDC 2009).

:func:`reconcile` compares the counts with the executor's own statistics (MACs, DMA bytes,
vector elements, instructions); the simulator stores the comparison with every result.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from isa.encoding import Instruction
from isa.spec import BY_MNEMONIC, DTYPE_BYTES

_VU_PREFIX = "VU_"
_PIM_OUT = ("READRES", "PIM_GEMV")
_LOCATORS = frozenset(("spad", "hbm", "w", "src", "dst", "a", "b", "params", "gamma", "table",
                       "mat", "vec", "x", "scale", "channel", "row", "col", "bg_mask", "sem",
                       "peer"))
"""Operand fields that only say where an operand is (scratchpad or HBM byte addresses, PIM
channel, row, column and bank groups, semaphores, peers), never how much it moves or computes:
:func:`count_program` counts instructions that differ only in these once (``VU_AXPY``'s ``scale``
is the address of its scale vector; ``VU_SCALE``'s factor is ``imm``)."""


@dataclass
class NpuActionCounts:
    """Actions of one device (units in the names; floats so that they can be scaled).

    Attributes:
        macs: systolic-array multiply-accumulates.
        sram_read_bytes / sram_write_bytes: scratchpad bytes read / written.
        vector_elements: ``{op: rows · cols}`` of the vector instructions of each op.
        vector_element_passes: ``{op: rows · cols · passes}``.
        dma_read_bytes / dma_write_bytes: bytes the DMA reads from / writes to HBM.
        pim_bus_bytes: GWRITE query bytes plus READRES / PIM_GEMV result bytes.
        link_bytes: bytes sent to other devices (all-reduces, pipeline hand-offs).
        instructions: instructions executed (all streams).
    """

    macs: float = 0.0
    sram_read_bytes: float = 0.0
    sram_write_bytes: float = 0.0
    vector_elements: dict[str, float] = field(default_factory=dict)
    vector_element_passes: dict[str, float] = field(default_factory=dict)
    dma_read_bytes: float = 0.0
    dma_write_bytes: float = 0.0
    pim_bus_bytes: float = 0.0
    link_bytes: float = 0.0
    instructions: float = 0.0

    @property
    def dma_bytes(self) -> float:
        """DMA bytes read plus written."""
        return self.dma_read_bytes + self.dma_write_bytes

    def scaled(self, k: float) -> "NpuActionCounts":
        """Every count multiplied by ``k`` (reused layers, devices)."""
        d = asdict(self)
        out = {key: ({o: v * k for o, v in val.items()} if isinstance(val, dict) else val * k)
               for key, val in d.items()}
        return NpuActionCounts(**out)

    def plus(self, other: "NpuActionCounts") -> "NpuActionCounts":
        """The element-wise sum of two counts."""
        a, b = asdict(self), asdict(other)
        out: dict[str, Any] = {}
        for key, val in a.items():
            if isinstance(val, dict):
                out[key] = {o: val.get(o, 0.0) + b[key].get(o, 0.0)
                            for o in sorted(set(val) | set(b[key]))}
            else:
                out[key] = val + b[key]
        return NpuActionCounts(**out)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the JSON (with ``dma_bytes``)."""
        d = asdict(self)
        d["dma_bytes"] = self.dma_bytes
        return d


def ring_bytes_sent(size_bytes: float, p: int) -> float:
    """Bytes one device sends in a ring all-reduce of ``size_bytes`` over ``p`` devices:
    ``2 (p − 1) / p · size`` (reduce-scatter then all-gather; 0 for ``p = 1``)."""
    return 0.0 if p <= 1 else 2.0 * (p - 1) / p * size_bytes


def count_program(compiled: Any, cfg: Any, groups: list | None = None) -> NpuActionCounts:
    """Count the actions of a program (see the module docstring), from its instructions only.

    Args:
        compiled: an :class:`isa.program.Program` or a
            :class:`mapping.compiler.CompiledProgram` (its ``program``). Link bytes are those
            of its ``ALL_REDUCE`` and ``ALL_TO_ALL`` instructions (a ``SEND`` is counted once per iteration by the
            caller, not per layer).
        cfg: the :class:`archsim.config.MachineConfig` it runs on (vector passes, banks).
        groups: the program's instructions grouped by opcode as
            :func:`archsim.npu.tables.codes_by_opcode` yields them for its streams in order
            (the compiled loop's tables keep them: ``TableInfo.opcode_groups``); None groups
            them here.

    Returns:
        :class:`NpuActionCounts` of one device for one execution of the program.
    """
    from archsim.npu.loader import _operands, spad_operands
    from archsim.npu.tables import _unique_rows, codes_by_opcode

    banks = cfg.memory.org.banks_per_channel
    passes = cfg.npu.vector.passes_of
    program = getattr(compiled, "program", compiled)
    c = NpuActionCounts()
    velem: dict[str, float] = {}
    vpass: dict[str, float] = {}
    first: dict[str, int] = {}                   # vector op -> its first instruction
    link = 0.0
    # the actions of each distinct instruction up to its addresses (_LOCATORS), times its copies:
    # a decode layer has ~10^5 instructions and a few hundred such shapes (every action is a
    # whole number of bytes or MACs, so the float sums are exact in any order)
    if groups is None:
        groups = codes_by_opcode(list(program.streams.values()))
    for spec, gi, C in groups:
        c.instructions += len(gi)
        sizes = [i for i, f in enumerate(spec.fields) if f.name not in _LOCATORS]
        if sizes:
            shapes, inv = _unique_rows([C[:, i] for i in sizes])
            copies = np.bincount(inv, minlength=len(shapes)).tolist()
        else:
            shapes, copies = np.zeros((1, 0), np.int64), [len(gi)]
        code = [0] * len(spec.fields)
        for row, n in zip(shapes.tolist(), copies):
            for i, v in zip(sizes, row):
                code[i] = v
            ins = Instruction.from_codes(spec, tuple(code))
            rd, wr, macs, vop, vel, dma_r, dma_w, bus, lk = _instruction_actions(
                spec.mnemonic, _operands(ins), banks, passes, spad_operands)
            c.sram_read_bytes += rd * n
            c.sram_write_bytes += wr * n
            c.macs += macs * n
            c.dma_read_bytes += dma_r * n
            c.dma_write_bytes += dma_w * n
            c.pim_bus_bytes += bus * n
            link += lk * n
            if vop:
                velem[vop] = velem.get(vop, 0.0) + vel * n
                vpass[vop] = vpass.get(vop, 0.0) + vel * passes(vop) * n
                first[vop] = min(first.get(vop, int(gi[0])), int(gi[0]))
    order = sorted(first, key=first.__getitem__)     # ops in program order, as a run meets them
    velem = {op: velem[op] for op in order}
    vpass = {op: vpass[op] for op in order}
    c.vector_elements = velem
    c.vector_element_passes = vpass
    c.link_bytes = link
    return c


def _instruction_actions(m: str, o: dict, banks: int, passes: Any, spad_operands: Any) -> tuple:
    """``(sram read B, sram write B, MACs, vector op or None, vector elements, DMA read B,
    DMA write B, PIM bus B, link B sent)`` of one instruction."""
    rd = wr = 0.0
    for _name, _addr, n, is_write in spad_operands(m, o, banks):
        if is_write:
            wr += n
        else:
            rd += n
    macs = 0.0
    vop, vel = None, 0.0
    dma_r = dma_w = bus = link = 0.0
    if m == "ALL_REDUCE":
        link = ring_bytes_sent(o["bytes"], o["group"])
    elif m == "ALL_TO_ALL":      # the larger of sent and received: an upper bound of sent
        link = float(o["bytes"]) if o["group"] > 1 else 0.0
    elif m == "SA_MATMUL":
        macs = float(o["m"] * o["n"] * o["k"])
        if o["acc"]:
            rd += o["m"] * o["n"] * DTYPE_BYTES[o["out_dtype"]]
    elif m.startswith(_VU_PREFIX):
        vop = BY_MNEMONIC[m].latency_key
        vel = float(o["rows"] * o["cols"])
    elif m == "DMA_LOAD":
        dma_r = float(o["rows"] * o["cols"] * DTYPE_BYTES[o["dtype"]])
    elif m == "DMA_STORE":
        dma_w = float(o["rows"] * o["cols"] * DTYPE_BYTES[o["dtype"]])
    elif m == "GWRITE":
        bus = float(o["len"] * DTYPE_BYTES[o["dtype"]])
    elif m in _PIM_OUT:
        bus = float(wr)
    return rd, wr, macs, vop, vel, dma_r, dma_w, bus, link


def reconcile(counts: NpuActionCounts, stats: Any) -> dict[str, dict[str, float]]:
    """Compare program counts with the executor's statistics of the same run.

    Args:
        counts: :func:`count_program` of the program that ran.
        stats: the executor's :class:`archsim.npu.stats.NpuStats`.

    Returns:
        ``{quantity: {"counted": c, "executed": e}}`` for MACs, DMA bytes read and written,
        vector elements and instructions; they are equal when the counts are right.
    """
    return {
        "macs": {"counted": counts.macs, "executed": float(stats.macs)},
        "dma_read_bytes": {"counted": counts.dma_read_bytes,
                           "executed": float(stats.dma.bytes_read)},
        "dma_write_bytes": {"counted": counts.dma_write_bytes,
                            "executed": float(stats.dma.bytes_written)},
        "vector_elements": {"counted": float(sum(counts.vector_elements.values())),
                            "executed": float(sum(v.elements for v in stats.vector_units))},
        "instructions": {"counted": counts.instructions,
                         "executed": float(sum(s.instructions for s in stats.streams.values()))},
    }


def lm_head_counts(cfg: Any, model: Any, tp: int, tokens: int) -> NpuActionCounts:
    """Actions of the analytic final norm + LM head of one device (the GEMM
    ``[tokens, d_model] × [d_model, vocab / tp]`` that :func:`archsim.npu.timing.lm_head_cycles`
    times), counted as the compiler maps a GEMM: every ``H × W`` weight tile is DMA-loaded into
    the scratchpad and read by ``SA_LOADW``; each tile reads the ``tokens × H`` input rows and
    writes ``tokens × W`` fp32-accumulated outputs of the storage type, reading them back for
    every tile after the first along ``d_model``; the norm reads and writes ``tokens × d_model``.
    Only the weights are DMA traffic (as in the timing)."""
    import math

    npu = cfg.npu
    H, W = npu.array_height, npu.array_width
    d, V, es = model.d_model, model.vocab_per_device(tp), model.dtype_bytes
    kt, nt = math.ceil(d / H), math.ceil(V / W)
    wbytes = float(d * V * es)
    out_tile = tokens * W * es
    key = "layernorm" if model.norm == "layernorm" else "rmsnorm"
    norm_el = float(tokens * d)
    return NpuActionCounts(
        macs=float(tokens * d * V),
        sram_read_bytes=(wbytes + kt * nt * tokens * H * es + (kt - 1) * nt * out_tile
                         + norm_el * es),
        sram_write_bytes=wbytes + kt * nt * out_tile + norm_el * es,
        vector_elements={key: norm_el},
        vector_element_passes={key: norm_el * npu.vector.passes_of(key)},
        dma_read_bytes=wbytes)


__all__ = ["NpuActionCounts", "count_program", "reconcile", "ring_bytes_sent", "lm_head_counts"]
