"""Placement: which engine runs each operator, from one data table.

The policy is :data:`PLACEMENT_RULES`: one row per operator kind (and phase), listing candidate
``(engine, kernel)`` pairs in order of preference. A candidate is taken when its engine exists in
the system (``system.engines``: ``npu`` provides ``sa``, ``vu`` and ``dma``; ``pim`` provides
``pim``; a tensor-parallel group provides ``link``) and the ISA has every instruction the kernel
needs (:data:`KERNEL_NEEDS`). Changing the policy is editing rows, not code.

Engines: ``sa`` systolic arrays, ``vu`` vector units, ``dma`` the NPU's DMA engine, ``pim`` the
PIM units of the HBM channels, ``link`` the device-to-device interconnect.

Source of the policy: NeuPIMs (ASPLOS 2024) §3-4: GEMMs (QKV generation, projection, FFN) on the
NPU's systolic arrays, decode attention (q.K^T and p.V GEMVs) on PIM, softmax and the other vector
operators on the NPU's vector units; prefill attention is a GEMM and stays on the NPU; an NPU-only
system runs decode attention on the NPU through the memory bus.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from isa.spec import BY_MNEMONIC
from mapping.errors import PlacementError


@dataclass(frozen=True)
class Rule:
    """One row of the placement table.

    Attributes:
        kind: operator kind (``workloads.graph.OpKind`` value).
        phase: ``'decode'``, ``'prefill'`` or None (both).
        candidates: ``(engine, kernel)`` pairs, most preferred first.
        detail: optional node attribute value that selects this row (e.g. the activation
            function read from the model), None = any.
    """

    kind: str
    phase: str | None
    candidates: tuple[tuple[str, str], ...]
    detail: str | None = None


#: The placement policy (first matching row wins; rows with ``detail`` are checked first).
PLACEMENT_RULES: tuple[Rule, ...] = (
    Rule("gemm", None, (("sa", "gemm_ws"),)),
    Rule("attention_score", "decode", (("pim", "pim_qk"), ("vu", "vu_dot_qk"))),
    Rule("attention_context", "decode", (("pim", "pim_pv"), ("vu", "vu_dot_pv"))),
    Rule("attention_score", "prefill", (("sa", "sa_qk"),)),
    Rule("attention_context", "prefill", (("sa", "sa_pv"),)),
    Rule("softmax", None, (("vu", "softmax"),)),
    Rule("layernorm", None, (("vu", "layernorm"),)),
    Rule("rmsnorm", None, (("vu", "rmsnorm"),)),
    Rule("activation", None, (("vu", "gelu"),), detail="gelu"),
    Rule("activation", None, (("vu", "swiglu"),), detail="swiglu"),
    Rule("activation", None, (("vu", "relu"),), detail="relu"),
    Rule("elementwise", None, (("vu", "rope"),), detail="rope"),
    Rule("elementwise", None, (("vu", "moe_combine"),), detail="moe_combine"),
    Rule("elementwise", None, (("vu", "add"),)),
    # mixture of experts: the router's softmax/top-k on the vector units (Mixtral's router
    # is a tiny GEMM + softmax), the expert-parallel token exchange on the links
    Rule("topk", None, (("vu", "topk"),)),
    Rule("alltoall", None, (("link", "all_to_all"),)),
    Rule("kv_append", "decode", (("dma", "kv_store_pim"), ("dma", "kv_store_stream"))),
    Rule("kv_append", "prefill", (("dma", "kv_store_pim"), ("dma", "kv_store_stream"))),
    Rule("allreduce", None, (("link", "ring_allreduce"),)),
    # the token-id gather of an embedding has no instruction: the host provides hidden states
    Rule("embedding", None, (("dma", "gather"),)),
)

#: ISA instructions each kernel needs (a kernel whose instruction is missing cannot be used).
KERNEL_NEEDS: dict[str, tuple[str, ...]] = {
    "gemm_ws": ("DMA_LOAD", "SA_LOADW", "SA_MATMUL", "VU_COPY"),
    # PIM attention uses one of two command sets (pim.commands): NeuPIMs' PIM_HEADER + fused
    # PIM_GEMV, or Newton's COMP steps + READRES; both close the rows with PIM_PRECHARGE
    "pim_qk": ("GWRITE", "G_ACT", "PIM_PRECHARGE", "PIM_HEADER", "PIM_GEMV", "COMP", "READRES"),
    "pim_pv": ("GWRITE", "G_ACT", "PIM_PRECHARGE", "PIM_HEADER", "PIM_GEMV", "COMP", "READRES",
               "VU_ADD"),
    "vu_dot_qk": ("DMA_LOAD", "VU_DOT"),
    "vu_dot_pv": ("DMA_LOAD", "VU_DOT"),
    "sa_qk": ("SA_LOADW", "SA_MATMUL", "VU_TRANSPOSE"),
    "sa_pv": ("SA_LOADW", "SA_MATMUL"),
    "softmax": ("VU_SCALE", "VU_SOFTMAX"),
    "layernorm": ("VU_LAYERNORM",),
    "rmsnorm": ("VU_RMSNORM",),
    "gelu": ("VU_GELU",),
    "swiglu": ("VU_SILU", "VU_MUL"),
    "relu": ("VU_RELU",),
    "rope": ("VU_ROPE",),
    "add": ("VU_ADD",),
    "kv_store_pim": ("DMA_STORE",),
    "kv_store_stream": ("DMA_STORE",),
    "ring_allreduce": ("ALL_REDUCE",),
    "topk": ("VU_TOPK", "VU_TRANSPOSE"),
    "moe_combine": ("VU_AXPY",),
    "all_to_all": ("ALL_TO_ALL",),
    "gather": ("DMA_GATHER",),
}

#: Engines provided by each entry of ``system.engines``.
SYSTEM_ENGINES: dict[str, tuple[str, ...]] = {"npu": ("sa", "vu", "dma"), "pim": ("pim",)}


@dataclass(frozen=True)
class Placement:
    """Where one operator runs: ``engine`` (sa/vu/dma/pim/link) and the ``kernel`` that
    implements it (a key of :data:`KERNEL_NEEDS`)."""

    engine: str
    kernel: str


def available_engines(system_engines: tuple[str, ...] | list[str], tp: int = 1,
                      ep: int = 1) -> set[str]:
    """Engines of a system: the union of :data:`SYSTEM_ENGINES` of ``system.engines``, plus
    ``link`` when ``tp > 1`` or ``ep > 1`` (a tensor- or expert-parallel group)."""
    out: set[str] = set()
    for e in system_engines:
        out.update(SYSTEM_ENGINES.get(e, ()))
    if tp > 1 or ep > 1:
        out.add("link")
    return out


def _detail(attrs: Mapping) -> str | None:
    return attrs.get("detail") or (
        "rope" if attrs.get("sub_role") == "rope" else None)


def place_op(name: str, attrs: Mapping, engines: set[str],
             rules: tuple[Rule, ...] = PLACEMENT_RULES,
             instructions: Mapping = BY_MNEMONIC) -> Placement:
    """Place one operator.

    Args:
        name: node name (for messages).
        attrs: node attributes (``kind``, ``phase``, ``sub_role``; ``detail`` optional, e.g. the
            activation function).
        engines: engines present (:func:`available_engines`).
        rules: the placement table.
        instructions: the ISA's instructions by mnemonic.

    Returns:
        the first candidate whose engine is present and whose instructions exist.

    Raises:
        PlacementError: no row matches the op kind, or no candidate is usable; the message
            names the op and every engine tried with the reason it was rejected.
    """
    kind = str(getattr(attrs.get("kind"), "value", attrs.get("kind")))
    phase = attrs.get("phase")
    detail = _detail(attrs)
    rows = [r for r in rules if r.kind == kind and r.phase in (None, phase)
            and r.detail is not None and r.detail == detail]
    rows += [r for r in rules if r.kind == kind and r.phase in (None, phase) and r.detail is None]
    if not rows:
        raise PlacementError(f"op '{name}' ({kind}, {phase}): no placement rule for this kind; "
                             "engines tried: none")
    tried: list[str] = []
    for r in rows[:1]:
        for engine, kernel in r.candidates:
            if engine not in engines:
                tried.append(f"{engine} (not in this system)")
                continue
            missing = [m for m in KERNEL_NEEDS.get(kernel, ()) if m not in instructions]
            if missing:
                tried.append(f"{engine} (kernel {kernel} needs {', '.join(missing)}, not in the "
                             "ISA)")
                continue
            return Placement(engine, kernel)
    what = f"{kind}{'/' + detail if detail else ''}"
    raise PlacementError(f"op '{name}' ({what}, {phase}) cannot be placed; engines tried: "
                         + "; ".join(tried))


def place_graph(graph: nx.DiGraph, system_engines: tuple[str, ...] | list[str], tp: int = 1,
                details: Mapping[str, str] | None = None,
                rules: tuple[Rule, ...] = PLACEMENT_RULES, ep: int = 1) -> dict[str, Placement]:
    """Place every node of an operator graph.

    Args:
        graph: a ``workloads.graph`` DAG.
        system_engines: ``system.engines`` of the machine config.
        tp: tensor-parallel degree (``link`` exists when > 1).
        ep: expert-parallel degree (``link`` exists when > 1).
        details: extra per-sub-role details (``{'ffn_act': 'gelu'}``) selecting rows.
        rules: the placement table.

    Returns:
        ``{node name: Placement}`` for every node.

    Raises:
        PlacementError: for the first node that cannot be placed (see :func:`place_op`).
    """
    engines = available_engines(system_engines, tp, ep)
    out: dict[str, Placement] = {}
    for name, attrs in graph.nodes(data=True):
        a = dict(attrs)
        if details and a.get("sub_role") in details:
            a["detail"] = details[a["sub_role"]]
        out[name] = place_op(name, a, engines, rules)
    return out


__all__ = ["Rule", "PLACEMENT_RULES", "KERNEL_NEEDS", "SYSTEM_ENGINES", "Placement",
           "available_engines", "place_op", "place_graph"]
