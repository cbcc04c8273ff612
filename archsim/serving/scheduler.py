"""The serving scheduler: iteration-level (continuous) batching until every request finishes.

Serving model (ORCA / vLLM style iteration-level scheduling), per replica:

* **Admission and KV** (:meth:`_Replica._admit`, :mod:`archsim.serving.kvcache`): requests
  (prompt ``input_toks``, ``output_toks`` to generate, ``arrival_s``) wait in arrival order
  (FCFS, no overtaking). At each iteration boundary, arrived requests are admitted while the
  batch has fewer than ``max_batch`` requests and the KV cache has the blocks each takes at
  admission (``paged``: its first prefill's tokens; ``reserve``: its whole final context,
  ``input + output − 1`` tokens), in the pool of the channel the channel policy gives it on a PIM
  system (the requests admitted at one boundary are placed together, ``min_load`` largest
  first; one that fits no channel's pool stays at the head of the queue while the others keep
  their places). Swapped-out requests resume first; no new request is admitted while one is
  swapped out (vLLM V0).
* **Composition** (:func:`compose_iteration`): without chunked prefill, an iteration either
  prefills admitted requests whose prefill is not done (whole prompts, in admission order,
  while their tokens fit the prefill budget ``max_prefill_tokens``, at least one prompt;
  decode requests wait), or decodes one token for every running request. The budget is vLLM's
  ``max_num_batched_tokens`` (its default, ``max(context limit, 2048)``, is
  :func:`default_prefill_budget`); ``None`` prefills every waiting prompt at once. With
  ``chunked_prefill_tokens = N`` every iteration decodes all running requests and fills the
  rest of a budget of ``N`` tokens with prompt chunks in admission order (Sarathi-Serve /
  vLLM chunked prefill).
* **Growth and preemption** (paged, :meth:`_Replica._grow`): before an iteration runs, each of
  its requests (in admission order) takes the blocks of its new context; when its pool is full
  the latest-admitted running request of the pool is preempted (recompute: back to the head
  of the waiting queue, to prefill prompt + generated tokens again, the prefill producing its
  next token; swap: to the swapped queue, its blocks copied to host memory). Copies to and
  from host memory are timed by the host link and added to the iteration they precede.
* The iteration that finishes a request's prompt produces its first token (TTFT); each decode
  produces one more; a request leaves (freeing its blocks) with its last token.
* Context of a request in an iteration (what attention reads): ``prefilled + chunk`` in prefill,
  ``input + generated`` in decode (the convention of :mod:`workloads.requests`).
* KV capacity: :func:`archsim.serving.systems.kv_budget`.

**Replicas** (:mod:`archsim.serving.router`): ``replicas`` copies of the system run side by
side in simulated time, each with its own queues, KV cache, clock and iteration count; each
request is routed once, at its arrival, to the replica the router chooses from what the
replicas look like then. The event loop of :func:`serve` routes every arrival up to the
earliest replica clock, then runs that replica's next iteration.

:func:`serve` runs the scheduler with a given timer; :func:`serve_system` resolves the system,
its KV budget, pools, channels and timer (:func:`make_timer`) first. The result says how many
iterations each timing source timed (``iterations_by_source``).
"""
from __future__ import annotations

import math
import time as _time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from archsim.config import MachineConfig
from archsim.errors import ArchsimError
from archsim.results import RequestRecord, ServingResult
from archsim.serving.kvcache import KvCache, KvPolicy, preemption_victim
from archsim.serving.requests import RequestSet
from archsim.serving.router import ReplicaLoad, check_router, choose_replica
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
               keep_channels: bool = True) -> IterationTimer:
    """The iteration timer of a serving run on ``cfg``.

    GPU configurations always use :class:`GpuTimer` (already closed form). Others:
    ``exact`` → :class:`CycleLevelTimer` (layer window :data:`SERVING_WINDOW`);
    ``reuse`` → ``CachingTimer(CycleLevelTimer)``;
    ``surrogate`` → ``SurrogateTimer(CachingTimer(CycleLevelTimer))``. ``log`` is passed to
    the :class:`CycleLevelTimer` (what each sample cost), and so is ``keep_channels``: the
    compiler keeps the mix's channels (default: the scheduler gives every request its KV
    channel at admission and the KV stays there while it runs); False places the running batch
    afresh by the system's policy in every iteration (a balance no serving system keeps: the
    serving benchmark timed that until 2026-12-05, its makespan 5 % shorter).

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
    if timing == "reuse":
        return cached
    # "auto" picks the count per iteration: the surrogate assumes the most it may pick
    subs = (cfg.system.max_sub_batches if cfg.system.sub_batches == "auto"
            else cfg.system.sub_batches)
    return SurrogateTimer(cached, request_cap=max(4, subs),
                          sub_batches=subs if cfg.system.has_pim else None,
                          sub_batch_policy=cfg.system.sub_batch_policy)


@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One finished serving iteration (passed to ``on_iteration``).

    ``index`` (0-based, per replica), the ``mix``, its ``seconds`` (swap copies included) and
    timing ``source``, ``end_s`` (simulated time at its end), ``finished`` (requests done so
    far, all replicas), ``kv_tokens`` (allocated now in its replica: blocks × block size),
    ``replica``, ``preempted`` (requests preempted before it ran), ``swap_s`` (the part of
    ``seconds`` spent copying swapped KV blocks).
    """

    index: int
    mix: IterationMix
    seconds: float
    source: str
    end_s: float
    finished: int
    kv_tokens: int
    replica: int = 0
    preempted: int = 0
    swap_s: float = 0.0


def compose_iteration(running: np.ndarray, target: np.ndarray, prefilled: np.ndarray,
                      inp: np.ndarray, generated: np.ndarray,
                      chunked_prefill_tokens: int | None,
                      max_prefill_tokens: int | None) -> tuple[np.ndarray, ...]:
    """What the next iteration runs (the module docstring's composition rules).

    Args:
        running: int64 request indices admitted and holding KV, in admission order.
        target: int64 ``[n]`` tokens each request's prefill covers (its prompt; prompt +
            generated tokens when recomputed after a preemption); prefilled: int64 ``[n]``
            done so far; inp, generated: int64 ``[n]`` prompt lengths and tokens generated.
        chunked_prefill_tokens, max_prefill_tokens: as :func:`serve`.

    Returns:
        ``(sel, q, L, is_prefill)``: int64 request indices, tokens processed, context
        attended (KV positions, new ones included) and bool prefill flag, per request of the
        iteration (decodes first, then prefill chunks).
    """
    pre_mask = prefilled[running] < target[running]
    if chunked_prefill_tokens is None:
        if pre_mask.any():
            sel = running[pre_mask]
            if max_prefill_tokens is not None:
                fits = np.cumsum(target[sel] - prefilled[sel]) <= max_prefill_tokens
                fits[0] = True
                sel = sel[fits]
            q = target[sel] - prefilled[sel]
            L = target[sel].copy()
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
        rem = target[pre] - prefilled[pre]
        before = np.cumsum(rem) - rem
        take = np.clip(budget - before, 0, rem)
        pre, take = pre[take > 0], take[take > 0]
        sel = np.concatenate([dec, pre])
        q = np.concatenate([np.ones(dec.size, np.int64), take])
        L = np.concatenate([inp[dec] + generated[dec], prefilled[pre] + take])
        isp = np.concatenate([np.zeros(dec.size, bool), np.ones(pre.size, bool)])
    return sel, q, L, isp


class _Run:
    """The per-request state of a serving run, shared by its replicas (each request belongs
    to one replica), and the run's counters."""

    def __init__(self, requests: RequestSet, timer: IterationTimer, max_batch: int,
                 chunked_prefill_tokens: int | None, max_prefill_tokens: int | None,
                 on_iteration: Callable[[IterationRecord], None] | None) -> None:
        n = len(requests)
        self.timer, self.max_batch = timer, max_batch
        self.chunk, self.max_prefill = chunked_prefill_tokens, max_prefill_tokens
        self.on_iteration = on_iteration
        self.inp = requests.input_toks.astype(np.int64)
        self.out = requests.output_toks.astype(np.int64)
        self.arr = requests.arrival_s.astype(np.float64)
        # KV tokens of the whole final context: the last token is never fed back
        self.final = self.inp + self.out - 1
        self.target = self.inp.copy()             # tokens the (next) prefill covers
        self.prefilled = np.zeros(n, np.int64)
        self.generated = np.zeros(n, np.int64)
        self.cached = np.zeros(n, np.int64)        # KV tokens written so far
        self.admitted_t = np.full(n, np.nan)
        self.first_t = np.full(n, np.nan)
        self.finish_t = np.full(n, np.nan)
        self.last_tok_t = np.full(n, np.nan)       # time of each request's latest token
        self.max_gap = np.full(n, np.nan)          # largest gap between two of its tokens
        self.first_it = np.full(n, -1, np.int64)
        self.last_it = np.full(n, -1, np.int64)
        self.n_it = np.zeros(n, np.int64)
        self.preempt = np.zeros(n, np.int64)
        self.replica = np.zeros(n, np.int64)
        self.adm_seq = np.zeros(n, np.int64)       # admission order (re-admission anew)
        self.seq = 0
        self.done = 0
        self.by_source: Counter[str] = Counter()
        self.by_phase: Counter[str] = Counter()
        self.batch_sum = 0
        self.batch_max = 0
        self.iterations = 0
        self.recomputed_tokens = 0
        self.swap_blocks = np.zeros(n, np.int64)   # blocks a swapped-out request copied

    def token_at(self, idx: np.ndarray, t: float) -> None:
        """Requests ``idx`` produced a token at time ``t`` (s): their largest gap between two
        tokens (a stall behind a prefill, or a preemption) is updated."""
        self.max_gap[idx] = np.fmax(self.max_gap[idx], t - self.last_tok_t[idx])
        self.last_tok_t[idx] = t

    def next_kv_tokens(self, i: int) -> int:
        """KV tokens request ``i`` holds after its next iteration: its prefill target while
        prefilling, else its decode context ``input + generated``."""
        if self.prefilled[i] < self.target[i]:
            return int(self.target[i])
        return int(self.inp[i] + self.generated[i])


class _Replica:
    """One copy of the system: its scheduler (waiting, running and swapped queues), KV cache
    (:class:`archsim.serving.kvcache.KvCache`), channel placer and clock."""

    def __init__(self, k: int, run: _Run, kv: KvCache, placer: Any, channels: np.ndarray | None,
                 keep_channels: bool) -> None:
        self.k, self.run, self.kv, self.placer = k, run, kv, placer
        self.ch = channels            # int64 [n] KV channel of each request, or None
        self.keep = keep_channels
        self.clock = -math.inf
        self.running = np.zeros(0, np.int64)
        self.waiting: deque[int] = deque()
        self.swapped: deque[int] = deque()
        self.iterations = 0
        self.busy_s = 0.0
        self.preemptions = 0
        self.swap_out_blocks = 0
        self.swap_in_blocks = 0
        self.swap_s = 0.0

    # ---------------------------------------------------------------- the router's view
    def has_work(self) -> bool:
        """True while a request routed here is unfinished."""
        return bool(self.running.size or self.waiting or self.swapped)

    def load(self) -> ReplicaLoad:
        """What the router sees (:class:`archsim.serving.router.ReplicaLoad`)."""
        r, kv = self.run, self.kv
        queued = sum(kv.admission_tokens(r.target[i], r.final[i]) for i in self.waiting)
        return ReplicaLoad(int(self.running.size + len(self.waiting) + len(self.swapped)),
                           int(queued), int(kv.free.sum()) * kv.block_tokens)

    def enqueue(self, i: int, t: float) -> None:
        """Request ``i`` arrives here at ``t`` (an idle replica's clock jumps to it)."""
        if not self.has_work():
            self.clock = max(self.clock, t)
        self.waiting.append(i)
        self.run.replica[i] = self.k

    # ---------------------------------------------------------------- admission (KV policy)
    def _channel_loads(self) -> np.ndarray:
        """KV tokens allocated per channel (the ``min_load`` measure: reserved tokens, or the
        context so far when paged), over the running requests."""
        assert self.ch is not None
        run = self.running
        return np.bincount(self.ch[run], weights=self.kv.tokens[run],
                           minlength=self.placer.n_channels).astype(np.float64)

    def _take_tokens(self, i: int) -> int:
        r = self.run
        return int(self.kv.admission_tokens(r.next_kv_tokens(i), r.final[i]))

    def _admit(self, queue: deque[int], t: float) -> list[int]:
        """Admit the head of ``queue`` first-come-first-served while the batch has room and
        the KV pools can hold each one's admission blocks (placed by the channel policy);
        returns the admitted requests."""
        r, kv = self.run, self.kv
        cand: list[int] = []
        need_blocks = 0
        for i in queue:
            if self.running.size + len(cand) >= r.max_batch:
                break
            b = kv.blocks_for(self._take_tokens(i))
            if need_blocks + b > int(kv.free.sum()):
                break
            cand.append(i)
            need_blocks += b
        if not cand:
            return []
        new = np.array(cand, np.int64)
        take_tok = np.zeros(len(r.inp), np.int64)
        take_tok[new] = [self._take_tokens(i) for i in cand]
        if kv.n_pools == 1:
            placed = np.ones(new.size, bool)
            if self.ch is not None and not self.keep:
                self.placer.admit(new, take_tok, loads=self._channel_loads())
            pools = np.zeros(new.size, np.int64)
        elif self.keep:
            assert self.ch is not None
            placed = np.zeros(new.size, bool)
            room = kv.free.copy()
            for k, i in enumerate(cand):           # FCFS: stop at the first that does not fit
                b = kv.blocks_for(take_tok[i])
                if room[self.ch[i]] < b:
                    break
                room[self.ch[i]] -= b
                placed[k] = True
            pools = self.ch[new]
        else:
            take_b = np.zeros(len(r.inp), np.int64)
            take_b[new] = kv.blocks_for(take_tok[new])
            placed = self.placer.admit(new, take_tok, loads=self._channel_loads(),
                                       room=kv.free.copy(), take=take_b)
            pools = self.placer.channels[new]
        admitted = [i for i, ok in zip(cand, placed) if ok]
        for i, p in zip(new[placed], pools[placed]):
            kv.allocate(int(i), int(p), int(take_tok[i]))
            if math.isnan(r.admitted_t[i]):
                r.admitted_t[i] = t
            r.seq += 1
            r.adm_seq[i] = r.seq
        gone = set(admitted)
        rest = [i for i in queue if i not in gone]
        queue.clear()
        queue.extend(rest)
        if admitted:
            self.running = np.concatenate([self.running, np.array(admitted, np.int64)])
        return admitted

    def _preempt(self, v: int) -> int:
        """Preempt request ``v`` (recompute or swap); returns the blocks a swap copies out."""
        r, kv = self.run, self.kv
        self.running = self.running[self.running != v]
        r.preempt[v] += 1
        self.preemptions += 1
        blocks = kv.release(v)
        if kv.policy.swaps:
            self.swapped.append(v)
            r.swap_blocks[v] = blocks
            return blocks
        r.recomputed_tokens += int(r.cached[v])
        r.target[v] = r.inp[v] + r.generated[v]
        r.prefilled[v] = 0
        r.cached[v] = 0
        self.waiting.appendleft(v)               # vLLM: back to the head of the queue
        return 0

    def _grow(self, sel: np.ndarray, L: np.ndarray) -> tuple[np.ndarray, int, int]:
        """Give every request of the iteration the blocks of its context ``L`` (paged), in
        admission order, preempting the latest-admitted request of a full pool
        (:func:`preemption_victim`). Returns ``(kept mask over sel, preempted, blocks swapped
        out)``."""
        r, kv = self.run, self.kv
        keep = np.ones(sel.size, bool)
        out_blocks = 0
        n_pre = 0
        miss = np.maximum(kv.blocks_for(L) - kv.held[sel], 0)
        if not miss.any():
            return keep, 0, 0
        per_pool = np.bincount(kv.pool[sel], weights=miss, minlength=kv.n_pools)
        if (per_pool <= kv.free).all():          # every pool has room: no preemption
            for i, tok in zip(sel[miss > 0], L[miss > 0]):
                kv.grow(int(i), int(tok))
            return keep, 0, 0
        for k in np.argsort(r.adm_seq[sel], kind="stable"):
            i = int(sel[k])
            if not keep[k]:
                continue
            while not kv.grow(i, int(L[k])):
                pool = self.running[kv.pool[self.running] == kv.pool[i]]
                v = preemption_victim(pool, r.adm_seq)
                out_blocks += self._preempt(v)
                n_pre += 1
                keep &= sel != v
                if v == i:
                    break
        return keep, n_pre, out_blocks

    # ---------------------------------------------------------------- one iteration
    def step(self) -> None:
        """Run the next iteration at this replica's clock: swap-in or admission, composition,
        KV growth (preemption), timing, state update.

        Raises:
            ArchsimError: the timer returns a non-positive time; a simulator bug.
        """
        r, kv = self.run, self.kv
        t = self.clock
        in_blocks = 0
        if self.swapped:                         # swapped requests resume before new ones
            for i in self._admit(self.swapped, t):
                in_blocks += int(r.swap_blocks[i])
        else:
            self._admit(self.waiting, t)
        if self.running.size == 0:
            raise ArchsimError("simulator bug: a replica with waiting requests admitted none "
                               "into an empty KV cache")
        sel, q, L, isp = compose_iteration(self.running, r.target, r.prefilled, r.inp,
                                           r.generated, r.chunk, r.max_prefill)
        n_pre, out_blocks = 0, 0
        if kv.policy.paged:
            keep, n_pre, out_blocks = self._grow(sel, L)
            sel, q, L, isp = sel[keep], q[keep], L[keep], isp[keep]
        swap_s = kv.swap_seconds(in_blocks + out_blocks) if (in_blocks or out_blocks) else 0.0
        self.swap_in_blocks += in_blocks
        self.swap_out_blocks += out_blocks
        if sel.size == 0:                        # everything of the step was preempted
            self.clock = t + swap_s
            self.swap_s += swap_s
            return
        mix = IterationMix(sel, q, L, isp, self.ch[sel] if self.ch is not None else None,
                           r.target[sel])
        seconds, source = r.timer.time(mix)
        if not seconds > 0:
            raise ArchsimError(f"iteration {self.iterations}: timer {r.timer.describe()} "
                               f"returned {seconds!r} s")
        seconds += swap_s
        t += seconds
        self.clock = t
        self.busy_s += seconds
        self.swap_s += swap_s
        it = self.iterations
        r.first_it[sel[r.first_it[sel] < 0]] = it
        r.last_it[sel] = it
        r.n_it[sel] += 1
        self.iterations += 1
        r.iterations += 1
        r.by_source[source] += 1
        r.by_phase[mix.phase] += 1
        r.batch_sum += sel.size
        r.batch_max = max(r.batch_max, int(sel.size))

        # -- advance request states
        p_idx = sel[isp]
        if p_idx.size:
            r.prefilled[p_idx] += q[isp]
            r.cached[p_idx] = r.prefilled[p_idx]
            fin_p = p_idx[r.prefilled[p_idx] >= r.target[p_idx]]
            r.first_t[fin_p[np.isnan(r.first_t[fin_p])]] = t
            r.generated[fin_p] += 1
            r.token_at(fin_p, t)
        d_idx = sel[~isp]
        if d_idx.size:
            r.cached[d_idx] = L[~isp]
            r.generated[d_idx] += 1
            r.token_at(d_idx, t)
        gone = sel[(r.prefilled[sel] >= r.target[sel]) & (r.generated[sel] >= r.out[sel])]
        for i in gone:
            kv.release(int(i))
        if gone.size:
            r.finish_t[gone] = t
            self.running = self.running[~np.isin(self.running, gone)]
            r.done += int(gone.size)
        if r.on_iteration is not None:
            r.on_iteration(IterationRecord(it, mix, seconds, source, t, r.done,
                                           kv.used_blocks * kv.block_tokens, self.k, n_pre,
                                           swap_s))

    def summary(self, makespan_s: float) -> dict[str, Any]:
        """The replica's row of ``ServingResult.replicas``."""
        r = self.run
        mine = r.replica == self.k
        out_tok = int(r.out[mine].sum())
        return {"replica": self.k, "requests": int(mine.sum()), "output_tokens": out_tok,
                "iterations": self.iterations, "busy_s": self.busy_s,
                "preemptions": self.preemptions,
                "peak_kv_tokens": self.kv.peak_blocks * self.kv.block_tokens,
                "throughput_tokens_per_s": out_tok / makespan_s if makespan_s > 0
                else float("nan")}


def serve(requests: RequestSet, timer: IterationTimer, *, kv_capacity_tokens: int,
          kv_window: int | None = None, max_batch: int = 256,
          chunked_prefill_tokens: int | None = None,
          max_prefill_tokens: int | None = None, n_channels: int | None = None,
          channel_policy: str = "round_robin", keep_channels: bool = False,
          kv: KvPolicy | None = None, kv_pools_per_channel: bool = False,
          replicas: int = 1, router: str = "round-robin",
          system: str = "", model_name: str = "", config_name: str = "",
          on_iteration: Callable[[IterationRecord], None] | None = None,
          max_iterations: int = 50_000_000) -> ServingResult:
    """Run the continuous-batching scheduler (module docstring) until every request finishes.

    Args:
        requests: the :class:`RequestSet` (lengths and arrivals).
        timer: times each iteration (:class:`IterationTimer`; shared by the replicas, which
            are identical systems).
        kv_capacity_tokens: KV-cache tokens one replica holds (:func:`kv_budget`).
        kv_window: the model's sliding window ``W`` (None: full attention); a request then
            holds at most ``W`` tokens, its rolling buffer
            (:func:`archsim.serving.systems.kv_tokens_held`), in the KV budget and its channel.
        max_batch: most requests in one iteration (running requests) of a replica.
        chunked_prefill_tokens: token budget per iteration for chunked prefill, or None.
        max_prefill_tokens: without chunked prefill, most prompt tokens in one prefill
            iteration (whole prompts in admission order, at least one), or None (no limit).
        n_channels, channel_policy: when given, each admitted request gets a KV channel
            (``round_robin``: a rotating pointer; ``min_load``: admitted largest first onto the
            channel with the fewest KV tokens; :class:`mapping.channels.OnlinePlacer`) that it
            keeps, passed in the mixes.
        keep_channels: each request keeps ``requests.channels`` (the request file's) instead.
        kv: the KV-cache allocation (:class:`archsim.serving.kvcache.KvPolicy`; default the
            machine config's defaults: paged, 16-token blocks, recompute).
        kv_pools_per_channel: one block pool per channel (PIM systems: a request's KV lives in
            its channel); needs ``n_channels``.
        replicas: copies of the system, each with its own scheduler and KV cache of
            ``kv_capacity_tokens``; router: which replica receives a request
            (:mod:`archsim.serving.router`).
        system, model_name, config_name: written into the result.
        on_iteration: called after every iteration with an :class:`IterationRecord`.
        max_iterations: safety limit (all replicas).

    Returns:
        :class:`ServingResult` with one :class:`RequestRecord` per request (in input order).

    Raises:
        ArchsimError: a request whose KV (``input + output − 1`` tokens, at most ``kv_window``)
            exceeds what one pool holds (names its index), bad limits, or the iteration limit
            reached.
    """
    from mapping.channels import OnlinePlacer

    n = len(requests)
    kv = kv or KvPolicy()
    if max_batch < 1:
        raise ArchsimError(f"max batch must be >= 1, got {max_batch}")
    if chunked_prefill_tokens is not None and chunked_prefill_tokens < 1:
        raise ArchsimError(f"chunked prefill budget must be >= 1 token, got "
                           f"{chunked_prefill_tokens}")
    if max_prefill_tokens is not None and max_prefill_tokens < 1:
        raise ArchsimError(f"prefill budget must be >= 1 token, got {max_prefill_tokens}")
    check_router(router, replicas)
    if keep_channels and (requests.channels is None or not n_channels):
        raise ArchsimError(f"--keep-channels: {requests.source or 'the requests'} give no "
                           "channel per request (a .tsv with a ch_idx column does), or the "
                           "system has no channels")
    if kv_pools_per_channel and not n_channels:
        raise ArchsimError("KV pools per channel need the system's channels (n_channels)")
    run = _Run(requests, timer, max_batch, chunked_prefill_tokens, max_prefill_tokens,
               on_iteration)
    n_pools = int(n_channels) if kv_pools_per_channel else 1
    reps = []
    for k in range(replicas):
        cache = KvCache(kv, kv_capacity_tokens, n, n_pools, kv_window)
        ch = None
        placer = OnlinePlacer(n, n_channels or 0, channel_policy)
        if n_channels:
            ch = placer.channels
            if keep_channels:
                assert requests.channels is not None
                ch[:] = requests.channels
        reps.append(_Replica(k, run, cache, placer, ch, keep_channels))
    cache = reps[0].kv
    need = kv_tokens_held(run.final, kv_window)
    over = cache.blocks_for(need) > cache.blocks_per_pool
    if over.any():
        i = int(np.argmax(over))
        held = "" if kv_window is None else f", at most the sliding window of {kv_window:,}"
        where = (f"the KV cache holds {cache.pool_tokens:,}" if n_pools == 1 else
                 f"one channel's KV pool holds {cache.pool_tokens:,} (a request's KV lives in "
                 f"one PIM channel; {kv_capacity_tokens:,} over {n_pools} channels)")
        raise ArchsimError(f"memory capacity: request index {int(requests.index[i])} needs "
                           f"{int(need[i]):,} KV-cache tokens (prompt {int(run.inp[i])} + output "
                           f"{int(run.out[i])} - 1{held}) but {where}")
    wall0 = _time.perf_counter()
    order = np.argsort(run.arr, kind="stable")
    t_start = float(run.arr[order[0]]) if n else 0.0
    ptr = 0
    eps = 1e-12
    while run.done < n:
        busy = [rep for rep in reps if rep.has_work()]
        t_next = min(rep.clock for rep in busy) if busy else math.inf
        if ptr < n and run.arr[order[ptr]] <= t_next + eps:
            i = int(order[ptr])
            k = 0 if replicas == 1 else choose_replica(router, [rep.load() for rep in reps],
                                                       ptr)
            reps[k].enqueue(i, float(run.arr[i]))
            ptr += 1
            continue
        rep = min(busy, key=lambda x: (x.clock, x.k))
        rep.step()
        if run.iterations >= max_iterations:
            raise ArchsimError(f"serving: stopped after {max_iterations} iterations with "
                               f"{n - run.done} requests unfinished")

    recs = [RequestRecord(int(requests.index[i]), int(run.inp[i]), int(run.out[i]),
                          float(run.arr[i]), float(run.admitted_t[i]), float(run.first_t[i]),
                          float(run.finish_t[i]), int(run.first_it[i]), int(run.last_it[i]),
                          int(run.n_it[i]), int(run.preempt[i]), int(run.replica[i]),
                          float(run.max_gap[i]))
            for i in range(n)]
    sched = (f"continuous batching, FCFS admission, {kv.describe()}, "
             f"max batch {max_batch}, "
             + (f"chunked prefill {chunked_prefill_tokens} tokens/iteration"
                if chunked_prefill_tokens else
                "prefill-first (whole prompts"
                + (f", at most {max_prefill_tokens} tokens/iteration" if max_prefill_tokens
                   else "") + ")"))
    if n_channels:
        sched += (f", KV channels kept from {requests.source or 'the requests'}" if keep_channels
                  else f", KV channels {channel_policy} over {n_channels}")
        if kv_pools_per_channel:
            sched += " (a block pool per channel)"
    makespan = float(np.nanmax(run.finish_t) - t_start) if n else 0.0
    bs = cache.block_tokens
    res = ServingResult(
        system=system, model=model_name, arrival=requests.arrival, scheduler=sched,
        timer=timer.describe(), requests=recs, makespan_s=makespan,
        iterations=run.iterations, iterations_by_source=dict(run.by_source),
        iterations_by_phase=dict(run.by_phase),
        mean_batch_size=run.batch_sum / run.iterations if run.iterations else 0.0,
        max_batch_size=run.batch_max,
        kv_capacity_tokens=int(kv_capacity_tokens),
        peak_kv_tokens=max(rep.kv.peak_blocks for rep in reps) * bs,
        config_name=config_name, chunked_prefill_tokens=chunked_prefill_tokens,
        max_prefill_tokens=None if chunked_prefill_tokens else max_prefill_tokens,
        notes=list(requests.notes), kv_policy=kv.describe(),
        preemptions=int(run.preempt.sum()), recomputed_tokens=run.recomputed_tokens,
        swap_out_bytes=cache.bytes_of(sum(rep.swap_out_blocks for rep in reps)),
        swap_in_bytes=cache.bytes_of(sum(rep.swap_in_blocks for rep in reps)),
        swap_s=sum(rep.swap_s for rep in reps),
        router=router if replicas > 1 else "",
        replicas=[rep.summary(makespan) for rep in reps] if replicas > 1 else [])
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
                 keep_channels: bool = False, replicas: int = 1,
                 router: str = "round-robin") -> ServingResult:
    """Serve ``requests`` on a system: resolves the config (``system`` may be an already
    resolved ``MachineConfig``), KV budget, KV policy (``cfg.serving``), pools, channels and
    timer, then calls :func:`serve`.
    ``model`` is a ``ModelSpec`` or a registry name; ``max_prefill_tokens="auto"`` is
    :func:`default_prefill_budget`. The request file's channels are checked against the
    machine before the run; ``keep_channels`` keeps them (scheduler and compiler) instead of
    the system's policy. On a system with channels the cycle-level timer compiles every
    iteration with the channels the scheduler gave its requests at admission (a request's KV
    cache stays in its channel while it runs); on a PIM system the KV blocks are also pooled
    per channel.
    ``replicas`` copies of the system share the request stream through ``router``.

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
    check_router(router, replicas)
    per_channel = n_ch is not None and cfg.system.has_pim
    # a request's KV stays in the channel it was given at admission (by the machine's policy,
    # mapping.channels.OnlinePlacer, or the file's with keep_channels): the compiler keeps the
    # mix's channels in every iteration instead of placing the running batch afresh
    timer = timer or make_timer(cfg, model, timing, label)
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
                kv=KvPolicy.from_config(cfg.serving, bud.kv_bytes_per_token),
                kv_pools_per_channel=per_channel, replicas=replicas, router=router,
                system=label, model_name=model.name,
                config_name=cfg.name, on_iteration=on_iteration)
    res.notes.append(f"KV capacity: {bud.describe()}"
                     + (" per replica" if replicas > 1 else ""))
    if n_ch is not None:
        res.notes.append("channels: " + describe_placement(
            keep_channels, cfg.system.channel_policy, requests.source)
            + ("" if keep_channels else " at admission, kept while the request runs"))
        if per_channel:
            res.notes.append("KV blocks: a block pool per channel (a request's KV lives in the "
                             "PIM channel it was given at admission)")
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


__all__ = ["SERVING_WINDOW", "make_timer", "IterationRecord", "compose_iteration", "serve",
           "default_prefill_budget", "serve_system"]
