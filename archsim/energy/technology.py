"""CMOS technology scaling of energy and area between process nodes (130 nm … 7 nm).

Source: A. Stillmaker and B. Baas, "Scaling equations for the accurate prediction of CMOS device
performance from 180 nm to 7 nm", Integration, the VLSI Journal 58 (2017) 74–81 (with its
corrigendum). Energy per operation at node ``n`` and supply ``V`` is proportional to the
paper's fitted polynomial ``a_n V² + b_n V + c_n`` (its table of energy coefficients; the 65 nm
row below is the one of the corrigendum's worked example, ``3.755 V² − 4.398 V + 1.975``), so

    energy_scale(n₀, V₀ → n₁, V₁) = (a₁ V₁² + b₁ V₁ + c₁) / (a₀ V₀² + b₀ V₀ + c₀)

and area scales by the paper's node-to-node area factors (:data:`AREA_FACTOR`, relative to
45 nm). Between tabulated nodes both are interpolated linearly in the node (nm).

Example: Horowitz's 45 nm, 0.9 V figures (ISSCC 2014) moved to 7 nm at 0.7 V:
``energy_scale(45, 0.9, 7, 0.7) = 0.0566``, ``area_scale(45, 7) = 0.059``.

Pure functions, no I/O.
"""
from __future__ import annotations

#: Nodes (nm) of the tables, largest first.
NODES_NM: tuple[int, ...] = (130, 90, 65, 45, 32, 20, 16, 14, 10, 7)

#: Energy polynomial ``(a, b, c)`` per node: energy ∝ a V² + b V + c (Stillmaker & Baas 2017).
ENERGY_POLY: dict[int, tuple[float, float, float]] = {
    130: (7.171, -6.709, 2.904), 90: (4.762, -4.781, 2.092), 65: (3.755, -4.398, 1.975),
    45: (1.103, -0.362, 0.2767), 32: (0.9559, -0.7823, 0.471), 20: (0.373, -0.1582, 0.04104),
    16: (0.2958, -0.1241, 0.03024), 14: (0.2363, -0.09675, 0.02239),
    10: (0.2068, -0.09311, 0.02375), 7: (0.1776, -0.09097, 0.02447),
}

#: Area of a design at each node ÷ its area at 45 nm (Stillmaker & Baas 2017, area scaling).
AREA_FACTOR: dict[int, float] = {130: 6.4, 90: 2.8, 65: 1.5, 45: 1.0, 32: 0.46, 20: 0.21,
                                 16: 0.19, 14: 0.17, 10: 0.1, 7: 0.059}


def _bracket(node_nm: float) -> tuple[int, int, float]:
    """The tabulated nodes around ``node_nm`` and the interpolation weight of the second.

    Raises:
        ValueError: ``node_nm`` outside [7, 130].
    """
    if not NODES_NM[-1] <= node_nm <= NODES_NM[0]:
        raise ValueError(f"process node {node_nm:g} nm is outside the {NODES_NM[-1]}–"
                         f"{NODES_NM[0]} nm range of the Stillmaker & Baas scaling tables")
    for hi, lo in zip(NODES_NM, NODES_NM[1:]):
        if lo <= node_nm <= hi:
            return hi, lo, (hi - node_nm) / (hi - lo)
    raise AssertionError("unreachable")  # pragma: no cover


def energy_factor(node_nm: float, vdd_v: float) -> float:
    """Stillmaker & Baas energy factor ``a V² + b V + c`` at ``node_nm`` and ``vdd_v``
    (arbitrary unit; only ratios mean something). Interpolated linearly between nodes.

    Raises:
        ValueError: node outside the tables, or a non-positive factor (voltage far outside
            the fitted range).
    """
    hi, lo, w = _bracket(node_nm)

    def poly(n: int) -> float:
        a, b, c = ENERGY_POLY[n]
        return a * vdd_v * vdd_v + b * vdd_v + c

    f = (1 - w) * poly(hi) + w * poly(lo)
    if f <= 0:
        raise ValueError(f"Stillmaker & Baas energy polynomial is not positive at "
                         f"{node_nm:g} nm, {vdd_v:g} V (outside its fitted voltage range)")
    return f


def energy_scale(from_nm: float, from_v: float, to_nm: float, to_v: float) -> float:
    """Multiply an energy given at (``from_nm``, ``from_v``) by this to get it at
    (``to_nm``, ``to_v``). See the module docstring; raises as :func:`energy_factor`."""
    return energy_factor(to_nm, to_v) / energy_factor(from_nm, from_v)


def area_scale(from_nm: float, to_nm: float) -> float:
    """Multiply an area given at ``from_nm`` by this to get it at ``to_nm``.

    Raises:
        ValueError: a node outside [7, 130] nm.
    """
    def factor(n: float) -> float:
        hi, lo, w = _bracket(n)
        return (1 - w) * AREA_FACTOR[hi] + w * AREA_FACTOR[lo]

    return factor(to_nm) / factor(from_nm)


__all__ = ["NODES_NM", "ENERGY_POLY", "AREA_FACTOR", "energy_factor", "energy_scale",
           "area_scale"]
