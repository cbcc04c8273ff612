"""Energy, power and area of every system (Accelergy-style: action counts × energy per action).

* :mod:`~archsim.energy.schema` — the ``energy:`` and ``area:`` config sections (every constant
  ``{value, source}``; a leaf imported by :mod:`archsim.config`).
* :mod:`~archsim.energy.technology` — Stillmaker & Baas scaling of energy and area between nodes.
* :mod:`~archsim.energy.table` — the per-action energies of a machine at its process node.
* :mod:`~archsim.energy.counts` — action counts of a compiled program (MACs, scratchpad bytes,
  vector element-passes, DMA and bus bytes, link bytes), reconciled with the executor's stats.
* :mod:`~archsim.energy.components` — the energy components and groups with their definitions.
* :mod:`~archsim.energy.model` — energy of an iteration by component for the NPU systems and
  the GPU board-power model; power per device, tokens per joule.
* :mod:`~archsim.energy.area` — the area model (NPU arrays, vector units, SRAM, PIM logic per
  bank, second row buffer); the one source of area numbers (sweeps use it).

This package's ``__init__`` imports nothing eagerly: :mod:`archsim.config` imports the schema
leaf, and the model modules import :mod:`archsim.config`. User guide: ``docs/energy.md``.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "energy_table": "table", "EnergyTable": "table",
    "count_program": "counts", "NpuActionCounts": "counts", "reconcile": "counts",
    "npu_iteration_energy": "model", "gpu_iteration_energy": "model",
    "EnergyBreakdown": "model", "lm_head_counts": "counts",
    "area_breakdown_mm2": "area", "area_proxy_mm2": "area", "static_metrics": "area",
    "STATIC_METRICS": "area", "npu_area_mm2": "area",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'archsim.energy' has no attribute {name!r}")
    return getattr(importlib.import_module(f"archsim.energy.{mod}"), name)


__all__ = sorted(_LAZY)
