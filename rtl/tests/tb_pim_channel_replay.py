"""Replay of a real command log through rtl/pim_channel.v.

The log (``job().stimulus``, made by :func:`archsim.cosim.channel_log` from a cycle-level run
of a compiled model, or a user's log checked against the configuration) holds every command
the simulator issued on one channel, with its cycle. Each command is offered at its cycle on
its port (memory commands on ``m_*``, PIM and mode commands on ``p_*``) and must be granted:
every command the simulator issued must be legal in the RTL at the cycle it was issued. On
every driven cycle all outputs are also compared with the reference
(:class:`archsim.cosim.ChannelReference`, the simulator's own timing nodes; see
tb_channel_common), the other port showing a random target.

Tightness: when a timing rule (not the one-command-per-cycle bus) held a command back, i.e.
its earliest legal cycle e (by the reference) is after the previous command's cycle + 1, the
command is also shown at cycle e - 1, where the RTL must refuse it, and, when it issued later
than e, at e, where the RTL must allow it (``*_valid`` low: a look, not an issue). The
mutation ``early`` offers the command at e - 1 as if the log said so: the RTL must refuse each
of them, and the run must fail with one disagreement per moved command.

Idle cycles between logged commands are skipped with a timer (no Python per idle cycle).
"""
from __future__ import annotations

import random

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, Timer

from archsim import cosim
from tb_channel_common import Offer, check_cycle, commit, drive, idle, reference, setup
from tb_common import job

MAX_MESSAGES = 8


class Failures:
    """Disagreements of a replay: counted, the first few kept for the report."""

    def __init__(self) -> None:
        self.count = 0
        self.messages: list[str] = []

    def add(self, msg: str) -> None:
        self.count += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(msg)


def _offer(rec) -> tuple[str, Offer]:
    """The port and the offer of one log record ``(cycle, channel, rank, bg, bank, cmd, row,
    column)`` (fields a broadcast command does not name are -1: driven as 0, ignored)."""
    from archsim.memory.spec import COMMANDS

    t, _, r, g, b, cmd, row, col = (int(x) for x in rec)
    name = COMMANDS[cmd]
    side = "m" if name in cosim.MEM_SIDE else "p"
    return side, Offer(1, cmd, max(r, 0), max(g, 0), max(b, 0), max(row, 0),
                       col if name == "PIM_GEMV" else 1)


@cocotb.test()
async def test_every_logged_command_is_legal_in_the_rtl_at_its_cycle(dut):
    """Every command of the log granted at its cycle, every output equal to the reference
    on every driven cycle, every command held back by a timing rule refused one cycle
    before its earliest legal cycle."""
    name = "test_every_logged_command_is_legal_in_the_rtl_at_its_cycle"
    rows, header = cosim.read_channel_log(job().stimulus)
    rows = rows[:min(len(rows), job().count(len(rows)))]   # --scale < 1: a prefix of the log
    early = job().mutation == "early"
    await setup(dut)
    ref = reference()
    rng = random.Random(job().rng_seed(name))
    kmax = cosim.max_gemv_k(job().cfg)
    # the RTL counts cycles from reset; log cycle c is RTL cycle c + offset
    await FallingEdge(dut.clk)
    offset = int(dut.cycle.value)
    cur = 0                                 # log cycle of the current falling edge
    period = job().clock_period_ns
    fails = Failures()
    stats = {"probed_refused": 0, "probed_allowed": 0, "at_earliest": 0, "moved": 0}
    history: list[str] = []
    probed_by: dict[str, int] = {}          # commands shown one cycle before their earliest

    async def goto(c: int) -> None:
        """Advance to the falling edge of log cycle ``c`` (> cur), ports idle between."""
        nonlocal cur
        await FallingEdge(dut.clk)          # the edge ending `cur` issues what it carried
        idle(dut)
        if c - cur > 2:                     # skip the idle cycles without Python per cycle
            await Timer((c - cur - 1) * period - 1, unit="ns")
        if c - cur > 1:
            await FallingEdge(dut.clk)
        cur = c

    def other(side: str) -> Offer:
        r, g, b = rng.randrange(ref.R), rng.randrange(ref.G), rng.randrange(ref.B)
        row = ref.ctl.banks[ref.flat(r, g, b)].open_row
        cmd = rng.randrange(len(ref.names))
        return Offer(0, cmd, r, g, b, rng.randrange(1 << job().parameters["ROW_W"])
                     if row is None else row, rng.randint(1, kmax))

    async def show(c: int, side: str, o: Offer, ctx: str) -> tuple[bool, bool]:
        """Drive ``o`` on ``side`` in log cycle ``c`` (the other port a random look) and
        compare every output; returns the grants. A disagreement is counted, not raised."""
        if c > cur:
            await goto(c)
        x = other("p" if side == "m" else "m")
        mo, po = (o, x) if side == "m" else (x, o)
        drive(dut, "m", mo)
        drive(dut, "p", po)
        await ReadOnly()
        try:
            return check_cycle(dut, ref, c, mo, po, f"{name}; {ctx}; last commands "
                               f"{history[-5:]}", offset)
        except AssertionError as exc:
            fails.add(str(exc))
            return bool(int(dut.m_grant.value)), bool(int(dut.p_grant.value))

    prev = -1
    for i, rec in enumerate(rows):
        t = int(rec[0])
        side, o = _offer(rec)
        cname = ref.names[o.cmd]
        err = ref.state_error(o.cmd, o.r, o.g, o.b, o.row)
        e = ref.earliest(o.cmd, o.r, o.g, o.b)
        if err is not None or t < e:
            fails.add(f"{name}: cycle {t}: logged {cname} to ra{o.r} bg{o.g} ba{o.b} breaks the "
                      f"reference's rules ({err or f'earliest legal cycle {e}'}): the log is "
                      "not a legal schedule of this configuration")
        else:
            if e - 1 > prev:                # a timing rule, not the bus, held it back
                look = Offer(int(early), o.cmd, o.r, o.g, o.b, o.row, o.k)
                mg, pg = await show(e - 1, side, look, f"{cname} one cycle before its "
                                    f"earliest legal cycle {e}")
                if early:
                    stats["moved"] += 1
                    if not (pg if side == "p" else mg):
                        fails.add(f"{name}: cycle {e - 1}: {cname} to ra{o.r} bg{o.g} ba{o.b}, "
                                  f"logged at cycle {t} and moved one cycle before its earliest "
                                  f"legal cycle {e} (mutation early), refused by the RTL")
                stats["probed_refused"] += 1
                probed_by[cname] = probed_by.get(cname, 0) + 1
                if e < t:
                    look = Offer(0, o.cmd, o.r, o.g, o.b, o.row, o.k)
                    await show(e, side, look, f"{cname} at its earliest legal cycle")
                    stats["probed_allowed"] += 1
            stats["at_earliest"] += int(e == t)
        mg, pg = await show(t, side, o, f"logged {cname} (record {i})")
        if not (pg if side == "p" else mg):
            fails.add(f"{name}: cycle {t}: logged {cname} to ra{o.r} bg{o.g} ba{o.b} row {o.row}"
                      f" (record {i}) is not granted by the RTL")
        commit(ref, t, o)
        history.append(f"{t}:{cname}@{o.r}.{o.g}.{o.b}")
        prev = t
        if fails.count > 50 and not early:
            break
    await FallingEdge(dut.clk)
    idle(dut)
    span = int(rows[-1, 0]) - int(rows[0, 0]) + 1
    job().record(name, stimuli=len(rows), cycles=span, disagreements=fails.count,
                 channel=header.get("channel"), source=header.get("source"),
                 probed_by_command=probed_by, **stats)
    assert fails.count == 0, (f"{fails.count} disagreements in {len(rows)} logged commands; "
                              "first: " + " | ".join(fails.messages))
