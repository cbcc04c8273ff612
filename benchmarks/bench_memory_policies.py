"""The memory controller's knobs on a real layer: cycles, PIM utilisation, checker verdict.

Workload: one GPT3-7B decode layer (TP4) on the NeuPIMs ``clb-0`` snapshot (512 requests,
``../shared/data/neupims/request-traces/clb/``) or a built-in ShareGPT-like batch when the
shared data is absent (``--batch N``), compiled for the ``neupims`` preset and simulated cycle
by cycle once per variant: the preset's defaults, then one controller knob changed at a time
(scheduler, page policy, write policy, refresh mode, PIM command-queue depth; ``--variants``).

Per variant: NPU cycles of the layer, wall seconds, PIM utilisation (union of PIM-command
busy intervals per channel / (channels × memory cycles of the layer)), DRAM command counts and,
with ``--check``, the independent timing checker's violations on the whole command log (slow:
minutes per variant). Not a test; run:
    .venv/bin/python benchmarks/bench_memory_policies.py [--check] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = (ROOT.parent / "shared" / "data" / "neupims" / "request-traces" / "clb"
            / "share-gpt2-bs512-ms7B-tp4-clb-0.csv")

VARIANTS = {
    "default": [],
    "fcfs": ["memory.controller.scheduler=fcfs"],
    "fr_fcfs_cap": ["memory.controller.scheduler=fr_fcfs_cap"],
    "closed": ["memory.controller.page_policy=closed"],
    "closed_adaptive": ["memory.controller.page_policy=closed_adaptive"],
    "timeout": ["memory.controller.page_policy=timeout"],
    "drain": ["memory.controller.write_policy=drain"],
    "rank_staggered": ["memory.refresh.mode=rank_staggered"],
    "per_bank": ["memory.refresh.mode=per_bank"],
    "pim_depth_2": ["pim.command_queue_depth=2"],
    "pim_depth_4": ["pim.command_queue_depth=4"],
    "pim_depth_8": ["pim.command_queue_depth=8"],
}


def run_variant(name: str, sets: list[str], model, batch, check: bool) -> dict:
    """Compile and simulate the layer on ``neupims`` with ``sets``; return the row."""
    import numpy as np

    from archsim.config import load_config
    from archsim.memory.checker import check_log
    from archsim.system import run_window

    cfg = load_config("neupims", sets)
    t = time.perf_counter()
    w = run_window(cfg, model, batch, [0], keep_log=check)
    wall = time.perf_counter() - t
    mem_cycles = cfg.npu_to_mem_cycles(w.stats.cycles)
    busy, _ = w.memory.pim_busy_cycles()
    row = {"variant": name, "sets": sets, "npu_cycles": w.stats.cycles, "wall_s": wall,
           "pim_util": float(np.sum(busy)) / (cfg.memory.org.channels * mem_cycles),
           "commands": w.mem_stats["commands"]}
    if check:
        t = time.perf_counter()
        row["violations"] = len(check_log(w.memory.command_log(), cfg, max_violations=100))
        row["check_s"] = time.perf_counter() - t
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=None,
                    help="built-in sharegpt batch size instead of the clb-0 snapshot")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated subset of {', '.join(VARIANTS)}")
    ap.add_argument("--check", action="store_true", help="run the timing checker on each log")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from workloads import default_batch, get_model, load_decode_snapshot

    model = get_model("gpt3-7b")
    if args.batch is None and SNAPSHOT.is_file():
        batch, src = load_decode_snapshot(SNAPSHOT), SNAPSHOT.name
    else:
        n = args.batch or 512
        batch, src = default_batch(model, n, "sharegpt", seed=0), f"built-in batch of {n}"
    print(f"workload: one gpt3-7b decode layer, {src}, {len(batch)} requests, neupims; "
          "cycles are NPU cycles of the layer, PIM util = PIM-busy memory cycles / (channels x "
          "layer memory cycles)", flush=True)
    rows = []
    for name in args.variants.split(","):
        r = run_variant(name, VARIANTS[name], model, batch, args.check)
        rows.append(r)
        viol = f"  violations {r['violations']} ({r['check_s']:.0f} s)" if args.check else ""
        print(f"{name:16s} {r['npu_cycles']:>10,} cycles  PIM util {r['pim_util']:6.1%}  "
              f"wall {r['wall_s']:6.1f} s{viol}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
