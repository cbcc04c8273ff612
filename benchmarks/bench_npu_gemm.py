"""NPU timing-model speed: the 1024x4096 @ 4096x4096 GEMM on 8 arrays of 128x128.

Prints, per memory model, the simulated NPU cycles, the compute bound, DMA requests, wall time,
simulated cycles per wall second and memory requests per wall second (one core). Not a test;
run:
    .venv/bin/python benchmarks/bench_npu_gemm.py [--M 1024 --K 4096 --N 4096]
        [--memory simple,starved,hbm] [--json OUT.json]
``simple``: SimpleMemory at the preset's peak bandwidth (compute bound); ``starved``:
SimpleMemory at 1/8 of it (memory bound); ``hbm``: the cycle-level HBM model
(archsim.memory.system.MemorySystem; slow: ~30 us per request).
"""
from __future__ import annotations

import argparse
import json
import time

from archsim.config import load_config
from archsim.npu.executor import Executor
from archsim.npu.gemm import build_gemm_program
from archsim.npu.simple_memory import SimpleMemory


def make_memory(kind: str, cfg):
    """The memory port called ``kind`` (simple, starved, hbm)."""
    if kind == "simple":
        return SimpleMemory.from_config(cfg)
    if kind == "starved":
        return SimpleMemory.from_config(
            cfg, bytes_per_cycle=cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel / 8)
    if kind == "hbm":
        from archsim.memory.system import MemorySystem

        return MemorySystem(cfg)
    raise SystemExit(f"unknown memory '{kind}' (simple, starved, hbm)")


def bench(M: int, K: int, N: int, kind: str, cfg) -> dict:
    """Build and time one GEMM simulation; returns the measured numbers."""
    t0 = time.perf_counter()
    g = build_gemm_program(M, K, N, cfg)
    t1 = time.perf_counter()
    st = Executor(g.program, cfg, make_memory(kind, cfg)).run()
    wall = time.perf_counter() - t1
    return {"M": M, "K": K, "N": N, "memory": kind, "build_s": t1 - t0, "wall_s": wall,
            "cycles": st.cycles, "compute_bound_cycles": g.compute_bound_cycles,
            "cycles_over_bound": st.cycles / g.compute_bound_cycles, "bound": st.bound,
            "array_utilisation": st.array_utilisation, "requests": st.dma.requests,
            "sim_cycles_per_wall_s": st.cycles / wall, "requests_per_wall_s": st.dma.requests / wall,
            "instructions": g.program.n_instructions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--M", type=int, default=1024)
    ap.add_argument("--K", type=int, default=4096)
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--memory", default="simple,starved")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    cfg = load_config("neupims")
    rows = []
    print(f"GEMM {args.M}x{args.K} @ {args.K}x{args.N} on {cfg.npu.n_arrays} arrays of "
          f"{cfg.npu.array_height}x{cfg.npu.array_width} (NPU cycles at "
          f"{cfg.npu.freq_mhz:g} MHz, one device)")
    print(f"{'memory':8s} {'cycles':>9} {'bound':>9} {'ratio':>6} {'limit':>8} {'util':>5} "
          f"{'requests':>9} {'wall s':>7} {'cyc/wall-s':>11} {'req/wall-s':>11}")
    for kind in args.memory.split(","):
        r = bench(args.M, args.K, args.N, kind, cfg)
        rows.append(r)
        print(f"{kind:8s} {r['cycles']:>9} {r['compute_bound_cycles']:>9} "
              f"{r['cycles_over_bound']:6.3f} {r['bound']:>8} {r['array_utilisation']:5.3f} "
              f"{r['requests']:>9} {r['wall_s']:7.2f} {r['sim_cycles_per_wall_s']:11.0f} "
              f"{r['requests_per_wall_s']:11.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
