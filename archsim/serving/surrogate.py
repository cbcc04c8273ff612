"""The Gaussian-process surrogate timer of a serving run.

:class:`SurrogateTimer` times most iterations of a long serving run with a Gaussian process
(``surrogate``) calibrated online on iterations timed by an exact timer, with an out-of-sample
error report (:meth:`SurrogateTimer.error_report`); :func:`measure_surrogate_error` checks it
against the exact timer on sampled iterations. :func:`surrogate_point` is the shape of an
iteration it regresses on. scikit-learn is imported only when a GP is fitted (the
``surrogate`` extra), never at import time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from archsim.errors import ArchsimError
from archsim.serving.timers import IterationMix, IterationTimer


LOCKSTEP_REQUEST_TOKENS = 256
"""Per-request cost of a PIM attention step in :func:`pim_lockstep_tokens`, in KV tokens
(the fixed work of a request's item: header, query write, softmax and sum on the NPU).
Chosen by leave-one-out over 80 exact GPT3-7B decode iterations on neupims (docs/results.md,
"the surrogate's error floor"): 0, 128, 256 and 512 gave a maximum error of 3.8, 3.8, 3.7 and
4.0 %."""


def pim_lockstep_tokens(mix: IterationMix, sub_batches: int, policy: str = "half") -> float:
    """The lock-step length of the PIM attention of ``mix``'s decode requests, in KV tokens
    (0 without decode requests or channels).

    The decode requests are cut into ``min(sub_batches, decode requests)`` sub-batches by
    :func:`mapping.subbatch.split_sub_batches` with ``policy``, as the compiler cuts them. The
    PIM attention code of a sub-batch walks each channel's list of its requests (batch order) in
    lock-step across the channels (:mod:`mapping.codegen.pim_attention`: step k issues every
    channel's k-th item), so its time follows Σ over steps k of the longest k-th request over
    the channels, each request costing its context plus :data:`LOCKSTEP_REQUEST_TOKENS`.
    Returns the largest such sum over the sub-batches. At 256 requests two placements of the
    same shape (same requests, same peak channel context) differ by 2-4 % in iteration time
    with how each channel's requests fall into the sub-batches; this is what tells them apart.
    """
    from mapping.subbatch import split_sub_batches

    dec = ~mix.is_prefill
    if mix.channels is None or not dec.any():
        return 0.0
    ctx, ch = mix.context_tokens[dec], mix.channels[dec]
    if (ch < 0).any():
        return 0.0
    n = min(int(sub_batches), int(ctx.size))
    sub = split_sub_batches(ctx, ch, n, policy).sub_batch
    cost = (ctx + LOCKSTEP_REQUEST_TOKENS).astype(np.float64)
    best = 0.0
    for s in range(n):
        idx = np.flatnonzero(sub == s)
        if not idx.size:
            continue
        order = np.argsort(ch[idx], kind="stable")      # by channel, batch order within
        c = ch[idx][order]
        first = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
        step = np.arange(c.size) - np.repeat(first, np.diff(np.r_[first, c.size]))
        longest = np.zeros(int(step.max()) + 1)
        np.maximum.at(longest, step, cost[idx][order])
        best = max(best, float(longest.sum()))
    return best


def surrogate_point(mix: IterationMix, sub_batches: int | None = None,
                    policy: str = "half") -> np.ndarray:
    """The shape of ``mix`` that :class:`SurrogateTimer` regresses on, float64 ``[7]``:
    ``(decode requests, prefill requests, Σ q, Σ context of the decode requests, Σ q·context
    of the prefill requests, peak channel context, PIM lock-step tokens)``.

    Σ q is the GEMM rows; the decode requests' context is the PIM (or, without PIM, streamed)
    attention work, the prefill requests' ``q·context`` the attention on the arrays (a chunk's
    rows against its cached prefix and itself), so a mixed (chunked-prefill) iteration keeps the
    two apart. In a pure decode or prefill iteration the other is 0 and these are the shapes the
    earlier point had (its Σ context and Σ q·context were equal in decode, Σ context = Σ q in
    prefill). The peak channel context is the largest Σ context of the decode requests that
    share one KV channel (0 without channels): PIM attention runs per channel, so the most
    loaded channel bounds the attention stage (NeuPIMs §5.3, the reason for min-load channel
    balancing). The last is :func:`pim_lockstep_tokens` with ``sub_batches`` and ``policy`` on
    a machine whose decode attention runs on PIM (``sub_batches`` None: 0).
    """
    n_dec, n_pre, sq, _, _ = mix.stats()
    pre = mix.is_prefill
    sl = float(mix.context_tokens[~pre].sum())
    sql = float(mix.q_tokens[pre] @ mix.context_tokens[pre])
    peak = 0.0
    if mix.channels is not None and n_dec:
        dec = ~mix.is_prefill
        ch = mix.channels[dec]
        if (ch >= 0).all():
            peak = float(np.bincount(ch, weights=mix.context_tokens[dec]).max())
    lock = 0.0 if sub_batches is None else pim_lockstep_tokens(mix, sub_batches, policy)
    return np.array([n_dec, n_pre, sq, sl, sql, peak, lock], dtype=np.float64)


def _log_point(points: np.ndarray, request_cap: int = 4) -> np.ndarray:
    """Positions of shape rows ``[..., 7]`` in the surrogate's log space ``[..., 4]``:
    ``ln(1 + min(requests, request_cap)), ln(1 + Σ q), ln(1 + Σ decode context),
    ½ ln(1 + Σ prefill q·context)`` (:func:`surrogate_point`).

    Every axis grows like a token count (the square root of the attention work). The request
    count matters most below the machine's sub-batch count: a decode batch with fewer requests
    runs fewer sub-batches, each streaming the weights once (a step in time; prefill, when it
    was still split into sub-batches: 4.3 ms for one request of up to 19 tokens, 8.5 ms for
    two, GPT3-7B on neupims). The cap (default 4, at least the sub-batch count) keeps small
    counts apart; beyond it the size of a batch is on the Σ q (decode) and Σ q·context
    (prefill) axes. (A cap of 2 on neupims let the surrogate time 3-request prefills from
    2-request ones with up to 6.4 % error on a replay of a GPT3-7B serving run; 4 kept that
    below 1.8 %.)"""
    p = np.asarray(points, dtype=np.float64)
    return np.log1p(np.stack([np.minimum(p[..., 0] + p[..., 1], float(request_cap)),
                              p[..., 2], p[..., 3], p[..., 4]], axis=-1)) * np.array(
        [1.0, 1.0, 1.0, 0.5])


#: Hyper-parameter bounds of the surrogate's GP kernel (ln-seconds units; inputs in the
#: ``ln(1 + x)`` space of :func:`_gp_inputs`). The amplitude is at least 0.1 (10 % deviations)
#: and the length scales at most 3: a prior that keeps the GP uncertain away from its samples
#: even when those few samples happen to be nearly equal (a GP fitted to nearly constant data
#: would otherwise extrapolate them with false confidence). Noise up to 3 % std.
AMPLITUDE_BOUNDS = (1e-2, 10.0)
LENGTH_SCALE_BOUNDS = (0.1, 3.0)
NOISE_BOUNDS = (1e-8, 1e-3)


def _gp_inputs(points: np.ndarray, request_cap: int = 4) -> np.ndarray:
    """GP inputs of shape rows ``[k, 7]`` → ``[k, 6]``: :func:`_log_point`,
    ``ln(1 + peak channel context)`` and ``ln(1 + PIM lock-step tokens)``."""
    p = np.atleast_2d(np.asarray(points, dtype=np.float64))
    return np.concatenate([_log_point(p, request_cap), np.log1p(p[:, 5:7])], axis=1)


@dataclass
class _PhaseFit:
    S: list[np.ndarray] = field(default_factory=list)   # shape rows (surrogate_point)
    y: list[float] = field(default_factory=list)        # exact seconds
    gp: Any = None                                       # fitted regressor
    fitted_on: int = 0                                   # samples the regressor has seen
    tuned_on: int = 0                                    # samples at the last hyper-fit
    y_mean: float = 0.0                                  # mean ln(seconds) of the samples
    eligible: int = 0                                    # iterations the surrogate could time
    next_check: float = 0.0                              # eligible count of the next check
    check_gap: float = 0.0                               # eligible iterations to the one after
    checks: list[float] = field(default_factory=list)  # out-of-sample relative errors
    reasons: dict[str, int] = field(default_factory=dict)  # exact iterations by gate reason


class SurrogateTimer:
    """Times most iterations with a Gaussian-process surrogate calibrated online on exact ones.

    Model. Per phase (decode / prefill / mixed) the samples are the iterations timed by
    ``exact``. A Gaussian process (Rasmussen & Williams, *Gaussian Processes for Machine
    Learning*, 2006, ch. 2 and 5; scikit-learn's ``GaussianProcessRegressor``) regresses
    ``ln(seconds)`` on the shape of :func:`_gp_inputs` (request count capped at
    ``request_cap``, see :func:`_log_point`; Σ q, Σ decode context,
    √Σ prefill q·context, peak channel context, the PIM lock-step tokens of
    :func:`pim_lockstep_tokens` when ``sub_batches`` is given, all ``ln(1 + x)``) with the kernel
    ``constant × RBF(one length scale per input) + white noise`` around the samples' mean (bounds
    :data:`AMPLITUDE_BOUNDS`, :data:`LENGTH_SCALE_BOUNDS`, :data:`NOISE_BOUNDS`);
    hyper-parameters are refitted by maximum marginal likelihood whenever the samples grew by a
    quarter, the conditioning after every new sample. Working in ``ln(seconds)`` makes the
    errors relative. The white-noise term absorbs what the shape does not determine (e.g. how
    the requests of a channel split into sub-batches).

    Gate. An iteration is timed exactly when: its phase has fewer than ``min_samples`` samples;
    the posterior standard deviation of the *latent* ``ln(seconds)`` (white noise excluded) at
    its shape exceeds ``tolerance`` (0.02 ≈ 2 % relative), i.e. the samples do not determine its
    time well enough (far from every sample, or where the time bends); it is farther than
    ``max_distance`` from every sample in the log space of :func:`_log_point` (Chebyshev; 0.5 ≈
    65 % in the most different axis: a guard against confident extrapolation from few
    samples, whose hyper-parameters are poorly determined); or it is a check: the
    ``check_every``-th iteration of its phase that the surrogate would have timed, then with
    gaps growing ``check_growth``-fold (default 2: the 100th, 300th, 700th, 1,500th...; 1:
    every ``check_every``-th), so that a long steady run does not spend most of its exact
    samples on checks (1,000 ShareGPT requests, GPT3-7B: 20 of 41 decode samples at a fixed
    100, ≈ 10 s each). A check keeps the surrogate's prediction, uses the exact time and makes
    it a sample. The checks' out-of-sample relative errors are :meth:`error_report`: the error
    of what the surrogate delivers.
    Other iterations get ``(prediction, "surrogate")`` (the posterior mean). If ``exact`` has a
    ``lookup(mix)`` method (:class:`CachingTimer`), a cached time is returned as ``reused`` first.

    ``sub_batches`` / ``sub_batch_policy``: the machine's decode sub-batches and their policy
    (``system.sub_batches``, ``system.sub_batch_policy``) when its decode attention runs on PIM
    (:func:`make_timer <archsim.serving.scheduler.make_timer>` passes them); None leaves the
    lock-step input at 0.

    Raises:
        ArchsimError: ``min_samples`` or ``check_every`` below 1, ``check_growth`` below 1,
            ``tolerance`` or ``max_distance`` not > 0, ``sub_batches`` below 1, or a
            ``sub_batch_policy`` not in :data:`mapping.subbatch.SUB_BATCH_POLICIES`.
    """

    def __init__(self, exact: IterationTimer, min_samples: int = 3, check_every: int = 100,
                 tolerance: float = 0.02, max_distance: float = 0.5,
                 request_cap: int = 4, check_growth: float = 2.0,
                 sub_batches: int | None = None, sub_batch_policy: str = "half") -> None:
        from mapping.subbatch import SUB_BATCH_POLICIES

        if (min_samples < 1 or check_every < 1 or not check_growth >= 1 or not tolerance > 0
                or not max_distance > 0):
            raise ArchsimError("surrogate: min_samples and check_every must be >= 1, "
                               "check_growth >= 1, tolerance and max_distance > 0 (got "
                               f"{min_samples}, {check_every}, {check_growth}, {tolerance}, "
                               f"{max_distance})")
        if sub_batches is not None and int(sub_batches) < 1:
            raise ArchsimError(f"surrogate: sub_batches must be >= 1 or None, got {sub_batches}")
        if sub_batch_policy not in SUB_BATCH_POLICIES:
            raise ArchsimError(f"surrogate: sub_batch_policy {sub_batch_policy!r} not one of "
                               f"{list(SUB_BATCH_POLICIES)}")
        self.sub_batches = None if sub_batches is None else int(sub_batches)
        self.sub_batch_policy = sub_batch_policy
        self.exact = exact
        self.min_samples, self.check_every = int(min_samples), int(check_every)
        self.check_growth = float(check_growth)
        self.tolerance, self.max_distance = float(tolerance), float(max_distance)
        self.request_cap = max(1, int(request_cap))
        self.fits: dict[str, _PhaseFit] = {}

    # -- model ---------------------------------------------------------------------------
    def _point(self, mix: IterationMix) -> np.ndarray:
        """:func:`surrogate_point` of ``mix`` on this machine's sub-batches."""
        return surrogate_point(mix, self.sub_batches, self.sub_batch_policy)

    def _fit(self, f: _PhaseFit) -> None:
        """Refit the phase's GP; the kernel hyper-parameters are re-optimised when the samples
        grew by a quarter since the last optimisation (else the conditioning only, O(n³) with
        n samples)."""
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        X = _gp_inputs(np.array(f.S), self.request_cap)
        y = np.log(np.maximum(np.array(f.y), 1e-30))
        n = len(f.y)
        f.y_mean = float(y.mean())
        if f.gp is None or n >= 1.25 * f.tuned_on:
            kernel = (ConstantKernel(0.1, AMPLITUDE_BOUNDS)
                      * RBF(np.ones(X.shape[1]), LENGTH_SCALE_BOUNDS)
                      + WhiteKernel(1e-5, NOISE_BOUNDS))
            gp = GaussianProcessRegressor(kernel, normalize_y=False, n_restarts_optimizer=0)
            f.tuned_on = n
        else:
            gp = GaussianProcessRegressor(f.gp.kernel_, normalize_y=False, optimizer=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(X, y - f.y_mean)
        f.gp, f.fitted_on = gp, n

    def _posterior(self, f: _PhaseFit, s: np.ndarray) -> tuple[float, float] | None:
        """``(predicted seconds, latent std of ln seconds)`` at shape ``s``, or None without
        samples."""
        if not f.y:
            return None
        if len(f.y) == 1:
            return f.y[0], math.inf
        if f.gp is None or f.fitted_on != len(f.y):
            self._fit(f)
        gp = f.gp
        mu, sd = gp.predict(_gp_inputs(s, self.request_cap), return_std=True)
        noise = float(gp.kernel_.k2.noise_level)
        latent = math.sqrt(max(float(sd[0]) ** 2 - noise, 0.0))
        return float(np.exp(mu[0] + f.y_mean)), latent

    def _near(self, f: _PhaseFit, s: np.ndarray) -> bool:
        """A sample lies within ``max_distance`` of ``s`` (Chebyshev, :func:`_log_point`)."""
        c = self.request_cap
        d = np.abs(_log_point(np.array(f.S), c) - _log_point(s, c)).max(axis=1)
        return bool(d.min() <= self.max_distance)

    def predict(self, mix: IterationMix) -> float | None:
        """Surrogate time of ``mix`` (s), or None when its phase has no samples yet."""
        f = self.fits.get(mix.phase)
        post = None if f is None else self._posterior(f, self._point(mix))
        return None if post is None else post[0]

    # -- timer ---------------------------------------------------------------------------
    def time(self, mix: IterationMix) -> tuple[float, str]:
        """``(seconds, source)``: reused, exact (the exact timer's source) or ``surrogate``."""
        lookup = getattr(self.exact, "lookup", None)
        if lookup is not None:
            hit = lookup(mix)
            if hit is not None:
                self.exact.hits += 1  # type: ignore[attr-defined]
                return hit, "reused"
        f = self.fits.setdefault(mix.phase, _PhaseFit())
        s = self._point(mix)
        post = self._posterior(f, s) if len(f.y) >= self.min_samples else None
        check = False
        if post is None or not post[0] > 0:
            why = "calibrating"
        elif post[1] > self.tolerance:
            why = "uncertain"
        elif not self._near(f, s):
            why = "far"
        else:
            why = "check"
            f.eligible += 1
            if f.check_gap == 0:
                f.next_check = f.check_gap = float(self.check_every)
            check = f.eligible >= f.next_check
            if not check:
                return post[0], "surrogate"
            f.check_gap *= self.check_growth
            f.next_check += f.check_gap
        f.reasons[why] = f.reasons.get(why, 0) + 1
        t, src = self.exact.time(mix)
        if check and post is not None and t > 0:
            f.checks.append(abs(post[0] - t) / t)
        f.S.append(s)
        f.y.append(t)
        return t, src

    def error_report(self) -> dict[str, Any]:
        """Out-of-sample relative error of the surrogate on its check iterations:
        ``{"checked": n, "mean": ..., "p95": ..., "max": ..., "by_phase": {...}}`` (fractions;
        None when nothing was checked; ``by_phase`` adds the exact ``samples`` per phase and
        ``samples_by_reason``: how many were timed exactly because the phase was still
        ``calibrating`` (fewer than ``min_samples``), the surrogate was ``uncertain`` (latent std
        above ``tolerance``), the shape was ``far`` from every sample, or as a ``check``)."""
        allc = [e for f in self.fits.values() for e in f.checks]

        def stats(v: list[float]) -> dict[str, Any]:
            if not v:
                return {"checked": 0, "mean": None, "p95": None, "max": None}
            a = np.array(v)
            return {"checked": int(a.size), "mean": float(a.mean()),
                    "p95": float(np.percentile(a, 95)), "max": float(a.max())}

        out = stats(allc)
        out["by_phase"] = {p: dict(stats(f.checks), samples=len(f.y),
                                   samples_by_reason=dict(f.reasons))
                           for p, f in self.fits.items()}
        return out

    def describe(self) -> str:
        """What the timer is."""
        return (f"{self.exact.describe()} + Gaussian-process surrogate (online; exact while "
                f"a phase has fewer than {self.min_samples} samples (calibrating), where the "
                f"posterior std of ln time exceeds {self.tolerance:g} (uncertain), where the "
                f"shape is farther than {math.exp(self.max_distance) - 1:.0%} from every "
                f"sample in some axis (far), and as a check the {self.check_every}th "
                f"iteration it could time, then at gaps growing {self.check_growth:g}-fold)")


def measure_surrogate_error(surrogate: SurrogateTimer, exact: IterationTimer,
                            mixes: Iterable[IterationMix]) -> dict[str, Any]:
    """Relative error ``|surrogate − exact| / exact`` on ``mixes`` (e.g. a sample of a run's
    iterations), without changing the surrogate.

    Returns ``{"n", "mean", "p95", "max", "uncalibrated"}`` (fractions; ``uncalibrated`` counts
    mixes whose phase the surrogate cannot predict).
    """
    errs, unc = [], 0
    for mix in mixes:
        p = surrogate.predict(mix)
        if p is None:
            unc += 1
            continue
        t, _ = exact.time(mix)
        errs.append(abs(p - t) / t)
    a = np.array(errs) if errs else np.array([np.nan])
    return {"n": len(errs), "mean": float(np.nanmean(a)) if errs else None,
            "p95": float(np.nanpercentile(a, 95)) if errs else None,
            "max": float(np.nanmax(a)) if errs else None, "uncalibrated": unc}


__all__ = ["surrogate_point", "pim_lockstep_tokens", "LOCKSTEP_REQUEST_TOKENS",
           "AMPLITUDE_BOUNDS", "LENGTH_SCALE_BOUNDS", "NOISE_BOUNDS",
           "SurrogateTimer", "measure_surrogate_error"]
