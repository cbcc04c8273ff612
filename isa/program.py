"""Programs: per-engine instruction streams plus a data section, and their binary container.

A :class:`Program` is what the compiler emits and the simulator runs:

* ``streams``: ordered ``{name: [Instruction, ...]}``. A stream name is ``<kind>`` or
  ``<kind><index>`` with kind one of ``dma``, ``sa``, ``vu``, ``pim`` (``dma0``, ``sa``,
  ``vu3``, ``pim17``). Each stream executes in order on one engine instance: ``dmaN`` is a
  queue of the DMA engine, ``sa``/``saN`` issue to the systolic arrays (instructions name the
  array), ``vuN`` is vector unit N (``vu`` = ``vu0``), ``pimN`` is PIM channel N. A stream holds
  instructions of its engine kind plus SYNC instructions. Streams synchronise only through
  semaphores (SIGNAL/WAIT).
* ``data``: the HBM allocations the program uses (:class:`DataAlloc`: name, byte address,
  size, shape, dtype, kind ``weight``/``activation``/``kv``).
* ``spad_size_bytes``: scratchpad capacity the program was compiled for (0 = unspecified).
* ``labels``: ``{stream: {label: instruction index}}`` kept from the assembly text.
* ``debug``: optional :class:`DebugTable`: per instruction the operator (graph node), decoder
  layer and schedule stage it implements, written by the compiler and read by the simulator's
  per-layer and per-stage breakdown (never parsed out of names).

Binary container (all integers little-endian). Version 1::

    offset  size  field
    0       8     magic b"ARCHISA\\0"
    8       2     version (1)
    10      2     n_streams
    12      4     n_data
    16      8     spad_size_bytes
    24      4     n_labels
    28      4     words_offset: byte offset of the first instruction word (multiple of 16)
    32      ...   stream table, n_streams x { u8 name_len, name (ASCII), u32 n_words }
            ...   data table, n_data x { u8 name_len, name (UTF-8), u64 addr, u64 size_bytes,
                                         u8 dtype (index in isa.spec.DTYPES),
                                         u8 kind (index in DATA_KINDS), u8 ndim, ndim x u64 }
            ...   label table, n_labels x { u16 stream index, u32 instruction index,
                                            u8 name_len, name (ASCII) }
            ...   zero padding up to words_offset
    words_offset  instruction words: each stream's words in stream-table order, 16 bytes per
                  word (the 128-bit encoding of isa.spec, little-endian)

Version 2 is version 1 with a debug section between the label table and the padding::

            ...   u32 n_ops, n_ops x { u16 name_len, name (UTF-8) }
            ...   u32 n_stages, n_stages x { u16 name_len, name (UTF-8) }
            ...   per stream, in stream-table order, n_words x i32 op, then n_words x i16
                  layer, then n_words x i16 stage (-1: none)

A program without a debug table is written as version 1, byte for byte.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from isa.encoding import WORD_BYTES, Instruction, decode_bytes, encode_bytes
from isa.errors import IllegalInstruction, IsaError, ProgramFormatError
from isa.spec import DTYPE_BYTES, DTYPES, HBM_ADDR_BITS, STREAM_KINDS, Engine

MAGIC = b"ARCHISA\0"
"""First 8 bytes of a binary program."""
FORMAT_VERSION = 2
"""Newest version of the binary container: :meth:`Program.to_bytes` writes 2 when the program
has a debug table, 1 otherwise (byte for byte the version-1 layout); both load."""
READ_VERSIONS = (1, 2)
"""Container versions :meth:`Program.from_bytes` reads."""
DATA_KINDS: tuple[str, ...] = ("weight", "activation", "kv")
"""Kinds of HBM allocations, in encoding order."""

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_STREAM_RE = re.compile(r"(dma|sa|vu|pim|link)(0|[1-9][0-9]*)?\Z")
_HEADER = struct.Struct("<8sHHIQII")


def stream_kind(name: str) -> tuple[Engine, int | None]:
    """Engine kind and index of a stream name (``"pim3"`` -> ``(Engine.PIM, 3)``).

    Raises:
        IsaError: the name is not ``<kind>`` or ``<kind><index>`` with kind in dma, sa, vu,
            pim.
    """
    m = _STREAM_RE.match(name)
    if not m:
        raise IsaError(f"bad stream name '{name}': expected <kind> or <kind><index> with kind "
                       f"one of {', '.join(STREAM_KINDS)} (e.g. dma0, sa, vu3, pim17, link)")
    return Engine(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)


def check_stream_instruction(stream: str, ins: Instruction) -> None:
    """Raise IsaError when ``ins`` may not appear in ``stream`` (wrong engine kind)."""
    kind, _ = stream_kind(stream)
    eng = ins.spec.engine
    if eng is not Engine.SYNC and eng is not kind:
        raise IsaError(f"{ins.mnemonic} runs on the {eng.value} engine and cannot appear in "
                       f"stream '{stream}' ({kind.value} engine)")


@dataclass(frozen=True)
class DataAlloc:
    """One named HBM allocation of a program's data section.

    Attributes:
        name: identifier (letters, digits, ``_`` and ``.``; not starting with a digit).
        addr: base byte address in the device's flat HBM address space.
        size_bytes: bytes reserved (>= the bytes of ``shape`` x ``dtype``).
        shape: tensor shape (row-major), e.g. ``(4096, 4096)``.
        dtype: element type, one of :data:`isa.spec.DTYPES`.
        kind: ``weight``, ``activation`` or ``kv``.
    """

    name: str
    addr: int
    size_bytes: int
    shape: tuple[int, ...]
    dtype: str = "fp16"
    kind: str = "activation"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if not _NAME_RE.match(self.name):
            raise IsaError(f"data name '{self.name}' is not an identifier")
        if self.dtype not in DTYPES:
            raise IsaError(f"data '{self.name}': dtype '{self.dtype}' is not one of "
                           f"{'|'.join(DTYPES)}")
        if self.kind not in DATA_KINDS:
            raise IsaError(f"data '{self.name}': kind '{self.kind}' is not one of "
                           f"{'|'.join(DATA_KINDS)}")
        if not self.shape or any(d < 1 for d in self.shape):
            raise IsaError(f"data '{self.name}': shape {self.shape} must have dimensions >= 1")
        if self.addr < 0 or self.size_bytes < 1 or self.end > (1 << HBM_ADDR_BITS):
            raise IsaError(f"data '{self.name}': [{self.addr:#x}, {self.end:#x}) is not inside "
                           f"the {HBM_ADDR_BITS}-bit HBM address space")
        if self.size_bytes < self.nbytes:
            raise IsaError(f"data '{self.name}': size_bytes {self.size_bytes} < {self.nbytes} "
                           f"bytes of shape {self.shape} {self.dtype}")

    @property
    def end(self) -> int:
        """One past the last byte address."""
        return self.addr + self.size_bytes

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor: prod(shape) x size(dtype)."""
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


@dataclass
class DebugTable:
    """Where each instruction of a program comes from (the container's debug section).

    Attributes:
        ops: operator names (graph nodes such as ``L3.qkv``), indexed by ``op``.
        stages: schedule stage names (``mapping.schedule``), indexed by ``stage``.
        streams: ``{stream: (op, layer, stage)}``: int arrays ``[n_instructions]`` of the
            stream (int32 op index, int16 decoder layer, int16 stage index; -1 = none: an
            instruction of no operator, or an operator of no layer such as a hand-off).

    Raises (``check``):
        IsaError: a stream missing or of the wrong length, an index past its name table.
    """

    ops: list[str]
    stages: list[str]
    streams: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]

    def __post_init__(self) -> None:
        self.streams = {s: (np.asarray(o, dtype=np.int32), np.asarray(l, dtype=np.int16),
                            np.asarray(g, dtype=np.int16))
                        for s, (o, l, g) in self.streams.items()}

    def check(self, streams: dict[str, list]) -> None:
        """IsaError unless every stream of ``streams`` has a row per instruction here."""
        if set(self.streams) != set(streams):
            raise IsaError(f"debug table streams {sorted(self.streams)} differ from the "
                           f"program's {sorted(streams)}")
        for s, (o, l, g) in self.streams.items():
            n = len(streams[s])
            if not len(o) == len(l) == len(g) == n:
                raise IsaError(f"debug table of stream {s} has {len(o)} rows for {n} "
                               "instructions")
            if n and (int(o.max()) >= len(self.ops) or int(o.min()) < -1):
                raise IsaError(f"debug table of stream {s}: op index past the "
                               f"{len(self.ops)} operator names")
            if n and (int(g.max()) >= len(self.stages) or int(g.min()) < -1):
                raise IsaError(f"debug table of stream {s}: stage index past the "
                               f"{len(self.stages)} stage names")
            if n and int(l.min()) < -1:
                raise IsaError(f"debug table of stream {s}: layer below -1")

    def layer_of_ops(self) -> np.ndarray:
        """int64 ``[len(ops) + 1]``: the layer of each operator (-1: none; the extra last entry
        maps op -1), taken from the instructions that carry it."""
        out = np.full(len(self.ops) + 1, -1, dtype=np.int64)
        for o, l, _ in self.streams.values():
            sel = o >= 0
            out[o[sel]] = l[sel]
        return out

    def to_bytes(self, names: list[str]) -> bytes:
        """The version-2 debug section for streams in the order ``names``."""
        out = bytearray()
        for table in (self.ops, self.stages):
            out += struct.pack("<I", len(table))
            for t in table:
                b = t.encode("utf-8")
                if len(b) > 0xFFFF:
                    raise IsaError(f"debug name '{t[:40]}...' is longer than 65535 bytes")
                out += struct.pack("<H", len(b)) + b
        for n in names:
            o, l, g = self.streams[n]
            out += o.astype("<i4").tobytes() + l.astype("<i2").tobytes() \
                + g.astype("<i2").tobytes()
        return bytes(out)


@dataclass
class Program:
    """Per-engine instruction streams, a data section and scratchpad metadata.

    See the module docstring for stream naming and the binary container.
    """

    streams: dict[str, list[Instruction]] = field(default_factory=dict)
    data: list[DataAlloc] = field(default_factory=list)
    spad_size_bytes: int = 0
    labels: dict[str, dict[str, int]] = field(default_factory=dict)
    debug: DebugTable | None = field(default=None, compare=False)

    # ---- building ----
    def stream(self, name: str) -> list[Instruction]:
        """The instruction list of stream ``name``, created empty if new (name checked)."""
        if name not in self.streams:
            stream_kind(name)
            self.streams[name] = []
        return self.streams[name]

    def emit(self, stream: str, ins: Instruction) -> None:
        """Append ``ins`` to ``stream`` (IsaError when the engine kind does not match)."""
        check_stream_instruction(stream, ins)
        self.stream(stream).append(ins)

    def add_data(self, alloc: DataAlloc) -> DataAlloc:
        """Add an allocation; IsaError when its name exists or it overlaps another."""
        for d in self.data:
            if d.name == alloc.name:
                raise IsaError(f"data '{alloc.name}' is defined twice")
            if alloc.addr < d.end and d.addr < alloc.end:
                raise IsaError(f"data '{alloc.name}' [{alloc.addr:#x}, {alloc.end:#x}) overlaps "
                               f"'{d.name}' [{d.addr:#x}, {d.end:#x})")
        self.data.append(alloc)
        return alloc

    def alloc(self, name: str) -> DataAlloc:
        """The allocation called ``name``; IsaError listing the names when absent."""
        for d in self.data:
            if d.name == name:
                return d
        raise IsaError(f"no data named '{name}'; data section has: "
                       f"{', '.join(d.name for d in self.data) or '(empty)'}")

    def find_alloc(self, addr: int) -> DataAlloc | None:
        """The allocation containing byte ``addr``, or None."""
        for d in self.data:
            if d.addr <= addr < d.end:
                return d
        return None

    def validate(self) -> None:
        """Check stream names, engine kinds per stream, labels and data overlaps (IsaError)."""
        for name, instrs in self.streams.items():
            stream_kind(name)
            for i, ins in enumerate(instrs):
                try:
                    check_stream_instruction(name, ins)
                except IsaError as exc:
                    raise IsaError(f"stream {name} instruction {i}: {exc}") from None
        for s, labs in self.labels.items():
            if s not in self.streams:
                raise IsaError(f"labels refer to unknown stream '{s}'")
            for lab, idx in labs.items():
                if not 0 <= idx <= len(self.streams[s]):
                    raise IsaError(f"label {lab} of stream {s} points past the stream ({idx})")
        seen: list[DataAlloc] = []
        for d in self.data:
            for e in seen:
                if d.name == e.name:
                    raise IsaError(f"data '{d.name}' is defined twice")
                if d.addr < e.end and e.addr < d.end:
                    raise IsaError(f"data '{d.name}' overlaps '{e.name}'")
            seen.append(d)
        if self.debug is not None:
            self.debug.check(self.streams)

    @property
    def n_instructions(self) -> int:
        """Instructions over all streams."""
        return sum(len(v) for v in self.streams.values())

    # ---- text form ----
    def to_text(self) -> str:
        """Readable assembly (``.spad``, ``.data``, ``.stream`` directives); see isa.asm."""
        from isa.asm import disassemble_program

        return disassemble_program(self)

    @classmethod
    def from_text(cls, text: str, filename: str = "<text>") -> "Program":
        """Assemble text (see :func:`isa.asm.assemble`); AsmError names line and column."""
        from isa.asm import assemble

        return assemble(text, filename)

    # ---- binary form ----
    def to_bytes(self) -> bytes:
        """The binary container (see the module docstring)."""
        self.validate()
        names = list(self.streams)
        meta = bytearray()
        for n in names:
            b = n.encode("ascii")
            meta += struct.pack("<B", len(b)) + b + struct.pack("<I", len(self.streams[n]))
        for d in self.data:
            b = d.name.encode("utf-8")
            if len(b) > 255:
                raise IsaError(f"data name '{d.name}' is longer than 255 bytes")
            meta += struct.pack("<B", len(b)) + b
            meta += struct.pack("<QQBBB", d.addr, d.size_bytes, DTYPES.index(d.dtype),
                                DATA_KINDS.index(d.kind), len(d.shape))
            meta += b"".join(struct.pack("<Q", x) for x in d.shape)
        n_labels = 0
        for s, labs in self.labels.items():
            for lab, idx in labs.items():
                b = lab.encode("ascii")
                meta += struct.pack("<HIB", names.index(s), idx, len(b)) + b
                n_labels += 1
        version = 1
        if self.debug is not None:
            meta += self.debug.to_bytes(names)
            version = 2
        words_offset = _HEADER.size + len(meta)
        words_offset += (-words_offset) % WORD_BYTES
        header = _HEADER.pack(MAGIC, version, len(names), len(self.data),
                              self.spad_size_bytes, n_labels, words_offset)
        out = bytearray(header + meta)
        out += bytes(words_offset - len(out))
        for n in names:
            out += b"".join(encode_bytes(i) for i in self.streams[n])
        return bytes(out)

    @classmethod
    def from_bytes(cls, blob: bytes) -> "Program":
        """Parse a binary container.

        Raises:
            ProgramFormatError: bad magic or version, truncated tables or words, a bad table
                entry; the message says which and at what byte offset.
            IllegalInstruction: a word does not decode (names the stream and index).
        """
        if blob[:len(MAGIC)] != MAGIC:
            raise ProgramFormatError(f"bad magic {bytes(blob[:len(MAGIC)])!r}: not an archsim ISA "
                                     f"program (expected {MAGIC!r})")
        if len(blob) < _HEADER.size:
            raise ProgramFormatError(f"file is {len(blob)} bytes, shorter than the "
                                     f"{_HEADER.size}-byte header")
        magic, version, n_streams, n_data, spad, n_labels, words_offset = _HEADER.unpack_from(
            blob, 0)
        if magic != MAGIC:
            raise ProgramFormatError(f"bad magic {magic!r}: not an archsim ISA program "
                                     f"(expected {MAGIC!r})")
        if version not in READ_VERSIONS:
            raise ProgramFormatError(f"container version {version} is not supported "
                                     f"(this reader knows versions "
                                     f"{', '.join(map(str, READ_VERSIONS))})")
        pos = _HEADER.size

        def take(fmt: str) -> tuple:
            nonlocal pos
            size = struct.calcsize(fmt)
            if pos + size > len(blob):
                raise ProgramFormatError(f"truncated at byte {pos}: tables end early")
            vals = struct.unpack_from(fmt, blob, pos)
            pos += size
            return vals

        def take_bytes(n: int) -> bytes:
            nonlocal pos
            if pos + n > len(blob):
                raise ProgramFormatError(f"truncated at byte {pos}: tables end early")
            b = blob[pos:pos + n]
            pos += n
            return b

        prog = cls(spad_size_bytes=spad)
        counts: list[tuple[str, int]] = []
        try:
            for _ in range(n_streams):
                (ln,) = take("<B")
                name = take_bytes(ln).decode("ascii")
                (nw,) = take("<I")
                stream_kind(name)
                if name in dict(counts):
                    raise ProgramFormatError(f"stream '{name}' appears twice")
                counts.append((name, nw))
            for _ in range(n_data):
                (ln,) = take("<B")
                name = take_bytes(ln).decode("utf-8")
                addr, size, dt, kind, ndim = take("<QQBBB")
                shape = take(f"<{ndim}Q") if ndim else ()
                if dt >= len(DTYPES) or kind >= len(DATA_KINDS):
                    raise ProgramFormatError(f"data '{name}': bad dtype/kind code {dt}/{kind}")
                prog.add_data(DataAlloc(name, addr, size, tuple(shape), DTYPES[dt],
                                        DATA_KINDS[kind]))
            labels: list[tuple[int, int, str]] = []
            for _ in range(n_labels):
                si, idx, ln = take("<HIB")
                labels.append((si, idx, take_bytes(ln).decode("ascii")))
            debug = None
            if version >= 2:
                tables: list[list[str]] = []
                for _ in range(2):
                    (cnt,) = take("<I")
                    tab = []
                    for _ in range(cnt):
                        (ln,) = take("<H")
                        tab.append(take_bytes(ln).decode("utf-8"))
                    tables.append(tab)
                rows = {}
                for name, nw in counts:
                    o = np.frombuffer(take_bytes(4 * nw), dtype="<i4").astype(np.int32)
                    l = np.frombuffer(take_bytes(2 * nw), dtype="<i2").astype(np.int16)
                    g = np.frombuffer(take_bytes(2 * nw), dtype="<i2").astype(np.int16)
                    rows[name] = (o, l, g)
                debug = DebugTable(tables[0], tables[1], rows)
        except UnicodeDecodeError as exc:
            raise ProgramFormatError(f"bad name encoding near byte {pos}: {exc.reason}") from None
        except IsaError as exc:
            if isinstance(exc, ProgramFormatError):
                raise
            raise ProgramFormatError(f"bad table entry before byte {pos}: {exc}") from None
        if words_offset < pos or words_offset % WORD_BYTES:
            raise ProgramFormatError(f"words_offset {words_offset} is inside the tables "
                                     f"(end {pos}) or not a multiple of {WORD_BYTES}")
        need = words_offset + WORD_BYTES * sum(n for _, n in counts)
        if len(blob) != need:
            raise ProgramFormatError(f"file is {len(blob)} bytes but its tables describe "
                                     f"{need} bytes")
        pos = words_offset
        for name, nw in counts:
            lst = prog.stream(name)
            for i in range(nw):
                try:
                    lst.append(decode_bytes(blob[pos:pos + WORD_BYTES]))
                except IllegalInstruction as exc:
                    raise IllegalInstruction(f"stream {name} instruction {i}: {exc}") from None
                pos += WORD_BYTES
        for si, idx, lab in labels:
            if si >= len(counts):
                raise ProgramFormatError(f"label {lab} refers to stream #{si} of {len(counts)}")
            prog.labels.setdefault(counts[si][0], {})[lab] = idx
        prog.debug = debug
        try:
            prog.validate()
        except IsaError as exc:
            raise ProgramFormatError(str(exc)) from None
        return prog


def program_from_streams(streams: dict[str, Iterable[Instruction]],
                         data: Iterable[DataAlloc] = (), spad_size_bytes: int = 0) -> Program:
    """Convenience constructor: a validated Program from plain lists."""
    prog = Program(spad_size_bytes=spad_size_bytes)
    for d in data:
        prog.add_data(d)
    for name, instrs in streams.items():
        for ins in instrs:
            prog.emit(name, ins)
        prog.stream(name)
    return prog


__all__ = ["Program", "DataAlloc", "DebugTable", "DATA_KINDS", "MAGIC", "FORMAT_VERSION",
           "READ_VERSIONS", "stream_kind",
           "check_stream_instruction", "program_from_streams"]
