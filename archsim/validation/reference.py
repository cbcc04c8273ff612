"""Host-side references: what PyTorch says each request's decode step computes.

A reference (:class:`HostReference`) owns a model's weights (float64 values already rounded to
the device's storage type, so that the device and the reference compute with the same model)
and, per request, its own KV cache. It answers, for one request at a time:

* :meth:`~HostReference.prefill`: run the prompt, keep the cache, return the cached K/V of every
  layer and the first generated token (greedy);
* :meth:`~HostReference.decode`: run one token, return every layer's output, the token's K/V of
  every layer, the logits and the next token (greedy).

:class:`ModelReference` wraps the project's :class:`workloads.reference.ReferenceModel`;
:mod:`archsim.validation.hf` wraps Hugging Face ``transformers`` models.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from archsim.functional import round_to
from workloads.models import ModelSpec


@dataclass
class PrefillResult:
    """A request's prompt run by the reference.

    Attributes:
        k, v: per layer, cached keys (after RoPE) and values ``[prompt_len, kv_heads, head_dim]``
            (float64).
        next_token: greedy first generated token.
    """

    k: list[np.ndarray]
    v: list[np.ndarray]
    next_token: int


@dataclass
class DecodeResult:
    """One decode step of one request by the reference.

    Attributes:
        x: the embedding fed to the first layer ``[d]`` (float64).
        outs: every layer's output ``[n_layers, d]``.
        k_new, v_new: the token's K (after RoPE) / V per layer ``[n_layers, kv_heads, head_dim]``.
        logits: ``[vocab]``.
        next_token: greedy next token.
        experts: a mixture of experts' router choices, int ``[n_layers, k]`` (largest logit
            first), or None for a dense model.
    """

    x: np.ndarray
    outs: np.ndarray
    k_new: np.ndarray
    v_new: np.ndarray
    logits: np.ndarray
    next_token: int
    experts: np.ndarray | None = None


class HostReference:
    """Interface of a reference model (see the module docstring).

    Attributes:
        spec: the model (tensor parallel 1).
        dtype: the storage type its weights were rounded to.
        label: what the reference is (shown in reports).
        exactness: largest ``|reference - exact| / max(1, |reference|)`` its float64 results
            may have against the validator's own float64 evaluation (1e-9: pure float64).
        notes: remarks for the report (e.g. a config key read differently).
    """

    spec: ModelSpec
    dtype: str
    label: str
    exactness: float = 1e-9
    notes: list[str] = []

    def layer_weights(self, layer: int) -> dict[str, np.ndarray]:
        """Parameters of ``layer`` under the compiler's tensor names (``attn_norm [1|2, d]``,
        ``qkv_w [d, (H+2KV) hd]``, ``qkv_b``, ``proj_w``, ``proj_b``, ``ffn_norm``,
        ``ffn_gate_w``/``_b``, ``ffn1_w``/``_b``, ``ffn2_w``/``_b``; a mixture of experts:
        ``moe_router_w [d, E]`` and per expert ``e{e}.gate_w``/``e{e}.up_w [d, ff]``,
        ``e{e}.down_w [ff, d]``), float64."""
        raise NotImplementedError

    def embed(self, token: int, pos: int) -> np.ndarray:
        """Input of the first layer for ``token`` at position ``pos`` ``[d]`` (float64)."""
        raise NotImplementedError

    def final_norm(self) -> np.ndarray | None:
        """Final norm parameters ``[1|2, d]`` (gain; bias for LayerNorm); None without a
        head."""
        raise NotImplementedError

    def lm_head(self) -> np.ndarray | None:
        """LM head ``[d, vocab]`` (the transposed token embedding when tied); None when the
        reference has none (a single imported layer: no logits are checked)."""
        raise NotImplementedError

    def rope_half_tables(self, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """``cos``, ``sin`` of position ``pos`` for the first ``head_dim/2`` frequencies."""
        raise NotImplementedError

    def prefill(self, rid: int, prompt: list[int]) -> PrefillResult:
        """Run request ``rid``'s prompt (positions ``0..len-1``) into a fresh cache."""
        raise NotImplementedError

    def decode(self, rid: int, token: int) -> DecodeResult:
        """Run one token of request ``rid`` at the next position of its cache."""
        raise NotImplementedError


def _np(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


def rope_half_tables(spec: ModelSpec, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos``/``sin`` ``[head_dim/2]`` of ``pos`` (float64, :func:`workloads.reference.
    rope_cos_sin`)."""
    import torch

    from workloads.reference import rope_cos_sin

    cos, sin = rope_cos_sin(torch.tensor([pos]), spec.head_dim, spec.rope_theta, torch.float64,
                            spec.rope_scaling)
    h = spec.head_dim // 2
    return cos[0, :h].numpy(), sin[0, :h].numpy()


class ModelReference(HostReference):
    """The project's :class:`workloads.reference.ReferenceModel`, float64, with its parameters
    rounded to ``dtype`` (drawn from ``seed`` as the foundation issue defines).

    Args:
        spec: the model.
        seed: initialisation seed.
        dtype: storage type of the device (``fp16``, ``bf16``, ``fp32``).
        max_params: size guard passed to the reference.

    Raises:
        ValidationError: the model is larger than ``max_params``.
    """

    def __init__(self, spec: ModelSpec, seed: int, dtype: str,
                 max_params: int | None = 50_000_000) -> None:
        import torch

        from workloads.reference import ReferenceModel

        self.spec, self.dtype = spec, dtype
        self.label = f"workloads.reference.ReferenceModel (seed {seed}), float64"
        if max_params is not None and spec.param_count() > max_params:
            from archsim.validation.core import ValidationError

            raise ValidationError(
                f"model '{spec.name}' has {spec.param_count():,} parameters: the float64 host "
                f"reference and the functional executor are meant for small models (limit "
                f"{max_params:,}); use tiny-gpt, tiny-llama or a small config.json")
        model = ReferenceModel(spec, seed=seed, dtype=torch.float32, max_params=max_params)
        model = model.double().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.from_numpy(round_to(p.numpy(), dtype).astype(np.float64)))
        self.model = model
        self.caches: dict[int, object] = {}

    def layer_weights(self, layer: int) -> dict[str, np.ndarray]:
        ref = self.model.layers[layer]
        ln = self.spec.norm == "layernorm"
        out: dict[str, np.ndarray] = {}
        for role in ("attn_norm", "ffn_norm"):
            g = _np(getattr(ref, role + "_weight"))
            out[role] = np.stack([g, _np(getattr(ref, role + "_bias"))]) if ln else g[None]
        for name in ("qkv", "proj", "ffn_gate", "ffn1", "ffn2"):
            w = getattr(ref, name + "_weight", None)
            if w is not None:
                out[name + "_w"] = _np(w)
            b = getattr(ref, name + "_bias", None)
            if b is not None:
                out[name + "_b"] = _np(b)
        if self.spec.n_experts is not None:
            out["moe_router_w"] = _np(ref.moe_router_weight)
            for e in range(self.spec.n_experts):
                out[f"e{e}.gate_w"] = _np(ref.expert_gate_weight[e])
                out[f"e{e}.up_w"] = _np(ref.expert_up_weight[e])
                out[f"e{e}.down_w"] = _np(ref.expert_down_weight[e])
        return out

    def embed(self, token: int, pos: int) -> np.ndarray:
        m = self.model
        x = _np(m.tok_embedding[token])
        if m.pos_embedding is not None:
            x = x + _np(m.pos_embedding[pos])
        return x

    def final_norm(self) -> np.ndarray:
        m = self.model
        g = _np(m.final_norm_weight)
        return g[None] if m.final_norm_bias is None else np.stack([g, _np(m.final_norm_bias)])

    def lm_head(self) -> np.ndarray:
        m = self.model
        return _np(m.tok_embedding).T if m.lm_head_weight is None else _np(m.lm_head_weight)

    def rope_half_tables(self, pos: int) -> tuple[np.ndarray, np.ndarray]:
        return rope_half_tables(self.spec, pos)

    def prefill(self, rid: int, prompt: list[int]) -> PrefillResult:
        import torch

        cache = self.model.new_cache()
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt], dtype=torch.int64), cache)
        self.caches[rid] = cache
        k = [_np(c.k[0].permute(1, 0, 2)) for c in cache.layers]
        v = [_np(c.v[0].permute(1, 0, 2)) for c in cache.layers]
        return PrefillResult(k, v, int(logits[0, -1].argmax()))

    def decode(self, rid: int, token: int) -> DecodeResult:
        import torch

        from workloads.reference import layer_norm, rms_norm

        m, s = self.model, self.spec
        cache = self.caches[rid]
        pos = cache.length
        x0 = self.embed(token, pos)
        x = torch.from_numpy(x0)[None, None]
        outs, ks, vs, routes = [], [], [], []
        with torch.no_grad():
            for layer, c in zip(m.layers, cache.layers):
                x = layer(x, c)
                outs.append(_np(x[0, 0]))
                ks.append(_np(c.k[0, :, -1]))
                vs.append(_np(c.v[0, :, -1]))
                if layer.last_experts is not None:
                    routes.append(layer.last_experts[0].numpy().astype(np.int64))
            if s.norm == "layernorm":
                h = layer_norm(x, m.final_norm_weight, m.final_norm_bias, s.norm_eps)
            else:
                h = rms_norm(x, m.final_norm_weight, s.norm_eps)
            head = m.tok_embedding.T if m.lm_head_weight is None else m.lm_head_weight
            logits = _np((h @ head)[0, 0])
        return DecodeResult(x0, np.stack(outs), np.stack(ks), np.stack(vs), logits,
                            int(logits.argmax()), np.stack(routes) if routes else None)


__all__ = ["HostReference", "ModelReference", "PrefillResult", "DecodeResult",
           "rope_half_tables"]
