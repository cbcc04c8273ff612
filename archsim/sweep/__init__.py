"""Design-space sweeps: declarative spaces, local or Dask execution, a resumable results
database, Pareto analysis (issue 9; user guide: ``docs/sweeps.md``).

Python API::

    from archsim.sweep import load_spec, run_sweep, make_report, export_results

    spec = load_spec("examples/sweep_gpu_quick.yaml")       # SweepSpecError names file:line:key
    summary = run_sweep(spec, "runs/quick", jobs=2)          # or dask_address="tcp://host:8786"
    report = make_report("runs/quick")                       # Pareto front, best points, PNGs
    export_results("runs/quick", "parquet")                  # runs/quick/results.parquet

Modules: :mod:`~archsim.sweep.spec` (the YAML spec), :mod:`~archsim.sweep.space` (points and
their config hash), the area model (:mod:`archsim.energy.area`), :mod:`~archsim.sweep.evaluate`
(one point on a worker), :mod:`~archsim.sweep.db` (SQLite results),
:mod:`~archsim.sweep.runner` (the coordinator and executors), :mod:`~archsim.sweep.analysis`
(tables, export, plots).
"""
from __future__ import annotations

import importlib
from typing import Any

# Lazy exports: a worker that only imports archsim.sweep.evaluate should not pay for pandas
# and matplotlib.
_EXPORTS = {
    "load_spec": "spec", "SweepSpec": "spec",
    "run_sweep": "runner", "Progress": "runner", "SweepSummary": "runner",
    "make_report": "analysis", "load_results": "analysis", "pareto_front": "analysis",
    "export_results": "analysis", "read_results_file": "analysis",
    "evaluate_point": "evaluate", "run_point": "evaluate",
    "Point": "space", "resolve_point": "space",
    "SweepError": "errors", "SweepSpecError": "errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the public names on first use (PEP 562)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"archsim.sweep.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'archsim.sweep' has no attribute {name!r}")
