"""Energy of one iteration of a system, by component, and the power it implies.

NPU systems (neupims, npu-pim, npu) — :func:`npu_iteration_energy`. Each component is a count
× an energy per action (:mod:`archsim.energy.table`) or a power × a time:

==================  ===========================================================================
``dram_background``  IDD2N/IDD3N standby of every channel for the whole iteration (IDD method)
``dram_act``         ACT + PRE commands, G_ACT / PIM_PRE banks included (IDD0)
``dram_rd``          RD bursts (IDD4R), LM-head weight bursts included
``dram_wr``          WR bursts (IDD4W)
``dram_ref``         REFab (IDD5AB)
``pim``              PIM COMP steps (bank-local column access + MACs), GWRITE, READRES
``npu_mac``          systolic-array MACs × ``energy.npu.mac_pj`` (scaled to the node)
``npu_vector``       vector element-passes × ops per element × ``energy.npu.vector_op_pj``
``sram``             scratchpad bytes read / written × energy per byte of one bank
``dram_io``          bytes on the HBM interface (DMA, GWRITE, results) × ``hbm_io_pj_per_byte``
``link``             bytes sent to other devices (all-reduces, hand-offs) × ``link_pj_per_byte``
``leakage``          NPU die area (:mod:`archsim.energy.area`) × ``leakage_w_per_mm2`` × time
==================  ===========================================================================

DRAM/PIM command energies come from the memory model's statistics of the simulated window;
NPU counts from the window's program (:func:`archsim.energy.counts.count_program`). Work of
the reused layers is the simulated average per layer (``work_scale``), as for the cycles;
background and leakage are power × the iteration's time. One device is simulated; the system's
energy counts every device (tensor-parallel peers are symmetric, pipeline stages identical).

GPU (:func:`gpu_iteration_energy`): board power ``P = idle + (max − idle) · activity`` per
device (``energy.gpu``), where ``activity`` is the time-weighted utilisation of the kernels
(each kernel's larger fraction of peak FLOP/s or peak bandwidth; framework overhead counts as
idle): components ``gpu_idle`` and ``gpu_dynamic``.

Power per device = system energy ÷ (iteration time × devices); tokens per joule = tokens ÷
system energy. No I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from archsim.config import MachineConfig
from archsim.energy.counts import NpuActionCounts
from archsim.energy.table import EnergyTable, energy_table

@dataclass
class EnergyBreakdown:
    """Energy of one iteration of the whole system.

    Attributes:
        joules: ``{component: J}`` (keys of :data:`archsim.results.ENERGY_COMPONENTS`).
        counts: the NPU action counts of the whole system (None for the GPU).
        table: the per-action energies used (None for the GPU).
        details: further JSON-able numbers (reconciliation, power model inputs).
    """

    joules: dict[str, float]
    counts: NpuActionCounts | None = None
    table: EnergyTable | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        """JSON-able description: counts, the per-action table and the details."""
        return {"counts_system": None if self.counts is None else self.counts.as_dict(),
                "per_action": None if self.table is None else self.table.as_dict(),
                **self.details}


def npu_action_energy_j(counts: NpuActionCounts, t: EnergyTable) -> dict[str, float]:
    """Energy (J) of NPU action counts: ``npu_mac``, ``npu_vector``, ``sram``, ``dram_io``
    (DMA + PIM bus bytes) and ``link``. Each is linear in exactly one table entry."""
    vec_ops = sum(n * t.vector_ops_per_element[op] for op, n in
                  counts.vector_element_passes.items())
    return {
        "npu_mac": counts.macs * t.mac_pj * 1e-12,
        "npu_vector": vec_ops * t.vector_op_pj * 1e-12,
        "sram": (counts.sram_read_bytes * t.sram_read_pj_per_byte
                 + counts.sram_write_bytes * t.sram_write_pj_per_byte) * 1e-12,
        "dram_io": (counts.dma_bytes + counts.pim_bus_bytes) * t.hbm_io_pj_per_byte * 1e-12,
        "link": counts.link_bytes * t.link_pj_per_byte * 1e-12,
    }


def npu_iteration_energy(cfg: MachineConfig, *, mem_energy_pj: dict[str, float],
                         window_counts: NpuActionCounts, work_scale: float, pp: int, tp: int,
                         window_mem_cycles: float, iteration_s: float,
                         extra_counts: NpuActionCounts | None = None,
                         extra_rd_bursts: float = 0.0) -> EnergyBreakdown:
    """Energy of one iteration of an NPU(+PIM) system (see the module docstring).

    Args:
        cfg: the machine.
        mem_energy_pj: the memory model's ``energy_pj`` of the simulated window, one device
            (keys ``act, pre, rd, wr, ref, pim, background``; pJ).
        window_counts: :func:`archsim.energy.counts.count_program` of the window, one device.
        work_scale: layers of a pipeline stage ÷ simulated layers (work of reused layers).
        pp, tp: pipeline and tensor-parallel degrees (devices = ``pp · tp``).
        window_mem_cycles: memory-clock cycles of the simulated window (background's span).
        iteration_s: simulated seconds of the whole iteration.
        extra_counts: actions outside the program for the whole system (the analytic LM head
            of every tensor-parallel device, pipeline hand-offs).
        extra_rd_bursts: read bursts outside the program, whole system (LM-head weights).

    Returns:
        :class:`EnergyBreakdown` with every NPU-system component of :data:`ENERGY_COMPONENTS`.
    """
    from archsim.energy.area import npu_area_mm2
    from archsim.memory.energy import command_energy

    t = energy_table(cfg)
    devices = tp * pp
    dyn = work_scale * pp * tp                       # window work -> whole system
    e = mem_energy_pj
    rd_pj = command_energy(cfg).rd_pj
    bg_scale = iteration_s * 1e9 / cfg.memory.timing.tCK_ns / max(window_mem_cycles, 1.0)
    joules = {
        "dram_background": e.get("background", 0.0) * bg_scale * devices * 1e-12,
        "dram_act": (e.get("act", 0.0) + e.get("pre", 0.0)) * dyn * 1e-12,
        "dram_rd": (e.get("rd", 0.0) * dyn + extra_rd_bursts * rd_pj) * 1e-12,
        "dram_wr": e.get("wr", 0.0) * dyn * 1e-12,
        "dram_ref": e.get("ref", 0.0) * dyn * 1e-12,
        "pim": e.get("pim", 0.0) * dyn * 1e-12,
    }
    counts = window_counts.scaled(dyn)
    if extra_counts is not None:
        counts = counts.plus(extra_counts)
    joules.update(npu_action_energy_j(counts, t))
    area = sum(npu_area_mm2(cfg).values())
    joules["leakage"] = t.leakage_w_per_mm2 * area * iteration_s * devices
    return EnergyBreakdown(joules, counts, t, {"npu_area_mm2_per_device": area,
                                               "devices": devices})


def gpu_iteration_energy(cfg: MachineConfig, kernel_s: list[float], kernel_util: list[float],
                         iteration_s: float, devices: int) -> EnergyBreakdown:
    """Energy of one GPU iteration from board power (see the module docstring).

    Args:
        cfg: the machine (``energy.gpu``: idle and maximum board power).
        kernel_s: seconds of every kernel of the iteration on one device (layers included).
        kernel_util: each kernel's utilisation in [0, 1] (larger of its FLOP/s and bandwidth
            fractions of peak), same order.
        iteration_s: seconds of the iteration (kernels + framework overhead + hand-offs).
        devices: GPUs of the system.

    Returns:
        :class:`EnergyBreakdown` with ``gpu_idle`` and ``gpu_dynamic`` and the activity.
    """
    p = cfg.energy.gpu
    busy = sum(s * min(1.0, max(0.0, u)) for s, u in zip(kernel_s, kernel_util))
    activity = min(1.0, busy / iteration_s) if iteration_s > 0 else 0.0
    idle, top = p.idle_w.value, p.max_w.value
    joules = {"gpu_idle": idle * iteration_s * devices,
              "gpu_dynamic": (top - idle) * activity * iteration_s * devices}
    return EnergyBreakdown(joules, details={
        "board_activity": activity, "board_power_w": idle + (top - idle) * activity,
        "idle_w": idle, "max_w": top, "devices": devices})


__all__ = ["EnergyBreakdown", "npu_action_energy_j", "npu_iteration_energy",
           "gpu_iteration_energy"]
