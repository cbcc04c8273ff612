"""Speed of the MemoryPort path (MemorySystem.submit / can_accept / next_event_cycle /
advance_to) end to end, one core.

Two workloads:

* ``gemm``: an M x K @ K x N GEMM compiled for the NPU and run by
  :class:`archsim.npu.executor.Executor` against :class:`archsim.memory.system.MemorySystem` (every 64 B DMA request through the port);
* ``stream``: sequential 64 B reads submitted step by step as a DMA would (``can_accept`` before
  each submit, at most ``--outstanding`` in flight, ``next_event_cycle`` / ``advance_to``
  between steps), no NPU.

Prints requests per wall second and wall time for each memory engine named in ``--engines``
(``exact`` = the default MemorySystem engine, ``exact-py`` = the unoptimised reference path,
``system-jit`` = archsim.memory.kernel.KernelMemory, the compiled controller, for comparison).
Not a test; run:
    .venv/bin/python benchmarks/bench_memport.py [--M 256 --K 1024 --N 1024]
        [--stream-requests 200000] [--engines exact,exact-py] [--json OUT.json]
The issue-6 size is ``--M 1024 --K 4096 --N 4096`` (786K requests).
"""
from __future__ import annotations

import argparse
import inspect
import json
import time

from archsim.config import load_config
from archsim.memport import MemRequest


def make_memory(cfg, engine: str):
    """A MemorySystem using ``engine`` (older versions without the argument: the default);
    ``system-jit`` is the compiled controller (archsim.memory.kernel), for
    comparison."""
    from archsim.memory.system import MemorySystem

    if engine == "system-jit":
        from archsim.memory.kernel import KernelMemory as FastMemorySystem

        return FastMemorySystem(cfg)

    if "engine" in inspect.signature(MemorySystem).parameters:
        return MemorySystem(cfg, engine=engine)
    return MemorySystem(cfg)


def bench_gemm(cfg, M: int, K: int, N: int, engine: str) -> dict:
    """Time the GEMM through Executor + MemorySystem."""
    from archsim.npu.executor import Executor
    from archsim.npu.gemm import build_gemm_program

    g = build_gemm_program(M, K, N, cfg)
    mem = make_memory(cfg, engine)
    t0 = time.perf_counter()
    c0 = time.process_time()
    st = Executor(g.program, cfg, mem).run()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"workload": f"gemm {M}x{K}x{N}", "engine": engine, "wall_s": wall, "cpu_s": cpu,
            "requests": st.dma.requests, "requests_per_wall_s": st.dma.requests / wall,
            "npu_cycles": st.cycles, "mem_commands": len(mem.command_log())}


def bench_stream(cfg, n: int, outstanding: int, engine: str) -> dict:
    """Sequential 64 B reads, submitted step by step with back-pressure."""
    mem = make_memory(cfg, engine)
    t0 = time.perf_counter()
    c0 = time.process_time()
    now = 0
    sent = done = 0
    inflight = 0
    while done < n:
        while sent < n and inflight < outstanding:
            addr = sent * 64
            if not mem.can_accept(addr):
                break
            mem.submit(MemRequest(sent, addr, 64, False, now + 1))
            sent += 1
            inflight += 1
        nxt = mem.next_event_cycle()
        now = max(now + 1, nxt if nxt is not None else now + 1)
        c = mem.advance_to(now)
        done += len(c)
        inflight -= len(c)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return {"workload": f"stream {n} x 64 B reads", "engine": engine, "wall_s": wall,
            "cpu_s": cpu, "requests": n, "requests_per_wall_s": n / wall, "mem_cycles": now,
            "mem_commands": len(mem.command_log())}


def _show(r: dict) -> None:
    print(f"{r['workload']:<32} {r['engine']:<9} {r['wall_s']:8.2f} s wall {r['cpu_s']:8.2f} s cpu"
          f" {r['requests_per_wall_s']:10.0f} requests/wall s"
          f" {r['requests'] / r['cpu_s']:10.0f} requests/cpu s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="neupims")
    ap.add_argument("--M", type=int, default=256)
    ap.add_argument("--K", type=int, default=1024)
    ap.add_argument("--N", type=int, default=1024)
    ap.add_argument("--stream-requests", type=int, default=200_000)
    ap.add_argument("--outstanding", type=int, default=512)
    ap.add_argument("--engines", default="exact")
    ap.add_argument("--skip", default="", help="comma list of workloads to skip (gemm,stream)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    cfg = load_config(a.preset)
    skip = set(filter(None, a.skip.split(",")))
    res = []
    for eng in a.engines.split(","):
        if "stream" not in skip:
            res.append(bench_stream(cfg, a.stream_requests, a.outstanding, eng))
            _show(res[-1])
        if "gemm" not in skip:
            res.append(bench_gemm(cfg, a.M, a.K, a.N, eng))
            _show(res[-1])
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
