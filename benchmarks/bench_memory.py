"""Memory-model throughput: requests/s and commands/s of wall time, one core.

Sequential and random read patterns on the full NeuPIMs HBM2 (32 channels), fast path
(numba) and exact path (pure Python). Not a test; run:
    .venv/bin/python benchmarks/bench_memory.py [--fast-n 1000000] [--exact-n 100000]
The numba compile happens once before timing (it is cached on disk after the first run).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from archsim.config import load_config
from archsim.memory.runner import run_requests
from archsim.memory.selftest import pattern_requests


def bench(cfg, pattern: str, n: int, engine: str) -> dict:
    reqs = pattern_requests(cfg, pattern, n)
    t0 = time.perf_counter()
    res = run_requests(cfg, *reqs, engine=engine)
    wall = time.perf_counter() - t0
    ncmd = sum(res.stats["commands"].values())
    return {"pattern": pattern, "engine": engine, "requests": n, "commands": ncmd,
            "wall_s": wall, "requests_per_s": n / wall, "commands_per_s": ncmd / wall,
            "sim_cycles": res.stats["sim_cycles"],
            "bw_per_channel": res.stats["mean_channel_bandwidth_bytes_per_cycle"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fast-n", type=int, default=1_000_000)
    ap.add_argument("--exact-n", type=int, default=100_000)
    args = ap.parse_args()
    cfg = load_config("neupims")
    run_requests(cfg, *pattern_requests(cfg, "seq_read", 1000), engine="fast")   # JIT warm-up
    print(f"{'pattern':12s} {'engine':6s} {'requests':>9} {'commands':>9} {'wall s':>7} "
          f"{'req/s':>10} {'cmd/s':>10} {'B/cyc/ch':>8}")
    for engine, n in (("fast", args.fast_n), ("exact", args.exact_n)):
        for pattern in ("seq_read", "random_read"):
            r = bench(cfg, pattern, n, engine)
            print(f"{r['pattern']:12s} {r['engine']:6s} {r['requests']:>9} {r['commands']:>9} "
                  f"{r['wall_s']:7.2f} {r['requests_per_s']:10.0f} {r['commands_per_s']:10.0f} "
                  f"{r['bw_per_channel']:8.2f}")


if __name__ == "__main__":
    main()
