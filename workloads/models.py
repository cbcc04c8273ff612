"""Decoder-only transformer model specifications and the built-in model registry.

A :class:`ModelSpec` holds the architectural hyper-parameters that determine the shapes, FLOPs and
bytes of every operator (see :mod:`workloads.graph`) plus the reference parallelism the published
evaluation used. Everything derived from it (parameter counts, per-device shard sizes, KV-cache
bytes per token) is a small pure method here so that the graph builder, the mapper and the tests all
use one definition.

Parameter-count convention (matches the published model sizes to well under 2 %):

* token embedding ``vocab_size x d_model``; learned positional embedding ``max_seq_len x d_model``
  when ``positional == 'learned'`` (RoPE has no parameters);
* per layer: two norms (``2 d`` for LayerNorm: gain and bias, ``d`` for RMSNorm: gain only), the
  fused QKV projection ``d x (n_heads + 2 n_kv_heads) head_dim``, the output projection
  ``n_heads head_dim x d``, and the FFN: ``2 d d_ff`` for GELU/ReLU, ``3 d d_ff`` for SwiGLU
  (gate, up, down); the bias of ``qkv`` when ``attention_bias``, of ``proj`` when ``proj_bias``
  (default: ``attention_bias``; Qwen2 has QKV biases and none on the output projection) and of the
  FFN matrices when ``mlp_bias``;
* a final norm and, unless ``tied_embeddings``, an LM head ``d_model x vocab_size`` without bias.

Sliding-window attention (``sliding_window = W``; Mistral): a query at position ``i`` attends to
the keys ``j`` with ``i - W < j <= i`` (``W`` keys, itself included; the Hugging Face
``transformers`` Mistral/Qwen2 mask ``kv_idx > q_idx - sliding_window``), so a request of ``L``
tokens keeps and reads ``min(L, W)`` K/V rows per layer (:meth:`ModelSpec.kv_len`): the rolling
buffer cache of Jiang et al., "Mistral 7B" (2023), section 2, whose ``W`` slots take the token at
position ``p`` in slot ``p mod W``.

Mixture of experts (``n_experts = E``, ``experts_per_token = k``; Mixtral: Jiang et al., "Mixtral
of Experts" (2024), section 2.1): every layer's FFN is ``E`` SwiGLU experts and a router
``W_r [d, E]``; a token goes through the ``k`` experts of largest router logit, weighted by the
softmax over those ``k`` logits (:mod:`workloads.moe`). Parameters: the router ``d E`` and
``E`` experts of ``3 d d_ff`` each (``d_ff`` is one expert's width); a token uses ``k`` of them
(the *active* parameters, :meth:`ModelSpec.layer_matmul_params`). With tensor parallelism
every expert is split like a dense FFN (``d_ff / tp`` columns per device); with expert
parallelism ``ep`` each device holds ``E / ep`` whole experts (:meth:`ModelSpec.local_experts`).

Sources of the registry entries are given per entry (``source`` field).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workloads.errors import WorkloadError, read_text
from workloads.hfkeys import (HF_ACT, HF_DTYPE_BYTES, HF_REQUIRED, hf_model_name,
                              hf_sliding_window, rope_theta)
from workloads.rope import LLAMA31_ROPE, RopeScaling, parse_hf_rope_scaling

Norm = Literal["layernorm", "rmsnorm"]
Activation = Literal["gelu", "swiglu", "relu"]
Positional = Literal["learned", "rope"]

_NORMS = ("layernorm", "rmsnorm")
_ACTIVATIONS = ("gelu", "swiglu", "relu")
_POSITIONALS = ("learned", "rope")
_DTYPE_BYTES = (1, 2, 4)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Immutable description of a decoder-only transformer (one of GPT-3, LLaMA, OPT style).

    Attributes:
        name: registry name (e.g. ``"gpt3-7b"``).
        d_model: hidden size ``d`` (elements).
        n_heads: number of query heads.
        n_kv_heads: number of key/value heads (``== n_heads`` for multi-head attention, fewer for
            grouped-query attention; must divide ``n_heads``).
        head_dim: elements per head (usually ``d_model / n_heads``).
        n_layers: number of decoder layers.
        d_ff: FFN inner width (elements). For SwiGLU this is the width of the gate and up
            projections.
        vocab_size: rows of the token embedding (padded size, as trained).
        max_seq_len: longest context (prompt + generated tokens) the model supports.
        norm: ``'layernorm'`` (pre-LN with gain and bias) or ``'rmsnorm'`` (gain only).
        activation: ``'gelu'`` (tanh approximation), ``'relu'`` or ``'swiglu'``
            (``silu(x W_gate) * (x W_up)``).
        positional: ``'learned'`` absolute embeddings or ``'rope'`` rotary embeddings.
        attention_bias: the QKV projection carries a bias (and, unless ``proj_bias`` says
            otherwise, the output projection too).
        proj_bias: the output projection carries a bias; ``None`` (default) takes
            ``attention_bias`` (GPT-2/GPT-3/OPT: both; LLaMA: neither; Qwen2: QKV only, so
            ``attention_bias=True, proj_bias=False``). Resolved to a bool on construction.
        mlp_bias: FFN matrices carry biases.
        tied_embeddings: the LM head reuses the token embedding matrix.
        dtype_bytes: bytes per element of weights, activations and KV cache (2 = fp16/bf16).
        tensor_parallel: tensor-parallel degree of the reference evaluation.
        pipeline_parallel: pipeline-parallel degree of the reference evaluation.
        rope_theta: RoPE base frequency (ignored for learned positions).
        norm_eps: epsilon added to the variance / mean square in the norms.
        source: where the numbers come from (paper, model card, config file).
        sliding_window: attention window ``W`` in tokens (``>= 1``), every layer; ``None``
            (default) = full causal attention. A query at position ``i`` attends to keys
            ``i - W < j <= i`` (module docstring); the KV cache is a rolling buffer of ``W``
            slots per request and layer. A window at least ``max_seq_len`` long never bounds
            a read: it is accepted and behaves as full attention (Hugging Face does the same).
        rope_scaling: RoPE frequency scaling (:class:`workloads.rope.RopeScaling`, LLaMA 3.1's
            ``llama3``), or ``None``: plain RoPE.
        n_experts: routed experts per layer (mixture of experts, every layer); ``None``
            (default) = a dense FFN. Needs ``experts_per_token``, SwiGLU and no FFN biases
            (Mixtral's experts).
        experts_per_token: experts each token is routed to (top-k, ``1 <= k <= n_experts``).

    Raises:
        WorkloadError: on construction, if a field is out of range or the combination is
            inconsistent (the message names the field and the allowed values).
    """

    name: str
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_layers: int
    d_ff: int
    vocab_size: int
    max_seq_len: int
    norm: Norm = "layernorm"
    activation: Activation = "gelu"
    positional: Positional = "learned"
    attention_bias: bool = True
    mlp_bias: bool = True
    tied_embeddings: bool = True
    dtype_bytes: int = 2
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    source: str = ""
    proj_bias: bool | None = None
    sliding_window: int | None = None
    rope_scaling: RopeScaling | None = None
    n_experts: int | None = None
    experts_per_token: int | None = None

    def __post_init__(self) -> None:
        where = f"model '{self.name}'"
        if self.proj_bias is None:
            object.__setattr__(self, "proj_bias", bool(self.attention_bias))
        for key in ("d_model", "n_heads", "n_kv_heads", "head_dim", "n_layers", "d_ff",
                    "vocab_size", "max_seq_len", "tensor_parallel", "pipeline_parallel"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkloadError(f"{where}: {key} must be a positive integer, got {value!r}")
        if self.norm not in _NORMS:
            raise WorkloadError(f"{where}: norm {self.norm!r} not one of {list(_NORMS)}")
        if self.activation not in _ACTIVATIONS:
            raise WorkloadError(
                f"{where}: activation {self.activation!r} not one of {list(_ACTIVATIONS)}")
        if self.positional not in _POSITIONALS:
            raise WorkloadError(
                f"{where}: positional {self.positional!r} not one of {list(_POSITIONALS)}")
        if self.dtype_bytes not in _DTYPE_BYTES:
            raise WorkloadError(
                f"{where}: dtype_bytes {self.dtype_bytes!r} not one of {list(_DTYPE_BYTES)}")
        if self.n_heads % self.n_kv_heads:
            raise WorkloadError(
                f"{where}: n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                "(grouped-query attention)")
        if self.positional == "rope" and self.head_dim % 2:
            raise WorkloadError(f"{where}: RoPE needs an even head_dim, got {self.head_dim}")
        if self.n_layers % self.pipeline_parallel:
            raise WorkloadError(
                f"{where}: pipeline_parallel={self.pipeline_parallel} must divide "
                f"n_layers={self.n_layers}")
        self.check_tensor_parallel(self.tensor_parallel)
        if not (self.rope_theta > 0 and self.norm_eps > 0):
            raise WorkloadError(f"{where}: rope_theta and norm_eps must be > 0")
        w = self.sliding_window
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise WorkloadError(f"{where}: sliding_window must be a positive integer (tokens) "
                                f"or None (full attention), got {w!r}")
        self._check_experts(where)

    def _check_experts(self, where: str) -> None:
        """The mixture-of-experts fields (see the class docstring); WorkloadError naming them."""
        e, k = self.n_experts, self.experts_per_token
        if e is None and k is None:
            return
        for key, value in (("n_experts", e), ("experts_per_token", k)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkloadError(f"{where}: {key} must be a positive integer (mixture of "
                                    f"experts; both n_experts and experts_per_token, or neither), "
                                    f"got {value!r}")
        assert e is not None and k is not None
        if k > e:
            raise WorkloadError(f"{where}: experts_per_token={k} (top-k) is larger than "
                                f"n_experts={e}: a token cannot take more experts than there are")
        if self.activation != "swiglu" or self.mlp_bias:
            raise WorkloadError(f"{where}: mixture of experts is modelled with SwiGLU experts "
                                "without biases (Mixtral); got activation "
                                f"{self.activation!r}, mlp_bias={self.mlp_bias}")

    def kv_len(self, seq_len: int) -> int:
        """K/V rows a request of ``seq_len`` tokens keeps and its newest token attends to:
        ``min(seq_len, sliding_window)``, or ``seq_len`` with full attention."""
        w = self.sliding_window
        return int(seq_len) if w is None else min(int(seq_len), w)

    def kv_slot(self, position: int) -> int:
        """Slot of the KV cache holding the token at ``position`` (0-based): ``position mod
        sliding_window`` in the rolling buffer, ``position`` with full attention."""
        w = self.sliding_window
        return int(position) if w is None else int(position) % w

    # ----------------------------------------------------------------------------- derived shapes
    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (``n_experts`` set)."""
        return self.n_experts is not None

    def check_expert_parallel(self, ep: int) -> None:
        """Check that the experts split over ``ep`` expert-parallel devices (``E / ep`` whole
        experts each).

        Raises:
            WorkloadError: ``ep`` not a positive integer, ``ep > 1`` on a dense model, or
                ``ep`` not dividing ``n_experts``.
        """
        where = f"model '{self.name}'"
        if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
            raise WorkloadError(f"{where}: expert-parallel degree must be a positive integer, "
                                f"got {ep!r}")
        if ep == 1:
            return
        if self.n_experts is None:
            raise WorkloadError(f"{where} has no experts (a dense FFN): expert parallelism "
                                f"{ep} needs a mixture-of-experts model")
        if self.n_experts % ep:
            raise WorkloadError(f"{where}: expert-parallel degree {ep} must divide "
                                f"n_experts={self.n_experts}")

    def local_experts(self, ep: int = 1, device: int = 0) -> range:
        """Experts held by expert-parallel device ``device`` of ``ep``: the contiguous block
        ``[device E/ep, (device + 1) E/ep)`` (Megatron-Core and DeepSpeed-MoE place experts so);
        ``range(0)`` for a dense model."""
        self.check_expert_parallel(ep)
        if self.n_experts is None:
            return range(0)
        per = self.n_experts // ep
        return range(device * per, (device + 1) * per)

    @property
    def q_per_kv(self) -> int:
        """Query heads sharing one key/value head (GQA group size; 1 for MHA)."""
        return self.n_heads // self.n_kv_heads

    @property
    def dtype(self) -> str:
        """Name of the element type implied by ``dtype_bytes`` (``fp16`` for 2 bytes)."""
        return {1: "int8", 2: "fp16", 4: "fp32"}[self.dtype_bytes]

    def check_tensor_parallel(self, tp: int) -> None:
        """Check that the model can be split over ``tp`` tensor-parallel devices (Megatron style).

        Query heads and FFN columns are split evenly; key/value heads are split when ``tp`` divides
        ``n_kv_heads`` and replicated (one per device) when ``n_kv_heads`` divides ``tp``.

        Raises:
            WorkloadError: naming the dimension that does not split.
        """
        where = f"model '{self.name}'"
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise WorkloadError(f"{where}: tensor-parallel degree must be a positive integer, "
                                f"got {tp!r}")
        if self.n_heads % tp:
            raise WorkloadError(f"{where}: tensor-parallel degree {tp} must divide "
                                f"n_heads={self.n_heads}")
        if self.n_kv_heads % tp and tp % self.n_kv_heads:
            raise WorkloadError(f"{where}: tensor-parallel degree {tp} must divide or be a "
                                f"multiple of n_kv_heads={self.n_kv_heads}")
        if self.d_ff % tp:
            raise WorkloadError(f"{where}: tensor-parallel degree {tp} must divide "
                                f"d_ff={self.d_ff}")

    def heads_per_device(self, tp: int = 1) -> int:
        """Query heads on one of ``tp`` tensor-parallel devices."""
        self.check_tensor_parallel(tp)
        return self.n_heads // tp

    def kv_heads_per_device(self, tp: int = 1) -> int:
        """Key/value heads stored on one device (replicated, i.e. 1, when ``tp > n_kv_heads``)."""
        self.check_tensor_parallel(tp)
        return max(1, self.n_kv_heads // tp)

    def d_ff_per_device(self, tp: int = 1) -> int:
        """FFN inner columns on one device (column-parallel first FFN matrix)."""
        self.check_tensor_parallel(tp)
        return self.d_ff // tp

    def vocab_per_device(self, tp: int = 1) -> int:
        """LM-head output columns on one device (vocab-parallel, rounded up)."""
        self.check_tensor_parallel(tp)
        return -(-self.vocab_size // tp)

    # ----------------------------------------------------------------------------- param counts
    def _norm_params(self) -> int:
        return 2 * self.d_model if self.norm == "layernorm" else self.d_model

    def layer_param_breakdown(self, tp: int = 1, ep: int = 1) -> dict[str, int]:
        """Parameters of one decoder layer held by one of ``tp`` (x ``ep``) devices, by role.

        Keys are the graph ``sub_role`` names (``attn_norm``, ``qkv``, ``qkv_bias``, ``proj``,
        ``proj_bias``, ``ffn_norm``, ``ffn_gate``, ``ffn_gate_bias``, ``ffn1``, ``ffn1_bias``,
        ``ffn2``, ``ffn2_bias``; a mixture of experts has ``moe_router`` (replicated on every
        device) and ``expert_gate``, ``expert_up``, ``expert_down`` (all the device's experts)
        instead of the FFN roles); absent roles are omitted. Column-parallel matrices (qkv,
        gate, ffn1) and their biases are split; row-parallel matrices (proj, ffn2) are split by
        rows and their biases replicated (added once after the all-reduce); norms are
        replicated. Each expert is split over ``tp`` like the dense FFN; ``ep`` devices hold
        ``n_experts / ep`` experts each. With ``tp = ep = 1`` the values sum to
        :meth:`layer_param_count`.

        Units: parameters (elements).
        """
        h, kv, hd = self.heads_per_device(tp), self.kv_heads_per_device(tp), self.head_dim
        d, ff = self.d_model, self.d_ff_per_device(tp)
        qkv_cols = (h + 2 * kv) * hd
        out: dict[str, int] = {"attn_norm": self._norm_params(), "qkv": d * qkv_cols}
        if self.attention_bias:
            out["qkv_bias"] = qkv_cols
        out["proj"] = h * hd * d
        if self.proj_bias:
            out["proj_bias"] = d
        out["ffn_norm"] = self._norm_params()
        if self.n_experts is not None:
            n_local = len(self.local_experts(ep))
            out["moe_router"] = d * self.n_experts
            out["expert_gate"] = n_local * d * ff
            out["expert_up"] = n_local * d * ff
            out["expert_down"] = n_local * ff * d
            return out
        self.check_expert_parallel(ep)
        if self.activation == "swiglu":
            out["ffn_gate"] = d * ff
            if self.mlp_bias:
                out["ffn_gate_bias"] = ff
        out["ffn1"] = d * ff
        if self.mlp_bias:
            out["ffn1_bias"] = ff
        out["ffn2"] = ff * d
        if self.mlp_bias:
            out["ffn2_bias"] = d
        return out

    def layer_param_count(self, tp: int = 1, ep: int = 1) -> int:
        """All parameters of one decoder layer on one of ``tp`` x ``ep`` devices (weights,
        biases, norms; every expert the device holds)."""
        return sum(self.layer_param_breakdown(tp, ep).values())

    def layer_matmul_params(self, tp: int = 1) -> int:
        """Weight-matrix elements of one layer on one device that one token multiplies.

        Decode GEMM FLOPs of a layer are exactly ``2 * layer_matmul_params(tp) * tokens``
        (2 FLOPs per multiply-accumulate; without expert parallelism). Excludes biases and norm
        gains. A mixture of experts counts the router and ``experts_per_token`` experts (the
        *active* parameters: Mixtral 8x7B's 12.9 B of 46.7 B).
        """
        b = self.layer_param_breakdown(tp)
        roles = ("qkv", "proj", "ffn_gate", "ffn1", "ffn2", "moe_router")
        n = sum(v for k, v in b.items() if k in roles)
        if self.n_experts is not None:
            assert self.experts_per_token is not None
            expert = (b["expert_gate"] + b["expert_up"] + b["expert_down"]) // self.n_experts
            n += self.experts_per_token * expert
        return n

    def active_param_count(self) -> int:
        """Parameters one token uses (tp = 1): :meth:`param_count` with only
        ``experts_per_token`` experts per layer (equal to it for a dense model)."""
        if self.n_experts is None:
            return self.param_count()
        b = self.layer_param_breakdown()
        expert = (b["expert_gate"] + b["expert_up"] + b["expert_down"]) // self.n_experts
        assert self.experts_per_token is not None
        unused = (self.n_experts - self.experts_per_token) * expert
        return self.param_count() - self.n_layers * unused

    def embedding_param_count(self) -> int:
        """Token (and learned positional) embedding parameters."""
        n = self.vocab_size * self.d_model
        if self.positional == "learned":
            n += self.max_seq_len * self.d_model
        return n

    def head_param_count(self) -> int:
        """Final norm plus the untied LM head (0 for the head when embeddings are tied)."""
        n = self._norm_params()
        if not self.tied_embeddings:
            n += self.d_model * self.vocab_size
        return n

    def param_count(self) -> int:
        """Total parameters of the model, embeddings and LM head included (tp = 1)."""
        return (self.embedding_param_count() + self.n_layers * self.layer_param_count()
                + self.head_param_count())

    def kv_cache_bytes_per_token(self, tp: int = 1) -> int:
        """KV-cache bytes one token occupies on one device, over all layers.

        ``2 (K and V) * n_layers * kv_heads_per_device * head_dim * dtype_bytes``. With a
        sliding window a request holds :meth:`kv_len` tokens, not its whole length.
        """
        return 2 * self.n_layers * self.kv_heads_per_device(tp) * self.head_dim * self.dtype_bytes

    def replace(self, **changes: Any) -> "ModelSpec":
        """A copy with some fields changed (validated again).

        Changing ``attention_bias`` alone carries ``proj_bias`` along when the two were equal
        (the default link); give ``proj_bias`` too to set it apart."""
        if ("attention_bias" in changes and "proj_bias" not in changes
                and self.proj_bias == self.attention_bias):
            changes = {**changes, "proj_bias": None}
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict view (JSON-serialisable)."""
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------- registry
_GPT3_SRC = ("Brown et al., 'Language Models are Few-Shot Learners' (2020), Table 2.1; "
             "d_model/heads/layers/TP/PP and vocab 50304 as in the NeuPIMs evaluation "
             "(Heo et al., ASPLOS 2024)")


def _gpt3(name: str, d: int, heads: int, layers: int, tp: int, pp: int,
          note: str = "") -> ModelSpec:
    return ModelSpec(
        name=name, d_model=d, n_heads=heads, n_kv_heads=heads, head_dim=d // heads,
        n_layers=layers, d_ff=4 * d, vocab_size=50304, max_seq_len=2048, norm="layernorm",
        activation="gelu", positional="learned", attention_bias=True, mlp_bias=True,
        tied_embeddings=True, tensor_parallel=tp, pipeline_parallel=pp,
        source=_GPT3_SRC + note)


def _llama(name: str, d: int, heads: int, kv: int, layers: int, ff: int, vocab: int,
           max_seq: int, theta: float, eps: float, tp: int, source: str) -> ModelSpec:
    return ModelSpec(
        name=name, d_model=d, n_heads=heads, n_kv_heads=kv, head_dim=d // heads, n_layers=layers,
        d_ff=ff, vocab_size=vocab, max_seq_len=max_seq, norm="rmsnorm", activation="swiglu",
        positional="rope", attention_bias=False, mlp_bias=False, tied_embeddings=False,
        tensor_parallel=tp, pipeline_parallel=1, rope_theta=theta, norm_eps=eps, source=source)


def _qwen2(name: str, d: int, heads: int, kv: int, layers: int, ff: int, vocab: int,
           max_seq: int, tp: int, tied: bool) -> ModelSpec:
    """Qwen2: LLaMA structure with biases on the Q, K and V projections only."""
    return ModelSpec(
        name=name, d_model=d, n_heads=heads, n_kv_heads=kv, head_dim=d // heads, n_layers=layers,
        d_ff=ff, vocab_size=vocab, max_seq_len=max_seq, norm="rmsnorm", activation="swiglu",
        positional="rope", attention_bias=True, proj_bias=False, mlp_bias=False,
        tied_embeddings=tied, tensor_parallel=tp, pipeline_parallel=1, rope_theta=1e6,
        norm_eps=1e-6, source=_QWEN2_SRC)


_QWEN2_SRC = ("Yang et al., 'Qwen2 Technical Report' (2024), Table 1, and the Qwen/Qwen2-*B "
              "config.json files (QKV bias, no output-projection bias, rope_theta 1e6; the "
              "32 k native context; the YaRN extension to 128 k is not modelled)")
_MISTRAL_SRC = ("Jiang et al., 'Mistral 7B' (2023), Table 1 and section 2 (sliding window 4096, "
                "rolling buffer cache); mistralai/Mistral-7B-v0.1 config.json")
_MIXTRAL_SRC = ("Jiang et al., 'Mixtral of Experts' (2024), Table 1 and section 2.1 (8 experts, "
                "top-2, 32 k context); mistralai/Mixtral-8x7B-v0.1 config.json (rope_theta 1e6, "
                "no sliding window). Tensor parallel 4: the smallest power of two whose weight "
                "shard (93.4 GB / 4) fits one 32 GB NeuPIMs device (no published NPU/PIM "
                "evaluation of it)")
_LLAMA2_SRC = ("Touvron et al., 'Llama 2' (2023) and the meta-llama/Llama-2-*-hf config.json "
               "files")
_LLAMA3_SRC = "meta-llama/Meta-Llama-3-8B config.json (Llama 3 model card, 2024)"

_TINY_LLAMA = ModelSpec(
    name="tiny-llama", d_model=128, n_heads=4, n_kv_heads=2, head_dim=32, n_layers=2,
    d_ff=352, vocab_size=512, max_seq_len=256, norm="rmsnorm", activation="swiglu",
    positional="rope", attention_bias=False, mlp_bias=False, tied_embeddings=False,
    tensor_parallel=1, source="project test model: LLaMA structure (GQA 4q/2kv) at toy size")

_REGISTRY: dict[str, ModelSpec] = {m.name: m for m in (
    _gpt3("gpt3-7b", 4096, 32, 32, tp=4, pp=1, note="; published as GPT-3 6.7B"),
    _gpt3("gpt3-13b", 5120, 40, 40, tp=4, pp=1,
          note="; the paper's 13B has d_model 5140, NeuPIMs uses 5120"),
    _gpt3("gpt3-30b", 7168, 56, 48, tp=4, pp=2,
          note="; not a GPT-3 paper size: the NeuPIMs evaluation's 30B configuration"),
    _gpt3("gpt3-175b", 12288, 96, 96, tp=8, pp=4),
    _llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 1e4, 1e-5, tp=1,
           source=_LLAMA2_SRC),
    _llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096, 1e4, 1e-5, tp=2,
           source=_LLAMA2_SRC),
    _llama("llama2-70b", 8192, 64, 8, 80, 28672, 32000, 4096, 1e4, 1e-5, tp=8,
           source=_LLAMA2_SRC),
    _llama("llama3-8b", 4096, 32, 8, 32, 14336, 128256, 8192, 5e5, 1e-5, tp=1,
           source=_LLAMA3_SRC),
    _llama("llama3.1-8b", 4096, 32, 8, 32, 14336, 128256, 131072, 5e5, 1e-5, tp=1,
           source="Meta, 'The Llama 3 Herd of Models' (2024); meta-llama/Llama-3.1-8B "
                  "config.json (128 k context, rope_scaling llama3: factor 8, low/high "
                  "frequency factors 1 and 4, original context 8,192)"
           ).replace(rope_scaling=LLAMA31_ROPE),
    _llama("mistral-7b", 4096, 32, 8, 32, 14336, 32000, 32768, 1e4, 1e-5, tp=1,
           source=_MISTRAL_SRC).replace(sliding_window=4096),
    _llama("mixtral-8x7b", 4096, 32, 8, 32, 14336, 32000, 32768, 1e6, 1e-5, tp=4,
           source=_MIXTRAL_SRC).replace(n_experts=8, experts_per_token=2),
    _qwen2("qwen2-7b", 3584, 28, 4, 28, 18944, 152064, 32768, tp=1, tied=False),
    _qwen2("qwen2-0.5b", 896, 14, 2, 24, 4864, 151936, 32768, tp=1, tied=True),
    ModelSpec(
        name="opt-66b", d_model=9216, n_heads=72, n_kv_heads=72, head_dim=128, n_layers=64,
        d_ff=36864, vocab_size=50272, max_seq_len=2048, norm="layernorm", activation="relu",
        positional="learned", attention_bias=True, mlp_bias=True, tied_embeddings=True,
        tensor_parallel=8, pipeline_parallel=1,
        source="Zhang et al., 'OPT: Open Pre-trained Transformer Language Models' (2022), "
               "Table 1; facebook/opt-66b config.json (its 2-row learned-position offset is "
               "not modelled)"),
    ModelSpec(
        name="tiny-gpt", d_model=128, n_heads=4, n_kv_heads=4, head_dim=32, n_layers=2,
        d_ff=512, vocab_size=512, max_seq_len=256, norm="layernorm", activation="gelu",
        positional="learned", attention_bias=True, mlp_bias=True, tied_embeddings=True,
        tensor_parallel=1, source="project test model: GPT-3 structure at toy size"),
    _TINY_LLAMA,
    ModelSpec(
        name="tiny-qwen2", d_model=128, n_heads=4, n_kv_heads=2, head_dim=32, n_layers=2,
        d_ff=352, vocab_size=512, max_seq_len=256, norm="rmsnorm", activation="swiglu",
        positional="rope", attention_bias=True, proj_bias=False, mlp_bias=False,
        tied_embeddings=False, tensor_parallel=1, rope_theta=1e6, norm_eps=1e-6,
        source="project test model: Qwen2 structure (QKV bias only, GQA 4q/2kv) at toy size"),
    _TINY_LLAMA.replace(name="tiny-mistral", sliding_window=16,
                        source="project test model: Mistral structure (tiny-llama with a "
                               "16-token sliding window)"),
    _TINY_LLAMA.replace(name="tiny-mixtral", d_ff=160, rope_theta=1e6, n_experts=8,
                        experts_per_token=2,
                        source="project test model: Mixtral structure (8 SwiGLU experts of "
                               "width 160, top-2, GQA 4q/2kv) at toy size"),
)}

#: Published total parameter counts used by the tests (name -> parameters).
PUBLISHED_PARAM_COUNTS: dict[str, float] = {
    "gpt3-7b": 6.7e9,     # GPT-3 paper "6.7B"
    "gpt3-13b": 13.0e9,   # GPT-3 paper "13B"
    "gpt3-30b": 30.0e9,   # NeuPIMs "30B"
    "gpt3-175b": 175.0e9,  # GPT-3 paper "175B"
    "llama2-7b": 6.74e9,
    "llama2-13b": 13.0e9,
    "llama2-70b": 69.0e9,
    "llama3-8b": 8.03e9,
    "llama3.1-8b": 8.03e9,
    "opt-66b": 66.0e9,
    "qwen2-7b": 7.62e9,    # Qwen2 report Table 1 / model card: 7.6B
    "qwen2-0.5b": 0.49e9,  # Qwen2-0.5B model card: 0.49B
    "mistral-7b": 7.24e9,  # Mistral-7B-v0.1 model card: 7.24B
    "mixtral-8x7b": 46.7e9,  # Mixtral paper section 2.1: 47B total (46.7B), 13B active
}


def list_models() -> list[str]:
    """Names of the built-in models, in registry order."""
    return list(_REGISTRY)


def get_model(name: str) -> ModelSpec:
    """The built-in :class:`ModelSpec` called ``name`` (case-insensitive).

    Raises:
        WorkloadError: unknown name; the message lists the valid names.
    """
    spec = _REGISTRY.get(str(name).strip().lower())
    if spec is None:
        raise WorkloadError(f"unknown model {name!r}; valid names: {', '.join(_REGISTRY)}")
    return spec


# ------------------------------------------------------------------------- Hugging Face configs
def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json`` on disk (no network).

    Supported ``model_type`` values and the keys read:

    * ``gpt2``: ``n_embd``, ``n_head``, ``n_layer``, ``n_positions``, ``vocab_size``,
      ``n_inner`` (default ``4 n_embd``), ``activation_function``, ``layer_norm_epsilon``,
      ``tie_word_embeddings`` (default true). LayerNorm, learned positions, biases.
    * ``llama`` / ``mistral``: ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``
      (default = heads), ``intermediate_size``, ``num_hidden_layers``,
      ``max_position_embeddings``, ``vocab_size``, ``rope_theta`` (default 10000),
      ``rms_norm_eps``, ``head_dim`` (default hidden/heads), ``attention_bias``, ``mlp_bias``,
      ``tie_word_embeddings`` (default false). RMSNorm, SwiGLU, RoPE.
    * ``qwen2``: as ``llama``, with biases on the Q, K and V projections and none on the output
      projection (the Qwen2 architecture; ``attention_bias`` is not a Qwen2 key), ``rope_theta``
      default 1e6, ``tie_word_embeddings`` default false.
    * ``mixtral``: as ``mistral`` (no biases), ``rope_theta`` default 1e6, and a mixture of
      experts in every layer: ``num_local_experts`` (default 8) SwiGLU experts of width
      ``intermediate_size``, ``num_experts_per_tok`` (default 2) of them per token (the
      defaults of transformers' ``MixtralConfig``; ``router_jitter_noise`` and the auxiliary
      loss keys only act in training).
    * ``num_attention_heads`` must be a multiple of ``num_key_value_heads``, and, without
      ``head_dim``, ``hidden_size`` of ``num_attention_heads`` (``n_embd`` / ``n_head`` for
      ``gpt2``): the error names both keys.
    * Sliding-window attention (``ModelSpec.sliding_window``): ``mistral`` ``sliding_window``
      (absent: 4096, transformers' default; ``null``: full attention) and ``qwen2``
      ``sliding_window`` with ``use_sliding_window: true`` when every layer slides
      (``max_window_layers = 0``; see :func:`_hf_sliding_window`); a window at least
      ``max_position_embeddings`` long is full attention.
    * ``opt``: ``hidden_size``, ``num_attention_heads``, ``num_hidden_layers``, ``ffn_dim``,
      ``max_position_embeddings``, ``vocab_size``, ``activation_function``, ``enable_bias``,
      ``do_layer_norm_before`` (must be true), ``word_embed_proj_dim`` (must equal hidden size).

    ``torch_dtype`` (or ``dtype``) sets ``dtype_bytes`` (default 2). The name is ``name``, else
    the config's ``_name_or_path`` (a hub id as it is, a local path by its last component),
    else ``<model_type>-<hidden>x<layers>`` (e.g. ``llama-4096x32``); never the name of the
    folder the file happens to sit in.

    Args:
        path: a ``config.json`` file or a directory containing one.
        name: optional model name to use.

    Raises:
        WorkloadError: unreadable file, invalid JSON, unknown ``model_type`` (lists the supported
            ones), a missing required key (names it and the file) or an unsupported variant.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    text = read_text(p, "a Hugging Face config.json")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{p}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(cfg, dict):
        raise WorkloadError(f"{p}: expected a JSON object at top level")
    mtype = cfg.get("model_type")
    if mtype not in HF_REQUIRED:
        raise WorkloadError(f"{p}: model_type {mtype!r} is not supported; supported: "
                            f"{', '.join(HF_REQUIRED)}")
    missing = [k for k in HF_REQUIRED[mtype] if cfg.get(k) is None]
    if missing:
        raise WorkloadError(f"{p}: missing key(s) {', '.join(repr(k) for k in missing)} "
                            f"required for model_type {mtype!r}")
    model_name = name or hf_model_name(cfg, mtype)
    dtype_key = cfg.get("torch_dtype", cfg.get("dtype", "float16"))
    if dtype_key not in HF_DTYPE_BYTES:
        raise WorkloadError(f"{p}: key 'torch_dtype' = {dtype_key!r} not one of "
                            f"{list(HF_DTYPE_BYTES)}")

    def act(key: str, default: str) -> str:
        value = cfg.get(key, default)
        if value not in HF_ACT:
            raise WorkloadError(f"{p}: key {key!r} = {value!r} not one of {list(HF_ACT)}")
        return HF_ACT[value]

    common: dict[str, Any] = {"name": str(model_name), "dtype_bytes": HF_DTYPE_BYTES[dtype_key],
                              "source": f"Hugging Face config {p}"}
    def head_dim(d: int, heads: int, d_key: str, h_key: str) -> int:
        if cfg.get("head_dim"):
            return int(cfg["head_dim"])
        if heads < 1 or d % heads:
            raise WorkloadError(f"{p}: {d_key} = {d} is not divisible by {h_key} = {heads}: "
                                f"the head dimension is {d_key} / {h_key}"
                                + (" (or give head_dim)" if mtype in ("llama", "mistral",
                                                                     "mixtral") else ""))
        return d // heads

    try:
        if mtype == "gpt2":
            d, heads = int(cfg["n_embd"]), int(cfg["n_head"])
            head_dim(d, heads, "n_embd", "n_head")
            a = act("activation_function", "gelu_new")
            if a == "swiglu":
                raise WorkloadError(f"{p}: gpt2 with a gated activation is not supported")
            return ModelSpec(
                d_model=d, n_heads=heads, n_kv_heads=heads, head_dim=d // heads,
                n_layers=int(cfg["n_layer"]), d_ff=int(cfg.get("n_inner") or 4 * d),
                vocab_size=int(cfg["vocab_size"]), max_seq_len=int(cfg["n_positions"]),
                norm="layernorm", activation=a, positional="learned", attention_bias=True,
                mlp_bias=True, tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
                norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)), **common)
        if mtype in ("llama", "mistral", "qwen2", "mixtral"):
            d, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
            kv_heads = int(cfg.get("num_key_value_heads") or heads)
            if heads < 1 or kv_heads < 1 or heads % kv_heads:
                raise WorkloadError(f"{p}: num_attention_heads = {heads} is not a multiple of "
                                    f"num_key_value_heads = {kv_heads}: each key/value head "
                                    "serves the same number of query heads")
            window = hf_sliding_window(p, cfg, mtype)
            qwen = mtype == "qwen2"
            experts: dict[str, Any] = {}
            if mtype == "mixtral":
                n_exp = int(cfg.get("num_local_experts", 8))
                top_k = int(cfg.get("num_experts_per_tok", 2))
                if n_exp < 1 or not 1 <= top_k <= n_exp:
                    raise WorkloadError(f"{p}: num_experts_per_tok = {top_k} must be between 1 "
                                        f"and num_local_experts = {n_exp}")
                experts = {"n_experts": n_exp, "experts_per_token": top_k}
            if act("hidden_act", "silu") != "swiglu":
                raise WorkloadError(f"{p}: key 'hidden_act' = {cfg.get('hidden_act')!r}: only "
                                    "'silu' (SwiGLU) is supported for LLaMA-style models")
            return ModelSpec(
                d_model=d, n_heads=heads, n_kv_heads=kv_heads,
                head_dim=head_dim(d, heads, "hidden_size", "num_attention_heads"),
                n_layers=int(cfg["num_hidden_layers"]), d_ff=int(cfg["intermediate_size"]),
                vocab_size=int(cfg["vocab_size"]),
                max_seq_len=int(cfg["max_position_embeddings"]), norm="rmsnorm",
                activation="swiglu", positional="rope",
                attention_bias=True if qwen else bool(cfg.get("attention_bias", False)),
                proj_bias=False if qwen else None,
                mlp_bias=bool(cfg.get("mlp_bias", False)),
                tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                rope_theta=rope_theta(cfg, 1e6 if mtype in ("qwen2", "mixtral") else 1e4),
                rope_scaling=parse_hf_rope_scaling(cfg, str(p)),
                norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), sliding_window=window,
                **experts, **common)
        # opt
        d, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        if not cfg.get("do_layer_norm_before", True):
            raise WorkloadError(f"{p}: key 'do_layer_norm_before' = false (post-LN OPT) is not "
                                "supported; only pre-LN decoder layers are modelled")
        if int(cfg.get("word_embed_proj_dim", d)) != d:
            raise WorkloadError(f"{p}: key 'word_embed_proj_dim' = "
                                f"{cfg['word_embed_proj_dim']} differs from hidden_size {d}; "
                                "embedding projections are not modelled")
        a = act("activation_function", "relu")
        if a == "swiglu":
            raise WorkloadError(f"{p}: opt with a gated activation is not supported")
        bias = bool(cfg.get("enable_bias", True))
        head_dim(d, heads, "hidden_size", "num_attention_heads")
        return ModelSpec(
            d_model=d, n_heads=heads, n_kv_heads=heads, head_dim=d // heads,
            n_layers=int(cfg["num_hidden_layers"]), d_ff=int(cfg["ffn_dim"]),
            vocab_size=int(cfg["vocab_size"]), max_seq_len=int(cfg["max_position_embeddings"]),
            norm="layernorm", activation=a, positional="learned", attention_bias=bias,
            mlp_bias=bias, tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), **common)
    except (TypeError, ValueError) as exc:
        raise WorkloadError(f"{p}: non-numeric value in config ({exc})") from None
    except WorkloadError as exc:
        msg = str(exc)
        raise WorkloadError(msg if msg.startswith(str(p)) else f"{p}: {msg}") from None


def published_param_count(name: str) -> float:
    """Published size of a registry model (parameters); raises WorkloadError if unknown."""
    if name not in PUBLISHED_PARAM_COUNTS:
        raise WorkloadError(f"no published size for {name!r}; known: "
                            f"{', '.join(PUBLISHED_PARAM_COUNTS)}")
    return PUBLISHED_PARAM_COUNTS[name]

