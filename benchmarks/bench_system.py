"""Speed and headline numbers of the whole-system simulator (archsim.system), one core.

Workload: GPT3-7B, TP4, the NeuPIMs decode snapshot ``clb-0`` (512 requests, min-load
channels; ``../shared/data/neupims/request-traces/clb/share-gpt2-bs512-ms7B-tp4-clb-0.csv``),
or a built-in ShareGPT-like batch when the shared data is absent (``--batch N``).

Modes (``--what``, comma-separated):

* ``layer``: one decode iteration of one layer on the neupims preset (interleaving on): the
  compiled single-layer program (stages A, B, E, F) executed on NPU + HBM/PIM, with the split
  of its wall time (compile, program load, executor set-up and tables, event loop, report).
* ``model``: the whole 32-layer iteration on neupims via ``simulate_iteration`` (a window of
  layers simulated, identical layers reused).
* ``compare``: one decode iteration on each system (neupims, npu-pim, npu, gpu), tokens/s and
  speedups of neupims next to the published ones (3x GPU, 2.4x NPU, 1.6x NPU+PIM).
* ``jobs``: ``archsim compare --model gpt3-7b --batch 256 --dataset sharegpt`` (``make demo``'s
  job; ``--paper`` with ``--paper``) as a command with ``--jobs J`` for each J of ``--jobs``
  (default 1,2): wall time, peak RSS and peak PSS of the process tree (the command, its fork
  server and workers; sampled from ``/proc`` every 0.2 s), and whether the printed output is
  identical.
* ``snapshots``: every NeuPIMs snapshot (``clb`` and ``rr``) on the four systems (``--window``
  layers each, default 4): throughput and any error, one line per snapshot and system.

``--engines`` (``layer`` and ``model``): ``compiled`` (default; the executor's event loop in
numba beside the memory kernel, :mod:`archsim.npu.cloop`) and/or ``python`` (the readable
reference loop, :class:`archsim.npu.executor.Executor` with ``fast_forward=False``, on the same
compiled memory; minutes on the clb-0 layer). Each engine runs in a fresh process (its own
peak RSS; numba's cached code loaded, not compiled, unless the cache is cold: run once
first), and the rows end with the speed-up and whether the cycles agree. ``--recorded FILE``
prints the rows of an earlier ``--json`` (another commit) beside them.

Reports wall time, CPU time, simulated NPU cycles, simulated cycles per wall second, events
per wall second (NPU instructions + DRAM/PIM commands, the work of the event loop), the peak
resident set size of the process (``ru_maxrss``, MiB) and, for the layer on the compiled
memory, the memory kernel's scheduling decisions and how many of them were admission-only
re-decisions (``KernelMemory.decisions``).

Measured (one layer, wall; GPT3-7B clb-0, 542,125 NPU cycles, 237,713 instructions, 4.96 M
DRAM/PIM commands): see docs/results.md ("Simulator speed") for the numbers of each commit.

Not a test; run:
    .venv/bin/python benchmarks/bench_system.py --what layer,model [--engines compiled,python]
        [--json out.json] [--recorded before.json]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = (ROOT.parent / "shared" / "data" / "neupims" / "request-traces" / "clb"
            / "share-gpt2-bs512-ms7B-tp4-clb-0.csv")


def _batch(args, model):
    from workloads import default_batch, load_decode_snapshot

    if args.batch is None and SNAPSHOT.is_file():
        return load_decode_snapshot(SNAPSHOT), SNAPSHOT.name
    n = args.batch or 512
    return default_batch(model, n, "sharegpt", seed=0), f"built-in sharegpt batch of {n}"


def _peak_rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux ``ru_maxrss`` is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_layer(args, model, batch, engine: str = "compiled") -> dict:
    """One layer, neupims, compiled alone (single-layer program), on ``engine``."""
    from archsim.config import load_config
    from archsim.system import run_window

    cfg = load_config("neupims")
    t, c = time.perf_counter(), time.process_time()
    w = run_window(cfg, model, batch, [0], memory=args.memory,
                   fast_forward=engine == "compiled")
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    instructions = sum(s.instructions for s in w.stats.streams.values())
    commands = sum(w.mem_stats["commands"].values())
    dec = getattr(w.memory, "decisions", None)
    decisions, short = dec() if dec is not None else (None, None)
    return {"what": "one layer, neupims", "engine": engine, "wall_s": wall, "cpu_s": cpu,
            "compile_s": w.compile_s, "phase_s": dict(w.phase_s),
            "npu_cycles": w.stats.cycles, "cycles_per_wall_s": w.stats.cycles / wall,
            "npu_instructions": instructions, "dma_requests": w.stats.dma.requests,
            "memory_commands": commands,
            "scheduling_decisions": decisions, "admission_only_decisions": short,
            "events_per_wall_s": (instructions + commands) / wall,
            "peak_rss_mib": _peak_rss_mib(), "stages": dict(w.stage_end)}


def _in_child(fn_name: str, args, *extra):
    """Run ``fn_name(args, model, batch, *extra)`` in this (fresh) process."""
    from workloads import get_model

    model = get_model("gpt3-7b")
    batch, _ = _batch(args, model)
    return globals()[fn_name](args, model, batch, *extra)


def _fresh(fn_name: str, args, *extra) -> dict:
    """``fn_name`` in a fresh process (its own peak RSS and numba state)."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(_in_child, (fn_name, args, *extra))


def _versus(rows: list[dict]) -> dict | None:
    """The speed-up of the compiled engine over the reference, and whether cycles agree."""
    by = {r["engine"]: r for r in rows}
    if "compiled" not in by or "python" not in by:
        return None
    key = "npu_cycles" if "npu_cycles" in by["compiled"] else "cycles_per_iteration"
    return {"what": f"{rows[0]['what']}: compiled vs python engine",
            "speedup_wall": by["python"]["wall_s"] / by["compiled"]["wall_s"],
            "speedup_cpu": by["python"]["cpu_s"] / by["compiled"]["cpu_s"],
            "same_cycles": by["python"][key] == by["compiled"][key]}


def bench_system(args, model, batch, preset: str, engine: str = "compiled") -> dict:
    """One full iteration of ``preset`` (all layers; window + reuse) on ``engine``."""
    from archsim.config import load_config
    from archsim.serving import simulate_system_iteration

    cfg = load_config(preset)
    t, c = time.perf_counter(), time.process_time()
    kw = {} if "gpu" in cfg.system.engines else {"window": args.window,
                                                 "fast_forward": engine == "compiled"}
    r = simulate_system_iteration(cfg, model, batch, system=preset, with_events=False, **kw)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    out = {"what": f"{model.n_layers} layers, {preset}", "system": preset, "engine": engine,
           "wall_s": wall,
           "cpu_s": cpu, "peak_rss_mib": _peak_rss_mib(),
           "tokens_per_s": r.tokens_per_s, "tokens_per_s_per_device": r.tokens_per_s_per_device,
           "cycles_per_iteration": r.cycles_per_iteration,
           "seconds_per_iteration": r.seconds_per_iteration,
           "npu_util": r.npu_util, "pim_util": r.pim_util, "flops_util": r.flops_util,
           "mean_channel_bw_util": r.mean_channel_bw_util,
           "energy_per_token_uj": r.energy_per_token_uj,
           "layers_simulated": r.layers_simulated, "layers_reused": r.layers_reused,
           "stage_seconds": r.stage_seconds, "notes": r.notes}
    if r.cycles_per_iteration:
        window = r.extra.get("window_cycles", 0.0)
        out["simulated_window_cycles"] = window
        out["cycles_per_wall_s"] = window / wall
        out["layer_cycles"] = r.layer_cycles
    return out


def _tree_run(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall time (s), exit code, stdout, and the peaks of the summed RSS and of
    the summed PSS of it and all its descendants (MiB, sampled from /proc every 0.2 s; None
    without /proc). The RSS sum counts a page shared by several processes (the fork server's
    imported libraries in every worker) once per process; the PSS (proportional set size,
    ``/proc/PID/smaps_rollup``) divides it among them, so its sum is what the tree occupies."""
    import os
    import subprocess

    def children() -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                out.setdefault(ppid, []).append(int(d))
        return out

    def kib(pid: int, file: str, key: str) -> int:
        try:
            for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    t = time.perf_counter()
    # stdout to a file, not a pipe: a pipe nobody reads while the loop samples would fill (the
    # paper grid's table) and stall the command
    with tempfile.TemporaryFile("w+") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL, text=True)
        peak = peak_pss = 0
        have_proc = Path("/proc/self/status").exists()
        while have_proc and proc.poll() is None:
            kids, todo, total, pss = children(), [proc.pid], 0, 0
            while todo:
                q = todo.pop()
                total += kib(q, "status", "VmRSS:")
                pss += kib(q, "smaps_rollup", "Pss:")
                todo += kids.get(q, [])
            peak, peak_pss = max(peak, total), max(peak_pss, pss)
            time.sleep(0.2)
        proc.wait()
        sink.seek(0)
        out = sink.read()
    return {"wall_s": time.perf_counter() - t, "rc": proc.returncode, "stdout": out,
            "peak_tree_rss_mib": peak / 2**20 if have_proc else None,
            "peak_tree_pss_mib": peak_pss / 2**20 if have_proc else None}


def bench_jobs(args) -> list[dict]:
    """The ``jobs`` mode (module docstring)."""
    exe = str(Path(sys.executable).with_name("archsim"))
    base = [exe, "compare", "--quiet"] + (["--paper"] if args.paper else [
        "--model", "gpt3-7b", "--batch", "256", "--dataset", "sharegpt"])
    rows, first = [], None
    for j in [int(x) for x in args.jobs.split(",") if x]:
        r = _tree_run(base + ["--jobs", str(j)])
        first = r["stdout"] if first is None else first
        row = {"what": f"archsim {' '.join(base[1:])} --jobs {j}", "jobs": j,
               "wall_s": r["wall_s"], "peak_tree_rss_mib": r["peak_tree_rss_mib"],
               "peak_tree_pss_mib": r["peak_tree_pss_mib"],
               "exit_code": r["rc"], "output_identical_to_first": r["stdout"] == first}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", default="layer,model")
    ap.add_argument("--batch", type=int, default=None,
                    help="built-in batch size instead of the clb-0 snapshot")
    ap.add_argument("--memory", default="fast", choices=("fast", "exact"))
    ap.add_argument("--systems", default="neupims,npu-pim-blocked,npu-only,gpu-a100")
    ap.add_argument("--window", type=int, default=4,
                    help="layers simulated per iteration (archsim.system.DEFAULT_WINDOW)")
    ap.add_argument("--snapshots", default="*/*.csv",
                    help="snapshots: glob under the request-traces directory (e.g. 'rr/*-rr-[0-2].csv')")
    ap.add_argument("--keep-channels", action="store_true",
                    help="snapshots: keep each trace's ch_idx instead of the system's policy")
    ap.add_argument("--engines", default="compiled",
                    help="layer/model: compiled and/or python (the reference loop), each in a "
                         "fresh process")
    ap.add_argument("--recorded", default=None,
                    help="an earlier --json output to print beside this run's rows")
    ap.add_argument("--jobs", default="1,2",
                    help="jobs: the --jobs values of archsim compare to run, e.g. 1,2")
    ap.add_argument("--paper", action="store_true",
                    help="jobs: the whole paper grid (compare --paper) instead of the demo's job")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    bad = [e for e in engines if e not in ("compiled", "python")]
    if bad or not engines:
        ap.error(f"--engines {args.engines!r}: each one of compiled, python")
    from workloads import get_model

    model = get_model("gpt3-7b")
    batch, src = _batch(args, model)
    rows = []
    what = args.what.split(",")
    print(f"workload: gpt3-7b, {src}, {len(batch)} requests", flush=True)
    if "layer" in what:
        mine = [_fresh("bench_layer", args, e) for e in engines]
        for r in mine:
            print(json.dumps({k: v for k, v in r.items() if k != "stages"}), flush=True)
        rows += mine
        v = _versus(mine)
        if v:
            rows.append(v)
            print(json.dumps(v), flush=True)
    if "model" in what:
        mine = [_fresh("bench_system", args, "neupims", e) for e in engines]
        for r in mine:
            print(json.dumps({k: r[k] for k in ("what", "engine", "wall_s", "cpu_s",
                                                "cycles_per_iteration", "tokens_per_s",
                                                "cycles_per_wall_s", "peak_rss_mib")}),
                  flush=True)
        rows += mine
        v = _versus(mine)
        if v:
            rows.append(v)
            print(json.dumps(v), flush=True)
    if args.recorded:
        for r in json.loads(Path(args.recorded).read_text()):
            if "wall_s" in r and r.get("what", "").split(",")[0] in (
                    "one layer", f"{model.n_layers} layers"):
                print("recorded: " + json.dumps({k: r.get(k) for k in (
                    "what", "engine", "wall_s", "cpu_s", "npu_cycles", "cycles_per_iteration",
                    "cycles_per_wall_s", "events_per_wall_s", "peak_rss_mib")
                    if k in r}), flush=True)
    if "compare" in what:
        res = {}
        done = {r.get("system"): r for r in rows if r.get("system")}
        for p in args.systems.split(","):
            r = done.get(p)
            if r is None:
                r = bench_system(args, model, batch, p)
                rows.append(r)
            res[p] = r
            print(json.dumps({k: r.get(k) for k in ("system", "wall_s", "cycles_per_iteration",
                                                    "tokens_per_s", "npu_util", "pim_util")}),
                  flush=True)
        if "neupims" in res:
            ref = res["neupims"]["tokens_per_s"]
            published = {"gpu-a100": 3.0, "npu-only": 2.4, "npu-pim-blocked": 1.6}
            sp = {p: {"measured": ref / r["tokens_per_s"], "published": published.get(p)}
                  for p, r in res.items()}
            rows.append({"what": "speedup of neupims", "speedup": sp})
            print(json.dumps(rows[-1]), flush=True)
    if "jobs" in what:
        rows += bench_jobs(args)
    if "snapshots" in what:
        from archsim.config import load_config
        from archsim.serving import compile_options, simulate_system_iteration
        from workloads import load_decode_snapshot

        for path in sorted(SNAPSHOT.parent.parent.glob(args.snapshots)):
            snap = load_decode_snapshot(path)
            for p in args.systems.split(","):
                cfg = load_config(p)
                kw = {} if "gpu" in cfg.system.engines else {
                    "window": args.window,
                    "compile_options": compile_options(args.keep_channels)}
                t = time.perf_counter()
                try:
                    r = simulate_system_iteration(cfg, model, snap, system=p,
                                                  with_events=False, **kw)
                    row = {"snapshot": path.stem, "system": p, "tokens_per_s": r.tokens_per_s,
                           "channels": (r.extra.get("compile") or {}).get("channel_placement"),
                           "error": None}
                except Exception as exc:          # report, keep going
                    row = {"snapshot": path.stem, "system": p, "tokens_per_s": None,
                           "error": f"{type(exc).__name__}: {exc}"}
                row["wall_s"] = time.perf_counter() - t
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
