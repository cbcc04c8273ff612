"""Operator graphs of decoder layers on one tensor-parallel device.

:func:`build_layer_graph` returns a :class:`networkx.DiGraph` whose nodes are operators and whose
edges are data dependencies (producer -> consumer). Node keys are operator names
(``L{layer}.{sub_role}`` for batched operators, ``L{layer}.{sub_role}.r{request_id}`` for
per-request ones). Every node carries the fields of :class:`OpNode` as attributes
(``G.nodes[name]["flops"]``...); :func:`op_of` / :func:`iter_ops` give them back as objects.
Every edge carries ``tensor`` (what flows) and ``size_bytes`` (its size).

Structure of one pre-norm decoder layer (Megatron tensor parallelism: QKV, gate and FFN1 are
column-parallel, the output projection and FFN2 row-parallel, followed by an all-reduce)::

    attn_norm -> qkv [-> qkv_bias] [-> rope] -> per request r: kv_append.r -> attn_score.r
              -> attn_softmax.r -> attn_context.r -> proj [-> proj_allreduce] -> attn_residual
    attn_residual -> ffn_norm -> (ffn_gate, ffn1) [-> biases] -> ffn_act -> ffn2
              [-> ffn_allreduce] -> ffn_residual

In prefill, ``attn_score.r`` and ``attn_context.r`` take K and V straight from ``qkv`` (or
``rope``) and ``kv_append.r`` only writes the cache: nothing in the layer reads it back.

Mixed (chunked prefill, Sarathi-Serve): each request processes its ``q_tokens``
(:class:`workloads.requests.Request`): a request with one query token is attended like a decode
step (K/V from the cache after the append, GEMV-shaped: a one-token prompt chunk is the same
computation), one with more is a prompt chunk (attention over its ``seq_len - q_tokens`` cached
keys, read from the cache, and its own keys, read as produced, causal mask applied; the append
a side branch as in prefill). The batched operators run over all token rows together (the
decode rows ride along with the chunk's). The per-request operators carry the phase of their
request (``decode`` or ``prefill``), the batched ones ``mixed``: placement follows the former.

A mixture-of-experts layer (``model.n_experts``; :mod:`workloads.moe`) replaces the FFN::

    ffn_norm -> moe_router -> moe_topk [-> moe_dispatch] -> per expert e with tokens:
             expert_gate.e, expert_up.e -> expert_act.e -> expert_down.e
             -> moe_combine.e [; moe_return -> moe_combine.remote]
             (all the combines) [-> ffn_allreduce] -> ffn_residual

The routing (:class:`workloads.moe.Routing`, given or drawn by the router model) decides the
rows of each expert's GEMMs; an expert no token chose has no nodes (its weights are not read).
With expert parallelism ``ep > 1`` the graph is device 0's: attention for its requests (batch
positions ``0, ep, 2 ep, ...``), its experts ``[0, E/ep)`` over every token routed to them
(its own and the other devices'), and the all-to-all dispatch/return (``ALLTOALL``) of the
tokens routed across devices.

Shapes (``shape`` attribute, all in elements):

* ``GEMM``: ``{"m", "k", "n"}``: activations ``[m, k]`` (m = token rows) times weights ``[k, n]``
  give ``[m, n]``.
* ``ATTENTION_SCORE``: ``{"batch", "m", "n", "k"}``: for each of ``batch`` = KV heads on the
  device, ``Q [m, k] x K^T [k, n]`` with ``m = (query heads per KV head) x (query tokens)``,
  ``k = head_dim``, ``n = seq_len`` (keys). Decode of an MHA model is a GEMV (``m = 1``); GQA
  stacks the group's query heads.
* ``ATTENTION_CONTEXT``: ``{"batch", "m", "n", "k"}``: ``P [m, k] x V [k, n]`` with
  ``k = seq_len``, ``n = head_dim``.
* vector operators (norms, softmax, activation, elementwise, KV append, embedding, all-reduce,
  top-k, all-to-all): ``{"rows", "cols"}`` of the main output tensor.

Counting conventions (what the numbers mean):

* FLOPs: 2 per multiply-accumulate in GEMM/attention; vector operators use the per-element costs
  in :data:`VECTOR_FLOPS_PER_ELEMENT` (a transcendental counts 1). A layer's GEMM FLOPs are exactly
  ``2 * model.layer_matmul_params(tp) * tokens``; attention score and context FLOPs are each
  ``2 * heads_on_device * head_dim * q_tokens * seq_len`` per request (prefill: dense
  ``q_tokens = seq_len``, the causal mask is applied in the softmax, not skipped).
* Sliding window ``W`` (``model.sliding_window``): decode attention reads ``kv_len(L) =
  min(L, W)`` keys and values (``n`` of the score, ``k`` of the context, their FLOPs and
  ``kv_bytes``, the softmax width); prefill keeps the dense count above (the mask is banded,
  ``i - W < j <= i``, and applied, not skipped); ``KV_APPEND`` writes the ``min(q_tokens, W)``
  rows the rolling buffer keeps (a prompt longer than ``W`` keeps its last ``W`` tokens).
* Bytes: every operator reads its inputs from and writes its outputs to memory (no fusion, no
  on-chip reuse between operators; each operand moved once within an operator). This is the
  traffic of an unfused schedule, the upper bound a mapper improves on. ``weight_bytes`` and
  ``kv_bytes`` say how much of ``bytes_read`` (``bytes_written`` for ``KV_APPEND``) is parameters
  and KV cache.
* Biases: column-parallel biases (QKV, gate, FFN1) are separate ``ELEMENTWISE`` nodes;
  row-parallel biases (proj, FFN2) are added once after the all-reduce, inside the residual add.
* All-reduce (``tp > 1``): ring algorithm; ``comm_bytes = 2 (tp-1)/tp * size`` sent (and received)
  per device, ``flops = (tp-1)/tp * elements`` additions, ``bytes_read``/``bytes_written`` the local
  partial sum in and the reduced result out.
* Mixture of experts: ``moe_router`` is a GEMM ``[T, d] x [d, E]``; ``moe_topk`` (softmax over
  the router logits, top-k, renormalised; ``[T, E]`` dense gate matrix out) counts the softmax's
  6 FLOPs plus ``k`` comparisons per logit; expert GEMMs have ``m`` = the tokens routed to the
  expert; the combine ``out = sum_k w_k y_k`` is one accumulation per expert (``moe_combine.e``,
  the expert's rows of ``out`` += weight x output; 1 FLOP per element for a row's first
  contribution, 2 after: ``2k - 1`` per output element in all). With
  ``ep = 1`` a layer's GEMM FLOPs are exactly ``2 * model.layer_matmul_params(tp) * tokens``
  (the active parameters). All-to-all (``ep > 1``): ``comm_bytes`` = the larger of the bytes
  the device sends and receives (one hidden row of ``d`` elements per token and remote expert).
* Decode: one new token per request (``tokens = len(batch)``). Prefill: ``seq_len`` tokens per
  request. Mixed: ``q_tokens`` per request; a chunk's attention FLOPs count its ``q_tokens``
  query rows against all ``seq_len`` keys (dense, mask applied). The LM head (model graph) runs on the last token of each request only.

Nothing here knows about the machine: mapping decides engines, tiling and fusion.
"""
from __future__ import annotations

import enum
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import networkx as nx
import numpy as np

from workloads.errors import WorkloadError
from workloads.models import ModelSpec
from workloads.moe import Routing, device_positions, draw_routing
from workloads.requests import Batch, Request


class OpKind(str, enum.Enum):
    """Kind of an operator node (the mapper's first dispatch key)."""

    GEMM = "gemm"                            #: batched matmul against weights
    ATTENTION_SCORE = "attention_score"      #: q . K^T of one request (GEMV in decode)
    ATTENTION_CONTEXT = "attention_context"  #: p . V of one request
    SOFTMAX = "softmax"                      #: scaled, masked softmax over the scores
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    ACTIVATION = "activation"                #: GELU, ReLU or SwiGLU (silu(gate) * up)
    ELEMENTWISE = "elementwise"              #: bias add, residual add, RoPE
    ALLREDUCE = "allreduce"                  #: tensor-parallel all-reduce
    KV_APPEND = "kv_append"                  #: write new K/V rows to the request's cache
    EMBEDDING = "embedding"                  #: token (and learned position) lookup
    TOPK = "topk"                            #: MoE router: softmax, top-k, renormalise
    ALLTOALL = "alltoall"                    #: expert-parallel dispatch / return of tokens

    def __str__(self) -> str:
        return self.value


class Phase(str, enum.Enum):
    """Inference phase."""

    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"       #: prompt chunks and decode steps in one iteration (chunked prefill)

    def __str__(self) -> str:
        return self.value


#: FLOPs per output element of vector operators (transcendentals count 1). Sources: the operator
#: definitions (LayerNorm: Ba et al. 2016; RMSNorm: Zhang & Sennrich 2019; GELU tanh form: Hendrycks
#: & Gimpel 2016; SwiGLU: Shazeer 2020; RoPE: Su et al. 2021).
VECTOR_FLOPS_PER_ELEMENT: dict[str, int] = {
    # sum, subtract mean, square, sum of squares, scale by 1/std, gain, bias
    "layernorm": 7,
    # square, sum, scale by 1/rms, gain
    "rmsnorm": 4,
    # scale by 1/sqrt(head_dim), running max, subtract max, exp, sum, divide
    "softmax": 6,
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): x^3 (2), *c (1), + (1), *c (1), tanh (1),
    # +1 (1), *x (1), *0.5 (1)
    "gelu": 9,
    "relu": 1,
    # silu(g) * u = g / (1 + exp(-g)) * u: neg, exp, +1, divide, *g, *u
    "swiglu": 6,
    # x cos + rotate_half(x) sin: 2 multiplies + 1 add per element of q and k
    "rope": 3,
    "add": 1,
    # MoE router gate per logit: the softmax's 6 (the k comparisons of the selection are added
    # per operator: (6 + k) per logit)
    "topk": 6,
}

#: Sub-roles of operators that exist once per request.
PER_REQUEST_ROLES = ("kv_append", "attn_score", "attn_softmax", "attn_context")


@dataclass(frozen=True, slots=True)
class OpNode:
    """One operator of the graph (also the attribute set of its networkx node).

    Attributes:
        name: unique node key.
        kind: :class:`OpKind`.
        sub_role: position in the layer (``qkv``, ``proj``, ``ffn1``, ``ffn_gate``, ``ffn2``,
            ``attn_score``...).
        layer: decoder-layer index (``None`` for embedding / final norm / LM head).
        phase: ``'prefill'``, ``'decode'`` or ``'mixed'`` (a per-request operator of a mixed
            graph carries its request's ``'decode'`` or ``'prefill'``).
        request_id: the request of a per-request operator, ``None`` for batched ones.
        channel: the request's KV channel (per-request operators), else ``None``.
        shape: operand dimensions, see the module docstring for the axis meaning.
        dtype: element type (``'fp16'`` for 2-byte elements).
        flops: floating-point operations (2 per MAC).
        bytes_read: bytes read from memory.
        bytes_written: bytes written to memory.
        weight_bytes: part of ``bytes_read`` that is parameters.
        kv_bytes: KV-cache bytes read (attention) or written (``KV_APPEND``).
        comm_bytes: bytes sent over the interconnect per device (all-reduce), else 0.
    """

    name: str
    kind: OpKind
    sub_role: str
    layer: int | None
    phase: str
    request_id: int | None
    channel: int | None
    shape: dict[str, int]
    dtype: str
    flops: int
    bytes_read: int
    bytes_written: int
    weight_bytes: int = 0
    kv_bytes: int = 0
    comm_bytes: int = 0

    @property
    def bytes_total(self) -> int:
        """``bytes_read + bytes_written``."""
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (``inf`` if no bytes, 0 if no FLOPs)."""
        b = self.bytes_total
        return math.inf if b == 0 else self.flops / b

    def as_dict(self) -> dict[str, Any]:
        """Attributes as a dict (``kind`` stays an :class:`OpKind`; shape copied)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["shape"] = dict(self.shape)
        return d

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable dict (``kind`` as its string value)."""
        d = self.as_dict()
        d["kind"] = self.kind.value
        return d


_OP_FIELDS = tuple(f.name for f in fields(OpNode))


def op_of(graph: nx.DiGraph, name: str) -> OpNode:
    """The :class:`OpNode` view of node ``name`` of ``graph``."""
    data = graph.nodes[name]
    return OpNode(**{k: data[k] for k in _OP_FIELDS})


def iter_ops(graph: nx.DiGraph) -> Iterator[OpNode]:
    """All operators of ``graph`` in a topological order (ties in insertion order)."""
    for name in nx.topological_sort(graph):
        yield op_of(graph, name)


def _phase(phase: str | Phase) -> Phase:
    try:
        return Phase(phase)
    except ValueError:
        raise WorkloadError(f"phase {phase!r} not one of ['prefill', 'decode', 'mixed']"
                            ) from None


def _routing(model: ModelSpec, phase: Phase, batch: Batch, routing: Routing | None,
             layers: Iterable[int]) -> Routing | None:
    """The routing of a mixture-of-experts graph: ``routing`` (checked against the batch and
    the model), or the uniform router model's draw with seed 0 (:func:`workloads.moe.
    draw_routing`); None for a dense model.

    Raises:
        WorkloadError: a routing for a dense model, for another expert count or top-k, of
            another number of tokens, or missing a layer of the graph.
    """
    layers = list(layers)
    if model.n_experts is None:
        if routing is not None:
            raise WorkloadError(f"model '{model.name}' has no experts: a routing does not apply")
        return None
    if routing is None:
        return draw_routing(model, batch, phase.value, layers)
    if (routing.n_experts, routing.top_k) != (model.n_experts, model.experts_per_token):
        raise WorkloadError(f"routing for {routing.n_experts} experts, top-{routing.top_k}; "
                            f"model '{model.name}' has {model.n_experts}, top-"
                            f"{model.experts_per_token}")
    if routing.n_tokens != batch.tokens(phase.value):
        raise WorkloadError(f"routing of {routing.n_tokens} tokens for a {phase.value} batch of "
                            f"{batch.tokens(phase.value)}")
    missing = [l for l in layers if l not in routing.experts]
    if missing:
        raise WorkloadError(f"routing has no choices for layer(s) {missing}")
    return routing


def _tp(model: ModelSpec, tp: int | None) -> int:
    tp = model.tensor_parallel if tp is None else tp
    model.check_tensor_parallel(tp)
    return tp


# ------------------------------------------------------------------------------- the builder
class _Builder:
    """Adds the operators of layers to one graph (shared by layer and model graphs)."""

    def __init__(self, model: ModelSpec, phase: Phase, batch: Batch, tp: int,
                 routing: Routing | None = None, layers: Iterable[int] = ()) -> None:
        if not isinstance(batch, Batch):
            batch = Batch(tuple(batch))
        batch.validate_for_model(model)
        self.routing = _routing(model, phase, batch, routing, layers)
        ep = self.routing.expert_parallel if self.routing is not None else 1
        if ep > 1:       # device 0 runs attention for batch positions 0, ep, 2 ep, ...
            pos = device_positions(len(batch), ep)
            if not len(pos):
                raise WorkloadError(f"expert parallel {ep}: the batch of {len(batch)} requests "
                                    "leaves device 0 without a request")
            batch = Batch(tuple(batch[int(i)] for i in pos), batch.source)
        self.ep = ep
        self.m, self.phase, self.batch, self.tp = model, phase, batch, tp
        self.b = model.dtype_bytes
        self.h = model.heads_per_device(tp)
        self.kv = model.kv_heads_per_device(tp)
        self.group = self.h // self.kv
        self.hd = model.head_dim
        self.d = model.d_model
        self.ff = model.d_ff_per_device(tp)
        # query tokens per request in this iteration
        self.q_tokens = [int(q) for q in batch.q_tokens(phase.value)]
        self.T = sum(self.q_tokens)
        self.g = nx.DiGraph()

    # -- primitives -----------------------------------------------------------------------
    def add(self, op: OpNode, deps: Iterable[tuple[str, str, int]] = ()) -> str:
        """Add ``op`` with incoming edges ``(producer, tensor, size_bytes)``."""
        if op.name in self.g:
            raise WorkloadError(f"graph: duplicate operator name {op.name!r}")
        self.g.add_node(op.name, **op.as_dict())
        for src, tensor, size in deps:
            self.g.add_edge(src, op.name, tensor=tensor, size_bytes=int(size))
        return op.name

    def op(self, name: str, kind: OpKind, role: str, layer: int | None, shape: dict[str, int],
           flops: int, read: int, written: int, *, request: Request | None = None,
           weight: int = 0, kv: int = 0, comm: int = 0, phase: Phase | None = None) -> OpNode:
        return OpNode(
            name=name, kind=kind, sub_role=role, layer=layer,
            phase=(phase or self.phase).value,
            request_id=None if request is None else request.id,
            channel=None if request is None else request.channel, shape=shape,
            dtype=self.m.dtype, flops=int(flops), bytes_read=int(read), bytes_written=int(written),
            weight_bytes=int(weight), kv_bytes=int(kv), comm_bytes=int(comm))

    def gemm(self, name: str, role: str, layer: int | None, m: int, k: int, n: int,
             deps: Iterable[tuple[str, str, int]]) -> str:
        b = self.b
        return self.add(self.op(name, OpKind.GEMM, role, layer, {"m": m, "k": k, "n": n},
                                2 * m * k * n, (m * k + k * n) * b, m * n * b,
                                weight=k * n * b), deps)

    def vector(self, name: str, kind: OpKind, role: str, layer: int | None, rows: int, cols: int,
               flops_per_elem: int, n_inputs: int, param_elems: int,
               deps: Iterable[tuple[str, str, int]]) -> str:
        """Elementwise-style op: reads ``n_inputs`` [rows, cols] tensors + params, writes one."""
        e = rows * cols
        b = self.b
        return self.add(self.op(name, kind, role, layer, {"rows": rows, "cols": cols},
                                flops_per_elem * e, (n_inputs * e + param_elems) * b, e * b,
                                weight=param_elems * b), deps)

    def norm(self, name: str, role: str, layer: int | None, rows: int,
             deps: Iterable[tuple[str, str, int]]) -> str:
        ln = self.m.norm == "layernorm"
        return self.vector(name, OpKind.LAYERNORM if ln else OpKind.RMSNORM, role, layer, rows,
                           self.d, VECTOR_FLOPS_PER_ELEMENT[self.m.norm], 1,
                           (2 if ln else 1) * self.d, deps)

    def allreduce(self, name: str, role: str, layer: int, src: str | list[str]) -> str:
        e = self.T * self.d
        tp, b = self.tp, self.b
        return self.add(
            self.op(name, OpKind.ALLREDUCE, role, layer, {"rows": self.T, "cols": self.d},
                    e * (tp - 1) // tp, e * b, e * b, comm=2 * (tp - 1) * e * b // tp),
            [(x, "partial_sum", e * b) for x in ([src] if isinstance(src, str) else src)])

    # -- one layer ------------------------------------------------------------------------
    def layer(self, l: int, x_src: str | None) -> str:
        """Add decoder layer ``l``; ``x_src`` produces its input (None: graph input).

        Returns the name of the layer's output node (``ffn_residual``).
        """
        m, b, T, d = self.m, self.b, self.T, self.d
        h, kv, hd, ff = self.h, self.kv, self.hd, self.ff
        act_bytes = T * d * b
        x_dep = [] if x_src is None else [(x_src, "hidden", act_bytes)]
        p = f"L{l}."

        norm1 = self.norm(p + "attn_norm", "attn_norm", l, T, x_dep)
        qkv_cols = (h + 2 * kv) * hd
        qkv_bytes = T * qkv_cols * b
        cur = self.gemm(p + "qkv", "qkv", l, T, d, qkv_cols, [(norm1, "normed", act_bytes)])
        if m.attention_bias:
            cur = self.vector(p + "qkv_bias", OpKind.ELEMENTWISE, "qkv_bias", l, T, qkv_cols,
                              VECTOR_FLOPS_PER_ELEMENT["add"], 1, qkv_cols,
                              [(cur, "qkv", qkv_bytes)])
        qkv_src = cur
        q_src = k_src = v_src = cur
        if m.positional == "rope":
            cols = (h + kv) * hd
            e = T * cols
            # reads q and k plus the cos and sin tables ([T, hd/2] each), writes rotated q and k
            rope = self.add(self.op(p + "rope", OpKind.ELEMENTWISE, "rope", l,
                                    {"rows": T, "cols": cols}, VECTOR_FLOPS_PER_ELEMENT["rope"] * e,
                                    (e + T * hd) * b, e * b),
                            [(qkv_src, "q,k", e * b)])
            q_src = k_src = rope

        contexts: list[tuple[str, str, int]] = []
        for r, q in zip(self.batch, self.q_tokens):
            # decode: the newest token attends to the last kv_len(L) keys (the whole context,
            # or the sliding window); prefill: dense over the prompt, the (banded) causal mask
            # applied in the softmax; mixed: per request, one query token as decode, more as
            # a prompt chunk (dense over its cached prefix and itself)
            rph = self.phase if self.phase is not Phase.MIXED else (
                Phase.DECODE if q == 1 else Phase.PREFILL)
            L = r.seq_len if rph is Phase.PREFILL else m.kv_len(r.seq_len)
            tag = f".r{r.id}"
            kv_new = 2 * m.kv_len(q) * kv * hd * b   # K and V rows kept of this iteration's
            kv_read = L * kv * hd * b             # K (or V) of the attended context
            if v_src != k_src:
                app_deps = [(k_src, "k_new", kv_new // 2), (v_src, "v_new", kv_new // 2)]
            else:
                app_deps = [(k_src, "k_new,v_new", kv_new)]
            app = self.add(self.op(p + "kv_append" + tag, OpKind.KV_APPEND, "kv_append", l,
                                   {"rows": m.kv_len(q), "cols": 2 * kv * hd}, 0, kv_new, kv_new,
                                   request=r, kv=kv_new, phase=rph), app_deps)
            # prefill: the whole context is this iteration's K/V, read as produced (the cache
            # write is a side branch, as in FlashAttention-style prefill kernels); a prompt
            # chunk reads its cached prefix (written by earlier iterations) besides; decode: K/V
            # of the whole context come from the cache after the append
            if rph is Phase.PREFILL:
                k_in, v_in = (k_src, "k", kv_read), (v_src, "v", kv_read)
            else:
                k_in, v_in = (app, "k_cache", kv_read), (app, "v_cache", kv_read)
            scores = h * q * L
            shape = {"batch": kv, "m": self.group * q, "n": L, "k": hd}
            sc = self.add(self.op(p + "attn_score" + tag, OpKind.ATTENTION_SCORE, "attn_score",
                                  l, shape, 2 * h * q * L * hd,
                                  q * h * hd * b + kv_read, scores * b, request=r,
                                  kv=kv_read, phase=rph),
                          [(q_src, "q", q * h * hd * b), k_in])
            sm = self.add(self.op(p + "attn_softmax" + tag, OpKind.SOFTMAX, "attn_softmax", l,
                                  {"rows": h * q, "cols": L},
                                  VECTOR_FLOPS_PER_ELEMENT["softmax"] * scores, scores * b,
                                  scores * b, request=r, phase=rph),
                          [(sc, "scores", scores * b)])
            shape = {"batch": kv, "m": self.group * q, "n": hd, "k": L}
            out = q * h * hd * b
            cx = self.add(self.op(p + "attn_context" + tag, OpKind.ATTENTION_CONTEXT,
                                  "attn_context", l, shape, 2 * h * q * L * hd,
                                  scores * b + kv_read, out, request=r, kv=kv_read,
                                  phase=rph),
                          [(sm, "probs", scores * b), v_in])
            contexts.append((cx, "context", out))

        proj = self.gemm(p + "proj", "proj", l, T, h * hd, d, contexts)
        red = self.allreduce(p + "proj_allreduce", "proj_allreduce", l, proj) if self.tp > 1 \
            else proj
        res1 = self.vector(p + "attn_residual", OpKind.ELEMENTWISE, "attn_residual", l, T, d,
                           VECTOR_FLOPS_PER_ELEMENT["add"] * (2 if m.proj_bias else 1), 2,
                           d if m.proj_bias else 0,
                           [(red, "attn_out", act_bytes)] + [(s, "residual", n) for s, _, n in
                                                             x_dep])

        norm2 = self.norm(p + "ffn_norm", "ffn_norm", l, T, [(res1, "hidden", act_bytes)])
        if m.n_experts is not None:
            outs = self.moe(l, norm2)
            if self.tp > 1:
                outs = [self.allreduce(p + "ffn_allreduce", "ffn_allreduce", l, outs)]
            return self.vector(p + "ffn_residual", OpKind.ELEMENTWISE, "ffn_residual", l, T, d,
                               VECTOR_FLOPS_PER_ELEMENT["add"], 2, 0,
                               [(o, "ffn_out", act_bytes) for o in outs]
                               + [(res1, "residual", act_bytes)])
        ff_bytes = T * ff * b
        branches: list[str] = []
        roles = ("ffn_gate", "ffn1") if m.activation == "swiglu" else ("ffn1",)
        for role in roles:
            g = self.gemm(p + role, role, l, T, d, ff, [(norm2, "normed", act_bytes)])
            if m.mlp_bias:
                g = self.vector(p + role + "_bias", OpKind.ELEMENTWISE, role + "_bias", l, T, ff,
                                VECTOR_FLOPS_PER_ELEMENT["add"], 1, ff, [(g, role, ff_bytes)])
            branches.append(g)
        act = self.vector(p + "ffn_act", OpKind.ACTIVATION, "ffn_act", l, T, ff,
                          VECTOR_FLOPS_PER_ELEMENT[m.activation], len(branches), 0,
                          [(s, "gate" if len(branches) == 2 and i == 0 else "up", ff_bytes)
                           for i, s in enumerate(branches)])
        f2 = self.gemm(p + "ffn2", "ffn2", l, T, ff, d, [(act, "act", ff_bytes)])
        red = self.allreduce(p + "ffn_allreduce", "ffn_allreduce", l, f2) if self.tp > 1 else f2
        return self.vector(p + "ffn_residual", OpKind.ELEMENTWISE, "ffn_residual", l, T, d,
                           VECTOR_FLOPS_PER_ELEMENT["add"] * (2 if m.mlp_bias else 1), 2,
                           d if m.mlp_bias else 0,
                           [(red, "ffn_out", act_bytes), (res1, "residual", act_bytes)])

    def moe(self, l: int, norm2: str) -> list[str]:
        """The mixture-of-experts FFN of layer ``l`` on device 0 (module docstring); returns
        the ``moe_combine`` nodes, whose accumulations together give ``[T, d]``: the experts'
        weighted sum."""
        m, b, T, d, ff = self.m, self.b, self.T, self.d, self.ff
        R = self.routing
        assert R is not None and m.n_experts is not None and m.experts_per_token is not None
        E, k, p = m.n_experts, m.experts_per_token, f"L{l}."
        act_bytes = T * d * b
        router = self.gemm(p + "moe_router", "moe_router", l, T, d, E,
                           [(norm2, "normed", act_bytes)])
        gates = T * E * b
        topk = self.add(self.op(p + "moe_topk", OpKind.TOPK, "moe_topk", l,
                                {"rows": T, "cols": E},
                                (VECTOR_FLOPS_PER_ELEMENT["topk"] + k) * T * E, gates, gates),
                        [(router, "router_logits", gates)])
        ch = np.asarray(R.experts[l])
        dev = R.token_device()
        local = set(m.local_experts(self.ep))
        own = dev == 0
        is_local = np.isin(ch, list(local))
        sent = int((own[:, None] & ~is_local).sum())        # own tokens x remote experts
        received = int((~own[:, None] & is_local).sum())    # other devices' tokens x ours
        row = d * b
        src_in = [(norm2, "normed", act_bytes)]
        exchange = self.ep > 1 and max(sent, received) > 0
        if exchange:
            n = max(sent, received)
            disp = self.add(self.op(p + "moe_dispatch", OpKind.ALLTOALL, "moe_dispatch", l,
                                    {"rows": n, "cols": d}, 0, sent * row, received * row,
                                    comm=n * row),
                            [(norm2, "normed", act_bytes), (topk, "routes", gates)])
            src_in = src_in + [(disp, "tokens_in", received * row)]
        outs = []
        own_rows = {}                                     # local expert -> own tokens routed
        for e in sorted(local):
            n_e = int(len(R.tokens_of(l, e)))
            own_rows[e] = int((own & (ch == e).any(axis=1)).sum())
            if n_e == 0:
                continue
            tag = f".e{e}"
            deps = [(s, t, min(sz, n_e * row)) for s, t, sz in src_in]
            g = self.gemm(p + "expert_gate" + tag, "expert_gate", l, n_e, d, ff, deps)
            u = self.gemm(p + "expert_up" + tag, "expert_up", l, n_e, d, ff, deps)
            fb = n_e * ff * b
            a = self.vector(p + "expert_act" + tag, OpKind.ACTIVATION, "expert_act", l, n_e, ff,
                            VECTOR_FLOPS_PER_ELEMENT["swiglu"], 2, 0,
                            [(g, "gate", fb), (u, "up", fb)])
            outs.append((e, self.gemm(p + "expert_down" + tag, "expert_down", l, n_e, ff, d,
                                      [(a, "act", fb)]), n_e))
        # the combine: one accumulation per expert with own rows, in expert order, then the
        # rows the other devices computed (after the return); a row's first contribution
        # costs 1 FLOP per element (the product), the others 2 (multiply-add). The
        # accumulations of one row commute up to rounding: the program orders them (one vector
        # unit per row chunk), no graph edge does

        steps: list[tuple[str, list, int, int]] = []     # (name, deps, rows, flops)
        seen = np.zeros(len(ch), dtype=bool)
        for e, o, n_e in outs:
            if own_rows[e]:
                rows = own & (ch == e).any(axis=1)
                first = int((rows & ~seen).sum())
                seen |= rows
                steps.append((f"moe_combine.e{e}", [(o, "expert_out", own_rows[e] * row)],
                              own_rows[e], (2 * own_rows[e] - first) * d))
        if exchange:
            n = max(sent, received)
            ret = self.add(self.op(p + "moe_return", OpKind.ALLTOALL, "moe_return", l,
                                   {"rows": n, "cols": d}, 0, received * row, sent * row,
                                   comm=n * row),
                           [(o, "expert_out", n_e * row) for _, o, n_e in outs])
            if sent:
                rows = own[:, None] & ~is_local
                first = int((rows.any(axis=1) & ~seen).sum())
                steps.append(("moe_combine.remote", [(ret, "expert_out", sent * row)], sent,
                              (2 * sent - first) * d))
        out = [self.add(self.op(p + name, OpKind.ELEMENTWISE, "moe_combine", l,
                                {"rows": n_rows, "cols": d}, flops, n_rows * (row + b),
                                n_rows * row), deps + [(topk, "gates", gates)])
               for name, deps, n_rows, flops in steps]
        assert out, "every token has experts"
        return out

    def embedding(self) -> str:
        T, d, b = self.T, self.d, self.b
        learned = self.m.positional == "learned"
        rows = T * d * (2 if learned else 1)   # token rows (+ position rows) gathered
        return self.add(self.op("embedding", OpKind.EMBEDDING, "embedding", None,
                                {"rows": T, "cols": d}, T * d if learned else 0, rows * b,
                                T * d * b, weight=rows * b))

    def head(self, x_src: str) -> str:
        n_req, d, b = len(self.batch), self.d, self.b
        fn = self.norm("final_norm", "final_norm", None, n_req,
                       [(x_src, "hidden_last_token", n_req * d * b)])
        return self.gemm("lm_head", "lm_head", None, n_req, d, self.m.vocab_per_device(self.tp),
                         [(fn, "normed", n_req * d * b)])


def build_layer_graph(model: ModelSpec, phase: str | Phase, batch: Batch | Iterable[Request],
                      tp: int | None = None, layer: int = 0,
                      routing: Routing | None = None) -> nx.DiGraph:
    """Operator graph of one decoder layer on one tensor-parallel device.

    Args:
        model: the model.
        phase: ``'prefill'`` (each request processes its ``seq_len`` prompt tokens),
            ``'decode'`` (one token per request, attention over ``seq_len`` keys) or
            ``'mixed'`` (each request its ``q_tokens``: decode steps and prompt chunks, module
            docstring).
        batch: the requests (a :class:`Batch` or an iterable of :class:`Request`).
        tp: tensor-parallel degree (default ``model.tensor_parallel``); heads, KV heads and FFN
            columns are split over ``tp`` devices, and all-reduce nodes follow the output
            projection and FFN2 when ``tp > 1``.
        layer: layer index written into names and the ``layer`` attribute.
        routing: a mixture-of-experts model's routing (default: the uniform router model,
            seed 0); its ``expert_parallel`` makes the graph device 0's (module docstring).

    Returns:
        a DAG; ``graph.graph`` holds ``model``, ``phase``, ``tp``, ``tokens``, ``requests``
        (device 0's, with expert parallelism) and ``routing`` (its source, or None).

    Raises:
        WorkloadError: bad phase, a ``tp`` that does not split the model, an empty batch, a
            request longer than ``model.max_seq_len``, or a routing that does not fit.
    """
    ph = _phase(phase)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < model.n_layers:
        raise WorkloadError(f"layer {layer!r} not in 0..{model.n_layers - 1} of model "
                            f"'{model.name}'")
    bld = _Builder(model, ph, batch if isinstance(batch, Batch) else Batch(tuple(batch)),
                   _tp(model, tp), routing, [layer])
    bld.layer(layer, None)
    _annotate(bld, layers=[layer])
    return bld.g


def build_model_graph(model: ModelSpec, phase: str | Phase, batch: Batch | Iterable[Request],
                      tp: int | None = None, pp: int | None = None, stage: int = 0,
                      include_embedding: bool = True, include_lm_head: bool = True,
                      routing: Routing | None = None) -> nx.DiGraph:
    """Operator graph of all layers of one pipeline stage on one tensor-parallel device.

    Layers are chained through their residual stream. With ``pp`` stages (default
    ``model.pipeline_parallel``), stage ``s`` holds layers ``s*n/pp .. (s+1)*n/pp - 1``; the
    embedding (token and learned-position lookup, replicated per device) is added to stage 0 and
    the final norm + vocab-parallel LM head (last token of each request) to the last stage.
    Pipeline send/receive between stages is not modelled. ``routing``: as
    :func:`build_layer_graph` (covering the stage's layers).

    Raises:
        WorkloadError: as :func:`build_layer_graph`, or a bad ``pp``/``stage``.
    """
    ph = _phase(phase)
    pp = model.pipeline_parallel if pp is None else pp
    if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1 or model.n_layers % pp:
        raise WorkloadError(f"model '{model.name}': pipeline-parallel degree {pp!r} must be a "
                            f"positive divisor of n_layers={model.n_layers}")
    if not (isinstance(stage, int) and 0 <= stage < pp):
        raise WorkloadError(f"pipeline stage {stage!r} not in 0..{pp - 1}")
    per = model.n_layers // pp
    layers = list(range(stage * per, (stage + 1) * per))
    bld = _Builder(model, ph, batch if isinstance(batch, Batch) else Batch(tuple(batch)),
                   _tp(model, tp), routing, layers)
    src = bld.embedding() if include_embedding and stage == 0 else None
    for l in layers:
        src = bld.layer(l, src)
    if include_lm_head and stage == pp - 1:
        assert src is not None
        bld.head(src)
    _annotate(bld, layers=layers)
    return bld.g


def _annotate(bld: _Builder, layers: list[int]) -> None:
    bld.g.graph.update(model=bld.m.name, phase=bld.phase.value, tp=bld.tp, tokens=bld.T,
                       requests=len(bld.batch), layers=layers, dtype=bld.m.dtype,
                       routing=None if bld.routing is None else bld.routing.source)


# ------------------------------------------------------------------------------ summaries
def graph_totals(graph: nx.DiGraph) -> dict[str, int]:
    """Sums over all nodes: ``flops``, ``bytes_read``, ``bytes_written``, ``weight_bytes``,
    ``kv_bytes``, ``comm_bytes`` and ``ops`` (node count)."""
    keys = ("flops", "bytes_read", "bytes_written", "weight_bytes", "kv_bytes", "comm_bytes")
    out = {k: 0 for k in keys}
    for _, data in graph.nodes(data=True):
        for k in keys:
            out[k] += data[k]
    out["ops"] = graph.number_of_nodes()
    return out


def totals_by(graph: nx.DiGraph, attr: str = "kind") -> dict[Any, dict[str, int]]:
    """Like :func:`graph_totals` but grouped by a node attribute (``kind``, ``sub_role``...)."""
    groups: dict[Any, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for _, data in graph.nodes(data=True):
        g = groups[data[attr]]
        g["ops"] += 1
        for k in ("flops", "bytes_read", "bytes_written", "weight_bytes", "kv_bytes",
                  "comm_bytes"):
            g[k] += data[k]
    return {k: dict(v) for k, v in groups.items()}


@dataclass
class OpGroup:
    """Operators of the same ``(layer, sub_role, kind)`` aggregated (per-request ops of a layer).

    ``count`` operators; ``flops``/bytes are sums; ``shapes`` the distinct shapes seen (first 3);
    ``seq_len_min``/``seq_len_max`` the request lengths (``None`` for batched ops).
    """

    sub_role: str
    kind: OpKind
    layer: int | None
    count: int = 0
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    weight_bytes: int = 0
    kv_bytes: int = 0
    comm_bytes: int = 0
    shape: dict[str, int] = field(default_factory=dict)
    seq_len_min: int | None = None
    seq_len_max: int | None = None

    @property
    def bytes_total(self) -> int:
        """``bytes_read + bytes_written``."""
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of the group (``inf`` if no bytes)."""
        return math.inf if self.bytes_total == 0 else self.flops / self.bytes_total

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable dict."""
        d = asdict(self)
        d["kind"] = self.kind.value
        return d


def aggregate_ops(graph: nx.DiGraph) -> list[OpGroup]:
    """One :class:`OpGroup` per ``(layer, sub_role, kind)``, in topological order of first use.

    Batched operators give groups of one; per-request attention operators of a layer collapse
    into one group each (``shape`` is the first request's; ``seq_len_*`` span the batch).
    """
    groups: dict[tuple[Any, str, OpKind], OpGroup] = {}
    for op in iter_ops(graph):
        key = (op.layer, op.sub_role, op.kind)
        g = groups.get(key)
        if g is None:
            g = groups[key] = OpGroup(op.sub_role, op.kind, op.layer, shape=dict(op.shape))
        g.count += 1
        g.flops += op.flops
        g.bytes_read += op.bytes_read
        g.bytes_written += op.bytes_written
        g.weight_bytes += op.weight_bytes
        g.kv_bytes += op.kv_bytes
        g.comm_bytes += op.comm_bytes
        if op.request_id is not None:
            L = op.shape.get("n") if op.kind is OpKind.ATTENTION_SCORE else (
                op.shape.get("k") if op.kind is OpKind.ATTENTION_CONTEXT else
                op.shape.get("cols") if op.kind is OpKind.SOFTMAX else None)
            if L is not None:
                g.seq_len_min = L if g.seq_len_min is None else min(g.seq_len_min, L)
                g.seq_len_max = L if g.seq_len_max is None else max(g.seq_len_max, L)
    return list(groups.values())
