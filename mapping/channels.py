"""KV-channel placement: the one owner of the decision which PIM/HBM channel holds a request's
KV cache.

Every path that needs a placement calls this module: the compiler
(:func:`mapping.compiler.compile_layers`, through :func:`assign_channels`), the serving
scheduler (:class:`OnlinePlacer`, admission-time placement) and the CLI/sweeps (through the
compiler's ``CompileOptions(channels=...)``).

* :func:`place_channels` — the machine's policy (``system.channel_policy``) over a whole batch:
  ``round_robin`` or greedy ``min_load`` (LPT bin packing, as the NeuPIMs trace generator's
  ``distribute_requests``).
* :class:`OnlinePlacer` — the same two policies applied at admission, for a continuous-batching
  scheduler whose requests keep their channel until they leave.
* :func:`check_channels` — a trace's ``ch_idx`` must name a channel of the machine.
* :func:`assign_channels` — policy placement, or keep the trace's channels (``--keep-channels``),
  with a one-line description of what was done (printed by ``archsim run``/``compare``).

A request file's own placement (the ``ch_idx`` column of a NeuPIMs snapshot, or the channels the
warm-up generator :func:`workloads.requests.warmup_decode_snapshot` writes, like the NeuPIMs trace
generator) is data of the trace; whether it is used is decided here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

from archsim.errors import ArchsimError
from workloads.errors import WorkloadError
from workloads.requests import Batch, CostFn, cost_function

if TYPE_CHECKING:  # pragma: no cover
    from archsim.config import MachineConfig

ChannelPolicy = Literal["round_robin", "min_load"]
POLICIES = ("round_robin", "min_load")
"""Values of ``system.channel_policy``."""


def _greedy_min_load(costs: np.ndarray, loads: np.ndarray) -> np.ndarray:
    """Largest cost first onto the currently least-loaded channel (ties: lowest index).

    ``loads`` (float64 ``[n_channels]``) is updated in place. Returns the channel per cost.
    """
    out = np.empty(costs.size, dtype=np.int64)
    for k in np.argsort(-costs, kind="stable"):
        c = int(np.argmin(loads))
        out[k] = c
        loads[c] += costs[k]
    return out


def place_channels(batch: Batch, n_channels: int, policy: ChannelPolicy = "round_robin",
                   cost: str | CostFn = "seq_len") -> Batch:
    """Place each request's KV cache on one of ``n_channels`` PIM channels by ``policy``.

    * ``round_robin``: request index ``i`` goes to channel ``i mod n_channels``.
    * ``min_load``: greedy bin packing (LPT): requests sorted by decreasing attention cost
      (stable), each put on the channel with the smallest accumulated cost so far (ties: lowest
      channel index), as in the NeuPIMs trace generator (``distribute_requests``).

    The attention cost defaults to ``'seq_len'``: decode attention reads ``2 L kv_heads head_dim``
    KV bytes and does ``4 L heads head_dim`` FLOPs for sequence length ``L``, so its PIM latency is
    proportional to ``L`` up to row/tile rounding. Pass
    :func:`workloads.requests.neupims_attention_cost` (or any ``f(seq_lens) -> costs``) to
    include that rounding and fixed overheads.

    Returns:
        a new :class:`Batch` with ``channel`` set on every request (previous channels ignored).

    Raises:
        WorkloadError: ``n_channels < 1`` or an unknown policy/cost (lists the allowed values).
    """
    if isinstance(n_channels, bool) or not isinstance(n_channels, int) or n_channels < 1:
        raise WorkloadError(f"place_channels: n_channels must be a positive integer, "
                            f"got {n_channels!r}")
    if policy == "round_robin":
        return batch.with_channels(np.arange(len(batch)) % n_channels)
    if policy == "min_load":
        costs = cost_function(cost)(batch.seq_lens)
        return batch.with_channels(_greedy_min_load(costs, np.zeros(n_channels)))
    raise WorkloadError(f"place_channels: policy {policy!r} not one of {list(POLICIES)}")


class OnlinePlacer:
    """Admission-time channel placement of a continuous-batching scheduler.

    Each admitted request gets a channel that it keeps until it leaves: ``round_robin`` a
    rotating pointer; ``min_load`` the admitted requests, largest KV reservation first, each
    onto the channel with the fewest reserved tokens (released when the request leaves).

    With room limits (the serving KV cache's per-channel block pools, ``room``/``take`` of
    :meth:`admit`) a request goes only to a channel that can hold it: ``round_robin`` skips
    channels without room (as the NeuPIMs reference's round robin skips channels without free
    KV capacity), ``min_load`` takes the least-loaded channel among those with room; a request
    that fits no channel is left unplaced.

    Attributes:
        channels: int64 ``[n]`` channel of each request (``-1`` before admission).

    Raises:
        ArchsimError: an unknown policy (constructor).
    """

    def __init__(self, n_requests: int, n_channels: int, policy: str) -> None:
        if policy not in POLICIES:
            raise ArchsimError(f"channel policy {policy!r} not one of {list(POLICIES)}")
        self.n_channels, self.policy = int(n_channels), policy
        self.channels = np.full(n_requests, -1, np.int64)
        self._load = np.zeros(n_channels or 1, np.int64)
        self._rr_next = 0

    def admit(self, new: np.ndarray, need: np.ndarray, loads: np.ndarray | None = None,
              room: np.ndarray | None = None, take: np.ndarray | None = None) -> np.ndarray:
        """Place requests ``new`` (int64 indices) whose KV reservation is ``need[new]``
        tokens (``need``: int64 ``[n]``; ``min_load`` places the largest first).

        Args:
            loads: float ``[n_channels]`` load of each channel (tokens) to balance instead of
                the placer's own account of the reservations it placed (``min_load`` only).
            room: int64 ``[n_channels]`` free units (e.g. KV blocks) per channel, decreased in
                place by what is placed; take: int64 ``[n]`` units each request needs. Both or
                neither.

        Returns:
            bool ``[len(new)]``: placed (always all without ``room``).
        """
        ch = self.channels
        ok = np.ones(new.size, bool)
        if room is None:
            if self.policy == "round_robin":
                ch[new] = (self._rr_next + np.arange(new.size)) % self.n_channels
                self._rr_next = int((self._rr_next + new.size) % self.n_channels)
            else:
                for i in new[np.argsort(-need[new], kind="stable")]:
                    c = int(np.argmin(self._load))
                    ch[i] = c
                    self._load[c] += need[i]
            return ok
        assert take is not None, "room needs take"
        load = (self._load if loads is None else np.asarray(loads, np.float64)).astype(
            np.float64)
        C = self.n_channels
        order = (np.arange(new.size) if self.policy == "round_robin"
                 else np.argsort(-need[new], kind="stable"))
        for k in order:
            i = int(new[k])
            fits = room >= take[i]
            if not fits.any():
                ok[k] = False
                continue
            if self.policy == "round_robin":
                c = next(c for c in ((self._rr_next + j) % C for j in range(C)) if fits[c])
                self._rr_next = (c + 1) % C
            else:
                c = int(np.argmin(np.where(fits, load, np.inf)))
            ch[i] = c
            room[c] -= take[i]
            load[c] += need[i]
            if loads is None:
                self._load[c] += need[i]
        return ok

    def release(self, gone: np.ndarray, need: np.ndarray) -> None:
        """Free the reservations of requests ``gone`` (``min_load`` bookkeeping of the
        placer's own account; not needed when :meth:`admit` is given ``loads``)."""
        if self.policy == "min_load":
            np.subtract.at(self._load, self.channels[gone], need[gone])


def check_channels(channels: np.ndarray, n_channels: int, source: str = "",
                   lines: tuple[int, ...] = ()) -> None:
    """Check that every assigned channel (``>= 0``; ``-1`` = none) of a trace is a channel of
    the machine (``0 .. n_channels - 1``).

    Args:
        channels: int ``[n]`` channel per request, ``-1`` where the trace gives none.
        n_channels: channels of the machine (``memory.org.channels``).
        source: the file the channels come from (named in the message).
        lines: the file line of each request (same order), when known.

    Raises:
        ArchsimError: ``"<file>:<line>: ch_idx 40 is outside the machine's channels 0..31"``
            (``request index i`` instead of the line when it is unknown).
    """
    ch = np.asarray(channels, dtype=np.int64)
    bad = ch >= n_channels
    if not bad.any():
        return
    i = int(np.argmax(bad))
    if source and len(lines) == ch.size:
        where = f"{source}:{lines[i]}"
    else:
        where = (f"{source}: " if source else "") + f"request index {i}"
    raise ArchsimError(f"{where}: ch_idx {int(ch[i])} is outside the machine's channels "
                       f"0..{n_channels - 1}")


def check_batch_channels(batch: Batch, n_channels: int) -> None:
    """:func:`check_channels` on a :class:`Batch` (its ``source`` and ``lines``)."""
    check_channels(batch.channels, n_channels, batch.source, batch.lines)


def describe_placement(keep: bool, policy: str, source: str = "") -> str:
    """The words printed after ``channels:``: ``policy min-load`` or ``kept from <file>``."""
    if keep:
        return f"kept from {source or 'the batch'}"
    return f"policy {policy.replace('_', '-')}"


def assign_channels(batch: Batch, cfg: "MachineConfig", keep: bool = False,
                    cost: str | CostFn = "seq_len") -> tuple[Batch, str]:
    """The channels a compiled program uses: ``cfg.system.channel_policy`` over
    ``cfg.memory.org.channels`` (:func:`place_channels`, attention ``cost`` per request; a
    sliding-window model passes ``min(L, W)``), or, with ``keep``, the batch's own.

    The trace's channels are checked against the machine in both cases (a ``ch_idx`` the machine
    does not have is a wrong input even when the policy would replace it).

    Returns:
        ``(batch with a channel on every request, description)`` (:func:`describe_placement`).

    Raises:
        ArchsimError: a ``ch_idx`` outside the machine (:func:`check_channels`); ``keep`` on a
            batch where some request has no channel.
    """
    C = cfg.memory.org.channels
    check_batch_channels(batch, C)
    if keep:
        ch = batch.channels
        if len(batch) and (ch < 0).any():
            raise ArchsimError(f"--keep-channels: {batch.source or 'the batch'} has no channel "
                               f"for every request (request index {int(np.argmax(ch < 0))} has "
                               "none; a .csv snapshot or a .tsv with a ch_idx column has)")
        return batch, describe_placement(True, cfg.system.channel_policy, batch.source)
    pol = cfg.system.channel_policy
    return place_channels(batch, C, pol, cost), describe_placement(False, pol)


__all__ = ["POLICIES", "ChannelPolicy", "place_channels", "OnlinePlacer", "check_channels",
           "check_batch_channels", "describe_placement", "assign_channels"]
