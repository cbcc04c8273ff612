"""Service-level objectives of a serving run: SLO attainment, goodput, the per-request table.

A request *meets* its SLOs when its TTFT is at most ``ttft_s`` and its TPOT at most ``tpot_s``
(either target may be left out; a request with a single output token has no TPOT and meets any
TPOT target). Definitions, as in DistServe (Zhong et al., "DistServe: Disaggregating Prefill and
Decoding for Goodput-optimized Large Language Model Serving", OSDI 2024, §2):

* **SLO attainment**: the fraction of requests that meet their SLOs (each target alone too);
* **goodput** of one run: requests that meet their SLOs ÷ makespan (requests/s), and their
  output tokens ÷ makespan (tokens/s). DistServe's headline goodput is the largest *arrival
  rate* at which attainment stays above a target (e.g. 90 %): sweep ``--rate`` to find it.

:func:`write_request_csv` writes one row per request (times in simulated seconds, the iterations
it took part in, its preemptions and replica, whether it met the SLOs); :func:`slo_report`
gives the numbers for the printout and the JSON.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from archsim.errors import ArchsimError
from archsim.results import RequestRecord, ServingResult


def check_targets(ttft_s: float | None, tpot_s: float | None) -> None:
    """Refuse a target that is not a positive finite number of seconds.

    Raises:
        ArchsimError: names the flag (``--slo-ttft`` / ``--slo-tpot``) and the value.
    """
    for flag, v in (("--slo-ttft", ttft_s), ("--slo-tpot", tpot_s)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ArchsimError(f"{flag} {v}: must be a positive number of seconds")


def meets(r: RequestRecord, ttft_s: float | None, tpot_s: float | None) -> bool:
    """True when request ``r`` meets both targets (None: no target; seconds)."""
    if ttft_s is not None and not r.ttft_s <= ttft_s:
        return False
    tpot = r.tpot_s
    return tpot_s is None or math.isnan(tpot) or tpot <= tpot_s


def slo_report(result: ServingResult, ttft_s: float | None,
               tpot_s: float | None) -> dict[str, Any]:
    """SLO attainment and goodput of ``result`` for the targets (seconds; None: no target).

    Returns:
        ``{"ttft_target_s", "tpot_target_s", "requests_met", "attainment",
        "ttft_attainment", "tpot_attainment", "goodput_requests_per_s",
        "goodput_tokens_per_s"}`` (fractions in [0, 1]; goodput per second of makespan,
        whole system; ``*_attainment`` None for a target not given).

    Raises:
        ArchsimError: a target that is not positive (:func:`check_targets`).
    """
    check_targets(ttft_s, tpot_s)
    reqs = result.requests
    n = len(reqs)
    ok = [r for r in reqs if meets(r, ttft_s, tpot_s)]
    span = result.makespan_s

    def frac(k: int) -> float:
        return k / n if n else float("nan")
    return {
        "ttft_target_s": ttft_s, "tpot_target_s": tpot_s,
        "requests_met": len(ok), "attainment": frac(len(ok)),
        "ttft_attainment": None if ttft_s is None else
        frac(sum(1 for r in reqs if meets(r, ttft_s, None))),
        "tpot_attainment": None if tpot_s is None else
        frac(sum(1 for r in reqs if meets(r, None, tpot_s))),
        "goodput_requests_per_s": len(ok) / span if span > 0 else float("nan"),
        "goodput_tokens_per_s": sum(r.output_toks for r in ok) / span if span > 0
        else float("nan"),
    }


#: Columns of the per-request CSV, in order (times in simulated seconds).
CSV_COLUMNS = ("request", "input_tokens", "output_tokens", "arrival_s", "admitted_s",
               "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "first_iteration",
               "last_iteration", "iterations", "preemptions", "replica", "meets_slo")


def write_request_csv(result: ServingResult, path: str | Path, ttft_s: float | None = None,
                      tpot_s: float | None = None) -> Path:
    """Write one row per request of ``result`` to ``path`` (columns :data:`CSV_COLUMNS`).

    ``tpot_s`` is empty for a request with one output token; ``meets_slo`` is empty when no
    target is given, else ``true``/``false`` (:func:`meets`). ``admitted_s`` is the first
    admission; ``first_iteration``/``last_iteration`` count the iterations of the request's
    ``replica`` (the router's choice, 0 with one replica); ``preemptions`` how often its KV
    cache was preempted.

    Raises:
        ArchsimError: the file cannot be written (names it).
    """
    p = Path(path)
    targets = ttft_s is not None or tpot_s is not None
    try:
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(CSV_COLUMNS)
            for r in result.requests:
                tpot = r.tpot_s
                w.writerow([r.index, r.input_toks, r.output_toks, repr(r.arrival_s),
                            repr(r.admitted_s), repr(r.first_token_s), repr(r.finish_s),
                            repr(r.ttft_s), "" if math.isnan(tpot) else repr(tpot),
                            repr(r.e2e_s), r.first_iteration, r.last_iteration,
                            r.n_iterations, r.preemptions, r.replica,
                            ("true" if meets(r, ttft_s, tpot_s) else "false") if targets
                            else ""])
    except OSError as exc:
        raise ArchsimError(f"{p}: cannot write the per-request CSV ({exc.strerror})") from None
    return p


__all__ = ["check_targets", "meets", "slo_report", "CSV_COLUMNS", "write_request_csv"]
