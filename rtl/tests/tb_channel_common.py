"""What the two benches of rtl/pim_channel.v share: driving a port, reading every output, and
comparing all of it with the reference (archsim.cosim.ChannelReference, the simulator's own
channel-controller timing nodes and banks) in one cycle.

Compared every driven cycle: the RTL's cycle counter with the cycle the reference is asked
about; ``m_can`` and ``p_can`` (all commands, for each port's target and row) with the
reference's answers; ``p_grant`` / ``m_grant`` (PIM priority); the open bitmaps of both row
buffers, the rows of the memory port's target bank, ``pim_mode`` and ``gemv_busy``.
"""
from __future__ import annotations

from dataclasses import dataclass

from archsim import cosim
from tb_common import check_parameters, job, start_clock_and_reset

CHECKED_PARAMETERS = ["RANKS", "BGS", "BANKS_PER_BG", "DUAL", "HBM3", "REF_PER_BANK", "ROW_W",
                      "K_W", "NCMD", "C_ACT", "C_GEMV", "C_EXIT", "T_RCDRD", "T_RFC",
                      "T_RFCPB", "T_FAW", "FAW_ACTS", "GACT_WEIGHT", "GWRITE", "FILL", "SWITCH"]
SIDES = ("m", "p")


@dataclass
class Offer:
    """What one port carries in a cycle: a command (index into COMMANDS) to a target."""

    valid: int = 0
    cmd: int = 0
    r: int = 0
    g: int = 0
    b: int = 0
    row: int = 0
    k: int = 1

    def target(self):
        return self.r, self.g, self.b, self.row


IDLE = {f"{s}_{f}": 0 for s in SIDES for f in ("valid", "cmd", "rank", "bg", "bank", "row")}
IDLE.update({"m_k": 1, "p_k": 1})


async def setup(dut) -> None:
    """Clock, reset with idle ports, and check the build's parameters against the job."""
    await start_clock_and_reset(dut, IDLE)
    check_parameters(dut, CHECKED_PARAMETERS)


def drive(dut, side: str, o: Offer) -> None:
    """Put ``o`` on port ``side`` (``m`` or ``p``)."""
    getattr(dut, f"{side}_valid").value = o.valid
    getattr(dut, f"{side}_cmd").value = o.cmd
    getattr(dut, f"{side}_rank").value = o.r
    getattr(dut, f"{side}_bg").value = o.g
    getattr(dut, f"{side}_bank").value = o.b
    getattr(dut, f"{side}_row").value = o.row
    getattr(dut, f"{side}_k").value = o.k


def idle(dut) -> None:
    """Both ports idle (no command offered)."""
    dut.m_valid.value = 0
    dut.p_valid.value = 0


def names(mask: int) -> list[str]:
    """Command names of the bits set in ``mask``."""
    from archsim.memory.spec import COMMANDS

    return [c for i, c in enumerate(COMMANDS) if mask >> i & 1]


def check_cycle(dut, ref: "cosim.ChannelReference", t: int, m: Offer, p: Offer,
                ctx: str, offset: int = 0) -> tuple[bool, bool]:
    """Compare every output of the RTL in this (settled) cycle with the reference at cycle
    ``t`` (the RTL's cycle counter reads ``t + offset``); return the grants ``(m_grant,
    p_grant)``. Raises AssertionError naming the cycle, both offers and what differs."""
    got_t = int(dut.cycle.value)
    assert got_t == t + offset, (f"{ctx}: cycle {t}: the RTL's cycle counter is {got_t}, "
                                 f"expected {t + offset}")
    want_m = ref.can_vector(t, *m.target())
    want_p = ref.can_vector(t, *p.target())
    got_m, got_p = int(dut.m_can.value), int(dut.p_can.value)
    where = (f"m {'valid ' if m.valid else ''}{names(1 << m.cmd)} to ra{m.r} bg{m.g} ba{m.b} "
             f"row {m.row}; p {'valid ' if p.valid else ''}{names(1 << p.cmd)} to ra{p.r} "
             f"bg{p.g} k {p.k}")
    for side, got, want in (("m_can", got_m, want_m), ("p_can", got_p, want_p)):
        assert got == want, (
            f"{ctx}: cycle {t}: {side} disagrees with the channel reference: RTL allows "
            f"{names(got & ~want)} the reference does not, refuses {names(want & ~got)} it "
            f"allows ({where})")
    want_pg = bool(p.valid and want_p >> p.cmd & 1)
    want_mg = bool(m.valid and want_m >> m.cmd & 1 and not want_pg)
    got_pg, got_mg = bool(int(dut.p_grant.value)), bool(int(dut.m_grant.value))
    assert (got_mg, got_pg) == (want_mg, want_pg), (
        f"{ctx}: cycle {t}: (m_grant, p_grant) {(got_mg, got_pg)} != reference "
        f"{(want_mg, want_pg)} ({where})")
    mem_rows, pim_rows = ref.open_rows()
    want_mo = sum(1 << i for i, x in enumerate(mem_rows) if x is not None)
    want_po = sum(1 << i for i, x in enumerate(pim_rows) if x is not None)
    got_mo, got_po = int(dut.mem_open.value), int(dut.pim_open.value)
    assert (got_mo, got_po) == (want_mo, want_po), (
        f"{ctx}: cycle {t}: open banks (memory, PIM) {got_mo:#x}, {got_po:#x} != reference "
        f"{want_mo:#x}, {want_po:#x}")
    fb = ref.flat(m.r, m.g, m.b)
    if mem_rows[fb] is not None:
        assert int(dut.m_mem_row.value) == mem_rows[fb], (
            f"{ctx}: cycle {t}: bank {fb}'s memory row {int(dut.m_mem_row.value)} != "
            f"reference {mem_rows[fb]}")
    if pim_rows[fb] is not None:
        assert int(dut.m_pim_row.value) == pim_rows[fb], (
            f"{ctx}: cycle {t}: bank {fb}'s PIM row {int(dut.m_pim_row.value)} != "
            f"reference {pim_rows[fb]}")
    flags = (int(dut.pim_mode.value), int(dut.gemv_busy.value))
    want_flags = (int(ref.ctl.mode_pim), int(ref.gemv_busy(t)))
    assert flags == want_flags, (f"{ctx}: cycle {t}: (pim_mode, gemv_busy) {flags} != "
                                 f"reference {want_flags}")
    return got_mg, got_pg


def commit(ref: "cosim.ChannelReference", t: int, o: Offer) -> None:
    """Issue ``o``'s command in the reference at cycle ``t``."""
    ref.issue(o.cmd, t, o.r, o.g, o.b, o.row, o.k)


def reference() -> "cosim.ChannelReference":
    """The run's channel reference (built after the job's mutation is applied)."""
    job()
    return cosim.ChannelReference(job().cfg)
