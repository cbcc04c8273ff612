"""The per-action energies of a machine at its process node (pJ), with how each was derived.

:func:`energy_table` turns the preset's ``energy:`` section into the numbers the model
multiplies action counts by:

* logic and SRAM energies given at another node (``node_nm``, ``vdd_v``) are scaled to
  ``npu.process`` by :func:`archsim.energy.technology.energy_scale` (Stillmaker & Baas);
* the scratchpad's energy per byte is the SRAM table's access energy at the capacity of one
  scratchpad bank (``size_bytes / banks``), interpolated linearly in log(size)–log(energy)
  (CACTI-style growth with the bank; Horowitz's 8 KB / 32 KB / 1 MB points), ÷ access bytes;
* one PIM COMP step on one bank (:func:`pim_comp_pj`): the bank-local share of a column read
  (``energy.pim.column_access_fraction`` × the IDD method's RD energy per byte × the bytes the
  step reads) plus the step's multiply-accumulates (``multipliers_per_bank × energy.pim.mac_pj``).

Pure functions of the config; no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from archsim.config import MachineConfig
from archsim.energy.schema import LogicEnergy, SramEnergy
from archsim.energy.technology import energy_scale


@dataclass(frozen=True)
class EnergyTable:
    """Energy per action at the machine's node (pJ unless the name says otherwise).

    Attributes:
        mac_pj: one systolic-array multiply-accumulate.
        vector_op_pj: one vector-lane arithmetic operation.
        vector_ops_per_element: ``{op: operations per element per pass}``.
        sram_read_pj_per_byte / sram_write_pj_per_byte: scratchpad per byte.
        sram_bank_bytes: capacity of one scratchpad bank (what the SRAM energy is looked up at).
        leakage_w_per_mm2: static power per mm² of NPU die.
        hbm_io_pj_per_byte: HBM interface per byte on the external bus.
        link_pj_per_byte: device-to-device link per byte sent.
        pim_comp_pj: one COMP step on one bank (column access + MACs).
        derivation: ``{name: one line saying how the number was obtained}``.
    """

    mac_pj: float
    vector_op_pj: float
    vector_ops_per_element: dict[str, float]
    sram_read_pj_per_byte: float
    sram_write_pj_per_byte: float
    sram_bank_bytes: int
    leakage_w_per_mm2: float
    hbm_io_pj_per_byte: float
    link_pj_per_byte: float
    pim_comp_pj: float
    derivation: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """Plain-data form for the JSON (numbers and derivations)."""
        return {"mac_pj": self.mac_pj, "vector_op_pj": self.vector_op_pj,
                "vector_ops_per_element": dict(self.vector_ops_per_element),
                "sram_read_pj_per_byte": self.sram_read_pj_per_byte,
                "sram_write_pj_per_byte": self.sram_write_pj_per_byte,
                "sram_bank_bytes": self.sram_bank_bytes,
                "leakage_w_per_mm2": self.leakage_w_per_mm2,
                "hbm_io_pj_per_byte": self.hbm_io_pj_per_byte,
                "link_pj_per_byte": self.link_pj_per_byte, "pim_comp_pj": self.pim_comp_pj,
                "derivation": dict(self.derivation)}


def _scaled(c: LogicEnergy, cfg: MachineConfig) -> tuple[float, str]:
    p = cfg.npu.process
    k = energy_scale(c.node_nm, c.vdd_v, p.node_nm, p.vdd_v)
    return c.value * k, (f"{c.value:g} pJ at {c.node_nm:g} nm, {c.vdd_v:g} V × {k:.4g} "
                         f"(Stillmaker & Baas to {p.node_nm:g} nm, {p.vdd_v:g} V)")


def sram_access_pj(s: SramEnergy, bank_bytes: float) -> float:
    """Energy of one ``s.access_bytes`` access of an SRAM bank of ``bank_bytes`` at the
    table's node: linear in log(size)–log(energy) between (and beyond) the table's points."""
    xs = [math.log(b) for b in s.bank_bytes]
    ys = [math.log(e) for e in s.access_pj]
    x = math.log(bank_bytes)
    i = 0 if x <= xs[1] else (len(xs) - 2 if x >= xs[-2] else
                               max(j for j in range(len(xs) - 1) if xs[j] <= x))
    t = (x - xs[i]) / (xs[i + 1] - xs[i])
    return math.exp(ys[i] + t * (ys[i + 1] - ys[i]))


def pim_comp_pj(cfg: MachineConfig) -> tuple[float, str]:
    """Energy of one PIM COMP step on one bank (pJ) and its derivation: the formula of
    :func:`archsim.memory.energy.pim_comp_step_pj` (the bank-local share of a column read plus
    the step's multiply-accumulates) with the IDD method's read-burst energy."""
    from archsim.memory.energy import command_energy, pim_comp_step_pj

    e = cfg.energy.pim
    rd = command_energy(cfg).rd_pj
    step_bytes = cfg.pim.multipliers_per_bank * cfg.npu.dtype_bytes
    burst = cfg.memory.org.burst_bytes
    col = rd * step_bytes / burst * e.column_access_fraction.value
    return pim_comp_step_pj(cfg, rd), (
        f"{rd:.4g} pJ RD burst × {step_bytes}/{burst} B × {e.column_access_fraction.value:g} "
        f"(bank-local share) = {col:.4g} pJ + {cfg.pim.multipliers_per_bank} × "
        f"{e.mac_pj.value:g} pJ MAC")


def energy_table(cfg: MachineConfig) -> EnergyTable:
    """The per-action energies of ``cfg`` (see the module docstring).

    Raises:
        ValueError: a node or voltage outside the Stillmaker & Baas tables.
    """
    n = cfg.energy.npu
    mac, mac_d = _scaled(n.mac_pj, cfg)
    vop, vop_d = _scaled(n.vector_op_pj, cfg)
    sp = cfg.npu.scratchpad
    bank = sp.size_bytes // sp.banks
    p = cfg.npu.process
    k = energy_scale(n.sram.node_nm, n.sram.vdd_v, p.node_nm, p.vdd_v)
    acc = sram_access_pj(n.sram, bank)
    rd_b = acc * k / n.sram.access_bytes
    comp, comp_d = pim_comp_pj(cfg)
    ops = {op: float(v) for op, v in n.vector_ops_per_element.ops.items()}
    return EnergyTable(
        mac_pj=mac, vector_op_pj=vop, vector_ops_per_element=ops,
        sram_read_pj_per_byte=rd_b, sram_write_pj_per_byte=rd_b * n.sram.write_to_read,
        sram_bank_bytes=bank, leakage_w_per_mm2=n.leakage_w_per_mm2.value,
        hbm_io_pj_per_byte=cfg.energy.hbm_io_pj_per_byte.value,
        link_pj_per_byte=cfg.energy.link_pj_per_byte.value, pim_comp_pj=comp,
        derivation={
            "mac_pj": mac_d, "vector_op_pj": vop_d,
            "sram_read_pj_per_byte": (f"{acc:.4g} pJ per {n.sram.access_bytes}-B access of a "
                                      f"{bank / 2**10:g} KiB bank (log-log interpolation) × "
                                      f"{k:.4g} (to {p.node_nm:g} nm) ÷ {n.sram.access_bytes} B"),
            "pim_comp_pj": comp_d,
        })


__all__ = ["EnergyTable", "energy_table", "sram_access_pj", "pim_comp_pj"]
