"""The results database of a sweep: one SQLite file ``DIR/sweep.sqlite``.

One row per point (table ``points``), keyed by the point's config hash. The coordinator is the
only writer and commits every finished point in its own transaction the moment it arrives, in
WAL mode (``journal_mode=WAL``, ``synchronous=NORMAL``): a killed or crashed coordinator loses at
most the points still being evaluated, never a finished one. (``synchronous=NORMAL`` is durable
against process death; an operating-system crash or power cut may lose the last commits.)

Columns of ``points``:

==============  ===========================================================================
id              row id, assigned when the point first finishes (stable across retries)
key             config hash: sha256 of (effective machine config, workload, evaluator)
params          JSON ``{parameter: value}``
workload        JSON ``{model, batch, dataset, seed, system, phase}``
config          JSON effective machine config (NULL when invalid)
metrics         JSON ``{metric: value}`` (NULL when failed)
status          ``done`` | ``failed`` | ``infeasible`` (a pre-run constraint failed; not run)
feasible        1 / 0 (every constraint met) or NULL (failed)
violations      JSON list of violated constraints (``min <= metric <= max`` text)
error           one-line error message of a failed point
traceback       the worker's traceback of a failed point
wall_s          wall time of the evaluation on its worker [s]
attempts        evaluations of the point so far (retries add one)
tool_version    ``archsim <version> (<git commit>)`` of the coordinator
host            ``hostname:pid`` of the worker
origin          how the point was generated (``grid``, ``random``, ``optuna``)
finished_at     UTC ISO-8601 time of the commit
==============  ===========================================================================

Needs SQLite >= 3.35 (``RETURNING``; Debian 12's Python has 3.40).

Table ``meta`` keeps the spec of the last run (``spec_yaml``, ``spec_json``, ``spec_path``)
so that ``archsim sweep report`` and ``export`` need only the directory.
"""
from __future__ import annotations

import datetime as _dt
import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Iterator

from archsim.sweep.errors import SweepError

DB_NAME = "sweep.sqlite"
STATUSES = ("done", "failed", "infeasible")
#: Columns of the ``points`` table, in order.
COLUMNS = ("id", "key", "params", "workload", "config", "metrics", "status", "feasible",
           "violations", "error", "traceback", "wall_s", "attempts", "tool_version", "host",
           "origin", "finished_at")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS points (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    params TEXT NOT NULL,
    workload TEXT NOT NULL,
    config TEXT,
    metrics TEXT,
    status TEXT NOT NULL CHECK (status IN ('done', 'failed', 'infeasible')),
    feasible INTEGER,
    violations TEXT,
    error TEXT,
    traceback TEXT,
    wall_s REAL,
    attempts INTEGER NOT NULL DEFAULT 1,
    tool_version TEXT NOT NULL,
    host TEXT,
    origin TEXT,
    finished_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


def db_path(out_dir: str | Path) -> Path:
    """Path of the results database inside a sweep directory."""
    return Path(out_dir) / DB_NAME


class ResultsDB:
    """Connection to one sweep's SQLite database (creating it when ``create``).

    Raises:
        SweepError: the directory or database cannot be opened (the message names the path), or
            it is not a sweep database.
    """

    def __init__(self, out_dir: str | Path, create: bool = False) -> None:
        self.path = db_path(out_dir)
        if not create and not self.path.exists():
            raise SweepError(f"{out_dir}: no sweep results here (missing {DB_NAME})")
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            if create:
                self.conn.executescript(_SCHEMA)
            else:
                self.conn.execute("SELECT 1 FROM points LIMIT 1")
        except (OSError, sqlite3.Error) as exc:
            raise SweepError(f"{self.path}: cannot open sweep database: {exc}") from None

    def close(self) -> None:
        """Close the connection (committed rows are already on disk)."""
        self.conn.close()

    def __enter__(self) -> "ResultsDB":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ meta
    def set_meta(self, **items: str) -> None:
        """Store ``{name: text}`` in the ``meta`` table (replacing older values)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany("INSERT INTO meta(k, v) VALUES (?, ?) ON CONFLICT(k) DO "
                                  "UPDATE SET v = excluded.v", list(items.items()))
        except sqlite3.Error:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def meta(self) -> dict[str, str]:
        """All ``meta`` entries."""
        return dict(self.conn.execute("SELECT k, v FROM meta").fetchall())

    # ------------------------------------------------------------------ points
    def statuses(self) -> dict[str, str]:
        """``{key: status}`` of every recorded point."""
        return dict(self.conn.execute("SELECT key, status FROM points").fetchall())

    def record(self, *, key: str, params: dict[str, Any], workload: dict[str, Any],
               config: dict[str, Any] | None, metrics: dict[str, Any] | None, status: str,
               feasible: bool | None, violations: list[str] | None, error: str | None,
               traceback: str | None, wall_s: float | None, tool_version: str,
               host: str | None, origin: str) -> int:
        """Insert or update (retry) the row of ``key`` and commit it at once.

        Returns the row id (unchanged when a failed point is retried).

        Raises:
            SweepError: ``status`` not one of :data:`STATUSES`, or the write fails.
        """
        if status not in STATUSES:
            raise SweepError(f"status {status!r} not one of {list(STATUSES)}")
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
        row = (key, json.dumps(params), json.dumps(workload),
               None if config is None else json.dumps(config),
               None if metrics is None else json.dumps(metrics, allow_nan=True), status,
               None if feasible is None else int(feasible),
               None if violations is None else json.dumps(violations), error, traceback,
               wall_s, tool_version, host, origin, now)
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            cur = self.conn.execute(
                "INSERT INTO points(key, params, workload, config, metrics, status, feasible, "
                "violations, error, traceback, wall_s, tool_version, host, origin, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET params=excluded.params, "
                "workload=excluded.workload, config=excluded.config, metrics=excluded.metrics, "
                "status=excluded.status, feasible=excluded.feasible, "
                "violations=excluded.violations, error=excluded.error, "
                "traceback=excluded.traceback, wall_s=excluded.wall_s, "
                "attempts=points.attempts + 1, tool_version=excluded.tool_version, "
                "host=excluded.host, origin=excluded.origin, finished_at=excluded.finished_at "
                "RETURNING id", row)
            rid = cur.fetchone()[0]
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise SweepError(f"{self.path}: cannot record point {key[:12]}: {exc}") from None
        return int(rid)

    @staticmethod
    def _decode(names: list[str], r: tuple[Any, ...]) -> dict[str, Any]:
        d = dict(zip(names, r))
        for col in ("params", "workload", "config", "metrics", "violations"):
            if d[col] is not None:
                d[col] = json.loads(d[col])
        d["feasible"] = None if d["feasible"] is None else bool(d["feasible"])
        return d

    def rows(self, with_config: bool = True) -> Iterator[dict[str, Any]]:
        """Every row as a dict, JSON columns decoded, in id order (``config`` is None unless
        ``with_config``: it is the bulkiest column)."""
        cols = "*" if with_config else ", ".join(
            "NULL AS config" if c == "config" else c for c in COLUMNS)
        cur = self.conn.execute(f"SELECT {cols} FROM points ORDER BY id")
        names = [d[0] for d in cur.description]
        for r in cur:
            yield self._decode(names, r)

    def get(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Rows of the given keys (missing keys are absent), JSON columns decoded."""
        keys = list(keys)
        out: dict[str, dict[str, Any]] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            cur = self.conn.execute(
                f"SELECT * FROM points WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            names = [d[0] for d in cur.description]
            for r in cur:
                d = self._decode(names, r)
                out[d["key"]] = d
        return out

    def counts(self) -> dict[str, int]:
        """Rows per status."""
        out = {s: 0 for s in STATUSES}
        out.update(dict(self.conn.execute(
            "SELECT status, COUNT(*) FROM points GROUP BY status").fetchall()))
        return out


__all__ = ["ResultsDB", "db_path", "DB_NAME", "STATUSES", "COLUMNS"]
