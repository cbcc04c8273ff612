"""Building per-engine instruction streams with semaphore synchronisation.

The compiler emits instructions in one global order that is a valid sequential execution (every
instruction's inputs were produced by instructions emitted before it). Each instruction goes to
one *stream* (``dma3``, ``sa0``, ``vu5``, ``pim17``; see :mod:`isa.program`); streams run
concurrently and synchronise only through semaphores:

* an **event** is "instruction ``pos`` of stream ``S`` has completed", written ``{S: pos}``
  (a dict of such facts is an *event set*: all of them);
* :meth:`ProgramBuilder.wait` makes a stream wait for an event set. For every producer stream
  ``P`` it uses one semaphore per ordered pair ``(P, consumer)``; a ``SIGNAL sem, 1`` is placed in
  ``P`` right after the producing instruction (inserted retroactively, always after the pair's
  previous signal, so the pair's signals stay in stream order) and the consumer gets
  ``WAIT sem, k`` with ``k`` the number of that pair's signals it has not consumed yet.
  ``SIGNAL`` fires when every earlier instruction of its stream has completed, so waiting for the
  n-th signal of a pair means waiting for everything before it in ``P`` (isa.spec semantics).
* a consumer never waits for what it already waited for (per-pair knowledge).

Because every WAIT refers to signals of instructions emitted earlier in the global order, the
program cannot deadlock: executing the streams in emission order satisfies every WAIT.

Every instruction carries metadata: the operator (graph node) it implements, its *role* for that
operator (``in``: reads the op's graph inputs; ``out``: writes the op's outputs; ``body``;
``sync``), the schedule stage, and the useful multiply-accumulates it performs.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from array import array
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np

from isa.encoding import Instruction, bits_f32, f32_bits
from isa.program import DataAlloc, DebugTable, Program
from isa.spec import BY_MNEMONIC
from mapping.errors import MappingError

ROLES = ("body", "in", "out", "inout", "sync")
"""Instruction roles for an operator: body, in (reads graph inputs), out (writes graph outputs),
inout (both), sync (SIGNAL/WAIT/END)."""
ROLE_CODE = {r: i for i, r in enumerate(ROLES)}
"""Index of each role in :data:`ROLES` (the ``role`` of :meth:`ProgramBuilder.append`)."""
_SYNC = ROLE_CODE["sync"]
_MAX_COUNT = (1 << 16) - 1


class _FastSpec:
    """Per-instruction field converters for building :class:`Instruction` objects quickly."""

    __slots__ = ("spec", "fields")

    def __init__(self, spec) -> None:
        self.spec = spec
        self.fields = []
        for f in spec.fields:
            enum = {n: i for i, n in enumerate(f.enum)} if f.kind == "enum" else None
            aliases = dict(f.aliases) if f.aliases else None
            self.fields.append((f.name, f.kind, enum, aliases, f.lo, f.hi))


_FAST: dict[str, _FastSpec] = {m: _FastSpec(s) for m, s in BY_MNEMONIC.items()}


def _maker(fs: _FastSpec):
    """The conversion of :func:`make_instruction` for one instruction, as a generated
    function of the operand dict (one straight line per field: the loop over the field
    table, unrolled; same conversions and range checks, same codes)."""
    env = {"_f32": f32_bits, "_from": Instruction.from_codes, "_spec": fs.spec, "_str": str}
    lines = ["def make(o):"]
    names = []
    for i, (name, kind, enum, aliases, lo, hi) in enumerate(fs.fields):
        v = f"v{i}"
        names.append(v)
        lines.append(f"    {v} = o[{name!r}]")
        if enum is not None:
            env[f"e{i}"] = enum
            lines.append(f"    if isinstance({v}, _str): {v} = e{i}[{v}]")
        elif kind == "f32":
            lines.append(f"    {v} = _f32(float({v}))")
        elif aliases is not None:
            env[f"a{i}"] = aliases
            lines.append(f"    if isinstance({v}, _str): {v} = a{i}[{v}]")
        lines.append(f"    if not {lo} <= {v} <= {hi}: raise ValueError")
    lines.append(f"    if len(o) != {len(fs.fields)}: raise ValueError")
    lines.append(f"    return _from(_spec, ({', '.join(names)}{',' if len(names) == 1 else ''}))")
    exec("\n".join(lines), env)                                  # noqa: S102 - our own text
    return env["make"]


_MAKERS = {m: _maker(fs) for m, fs in _FAST.items()}
_from_codes = Instruction.from_codes


def make_instruction(mnemonic: str, operands: dict) -> Instruction:
    """Build an :class:`Instruction` with range checks but without the generic conversions of
    its constructor (the compiler's hot path: one generated function per mnemonic, see
    :func:`_maker`). Raises OperandError like the constructor."""
    try:
        return _MAKERS[mnemonic](operands)
    except (KeyError, ValueError, TypeError, OverflowError):
        return Instruction(mnemonic, **operands)  # raises the precise OperandError


class Template:
    """Instructions of one mnemonic with some operands fixed: the compiler's fast path for a
    per-request pattern (a PIM row group's row-GEMVs, a KV append's stores).

    The fixed operands are converted and range-checked once, here, exactly as
    :func:`make_instruction` converts them (enum and alias names to codes, float immediates to
    binary32 bits); the others are integers given per instruction to ``one(*values)`` (in
    field order) or, as columns, to :meth:`many`, and range-checked per call (one
    ``min``/``max`` per column). The instructions are those :func:`make_instruction` builds
    from the same operands (equal codes; ``tests/test_compile_identity.py`` holds the compiled
    bytes fixed, ``tests/test_compile_identity.py::test_template_*`` the conversions).

    Args:
        mnemonic: ISA mnemonic.
        fixed: the fixed operands (names and values as for :func:`make_instruction`).

    Raises:
        isa.errors.OperandError: an unknown or out-of-range fixed operand (here), or a
            per-instruction operand out of range (from ``one`` / :meth:`many`), named
            as by the :class:`Instruction` constructor.
    """

    __slots__ = ("mnemonic", "spec", "names", "fixed", "var", "lohi", "_slots", "one")

    def __init__(self, mnemonic: str, **fixed) -> None:
        spec = BY_MNEMONIC.get(mnemonic)
        if spec is None:
            Instruction(mnemonic)                          # raises the precise OperandError
        self.mnemonic, self.spec = mnemonic, spec
        self.names = spec.field_names
        unknown = [k for k in fixed if k not in self.names]
        if unknown:
            Instruction(mnemonic, **fixed)                 # raises: unknown operand
        codes = {}
        for k, f in enumerate(spec.fields):
            if f.name in fixed:
                # the conversion of make_instruction: a one-field probe of the generated maker
                probe = {g.name: (fixed[g.name] if g is f else _probe_value(g))
                         for g in spec.fields}
                codes[f.name] = make_instruction(mnemonic, probe).codes[k]
        self.fixed = codes
        self.var = tuple(n for n in self.names if n not in fixed)
        self.lohi = tuple((spec.field(n).lo, spec.field(n).hi) for n in self.var)
        # per field: the fixed code, or None for the next per-instruction value
        self._slots = tuple(codes.get(n) for n in self.names)
        self.one = self._one_maker()

    def _one_maker(self):
        """``one(*values)``: the instruction with the per-instruction operands ``values`` (in
        field order), a function generated per template (range checks and the codes tuple
        written out; the fixed codes are constants)."""
        args = [f"v{k}" for k in range(len(self.var))]
        env = {"_from": _from_codes, "_spec": self.spec, "_raise": self._raise}
        it = iter(args)
        items = [next(it) if c is None else repr(int(c)) for c in self._slots]
        check = " and ".join(f"{lo} <= {a} <= {hi}" for a, (lo, hi) in zip(args, self.lohi))
        lines = [f"def one({', '.join(args)}):"]
        if check:
            lines.append(f"    if not ({check}): _raise(({', '.join(args)},))")
        tup = ", ".join(items) + ("," if len(items) == 1 else "")
        lines.append(f"    return _from(_spec, ({tup}))")
        exec("\n".join(lines), env)                          # noqa: S102 - our own text
        return env["one"]

    def many(self, *columns: list[int]) -> list[Instruction]:
        """The instructions of per-instruction operand ``columns`` (one list per field not
        fixed, in field order, equal lengths), in order."""
        if len(columns) != len(self.var) or len({len(c) for c in columns}) > 1:
            raise TypeError(f"{self.mnemonic} template takes columns {self.var}")
        if not columns or not columns[0]:
            return []
        for col, (lo, hi) in zip(columns, self.lohi):
            if min(col) < lo or max(col) > hi:
                for row in zip(*columns):
                    self.one(*row)                         # raises for the bad one
        it = iter(columns)
        cols = [repeat(c) if c is not None else next(it) for c in self._slots]
        spec = self.spec
        return [_from_codes(spec, t) for t in zip(*cols)]

    def _raise(self, values) -> None:
        ops = {**{n: _code_value(self.spec.field(n), c) for n, c in self.fixed.items()},
               **dict(zip(self.var, values))}
        Instruction(self.mnemonic, **ops)                  # raises the precise OperandError
        raise AssertionError("unreachable")                # pragma: no cover


_TEMPLATES: dict[tuple, Template] = {}


def template(mnemonic: str, **fixed) -> Template:
    """The :class:`Template` of ``mnemonic`` with operands ``fixed``, made once per process
    (a template is immutable, and making one converts its operands and generates its ``one``:
    a compilation uses some 150, ~0.1 ms each)."""
    key = (mnemonic, *fixed.items())
    t = _TEMPLATES.get(key)
    if t is None:
        t = _TEMPLATES[key] = Template(mnemonic, **fixed)
    return t


def _probe_value(f):
    """A legal operand value of field ``f`` (to convert another field alone)."""
    return f.enum[0] if f.kind == "enum" else 0.0 if f.kind == "f32" else f.lo


def _code_value(f, code: int):
    """The operand value whose code is ``code`` (enum name, float, int)."""
    if f.kind == "enum":
        return f.enum[code]
    return bits_f32(code) if f.kind == "f32" else code


@dataclass
class StreamMeta:
    """Per-instruction metadata of one final stream (numpy arrays of equal length).

    Attributes:
        op: int32 index into :attr:`BuiltProgram.ops` (-1 for none).
        role: int8 index into :data:`ROLES`.
        stage: int16 index into :attr:`BuiltProgram.stages` (-1 for none).
        macs: int64 useful multiply-accumulates (padding excluded).
        part: int64 rows the instruction works on (``mapping.codegen.part_tag``; -1: none).
    """

    op: np.ndarray
    role: np.ndarray
    stage: np.ndarray
    macs: np.ndarray
    part: np.ndarray


@dataclass
class BuiltProgram:
    """The result of :meth:`ProgramBuilder.finish`: the ISA program and its metadata."""

    program: Program
    meta: dict[str, StreamMeta]
    ops: list[str]
    stages: list[str]
    n_semaphores: int
    op_layers: list[int] = ()   # decoder layer of each op (-1: none)


class ProgramBuilder:
    """Accumulates streams, semaphores and metadata; :meth:`finish` makes the :class:`Program`.

    Use :meth:`context` to set the operator/stage/role that following instructions get.
    """

    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}  # instructions and metadata of each stream
        # (a stream's semaphore pairs and knowledge as a consumer: _Stream.pairs, .kn)
        self._n_sems = 0
        self.ops: list[str] = []
        self.op_layers: list[int] = []           # decoder layer of each op (-1: none)
        self._layer = -1
        self._op_index: dict[str, int] = {}
        self.stages: list[str] = []
        self._stage_index: dict[str, int] = {}
        self._op = -1
        self._stage = -1
        self._part = -1
        # (op, stage, part) of the instructions appended from now on: one object until one of
        # them changes (a stream stores its metadata as runs of one context, see _Stream)
        self._ctx = (-1, -1, -1)

    # ------------------------------------------------------------------ context
    def op_id(self, name: str | None) -> int:
        """Index of operator ``name`` (registered on first use); -1 for None."""
        if name is None:
            return -1
        i = self._op_index.get(name)
        if i is None:
            i = self._op_index[name] = len(self.ops)
            self.ops.append(name)
            self.op_layers.append(self._layer)
        return i

    def set_layer(self, layer: int | None) -> None:
        """Operators registered from now on belong to decoder layer ``layer`` (None: none);
        the program's debug table carries it per instruction."""
        self._layer = -1 if layer is None else int(layer)

    def set_op(self, name: str | None) -> None:
        """Following instructions implement operator ``name``."""
        i = self.op_id(name)
        if i != self._op:
            self._op = i
            self._ctx = (i, self._stage, self._part)

    def set_part(self, part: int) -> None:
        """Following instructions work on the rows of sub-batch ``part`` (-1: all)."""
        if part != self._part:
            self._part = part
            self._ctx = (self._op, self._stage, part)

    @property
    def part(self) -> int:
        """The current part tag (-1: none); see :meth:`set_part`."""
        return self._part

    def set_stage(self, name: str | None) -> None:
        """Following instructions belong to schedule stage ``name``."""
        if name is None:
            i = -1
        else:
            i = self._stage_index.get(name)
            if i is None:
                i = self._stage_index[name] = len(self.stages)
                self.stages.append(name)
        if i != self._stage:
            self._stage = i
            self._ctx = (self._op, i, self._part)

    # ------------------------------------------------------------------ emission
    def stream_len(self, stream: str) -> int:
        """Instructions emitted so far on ``stream`` (sync instructions included)."""
        st = self._streams.get(stream)
        return 0 if st is None else len(st.instrs)

    def emit(self, stream: str, mnemonic: str, role: str = "body", macs: int = 0,
             op: str | None = None, **operands) -> dict[str, int]:
        """Append an instruction to ``stream``.

        Args:
            stream: stream name (``dma0``, ``sa3``, ``vu1``, ``pim12``).
            mnemonic: ISA mnemonic; operands: its fields (checked by :class:`Instruction`).
            role: one of :data:`ROLES`.
            macs: useful multiply-accumulates of this instruction.
            op: operator name overriding the current context.

        Returns:
            the event ``{stream: position}`` of the instruction's completion.

        Raises:
            isa.errors.OperandError: an operand out of range for its field (compiler bug or a
                shape the ISA cannot express; the message names the field).
        """
        ins = make_instruction(mnemonic, operands)
        return {stream: self.append(stream, ins, ROLE_CODE[role], int(macs),
                                    self._op if op is None else self.op_id(op))}

    def append(self, stream: str, ins: Instruction, role: int = 0, macs: int = 0,
               op: int | None = None) -> int:
        """Append the built instruction ``ins`` (from :func:`make_instruction` or a
        :class:`Template`) to ``stream`` with role index ``role`` (into :data:`ROLES`),
        ``macs`` and operator index ``op`` (default: the current one); returns its position."""
        st = self._streams.get(stream)
        if st is None:
            st = self._new_stream(stream)
        st.push(ins, role, macs, self._ctx if op is None or op == self._op
                else (op, self._stage, self._part))
        return len(st.instrs) - 1

    def extend(self, stream: str, instrs: list[Instruction], roles: list[int],
               macs: list[int]) -> int:
        """Append the built instructions ``instrs`` to ``stream`` with role indices ``roles``
        and ``macs`` (one each; lists, or arrays of typecodes ``i`` and ``q``), under the
        current operator, stage and part; returns the position of the first. Same result as
        :meth:`append` of each in turn."""
        st = self._streams.get(stream)
        if st is None:
            st = self._new_stream(stream)
        at = len(st.instrs)
        if st.ctx is not self._ctx:
            st.ctx = self._ctx
            st.ctx_at.append(at)
            st.ctxs += self._ctx
        st.instrs.extend(instrs)
        # arrays extended by arrays: a copy in C (extending by any other iterable converts
        # element by element, several times slower)
        st.role.extend(roles if type(roles) is array else array("i", roles))
        st.macs.extend(macs if type(macs) is array else array("q", macs))
        return at

    def _new_stream(self, stream: str) -> "_Stream":
        st = self._streams[stream] = _Stream()
        return st

    def wait(self, stream: str, events: dict[str, int] | None) -> None:
        """Make ``stream`` wait (from its current end) until every event of ``events`` occurred.

        Events of ``stream`` itself need nothing (streams are in order). Knowledge is
        transitive: waiting for a signal of ``P`` placed after ``P``'s instruction ``q`` also
        teaches ``stream`` everything ``P`` had waited for before ``q``, so later waits for
        those events are not emitted again.

        Raises:
            MappingError: an event of an instruction not emitted yet (a compiler bug).
        """
        if not events:
            return
        streams = self._streams
        st = streams.get(stream)
        if st is None:
            st = self._new_stream(stream)
        kn = st.kn
        known = kn.get
        todo = None                   # the events not known yet, by producer
        for p, q in events.items():
            if q >= 0 and p != stream and known(p, -1) < q:
                if todo is None:
                    todo = [(p, q)]
                else:
                    todo.append((p, q))
        if todo is None:
            return
        if len(todo) > 1:
            todo.sort()
        changed: list[str] = []       # producers whose known index this wait raises
        pairs = st.pairs
        for prod, pos in todo:
            if known(prod, -1) >= pos:    # learned from a producer handled before
                continue
            ps = streams.get(prod)
            if ps is None or pos >= len(ps.instrs):
                raise MappingError(f"internal: wait on {prod}[{pos}] which is not emitted yet")
            pair = pairs.get(prod)
            if pair is None:
                pair = pairs[prod] = _Pair(self._n_sems)
                self._n_sems += 1
            sig = pair.sig
            if sig and sig[-1] >= pos:
                k = bisect_left(sig, pos)
            else:                     # a new signal, after the pair's previous ones
                k = len(sig)
                sig.append(pos)
                post = ps.post.get(pos)
                if post is None:
                    ps.post[pos] = [pair.sem]
                else:
                    post.append(pair.sem)
            need = k + 1 - pair.consumed
            if need > 0:
                pair.consumed = k + 1
                while need > 0:
                    n = min(need, _MAX_COUNT)
                    st.push(pair.wait1 if n == 1 else
                            Instruction.from_codes(_WAIT, (pair.sem, n)), _SYNC, 0, self._ctx)
                    need -= n
            # pos > the known index, so the signal's position sp >= pos raises it
            sp = kn[prod] = sig[k]
            changed.append(prod)
            # what the producer knew when it reached its instruction sp
            hpos = ps.hpos
            if hpos and hpos[0] <= sp:
                # the producer's last record at or before sp (mostly its last one)
                j = len(hpos) - 1 if hpos[-1] <= sp else bisect_right(hpos, sp) - 1
                if j > pair.merged:
                    ps.merge_into(kn, pair.merged, j, stream, changed)
                    pair.merged = j
        # the knowledge now, into the history (see _Stream; changed is not empty: the first
        # producer left in todo raised its known index; repeats in changed allowed)
        mine = st.hpos
        if len(mine) % _CHECKPOINT == 0:
            st.hsnap.append(kn.copy())
        mine.append(len(st.instrs) - 1)
        if len(changed) == 1:         # most WAITs: no dict of keys (~8 % of a prefill compile)
            q = changed[0]
            st.hdelta.append(((q, kn[q]),))
        else:
            keys = dict.fromkeys(changed)
            st.hdelta.append(tuple(zip(keys, map(kn.__getitem__, keys))))

    def knows(self, stream: str, events: dict[str, int]) -> bool:
        """True when ``stream`` already waited for every event of ``events``."""
        st = self._streams.get(stream)
        kn = {} if st is None else st.kn
        return all(p == stream or kn.get(p, -1) >= q for p, q in events.items())

    # ------------------------------------------------------------------ finishing
    def finish(self, data: list[DataAlloc], spad_size_bytes: int,
               stream_order: list[str] | None = None) -> BuiltProgram:
        """Insert the SIGNALs, append END to every stream, and build the :class:`Program`.

        Args:
            data: the data section (HBM allocations), already checked for overlaps.
            spad_size_bytes: scratchpad capacity the program assumes.
            stream_order: order of the streams in the program (default: sorted by kind, index).

        Returns:
            a :class:`BuiltProgram`.
        """
        # (a stream that only waited for what it already knew has no instruction: no stream)
        names = stream_order or sorted((n for n, st in self._streams.items() if st.instrs),
                                       key=_stream_key)
        prog = Program(spad_size_bytes=spad_size_bytes)
        prog.data = list(data)
        meta: dict[str, StreamMeta] = {}
        end = Instruction("END")
        sync = ROLE_CODE["sync"]
        signal = [Instruction.from_codes(_SIGNAL, (s, 1)) for s in range(self._n_sems)]
        for name in names:
            st = self._streams[name]
            src = st.instrs
            mr = np.frombuffer(st.role, dtype=np.int32)
            mm = np.frombuffer(st.macs, dtype=np.int64)
            # the context runs, one value per instruction
            runs = np.diff(np.asarray(st.ctx_at + [len(src)], dtype=np.int64))
            mo, ms, mp = np.repeat(np.asarray(st.ctxs, dtype=np.int64).reshape(-1, 3), runs,
                                   axis=0).T
            post = st.post
            # the signals after source instruction at[k]: cnt[k] of them, in post's order
            at = np.fromiter(post, np.int64, count=len(post))
            cnt = np.fromiter(map(len, post.values()), np.int64, count=len(post))
            # final index of source instruction i: i + signals inserted before it
            extra = np.zeros(len(src) + 1, dtype=np.int64)
            extra[at + 1] = cnt
            dst = np.arange(len(src)) + np.cumsum(extra)[:len(src)]
            n = len(src) + int(cnt.sum()) + 1
            # those of the signals: after their instruction, in order
            sig = (np.repeat(dst[at] + 1, cnt) + np.arange(n - 1 - len(src))
                   - np.repeat(np.cumsum(cnt) - cnt, cnt))
            slots = np.empty(n, dtype=object)
            slots[dst] = np.fromiter(src, object, count=len(src))
            slots[sig] = np.fromiter(map(signal.__getitem__, chain.from_iterable(
                post.values())), object, count=n - 1 - len(src))
            slots[-1] = end
            out: list[Instruction] = slots.tolist()
            m_op = np.full(n, -1, dtype=np.int32)
            m_role = np.full(n, sync, dtype=np.int8)
            m_stage = np.full(n, -1, dtype=np.int16)
            m_macs = np.zeros(n, dtype=np.int64)
            m_part = np.full(n, -1, dtype=np.int64)
            m_op[dst], m_role[dst], m_stage[dst], m_macs[dst], m_part[dst] = mo, mr, ms, mm, mp
            if post:    # a signal has the metadata of the instruction it follows
                src_of = np.repeat(at, cnt)
                m_op[sig], m_stage[sig], m_part[sig] = mo[src_of], ms[src_of], mp[src_of]
            prog.streams[name] = out
            meta[name] = StreamMeta(m_op, m_role, m_stage, m_macs, m_part)
        if self._n_sems > (1 << 16):
            raise MappingError(f"program needs {self._n_sems} semaphores, the ISA has "
                               f"{1 << 16}")
        layer_of = np.asarray(self.op_layers + [-1], dtype=np.int16)   # [-1] maps op -1
        prog.debug = DebugTable(list(self.ops), list(self.stages),
                                {n: (m.op, layer_of[m.op], m.stage) for n, m in meta.items()})
        return BuiltProgram(prog, meta, list(self.ops), list(self.stages), self._n_sems,
                            list(self.op_layers))


class _Pair:
    """The semaphore of one ordered pair of streams, producer to consumer
    (:meth:`ProgramBuilder.wait`): its number ``sem``, the producer positions ``sig`` it is
    signalled after (increasing), the signals the consumer has waited for (``consumed``), the
    last record of the producer's knowledge history (:class:`_Stream`) merged into the
    consumer's knowledge (``merged``), and its ``WAIT sem, 1`` (immutable: one object for all
    of them)."""

    __slots__ = ("sem", "sig", "consumed", "merged", "wait1")

    def __init__(self, sem: int) -> None:
        self.sem = sem
        self.sig: list[int] = []
        self.consumed = 0
        self.merged = -1
        self.wait1 = Instruction.from_codes(_WAIT, (sem, 1))


_CHECKPOINT = 8
"""Knowledge records between two whole copies of a stream's knowledge (:class:`_Stream`)."""


class _Stream:
    """One stream under construction (:class:`ProgramBuilder`).

    Its instructions, their roles and MACs (parallel arrays), their operator, stage and part as
    runs (``ctx_at[r]``: the first instruction of run ``r``, ``ctxs[3r:3r+3]``: its operator,
    stage and part; ``ctx``: the builder's context object of the last run; see
    :class:`StreamMeta`); as a producer, the semaphores to signal after its instructions
    (``post``: position -> semaphores, in insertion order); as a consumer
    (:meth:`ProgramBuilder.wait`), its semaphore pairs by producer (``pairs``), its knowledge
    ``kn`` ``{producer: highest index known complete}`` (never its own name: a stream needs
    no knowledge of itself) and the history of that knowledge at each of its WAITs that
    taught it something: ``hpos[t]`` the stream's last position then, ``hdelta[t]`` the
    entries of ``kn`` raised by that WAIT (with their new values), and every
    :data:`_CHECKPOINT`-th time the whole knowledge (``hsnap[t // _CHECKPOINT]``).

    A stream's knowledge only grows, so its knowledge at ``j`` is any earlier one updated by
    the deltas after it: :meth:`merge_into` merges only the deltas since the knowledge it
    merged before when that is at most :data:`_CHECKPOINT` records back (a few entries each),
    else the checkpoint at or before ``j`` (the whole knowledge, tens of entries) and the
    deltas after it: the same knowledge as merging the whole of it, in fewer steps. (Only the
    order of the raised keys depends on the way; the values, hence the WAITs, do not.)"""

    __slots__ = ("instrs", "role", "macs", "ctx_at", "ctxs", "ctx", "post", "kn", "pairs",
                 "hpos", "hsnap", "hdelta")

    def __init__(self) -> None:
        self.instrs: list[Instruction] = []
        self.role, self.macs = array("i"), array("q")
        self.ctx_at: list[int] = []
        self.ctxs: list[int] = []
        self.ctx: tuple | None = None
        self.post: dict[int, list[int]] = {}
        self.kn: dict[str, int] = {}
        self.pairs: dict[str, _Pair] = {}
        self.hpos: list[int] = []
        self.hsnap: list[dict[str, int]] = []
        self.hdelta: list[tuple[tuple[str, int], ...]] = []

    def push(self, ins: Instruction, role: int, macs: int, ctx: tuple) -> None:
        """Append ``ins`` with role index ``role``, ``macs`` and context ``ctx`` (the
        builder's ``(op, stage, part)`` object)."""
        if self.ctx is not ctx:
            self.ctx = ctx
            self.ctx_at.append(len(self.instrs))
            self.ctxs += ctx
        self.instrs.append(ins)
        self.role.append(role)
        self.macs.append(macs)

    def merge_into(self, kn: dict[str, int], done: int, j: int, consumer: str,
                   raised: list[str]) -> None:
        """Raise the knowledge ``kn`` of stream ``consumer`` to at least this stream's
        knowledge at history record ``j`` (``consumer``'s own entry left out), given it is at
        least the one at ``done`` (``done = -1``: nothing merged before); appends the keys
        raised to ``raised``."""
        known = kn.get
        if j == done + 1 and done >= 0:       # the common case: the next record
            for q, v in self.hdelta[j]:
                if q != consumer and known(q, -1) < v:
                    kn[q] = v
                    raised.append(q)
            return
        c = j - j % _CHECKPOINT
        if c > done and (done < 0 or j - done > _CHECKPOINT):
            # far behind: the checkpoint at or before j, then the deltas after it
            for q, v in self.hsnap[c // _CHECKPOINT].items():
                if q != consumer and known(q, -1) < v:
                    kn[q] = v
                    raised.append(q)
            done = c
        for d in self.hdelta[done + 1:j + 1]:
            for q, v in d:
                if q != consumer and known(q, -1) < v:
                    kn[q] = v
                    raised.append(q)


def _stream_key(name: str) -> tuple[int, int]:
    kinds = {"dma": 0, "link": 1, "sa": 2, "vu": 3, "pim": 4}
    i = 0
    while i < len(name) and not name[i].isdigit():
        i += 1
    return kinds.get(name[:i], 9), int(name[i:] or 0)


_WAIT = BY_MNEMONIC["WAIT"]
_SIGNAL = BY_MNEMONIC["SIGNAL"]

__all__ = ["ProgramBuilder", "BuiltProgram", "StreamMeta", "ROLES", "Template", "template",
           "make_instruction", "ROLE_CODE"]
