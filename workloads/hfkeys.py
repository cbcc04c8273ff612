"""Hugging Face ``config.json`` keys: the pieces of :func:`workloads.models.load_hf_config` that
read a config dictionary (required keys per ``model_type``, dtypes, activations, the RoPE base,
the sliding window, the model's name). Nothing here builds a ModelSpec.
"""
from __future__ import annotations

from pathlib import Path

from workloads.errors import WorkloadError

#: Keys a config.json of each supported ``model_type`` must have.
HF_REQUIRED: dict[str, tuple[str, ...]] = {
    "gpt2": ("n_embd", "n_head", "n_layer", "n_positions", "vocab_size"),
    "llama": ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers",
              "max_position_embeddings", "vocab_size"),
    "mistral": ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers",
                "max_position_embeddings", "vocab_size"),
    "qwen2": ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers",
              "max_position_embeddings", "vocab_size"),
    "mixtral": ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers",
                "max_position_embeddings", "vocab_size"),
    "opt": ("hidden_size", "num_attention_heads", "num_hidden_layers", "ffn_dim",
            "max_position_embeddings", "vocab_size"),
}
#: ``torch_dtype`` values -> bytes per element.
HF_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "half": 2, "float": 4}
#: Activation names -> the ModelSpec activation.
HF_ACT = {"gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu",
          "relu": "relu", "silu": "swiglu", "swish": "swiglu"}


def rope_theta(cfg: dict, default: float = 1e4) -> float:
    """RoPE base of a LLaMA-family config.json: top-level ``rope_theta`` (transformers 4.x) or
    ``rope_parameters.rope_theta`` (transformers 5.x); ``default`` if absent (10000, the
    RoFormer default; Qwen2's configuration class defaults to 1e6)."""
    params = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta") if isinstance(params, dict) else None)
    return float(theta) if theta is not None else float(default)


def hf_sliding_window(p: Path, cfg: dict, mtype: str) -> int | None:
    """The attention window of a LLaMA-family config.json (``None`` = full attention).

    * ``mistral``: ``sliding_window`` (``null`` = full attention; absent = 4096, the default of
      transformers' ``MistralConfig``).
    * ``mixtral``: ``sliding_window`` (``null`` or absent = full attention, the default of
      transformers' ``MixtralConfig``).
    * ``qwen2``: ``sliding_window`` only with ``use_sliding_window: true``; transformers then
      slides layers ``i >= max_window_layers`` (default 28) and keeps full attention below
      (``Qwen2Config.layer_types``; an explicit ``layer_types`` list wins). One window for all
      layers is modelled: every layer sliding, or none.
    * ``llama``: none.

    A window at least ``max_position_embeddings`` long never bounds a read and gives ``None``.

    Raises:
        WorkloadError: a non-integer or non-positive window, or a Qwen2 config that mixes
            sliding and full-attention layers (names the file, the keys and their values).
    """
    if mtype == "llama" or (mtype == "qwen2" and not cfg.get("use_sliding_window", False)):
        return None
    w = cfg.get("sliding_window", 4096 if mtype == "mistral" else None)   # mixtral: None
    if w is None:
        return None
    try:
        w = int(w)
    except (TypeError, ValueError):
        raise WorkloadError(f"{p}: key 'sliding_window' = {w!r} is not an integer") from None
    if w < 1:
        raise WorkloadError(f"{p}: key 'sliding_window' = {w} must be >= 1 (or null)")
    if w >= int(cfg["max_position_embeddings"]):
        return None
    if mtype == "qwen2":
        n = int(cfg["num_hidden_layers"])
        types = cfg.get("layer_types")
        if types is None:
            mwl = int(cfg.get("max_window_layers", 28))
            types = ["sliding_attention" if i >= mwl else "full_attention" for i in range(n)]
        kinds = set(types)
        if kinds == {"full_attention"}:
            return None
        if kinds != {"sliding_attention"}:
            raise WorkloadError(
                f"{p}: use_sliding_window = true with max_window_layers = "
                f"{cfg.get('max_window_layers', 28)} (or layer_types) mixes sliding-window and "
                f"full-attention layers over num_hidden_layers = {n}: one window for every "
                "layer is modelled; set max_window_layers to 0 (all layers slide) or to "
                f"{n} (none does)")
    return w


def hf_model_name(cfg: dict, mtype: str) -> str:
    """Name of a model read from a Hugging Face config (see :func:`workloads.models.load_hf_config`)."""
    given = str(cfg.get("_name_or_path") or "").strip()
    if given:
        looks_local = given.startswith(("/", ".", "~")) or "\\" in given or given.count("/") > 1
        return Path(given.rstrip("/")).name if looks_local else given
    d = cfg.get("hidden_size", cfg.get("n_embd"))
    layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    return f"{mtype}-{d}x{layers}"


__all__ = ["HF_REQUIRED", "HF_DTYPE_BYTES", "HF_ACT", "rope_theta", "hf_sliding_window",
           "hf_model_name"]
