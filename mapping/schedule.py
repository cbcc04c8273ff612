"""The stage schedule: in which order each engine group runs the work of a layer stack.

Work of one layer ``l`` and sub-batch ``s`` comes in three items (DESIGN §3):

* ``qkv``  (NPU): attention norm, QKV generation, bias, RoPE;
* ``attn`` (PIM, or the NPU's vector units without PIM): KV append, q.K^T, softmax, p.V;
* ``pf``   (NPU): output projection (+ all-reduce), residual, FFN norm, FFN (+ all-reduce),
  residual.

**Interleaved** (``n_sub >= 2``, NeuPIMs sub-batch interleaving): the NPU runs the units
``qkv(l0, 0..n-1)``, then for every layer and sub-batch ``pf(l, s)`` merged with
``qkv(l+1, s)``; PIM runs ``attn(l, s)`` layer by layer. Stage ``k`` pairs NPU unit ``k`` with
PIM unit ``k - 1``. With two sub-batches this is the table of DESIGN §3::

    A: qkv#1            | -
    B: qkv#2            | attn#1
    C: pf#1 + qkv#1'    | attn#2        (C and D repeat once per further layer)
    D: pf#2 + qkv#2'    | attn#1'
    E: pf#1'            | attn#2'
    F: pf#2'            | -

**Serial** (``n_sub == 1``): ``qkv(l)``, ``attn(l)``, ``pf(l)``, one stage each.

The schedule only orders work; the dependencies between items are enforced by semaphores in
the emitted program (:mod:`mapping.builder`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mapping.errors import ScheduleError


@dataclass(frozen=True)
class WorkItem:
    """One unit of work: ``kind`` (qkv/attn/pf) of ``layer`` for sub-batch ``sub``."""

    kind: str
    layer: int
    sub: int


@dataclass
class Stage:
    """One stage: a name (``'2:C'``), the NPU items and the attention (PIM) items it runs."""

    name: str
    npu: list[WorkItem] = field(default_factory=list)
    attn: list[WorkItem] = field(default_factory=list)


def _letters(k: int, n_stages: int, n_sub: int) -> str:
    if n_sub != 2:
        return "S"
    if k == 0:
        return "A"
    if k == 1:
        return "B"
    if k == n_stages - 1:
        return "F"
    if k == n_stages - 2:
        return "E"
    return "C" if k % 2 == 0 else "D"


def stage_schedule(layers: list[int], n_sub: int) -> list[Stage]:
    """The stages for ``layers`` (consecutive, ascending) and ``n_sub`` sub-batches.

    Returns:
        stages in program order; every (kind, layer, sub-batch) item appears exactly once, and
        every item appears in a stage no earlier than the items it depends on
        (``qkv(l,s) < attn(l,s) < pf(l,s) < qkv(l+1,s)``), attention strictly after its qkv.

    Raises:
        ScheduleError: no layers, or ``n_sub < 1``.
    """
    if not layers:
        raise ScheduleError("stage schedule: no layers to schedule")
    if n_sub < 1:
        raise ScheduleError(f"stage schedule: {n_sub} sub-batches; need at least 1")
    if n_sub == 1:
        out: list[Stage] = []
        for l in layers:
            for kind, slot in (("qkv", "npu"), ("attn", "attn"), ("pf", "npu")):
                st = Stage(f"{len(out)}:{kind.upper()}(L{l})")
                getattr(st, slot).append(WorkItem(kind, l, 0))
                out.append(st)
        return out
    npu_units: list[list[WorkItem]] = [[WorkItem("qkv", layers[0], s)] for s in range(n_sub)]
    attn_units: list[WorkItem] = []
    for i, l in enumerate(layers):
        for s in range(n_sub):
            unit = [WorkItem("pf", l, s)]
            if i + 1 < len(layers):
                unit.append(WorkItem("qkv", layers[i + 1], s))
            npu_units.append(unit)
            attn_units.append(WorkItem("attn", l, s))
    n_stages = len(npu_units)
    out = []
    for k in range(n_stages):
        st = Stage(f"{k}:{_letters(k, n_stages, n_sub)}")
        st.npu = list(npu_units[k])
        if 1 <= k <= len(attn_units):
            st.attn = [attn_units[k - 1]]
        out.append(st)
    return out


__all__ = ["WorkItem", "Stage", "stage_schedule"]
