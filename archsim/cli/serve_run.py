"""``archsim run --serve``: a serving run and its presentation (metric tables, latency
percentiles, KV cache and preemptions, replicas, SLO line, per-request CSV, trace, plots).

The flag rules are :func:`archsim.cli.run.check_run_flags` (one place for ``archsim run``);
the run itself is :func:`archsim.serving.serve_system`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from archsim.cli.run import _Bar, _metric_table, _seconds
from archsim.errors import ArchsimError
from archsim.results import METRICS, ServingResult, TraceEvent


def serving_trace_events(records: list[Any]) -> list[TraceEvent]:
    """One event per serving iteration on ``serve/iterations`` (``serve/replica<k>`` with
    several replicas), times in µs of simulated time (written with ``time_unit="us"``: args
    ``start_us``/``end_us``)."""
    many = any(rec.replica for rec in records)
    evs = []
    for rec in records:
        start = (rec.end_s - rec.seconds) * 1e6
        track = f"serve/replica{rec.replica}" if many else "serve/iterations"
        evs.append(TraceEvent(track, f"{rec.mix.phase} ×{rec.mix.size}", start,
                              rec.end_s * 1e6, {"requests": rec.mix.size,
                                                "tokens": int(rec.mix.q_tokens.sum()),
                                                "source": rec.source,
                                                "finished": rec.finished,
                                                "preempted": rec.preempted,
                                                "swap_us": rec.swap_s * 1e6}))
    return evs


def print_serving(con: Console, res: ServingResult) -> None:
    """The serving run's tables and notes (every metric with its definition)."""
    con.print(f"requests: {res.n_requests} ({res.input_tokens:,} prompt tokens, "
              f"{res.output_tokens:,} output tokens); arrivals: {res.arrival}")
    con.print(f"scheduler: {res.scheduler}")
    if res.router:
        con.print(f"replicas: {len(res.replicas)} copies of the system, router {res.router} "
                  "(archsim.serving.router)")
    con.print(f"timing: {res.timer}")
    rows: list[tuple[str, Any]] = [
        ("makespan_s", res.makespan_s),
        ("throughput_tokens_per_s", res.throughput_tokens_per_s),
        ("request_throughput_per_s", res.request_throughput_per_s),
        ("iterations", res.iterations),
        ("iterations_by_source", ", ".join(f"{k} {v}" for k, v in
                                           sorted(res.iterations_by_source.items()))),
        ("decode_iterations", res.decode_iterations),
        ("decode_iterations_with_prefill", res.decode_iterations_with_prefill),
        ("mean_batch_size", res.mean_batch_size),
        ("peak_kv_tokens", res.peak_kv_tokens),
        ("kv_capacity_tokens", res.kv_capacity_tokens),
        ("preemptions", res.preemptions),
    ]
    if res.recomputed_tokens:
        rows.append(("recomputed_tokens", res.recomputed_tokens))
    if res.swap_out_bytes or res.swap_in_bytes:
        rows += [("swap_out_bytes", res.swap_out_bytes), ("swap_in_bytes", res.swap_in_bytes),
                 ("swap_s", res.swap_s)]
    title = f"{res.system} · {res.model} · serving run" + (
        f" · {len(res.replicas)} replicas" if res.replicas else "")
    con.print(_metric_table(title, rows))
    if res.replicas:
        _print_replicas(con, res)
    lat = Table(title="latency percentiles over requests (simulated time)",
                title_justify="left")
    lat.add_column("metric", style="bold")
    for c in ("p50", "p90", "p99", "mean", "max"):
        lat.add_column(c, justify="right")
    lat.add_column("definition")
    for key, p in (("ttft_s", res.ttft_s), ("tpot_s", res.tpot_s), ("e2e_s", res.e2e_s),
                   ("token_gap_s", res.token_gap_s)):
        lat.add_row(METRICS[key].label, _seconds(p.p50), _seconds(p.p90), _seconds(p.p99),
                    _seconds(p.mean), _seconds(p.max), METRICS[key].definition)
    con.print(lat)
    if res.surrogate_error and res.surrogate_error.get("checked"):
        e = res.surrogate_error
        per = ", ".join(f"{ph} {d.get('checked', 0)}"
                        for ph, d in e.get("by_phase", {}).items())
        con.print(f"surrogate error (out of sample, {e['checked']} checked iterations: {per}): "
                  f"mean {e['mean']:.2%}, p95 {e['p95']:.2%}, max {e['max']:.2%}")
    if res.surrogate_error:
        for ph, d in res.surrogate_error.get("by_phase", {}).items():
            why = ", ".join(f"{k} {v}" for k, v in d.get("samples_by_reason", {}).items())
            con.print(f"cycle-level samples of {ph} iterations: {d['samples']} ({why})")
    for note in res.notes:
        con.print(f"note: {note}")
    con.print(f"simulated in {res.wall_s:.2f} s wall time")


def _print_replicas(con: Console, res: ServingResult) -> None:
    """Per-replica load: requests routed, tokens, throughput, iterations, busy time."""
    t = Table(title=f"per replica (router {res.router}; each a whole copy of the system)",
              title_justify="left",
              caption="busy: Σ of the replica's iteration times (swap copies included) ÷ the "
                      "run's makespan; tokens/s: its output tokens ÷ the run's makespan; peak "
                      "KV: most tokens allocated at once (blocks × block size)",
              caption_justify="left")
    for h in ("replica", "requests", "output tokens", "tokens/s", "iterations", "busy",
              "preemptions", "peak KV"):
        t.add_column(h, justify="right")
    for r in res.replicas:
        busy = r["busy_s"] / res.makespan_s if res.makespan_s > 0 else float("nan")
        t.add_row(str(r["replica"]), f"{r['requests']:,}", f"{r['output_tokens']:,}",
                  f"{r['throughput_tokens_per_s']:,.1f}", f"{r['iterations']:,}",
                  f"{busy:.1%}", f"{r['preemptions']:,}", f"{r['peak_kv_tokens']:,}")
    con.print(t)


def slo_line(slo: dict[str, Any]) -> str:
    """One line: the targets, the attainment, the goodput (see :mod:`archsim.slo`)."""
    t = [f"{k} ≤ {_seconds(slo[f'{k.lower()}_target_s'])}" for k in ("TTFT", "TPOT")
         if slo[f"{k.lower()}_target_s"] is not None]
    return (f"SLO ({', '.join(t)}): {slo['attainment']:.1%} of requests meet "
            f"{'both' if len(t) == 2 else 'it'} ({slo['requests_met']}); goodput "
            f"{slo['goodput_requests_per_s']:,.3g} requests/s, "
            f"{slo['goodput_tokens_per_s']:,.1f} output tokens/s (those requests ÷ makespan, "
            "whole system)")


def serve_command(con: Console, label: str, cfg: Any, spec: Any, out: dict[str, Any], *,
                  requests: str | None, dataset: str | None, seed: int,
                  num_requests: int | None, timestamps: str | None, arrival: str | None,
                  rate: float | None, batch: int | None, keep_channels: bool,
                  chunked_prefill: int | None, max_prefill_tokens: int | None,
                  timing: str | None, slo_ttft: float | None, slo_tpot: float | None,
                  csv_path: str | None, trace_path: str | None, plots_dir: str | None,
                  quiet: bool, replicas: int = 1, router: str | None = None) -> None:
    """The serving branch of ``archsim run`` (flags already checked by
    :func:`archsim.cli.run.check_run_flags`, output paths by the caller); fills ``out``.

    Raises:
        ArchsimError / WorkloadError: a request or timestamp file that does not fit.
    """
    from archsim import serving as sv
    from archsim.cli.boundary import simulating

    rs = sv.load_request_set(spec, path=requests, dataset=dataset, n=num_requests, seed=seed)
    if timestamps is not None:
        ts = sv.load_timestamps(timestamps)
        if ts.size < len(rs):
            raise ArchsimError(f"{timestamps}: {ts.size} timestamps for {len(rs)} requests")
        rs = rs.with_arrivals(ts[:len(rs)], f"timestamps from {timestamps}")
    elif arrival == "poisson":
        assert rate is not None                # check_run_flags
        rs = rs.with_arrivals(sv.poisson_arrivals(len(rs), rate, seed),
                              f"Poisson, {rate:g} requests/s, seed {seed}")
    records: list[Any] = []
    with _Bar(not quiet, len(rs), "requests finished") as bar:
        def on_it(rec: Any) -> None:
            if trace_path or plots_dir:
                records.append(rec)
            if rec.index % 16 == 0 or rec.finished == len(rs):
                bar.update(rec.finished, f"iteration {rec.index + 1}, simulated "
                                         f"{rec.end_s:.2f} s")
        with simulating():
            res = sv.serve_system(
                cfg, spec, rs, max_batch=batch or 256, keep_channels=keep_channels,
                chunked_prefill_tokens=chunked_prefill, timing=timing or "surrogate",
                max_prefill_tokens=("auto" if max_prefill_tokens is None
                                    else max_prefill_tokens),
                on_iteration=on_it, replicas=replicas, router=router or "round-robin")
    res.system = label
    print_serving(con, res)
    out["mode"] = "serve"
    out["serving"] = res.to_dict()
    if slo_ttft is not None or slo_tpot is not None:
        from archsim.slo import slo_report

        out["serving"]["slo"] = slo = slo_report(res, slo_ttft, slo_tpot)
        con.print(slo_line(slo))
    if csv_path:
        from archsim.slo import write_request_csv

        write_request_csv(res, csv_path, slo_ttft, slo_tpot)
        con.print(f"csv: {csv_path} (one row per request, simulated seconds)")
    if trace_path:
        from archsim.timeline import write_chrome_trace

        write_chrome_trace(serving_trace_events(records), trace_path, 1.0,
                           {"system": label, "model": spec.name, "what": "serving iterations"},
                           time_unit="us")
        tracks = "serve/replica<k>" if res.replicas else "serve/iterations"
        con.print(f"trace: {trace_path} (one event per iteration, track {tracks})")
    if plots_dir:
        from archsim.plots import plot_serving_latency, plot_serving_throughput

        p = plot_serving_latency(res, Path(plots_dir) / "latency_cdf.png",
                                 slo={"TTFT": slo_ttft, "TPOT": slo_tpot})
        q = plot_serving_throughput(
            [(r.end_s, r.seconds, r.mix.stats()[0], r.mix.stats()[1], r.replica, r.preempted)
             for r in records],
            Path(plots_dir) / "throughput.png", title=f"{label}: decode tokens/s over time")
        con.print(f"plots: {p}, {q}")


__all__ = ["serve_command", "print_serving", "slo_line", "serving_trace_events"]
