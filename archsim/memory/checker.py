"""Independent JEDEC-style timing checker for HBM2 + PIM command logs.

It re-checks a command log from scratch: every row of :data:`archsim.memory.spec.CONSTRAINTS`
(read as data), the row-buffer state rules of :data:`archsim.memory.spec.STATE_RULES`, the
blocked-mode rules and the refresh interval. It shares the constraint table with the scheduler
but none of the scheduler's code (no :mod:`archsim.memory.controller`, :mod:`~.bank`,
:mod:`~.fast` or :mod:`~.system` import): it keeps its own per-node history and compares the
distance between every pair of commands a rule relates.

Input: :class:`archsim.memory.cmdlog.CommandRecord` (or 8-tuples), in any order (sorted
here by cycle, stable). Output: a list of :class:`Violation`, each naming the rule, both
commands and both cycles. Sources: JEDEC JESD235 (HBM2); Newton (MICRO 2020); NeuPIMs
(ASPLOS 2024).
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from itertools import product

from archsim.memory.spec import (COMMANDS, MEM_COMMANDS, NEWTON_ABSENT, NEWTON_NAMES,
                                 PIM_COMMANDS, activation_weight, compile_latency,
                                 latency_names, rules_for)

REFRESH_POSTPONE_LIMIT = 9
"""A rank (all-bank refresh) or a bank (per-bank refresh) may go at most this many tREFI
without refresh (JEDEC: up to 8 REFs postponed)."""
_COL = ("RD", "WR", "RDA", "WRA")
_MEMCMD = ("ACT", "PRE") + _COL


@dataclass(frozen=True)
class Violation:
    """One broken rule.

    Attributes:
        rule: rule name (a :data:`CONSTRAINTS` name or a :data:`STATE_RULES` key).
        command / cycle: the offending (later) command and its cycle (tCK).
        prev_command / prev_cycle: the earlier command it conflicts with (None for state rules
            without one).
        channel, rank, bankgroup, bank: where (-1: not named by the command).
        required_cycles / actual_cycles: for timing rules, the minimum distance and the
            observed one (for a window rule: the window span and the observed span).
        detail: a human-readable explanation.
    """

    rule: str
    command: str
    cycle: int
    prev_command: str | None
    prev_cycle: int | None
    channel: int
    rank: int
    bankgroup: int
    bank: int
    required_cycles: int | None = None
    actual_cycles: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = f"ch{self.channel} ra{self.rank} bg{self.bankgroup} ba{self.bank}"
        if self.prev_command is not None and self.required_cycles is not None:
            return (f"{self.rule}: {self.prev_command}@{self.prev_cycle} -> "
                    f"{self.command}@{self.cycle} on {where}: {self.actual_cycles} cycles < "
                    f"{self.required_cycles} required. {self.detail}").rstrip()
        prev = f" after {self.prev_command}@{self.prev_cycle}" if self.prev_command else ""
        return f"{self.rule}: {self.command}@{self.cycle}{prev} on {where}: {self.detail}"


def _nodes(level: str, ra: int, bg: int, ba: int, R: int, G: int, B: int):
    """Concrete nodes at ``level`` covered by a command naming (ra, bg, ba) (-1 = all)."""
    ras = range(R) if ra < 0 else (ra,)
    if level == "channel":
        return ((),)
    if level == "rank":
        return tuple((r,) for r in ras)
    bgs = range(G) if bg < 0 else (bg,)
    if level == "bankgroup":
        return tuple(product(ras, bgs))
    bas = range(B) if ba < 0 else (ba,)
    return tuple(product(ras, bgs, bas))


def check_log(records, cfg, mode: str | None = None,
              max_violations: int = 10_000) -> list[Violation]:
    """Check a command log against the configuration's timing and protocol rules.

    Args:
        records: iterable of :class:`CommandRecord` or ``(cycle, channel, rank, bankgroup,
            bank, command, row, column)`` tuples.
        cfg: :class:`archsim.config.MachineConfig` the log was produced for.
        mode: row-buffer mode (``dual``/``single``); default ``cfg.pim.row_buffer_mode``.
        max_violations: stop collecting after this many.

    Returns:
        The violations found, in log order (empty list for a valid log).
    """
    mode = mode or cfg.pim.row_buffer_mode
    org = cfg.memory.org
    from archsim.config import timing_rule_violations

    # the configuration's own cross-field rules (a config built without validation may break
    # them; the schedule cannot be legal then)
    bad_cfg = [Violation("CONFIG", "-", 0, None, None, -1, -1, -1, -1, detail=m)
               for m in timing_rule_violations(cfg.memory.timing)]
    if bad_cfg:
        return bad_cfg[:max_violations]
    R, G, B = org.ranks, org.bank_groups, org.banks_per_group
    names = latency_names(cfg)
    rules = list(rules_for(cfg, mode))
    lats = [compile_latency(c.latency, names) for c in rules]
    as_next: dict[str, list[int]] = defaultdict(list)
    as_prev: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(rules):
        for cmd in set(c.next) | (set(c.prev) if c.window else set()):
            as_next[cmd].append(i)
        for cmd in c.prev:
            as_prev[cmd].append(i)
    recs = sorted((tuple(r) for r in records), key=lambda r: r[0])
    if getattr(cfg.pim, "commands", "neupims") == "newton":
        # a Newton machine logs PIM_PRE as PREA (same rules: spec.NEWTON_NAMES) and has no
        # PIM_HEADER / PIM_GEMV / PIM_PRE: those names are invalid records (UNKNOWN) there
        back = {v: k for k, v in NEWTON_NAMES.items()}
        recs = [r[:5] + (back.get(r[5], f"{r[5]} (not a newton command)"
                                  if r[5] in NEWTON_ABSENT else r[5]),) + r[6:] for r in recs]
    by_channel: dict[int, list[tuple]] = defaultdict(list)
    for r in recs:
        by_channel[r[1]].append(r)
    out: list[Violation] = []
    for ch in sorted(by_channel):
        _check_channel(by_channel[ch], ch, cfg, mode, rules, lats, as_next, as_prev,
                       (R, G, B), out, max_violations)
        if len(out) >= max_violations:
            break
    out.sort(key=lambda v: (v.cycle, v.channel))
    return out[:max_violations]


def _check_channel(recs, ch, cfg, mode, rules, lats, as_next, as_prev, dims, out, limit):
    R, G, B = dims
    org = cfg.memory.org
    single = mode == "single"
    tREFI = cfg.memory.timing.tREFI
    deadline: dict = {}                 # (rule index, node) -> (t_prev + latency, cmd, t_prev)
    windows: dict = {}                  # (rule index, node) -> deque[(t, weight, cmd)]
    mem_row: dict = {}                  # (ra, bg, ba) -> open memory row
    pim_row: dict = {}                  # (ra, bg, ba) -> open PIM row
    in_pim = False
    per_bank = cfg.memory.refresh.mode == "per_bank"
    ref_cmd = "REFpb" if per_bank else "REF"
    # the last refresh of each refresh unit: a rank, or a bank under per-bank refresh
    units = list(product(range(R), range(G), range(B))) if per_bank else list(range(R))
    last_ref = {u: (0, None) for u in units}
    last_mode_cmd = None
    node_cache: dict = {}

    def add(rule, cmd, t, ra, bg, ba, prev=None, pt=None, req=None, act=None, detail=""):
        if len(out) < limit:
            out.append(Violation(rule, cmd, t, prev, pt, ch, ra, bg, ba, req, act, detail))

    for rec in recs:
        t, _, ra, bg, ba, cmd, row, col = rec
        if (cmd not in COMMANDS or ra >= R or bg >= G or ba >= B
                or (cmd in _MEMCMD + ("REFpb",) and min(ra, bg, ba) < 0)
                or (cmd == "REF" and ra < 0) or (cmd == "G_ACT" and min(ra, bg) < 0)
                or (cmd in ("ACT", "G_ACT") + _COL and not 0 <= row < org.rows)):
            add("UNKNOWN", str(cmd), t, ra, bg, ba, detail=f"invalid record {rec}")
            continue
        k = col if cmd == "PIM_GEMV" else 0
        # ---- timing rules: this command as the follower
        for i in as_next.get(cmd, ()):
            c = rules[i]
            key = (ra, bg, ba, c.level)
            nodes = node_cache.get(key)
            if nodes is None:
                nodes = node_cache[key] = _nodes(c.level, ra, bg, ba, R, G, B)
            if c.window:
                w = min(activation_weight(cmd, cfg), c.window)
                span = lats[i]
                for nd in nodes:
                    dq = windows.setdefault((i, nd), deque())
                    while dq and dq[0][0] + span <= t:
                        dq.popleft()
                    total = sum(x[1] for x in dq) + w
                    if total > c.window:
                        t0, _, c0 = dq[0]
                        add(c.name, cmd, t, ra, bg, ba, c0, t0, span, t - t0,
                            f"{total} activations (weighted) in a {span}-cycle window, "
                            f"at most {c.window}")
                    dq.append((t, w, cmd))
                continue
            for nd in nodes:
                d = deadline.get((i, nd))
                if d is not None and t < d[0]:
                    add(c.name, cmd, t, ra, bg, ba, d[1], d[2], d[0] - d[2], t - d[2],
                        c.doc.split("(")[0].strip())
                    break
        # ---- timing rules: this command as the predecessor
        for i in as_prev.get(cmd, ()):
            c = rules[i]
            if c.window:
                continue
            lat = lats[i]
            v = t + (lat if isinstance(lat, int) else lat(k))
            key = (ra, bg, ba, c.level)
            nodes = node_cache.get(key)
            if nodes is None:
                nodes = node_cache[key] = _nodes(c.level, ra, bg, ba, R, G, B)
            for nd in nodes:
                d = deadline.get((i, nd))
                if d is None or v > d[0]:
                    deadline[(i, nd)] = (v, cmd, t)
        # ---- mode rules (single row buffer)
        if cmd in ("PIM_ENTER", "PIM_EXIT"):
            if not single:
                add("MODE", cmd, t, ra, bg, ba, detail="mode switches exist only in single "
                    "(blocked) row-buffer mode")
            elif (cmd == "PIM_ENTER") == in_pim:
                add("MODE", cmd, t, ra, bg, ba, last_mode_cmd and last_mode_cmd[0],
                    last_mode_cmd and last_mode_cmd[1],
                    detail="already in PIM mode" if in_pim else "not in PIM mode")
            in_pim = cmd == "PIM_ENTER"
            last_mode_cmd = (cmd, t)
            if cmd == "PIM_ENTER" and any(r is not None for r in mem_row.values()):
                add("MODE", cmd, t, ra, bg, ba, detail="a memory row is still open")
            continue
        if single:
            if in_pim and cmd in _MEMCMD:
                add("MODE", cmd, t, ra, bg, ba, *(last_mode_cmd or (None, None)),
                    detail="memory command while the channel is in PIM mode")
            elif not in_pim and cmd in PIM_COMMANDS:
                add("MODE", cmd, t, ra, bg, ba, *(last_mode_cmd or (None, None)),
                    detail="PIM command while the channel is in memory mode")
        # ---- row-buffer state rules
        if cmd == "ACT":
            b = (ra, bg, ba)
            if mem_row.get(b) is not None or (single and pim_row.get(b) is not None):
                add("ACT_OPEN_BANK", cmd, t, ra, bg, ba,
                    detail=f"row {mem_row.get(b, pim_row.get(b))} is open")
            mem_row[b] = row
        elif cmd == "PRE":
            mem_row[(ra, bg, ba)] = None
        elif cmd in _COL:
            o = mem_row.get((ra, bg, ba))
            if o is None:
                add("COL_CLOSED_BANK", cmd, t, ra, bg, ba, detail="no row open")
            elif o != row:
                add("ROW_MISMATCH", cmd, t, ra, bg, ba,
                    detail=f"accesses row {row} but row {o} is open")
            if cmd in ("RDA", "WRA"):           # the auto-precharge closes the row
                mem_row[(ra, bg, ba)] = None
        elif cmd == "G_ACT":
            for r_, g_, b_ in _nodes("bank", ra, bg, -1, R, G, B):
                b = (r_, g_, b_)
                if pim_row.get(b) is not None or (single and mem_row.get(b) is not None):
                    add("ACT_OPEN_BANK", cmd, t, r_, g_, b_, detail="bank already has an "
                        "open PIM row" if pim_row.get(b) is not None else "memory row open")
                    break
            for nd in _nodes("bank", ra, bg, -1, R, G, B):
                pim_row[nd] = row
        elif cmd in ("COMP", "PIM_GEMV"):
            if not any(r is not None for r in pim_row.values()):
                add("PIM_ROW_CLOSED", cmd, t, ra, bg, ba, detail="no PIM row open")
        elif cmd == "PIM_PRE":
            pim_row.clear()
        elif cmd in ("REF", "REFpb"):
            if cmd != ref_cmd:
                add("REFRESH_MODE", cmd, t, ra, bg, ba,
                    detail=f"{cmd} under refresh.mode {cfg.memory.refresh.mode} (which issues "
                           f"{ref_cmd})")
            for nd in _nodes("bank", ra, bg if cmd == "REFpb" else -1,
                             ba if cmd == "REFpb" else -1, R, G, B):
                if mem_row.get(nd) is not None or pim_row.get(nd) is not None:
                    add("REF_OPEN_BANK", cmd, t, *nd, detail=f"bank {nd} has an open row")
                    break
            done = [(ra, bg, ba)] if cmd == "REFpb" else [ra]
            for u in done:
                if u not in last_ref:
                    continue
                pt, _ = last_ref[u]
                if cfg.memory.refresh.enabled and t - pt > REFRESH_POSTPONE_LIMIT * tREFI:
                    add("REFRESH_INTERVAL", cmd, t, *(u if per_bank else (u, -1, -1)),
                        ref_cmd if _ else None, pt if _ else None,
                        REFRESH_POSTPONE_LIMIT * tREFI, t - pt,
                        f"more than {REFRESH_POSTPONE_LIMIT} x tREFI without refresh")
                last_ref[u] = (t, ref_cmd)
    if cfg.memory.refresh.enabled and recs:
        end = recs[-1][0]
        for u, (pt, had) in last_ref.items():
            if end - pt > REFRESH_POSTPONE_LIMIT * tREFI:
                where = u if per_bank else (u, -1, -1)
                add("REFRESH_INTERVAL", "END", end, *where, had, pt if had else None,
                    REFRESH_POSTPONE_LIMIT * tREFI, end - pt,
                    f"{'bank' if per_bank else 'rank'} {u} went more than "
                    f"{REFRESH_POSTPONE_LIMIT} x tREFI without refresh before the end of "
                    "the log")


def format_violations(violations: list[Violation], limit: int = 20) -> str:
    """Human summary: the count and the first ``limit`` violations, one per line."""
    lines = [f"violations={len(violations)}"]
    lines += [str(v) for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"... and {len(violations) - limit} more")
    return "\n".join(lines)


__all__ = ["Violation", "check_log", "format_violations", "REFRESH_POSTPONE_LIMIT",
           "MEM_COMMANDS"]
