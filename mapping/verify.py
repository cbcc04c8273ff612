"""Checks of a compiled program from its instructions alone: happens-before, graph
dependencies, data races.

**Happens-before.** Instructions of one stream are ordered by the stream. Across streams the
only order comes from semaphores: ``SIGNAL sem, n`` fires when every earlier instruction of its
stream has completed; ``WAIT sem, n`` stalls until ``n`` units are available and consumes them
(isa.spec). For a semaphore with one producer stream and one consumer stream, the units a WAIT
consumes are the next ``n`` units signalled, so the WAIT happens after the SIGNAL that produced
the last of them (and, transitively, after everything before that SIGNAL in its stream).
:func:`happens_before` replays the streams in any order the semaphores allow and keeps, per
instruction, a vector clock: for every stream, the highest instruction index known to have
completed before it.

**Graph dependencies.** For every edge ``u -> v`` of the operator graph, every instruction of
``u`` with role ``out``/``inout`` must happen before every instruction of ``v`` with role
``in``/``inout`` (:func:`check_graph_dependencies`).

**Data races.** Every pair of accesses to overlapping scratchpad bytes, HBM bytes or PIM rows
from different streams, at least one a write, must be ordered by happens-before
(:func:`find_races`). This is quadratic in the accesses per memory range: meant for small
programs (tests, the CLI's ``--verify``).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from isa.program import Program
from mapping.errors import MappingError

_ES = {"fp16": 2, "bf16": 2, "fp32": 4}


@dataclass
class HappensBefore:
    """Vector clocks of a program (see the module docstring).

    Attributes:
        streams: stream names; ``index[name]`` their position in the clocks.
        wait_pos: per stream, int array of the indices of its WAIT instructions (ascending).
        wait_vc: per stream, int array ``[n_waits, n_streams]``: the clock after each WAIT.
    """

    streams: list[str]
    index: dict[str, int]
    wait_pos: dict[str, np.ndarray]
    wait_vc: dict[str, np.ndarray]

    def clock(self, stream: str, i: int) -> np.ndarray:
        """Vector clock of instruction ``i`` of ``stream``: entry ``t`` is the highest index of
        stream ``t`` that completed before it starts (-1: none); own entry ``i - 1``."""
        pos = self.wait_pos[stream]
        k = int(np.searchsorted(pos, i, side="right")) - 1
        vc = self.wait_vc[stream][k].copy() if k >= 0 else np.full(len(self.streams), -1)
        s = self.index[stream]
        vc[s] = max(vc[s], i - 1)
        return vc

    def before(self, a: tuple[str, int], b: tuple[str, int]) -> bool:
        """True when instruction ``a = (stream, index)`` completes before ``b`` starts."""
        if a[0] == b[0]:
            return a[1] < b[1]
        return bool(self.clock(b[0], b[1])[self.index[a[0]]] >= a[1])


def happens_before(program: Program) -> HappensBefore:
    """Replay the semaphores of ``program`` and compute its vector clocks.

    Raises:
        MappingError: a semaphore signalled or awaited by more than one stream (the units a
            WAIT consumes would depend on timing), or a deadlock (names the blocked streams).
    """
    names = list(program.streams)
    idx = {n: k for k, n in enumerate(names)}
    S = len(names)
    prod: dict[int, str] = {}
    cons: dict[int, str] = {}
    for n, instrs in program.streams.items():
        for ins in instrs:
            if ins.mnemonic in ("SIGNAL", "WAIT"):
                sem = ins.codes[0]
                d = prod if ins.mnemonic == "SIGNAL" else cons
                if d.setdefault(sem, n) != n:
                    what = "signalled" if d is prod else "awaited"
                    raise MappingError(f"semaphore {sem} is {what} by streams {d[sem]} and {n}: "
                                       "happens-before is ambiguous")
    # per semaphore: list of (cumulative units after the signal, clock at the signal)
    sig: dict[int, list[tuple[int, np.ndarray]]] = defaultdict(list)
    sig_units: dict[int, int] = defaultdict(int)
    consumed: dict[int, int] = defaultdict(int)
    vc = {n: np.full(S, -1, dtype=np.int64) for n in names}
    pc = {n: 0 for n in names}
    wpos: dict[str, list[int]] = {n: [] for n in names}
    wvc: dict[str, list[np.ndarray]] = {n: [] for n in names}
    progress = True
    while progress:
        progress = False
        for n in names:
            instrs = program.streams[n]
            me = idx[n]
            while pc[n] < len(instrs):
                i = pc[n]
                ins = instrs[i]
                mn = ins.mnemonic
                if mn == "WAIT":
                    sem, cnt = ins.codes
                    need = consumed[sem] + cnt
                    if sig_units[sem] < need:
                        break
                    lst = sig[sem]
                    k = _first_reaching(lst, need)
                    v = vc[n]
                    np.maximum(v, lst[k][1], out=v)
                    consumed[sem] = need
                    v[me] = i
                    wpos[n].append(i)
                    wvc[n].append(v.copy())
                elif mn == "SIGNAL":
                    sem, cnt = ins.codes
                    v = vc[n]
                    v[me] = i - 1
                    sig_units[sem] += cnt
                    snap = v.copy()
                    snap[me] = i
                    sig[sem].append((sig_units[sem], snap))
                pc[n] = i + 1
                progress = True
    blocked = [f"{n} at instruction {pc[n]} ({program.streams[n][pc[n]].mnemonic})"
               for n in names if pc[n] < len(program.streams[n])]
    if blocked:
        raise MappingError("deadlock: streams blocked: " + "; ".join(blocked[:8]))
    return HappensBefore(
        names, idx, {n: np.asarray(wpos[n], dtype=np.int64) for n in names},
        {n: (np.stack(wvc[n]) if wvc[n] else np.zeros((0, S), dtype=np.int64)) for n in names})


def _first_reaching(lst: list[tuple[int, np.ndarray]], units: int) -> int:
    lo, hi = 0, len(lst) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if lst[mid][0] >= units:
            hi = mid
        else:
            lo = mid + 1
    return lo


def check_graph_dependencies(compiled, hb: HappensBefore | None = None) -> list[str]:
    """Check that every edge of ``compiled.graph`` is enforced by the program.

    Args:
        compiled: a :class:`mapping.compiler.CompiledProgram`.
        hb: precomputed :func:`happens_before` of its program.

    Returns:
        a list of violations (empty when every edge is enforced); an edge whose producer has no
        ``out`` instruction or whose consumer has no ``in`` instruction is a violation too.
    """
    hb = hb or happens_before(compiled.program)
    from mapping.builder import ROLES
    out_roles = {ROLES.index("out"), ROLES.index("inout")}
    in_roles = {ROLES.index("in"), ROLES.index("inout")}
    # (op, part) -> {stream: last out index} / {stream: first in index}
    last_out: dict[tuple[int, int], dict[str, int]] = defaultdict(dict)
    first_in: dict[tuple[int, int], dict[str, int]] = defaultdict(dict)
    parts_of: dict[int, set[int]] = defaultdict(set)
    for s, m in compiled.meta.items():
        valid = m.op >= 0
        pairs = np.unique(np.stack([m.op[valid].astype(np.int64),
                                    m.part[valid].astype(np.int64)], axis=1), axis=0)
        for k, pt in pairs.tolist():
            sel = (m.op == k) & (m.part == pt)
            parts_of[k].add(pt)
            o = np.flatnonzero(sel & np.isin(m.role, list(out_roles)))
            if o.size:
                last_out[(k, pt)][s] = int(o.max())
            i = np.flatnonzero(sel & np.isin(m.role, list(in_roles)))
            if i.size:
                first_in[(k, pt)][s] = int(i.min())
    op_index = {o: k for k, o in enumerate(compiled.ops)}
    bad = []
    for u, v in compiled.graph.edges:
        ku, kv = op_index.get(u), op_index.get(v)
        if ku is None or kv is None:
            bad.append(f"edge {u} -> {v}: no instructions of {u if ku is None else v}")
            continue
        checked = False
        for pt in sorted(parts_of[kv]):
            cons = first_in.get((kv, pt), {})
            prods: dict[str, int] = {}
            for p2 in parts_of[ku]:
                if rows_meet(p2, pt):
                    for ps, pi in last_out.get((ku, p2), {}).items():
                        prods[ps] = max(prods.get(ps, -1), pi)
            if not cons or not prods:
                continue
            checked = True
            for ps, pi in prods.items():
                for cs, ci in cons.items():
                    if not hb.before((ps, pi), (cs, ci)):
                        bad.append(f"edge {u} -> {v} (sub-batch {pt}): {ps}[{pi}] does not "
                                   f"happen before {cs}[{ci}]")
        if not checked:
            bad.append(f"edge {u} -> {v}: no out instructions of {u} or in instructions of {v}"
                       " in a common sub-batch")
    return bad


def rows_meet(a: int, b: int) -> bool:
    """Whether instructions with part tags ``a`` and ``b`` (``mapping.codegen.part_tag``) may
    touch the same data: -1 meets everything; else the same sub-batch, the same unit of a
    per-request operator (or either covers all units), and blocks that meet (either covers all
    blocks, or the same block whose chunks meet)."""
    if a < 0 or b < 0:
        return True
    if a >> 40 != b >> 40:
        return False
    ua, ub = (a >> 20) & 0xFFFFF, (b >> 20) & 0xFFFFF
    if ua and ub and ua != ub:   # different pieces of a per-request operator
        return False
    ba, bb = (a >> 10) & 1023, (b >> 10) & 1023
    if ba == 0 or bb == 0:
        return True
    if ba != bb:
        return False
    ca, cb = a & 1023, b & 1023
    return ca == 0 or cb == 0 or ca == cb


def accesses(program: Program, cfg) -> list[tuple[str, int, int, bool, str, int]]:
    """Memory accesses of every instruction: ``(space, lo, hi, is_write, stream, index)``.

    Spaces: ``spad`` (byte ranges), ``hbm`` (byte ranges; strided DMAs as their hull),
    ``pimrow`` (``lo = channel * rows + row`` of a G_ACT, i.e. the PIM computation reading that
    row group; DMAs into the PIM KV region are mapped to the rows they touch).
    """
    from archsim.memory.addrmap import AddressMapping

    org = cfg.memory.org
    banks = org.banks_per_channel
    amap = AddressMapping(cfg.memory)
    kv_ranges = [(d.addr, d.end) for d in program.data if d.kind == "kv"]
    out = []
    for s, instrs in program.streams.items():
        for i, ins in enumerate(instrs):
            m = ins.mnemonic
            if m in ("SIGNAL", "WAIT", "END", "NOP", "PIM_HEADER", "PIM_PRECHARGE"):
                continue
            o = ins.operands()
            acc = _spad_ranges(m, o, banks)
            for lo, n, w in acc:
                out.append(("spad", lo, lo + n, w, s, i))
            if m in ("DMA_LOAD", "DMA_STORE"):
                es = _ES[o["dtype"]]
                w = m == "DMA_STORE"
                for r in range(o["rows"]):
                    lo = o["hbm"] + r * o["stride"]
                    out.append(("hbm", lo, lo + o["cols"] * es, w, s, i))
                    if w and any(a <= lo < e for a, e in kv_ranges):
                        ch, _, _, _, row, _ = amap.decode(lo)
                        out.append(("pimrow", ch * org.rows + row, ch * org.rows + row + 1, w,
                                    s, i))
            elif m == "G_ACT":
                r = o["channel"] * org.rows + o["row"]
                out.append(("pimrow", r, r + 1, False, s, i))
    return out


def _spad_ranges(m: str, o: dict, banks: int) -> list[tuple[int, int, bool]]:
    es = _ES
    if m in ("DMA_LOAD", "DMA_STORE"):
        return [(o["spad"], o["rows"] * o["cols"] * es[o["dtype"]], m == "DMA_LOAD")]
    if m == "SA_LOADW":
        return [(o["w"], o["k"] * o["n"] * es[o["dtype"]], False)]
    if m == "SA_MATMUL":
        n = o["m"] * o["n"] * es[o["out_dtype"]]
        r = [(o["src"], o["m"] * o["k"] * es[o["dtype"]], False), (o["dst"], n, True)]
        if o["acc"]:
            r.append((o["dst"], n, False))
        return r
    if m in ("VU_ADD", "VU_MUL"):
        n = o["rows"] * o["cols"] * es[o["dtype"]]
        nb = (o["cols"] if o["bcast"] else o["rows"] * o["cols"]) * es[o["dtype"]]
        return [(o["a"], n, False), (o["b"], nb, False), (o["dst"], n, True)]
    if m in ("VU_SCALE", "VU_SOFTMAX", "VU_GELU", "VU_SILU", "VU_TRANSPOSE", "VU_LAYERNORM",
             "VU_RMSNORM", "VU_ROPE"):
        n = o["rows"] * o["cols"] * es[o["dtype"]]
        r = [(o["src"], n, False), (o["dst"], n, True)]
        if m == "VU_LAYERNORM":
            r.append((o["params"], 2 * o["cols"] * es[o["dtype"]], False))
        elif m == "VU_RMSNORM":
            r.append((o["gamma"], o["cols"] * es[o["dtype"]], False))
        elif m == "VU_ROPE":
            r.append((o["table"], o["rows"] * 2 * o["half_dim"] * 4, False))
        elif m == "VU_SOFTMAX" and o.get("lse"):
            r.append((o["dst"] + n, o["rows"] * 4, True))
        return r
    if m == "VU_COPY":
        ss = o["src_stride"] or o["cols"]
        ds = o["dst_stride"] or o["cols"]
        r = []
        for k in range(o["rows"]):
            r.append((o["src"] + k * ss * es[o["dtype"]], o["cols"] * es[o["dtype"]], False))
            r.append((o["dst"] + k * ds * es[o["out_dtype"]], o["cols"] * es[o["out_dtype"]],
                      True))
        return r
    if m == "VU_DOT":
        n_in, n_out = (o["cols"], o["rows"]) if o["trans"] == 0 else (o["rows"], o["cols"])
        return [(o["mat"], o["rows"] * o["cols"] * es[o["dtype"]], False),
                (o["vec"], n_in * es[o["dtype"]], False),
                (o["dst"], n_out * es[o["out_dtype"]], True)]
    if m == "VU_TOPK":
        n = o["rows"] * o["cols"]
        return [(o["src"], n * es[o["dtype"]], False), (o["dst"], n * es[o["out_dtype"]], True)]
    if m == "VU_AXPY":
        n = o["rows"] * o["cols"] * es[o["dtype"]]
        r = [(o["x"], n, False), (o["scale"], o["rows"] * es[o["dtype"]], False),
             (o["dst"], n, True)]
        if o["acc"]:
            r.append((o["dst"], n, False))
        return r
    if m == "GWRITE":
        return [(o["src"], o["len"] * es[o["dtype"]], False)]
    if m == "READRES":
        return [(o["dst"], banks * es[o["dtype"]], True)]
    if m == "PIM_GEMV":
        return [(o["dst"], banks * es[o["out_dtype"]], True)]
    return []


def find_races(program: Program, cfg, hb: HappensBefore | None = None,
               limit: int = 20) -> list[str]:
    """Unordered conflicting accesses (see the module docstring); at most ``limit`` reported.

    Returns:
        descriptions ``space [lo, hi): stream[i] (write) vs stream[j] (read)``; empty = none.
    """
    hb = hb or happens_before(program)
    acc = accesses(program, cfg)
    gran = {"spad": 256, "hbm": 1024, "pimrow": 1}
    buckets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for k, (sp, lo, hi, w, s, i) in enumerate(acc):
        g = gran[sp]
        for b in range(lo // g, (hi - 1) // g + 1):
            buckets[(sp, b)].append(k)
    out: list[str] = []
    seen: set[tuple[int, int]] = set()
    clocks: dict[tuple[str, int], np.ndarray] = {}

    def clock(s: str, i: int) -> np.ndarray:
        c = clocks.get((s, i))
        if c is None:
            c = clocks[(s, i)] = hb.clock(s, i)
        return c

    for key, ks in buckets.items():
        for x in range(len(ks)):
            a = acc[ks[x]]
            for y in range(x + 1, len(ks)):
                b = acc[ks[y]]
                if a[4] == b[4] or not (a[3] or b[3]):
                    continue
                if a[0] == "pimrow" and a[3] and b[3]:   # two DMA stores: see their hbm bytes
                    continue
                if a[1] >= b[2] or b[1] >= a[2]:
                    continue
                pair = (min(ks[x], ks[y]), max(ks[x], ks[y]))
                if pair in seen:
                    continue
                seen.add(pair)
                ab = clock(b[4], b[5])[hb.index[a[4]]] >= a[5]
                ba = clock(a[4], a[5])[hb.index[b[4]]] >= b[5]
                if not (ab or ba):
                    out.append(f"{a[0]} [{max(a[1], b[1]):#x}, {min(a[2], b[2]):#x}): "
                               f"{a[4]}[{a[5]}] ({'write' if a[3] else 'read'}) vs "
                               f"{b[4]}[{b[5]}] ({'write' if b[3] else 'read'})")
                    if len(out) >= limit:
                        return out
    return out


__all__ = ["HappensBefore", "happens_before", "check_graph_dependencies", "accesses",
           "find_races", "rows_meet"]
