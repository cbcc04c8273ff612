"""Pipeline parallelism: the schedule of an iteration over ``S`` stages with ``M`` micro-batches
in flight, and the iteration of a batch split into micro-batches.

Model (GPipe: Huang et al., "GPipe: Efficient Training of Giant Neural Networks using Pipeline
Parallelism", NeurIPS 2019, §2.2, forward passes only). A system of ``pipeline_parallel = S``
stages holds ``L / S`` decoder layers per stage, one device (tensor-parallel group) each. The
iteration's batch is split into ``M`` micro-batches (``system.micro_batches``); micro-batch
``m`` runs stage ``s`` after it has left stage ``s − 1`` and its hidden state has crossed the
link (a hand-off) and after micro-batch ``m − 1`` has left stage ``s`` (each stage runs one
micro-batch at a time, in order); a link carries one hand-off at a time. With stage time
``t_m``, the last stage adding the LM head ``h_m`` and hand-off ``x_m``
(:func:`gpipe_schedule`)::

    start[m][s] = max(arrive[m][s], end[m−1][s]),    end[m][s] = start[m][s] + t_m (+ h_m at S−1)
    arrive[m][s+1] = max(end[m][s], link_free[s]) + x_m,   link_free[s] = arrive[m][s+1]

The iteration lasts until the last micro-batch leaves the last stage (``end[M−1][S−1]``): its
tokens / that time is the throughput; a request's token is out at its micro-batch's
``end[m][S−1]`` (its latency). With equal micro-batches and no hand-off or LM head the
iteration is ``(M + S − 1) t`` and the stages idle a fraction ``(S − 1) / (M + S − 1)`` of it
(the fill and drain bubble); :attr:`PipelineSchedule.bubble_fraction` is measured from the
schedule. ``M = 1`` is one batch in flight: ``S t + (S − 1) x + h``.

Consecutive iterations do not overlap: the serving scheduler admits requests and composes the
next batch at iteration boundaries, so every iteration fills and drains the pipeline (a
runtime that let micro-batch ``m`` start its next iteration as soon as it leaves the last stage
would hide the bubble once ``M ≥ S``; not modelled).

Stage times come from the cycle-level simulation of stage 0's layers of each micro-batch
(:func:`archsim.system.core.simulate`; every stage has the same layer shapes, so stages
``1 … S−1`` reuse stage 0's time), the hand-off from the program's ``SEND``
(:func:`archsim.system.core.pipeline_handoff_cycles`), the LM head from its closed form.
The micro-batches are the requests of each channel split as the sub-batches are
(:func:`mapping.subbatch.split_sub_batches`, ``system.sub_batch_policy``) after the batch's
KV channels are placed once (:func:`mapping.channels.assign_channels`): every micro-batch
spreads over the channels, and a request's KV stays where the placement put it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from archsim.config import MachineConfig, parallel_degrees
from archsim.errors import ArchsimError
from archsim.results import LayerTiming


@dataclass(frozen=True)
class PipelineSchedule:
    """The GPipe schedule of one iteration (NPU cycles; module docstring).

    Attributes:
        stages: ``S``; micro_batches: ``M``.
        finish_cycles: float64 ``[M]`` when each micro-batch leaves the last stage.
        makespan_cycles: the iteration (the last micro-batch out).
        busy_cycles: Σ over stages and micro-batches of stage occupancy.
    """

    stages: int
    micro_batches: int
    finish_cycles: np.ndarray
    makespan_cycles: float
    busy_cycles: float

    @property
    def bubble_fraction(self) -> float:
        """Share of the stages' time idle in the iteration: ``1 − busy / (S × makespan)``
        (``(S − 1) / (M + S − 1)`` for equal micro-batches without hand-off and LM head)."""
        if self.makespan_cycles <= 0:
            return 0.0
        return float(max(0.0, 1.0 - self.busy_cycles / (self.stages * self.makespan_cycles)))

    def report(self, f_mhz: float) -> dict[str, Any]:
        """JSON-able: stages, micro-batches, bubble fraction, iteration and per-micro-batch
        finish (cycles and seconds at ``f_mhz``)."""
        return {"stages": self.stages, "micro_batches": self.micro_batches,
                "bubble_fraction": self.bubble_fraction,
                "gpipe_bubble_fraction": (self.stages - 1) / (self.micro_batches
                                                              + self.stages - 1),
                "iteration_cycles": self.makespan_cycles,
                "finish_cycles": [float(x) for x in self.finish_cycles],
                "finish_s": [float(x) / (f_mhz * 1e6) for x in self.finish_cycles]}


def gpipe_schedule(stage_cycles: Sequence[float], stages: int,
                   handoff_cycles: Sequence[float] | float = 0.0,
                   last_stage_extra_cycles: Sequence[float] | float = 0.0) -> PipelineSchedule:
    """The GPipe schedule of ``M`` micro-batches over ``stages`` stages (module docstring).

    Args:
        stage_cycles: ``[M]`` time of each micro-batch in one stage (cycles).
        stages: ``S >= 1``.
        handoff_cycles: ``[M]`` (or one value) time of a micro-batch's hand-off between two
            stages, the link busy for all of it.
        last_stage_extra_cycles: ``[M]`` (or one value) added to the last stage (LM head).

    Raises:
        ArchsimError: no micro-batch, ``stages < 1`` or a negative time.
    """
    t = np.asarray(stage_cycles, dtype=np.float64).ravel()
    M = t.size
    x = np.broadcast_to(np.asarray(handoff_cycles, dtype=np.float64), (M,))
    h = np.broadcast_to(np.asarray(last_stage_extra_cycles, dtype=np.float64), (M,))
    if M == 0 or stages < 1:
        raise ArchsimError(f"pipeline schedule: {M} micro-batches over {stages} stages")
    if (t < 0).any() or (x < 0).any() or (h < 0).any():
        raise ArchsimError("pipeline schedule: negative stage, hand-off or LM head time")
    S = int(stages)
    end_prev = np.zeros(S)                 # end[m-1][s]
    link_free = np.zeros(max(S - 1, 0))
    finish = np.zeros(M)
    busy = 0.0
    for m in range(M):
        arrive = 0.0
        for s in range(S):
            start = max(arrive, end_prev[s])
            dur = t[m] + (h[m] if s == S - 1 else 0.0)
            end = start + dur
            busy += dur
            end_prev[s] = end
            if s < S - 1:
                arrive = max(end, link_free[s]) + x[m]
                link_free[s] = arrive
        finish[m] = end_prev[S - 1]
    return PipelineSchedule(S, M, finish, float(finish.max()), busy)


def split_micro_batches(cfg: MachineConfig, batch: Any, compile_options: Any,
                        n_micro: int) -> tuple[list[Any], str]:
    """The batch's channels placed once (:func:`mapping.channels.assign_channels`) and the
    requests of each channel split into ``n_micro`` micro-batches by
    :func:`mapping.subbatch.split_sub_batches` (``system.sub_batch_policy``).

    Returns:
        ``(micro-batches, channel placement in words)``; each micro-batch a
        :class:`workloads.requests.Batch` whose requests carry their channels.
    """
    from mapping.channels import assign_channels
    from mapping.subbatch import split_sub_batches
    from workloads.requests import Batch

    keep = getattr(compile_options, "channels", "policy") == "keep"
    placed, words = assign_channels(batch, cfg, keep=keep)
    asg = split_sub_batches(placed.seq_lens, placed.channels, n_micro,
                            cfg.system.sub_batch_policy)
    reqs = placed.requests
    groups = [asg.members(k) for k in range(asg.n_sub_batches)]
    out = [Batch(tuple(reqs[int(i)] for i in idx), source=placed.source)
           for idx in groups if idx.size]
    return out, words


def simulate_micro_batches(cfg: MachineConfig, model: Any, batch: Any, phase: str,
                           **kwargs: Any) -> Any:
    """One iteration of ``batch`` split into ``system.micro_batches`` micro-batches (at most
    one per request) in flight through the pipeline stages (module docstring).

    Each micro-batch is simulated by :func:`archsim.system.core.simulate` (one batch in
    flight, its channels kept); the result is the first micro-batch's with: the time of the
    :func:`gpipe_schedule`; tokens, context and energy summed; utilisations the micro-batches'
    work-weighted mean (a device's busy fraction while it runs a micro-batch; the bubble is
    reported apart); per-layer and per-stage times the micro-batches' sums scaled to the
    iteration; ``extra["pipeline"]`` the schedule and ``extra["micro_batches"]`` each
    micro-batch's requests, stage, hand-off and LM head cycles.

    Returns:
        :class:`archsim.system.core.SystemRun` (its window: the first micro-batch's).

    Raises:
        as :func:`archsim.system.core.simulate`.
    """
    from mapping.compiler import CompileOptions

    from archsim.system.core import simulate

    opts = kwargs.pop("compile_options", None) or CompileOptions()
    n_micro = min(int(cfg.system.micro_batches), len(batch))
    parts, words = split_micro_batches(cfg, batch, opts, n_micro)
    one = cfg.model_copy(update={"system": cfg.system.model_copy(update={"micro_batches": 1})})
    keep = replace(opts, channels="keep")
    runs = [simulate(one, model, b, phase, compile_options=keep, **kwargs) for b in parts]
    res = [r.result for r in runs]
    _, pp = parallel_degrees(cfg, model)
    stage = [float(r.extra["stage_cycles"]) for r in res]
    hand = [float(r.extra["pipeline_handoff_cycles"]) for r in res]
    lm = [float((r.extra.get("lm_head") or {}).get("cycles", 0.0)) for r in res]
    sched = gpipe_schedule(stage, pp, hand, lm)
    f_mhz = float(res[0].npu_freq_mhz)
    total = sched.makespan_cycles
    serial = [float(r.cycles_per_iteration) for r in res]
    scale = total / sum(serial)

    def wmean(attr: str) -> float | None:
        vals = [getattr(r, attr) for r in res]
        if any(v is None for v in vals):
            return None
        return float(sum(v * w for v, w in zip(vals, serial)) / sum(serial))

    bw = None
    if all(r.channel_bw_util is not None for r in res):
        bw = list(np.average(np.array([r.channel_bw_util for r in res]), axis=0,
                             weights=serial))
    layers = [LayerTiming(lt.index, c * scale / (f_mhz * 1e6), c * scale, lt.source,
                          lt.reused_from)
              for lt, c in zip(res[0].layers,
                               np.sum([[l.cycles for l in r.layers] for r in res], axis=0))]
    stages: dict[str, float] = {}
    for r in res:
        for k, v in r.stage_seconds.items():
            stages[k] = stages.get(k, 0.0) + v * scale
    energy = None
    if all(r.energy_j for r in res):
        energy = {}
        for r in res:
            for k, v in r.energy_j.items():  # type: ignore[union-attr]
                energy[k] = energy.get(k, 0.0) + v
    sizes = [len(b) for b in parts]
    lat = np.repeat(sched.finish_cycles, sizes)
    pipe = {**sched.report(f_mhz),
            "request_latency_cycles": {"mean": float(lat.mean()), "max": float(lat.max())},
            "request_latency_s": {"mean": float(lat.mean()) / (f_mhz * 1e6),
                                  "max": float(lat.max()) / (f_mhz * 1e6)}}
    extra = dict(res[0].extra)
    extra["pipeline"] = pipe
    extra["micro_batches"] = [
        {"requests": n, "stage_cycles": s, "pipeline_handoff_cycles": h, "lm_head_cycles": c,
         "finish_cycles": float(f)}
        for n, s, h, c, f in zip(sizes, stage, hand, lm, sched.finish_cycles)]
    extra["compile"] = {**extra.get("compile", {}), "channel_placement": words,
                        "channels": [int(c) for b in parts for c in b.channels]}
    notes = [n for n in res[0].notes if not n.startswith("pipeline parallel:")]
    notes.append(
        f"pipeline parallel: {pp} stages, {len(parts)} micro-batches in flight "
        f"({', '.join(map(str, sizes))} requests; requests of each channel split as "
        f"sub-batches are, '{cfg.system.sub_batch_policy}'), GPipe schedule (Huang et al., "
        f"NeurIPS 2019): the iteration ends when the last micro-batch leaves the last stage; "
        f"bubble {sched.bubble_fraction:.1%} of the stages' time (GPipe's (S-1)/(M+S-1) = "
        f"{pipe['gpipe_bubble_fraction']:.1%}); a request's token is out when its micro-batch "
        f"leaves the last stage: mean {pipe['request_latency_cycles']['mean']:,.0f}, max "
        f"{pipe['request_latency_cycles']['max']:,.0f} cycles; stage times simulated per "
        f"micro-batch; utilisations are a device's busy fraction while it runs a micro-batch, "
        f"layer and stage times the micro-batches' sums scaled to the iteration, energy their "
        f"sum (background counted over each micro-batch's own serial time); timeline events "
        f"and the stage-bound table are the first micro-batch's")
    if len(parts) < cfg.system.micro_batches:
        notes.append(f"system.micro_batches {cfg.system.micro_batches}: the batch has only "
                     f"{len(batch)} requests, so {len(parts)} micro-batches ran")
    first = res[0]
    out = replace(first, batch_size=sum(r.batch_size for r in res),
                  tokens=sum(r.tokens for r in res), cycles_per_iteration=total,
                  seconds_per_iteration=None, layers=layers, stage_seconds=stages,
                  npu_util=wmean("npu_util"), flops_util=wmean("flops_util"),
                  pim_util=wmean("pim_util"), channel_bw_util=bw, energy_j=energy,
                  context_tokens=sum(r.context_tokens for r in res), notes=notes, extra=extra)
    run0 = runs[0]
    return replace(run0, result=out)


__all__ = ["PipelineSchedule", "gpipe_schedule", "split_micro_batches",
           "simulate_micro_batches"]
