"""Error types of :mod:`archsim.sweep`.

Raised where the fault is found; the CLI turns them into one line (exit code 2) because they
derive from :class:`archsim.errors.ArchsimError`.
"""
from __future__ import annotations

from archsim.errors import ArchsimError


class SweepError(ArchsimError):
    """A sweep cannot run: unreadable results directory, a second coordinator on the same
    directory, an unreachable Dask scheduler, an unknown evaluator."""


class SweepSpecError(SweepError):
    """A sweep spec file is invalid. The message names the file, the line and the dotted key
    (``spec.yaml:12: parameters.pim.multipliers_per_bnk: unknown config key; did you mean:
    pim.multipliers_per_bank``)."""
