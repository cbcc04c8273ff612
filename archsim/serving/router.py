"""The router of a serving run with several replicas: which replica receives each request.

A *replica* is a whole copy of the system (``tensor_parallel × pipeline_parallel`` devices
holding the model) with its own scheduler, KV cache and clock (:mod:`archsim.serving.scheduler`
runs them side by side in simulated time). The router sees every replica as it is when the
request arrives (:class:`ReplicaLoad`; a replica in the middle of an iteration shows its state
at that iteration's start plus the requests routed to it since) and decides at once; a request
never moves afterwards. Policies (:data:`ROUTERS`):

* ``round-robin``: the ``k``-th arriving request goes to replica ``k mod N``.
* ``least-loaded``: the replica with the fewest outstanding requests (waiting, running or
  swapped out), as least-request load balancers do (Envoy's ``LEAST_REQUEST``, the join-the-
  shortest-queue rule).
* ``kv-aware``: the replica with the most KV headroom, ``free KV tokens − tokens its waiting
  requests will allocate at admission`` (free blocks × block size, minus the admission tokens
  of its queue: prompts, or whole contexts with ``reserve``); it steers a request away from a
  replica whose cache is about to preempt.

Ties go to the replica with fewer outstanding requests, then the lower index.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from archsim.errors import ArchsimError

#: Router policies (``archsim run --serve --router``).
ROUTERS = ("round-robin", "least-loaded", "kv-aware")

#: Most replicas of one run.
MAX_REPLICAS = 1024


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What the router sees of one replica when a request arrives.

    Attributes:
        outstanding: requests routed to it and not finished (waiting, running, swapped out).
        queued_tokens: KV tokens its waiting requests will allocate at admission.
        free_kv_tokens: free KV blocks × block size (all its pools).
    """

    outstanding: int
    queued_tokens: int
    free_kv_tokens: int

    @property
    def headroom_tokens(self) -> int:
        """``free_kv_tokens − queued_tokens`` (the ``kv-aware`` measure)."""
        return self.free_kv_tokens - self.queued_tokens


def check_router(router: str, replicas: int) -> None:
    """Refuse an unknown policy or a replica count outside ``1..MAX_REPLICAS``.

    Raises:
        ArchsimError: naming ``--router`` / ``--replicas`` and the allowed values.
    """
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not (
            1 <= replicas <= MAX_REPLICAS):
        raise ArchsimError(f"--replicas {replicas!r}: must be an integer 1..{MAX_REPLICAS}")
    if router not in ROUTERS:
        raise ArchsimError(f"--router {router!r} not one of {list(ROUTERS)}")


def choose_replica(router: str, loads: Sequence[ReplicaLoad], arrival_rank: int) -> int:
    """The replica (index into ``loads``) that receives a request.

    Args:
        router: one of :data:`ROUTERS`.
        loads: one :class:`ReplicaLoad` per replica, as they are at the request's arrival.
        arrival_rank: how many requests were routed before this one (round-robin).

    Raises:
        ArchsimError: unknown router or no replica.
    """
    n = len(loads)
    if n == 0:
        raise ArchsimError("router: no replica")
    if router == "round-robin":
        return arrival_rank % n
    if router == "least-loaded":
        return min(range(n), key=lambda k: (loads[k].outstanding, k))
    if router == "kv-aware":
        return min(range(n), key=lambda k: (-loads[k].headroom_tokens, loads[k].outstanding, k))
    raise ArchsimError(f"--router {router!r} not one of {list(ROUTERS)}")


__all__ = ["ROUTERS", "MAX_REPLICAS", "ReplicaLoad", "check_router", "choose_replica"]
