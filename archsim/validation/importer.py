"""Import a user's PyTorch decoder layer: ``torch.nn.Module`` -> workloads model spec, operator
graph and weights, through ``torch.export``. Over 800 lines because the walk of the exported
graph (``_parse``, one pass of about 280 lines over the FX nodes) and the reference that replays
the same exported program (:class:`ImportedLayerReference`) share the private export, parse
and weight helpers; splitting them would turn those helpers into a public API.

:func:`import_decoder_layer` exports the module on an example input ``x [B, T, d]`` and walks
the data path (every node that depends on ``x``; nodes that do not — masks, RoPE tables,
constants — are folded). Each data-path operator is one of:

* a **GEMM** against a parameter: ``aten.linear`` (weight ``[out, in]``), ``aten.addmm`` /
  ``aten.mm`` / ``aten.matmul`` (weight ``[in, out]``, possibly through ``t``/``transpose``);
  its bias (``addmm``/``linear`` operand, or a following ``add`` of a parameter);
* an **attention matmul** (``matmul``/``bmm`` of two activations) or
  ``scaled_dot_product_attention``;
* a **vector** operator the vector units run: ``softmax``, ``layer_norm``/``rms_norm`` or their
  written-out forms (``mean``, ``sub``, ``pow``, ``sqrt``/``rsqrt``, ``div``, ``mul``, ``add``),
  ``gelu``/``tanh`` (GELU), ``silu``/``sigmoid`` (SwiGLU), ``relu``, RoPE (``neg``, ``cat``,
  ``slice``, products with the tables), masks (``masked_fill``, ``where``), residual adds;
* a **view**: reshapes, transposes, slices, splits, ``expand``/``repeat_interleave`` (grouped
  KV heads), dtype casts, ``dropout`` in eval mode, ``contiguous``, ``clone``.

The first operator outside these sets raises :class:`UnsupportedOpError` naming the operator,
the FX node and the source line. The GEMMs must form one decoder layer in the order the mapper
supports (QKV as one fused GEMM or three ``q``/``k``/``v`` GEMMs of the same input, attention,
output projection, FFN up (and gate), FFN down).

The result (:class:`ImportedLayer`) holds the inferred :class:`workloads.models.ModelSpec`, the
operator graph *traced* from the module (workloads node names, kinds, sub-roles and shapes, and
edges derived from the module's own dataflow: a semantic node's predecessors are the semantic
nodes its inputs come from), the graph :func:`workloads.build_layer_graph` builds for the spec
(checked equal to the traced one, :func:`graph_differences`), and the weights under the
compiler's tensor names. :func:`validate_imported_layer` validates the imported layer like
``archsim validate``, with the module's own exported program as the reference.

Conventions that follow workloads (and are therefore not differences): separate ``q``/``k``/``v``
GEMMs of one input are the fused ``qkv`` GEMM (columns ``[q | k | v]``); the output projection's
and FFN down projection's biases are part of the residual add (row-parallel biases); QKV/FFN-up
biases are separate ``*_bias`` nodes even when fused into an ``addmm``.
"""
from __future__ import annotations

import copy
import operator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from archsim.validation.core import ValidationError
from archsim.validation.reference import DecodeResult, HostReference, PrefillResult


class UnsupportedOpError(ValidationError):
    """The exported module uses an operator the mapper cannot run (named in the message)."""


# ---- operator sets (aten overload packets, by name) -------------------------------------------
_GEMM = {"linear", "addmm", "mm", "matmul", "bmm"}
_VIEW = {"view", "reshape", "_unsafe_view", "transpose", "permute", "t", "contiguous", "clone",
         "expand", "unsqueeze", "squeeze", "slice", "select", "split", "split_with_sizes",
         "unbind", "chunk", "alias", "detach", "dropout", "to", "_to_copy", "type_as",
         "repeat_interleave", "flatten", "lift_fresh_copy", "_assert_tensor_metadata"}
_VECTOR = {"add", "sub", "mul", "div", "neg", "pow", "sqrt", "rsqrt", "mean", "tanh", "exp",
           "sigmoid", "silu", "gelu", "relu", "softmax", "_softmax", "layer_norm", "rms_norm",
           "masked_fill", "where", "cat", "reciprocal", "scaled_dot_product_attention",
           "_safe_softmax", "erf"}
_EXPAND = {"transpose", "permute", "repeat_interleave", "expand", "unsqueeze", "reshape", "view",
           "contiguous", "clone", "_unsafe_view", "t", "to", "_to_copy", "dropout",
           "_assert_tensor_metadata", "alias"}


def _opname(node) -> str:
    """``aten.add.Tensor`` -> ``add``; ``operator.getitem`` -> ``getitem``."""
    t = node.target
    if t is operator.getitem:
        return "getitem"
    name = getattr(t, "__name__", str(t))
    return name.split(".")[0]


def _inputs(node) -> list:
    """FX nodes among a node's (nested) arguments."""
    import torch.fx as fx

    out: list = []

    def visit(a: Any) -> None:
        if isinstance(a, fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            for b in a:
                visit(b)
        elif isinstance(a, dict):
            for b in a.values():
                visit(b)
    visit(node.args)
    visit(node.kwargs)
    return out


def _shape(node) -> tuple | None:
    v = node.meta.get("val")
    return tuple(v.shape) if hasattr(v, "shape") else None


def _dim(x) -> int | None:
    try:
        return int(x)
    except Exception:  # noqa: BLE001 - symbolic size
        return None


def _is_shape_arith(node) -> bool:
    """A node computing sizes, not values (``sym_size``, SymInt arithmetic, assertions)."""
    import torch

    v = node.meta.get("val", ...)
    if isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat, int, bool, float)):
        return True
    return v is None and _opname(node).startswith(("sym_", "_assert"))


def _where(node) -> str:
    tr = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in tr.strip().splitlines() if ln.strip()]
    return f" ({lines[-2]}: {lines[-1]})" if len(lines) >= 2 else ""


# ---- result types -----------------------------------------------------------------------------
@dataclass
class ImportedLayer:
    """A decoder layer imported from PyTorch.

    Attributes:
        spec: the inferred model spec (one layer).
        weights: parameters under the compiler's tensor names (``attn_norm``, ``qkv_w``,
            ``qkv_b``, ``proj_w``, ``proj_b``, ``ffn_norm``, ``ffn_gate_w``, ``ffn1_w``,
            ``ffn1_b``, ``ffn2_w``, ``ffn2_b``), float64, ``[in, out]``.
        traced: the operator graph traced from the module (prefill of the example: ``B``
            requests of ``T`` tokens): node names, ``kind``, ``sub_role``, ``shape``; edges.
        graph: :func:`workloads.build_layer_graph` of ``spec`` for the same batch (equal to
            ``traced`` on names, kinds, sub-roles, shapes and edges; carries FLOPs and bytes).
        batch: the example's requests (``B`` requests of ``seq_len`` ``T``).
        param_names: compiler tensor name -> the module's parameter name(s).
        module: the module (for :func:`validate_imported_layer`).
        notes: what the importer decided (e.g. q/k/v fused).
        extra_inputs: forward keyword inputs besides ``x`` the export needed (e.g. RoPE
            tables); such a layer's graph is imported, its values cannot be validated.
    """

    spec: Any
    weights: dict[str, np.ndarray]
    traced: nx.DiGraph
    graph: nx.DiGraph
    batch: Any
    param_names: dict[str, list[str]]
    module: Any = field(repr=False, default=None)
    notes: list[str] = field(default_factory=list)
    extra_inputs: list[str] = field(default_factory=list)


@dataclass
class _Parsed:
    """Structure of an exported layer (internal)."""

    x: Any
    qkv: list                      # 1 or 3 GEMM nodes (q, k, v order)
    proj: Any
    ffn_up: Any
    ffn_gate: Any | None
    ffn2: Any
    score: Any                     # matmul or sdpa node
    context: Any                   # matmul or sdpa node (same as score for sdpa)
    softmax: Any
    k_src: Any                     # [B, KV, T, hd] keys as cached (after RoPE)
    v_src: Any
    q_src: Any
    res1: Any
    out: Any
    norm1_out: Any
    norm2_out: Any
    norm_kind: str
    eps: float
    activation: str
    rope: bool
    gemm_info: dict                # node -> (weight fqn, transpose?, bias fqn or None)
    bias_adds: dict                # gemm node -> (add node, bias fqn) for separate bias adds
    params: dict                   # placeholder name -> fqn
    heads: int
    kv_heads: int
    head_dim: int
    norm_params: dict = field(default_factory=dict)  # "attn_norm"/"ffn_norm" -> [gain, bias]


def _export(module, args: tuple, kwargs: dict, dynamic: int = 0):
    """``torch.export`` (static, or with dynamic batch and ``2..dynamic`` tokens)."""
    import torch

    dyn = None
    if dynamic:
        from torch.export import Dim
        dyn = ({0: Dim("B", min=1, max=1024), 1: Dim("T", min=2, max=int(dynamic))},) + \
            (None,) * (len(args) - 1)
    try:
        return torch.export.export(module, args, kwargs or None, dynamic_shapes=dyn,
                                   strict=False)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types
        raise ValidationError(f"torch.export could not trace the module: "
                              f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None


def _parse(ep) -> _Parsed:
    """Classify the data path of an exported layer (module docstring)."""
    from torch.export.graph_signature import InputKind

    g = ep.graph
    sig = ep.graph_signature
    params: dict[str, str] = {}
    user: list[str] = []
    for spec in sig.input_specs:
        if spec.kind == InputKind.PARAMETER:
            params[spec.arg.name] = spec.target
        elif spec.kind == InputKind.USER_INPUT:
            user.append(spec.arg.name)
    nodes = {n.name: n for n in g.nodes}
    if not user:
        raise ValidationError("the exported module has no user input")
    x = nodes[user[0]]
    data: set[str] = {x.name}
    order = list(g.nodes)
    for n in order:
        if n.op == "call_function" and any(a.name in data for a in _inputs(n)) \
                and not _is_shape_arith(n):
            data.add(n.name)

    def is_param(a) -> bool:
        return a.name in params

    def param_of(a):
        """The parameter reached from ``a`` through views (t/transpose/permute), or None."""
        seen = 0
        trans = False
        while a is not None and seen < 4:
            if is_param(a):
                return a, trans
            if a.op == "call_function" and _opname(a) in ("t", "transpose", "permute",
                                                          "view", "reshape", "_to_copy", "to"):
                if _opname(a) in ("t", "transpose", "permute"):
                    trans = not trans
                a = a.args[0]
                seen += 1
                continue
            return None
        return None

    gemms, attn_mm, softmaxes, sdpas = [], [], [], []
    gemm_info: dict = {}
    for n in order:
        if n.op != "call_function" or n.name not in data:
            continue
        op = _opname(n)
        if op in _GEMM:
            if op == "linear":
                w = param_of(n.args[1])
                if w is None:
                    raise UnsupportedOpError(f"aten.linear at node '{n.name}' whose weight is not "
                                             f"a parameter{_where(n)}")
                b = n.args[2] if len(n.args) > 2 and n.args[2] is not None else None
                gemm_info[n] = (params[w[0].name], not w[1], None if b is None else params.get(
                    b.name), n.args[0])
                gemms.append(n)
                continue
            if op == "addmm":
                w = param_of(n.args[2])
                if w is None or n.args[1].name not in data:
                    raise UnsupportedOpError(f"aten.addmm at node '{n.name}' is not activation x "
                                             f"parameter{_where(n)}")
                gemm_info[n] = (params[w[0].name], w[1], params.get(n.args[0].name), n.args[1])
                gemms.append(n)
                continue
            a, b = n.args[0], n.args[1]
            if a.name in data and b.name in data:
                attn_mm.append(n)
                continue
            w = param_of(b)
            if w is None:
                raise UnsupportedOpError(f"aten.{op} at node '{n.name}' multiplies an activation "
                                         f"by a non-parameter constant{_where(n)}")
            gemm_info[n] = (params[w[0].name], w[1], None, a)
            gemms.append(n)
            continue
        if op in ("softmax", "_softmax", "_safe_softmax"):
            softmaxes.append(n)
        elif op == "scaled_dot_product_attention":
            sdpas.append(n)
        elif op not in _VIEW and op not in _VECTOR and op != "getitem":
            raise UnsupportedOpError(
                f"unsupported operator {n.target} at node '{n.name}'{_where(n)}: the mapper runs "
                "GEMMs, attention, softmax, LayerNorm/RMSNorm, GELU/SiLU/ReLU, RoPE and adds")
    # ---- structure: GEMMs in the order of a decoder layer
    if sdpas:
        if len(sdpas) != 1 or attn_mm:
            raise ValidationError("expected one attention (one scaled_dot_product_attention)")
        score = context = softmax = sdpas[0]
        q_in, k_in, v_in = sdpas[0].args[:3]
    else:
        if len(attn_mm) != 2 or len(softmaxes) != 1:
            raise ValidationError(f"expected one attention (two activation matmuls around one "
                                  f"softmax), found {len(attn_mm)} matmuls and "
                                  f"{len(softmaxes)} softmax")
        score, context = attn_mm
        softmax = softmaxes[0]
        q_in, k_in = score.args[0], score.args[1]
        v_in = context.args[1]
    first_in = gemm_info[gemms[0]][3] if gemms else None
    qkv = [m for m in gemms if gemm_info[m][3] is first_in]
    rest = [m for m in gemms if m not in qkv]
    if len(qkv) not in (1, 3) or len(rest) not in (3, 4):
        raise ValidationError(f"the layer's GEMMs ({len(gemms)}: "
                              f"{', '.join(gemm_info[m][0] for m in gemms)}) do not form QKV "
                              "(1 fused or 3 of one input), output projection, FFN up (and "
                              "gate), FFN down")
    proj, ffn2 = rest[0], rest[-1]
    ups = rest[1:-1]

    def upstream(node, targets: set) -> set:
        """Which of ``targets`` ``node`` depends on (through any path)."""
        seen, stack, found = set(), [node], set()
        while stack:
            a = stack.pop()
            if a.name in seen:
                continue
            seen.add(a.name)
            if a in targets and a is not node:
                found.add(a)
                continue
            stack.extend(_inputs(a))
        return found

    if len(qkv) == 3:
        order_q = []
        for src, what in ((q_in, "q"), (k_in, "k"), (v_in, "v")):
            up = upstream(src, set(qkv))
            if len(up) != 1:
                raise ValidationError(f"cannot tell which projection feeds attention {what}")
            order_q.append(up.pop())
        qkv = order_q
    if not upstream(proj, {context}):
        raise ValidationError("the output projection does not consume the attention output")
    ffn_gate = None
    if len(ups) == 2:
        a, b = ups
        sil = {"silu", "sigmoid", "exp"}
        # the gate is the branch that goes through the SiLU
        gated = [m for m in ups if any(_opname(u) in sil and m in upstream(u, {m})
                                       for u in order if u.name in data)]
        if len(gated) != 1:
            raise ValidationError("two FFN up projections but no single SiLU-gated one")
        ffn_gate = gated[0]
        ffn_up = b if ffn_gate is a else a
    else:
        ffn_up = ups[0]
    first_up = ffn_up if ffn_gate is None else min(ffn_up, ffn_gate, key=order.index)
    # ---- regions
    region_ops = lambda lo, hi: [n for n in order[order.index(lo) + 1: order.index(hi)]  # noqa
                                 if n.name in data]
    norm1_out = gemm_info[qkv[0]][3]
    norm2_out = gemm_info[ffn_up][3]
    kinds, eps = [], None
    for lo, hi in ((x, qkv[0]), (proj, first_up)):
        ops = region_ops(lo, hi) if lo is not x else [n for n in order[:order.index(hi)]
                                                      if n.name in data and n is not x]
        names = {_opname(n) for n in ops}
        if "layer_norm" in names or ({"mean", "sub"} <= names):
            kinds.append("layernorm")
        elif "rms_norm" in names or ("mean" in names and names & {"sqrt", "rsqrt"}):
            kinds.append("rmsnorm")
        else:
            raise ValidationError(f"no LayerNorm/RMSNorm before {gemm_info[hi][0]}")
        for n in ops:
            if _opname(n) in ("layer_norm",) and len(n.args) > 4:
                eps = float(n.args[4])
            elif _opname(n) == "layer_norm":
                eps = 1e-5
            elif _opname(n) == "rms_norm" and len(n.args) > 3 and n.args[3] is not None:
                eps = float(n.args[3])
            elif _opname(n) == "add" and isinstance(n.args[1], float) and eps is None:
                src = n.args[0]
                if hasattr(src, "op") and _opname(src) == "mean":
                    eps = float(n.args[1])
    if kinds[0] != kinds[1]:
        raise ValidationError(f"the two norms differ ({kinds[0]}, {kinds[1]})")
    act_ops = {_opname(n) for n in region_ops(ffn_up if ffn_gate is None else
                                              max(ffn_up, ffn_gate, key=order.index), ffn2)}
    if ffn_gate is not None:
        act_ops |= {_opname(n) for n in order if n.name in data
                    and ffn_gate in upstream(n, {ffn_gate}) and ffn2 in upstream(ffn2, {n})}
        activation = "swiglu"
    elif "gelu" in act_ops or "tanh" in act_ops:
        for n in order:
            if _opname(n) == "gelu" and n.kwargs.get("approximate", "none") != "tanh":
                raise UnsupportedOpError(f"GELU with approximate='none' (erf) at node "
                                         f"'{n.name}'{_where(n)}: the mapper's GELU is the tanh "
                                         "form")
        activation = "gelu"
    elif "relu" in act_ops:
        activation = "relu"
    else:
        raise ValidationError(f"no activation between the FFN projections (found "
                              f"{sorted(act_ops)})")
    # ---- attention geometry: keys/values as cached, query
    def skip(n, ops):
        while n.op == "call_function" and _opname(n) in ops:
            n = n.args[0]
        return n

    def cached(n, transposed: bool):
        """The [B, heads, T, hd] tensor behind an attention operand: undo the transpose of
        K^T, then the grouped-query expansion (repeat_interleave, or unsqueeze/expand/
        reshape)."""
        passthrough = {"contiguous", "clone", "to", "_to_copy", "dropout", "alias"}
        n = skip(n, passthrough)
        if transposed and _opname(n) in ("transpose", "permute", "t"):
            n = skip(n.args[0], passthrough)
        if _opname(n) == "repeat_interleave":
            n = n.args[0]
        elif _opname(n) in ("reshape", "view", "_unsafe_view"):
            e = skip(n.args[0], passthrough)
            if _opname(e) == "expand" and _opname(e.args[0]) == "unsqueeze":
                n = e.args[0].args[0]
        return skip(n, passthrough)
    q_src = cached(q_in, False)
    k_src = cached(k_in, not sdpas)
    v_src = cached(v_in, False)
    qs, ks = _shape(q_src), _shape(k_src)
    if qs is None or ks is None or len(qs) != 4 or len(ks) != 4:
        raise ValidationError("cannot read the head geometry of q/k ([B, heads, T, head_dim])")
    heads, hd = _dim(qs[1]), _dim(qs[3])
    kv_heads = _dim(ks[1]) if _dim(ks[3]) == hd else _dim(ks[2])
    def ancestors(node) -> list:
        seen, stack, out = set(), [node], []
        while stack:
            a = stack.pop()
            if a.name in seen:
                continue
            seen.add(a.name)
            out.append(a)
            stack.extend(_inputs(a))
        return out
    # RoPE: rotate_half (neg, cat) on the data path between the QKV GEMMs and the cached keys
    rope = any(_opname(a) in ("neg", "cat") and a.name in data
               and upstream(a, set(qkv)) for a in ancestors(k_src))
    # residuals: the data+data adds that take the layer input / the attention residual
    res_adds = [n for n in order if n.name in data and _opname(n) == "add"
                and len(_inputs(n)) == 2 and all(a.name in data for a in _inputs(n))]
    res1 = next((n for n in res_adds if order.index(n) > order.index(proj)
                 and order.index(n) < order.index(ffn_up) and x in upstream(n, {x})
                 and proj in upstream(n, {proj})), None)
    out_nodes = [n for n in g.nodes if n.op == "output"]
    out = _inputs(out_nodes[0])[0] if out_nodes else None
    while out is not None and out.op == "call_function" and _opname(out) in _VIEW:
        out = out.args[0]
    if res1 is None or out is None or _opname(out) != "add":
        raise ValidationError("the layer is not pre-norm residual (x + Attn(Norm(x)), then "
                              "+ FFN(Norm(.)))")
    # separate bias adds after GEMMs
    bias_adds: dict = {}
    for m in gemms:
        for u in m.users:
            v = u
            while _opname(v) in ("view", "reshape", "_unsafe_view") and len(v.users) == 1:
                v = next(iter(v.users))
            if _opname(v) == "add":
                other = [a for a in _inputs(v) if a is not m and a.name in params]
                if other:
                    bias_adds[m] = (v, params[other[0].name])
    gemm_params = {v[0] for v in gemm_info.values()} | {v[2] for v in gemm_info.values()} \
        | {b for _, b in bias_adds.values()}
    norm_params: dict[str, list[str]] = {}
    for role, lo, hi in (("attn_norm", x, qkv[0]), ("ffn_norm", proj, first_up)):
        ops = region_ops(lo, hi) if lo is not x else [n for n in order[:order.index(hi)]
                                                      if n.name in data]
        ps: list[str] = []
        for n in ops:
            for a in _inputs(n):
                fq = params.get(a.name)
                if fq is not None and fq not in gemm_params and fq not in ps:
                    ps.append(fq)
        norm_params[role] = ps
    return _Parsed(x=x, qkv=qkv, proj=proj, ffn_up=ffn_up, ffn_gate=ffn_gate, ffn2=ffn2,
                   score=score, context=context, softmax=softmax, k_src=k_src, v_src=v_src,
                   q_src=q_src, res1=res1, out=out, norm1_out=norm1_out, norm2_out=norm2_out,
                   norm_kind=kinds[0], eps=1e-5 if eps is None else eps, activation=activation,
                   rope=rope, gemm_info=gemm_info, bias_adds=bias_adds, params=params,
                   heads=heads, kv_heads=kv_heads, head_dim=hd, norm_params=norm_params)


def _weights(ep, p: _Parsed) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Parameters under the compiler's names, float64 ``[in, out]``."""
    sd = ep.state_dict

    def get(fqn: str) -> np.ndarray:
        return sd[fqn].detach().double().numpy()

    def weight(m) -> np.ndarray:
        fqn, transposed, _, _ = p.gemm_info[m]
        w = get(fqn)
        return w.T if transposed else w

    def bias(m) -> str | None:
        b = p.gemm_info[m][2]
        if b is None and m in p.bias_adds:
            b = p.bias_adds[m][1]
        return b

    out: dict[str, np.ndarray] = {}
    names: dict[str, list[str]] = {}
    for role in ("attn_norm", "ffn_norm"):
        ps = p.norm_params.get(role, [])
        want = 2 if p.norm_kind == "layernorm" else 1
        if len(ps) != want:
            raise ValidationError(f"{role}: expected {want} parameter(s) (gain"
                                  f"{', bias' if want == 2 else ''}), found {ps}")
        out[role] = np.stack([get(q).reshape(-1) for q in ps])
        names[role] = ps
    out["qkv_w"] = np.concatenate([weight(m) for m in p.qkv], axis=1)
    names["qkv_w"] = [p.gemm_info[m][0] for m in p.qkv]
    qb = [bias(m) for m in p.qkv]
    if any(b is not None for b in qb):
        if any(b is None for b in qb):
            raise ValidationError("only some of q, k, v have a bias: not modelled")
        out["qkv_b"] = np.concatenate([get(b).reshape(-1) for b in qb])
        names["qkv_b"] = qb
    for key, m in (("proj", p.proj), ("ffn1", p.ffn_up), ("ffn_gate", p.ffn_gate),
                   ("ffn2", p.ffn2)):
        if m is None:
            continue
        out[key + "_w"] = weight(m)
        names[key + "_w"] = [p.gemm_info[m][0]]
        b = bias(m)
        if b is not None:
            out[key + "_b"] = get(b).reshape(-1)
            names[key + "_b"] = [b]
    return out, names


def _traced_graph(p: _Parsed, spec, B: int, T: int, layer: int = 0) -> nx.DiGraph:
    """The workloads-style operator graph of the traced structure (module docstring)."""
    from workloads.graph import OpKind

    pre = f"L{layer}."
    g = nx.DiGraph()
    rows = B * T
    d = _dim(_shape(p.x)[-1])
    N = sum(_wcols(m) for m in p.qkv)
    H, KV, hd = p.heads, p.kv_heads, p.head_dim
    ff = _wcols(p.ffn_up)
    norm_kind = OpKind.LAYERNORM if p.norm_kind == "layernorm" else OpKind.RMSNORM

    def node(role: str, kind, shape: dict, rid: int | None = None) -> str:
        name = pre + role + ("" if rid is None else f".r{rid}")
        g.add_node(name, kind=kind, sub_role=role, shape=shape)
        return name

    # semantic boundary: fx node -> semantic node name
    sem: dict = {}
    sem[p.norm1_out] = node("attn_norm", norm_kind, {"rows": rows, "cols": d})
    qkv = node("qkv", OpKind.GEMM, {"m": rows, "k": d, "n": N})
    for m in p.qkv:
        sem[m] = qkv
    has_qb = any(p.gemm_info[m][2] is not None or m in p.bias_adds for m in p.qkv)
    if has_qb:
        qb = node("qkv_bias", OpKind.ELEMENTWISE, {"rows": rows, "cols": N})
        g.add_edge(qkv, qb)
        for m in p.qkv:
            sem[p.bias_adds[m][0] if m in p.bias_adds else m] = qb
    if p.rope:
        rp = node("rope", OpKind.ELEMENTWISE, {"rows": rows, "cols": (H + KV) * hd})
        for s in (p.q_src, p.k_src):
            if _opname(s) == "add":
                sem[s] = rp
    memo: dict = {}

    def preds(n) -> set:
        """Semantic nodes that fx node ``n`` (an input) comes from."""
        if n in sem:
            return {sem[n]}
        if n.name in memo:
            return memo[n.name]
        memo[n.name] = set()
        out: set = set()
        for a in _inputs(n):
            out |= preds(a)
        memo[n.name] = out
        return out

    def link(target: str, fx_inputs) -> None:
        for a in fx_inputs:
            for s in preds(a):
                if s != target:
                    g.add_edge(s, target)

    link(qkv, [p.gemm_info[p.qkv[0]][3]])
    if p.rope:
        link(pre + "rope", [a for s in (p.q_src, p.k_src) for a in _inputs(s)])
    # attention, per request
    grp = H // KV
    ctx_nodes = []
    for r in range(B):
        app = node("kv_append", OpKind.KV_APPEND, {"rows": T, "cols": 2 * KV * hd}, r)
        link(app, [p.k_src, p.v_src])
        sc = node("attn_score", OpKind.ATTENTION_SCORE,
                  {"batch": KV, "m": grp * T, "n": T, "k": hd}, r)
        # prefill: scores and context read this step's K/V as produced (the module's own
        # dataflow); the cache write is a side branch (workloads.graph)
        link(sc, [p.q_src, p.k_src])
        sm = node("attn_softmax", OpKind.SOFTMAX, {"rows": H * T, "cols": T}, r)
        g.add_edge(sc, sm)
        cx = node("attn_context", OpKind.ATTENTION_CONTEXT,
                  {"batch": KV, "m": grp * T, "n": hd, "k": T}, r)
        g.add_edge(sm, cx)
        link(cx, [p.v_src])
        ctx_nodes.append(cx)
    proj = node("proj", OpKind.GEMM, {"m": rows, "k": _wrows(p, p.proj), "n": d})
    for cx in ctx_nodes:
        g.add_edge(cx, proj)
    sem[p.proj] = proj
    if p.proj in p.bias_adds:
        sem[p.bias_adds[p.proj][0]] = proj
    sem[p.score] = sem[p.context] = sem[p.softmax] = "attention"   # stop walks there
    res1 = node("attn_residual", OpKind.ELEMENTWISE, {"rows": rows, "cols": d})
    memo.clear()
    link(res1, _inputs(p.res1))
    sem[p.res1] = res1
    n2 = node("ffn_norm", OpKind.LAYERNORM if p.norm_kind == "layernorm" else OpKind.RMSNORM,
              {"rows": rows, "cols": d})
    memo.clear()
    link(n2, [p.norm2_out])
    sem[p.norm2_out] = n2
    act = node("ffn_act", OpKind.ACTIVATION, {"rows": rows, "cols": ff})
    branches = [("ffn_gate", p.ffn_gate), ("ffn1", p.ffn_up)] if p.ffn_gate is not None else \
        [("ffn1", p.ffn_up)]
    for role, m in branches:
        gm = node(role, OpKind.GEMM, {"m": rows, "k": d, "n": ff})
        memo.clear()
        link(gm, [p.gemm_info[m][3]])
        src = gm
        if p.gemm_info[m][2] is not None or m in p.bias_adds:
            src = node(role + "_bias", OpKind.ELEMENTWISE, {"rows": rows, "cols": ff})
            g.add_edge(gm, src)
        sem[p.bias_adds[m][0] if m in p.bias_adds else m] = src
        g.add_edge(src, act)
    f2 = node("ffn2", OpKind.GEMM, {"m": rows, "k": ff, "n": d})
    g.add_edge(act, f2)
    sem[p.ffn2] = f2
    if p.ffn2 in p.bias_adds:
        sem[p.bias_adds[p.ffn2][0]] = f2
    out = node("ffn_residual", OpKind.ELEMENTWISE, {"rows": rows, "cols": d})
    memo.clear()
    link(out, _inputs(p.out))
    g.remove_edges_from([(u, v) for u, v in list(g.edges) if u == "attention"
                         or v == "attention"])
    if "attention" in g:
        g.remove_node("attention")
    return g


def _wcols(m) -> int:
    """Output columns of a GEMM node (its traced output's last dimension)."""
    return _dim(_shape(m)[-1])


def _wrows(p: _Parsed, m) -> int:
    """Reduction length of a GEMM node (its activation input's last dimension)."""
    return _dim(_shape(p.gemm_info[m][3])[-1])


def graph_differences(traced: nx.DiGraph, built: nx.DiGraph) -> list[str]:
    """Differences between two operator graphs on node names, ``kind``, ``sub_role``,
    ``shape`` and edges (empty when equal)."""
    out = []
    a, b = set(traced.nodes), set(built.nodes)
    out += [f"node {n} only in the traced graph" for n in sorted(a - b)]
    out += [f"node {n} only in workloads.build_layer_graph" for n in sorted(b - a)]
    for n in sorted(a & b):
        for key in ("kind", "sub_role", "shape"):
            va, vb = traced.nodes[n].get(key), built.nodes[n].get(key)
            if str(va) != str(vb) if key == "kind" else va != vb:
                out.append(f"node {n}: {key} {va} (traced) != {vb} (workloads)")
    ea, eb = set(traced.edges), set(built.edges)
    out += [f"edge {u} -> {v} only in the traced graph" for u, v in sorted(ea - eb)]
    out += [f"edge {u} -> {v} only in workloads.build_layer_graph" for u, v in sorted(eb - ea)]
    return out


def import_decoder_layer(module, example, kwargs: dict | None = None, *, name: str = "imported",
                         vocab_size: int = 1024, max_seq_len: int = 256,
                         rope_theta: float = 10000.0, layer: int = 0) -> ImportedLayer:
    """Import a PyTorch decoder layer (module docstring).

    Args:
        module: the ``torch.nn.Module`` (put in eval mode).
        example: ``x [B, T, d]``: ``B`` requests of ``T`` tokens (the traced graph is their
            prefill).
        kwargs: extra forward keyword arguments (e.g. RoPE tables a layer takes as inputs).
        name: model name of the spec.
        vocab_size, max_seq_len, rope_theta: spec fields a single layer does not determine
            (RoPE tables, masks and embeddings are outside the data path).
        layer: layer index in node names.

    Returns:
        an :class:`ImportedLayer`.

    Raises:
        UnsupportedOpError: the first operator the mapper does not support (named, with its
            source line).
        ValidationError: torch.export fails, the layer is not a pre-norm decoder layer of the
            supported shapes, or the traced graph differs from ``workloads.build_layer_graph``
            (the differences listed).
    """
    from workloads.graph import build_layer_graph
    from workloads.models import ModelSpec
    from workloads.requests import Batch, Request

    module = module.eval()
    ep = _export(module, (example,), kwargs or {})
    p = _parse(ep)
    B, T, d = (int(s) for s in example.shape)
    weights, names = _weights(ep, p)
    N = weights["qkv_w"].shape[1]
    H, hd = p.heads, p.head_dim
    KV = (N - H * hd) // (2 * hd)
    if KV != p.kv_heads:
        raise ValidationError(f"QKV width {N} does not match {H} query heads and {p.kv_heads} "
                              f"KV heads of {hd} dims")
    attn_bias = "qkv_b" in weights          # Qwen2: QKV biases without an output-projection one
    proj_bias = "proj_b" in weights
    mlp_bias = "ffn1_b" in weights
    if mlp_bias != ("ffn2_b" in weights):
        raise ValidationError("FFN biases must be present on all FFN projections or none")
    try:
        spec = ModelSpec(
            name=name, d_model=d, n_heads=H, n_kv_heads=KV, head_dim=hd, n_layers=layer + 1,
            d_ff=weights["ffn1_w"].shape[1], vocab_size=vocab_size,
            max_seq_len=max(max_seq_len, T), norm=p.norm_kind, activation=p.activation,
            positional="rope" if p.rope else "learned", attention_bias=attn_bias,
            proj_bias=proj_bias, mlp_bias=mlp_bias, tied_embeddings=True, dtype_bytes=2, rope_theta=rope_theta,
            norm_eps=p.eps, source=f"imported from {type(module).__name__} via torch.export")
    except Exception as exc:  # noqa: BLE001 - WorkloadError with the field
        raise ValidationError(f"imported layer gives an invalid model spec: {exc}") from None
    batch = Batch(tuple(Request(i, T, 0, T, None) for i in range(B)))
    traced = _traced_graph(p, spec, B, T, layer)
    built = build_layer_graph(spec, "prefill", batch, tp=1, layer=layer)
    diff = graph_differences(traced, built)
    if diff:
        raise ValidationError("the graph traced from the module differs from "
                              "workloads.build_layer_graph: " + "; ".join(diff[:8]))
    notes = []
    if len(p.qkv) == 3:
        notes.append("q, k and v projections of the same input fused into one qkv GEMM "
                     "(columns [q | k | v])")
    return ImportedLayer(spec=spec, weights=weights, traced=traced, graph=built, batch=batch,
                         param_names=names, module=module, notes=notes,
                         extra_inputs=sorted((kwargs or {}).keys()))


# ---- validating an imported layer ---------------------------------------------------------
class ImportedLayerReference(HostReference):
    """The imported module itself as the reference of a one-layer validation.

    The module is copied, cast to float64 with its parameters rounded to the storage type, and
    exported again with dynamic batch and sequence dimensions; each request's sequence runs
    through that exported program (an FX interpreter records the cached keys and values at the
    nodes the importer identified). A decode step is the last position of the full sequence (a
    causal layer, or an unmasked one: the last token attends to every earlier one either way).
    Layer inputs are unit-normal vectors drawn from ``(seed, token, position)``; there is no
    embedding, LM head or logits.
    """

    exactness = 1e-9

    def __init__(self, imported: ImportedLayer, dtype: str, seed: int = 0) -> None:
        import torch

        from archsim.functional import round_to

        if imported.extra_inputs:
            raise ValidationError(
                f"the imported {type(imported.module).__name__} takes inputs besides x "
                f"({', '.join(imported.extra_inputs)}): the reference runs forward(x) only; "
                "its graph was imported and checked, wrap it in a module that computes those "
                "inputs from positions to validate its values")
        self.spec, self.dtype, self.seed = imported.spec, dtype, seed
        self.label = (f"{type(imported.module).__name__} (imported, torch.export), float64")
        self.notes = list(imported.notes)
        mod = copy.deepcopy(imported.module).to(torch.float64).eval()
        with torch.no_grad():
            for prm in mod.parameters():
                prm.copy_(torch.from_numpy(round_to(prm.detach().numpy(), dtype)
                                           .astype(np.float64)))
        d = imported.spec.d_model
        ex = torch.zeros(2, 5, d, dtype=torch.float64)
        self.ep = _export(mod, (ex,), {}, dynamic=imported.spec.max_seq_len)
        self.parsed = _parse(self.ep)
        self.weights, _ = _weights(self.ep, self.parsed)
        self.hist: dict[int, list[np.ndarray]] = {}
        self.steps: dict[int, int] = {}

    def layer_weights(self, layer: int) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.weights.items()}

    def embed(self, token: int, pos: int) -> np.ndarray:
        rng = np.random.default_rng([int(self.seed), 17, int(token), int(pos)])
        return rng.standard_normal(self.spec.d_model)

    def final_norm(self):
        return None

    def lm_head(self):
        return None

    def rope_half_tables(self, pos: int) -> tuple[np.ndarray, np.ndarray]:
        from archsim.validation.reference import rope_half_tables

        return rope_half_tables(self.spec, pos)

    def _run(self, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        import torch
        import torch.fx as fx
        from torch.export.graph_signature import InputKind

        ep, p = self.ep, self.parsed
        x = torch.from_numpy(np.stack(xs))[None]
        args = []
        for spec in ep.graph_signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                args.append(x)
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                args.append(ep.state_dict[spec.target])
            else:
                args.append(ep.constants[spec.target])
        want = {p.k_src.name: None, p.v_src.name: None}

        class Rec(fx.Interpreter):
            def run_node(self, n):  # noqa: ANN001
                if n.op == "call_function" and _opname(n) == "_assert_tensor_metadata":
                    return None
                r = super().run_node(n)
                if n.name in want:
                    want[n.name] = r
                return r
        with torch.no_grad():
            out = Rec(ep.graph_module).run(*args)
        y = out[0] if isinstance(out, (tuple, list)) else out
        k, v = want[p.k_src.name], want[p.v_src.name]
        return (y[0].double().numpy(), k[0].permute(1, 0, 2).double().numpy(),
                v[0].permute(1, 0, 2).double().numpy())

    def prefill(self, rid: int, prompt: list[int]) -> PrefillResult:
        xs = [self.embed(t, i) for i, t in enumerate(prompt)]
        self.hist[rid] = xs
        self.steps[rid] = 0
        _, k, v = self._run(xs)
        return PrefillResult([k], [v], self._next(rid))

    def _next(self, rid: int) -> int:
        rng = np.random.default_rng([int(self.seed), 19, int(rid), self.steps[rid]])
        return int(rng.integers(0, self.spec.vocab_size))

    def decode(self, rid: int, token: int) -> DecodeResult:
        pos = len(self.hist[rid])
        x = self.embed(token, pos)
        self.hist[rid].append(x)
        y, k, v = self._run(self.hist[rid])
        self.steps[rid] += 1
        return DecodeResult(x, y[-1][None], k[-1][None], v[-1][None], np.zeros(0),
                            self._next(rid))


def validate_imported_layer(imported: ImportedLayer, system: str = "neupims",
                            dtype: str = "fp16", prompt_lens: list[int] | None = None,
                            steps: int = 2, seed: int = 0,
                            overrides: list[str] | tuple[str, ...] = ()):
    """Validate an imported layer on ``system`` like ``archsim validate`` (one layer, the
    module's exported program as the reference; see :class:`ImportedLayerReference`).

    Returns:
        a :class:`archsim.validation.ValidationReport`.
    """
    from archsim.validation import resolve_system, run_validation

    label, cfg = resolve_system(system, overrides)
    ref = ImportedLayerReference(imported, dtype, seed)
    lens = prompt_lens or [3, 40]
    return run_validation(ref, cfg, system=label, prompt_lens=lens, steps=steps, seed=seed)


__all__ = ["UnsupportedOpError", "ImportedLayer", "import_decoder_layer", "graph_differences",
           "ImportedLayerReference", "validate_imported_layer"]
