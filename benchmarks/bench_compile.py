"""Mapping-compiler speed: GPT3-7B decode, batch 512, one layer and all 32 layers.

The batch is the reference snapshot ``../shared/data/neupims/request-traces/clb/...-clb-0.csv``
when it exists (TP4, batch 512, seq_len/channel per request), else the workloads' default
warm-up snapshot of 512 ShareGPT-like requests. Wall time on one core includes graph building,
placement, allocation and instruction generation (not writing files). Not a test; run:

    .venv/bin/python benchmarks/bench_compile.py [--system neupims] [--layers 1,all]
"""
from __future__ import annotations

import argparse
import gc
import resource
import time
from pathlib import Path

from archsim.config import load_config
from mapping import compile_layer, compile_model
from workloads.models import get_model
from workloads.requests import default_batch, load_decode_snapshot

SNAPSHOT = (Path(__file__).resolve().parents[1].parent / "shared" / "data" / "neupims" /
            "request-traces" / "clb" / "share-gpt2-bs512-ms7B-tp4-clb-0.csv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--system", default="neupims")
    ap.add_argument("--layers", default="1,all", help="comma list of 1 and/or all")
    args = ap.parse_args()
    model = get_model("gpt3-7b")
    cfg = load_config(args.system)
    if SNAPSHOT.is_file():
        batch = load_decode_snapshot(SNAPSHOT)
        src = SNAPSHOT.name
    else:
        batch = default_batch(model, 512)
        src = "workloads.default_batch(gpt3-7b, 512)"
    print(f"GPT3-7B decode, {len(batch)} requests ({src}), system {args.system}")
    print(f"{'layers':>6} {'wall s':>8} {'instructions':>13} {'instr/s':>10} "
          f"{'max RSS MiB':>11} {'kv placement':>12}")
    for which in args.layers.split(","):
        gc.collect()
        t0 = time.perf_counter()
        if which == "1":
            cp = compile_layer(model, batch, cfg)
        else:
            cp = compile_model(model, batch, cfg)
        wall = time.perf_counter() - t0
        n = cp.program.n_instructions
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{which:>6} {wall:8.2f} {n:13d} {n / wall:10.0f} {rss:11.0f} "
              f"{cp.plan.kv_placement:>12}")
        del cp


if __name__ == "__main__":
    main()
