"""DRAM and PIM energy from IDD currents (the DRAMPower / DRAMsim3 method).

All energies are picojoules (pJ): mA × V × ns = pJ. Currents and VDD come from
``memory.power`` (per channel), cycles are tCK. Sources: Chandrasekar et al., "DRAMPower"
(DATE 2012 / the DRAMPower tool); DRAMsim3 ``configuration.cc`` (``act_energy_inc``,
``read_energy_inc``, ``ref_energy_inc``). PIM commands: G_ACT / PIM_PRE cost one ACT / PRE per
bank, GWRITE and READRES the write / read current for their cycles, and one COMP step on one bank
the bank-local share of a column read plus its multiply-accumulates (:func:`pim_comp_step_pj`,
constants in the preset's ``energy.pim`` with their sources; this replaced the reference's
"4 × a column read", which made a PIM byte 8× dearer than a byte read out of the device where
Samsung's HBM-PIM reports about a quarter).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommandEnergy:
    """Energy per command in pJ (one bank for ACT/PRE/RD/WR, one rank for REF).

    Attributes:
        act_pj: VDD·(IDD0 − IDD3N)·tRAS·tCK (the activation share of an IDD0 ACT-PRE cycle).
        pre_pj: VDD·(IDD0 − IDD2N)·(tRC − tRAS)·tCK (the precharge share).
        rd_pj: VDD·(IDD4R − IDD3N)·BL/2·tCK (one burst).
        wr_pj: VDD·(IDD4W − IDD3N)·BL/2·tCK.
        ref_pj: VDD·(IDD5AB − IDD3N)·tRFC·tCK (one all-bank refresh).
        refpb_pj: ``ref_pj`` / banks per rank (one per-bank refresh refreshes a bank's share
            of the rows of one REFab: the same charge per refreshed row; assumption — DRAMsim3's
            IDD5PB default gives a negative energy for HBM2).
        comp_pj: one COMP step on one bank taking part (:func:`pim_comp_step_pj`).
        readres_pj: VDD·(IDD4R − IDD3N)·readres_cycles·tCK.
        gwrite_pj: VDD·(IDD4W − IDD3N)·gwrite_cycles·tCK.
        bg_active_pj_per_cycle: VDD·IDD3N·tCK (some row open).
        bg_precharged_pj_per_cycle: VDD·IDD2N·tCK (all banks precharged).
    """

    act_pj: float
    pre_pj: float
    rd_pj: float
    wr_pj: float
    ref_pj: float
    refpb_pj: float
    comp_pj: float
    readres_pj: float
    gwrite_pj: float
    bg_active_pj_per_cycle: float
    bg_precharged_pj_per_cycle: float


def pim_comp_step_pj(cfg, rd_pj: float) -> float:
    """Energy of one COMP step on one bank (pJ): ``rd_pj × (multipliers_per_bank ×
    npu.dtype_bytes ÷ burst bytes) × energy.pim.column_access_fraction + multipliers_per_bank
    × energy.pim.mac_pj``.

    A step reads ``multipliers_per_bank`` elements from the bank's open (PIM) row — only the
    bank-local part of a column access: O'Connor et al., "Fine-Grained DRAM", MICRO 2017, put
    0.44 of the 3.18 pJ/bit of an HBM2 read on the die in the cell/bank path, the rest in the
    bank-group and global I/O paths and the TSVs, which a bank-level PIM unit does not use (the
    split AttAcc, ASPLOS 2024, uses) — and runs one multiply-accumulate per multiplier.
    ``rd_pj`` is the IDD energy of one read burst.
    """
    e = cfg.energy.pim
    step_bytes = cfg.pim.multipliers_per_bank * cfg.npu.dtype_bytes
    return (rd_pj * step_bytes / cfg.memory.org.burst_bytes * e.column_access_fraction.value
            + cfg.pim.multipliers_per_bank * e.mac_pj.value)


def command_energy(cfg) -> CommandEnergy:
    """Per-command energies (pJ) for a :class:`archsim.config.MachineConfig`.

    ACT + PRE together equal DRAMsim3's ``(IDD0·tRC − (IDD3N·tRAS + IDD2N·tRP))·VDD``.
    """
    p, t = cfg.memory.power, cfg.memory.timing
    v, tck = p.vdd_v, t.tCK_ns
    bl = cfg.memory.burst_cycles
    trc = t.tRC_cycles
    rd = v * (p.idd4r_ma - p.idd3n_ma) * bl * tck
    return CommandEnergy(
        act_pj=v * (p.idd0_ma - p.idd3n_ma) * t.tRAS * tck,
        pre_pj=v * (p.idd0_ma - p.idd2n_ma) * (trc - t.tRAS) * tck,
        rd_pj=rd,
        wr_pj=v * (p.idd4w_ma - p.idd3n_ma) * bl * tck,
        ref_pj=v * (p.idd5ab_ma - p.idd3n_ma) * t.tRFC * tck,
        refpb_pj=v * (p.idd5ab_ma - p.idd3n_ma) * t.tRFC * tck
        / (cfg.memory.org.bank_groups * cfg.memory.org.banks_per_group),
        comp_pj=pim_comp_step_pj(cfg, rd),
        readres_pj=v * (p.idd4r_ma - p.idd3n_ma) * cfg.pim.readres_cycles * tck,
        gwrite_pj=v * (p.idd4w_ma - p.idd3n_ma) * cfg.pim.gwrite_cycles * tck,
        bg_active_pj_per_cycle=v * p.idd3n_ma * tck,
        bg_precharged_pj_per_cycle=v * p.idd2n_ma * tck,
    )


def channel_energy_pj(cfg, counts: dict[str, int], active_cycles: int,
                      total_cycles: int) -> dict[str, float]:
    """Energy of one channel, pJ, by component.

    Args:
        counts: command name -> number issued, plus ``pim_act_banks`` (banks opened by
            G_ACTs), ``pim_pre_banks`` (banks closed by PIM_PRE) and ``comp_bank_steps``
            (COMP steps × banks taking part; a PIM_GEMV of k counts k steps).
        active_cycles: cycles with at least one row open; total_cycles: the simulated span.

    Returns keys ``act, pre, rd, wr, ref, pim, background, total`` (pJ). Each bank opened by
    a G_ACT costs one ACT, each bank closed by a PIM_PRE one PRE. An RDA/WRA costs a read/
    write burst plus the precharge of its row (its auto-precharge); ``ref`` counts REF and
    REFpb.
    """
    e = command_energy(cfg)
    comp_bank_steps = counts.get("comp_bank_steps", 0)
    out = {
        "act": e.act_pj * (counts.get("ACT", 0) + counts.get("pim_act_banks", 0)),
        "pre": e.pre_pj * (counts.get("PRE", 0) + counts.get("pim_pre_banks", 0)
                           + counts.get("RDA", 0) + counts.get("WRA", 0)),
        "rd": e.rd_pj * (counts.get("RD", 0) + counts.get("RDA", 0)),
        "wr": e.wr_pj * (counts.get("WR", 0) + counts.get("WRA", 0)),
        "ref": e.ref_pj * counts.get("REF", 0) + e.refpb_pj * counts.get("REFpb", 0),
        "pim": (e.comp_pj * comp_bank_steps + e.readres_pj * counts.get("READRES", 0)
                + e.gwrite_pj * counts.get("GWRITE", 0)),
        "background": (e.bg_active_pj_per_cycle * active_cycles
                       + e.bg_precharged_pj_per_cycle * max(0, total_cycles - active_cycles)),
    }
    out["total"] = sum(out.values())
    return out


__all__ = ["CommandEnergy", "command_energy", "channel_energy_pj", "pim_comp_step_pj"]
