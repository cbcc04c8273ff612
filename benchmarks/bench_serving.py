"""Wall time of a whole serving run and the surrogate's error against cycle-level timing.

Workload: ``--requests N`` ShareGPT-like requests (built-in distribution, seed 0), all arriving at
t = 0, on ``--system`` (default neupims) with ``--model`` (default GPT3-7B, TP4), continuous
batching (max batch 256, vLLM prefill budget; or ``--chunked-prefill TOKENS``: a token budget per
iteration, decode steps plus prompt chunks as one program, Sarathi-Serve), iterations timed by
the default serving timer (Gaussian-process surrogate over cycle-level samples of a 3-layer
window, each compiled with the KV channels the scheduler gave its requests at admission, as
``archsim serve`` runs it).

Prints: wall time, iterations by timing source, cycle-level samples and their wall time (per
phase: count, mean and max seconds each, where the seconds went: the compile, program load and
executor tables, the event loop, the reports (the executor's and the iteration's: critical path,
energy counts), the rest; why each was simulated), the surrogate's online
out-of-sample error, the serving metrics (TTFT, TPOT, each request's largest token gap), and with
``--validate K`` the surrogate's error on K of the iterations it timed, per phase (mixed
included), simulated cycle-level afterwards (not counted in the run's wall time): the error of
the time the run used (the surrogate of that moment: what the run's results rest on) and of the
surrogate at the end of the run on the same iterations (``--json``: each one's shape, longest
request and the three times, seconds).

Not a test; run (one core):
    .venv/bin/python benchmarks/bench_serving.py --requests 1000 [--chunked-prefill 512]
        [--validate 8] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np


#: The names of an iteration's shape (``IterationMix.stats``) in the JSON.
SHAPE = ("decode_requests", "prefill_requests", "sum_q", "sum_context", "sum_q_context")

#: The parts of a cycle-level sample's wall time, from the simulator's split of it
#: (``IterationResult.extra["wall_s"]``); the rest is what none of them covers.
PARTS = {"compile": ("compile",), "load + tables": ("load", "prepare"), "event loop": ("run",),
         "reports": ("report", "iteration_report"), "rest": ()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--system", default="neupims")
    ap.add_argument("--model", default="gpt3-7b")
    ap.add_argument("--dataset", default="sharegpt")
    ap.add_argument("--chunked-prefill", type=int, default=None,
                    help="token budget per iteration (chunked prefill); default off")
    ap.add_argument("--validate", type=int, default=0,
                    help="iterations to re-time cycle-level after the run")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from archsim import serving as sv
    from workloads.models import get_model

    model = get_model(args.model)
    label, cfg = sv.resolve_system(args.system)
    rs = sv.load_request_set(model, dataset=args.dataset, n=args.requests, seed=0)
    log: list = []
    timer = sv.make_timer(cfg, model, "surrogate", label, log=log)   # GPU: the roofline
    its: list = []                                   # (mix, seconds the run used, source)
    t0 = time.perf_counter()
    res = sv.serve_system(cfg, model, rs, timer=timer, chunked_prefill_tokens=args.chunked_prefill,
                          on_iteration=lambda r: its.append((r.mix, r.seconds - r.swap_s,
                                                             r.source)))
    wall = time.perf_counter() - t0

    per_phase: dict[str, list[float]] = defaultdict(list)
    parts: dict[str, dict[str, float]] = {}
    for phase, _shape, _sec, w, split in log:
        per_phase[phase].append(w)
        part = parts.setdefault(phase, dict.fromkeys(PARTS, 0.0))
        for name, keys in PARTS.items():
            part[name] += sum(split.get(k, 0.0) for k in keys)
        part["rest"] += w - sum(split.get(k, 0.0) for keys in PARTS.values() for k in keys)
    out = {"system": label, "model": model.name, "requests": len(rs), "wall_s": wall,
           "chunked_prefill_tokens": args.chunked_prefill,
           "iterations_by_phase": res.iterations_by_phase,
           "iterations": res.iterations, "iterations_by_source": res.iterations_by_source,
           "cycle_level_samples": {p: {"n": len(v), "wall_s": float(np.sum(v)),
                                       "mean_s": float(np.mean(v)), "max_s": float(np.max(v)),
                                       "parts_s": parts[p]}
                                   for p, v in per_phase.items()},
           "surrogate_error_online": res.surrogate_error, "summary": res.summary(),
           "samples": [{"phase": p, "seconds": sec, "wall_s": w, "wall_split_s": split,
                        "shape": dict(zip(SHAPE, sh))}
                       for p, sh, sec, w, split in log]}
    print(f"{len(rs)} requests on {label} / {model.name}: {wall:.0f} s wall, "
          f"{res.iterations} iterations {res.iterations_by_source} {res.iterations_by_phase}")
    for p, d in out["cycle_level_samples"].items():
        print(f"  cycle-level {p}: {d['n']} samples, {d['wall_s']:.0f} s "
              f"(mean {d['mean_s']:.1f} s, max {d['max_s']:.1f} s): "
              + ", ".join(f"{k} {v:.1f} s" for k, v in d["parts_s"].items()))
    e = res.surrogate_error or {}
    if e.get("checked"):
        print(f"  surrogate online checks: {e['checked']}, mean {e['mean']:.2%}, "
              f"p95 {e['p95']:.2%}, max {e['max']:.2%}")
    for p, d in e.get("by_phase", {}).items():
        print(f"  {p} samples by reason: {d.get('samples_by_reason')}")
    print(f"  makespan {res.makespan_s:.2f} s simulated; TTFT p50 {res.ttft_s.p50:.3f} s, "
          f"p99 {res.ttft_s.p99:.3f} s; TPOT p50 {res.tpot_s.p50 * 1e3:.2f} ms, p99 "
          f"{res.tpot_s.p99 * 1e3:.2f} ms; largest token gap p99 {res.token_gap_s.p99:.3f} s; "
          f"{res.throughput_tokens_per_s:.0f} output tokens/s")
    if args.validate and isinstance(timer, sv.SurrogateTimer):
        rng = np.random.default_rng(5)
        exact = sv.CycleLevelTimer(cfg, model, label, window=sv.SERVING_WINDOW,
                                   keep_channels=True)          # as make_timer's
        out["surrogate_error_sampled"] = {}
        for phase in sorted({m.phase for m, _, _ in its}):  # K surrogate-timed per phase
            pool = [(m, sec) for m, sec, src in its if m.phase == phase and src == "surrogate"]
            if not pool:
                continue
            t1 = time.perf_counter()
            used, final, rows = [], [], []
            for i in rng.choice(len(pool), min(args.validate, len(pool)), replace=False):
                m, sec = pool[i]
                te, _ = exact.time(m)
                fin = timer.predict(m)
                used.append(abs(sec - te) / te)
                final.append(abs(fin - te) / te)
                rows.append({"shape": dict(zip(SHAPE, m.stats())),
                             "longest_q_tokens": int(m.q_tokens.max()),
                             "used_s": sec, "final_s": fin, "cycle_level_s": te})
            out["surrogate_error_sampled"][phase] = {
                **{name: {"n": len(v), "mean": float(np.mean(v)),
                          "p95": float(np.percentile(v, 95)), "max": float(np.max(v))}
                   for name, v in (("used", used), ("final", final))},
                "iterations": rows}
            print(f"  surrogate vs cycle-level on {len(used)} of the {len(pool)} {phase} "
                  f"iterations it timed: the time used mean {np.mean(used):.2%}, p95 "
                  f"{np.percentile(used, 95):.2%}, max {np.max(used):.2%}; the final surrogate "
                  f"mean {np.mean(final):.2%}, max {np.max(final):.2%} "
                  f"({time.perf_counter() - t1:.0f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=float)


if __name__ == "__main__":
    main()
