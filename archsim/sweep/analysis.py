"""Sweep results as tables and pictures: load, Pareto front, best points, export, plots.

:func:`load_results` flattens the database into a pandas DataFrame, one row per point:
``id, key, status, feasible, violations, error, wall_s, attempts, tool_version, host, origin,
finished_at``, then ``param.<name>`` per swept parameter, ``workload.<key>`` and
``metric.<name>`` per metric (non-scalar metrics as JSON text). :func:`export_results` writes
that frame to CSV or Parquet and :func:`read_results_file` reads it back with the same dtypes.

:func:`pareto_front` keeps the feasible, successfully evaluated points that no other such
point dominates (at least as good in every objective, strictly better in one; "good" is the
objective's goal). :func:`best_points` ranks them per objective. :func:`write_plots` draws a
Pareto scatter, a parameter-sensitivity grid and — when the points report throughput and
energy — a performance-per-watt scatter (tokens/s against tokens/J with their own Pareto
front; matplotlib, Agg backend, PNG).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from archsim.sweep.db import ResultsDB
from archsim.sweep.errors import SweepError
from archsim.sweep.spec import SweepSpec

BASE_COLUMNS = ("id", "key", "status", "feasible", "violations", "error", "wall_s", "attempts",
                "tool_version", "host", "origin", "finished_at")


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def _scalar(v: Any) -> Any:
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def load_results(out_dir: str | Path) -> pd.DataFrame:
    """All points of a sweep directory as a DataFrame (see the module docstring for columns).

    Raises:
        SweepError: no sweep database in ``out_dir``.
    """
    with ResultsDB(out_dir) as db:
        rows = list(db.rows(with_config=False))
    recs = []
    for r in rows:
        rec = {c: r[c] for c in BASE_COLUMNS}
        rec["violations"] = "; ".join(r["violations"]) if r["violations"] else None
        for k, v in (r["params"] or {}).items():
            rec[f"param.{k}"] = _scalar(v)
        for k, v in (r["workload"] or {}).items():
            rec[f"workload.{k}"] = _scalar(v)
        for k, v in (r["metrics"] or {}).items():
            rec[f"metric.{k}"] = _scalar(v)
        recs.append(rec)
    df = pd.DataFrame.from_records(recs) if recs else pd.DataFrame(
        {c: [] for c in BASE_COLUMNS})
    return _normalise(df)


TEXT_COLUMNS = ("key", "status", "violations", "error", "tool_version", "host", "origin",
                "finished_at")


def _is_null(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _column(name: str, values: list[Any]) -> pd.Series:
    """One column in its canonical dtype: nullable boolean, int64/float64, or object text
    (None for missing). Text read from CSV is converted to numbers when every value parses."""
    vals = [None if _is_null(v) else v for v in values]
    present = [v for v in vals if v is not None]
    if name not in TEXT_COLUMNS and present:
        if all(isinstance(v, (bool, np.bool_)) or v in ("True", "False") for v in present):
            return pd.Series([None if v is None else v in (True, "True") for v in vals],
                             dtype="boolean")
        nums = []
        for v in present:
            if isinstance(v, (bool, np.bool_)):
                break
            if isinstance(v, (int, float, np.integer, np.floating)):
                nums.append(v)
                continue
            try:
                nums.append(int(v) if str(v).lstrip("-").isdigit() else float(v))
            except (TypeError, ValueError):
                break
        else:
            out = [None] * len(vals)
            it = iter(nums)
            for i, v in enumerate(vals):
                if v is not None:
                    out[i] = next(it)
            if len(present) == len(vals) and all(isinstance(x, (int, np.integer)) for x in nums):
                return pd.Series(out, dtype="int64")
            return pd.Series([np.nan if x is None else float(x) for x in out], dtype="float64")
    return pd.Series([None if v is None else str(v) for v in vals], dtype=object)


def _normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Canonical dtypes (see :func:`_column`) and column order (base, params, workload,
    metrics), so that a frame survives CSV and Parquet unchanged."""
    data = {c: _column(c, list(df[c])) for c in df.columns}
    if "feasible" in data:
        data["feasible"] = data["feasible"].astype("boolean")
    out = pd.DataFrame(data, index=range(len(df)))
    order = [c for c in BASE_COLUMNS if c in out]
    for prefix in ("param.", "workload.", "metric."):
        order += [c for c in out.columns if c.startswith(prefix)]
    return out[order + [c for c in out.columns if c not in order]]


def load_spec_from_db(out_dir: str | Path) -> SweepSpec:
    """The spec of the sweep's last run, as stored in its database.

    Raises:
        SweepError: no database, or it holds no spec.
    """
    with ResultsDB(out_dir) as db:
        meta = db.meta()
    if "spec_json" not in meta:
        raise SweepError(f"{out_dir}: the sweep database holds no spec")
    data = json.loads(meta["spec_json"])
    spec = SweepSpec.model_validate(data)
    return spec.model_copy(update={"source": meta.get("spec_path", "")})


# ------------------------------------------------------------------------------------------
# Pareto front and best points
# ------------------------------------------------------------------------------------------
def _candidates(df: pd.DataFrame, spec: SweepSpec) -> pd.DataFrame:
    """Feasible, evaluated points with every objective present."""
    if df.empty:
        return df
    cols = [f"metric.{m}" for m in spec.metric_names]
    ok = (df["status"] == "done") & (df["feasible"].fillna(False).astype(bool))
    for c in cols:
        if c not in df:
            return df.iloc[0:0]
        ok &= pd.to_numeric(df[c], errors="coerce").notna()
    return df[ok]


def non_dominated(values: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of ``values`` (``[points, objectives]``, larger is better in
    every column) that no other row dominates. Equal rows do not dominate each other."""
    n = values.shape[0]
    keep = np.ones(n, dtype=bool)
    for i in range(n):
        ge = np.all(values >= values[i], axis=1)
        gt = np.any(values > values[i], axis=1)
        if np.any(ge & gt):
            keep[i] = False
    return keep


def pareto_front(df: pd.DataFrame, spec: SweepSpec) -> pd.DataFrame:
    """The Pareto-optimal points of ``df`` for ``spec``'s objectives (only feasible, done
    points with every objective known), sorted by the first objective, best first."""
    cand = _candidates(df, spec)
    if cand.empty:
        return cand
    y = np.column_stack([pd.to_numeric(cand[f"metric.{o.metric}"]).to_numpy(float) * o.sign
                         for o in spec.objectives])
    front = cand[non_dominated(y)]
    o = spec.objectives[0]
    return front.sort_values(f"metric.{o.metric}", ascending=o.goal == "minimize")


def best_points(df: pd.DataFrame, spec: SweepSpec, top: int = 5) -> dict[str, pd.DataFrame]:
    """``{metric: the top feasible points for that objective}``, best first."""
    cand = _candidates(df, spec)
    out = {}
    for o in spec.objectives:
        col = f"metric.{o.metric}"
        if cand.empty:
            out[o.metric] = cand
            continue
        out[o.metric] = cand.sort_values(col, ascending=o.goal == "minimize").head(top)
    return out


# ------------------------------------------------------------------------------------------
# Export
# ------------------------------------------------------------------------------------------
def export_results(out_dir: str | Path, fmt: str, path: str | Path | None = None) -> Path:
    """Write every point of the sweep to ``path`` (default ``DIR/results.<csv|parquet>``).

    Args:
        out_dir: the sweep directory.
        fmt: ``csv`` or ``parquet``.
        path: output file.

    Raises:
        SweepError: unknown format, no database, or the file cannot be written.
    """
    if fmt not in ("csv", "parquet"):
        raise SweepError(f"export format {fmt!r} not one of ['csv', 'parquet']")
    df = load_results(out_dir)
    p = Path(path) if path is not None else Path(out_dir) / f"results.{fmt}"
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "csv":
            df.to_csv(p, index=False)
        else:
            df.to_parquet(p, index=False)
    except (OSError, ValueError, ImportError) as exc:
        raise SweepError(f"{p}: cannot write {fmt}: {exc}") from None
    return p


def read_results_file(path: str | Path) -> pd.DataFrame:
    """Read a file written by :func:`export_results` back into the :func:`load_results` form.

    Raises:
        SweepError: unknown suffix or unreadable file.
    """
    p = Path(path)
    try:
        if p.suffix == ".parquet":
            df = pd.read_parquet(p)
        elif p.suffix == ".csv":
            df = pd.read_csv(p, dtype=str, keep_default_na=False, na_values=[""])
        else:
            raise SweepError(f"{p}: unknown results file type (expected .csv or .parquet)")
    except (OSError, ValueError) as exc:
        raise SweepError(f"{p}: cannot read results: {exc}") from None
    return _normalise(df)


# ------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------
@dataclass
class Report:
    """What :func:`make_report` found and wrote.

    Attributes:
        spec: the sweep's spec.
        results: every point (:func:`load_results`).
        front: the Pareto front (:func:`pareto_front`).
        best: :func:`best_points` per objective.
        counts: points per status plus ``feasible``.
        plots: paths of the PNGs written.
    """

    spec: SweepSpec
    results: pd.DataFrame
    front: pd.DataFrame
    best: dict[str, pd.DataFrame]
    counts: dict[str, int]
    plots: list[Path] = field(default_factory=list)


def _label(spec: SweepSpec, metric: str) -> str:
    from archsim.results import METRICS
    from archsim.sweep.spec import SWEEP_METRICS

    goal = next((o.goal for o in spec.objectives if o.metric == metric), None)
    arrow = {"maximize": " (higher is better)", "minimize": " (lower is better)"}.get(goal, "")
    unit = METRICS[metric].unit if metric in METRICS else (
        "mm²" if metric.startswith("area") else
        SWEEP_METRICS.get(metric, "").rpartition("[")[2].rstrip("]"))
    return f"{metric} [{unit}]{arrow}" if unit else f"{metric}{arrow}"


def _is_numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def perf_per_watt_front(df: pd.DataFrame) -> pd.DataFrame:
    """Feasible, evaluated points that no other such point beats in both throughput
    (``tokens_per_s``, higher) and energy efficiency (``tokens_per_joule`` = tokens/s per W,
    higher); empty when the metrics are missing. Sorted by tokens/s, best first."""
    cols = ("metric.tokens_per_s", "metric.tokens_per_joule")
    if df.empty or any(c not in df for c in cols):
        return df.iloc[0:0]
    ok = (df["status"] == "done") & df["feasible"].fillna(False).astype(bool)
    for c in cols:
        ok &= pd.to_numeric(df[c], errors="coerce").notna()
    cand = df[ok]
    if cand.empty:
        return cand
    y = np.column_stack([pd.to_numeric(cand[c]).to_numpy(float) for c in cols])
    return cand[non_dominated(y)].sort_values(cols[0], ascending=False)


def _plot_perf_per_watt(df: pd.DataFrame, spec: SweepSpec, path: Path) -> Path | None:
    """``perf_per_watt.png``: tokens/s (x) against tokens/J (y) of every evaluated point,
    feasible points coloured by system, the perf/W Pareto front red and connected, with
    iso-power lines (tokens/s ÷ tokens/J = W of the whole system). None without the metrics."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    cx, cy = "metric.tokens_per_s", "metric.tokens_per_joule"
    if df.empty or cx not in df or cy not in df:
        return None
    done = df[(df["status"] == "done")]
    x_all = pd.to_numeric(done[cx], errors="coerce")
    y_all = pd.to_numeric(done[cy], errors="coerce")
    if not (x_all.notna() & y_all.notna()).any():
        return None
    front = perf_per_watt_front(df)
    feas = done[done["feasible"].fillna(False).astype(bool)]
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ax.scatter(x_all, y_all, c="0.8", s=12, label="evaluated")
    sys_col = "workload.system"
    groups = feas.groupby(sys_col) if sys_col in feas and not feas.empty else [("", feas)]
    for name, g in groups:
        ax.scatter(pd.to_numeric(g[cx]), pd.to_numeric(g[cy]), s=16,
                   label=f"feasible {name}".strip())
    if not front.empty:
        f = front.sort_values(cx)
        ax.plot(pd.to_numeric(f[cx]), pd.to_numeric(f[cy]), "o-", c="tab:red", ms=6, lw=1,
                mfc="none", label="perf/W Pareto front", zorder=3)
    ok = (x_all > 0) & (y_all > 0)
    if "id" in feas:
        for _, r in feas.iterrows():
            ax.annotate(str(r["id"]), (float(r[cx]), float(r[cy])), fontsize=6, color="0.3",
                        xytext=(3, 3), textcoords="offset points")
    if ok.any():
        for axis, v in (("x", x_all[ok]), ("y", y_all[ok])):
            if v.max() / v.min() >= 8:             # log only when it spans a decade or so
                getattr(ax, f"set_{axis}scale")("log")
        ax.autoscale(False)
        watts = (x_all[ok] / y_all[ok]).to_numpy(float)
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        xs = np.geomspace(x0, x1, 50)
        for w in np.unique([float(f"{v:.2g}") for v in
                            np.geomspace(watts.min(), watts.max(), 3)]):
            ax.plot(xs, xs / w, ":", c="0.55", lw=0.8)
            xl = max(x0, y0 * w) * 1.03            # where the line enters the plot
            if xl < x1:
                ax.annotate(f"{w:,.4g} W", (xl, xl / w), fontsize=7, color="0.35",
                            ha="left", va="bottom", rotation=30)
    ax.set_xlabel(_label(spec, "tokens_per_s"))
    ax.set_ylabel("tokens_per_joule [tokens/J = tokens/s per W]")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"{spec.name}: throughput vs performance per watt (labels: point id)\n"
                 f"{len(front)} point(s) on the perf/W Pareto front; dotted: constant "
                 "whole-system power", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(df: pd.DataFrame, spec: SweepSpec, out_dir: str | Path) -> list[Path]:
    """Write ``pareto.png``, ``sensitivity.png`` and (when the points report ``tokens_per_s``
    and ``tokens_per_joule``) ``perf_per_watt.png`` into ``out_dir``.

    * Pareto: one panel per pair of objectives (one objective: its values sorted); every
      evaluated point grey, feasible points blue, the Pareto front red and connected.
    * Sensitivity: one panel per (objective, parameter): the mean of the objective over the
      feasible points at each parameter value, with the min–max range as a band (numeric
      parameters; log x axis when the values span ≥ 8×) or as error bars (categorical).

    Returns the PNG paths. Raises nothing for an empty sweep (the panels say "no data").
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    done = df[df["status"] == "done"] if not df.empty else df
    feas = _candidates(df, spec)
    front = pareto_front(df, spec)
    objs = spec.metric_names

    # ---- Pareto scatter
    pairs = [(a, b) for i, a in enumerate(objs) for b in objs[i + 1:]] or [(objs[0], None)]
    n = len(pairs)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax, (a, b) in zip(axes.flat, pairs):
        ca = f"metric.{a}"
        if b is None:
            if ca in feas and not feas.empty:
                vals = np.sort(pd.to_numeric(feas[ca]).to_numpy(float))
                if spec.objectives[0].goal == "maximize":
                    vals = vals[::-1]
                ax.plot(np.arange(1, vals.size + 1), vals, "o-", ms=3)
            ax.set_xlabel("rank")
            ax.set_ylabel(_label(spec, a))
            continue
        cb = f"metric.{b}"
        for data, kw in ((done, dict(c="0.75", s=12, label="evaluated")),
                         (feas, dict(c="tab:blue", s=14, label="feasible")),
                         (front, dict(c="tab:red", s=28, label="Pareto front", zorder=3))):
            if ca in data and cb in data and not data.empty:
                x = pd.to_numeric(data[ca], errors="coerce")
                y = pd.to_numeric(data[cb], errors="coerce")
                ax.scatter(x, y, **kw)
        if len(objs) == 2 and not front.empty:
            f = front.sort_values(ca)
            ax.plot(pd.to_numeric(f[ca]), pd.to_numeric(f[cb]), "-", c="tab:red", lw=1)
        if done.empty or ca not in done or cb not in done:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(_label(spec, a))
        ax.set_ylabel(_label(spec, b))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle(f"{spec.name}: Pareto front ({len(front)} of {len(feas)} feasible points, "
                 f"{len(done)} evaluated)", fontsize=10)
    fig.tight_layout()
    p = out / "pareto.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    # ---- sensitivity
    params = list(spec.parameters) or ["(none)"]
    fig, axes = plt.subplots(len(objs), len(params),
                             figsize=(3.4 * len(params), 2.8 * len(objs)), squeeze=False)
    for i, m in enumerate(objs):
        cm = f"metric.{m}"
        for j, prm in enumerate(params):
            ax = axes[i][j]
            cp = f"param.{prm}"
            if feas.empty or cp not in feas or cm not in feas:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
            else:
                g = feas.assign(_y=pd.to_numeric(feas[cm])).groupby(cp)["_y"].agg(
                    ["mean", "min", "max"])
                if _is_numeric(feas[cp]):
                    x = g.index.to_numpy(float)
                    ax.plot(x, g["mean"], "o-", ms=4)
                    ax.fill_between(x, g["min"], g["max"], alpha=0.2)
                    if x.size and x.min() > 0 and x.max() / x.min() >= 8:
                        ax.set_xscale("log", base=2)
                        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
                else:
                    x = np.arange(len(g))
                    ax.errorbar(x, g["mean"], yerr=[g["mean"] - g["min"], g["max"] - g["mean"]],
                                fmt="o", capsize=3)
                    ax.set_xticks(x, [str(v) for v in g.index], rotation=30, fontsize=7)
            if i == len(objs) - 1:
                ax.set_xlabel(prm, fontsize=8)
            if j == 0:
                ax.set_ylabel(_label(spec, m), fontsize=7)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
    fig.suptitle(f"{spec.name}: objective vs parameter (mean over the other parameters, "
                 "min–max band; feasible points)", fontsize=10)
    fig.tight_layout()
    p = out / "sensitivity.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    ppw = _plot_perf_per_watt(df, spec, out / "perf_per_watt.png")
    if ppw is not None:
        paths.append(ppw)
    return paths


def make_report(out_dir: str | Path, top: int = 5, plots_dir: str | Path | None = None,
                plots: bool = True) -> Report:
    """Load a sweep, compute its Pareto front and best points, and write the plots.

    Args:
        out_dir: the sweep directory.
        top: points listed per objective.
        plots_dir: where the PNGs go (default: ``out_dir``).
        plots: write the PNGs at all.

    Raises:
        SweepError: no sweep database in ``out_dir``.
    """
    spec = load_spec_from_db(out_dir)
    df = load_results(out_dir)
    counts = {s: int((df["status"] == s).sum()) if not df.empty else 0
              for s in ("done", "failed", "infeasible")}
    counts["feasible"] = len(_candidates(df, spec))
    rep = Report(spec, df, pareto_front(df, spec), best_points(df, spec, top), counts)
    if plots:
        rep.plots = write_plots(df, spec, plots_dir or out_dir)
    return rep


__all__ = ["load_results", "load_spec_from_db", "pareto_front", "best_points", "non_dominated",
           "perf_per_watt_front",
           "export_results", "read_results_file", "write_plots", "make_report", "Report"]
