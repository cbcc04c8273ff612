"""``archsim sweep``: run a design-space sweep, export its results, report its Pareto front.

    archsim sweep SPEC --out DIR [--jobs N | --dask tcp://HOST:8786] [--retry-failed]
    archsim sweep export DIR --csv|--parquet [-o FILE]
    archsim sweep report DIR [--top K] [--plots DIR]

``archsim sweep SPEC ...`` is short for ``archsim sweep run SPEC ...``. See docs/sweeps.md.
"""
from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Any, Optional

import click
import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup


class _DefaultRunGroup(TyperGroup):
    """A group whose first argument, when it is not a subcommand, is the SPEC of ``run``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _points_table(title: str, df: Any, spec: Any, max_rows: int = 30) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("id", justify="right")
    params = [c for c in df.columns if c.startswith("param.")]
    for c in params:
        t.add_column(c.removeprefix("param."), justify="right")
    for o in spec.objectives:
        t.add_column(f"{o.metric} {'↑' if o.goal == 'maximize' else '↓'}", justify="right")
    for _, row in df.head(max_rows).iterrows():
        t.add_row(str(row["id"]), *[_fmt(row[c]) for c in params],
                  *[_fmt(row.get(f"metric.{o.metric}")) for o in spec.objectives])
    return t


def register(app: typer.Typer) -> None:
    """Add the ``sweep`` command group to ``app``."""
    grp = typer.Typer(cls=_DefaultRunGroup, no_args_is_help=True,
                      help="Design-space sweeps: run a spec (archsim sweep SPEC --out DIR), "
                           "export or report the results.")

    @grp.command("run")
    def run_cmd(
        spec_path: Path = typer.Argument(..., metavar="SPEC", help="sweep spec (YAML)"),
        out: Path = typer.Option(..., "--out", "-o", help="results directory (created; "
                                 "re-running the same command resumes)"),
        jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="local worker processes "
                                           "(default: CPU count; 1 = in this process)"),
        dask: Optional[str] = typer.Option(None, "--dask", help="address of a running Dask "
                                           "scheduler, e.g. tcp://HOST:8786"),
        retry_failed: bool = typer.Option(False, "--retry-failed",
                                          help="evaluate points recorded as failed again"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    ) -> None:
        """Run (or resume) a sweep; every finished point is committed to DIR/sweep.sqlite."""
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        from archsim.cli.boundary import check_output_dir
        from archsim.sweep.errors import SweepError
        from archsim.sweep.runner import run_sweep
        from archsim.sweep.spec import load_spec

        if jobs is not None and jobs < 1:
            raise SweepError(f"--jobs {jobs}: must be >= 1 (1 runs the points in this process)")
        if dask is not None and jobs is not None:
            raise SweepError("--jobs and --dask are exclusive: the Dask cluster's workers run "
                             "the points")
        spec = load_spec(spec_path)
        check_output_dir(out, "--out")
        err = Console(stderr=True)
        bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("done {task.fields[done]}  failed {task.fields[failed]}  "
                                  "infeasible {task.fields[infeasible]}  "
                                  "(skipped {task.fields[skipped]})"),
                       TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                       console=err, disable=quiet, transient=False)
        task = bar.add_task(spec.name, total=None, done=0, failed=0, infeasible=0, skipped=0)

        def on_progress(p: Any) -> None:
            bar.update(task, total=max(0, p.total - p.skipped),
                       completed=p.done + p.failed + p.infeasible, done=p.done,
                       failed=p.failed, infeasible=p.infeasible, skipped=p.skipped)

        def on_term(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGTERM, on_term)
        try:
            with bar:
                summary = run_sweep(spec, out, jobs=jobs, dask_address=dask,
                                    retry_failed=retry_failed, progress=on_progress)
        except KeyboardInterrupt:
            err.print(f"archsim sweep: interrupted; every finished point is saved in "
                      f"{out}/sweep.sqlite; run the same command again to resume")
            # SystemExit, not typer.Exit: main() runs click with standalone_mode=False, which
            # returns (and main() drops) a typer.Exit code.
            raise SystemExit(130) from None
        finally:
            signal.signal(signal.SIGTERM, old)
        p = summary.progress
        typer.echo(f"{spec.name}: {summary.evaluated} points evaluated ({p.done} ok), "
                   f"{p.failed} failed, {p.infeasible} infeasible (not run), {p.skipped} "
                   f"already in the database; {summary.wall_s:.1f} s wall on "
                   f"{summary.executor}"
                   + (f", {summary.points_per_minute:.0f} points/min" if summary.evaluated
                      else ""))
        for line in summary.failures[:5]:
            typer.echo(f"  failed: {line}")
        if p.failed > 5:
            typer.echo(f"  ... ({p.failed} failures; see the 'error' column of "
                       f"'archsim sweep export {out} --csv')")
        typer.echo(f"results: {out}/sweep.sqlite; next: archsim sweep report {out}")

    @grp.command("export")
    def export_cmd(
        out: Path = typer.Argument(..., metavar="DIR", help="sweep results directory"),
        csv: bool = typer.Option(False, "--csv", help="write CSV"),
        parquet: bool = typer.Option(False, "--parquet", help="write Parquet"),
        output: Optional[Path] = typer.Option(None, "-o", "--output",
                                              help="file (default DIR/results.csv|parquet)"),
    ) -> None:
        """Write every point (parameters, metrics, status, errors) as one table."""
        from archsim.sweep.analysis import export_results
        from archsim.sweep.errors import SweepError

        from archsim.cli.boundary import check_output_file

        if csv == parquet:
            raise SweepError("give exactly one of --csv or --parquet")
        check_output_file(output, "-o")
        from archsim.extras import require

        require("sweep", "archsim sweep export", ("pandas",) + (("pyarrow",) if parquet else ()))
        path = export_results(out, "csv" if csv else "parquet", output)
        typer.echo(f"wrote {path}")

    @grp.command("report")
    def report_cmd(
        out: Path = typer.Argument(..., metavar="DIR", help="sweep results directory"),
        top: int = typer.Option(5, "--top", help="best points listed per objective"),
        plots: Optional[Path] = typer.Option(None, "--plots",
                                             help="directory of the PNGs (default DIR)"),
        no_plots: bool = typer.Option(False, "--no-plots", help="tables only"),
    ) -> None:
        """Print the best points and the Pareto front; write pareto.png and sensitivity.png."""
        from archsim.cli.boundary import check_output_dir
        from archsim.results import metric_definitions
        from archsim.sweep.analysis import make_report
        from archsim.sweep.errors import SweepError
        from archsim.sweep.spec import SWEEP_METRICS

        if no_plots and plots is not None:
            raise SweepError("--plots and --no-plots are exclusive")
        check_output_dir(plots, "--plots")
        from archsim.extras import require

        require("sweep", "archsim sweep report", ("pandas",))
        if not no_plots:
            require("plots", "archsim sweep report (without --no-plots)")
        rep = make_report(out, top=top, plots_dir=plots, plots=not no_plots)
        con = Console()
        if not con.is_terminal:
            con = Console(width=160)  # files and pipes: do not wrap tables at 80 columns
        c = rep.counts
        typer.echo(f"{rep.spec.name}: {c['done']} evaluated, {c['feasible']} feasible with "
                   f"every objective, {c['failed']} failed, {c['infeasible']} infeasible "
                   "(not run)")
        if rep.spec.constraints:
            typer.echo("constraints: " + ", ".join(x.describe() for x in rep.spec.constraints))
        for metric, df in rep.best.items():
            o = next(o for o in rep.spec.objectives if o.metric == metric)
            con.print(_points_table(f"best {len(df)} by {metric} ({o.goal})", df, rep.spec))
        con.print(_points_table(f"Pareto front ({len(rep.front)} points, feasible only; "
                                "↑ maximise, ↓ minimise)", rep.front, rep.spec))
        defs = metric_definitions(rep.spec.metric_names)
        for o in rep.spec.objectives:
            typer.echo(f"  {o.metric}: " + defs.get(o.metric, SWEEP_METRICS.get(
                o.metric, "silicon area in mm² (NPU die at npu.process + PIM logic), see "
                "docs/energy.md" if o.metric.startswith("area") else "(custom evaluator metric)")))
        for path in rep.plots:
            typer.echo(f"wrote {path}")

    app.add_typer(grp, name="sweep")
