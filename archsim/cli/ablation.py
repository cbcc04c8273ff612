"""``archsim compare --ablation``: NeuPIMs' features added one at a time (:mod:`archsim.ablation`).

The flag lives on ``compare`` (:mod:`archsim.cli.run` calls :func:`ablation_command`); this
module holds the command's logic and its table.
"""
from __future__ import annotations

from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from archsim.errors import ArchsimError


def ablation_command(model: str | None = None, requests: str | None = None,
                     batch: int | None = None, dataset: str | None = None, seed: int = 0,
                     overrides: Sequence[str] = (), json_path: str | None = None,
                     ignore_capacity: bool = False, quiet: bool = False,
                     console: Console | None = None, jobs: int | None = None,
                     **rejected: Any) -> dict[str, Any]:
    """Everything ``archsim compare --ablation`` does; returns the dict written by ``--json``.

    ``model`` None is ``gpt3-7b``; the batch is the one ``archsim compare`` builds (``--batch``
    default 256 from ``--dataset`` default sharegpt, or ``--requests``). ``rejected``: flags of
    ``compare`` that mean nothing here (``systems``, ``paper``, ``plots_dir``); a true value is a
    one-line error. ``jobs``: worker processes for the steps (None = the CPU count). Every flag,
    file, override and each step's KV capacity is checked before the first simulation.

    Raises:
        ArchsimError / ConfigError / WorkloadError: bad input (one line at the CLI).
    """
    from archsim import ablation as ab
    from archsim import serving as sv
    from archsim.cli.boundary import (check_output_file, check_workload_flags, resolve_jobs,
                                      simulating)
    from archsim.cli.run import _Bar, _check_dataset, _console, _model
    from archsim.results import write_json

    flags = {"systems": "--systems", "paper": "--paper", "plots_dir": "--plots"}
    given = [flags.get(k, k) for k, v in rejected.items() if v]
    if given:
        names = ", ".join(s.name for s in ab.ABLATION_STEPS)
        raise ArchsimError(f"--ablation runs its own fixed steps ({names}): "
                           f"{'/'.join(given)} cannot be combined with it")
    jobs = resolve_jobs(jobs, "steps")
    con = console or _console()
    check_workload_flags(seed=seed, requests=requests, dataset=dataset)
    ab.check_overrides(overrides)
    steps = ab.step_configs(overrides)               # bad overrides fail first
    check_output_file(json_path, "--json")
    spec = _model(model or "gpt3-7b")
    if requests is None:
        dataset = dataset or "sharegpt"
        _check_dataset(dataset)
    b = sv.make_batch(spec, batch if batch is not None else (None if requests else 256),
                      dataset or "sharegpt", seed, requests)
    with _Bar(not quiet, len(steps), "ablation steps") as bar, simulating():
        done = [0]

        def prog(name: str) -> None:
            done[0] += 1
            bar.update(done[0], name)

        rows = ab.run_ablation(spec, b, overrides, check_capacity=not ignore_capacity,
                               progress=prog, jobs=jobs)
    t = Table(title=f"{spec.name}: NeuPIMs features added one at a time (one decode "
                    f"iteration, {len(b)} requests)")
    for col in ("step", "adds", "tokens/s", "cycles/iter", "step gain", "total gain"):
        t.add_column(col, justify="left" if col in ("step", "adds") else "right")
    for r in rows:
        t.add_row(r.step.name, r.step.feature, f"{r.tokens_per_s:,.0f}",
                  f"{r.cycles_per_iteration:,.0f}", f"{r.step_gain:.3f}×",
                  f"{r.total_gain:.3f}×")
    con.print(t)
    con.print(f"base preset {ab.BASE_PRESET}; each step keeps the overrides of the steps "
              "before it; step gain = tokens/s over the previous step's")
    out = {"command": "compare", "ablation": [r.to_dict() for r in rows], "model": spec.name,
           "workload": b.summary(), "base_preset": ab.BASE_PRESET,
           "user_overrides": list(overrides)}
    if json_path:
        write_json(out, json_path)
        con.print(f"json: {json_path}")
    return out


__all__ = ["ablation_command"]
