"""Program loader: checks a Program against a machine before anything runs.

Both the timing executor (:mod:`archsim.npu.executor`) and functional mode
(:mod:`archsim.functional`) load through :func:`load_program`, so a program that does not fit the machine fails the same
way in both, before its first cycle, with a :class:`archsim.errors.SimulationError` naming the
stream, the instruction index, the mnemonic and the limit.

Checked statically: stream names and indices (``vuN`` < vector units, ``pimN`` < channels and
equal to the instruction's channel), array ids, tile sizes against the array (k <= H, n <= W),
every scratchpad operand inside the scratchpad, every DMA transfer inside one data allocation
of the program (and the memory), PIM operands inside the row / global buffer / bank groups,
vector-op shape rules (RoPE width, copy strides, top-k at most the row), and the program's declared scratchpad size against the machine's.
"""
from __future__ import annotations

import gc
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from archsim.errors import SimulationError
from isa.encoding import Instruction, _from_code
from isa.errors import IsaError
from isa.program import Program, stream_kind
from isa.spec import ARRAY_ANY, DTYPE_BYTES, Engine


@dataclass(frozen=True)
class LoadedOp:
    """One instruction ready to execute: mnemonic, operand values and its source position."""

    mnemonic: str
    ops: dict[str, Any]
    index: int
    ins: Instruction


class LazyOps(Sequence):
    """The :class:`LoadedOp` of each instruction of a stream, decoded on first access (a
    program the compiler produced is run by the compiled executor from its instructions'
    codes, :mod:`archsim.npu.tables`, and never needs them). ``len`` does not decode."""

    __slots__ = ("_instrs", "_ops")

    def __init__(self, instrs: list[Instruction]) -> None:
        self._instrs = instrs
        self._ops: list[LoadedOp] | None = None

    def decoded(self) -> list[LoadedOp]:
        """The ops as a list (decoded now if not yet)."""
        if self._ops is None:
            self._ops = _decode(self._instrs)
        return self._ops

    def __len__(self) -> int:
        return len(self._instrs)

    def __getitem__(self, i):
        return self.decoded()[i]

    def __iter__(self):
        return iter(self.decoded())


@dataclass
class LoadedStream:
    """A checked stream: name, engine kind, engine index (or None), its ops (a list, or a
    :class:`LazyOps` for a compiled program) and its instructions."""

    name: str
    kind: Engine
    index: int | None
    ops: list[LoadedOp] | LazyOps = field(default_factory=list)
    instrs: list[Instruction] = field(default_factory=list)


@dataclass
class LoadedProgram:
    """A program checked against a machine config (see :func:`load_program`);
    ``spad_footprint_bytes``: the highest scratchpad byte its instructions touch (None when
    the instructions were not checked: a compiled program)."""

    program: Program
    streams: list[LoadedStream]
    spad_footprint_bytes: int | None


def _es(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def spad_operands(mnemonic: str, o: dict[str, Any], banks_per_channel: int
                  ) -> list[tuple[str, int, int, bool]]:
    """Scratchpad byte ranges an instruction touches.

    Returns:
        ``[(operand name, byte address, byte count, is_write), ...]``.
    """
    m = mnemonic
    if m in ("DMA_LOAD", "DMA_STORE"):
        return [("spad", o["spad"], o["rows"] * o["cols"] * _es(o["dtype"]), m == "DMA_LOAD")]
    if m == "SA_LOADW":
        return [("w", o["w"], o["k"] * o["n"] * _es(o["dtype"]), False)]
    if m == "SA_MATMUL":
        return [("src", o["src"], o["m"] * o["k"] * _es(o["dtype"]), False),
                ("dst", o["dst"], o["m"] * o["n"] * _es(o["out_dtype"]), True)]
    if m in ("VU_ADD", "VU_MUL"):
        n = o["rows"] * o["cols"] * _es(o["dtype"])
        nb = (o["cols"] if o["bcast"] else o["rows"] * o["cols"]) * _es(o["dtype"])
        return [("a", o["a"], n, False), ("b", o["b"], nb, False), ("dst", o["dst"], n, True)]
    if m in ("VU_SCALE", "VU_SOFTMAX", "VU_GELU", "VU_SILU", "VU_TRANSPOSE", "VU_LAYERNORM",
             "VU_RMSNORM", "VU_ROPE"):
        n = o["rows"] * o["cols"] * _es(o["dtype"])
        out = [("src", o["src"], n, False), ("dst", o["dst"], n, True)]
        if m == "VU_LAYERNORM":
            out.append(("params", o["params"], 2 * o["cols"] * _es(o["dtype"]), False))
        elif m == "VU_RMSNORM":
            out.append(("gamma", o["gamma"], o["cols"] * _es(o["dtype"]), False))
        elif m == "VU_ROPE":
            out.append(("table", o["table"], o["rows"] * 2 * o["half_dim"] * 4, False))
        elif m == "VU_SOFTMAX" and o.get("lse"):
            out.append(("lse", o["dst"] + n, o["rows"] * 4, True))
        return out
    if m == "VU_COPY":
        ss = o["src_stride"] or o["cols"]
        ds = o["dst_stride"] or o["cols"]
        return [("src", o["src"], ((o["rows"] - 1) * ss + o["cols"]) * _es(o["dtype"]), False),
                ("dst", o["dst"], ((o["rows"] - 1) * ds + o["cols"]) * _es(o["out_dtype"]),
                 True)]
    if m == "VU_DOT":
        n_in, n_out = (o["cols"], o["rows"]) if o["trans"] == 0 else (o["rows"], o["cols"])
        return [("mat", o["mat"], o["rows"] * o["cols"] * _es(o["dtype"]), False),
                ("vec", o["vec"], n_in * _es(o["dtype"]), False),
                ("dst", o["dst"], n_out * _es(o["out_dtype"]), True)]
    if m == "VU_TOPK":
        n = o["rows"] * o["cols"]
        return [("src", o["src"], n * _es(o["dtype"]), False),
                ("dst", o["dst"], n * _es(o["out_dtype"]), True)]
    if m == "VU_AXPY":
        n = o["rows"] * o["cols"] * _es(o["dtype"])
        out = [("x", o["x"], n, False), ("scale", o["scale"], o["rows"] * _es(o["dtype"]), False),
               ("dst", o["dst"], n, True)]
        if o["acc"]:
            out.append(("dst", o["dst"], n, False))
        return out
    if m == "GWRITE":
        return [("src", o["src"], o["len"] * _es(o["dtype"]), False)]
    if m == "READRES":
        return [("dst", o["dst"], banks_per_channel * _es(o["dtype"]), True)]
    if m == "PIM_GEMV":
        return [("dst", o["dst"], banks_per_channel * _es(o["out_dtype"]), True)]
    return []


_DECODERS: dict[int, tuple] = {}
"""Per instruction spec (by id): field names, the enum/float fields, the spec."""


def _operands(ins: Instruction) -> dict[str, Any]:
    """``ins.operands()`` (same dict, same order), faster: integer fields are taken as they
    are and only enum / float fields go through :func:`isa.encoding._from_code`."""
    spec = ins.spec
    dec = _DECODERS.get(id(spec))
    if dec is None or dec[2] is not spec:
        fields = spec.fields
        dec = (tuple(f.name for f in fields),
               tuple((i, f) for i, f in enumerate(fields) if f.kind in ("enum", "f32")), spec)
        _DECODERS[id(spec)] = dec
    codes = ins.codes
    d = dict(zip(dec[0], codes))
    for i, f in dec[1]:
        d[f.name] = _from_code(f, codes[i])
    return d


def _check_op(cfg, prog: Program, s: LoadedStream, op: LoadedOp) -> int:
    """Check one op; return the highest scratchpad byte it touches (exclusive)."""
    npu = cfg.npu
    org = cfg.memory.org
    o = op.ops
    m = op.mnemonic
    where = f"stream {s.name} instruction {op.index} ({m})"

    def fail(msg: str) -> SimulationError:
        return SimulationError(f"{where}: {msg}")

    if m in ("SA_LOADW", "SA_MATMUL"):
        a = o["array"]
        if a != ARRAY_ANY and a >= npu.n_arrays:
            raise fail(f"array {a} does not exist (the NPU has arrays 0..{npu.n_arrays - 1})")
        if o["k"] > npu.array_height:
            raise fail(f"k = {o['k']} exceeds the array height H = {npu.array_height}")
        if o["n"] > npu.array_width:
            raise fail(f"n = {o['n']} exceeds the array width W = {npu.array_width}")
    elif m in ("DMA_LOAD", "DMA_STORE"):
        row_bytes = o["cols"] * _es(o["dtype"])
        lo = o["hbm"]
        hi = lo + (o["rows"] - 1) * o["stride"] + row_bytes
        if hi > org.capacity_bytes:
            raise fail(f"HBM bytes [{lo:#x}, {hi:#x}) exceed the memory capacity "
                       f"{org.capacity_bytes:#x}")
        d = prog.find_alloc(lo)
        if d is None or hi > d.end:
            raise fail(f"HBM bytes [{lo:#x}, {hi:#x}) are not inside one data allocation"
                       + (f" ('{d.name}' is [{d.addr:#x}, {d.end:#x}))" if d else
                          " (no allocation contains the first byte)"))
    elif s.kind is Engine.PIM and op.ins.spec.engine is Engine.PIM:
        # (SIGNAL/WAIT/END in a PIM stream are synchronisation instructions: no channel.)
        if o["channel"] != s.index:
            raise fail(f"channel {o['channel']} differs from the stream's channel {s.index}")
        per_comp = cfg.pim.multipliers_per_bank
        if m in ("COMP", "PIM_GEMV"):
            elems_per_row = org.page_size_bytes // _es(o["dtype"])
            last = (o["col"] + o["n_comps"]) * per_comp
            if last > elems_per_row:
                raise fail(f"col {o['col']} + n_comps {o['n_comps']} steps of {per_comp} "
                           f"elements reach element {last}, past the {elems_per_row} "
                           f"{o['dtype']} elements of a {org.page_size_bytes}-byte row")
        if m == "GWRITE" and o["len"] * _es(o["dtype"]) > org.page_size_bytes:
            raise fail(f"len {o['len']} x {_es(o['dtype'])} B exceeds the global buffer "
                       f"(one row: {org.page_size_bytes} B)")
        if m == "G_ACT" and o["row"] >= org.rows:
            raise fail(f"row {o['row']} does not exist (rows 0..{org.rows - 1})")
        if m in ("G_ACT", "PIM_PRECHARGE") and o["bg_mask"] >> org.bank_groups:
            raise fail(f"bg_mask {o['bg_mask']:#x} selects bank groups past the "
                       f"{org.bank_groups} of a rank")
    elif m == "VU_ROPE":
        if o["cols"] % (2 * o["half_dim"]):
            raise fail(f"cols {o['cols']} is not a multiple of head_dim = 2 x half_dim = "
                       f"{2 * o['half_dim']}")
    elif m == "VU_TOPK" and o["k"] > o["cols"]:
        raise fail(f"k = {o['k']} exceeds cols = {o['cols']} (experts per row)")
    elif m == "VU_COPY":
        for k in ("src_stride", "dst_stride"):
            if o[k] and o[k] < o["cols"]:
                raise fail(f"{k} {o[k]} is smaller than cols {o['cols']} (rows would overlap)")
    cap = npu.scratchpad.size_bytes
    top = 0
    for name, addr, n, _ in spad_operands(m, o, org.banks_per_channel):
        if addr + n > cap:
            raise fail(f"scratchpad operand {name} [{addr:#x}, {addr + n:#x}) overflows the "
                       f"{cap}-byte scratchpad")
        top = max(top, addr + n)
    return top


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector inside the block (restored after it, also on an
    exception). Loading a layer program and running it allocate millions of small acyclic
    objects that the collector would traverse again and again for nothing (measured ~0.8 s
    of a GPT3-7B layer); reference counting still frees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load_program(program: Program, cfg, *, compiled: bool = False) -> LoadedProgram:
    """Check ``program`` against ``cfg`` (a MachineConfig) and prepare it for execution.

    ``compiled=True``: the program is the one :mod:`mapping.compiler` just produced for this
    machine (``archsim.system.core.run_window``), which builds every instruction in range,
    on a stream of its engine and inside its allocations, scratchpad and PIM rows
    (``tests/test_speed_loader.py`` runs the full checks on compiled programs of every
    system): only the stream-level checks run, the instructions are neither checked again nor
    decoded (``ops`` is a :class:`LazyOps`). Programs from files are always checked in full.

    Raises:
        SimulationError: the first violation found (see the module docstring), naming the
            stream, instruction index, mnemonic and the machine's limit.
    """
    with gc_paused():
        return _load_program(program, cfg, compiled)


def _decode(instrs: list[Instruction]) -> list[LoadedOp]:
    """LoadedOps of a stream's instructions (one operand dict per distinct instruction)."""
    memo: dict[Instruction, dict[str, Any]] = {}
    out = []
    for i, ins in enumerate(instrs):
        o = memo.get(ins)
        if o is None:
            o = memo[ins] = _operands(ins)
        out.append(LoadedOp(ins.mnemonic, o, i, ins))
    return out


def _load_program(program: Program, cfg, compiled: bool = False) -> LoadedProgram:
    if not compiled:
        try:
            program.validate()
        except IsaError as exc:
            raise SimulationError(f"invalid program: {exc}") from None
    cap = cfg.npu.scratchpad.size_bytes
    if program.spad_size_bytes > cap:
        raise SimulationError(f"the program was compiled for a {program.spad_size_bytes}-byte "
                              f"scratchpad; this machine has {cap} bytes")
    streams: list[LoadedStream] = []
    footprint = 0
    for name, instrs in program.streams.items():
        kind, index = stream_kind(name)
        if kind is Engine.VU and (index or 0) >= cfg.npu.vector.count:
            raise SimulationError(f"stream {name}: the NPU has vector units "
                                  f"0..{cfg.npu.vector.count - 1}")
        if kind is Engine.PIM:
            if index is None:
                raise SimulationError(f"stream {name}: a PIM stream must name its channel "
                                      "(pim0, pim1, ...)")
            if index >= cfg.memory.org.channels:
                raise SimulationError(f"stream {name}: the memory has channels "
                                      f"0..{cfg.memory.org.channels - 1}")
            if not cfg.system.has_pim:
                raise SimulationError(f"stream {name}: machine '{cfg.name}' has no PIM "
                                      f"(system.engines = {list(cfg.system.engines)})")
        if compiled:
            streams.append(LoadedStream(name, kind, index, LazyOps(instrs), instrs))
            continue
        s = LoadedStream(name, kind, index, [], instrs)
        # identical instructions of a stream (equal codes) decode and check identically: the
        # operand dict (read-only) and the scratchpad top are computed once per distinct one
        # (a layer program repeats most of its PIM and DMA instructions)
        memo: dict[Instruction, tuple[dict[str, Any], int]] = {}
        ops = s.ops
        for i, ins in enumerate(instrs):
            hit = memo.get(ins)
            if hit is None:
                op = LoadedOp(ins.mnemonic, _operands(ins), i, ins)
                top = _check_op(cfg, program, s, op)
                memo[ins] = (op.ops, top)
                if top > footprint:
                    footprint = top
            else:
                op = LoadedOp(ins.mnemonic, hit[0], i, ins)
            ops.append(op)
        streams.append(s)
    return LoadedProgram(program, streams, None if compiled else footprint)


__all__ = ["LazyOps", "LoadedOp", "LoadedStream", "LoadedProgram", "gc_paused",
           "load_program", "spad_operands"]
