"""Feature ablation of NeuPIMs (issue 23): its features added one at a time on one workload.

NeuPIMs (Heo et al., ASPLOS 2024) argues feature by feature from a naive NPU+PIM baseline —
Newton-style PIM (He et al., MICRO 2020) in blocked mode — to the full design. The steps of
:data:`ABLATION_STEPS` are cumulative ``--set`` overrides of the ``npu-pim-blocked`` preset:

1. ``newton-blocked`` — Newton commands (G_ACT, separate COMPs and READRES, PREA), one row
   buffer per bank (a channel serves memory traffic or PIM, never both), round-robin channel
   assignment, no sub-batch interleaving: the ``npu-pim-blocked`` preset.
2. ``+fused-commands`` — ``pim.commands: neupims`` (PIM_HEADER, fused PIM_GEMV, PIM_PRECHARGE):
   the ``npu-pim-blocked-fused`` preset.
3. ``+dual-row-buffers`` — ``pim.row_buffer_mode: dual`` (memory traffic beside PIM).
4. ``+min-load-channels`` — ``system.channel_policy: min_load`` (KV cache of each request on the
   least loaded channel instead of round-robin).
5. ``+sub-batch-interleaving`` — ``system.sub_batches: 2`` (two sub-batches, the GEMMs of one
   beside the PIM attention of the other): the ``neupims`` preset (this step's machine is the
   neupims machine but for its name; ``tests/test_ablation.py`` checks it).
6. ``+auto-sub-batches`` — ``system.sub_batches: auto`` (the runtime simulates 1 to
   ``system.max_sub_batches`` sub-batches and keeps the fastest, :mod:`archsim.system.core`):
   interleaving only where it pays (it loses when the weight stream bounds the stage).

Every step runs one decode iteration of the same requests (same lengths; channels placed by
the step's own channel policy), like ``archsim compare``. The step gain is a step's
throughput over the previous step's; the total gain over step 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from archsim.config import MachineConfig, load_config
from archsim.errors import ArchsimError

BASE_PRESET = "npu-pim-blocked"


@dataclass(frozen=True, slots=True)
class AblationStep:
    """One feature added: its name, what it changes, and the override that adds it.

    Attributes:
        name: label of the step (``+dual-row-buffers``).
        feature: one line saying what the step adds (and its source).
        override: the ``key=value`` added to the previous steps' overrides (``""`` for the
            baseline).
    """

    name: str
    feature: str
    override: str


ABLATION_STEPS: tuple[AblationStep, ...] = (
    AblationStep("newton-blocked", "Newton PIM (G_ACT, COMPs, READRES, PREA), one row buffer "
                 "per bank, round-robin channels, no interleaving (NeuPIMs' naive NPU+PIM)", ""),
    AblationStep("+fused-commands", "PIM_HEADER, fused PIM_GEMV, PIM_PRECHARGE (NeuPIMs §4)",
                 "pim.commands=neupims"),
    AblationStep("+dual-row-buffers", "memory and PIM row buffers per bank: memory traffic "
                 "beside PIM (NeuPIMs §4)", "pim.row_buffer_mode=dual"),
    AblationStep("+min-load-channels", "KV cache of a request on the least loaded channel "
                 "(NeuPIMs §5)", "system.channel_policy=min_load"),
    AblationStep("+sub-batch-interleaving", "two sub-batches: GEMMs of one beside the PIM "
                 "attention of the other (NeuPIMs §5)", "system.sub_batches=2"),
    AblationStep("+auto-sub-batches", "the sub-batch count (1..max_sub_batches) that is fastest "
                 "for this batch, chosen per iteration", "system.sub_batches=auto"),
)
"""The steps, in order; each keeps the overrides of the steps before it."""

VARIED_KEYS: tuple[str, ...] = tuple(dict.fromkeys(s.override.split("=")[0]
                                                   for s in ABLATION_STEPS if s.override))
"""The keys the ablation sets itself (a user override of one of them is rejected)."""


@dataclass(slots=True)
class AblationRow:
    """One step's result.

    Attributes:
        step: the :class:`AblationStep`; overrides: every override of the step (cumulative).
        tokens_per_s: decode throughput (tokens/s, all devices); cycles_per_iteration: NPU
            cycles of the iteration; step_gain: ``tokens_per_s`` over the previous step's (1.0
            for the first); total_gain: over the first step's.
        result: the :class:`archsim.results.IterationResult`.
    """

    step: AblationStep
    overrides: tuple[str, ...]
    tokens_per_s: float
    cycles_per_iteration: float
    step_gain: float
    total_gain: float
    result: Any

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the full result)."""
        return {"step": self.step.name, "feature": self.step.feature,
                "overrides": list(self.overrides), "tokens_per_s": self.tokens_per_s,
                "cycles_per_iteration": self.cycles_per_iteration,
                "step_gain": self.step_gain, "total_gain": self.total_gain}


def check_overrides(overrides: Sequence[str]) -> None:
    """Raise ArchsimError (one line) when a user override sets a key the ablation varies."""
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in VARIED_KEYS:
            raise ArchsimError(f"--set {o}: the ablation varies {key} itself (steps: "
                               f"{', '.join(s.name for s in ABLATION_STEPS)}); other keys may "
                               "be set")


def step_configs(overrides: Sequence[str] = ()) -> list[tuple[AblationStep, tuple[str, ...],
                                                               MachineConfig]]:
    """``(step, its cumulative overrides, its machine)`` for every step; ``overrides`` (the
    user's ``--set``) are applied to every step after the step's own.

    Raises:
        ArchsimError: a user override of a varied key; ConfigError: a bad override.
    """
    check_overrides(overrides)
    out = []
    sets: list[str] = []
    for st in ABLATION_STEPS:
        if st.override:
            sets.append(st.override)
        cfg = load_config(BASE_PRESET, [*sets, *overrides])
        out.append((st, tuple(sets), cfg))
    return out


def run_ablation(model: Any, batch: Any, overrides: Sequence[str] = (),
                 check_capacity: bool = True,
                 progress: Callable[[str], None] | None = None,
                 jobs: int = 1) -> list[AblationRow]:
    """One decode iteration of ``batch`` (a ``workloads.requests.Batch``; its lengths) on every
    step of :data:`ABLATION_STEPS`; ``progress(step name)`` as each finishes. ``jobs``: worker
    processes (:func:`archsim.serving.run_simulations`; 1 = in this process): the steps are
    independent simulations, so the rows are the same for any ``jobs``.

    Raises:
        ArchsimError: a varied key overridden, a step's KV capacity exceeded (before the first
            simulation, when ``check_capacity``), ``jobs < 1``, or a simulation failure.
    """
    from archsim import serving as sv
    from mapping.channels import place_channels

    steps = step_configs(overrides)
    placed = [place_channels(batch, cfg.memory.org.channels, cfg.system.channel_policy)
              for _, _, cfg in steps]
    if check_capacity:
        for (_, _, cfg), b in zip(steps, placed):
            sv.check_batch_fits(cfg, model, b)
    results: list[Any] = [None] * len(steps)

    def done(i: int, res: Any) -> None:
        results[i] = res
        if progress:
            progress(steps[i][0].name)

    sv.run_simulations(sv.system_cell,
                       [(cfg, model, b, st.name, {"with_events": False})
                        for (st, _, cfg), b in zip(steps, placed)],
                       [cfg for _, _, cfg in steps], jobs, done)
    rows: list[AblationRow] = []
    for (st, sets, _), res in zip(steps, results):
        tps = res.tokens_per_s
        prev = rows[-1].tokens_per_s if rows else tps
        first = rows[0].tokens_per_s if rows else tps
        rows.append(AblationRow(st, sets, tps, res.cycles_per_iteration, tps / prev,
                                tps / first, res))
    return rows


__all__ = ["AblationStep", "AblationRow", "ABLATION_STEPS", "VARIED_KEYS", "BASE_PRESET",
           "check_overrides", "step_configs", "run_ablation"]
