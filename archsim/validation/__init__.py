"""Golden validation against PyTorch (DESIGN §5.1): the very programs the mapper emits,
executed on values through the simulated memory layout, reproduce PyTorch's outputs.

* :func:`validate` — one call: model (registry name or ``config.json``), system, batch size,
  dtype, seed, decode steps -> :class:`ValidationReport` (see :mod:`archsim.validation.core`).
* :mod:`archsim.validation.bounds` — the tolerance: running error bounds derived from the
  reduction lengths and unit roundoffs (docs/validation.md).
* :mod:`archsim.validation.reference` / :mod:`archsim.validation.hf` — PyTorch references:
  the project's own model, or Hugging Face ``transformers`` GPT-2 / LLaMA (optional extra).
* :mod:`archsim.validation.importer` — a user's ``torch.nn.Module`` decoder layer to a workloads
  model spec, operator graph and weights through ``torch.export``
  (:func:`~archsim.validation.importer.import_decoder_layer`,
  :func:`~archsim.validation.importer.validate_imported_layer`).

Modules that need torch import it lazily (importing this package does not load torch).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from archsim.validation.core import (TensorCheck, ValidationError, ValidationReport,
                                     prompt_tokens, run_validation)

#: ``--system`` names (as ``archsim run``) -> presets.
SYSTEMS: dict[str, str] = {"neupims": "neupims", "npu-pim": "npu-pim-blocked",
                           "npu": "npu-only"}
DTYPES = ("fp32", "fp16", "bf16")
#: Prompt lengths used first: one token, past one 32-bank key row group, past one 128-token
#: PIM value run, and a few in between.
INTERESTING_PROMPT_LENS = (3, 40, 130, 1, 17, 64, 97, 9)


def resolve_system(system: str, overrides: list[str] | tuple[str, ...] = ()):
    """``npu`` / ``npu-pim`` / ``neupims``, a preset name or a YAML file -> ``(label, cfg)``.

    Raises:
        ValidationError / ConfigError: unknown name or a GPU system (no ISA program).
    """
    from archsim.config import list_presets, load_config

    s = str(system).strip()
    if s in SYSTEMS:
        cfg = load_config(SYSTEMS[s], list(overrides))
        label = s
    elif s in list_presets() or s.endswith((".yaml", ".yml")) or Path(s).is_file():
        cfg = load_config(s, list(overrides))
        label = next((k for k, v in SYSTEMS.items() if v == s), cfg.name)
    else:
        raise ValidationError(f"unknown system {s!r}; valid systems: {', '.join(SYSTEMS)} (or a "
                              f"preset: {', '.join(list_presets())}, or a YAML config file)")
    if "gpu" in cfg.system.engines:
        raise ValidationError(f"system {s!r} is the GPU roofline model: it runs no ISA program, "
                              "there is nothing to validate")
    return label, cfg


def resolve_model(model: str):
    """Registry name or a Hugging Face ``config.json`` (or its directory) -> ModelSpec."""
    from workloads.models import get_model, load_hf_config

    if model.endswith(".json") or Path(model).is_dir():
        return load_hf_config(model)
    return get_model(model)


def default_prompt_lens(n: int, seed: int, max_len: int) -> list[int]:
    """``n`` prompt lengths: :data:`INTERESTING_PROMPT_LENS` first, then drawn from ``seed``;
    clipped to ``1..max_len``."""
    rng = np.random.default_rng([int(seed), 11])
    out = list(INTERESTING_PROMPT_LENS[:n])
    while len(out) < n:
        out.append(int(rng.integers(1, 100)))
    return [max(1, min(int(x), max_len)) for x in out]


def validate(model: str = "tiny-gpt", system: str = "neupims", batch: int = 3,
             dtype: str = "fp16", seed: int = 0, steps: int = 2,
             prompt_lens: list[int] | None = None, overrides: list[str] | tuple[str, ...] = (),
             channels: list[int] | None = None, request_ids: list[int] | None = None,
             options=None, progress: Callable[[str], None] | None = None) -> ValidationReport:
    """Validate ``model`` on ``system`` against the project's PyTorch reference.

    Args:
        model: ``tiny-gpt``, ``tiny-llama`` (any registry name) or a ``config.json`` path.
        system: ``npu``, ``npu-pim``, ``neupims``, a preset or a YAML config.
        batch: requests (prompts of different lengths, see :func:`default_prompt_lens`).
        dtype: device storage type ``fp32``, ``fp16`` or ``bf16``.
        seed: seed of the weights (the reference model's) and the prompts.
        steps: decode steps.
        prompt_lens: explicit prompt lengths (overrides ``batch``).
        overrides: ``--set`` config overrides.
        channels: pin each request's KV channel.
        request_ids: request ids (default ``0..n-1``); a request's prompt depends only on the
            seed and its id.
        options: base ``mapping.compiler.CompileOptions``.
        progress: per-step progress callback.

    Raises:
        ValidationError, ConfigError, WorkloadError, MappingError, SimulationError.
    """
    from archsim.validation.reference import ModelReference

    if dtype not in DTYPES:
        raise ValidationError(f"dtype {dtype!r} not one of {list(DTYPES)}")
    if batch < 1:
        raise ValidationError(f"batch must be >= 1, got {batch}")
    spec = resolve_model(model)
    label, cfg = resolve_system(system, overrides)
    lens = list(prompt_lens) if prompt_lens else default_prompt_lens(
        batch, seed, spec.max_seq_len - steps)
    ref = ModelReference(spec, seed, dtype)
    return run_validation(ref, cfg, system=label, prompt_lens=lens, steps=steps, seed=seed,
                          channels=channels, request_ids=request_ids, options=options,
                          progress=progress)


__all__ = ["validate", "run_validation", "ValidationReport", "TensorCheck", "ValidationError",
           "resolve_system", "resolve_model", "default_prompt_lens", "prompt_tokens", "SYSTEMS",
           "DTYPES"]
