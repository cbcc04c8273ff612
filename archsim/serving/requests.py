"""Requests of a run: the lengths and arrival times of a serving run, the decode batch of a
fixed-batch run.

* :class:`RequestSet` — prompt/output lengths and arrival times (seconds) of a serving run;
  :func:`make_request_set` validates lengths against the model, :func:`load_request_set` reads a
  length table or draws from a built-in distribution.
* Arrivals: :func:`poisson_arrivals` (a Poisson process) or :func:`load_timestamps` (a file).
* :func:`make_batch` — the decode batch of ``archsim run`` / ``archsim compare`` (a snapshot, or
  a continuous-batching warm-up), loaded and checked against the machine once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from archsim.config import MachineConfig
from archsim.errors import ArchsimError
from archsim.serving.systems import check_batch_fits, is_gpu


@dataclass(frozen=True)
class RequestSet:
    """Requests of a serving run.

    Attributes:
        input_toks, output_toks: int64 ``[n]`` prompt and output lengths (tokens).
        arrival_s: float64 ``[n]`` arrival times (seconds).
        index: int64 ``[n]`` position of each request in its source (reported back).
        source: where the lengths came from; arrival: how arrivals were made.
        notes: adjustments made (outputs truncated to the context, zero-output rows dropped).
        channels: int64 ``[n]`` KV channel of each request from the request file (a ``.tsv``
            ``ch_idx`` column), or None; used only with ``keep_channels``.
        lines: line of ``source`` of each request (empty when not from a file).
    """

    input_toks: np.ndarray
    output_toks: np.ndarray
    arrival_s: np.ndarray
    index: np.ndarray
    source: str = ""
    arrival: str = "all at t=0"
    notes: tuple[str, ...] = ()
    channels: np.ndarray | None = None
    lines: tuple[int, ...] = ()

    def __len__(self) -> int:
        return int(self.input_toks.size)

    def with_arrivals(self, arrival_s: np.ndarray, description: str) -> "RequestSet":
        """A copy with new arrival times (float64 ``[n]``, seconds).

        Raises:
            ArchsimError: wrong length, negative or non-finite times.
        """
        a = np.asarray(arrival_s, dtype=np.float64)
        if a.shape != self.input_toks.shape:
            raise ArchsimError(f"arrivals: {a.size} timestamps for {len(self)} requests")
        bad = ~np.isfinite(a) | (a < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise ArchsimError(f"arrivals: timestamp of request index {i} is {a[i]!r}; "
                               "must be a finite number >= 0")
        return RequestSet(self.input_toks, self.output_toks, a, self.index, self.source,
                          description, self.notes, self.channels, self.lines)


def make_request_set(input_toks: Sequence[int] | np.ndarray,
                     output_toks: Sequence[int] | np.ndarray, model: Any,
                     source: str = "", channels: Sequence[int] | np.ndarray | None = None,
                     lines: Sequence[int] = ()) -> RequestSet:
    """Validate lengths against ``model`` and build a :class:`RequestSet` (all arrive at 0).

    Requests with ``output_toks == 0`` are dropped (they never decode; the NeuPIMs trace
    generator drops them too); outputs are truncated so that the last decode's context
    ``input + output − 1`` fits ``model.max_seq_len`` (a server stops at the context limit).
    Both adjustments are listed in ``notes``. ``channels`` (int ``[n]``) and ``lines`` (the
    file line of each row) follow the kept rows.

    Raises:
        ArchsimError: a prompt longer than the model's maximum context (names the request index
            and both lengths), negative lengths, or no request left.
    """
    inp = np.asarray(input_toks, dtype=np.int64).ravel()
    out = np.asarray(output_toks, dtype=np.int64).ravel()
    if inp.shape != out.shape:
        raise ArchsimError(f"requests: {inp.size} prompt lengths but {out.size} output lengths")
    if (inp < 0).any() or (out < 0).any():
        i = int(np.argmax((inp < 0) | (out < 0)))
        raise ArchsimError(f"request index {i}: negative length ({inp[i]}, {out[i]})")
    too_long = inp > model.max_seq_len
    if too_long.any():
        i = int(np.argmax(too_long))
        raise ArchsimError(f"request index {i} has a prompt of {int(inp[i])} tokens, longer "
                           f"than the maximum context {model.max_seq_len} of model "
                           f"'{model.name}'")
    notes = []
    idx = np.arange(inp.size, dtype=np.int64)
    ch = None if channels is None else np.asarray(channels, dtype=np.int64).ravel()
    ln = np.asarray(lines, dtype=np.int64) if len(lines) == inp.size else None
    keep = out > 0
    if not keep.all():
        notes.append(f"{int((~keep).sum())} requests with 0 output tokens dropped")
        inp, out, idx = inp[keep], out[keep], idx[keep]
        ch = None if ch is None else ch[keep]
        ln = None if ln is None else ln[keep]
    if inp.size == 0:
        raise ArchsimError("requests: no request with output tokens")
    inp = np.maximum(inp, 1)
    limit = model.max_seq_len - inp + 1
    cut = out > limit
    if cut.any():
        notes.append(f"{int(cut.sum())} outputs truncated to the context limit "
                     f"{model.max_seq_len}")
        out = np.minimum(out, limit)
    return RequestSet(inp, out, np.zeros(inp.size), idx, source, "all at t=0", tuple(notes), ch,
                      () if ln is None else tuple(int(x) for x in ln))


def load_request_set(model: Any, path: str | Path | None = None,
                     dataset: str | None = None, n: int | None = None,
                     seed: int = 0) -> RequestSet:
    """Requests for a serving run: from a length file, or drawn from a built-in distribution.

    Args:
        model: the ``ModelSpec`` (context limit).
        path: ``.tsv`` length table or ShareGPT ``.json`` (:func:`workloads.requests.
            load_request_file`); the first ``n`` rows are used when ``n`` is given.
        dataset: ``sharegpt`` or ``alpaca`` when no path: ``n`` (default 1000) requests drawn
            with ``seed`` (:func:`workloads.requests.sample_requests`).

    Raises:
        ArchsimError / WorkloadError: unknown dataset (lists the valid ones), unreadable file, a
            decode snapshot (it has no output lengths), a prompt longer than the context.
    """
    from workloads.requests import Batch, LengthTable, load_request_file, sample_requests

    if path is not None:
        data = load_request_file(path)
        if isinstance(data, Batch):
            raise ArchsimError(f"{path}: a decode snapshot (seq_len,ch_idx) has no prompt/output "
                               "lengths, so it cannot be served; use it with --batch/--iterations"
                               " runs, or give a .tsv length table / ShareGPT .json")
        assert isinstance(data, LengthTable)
        k = len(data) if n is None else min(int(n), len(data))
        return make_request_set(data.input_toks[:k], data.output_toks[:k], model, str(path),
                                None if data.channels is None else data.channels[:k],
                                data.lines[:k])
    batch = sample_requests(dataset or "sharegpt", 1000 if n is None else int(n), seed=seed,
                            max_seq_len=model.max_seq_len)
    return make_request_set([r.input_len for r in batch], [r.output_len for r in batch],
                            model, batch.source)


def poisson_arrivals(n: int, rate_per_s: float, seed: int = 0) -> np.ndarray:
    """Arrival times (s) of a Poisson process: cumulative sums of exponential gaps of mean
    ``1 / rate_per_s``; float64 ``[n]``, non-decreasing, the first at its first gap.

    Raises:
        ArchsimError: ``rate_per_s <= 0``.
    """
    if not rate_per_s or rate_per_s <= 0 or not math.isfinite(rate_per_s):
        raise ArchsimError(f"Poisson arrival rate must be > 0 requests/s, got {rate_per_s!r}")
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))


def load_timestamps(path: str | Path) -> np.ndarray:
    """Arrival times (s) from a file: one number per line, or a CSV whose header has a column
    ``arrival_s`` / ``timestamp`` / ``time``. Blank lines and ``#`` comments are skipped.

    Returns float64 ``[n]`` in file order (non-decreasing).

    Raises:
        ArchsimError: unreadable file, no usable column, a bad value, or a timestamp earlier
            than the one before it (names file and line).
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchsimError(f"{p}: cannot read timestamps ({exc})") from None
    col = None
    out: list[float] = []
    prev_line = 0
    for lineno, line in enumerate(lines, start=1):
        s = line.split("#", 1)[0].strip()
        if not s:
            continue
        fields = [f.strip() for f in s.split(",")]
        if col is None and not out:
            try:
                float(fields[0])
                col = 0
            except ValueError:
                names = [f.lower() for f in fields]
                for cand in ("arrival_s", "timestamp", "time"):
                    if cand in names:
                        col = names.index(cand)
                        break
                else:
                    raise ArchsimError(f"{p}:{lineno}: header {s!r} has no column arrival_s, "
                                       "timestamp or time") from None
                continue
        try:
            v = float(fields[col or 0])
        except (ValueError, IndexError):
            raise ArchsimError(f"{p}:{lineno}: {s!r} is not a timestamp in seconds") from None
        if not math.isfinite(v) or v < 0:
            raise ArchsimError(f"{p}:{lineno}: timestamp {v!r} must be a finite number >= 0")
        if out and v < out[-1]:
            raise ArchsimError(f"{p}:{lineno}: timestamp {v!r} is earlier than {out[-1]!r} on "
                               f"line {prev_line}; arrival times must not decrease (the i-th "
                               "timestamp is the arrival of the i-th request)")
        out.append(v)
        prev_line = lineno
    if not out:
        raise ArchsimError(f"{p}: no timestamps")
    return np.array(out)


def make_batch(model: Any, batch_size: int = 256, dataset: str = "sharegpt", seed: int = 0,
               path: str | Path | None = None, cfg: MachineConfig | None = None,
               keep_channels: bool = False,
               capacity_iterations: int | None = None) -> Any:
    """The decode batch of ``run``/``compare``, loaded and checked once (nothing placed here).

    From ``path``: a ``.csv`` decode snapshot is used as is (first ``batch_size`` rows when a
    size is given); a ``.tsv``/``.json`` length table seeds a warm-up
    (:func:`workloads.requests.warmup_decode_snapshot`) of ``batch_size`` slots. Without a path:
    ``workloads.requests.default_batch(model, batch_size, dataset, seed)`` (a warmed-up
    continuous-batching snapshot).

    Channels are placed by the compiler (:mod:`mapping.channels`: ``cfg``'s policy, or the
    batch's own channels with ``keep_channels``), not here. With ``keep_channels`` a warm-up
    records the channels it gives each admitted request (``cfg``'s channels and policy, like the
    NeuPIMs trace generator); without it the warm-up places nothing (the lengths are the same;
    placing each admission is what makes a large warm-up slow). With a non-GPU ``cfg`` the
    batch's channels are checked against the machine here, before anything is simulated.
    ``capacity_iterations``: when given (with ``cfg``), the KV cache of the batch grown by that
    many decode iterations is checked against the device (:func:`check_batch_fits`).

    Raises:
        WorkloadError / ArchsimError: unknown dataset (lists the valid ones), unreadable file,
            a request longer than the model's context (names its index), a ``ch_idx`` outside
            the machine (names file and line), ``keep_channels`` on a batch without channels,
            or the capacity check.
    """
    from mapping.channels import check_batch_channels
    from workloads.requests import (Batch, default_batch, load_request_file,
                                    warmup_decode_snapshot)

    if batch_size is not None and batch_size < 1:
        raise ArchsimError(f"batch size must be >= 1, got {batch_size}")
    npu = cfg is not None and not is_gpu(cfg)
    warm_channels: dict[str, Any] = {"n_channels": None}
    if keep_channels and npu:
        assert cfg is not None
        warm_channels = {"n_channels": cfg.memory.org.channels,
                         "policy": cfg.system.channel_policy}
    elif keep_channels:
        warm_channels = {}                # the warm-up's defaults (32 channels, min_load)
    if path is not None:
        data = load_request_file(path)
        if isinstance(data, Batch):
            batch = data if batch_size is None or batch_size >= len(data) else data.head(
                batch_size)
        else:
            batch = warmup_decode_snapshot(data, max_batch=batch_size or 256,
                                           max_seq_len=model.max_seq_len, seed=seed,
                                           **warm_channels)
    else:
        batch = default_batch(model, batch_size, dataset, seed=seed, **warm_channels)
    batch.validate_for_model(model)
    if capacity_iterations is not None and cfg is not None:
        check_batch_fits(cfg, model, batch, extra_tokens_per_request=capacity_iterations - 1)
    if npu:
        assert cfg is not None
        check_batch_channels(batch, cfg.memory.org.channels)
        if keep_channels and not (bool(len(batch)) and (batch.channels >= 0).all()):
            raise ArchsimError(f"--keep-channels: {path or 'the batch'} has no channel for every "
                               "request (a .csv snapshot with a ch_idx column has)")
    return batch


__all__ = ["RequestSet", "make_request_set", "load_request_set", "poisson_arrivals",
           "load_timestamps", "make_batch"]
