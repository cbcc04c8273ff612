"""PyTorch golden references: decoder layers and small full models with an explicit KV cache.

These modules are the numerical ground truth that the functional execution of mapped ISA programs
is checked against, so the math is written out operation by operation (no ``nn.Linear``,
``nn.LayerNorm`` or ``scaled_dot_product_attention``) with the same operator boundaries and names as
:mod:`workloads.graph`:

* weights are stored ``[in, out]`` and applied as ``y = x @ W + b`` (GEMM ``[m, k] x [k, n]``);
  parameter names are the graph ``sub_role`` names (``qkv_weight``, ``proj_bias``,
  ``ffn_gate_weight`` ...);
* the fused QKV output columns are ``[q heads | k heads | v heads]``, each head ``head_dim`` wide;
* attention: ``softmax(q k^T / sqrt(head_dim) + mask) v`` per query head; query head ``j`` uses KV
  head ``j // (n_heads / n_kv_heads)`` (grouped-query attention); the mask is causal: a query at
  absolute position ``p`` sees keys at positions ``<= p`` (prefill and multi-token steps), and a
  single decode token sees the whole cache; with a sliding window ``W`` (Mistral) only keys at
  ``p - W < s <= p`` (the cache here keeps every position and masks the rest: the device's
  rolling buffer of ``W`` slots is checked against it);
* pre-norm residual layer: ``x = x + Attn(Norm1(x)); x = x + FFN(Norm2(x))``;
* GPT-3 style: LayerNorm (gain and bias, biased variance), biases everywhere, GELU (tanh form,
  GPT-2's ``gelu_new``), learned absolute positions;
* LLaMA style: RMSNorm (gain only), no biases, SwiGLU FFN ``(silu(x W_gate) * (x W_up)) W_down``
  (``ffn_gate``, ``ffn1``, ``ffn2``), rotary embeddings in the Hugging Face ``rotate_half`` layout
  (dimension ``i`` paired with ``i + head_dim/2``, frequency ``theta^(-2i/head_dim)``).
* Mixture of experts (Mixtral; :mod:`workloads.moe`): the FFN is :func:`moe_experts`: router
  logits ``y W_r`` (``moe_router``), the ``k`` largest per token, weights softmax over them,
  ``sum_k w_k SwiGLU_e(y)`` over the chosen experts (``expert_gate``, ``expert_up``,
  ``expert_down``, each ``[E, in, out]``).

Initialisation is deterministic from a seed through :class:`torch.Generator`: weights
``N(0, 0.02)`` (output projections ``proj``/``ffn2``: ``0.02 / sqrt(2 n_layers)``, GPT-2/Megatron),
and biases ``N(0, 0.02)``, norm gains ``1 + N(0, 0.1)`` and norm biases ``N(0, 0.02)``:
deliberately not 0/1, so that a validation that drops a bias or a gain fails.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from workloads.errors import WorkloadError
from workloads.models import ModelSpec
from workloads.rope import rope_inv_freq

#: Refuse to materialise references larger than this many parameters unless asked (fp32: 4 B each).
DEFAULT_MAX_PARAMS = 300_000_000


# ----------------------------------------------------------------------- explicit operator math
def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    """LayerNorm over the last axis: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    ``var`` is the biased variance (divide by ``d``), as in Ba et al. 2016 and ``torch.nn``.
    Shapes: ``x [..., d]``, ``weight``/``bias`` ``[d]``.
    """
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(var + eps) * weight + bias


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last axis: ``x / sqrt(mean(x^2) + eps) * weight``.

    Source: Zhang & Sennrich 2019. Shapes: ``x [..., d]``, ``weight [d]``.
    """
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU, tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``
    (Hendrycks & Gimpel 2016; GPT-2/GPT-3)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def silu(x: Tensor) -> Tensor:
    """SiLU / swish: ``x / (1 + exp(-x))``."""
    return x / (1.0 + torch.exp(-x))


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype = torch.float32, scaling=None) -> tuple[Tensor, Tensor]:
    """Rotary tables for absolute ``positions [T]``: ``cos``, ``sin``, each ``[T, head_dim]``.

    Angle of position ``p`` and dimension ``i < head_dim/2`` is ``p * f_i`` with
    ``f_i = theta^(-2i/head_dim)``, rescaled by ``scaling`` (a
    :class:`workloads.rope.RopeScaling`, LLaMA 3.1) when given (:func:`workloads.rope.
    rope_inv_freq`); the half-width table is repeated twice along the last axis (Hugging Face
    LLaMA layout). Computed in float64 and cast to ``dtype``.
    """
    inv_freq = torch.from_numpy(rope_inv_freq(head_dim, theta, scaling))
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x [B, heads, T, head_dim]``: ``x cos + rotate_half(x) sin``.

    ``rotate_half([a, b]) = [-b, a]`` over the halves of the last axis; ``cos``/``sin`` are
    ``[T, head_dim]`` from :func:`rope_cos_sin` (Su et al. 2021, Hugging Face LLaMA layout).
    """
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def moe_experts(y: Tensor, router: Tensor, gate: Tensor, up: Tensor, down: Tensor,
                k: int) -> tuple[Tensor, Tensor]:
    """Mixtral's sparse MoE block on rows ``y [N, d]``: returns ``(out [N, d], experts
    int64 [N, k])``.

    Logits ``y @ router`` (``router [d, E]``); each row takes the ``k`` largest (largest first;
    ``torch.topk``), weights ``softmax`` over those ``k`` (= softmax over all ``E``, top-k,
    renormalised, as transformers' ``MixtralSparseMoeBlock``); expert ``e`` computes
    ``(silu(y W_gate[e]) * (y W_up[e])) W_down[e]`` on the rows routed to it (``gate``/``up``
    ``[E, d, ff]``, ``down`` ``[E, ff, d]``), and the rows' weighted outputs are summed in
    expert order. Source: Jiang et al., "Mixtral of Experts" (2024), eq. (1)-(2).
    """
    logits = y @ router
    top = torch.topk(logits, k, dim=-1)
    weights = torch.softmax(top.values, dim=-1)
    out = torch.zeros_like(y)
    for e in range(router.shape[1]):
        rows, slot = torch.nonzero(top.indices == e, as_tuple=True)
        if rows.numel() == 0:
            continue
        x = y[rows]
        h = silu(x @ gate[e]) * (x @ up[e])
        out.index_add_(0, rows, (h @ down[e]) * weights[rows, slot][:, None])
    return out, top.indices


def attention(q: Tensor, k: Tensor, v: Tensor, q_start: int,
              window: int | None = None) -> Tensor:
    """Scaled dot-product attention with causal masking and grouped KV heads.

    Shapes: ``q [B, H, T, hd]`` (queries at absolute positions ``q_start .. q_start+T-1``),
    ``k``/``v`` ``[B, KV, S, hd]`` (keys at positions ``0 .. S-1``), ``H % KV == 0``.
    Returns ``[B, H, T, hd]``. Query head ``j`` uses KV head ``j // (H/KV)``; scores are scaled by
    ``1/sqrt(hd)``; key position ``s`` is visible to query position ``p`` iff ``s <= p`` and,
    with a sliding ``window`` ``W``, ``s > p - W`` (Hugging Face Mistral: ``W`` keys, the
    query's own included).
    """
    h, kv = q.shape[1], k.shape[1]
    group = h // kv
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    t, s = q.shape[2], k.shape[2]
    q_pos = torch.arange(q_start, q_start + t)[:, None]
    k_pos = torch.arange(s)[None, :]
    hidden = k_pos > q_pos
    if window is not None:
        hidden = hidden | (k_pos <= q_pos - window)
    scores = scores.masked_fill(hidden, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return probs @ v


# ---------------------------------------------------------------------------------- KV cache
class KVCache:
    """Key/value cache of one layer: ``k``, ``v`` of shape ``[B, n_kv_heads, length, head_dim]``.

    Keys are stored after RoPE (LLaMA) so that cached keys are never rotated again.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    @property
    def length(self) -> int:
        """Cached positions (tokens)."""
        return 0 if self.k is None else int(self.k.shape[2])

    def append(self, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``[B, KV, T, hd]`` keys/values; returns the full cached ``k``, ``v``."""
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            assert self.v is not None
            if k_new.shape[0] != self.k.shape[0]:
                raise WorkloadError(f"KV cache: batch {k_new.shape[0]} differs from cached "
                                    f"batch {self.k.shape[0]}")
            self.k = torch.cat([self.k, k_new], dim=2)
            self.v = torch.cat([self.v, v_new], dim=2)
        return self.k, self.v


class ModelKVCache:
    """One :class:`KVCache` per layer of a model."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [KVCache() for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """Cached positions (tokens), equal in every layer."""
        return self.layers[0].length


# ------------------------------------------------------------------------------ initialisation
def _generator(seed: int, *stream: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, *stream)`` through numpy's SeedSequence."""
    state = np.random.SeedSequence([int(seed), *map(int, stream)]).generate_state(2, np.uint32)
    g = torch.Generator(device="cpu")
    g.manual_seed(int(state[0]) << 32 | int(state[1]))
    return g


def _normal(g: torch.Generator, shape: tuple[int, ...], std: float, mean: float,
            dtype: torch.dtype) -> nn.Parameter:
    t = torch.randn(shape, generator=g, dtype=torch.float64) * std + mean
    return nn.Parameter(t.to(dtype))


def _check_size(what: str, n: int, max_params: int | None) -> None:
    if max_params is not None and n > max_params:
        raise WorkloadError(f"{what} has {n:,} parameters > max_params={max_params:,}; pass "
                            "max_params=None to build it anyway")


# ------------------------------------------------------------------------------------- layers
class DecoderLayer(nn.Module):
    """One pre-norm decoder layer of ``spec`` (any supported norm/activation/positional mix).

    Parameters (``[in, out]`` layout, graph sub-role names): ``attn_norm_weight[d]``
    (``attn_norm_bias[d]`` for LayerNorm), ``qkv_weight[d, (H+2KV) hd]`` (``qkv_bias``),
    ``proj_weight[H hd, d]`` (``proj_bias``), ``ffn_norm_weight``/``ffn_norm_bias``,
    ``ffn_gate_weight[d, d_ff]`` (SwiGLU only), ``ffn1_weight[d, d_ff]`` (``ffn1_bias``),
    ``ffn2_weight[d_ff, d]`` (``ffn2_bias``); a mixture of experts has
    ``moe_router_weight[d, E]``, ``expert_gate_weight``/``expert_up_weight[E, d, d_ff]`` and
    ``expert_down_weight[E, d_ff, d]`` instead of the FFN matrices (drawn like them; the
    router's choices of the last call are kept in ``last_experts``, int64 ``[B*T, k]``). Full
    (``tp = 1``) weights.

    Args:
        spec: the model.
        seed: initialisation seed; the layer's generator is seeded from ``(seed, layer_index)``.
        layer_index: which layer this is (each index draws different weights).
        dtype: parameter and compute dtype (float32 default; float64 for tight checks).
        max_params: refuse larger layers (``None``: no limit).

    Raises:
        WorkloadError: the layer exceeds ``max_params``.
    """

    def __init__(self, spec: ModelSpec, seed: int = 0, layer_index: int = 0,
                 dtype: torch.dtype = torch.float32,
                 max_params: int | None = DEFAULT_MAX_PARAMS) -> None:
        super().__init__()
        _check_size(f"layer of model '{spec.name}'", spec.layer_param_count(), max_params)
        self.spec = spec
        self.layer_index = layer_index
        d, h, kv, hd, ff = spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.d_ff
        g = _generator(seed, 1, layer_index)
        std = 0.02
        std_out = 0.02 / math.sqrt(2 * spec.n_layers)
        ln = spec.norm == "layernorm"
        qkv_cols = (h + 2 * kv) * hd
        # Parameters are drawn in this fixed order (the order defines the values for a seed).
        self.attn_norm_weight = _normal(g, (d,), 0.1, 1.0, dtype)
        self.attn_norm_bias = _normal(g, (d,), std, 0.0, dtype) if ln else None
        self.qkv_weight = _normal(g, (d, qkv_cols), std, 0.0, dtype)
        self.qkv_bias = _normal(g, (qkv_cols,), std, 0.0, dtype) if spec.attention_bias else None
        self.proj_weight = _normal(g, (h * hd, d), std_out, 0.0, dtype)
        self.proj_bias = _normal(g, (d,), std, 0.0, dtype) if spec.proj_bias else None
        self.ffn_norm_weight = _normal(g, (d,), 0.1, 1.0, dtype)
        self.ffn_norm_bias = _normal(g, (d,), std, 0.0, dtype) if ln else None
        swiglu = spec.activation == "swiglu"
        self.last_experts: Tensor | None = None
        if spec.n_experts is not None:
            E = spec.n_experts
            self.moe_router_weight = _normal(g, (d, E), std, 0.0, dtype)
            self.expert_gate_weight = _normal(g, (E, d, ff), std, 0.0, dtype)
            self.expert_up_weight = _normal(g, (E, d, ff), std, 0.0, dtype)
            self.expert_down_weight = _normal(g, (E, ff, d), std_out, 0.0, dtype)
            self.ffn_gate_weight = self.ffn_gate_bias = self.ffn1_weight = None
            self.ffn1_bias = self.ffn2_weight = self.ffn2_bias = None
            return
        self.ffn_gate_weight = _normal(g, (d, ff), std, 0.0, dtype) if swiglu else None
        self.ffn_gate_bias = (_normal(g, (ff,), std, 0.0, dtype)
                              if swiglu and spec.mlp_bias else None)
        self.ffn1_weight = _normal(g, (d, ff), std, 0.0, dtype)
        self.ffn1_bias = _normal(g, (ff,), std, 0.0, dtype) if spec.mlp_bias else None
        self.ffn2_weight = _normal(g, (ff, d), std_out, 0.0, dtype)
        self.ffn2_bias = _normal(g, (d,), std, 0.0, dtype) if spec.mlp_bias else None

    # -- pieces (each one graph operator or a fused pair) -------------------------------------
    def _norm(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if self.spec.norm == "layernorm":
            assert bias is not None
            return layer_norm(x, weight, bias, self.spec.norm_eps)
        return rms_norm(x, weight, self.spec.norm_eps)

    @staticmethod
    def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        y = x @ w
        return y if b is None else y + b

    def attention_block(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        """``Attn(Norm1(x))`` without the residual; appends this step's K/V to ``cache``.

        ``x [B, T, d]`` holds the tokens at positions ``cache.length .. cache.length + T - 1``
        (``0 .. T-1`` without a cache). Returns ``[B, T, d]``.
        """
        s = self.spec
        bsz, t, _ = x.shape
        h, kv, hd = s.n_heads, s.n_kv_heads, s.head_dim
        start = 0 if cache is None else cache.length
        if start + t > s.max_seq_len:
            raise WorkloadError(f"model '{s.name}': positions up to {start + t} exceed "
                                f"max_seq_len {s.max_seq_len}")
        y = self._norm(x, self.attn_norm_weight, self.attn_norm_bias)
        qkv = self._linear(y, self.qkv_weight, self.qkv_bias)
        q = qkv[..., : h * hd].reshape(bsz, t, h, hd).transpose(1, 2)
        k = qkv[..., h * hd: (h + kv) * hd].reshape(bsz, t, kv, hd).transpose(1, 2)
        v = qkv[..., (h + kv) * hd:].reshape(bsz, t, kv, hd).transpose(1, 2)
        if s.positional == "rope":
            cos, sin = rope_cos_sin(torch.arange(start, start + t), hd, s.rope_theta, x.dtype,
                                    s.rope_scaling)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(k, v)
        ctx = attention(q, k, v, start, s.sliding_window)    # [B, H, T, hd]
        ctx = ctx.transpose(1, 2).reshape(bsz, t, h * hd)
        return self._linear(ctx, self.proj_weight, self.proj_bias)

    def ffn_block(self, x: Tensor) -> Tensor:
        """``FFN(Norm2(x))`` without the residual; ``x [B, T, d]`` -> ``[B, T, d]``."""
        s = self.spec
        y = self._norm(x, self.ffn_norm_weight, self.ffn_norm_bias)
        if s.n_experts is not None:
            assert s.experts_per_token is not None
            out, self.last_experts = moe_experts(
                y.reshape(-1, s.d_model), self.moe_router_weight, self.expert_gate_weight,
                self.expert_up_weight, self.expert_down_weight, s.experts_per_token)
            return out.reshape(x.shape)
        up = self._linear(y, self.ffn1_weight, self.ffn1_bias)
        if s.activation == "swiglu":
            assert self.ffn_gate_weight is not None
            a = silu(self._linear(y, self.ffn_gate_weight, self.ffn_gate_bias)) * up
        elif s.activation == "gelu":
            a = gelu_tanh(up)
        else:
            a = torch.clamp_min(up, 0.0)
        return self._linear(a, self.ffn2_weight, self.ffn2_bias)

    def forward(self, x: Tensor, cache: KVCache | None = None) -> Tensor:
        """Layer output ``[B, T, d]`` for input ``x [B, T, d]`` (see :meth:`attention_block`).

        Without ``cache`` the call is a full causal prefill from position 0; with a cache, the
        tokens continue it (prefill into an empty cache, then decode steps of ``T = 1``).
        """
        x = x + self.attention_block(x, cache)
        return x + self.ffn_block(x)


class GPT3DecoderLayer(DecoderLayer):
    """GPT-3-style layer: pre-LayerNorm, multi-head attention with biases, GELU FFN (4 d)."""

    def __init__(self, spec: ModelSpec, seed: int = 0, layer_index: int = 0,
                 dtype: torch.dtype = torch.float32,
                 max_params: int | None = DEFAULT_MAX_PARAMS) -> None:
        if (spec.norm, spec.activation, spec.positional) != ("layernorm", "gelu", "learned"):
            raise WorkloadError(f"model '{spec.name}' is not GPT-3 style (layernorm, gelu, "
                                f"learned); got {spec.norm}, {spec.activation}, {spec.positional}")
        super().__init__(spec, seed, layer_index, dtype, max_params)


class LlamaDecoderLayer(DecoderLayer):
    """LLaMA-style layer: RMSNorm, grouped-query attention with RoPE, SwiGLU FFN, no biases."""

    def __init__(self, spec: ModelSpec, seed: int = 0, layer_index: int = 0,
                 dtype: torch.dtype = torch.float32,
                 max_params: int | None = DEFAULT_MAX_PARAMS) -> None:
        if (spec.norm, spec.activation, spec.positional) != ("rmsnorm", "swiglu", "rope"):
            raise WorkloadError(f"model '{spec.name}' is not LLaMA style (rmsnorm, swiglu, "
                                f"rope); got {spec.norm}, {spec.activation}, {spec.positional}")
        super().__init__(spec, seed, layer_index, dtype, max_params)


# -------------------------------------------------------------------------------- full model
class ReferenceModel(nn.Module):
    """A complete decoder-only model: embeddings, ``n_layers`` layers, final norm, LM head.

    Parameters: ``tok_embedding [vocab, d]``, ``pos_embedding [max_seq_len, d]`` (learned
    positions), ``layers`` (:class:`DecoderLayer`, seeded ``(seed, i)``), ``final_norm_weight``
    (``final_norm_bias``), ``lm_head_weight [d, vocab]`` unless embeddings are tied (then
    ``logits = h @ tok_embedding^T``). Meant for ``tiny-gpt`` / ``tiny-llama``.

    Raises:
        WorkloadError: the model exceeds ``max_params``.
    """

    def __init__(self, spec: ModelSpec, seed: int = 0, dtype: torch.dtype = torch.float32,
                 max_params: int | None = DEFAULT_MAX_PARAMS) -> None:
        super().__init__()
        _check_size(f"model '{spec.name}'", spec.param_count(), max_params)
        self.spec = spec
        d = spec.d_model
        g = _generator(seed, 0)
        self.tok_embedding = _normal(g, (spec.vocab_size, d), 0.02, 0.0, dtype)
        self.pos_embedding = (_normal(g, (spec.max_seq_len, d), 0.01, 0.0, dtype)
                              if spec.positional == "learned" else None)
        self.final_norm_weight = _normal(g, (d,), 0.1, 1.0, dtype)
        self.final_norm_bias = (_normal(g, (d,), 0.02, 0.0, dtype)
                                if spec.norm == "layernorm" else None)
        self.lm_head_weight = (None if spec.tied_embeddings
                               else _normal(g, (d, spec.vocab_size), 0.02, 0.0, dtype))
        self.layers = nn.ModuleList(DecoderLayer(spec, seed, i, dtype, max_params=None)
                                    for i in range(spec.n_layers))

    def new_cache(self) -> ModelKVCache:
        """An empty per-layer KV cache for this model."""
        return ModelKVCache(self.spec.n_layers)

    def forward(self, tokens: Tensor, cache: ModelKVCache | None = None) -> Tensor:
        """Logits ``[B, T, vocab]`` for token ids ``tokens [B, T]`` (int64).

        With ``cache``, the tokens continue the cached sequence (positions start at
        ``cache.length``) and their K/V are appended.

        Raises:
            WorkloadError: a token id outside ``0..vocab-1`` or positions beyond max_seq_len.
        """
        s = self.spec
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= s.vocab_size):
            raise WorkloadError(f"model '{s.name}': token ids must be in 0..{s.vocab_size - 1}")
        start = 0 if cache is None else cache.length
        t = tokens.shape[1]
        if start + t > s.max_seq_len:
            raise WorkloadError(f"model '{s.name}': positions up to {start + t} exceed "
                                f"max_seq_len {s.max_seq_len}")
        x = self.tok_embedding[tokens]
        if self.pos_embedding is not None:
            x = x + self.pos_embedding[start:start + t]
        for i, layer in enumerate(self.layers):
            x = layer(x, None if cache is None else cache.layers[i])
        if s.norm == "layernorm":
            assert self.final_norm_bias is not None
            x = layer_norm(x, self.final_norm_weight, self.final_norm_bias, s.norm_eps)
        else:
            x = rms_norm(x, self.final_norm_weight, s.norm_eps)
        head = self.tok_embedding.T if self.lm_head_weight is None else self.lm_head_weight
        return x @ head

    @torch.no_grad()
    def generate_greedy(self, prompt: Tensor, n_new: int) -> Tensor:
        """Greedy decoding: prefill ``prompt [B, T]`` then ``n_new`` one-token decode steps.

        Returns the generated ids ``[B, n_new]``.
        """
        cache = self.new_cache()
        logits = self(prompt, cache)
        out = []
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        for step in range(n_new):
            out.append(nxt)
            if step + 1 < n_new:
                nxt = self(nxt, cache)[:, -1].argmax(-1, keepdim=True)
        return torch.cat(out, dim=1) if out else prompt[:, :0]


def reference_layer(spec: ModelSpec, seed: int = 0, layer_index: int = 0,
                    dtype: torch.dtype = torch.float32,
                    max_params: int | None = DEFAULT_MAX_PARAMS) -> DecoderLayer:
    """The style-specific reference layer for ``spec`` (GPT-3 or LLaMA), else a generic one."""
    style = (spec.norm, spec.activation, spec.positional)
    cls: type[DecoderLayer] = DecoderLayer
    if style == ("layernorm", "gelu", "learned"):
        cls = GPT3DecoderLayer
    elif style == ("rmsnorm", "swiglu", "rope"):
        cls = LlamaDecoderLayer
    return cls(spec, seed, layer_index, dtype, max_params)
