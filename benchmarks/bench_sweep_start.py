"""How soon a large sweep shows its first point: a 1,500-point GPU roofline grid.

Measures, in one process (``--jobs 1``) and with a local pool (``--jobs 2``), the wall time from
loading the spec to the first committed point, and to the end of the first 100 points, plus the
per-point cost of resolving a point (config validation and hashing, with the preset parsed once
per process). The progress total is known before the first point (no ``0/?``). Not a test; run:

    .venv/bin/python benchmarks/bench_sweep_start.py [--jobs 1,2] [--points 100]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

SPEC = """\
name: start-1500
workload: {system: gpu, model: gpt3-7b, dataset: sharegpt, seed: 0, phase: decode}
parameters:
  batch: [8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512]
  gpu.gemm_efficiency: [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
  gpu.gemv_efficiency: [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
search: {kind: grid}
objectives:
  - {metric: tokens_per_s, goal: maximize}
  - {metric: seconds_per_iteration, goal: minimize}
"""


class _Stop(Exception):
    pass


def measure(jobs: int, points: int) -> dict[str, float]:
    from archsim.sweep.runner import run_sweep
    from archsim.sweep.spec import load_spec

    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.yaml"
        spec_path.write_text(SPEC)
        t0 = time.perf_counter()
        spec = load_spec(spec_path)
        seen: dict[str, float] = {}

        def progress(p) -> None:
            n = p.done + p.failed + p.infeasible
            if "total_known" not in seen and p.total:
                seen["total_known"] = time.perf_counter() - t0
            if n >= 1 and "first" not in seen:
                seen["first"] = time.perf_counter() - t0
            if n >= points:
                seen["batch"] = time.perf_counter() - t0
                raise _Stop

        try:
            run_sweep(spec, Path(tmp) / "out", jobs=jobs, progress=progress)
        except _Stop:
            pass
        return seen


def resolve_cost() -> float:
    from archsim.sweep.space import grid_points, resolve_point
    from archsim.sweep.spec import load_spec

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "spec.yaml"
        p.write_text(SPEC)
        spec = load_spec(p)
        params = list(grid_points(spec))
        t0 = time.perf_counter()
        for q in params:
            resolve_point(spec, q)
        return (time.perf_counter() - t0) / len(params)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", default="1,2", help="comma list of --jobs values")
    ap.add_argument("--points", type=int, default=100, help="points to wait for")
    args = ap.parse_args()
    print(f"resolving one point (validate + hash, preset cached): "
          f"{resolve_cost() * 1e3:.2f} ms; 1,500 points: {resolve_cost() * 1500:.1f} s")
    for j in (int(x) for x in args.jobs.split(",")):
        r = measure(j, args.points)
        print(f"--jobs {j}: progress total known after {r.get('total_known', float('nan')):.2f} s,"
              f" first point after {r.get('first', float('nan')):.2f} s, {args.points} points "
              f"after {r.get('batch', float('nan')):.2f} s (wall, from loading the spec)")


if __name__ == "__main__":
    main()
