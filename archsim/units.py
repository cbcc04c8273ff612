"""Numbers as readable text with their units (for the CLI's tables; no I/O)."""
from __future__ import annotations

import math

_ENERGY_PREFIXES = ((1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ"), (1e-9, "nJ"), (1e-12, "pJ"))


def sig(v: float, digits: int = 3) -> str:
    """``v`` with ``digits`` significant figures and thousands separators (1,234 / 12.3 /
    0.0123)."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    return f"{v:,.{decimals}f}"


def energy_text(joules: float, digits: int = 3) -> str:
    """An energy in the largest of J, mJ, µJ, nJ, pJ that keeps it >= 1 (``12.3 µJ``)."""
    a = abs(joules)
    for scale, unit in _ENERGY_PREFIXES:
        if a >= scale:
            return f"{sig(joules / scale, digits)} {unit}"
    return f"{sig(joules / 1e-12, digits)} pJ"


__all__ = ["sig", "energy_text"]
