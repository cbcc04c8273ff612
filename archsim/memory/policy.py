"""The controller's policies, written once: scheduler, page policy, refresh, write drain, PIM.

Each policy unit is a few small pure functions of plain integers (Ramulator 2's plug-ins as
functions: its scheduler, row policy and refresh manager): the reference controller
(:mod:`archsim.memory.controller`) calls them as they are, the compiled kernel
(:mod:`archsim.memory.kernel`) calls the very same functions compiled by numba
(:func:`archsim.memory.kernel.jit.njit_inline`). What differs between the two engines is only
how they walk their queues (Python objects vs flat arrays); every decision is taken here.
The policy names of the configuration map to the integer codes below
(:func:`codes`). All cycles are memory-clock cycles (tCK).

Sources: FR-FCFS, Rixner et al., ISCA 2000; FR-FCFS+Cap, Mutlu & Moscibroda, MICRO 2007 and
Ramulator's FRFCFS_Cap scheduler (cap 16); closed page with auto-precharge, JEDEC RDA/WRA and
DRAMsim3's CLOSE_PAGE (every transaction a READ_PRECHARGE/WRITE_PRECHARGE); the timeout row
policy, Ramulator (Kim et al., CAL 2016) ``Timeout`` (50 cycles); write drain between
watermarks, Ramulator 2.1 ``controller_base.cpp`` ``set_write_mode`` (0.8 / 0.2); refresh
orders, DRAMsim3 ``refresh.cc`` (RANK_LEVEL_SIMULTANEOUS, RANK_LEVEL_STAGGERED,
BANK_LEVEL_STAGGERED: bank group fastest, "as per JEDEC").
"""
from __future__ import annotations

# scheduler
FR_FCFS, FCFS, FR_FCFS_CAP = 0, 1, 2
# page policy
PAGE_OPEN, PAGE_CLOSED, PAGE_CLOSED_ADAPTIVE, PAGE_TIMEOUT = 0, 1, 2, 3
# refresh mode
REF_ALL_BANK, REF_RANK_STAGGERED, REF_PER_BANK = 0, 1, 2
# write policy
WRITE_MIXED, WRITE_DRAIN = 0, 1

# what a bank does next (bank_pick)
PICK_HIT, PICK_OLDEST, PICK_PRE, PICK_ACT, PICK_NONE = 0, 1, 2, 3, 4

SCHEDULERS = {"fr_fcfs": FR_FCFS, "fcfs": FCFS, "fr_fcfs_cap": FR_FCFS_CAP}
PAGE_POLICIES = {"open": PAGE_OPEN, "closed": PAGE_CLOSED,
                 "closed_adaptive": PAGE_CLOSED_ADAPTIVE, "timeout": PAGE_TIMEOUT}
REFRESH_MODES = {"all_bank": REF_ALL_BANK, "rank_staggered": REF_RANK_STAGGERED,
                 "per_bank": REF_PER_BANK}
WRITE_POLICIES = {"mixed": WRITE_MIXED, "drain": WRITE_DRAIN}


def codes(cfg) -> dict[str, int]:
    """Integer parameters of every policy for a :class:`archsim.config.MachineConfig`:
    scheduler, row_hit_cap, page, timeout, refresh, write, write_queue, write_hi, write_lo
    (watermarks as burst counts), pim_depth."""
    ctl = cfg.memory.controller
    wq = ctl.write_queue_bursts
    return {
        "scheduler": SCHEDULERS[ctl.scheduler], "row_hit_cap": ctl.hit_cap,
        "page": PAGE_POLICIES[ctl.page_policy], "timeout": ctl.timeout_cycles,
        "refresh": REFRESH_MODES[cfg.memory.refresh.mode],
        "write": WRITE_POLICIES[ctl.write_policy], "write_queue": wq,
        "write_hi": write_threshold(wq, ctl.write_high_fraction),
        "write_lo": write_threshold(wq, ctl.write_low_fraction),
        "pim_depth": cfg.pim.command_queue_depth,
    }


# ---- scheduler -------------------------------------------------------------------------------
def bank_pick(scheduler: int, cap: int, is_open: int, streak: int, hit_found: int,
              oldest_hits: int) -> int:
    """What one bank serves next, from its queue of the current direction (non-empty).

    Args:
        scheduler: FR_FCFS, FCFS or FR_FCFS_CAP.
        cap: FR_FCFS_CAP's cap (column commands of an open row served before FCFS).
        is_open: 1 when the bank's memory row is open.
        streak: column commands served on the open row since its ACT.
        hit_found: 1 when some queued burst hits the open row.
        oldest_hits: 1 when the oldest queued burst hits the open row.

    Returns PICK_HIT (column command for the oldest hitting burst), PICK_OLDEST (column
    command for the oldest burst, which hits), PICK_PRE (close the row: the oldest needs
    another) or PICK_ACT (open the oldest burst's row).
    """
    if not is_open:
        return PICK_ACT
    if hit_found and (scheduler == FR_FCFS or (scheduler == FR_FCFS_CAP and streak < cap)):
        return PICK_HIT
    if oldest_hits:
        return PICK_OLDEST
    return PICK_PRE


def key_class(scheduler: int, is_column: int) -> int:
    """Priority class of a memory command among the banks (lower first at equal cycles; the
    age of the burst breaks ties): FR-FCFS and its cap put column commands (row hits) before
    row commands, FCFS orders by age alone. Refresh is class 0, PIM class 1."""
    if scheduler == FCFS:
        return 3
    return 2 if is_column else 3


# ---- page policy -----------------------------------------------------------------------------
def auto_precharge(page: int, other_hits_queued: int) -> int:
    """1 when a column command closes its row (RDA/WRA instead of RD/WR): always under the
    closed page policy, under closed_adaptive when no other queued burst hits the row."""
    if page == PAGE_CLOSED:
        return 1
    if page == PAGE_CLOSED_ADAPTIVE and not other_hits_queued:
        return 1
    return 0


def idle_close_cycle(page: int, timeout: int, last_column: int) -> int:
    """Cycle from which the timeout page policy precharges an open row with no queued burst:
    its last column command (or its ACT) + ``timeout``; -1 for the other policies (an idle
    row stays open)."""
    if page == PAGE_TIMEOUT:
        return last_column + timeout
    return -1


# ---- write drain -----------------------------------------------------------------------------
WATERMARK_SCALE = 1_000_000
"""Watermarks are kept as ``fraction × queue × WATERMARK_SCALE`` (integers), so the kernel
compares ``writes × WATERMARK_SCALE`` with them exactly as Ramulator 2 compares ``writes`` with
``fraction × queue`` in floating point (a fraction is exact to 1e-6)."""


def write_threshold(queue: int, fraction: float) -> int:
    """A watermark in units of 1 / WATERMARK_SCALE bursts: ``round(fraction × 1e6) × queue``."""
    return int(round(fraction * WATERMARK_SCALE)) * queue


def write_mode_next(write: int, in_write_mode: int, reads: int, writes: int, hi: int,
                    lo: int) -> int:
    """The direction the channel serves next (1 writes, 0 reads), Ramulator 2's
    set_write_mode: in read mode switch to writes when the write queue holds more than the high
    watermark (``hi``, scaled by WATERMARK_SCALE) or no read waits; in write mode switch back
    when a read waits and the write queue holds fewer than the low watermark — or no write at
    all (a drain with nothing left to drain ends; with Ramulator's rule alone a low watermark
    below one burst never ends a drain). ``reads``/``writes``: bursts queued at the banks.
    Always 0 under the mixed policy (reads and writes scheduled together)."""
    if write != WRITE_DRAIN:
        return 0
    if not in_write_mode:
        return 1 if (writes * WATERMARK_SCALE > hi or reads == 0) else 0
    return 0 if ((writes * WATERMARK_SCALE < lo or writes == 0) and reads != 0) else 1


# ---- refresh ---------------------------------------------------------------------------------
def refresh_units(mode: int, ranks: int, banks_per_rank: int) -> int:
    """Refresh units of a channel: one per rank (REFab) or one per bank (REFpb)."""
    return ranks * banks_per_rank if mode == REF_PER_BANK else ranks


def refresh_unit_bank(mode: int, u: int, bank_groups: int, banks_per_group: int) -> int:
    """First bank (flat index in the channel) refreshed by unit ``u``: rank u's first bank,
    or under per-bank refresh the u-th bank in the JEDEC order (bank group fastest, then bank,
    then rank; DRAMsim3 BANK_LEVEL_STAGGERED)."""
    if mode != REF_PER_BANK:
        return u * bank_groups * banks_per_group
    g = u % bank_groups
    b = (u // bank_groups) % banks_per_group
    r = u // (bank_groups * banks_per_group)
    return (r * bank_groups + g) * banks_per_group + b


def refresh_unit_span(mode: int, bank_groups: int, banks_per_group: int) -> int:
    """Banks one refresh unit covers (contiguous from :func:`refresh_unit_bank`)."""
    return 1 if mode == REF_PER_BANK else bank_groups * banks_per_group


def refresh_first_due(mode: int, u: int, units: int, trefi: int, trefi_pb: int) -> int:
    """First due cycle of unit ``u``: every rank at tREFI (all_bank), rank u at
    ``(u + 1) · tREFI / ranks`` (rank_staggered), bank u of the order at ``(u + 1) · tREFIpb``
    (per_bank)."""
    if mode == REF_PER_BANK:
        return (u + 1) * trefi_pb
    if mode == REF_RANK_STAGGERED:
        return (u + 1) * trefi // units
    return trefi


def refresh_period(mode: int, units: int, trefi: int, trefi_pb: int) -> int:
    """Cycles between two refreshes of one unit (its next due = the last due + this)."""
    if mode == REF_PER_BANK:
        return units * trefi_pb
    return trefi


def refresh_pull_in(est: int, due: int, now: int, trefi: int, trfc: int) -> int:
    """A PIM_HEADER at ``now`` announcing ``est`` cycles of GEMVs pulls a refresh due at
    ``due`` in to ``now + 1`` when the sequence would run past it and fits between two
    refreshes (est <= tREFI - tRFC of the unit); returns the new due cycle (JEDEC allows
    pulling in up to 8 REFs; NeuPIMs §4)."""
    if now + est > due and est <= trefi - trfc:
        return now + 1
    return due


# ---- PIM command queue -----------------------------------------------------------------------
def pim_accepts(depth: int, in_flight: int) -> int:
    """1 when a channel takes another PIM command: fewer than ``depth`` submitted and not yet
    completed. The controller serves its PIM queue in order and never reorders PIM commands
    among themselves (they share the global buffer and the PIM row state); memory commands,
    and due refreshes, may issue between them (dual row buffers: PIM first on the command bus
    at equal cycles)."""
    return 1 if in_flight < depth else 0


__all__ = [n for n in dir() if n.isupper()] + [
    "codes", "bank_pick", "key_class", "auto_precharge", "idle_close_cycle", "write_threshold",
    "WATERMARK_SCALE",
    "write_mode_next", "refresh_units", "refresh_unit_bank", "refresh_unit_span",
    "refresh_first_due", "refresh_period", "refresh_pull_in", "pim_accepts"]
