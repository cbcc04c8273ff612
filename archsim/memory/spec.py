"""The HBM + PIM command set as data: levels, commands and one table of timing constraints.

Modelled on Ramulator 2's DRAM standards (``hbm2.py``: a list of
``(level, preceding commands, following commands, latency, window)``): the scheduler
(:mod:`archsim.memory.controller`), the stand-alone bank model (:mod:`archsim.memory.bank`) and
the independent checker (:mod:`archsim.memory.checker`) are separate interpreters of
:data:`CONSTRAINTS`. Adding a PIM command is adding rows, not code paths.

Semantics of a row ``Constraint(name, level, prev, next, latency, window, modes)``:
a command of ``next`` may issue at cycle ``t`` only if ``t >= t_p + latency`` for every earlier
command ``p`` of ``prev`` that shares the same node at ``level`` (``channel`` ⊃ ``rank`` ⊃
``bankgroup`` ⊃ ``bank``; a broadcast PIM command belongs to every node it covers).
``window = N > 0`` instead bounds activations: in any span of ``latency`` cycles the weights of
the ``prev``/``next`` commands at one node sum to at most ``N`` (tFAW: four ACTs per rank; a
G_ACT that opens a whole bank group weighs ``banks_per_group``; Newton, MICRO 2020, §IV).
``modes`` lists the row-buffer modes (``dual``/``single``) in which the row applies,
``standards`` the memory standards (``memory.kind``, :mod:`archsim.memory.standards`) it
belongs to (empty: all).

Latency expressions use the timing names of :class:`archsim.config.TimingConfig` and
``BL`` (data-bus cycles of one burst, burst_length / beats per clock), ``GWRITE``
(pim.gwrite_cycles),
``READRES`` (pim.readres_cycles), ``FILL`` (pim.gemv_pipeline_fill), ``SWITCH``
(pim.mode_switch_cycles), ``CSTEP = max(BL, tCCD_S)`` (one COMP step) and ``k`` (the COMP count
carried by a PIM_GEMV command, logged in its column field). All results are cycles of tCK.

Sources: JEDEC JESD235 (HBM2) and JESD238 (HBM3) timing definitions (as tabulated in
Ramulator 2.1's ``python/ramulator/dram/hbm2.py`` / ``hbm3.py`` for REFpb, RDA/WRA, tRTW and
tPPD); Newton (He et al., MICRO 2020) for GWRITE,
G_ACT, COMP, READRES; NeuPIMs (Heo et al., ASPLOS 2024) for PIM_HEADER, PIM_GEMV,
PIM_PRECHARGE and dual row buffers; the NeuPIMs reference simulator for the PIM_GEMV cost
``CSTEP × (max(k, FILL) + 1)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from archsim.errors import ConfigError

LEVELS: tuple[str, ...] = ("channel", "rank", "bankgroup", "bank")
"""Hierarchy of a channel, outermost first (the row and column are addresses, not nodes)."""

MEM_COMMANDS = ("ACT", "PRE", "RD", "WR", "RDA", "WRA", "REF", "REFpb")
PIM_COMMANDS = ("PIM_HEADER", "GWRITE", "G_ACT", "COMP", "READRES", "PIM_GEMV", "PIM_PRE")
MODE_COMMANDS = ("PIM_ENTER", "PIM_EXIT")
COMMANDS: tuple[str, ...] = MEM_COMMANDS + PIM_COMMANDS + MODE_COMMANDS
"""Every command that can appear in a command log. ``RDA``/``WRA``: read/write with
auto-precharge (JEDEC; the closed page policies); ``REF``: all-bank refresh of a rank (REFab);
``REFpb``: refresh of one bank (HBM2 REFSB, HBM3 REFpb; the per-bank refresh policy)."""
CMD_INDEX: dict[str, int] = {c: i for i, c in enumerate(COMMANDS)}

NEWTON_NAMES: dict[str, str] = {"PIM_PRE": "PREA"}
"""Command-log names that differ on a Newton machine (``pim.commands: newton``). Newton closes
the rows a G_ACT opened with the standard all-bank precharge PREA (JESD235); its banks have
one row buffer (``row_buffer_mode: single``, enforced by :class:`archsim.config.PimConfig`),
so PREA closes the very row buffer the table's ``PIM_PRE`` rows describe and every rule of
``PIM_PRE`` (tRAS, tRTP, tRP, tPPD, refresh) is the rule of PREA. The command index stays
``PIM_PRE``'s; only the name in the log, the counts and the checker's input differs."""
NEWTON_ABSENT: tuple[str, ...] = ("PIM_HEADER", "PIM_GEMV", "PIM_PRE")
"""NeuPIMs commands a Newton machine does not have (a log naming one is invalid there)."""


def newton_request_error(cfg, kind: str) -> str | None:
    """Why a PIM request of ``kind`` (a :class:`archsim.memport.PimOpKind` value) cannot run
    on ``cfg``, or None. A Newton machine (``pim.commands: newton``) has no PIM_HEADER and no
    fused PIM_GEMV; its PIM_PRECHARGE request (the program's "close the rows") is sent as the
    all-bank precharge PREA (:data:`NEWTON_NAMES`). Both controllers raise SimulationError
    with this text."""
    if getattr(cfg.pim, "commands", "neupims") == "newton" and kind in ("PIM_HEADER",
                                                                          "PIM_GEMV"):
        return (f"{kind} is a NeuPIMs command; this machine has pim.commands: newton (G_ACT, "
                "COMP, READRES, PREA only)")
    return None


def command_names(cfg) -> tuple[str, ...]:
    """Log name of every command index for ``cfg``: :data:`COMMANDS`, with
    :data:`NEWTON_NAMES` applied when ``cfg.pim.commands == "newton"``."""
    if getattr(cfg.pim, "commands", "neupims") != "newton":
        return COMMANDS
    return tuple(NEWTON_NAMES.get(c, c) for c in COMMANDS)

# Scope of each command: the level of the node it is addressed to. A command addressed to a
# bank group / rank / channel covers every bank below that node.
SCOPE: dict[str, str] = {
    "ACT": "bank", "PRE": "bank", "RD": "bank", "WR": "bank", "RDA": "bank", "WRA": "bank",
    "REF": "rank", "REFpb": "bank", "G_ACT": "bankgroup",
    "PIM_HEADER": "channel", "GWRITE": "channel", "COMP": "channel", "READRES": "channel",
    "PIM_GEMV": "channel", "PIM_PRE": "channel", "PIM_ENTER": "channel", "PIM_EXIT": "channel",
}

ALL = COMMANDS
RDS = ("RD", "RDA")
WRS = ("WR", "WRA")
COLS = RDS + WRS
MEM_ANY = ("ACT", "PRE") + COLS
PIM_ANY = PIM_COMMANDS
ACTS = ("ACT", "G_ACT")
REFS = ("REF", "REFpb")


@dataclass(frozen=True)
class Constraint:
    """One timing rule (see the module docstring for the exact semantics).

    Attributes:
        name: rule name reported by the checker (JEDEC parameter name where there is one).
        level: one of :data:`LEVELS`: the node the two commands must share.
        prev: preceding command names.
        next: following command names.
        latency: expression in timing names (cycles of tCK), see the module docstring.
        window: 0 for a plain minimum distance; N > 0 for "at most N weighted activations in
            any ``latency`` cycles" (tFAW).
        modes: row-buffer modes in which the rule applies.
        standards: ``memory.kind`` values the rule belongs to (empty: every standard).
        doc: what the rule models and its source.
    """

    name: str
    level: str
    prev: tuple[str, ...]
    next: tuple[str, ...]
    latency: str
    window: int = 0
    modes: tuple[str, ...] = ("dual", "single")
    standards: tuple[str, ...] = ()
    doc: str = ""


def _c(name, level, prev, nxt, latency, window=0, modes=("dual", "single"), doc="",
       standards=()):
    return Constraint(name, level, tuple(prev), tuple(nxt), latency, window, tuple(modes),
                      tuple(standards), doc)


HBM2S = ("hbm2", "hbm2e")
CONSTRAINTS: tuple[Constraint, ...] = (
    # ---- channel: command bus and data bus -------------------------------------------------
    _c("CMD_BUS", "channel", ALL, ALL, "1",
       doc="one command per cycle on the channel's command/address bus (issue brief)"),
    _c("tCCD_S", "channel", RDS, RDS + ("READRES",), "max(tCCD_S, BL)",
       doc="column to column; the data bus carries one burst per BL cycles (JESD235)"),
    _c("tCCD_S_WR", "channel", WRS, WRS + ("GWRITE",), "max(tCCD_S, BL)",
       doc="write to write on the shared data bus (JESD235)"),
    _c("tRTW", "channel", RDS, WRS + ("GWRITE",), "CL + BL - CWL", standards=HBM2S,
       doc="read to write: the write data may start only after the read burst has left the "
           "bus (no extra turnaround bubble: DESIGN §3 lists none)"),
    _c("tRTW", "channel", RDS, WRS + ("GWRITE",), "tRTW", standards=("hbm3",),
       doc="read to write turnaround, the HBM3 parameter tRTW (JESD238; Ramulator 2.1 "
           "hbm3.py)"),
    _c("tWR_RD_BUS", "channel", WRS, RDS, "CWL + BL - CL",
       doc="a read of another rank may follow a write once the write data have left the "
           "shared data bus before its read data arrive (no turnaround bubble; HBM2: "
           "negative, i.e. free); tWTR is a rule inside one die (DRAMsim3 write_to_read_o, "
           "Ramulator 2.1 hbm2.py: tWTR_S within a pseudo-channel)"),
    _c("tWTR_READRES", "channel", WRS, ("READRES",), "CWL + BL + tWTR_S",
       doc="READRES reads the results of every bank of the channel: end of write data, then "
           "tWTR_S"),
    _c("GWRITE_BUS", "channel", ("GWRITE",), WRS + ("GWRITE",), "GWRITE",
       doc="GWRITE streams a row's worth of vector over the data bus for pim.gwrite_cycles "
           "(reference: 32 × (tCCD_S + tCCD_L) = 96)"),
    _c("GWRITE_WTR", "channel", ("GWRITE",), RDS + ("READRES",), "CWL + GWRITE + tWTR_S",
       doc="GWRITE is a write: its data end then tWTR_S before a read"),
    _c("GWRITE_LOAD", "channel", ("GWRITE",), ("COMP", "PIM_GEMV"), "CWL + GWRITE",
       doc="COMP/PIM_GEMV read the global buffer only once GWRITE's data are in"),
    _c("READRES_BUS", "channel", ("READRES",), RDS + ("READRES",), "READRES",
       doc="READRES moves the banks' results over the data bus for pim.readres_cycles"),
    _c("READRES_RTW", "channel", ("READRES",), WRS + ("GWRITE",), "CL + READRES - CWL",
       doc="READRES then a write: its data must have left the bus"),
    _c("COMP_STEP", "channel", ("COMP",), ("COMP", "READRES", "PIM_GEMV", "GWRITE"), "CSTEP",
       doc="one COMP column step every max(BL, tCCD_S) cycles in all banks (Newton; NeuPIMs "
           "reference). Separate COMPs model no pipeline fill; the fused PIM_GEMV does"),
    _c("GEMV_BUSY", "channel", ("PIM_GEMV",),
       ("COMP", "READRES", "PIM_GEMV", "GWRITE", "PIM_PRE", "G_ACT"),
       "CSTEP * (max(k, FILL) + 1)",
       doc="PIM_GEMV = k COMPs + READRES fused; the NeuPIMs reference charges "
           "max(BL, tCCD_S) × (max(k, 6) + 1) cycles, 6 = pim.gemv_pipeline_fill. Its result "
           "read-out is part of that occupancy and takes no external data-bus slot"),
    _c("PIM_ENTER", "channel", ("PIM_ENTER",), PIM_ANY, "SWITCH", modes=("single",),
       doc="blocked mode: entering PIM mode costs pim.mode_switch_cycles"),
    _c("PIM_EXIT", "channel", ("PIM_EXIT",), MEM_ANY + REFS, "SWITCH", modes=("single",),
       doc="blocked mode: leaving PIM mode costs pim.mode_switch_cycles"),
    # ---- rank: activation power, refresh ---------------------------------------------------
    _c("tWTR_S", "rank", WRS, RDS, "CWL + BL + tWTR_S",
       doc="end of write data to read of the same rank, different bank group (JESD235; a "
           "read of another rank is not delayed: DRAMsim3, Ramulator 2)"),
    _c("tRRD_S", "rank", ACTS, ACTS, "tRRD_S",
       doc="ACT to ACT, different bank group; a G_ACT counts as an ACT (Newton)"),
    _c("tFAW", "rank", ACTS, ACTS, "tFAW", window=4,
       doc="at most four activations per tFAW per rank; a G_ACT opening a bank group weighs "
           "banks_per_group activations (Newton, MICRO 2020)"),
    _c("tPPD", "rank", ("PRE", "PIM_PRE"), ("PRE", "PIM_PRE"), "tPPD", standards=("hbm3",),
       doc="PRE to PRE in one pseudo-channel (HBM3 tPPD, JESD238; Ramulator 2.1 hbm3.py)"),
    _c("tRFC", "rank", ("REF",), ACTS + ("REF", "PIM_ENTER", "PIM_EXIT"), "tRFC",
       doc="all-bank refresh keeps the rank busy for tRFC (JESD235)"),
    _c("tRP_REF", "rank", ("PRE", "PIM_PRE"), ("REF",), "tRP",
       doc="REF needs every bank of the rank precharged for tRP (JESD235)"),
    _c("tRC_REF", "rank", ACTS, ("REF",), "tRC",
       doc="REF no earlier than tRC after the last activation of the rank (JESD235)"),
    _c("tRDA_REF", "rank", ("RDA",), ("REF",), "tRTP_L + tRP",
       doc="REF after the auto-precharge of an RDA has closed its bank (JESD235; Ramulator "
           "2.1 hbm2.py: nRP + nRTPL)"),
    _c("tWRA_REF", "rank", ("WRA",), ("REF",), "CWL + BL + tWR + tRP",
       doc="REF after the auto-precharge of a WRA (write recovery then tRP)"),
    _c("tRREFD", "rank", ("REFpb",), ACTS + ("REFpb",), "tRREFD",
       doc="REFpb to an activation or another REFpb of a different bank (HBM2 REFSB tRREFD "
           "8 ns, JESD235D via Ramulator 2.1 hbm2.py)"),
    _c("tRRD_REFpb", "rank", ACTS, ("REFpb",), "tRRD_S",
       doc="activation to a REFpb of another bank, as ACT to ACT (Ramulator 2.1 hbm2.py)"),
    # ---- bank group -----------------------------------------------------------------------
    _c("tRRD_L", "bankgroup", ACTS, ACTS, "tRRD_L", doc="ACT to ACT, same bank group"),
    _c("tCCD_L", "bankgroup", RDS, RDS, "max(tCCD_L, BL)",
       doc="column to column, same bank group (JESD235)"),
    _c("tCCD_L_WR", "bankgroup", WRS, WRS, "max(tCCD_L, BL)",
       doc="write to write, same bank group (JESD235)"),
    _c("tWTR_L", "bankgroup", WRS, RDS, "CWL + BL + tWTR_L",
       doc="end of write data to read, same bank group (JESD235)"),
    # ---- bank: the memory row buffer ------------------------------------------------------
    _c("tRCDRD", "bank", ("ACT",), RDS, "tRCDRD", doc="ACT to RD (JESD235)"),
    _c("tRCDWR", "bank", ("ACT",), WRS, "tRCDWR", doc="ACT to WR (JESD235)"),
    _c("tRAS", "bank", ("ACT",), ("PRE",), "tRAS", doc="ACT to PRE (JESD235)"),
    _c("tRC", "bank", ("ACT",), ("ACT",), "tRC", doc="ACT to ACT, same bank (JESD235)"),
    _c("tRP", "bank", ("PRE",), ("ACT", "PIM_ENTER"), "tRP", doc="PRE to ACT (JESD235)"),
    _c("tWR", "bank", ("WR",), ("PRE",), "CWL + BL + tWR",
       doc="end of write data to PRE, write recovery (JESD235)"),
    _c("tRTP_L", "bank", ("RD",), ("PRE",), "tRTP_L",
       doc="RD to PRE of the same bank (JESD235 tRTPL; Ramulator 2.1 hbm2.py Bank RD -> "
           "PREpb nRTPL; DRAMsim3 applies its tRTP to the same bank only). A read constrains "
           "no precharge of another bank"),
    _c("tRDA_ACT", "bank", ("RDA",), ("ACT", "PIM_ENTER"), "tRTP_L + tRP",
       doc="RDA's auto-precharge starts tRTP after it (and no earlier than tRAS after the ACT: "
           "covered by tRC), then tRP to the next ACT (JESD235; Ramulator 2.1 hbm2.py)"),
    _c("tWRA_ACT", "bank", ("WRA",), ("ACT", "PIM_ENTER"), "CWL + BL + tWR + tRP",
       doc="WRA's auto-precharge after the write recovery, then tRP (JESD235)"),
    # ---- bank: per-bank refresh (REFpb / HBM2 REFSB) ------------------------------------
    _c("tRFCpb", "bank", ("REFpb",), ACTS + ("REFpb", "PIM_ENTER", "PIM_EXIT"), "tRFCpb",
       doc="a REFpb keeps its bank busy for tRFCpb (HBM2 tRFCSB 160 ns, JESD235D via "
           "Ramulator 2.1 hbm2.py)"),
    _c("tRC_REFpb", "bank", ACTS, ("REFpb",), "tRC",
       doc="REFpb no earlier than tRC after the bank's last activation"),
    _c("tRP_REFpb", "bank", ("PRE", "PIM_PRE"), ("REFpb",), "tRP",
       doc="REFpb needs its bank precharged for tRP"),
    _c("tRDA_REFpb", "bank", ("RDA",), ("REFpb",), "tRTP_L + tRP",
       doc="REFpb after an RDA's auto-precharge"),
    _c("tWRA_REFpb", "bank", ("WRA",), ("REFpb",), "CWL + BL + tWR + tRP",
       doc="REFpb after a WRA's auto-precharge"),
    # ---- bank: the PIM row buffer (Newton / NeuPIMs) --------------------------------------
    _c("tRCDRD_PIM", "bank", ("G_ACT",), ("COMP", "PIM_GEMV", "READRES"), "tRCDRD",
       doc="G_ACT to the first COMP: the PIM row must be sensed (tRCDRD)"),
    _c("tRAS_PIM", "bank", ("G_ACT",), ("PIM_PRE",), "tRAS", doc="G_ACT to PIM_PRECHARGE"),
    _c("tRC_PIM", "bank", ("G_ACT",), ("G_ACT",), "tRC", doc="G_ACT to G_ACT, same bank"),
    _c("tRP_PIM", "bank", ("PIM_PRE",), ("G_ACT", "PIM_EXIT"), "tRP",
       doc="PIM_PRECHARGE to the next G_ACT"),
    _c("tRTP_PIM", "bank", ("COMP",), ("PIM_PRE",), "tRTP_L",
       doc="last COMP column read to PIM_PRECHARGE (as RD to PRE)"),
    # ---- single (blocked) mode: one row buffer per bank, shared by memory and PIM ----------
    _c("tRC_X", "bank", ACTS, ACTS, "tRC", modes=("single",),
       doc="single row buffer: memory and PIM activations share the bank's tRC"),
    _c("tRP_X", "bank", ("PRE", "PIM_PRE"), ACTS, "tRP", modes=("single",),
       doc="single row buffer: any precharge to any activation"),
    _c("tRDA_X", "bank", ("RDA",), ("G_ACT",), "tRTP_L + tRP", modes=("single",),
       doc="single row buffer: an RDA's auto-precharge, then tRP to a G_ACT"),
    _c("tWRA_X", "bank", ("WRA",), ("G_ACT",), "CWL + BL + tWR + tRP", modes=("single",),
       doc="single row buffer: a WRA's auto-precharge, then tRP to a G_ACT"),
)

# State rules the checker enforces beside the table (named in its reports):
STATE_RULES: dict[str, str] = {
    "ACT_OPEN_BANK": "ACT/G_ACT to a bank whose row buffer (of that kind) is already open",
    "COL_CLOSED_BANK": "RD/WR/RDA/WRA to a bank with no open memory row",
    "ROW_MISMATCH": "RD/WR/RDA/WRA row differs from the bank's open row",
    "PIM_ROW_CLOSED": "COMP/PIM_GEMV with no PIM row open in the channel",
    "REF_OPEN_BANK": "REF/REFpb while a bank it refreshes has an open (memory or PIM) row",
    "MODE": "single mode: memory command inside PIM mode, or PIM command outside it",
    "REFRESH_INTERVAL": "a rank (all-bank refresh) or bank (per-bank refresh) went more than "
                        "9 × tREFI without refresh (JEDEC allows 8 postponed REFs)",
    "REFRESH_MODE": "a refresh command of another refresh policy (REF under per_bank, REFpb "
                    "under all_bank / rank_staggered)",
    "UNKNOWN": "command or field not valid for this configuration",
    "CONFIG": "the configuration breaks a cross-field timing rule (archsim.config.TIMING_RULES)",
}

_EXPR_FUNCS = {"max": max, "min": min}


def latency_names(cfg) -> dict[str, int]:
    """Values of every name a latency expression may use, from a :class:`MachineConfig`.

    Returns cycles of tCK. ``k`` is not included (it is per command).
    """
    t = cfg.memory.timing
    names = {f: getattr(t, f) for f in ("CL", "CWL", "tRCDRD", "tRCDWR", "tRP", "tRAS", "tRFC",
                                         "tREFI", "tRRD_S", "tRRD_L", "tWTR_S", "tWTR_L",
                                         "tFAW", "tWR", "tCCD_S", "tCCD_L", "tRTP_L")}
    for f in ("tRFCpb", "tRREFD", "tRTW", "tPPD"):
        v = getattr(t, f, None)
        if v is not None:
            names[f] = v
    names["tRC"] = t.tRC_cycles
    names["BL"] = cfg.memory.burst_cycles
    names["CSTEP"] = max(names["BL"], t.tCCD_S)
    names["GWRITE"] = cfg.pim.gwrite_cycles
    names["READRES"] = cfg.pim.readres_cycles
    names["FILL"] = cfg.pim.gemv_pipeline_fill
    names["SWITCH"] = cfg.pim.mode_switch_cycles
    return names


def compile_latency(expr: str, names: dict[str, int]) -> int | Callable[[int], int]:
    """Turn a latency expression into an int (cycles), or a function of ``k`` if it uses k.

    Raises ConfigError for a name that is not a timing name.
    """
    code = compile(expr, f"<latency {expr}>", "eval")
    unknown = [n for n in code.co_names if n not in names and n not in _EXPR_FUNCS and n != "k"]
    if unknown:
        raise ConfigError(f"latency expression '{expr}' uses unknown names {unknown}")
    env = dict(_EXPR_FUNCS, **names)
    if "k" in code.co_names:
        return lambda k, _c=code, _e=env: int(eval(_c, {"__builtins__": {}}, dict(_e, k=k)))
    return int(eval(code, {"__builtins__": {}}, env))


def rules_for(cfg, mode: str | None = None) -> tuple[Constraint, ...]:
    """The rows of :data:`CONSTRAINTS` that apply to ``cfg``: its row-buffer mode (default
    ``cfg.pim.row_buffer_mode``) and its memory standard (``cfg.memory.kind``)."""
    mode = mode or cfg.pim.row_buffer_mode
    kind = cfg.memory.kind
    return tuple(c for c in CONSTRAINTS
                 if mode in c.modes and (not c.standards or kind in c.standards))


def activation_weight(cmd: str, cfg) -> int:
    """Weight of a command in an activation window (tFAW): ACT 1, G_ACT banks_per_group."""
    if cmd == "G_ACT":
        return cfg.memory.org.banks_per_group
    return 1


def gemv_cycles(k: int, cfg) -> int:
    """Cycles the NeuPIMs reference charges one PIM_GEMV of ``k`` COMP steps (cycles of tCK).

    ``max(BL, tCCD_S) × (max(k, gemv_pipeline_fill) + 1)``; source: NeuPIMs reference
    simulator (ASPLOS 2024 artifact), DESIGN §3.
    """
    n = latency_names(cfg)
    return n["CSTEP"] * (max(k, n["FILL"]) + 1)


@dataclass(frozen=True)
class CompiledTable:
    """The constraint table evaluated for one configuration and row-buffer mode.

    ``updates[level][p]`` lists ``(q, latency)`` pairs (command indices; latency int or a
    function of k) to apply when command ``p`` issues; ``windows[level]`` lists
    ``(name, cmd indices, N, span, weights)`` activation windows. ``rules`` keeps the source rows.
    """

    mode: str
    names: dict
    updates: dict
    windows: dict
    rules: tuple


def compile_table(cfg, mode: str | None = None,
                  rule_names: set[str] | frozenset[str] | None = None) -> CompiledTable:
    """Evaluate :data:`CONSTRAINTS` for ``cfg`` (and ``mode``, default ``cfg.pim.row_buffer_mode``).

    ``rule_names`` restricts the table to those rules (e.g. the subset an RTL block implements).
    Raises ConfigError for an unknown rule name.
    """
    mode = mode or cfg.pim.row_buffer_mode
    names = latency_names(cfg)
    known = {c.name for c in CONSTRAINTS}
    if rule_names is not None and set(rule_names) - known:
        raise ConfigError(f"unknown timing rules {sorted(set(rule_names) - known)}; "
                          f"known: {sorted(known)}")
    kind = cfg.memory.kind
    rules = tuple(c for c in CONSTRAINTS if mode in c.modes
                  and (not c.standards or kind in c.standards)
                  and (rule_names is None or c.name in rule_names))
    updates: dict = {lv: {i: [] for i in range(len(COMMANDS))} for lv in LEVELS}
    windows: dict = {lv: [] for lv in LEVELS}
    for c in rules:
        lat = compile_latency(c.latency, names)
        if c.window:
            cmds = tuple(sorted({CMD_INDEX[x] for x in c.prev + c.next}))
            weights = {CMD_INDEX[x]: activation_weight(x, cfg) for x in c.prev + c.next}
            windows[c.level].append((c.name, cmds, c.window, lat, weights))
            continue
        for p in c.prev:
            for q in c.next:
                updates[c.level][CMD_INDEX[p]].append((CMD_INDEX[q], lat))
    return CompiledTable(mode, names, updates, windows, rules)


__all__ = ["LEVELS", "COMMANDS", "CMD_INDEX", "SCOPE", "Constraint", "CONSTRAINTS",
           "STATE_RULES", "latency_names", "compile_latency", "compile_table", "CompiledTable",
           "activation_weight", "gemv_cycles", "MEM_COMMANDS", "PIM_COMMANDS", "MODE_COMMANDS",
           "rules_for", "RDS", "WRS", "COLS", "REFS", "NEWTON_NAMES", "NEWTON_ABSENT", "newton_request_error",
           "command_names"]
