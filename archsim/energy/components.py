"""The components of an iteration's energy and what each counts (definitions for every output).

A leaf (imports nothing of the project): :mod:`archsim.results` prints and writes these
definitions beside the numbers; :mod:`archsim.energy.model` fills the components.
"""
from __future__ import annotations

from typing import Iterable

#: Energy components: key -> (group, definition). Groups are what ``compare`` prints.
ENERGY_COMPONENTS: dict[str, tuple[str, str]] = {
    "dram_background": ("DRAM background", "HBM standby (IDD2N/IDD3N) of every channel over "
                                           "the iteration"),
    "dram_act": ("DRAM ACT", "row activations and precharges (IDD0), PIM G_ACT banks included"),
    "dram_rd": ("DRAM RD", "read bursts (IDD4R)"),
    "dram_wr": ("DRAM WR", "write bursts (IDD4W)"),
    "dram_ref": ("DRAM REF", "all-bank refresh (IDD5AB)"),
    "pim": ("PIM", "PIM COMP steps (bank-local column access + MACs), GWRITE, READRES"),
    "npu_mac": ("NPU compute", "systolic-array multiply-accumulates"),
    "npu_vector": ("NPU compute", "vector-unit arithmetic"),
    "sram": ("SRAM", "scratchpad reads and writes"),
    "dram_io": ("interconnect", "HBM interface (PHY + interposer) per byte on the bus"),
    "link": ("interconnect", "device-to-device links (all-reduce, pipeline hand-off)"),
    "leakage": ("leakage", "static power of the NPU die over the iteration"),
    "gpu_idle": ("GPU board", "GPU board idle power over the iteration"),
    "gpu_dynamic": ("GPU board", "GPU board power above idle, by kernel utilisation"),
}
#: Groups in print order.
ENERGY_GROUPS: tuple[str, ...] = ("DRAM background", "DRAM ACT", "DRAM RD", "DRAM WR",
                                  "DRAM REF", "PIM", "NPU compute", "SRAM", "interconnect",
                                  "leakage", "GPU board")




def group_energy(joules: dict[str, float]) -> dict[str, float]:
    """``{group: J}`` summed over the components of each group (:data:`ENERGY_GROUPS` order;
    groups without a component are left out)."""
    out: dict[str, float] = {}
    for g in ENERGY_GROUPS:
        keys = [k for k, (grp, _) in ENERGY_COMPONENTS.items() if grp == g and k in joules]
        if keys:
            out[g] = float(sum(joules[k] for k in keys))
    return out


def energy_definitions(keys: Iterable[str] | None = None) -> dict[str, str]:
    """``{component: "group: definition"}`` of :data:`ENERGY_COMPONENTS` (all when None)."""
    sel = ENERGY_COMPONENTS if keys is None else {k: ENERGY_COMPONENTS[k] for k in keys
                                                  if k in ENERGY_COMPONENTS}
    return {k: f"{g}: {d}" for k, (g, d) in sel.items()}


__all__ = ["ENERGY_COMPONENTS", "ENERGY_GROUPS", "group_energy", "energy_definitions"]
