"""Evaluators and spec builders shared by the sweep tests (no tests here).

The evaluators are toys for exercising the sweep machinery (scheduling, resume, fault handling),
not performance models: their metrics are arbitrary deterministic functions of the parameters.
They are referenced from specs as ``test_sweep_helpers:<name>``; worker processes import this
module by that name (pytest puts ``tests/`` on ``sys.path``, spawned workers inherit it, and the
subprocess tests set ``PYTHONPATH``).

Every evaluation appends ``start <key>`` and ``end <key>`` lines to the file named by the
environment variable ``ARCHSIM_SWEEP_TEST_LOG`` (when set), so tests can count evaluations.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml

LOG_ENV = "ARCHSIM_SWEEP_TEST_LOG"
SLEEP_ENV = "ARCHSIM_SWEEP_TEST_SLEEP_S"


def _log(tag: str, key: str) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write(f"{tag} {key}\n")


def toy_evaluate(point: Any) -> dict[str, Any]:
    """Deterministic toy metrics of ``npu.n_arrays`` (a) and ``pim.multipliers_per_bank`` (m):
    ``tokens_per_s = 100 a + 10 m``, ``energy_per_token_uj = 1000 / a + m`` (and
    ``tokens_per_joule`` = 1e6 / that), plus the point's
    static metrics. Raises ``RuntimeError`` when ``a == 3`` (the injected fault). Sleeps
    ``ARCHSIM_SWEEP_TEST_SLEEP_S`` seconds (default 0) first."""
    _log("start", point.key)
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    a = point.config["npu"]["n_arrays"]
    m = point.config["pim"]["multipliers_per_bank"]
    if a == 3:
        raise RuntimeError(f"injected fault at n_arrays={a}")
    out = dict(point.static)
    out.update(tokens_per_s=100.0 * a + 10.0 * m, energy_per_token_uj=1000.0 / a + m,
               tokens_per_joule=1e6 / (1000.0 / a + m), seconds_per_iteration=1.0 / a)
    _log("end", point.key)
    return out


def crash_evaluate(point: Any) -> dict[str, Any]:
    """Like :func:`toy_evaluate`, but the worker process dies (``os._exit``) when
    ``n_arrays == 5``, as a segfault or an OOM kill would."""
    if point.config["npu"]["n_arrays"] == 5:
        os._exit(17)
    out = toy_evaluate(point)
    return out


def write_spec(path: Path, evaluator: str = "test_sweep_helpers:toy_evaluate",
               arrays: list[int] | None = None, mults: list[int] | None = None,
               search: dict[str, Any] | None = None, **extra: Any) -> Path:
    """Write a toy spec over ``npu.n_arrays`` × ``pim.multipliers_per_bank`` to ``path``."""
    spec = {
        "name": "toy",
        "base": "neupims",
        "workload": {"system": "neupims"},
        "parameters": {"npu.n_arrays": arrays or [1, 2, 3, 4],
                       "pim.multipliers_per_bank": mults or [8, 16, 32]},
        "search": search or {"kind": "grid"},
        "objectives": [{"metric": "tokens_per_s", "goal": "maximize"},
                       {"metric": "energy_per_token_uj", "goal": "minimize"}],
        "evaluator": evaluator,
    }
    spec.update(extra)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def log_lines(path: Path) -> list[tuple[str, str]]:
    """The (tag, key) lines of an evaluation log (empty when it does not exist)."""
    if not path.exists():
        return []
    return [tuple(line.split()) for line in path.read_text().splitlines() if line.strip()]
