#!/usr/bin/env python3
"""Summarise the NeuPIMs request-length tables into ``workloads/data/length_summary.json``.

Reads ``<shared>/data/neupims/lengths/{sharegpt,alpaca}.tsv`` (tab separated, header
``input_toks output_toks``; token counts produced by the NeuPIMs trace generator with the
``openai-gpt`` tokenizer) and writes, per dataset:

* ``input_toks`` / ``output_toks``: percentiles 0..100 in steps of 1 (numpy ``linear``
  interpolation), extra tail quantiles (99.1 .. 99.99) so that inverse-CDF sampling does not smear
  the heavy tail, mean, min, max;
* ``joint``: a coarse empirical copula: the rows are split into ``B`` equal-count bins by the rank
  of the input length and, independently, ``B`` bins by the rank of the output length (ties broken
  at random with a fixed seed); ``counts[i][j]`` is the number of rows in input bin ``i`` and output
  bin ``j``. Sampling a cell and then a uniform rank inside it keeps the marginals and the
  input/output dependence at a resolution of ``1/B`` in rank.
* provenance: source files, their SHA-256, row counts and what was excluded.

Rows with ``output_toks == 0`` are excluded, like the NeuPIMs trace generator does
(``get_distributions.py``): such a request never enters the decode phase.

Usage: ``python scripts/make_length_summary.py [--shared DIR] [--out FILE] [--bins B]``.
The package only needs the JSON; the shared tables are not part of the repository.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "workloads" / "data" / "length_summary.json"
DATASETS = {"sharegpt": "sharegpt.tsv", "alpaca": "alpaca.tsv"}
TAIL_QUANTILES = [99.1, 99.2, 99.3, 99.4, 99.5, 99.6, 99.7, 99.8, 99.9, 99.95, 99.99, 99.995,
                  99.999]
SEED = 0


def _read_table(path: Path) -> np.ndarray:
    """Rows ``(input_toks, output_toks)`` of a NeuPIMs length table as an int64 ``[n, 2]`` array."""
    with path.open(encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header != ["input_toks", "output_toks"]:
            sys.exit(f"{path}: line 1: expected header 'input_toks<TAB>output_toks', "
                     f"got {header!r}")
        data = np.loadtxt(f, delimiter="\t", dtype=np.int64, ndmin=2)
    return data


def _marginal(x: np.ndarray) -> dict:
    pct = np.percentile(x, np.arange(101), method="linear")
    tail = np.percentile(x, TAIL_QUANTILES, method="linear")
    return {
        "percentiles": [round(float(v), 3) for v in pct],
        "tail_quantiles": [float(q) for q in TAIL_QUANTILES],
        "tail_values": [round(float(v), 3) for v in tail],
        "mean": round(float(x.mean()), 4),
        "min": int(x.min()),
        "max": int(x.max()),
    }


def _rank_bins(x: np.ndarray, bins: int, rng: np.random.Generator) -> np.ndarray:
    """Equal-count bin index (0..bins-1) of each element by rank, ties broken at random."""
    order = np.lexsort((rng.random(x.size), x))
    ranks = np.empty(x.size, dtype=np.int64)
    ranks[order] = np.arange(x.size)
    return ranks * bins // x.size


def summarise(path: Path, bins: int) -> dict:
    """Summary dictionary of one length table (see the module docstring)."""
    raw = _read_table(path)
    keep = raw[:, 1] > 0
    data = raw[keep]
    rng = np.random.default_rng(SEED)
    bi = _rank_bins(data[:, 0], bins, rng)
    bo = _rank_bins(data[:, 1], bins, rng)
    counts = np.zeros((bins, bins), dtype=np.int64)
    np.add.at(counts, (bi, bo), 1)
    return {
        "source_file": f"neupims/lengths/{path.name}",
        "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "rows_in_file": int(raw.shape[0]),
        "rows_used": int(data.shape[0]),
        "rows_excluded_zero_output": int((~keep).sum()),
        "input_toks": _marginal(data[:, 0]),
        "output_toks": _marginal(data[:, 1]),
        "joint": {"bins": bins, "counts": counts.tolist()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=DEFAULT_SHARED,
                    help="the shared data directory (holding neupims/lengths/)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--bins", type=int, default=20, help="rank bins per axis of the joint table")
    args = ap.parse_args(argv)
    out = {
        "format_version": 1,
        "provenance": (
            "Computed by scripts/make_length_summary.py from the NeuPIMs artifact's request-length "
            "tables (ShareGPT and Alpaca prompts/answers tokenised by the NeuPIMs trace generator "
            "with the openai-gpt tokenizer; Heo et al., ASPLOS 2024). Rows with zero output "
            "tokens are excluded as in the NeuPIMs trace generator. Percentiles use numpy's "
            "'linear' method; 'joint' is an equal-count rank-binned contingency table (empirical "
            "copula) of input vs output length."),
        "datasets": {},
    }
    for name, fname in DATASETS.items():
        path = args.shared / "neupims" / "lengths" / fname
        if not path.is_file():
            sys.exit(f"{path}: not found (pass --shared DIR)")
        out["datasets"][name] = summarise(path, args.bins)
        d = out["datasets"][name]
        print(f"{name}: {d['rows_used']} rows, mean in {d['input_toks']['mean']:.2f} / "
              f"out {d['output_toks']['mean']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
