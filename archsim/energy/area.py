"""Area model of an NPU + PIM machine (mm²), the one source of area numbers.

Counts the silicon the machine's keys add or remove and weights each unit by a per-unit area
from the preset's ``area:`` section (every constant with its source, ``docs/energy.md``):

    NPU die (CMOS logic, scaled from each constant's node to ``npu.process.node_nm`` with the
    Stillmaker & Baas area factors, :func:`archsim.energy.technology.area_scale`):
        arrays   = n_arrays · H · W · pe_um2
        vector   = vector.count · vector.lanes · vector_lane_um2
        sram     = scratchpad.size_bytes · sram_um2_per_byte
    PIM logic on the HBM dies (DRAM process: 45 nm logic density × dram_logic_factor; not
    scaled by the NPU's node):
        pim      = channels · banks_per_channel · multipliers_per_bank · pim_multiplier_um2
                   · dram_logic_factor                                   (if pim in engines)
        row_buf  = channels · banks_per_channel · page_size_bytes · pim_row_buffer_um2_per_byte
                   · dram_logic_factor                           (second row buffer, if dual)

``area_proxy_mm2`` is the sum (silicon added by the design; the NPU part is also what leakage
is charged on, :mod:`archsim.energy.model`). Not counted: the DRAM cell arrays (the capacity,
reported as ``memory_capacity_bytes``), memory controller, DMA, interconnect and I/O. A GPU
system has no area model (``None``): its die is a fixed product, not a point of this design
space. Sweeps read :func:`static_metrics`; change a constant with ``--set area.<key>.value=…``
or as a sweep parameter.
"""
from __future__ import annotations

from typing import Any

from archsim.config import MachineConfig
from archsim.energy.technology import area_scale


def npu_area_mm2(cfg: MachineConfig) -> dict[str, float]:
    """Area of the NPU die's arrays, vector units and scratchpad in mm² at ``npu.process``.

    Returns ``{"area_npu_arrays_mm2", "area_vector_mm2", "area_sram_mm2"}`` (0 when the
    system has no NPU).

    Raises:
        ValueError: a node outside the scaling tables (7–130 nm).
    """
    a, npu = cfg.area, cfg.npu
    node = npu.process.node_nm
    out = {"area_npu_arrays_mm2": 0.0, "area_vector_mm2": 0.0, "area_sram_mm2": 0.0}
    if "npu" not in cfg.system.engines:
        return out
    pe = a.pe_um2.value * area_scale(a.pe_um2.node_nm, node)
    lane = a.vector_lane_um2.value * area_scale(a.vector_lane_um2.node_nm, node)
    sram = a.sram_um2_per_byte.value * area_scale(a.sram_um2_per_byte.node_nm, node)
    out["area_npu_arrays_mm2"] = npu.n_arrays * npu.array_height * npu.array_width * pe * 1e-6
    out["area_vector_mm2"] = npu.vector.count * npu.vector.lanes * lane * 1e-6
    out["area_sram_mm2"] = npu.scratchpad.size_bytes * sram * 1e-6
    return out


def pim_area_mm2(cfg: MachineConfig) -> dict[str, float]:
    """Area of the PIM logic on the HBM dies in mm²: ``{"area_pim_mm2",
    "area_row_buffer_mm2"}`` (0 without PIM; the row buffer only with dual row buffers)."""
    a, org = cfg.area, cfg.memory.org
    out = {"area_pim_mm2": 0.0, "area_row_buffer_mm2": 0.0}
    if not cfg.system.has_pim:
        return out
    banks = org.channels * org.banks_per_channel
    f = a.dram_logic_factor.value
    out["area_pim_mm2"] = (banks * cfg.pim.multipliers_per_bank * a.pim_multiplier_um2.value
                           * f * 1e-6)
    if cfg.pim.row_buffer_mode == "dual":
        out["area_row_buffer_mm2"] = (banks * org.page_size_bytes
                                      * a.pim_row_buffer_um2_per_byte.value * f * 1e-6)
    return out


def area_breakdown_mm2(cfg: MachineConfig) -> dict[str, float] | None:
    """Area of ``cfg`` by component in mm² (see the module docstring).

    Returns:
        ``{"area_npu_arrays_mm2", "area_vector_mm2", "area_sram_mm2", "area_pim_mm2",
        "area_row_buffer_mm2", "area_npu_mm2", "area_proxy_mm2"}`` (``area_npu_mm2`` = the NPU
        die's three parts, ``area_proxy_mm2`` = all five), or ``None`` for a GPU system.
    """
    if "gpu" in cfg.system.engines:
        return None
    out = {**npu_area_mm2(cfg), **pim_area_mm2(cfg)}
    out["area_npu_mm2"] = (out["area_npu_arrays_mm2"] + out["area_vector_mm2"]
                           + out["area_sram_mm2"])
    out["area_proxy_mm2"] = out["area_npu_mm2"] + out["area_pim_mm2"] + out["area_row_buffer_mm2"]
    return out


def area_proxy_mm2(cfg: MachineConfig) -> float | None:
    """Silicon area the design adds, mm² (:func:`area_breakdown_mm2`); ``None`` for a GPU."""
    b = area_breakdown_mm2(cfg)
    return None if b is None else b["area_proxy_mm2"]


def static_metrics(cfg: MachineConfig) -> dict[str, Any]:
    """Metrics known from the configuration alone (before any simulation): the area and its
    parts (mm²) and the device memory capacity (bytes). Constraints on these are checked
    before a sweep point runs, so an infeasible point costs no simulation."""
    out: dict[str, Any] = dict(area_breakdown_mm2(cfg) or {"area_proxy_mm2": None})
    out["memory_capacity_bytes"] = (cfg.gpu.memory_bytes if "gpu" in cfg.system.engines
                                    else cfg.memory.org.capacity_bytes)
    return out


#: Metrics produced by :func:`static_metrics` (for spec validation and pre-run constraints).
STATIC_METRICS: tuple[str, ...] = (
    "area_proxy_mm2", "area_npu_mm2", "area_npu_arrays_mm2", "area_vector_mm2",
    "area_sram_mm2", "area_pim_mm2", "area_row_buffer_mm2", "memory_capacity_bytes")

__all__ = ["npu_area_mm2", "pim_area_mm2", "area_breakdown_mm2", "area_proxy_mm2",
           "static_metrics", "STATIC_METRICS"]
