"""Matplotlib PNG plots of simulation results (non-interactive ``Agg`` backend).

* :func:`plot_timeline_utilisation` — busy fraction over time per engine class (systolic arrays,
  vector units, DMA, PIM channels, GPU) from the trace events of one iteration;
* :func:`plot_stage_breakdown` — stacked bars of the per-stage time of one iteration per system;
* :func:`plot_compare` — tokens/s per system with the speedup of the reference over each;
* :func:`plot_serving_latency` — cumulative distributions of TTFT, TPOT and end-to-end latency.

Each function writes one PNG, creates missing parent directories and returns the path. The data
behind :func:`plot_timeline_utilisation` is :func:`utilisation_over_time` (pure numpy, tested).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from archsim.errors import ArchsimError  # noqa: E402
from archsim.results import (IterationResult, ServingResult, stage_description,  # noqa: E402
                             stage_label)
from archsim.timeline import EventLike, as_trace_event, engine_class  # noqa: E402


def utilisation_over_time(events: Iterable[EventLike], bins: int = 200,
                          ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Busy fraction of each engine class in ``bins`` equal time bins.

    For each track, busy cycles are accumulated per bin (overlapping intervals on one track are
    capped at the bin width); a class's value in a bin is the Σ over its tracks ÷ (tracks of
    the class × bin width). Classes come from :func:`archsim.timeline.engine_class`.

    Returns:
        ``edges``: shape ``[bins + 1]``, bin edges in cycles (axis 0 = time);
        ``{class: fractions}``: each of shape ``[bins]``, values in ``[0, 1]``.

    Raises:
        ArchsimError: no events, or ``bins < 1``.
    """
    evs = [as_trace_event(e, i) for i, e in enumerate(events)]
    if not evs:
        raise ArchsimError("no trace events to plot")
    if bins < 1:
        raise ArchsimError(f"bins must be >= 1, got {bins}")
    t0 = min(e.start_cycle for e in evs)
    t1 = max(e.end_cycle for e in evs)
    if t1 <= t0:
        t1 = t0 + 1.0
    edges = np.linspace(t0, t1, bins + 1)
    width = edges[1] - edges[0]
    per_track: dict[str, np.ndarray] = {}
    for e in evs:
        acc = per_track.setdefault(e.track, np.zeros(bins))
        lo = np.clip(e.start_cycle, edges[:-1], edges[1:])
        hi = np.clip(e.end_cycle, edges[:-1], edges[1:])
        acc += hi - lo
    classes: dict[str, list[np.ndarray]] = {}
    for track, busy in per_track.items():
        classes.setdefault(engine_class(track), []).append(np.minimum(busy, width))
    frac = {c: np.sum(v, axis=0) / (len(v) * width) for c, v in sorted(classes.items())}
    return edges, frac


def _save(fig: "plt.Figure", path: str | Path) -> Path:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise ArchsimError(f"{p}: cannot write plot ({exc.strerror})") from None
    finally:
        plt.close(fig)
    return p


def plot_timeline_utilisation(events: Iterable[EventLike], clock_mhz: float,
                              path: str | Path, bins: int = 200, title: str = "") -> Path:
    """PNG of the busy fraction over time of each engine class (one line per class).

    Args:
        events: busy intervals in cycles of a ``clock_mhz`` clock.
        clock_mhz: converts cycles to µs on the x axis.
        path: PNG to write.
        bins: time bins.
        title: figure title.

    Raises:
        ArchsimError: no events, a bad clock, or the file cannot be written.
    """
    if not clock_mhz or clock_mhz <= 0:
        raise ArchsimError(f"clock must be > 0 MHz, got {clock_mhz!r}")
    edges, frac = utilisation_over_time(events, bins)
    mid_us = (edges[:-1] + edges[1:]) / 2 / clock_mhz
    t0, t1 = edges[0] / clock_mhz, edges[-1] / clock_mhz
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for cls, f in frac.items():
        ax.plot(mid_us, f, label=f"{cls} (mean {f.mean():.0%})", lw=1.2)
    ax.set_xlabel("simulated time (µs)")
    ax.set_ylabel("busy fraction of the class's units")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(t0, t1)
    # beside the axes, never over the curves
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
              title="engine class", title_fontsize=8)
    ax.set_title((title or "engine utilisation (one device)")
                 + f"\nshown: {t0:,.2f}–{t1:,.2f} µs ({t1 - t0:,.2f} µs), one device",
                 fontsize=9)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_stage_breakdown(results: Mapping[str, IterationResult] | IterationResult,
                         path: str | Path, title: str = "") -> Path:
    """PNG of stacked horizontal bars: per-stage time of one iteration (ms) for each system.

    Each segment wide enough for it is labelled with the resource that bounded the stage on
    the simulated window's critical path (``extra["stage_resources"][stage]["bound"]``,
    :mod:`archsim.system.critical`), when the result has that account.

    Args:
        results: ``{label: IterationResult}`` or a single result; stages come from
            ``stage_seconds`` (a result without a breakdown is one ``total`` segment).
        path: PNG to write.

    Raises:
        ArchsimError: no results, or the file cannot be written.
    """
    if isinstance(results, IterationResult):
        results = {results.system: results}
    if not results:
        raise ArchsimError("no results to plot")
    stages: list[str] = []
    for r in results.values():
        for s in (r.stage_seconds or {"total": 0.0}):
            if s not in stages:
                stages.append(s)
    names = list(results)
    span = [max(float(r.seconds_per_iteration or 0.0) * 1e3, 1e-12) for r in results.values()]
    fig, ax = plt.subplots(figsize=(9, 0.7 * len(names) + 1.6))
    left = np.zeros(len(names))
    cmap = plt.get_cmap("tab20")
    for k, s in enumerate(stages):
        vals = np.array([
            (r.stage_seconds.get(s, 0.0) if r.stage_seconds
             else (r.seconds_per_iteration if s == "total" else 0.0)) * 1e3
            for r in results.values()])
        ax.barh(names, vals, left=left, label=stage_label(s), color=cmap(k % 20))
        for y, (r, v, x0) in enumerate(zip(results.values(), vals, left)):
            bound = ((r.extra or {}).get("stage_resources") or {}).get(s, {}).get("bound")
            if bound and v > 0.06 * span[y]:
                ax.text(x0 + v / 2, y, bound, ha="center", va="center", fontsize=7)
        left += vals
    ax.set_xlabel("time per iteration (ms), by stage, summed over layers; in a bar: the "
                  "stage's bound on the critical path")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False,
              title="stage: NPU | PIM", title_fontsize=8)
    ax.set_title(title or "per-stage breakdown of one iteration")
    known = [s for s in stages if stage_description(s)]
    if known:   # the caption: what runs in each stage
        lines = [f"{s}: {stage_description(s)}" for s in known]
        if any(s in "ABCDEF" for s in known):
            lines.insert(0, "A–F: NeuPIMs sub-batch interleaving, sub-batches #1/#2, NPU and "
                            "PIM at once, ' = next layer")
        ax.annotate("\n".join(lines), xy=(0, 0), xycoords="axes fraction", xytext=(0, -40),
                    textcoords="offset points", ha="left", va="top", fontsize=7)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_compare(tokens_per_s: Mapping[str, float], path: str | Path,
                 reference: str = "neupims", title: str = "") -> Path:
    """PNG bar chart of tokens/s per system, each bar labelled with ``reference``'s speedup
    over it (reference tokens/s ÷ system tokens/s; omitted when the reference is absent).

    Raises:
        ArchsimError: no systems, or the file cannot be written.
    """
    if not tokens_per_s:
        raise ArchsimError("no systems to plot")
    names = list(tokens_per_s)
    vals = np.array([tokens_per_s[n] for n in names], dtype=float)
    ref = tokens_per_s.get(reference)
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.8))
    bars = ax.bar(names, vals, color=["tab:red" if n == reference else "tab:blue"
                                      for n in names])
    for b, n, v in zip(bars, names, vals):
        label = f"{v:,.0f}"
        if ref is not None and v > 0:
            label += f"\n{reference} {ref / v:.2f}×"
        ax.annotate(label, (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                    fontsize=8)
    ax.set_ylabel("tokens/s (whole system)")
    ax.set_ylim(0, vals.max() * 1.25 if vals.max() > 0 else 1)
    ax.set_title(title or "throughput on the same workload")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_serving_latency(result: ServingResult, path: str | Path, title: str = "",
                         slo: dict[str, float | None] | None = None) -> Path:
    """PNG of the cumulative distributions of TTFT, TPOT and end-to-end latency (s, log x).

    ``slo``: ``{"TTFT": seconds, "TPOT": seconds}`` targets drawn as dashed vertical lines in
    their series' colour (None entries are skipped).

    Raises:
        ArchsimError: the run has no requests, or the file cannot be written.
    """
    if not result.requests:
        raise ArchsimError("serving result has no requests")
    series = {
        "TTFT": np.array([r.ttft_s for r in result.requests]),
        "TPOT": np.array([r.tpot_s for r in result.requests]),
        "end-to-end": np.array([r.e2e_s for r in result.requests]),
    }
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for name, v in series.items():
        v = np.sort(v[np.isfinite(v) & (v > 0)])
        if v.size:
            line, = ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=name)
            target = (slo or {}).get(name)
            if target:
                ax.axvline(target, ls="--", lw=1, color=line.get_color(),
                           label=f"{name} SLO {target:g} s")
    ax.set_xscale("log")
    ax.set_xlabel("seconds (simulated)")
    ax.set_ylabel("fraction of requests")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title or f"{result.system}: latency distributions over "
                          f"{result.n_requests} requests")
    return _save(fig, path)


#: Most iterations drawn one by one in the throughput plot of one replica; more are binned.
_PER_ITERATION_MAX = 300


def plot_serving_throughput(iterations: Sequence[tuple[float, ...]],
                            path: str | Path, title: str = "") -> Path:
    """PNG of a serving run's decode throughput over simulated time.

    Args:
        iterations: one ``(end_s, seconds, decode requests, prefill requests[, replica[,
            preempted]])`` per iteration in order (simulated seconds; each decode request
            yields one token; ``replica`` 0 and ``preempted`` 0 when left out).
        path: the PNG to write.

    Up to :data:`_PER_ITERATION_MAX` iterations on one replica: the line is decode tokens/s
    of each iteration (decode requests ÷ its seconds) drawn at its end time; shaded bars mark
    iterations with prefill work. Longer runs or several replicas: decode tokens/s in 100 time
    bins (decode tokens of the iterations ending in a bin ÷ its width), the whole system's and,
    with several replicas, each replica's; a dotted line on the right axis is the share of
    replica time spent in iterations with prefill work (prefill or recompute after a
    preemption) per bin. Red ticks at the bottom mark iterations before which requests were
    preempted (paged KV cache full).

    Raises:
        ArchsimError: no iterations, or the file cannot be written.
    """
    if not iterations:
        raise ArchsimError("serving run has no iterations to plot")
    a = np.zeros((len(iterations), 6))
    for k, row in enumerate(iterations):
        a[k, :len(row)] = row
    end, sec, dec, pre, rep, pmt = (a[:, j] for j in range(6))
    reps = np.unique(rep).astype(int)
    fig, ax = plt.subplots(figsize=(10, 3.6))
    if reps.size == 1 and len(iterations) <= _PER_ITERATION_MAX:
        rate = np.divide(dec, sec, out=np.zeros_like(dec), where=sec > 0)
        ax.step(end, rate, where="pre", lw=1, label="decode tokens/s (per iteration)")
        for t1, s in zip(end[pre > 0], sec[pre > 0]):
            ax.axvspan(t1 - s, t1, color="tab:orange", alpha=0.15, lw=0)
        legend_title, legend_x = "shaded: iterations with prefill", 1.01
    else:
        edges = np.linspace(0.0, float(end.max()), 101)
        width = np.diff(edges)
        if reps.size > 1:
            for k in reps:
                m = rep == k
                tok_k, _ = np.histogram(end[m], bins=edges, weights=dec[m])
                ax.step(edges[1:], tok_k / width, where="pre", lw=0.8, alpha=0.7,
                        label=f"replica {k}")
        tok, _ = np.histogram(end, bins=edges, weights=dec)
        ax.step(edges[1:], tok / width, where="pre", lw=1.6, color="black",
                label="whole system")
        busy_pre, _ = np.histogram(end[pre > 0], bins=edges, weights=sec[pre > 0])
        ax2 = ax.twinx()
        ax2.step(edges[1:], np.minimum(100.0 * busy_pre / (width * reps.size), 100.0),
                 where="pre", lw=0.8, ls=":", color="tab:orange")
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("% time in prefill iterations", color="tab:orange", fontsize=8)
        legend_title = (f"{reps.size} replicas, " if reps.size > 1 else "") + "100 time bins"
        legend_x = 1.09                       # right of the second axis' label
    if (pmt > 0).any():
        ax.plot(end[pmt > 0] - sec[pmt > 0], np.zeros(int((pmt > 0).sum())), "|",
                color="tab:red", ms=10, label="preemption")
    ax.set_xlabel("seconds (simulated)")
    ax.set_ylabel("tokens/s (whole system)" if reps.size == 1 else "tokens/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title=legend_title, title_fontsize=8, loc="upper left",
              bbox_to_anchor=(legend_x, 1.0))
    ax.set_title(title or "decode throughput over time")
    return _save(fig, path)


__all__ = ["utilisation_over_time", "plot_timeline_utilisation", "plot_stage_breakdown",
           "plot_compare", "plot_serving_latency", "plot_serving_throughput"]
