"""Timing nodes and the stand-alone per-bank timing model.

:class:`TimingNode` interprets the compiled constraint table for one node of the hierarchy
(Ramulator-style: for every command, the earliest cycle it may issue at this node, plus rolling
activation windows such as tFAW). :class:`BankTimingModel` is one bank: a TimingNode plus its
row-buffer state (a memory row and a PIM row in ``dual`` mode, one shared row in ``single``
mode). The channel controller (:mod:`archsim.memory.controller`) uses one BankTimingModel per
bank; the RTL co-simulation of ``bank_dual_rowbuf`` drives the very same class cycle by cycle
through :meth:`BankTimingModel.can_issue` / :meth:`BankTimingModel.issue`.

All cycles are memory-clock cycles (tCK). Sources: JEDEC JESD235 (HBM2) for the memory
timings; Newton (MICRO 2020) and NeuPIMs (ASPLOS 2024) for the PIM row buffer.
"""
from __future__ import annotations

from collections import deque

from archsim.errors import SimulationError
from archsim.memory.spec import CMD_INDEX, COMMANDS, LEVELS, CompiledTable, compile_table

NCMD = len(COMMANDS)
ALIASES = {"PIM_ACT": "G_ACT", "PIM_PRECHARGE": "PIM_PRE"}


class TimingNode:
    """Earliest-issue bookkeeping of one node (channel, rank, bank group or bank).

    Args:
        table: a :class:`CompiledTable`.
        levels: the constraint levels whose rules this node enforces (e.g. ``("rank",)``).

    ``earliest(q)`` is the first cycle command index ``q`` may issue here given the commands
    recorded so far; ``record(p, t, k)`` notes that command ``p`` issued at cycle ``t``
    (``k``: the COMP count of a PIM_GEMV). Commands must be recorded in non-decreasing cycle
    order.
    """

    __slots__ = ("next", "upd", "upd_i", "upd_f", "wins", "hist", "ec")

    def __init__(self, table: CompiledTable, levels: tuple[str, ...]) -> None:
        self.ec = None           # earliest_cached: values since the last record (or None)
        self.next = [0] * NCMD
        self.upd = [[u for lv in levels for u in table.updates[lv][p]] for p in range(NCMD)]
        # record's working form of upd: constant latencies merged per command (the largest
        # wins, as record takes the max anyway), latency functions kept apart
        self.upd_i, self.upd_f = [], []
        for p in range(NCMD):
            merged: dict[int, int] = {}
            funcs = []
            for q, lat in self.upd[p]:
                if lat.__class__ is int:
                    if lat > merged.get(q, -(1 << 62)):
                        merged[q] = lat
                else:
                    funcs.append((q, lat))
            self.upd_i.append(tuple(merged.items()))
            self.upd_f.append(tuple(funcs))
        self.wins = [w for lv in levels for w in table.windows[lv]]
        self.hist = [deque() for _ in self.wins]

    def earliest(self, q: int) -> int:
        """Earliest cycle (tCK) at which command index ``q`` satisfies this node's rules."""
        e = self.next[q]
        for (name, cmds, n_max, span, weights), hist in zip(self.wins, self.hist):
            w = weights.get(q)
            if w is None:
                continue
            w = min(w, n_max)
            total = 0
            for _, wi in hist:
                total += wi
            for ti, wi in hist:
                if ti + span <= e:
                    total -= wi
                    continue
                if total + w <= n_max:
                    break
                total -= wi
                e = ti + span
        return e

    def earliest_cached(self, q: int) -> int:
        """:meth:`earliest`, memoised until the next :meth:`record` (the only method that
        changes what :meth:`earliest` depends on); same value, faster when asked again."""
        ec = self.ec
        if ec is None:
            ec = self.ec = [-1] * NCMD
        v = ec[q]
        if v < 0:
            v = ec[q] = self.earliest(q)
        return v

    def record(self, p: int, t: int, k: int = 0) -> None:
        """Note that command index ``p`` issued at cycle ``t`` (``k`` for PIM_GEMV)."""
        self.ec = None
        nxt = self.next
        for q, lat in self.upd_i[p]:
            v = t + lat
            if v > nxt[q]:
                nxt[q] = v
        for q, lat in self.upd_f[p]:
            v = t + lat(k)
            if v > nxt[q]:
                nxt[q] = v
        if not self.wins:
            return
        for (name, cmds, n_max, span, weights), hist in zip(self.wins, self.hist):
            w = weights.get(p)
            if w is not None:
                while hist and hist[0][0] + span <= t:
                    hist.popleft()
                hist.append((t, min(w, n_max)))


class BankTimingModel(TimingNode):
    """One DRAM bank with a memory row buffer and a PIM row buffer (dual) or one shared (single).

    Args:
        cfg: a :class:`archsim.config.MachineConfig`.
        dual: True for dual row buffers, False for one shared row buffer (blocked mode);
            default ``cfg.pim.row_buffer_mode == "dual"``.
        levels: constraint levels enforced by this object. Stand-alone use (one bank in
            isolation, e.g. the RTL co-simulation) takes every level (default): all rules
            between this bank's own commands apply (tCCD_L, tRRD, tFAW, command bus, ...).
            The channel controller passes ``("bank",)`` and keeps the other levels itself.
        rule_names: restrict to these rule names of :data:`archsim.memory.spec.CONSTRAINTS`
            (e.g. ``{"tRCDRD", "tRCDWR", "tRP", "tRAS", "tRC", "tCCD_L", ...}`` for an RTL
            block that implements only those counters).

    Commands: ``ACT RD WR RDA WRA PRE`` (memory row buffer; RDA/WRA close it with their
    auto-precharge), ``G_ACT`` (alias ``PIM_ACT``), ``COMP``, ``PIM_GEMV``, ``READRES``,
    ``PIM_PRE`` (alias ``PIM_PRECHARGE``) on the PIM row buffer, plus ``REF`` and ``REFpb``.
    State rules: ACT needs the memory row closed (single mode: both closed); RD/WR/RDA/WRA
    need the memory row open (and equal to ``row`` when given); G_ACT needs the PIM row
    closed (single: both closed); COMP/PIM_GEMV need the PIM row open; REF/REFpb need both
    closed. PRE/PIM_PRE on a closed row are legal no-ops (JESD235).
    """

    __slots__ = ("open_row", "pim_row", "dual", "table")

    def __init__(self, cfg, dual: bool | None = None, levels: tuple[str, ...] = LEVELS,
                 rule_names=None, table: CompiledTable | None = None) -> None:
        if dual is None:
            dual = cfg.pim.row_buffer_mode == "dual"
        if table is None:
            table = compile_table(cfg, "dual" if dual else "single", rule_names)
        super().__init__(table, levels)
        self.table = table
        self.dual = dual
        self.open_row: int | None = None
        self.pim_row: int | None = None

    @staticmethod
    def _index(cmd: str) -> int:
        cmd = ALIASES.get(cmd, cmd)
        try:
            return CMD_INDEX[cmd]
        except KeyError:
            raise SimulationError(f"unknown bank command '{cmd}'; known: "
                                  f"{', '.join(COMMANDS)} (aliases {', '.join(ALIASES)})") from None

    def state_error(self, cmd: str, row: int | None = None) -> str | None:
        """Name of the row-buffer state rule ``cmd`` would break now, or None if it is legal."""
        cmd = ALIASES.get(cmd, cmd)
        if cmd == "ACT":
            if self.open_row is not None or (not self.dual and self.pim_row is not None):
                return "ACT_OPEN_BANK"
        elif cmd in ("RD", "WR", "RDA", "WRA"):
            if self.open_row is None:
                return "COL_CLOSED_BANK"
            if row is not None and row != self.open_row:
                return "ROW_MISMATCH"
        elif cmd == "G_ACT":
            if self.pim_row is not None or (not self.dual and self.open_row is not None):
                return "ACT_OPEN_BANK"
        elif cmd in ("COMP", "PIM_GEMV"):
            if self.pim_row is None:
                return "PIM_ROW_CLOSED"
        elif cmd in ("REF", "REFpb"):
            if self.open_row is not None or self.pim_row is not None:
                return "REF_OPEN_BANK"
        return None

    def earliest_cycle(self, cmd: str) -> int:
        """Earliest cycle (tCK) at which ``cmd`` meets every timing rule of this bank."""
        return self.earliest(self._index(cmd))

    def can_issue(self, cmd: str, cycle: int, row: int | None = None) -> bool:
        """True when ``cmd`` may issue at ``cycle``: state rules hold and every timing rule is
        met (``cycle >= earliest_cycle(cmd)``). Never changes the state."""
        return self.state_error(cmd, row) is None and cycle >= self.earliest(self._index(cmd))

    def issue(self, cmd: str, cycle: int, row: int | None = None, k: int = 0) -> None:
        """Issue ``cmd`` at ``cycle`` (``row`` for ACT/G_ACT, ``k`` COMPs for PIM_GEMV).

        Raises SimulationError naming the broken rule when :meth:`can_issue` is False.
        """
        q = self._index(cmd)
        cmd = COMMANDS[q]
        err = self.state_error(cmd, row)
        if err is not None:
            raise SimulationError(f"{cmd} at cycle {cycle} breaks {err}")
        e = self.earliest(q)
        if cycle < e:
            raise SimulationError(f"{cmd} at cycle {cycle} is too early: timing allows it "
                                  f"from cycle {e}")
        self.apply(q, cycle, row, k)

    def apply(self, q: int, cycle: int, row: int | None = None, k: int = 0) -> None:
        """Commit command index ``q`` at ``cycle`` without checking (the controller checks)."""
        self.record(q, cycle, k)
        cmd = COMMANDS[q]
        if cmd == "ACT":
            self.open_row = 0 if row is None else row
        elif cmd in ("PRE", "RDA", "WRA"):       # RDA/WRA: the auto-precharge closes it
            self.open_row = None
        elif cmd == "G_ACT":
            self.pim_row = 0 if row is None else row
        elif cmd == "PIM_PRE":
            self.pim_row = None


__all__ = ["TimingNode", "BankTimingModel", "NCMD"]
