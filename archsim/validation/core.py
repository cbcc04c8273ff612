"""Golden validation: the programs the mapper emits, executed on values, against PyTorch.

:func:`run_validation` drives one validation:

1. a :class:`~archsim.validation.reference.HostReference` (PyTorch) prefills every request's
   prompt (prompts of different lengths, tokens drawn from ``(seed, request id)``) on the host:
   the compiler emits decode programs only, so the prompt's K/V come from the reference, rounded
   to the device's storage type;
2. for each of ``steps`` decode steps, the whole batch is compiled by
   :func:`mapping.compiler.compile_model` (every layer of the device's pipeline stage, with the
   system's channel assignment, sub-batches and KV placement), an HBM image is built at the
   compiled addresses (:mod:`archsim.validation.image`: weights in their tiled layout, each
   request's embedding row of ``hidden.{first}``, the RoPE table, and the K/V cache element by
   element where the compiler placed it — PIM banks or the streaming layout), and the program
   runs in :mod:`archsim.functional`;
3. every request's output row of every layer (``hidden.{l+1}``) and the K/V row the program
   appended (read back from the KV cache) are compared with the reference's; the device's own
   K/V rows are carried to the next step (re-written at that step's compiled addresses), so
   errors of the KV path accumulate honestly;
4. the LM head is not part of the compiled program (the compiler stops at the last layer's
   hidden state), so logits are computed **on the host** from the device's final hidden state
   (reference final norm and LM head in float64) and reported as such, with the greedy token
   agreement.

Each element must satisfy ``|device - reference| <= TOLERANCE_FACTOR * scale + |reference -
exact|`` where ``scale`` is the probabilistic running error estimate of
:mod:`archsim.validation.bounds` and ``exact`` is the validator's own float64 evaluation of the
same layer (which must agree with the reference: an internal self-check that catches a wrong
weight adapter). The deterministic worst-case bound is computed too and reported.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from archsim.errors import ArchsimError
from archsim.validation.bounds import (TOLERANCE_FACTOR, WORST_CASE_FACTOR, ErrorModel,
                                       Precision, decode_layer, head_bound)
from archsim.validation.image import machine_for, read_at, row_addresses, write_at
from archsim.validation.reference import HostReference
from workloads.requests import Batch, Request


class ValidationError(ArchsimError):
    """A validation could not be run (bad arguments, a reference that disagrees with the
    validator's own evaluation); a validation that runs and finds errors past the tolerance is
    not an exception but a failed :class:`ValidationReport`."""


@dataclass
class TensorCheck:
    """Comparison of one tensor of one decode step over all requests.

    Attributes:
        name: ``L{l}.out`` (layer output), ``L{l}.k_new`` / ``L{l}.v_new`` (the K/V row the
            program appended), ``logits`` (host LM head on the device's final hidden state).
        step: decode step (0-based).
        layer: layer index, or None (logits).
        where: ``device`` (computed by the program) or ``host``.
        max_abs_err: max over requests and elements of ``|device - reference|``.
        max_rel_err: ``max_abs_err / max |reference|`` (normwise relative error).
        max_abs_ref: ``max |reference|``.
        max_allowed: largest per-element tolerance (``TOLERANCE_FACTOR * scale + reference
            error``).
        usage: ``max |device - reference| / tolerance`` over elements (``<= 1`` passes).
        passed: every element within its tolerance.
        worst_request: request id of the largest ``usage``.
        reference_error: ``max |reference - exact|`` (the validator's float64 evaluation).
        per_request_max_abs: ``{request id: max abs error}``.
        worst_case_bound: largest deterministic worst-case bound (``WORST_CASE_FACTOR`` x the
            first-order bound; reported, not checked).
    """

    name: str
    step: int
    layer: int | None
    where: str
    max_abs_err: float
    max_rel_err: float
    max_abs_ref: float
    max_allowed: float
    usage: float
    passed: bool
    worst_request: int
    reference_error: float
    per_request_max_abs: dict[int, float] = field(default_factory=dict)
    worst_case_bound: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable dict."""
        d = dataclasses.asdict(self)
        d["per_request_max_abs"] = {str(k): v for k, v in self.per_request_max_abs.items()}
        return d


@dataclass
class ValidationReport:
    """Result of :func:`run_validation`.

    Attributes:
        model, system, preset, dtype, seed, steps: what was validated.
        reference: label of the PyTorch reference.
        requests: per request ``{"id", "prompt_len", "channel" (per step), "sub_batch" (per
            step)}``.
        checks: every :class:`TensorCheck`.
        top1_agreement: fraction of (request, step) whose host-LM-head greedy token on the
            device's hidden state equals the reference's (None without an LM head).
        attention_engine: ``pim`` or ``npu`` (where the compiled program ran decode attention).
        notes: what was not checked on the device, and why.
        elapsed_s: wall-clock seconds of the validation.
        outputs: device values ``{(step, tensor name): {request id: array}}`` (bitwise
            comparisons; not written to JSON).
    """

    model: str
    system: str
    preset: str
    dtype: str
    seed: int
    steps: int
    reference: str
    requests: list[dict[str, Any]]
    checks: list[TensorCheck]
    top1_agreement: float | None
    attention_engine: str
    notes: list[str]
    elapsed_s: float = 0.0
    outputs: dict[tuple[int, str], dict[int, np.ndarray]] = field(default_factory=dict,
                                                                  repr=False)

    @property
    def passed(self) -> bool:
        """True when every checked tensor is within its tolerance."""
        return all(c.passed for c in self.checks)

    def failures(self) -> list[TensorCheck]:
        """The checks past their tolerance."""
        return [c for c in self.checks if not c.passed]

    def summary(self) -> list[dict[str, Any]]:
        """Per tensor name (over steps): max abs / rel error, max tolerance, usage, passed."""
        out: dict[str, dict[str, Any]] = {}
        for c in self.checks:
            s = out.setdefault(c.name, {"tensor": c.name, "layer": c.layer, "where": c.where,
                                        "max_abs_err": 0.0, "max_rel_err": 0.0,
                                        "max_allowed": 0.0, "usage": 0.0, "passed": True})
            s["max_abs_err"] = max(s["max_abs_err"], c.max_abs_err)
            s["max_rel_err"] = max(s["max_rel_err"], c.max_rel_err)
            s["max_allowed"] = max(s["max_allowed"], c.max_allowed)
            s["usage"] = max(s["usage"], c.usage)
            s["passed"] = s["passed"] and c.passed
        return list(out.values())

    def max_errors(self, where: str = "device") -> tuple[float, float]:
        """``(max abs error, max relative error)`` over the checks computed at ``where``."""
        cs = [c for c in self.checks if c.where == where]
        return (max((c.max_abs_err for c in cs), default=0.0),
                max((c.max_rel_err for c in cs), default=0.0))

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable dict (without the raw device outputs)."""
        from archsim.validation.bounds import ACC_ROUNDOFF, UNIT_ROUNDOFF

        abs_dev, rel_dev = self.max_errors("device")
        return {
            "passed": self.passed, "model": self.model, "system": self.system,
            "preset": self.preset, "dtype": self.dtype, "seed": self.seed, "steps": self.steps,
            "reference": self.reference, "attention_engine": self.attention_engine,
            "tolerance": {"rule": "|device - reference| <= tolerance_factor * scale + "
                                  "|reference - exact| per element, scale = probabilistic "
                                  "running error estimate (docs/validation.md)",
                          "tolerance_factor": TOLERANCE_FACTOR,
                          "worst_case_factor": WORST_CASE_FACTOR,
                          "unit_roundoff": UNIT_ROUNDOFF[self.dtype],
                          "accumulator_unit_roundoff": ACC_ROUNDOFF},
            "max_abs_err_device": abs_dev, "max_rel_err_device": rel_dev,
            "top1_agreement": self.top1_agreement, "requests": self.requests,
            "summary": self.summary(), "checks": [c.to_json() for c in self.checks],
            "notes": self.notes, "elapsed_s": self.elapsed_s,
        }

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path``."""
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


def _check(name: str, step: int, layer: int | None, where: str, ids: list[int],
           dev: np.ndarray, ref: np.ndarray, exact: np.ndarray, scale: np.ndarray,
           worst: np.ndarray) -> TensorCheck:
    """Compare ``dev`` with ``ref`` (arrays ``[n_requests, ...]``); ``scale`` and ``worst``
    are the probabilistic and worst-case error estimates."""
    dev = np.asarray(dev, dtype=np.float64)
    err = np.abs(dev - ref)
    ref_err = np.abs(ref - exact)
    allowed = TOLERANCE_FACTOR * scale + ref_err
    n = err.shape[0]
    flat_err = err.reshape(n, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0),
                         np.where(err > 0, np.inf, 0.0))
    ok = bool((err <= allowed).all()) and bool(np.isfinite(dev).all())
    per_req = ratio.reshape(n, -1).max(axis=1)
    mx_ref = float(np.abs(ref).max()) if ref.size else 0.0
    mx_err = float(err.max()) if err.size else 0.0
    if not np.isfinite(dev).all():
        mx_err = float("inf")
    return TensorCheck(
        name=name, step=step, layer=layer, where=where, max_abs_err=mx_err,
        max_rel_err=mx_err / mx_ref if mx_ref > 0 else mx_err,
        max_abs_ref=mx_ref, max_allowed=float(allowed.max()) if allowed.size else 0.0,
        usage=float(ratio.max()) if ratio.size else 0.0, passed=ok,
        worst_request=int(ids[int(np.argmax(per_req))]),
        reference_error=float(ref_err.max()) if ref_err.size else 0.0,
        per_request_max_abs={int(i): float(v) for i, v in zip(ids, flat_err.max(axis=1))},
        worst_case_bound=float(WORST_CASE_FACTOR * worst.max()) if worst.size else 0.0)


def prompt_tokens(seed: int, rid: int, length: int, vocab: int) -> list[int]:
    """The prompt of request ``rid``: ``length`` token ids drawn from ``(seed, rid)`` only (so a
    request's inputs do not depend on its batch companions)."""
    rng = np.random.default_rng([int(seed), 7, int(rid)])
    return [int(t) for t in rng.integers(0, vocab, size=length)]


def _norm_rows(kind: str, p: np.ndarray, x: np.ndarray, eps: float) -> np.ndarray:
    if kind == "layernorm":
        mu = x.mean(axis=-1, keepdims=True)
        c = x - mu
        return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps) * p[0] + p[1]
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * p[0]


def run_validation(reference: HostReference, cfg, *, system: str, prompt_lens: list[int],
                   steps: int = 2, seed: int = 0, request_ids: list[int] | None = None,
                   channels: list[int] | None = None, options=None,
                   exactness: float | None = None,
                   progress: Callable[[str], None] | None = None) -> ValidationReport:
    """Validate the compiled decode programs of ``reference.spec`` on ``cfg`` (module docstring).

    Args:
        reference: the PyTorch reference (weights rounded to ``reference.dtype``).
        cfg: the machine (``archsim.config.MachineConfig``).
        system: label of the system in reports.
        prompt_lens: prompt length of each request (tokens >= 1).
        steps: decode steps (>= 1).
        seed: seed of the prompts (the reference's weights have their own).
        request_ids: request ids (default ``0..n-1``).
        channels: pin each request's KV channel (``CompileOptions(channels='keep')``); default:
            the system's channel policy.
        options: base :class:`mapping.compiler.CompileOptions` (``dtype`` and ``channels`` are
            set here).
        exactness: largest ``|reference - exact| / max(1, |reference|)`` accepted by the
            self-check (default: the reference's ``exactness``).
        progress: called with a short message per step.

    Returns:
        a :class:`ValidationReport` (check ``.passed``).

    Raises:
        ValidationError: bad arguments, or the reference disagrees with the validator's own
            float64 evaluation (a wrong adapter, not a device error).
        MappingError / SimulationError: the compiler or the functional executor fails.
    """
    import mapping.compiler as mc

    t0 = time.perf_counter()
    spec, dtype = reference.spec, reference.dtype
    if exactness is None:
        exactness = reference.exactness
    n = len(prompt_lens)
    ids = list(range(n)) if request_ids is None else [int(i) for i in request_ids]
    if n == 0 or len(ids) != n or len(set(ids)) != n:
        raise ValidationError("validation needs >= 1 request with distinct ids (got "
                              f"{n} prompt lengths and ids {ids})")
    if steps < 1:
        raise ValidationError(f"steps must be >= 1, got {steps}")
    if min(prompt_lens) < 1 or max(prompt_lens) + steps > spec.max_seq_len:
        raise ValidationError(f"prompt lengths {prompt_lens} + {steps} steps must fit in "
                              f"1..max_seq_len={spec.max_seq_len} of model '{spec.name}'")
    if channels is not None and len(channels) != n:
        raise ValidationError(f"{len(channels)} channels for {n} requests")
    if cfg.system.expert_parallel != 1:
        raise ValidationError(f"system.expert_parallel {cfg.system.expert_parallel}: validation "
                              "compares one device that holds every expert (set "
                              "system.expert_parallel=1)")
    base = options or mc.CompileOptions()
    opts = dataclasses.replace(base, dtype=dtype,
                               channels="keep" if channels is not None else base.channels)
    prec = Precision(dtype, cfg.pim.multipliers_per_bank)
    u = prec.u
    n_layers = spec.n_layers
    weights = [reference.layer_weights(l) for l in range(n_layers)]
    fnorm, head = reference.final_norm(), reference.lm_head()

    # ---- prefill on the host
    dev_k: list[list[np.ndarray]] = []   # [request][layer] -> [L, KV, hd] device values
    dev_v: list[list[np.ndarray]] = []
    ex_k: list[list[np.ndarray]] = []    # exact values the bound tracker uses
    ex_v: list[list[np.ndarray]] = []
    models = {"prob": ErrorModel("probabilistic"), "worst": ErrorModel("worst_case")}
    # errors of the device's KV per error model: [request][layer] -> [L, KV, hd]
    e_k: dict[str, list[list[np.ndarray]]] = {m: [] for m in models}
    e_v: dict[str, list[list[np.ndarray]]] = {m: [] for m in models}
    tokens: list[int] = []
    for rid, P in zip(ids, prompt_lens):
        pf = reference.prefill(rid, prompt_tokens(seed, rid, P, spec.vocab_size))
        dev_k.append([round_to_np(k, dtype) for k in pf.k])
        dev_v.append([round_to_np(v, dtype) for v in pf.v])
        ex_k.append(list(pf.k))
        ex_v.append(list(pf.v))
        for m in models:
            e_k[m].append([u * np.abs(k) for k in pf.k])
            e_v[m].append([u * np.abs(v) for v in pf.v])
        tokens.append(pf.next_token)

    checks: list[TensorCheck] = []
    outputs: dict[tuple[int, str], dict[int, np.ndarray]] = {}
    req_info = [{"id": rid, "prompt_len": int(P), "channel": [], "sub_batch": []}
                for rid, P in zip(ids, prompt_lens)]
    agree = 0
    engine = "npu"
    near_ties: list[tuple[int, int, int, float]] = []
    for step in range(steps):
        if progress:
            progress(f"step {step + 1}/{steps}: compile")
        lens = [P + step + 1 for P in prompt_lens]
        batch = Batch(tuple(Request(rid, P, steps, L, None if channels is None else channels[i])
                            for i, (rid, P, L) in enumerate(zip(ids, prompt_lens, lens))))
        # the reference first: a mixture of experts' program is compiled for the routing its
        # router chooses on the values (workloads.moe)
        refs = [reference.decode(ids[i], tokens[i]) for i in range(n)]
        routing = _reference_routing(spec, refs, reference.label)
        cp = mc.compile_model(spec, batch, cfg, "decode", opts, routing=routing)
        if cp.layers != list(range(n_layers)):
            raise ValidationError(f"the device holds layers {cp.layers} of {n_layers}: "
                                  "validation needs pipeline_parallel = 1")
        if cp.tp != 1:
            raise ValidationError(f"tensor_parallel {cp.tp}: validation compares a tp = 1 "
                                  "device (set system.tensor_parallel=1)")
        engine = "pim" if cp.plan.pim_layout is not None else "npu"
        for i in range(n):
            req_info[i]["channel"].append(int(cp.batch.channels[i]))
            req_info[i]["sub_batch"].append(int(cp.sub_batches.sub_batch[i]))
        fm = machine_for(cp.program, cfg)
        mem = fm.hbm
        dt = cp.tensors["hidden.0"].dtype
        if dt != dtype:
            raise ValidationError(f"compiled for {dt}, validating {dtype}")
        # weights
        for l in range(n_layers):
            for name, val in weights[l].items():
                tpl = cp.tensors[f"L{l}.{name}"]
                mem.write_tensor(tpl.name, tpl.to_image(val.reshape(tpl.shape)))
        # inputs: embeddings of this step's tokens
        x0 = np.stack([reference.embed(tokens[i], lens[i] - 1) for i in range(n)])
        d = spec.d_model
        write_at(mem, row_addresses(cp.hidden_row_addresses(0), d, dtype), x0, dtype)
        rope = None
        if spec.positional == "rope":
            rope = [reference.rope_half_tables(L - 1) for L in lens]
            pos = cp.rope_positions()
            table = np.zeros((n, 2, spec.head_dim // 2))
            by_pos = {L - 1: r for L, r in zip(lens, rope)}
            for row, p in enumerate(pos):
                table[row, 0], table[row, 1] = by_pos[int(p)]
            mem.write_tensor("rope", table)
        # the KV cache, element by element at the compiled addresses: the positions the new
        # token attends to (all, or the last W - 1 with a sliding window: rolling-buffer
        # slots p mod W)
        for l in range(n_layers):
            for i in range(n):
                L = lens[i]
                lo = L - spec.kv_len(L)
                ka, va = cp.kv_position_addresses(l, i, range(lo, L - 1))
                write_at(mem, ka, dev_k[i][l][lo:], dtype)
                write_at(mem, va, dev_v[i][l][lo:], dtype)
        if progress:
            progress(f"step {step + 1}/{steps}: execute {cp.program.n_instructions} "
                     "instructions")
        fm.run()
        # results
        outs = np.stack([read_at(mem, row_addresses(cp.hidden_row_addresses(l + 1), d, dtype),
                                 dtype) for l in range(n_layers)], axis=1)      # [n, layers, d]
        knew = np.zeros((n, n_layers, spec.n_kv_heads, spec.head_dim), dtype=np.float32)
        vnew = np.zeros_like(knew)
        for l in range(n_layers):
            for i in range(n):
                ka, va = cp.kv_position_addresses(l, i, [lens[i] - 1])
                knew[i, l] = read_at(mem, ka[0], dtype)
                vnew[i, l] = read_at(mem, va[0], dtype)
        # bounds (the reference ran before the compile)
        ex_out = np.zeros((n, n_layers, d))
        ex_kn = np.zeros((n, n_layers, spec.n_kv_heads, spec.head_dim))
        ex_vn = np.zeros_like(ex_kn)
        e_out = {m: np.zeros_like(ex_out) for m in models}
        e_kn = {m: np.zeros_like(ex_kn) for m in models}
        e_vn = {m: np.zeros_like(ex_kn) for m in models}
        for m, em in models.items():
            for i in range(n):
                x, ex = refs[i].x, u * np.abs(refs[i].x)
                for l in range(n_layers):
                    st = decode_layer(spec, weights[l], x, ex, ex_k[i][l], e_k[m][i][l],
                                      ex_v[i][l], e_v[m][i][l], lens[i] - 1, prec,
                                      None if rope is None else rope[i], em,
                                      None if refs[i].experts is None else refs[i].experts[l])
                    if m == "prob" and st.route_margin < TOLERANCE_FACTOR:
                        near_ties.append((step, ids[i], l, st.route_margin))
                    ex_out[i, l], ex_kn[i, l], ex_vn[i, l] = st.out, st.k_new, st.v_new
                    e_out[m][i, l], e_kn[m][i, l], e_vn[m][i, l] = st.e_out, st.e_k, st.e_v
                    x, ex = st.out, st.e_out
        ref_out = np.stack([r.outs for r in refs])
        ref_k = np.stack([r.k_new for r in refs])
        ref_v = np.stack([r.v_new for r in refs])
        for what, a, b in (("layer outputs", ref_out, ex_out), ("keys", ref_k, ex_kn),
                           ("values", ref_v, ex_vn)):
            gap = float(np.abs(a - b).max())
            if gap > exactness * max(1.0, float(np.abs(a).max())):
                raise ValidationError(
                    f"step {step}: the reference ({reference.label}) and the validator's own "
                    f"float64 evaluation disagree on the {what} by {gap:.3g}: the reference "
                    "adapter (weights, positions or KV cache) is inconsistent")
        for l in range(n_layers):
            checks.append(_check(f"L{l}.out", step, l, "device", ids, outs[:, l], ref_out[:, l],
                                 ex_out[:, l], e_out["prob"][:, l], e_out["worst"][:, l]))
            checks.append(_check(f"L{l}.k_new", step, l, "device", ids, knew[:, l],
                                 ref_k[:, l], ex_kn[:, l], e_kn["prob"][:, l],
                                 e_kn["worst"][:, l]))
            checks.append(_check(f"L{l}.v_new", step, l, "device", ids, vnew[:, l],
                                 ref_v[:, l], ex_vn[:, l], e_vn["prob"][:, l],
                                 e_vn["worst"][:, l]))
            outputs[(step, f"L{l}.out")] = {ids[i]: outs[i, l] for i in range(n)}
            outputs[(step, f"L{l}.k_new")] = {ids[i]: knew[i, l] for i in range(n)}
            outputs[(step, f"L{l}.v_new")] = {ids[i]: vnew[i, l] for i in range(n)}
        # host LM head on the device's final hidden state
        if head is not None:
            ref_logits = np.stack([r.logits for r in refs])
            host = _norm_rows(spec.norm, fnorm, outs[:, -1].astype(np.float64),
                              spec.norm_eps) @ head
            ex_logits = np.zeros_like(ref_logits)
            e_logits = {m: np.zeros_like(ref_logits) for m in models}
            for m, em in models.items():
                for i in range(n):
                    ex_logits[i], e_logits[m][i] = head_bound(
                        spec.norm, fnorm, ex_out[i, -1], e_out[m][i, -1], spec.norm_eps, head,
                        em)
            checks.append(_check("logits", step, None, "host", ids, host, ref_logits,
                                 ex_logits, e_logits["prob"], e_logits["worst"]))
            agree += int((host.argmax(axis=1) == ref_logits.argmax(axis=1)).sum())
        # carry the device's own KV rows to the next step
        for i in range(n):
            for l in range(n_layers):
                dev_k[i][l] = np.concatenate([dev_k[i][l], knew[i, l][None]])
                dev_v[i][l] = np.concatenate([dev_v[i][l], vnew[i, l][None]])
                ex_k[i][l] = np.concatenate([ex_k[i][l], ex_kn[i, l][None]])
                ex_v[i][l] = np.concatenate([ex_v[i][l], ex_vn[i, l][None]])
                for m in models:
                    e_k[m][i][l] = np.concatenate([e_k[m][i][l], e_kn[m][i, l][None]])
                    e_v[m][i][l] = np.concatenate([e_v[m][i][l], e_vn[m][i, l][None]])
            tokens[i] = refs[i].next_token
    notes = [
        "prefill ran on the host (PyTorch reference): the compiler emits decode programs only; "
        "the prompt's K/V were written into the device's KV cache rounded to "
        f"{dtype}",
        "logits: the compiled program ends at the last layer's hidden state (no LM head); "
        "'logits' is the reference's final norm and LM head applied on the host to the "
        "device's final hidden state" if head is not None else
        "no logits: the reference is a single layer without an LM head",
    ] + list(reference.notes)
    if spec.n_experts is not None:
        notes.append("mixture of experts: each step's program was compiled for the routing the "
                     "reference's router chose (workloads.moe); the device's VU_TOPK chooses "
                     "again on its own logits, so a different choice shows as an output error")
        for st_, rid, l, mg in near_ties:
            notes.append(f"near tie: step {st_}, request {rid}, layer {l}: the k-th and next "
                         f"router logits differ by {mg:.2g} x their error estimate (below "
                         f"{TOLERANCE_FACTOR:g}): the device may route this token differently")
    return ValidationReport(
        model=spec.name, system=system, preset=cfg.name, dtype=dtype, seed=seed, steps=steps,
        reference=reference.label, requests=req_info, checks=checks,
        top1_agreement=agree / (n * steps) if head is not None else None,
        attention_engine=engine, notes=notes,
        elapsed_s=time.perf_counter() - t0, outputs=outputs)


def _reference_routing(spec, refs, label: str):
    """The routing the reference's router chose for this step's tokens (request ``i``'s token
    is row ``i``), or None for a dense model.

    Raises:
        ValidationError: a mixture of experts whose reference reports no router choices.
    """
    if spec.n_experts is None:
        return None
    from workloads.moe import routing_from_choices

    if any(r.experts is None for r in refs):
        raise ValidationError(f"the reference ({label}) reports no router choices for the "
                              f"mixture of experts of model '{spec.name}'")
    choices = {l: np.stack([r.experts[l] for r in refs]) for l in range(spec.n_layers)}
    return routing_from_choices(spec, choices, np.arange(len(refs)),
                                f"router values of the reference ({label})")


def round_to_np(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` (float32 values; :func:`archsim.functional.round_to`)."""
    from archsim.functional import round_to

    return round_to(np.asarray(x, dtype=np.float64), dtype)


__all__ = ["ValidationError", "TensorCheck", "ValidationReport", "run_validation",
           "prompt_tokens"]
