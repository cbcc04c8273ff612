"""Hugging Face ``transformers`` references (the optional extra ``hf``): a GPT-2, LLaMA, Qwen2,
Mistral or Mixtral built from a config with random weights (no download), so that the reference
is code nobody here wrote.

* :func:`hf_available` / :func:`require_transformers`: is the extra installed.
* :func:`hf_config_for`: a ``GPT2Config`` / ``LlamaConfig`` with the shapes of a ModelSpec
  (``tiny-gpt`` -> GPT-2, ``tiny-llama`` -> LLaMA).
* :func:`build_hf_model`: ``AutoModelForCausalLM.from_config`` under a seeded generator, eager
  attention.
* :class:`HFReference`: the model in float64 with its parameters rounded to the device's storage
  type, the ModelSpec read back through :func:`workloads.models.load_hf_config` from the
  model's own ``config.json`` (so the workloads loader is checked too), weights mapped to the
  compiler's tensor names (:func:`hf_layer_weights`), K/V from the model's own cache, and each
  decoder layer's output captured by forward hooks.

Decode steps are computed by running the whole sequence so far through the model (a causal
model's output at the last position is the decode step's output); the K/V of the step are the
last entries of the model's returned cache. A Mixtral's router choices at the last position are
captured by forward hooks on each layer's ``MixtralTopKRouter`` (the routing the step's program
is compiled for).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from archsim.functional import round_to
from archsim.validation.core import ValidationError
from archsim.validation.reference import DecodeResult, HostReference, PrefillResult
from workloads.models import ModelSpec

#: The ``transformers`` release the ``hf`` extra pins (pyproject.toml).
TRANSFORMERS_VERSION = "5.24.0"


def hf_available() -> bool:
    """True when ``transformers`` can be imported."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def require_transformers():
    """The ``transformers`` module.

    Raises:
        ValidationError: not installed (names the extra to install).
    """
    try:
        import transformers
    except ImportError:
        raise ValidationError("the Hugging Face reference needs transformers: pip install "
                              "'archsim[hf]' (transformers=="
                              f"{TRANSFORMERS_VERSION})") from None
    return transformers


def hf_config_for(spec: ModelSpec):
    """A ``MixtralConfig`` for a mixture of experts, a ``GPT2Config`` (LayerNorm, GELU-tanh,
    learned positions, biases), a ``Qwen2Config``
    (RMSNorm, SwiGLU, RoPE, QKV biases only: ``attention_bias`` without ``proj_bias``), a
    ``MistralConfig`` (LLaMA structure without biases and a ``sliding_window``) or a
    ``LlamaConfig`` (RMSNorm, SwiGLU, RoPE, biases as ``attention_bias``/``mlp_bias``) with the
    shapes of ``spec``.

    Raises:
        ValidationError: ``spec`` is neither style, or a GPT-2 with ``head_dim != d/heads``.
    """
    tf = require_transformers()
    style = (spec.norm, spec.activation, spec.positional)
    if style == ("layernorm", "gelu", "learned") and spec.attention_bias and spec.mlp_bias:
        if spec.head_dim * spec.n_heads != spec.d_model or spec.n_kv_heads != spec.n_heads:
            raise ValidationError(f"model '{spec.name}': GPT-2 needs head_dim * heads = d_model "
                                  "and multi-head attention")
        return tf.GPT2Config(n_embd=spec.d_model, n_head=spec.n_heads, n_layer=spec.n_layers,
                             n_positions=spec.max_seq_len, vocab_size=spec.vocab_size,
                             n_inner=spec.d_ff, activation_function="gelu_new",
                             layer_norm_epsilon=spec.norm_eps,
                             tie_word_embeddings=spec.tied_embeddings,
                             bos_token_id=0, eos_token_id=0)
    if style == ("rmsnorm", "swiglu", "rope") and spec.attention_bias and not spec.proj_bias:
        if spec.head_dim * spec.n_heads != spec.d_model or spec.mlp_bias:
            raise ValidationError(f"model '{spec.name}': Qwen2 needs head_dim * heads = d_model "
                                  "and no FFN biases")
        return tf.Qwen2Config(hidden_size=spec.d_model, num_attention_heads=spec.n_heads,
                              num_key_value_heads=spec.n_kv_heads,
                              intermediate_size=spec.d_ff, num_hidden_layers=spec.n_layers,
                              max_position_embeddings=spec.max_seq_len,
                              vocab_size=spec.vocab_size, rms_norm_eps=spec.norm_eps,
                              rope_parameters={"rope_type": "default",
                                               "rope_theta": spec.rope_theta},
                              use_sliding_window=False,
                              tie_word_embeddings=spec.tied_embeddings,
                              bos_token_id=0, eos_token_id=0, pad_token_id=None)
    # Mistral and Mixtral: LLaMA's structure without biases, with a sliding_window key
    mistral = dict(hidden_size=spec.d_model, num_attention_heads=spec.n_heads,
                   num_key_value_heads=spec.n_kv_heads, head_dim=spec.head_dim,
                   intermediate_size=spec.d_ff, num_hidden_layers=spec.n_layers,
                   max_position_embeddings=spec.max_seq_len, vocab_size=spec.vocab_size,
                   rms_norm_eps=spec.norm_eps,
                   rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
                   sliding_window=spec.sliding_window, tie_word_embeddings=spec.tied_embeddings,
                   bos_token_id=0, eos_token_id=0, pad_token_id=None)
    if spec.n_experts is not None:
        if style != ("rmsnorm", "swiglu", "rope") or spec.attention_bias:
            raise ValidationError(f"model '{spec.name}': a mixture of experts has a Hugging "
                                  "Face reference in Mixtral's structure only (RMSNorm, SwiGLU "
                                  "experts, RoPE, no biases)")
        return tf.MixtralConfig(**mistral, num_local_experts=spec.n_experts,
                                num_experts_per_tok=spec.experts_per_token,
                                router_jitter_noise=0.0)
    if (style == ("rmsnorm", "swiglu", "rope") and spec.sliding_window is not None
            and not spec.attention_bias and not spec.mlp_bias):
        return tf.MistralConfig(**mistral)
    if spec.sliding_window is not None:
        raise ValidationError(f"model '{spec.name}': a sliding window with biases or another "
                              "structure than Mistral's has no Hugging Face reference here")
    if style == ("rmsnorm", "swiglu", "rope"):
        rs = spec.rope_scaling
        rope = {"rope_theta": spec.rope_theta} if rs is None else {"rope_parameters": {
            "rope_type": rs.rope_type, "rope_theta": spec.rope_theta, "factor": rs.factor,
            "low_freq_factor": rs.low_freq_factor, "high_freq_factor": rs.high_freq_factor,
            "original_max_position_embeddings": rs.original_max_position_embeddings}}
        return tf.LlamaConfig(hidden_size=spec.d_model, num_attention_heads=spec.n_heads,
                              num_key_value_heads=spec.n_kv_heads, head_dim=spec.head_dim,
                              intermediate_size=spec.d_ff, num_hidden_layers=spec.n_layers,
                              max_position_embeddings=spec.max_seq_len,
                              vocab_size=spec.vocab_size, rms_norm_eps=spec.norm_eps,
                              **rope, attention_bias=spec.attention_bias,
                              mlp_bias=spec.mlp_bias, tie_word_embeddings=spec.tied_embeddings,
                              bos_token_id=0, eos_token_id=0, pad_token_id=None)
    raise ValidationError(f"model '{spec.name}' ({', '.join(style)}) is neither GPT-2 nor "
                          "LLaMA style: no Hugging Face reference for it")


def load_hf_json_config(path: str | Path):
    """A transformers config from a local ``config.json`` (or its directory); no hub access.

    Raises:
        ValidationError: unreadable or binary file, not a JSON object, a ``model_type``
            transformers does not know, or a config its class rejects (any error it raises on
            the file's values; the message names the file and the class's reason).
    """
    tf = require_transformers()
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(f"{p}: cannot read a Hugging Face config ({exc})") from None
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: expected a JSON object at top level")
    mtype = data.pop("model_type", None)
    level = tf.logging.get_verbosity()
    tf.logging.set_verbosity_error()   # its reasons come back in the one-line error, not logs
    try:
        return tf.AutoConfig.for_model(mtype, **data)
    except Exception as exc:  # noqa: BLE001 - the user's file, rejected by transformers
        raise ValidationError(_rejected(p, mtype, exc)) from None
    finally:
        tf.logging.set_verbosity(level)


def _rejected(p: Path, mtype: Any, exc: BaseException) -> str:
    why = " ".join(str(exc).split())
    return (f"{p}: transformers {TRANSFORMERS_VERSION} rejects this {mtype} config: "
            f"{type(exc).__name__}: {why}")


def build_hf_model(config, seed: int = 0):
    """``AutoModelForCausalLM.from_config(config)`` with eager attention (and eager experts for
    a mixture of experts), its random initialisation drawn from ``seed`` (the global torch generator is restored afterwards).

    transformers initialises biases to 0 and norm gains to 1; like
    :mod:`workloads.reference`, they are then redrawn (biases ``N(0, 0.02)``, norm gains
    ``1 + N(0, 0.1)``, norm biases ``N(0, 0.02)``) so that a device that drops a bias or a
    gain fails validation."""
    import torch

    tf = require_transformers()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        # eager experts too: the default grouped-GEMM kernel of transformers 5 refuses float64
        extra = ({"experts_implementation": "eager"}
                 if getattr(config, "num_local_experts", None) else {})
        model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                    **extra)
        with torch.no_grad():
            for name, p in model.named_parameters():
                norm = any(k in name for k in ("ln_", "norm", "layernorm"))
                if name.endswith(".bias"):
                    p.normal_(0.0, 0.02)
                elif norm and p.dim() == 1:
                    p.normal_(1.0, 0.1)
    return model.eval()


def _np(t) -> np.ndarray:
    return t.detach().to("cpu").double().numpy()


def _base(model) -> Any:
    """The decoder stack of a causal-LM wrapper (``transformer`` for GPT-2, ``model`` else)."""
    return getattr(model, "transformer", None) or model.model


def _blocks(model) -> list:
    base = _base(model)
    return list(base.h if hasattr(base, "h") else base.layers)


def hf_layer_weights(model, layer: int) -> dict[str, np.ndarray]:
    """Parameters of decoder layer ``layer`` of a GPT-2 / LLaMA model under the compiler's
    tensor names, float64, ``[in, out]`` layout.

    GPT-2's ``Conv1D`` weights are already ``[in, out]`` with ``c_attn`` columns ``[q|k|v]``;
    LLaMA's ``nn.Linear`` weights are ``[out, in]`` and are transposed, ``q_proj``,
    ``k_proj``, ``v_proj`` concatenated in that order. Mixtral (transformers 5): the router
    ``mlp.gate.weight [E, d]`` transposed, the experts' fused ``gate_up_proj [E, 2 ff, d]``
    (gate rows first) and ``down_proj [E, d, ff]`` split per expert and transposed.

    Raises:
        ValidationError: an architecture other than GPT-2 / LLaMA.
    """
    blk = _blocks(model)[layer]
    if hasattr(blk, "attn") and hasattr(blk.attn, "c_attn"):
        out = {"attn_norm": np.stack([_np(blk.ln_1.weight), _np(blk.ln_1.bias)]),
               "qkv_w": _np(blk.attn.c_attn.weight), "qkv_b": _np(blk.attn.c_attn.bias),
               "proj_w": _np(blk.attn.c_proj.weight), "proj_b": _np(blk.attn.c_proj.bias),
               "ffn_norm": np.stack([_np(blk.ln_2.weight), _np(blk.ln_2.bias)]),
               "ffn1_w": _np(blk.mlp.c_fc.weight), "ffn1_b": _np(blk.mlp.c_fc.bias),
               "ffn2_w": _np(blk.mlp.c_proj.weight), "ffn2_b": _np(blk.mlp.c_proj.bias)}
        return out
    if not (hasattr(blk, "self_attn") and hasattr(blk, "mlp")):
        raise ValidationError(f"decoder layer {type(blk).__name__} is neither GPT-2, LLaMA nor "
                              "Mixtral")
    a, m = blk.self_attn, blk.mlp
    out = {"attn_norm": _np(blk.input_layernorm.weight)[None],
           "qkv_w": np.concatenate([_np(a.q_proj.weight).T, _np(a.k_proj.weight).T,
                                    _np(a.v_proj.weight).T], axis=1),
           "proj_w": _np(a.o_proj.weight).T,
           "ffn_norm": _np(blk.post_attention_layernorm.weight)[None]}
    if a.q_proj.bias is not None:
        out["qkv_b"] = np.concatenate([_np(a.q_proj.bias), _np(a.k_proj.bias),
                                       _np(a.v_proj.bias)])
    if a.o_proj.bias is not None:
        out["proj_b"] = _np(a.o_proj.bias)
    if hasattr(m, "gate_proj"):
        out.update(ffn_gate_w=_np(m.gate_proj.weight).T, ffn1_w=_np(m.up_proj.weight).T,
                   ffn2_w=_np(m.down_proj.weight).T)
        for name, lin in (("ffn_gate_b", m.gate_proj), ("ffn1_b", m.up_proj),
                          ("ffn2_b", m.down_proj)):
            if lin.bias is not None:
                out[name] = _np(lin.bias)
        return out
    if hasattr(m, "experts"):
        out["moe_router_w"] = _np(m.gate.weight).T
        gate_up, down = _np(m.experts.gate_up_proj), _np(m.experts.down_proj)
        ff = gate_up.shape[1] // 2
        for e in range(gate_up.shape[0]):      # gate_up_proj [E, 2 ff, d]: gate rows, up rows
            out[f"e{e}.gate_w"] = gate_up[e, :ff].T
            out[f"e{e}.up_w"] = gate_up[e, ff:].T
            out[f"e{e}.down_w"] = down[e].T     # down_proj [E, d, ff]
        return out
    raise ValidationError(f"decoder layer {type(blk).__name__} is neither GPT-2, LLaMA nor "
                          "Mixtral")


def _cache_kv(cache, layer: int) -> tuple[Any, Any]:
    """``(keys, values)`` ``[B, KV, T, hd]`` of ``layer`` from a transformers cache (the
    ``DynamicCache.layers`` API of transformers 5, the older ``key_cache`` lists, or tuples)."""
    if hasattr(cache, "layers"):
        lay = cache.layers[layer]
        return lay.keys, lay.values
    if hasattr(cache, "key_cache"):
        return cache.key_cache[layer], cache.value_cache[layer]
    return cache[layer][0], cache[layer][1]


def _out_cache(out) -> Any:
    for name in ("cache", "past_key_values"):
        c = out.get(name) if hasattr(out, "get") else getattr(out, name, None)
        if c is not None:
            return c
    raise ValidationError("the transformers model returned no KV cache (use_cache=True)")


class HFReference(HostReference):
    """A Hugging Face GPT-2 / LLaMA / Qwen2 / Mistral / Mixtral causal LM as the reference
    (module docstring).

    Args:
        model: a ``GPT2LMHeadModel`` or ``LlamaForCausalLM`` (e.g. from :func:`build_hf_model`).
        dtype: device storage type; the model's parameters are rounded to it (in place, on a
            float64 copy).
        name: model name for reports.

    Raises:
        ValidationError: unsupported architecture or options (scaled/upcast attention,
            RoPE scaling, tensor-parallel pretraining), or a config the workloads loader reads
            differently.
    """

    #: HF LLaMA computes RMSNorm in fp32 and its RoPE angles in fp32 (its own choice):
    #: agreement with the validator's float64 evaluation is to about 1e-7 relative.
    exactness = 1e-5

    def __init__(self, model, dtype: str, name: str | None = None) -> None:
        import torch

        tf = require_transformers()
        model = model.to(torch.float64).eval()
        cfg = model.config
        if cfg.model_type not in ("gpt2", "llama", "qwen2", "mistral", "mixtral"):
            raise ValidationError(f"model_type {cfg.model_type!r}: the Hugging Face reference "
                                  "supports gpt2, llama, qwen2, mistral and mixtral")
        for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if getattr(cfg, key, False):
                raise ValidationError(f"GPT-2 option {key}=true is not modelled")
        rope_params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling",
                                                                       None) or {}
        if rope_params.get("rope_type", "default") not in ("default", "llama3"):
            raise ValidationError(f"RoPE scaling {rope_params.get('rope_type')!r} is not "
                                  "modelled (default and llama3 are)")
        if getattr(cfg, "pretraining_tp", 1) != 1:
            raise ValidationError("LLaMA pretraining_tp != 1 is not modelled")
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.from_numpy(round_to(_np(p), dtype).astype(np.float64)))
        self.model, self.dtype = model, dtype
        self.notes: list[str] = []
        with tempfile.TemporaryDirectory() as tmp:
            cfg.to_json_file(str(Path(tmp) / "config.json"))
            from workloads.models import load_hf_config

            spec = load_hf_config(tmp, name=name or f"hf-{cfg.model_type}")
        self.spec = spec
        self.label = (f"transformers {tf.__version__} {type(model).__name__} (random weights "
                      "from a config), float64")
        self.history: dict[int, list[int]] = {}
        self._tied = bool(getattr(cfg, "tie_word_embeddings", False))

    # ---- weights -----------------------------------------------------------------------
    def layer_weights(self, layer: int) -> dict[str, np.ndarray]:
        return hf_layer_weights(self.model, layer)

    def embed(self, token: int, pos: int) -> np.ndarray:
        base = _base(self.model)
        if hasattr(base, "wte"):
            return _np(base.wte.weight[token]) + _np(base.wpe.weight[pos])
        return _np(base.embed_tokens.weight[token])

    def final_norm(self) -> np.ndarray:
        base = _base(self.model)
        if hasattr(base, "ln_f"):
            return np.stack([_np(base.ln_f.weight), _np(base.ln_f.bias)])
        return _np(base.norm.weight)[None]

    def lm_head(self) -> np.ndarray:
        return _np(self.model.lm_head.weight).T

    def rope_half_tables(self, pos: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        base = _base(self.model)
        x = torch.zeros(1, 1, self.spec.head_dim, dtype=torch.float64)
        cos, sin = base.rotary_emb(x, torch.tensor([[pos]]))
        h = self.spec.head_dim // 2
        return _np(cos[0, 0, :h]), _np(sin[0, 0, :h])

    # ---- running -----------------------------------------------------------------------
    def _run(self, ids: list[int]) -> tuple[Any, list[np.ndarray], np.ndarray | None]:
        """Forward ``ids``; returns (outputs, per-layer last-position outputs, first-layer
        input at the last position)."""
        import torch

        outs: list[np.ndarray] = []
        first: list[np.ndarray] = []
        routes: list[np.ndarray] = []
        hooks = []
        blocks = _blocks(self.model)

        def route(_mod, _args, out):    # MixtralTopKRouter -> (logits, scores, indices)
            routes.append(out[2][-1].detach().cpu().numpy().astype(np.int64))
        for b in blocks:
            gate = getattr(getattr(b, "mlp", None), "gate", None)
            if gate is not None and hasattr(gate, "top_k"):
                hooks.append(gate.register_forward_hook(route))

        def pre(_mod, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            first.append(_np(h[0, -1]))

        def post(_mod, _args, out):
            h = out[0] if isinstance(out, tuple) else out
            outs.append(_np(h[0, -1]))
        hooks.append(blocks[0].register_forward_pre_hook(pre, with_kwargs=True))
        hooks += [b.register_forward_hook(post) for b in blocks]
        try:
            with torch.no_grad():
                out = self.model(torch.tensor([ids], dtype=torch.int64), use_cache=True)
        finally:
            for h in hooks:
                h.remove()
        self._routes = np.stack(routes) if routes else None
        return out, outs, (first[0] if first else None)

    def prefill(self, rid: int, prompt: list[int]) -> PrefillResult:
        out, _, _ = self._run(list(prompt))
        cache = _out_cache(out)
        ks, vs = [], []
        for l in range(self.spec.n_layers):
            k, v = _cache_kv(cache, l)
            k, v = _np(k[0].permute(1, 0, 2)), _np(v[0].permute(1, 0, 2))
            # a sliding-window cache keeps only the last positions (W - 1 in transformers 5):
            # the evicted ones, which no later token attends to, are NaN rows here so that a
            # read of them cannot pass unnoticed
            gap = len(prompt) - k.shape[0]
            if gap > 0:
                pad = np.full((gap,) + k.shape[1:], np.nan)
                k, v = np.concatenate([pad, k]), np.concatenate([pad, v])
            ks.append(k)
            vs.append(v)
        self.history[rid] = list(prompt)
        return PrefillResult(ks, vs, int(out.logits[0, -1].argmax()))

    def decode(self, rid: int, token: int) -> DecodeResult:
        ids = self.history[rid] + [int(token)]
        out, layer_outs, x = self._run(ids)
        cache = _out_cache(out)
        kn, vn = [], []
        for l in range(self.spec.n_layers):
            k, v = _cache_kv(cache, l)
            kn.append(_np(k[0, :, -1]))
            vn.append(_np(v[0, :, -1]))
        self.history[rid] = ids
        logits = _np(out.logits[0, -1])
        assert x is not None
        return DecodeResult(x, np.stack(layer_outs), np.stack(kn), np.stack(vn), logits,
                            int(logits.argmax()), self._routes)


def hf_reference(model: str | ModelSpec, dtype: str, seed: int = 0) -> HFReference:
    """An :class:`HFReference` for a registry model (its GPT-2 / LLaMA config, see
    :func:`hf_config_for`) or a local ``config.json``, with random weights from ``seed``."""
    from workloads.models import get_model

    if isinstance(model, ModelSpec):
        config, name = hf_config_for(model), model.name
    elif str(model).endswith(".json") or Path(str(model)).is_dir():
        config = load_hf_json_config(model)
        try:
            built = build_hf_model(config, seed)
        except Exception as exc:  # noqa: BLE001 - the user's config, rejected by transformers
            raise ValidationError(_rejected(Path(str(model)), config.model_type, exc)) from None
        return HFReference(built, dtype, name=None)
    else:
        spec = get_model(str(model))
        config, name = hf_config_for(spec), spec.name
    return HFReference(build_hf_model(config, seed), dtype,
                       name=f"{name}-hf" if name else None)


__all__ = ["TRANSFORMERS_VERSION", "HFReference", "hf_available", "require_transformers",
           "hf_config_for", "load_hf_json_config", "build_hf_model", "hf_layer_weights",
           "hf_reference"]
