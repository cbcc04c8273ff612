"""Error estimates of one decode step of a decoder layer, and the layer's math in numpy.

:func:`decode_layer` evaluates one decoder layer for one request's new token in float64 (the
values, which must equal the PyTorch reference: a self-check of this third implementation) and,
beside every value, how far the device's value may be from it. The estimates follow the
device's arithmetic (see :mod:`archsim.functional` and docs/validation.md):

* every tensor the device stores (HBM or scratchpad, in the storage type ``fp16``/``bf16``/
  ``fp32``) is rounded once: ``|fl(y) - y| <= u |y|`` with the unit roundoff ``u`` of
  :data:`UNIT_ROUNDOFF` (:meth:`ErrorModel.stored`);
* a dot product of length ``n`` whose products are exact (fp16/bf16 operands; one more rounding
  for fp32 operands) and whose sums are fp32 (``u_acc = 2^-24``) has the deterministic error
  bound ``gamma(depth) * sum |a_i| |b_i|``, ``gamma(n) = n u_acc / (1 - n u_acc)`` (Higham,
  *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1, §4.2: in any summation order
  each term passes through at most ``depth`` additions), and the probabilistic bound
  ``lambda sqrt(depth) u_acc sum |a_i| |b_i|`` (Higham & Mary, "A new approach to probabilistic
  rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019, Thm 2.4: rounding errors
  independent and of mean zero). ``depth`` is the reduction length ``k`` (+1 for the
  accumulator add) for the weight-stationary systolic array and sequential ``VU_DOT``, and
  ``ceil(log2 lanes) + ceil(n / lanes)`` for the PIM adder tree followed by sequential
  accumulation across COMP steps (:func:`reduction_depth`);
* errors already in the operands propagate to first order: through ``|W|`` (worst case) or
  ``sqrt(W^2 e^2)`` (probabilistic) for a matrix product, through the derivative for norms,
  softmax, RoPE and activations.

:class:`ErrorModel` holds the two ways of combining: ``worst_case`` composes deterministic
bounds, which are guaranteed but compound through a layer (each matrix multiplies the bound by
``sum |w|`` where the actual errors, of random signs, grow like ``sqrt(sum w^2)``): on tiny-gpt
in fp32 the worst-case bound of the second layer's output exceeds the output itself, so it
cannot catch a misplaced KV row. ``probabilistic`` composes error *scales* (standard-deviation
bounds) in quadrature. :mod:`archsim.validation.core` checks ``|device - reference| <=
TOLERANCE_FACTOR * scale`` per element and reports the worst-case bound beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Unit roundoff (half the machine epsilon) of the storage types: IEEE binary16 has an 11-bit
#: significand (2^-11), bfloat16 an 8-bit one (2^-8), binary32 a 24-bit one (2^-24).
UNIT_ROUNDOFF: dict[str, float] = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "fp32": 2.0 ** -24}
#: Unit roundoff of the accumulators (fp32 partial sums in the arrays, vector units and PIM).
ACC_ROUNDOFF = 2.0 ** -24
#: ``lambda``: a device element passes when its error is at most ``lambda`` times its
#: probabilistic error scale. Under the Gaussian model an error beyond 6 scales has probability
#: 2e-9 per element (about 1e-4 for the 5e4 elements of a default run); the scales themselves
#: are conservative (``u |y|`` where a uniform rounding error has standard deviation
#: ``u |y| / sqrt(3)``; sums of |products| where the errors cancel).
TOLERANCE_FACTOR = 6.0
#: Factor applied to the first-order worst-case bound when it is reported (second order).
WORST_CASE_FACTOR = 2.0
#: Largest |d/dx gelu_tanh(x)| over the reals (at x ~ 1.5: 1.1289).
GELU_SLOPE_MAX = 1.13
#: Largest |d/dx silu(x)| over the reals (at x ~ 2.4: 1.0998).
SILU_SLOPE_MAX = 1.10


def gamma(n: int, u: float = ACC_ROUNDOFF) -> float:
    """``n u / (1 - n u)``: the error factor of ``n`` successive roundings (Higham §3.1)."""
    nu = n * u
    if nu >= 1:
        return math.inf
    return nu / (1.0 - nu)


def reduction_depth(n: int, order: str, lanes: int = 16) -> int:
    """Most additions any term of a length-``n`` reduction passes through.

    ``order``: ``sequential`` (``VU_DOT`` in index order, or the systolic array down its rows,
    plus one accumulator add) -> ``n + 1``; ``pim`` (``lanes``-wide adder tree per COMP step,
    then sequential accumulation across the ``ceil(n / lanes)`` steps) ->
    ``ceil(log2 lanes) + ceil(n / lanes)``.
    """
    if order == "pim":
        return max(1, math.ceil(math.log2(max(lanes, 1)))) + -(-n // lanes)
    return n + 1


@dataclass(frozen=True)
class Precision:
    """Arithmetic of the device being bounded.

    Attributes:
        dtype: storage type (``fp16``, ``bf16``, ``fp32``).
        lanes: PIM multipliers per bank (adder-tree width).
    """

    dtype: str
    lanes: int = 16

    @property
    def u(self) -> float:
        """Unit roundoff of the storage type."""
        return UNIT_ROUNDOFF[self.dtype]

    @property
    def product_rounds(self) -> int:
        """Roundings of one product before accumulation (0: exact for fp16/bf16 operands)."""
        return 1 if self.dtype == "fp32" else 0


class ErrorModel:
    """How error bounds combine: ``worst_case`` (deterministic, Higham §3) or ``probabilistic``
    (Higham & Mary 2019; module docstring).

    In the worst-case model a quantity is a bound ``e >= |error|``: independent sources add,
    a matrix maps ``e`` through ``|W|``, an accumulation of ``depth`` additions contributes
    ``gamma(depth) sum |a||b|``. In the probabilistic model a quantity is a scale ``s`` of the
    error (a standard-deviation bound): errors of distinct elements are independent and of
    mean zero, so independent sources add in quadrature, a matrix maps ``s`` through
    ``sqrt(W^2 s^2)``, and ``depth`` accumulations contribute ``u_acc sqrt(depth) sum |a||b|``.
    Sources that may be correlated (the two operands of a residual add) add linearly in both.

    Args:
        mode: ``probabilistic`` or ``worst_case``.
    """

    def __init__(self, mode: str = "probabilistic") -> None:
        if mode not in ("probabilistic", "worst_case"):
            raise ValueError(f"error model {mode!r} not one of probabilistic, worst_case")
        self.mode = mode
        self.prob = mode == "probabilistic"

    def add(self, *terms: np.ndarray) -> np.ndarray:
        """Combine independent error sources (same shape)."""
        if self.prob:
            return np.sqrt(sum(np.square(t) for t in terms))
        return sum(terms)

    def through(self, e: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Error of ``x @ w`` caused by an error ``e`` of ``x`` (``e [.., k]``, ``w [k, n]``)."""
        if self.prob:
            return np.sqrt(np.square(e) @ np.square(w))
        return e @ np.abs(w)

    def acc_factor(self, depth: int, product_rounds: int = 0) -> float:
        """Factor of ``sum |a||b|`` for an fp32 reduction of ``depth`` additions."""
        if self.prob:
            return ACC_ROUNDOFF * math.sqrt(depth + product_rounds)
        return gamma(depth + product_rounds)

    def stored(self, y: np.ndarray, e: np.ndarray, u: float) -> np.ndarray:
        """Error after rounding ``y`` (error ``e``) to a type of unit roundoff ``u``."""
        return self.add(e * (1.0 + u), u * np.abs(y))


def stored(y: np.ndarray, e: np.ndarray, u: float) -> np.ndarray:
    """Worst-case bound after rounding ``y`` (bound ``e``) to a type of unit roundoff ``u``:
    ``e (1 + u) + u |y|``."""
    return e * (1.0 + u) + u * np.abs(y)


def _matvec(a: np.ndarray, ea: np.ndarray, w: np.ndarray, prec: Precision, depth: int,
            em: ErrorModel) -> tuple[np.ndarray, np.ndarray]:
    """``a @ w`` with fp32 accumulation of reduction ``depth``; the fp32 result (not stored)."""
    y = a @ w
    acc = em.acc_factor(depth, prec.product_rounds) * ((np.abs(a) + ea) @ np.abs(w))
    return y, em.add(em.through(ea, w), acc)


def _norm(kind: str, p: np.ndarray, x: np.ndarray, ex: np.ndarray, eps: float,
          em: ErrorModel) -> tuple[np.ndarray, np.ndarray]:
    """LayerNorm / RMSNorm of one row and the first-order propagation of ``ex``.

    LayerNorm ``y = g (x - mu) / s + b``: ``dy_i = g_i / s (dx_i - mean dx - xh_i mean(xh dx))``;
    RMSNorm ``y = g x / r``: ``dy_i = g_i / r (dx_i - x_i mean(x dx) / r^2)``. The terms add
    linearly in both models (a standard deviation of a sum is at most the sum of theirs); a
    mean of ``d`` independent errors has scale ``sqrt(sum e^2) / d`` in the probabilistic one.
    """
    d = x.size

    def mean_abs(t: np.ndarray) -> float:
        return float(np.sqrt(np.square(t).sum()) / d) if em.prob else float(t.mean())
    if kind == "layernorm":
        g, b = p[0], p[1]
        mu = x.mean()
        c = x - mu
        s = math.sqrt(float((c * c).mean()) + eps)
        xh = c / s
        y = xh * g + b
        e = np.abs(g) / s * (ex + mean_abs(ex) + np.abs(xh) * mean_abs(np.abs(xh) * ex))
        return y, e
    g = p[0]
    r = math.sqrt(float((x * x).mean()) + eps)
    y = x / r * g
    e = np.abs(g) / r * (ex + np.abs(x) / r * mean_abs(np.abs(x) * ex) / r)
    return y, e


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_slope(x: np.ndarray) -> np.ndarray:
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _silu_slope(x: np.ndarray) -> np.ndarray:
    sg = 1.0 / (1.0 + np.exp(-x))
    return sg * (1.0 + x * (1.0 - sg))


@dataclass
class LayerStep:
    """Values and error estimates of one decode step of one layer for one request.

    Attributes (values float64; errors as the :class:`ErrorModel` defines them, before
    :data:`TOLERANCE_FACTOR`):
        out, e_out: layer output ``[d]`` and its error.
        k_new, e_k, v_new, e_v: the token's key (after RoPE) and value ``[kv_heads, head_dim]``
            and their errors (as stored in the KV cache).
        route_margin: a mixture of experts: the gap between the k-th and the (k+1)-th router
            logit divided by the sum of their error estimates (``inf`` for a dense layer or
            ``k = E``); below :data:`TOLERANCE_FACTOR` the device may route the token
            differently (a near tie, not a mapping error).
    """

    out: np.ndarray
    e_out: np.ndarray
    k_new: np.ndarray
    e_k: np.ndarray
    v_new: np.ndarray
    e_v: np.ndarray
    route_margin: float = math.inf


def _swiglu(yn: np.ndarray, eyn: np.ndarray, wg: np.ndarray, wu: np.ndarray, prec: Precision,
            em: ErrorModel) -> tuple[np.ndarray, np.ndarray]:
    """``silu(yn wg) * (yn wu)`` with its error (each GEMM output stored, SiLU and the product
    stored); biases are added by the caller's dense path only."""
    u, st = prec.u, em.stored
    depth = reduction_depth(yn.size, "sequential")
    gt, egt = _matvec(yn, eyn, wg, prec, depth, em)
    egt = st(gt, egt, u)
    up, eup = _matvec(yn, eyn, wu, prec, depth, em)
    eup = st(up, eup, u)
    sg = _silu(gt)
    slope = _silu_slope(gt) if em.prob else SILU_SLOPE_MAX
    esg = st(sg, np.abs(slope) * egt, u)
    act = sg * up
    return act, st(act, em.add(esg * np.abs(up), np.abs(sg) * eup, esg * eup), u)


def _moe(spec, w: dict[str, np.ndarray], yn: np.ndarray, eyn: np.ndarray, prec: Precision,
         em: ErrorModel, experts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, float]:
    """Mixture-of-experts FFN of one token as the device computes it (mapping.codegen.moe):
    fp32 router logits, top-k gates (softmax over the k, stored in the storage type), each
    chosen expert's SwiGLU FFN, and ``out (+)= g_e y_e`` in ascending expert order (an fp32
    product and sum, one rounding each). ``experts``: the choices to follow (the routing the
    program was compiled for), default the largest logits here. Returns ``(out, error,
    route margin)``."""
    u, ua, st = prec.u, ACC_ROUNDOFF, em.stored
    k = spec.experts_per_token
    z, ez = _matvec(yn, eyn, w["moe_router_w"], prec, reduction_depth(yn.size, "sequential"),
                    em)
    ez = st(z, ez, ua)                                      # fp32 logits
    order = np.argsort(-z, kind="stable")
    chosen = order[:k] if experts is None else np.asarray(experts, dtype=np.int64)
    margin = math.inf
    if k < z.size:
        a, b = order[k - 1], order[k]
        margin = float((z[a] - z[b]) / max(ez[a] + ez[b], 1e-300))
    top = z[chosen]
    pr = np.exp(top - top.max())
    pr /= pr.sum()
    etop = ez[chosen]
    mix = float(np.sqrt(np.square(pr * etop).sum())) if em.prob else float((pr * etop).sum())
    eg = st(pr, pr * (etop + mix), u)                      # gates, stored
    out = np.zeros(yn.size)
    eout = np.zeros(yn.size)
    first = True
    for slot in np.argsort(chosen, kind="stable"):          # ascending expert id
        e = int(chosen[slot])
        act, eact = _swiglu(yn, eyn, w[f"e{e}.gate_w"], w[f"e{e}.up_w"], prec, em)
        y, ey = _matvec(act, eact, w[f"e{e}.down_w"], prec,
                        reduction_depth(act.size, "sequential"), em)
        ey = st(y, ey, u)                                   # expert output, stored
        g = pr[slot]
        term = g * y
        eterm = em.add(abs(g) * ey, eg[slot] * np.abs(y), ua * np.abs(term))
        out = term if first else out + term
        eout = st(out, eterm if first else em.add(eout, eterm), u)
        first = False
    return out, eout, margin


def decode_layer(spec, w: dict[str, np.ndarray], x: np.ndarray, ex: np.ndarray,
                 k_past: np.ndarray, ek_past: np.ndarray, v_past: np.ndarray,
                 ev_past: np.ndarray, pos: int, prec: Precision,
                 rope: tuple[np.ndarray, np.ndarray] | None = None,
                 em: ErrorModel | None = None, experts: np.ndarray | None = None) -> LayerStep:
    """One decode step of one layer for one request, with running error estimates.

    Args:
        spec: the ModelSpec (tp = 1).
        w: layer parameters under the compiler's tensor names (``attn_norm [1|2, d]``,
            ``qkv_w [d, (H + 2 KV) hd]``, ``qkv_b``, ``proj_w``, ``proj_b``, ``ffn_norm``,
            ``ffn_gate_w``, ``ffn1_w``, ``ffn1_b``, ``ffn2_w``, ``ffn2_b``), float64, already
            rounded to the storage type.
        x, ex: the layer input ``[d]`` and its error (the device's stored input).
        k_past, v_past: cached keys/values ``[pos, kv_heads, head_dim]`` (float64), and
            ek_past, ev_past their errors as stored on the device.
        pos: the token's position (= cached tokens). With ``spec.sliding_window`` ``W`` the
            token attends to the last ``W`` positions only (itself included).
        prec: device arithmetic.
        rope: ``(cos, sin)`` half tables ``[head_dim/2]`` of position ``pos`` (float64; the
            device holds them in fp32), for RoPE models.
        em: the error model (default probabilistic).
        experts: a mixture of experts: the token's experts to follow (the routing the
            program was compiled for); default the largest router logits here.

    Returns:
        a :class:`LayerStep`.
    """
    em = em or ErrorModel()
    u, ua = prec.u, ACC_ROUNDOFF
    st = em.stored
    d, H, KV, hd = spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim
    grp = H // KV
    # attention norm, QKV
    y, ey = _norm(spec.norm, w["attn_norm"], x, ex, spec.norm_eps, em)
    ey = st(y, ey, u)
    qkv, e = _matvec(y, ey, w["qkv_w"], prec, reduction_depth(d, "sequential"), em)
    e = st(qkv, e, u)
    if "qkv_b" in w:
        qkv = qkv + w["qkv_b"]
        e = st(qkv, e, u)
    q = qkv[:H * hd].reshape(H, hd)
    eq = e[:H * hd].reshape(H, hd)
    k = qkv[H * hd:(H + KV) * hd].reshape(KV, hd)
    ek = e[H * hd:(H + KV) * hd].reshape(KV, hd)
    v = qkv[(H + KV) * hd:].reshape(KV, hd)
    ev = e[(H + KV) * hd:].reshape(KV, hd)
    if spec.positional == "rope":
        assert rope is not None
        c, s = (np.concatenate([t, t]) for t in rope)
        sgn = np.concatenate([-np.ones(hd // 2), np.ones(hd // 2)])

        def rot(t: np.ndarray, et: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            half = hd // 2
            tr = np.concatenate([t[:, half:], t[:, :half]], axis=1)
            er = np.concatenate([et[:, half:], et[:, :half]], axis=1)
            out = t * c + sgn * tr * s
            eo = em.add(et * np.abs(c), er * np.abs(s), ua * np.abs(t * c), ua * np.abs(tr * s))
            return out, st(out, eo, u)
        q, eq = rot(q, eq)
        k, ek = rot(k, ek)
    K = np.concatenate([k_past, k[None]], axis=0)          # [L, KV, hd]
    EK = np.concatenate([ek_past, ek[None]], axis=0)
    V = np.concatenate([v_past, v[None]], axis=0)
    EV = np.concatenate([ev_past, ev[None]], axis=0)
    win = getattr(spec, "sliding_window", None)
    if win is not None:                  # the last W positions, the token itself included
        K, EK, V, EV = K[-win:], EK[-win:], V[-win:], EV[-win:]
    L = K.shape[0]
    scale = 1.0 / math.sqrt(hd)
    f_score = em.acc_factor(reduction_depth(hd, "pim", prec.lanes), prec.product_rounds)
    f_ctx = em.acc_factor(reduction_depth(L, "sequential"), prec.product_rounds)
    ao = np.zeros((H, hd))
    eao = np.zeros((H, hd))
    for j in range(H):
        h = j // grp
        Kh, EKh, Vh, EVh = K[:, h], EK[:, h], V[:, h], EV[:, h]
        sc = Kh @ q[j]
        es = em.add(em.through(EKh, q[j][:, None])[:, 0], em.through(eq[j][None], Kh.T)[0],
                    f_score * ((np.abs(Kh) + EKh) @ (np.abs(q[j]) + eq[j])))
        es = st(sc, es, ua)                                   # fp32 scores
        z = sc * scale
        ez = st(z, em.add(es * scale, ua * np.abs(z)), ua)    # fp32 scale constant and result
        pr = np.exp(z - z.max())
        pr /= pr.sum()
        mix = float(np.sqrt(np.square(pr * ez).sum())) if em.prob else float((pr * ez).sum())
        ep = pr * (ez + mix)
        ep = st(pr, ep, ua)                                   # fp32 probabilities
        ep = st(pr, ep, u)                                    # converted for the GEMV operand
        o = pr @ Vh
        eo = em.add(em.through(ep[None], Vh)[0], em.through(pr[None], EVh)[0],
                    f_ctx * ((pr + ep) @ (np.abs(Vh) + EVh)))
        ao[j] = o
        eao[j] = st(o, eo, u)
    a = ao.reshape(-1)
    ea = eao.reshape(-1)
    po, epo = _matvec(a, ea, w["proj_w"], prec, reduction_depth(H * hd, "sequential"), em)
    epo = st(po, epo, u)
    h1 = po + x
    e1 = st(h1, epo + ex, u)                                  # correlated operands: linear
    if "proj_b" in w:
        h1 = h1 + w["proj_b"]
        e1 = st(h1, e1, u)
    # FFN
    yn, eyn = _norm(spec.norm, w["ffn_norm"], h1, e1, spec.norm_eps, em)
    eyn = st(yn, eyn, u)
    if "moe_router_w" in w:
        f2, ef2, margin = _moe(spec, w, yn, eyn, prec, em, experts)
        out = f2 + h1
        return LayerStep(out, st(out, ef2 + e1, u), k, ek, v, ev, margin)
    depth_d = reduction_depth(d, "sequential")
    up, eup = _matvec(yn, eyn, w["ffn1_w"], prec, depth_d, em)
    eup = st(up, eup, u)
    if "ffn1_b" in w:
        up = up + w["ffn1_b"]
        eup = st(up, eup, u)
    if spec.activation == "swiglu":
        gt, egt = _matvec(yn, eyn, w["ffn_gate_w"], prec, depth_d, em)
        egt = st(gt, egt, u)
        if "ffn_gate_b" in w:
            gt = gt + w["ffn_gate_b"]
            egt = st(gt, egt, u)
        sg = _silu(gt)
        slope = _silu_slope(gt) if em.prob else SILU_SLOPE_MAX
        esg = st(sg, np.abs(slope) * egt, u)
        act = sg * up
        eact = st(act, em.add(esg * np.abs(up), np.abs(sg) * eup, esg * eup), u)
    elif spec.activation == "gelu":
        act = _gelu(up)
        slope = _gelu_slope(up) if em.prob else GELU_SLOPE_MAX
        eact = st(act, np.abs(slope) * eup, u)
    else:
        act = np.maximum(up, 0.0)
        eact = st(act, eup, u)
    f2, ef2 = _matvec(act, eact, w["ffn2_w"], prec, reduction_depth(act.size, "sequential"), em)
    ef2 = st(f2, ef2, u)
    out = f2 + h1
    eout = st(out, ef2 + e1, u)                               # correlated operands: linear
    if "ffn2_b" in w:
        out = out + w["ffn2_b"]
        eout = st(out, eout, u)
    return LayerStep(out, eout, k, ek, v, ev)


def head_bound(kind: str, p: np.ndarray, x: np.ndarray, ex: np.ndarray, eps: float,
               head: np.ndarray, em: ErrorModel | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Host LM head on the device's final hidden state: ``norm(x) @ head`` in float64.

    Returns the logits and the first-order propagation of the hidden state's error ``ex``
    (the host computes in float64: no rounding term).
    """
    em = em or ErrorModel()
    y, ey = _norm(kind, p, x, ex, eps, em)
    return y @ head, em.through(ey, head)


__all__ = ["UNIT_ROUNDOFF", "ACC_ROUNDOFF", "WORST_CASE_FACTOR", "GELU_SLOPE_MAX",
           "SILU_SLOPE_MAX",
           "TOLERANCE_FACTOR", "Precision", "ErrorModel", "LayerStep", "gamma",
           "reduction_depth", "stored", "decode_layer", "head_bound"]
