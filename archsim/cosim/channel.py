"""The PIM channel block (``rtl/pim_channel.v``): its parameters, its ports and its reference.

One source of truth: :func:`channel_verilog_parameters` takes the organisation of one channel
(ranks, bank groups, banks, rows), the row-buffer mode, the memory standard's rule set and the
refresh policy from the configuration, every primitive timing of
:func:`archsim.memory.spec.latency_names`, the tFAW window of
:func:`archsim.memory.spec.compile_table` and the command codes of
:data:`archsim.memory.spec.COMMANDS`. The RTL composes the per-level, per-command-pair
latencies from those primitives itself, so it is an independent implementation of the table;
the harness refuses a configuration whose table has a rule the RTL does not implement
(:data:`RTL_RULES`).

The reference the test benches compare the RTL with, :class:`ChannelReference`, is the
simulator's own interpretation of the table: the :class:`~archsim.memory.bank.TimingNode` /
:class:`~archsim.memory.bank.BankTimingModel` objects of one
:class:`~archsim.memory.controller.ChannelController` (channel, rank, bank-group and bank
nodes), composed per command scope by that controller (``_scope``, ``_record_scope``), and the
banks' own state rules (``BankTimingModel.state_error``). What the controller keeps in its
scheduling code rather than in an object -- the channel-level state rules of
:data:`archsim.memory.spec.STATE_RULES` (PIM_ROW_CLOSED over the channel, MODE,
REFRESH_MODE), which the independent checker (:mod:`archsim.memory.checker`) enforces -- is
composed here from the banks' rules, as the checker does.
"""
from __future__ import annotations

from archsim.cosim.common import CosimError, clog2

CHANNEL_TIMING_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("T_RCDRD", "tRCDRD"), ("T_RCDWR", "tRCDWR"), ("T_RAS", "tRAS"), ("T_RC", "tRC"),
    ("T_RP", "tRP"), ("T_RRD_S", "tRRD_S"), ("T_RRD_L", "tRRD_L"), ("T_CCD_S", "tCCD_S"),
    ("T_CCD_L", "tCCD_L"), ("T_WTR_S", "tWTR_S"), ("T_WTR_L", "tWTR_L"), ("T_RTP_L", "tRTP_L"),
    ("T_WR", "tWR"), ("CL", "CL"), ("CWL", "CWL"), ("BL", "BL"), ("T_RFC", "tRFC"),
    ("T_RFCPB", "tRFCpb"), ("T_RREFD", "tRREFD"), ("GWRITE", "GWRITE"),
    ("READRES", "READRES"), ("FILL", "FILL"), ("SWITCH", "SWITCH"))
"""Verilog parameter -> name of :func:`archsim.memory.spec.latency_names` (cycles of tCK)."""

CHANNEL_COMMAND_PARAMETERS: dict[str, str] = {
    "C_ACT": "ACT", "C_PRE": "PRE", "C_RD": "RD", "C_WR": "WR", "C_RDA": "RDA",
    "C_WRA": "WRA", "C_REF": "REF", "C_REFPB": "REFpb", "C_HEADER": "PIM_HEADER",
    "C_GWRITE": "GWRITE", "C_GACT": "G_ACT", "C_COMP": "COMP", "C_READRES": "READRES",
    "C_GEMV": "PIM_GEMV", "C_PPRE": "PIM_PRE", "C_ENTER": "PIM_ENTER", "C_EXIT": "PIM_EXIT"}
"""Verilog command-code parameter -> command of :data:`archsim.memory.spec.COMMANDS`."""

RTL_RULES: frozenset[str] = frozenset((
    "CMD_BUS", "tCCD_S", "tCCD_S_WR", "tRTW", "tWR_RD_BUS", "tWTR_READRES", "GWRITE_BUS",
    "GWRITE_WTR", "GWRITE_LOAD", "READRES_BUS", "READRES_RTW", "COMP_STEP", "GEMV_BUSY",
    "PIM_ENTER", "PIM_EXIT", "tWTR_S", "tRRD_S", "tFAW", "tPPD", "tRFC", "tRP_REF", "tRC_REF",
    "tRDA_REF", "tWRA_REF", "tRREFD", "tRRD_REFpb", "tRRD_L", "tCCD_L", "tCCD_L_WR", "tWTR_L",
    "tRCDRD", "tRCDWR", "tRAS", "tRC", "tRP", "tWR", "tRTP_L", "tRDA_ACT", "tWRA_ACT",
    "tRFCpb", "tRC_REFpb", "tRP_REFpb", "tRDA_REFpb", "tWRA_REFpb", "tRCDRD_PIM", "tRAS_PIM",
    "tRC_PIM", "tRP_PIM", "tRTP_PIM", "tRC_X", "tRP_X", "tRDA_X", "tWRA_X"))
"""The rows of :data:`archsim.memory.spec.CONSTRAINTS` (by name) ``rtl/pim_channel.v``
implements (functions ``lat_channel``, ``lat_rank``, ``lat_bankgroup``, ``lat_bank`` and the
tFAW window). A configuration whose table has another rule is refused."""

TS_W = 32
"""Width of the RTL's cycle counter and ready-at stamps (bits): runs up to ~4.29 G cycles."""
MEM_SIDE = ("ACT", "PRE", "RD", "WR", "RDA", "WRA", "REF", "REFpb")
"""Commands a test bench drives on the memory port ``m_*``; all others go to ``p_*``."""


def max_gemv_k(cfg) -> int:
    """The largest COMP count ``k`` of one PIM_GEMV: the COMP steps of one DRAM row of 16-bit
    elements (``page_size_bytes / (2 × multipliers_per_bank)``; 32 for HBM2 with 16 lanes).
    Sizes the RTL's ``K_W``; a command log with a larger k is refused."""
    return max(1, cfg.memory.org.page_size_bytes // (2 * cfg.pim.multipliers_per_bank))


def channel_verilog_parameters(cfg) -> dict[str, int]:
    """The Verilog parameters of ``pim_channel`` for the machine ``cfg``.

    Organisation of one channel (``memory.org``), row-buffer mode (``pim.row_buffer_mode``),
    the refresh command the policy issues (``memory.refresh.mode``: REFpb for ``per_bank``),
    the standard's rule set (``HBM3``: the JESD238 rows tRTW and tPPD; their parameters are 0
    otherwise, unused), every primitive timing (:data:`CHANNEL_TIMING_PARAMETERS`), the tFAW
    window of the compiled table and the command codes.

    Raises CosimError when the configuration's table has a rule the RTL does not implement,
    not exactly one tFAW window, or a tRTW row of neither the JESD235 nor the JESD238 form.
    """
    from archsim.memory.spec import CMD_INDEX, COMMANDS, compile_table, latency_names, rules_for

    mode = cfg.pim.row_buffer_mode
    rules = rules_for(cfg, mode)
    unknown = sorted({c.name for c in rules} - RTL_RULES)
    if unknown:
        raise CosimError(f"the constraint table of memory.kind {cfg.memory.kind} has rules "
                         f"rtl/pim_channel.v does not implement: {', '.join(unknown)}")
    rtw = {c.latency for c in rules if c.name == "tRTW"}
    if rtw not in ({"CL + BL - CWL"}, {"tRTW"}):
        raise CosimError(f"memory.kind {cfg.memory.kind}: tRTW rows {sorted(rtw)}; "
                         "pim_channel implements 'CL + BL - CWL' (JESD235) or 'tRTW' (JESD238)")
    hbm3 = rtw == {"tRTW"}
    if hbm3 != any(c.name == "tPPD" for c in rules):
        raise CosimError(f"memory.kind {cfg.memory.kind}: tRTW and tPPD rows of different "
                         "standards; pim_channel implements the JESD235 or the JESD238 set")
    table = compile_table(cfg, mode)
    faw = [(lv, w) for lv, ws in table.windows.items() for w in ws]
    if len(faw) != 1 or faw[0][0] != "rank" or faw[0][1][0] != "tFAW":
        raise CosimError(f"the constraint table has activation windows {faw}; pim_channel "
                         "implements exactly one, tFAW per rank")
    _, _, n_max, span, weights = faw[0][1]
    n = latency_names(cfg)
    org = cfg.memory.org
    p = {"RANKS": org.ranks, "BGS": org.bank_groups, "BANKS_PER_BG": org.banks_per_group,
         "RANK_W": max(1, clog2(org.ranks)), "BG_W": max(1, clog2(org.bank_groups)),
         "BK_W": max(1, clog2(org.banks_per_group)), "DUAL": int(mode == "dual"),
         "HBM3": int(hbm3), "REF_PER_BANK": int(cfg.memory.refresh.mode == "per_bank"),
         "ROW_W": max(1, clog2(org.rows)), "K_W": max(1, clog2(max_gemv_k(cfg) + 1)),
         "TS_W": TS_W, "NCMD": len(COMMANDS), "CMD_W": max(1, clog2(len(COMMANDS)))}
    for key, cmd in CHANNEL_COMMAND_PARAMETERS.items():
        p[key] = CMD_INDEX[cmd]
    for key, name in CHANNEL_TIMING_PARAMETERS:
        p[key] = int(n[name])
    p["T_RTW"] = int(n["tRTW"]) if hbm3 else 0
    p["T_PPD"] = int(n["tPPD"]) if hbm3 else 0
    p.update({"T_FAW": int(span), "FAW_ACTS": int(n_max),
              "ACT_WEIGHT": int(weights[CMD_INDEX["ACT"]]),
              "GACT_WEIGHT": int(weights[CMD_INDEX["G_ACT"]])})
    return p


def channel_expected_ports(params: dict[str, int]) -> dict[str, tuple[str, int]]:
    """Ports of ``pim_channel`` as the test benches drive and read them."""
    p = params
    nb = p["RANKS"] * p["BGS"] * p["BANKS_PER_BG"]
    ports: dict[str, tuple[str, int]] = {"clk": ("input", 1), "rst_n": ("input", 1)}
    for side in ("m", "p"):
        ports.update({f"{side}_valid": ("input", 1), f"{side}_cmd": ("input", p["CMD_W"]),
                      f"{side}_rank": ("input", p["RANK_W"]), f"{side}_bg": ("input", p["BG_W"]),
                      f"{side}_bank": ("input", p["BK_W"]), f"{side}_row": ("input", p["ROW_W"]),
                      f"{side}_k": ("input", p["K_W"])})
    for side in ("m", "p"):
        ports[f"{side}_can"] = ("output", p["NCMD"])
    ports.update({"m_grant": ("output", 1), "p_grant": ("output", 1),
                  "mem_open": ("output", nb), "pim_open": ("output", nb),
                  "m_mem_row": ("output", p["ROW_W"]), "m_pim_row": ("output", p["ROW_W"]),
                  "pim_mode": ("output", 1), "gemv_busy": ("output", 1),
                  "cycle": ("output", p["TS_W"])})
    return ports


class ChannelReference:
    """Legality of every command at one channel: the simulator's own timing nodes and banks.

    Args:
        cfg: the :class:`archsim.config.MachineConfig` (its row-buffer mode and refresh
            policy apply).

    Commands are indices into :data:`archsim.memory.spec.COMMANDS`; a target is ``(rank,
    bank group, bank)`` (the fields a command's scope does not use are ignored); cycles are
    tCK. :meth:`can_issue` never changes the state; :meth:`issue` commits a command (without
    checking: the bench checks first). The compiled table is taken from
    :func:`archsim.memory.bank.compile_table` at construction time, so a co-simulation
    mutation that perturbs it perturbs this reference.
    """

    def __init__(self, cfg) -> None:
        from archsim.memory import bank, controller, spec

        mode = cfg.pim.row_buffer_mode
        self.cfg = cfg
        self.ctl = controller.ChannelController(cfg, 0, bank.compile_table(cfg, mode))
        org = cfg.memory.org
        self.R, self.G, self.B = org.ranks, org.bank_groups, org.banks_per_group
        self.nb = self.R * self.G * self.B
        self.dual = mode == "dual"
        self.per_bank_refresh = cfg.memory.refresh.mode == "per_bank"
        self.names = spec.COMMANDS
        self.scope = tuple(spec.SCOPE[c] for c in spec.COMMANDS)
        self.idx = spec.CMD_INDEX
        self._gemv_cycles = spec.gemv_cycles
        self.gemv_end = 0
        self._early: dict = {}            # (command, scope key) -> earliest, until an issue
        self._state: dict = {}            # (command, scope key, row) -> state rule, likewise

    # ---------------------------------------------------------------- addressing
    def flat(self, r: int, g: int, b: int) -> int:
        """Flat bank index ``(rank × bank_groups + bank group) × banks_per_group + bank``."""
        return (r * self.G + g) * self.B + b

    def _key(self, q: int, r: int, g: int, b: int):
        s = self.scope[q]
        if s == "bank":
            return (q, self.flat(r, g, b))
        if s == "bankgroup":
            return (q, r, g)
        if s == "rank":
            return (q, r)
        return (q,)

    # ---------------------------------------------------------------- queries
    def earliest(self, q: int, r: int = 0, g: int = 0, b: int = 0) -> int:
        """Earliest cycle at which command ``q`` to the target meets every timing rule of
        the nodes it covers (the state rules aside)."""
        key = self._key(q, r, g, b)
        e = self._early.get(key)
        if e is not None:
            return e
        ctl = self.ctl
        if self.scope[q] == "bank":
            e = ctl._e_bank_c(q, key[1])
        else:
            first = self.flat(r, g, b) if self.names[q] == "REFpb" else r
            ranks, bgs, banks = ctl._scope(q, first, g)
            e = ctl.chan.earliest_cached(q)
            for nodes, idx in ((ctl.rank_nodes, ranks), (ctl.bg_nodes, bgs), (ctl.banks, banks)):
                for i in idx:
                    x = nodes[i].earliest_cached(q)
                    if x > e:
                        e = x
        self._early[key] = e
        return e

    def state_error(self, q: int, r: int = 0, g: int = 0, b: int = 0,
                    row: int | None = None) -> str | None:
        """Name of the :data:`~archsim.memory.spec.STATE_RULES` rule command ``q`` to the
        target (with ``row``) would break now, or None (memoised until the next issue)."""
        key = (self._key(q, r, g, b), row)
        try:
            return self._state[key]
        except KeyError:
            err = self._state[key] = self._state_error(q, r, g, b, row)
            return err

    def _state_error(self, q: int, r: int, g: int, b: int, row: int | None) -> str | None:
        name = self.names[q]
        ctl = self.ctl
        banks = ctl.banks
        in_pim = ctl.mode_pim
        if name in ("PIM_ENTER", "PIM_EXIT"):
            if self.dual or (name == "PIM_ENTER") == in_pim:
                return "MODE"
            if name == "PIM_ENTER" and any(bk.open_row is not None for bk in banks):
                return "MODE"
            return None
        scope = self.scope[q]
        if name in ("REF", "REFpb"):
            if (name == "REFpb") != self.per_bank_refresh:
                return "REFRESH_MODE"
            sel = ([banks[self.flat(r, g, b)]] if name == "REFpb"
                   else banks[r * self.G * self.B:(r + 1) * self.G * self.B])
            for bk in sel:
                err = bk.state_error(name)
                if err:
                    return err
            return None
        if scope == "bank":                             # ACT PRE RD WR RDA WRA
            if not self.dual and in_pim:
                return "MODE"
            return banks[self.flat(r, g, b)].state_error(name, row)
        if not self.dual and not in_pim:                # a PIM command in memory mode
            return "MODE"
        if name == "G_ACT":
            base = (r * self.G + g) * self.B
            for bk in banks[base:base + self.B]:
                err = bk.state_error(name)
                if err:
                    return err
            return None
        if name in ("COMP", "PIM_GEMV"):                # a PIM row open in the channel
            if all(bk.state_error(name) for bk in banks):
                return "PIM_ROW_CLOSED"
        return None

    def can_issue(self, q: int, t: int, r: int = 0, g: int = 0, b: int = 0,
                  row: int | None = None) -> bool:
        """True when command ``q`` to the target may issue at cycle ``t``."""
        return self.state_error(q, r, g, b, row) is None and t >= self.earliest(q, r, g, b)

    def can_vector(self, t: int, r: int, g: int, b: int, row: int) -> int:
        """Bit ``q`` set when command ``q`` to the target (and ``row``) may issue at ``t``:
        what the RTL's ``m_can`` / ``p_can`` must show."""
        v = 0
        for q in range(len(self.names)):
            if self.can_issue(q, t, r, g, b, row):
                v |= 1 << q
        return v

    def gemv_busy(self, t: int) -> bool:
        """A PIM_GEMV issued before ``t`` still executes at ``t``
        (:func:`archsim.memory.spec.gemv_cycles`)."""
        return t < self.gemv_end

    def open_rows(self) -> tuple[list, list]:
        """Per flat bank: the open memory row and the open PIM row (None when closed)."""
        bk = self.ctl.banks
        return [x.open_row for x in bk], [x.pim_row for x in bk]

    # ---------------------------------------------------------------- commit
    def issue(self, q: int, t: int, r: int = 0, g: int = 0, b: int = 0, row: int = 0,
              k: int = 0) -> None:
        """Commit command ``q`` to the target at cycle ``t`` into every node it covers, as
        the channel controller records its own commands (``ChannelController._issue``)."""
        ctl = self.ctl
        self._early.clear()
        self._state.clear()
        name = self.names[q]
        if self.scope[q] == "bank" and name != "REFpb":
            fb = self.flat(r, g, b)
            ctl.chan.record(q, t)
            ctl.rank_nodes[r].record(q, t)
            ctl.bg_nodes[fb // self.B].record(q, t)
            ctl.banks[fb].apply(q, t, row)
            return
        if name == "REFpb":
            ctl._record_scope(q, t, self.flat(r, g, b), -1)
        elif name == "REF":
            ctl._record_scope(q, t, r, -1)
        elif name == "G_ACT":
            ctl._record_scope(q, t, r, g, row)
        else:
            ctl._record_scope(q, t, -1, -1, None, k)
            if name in ("PIM_ENTER", "PIM_EXIT"):
                ctl.mode_pim = name == "PIM_ENTER"
            elif name == "PIM_GEMV":
                self.gemv_end = t + self._gemv_cycles(k, self.cfg)


__all__ = ["channel_verilog_parameters", "channel_expected_ports", "ChannelReference",
           "RTL_RULES", "MEM_SIDE", "max_gemv_k", "TS_W"]
