"""Systems: a name → a machine, one iteration of a batch on it, and its KV-cache budget.

* :func:`resolve_system` — a system name (``neupims``, ``npu-pim``, ``npu``, ``gpu``: the presets
  of :data:`SYSTEM_PRESETS`), preset or YAML file, plus ``--set`` overrides →
  ``(label, MachineConfig)``; :func:`is_gpu` tells the GPU baseline apart.
* :func:`simulate_system_iteration` — one iteration of one system: the GPU model
  (:func:`archsim.gpu.simulate_gpu_iteration`) or the cycle-level simulator
  (:func:`archsim.system.simulate_iteration`). Nothing here counts a cycle.
* :func:`compile_options` — the compiler options of a run (channels kept or placed by policy).
* KV capacity (:func:`kv_budget`, :func:`check_batch_fits`): the device's memory
  (``memory.org`` capacity, or ``gpu.memory_bytes`` for the GPU) minus the weights one device
  holds (its tensor-parallel share of its pipeline stage's layers, plus the embedding or LM head
  share), divided by the KV bytes of one token on one device
  (``ModelSpec.kv_cache_bytes_per_token(tp)`` × layers of a stage / layers). Activations and PIM
  row-alignment padding are not reserved. A request of ``L`` tokens holds ``L`` of them, or
  ``min(L, W)`` with a sliding window ``W`` (:func:`kv_tokens_held`: the rolling buffer of
  :mod:`mapping.memplan`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from archsim.config import MachineConfig, list_presets, load_config, parallel_degrees
from archsim.errors import ArchsimError
from archsim.gpu import simulate_gpu_iteration
from archsim.results import IterationResult
from archsim.system import simulate_iteration

#: ``archsim run --system`` names → preset names.
SYSTEM_PRESETS: dict[str, str] = {
    "neupims": "neupims",
    "npu-pim": "npu-pim-blocked",
    "npu": "npu-only",
    "gpu": "gpu-a100",
}


def resolve_system(system: str | MachineConfig,
                   overrides: Sequence[str] = ()) -> tuple[str, MachineConfig]:
    """Turn a system name, preset name or YAML path (or a config) into ``(label, config)``.

    ``neupims``, ``npu-pim``, ``npu`` and ``gpu`` map to the presets of :data:`SYSTEM_PRESETS`
    (label = the system name); any other preset or a ``.yaml`` file is loaded as such (label =
    the config's ``name``).

    Raises:
        ArchsimError: unknown name (lists the systems and presets) or an invalid config /
            override (:class:`archsim.errors.ConfigError`, naming file, key and allowed values).
    """
    if isinstance(system, MachineConfig):
        if overrides:
            raise ArchsimError("overrides need a system name or file, not a loaded config")
        return system.name, system
    s = str(system).strip()
    if s in SYSTEM_PRESETS:
        return s, load_config(SYSTEM_PRESETS[s], list(overrides))
    if s in list_presets() or s.endswith((".yaml", ".yml")) or Path(s).is_file():
        cfg = load_config(s, list(overrides))
        label = next((k for k, v in SYSTEM_PRESETS.items() if v == s), cfg.name)
        return label, cfg
    raise ArchsimError(f"unknown system {s!r}; valid systems: {', '.join(SYSTEM_PRESETS)} "
                       f"(or a preset: {', '.join(list_presets())}, or a YAML config file)")


def is_gpu(cfg: MachineConfig) -> bool:
    """True when the configuration is the GPU-only baseline (``system.engines: [gpu]``)."""
    return "gpu" in cfg.system.engines



def simulate_system_iteration(cfg: MachineConfig, model: Any, batch: Any,
                              phase: str = "decode", system: str | None = None,
                              **kwargs: Any) -> IterationResult:
    """One iteration of ``batch`` on the system described by ``cfg``.

    GPU configurations use :func:`archsim.gpu.simulate_gpu_iteration` (its gpu.mode); every
    other one calls ``archsim.system.simulate_iteration(cfg, model, batch, phase=phase,
    **kwargs)`` (cycle-level). ``system`` (default ``cfg.name``) is written into the result.

    Args:
        cfg: the machine; model: a ``ModelSpec``; batch: a ``workloads.requests.Batch``.
        phase: ``decode``, ``prefill`` or (cycle-level only) ``mixed``.

    Raises:
        ArchsimError: the simulation fails.
        WorkloadError: a request longer than the model's context (names its index).
    """
    label = system or cfg.name
    if is_gpu(cfg):
        res = simulate_gpu_iteration(cfg, model, batch, phase=phase, system=label,
                                     with_events=kwargs.get("with_events", True))
    else:
        res = simulate_iteration(cfg, model, batch, phase=phase, **kwargs)
    res.system = label
    return res


def compile_options(keep_channels: bool = False) -> Any:
    """The ``mapping.compiler.CompileOptions`` of a run: the trace's channels kept, or placed
    by the machine's policy (:mod:`mapping.channels`)."""
    from mapping.compiler import CompileOptions

    return CompileOptions(channels="keep" if keep_channels else "policy")


# --------------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KvBudget:
    """Memory of one device split between weights and KV cache.

    Attributes:
        device_bytes: memory of one device; device_key: the config key it comes from.
        weight_bytes: weights held by the most loaded device (tensor-parallel share of a
            pipeline stage's layers plus the embedding or LM head share).
        kv_bytes_per_token: KV-cache bytes of one token on one device (its stage's layers, its
            KV heads).
        capacity_tokens: ``(device_bytes − weight_bytes) // kv_bytes_per_token``.
    """

    device_bytes: int
    device_key: str
    weight_bytes: int
    kv_bytes_per_token: int
    capacity_tokens: int

    def describe(self) -> str:
        """One line: capacity, weights and what remains for the KV cache."""
        gib = 2**30
        return (f"{self.device_bytes / gib:.1f} GiB per device ({self.device_key}) − "
                f"{self.weight_bytes / gib:.2f} GiB weights = "
                f"{(self.device_bytes - self.weight_bytes) / gib:.2f} GiB KV cache = "
                f"{self.capacity_tokens:,} tokens at {self.kv_bytes_per_token:,} B/token")


def _ep(cfg: MachineConfig, model: Any) -> int:
    """``system.expert_parallel`` for a mixture of experts (checked:
    :func:`mapping.moe.expert_parallel` names the key), 1 otherwise (a dense model with the
    key set is refused by the compiler, naming it)."""
    if not getattr(model, "n_experts", None):
        return 1
    from mapping.moe import expert_parallel

    return expert_parallel(model, cfg)


def kv_budget(cfg: MachineConfig, model: Any) -> KvBudget:
    """KV-cache capacity of one device of the system (see the module docstring).

    Raises:
        ArchsimError: the weights alone do not fit the device (names both sizes and the key).
    """
    tp, pp = parallel_degrees(cfg, model)
    if is_gpu(cfg):
        dev, key = int(cfg.gpu.memory_bytes), "gpu.memory_bytes"
    else:
        dev, key = int(cfg.memory.org.capacity_bytes), "memory.org (channels × banks × rows × page)"
    per_stage = model.n_layers // pp
    ep = _ep(cfg, model)              # a device holds n_experts / ep experts
    layers = per_stage * model.layer_param_count(tp, ep)
    emb = math.ceil(model.embedding_param_count() / tp)
    head = math.ceil(model.head_param_count() / tp)
    params = layers + (emb + head if pp == 1 else max(emb, head))
    weight = params * model.dtype_bytes
    kv_tok = model.kv_cache_bytes_per_token(tp) * per_stage // model.n_layers
    if weight >= dev:
        raise ArchsimError(
            f"memory capacity: the weights of model '{model.name}' need {weight / 2**30:.2f} GiB "
            f"per device (tensor_parallel={tp}, pipeline_parallel={pp}) but a device has "
            f"{dev / 2**30:.2f} GiB ({key})")
    return KvBudget(dev, key, weight, kv_tok, (dev - weight) // kv_tok)


def kv_tokens_held(lengths: Any, window: int | None) -> np.ndarray:
    """KV-cache tokens each request holds: int64 ``[n]``, ``min(L, W)`` with a sliding window
    ``W`` (the rolling buffer the mapping keeps, :meth:`ModelSpec.kv_len`), ``L`` with full
    attention (``window`` None). ``lengths``: tokens per request (context, plus what it will
    still generate when reserving)."""
    n = np.asarray(lengths, dtype=np.int64)
    return n if window is None else np.minimum(n, int(window))


def check_batch_fits(cfg: MachineConfig, model: Any, batch: Any,
                     extra_tokens_per_request: int = 0) -> KvBudget:
    """Check that ``batch``'s KV cache fits one device: Σ over requests of ``seq_len + extra``
    tokens, each at most the model's ``sliding_window`` (:func:`kv_tokens_held`); with expert
    parallelism the requests of the most loaded device group (batch positions ``g, g + ep,
    ...``).

    Raises:
        ArchsimError: naming the resource (KV cache after weights), what the batch needs and
            what is available.
    """
    bud = kv_budget(cfg, model)
    held = kv_tokens_held([r.seq_len + extra_tokens_per_request for r in batch],
                          getattr(model, "sliding_window", None))
    ep = _ep(cfg, model)              # expert parallel: device g holds positions g, g + ep, ...
    need = int(max(held[g::ep].sum() for g in range(ep)))
    if need > bud.capacity_tokens:
        win = getattr(model, "sliding_window", None)
        held = "" if win is None else f" (at most {win:,} per request: the sliding window)"
        raise ArchsimError(
            f"memory capacity: the batch of {len(batch)} requests needs {need:,} KV-cache tokens"
            f"{held} "
            f"({need * bud.kv_bytes_per_token / 2**30:.2f} GiB per device) but only "
            f"{bud.capacity_tokens:,} fit: {bud.describe()}; use a smaller --batch or "
            f"--ignore-capacity")
    return bud


__all__ = ["SYSTEM_PRESETS", "resolve_system", "is_gpu", "simulate_system_iteration",
           "compile_options", "KvBudget", "kv_budget", "kv_tokens_held", "check_batch_fits",
           "parallel_degrees"]
