"""Co-simulation of rtl/pim_channel.v with seeded random traffic on both ports.

The reference is the simulator's own interpretation of the timing table for one channel
(:class:`archsim.cosim.ChannelReference`: the channel, rank, bank-group and bank timing nodes
of a ``ChannelController`` composed per command scope as that controller composes them, the
banks' state rules, blocked mode and the refresh policy), built from the configuration that
gave the Verilog its parameters. Every cycle each port is offered a random command (with some
probability one the reference allows now) to a random target -- half of the time one of three
"hot" banks in different ranks and bank groups, so that rules between commands of one bank,
bank group and rank bind often -- and every output is compared (tb_channel_common.check_cycle);
the granted command (the PIM port's when both are granted: PIM priority) is then issued to the
reference in the same cycle.
"""
from __future__ import annotations

import cocotb

from archsim import cosim
from archsim.memory.spec import CMD_INDEX
from tb_channel_common import Offer, check_cycle, commit, drive, reference, setup
from tb_common import end_cycle, job, next_cycle_drive, rng_for, settle


class Traffic:
    """Protocol-aware random offers for one test.

    Each port pursues a goal until it is granted or its patience runs out, like a controller
    waiting for a command's earliest cycle, so most commands issue exactly at the first cycle
    the rules allow (where a one-cycle error shows):

    * memory port: pick a bank (half of the time one of three hot banks in different ranks
      and bank groups); closed: ACT a row; open: RD/WR (or RDA/WRA) of its row, or PRE. Every
      ``refresh_every`` cycles a refresh unit (a rank, or one bank under per-bank refresh) is
      drained: PRE of its open banks, then REF / REFpb. In blocked mode, when the PIM port
      wants PIM_ENTER, every open bank is precharged and the port then rests.
    * PIM port: sequences [PIM_HEADER] [GWRITE] [PIM_ENTER] G_ACT of some bank groups (ranks
      interleaved), COMP steps or PIM_GEMVs, [READRES], PIM_PRE [PIM_EXIT].
    * with probability ``p_random`` a port offers a random command instead of its goal (often
      illegal: the refusal is compared too), and with ``1 - rate`` it offers nothing.
    """

    def __init__(self, rng, ref, m_rate: float, p_rate: float, p_random: float = 0.1,
                 refresh_every: int = 1500, n_rows: int = 4, gemv_share: float = 0.5):
        p = job().parameters
        self.rng, self.ref = rng, ref
        self.m_rate, self.p_rate, self.p_random = m_rate, p_rate, p_random
        self.refresh_every, self.gemv_share = refresh_every, gemv_share
        self.rows = [rng.getrandbits(p["ROW_W"]) for _ in range(n_rows)]
        self.kmax = cosim.max_gemv_k(job().cfg)
        R, G, B = ref.R, ref.G, ref.B
        self.hot = [(i % R, (i * 3 + 1) % G, (i * 5 + 2) % B) for i in range(3)]
        self.m_goal: Offer | None = None
        self.m_wait = 0
        self.p_seq: list[Offer] = []
        self.p_wait = 0
        self.drain: tuple[str, list[int]] | None = None   # (refresh command, flat banks)
        self.next_refresh = refresh_every

    # ---------------------------------------------------------------- helpers
    def _coords(self, fb: int):
        ref = self.ref
        return fb // (ref.G * ref.B), (fb // ref.B) % ref.G, fb % ref.B

    def _random(self, side: str) -> Offer:
        rng, ref = self.rng, self.ref
        r, g, b = rng.randrange(ref.R), rng.randrange(ref.G), rng.randrange(ref.B)
        row = ref.ctl.banks[ref.flat(r, g, b)].open_row
        if row is None or rng.random() < 0.3:
            row = rng.choice(self.rows)
        cmds = cosim.MEM_SIDE if side == "m" else [c for c in ref.names
                                                      if c not in cosim.MEM_SIDE]
        return Offer(1, CMD_INDEX[rng.choice(cmds)], r, g, b, row, rng.randint(1, self.kmax))

    # ---------------------------------------------------------------- memory port
    def _mem_goal(self, t: int) -> Offer | None:
        rng, ref = self.rng, self.ref
        banks = ref.ctl.banks
        wants_enter = (not ref.dual and self.p_seq and ref.names[self.p_seq[0].cmd] == "PIM_ENTER")
        if not ref.dual and (ref.ctl.mode_pim or wants_enter):
            opened = [i for i, bk in enumerate(banks) if bk.open_row is not None]
            if not opened:
                return None                           # blocked mode: memory rests
            return Offer(1, CMD_INDEX["PRE"], *self._coords(rng.choice(opened)))
        if self.drain is None and t >= self.next_refresh:
            self.next_refresh = t + self.refresh_every
            if ref.per_bank_refresh:
                fb = rng.randrange(ref.nb)
                self.drain = ("REFpb", [fb])
            else:
                r = rng.randrange(ref.R)
                n = ref.G * ref.B
                self.drain = ("REF", list(range(r * n, (r + 1) * n)))
        if self.drain is not None:
            cmd, units = self.drain
            opened = [i for i in units if banks[i].open_row is not None]
            if opened:
                return Offer(1, CMD_INDEX["PRE"], *self._coords(rng.choice(opened)))
            return Offer(1, CMD_INDEX[cmd], *self._coords(units[0]))
        if rng.random() < 0.5:
            r, g, b = rng.choice(self.hot)
        else:
            r, g, b = rng.randrange(ref.R), rng.randrange(ref.G), rng.randrange(ref.B)
        row = banks[ref.flat(r, g, b)].open_row
        if row is None:
            return Offer(1, CMD_INDEX["ACT"], r, g, b, rng.choice(self.rows))
        x = rng.random()
        cmd = ("PRE" if x < 0.2 else "RD" if x < 0.55 else "WR" if x < 0.85
               else "RDA" if x < 0.93 else "WRA")
        return Offer(1, CMD_INDEX[cmd], r, g, b, row)

    # ---------------------------------------------------------------- PIM port
    def _pim_sequence(self) -> list[Offer]:
        rng, ref = self.rng, self.ref
        row = rng.choice(self.rows)
        seq: list[Offer] = []

        def add(cmd, r=0, g=0, k=1, row_=0):
            seq.append(Offer(1, CMD_INDEX[cmd], r, g, rng.randrange(ref.B), row_, k))

        if rng.random() < 0.5:
            add("PIM_HEADER")
        if rng.random() < 0.2:
            add("GWRITE")
        if not ref.dual:
            add("PIM_ENTER")
        groups = rng.sample(range(ref.G), rng.randint(1, ref.G))
        for g in groups:
            for r in range(ref.R):
                add("G_ACT", r, g, row_=row)
        if rng.random() < self.gemv_share:
            for _ in range(rng.randint(1, 3)):
                add("PIM_GEMV", k=rng.randint(1, self.kmax))
        else:
            for _ in range(rng.randint(1, 6)):
                add("COMP")
            add("READRES")
        add("PIM_PRE")
        if not ref.dual:
            add("PIM_EXIT")
        return seq

    # ---------------------------------------------------------------- both
    def offers(self, t: int) -> tuple[Offer, Offer]:
        rng = self.rng
        if self.m_goal is None or self.m_wait > 80:
            self.m_goal, self.m_wait = self._mem_goal(t), 0
        if not self.p_seq or self.p_wait > 400:
            self.p_seq, self.p_wait = self._pim_sequence(), 0
        self.m_wait += 1
        self.p_wait += 1
        m = p = None
        if rng.random() < self.p_random:
            m = self._random("m")
        elif self.m_goal is not None and rng.random() < self.m_rate:
            m = self.m_goal
        if rng.random() < self.p_random:
            p = self._random("p")
        elif rng.random() < self.p_rate:
            p = self.p_seq[0]
        m = m or Offer(0, *[0] * 4, row=rng.choice(self.rows), k=1)
        p = p or Offer(0, 0, rng.randrange(self.ref.R), rng.randrange(self.ref.G), 0,
                       rng.choice(self.rows), rng.randint(1, self.kmax))
        if not m.valid:
            m.r, m.g, m.b, m.row = self._random("m").target()
        return m, p

    def granted(self, o: Offer) -> None:
        """``o`` issued: advance the goal of its port."""
        if o is self.m_goal:
            self.m_goal = None
            if self.drain is not None and self.ref.names[o.cmd] in ("REF", "REFpb"):
                self.drain = None
        elif self.p_seq and o is self.p_seq[0]:
            self.p_seq.pop(0)
            self.p_wait = 0


async def _drive(dut, name: str, n_cycles: int, **kw) -> int:
    """Offer :class:`Traffic` (``kw``: its knobs) for ``n_cycles`` cycles; compare every
    output every cycle. Returns the number of commands issued."""
    await setup(dut)
    ref = reference()
    traffic = Traffic(rng_for(name), ref, **kw)
    issued: dict[str, int] = {}
    history: list[str] = []
    for _ in range(n_cycles):
        await next_cycle_drive()
        t = int(dut.cycle.value)
        m, p = traffic.offers(t)
        drive(dut, "m", m)
        drive(dut, "p", p)
        await settle()
        mg, pg = check_cycle(dut, ref, t, m, p, f"{name}; last commands {history[-6:]}")
        for granted, o in ((pg, p), (mg, m)):
            if granted:
                commit(ref, t, o)
                traffic.granted(o)
                cmd = ref.names[o.cmd]
                issued[cmd] = issued.get(cmd, 0) + 1
                history.append(f"{t}:{cmd}@{o.r}.{o.g}.{o.b}")
        await end_cycle()
    job().record(name, stimuli=n_cycles, cycles=n_cycles, issued=sum(issued.values()),
                 by_command=issued)
    return sum(issued.values())


@cocotb.test()
async def test_mixed_traffic_on_both_ports_matches_the_channel_reference(dut):
    """Memory and PIM sequences together: every can-issue bit of both ports, the grants (PIM
    priority when both are granted), both row buffers of every bank, mode and GEMV busy."""
    await _drive(dut, "test_mixed_traffic_on_both_ports_matches_the_channel_reference",
                 job().count(4000), m_rate=0.8, p_rate=0.6)


@cocotb.test()
async def test_memory_traffic_across_ranks_bank_groups_and_banks(dut):
    """Memory commands mostly: tRCD, tRAS, tRC, tRP, tRRD_S/L, tCCD_S/L, tWTR_S/L, tRTW, tWR,
    tRTP, auto-precharge, refresh (REF or REFpb, tRFC) and tFAW of ACTs."""
    await _drive(dut, "test_memory_traffic_across_ranks_bank_groups_and_banks",
                 job().count(3000), m_rate=0.95, p_rate=0.0, refresh_every=900)


@cocotb.test()
async def test_pim_sequences_and_mode_switches(dut):
    """PIM sequences mostly (and, in blocked mode, PIM_ENTER/EXIT around the memory
    precharges): GWRITE, G_ACT (a bank group at a time, tFAW weight), COMP steps, PIM_GEMV
    occupancy, READRES, PIM_PRECHARGE, PIM_HEADER."""
    await _drive(dut, "test_pim_sequences_and_mode_switches", job().count(3000),
                 m_rate=0.3, p_rate=0.95, gemv_share=0.4)


@cocotb.test()
async def test_random_offers_in_every_state_are_refused_like_the_reference(dut):
    """Half of the offers random (mostly illegal commands, wrong rows, wrong refresh kind,
    PIM commands in memory mode): every refusal and every acceptance compared."""
    await _drive(dut, "test_random_offers_in_every_state_are_refused_like_the_reference",
                 job().count(2000), m_rate=0.8, p_rate=0.6, p_random=0.5, refresh_every=700)
