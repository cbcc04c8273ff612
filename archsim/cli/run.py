"""``archsim run`` and ``archsim compare``: simulate a system on a workload, compare the baselines.
Over 800 lines because the two commands share their flag checks and presentation (metric
tables, energy, progress bar, workload text); moving ``compare`` out would move those shared
private helpers into a third module for a file barely over the limit.

``archsim run --system neupims --model gpt3-7b --batch 256 --dataset sharegpt`` runs one decode
iteration (``--iterations K``: K consecutive ones) of a warmed-up batch and prints what every
metric means beside its value. ``--serve`` runs a continuous-batching serving run over a request
list instead (arrivals all at once, Poisson, or from timestamps; optional chunked prefill;
``--replicas N --router P`` for several copies of the system); its presentation is
:mod:`archsim.cli.serve_run`, its flag rules :func:`check_run_flags` here. ``--json``,
``--trace`` (Chrome/Perfetto) and ``--plots`` leave machine-readable results.

``archsim compare --model M [--requests FILE | --batch N --dataset D]`` runs the four systems
(``neupims``, ``npu-pim``, ``npu``, ``gpu``) on the same workload and prints tokens/s and the
speedup of neupims over each; ``--paper`` runs the NeuPIMs reference grid and prints it beside the
published headline.

Everything here is presentation: the runs are :mod:`archsim.serving` (the Python API sweeps use).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Sequence

import typer
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn)
from rich.table import Table

from archsim.errors import ArchsimError
from archsim.results import (ENERGY_COMPONENTS, ENERGY_GROUPS, METRICS, IterationResult,
                             compare_to_dict, group_energy,
                             metric_definitions, stage_description, write_json)
from archsim.units import sig as _sig

_STAGE_NOTE = ("A-F: NeuPIMs sub-batch interleaving of two sub-batches #1/#2 over consecutive "
               "layers, NPU and PIM at the same time (' = next layer; see README 'Look at a "
               "run')")
SET_HELP = "Override a config key, e.g. --set pim.multipliers_per_bank=32 (repeatable)."
SYSTEM_HELP = ("neupims | npu-pim | npu | gpu (presets neupims, npu-pim-blocked, npu-only, "
               "gpu-a100), another preset name, or a YAML config file")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _console() -> Console:
    return Console(highlight=False, soft_wrap=False, width=120 if not sys.stdout.isatty()
                   else None)


def _model(name: str) -> Any:
    """Registry name or a Hugging Face config.json path → ModelSpec (errors list valid names)."""
    from workloads.models import get_model, load_hf_config

    if name.endswith(".json") or Path(name).is_dir():
        return load_hf_config(name)
    return get_model(name)


def _check_dataset(dataset: str) -> None:
    from workloads.requests import BUILTIN_DATASETS

    if dataset not in BUILTIN_DATASETS:
        raise ArchsimError(f"unknown dataset {dataset!r}; valid datasets: "
                           f"{', '.join(BUILTIN_DATASETS)} (or --requests FILE)")


class _Bar:
    """A rich progress bar on stderr (silent when stderr is not a terminal or --quiet)."""

    def __init__(self, enabled: bool, total: float | None, what: str) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                                 TimeElapsedColumn(), console=self.console, transient=True,
                                 disable=not self.enabled)
        self.task = self.progress.add_task(what, total=total, info="")

    def __enter__(self) -> "_Bar":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def update(self, completed: float, info: str = "") -> None:
        if self.enabled:
            self.progress.update(self.task, completed=completed, info=info)


def _fmt(key: str, v: Any) -> str:
    """Value of metric ``key`` as text, with its unit."""
    if v is None:
        return "–"
    unit = METRICS[key].unit if key in METRICS else ""
    if isinstance(v, str):
        return v
    if unit == "fraction":
        return f"{v:.1%}"
    if unit == "s":
        return _seconds(v)
    if unit in ("NPU cycles",):
        return f"{v:,.0f} cycles"
    if unit == "µJ/token":
        return f"{_sig(v)} µJ/token"
    if unit == "tokens/J":
        return f"{_sig(v)} tokens/J"
    if unit == "W":
        return f"{_sig(v)} W"
    if unit == "bytes":
        return f"{v:,} B" if v < 2**20 else f"{v / 2**30:,.3f} GiB"
    if isinstance(v, float):
        return f"{v:,.1f} {unit}".strip()
    return f"{v:,} {unit}".strip()


def _seconds(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if v >= 1:
        return f"{v:,.3f} s"
    if v >= 1e-3:
        return f"{v * 1e3:,.3f} ms"
    return f"{v * 1e6:,.2f} µs"


def _metric_table(title: str, rows: Sequence[tuple[str, Any]]) -> Table:
    """A table: metric | value | what it means (from METRICS)."""
    t = Table(title=title, title_justify="left", show_lines=False)
    t.add_column("metric", style="bold", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("definition (scope, clock)")
    for key, value in rows:
        m = METRICS.get(key)
        t.add_row(m.label if m else key, _fmt(key, value), m.definition if m else "")
    return t


def _workload_text(batch: Any) -> str:
    s = batch.summary()
    return (f"{s['requests']} requests, seq_len mean {s['seq_len_mean']:.0f} "
            f"(min {s['seq_len_min']}, max {s['seq_len_max']}), {s['source']}")


# --------------------------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------------------------
def _aggregate(results: list[IterationResult]) -> dict[str, Any]:
    """Summary of K iterations: throughput Σ tokens / Σ seconds, means of the rest."""
    tok = sum(r.tokens for r in results)
    sec = sum(float(r.seconds_per_iteration) for r in results)  # type: ignore[arg-type]

    def mean(attr: str) -> float | None:
        vals = [getattr(r, attr) for r in results]
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    return {"iterations": len(results), "tokens": tok, "seconds": sec,
            "tokens_per_s": tok / sec, "tokens_per_s_per_device": tok / sec / results[0].devices,
            "cycles_per_iteration": mean("cycles_per_iteration"),
            "seconds_per_iteration": sec / len(results), "npu_util": mean("npu_util"),
            "pim_util": mean("pim_util"), "flops_util": mean("flops_util"),
            "mean_channel_bw_util": mean("mean_channel_bw_util"),
            "energy_per_token_uj": mean("energy_per_token_uj"),
            "tokens_per_joule": mean("tokens_per_joule"),
            "power_per_device_w": mean("power_per_device_w")}


def channel_placement(r: IterationResult) -> str | None:
    """How the compiler placed the KV channels of a cycle-level result (``policy min-load``,
    ``kept from FILE``; :func:`mapping.channels.describe_placement`), None for the GPU."""
    return (r.extra.get("compile") or {}).get("channel_placement") or None


def _print_iterations(con: Console, label: str, model: Any, batch: Any,
                      results: list[IterationResult]) -> None:
    r0 = results[0]
    agg = _aggregate(results)
    title = (f"{label} · {model.name} · {r0.phase} · batch {r0.batch_size} · "
             f"TP{r0.tensor_parallel} PP{r0.pipeline_parallel}"
             + (f" · mean of {len(results)} iterations" if len(results) > 1 else ""))
    rows: list[tuple[str, Any]] = [
        ("cycles_per_iteration", agg["cycles_per_iteration"]),
        ("seconds_per_iteration", agg["seconds_per_iteration"]),
        ("tokens", r0.tokens),
        ("tokens_per_s", agg["tokens_per_s"]),
        ("tokens_per_s_per_device", agg["tokens_per_s_per_device"]),
        ("npu_util", agg["npu_util"]), ("flops_util", agg["flops_util"]),
        ("pim_util", agg["pim_util"]), ("mean_channel_bw_util", agg["mean_channel_bw_util"]),
        ("energy_per_token_uj", agg["energy_per_token_uj"]),
        ("tokens_per_joule", agg["tokens_per_joule"]),
        ("power_per_device_w", agg["power_per_device_w"]),
        ("timing_source", r0.timing_source),
    ]
    if r0.npu_freq_mhz:
        rows[-1:-1] = [("layers_simulated", r0.layers_simulated),
                       ("layers_reused", r0.layers_reused)]
    con.print(f"workload: {_workload_text(batch)}")
    if channel_placement(r0):
        con.print(f"channels: {channel_placement(r0)}")
    comp = r0.extra.get("compile") or {}
    if comp.get("kv_placement_text"):
        con.print(f"KV placement: {comp['kv_placement_text']}")
    if comp.get("buffer_plan_text"):
        con.print(f"scratchpad buffer plan (one device): {comp['buffer_plan_text']}")
    con.print(_metric_table(title, rows))
    pipe = r0.extra.get("pipeline") or {}
    if pipe.get("stages", 1) > 1 or pipe.get("micro_batches", 1) > 1:
        lat = pipe["request_latency_s"]
        con.print(f"pipeline: {pipe['stages']} stages, {pipe['micro_batches']} micro-batch(es) "
                  f"in flight (GPipe schedule, system.micro_batches); stages idle "
                  f"{pipe['bubble_fraction']:.1%} of the iteration (fill/drain bubble; "
                  f"(S-1)/(M+S-1) = {pipe['gpipe_bubble_fraction']:.1%}); a request's token "
                  f"is out {_seconds(lat['mean'])} after the iteration starts on average, "
                  f"{_seconds(lat['max'])} at most (the iteration: "
                  f"{_seconds(float(r0.seconds_per_iteration))})")  # type: ignore[arg-type]
    if r0.stage_seconds:
        st = Table(title="per-stage breakdown of the first iteration", title_justify="left",
                   caption=METRICS["stage_seconds"].definition + "; " + _STAGE_NOTE,
                   caption_justify="left")
        st.add_column("stage")
        st.add_column("time", justify="right")
        st.add_column("share", justify="right")
        if r0.npu_freq_mhz:
            st.add_column("NPU cycles", justify="right")
        st.add_column("what runs")
        total = float(r0.seconds_per_iteration)  # type: ignore[arg-type]
        cyc = r0.stage_cycles or {}
        for k, v in r0.stage_seconds.items():
            row = [k, _seconds(v), f"{v / total:.1%}"]
            if r0.npu_freq_mhz:
                row.append(f"{cyc.get(k, 0):,.0f}")
            st.add_row(*row, stage_description(k))
        con.print(st)
        res = r0.extra.get("stage_resources") or {}
        if res:
            _print_stage_resources(con, res)
    if r0.energy_j:
        _print_energy(con, "energy per token of the first iteration by component (whole "
                      "system ÷ tokens)", {label: r0}, by_component=True)
    for note in r0.notes:
        con.print(f"note: {note}")


def _print_stage_resources(con: Console, res: dict[str, Any]) -> None:
    """The table of :func:`archsim.system.resources.stage_resource_account` with the critical
    path of :mod:`archsim.system.critical`: per stage of the simulated window its bounding
    resource and every resource's critical-path / busy / only-busy share."""
    from archsim.system.resources import RESOURCES

    used = [r for r in RESOURCES if any(r in d["busy"] or r in d.get("critical", {})
                                        for d in res.values())]
    t = Table(title="what bounds each stage (the simulated window, NPU cycles)",
              title_justify="left", caption=(
                  "bound by: the resource with the largest share of the stage on the critical "
                  "path (the chain of instructions, semaphores and queueing that set the "
                  "window's length; 'waits': no instruction on it); each resource, in % of "
                  "the stage's cycles: on the critical path / busy / the only one busy (dma = "
                  "HBM transfers of the NPU)"),
              caption_justify="left")
    for h in ("stage", "cycles", "bound by", *used, "idle"):
        t.add_column(h, justify="left" if h in ("stage", "bound by") else "right")
    for k, d in res.items():
        crit = d.get("critical", {})
        t.add_row(k, f"{d['cycles']:,.0f}", d["bound"],
                  *[f"{crit.get(r, 0.0):.0%}/{d['busy'].get(r, 0.0):.0%}/"
                    f"{d['exclusive'].get(r, 0.0):.0%}".replace("%", "")
                    if r in d["busy"] or r in crit else "–" for r in used], f"{d['idle']:.0%}")
    con.print(t)


def _timeline_scope(r: IterationResult) -> str:
    """What part of the iteration the events (trace, timeline plot) cover."""
    total = _seconds(float(r.seconds_per_iteration))  # type: ignore[arg-type]
    if r.timing_source == "roofline":
        return f"the whole first iteration ({total})"
    return (f"the {r.layers_simulated} cycle-level simulated layer(s) of the first iteration's "
            f"{len(r.layers)} (the iteration takes {total})")


def _print_energy(con: Console, title: str, results: dict[str, IterationResult],
                  by_component: bool = False) -> None:
    """Energy per token (µJ, system energy ÷ tokens) by component or by part, one column per
    system, then tokens/J and power per device, then what every row counts."""
    t = Table(title=title, title_justify="left", min_width=72)
    t.add_column("component" if by_component else "part", style="bold")
    for name in results:
        t.add_column(name, justify="right")
    has = [r for r in results.values() if r.energy_j]
    defs: dict[str, str] = {}
    if by_component:
        keys = [k for k in ENERGY_COMPONENTS if any(k in (r.energy_j or {}) for r in has)]
        vals = {k: {n: (r.energy_j or {}).get(k) for n, r in results.items()} for k in keys}
        defs = {k: ENERGY_COMPONENTS[k][1] for k in keys}
    else:
        groups = {n: group_energy(r.energy_j) if r.energy_j else {} for n, r in results.items()}
        keys = [g for g in ENERGY_GROUPS if any(g in v for v in groups.values())]
        vals = {g: {n: groups[n].get(g) for n in results} for g in keys}
        defs = {g: "; ".join(d for gg, d in ENERGY_COMPONENTS.values() if gg == g)
                for g in keys}
    for key in keys:
        t.add_row(key, *["–" if vals[key].get(n) is None or not r.tokens else
                         f"{_sig(vals[key][n] / r.tokens * 1e6)} µJ"
                         for n, r in results.items()])
    t.add_section()
    t.add_row("energy/token", *[_fmt("energy_per_token_uj", r.energy_per_token_uj)
                                for r in results.values()], style="bold")
    t.add_row("tokens/J", *[_fmt("tokens_per_joule", r.tokens_per_joule)
                            for r in results.values()])
    t.add_row("power/dev", *[_fmt("power_per_device_w", r.power_per_device_w)
                             for r in results.values()])
    con.print(t)
    for key in keys:
        con.print(f"  {key}: {defs[key]}")
    for k in ("energy_per_token_uj", "tokens_per_joule", "power_per_device_w"):
        con.print(f"  {METRICS[k].label}: {METRICS[k].definition}")


ARRIVALS = ("all", "poisson")
#: Largest token budget (--chunked-prefill, --max-prefill-tokens) and --batch of a serving run.
MAX_TOKEN_BUDGET = 1 << 20
TIMINGS = ("exact", "reuse", "surrogate")


def check_run_flags(*, serve: bool, requests: str | None, dataset: str | None, seed: int,
                    iterations: int, arrival: str | None, rate: float | None,
                    timestamps: str | None, chunked_prefill: int | None,
                    max_prefill_tokens: int | None, num_requests: int | None,
                    timing: str | None, ignore_capacity: bool, keep_channels: bool,
                    gpu: bool, slo_ttft: float | None = None, slo_tpot: float | None = None,
                    csv_path: str | None = None, replicas: int | None = None,
                    router: str | None = None, batch: int | None = None,
                    overrides: Sequence[str] = ()) -> None:
    """Every rule between the flags of ``archsim run`` (one place; before any work starts).

    A flag that would change nothing in the requested mode is an error, never ignored.

    Raises:
        ArchsimError: naming the flags and what to do instead.
    """
    from archsim.cli.boundary import check_workload_flags

    check_workload_flags(seed=seed, requests=requests, dataset=dataset,
                         keep_channels=keep_channels)
    if keep_channels and gpu:
        raise ArchsimError("--keep-channels: the gpu system has no KV channels to keep (it "
                           "applies to the NPU systems)")
    if arrival is not None and arrival not in ARRIVALS:
        raise ArchsimError(f"--arrival {arrival!r} not one of {list(ARRIVALS)}")
    if timing is not None and timing not in TIMINGS:
        raise ArchsimError(f"--timing {timing!r} not one of {list(TIMINGS)}")
    serve_only = {"--arrival": arrival, "--rate": rate, "--timestamps": timestamps,
                  "--chunked-prefill": chunked_prefill,
                  "--max-prefill-tokens": max_prefill_tokens, "--num-requests": num_requests,
                  "--timing": timing, "--slo-ttft": slo_ttft, "--slo-tpot": slo_tpot,
                  "--csv": csv_path, "--replicas": replicas, "--router": router}
    given = [k for k, v in serve_only.items() if v is not None]
    kv_keys = [o for o in overrides if o.strip().startswith("serving.")]
    if kv_keys and not serve:
        raise ArchsimError(f"--set {kv_keys[0]}: the serving.* keys (the KV-cache manager) "
                           "apply only to a serving run: add --serve")
    if not serve:
        if given:
            raise ArchsimError(f"{'/'.join(given)} {'applies' if len(given) == 1 else 'apply'} only to a serving run: add --serve "
                               "(without it, --batch/--iterations decode iterations run)")
        return
    if iterations != 1:
        raise ArchsimError("--iterations and --serve are exclusive: a serving run lasts until "
                           "every request finishes")
    if ignore_capacity:
        raise ArchsimError("--ignore-capacity applies to --batch/--iterations runs; a serving "
                           "run always admits requests within the KV-cache capacity")
    if timestamps is not None and (arrival is not None or rate is not None):
        raise ArchsimError("--timestamps gives every arrival time: it excludes --arrival and "
                           "--rate")
    if rate is not None and arrival != "poisson":
        raise ArchsimError(f"--rate {rate:g} needs --arrival poisson (with the default "
                           "--arrival all every request arrives at t = 0)")
    if arrival == "poisson" and rate is None:
        raise ArchsimError("--arrival poisson needs --rate R (requests per second)")
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ArchsimError(f"--rate {rate!r}: must be a number > 0 (requests per second)")
    for flag, v in (("--chunked-prefill", chunked_prefill),
                    ("--max-prefill-tokens", max_prefill_tokens), ("--batch", batch)):
        if v is not None and not 1 <= v <= MAX_TOKEN_BUDGET:
            raise ArchsimError(f"{flag} {v}: must be 1..{MAX_TOKEN_BUDGET:,} "
                               + ("requests per iteration" if flag == "--batch" else "tokens"))
    from archsim.serving.router import ROUTERS, check_router

    if router is not None and (replicas or 1) == 1:
        raise ArchsimError(f"--router {router} splits requests across replicas: add "
                           f"--replicas N (N >= 2; routers {list(ROUTERS)})")
    check_router(router or "round-robin", 1 if replicas is None else replicas)
    if chunked_prefill is not None and max_prefill_tokens is not None:
        raise ArchsimError("--chunked-prefill and --max-prefill-tokens are exclusive: with "
                           "chunked prefill --chunked-prefill is the token budget of every "
                           "iteration; --max-prefill-tokens limits whole-prompt prefill "
                           "iterations without it")
    if timing is not None and gpu:
        raise ArchsimError(f"--timing {timing} applies to the NPU systems; the gpu system is "
                           "timed by its roofline model in every iteration")
    from archsim.slo import check_targets

    check_targets(slo_ttft, slo_tpot)


def run_command(system: str = "neupims", model: str = "gpt3-7b", requests: str | None = None,
                batch: int | None = None, dataset: str | None = None, seed: int = 0,
                overrides: Sequence[str] = (), iterations: int = 1, serve: bool = False,
                arrival: str | None = None, rate: float | None = None,
                timestamps: str | None = None, chunked_prefill: int | None = None,
                num_requests: int | None = None, timing: str | None = None,
                json_path: str | None = None, trace_path: str | None = None,
                plots_dir: str | None = None, ignore_capacity: bool = False,
                keep_channels: bool = False, quiet: bool = False,
                console: Console | None = None,
                max_prefill_tokens: int | None = None, slo_ttft: float | None = None,
                slo_tpot: float | None = None, csv_path: str | None = None,
                replicas: int | None = None, router: str | None = None) -> dict[str, Any]:
    """Everything ``archsim run`` does; returns the dict written by ``--json``.

    ``dataset`` None is ``sharegpt`` (without ``requests``); ``arrival`` None is ``all``;
    ``timing`` None is ``surrogate``. Every input (flags, files, output paths, capacity) is
    checked before the first simulated cycle.

    Raises:
        ArchsimError / ConfigError / WorkloadError: bad input (one line at the CLI).
    """
    from archsim import serving as sv
    from archsim.cli.boundary import check_output_dir, check_output_file, simulating

    con = console or _console()
    label, cfg = sv.resolve_system(system, overrides)
    check_run_flags(serve=serve, requests=requests, dataset=dataset, seed=seed,
                    iterations=iterations, arrival=arrival, rate=rate, timestamps=timestamps,
                    chunked_prefill=chunked_prefill, max_prefill_tokens=max_prefill_tokens,
                    num_requests=num_requests, timing=timing, ignore_capacity=ignore_capacity,
                    keep_channels=keep_channels, gpu=sv.is_gpu(cfg), slo_ttft=slo_ttft,
                    slo_tpot=slo_tpot, csv_path=csv_path, replicas=replicas, router=router,
                    batch=batch, overrides=overrides)
    check_output_file(json_path, "--json")
    check_output_file(csv_path, "--csv")
    check_output_file(trace_path, "--trace")
    check_output_dir(plots_dir, "--plots")
    from archsim.extras import require

    if plots_dir:
        require("plots", "archsim run --plots")
    if serve and (timing or "surrogate") == "surrogate" and not sv.is_gpu(cfg):
        require("surrogate", "archsim run --serve --timing surrogate (the default; --timing "
                "reuse needs no extra)")
    spec = _model(model)
    if requests is None:
        dataset = dataset or "sharegpt"
        _check_dataset(dataset)
    out: dict[str, Any] = {"command": "run", "system": label, "config": cfg.name,
                           "model": spec.name, "overrides": list(overrides)}

    if serve:
        from archsim.cli.serve_run import serve_command

        serve_command(con, label, cfg, spec, out, requests=requests, dataset=dataset,
                      seed=seed, num_requests=num_requests, timestamps=timestamps,
                      arrival=arrival, rate=rate, batch=batch, keep_channels=keep_channels,
                      chunked_prefill=chunked_prefill, max_prefill_tokens=max_prefill_tokens,
                      timing=timing, slo_ttft=slo_ttft, slo_tpot=slo_tpot, csv_path=csv_path,
                      trace_path=trace_path, plots_dir=plots_dir, quiet=quiet,
                      replicas=replicas or 1, router=router)
    else:
        if iterations < 1:
            raise ArchsimError(f"--iterations {iterations}: must be >= 1")
        b = sv.make_batch(spec, batch if batch is not None else (None if requests else 256),
                          dataset or "sharegpt", seed, requests, cfg, keep_channels,
                          capacity_iterations=None if ignore_capacity else iterations)
        with _Bar(not quiet and iterations > 1, iterations, "iterations") as bar, simulating():
            results = sv.run_iterations(cfg, spec, b, iterations,   # cfg: resolved once
                                        check_capacity=False,   # make_batch checked it
                                        keep_channels=keep_channels,
                                        progress=lambda k, n: bar.update(k))
        for r in results:
            r.system = label
        _print_iterations(con, label, spec, b, results)
        out["mode"] = "iterations"
        out["workload"] = b.summary()
        out["summary"] = _aggregate(results)
        out["summary"]["channels"] = channel_placement(results[0])
        comp0 = results[0].extra.get("compile") or {}
        out["summary"]["kv_placement"] = comp0.get("kv_placement_text")
        out["summary"]["buffer_plan"] = comp0.get("buffer_plan")
        out["iterations"] = [r.to_dict() for r in results]
        out["definitions"] = metric_definitions()
        r0 = results[0]
        if trace_path:
            from archsim.timeline import write_chrome_trace

            if not r0.events:
                raise ArchsimError(f"{label}: the simulator returned no trace events, so no "
                                   f"trace can be written")
            write_chrome_trace(r0.events, trace_path, r0.events_clock_mhz or 1000.0,
                               {"system": label, "model": spec.name, "batch": r0.batch_size})
            con.print(f"trace: {trace_path} ({len(r0.events)} events: {_timeline_scope(r0)}; "
                      "tracks explained in the README, 'Look at a run')")
        if plots_dir:
            from archsim.plots import plot_stage_breakdown, plot_timeline_utilisation

            written = [plot_stage_breakdown({label: r0}, Path(plots_dir) / "stages.png")]
            if r0.events:
                written.append(plot_timeline_utilisation(
                    r0.events, r0.events_clock_mhz or 1000.0,
                    Path(plots_dir) / "timeline_utilisation.png",
                    title=f"{label}: busy fraction per engine class, {_timeline_scope(r0)}"))
            con.print("plots: " + ", ".join(str(p) for p in written))
    if json_path:
        write_json(out, json_path)
        con.print(f"json: {json_path}")
    return out


# --------------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------------
def _print_compare(con: Console, d: dict[str, Any], title: str,
                   results: dict[str, IterationResult] | None = None) -> None:
    t = Table(title=title, title_justify="left")
    t.add_column("system", style="bold")
    for h in ("tokens/s", "tokens/s/dev", "NPU cycles/iter", "time/iter", "NPU util",
              "PIM util", "neupims speedup", "timing"):
        t.add_column(h, justify="right")
    for name, s in d["systems"].items():
        sp = d["speedup"].get(name)
        t.add_row(name, f"{s['tokens_per_s']:,.0f}", f"{s['tokens_per_s_per_device']:,.0f}",
                  "–" if s["cycles_per_iteration"] is None else f"{s['cycles_per_iteration']:,.0f}",
                  _seconds(s["seconds_per_iteration"]), _fmt("npu_util", s["npu_util"]),
                  _fmt("pim_util", s["pim_util"]), "–" if sp is None else f"{sp:.2f}×",
                  s["timing_source"])
    con.print(t)
    for k in ("tokens_per_s", "tokens_per_s_per_device", "cycles_per_iteration",
              "seconds_per_iteration", "npu_util", "pim_util", "speedup", "timing_source"):
        con.print(f"  {METRICS[k].label}: {METRICS[k].definition}")
    clocks = {s.get("npu_freq_mhz") for s in d["systems"].values()} - {None, 0}
    if clocks:
        con.print("  NPU clock: " + ", ".join(f"{c:,.0f} MHz" for c in sorted(clocks)))
    for name, text in d.get("gpu_model", {}).items():
        con.print(f"  GPU model of {name} (gpu.mode {d['systems'][name]['gpu_mode']}): {text}")
    if results and any(r.energy_j for r in results.values()):
        _print_energy(con, "energy per token by part, one decode iteration (whole system: "
                      "every device ÷ tokens)", results)
        con.print("  per component: --json FILE (systems.<name>.energy_per_token_uj_by_"
                  "component); where every constant comes from: docs/energy.md")


def _print_paper(con: Console, rows: list[dict[str, Any]], geo: dict[str, float],
                 systems: Sequence[str], covered: dict[str, int]) -> None:
    """The grid table: a number or ``does not fit`` per system and row, then one line per
    such cell, ``<model> <dataset> <batch>, <system>: does not fit: <resource> (<needed> of
    <available> bytes)`` (the full text inside a cell squeezes the numeric columns until rich
    truncates their digits); the geometric mean of each speedup with the number of rows it
    covers (``covered``)."""
    from archsim.serving import PAPER_HEADLINE, REFERENCE_SYSTEM

    others = ["gpu", "npu", "npu-pim"]
    t = Table(title="NeuPIMs reference grid: tokens/s per system and speedup of neupims "
                    "(tokens/s ratio), one decode iteration", title_justify="left",
              caption="published: the speedups of the NeuPIMs abstract (Heo et al., ASPLOS "
                      f"2024); geometric mean over the rows where both {REFERENCE_SYSTEM} and "
                      "the system have a number (rows in mean: rows covered of the grid's rows)",
              caption_justify="left")
    for h in ("model", "dataset", "batch"):
        t.add_column(h, no_wrap=True)
    for s in systems:
        t.add_column(f"{s} tok/s", justify="right")
    for o in others:
        t.add_column(f"vs {o}", justify="right")
    t.add_column("note")
    blank, unfit = [""] * len(systems), []
    for r in rows:
        sp, tps, dnf = r["speedup"], r["tokens_per_s"], r["does_not_fit"]
        note = ("over KV capacity: " + ", ".join(r["over_capacity"])) if r["over_capacity"] \
            else ""
        unfit += [f"  {r['model']} {r['dataset']} {r['batch']}, {s}: {d['text']}"
                  for s, d in dnf.items()]
        t.add_row(r["model"], r["dataset"], str(r["batch"]),
                  *[f"{tps[s]:,.0f}" if s in tps else "does not fit" if s in dnf else "–"
                    for s in systems],
                  *[f"{sp[o]:.2f}×" if o in sp else "–" for o in others], note)
    t.add_row("geo. mean", "", "", *blank,
              *[f"{geo[o]:.2f}×" if o in geo else "–" for o in others], "", style="bold")
    t.add_row("rows in mean", "", "", *blank,
              *[f"{covered.get(o, 0)}/{len(rows)}" for o in others], "")
    t.add_row("published", "", "", *blank,
              *[f"{PAPER_HEADLINE[o]:.1f}×" for o in others], "", style="italic")
    con.print(t)
    if unfit:
        con.print("does not fit (the compiler cannot place the point on the system: the memory, "
                  "bytes needed of bytes available):")
        for line in unfit:
            con.print(line)


def compare_command(model: str | None = None, requests: str | None = None,
                    batch: int | None = None, dataset: str | None = None, seed: int = 0,
                    overrides: Sequence[str] = (), systems: Sequence[str] | None = None,
                    paper: bool = False, json_path: str | None = None,
                    plots_dir: str | None = None, ignore_capacity: bool = False,
                    quiet: bool = False, console: Console | None = None,
                    keep_channels: bool = False, jobs: int | None = None) -> dict[str, Any]:
    """Everything ``archsim compare`` does; returns the dict written by ``--json``.

    ``model`` None is ``gpt3-7b`` and ``dataset`` None ``sharegpt``; with ``paper`` the grid
    fixes the models, datasets and batches, so none of them may be given. Every flag, file,
    output path and every system's KV capacity is checked before the first simulation.
    ``keep_channels``: the NPU systems keep the request file's channels (a GPU among the systems
    ignores it, and its result says so; only GPUs: an error). ``jobs``: worker processes for
    the systems (grid cells with ``paper``); None = the CPUs this process may use
    (:func:`archsim.workers.usable_cpus`), 1 = in this process.

    Raises:
        ArchsimError / ConfigError / WorkloadError: bad input (one line at the CLI).
    """
    from archsim import serving as sv
    from archsim.cli.boundary import (check_output_dir, check_output_file, check_workload_flags,
                                      resolve_jobs, simulating)
    from mapping.channels import check_batch_channels

    con = console or _console()
    check_workload_flags(seed=seed, requests=requests, dataset=dataset,
                         keep_channels=keep_channels)
    jobs = resolve_jobs(jobs, "grid cells" if paper else "systems")
    kv_keys = [o for o in overrides if o.strip().startswith("serving.")]
    if kv_keys:
        raise ArchsimError(f"--set {kv_keys[0]}: the serving.* keys (the KV-cache manager) "
                           "apply only to a serving run (archsim run --serve); compare runs "
                           "one decode iteration")
    if paper:
        given = [f for f, v in (("--model", model), ("--requests", requests), ("--batch", batch),
                                ("--dataset", dataset)) if v is not None]
        given += ["--ignore-capacity"] if ignore_capacity else []
        given += ["--plots"] if plots_dir else []
        if given:
            raise ArchsimError(f"--paper runs the fixed NeuPIMs grid (models, datasets, batches; "
                               f"over-capacity points are reported): {'/'.join(given)} cannot "
                               "be combined with it")
    systems = list(systems or sv.SYSTEM_PRESETS)
    cfgs = [sv.resolve_system(s, overrides) for s in systems]  # once; unknown systems fail first
    if keep_channels and all(sv.is_gpu(c) for _, c in cfgs):
        raise ArchsimError("--keep-channels: every compared system is a GPU baseline, which has "
                           "no KV channels to keep")
    check_output_file(json_path, "--json")
    check_output_dir(plots_dir, "--plots")
    if plots_dir:
        from archsim.extras import require

        require("plots", "archsim compare --plots")
    if paper:
        with _Bar(not quiet, len(sv.PAPER_MODELS) * len(sv.PAPER_DATASETS)
                  * len(sv.PAPER_BATCHES), "grid points") as bar:
            done = [0]

            def prog(row: dict[str, Any]) -> None:
                done[0] += 1
                bar.update(done[0], f"{row['model']} {row['dataset']} {row['batch']}")

            with simulating():
                rows = sv.paper_grid(systems=systems, seed=seed, overrides=overrides,
                                     progress=prog, jobs=jobs)
        geo, covered = sv.geometric_mean_speedups(rows), sv.speedup_row_counts(rows)
        _print_paper(con, rows, geo, [label for label, _ in cfgs], covered)
        out = {"command": "compare", "paper": rows, "geomean_speedup": geo,
               "geomean_rows": covered, "grid_rows": len(rows),
               "published_speedup": dict(sv.PAPER_HEADLINE), "systems_run": systems,
               "definitions": metric_definitions(["tokens_per_s", "cycles_per_iteration",
                                                  "speedup"])}
    else:
        spec = _model(model or "gpt3-7b")
        if requests is None:
            dataset = dataset or "sharegpt"
            _check_dataset(dataset)
        npu_cfg = next((c for _, c in cfgs if not sv.is_gpu(c)), None)
        b = sv.make_batch(spec, batch if batch is not None else (None if requests else 256),
                          dataset or "sharegpt", seed, requests, npu_cfg, keep_channels)
        for _, c in cfgs:                        # every system, before the first simulation
            if not ignore_capacity:
                sv.check_batch_fits(c, spec, b)
            if not sv.is_gpu(c):
                check_batch_channels(b, c.memory.org.channels)
        with _Bar(not quiet, len(systems), "systems") as bar, simulating():
            done = [0]

            def prog_s(name: str) -> None:
                done[0] += 1
                bar.update(done[0], name)

            res = sv.compare_systems(spec, b, cfgs, check_capacity=False,
                                     progress=prog_s, keep_channels=keep_channels, jobs=jobs)
        out = compare_to_dict(res, sv.REFERENCE_SYSTEM)
        out.update({"command": "compare", "model": spec.name, "workload": b.summary()})
        out["gpu_model"] = {}
        for label, cfg in cfgs:
            if sv.is_gpu(cfg):
                from archsim.gpu import describe_gpu_model
                out["gpu_model"][label] = describe_gpu_model(cfg)
        con.print(f"workload: {_workload_text(b)}")
        for name, r in res.items():
            con.print(f"channels ({name}): " + (channel_placement(r) or (
                "none (GPU baseline; --keep-channels ignored)" if keep_channels else
                "none (GPU baseline)")))
        _print_compare(con, out, f"{spec.name}: one decode iteration on each system", res)
        if plots_dir:
            from archsim.plots import plot_compare, plot_stage_breakdown

            a = plot_compare({k: r.tokens_per_s for k, r in res.items()},
                             Path(plots_dir) / "compare.png", sv.REFERENCE_SYSTEM)
            b2 = plot_stage_breakdown(res, Path(plots_dir) / "stages.png")
            con.print(f"plots: {a}, {b2}")
    if json_path:
        write_json(out, json_path)
        con.print(f"json: {json_path}")
    return out


# --------------------------------------------------------------------------------------------
# typer
# --------------------------------------------------------------------------------------------
def _given_options(ctx: typer.Context) -> list[str]:
    """The long flags the user wrote on the command line (or set through the environment),
    in declaration order, e.g. ``["--program", "--batch"]``; defaults are not listed."""
    out = []
    for param in ctx.command.params:
        src = ctx.get_parameter_source(param.name)
        # compared by name: click's ParameterSource enum is re-exported under other modules
        if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append(next((o for o in param.opts if o.startswith("--")), param.opts[0]))
    return out


def register(app: typer.Typer) -> None:
    """Add ``run`` and ``compare`` to ``app``."""

    @app.command("run")
    def run_cmd(
        ctx: typer.Context,
        system: str = typer.Option("neupims", "--system", help=SYSTEM_HELP),
        model: str = typer.Option("gpt3-7b", "--model",
                                  help="model name (archsim workload models) or config.json"),
        requests: str = typer.Option(None, "--requests", help=(
            "request file: .csv decode snapshot (seq_len,ch_idx), .tsv length table "
            "(input_toks, output_toks) or ShareGPT .json")),
        batch: int = typer.Option(None, "--batch", help=(
            "requests in the decode batch (default 256); with --serve the most requests "
            "per iteration")),
        dataset: str = typer.Option(None, "--dataset", help=(
            "built-in length distribution: sharegpt | alpaca (default sharegpt; not with "
            "--requests)")),
        seed: int = typer.Option(0, "--seed", help="seed of sampling and Poisson arrivals "
                                 "(>= 0)"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        iterations: int = typer.Option(1, "--iterations",
                                       help="consecutive decode iterations to simulate"),
        serve: bool = typer.Option(False, "--serve", help=(
            "serving run: continuous batching until every request finishes")),
        num_requests: int = typer.Option(None, "--num-requests", help=(
            "--serve: requests drawn from --dataset (default 1000) or taken from --requests")),
        arrival: str = typer.Option(None, "--arrival", help=(
            "--serve: all (default: every request at t = 0) | poisson (needs --rate)")),
        rate: float = typer.Option(None, "--rate", help="--serve --arrival poisson: requests/s"),
        timestamps: str = typer.Option(None, "--timestamps",
                                       help="--serve: file of arrival times in seconds"),
        chunked_prefill: int = typer.Option(None, "--chunked-prefill", help=(
            "--serve: token budget per iteration (chunked prefill); default off")),
        max_prefill_tokens: int = typer.Option(None, "--max-prefill-tokens", help=(
            "--serve without chunked prefill: most prompt tokens per prefill iteration "
            "(whole prompts; default max(context limit, 2048), vLLM's max_num_batched_tokens)")),
        timing: str = typer.Option(None, "--timing", help=(
            "--serve on NPU systems: exact (every iteration cycle-level) | reuse (identical "
            "shapes reused) | surrogate (default: reuse + calibrated surrogate)")),
        json_path: str = typer.Option(None, "--json", help="write results as JSON"),
        trace_path: str = typer.Option(None, "--trace", help="write a Chrome/Perfetto trace"),
        plots_dir: str = typer.Option(None, "--plots", help="write PNG plots into DIR"),
        ignore_capacity: bool = typer.Option(False, "--ignore-capacity", help=(
            "simulate a batch even when its KV cache exceeds the device memory")),
        keep_channels: bool = typer.Option(False, "--keep-channels", help=(
            "keep the KV channels of the --requests file (.csv ch_idx; with --serve a .tsv "
            "with a ch_idx column) instead of the system's channel policy")),
        slo_ttft: float = typer.Option(None, "--slo-ttft", help=(
            "--serve: TTFT target in seconds; prints SLO attainment and goodput")),
        slo_tpot: float = typer.Option(None, "--slo-tpot", help=(
            "--serve: TPOT target in seconds; prints SLO attainment and goodput")),
        replicas: int = typer.Option(None, "--replicas", help=(
            "--serve: copies of the system (each its own scheduler and KV cache) sharing the "
            "request stream through --router (default 1)")),
        router: str = typer.Option(None, "--router", help=(
            "--serve --replicas N: round-robin (default) | least-loaded (fewest outstanding "
            "requests) | kv-aware (most free KV tokens after the queued prompts)")),
        csv_path: str = typer.Option(None, "--csv", help=(
            "--serve: write one row per request (arrival, first token, finish, tokens, "
            "iterations, SLO met) to this CSV file")),
        quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
        program: str = typer.Option(None, "--program", help=(
            "simulate a program instead of compiling: a directory of `archsim compile "
            "--layers window -o DIR` (its machine and batch), or one .asm/.bin on --system")),
    ) -> None:
        """Simulate one system on a workload: decode iterations, or a serving run (--serve)."""
        if program is not None:
            from archsim.cli.program_run import PROGRAM_OPTIONS, run_program
            given = _given_options(ctx)
            stray = [o for o in given if o not in PROGRAM_OPTIONS]
            if stray:
                raise ArchsimError(
                    f"archsim run --program: {stray[0]} does not apply to a program (the "
                    "program fixes the model, batch and mapping); allowed with --program: "
                    + ", ".join(PROGRAM_OPTIONS))
            run_program(program, system if "--system" in given else None, set_, json_path)
            return
        run_command(system, model, requests, batch, dataset, seed, set_, iterations, serve,
                    arrival, rate, timestamps, chunked_prefill, num_requests, timing, json_path,
                    trace_path, plots_dir, ignore_capacity, keep_channels, quiet,
                    max_prefill_tokens=max_prefill_tokens, slo_ttft=slo_ttft,
                    slo_tpot=slo_tpot, csv_path=csv_path, replicas=replicas, router=router)

    @app.command("compare")
    def compare_cmd(
        model: str = typer.Option(None, "--model", help="model name or config.json (default "
                                  "gpt3-7b)"),
        requests: str = typer.Option(None, "--requests", help="request file (see archsim run)"),
        batch: int = typer.Option(None, "--batch", help="requests in the batch (default 256)"),
        dataset: str = typer.Option(None, "--dataset", help="sharegpt | alpaca (default "
                                    "sharegpt; not with --requests)"),
        seed: int = typer.Option(0, "--seed", help="seed of the sampled batch (>= 0)"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP + " Applied to every system."),
        systems: str = typer.Option(None, "--systems", help=(
            "comma-separated systems to run (default neupims,npu-pim,npu,gpu)")),
        paper: bool = typer.Option(False, "--paper", help=(
            "run the NeuPIMs grid (GPT3 7B/13B/30B/175B × sharegpt/alpaca × batch 64..512) "
            "beside the published speedups; a system that cannot hold a point says 'does not "
            "fit' (which memory, bytes needed of available) and the others still run")),
        json_path: str = typer.Option(None, "--json", help="write results as JSON"),
        plots_dir: str = typer.Option(None, "--plots", help="write PNG plots into DIR"),
        ignore_capacity: bool = typer.Option(False, "--ignore-capacity"),
        keep_channels: bool = typer.Option(False, "--keep-channels", help=(
            "NPU systems keep the KV channels of the --requests file (ch_idx) instead of "
            "each system's channel policy; a GPU among the systems ignores it")),
        quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
        jobs: int = typer.Option(None, "--jobs", "-j", help=(
            "worker processes running the systems (--paper: the grid's cells; --ablation: its "
            "steps) side by side (default: the CPU count; 1 = one after another in this "
            "process); the results do not depend on it")),
        ablation: bool = typer.Option(False, "--ablation", help=(
            "add NeuPIMs' features one at a time from the Newton blocked baseline (fused "
            "commands, dual row buffers, min-load channels, interleaving): tokens/s and the "
            "step gain of each")),
    ) -> None:
        """Run the systems on the same workload; print tokens/s and neupims' speedups."""
        if ablation:
            from archsim.cli.ablation import ablation_command
            ablation_command(model, requests, batch, dataset, seed, set_, json_path,
                             ignore_capacity, quiet, systems=systems, paper=paper,
                             plots_dir=plots_dir, jobs=jobs)
            return
        sys_list = [s.strip() for s in systems.split(",") if s.strip()] if systems else None
        compare_command(model, requests, batch, dataset, seed, set_, sys_list, paper,
                        json_path, plots_dir, ignore_capacity, quiet,
                        keep_channels=keep_channels, jobs=jobs)


__all__ = ["register", "run_command", "compare_command"]
