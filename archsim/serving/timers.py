"""Iteration timers of a serving run: what one iteration runs, and how long it takes.

An :class:`IterationMix` is what one serving iteration runs (per request: tokens processed,
context attended, phase, KV channel). An :class:`IterationTimer` turns it into
``(seconds, source)``, ``source`` one of :data:`archsim.results.TIMING_SOURCES`:

* :class:`GpuTimer` — the GPU model in closed form (``calibrated`` or ``roofline``: its mode).
* :class:`CycleLevelTimer` — the cycle-level simulator per iteration (``cycle-level``).
* :class:`CachingTimer` — reuses the time of an earlier iteration with the same key (``reused``);
  the key is documented there (``exact``: the multiset of (query tokens, context, channel) per
  request, identical inputs only; ``aggregate``: request counts and token sums bucketed to 1 %).

The Gaussian-process surrogate that times most iterations of a long run is
:mod:`archsim.serving.surrogate`; :func:`archsim.serving.scheduler.make_timer` chains them.
"""
from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from archsim.config import MachineConfig, parallel_degrees
from archsim.errors import ArchsimError
from archsim.gpu import GpuCostModel, kernel_efficiency
from archsim.serving.systems import compile_options, is_gpu, simulate_system_iteration


@dataclass(frozen=True)
class IterationMix:
    """What one serving iteration runs (axis 0 of every array = request in the iteration).

    Attributes:
        request_ids: int64 ``[n]`` request indices.
        q_tokens: int64 ``[n]`` tokens processed (1 for decode; the prompt or a chunk of it).
        context_tokens: int64 ``[n]`` KV positions attended, new ones included.
        is_prefill: bool ``[n]`` request is (still) in its prefill.
        channels: int64 ``[n]`` KV channel of each request, or None (no channel model).
        prompt_tokens: int64 ``[n]`` prompt length of each request, or None (unknown): a
            prompt chunk that does not reach it produces no token (no LM head row).
    """

    request_ids: np.ndarray
    q_tokens: np.ndarray
    context_tokens: np.ndarray
    is_prefill: np.ndarray
    channels: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None

    @property
    def phase(self) -> str:
        """``prefill`` (all requests prefilling), ``decode`` (none) or ``mixed``."""
        n_pre = int(self.is_prefill.sum())
        return "decode" if n_pre == 0 else ("prefill" if n_pre == self.is_prefill.size
                                            else "mixed")

    @property
    def size(self) -> int:
        """Requests in the iteration."""
        return int(self.q_tokens.size)

    def stats(self) -> tuple[int, int, int, int, int]:
        """``(decode requests, prefill requests, Σ q, Σ context, Σ q·context)``."""
        q, L = self.q_tokens, self.context_tokens
        n_pre = int(self.is_prefill.sum())
        return (q.size - n_pre, n_pre, int(q.sum()), int(L.sum()), int(q @ L))

    def to_batch(self) -> tuple[str, Any]:
        """``(phase, Batch)`` for the cycle-level simulator, the whole iteration as one
        program: ``decode`` (every request one decode step), ``prefill`` (whole prompts only)
        or ``mixed`` (anything else: decode steps with prompt chunks, or chunks after a cached
        prefix; each request's ``q_tokens``, :func:`mapping.compiler.compile_layers`).
        ``seq_len`` = context, ids = request indices, channels and prompt lengths when known.
        """
        from workloads.requests import Batch, Request

        ch, pt = self.channels, self.prompt_tokens
        q, L = self.q_tokens, self.context_tokens
        if not self.is_prefill.any():
            phase = "decode"
        elif self.is_prefill.all() and (q == L).all():
            phase = "prefill"
        else:
            phase = "mixed"
        return phase, Batch(tuple(
            Request(int(self.request_ids[i]), None if pt is None else int(pt[i]), None,
                    int(L[i]), None if ch is None or ch[i] < 0 else int(ch[i]),
                    q_tokens=int(q[i]) if phase == "mixed" else None)
            for i in range(q.size)))


class IterationTimer(Protocol):
    """Times one serving iteration.

    ``time(mix)`` returns ``(seconds, source)`` where ``source`` is one of
    :data:`archsim.results.TIMING_SOURCES`; ``describe()`` says what the timer is, in words.
    """

    def time(self, mix: IterationMix) -> tuple[float, str]: ...  # pragma: no cover

    def describe(self) -> str: ...  # pragma: no cover


class GpuTimer:
    """The GPU model (:class:`archsim.gpu.GpuCostModel`) per iteration; the source is its mode
    (``calibrated`` or ``roofline``).

    Decode and prefill requests of one iteration run as one pass (GEMMs over all tokens, one
    batched attention kernel). About 0.1 ms per call.
    """

    def __init__(self, cfg: MachineConfig, model: Any) -> None:
        self.cfg, self.model = cfg, model
        self.cost = GpuCostModel(cfg, model, *parallel_degrees(cfg, model))
        self.mode = kernel_efficiency(cfg.gpu).mode

    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, mode)`` of ``mix``."""
        return self.cost.iteration_time_s(mix.q_tokens, mix.context_tokens), self.mode

    def describe(self) -> str:
        """What the timer is."""
        return f"{self.mode} model of {self.cfg.gpu.name} ({self.cfg.name})"


class CycleLevelTimer:
    """Each iteration simulated by the cycle-level simulator (``cycle-level``), as one program
    (:meth:`IterationMix.to_batch`: a mixed iteration's decode steps and prompt chunks share its
    GEMMs, Sarathi-Serve). ``window`` is the simulator's layer window (None: its default; see
    ``archsim.system.core``); ``log`` collects ``(phase, shape, seconds, wall seconds, parts)``
    per call when given (how much each sample cost; ``parts`` the simulator's split of it,
    ``IterationResult.extra["wall_s"]``: compile, load, prepare, run, report,
    iteration_report). ``keep_channels``: the compiler keeps the
    mix's channels (the request file's) instead of placing them by the system's policy.

    Raises:
        ArchsimError: ``cfg`` is the GPU baseline (constructor).
    """

    def __init__(self, cfg: MachineConfig, model: Any, system: str | None = None,
                 window: int | None = None, log: list | None = None,
                 keep_channels: bool = False) -> None:
        if is_gpu(cfg):
            raise ArchsimError(f"{cfg.name} is the GPU baseline: time it with "
                               "GpuTimer, not the cycle-level simulator")
        self.cfg, self.model, self.system = cfg, model, system or cfg.name
        self.window, self.log = window, log
        self.options = compile_options(keep_channels)
        self.calls = 0
        self.wall_s = 0.0

    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, "cycle-level")`` of ``mix``."""
        phase, batch = mix.to_batch()
        kw = {} if self.window is None else {"window": self.window}
        self.calls += 1
        w0 = _time.perf_counter()
        res = simulate_system_iteration(self.cfg, self.model, batch, phase=phase,
                                        system=self.system, with_events=False,
                                        compile_options=self.options, **kw)
        wall = _time.perf_counter() - w0
        self.wall_s += wall
        seconds = float(res.seconds_per_iteration)  # type: ignore[arg-type]
        if self.log is not None:
            self.log.append((phase, mix.stats(), seconds, wall,
                             dict(res.extra.get("wall_s", {}))))
        return seconds, "cycle-level"

    def describe(self) -> str:
        """What the timer is."""
        return f"cycle-level simulation ({self.cfg.name})"


def _log_bucket(x: float, rel: float) -> int:
    return -1 if x <= 0 else int(math.floor(math.log(x) / math.log1p(rel)))


class CachingTimer:
    """Reuses the time of an iteration already timed by ``inner`` when the key matches.

    Keys:

    * ``exact`` (default): ``(phase, sorted multiset of (q_tokens, context_tokens, channel,
      prefill, produces a token))`` — identical inputs, so the reuse is exact for a
      deterministic simulator.
    * ``aggregate``: ``(phase, decode requests, prefill requests, bucket(Σ q), bucket(Σ
      context), bucket(Σ q·context))`` with logarithmic buckets of relative width
      ``rel_bucket`` (default 1 %): iterations of nearly the same shape share one simulated
      time; the error is that of the bucket and is measured by the caller.

    A hit returns ``(seconds, "reused")``; a miss is timed by ``inner`` and stored.
    """

    def __init__(self, inner: IterationTimer, key: str = "exact",
                 rel_bucket: float = 0.01) -> None:
        if key not in ("exact", "aggregate"):
            raise ArchsimError(f"cache key {key!r} not one of ['exact', 'aggregate']")
        self.inner, self.key_kind, self.rel = inner, key, rel_bucket
        self.cache: dict[Any, float] = {}
        self.hits = 0
        self.misses = 0

    def key(self, mix: IterationMix) -> Any:
        """The cache key of ``mix`` (see the class docstring)."""
        if self.key_kind == "exact":
            ch = mix.channels if mix.channels is not None else np.full(mix.size, -1)
            pt = mix.prompt_tokens
            ends = np.ones(mix.size, np.int64) if pt is None else (mix.context_tokens >= pt)
            rows = np.stack([mix.q_tokens, mix.context_tokens, ch,
                             mix.is_prefill.astype(np.int64), ends.astype(np.int64)], axis=1)
            rows = rows[np.lexsort(rows.T[::-1])]
            return (mix.phase, rows.tobytes())
        n_dec, n_pre, sq, sl, sql = mix.stats()
        return (mix.phase, n_dec, n_pre, _log_bucket(sq, self.rel), _log_bucket(sl, self.rel),
                _log_bucket(sql, self.rel))

    def lookup(self, mix: IterationMix) -> float | None:
        """The cached time of ``mix``'s key, or None (does not count as a hit)."""
        return self.cache.get(self.key(mix))

    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, "reused")`` on a hit, else the inner timer's answer."""
        k = self.key(mix)
        if k in self.cache:
            self.hits += 1
            return self.cache[k], "reused"
        self.misses += 1
        s, src = self.inner.time(mix)
        self.cache[k] = s
        return s, src

    def describe(self) -> str:
        """What the timer is."""
        return f"{self.inner.describe()} + reuse of identical shapes (key: {self.key_kind})"


__all__ = ["IterationMix", "IterationTimer", "GpuTimer", "CycleLevelTimer", "CachingTimer"]
