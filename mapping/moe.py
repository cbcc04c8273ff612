"""Mixture of experts in the compiler: the iteration's routing and where each routed token runs.

A compiled program is specialised to its iteration's routing (:class:`workloads.moe.Routing`),
as it is to its requests' lengths: the rows of every expert GEMM, which experts run at all,
and the bytes of the expert-parallel all-to-alls follow from it. :func:`resolve_routing` takes
the caller's routing (the golden checks route by the reference's router values) or draws one
from the router model of ``system.moe_router``; it also rejects the MoE keys on a dense model.

Expert parallelism (``system.expert_parallel = ep``; :mod:`workloads.moe`): the simulated
device 0 runs attention for the requests at batch positions ``0, ep, 2 ep, ...`` and holds
experts ``[0, E/ep)``. Each of its GEMM row blocks (sub-batch ``s``, row block ``b``) also
serves the tokens the other devices send its experts: a token at index ``j`` of its own
device's tokens is paired with device 0's ``j``-th token row (all devices run the same
schedule on batches of the same shape, so the ``j``-th rows are processed at the same time),
:func:`pair_rows`.
"""
from __future__ import annotations

import numpy as np

from archsim.config import MachineConfig
from mapping.errors import MappingError
from workloads.errors import WorkloadError
from workloads.models import ModelSpec
from workloads.moe import Routing, device_positions, draw_routing
from workloads.requests import Batch


def expert_parallel(model: ModelSpec, cfg: MachineConfig) -> int:
    """``system.expert_parallel`` checked against ``model``.

    Raises:
        MappingError: a degree above 1 on a dense model, or one that does not divide the
            experts (names the key and the allowed values).
    """
    ep = cfg.system.expert_parallel
    try:
        model.check_expert_parallel(ep)
    except WorkloadError as exc:
        raise MappingError(f"system.expert_parallel = {ep}: {exc}") from None
    return ep


def resolve_routing(model: ModelSpec, batch: Batch, cfg: MachineConfig, phase: str,
                    layers: list[int], routing: Routing | None = None) -> Routing | None:
    """The routing a program of ``layers`` is compiled for (module docstring).

    Args:
        model, batch, cfg, phase: what is compiled (``batch``: every expert-parallel
            device's requests).
        layers: the layers to route (the pipeline stage's).
        routing: the caller's routing (its ``expert_parallel`` must equal the system's), or
            None to draw one with ``system.moe_router``.

    Returns:
        the routing, or None for a dense model.

    Raises:
        MappingError: ``system.moe_router`` / ``system.expert_parallel`` set for a dense model,
            a routing for a dense model, or one whose expert-parallel degree differs.
    """
    ep = expert_parallel(model, cfg)
    router = cfg.system.moe_router
    if model.n_experts is None:
        if router != type(router)():
            raise MappingError(f"system.moe_router is the router model of mixture-of-experts "
                               f"models; model '{model.name}' has no experts (leave it unset)")
        if routing is not None:
            raise MappingError(f"model '{model.name}' has no experts: a routing does not apply")
        return None
    if routing is None:
        return draw_routing(model, batch, phase, layers, zipf_exponent=router.zipf_exponent,
                            seed=router.seed, expert_parallel=ep)
    if routing.expert_parallel != ep:
        raise MappingError(f"the routing is for expert parallelism {routing.expert_parallel}, "
                           f"the system has system.expert_parallel = {ep}")
    return routing


def local_batch(batch: Batch, ep: int) -> tuple[Batch, np.ndarray]:
    """Device 0's requests (batch positions ``0, ep, ...``) and those positions.

    Raises:
        MappingError: fewer requests than devices (device 0 would have none).
    """
    pos = device_positions(len(batch), ep)
    if ep == 1:
        return batch, pos
    if not len(pos):
        raise MappingError(f"system.expert_parallel = {ep}: the batch of {len(batch)} "
                           "requests leaves device 0 without a request")
    return Batch(tuple(batch[int(i)] for i in pos), batch.source), pos


def pair_rows(routing: Routing, n_rows: int) -> np.ndarray:
    """Device 0's token row paired with every token (module docstring), int ``[tokens]``:
    for a token of device ``g`` at index ``j`` of ``g``'s tokens, ``min(j, n_rows - 1)``
    (device 0's own tokens get their own row)."""
    dev = routing.token_device()
    out = np.zeros(len(dev), dtype=np.int64)
    for g in range(routing.expert_parallel):
        idx = np.flatnonzero(dev == g)
        out[idx] = np.minimum(np.arange(len(idx)), max(n_rows - 1, 0))
    return out


__all__ = ["expert_parallel", "resolve_routing", "local_batch", "pair_rows"]
