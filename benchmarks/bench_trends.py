"""The published NeuPIMs trends on this simulator: PIM gain versus batch size, and where sub-batch
interleaving helps or hurts.

For GPT3-7B (TP4) decode and a warmed-up ShareGPT-like batch of each size (the built-in
workload, :func:`workloads.default_batch`, seed 0), one decode iteration (all 32 layers; a window
of layers simulated cycle by cycle, identical layers reused) on:

* ``neupims``  - dual row buffers, two sub-batches interleaved, min-load channels;
* ``neupims-1sb`` - the same machine with ``system.sub_batches=1`` (no interleaving);
* ``neupims-auto`` - the same machine with ``system.sub_batches=auto`` (the runtime simulates
  one and two sub-batches and keeps the faster, per iteration);
* ``npu-pim``  - the naive NPU+PIM baseline (``npu-pim-blocked``: single row buffer, no
  interleaving, round-robin channels);
* ``npu``      - NPU only (attention through the bus, ``npu-only``).

Prints one line per (batch, system) with tokens/s (system, one batch in flight) and, per batch,
the speedups of neupims over npu-pim and npu and the interleaving gain
(neupims tokens/s / neupims-1sb tokens/s). With ``--json FILE`` writes every number.
Published claims to compare with: the PIM gain grows with the batch; interleaving helps at
large batch and may hurt at small batch. Not a test (tens of minutes on one core); run:
    .venv/bin/python benchmarks/bench_trends.py [--batches 64,128,256,512] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

SYSTEMS = {"neupims": ("neupims", ()), "neupims-1sb": ("neupims", ("system.sub_batches=1",)),
           "neupims-auto": ("neupims", ("system.sub_batches=auto",)),
           "npu-pim": ("npu-pim-blocked", ()), "npu": ("npu-only", ())}


def run_point(model, batch, name: str, window: int) -> dict:
    """One decode iteration of ``batch`` on system ``name`` (a key of :data:`SYSTEMS`)."""
    from archsim.config import load_config
    from archsim.serving import simulate_system_iteration

    preset, sets = SYSTEMS[name]
    cfg = load_config(preset, list(sets))
    t = time.perf_counter()
    r = simulate_system_iteration(cfg, model, batch, system=preset, with_events=False,
                                  window=window)
    return {"system": name, "preset": preset, "overrides": list(sets),
            "tokens_per_s": r.tokens_per_s, "cycles_per_iteration": r.cycles_per_iteration,
            "npu_util": r.npu_util, "pim_util": r.pim_util,
            "sub_batches_auto": r.extra.get("sub_batches_auto"),
            "wall_s": time.perf_counter() - t}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="64,128,256,512")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--window", type=int, default=4, help="layers simulated per iteration")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from workloads import default_batch, get_model

    model = get_model("gpt3-7b")
    rows = []
    for n in [int(x) for x in args.batches.split(",")]:
        batch = default_batch(model, n, "sharegpt", seed=0)
        got = {}
        for name in args.systems.split(","):
            r = run_point(model, batch, name, args.window)
            r["batch"] = n
            got[name] = r
            rows.append(r)
            print(f"batch {n:4d} {name:12s} {r['tokens_per_s']:10,.0f} tokens/s  "
                  f"NPU util {r['npu_util']:.2f}  PIM util {r['pim_util'] or 0:.2f}  "
                  f"({r['wall_s']:.0f} s wall)", flush=True)
        tp = {k: v["tokens_per_s"] for k, v in got.items()}
        if "neupims" in tp:
            parts = [f"neupims / {k} = {tp['neupims'] / v:.2f}x" for k, v in tp.items()
                     if k != "neupims"]
            print(f"batch {n:4d} " + ", ".join(parts), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
