"""Splitting a decode batch into sub-batches for NPU/PIM interleaving (NeuPIMs §4.3).

With ``n`` sub-batches the NPU runs the GEMMs of one sub-batch while PIM runs the attention of
another (DESIGN §3, stage table). A request's attention runs on the PIM channel holding its KV
cache, so what must be balanced is each channel's share of every sub-batch:

* ``half`` (the reference): each channel's requests, in batch order, are cut into ``n``
  contiguous groups whose sizes differ by at most one; the sub-batches receiving the larger
  groups rotate from channel to channel (alternating ceil/floor for ``n = 2``), so the global
  sub-batch sizes also differ by at most one.
* ``balanced_kv``: the same group sizes per channel (so the NPU's GEMM work per sub-batch is
  the same as with ``half``), but the requests are chosen to balance the KV length (tokens of
  cached context = the PIM attention work) of each channel's groups: largest-first greedy onto the
  lightest group with room, improved by pairwise swaps, and never worse than ``half`` on any
  channel (the better of the two is kept per channel).

All functions are pure and deterministic (ties broken by request index).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mapping.errors import MappingError, UnsupportedError
from workloads.requests import Batch

SUB_BATCH_POLICIES = ("half", "balanced_kv")


@dataclass(frozen=True)
class SubBatchAssignment:
    """Which sub-batch each request of a batch belongs to.

    Attributes:
        sub_batch: int array of shape (n_requests,): sub-batch index (0-based) of request i
            (position i in the batch, not the request id).
        n_sub_batches: number of sub-batches (>= 1); some may be empty for tiny batches.
        policy: the policy that produced it (``half`` or ``balanced_kv``).
    """

    sub_batch: np.ndarray
    n_sub_batches: int
    policy: str

    def members(self, s: int) -> np.ndarray:
        """Batch positions (ascending) of the requests in sub-batch ``s``; shape (k,)."""
        return np.flatnonzero(self.sub_batch == s)

    def sizes(self) -> list[int]:
        """Requests per sub-batch, a list of length ``n_sub_batches``."""
        return [int(x) for x in np.bincount(self.sub_batch, minlength=self.n_sub_batches)]

    def kv_tokens(self, seq_lens: np.ndarray, channels: np.ndarray | None = None,
                  n_channels: int | None = None) -> np.ndarray:
        """KV tokens per sub-batch (shape (n_sub,)) or, with ``channels``, per channel and
        sub-batch (shape (n_channels, n_sub), axis 0 = channel, axis 1 = sub-batch)."""
        seq = np.asarray(seq_lens, dtype=np.int64)
        if channels is None:
            return np.bincount(self.sub_batch, weights=seq,
                               minlength=self.n_sub_batches).astype(np.int64)
        ch = np.asarray(channels, dtype=np.int64)
        nch = int(n_channels if n_channels is not None else (ch.max() + 1 if ch.size else 1))
        out = np.zeros((nch, self.n_sub_batches), dtype=np.int64)
        np.add.at(out, (ch, self.sub_batch), seq)
        return out

    def to_dict(self) -> dict:
        """JSON-friendly form: policy, sizes and the per-request list of sub-batch indices."""
        return {"policy": self.policy, "n_sub_batches": self.n_sub_batches,
                "sizes": self.sizes(), "sub_batch": [int(x) for x in self.sub_batch]}


def _check_inputs(seq_lens: Sequence[int] | np.ndarray, channels, n_sub: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    seq = np.asarray(seq_lens, dtype=np.int64).reshape(-1)
    if isinstance(n_sub, bool) or not isinstance(n_sub, (int, np.integer)) or n_sub < 1:
        raise MappingError(f"number of sub-batches must be a positive integer, got {n_sub!r}")
    if channels is None:
        ch = np.zeros(seq.shape[0], dtype=np.int64)
    else:
        ch = np.asarray([(-1 if c is None else c) for c in channels], dtype=np.int64).reshape(-1)
        if ch.shape != seq.shape:
            raise MappingError(f"sub-batch split: {seq.shape[0]} sequence lengths but "
                               f"{ch.shape[0]} channels")
        if (ch < 0).any():
            if (ch < 0).all():  # no channels assigned: one group
                ch = np.zeros_like(ch)
            else:
                raise MappingError(f"sub-batch split: request at position {int(np.argmax(ch < 0))}"
                                   " has no channel while others do")
    if (seq < 0).any():
        raise MappingError(f"sub-batch split: negative sequence length at position "
                           f"{int(np.argmax(seq < 0))}")
    return seq, ch


def _group_sizes(n: int, n_sub: int, offset: int) -> tuple[list[int], int]:
    """Sizes of the ``n_sub`` groups of one channel with ``n`` requests and the next offset.

    The ``r = n mod n_sub`` larger groups go to sub-batches ``offset, offset+1, ...`` (mod
    n_sub); the offset then advances by ``r`` so the extras rotate over channels."""
    q, r = divmod(n, n_sub)
    sizes = [q] * n_sub
    for j in range(r):
        sizes[(offset + j) % n_sub] += 1
    return sizes, (offset + r) % n_sub


def split_half(seq_lens, channels, n_sub: int = 2) -> SubBatchAssignment:
    """The reference split: each channel's requests (in batch order) cut into ``n_sub``
    contiguous groups of near-equal size, the extra requests rotating over sub-batches.

    Args:
        seq_lens: shape (n_requests,), tokens of KV context of each request (used only for
            validation here).
        channels: shape (n_requests,), PIM channel of each request, or None (one group).
        n_sub: number of sub-batches (>= 1).

    Returns:
        A :class:`SubBatchAssignment`; per channel the group sizes differ by at most one and the
        global sub-batch sizes differ by at most one.

    Raises:
        MappingError: mismatched lengths, a negative length, a missing channel, n_sub < 1.

    Source: NeuPIMs (ASPLOS 2024) §4.3 and its reference scheduler (per-channel halves).
    """
    seq, ch = _check_inputs(seq_lens, channels, n_sub)
    out = np.zeros(seq.shape[0], dtype=np.int64)
    offset = 0
    for c in np.unique(ch):
        idx = np.flatnonzero(ch == c)
        sizes, offset = _group_sizes(idx.size, n_sub, offset)
        start = 0
        for s, k in enumerate(sizes):
            out[idx[start:start + k]] = s
            start += k
    return SubBatchAssignment(out, n_sub, "half")


def _spread(loads: np.ndarray) -> int:
    return int(loads.max() - loads.min()) if loads.size else 0


def _balance_channel(lens: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Assign the requests of one channel (KV lengths ``lens``, shape (k,)) to groups of the
    given sizes, balancing the summed lengths; returns the group index of each request."""
    n_sub = len(sizes)
    order = sorted(range(lens.size), key=lambda i: (-int(lens[i]), i))
    room = list(sizes)
    load = np.zeros(n_sub, dtype=np.int64)
    grp = np.zeros(lens.size, dtype=np.int64)
    for i in order:
        cands = [s for s in range(n_sub) if room[s] > 0]
        s = min(cands, key=lambda s: (int(load[s]), s))
        grp[i] = s
        load[s] += lens[i]
        room[s] -= 1
    # pairwise swaps between the heaviest and the lightest group while they shrink the gap
    for _ in range(4 * lens.size + 4):
        hi = int(np.argmax(load))
        lo = int(np.argmin(load))
        gap = int(load[hi] - load[lo])
        if gap <= 0:
            break
        best = None
        for i in np.flatnonzero(grp == hi):
            for j in np.flatnonzero(grp == lo):
                d = int(lens[i] - lens[j])
                if 0 < d < gap:
                    score = abs(gap - 2 * d)
                    if best is None or score < best[0]:
                        best = (score, int(i), int(j), d)
        if best is None or best[0] >= gap:
            break
        _, i, j, d = best
        grp[i], grp[j] = lo, hi
        load[hi] -= d
        load[lo] += d
    return grp


def split_balanced_kv(seq_lens, channels, n_sub: int = 2) -> SubBatchAssignment:
    """Balance each channel's KV tokens across sub-batches with the group sizes of ``half``.

    Args:
        seq_lens: shape (n_requests,), KV context tokens per request (the PIM attention work of
            a decode step is proportional to it).
        channels: shape (n_requests,), PIM channel per request, or None (one group).
        n_sub: number of sub-batches (>= 1).

    Returns:
        A :class:`SubBatchAssignment` with the same per-channel and global group sizes as
        :func:`split_half`, and on every channel a KV-token spread (heaviest minus lightest
        group) no larger than ``half``'s.

    Raises:
        MappingError: as :func:`split_half`.
    """
    seq, ch = _check_inputs(seq_lens, channels, n_sub)
    half = split_half(seq, ch, n_sub).sub_batch
    out = half.copy()
    offset = 0
    for c in np.unique(ch):
        idx = np.flatnonzero(ch == c)
        sizes, offset = _group_sizes(idx.size, n_sub, offset)
        grp = _balance_channel(seq[idx], sizes)
        new = np.bincount(grp, weights=seq[idx], minlength=n_sub)
        old = np.bincount(half[idx], weights=seq[idx], minlength=n_sub)
        if _spread(new) <= _spread(old):
            out[idx] = grp
    return SubBatchAssignment(out, n_sub, "balanced_kv")


def split_sub_batches(seq_lens, channels, n_sub: int, policy: str = "half") -> SubBatchAssignment:
    """Dispatch to the partitioner named by ``policy`` (``system.sub_batch_policy``).

    Args: as :func:`split_half`; ``policy`` one of :data:`SUB_BATCH_POLICIES`.

    Raises:
        MappingError: unknown policy (lists the valid ones), or bad inputs.
    """
    if policy == "half":
        return split_half(seq_lens, channels, n_sub)
    if policy == "balanced_kv":
        return split_balanced_kv(seq_lens, channels, n_sub)
    raise MappingError(f"unknown sub-batch policy '{policy}'; valid: "
                       f"{', '.join(SUB_BATCH_POLICIES)}")


def split_with_chunks(seq_lens, channels, q_tokens, n_sub: int,
                      policy: str = "half") -> SubBatchAssignment:
    """Sub-batches of a mixed (chunked-prefill) iteration.

    The decode steps (``q_tokens == 1``) are split by ``policy`` exactly as a decode batch of
    them alone (:func:`split_sub_batches`: their PIM attention is what interleaving overlaps).
    Then each prompt chunk (``q_tokens > 1``; attention on the NPU), largest first (ties: lower
    position), joins whole the sub-batch with the fewest token rows (ties: the lower index):
    a chunk's rows dominate its sub-batch's GEMM time, so they go where the NPU has the least
    work. A chunk is never split across sub-batches (its later rows attend to its earlier ones).

    Args:
        seq_lens: shape (n,), KV context tokens per request (of the decode steps: the PIM work).
        channels: shape (n,), KV channel per request, or None.
        q_tokens: shape (n,), query tokens of each request in the iteration (>= 1).
        n_sub: number of sub-batches (>= 1).
        policy: one of :data:`SUB_BATCH_POLICIES` (for the decode steps).

    Returns:
        A :class:`SubBatchAssignment` labelled with ``policy``.

    Raises:
        MappingError: as :func:`split_half`, or ``q_tokens`` of another length or below 1.
    """
    seq, _ = _check_inputs(seq_lens, channels, n_sub)
    q = np.asarray(q_tokens, dtype=np.int64).reshape(-1)
    if q.shape != seq.shape or (q < 1).any():
        raise MappingError(f"sub-batch split: {q.size} query-token counts (each >= 1) for "
                           f"{seq.size} requests")
    dec = np.flatnonzero(q == 1)
    out = np.zeros(seq.size, dtype=np.int64)
    if dec.size:
        ch = None if channels is None else np.asarray(
            [(-1 if c is None else c) for c in channels], dtype=np.int64)[dec]
        out[dec] = split_sub_batches(seq[dec], ch, n_sub, policy).sub_batch
    rows = np.bincount(out[dec], minlength=n_sub).astype(np.int64)
    for i in sorted(np.flatnonzero(q > 1).tolist(), key=lambda i: (-int(q[i]), i)):
        s = int(np.argmin(rows))
        out[i] = s
        rows[s] += q[i]
    return SubBatchAssignment(out, n_sub, policy)


def query_tokens(batch: Batch, phase: str) -> np.ndarray:
    """Query tokens per request (:meth:`Batch.q_tokens`), int64 ``[n]``.

    Raises:
        UnsupportedError: a request's ``q_tokens`` that ``phase`` cannot run (a decode step of
            more than one token, a prefill that is not a whole prompt): both are ``mixed``.
    """
    for i, r in enumerate(batch):
        want = {"decode": 1, "prefill": r.seq_len}.get(phase)
        if want is not None and r.q_tokens is not None and r.q_tokens != want:
            runs = "one token per request" if phase == "decode" else "whole prompts"
            raise UnsupportedError(
                f"request index {i} (id {r.id}) processes {r.q_tokens} of its {r.seq_len} "
                f"tokens: a {phase} program runs {runs}; compile it with phase 'mixed' "
                "(chunked prefill)")
    return batch.q_tokens(phase).astype(np.int64)


__all__ = ["SubBatchAssignment", "split_half", "split_balanced_kv", "split_sub_batches",
           "split_with_chunks", "SUB_BATCH_POLICIES", "query_tokens"]
