"""``archsim mem``: stand-alone memory runs from traces and the memory self-test.

Every printed metric names its unit and scope: bandwidth in bytes per memory-clock cycle
(tCK) and GB/s **per channel** (busy span: first arrival to last data beat) and for the whole
device (all bytes over the device's busy span), latency in tCK cycles per request (arrival to
completion), energy (IDD method) per channel or per device in pJ … J as it reads best.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from archsim.config import load_config
from archsim.units import energy_text

SET_HELP = "Override a key, e.g. --set memory.timing.tRCDRD=16 (repeatable; value parsed as YAML)."


def _write_json(path: str, data: dict) -> None:
    from archsim.errors import ArchsimError

    try:
        Path(path).write_text(json.dumps(data, indent=2, default=str))
    except OSError as exc:
        raise ArchsimError(f"{path}: cannot write JSON: {exc.strerror}") from None


def _print_run(stats: dict, cfg, wall_s: float, engine: str) -> None:
    echo = typer.echo
    tck = cfg.memory.timing.tCK_ns
    echo(f"requests={stats['requests']}  bytes={stats['bytes_total']}  "
         f"simulated={stats['sim_cycles']} cycles (memory clock, tCK={tck} ns)  "
         f"engine={engine}  wall={wall_s:.2f} s")
    echo(f"latency per request (arrival to completion, cycles): avg "
         f"{stats['latency_avg_cycles']:.1f}  p99 {stats['latency_p99_cycles']:.1f}")
    sy = stats["system"]
    echo(f"bandwidth (system total, all channels, {sy['bytes']} B over {sy['span_cycles']} "
         f"cycles from the first arrival to the last data beat): "
         f"{sy['bandwidth_bytes_per_cycle']:.2f} B/cycle = {sy['bandwidth_gb_per_s']:.2f} GB/s, "
         f"{sy['peak_fraction']:.1%} of the device peak {sy['peak_bytes_per_cycle']:g} B/cycle")
    echo(f"row-buffer hit rate (device, 1 - ACT/(RD+WR)): {stats['row_hit_rate']:.3f}")
    echo("commands (device): " + "  ".join(f"{k}={v}" for k, v in stats["commands"].items()))
    e = stats["energy_pj"]
    if e:
        echo("energy (device, IDD method): " + "  ".join(f"{k}={energy_text(v * 1e-12)}"
                                                          for k, v in e.items()))
    echo(f"{'ch':>3} {'B/cycle':>8} {'GB/s':>7} {'of peak':>7} {'hit rate':>8} "
         f"{'RD':>8} {'WR':>8} {'ACT':>7} {'REF':>5} {'energy':>11}   (per channel)")
    for c in stats["channels"]:
        if not (c["bytes_read"] or c["bytes_written"] or c["commands"]):
            continue
        cm = c["commands"]
        echo(f"{c['channel']:>3} {c['bandwidth_bytes_per_cycle']:8.2f} "
             f"{c['bandwidth_gb_per_s']:7.2f} {c['peak_fraction']:7.1%} "
             f"{c['row_hit_rate']:8.3f} {cm.get('RD', 0):>8} {cm.get('WR', 0):>8} "
             f"{cm.get('ACT', 0):>7} {cm.get('REF', 0):>5} "
             f"{energy_text(c['energy_pj']['total'] * 1e-12):>11}")


def register(app: typer.Typer) -> None:
    """Add the ``mem`` command group (``run``, ``selftest``) to ``app``."""
    grp = typer.Typer(help="Stand-alone HBM/PIM memory runs: traces and self-test.",
                      no_args_is_help=True)

    @grp.command("run")
    def run_cmd(
        trace: str = typer.Option(..., "--trace", help="trace file"),
        config: str = typer.Option("neupims", "--config", help="preset name or YAML file"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        fmt: str = typer.Option(None, "--format",
                                help="dramsim3 ('0xADDR READ|WRITE CYCLE') or ramulator "
                                     "('[N] 0xADDR R|W'); default: detected"),
        engine: str = typer.Option("fast", "--engine", help="fast (numba) or exact"),
        json_path: str = typer.Option(None, "--json", help="write statistics as JSON here"),
        log_path: str = typer.Option(None, "--log", help="write the command log CSV here"),
        check: bool = typer.Option(False, "--check", help="run the timing checker on the log"),
    ) -> None:
        """Replay a memory trace and report bandwidth, hit rate, latency, commands, energy."""
        from archsim.cli.boundary import check_output_file, simulating
        from archsim.errors import ArchsimError
        from archsim.memory.checker import check_log, format_violations
        from archsim.memory.cmdlog import write_log_csv
        from archsim.memory.runner import ENGINES, run_requests
        from archsim.memory.trace import (FORMATS, arrival_rate_note, detect_trace_format,
                                          parse_trace_text, read_trace_text)

        if engine not in ENGINES:
            raise ArchsimError(f"--engine {engine!r} not one of {list(ENGINES)}")
        if fmt is not None and fmt not in FORMATS:
            raise ArchsimError(f"--format {fmt!r} not one of {list(FORMATS)}")
        check_output_file(json_path, "--json")
        check_output_file(log_path, "--log")
        cfg = load_config(config, set_)
        text = read_trace_text(trace)
        addrs, writes, arrivals = parse_trace_text(text, fmt, str(trace),
                                                   cfg.memory.org.capacity_bytes)
        m = cfg.memory
        note = arrival_rate_note(fmt or detect_trace_format(text) or "", m.org.burst_bytes,
                                 m.peak_bandwidth_bytes_per_cycle_per_channel * m.org.channels,
                                 str(trace))
        t0 = time.perf_counter()
        with simulating():
            res = run_requests(cfg, addrs, [cfg.memory.org.burst_bytes] * len(addrs), writes,
                               arrivals, engine=engine)
        wall = time.perf_counter() - t0
        _print_run(res.stats, cfg, wall, engine)
        if note:
            typer.echo(f"note: {note}")
        out = dict(res.stats, trace=str(trace), engine=engine, wall_s=wall,
                   notes=[note] if note else [])
        if check:
            viol = check_log(res.log(), cfg)
            typer.echo("timing checker: " + format_violations(viol))
            out["violations"] = len(viol)
        if log_path:
            write_log_csv(res.log(), log_path)
        if json_path:
            _write_json(json_path, out)

    @grp.command("selftest")
    def selftest_cmd(
        config: str = typer.Option("neupims", "--config", help="preset name or YAML file"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        per_channel: int = typer.Option(8192, "--per-channel", min=1,
                                        help="requests per channel for each pattern"),
        json_path: str = typer.Option(None, "--json", help="write results as JSON here"),
    ) -> None:
        """Standard patterns (achieved vs analytic bandwidth), PIM GEMV, dual/single
        concurrency; the timing checker runs on every log."""
        from archsim.cli.boundary import check_output_file, simulating
        from archsim.memory.selftest import run_selftest

        check_output_file(json_path, "--json")
        cfg = load_config(config, set_)
        t0 = time.perf_counter()
        with simulating():
            res = run_selftest(cfg, per_channel=per_channel)
        echo = typer.echo
        echo(f"memory self-test on '{cfg.name}' (bandwidth per channel, bytes per memory "
             f"cycle; peak {cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel:g})")
        echo(f"{'pattern':12s} {'requests':>9} {'achieved':>9} {'analytic':>9} {'of peak':>8} "
             f"{'of bound':>8} {'hit rate':>8} {'violations':>10}")
        bad = 0
        for p in res["patterns"]:
            bad += p["violations"]
            echo(f"{p['pattern']:12s} {p['requests']:>9} "
                 f"{p['achieved_bytes_per_cycle_per_channel']:9.2f} "
                 f"{p['analytic_bound_bytes_per_cycle_per_channel']:9.2f} "
                 f"{p['fraction_of_peak']:8.1%} {p['fraction_of_bound']:8.1%} "
                 f"{p['row_hit_rate']:8.3f} violations={p['violations']}")
        echo("  analytic = upper bound per channel over each run's busy span: the data-bus peak "
             "(seq_*, rw_mix) or the activation limit of tFAW/tRRD_S/tRC (random_read, "
             "strided), less the refreshes that span contains (none below tREFI); of bound = "
             "achieved / analytic")
        g = res["pim_gemv"]
        if g is None:
            echo(res["pim_skipped"])
        else:
            bad += g["violations"]
            echo(f"PIM GEMV, one channel, {g['n_rows']} row groups x k={g['k']} COMP steps of "
                 f"{g['comp_bytes_per_bank']} B per bank (pim.multipliers_per_bank x "
                 f"npu.dtype_bytes): {g['cycles']} "
                 f"cycles (formula without refresh {g['formula_cycles_no_refresh']}, "
                 f"{g['refreshes']} REF); effective internal bandwidth "
                 f"{g['pim_effective_bytes_per_cycle']:.1f} B/cycle vs external peak "
                 f"{g['external_peak_bytes_per_cycle']:g} B/cycle per channel "
                 f"({g['pim_effective_bytes_per_cycle'] / g['external_peak_bytes_per_cycle']:.1f}x; "
                 f"COMP peak {g['pim_peak_internal_bytes_per_cycle']:g})  "
                 f"violations={g['violations']}")
        for c in res["concurrency"]:
            bad += c["violations"]
            echo(f"concurrency ({c['mode']:6s}, one channel): reads alone "
                 f"{c['mem_alone_cycles']}, GEMV alone {c['pim_alone_cycles']}, together "
                 f"{c['together_cycles']} cycles = {c['ratio_to_max']:.2f} x max, "
                 f"{c['ratio_to_sum']:.2f} x sum  violations={c['violations']}")
        echo(f"total violations={bad}  wall={time.perf_counter() - t0:.1f} s")
        if json_path:
            for p in res["patterns"]:
                p["stats"] = {k: v for k, v in p["stats"].items() if k != "channels"}
            _write_json(json_path, res)
        if bad:
            raise typer.Exit(1)

    app.add_typer(grp, name="mem")
