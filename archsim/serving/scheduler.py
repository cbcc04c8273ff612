"""The serving scheduler: iteration-level (continuous) batching until every request finishes.

Serving model (ORCA / vLLM style iteration-level scheduling):

* Requests (prompt ``input_toks``, ``output_toks`` to generate, ``arrival_s``) wait in arrival
  order (FCFS, no overtaking). At each iteration boundary, arrived requests are admitted while the
  batch has fewer than ``max_batch`` requests and the KV cache can hold the request's whole final
  context (``input + output`` tokens, at most the model's sliding window, are reserved at
  admission, so nothing is ever preempted).
* Without chunked prefill, an iteration either prefills admitted requests whose prompt is not
  processed yet (whole prompts, in admission order, while their tokens fit the prefill budget
  ``max_prefill_tokens``, at least one prompt; decode requests wait), or decodes one token for
  every running request. The budget is vLLM's ``max_num_batched_tokens`` (its default,
  ``max(context limit, 2048)``, is :func:`default_prefill_budget`); ``None`` prefills every
  waiting prompt at once. With ``chunked_prefill_tokens = N`` every iteration decodes all running requests and
  fills the rest of a budget of ``N`` tokens with prompt chunks in admission order (Sarathi-Serve
  / vLLM chunked prefill).
* The iteration that finishes a request's prompt produces its first token (TTFT); each decode
  produces one more; a request leaves (freeing its KV reservation) with its last token.
* Context of a request in an iteration (what attention reads): ``prefilled + chunk`` in prefill,
  ``input + generated`` in decode (the convention of :mod:`workloads.requests`).
* KV capacity: :func:`archsim.serving.systems.kv_budget`.

:func:`serve` runs the scheduler with a given timer; :func:`serve_system` resolves the system,
its KV budget, channels and timer (:func:`make_timer`) first. The result says how many
iterations each timing source timed (``iterations_by_source``).
"""
from __future__ import annotations

import time as _time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from archsim.config import MachineConfig
from archsim.errors import ArchsimError
from archsim.results import RequestRecord, ServingResult
from archsim.serving.requests import RequestSet
from archsim.serving.surrogate import SurrogateTimer
from archsim.serving.systems import is_gpu, kv_budget, kv_tokens_held, resolve_system
from archsim.serving.timers import (CachingTimer, CycleLevelTimer, GpuTimer, IterationMix,
                                    IterationTimer)

#: Layer window of the cycle-level samples of a serving run: the smallest window with a
#: steady-state layer between the pipeline prologue and epilogue (``archsim.system.core``).
#: Measured on GPT3-7B decode (neupims): within 0.4 % of the 4-layer window of ``archsim run``
#: at batch 256 and 0.2 % at batch 2 (against 8 layers), for 3/4 of its cost; a 2-layer window
#: is 16 % off at batch 124 and a 1-layer one 4 % off at batch 256.
SERVING_WINDOW = 3


def make_timer(cfg: MachineConfig, model: Any, timing: str = "surrogate",
               system: str | None = None, log: list | None = None,
               keep_channels: bool = False) -> IterationTimer:
    """The iteration timer of a serving run on ``cfg``.

    GPU configurations always use :class:`GpuTimer` (already closed form). Others:
    ``exact`` → :class:`CycleLevelTimer` (layer window :data:`SERVING_WINDOW`);
    ``reuse`` → ``CachingTimer(CycleLevelTimer)``;
    ``surrogate`` → ``SurrogateTimer(CachingTimer(CycleLevelTimer))``. ``log`` is passed to
    the :class:`CycleLevelTimer` (what each sample cost), and so is ``keep_channels``.

    Raises:
        ArchsimError: unknown ``timing`` (lists the valid ones).
    """
    if timing not in ("exact", "reuse", "surrogate"):
        raise ArchsimError(f"timing {timing!r} not one of ['exact', 'reuse', 'surrogate']")
    if is_gpu(cfg):
        return GpuTimer(cfg, model)
    exact: IterationTimer = CycleLevelTimer(cfg, model, system, window=SERVING_WINDOW,
                                            log=log, keep_channels=keep_channels)
    if timing == "exact":
        return exact
    cached = CachingTimer(exact)
    return cached if timing == "reuse" else SurrogateTimer(
        cached, request_cap=max(4, cfg.system.max_sub_batches if cfg.system.sub_batches == "auto"
                                 else cfg.system.sub_batches))


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One finished serving iteration (passed to ``on_iteration``).

    ``index`` (0-based), the ``mix``, its ``seconds`` and timing ``source``, ``end_s`` (simulated
    time at its end), ``finished`` (requests done so far), ``kv_tokens`` (reserved now).
    """

    index: int
    mix: IterationMix
    seconds: float
    source: str
    end_s: float
    finished: int
    kv_tokens: int


def serve(requests: RequestSet, timer: IterationTimer, *, kv_capacity_tokens: int,
          kv_window: int | None = None, max_batch: int = 256, chunked_prefill_tokens: int | None = None,
          max_prefill_tokens: int | None = None, n_channels: int | None = None,
          channel_policy: str = "round_robin", keep_channels: bool = False,
          system: str = "", model_name: str = "", config_name: str = "",
          on_iteration: Callable[[IterationRecord], None] | None = None,
          max_iterations: int = 50_000_000) -> ServingResult:
    """Run the continuous-batching scheduler (module docstring) until every request finishes.

    Args:
        requests: the :class:`RequestSet` (lengths and arrivals).
        timer: times each iteration (:class:`IterationTimer`).
        kv_capacity_tokens: KV-cache tokens the system can hold (:func:`kv_budget`).
        kv_window: the model's sliding window ``W`` (None: full attention); a request then
            reserves ``min(input + output, W)`` tokens, its rolling buffer
            (:func:`archsim.serving.systems.kv_tokens_held`), for the KV budget and its channel.
        max_batch: most requests in one iteration (running requests).
        chunked_prefill_tokens: token budget per iteration for chunked prefill, or None.
        max_prefill_tokens: without chunked prefill, most prompt tokens in one prefill
            iteration (whole prompts in admission order, at least one), or None (no limit).
        n_channels, channel_policy: when given, each admitted request gets a KV channel
            (``round_robin``: a rotating pointer; ``min_load``: admitted largest first onto the
            channel with the fewest reserved tokens; :class:`mapping.channels.OnlinePlacer`)
            that it keeps, passed in the mixes.
        keep_channels: each request keeps ``requests.channels`` (the request file's) instead.
        system, model_name, config_name: written into the result.
        on_iteration: called after every iteration with an :class:`IterationRecord`.
        max_iterations: safety limit.

    Returns:
        :class:`ServingResult` with one :class:`RequestRecord` per request (in input order).

    Raises:
        ArchsimError: a request whose reservation (``input + output`` tokens, at most
            ``kv_window``) exceeds the KV capacity (names its index), bad limits, or the
            iteration limit reached.
    """
    n = len(requests)
    if max_batch < 1:
        raise ArchsimError(f"max batch must be >= 1, got {max_batch}")
    if chunked_prefill_tokens is not None and chunked_prefill_tokens < 1:
        raise ArchsimError(f"chunked prefill budget must be >= 1 token, got "
                           f"{chunked_prefill_tokens}")
    if max_prefill_tokens is not None and max_prefill_tokens < 1:
        raise ArchsimError(f"prefill budget must be >= 1 token, got {max_prefill_tokens}")
    from mapping.channels import OnlinePlacer

    if keep_channels and (requests.channels is None or not n_channels):
        raise ArchsimError(f"--keep-channels: {requests.source or 'the requests'} give no "
                           "channel per request (a .tsv with a ch_idx column does), or the "
                           "system has no channels")
    placer = OnlinePlacer(len(requests), n_channels or 0, channel_policy)
    inp = requests.input_toks.astype(np.int64)
    out = requests.output_toks.astype(np.int64)
    arr = requests.arrival_s.astype(np.float64)
    need = kv_tokens_held(inp + out, kv_window)
    if (need > kv_capacity_tokens).any():
        i = int(np.argmax(need > kv_capacity_tokens))
        held = "" if kv_window is None else f", at most the sliding window of {kv_window:,}"
        raise ArchsimError(f"memory capacity: request index {int(requests.index[i])} needs "
                           f"{int(need[i]):,} KV-cache tokens (prompt {int(inp[i])} + output "
                           f"{int(out[i])}{held}) but the KV cache holds "
                           f"{kv_capacity_tokens:,}")
    wall0 = _time.perf_counter()
    order = np.argsort(arr, kind="stable")
    prefilled = np.zeros(n, np.int64)
    generated = np.zeros(n, np.int64)
    admitted_t = np.full(n, np.nan)
    first_t = np.full(n, np.nan)
    finish_t = np.full(n, np.nan)
    last_tok_t = np.full(n, np.nan)          # time of each request's latest token
    max_gap = np.full(n, np.nan)             # largest gap between two of its tokens
    first_it = np.full(n, -1, np.int64)      # iterations each request took part in
    last_it = np.full(n, -1, np.int64)
    n_it = np.zeros(n, np.int64)
    ch = placer.channels
    if keep_channels:
        assert requests.channels is not None
        ch[:] = requests.channels
    running = np.zeros(0, np.int64)
    ptr = 0
    t = float(arr[order[0]]) if n else 0.0
    t_start = t
    kv_used = 0
    peak_kv = 0
    done = 0
    it = 0
    by_source: Counter[str] = Counter()
    by_phase: Counter[str] = Counter()
    batch_sum = 0
    batch_max = 0
    eps = 1e-12

    while done < n:
        # -- admission (FCFS, whole-request KV reservation)
        new: list[int] = []
        while (ptr < n and arr[order[ptr]] <= t + eps and running.size + len(new) < max_batch
               and kv_used + need[order[ptr]] <= kv_capacity_tokens):
            i = int(order[ptr])
            new.append(i)
            kv_used += int(need[i])
            admitted_t[i] = t
            ptr += 1
        if new:
            new_a = np.array(new, np.int64)
            if n_channels and not keep_channels:
                placer.admit(new_a, need)
            running = np.concatenate([running, new_a])
            peak_kv = max(peak_kv, kv_used)
        if running.size == 0:
            if ptr >= n:
                break
            t = max(t, float(arr[order[ptr]]))
            continue

        # -- compose the iteration
        pre_mask = prefilled[running] < inp[running]
        if chunked_prefill_tokens is None:
            if pre_mask.any():
                sel = running[pre_mask]
                if max_prefill_tokens is not None:
                    fits = np.cumsum(inp[sel] - prefilled[sel]) <= max_prefill_tokens
                    fits[0] = True
                    sel = sel[fits]
                q = inp[sel] - prefilled[sel]
                L = inp[sel].copy()
                isp = np.ones(sel.size, bool)
            else:
                sel = running
                q = np.ones(sel.size, np.int64)
                L = inp[sel] + generated[sel]
                isp = np.zeros(sel.size, bool)
        else:
            dec = running[~pre_mask]
            pre = running[pre_mask]
            budget = chunked_prefill_tokens - dec.size
            rem = inp[pre] - prefilled[pre]
            before = np.cumsum(rem) - rem
            take = np.clip(budget - before, 0, rem)
            pre, take = pre[take > 0], take[take > 0]
            sel = np.concatenate([dec, pre])
            q = np.concatenate([np.ones(dec.size, np.int64), take])
            L = np.concatenate([inp[dec] + generated[dec], prefilled[pre] + take])
            isp = np.concatenate([np.zeros(dec.size, bool), np.ones(pre.size, bool)])
        mix = IterationMix(sel, q, L, isp, ch[sel] if n_channels else None, inp[sel])
        seconds, source = timer.time(mix)
        if not seconds > 0:
            raise ArchsimError(f"iteration {it}: timer {timer.describe()} returned "
                               f"{seconds!r} s")
        t += seconds
        first_it[sel[first_it[sel] < 0]] = it
        last_it[sel] = it
        n_it[sel] += 1
        it += 1
        by_source[source] += 1
        by_phase[mix.phase] += 1
        batch_sum += sel.size
        batch_max = max(batch_max, int(sel.size))

        # -- advance request states
        p_idx = sel[isp]
        if p_idx.size:
            prefilled[p_idx] += q[isp]
            fin_p = p_idx[prefilled[p_idx] >= inp[p_idx]]
            first_t[fin_p] = t
            last_tok_t[fin_p] = t
            generated[fin_p] = 1
        d_idx = sel[~isp]
        if d_idx.size:
            generated[d_idx] += 1
            max_gap[d_idx] = np.fmax(max_gap[d_idx], t - last_tok_t[d_idx])
            last_tok_t[d_idx] = t
        gone = sel[(prefilled[sel] >= inp[sel]) & (generated[sel] >= out[sel])]
        if gone.size:
            finish_t[gone] = t
            kv_used -= int(need[gone].sum())
            if n_channels and not keep_channels:
                placer.release(gone, need)
            running = running[~np.isin(running, gone)]
            done += int(gone.size)
        if on_iteration is not None:
            on_iteration(IterationRecord(it - 1, mix, seconds, source, t, done, kv_used))
        if it >= max_iterations:
            raise ArchsimError(f"serving: stopped after {max_iterations} iterations with "
                               f"{n - done} requests unfinished")

    recs = [RequestRecord(int(requests.index[i]), int(inp[i]), int(out[i]), float(arr[i]),
                          float(admitted_t[i]), float(first_t[i]), float(finish_t[i]),
                          int(first_it[i]), int(last_it[i]), int(n_it[i]), float(max_gap[i]))
            for i in range(n)]
    sched = (f"continuous batching, FCFS admission with whole-request KV reservation, "
             f"max batch {max_batch}, "
             + (f"chunked prefill {chunked_prefill_tokens} tokens/iteration"
                if chunked_prefill_tokens else
                "prefill-first (whole prompts"
                + (f", at most {max_prefill_tokens} tokens/iteration" if max_prefill_tokens
                   else "") + "), no preemption"))
    if n_channels:
        sched += (f", KV channels kept from {requests.source or 'the requests'}" if keep_channels
                  else f", KV channels {channel_policy} over {n_channels}")
    res = ServingResult(
        system=system, model=model_name, arrival=requests.arrival, scheduler=sched,
        timer=timer.describe(), requests=recs,
        makespan_s=float(np.nanmax(finish_t) - t_start) if n else 0.0,
        iterations=it, iterations_by_source=dict(by_source), iterations_by_phase=dict(by_phase),
        mean_batch_size=batch_sum / it if it else 0.0, max_batch_size=batch_max,
        kv_capacity_tokens=int(kv_capacity_tokens), peak_kv_tokens=int(peak_kv),
        config_name=config_name, chunked_prefill_tokens=chunked_prefill_tokens,
        max_prefill_tokens=None if chunked_prefill_tokens else max_prefill_tokens,
        notes=list(requests.notes))
    if isinstance(timer, SurrogateTimer):
        res.surrogate_error = timer.error_report()
    res.wall_s = _time.perf_counter() - wall0
    return res


def default_prefill_budget(model: Any) -> int:
    """Prompt tokens per prefill iteration by default: ``max(context limit, 2048)``, vLLM's
    default ``max_num_batched_tokens`` without chunked prefill (so any single prompt fits)."""
    return max(int(model.max_seq_len), 2048)


def serve_system(system: str | MachineConfig, model: Any, requests: RequestSet, *,
                 overrides: Sequence[str] = (), max_batch: int = 256,
                 chunked_prefill_tokens: int | None = None,
                 max_prefill_tokens: int | None | str = "auto", timing: str = "surrogate",
                 timer: IterationTimer | None = None,
                 on_iteration: Callable[[IterationRecord], None] | None = None,
                 keep_channels: bool = False) -> ServingResult:
    """Serve ``requests`` on a system: resolves the config (``system`` may be an already
    resolved ``MachineConfig``), KV budget, channels and timer, then calls :func:`serve`.
    ``model`` is a ``ModelSpec`` or a registry name; ``max_prefill_tokens="auto"`` is
    :func:`default_prefill_budget`. The request file's channels are checked against the
    machine before the run; ``keep_channels`` keeps them (scheduler and compiler) instead of
    the system's policy.

    Raises:
        ArchsimError / ConfigError / WorkloadError: unknown system or model, weights or a request
            that do not fit, a ``ch_idx`` outside the machine (names file and line),
            ``keep_channels`` on the GPU baseline or on requests without channels.
    """
    from mapping.channels import check_channels, describe_placement

    from workloads.models import get_model

    label, cfg = resolve_system(system, overrides)
    model = get_model(model) if isinstance(model, str) else model
    bud = kv_budget(cfg, model)
    n_ch = None if is_gpu(cfg) else cfg.memory.org.channels
    if keep_channels and n_ch is None:
        raise ArchsimError(f"--keep-channels: system '{label}' is the GPU baseline, which has "
                           "no KV channels to keep")
    if n_ch is not None and requests.channels is not None:
        check_channels(requests.channels, n_ch, requests.source, requests.lines)
    # a request's KV stays in the channel it was given at admission (by the machine's policy,
    # mapping.channels.OnlinePlacer, or the file's with keep_channels): the compiler keeps the
    # mix's channels in every iteration instead of placing the running batch afresh
    timer = timer or make_timer(cfg, model, timing, label, keep_channels=n_ch is not None)
    if max_prefill_tokens == "auto":
        max_prefill_tokens = default_prefill_budget(model)
    elif isinstance(max_prefill_tokens, str):
        raise ArchsimError(f"max_prefill_tokens {max_prefill_tokens!r} not 'auto', None or a "
                           "token count")
    res = serve(requests, timer, kv_capacity_tokens=bud.capacity_tokens,
                kv_window=model.sliding_window, max_batch=max_batch,
                chunked_prefill_tokens=chunked_prefill_tokens,
                max_prefill_tokens=max_prefill_tokens, n_channels=n_ch,
                channel_policy=cfg.system.channel_policy, keep_channels=keep_channels,
                system=label, model_name=model.name,
                config_name=cfg.name, on_iteration=on_iteration)
    res.notes.append(f"KV capacity: {bud.describe()}")
    if n_ch is not None:
        res.notes.append("channels: " + describe_placement(
            keep_channels, cfg.system.channel_policy, requests.source)
            + ("" if keep_channels else " at admission, kept while the request runs"))
    if isinstance(timer, CachingTimer):
        res.notes.append(f"reuse cache: {timer.hits} hits, {timer.misses} simulated")
    inner: Any = timer
    while not isinstance(inner, CycleLevelTimer) and inner is not None:
        inner = getattr(inner, "exact", None) or getattr(inner, "inner", None)
    if inner is not None:
        win = "simulator default" if inner.window is None else f"{inner.window} layers"
        res.notes.append(f"cycle-level samples: {inner.calls} simulator calls (window "
                         f"{win}) took {inner.wall_s:.1f} s of the {res.wall_s:.1f} s wall time")
    return res


__all__ = ["SERVING_WINDOW", "make_timer", "IterationRecord", "serve", "default_prefill_budget",
           "serve_system"]
