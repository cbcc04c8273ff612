"""Rotary position embedding frequencies, with the context-extension scaling of LLaMA 3.1.

One implementation of the frequencies ``f_i`` (``i < head_dim / 2``) that every RoPE table of
the project is built from (:func:`workloads.reference.rope_cos_sin`, used by the reference
models, the golden check and the functional tests): ``f_i = theta ** (-2 i / head_dim)``
(Su et al., "RoFormer", 2021), rescaled by :class:`RopeScaling` when the model has one.

``llama3`` scaling (Meta, "The Llama 3 Herd of Models", 2024, and Hugging Face transformers'
``_compute_llama3_parameters``): with ``L0 = original_max_position_embeddings`` and the
wavelength ``w_i = 2 pi / f_i``, frequencies of wavelength above ``L0 / low_freq_factor`` are
divided by ``factor``, those below ``L0 / high_freq_factor`` are kept, and those between are
interpolated with ``s = (L0 / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``:
``f_i' = (1 - s) f_i / factor + s f_i``. The attention scale is unchanged. Other scalings of
Hugging Face configs (linear, dynamic, YaRN, LongRoPE) are refused by :func:`parse_hf_rope_scaling`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workloads.errors import WorkloadError

ROPE_TYPES = ("llama3",)
"""RoPE scalings the project implements (``rope_type`` of a Hugging Face config)."""


@dataclass(frozen=True)
class RopeScaling:
    """LLaMA-3.1-style RoPE frequency scaling (module docstring).

    Attributes:
        rope_type: ``llama3``.
        factor: how much the long wavelengths are stretched (8 for LLaMA 3.1).
        low_freq_factor, high_freq_factor: the wavelength band that is interpolated (1, 4).
        original_max_position_embeddings: the context the model was pretrained at (8,192).

    Raises:
        WorkloadError: an unknown type or a non-positive / inverted parameter.
    """

    rope_type: str = "llama3"
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.rope_type not in ROPE_TYPES:
            raise WorkloadError(f"rope_scaling type {self.rope_type!r} not one of "
                                f"{list(ROPE_TYPES)}")
        if not (self.factor > 0 and 0 < self.low_freq_factor < self.high_freq_factor
                and self.original_max_position_embeddings > 0):
            raise WorkloadError(
                "rope_scaling: factor > 0, 0 < low_freq_factor < high_freq_factor and "
                f"original_max_position_embeddings > 0 are needed, got {self}")


LLAMA31_ROPE = RopeScaling()
"""The scaling of LLaMA 3.1 (meta-llama/Llama-3.1-8B config.json: factor 8, low/high frequency
factors 1 and 4, original context 8,192)."""


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None = None
                  ) -> np.ndarray:
    """The RoPE frequencies ``f_i`` (radians per position), float64 ``[head_dim / 2]`` (axis:
    the rotated pair ``i``), scaled per the module docstring when ``scaling`` is given."""
    f = theta ** (-np.arange(head_dim // 2, dtype=np.float64) * 2.0 / head_dim)
    if scaling is None:
        return f
    L0 = scaling.original_max_position_embeddings
    low_wl, high_wl = L0 / scaling.low_freq_factor, L0 / scaling.high_freq_factor
    wl = 2 * math.pi / f
    scaled = np.where(wl > low_wl, f / scaling.factor, f)
    s = (L0 / wl - scaling.low_freq_factor) / (scaling.high_freq_factor
                                               - scaling.low_freq_factor)
    smooth = (1 - s) * scaled / scaling.factor + s * scaled
    medium = ~(wl < high_wl) & ~(wl > low_wl)
    return np.where(medium, smooth, scaled)


def parse_hf_rope_scaling(cfg: dict, where: str) -> RopeScaling | None:
    """The RoPE scaling of a Hugging Face ``config.json``: ``rope_scaling`` (transformers 4.x)
    or ``rope_parameters`` (5.x) with ``rope_type`` (or ``type``) ``llama3``; None when absent
    or ``default``.

    Raises:
        WorkloadError: another scaling type (naming the key and the supported types) or a
            missing parameter.
    """
    for key in ("rope_scaling", "rope_parameters"):
        d = cfg.get(key)
        if not isinstance(d, dict):
            continue
        kind = d.get("rope_type", d.get("type", "default"))
        if kind in (None, "default"):
            continue
        if kind not in ROPE_TYPES:
            raise WorkloadError(f"{where}: {key}.rope_type {kind!r} is not supported; supported: "
                                f"default, {', '.join(ROPE_TYPES)}")
        try:
            return RopeScaling(kind, float(d["factor"]), float(d["low_freq_factor"]),
                               float(d["high_freq_factor"]),
                               int(d["original_max_position_embeddings"]))
        except KeyError as exc:
            raise WorkloadError(f"{where}: {key} of type {kind} needs {exc.args[0]!r}") from None
    return None


__all__ = ["RopeScaling", "LLAMA31_ROPE", "ROPE_TYPES", "rope_inv_freq",
           "parse_hf_rope_scaling"]
