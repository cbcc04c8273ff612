"""Mixture-of-experts routing: which experts each token of an iteration goes to.

A Mixtral-style layer (Jiang et al., "Mixtral of Experts" (2024), section 2.1) replaces the FFN
by ``E`` SwiGLU experts and a router ``W_r [d, E]``: a token's router logits are ``x W_r``, it
goes through the ``k`` experts of largest logit, and their outputs are summed with weights
``softmax`` over those ``k`` logits (equal to transformers' ``MixtralSparseMoeBlock``: softmax
over all ``E``, top-k, renormalised). Ties between equal logits go to the lower expert index.

The expert GEMMs of an iteration depend on the routing (how many tokens each expert
multiplies), so a compiled program is specialised to the routing of its iteration, as it is to
its requests' lengths. The routing comes from one of two places:

* the router's values, when there are values: the golden checks route every token of every
  layer by the reference's own logits (:func:`routing_from_choices`);
* a **router model** for timing runs, which have no activations (:func:`draw_routing`): every
  token draws ``k`` distinct experts without replacement with probabilities
  ``p_e ∝ 1 / rank(e)^s``, ``s >= 0`` the Zipf exponent (``s = 0``: uniform, every expert
  equally loaded on average; larger ``s``: a few hot experts, as measured for trained routers,
  e.g. Mixtral's per-domain expert loads in the Mixtral paper, section 5); ``rank`` is a random
  permutation of the experts drawn per layer, so the hot expert differs between layers. A draw
  is the Gumbel-top-k trick (Kool, van Hoof & Welling, "Stochastic Beams and Where to Find
  Them", ICML 2019: the ``k`` largest of ``log p_e + Gumbel noise`` are a sample of ``k``
  without replacement in proportion to ``p``), seeded from ``(seed, layer)``, so a routing
  does not depend on which layers are drawn together.

Expert parallelism (``ep`` devices; GShard, Lepikhin et al., ICLR 2021; DeepSpeed-MoE,
Rajbhandari et al., ICML 2022): device ``g`` holds experts ``[g E/ep, (g + 1) E/ep)``
(:meth:`workloads.models.ModelSpec.local_experts`) and runs attention for its own requests
(data-parallel attention): the requests at batch positions ``g, g + ep, g + 2 ep, ...``. A
token routed to an expert of another device is sent there and its result sent back (the
all-to-all dispatch and combine). :class:`Routing` covers the tokens of the whole batch (every
device), so the simulated device 0 knows exactly which tokens its experts receive.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workloads.errors import WorkloadError
from workloads.models import ModelSpec
from workloads.requests import Batch


def device_positions(n_requests: int, ep: int, device: int = 0) -> np.ndarray:
    """Batch positions of the requests whose attention expert-parallel device ``device`` runs:
    ``device, device + ep, ...`` (round robin), int ``[n]`` ascending."""
    return np.arange(device, n_requests, ep, dtype=np.int64)


@dataclass(frozen=True)
class Routing:
    """The experts of every token of one iteration, per decoder layer.

    Attributes:
        n_experts, top_k: the model's ``E`` and ``k``.
        experts: ``{layer: int [tokens, k]}``: row ``t`` lists token ``t``'s experts (distinct,
            in the router's order: largest logit first). Token rows follow the batch: request
            after request in batch order, a request's query tokens in order (decode: one each).
        token_request: int ``[tokens]``: batch position of each token's request.
        expert_parallel: ``ep``: experts split over ``ep`` devices, attention of the request
            at batch position ``i`` on device ``i mod ep`` (module docstring).
        source: where the routing came from (reported with the results).

    Raises:
        WorkloadError: shapes that disagree, an expert id out of range, a token listing an
            expert twice, or ``ep`` not dividing ``n_experts``.
    """

    n_experts: int
    top_k: int
    experts: dict[int, np.ndarray]
    token_request: np.ndarray
    expert_parallel: int = 1
    source: str = ""
    _groups: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        E, k, ep = self.n_experts, self.top_k, self.expert_parallel
        if not (1 <= k <= E) or ep < 1 or E % ep:
            raise WorkloadError(f"routing: top-k {k}, {E} experts, expert parallel {ep}: "
                                "need 1 <= k <= E and ep dividing E")
        n = len(self.token_request)
        for layer, ch in self.experts.items():
            ch = np.asarray(ch)
            if ch.shape != (n, k):
                raise WorkloadError(f"routing of layer {layer}: shape {ch.shape}, expected "
                                    f"({n} tokens, top-k {k})")
            if n and (ch.min() < 0 or ch.max() >= E):
                raise WorkloadError(f"routing of layer {layer}: expert ids must be in 0..{E - 1}")
            srt = np.sort(ch, axis=1)
            if k > 1 and (srt[:, 1:] == srt[:, :-1]).any():
                raise WorkloadError(f"routing of layer {layer}: a token lists an expert twice")

    # ------------------------------------------------------------------ queries
    @property
    def n_tokens(self) -> int:
        """Tokens routed per layer (every device's)."""
        return int(len(self.token_request))

    def token_device(self) -> np.ndarray:
        """Expert-parallel device whose attention produced each token, int ``[tokens]``."""
        return np.asarray(self.token_request, dtype=np.int64) % self.expert_parallel

    def expert_device(self, expert: int) -> int:
        """Device holding ``expert`` (contiguous blocks of ``E / ep``)."""
        return int(expert) // (self.n_experts // self.expert_parallel)

    def tokens_per_expert(self, layer: int) -> np.ndarray:
        """Tokens routed to each expert in ``layer``, int ``[E]`` (sums to ``tokens * k``)."""
        return np.bincount(np.asarray(self.experts[layer]).ravel(), minlength=self.n_experts)

    def tokens_of(self, layer: int, expert: int) -> np.ndarray:
        """Token rows routed to ``expert`` in ``layer``, int, ascending."""
        key = (layer, expert)
        got = self._groups.get(key)
        if got is None:
            ch = np.asarray(self.experts[layer])
            got = np.flatnonzero((ch == expert).any(axis=1)).astype(np.int64)
            self._groups[key] = got
        return got

    def imbalance(self, layer: int) -> float:
        """Most loaded expert's tokens ÷ the mean over experts (1.0 = perfectly balanced)."""
        c = self.tokens_per_expert(layer)
        mean = c.mean()
        return float(c.max() / mean) if mean > 0 else 1.0

    def summary(self) -> dict:
        """JSON-friendly summary: source, ``ep``, per layer the tokens of each expert and the
        imbalance (max ÷ mean)."""
        return {"source": self.source, "experts": self.n_experts, "top_k": self.top_k,
                "expert_parallel": self.expert_parallel, "tokens": self.n_tokens,
                "tokens_per_expert": {str(l): [int(x) for x in self.tokens_per_expert(l)]
                                      for l in sorted(self.experts)},
                "imbalance": {str(l): round(self.imbalance(l), 4) for l in sorted(self.experts)}}


def _token_request(batch: Batch, phase: str) -> np.ndarray:
    """Batch position of each token row (decode: one per request; prefill: ``seq_len``;
    mixed: each request's ``q_tokens``, :meth:`workloads.requests.Batch.q_tokens`)."""
    return np.repeat(np.arange(len(batch), dtype=np.int64), batch.q_tokens(phase))


def draw_routing(model: ModelSpec, batch: Batch, phase: str, layers, *,
                 zipf_exponent: float = 0.0, seed: int = 0,
                 expert_parallel: int = 1) -> Routing:
    """The router model of timing runs (module docstring): ``k`` distinct experts per token,
    ``p_e ∝ rank(e)^-zipf_exponent`` with a per-layer random ranking, drawn from
    ``(seed, layer)``.

    Args:
        model: a mixture-of-experts model.
        batch: the iteration's requests (all expert-parallel devices').
        phase: ``decode`` (one token per request), ``prefill`` (``seq_len`` tokens each) or
            ``mixed`` (each request's ``q_tokens``: chunked prefill).
        layers: decoder layers to route.
        zipf_exponent: ``s >= 0`` (0 = uniform).
        seed: seed of the draws.
        expert_parallel: ``ep`` (must divide ``n_experts``).

    Raises:
        WorkloadError: a dense model, a negative exponent, a bad ``ep``.
    """
    if model.n_experts is None or model.experts_per_token is None:
        raise WorkloadError(f"model '{model.name}' has no experts to route")
    model.check_expert_parallel(expert_parallel)
    if not zipf_exponent >= 0:
        raise WorkloadError(f"router Zipf exponent must be >= 0, got {zipf_exponent!r}")
    E, k = model.n_experts, model.experts_per_token
    tok = _token_request(batch, phase)
    out = {}
    for layer in layers:
        rng = np.random.default_rng([int(seed), 0x4D6F45, int(layer)])
        rank = rng.permutation(E) + 1                          # rank of each expert, 1..E
        logp = -float(zipf_exponent) * np.log(rank.astype(np.float64))
        keys = logp[None, :] + rng.gumbel(size=(len(tok), E))
        out[int(layer)] = np.argsort(-keys, axis=1, kind="stable")[:, :k].astype(np.int64)
    src = ("router model: uniform top-{k} draws" if zipf_exponent == 0 else
           f"router model: Zipf(s = {zipf_exponent:g}) top-{k} draws").format(k=k)
    return Routing(E, k, out, tok, expert_parallel, f"{src}, seed {seed}")


def routing_from_choices(model: ModelSpec, experts: dict[int, np.ndarray],
                         token_request: np.ndarray, source: str,
                         expert_parallel: int = 1) -> Routing:
    """A :class:`Routing` from the router's own choices (``{layer: int [tokens, k]}``), e.g.
    the top-k of a reference's router logits on the layer's values."""
    if model.n_experts is None or model.experts_per_token is None:
        raise WorkloadError(f"model '{model.name}' has no experts to route")
    return Routing(model.n_experts, model.experts_per_token,
                   {int(l): np.asarray(v, dtype=np.int64) for l, v in experts.items()},
                   np.asarray(token_request, dtype=np.int64), expert_parallel, source)


def top_k_experts(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Router decision on values: the ``k`` largest logits of each row (ties: lower index)
    and their weights, softmax over those ``k`` (float64).

    Args:
        logits: ``[tokens, E]`` router logits.
        k: experts per token.

    Returns:
        ``(experts int [tokens, k], weights float64 [tokens, k])``, largest logit first.
    """
    z = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-z, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(z, order, axis=1)
    w = np.exp(top - top[:, :1])
    return order.astype(np.int64), w / w.sum(axis=1, keepdims=True)


__all__ = ["Routing", "draw_routing", "routing_from_choices", "top_k_experts",
           "device_positions"]
