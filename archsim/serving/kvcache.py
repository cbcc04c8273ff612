"""The KV-cache manager of a serving run: blocks, pools, paged or reserved allocation, the
preemption victim and the cost of a swap.

Model (vLLM's block manager: Kwon et al., "Efficient Memory Management for Large Language
Model Serving with PagedAttention", SOSP 2023, §4):

* **Blocks.** The KV capacity of one device (:func:`archsim.serving.systems.kv_budget`,
  tokens) is cut into blocks of ``block_tokens`` tokens (``capacity // block_tokens`` blocks;
  the remainder is unused). A request whose cache holds ``L`` tokens holds
  ``ceil(min(L, W) / block_tokens)`` blocks (``W``: the model's sliding window, a rolling
  buffer; without one, ``L``).
* **Pools.** On a PIM system a request's KV cache lives in one PIM channel (the PIM layout of
  :mod:`mapping.memplan`: keys one token per bank across the channel's row groups, values
  beside them; the attention GEMVs of the request run in that channel), so the blocks are
  pooled per channel, ``blocks // channels`` each, and a request takes all of its blocks from
  its channel's pool. Other systems (NPU-only: one linear KV region; the GPU) have one pool.
* **paged** (vLLM): a request is admitted when the blocks of its first prefill are free
  (its prompt; prompt + generated tokens when it is recomputed after a preemption) and takes
  another block each time its context crosses a block boundary. **reserve**: admission takes
  the blocks of its whole final context (prompt + output − 1 tokens: the last generated token
  is never fed back, so its KV is never written); nothing grows, nothing is
  preempted, but blocks are held for tokens not yet generated and the output length must be
  known in advance.
* **Preemption** (paged only): when a running request needs a block and its pool has none,
  the latest-admitted running request of that pool is preempted (:func:`preemption_victim`:
  vLLM serves its running queue first-come-first-served and preempts from the tail), which
  may be the requester itself. ``recompute`` frees the victim's blocks; it waits at the head
  of the queue and prefills its prompt and generated tokens again. ``swap`` copies its blocks
  to host memory and frees them (:func:`swap_seconds`); it resumes, before any new request is
  admitted, once blocks are free again, after the copy back. Host memory is not bounded.

Units: tokens, blocks, bytes of one device (every tensor-parallel peer holds its share of each
token and swaps it over its own link), seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from archsim.config import ServingConfig
from archsim.errors import ArchsimError

_DEFAULT = ServingConfig()


@dataclass(frozen=True)
class KvPolicy:
    """How a serving run allocates its KV cache (the keys of ``serving`` in the machine
    config, :class:`archsim.config.ServingConfig`, whose defaults these are).

    Attributes:
        allocation: ``paged`` or ``reserve`` (module docstring).
        block_tokens: tokens per block (>= 1).
        preemption: ``recompute`` or ``swap`` (paged only).
        swap_bandwidth_bytes_per_s: host link of one device, per direction (B/s).
        kv_bytes_per_token: KV bytes of one token on one device (what a swap copies per token);
            0 is refused with ``swap``.

    Raises:
        ArchsimError: a value outside its range (names the key).
    """

    allocation: str = _DEFAULT.kv_allocation
    block_tokens: int = _DEFAULT.kv_block_tokens
    preemption: str = _DEFAULT.preemption
    swap_bandwidth_bytes_per_s: float = _DEFAULT.swap_bandwidth_bytes_per_s
    kv_bytes_per_token: int = 0

    def __post_init__(self) -> None:
        if self.allocation not in ("paged", "reserve"):
            raise ArchsimError(f"serving.kv_allocation {self.allocation!r} not one of "
                               "['paged', 'reserve']")
        if self.preemption not in ("recompute", "swap"):
            raise ArchsimError(f"serving.preemption {self.preemption!r} not one of "
                               "['recompute', 'swap']")
        if isinstance(self.block_tokens, bool) or not 1 <= int(self.block_tokens) <= 65536:
            raise ArchsimError(f"serving.kv_block_tokens {self.block_tokens!r}: must be an "
                               "integer 1..65536")
        if not self.swap_bandwidth_bytes_per_s > 0:
            raise ArchsimError(f"serving.swap_bandwidth_bytes_per_s "
                               f"{self.swap_bandwidth_bytes_per_s!r}: must be > 0")
        if self.swaps and self.kv_bytes_per_token <= 0:
            raise ArchsimError("preemption swap needs the KV bytes per token of a device "
                               "(kv_bytes_per_token)")

    @classmethod
    def from_config(cls, serving: ServingConfig, kv_bytes_per_token: int) -> "KvPolicy":
        """The policy of a machine's ``serving`` section; ``kv_bytes_per_token`` from
        :class:`archsim.serving.systems.KvBudget`."""
        return cls(serving.kv_allocation, serving.kv_block_tokens, serving.preemption,
                   serving.swap_bandwidth_bytes_per_s, int(kv_bytes_per_token))

    @property
    def paged(self) -> bool:
        """True for paged allocation (blocks as the context grows)."""
        return self.allocation == "paged"

    @property
    def swaps(self) -> bool:
        """True when a preempted request is swapped to host memory (paged only)."""
        return self.paged and self.preemption == "swap"

    def describe(self) -> str:
        """One line: allocation, block size, preemption."""
        if not self.paged:
            return (f"KV reserved for the whole final context at admission "
                    f"({self.block_tokens}-token blocks), no preemption")
        pre = (f"preemption by swap to host memory at "
               f"{self.swap_bandwidth_bytes_per_s / 1e9:g} GB/s per direction"
               if self.swaps else "preemption by recompute")
        return f"paged KV cache ({self.block_tokens}-token blocks), {pre}"


def preemption_victim(candidates: np.ndarray, admitted_seq: np.ndarray) -> int:
    """The request to preempt among ``candidates`` (int64 request indices: the running
    requests of the pool that lacks a block): the latest admitted, i.e. the largest
    ``admitted_seq`` (int64 ``[n]``: admission order, re-admission counts anew), vLLM's order.

    Raises:
        ArchsimError: no candidate (a simulator bug: the requester itself is always one).
    """
    if candidates.size == 0:
        raise ArchsimError("simulator bug: a KV pool is full but holds no running request")
    return int(candidates[np.argmax(admitted_seq[candidates])])


class KvCache:
    """The blocks of one system's KV cache, pooled per PIM channel or per device.

    Args:
        policy: :class:`KvPolicy`.
        capacity_tokens: KV tokens one device holds (:func:`archsim.serving.kv_budget`).
        n_requests: requests of the run (axis 0 of the per-request arrays).
        n_pools: 1 (one pool) or the PIM channels (a pool per channel).
        window: the model's sliding window (None: full attention).

    Attributes:
        blocks_per_pool: blocks of each pool; free: int64 ``[n_pools]`` free blocks.
        held: int64 ``[n]`` blocks each request holds; pool: int64 ``[n]`` its pool (-1: none).
        tokens: int64 ``[n]`` tokens its blocks were allocated for (the balance measure of
            the channel placement: reserved tokens, or the context so far when paged).
        peak_blocks: the most blocks in use at once (all pools).

    Raises:
        ArchsimError: a pool of zero blocks (names the capacity and the block size).
    """

    def __init__(self, policy: KvPolicy, capacity_tokens: int, n_requests: int,
                 n_pools: int = 1, window: int | None = None) -> None:
        self.policy, self.window = policy, window
        self.block_tokens = int(policy.block_tokens)
        self.n_pools = max(int(n_pools), 1)
        self.capacity_tokens = int(capacity_tokens)
        self.blocks_per_pool = self.capacity_tokens // self.block_tokens // self.n_pools
        if self.blocks_per_pool < 1:
            where = "" if self.n_pools == 1 else f" over {self.n_pools} channel pools"
            raise ArchsimError(
                f"memory capacity: a KV cache of {self.capacity_tokens:,} tokens{where} holds "
                f"no block of serving.kv_block_tokens = {self.block_tokens} tokens")
        self.free = np.full(self.n_pools, self.blocks_per_pool, np.int64)
        self.held = np.zeros(n_requests, np.int64)
        self.pool = np.full(n_requests, -1, np.int64)
        self.tokens = np.zeros(n_requests, np.int64)
        self.peak_blocks = 0

    # ---------------------------------------------------------------- sizes
    @property
    def pool_tokens(self) -> int:
        """Tokens one pool holds (``blocks_per_pool × block_tokens``)."""
        return self.blocks_per_pool * self.block_tokens

    @property
    def used_blocks(self) -> int:
        """Blocks in use (all pools)."""
        return int(self.n_pools * self.blocks_per_pool - self.free.sum())

    def blocks_for(self, tokens: Any) -> Any:
        """Blocks that hold ``tokens`` KV tokens (int or int64 array): ``ceil(min(tokens, W) /
        block_tokens)``."""
        t = np.asarray(tokens, dtype=np.int64)
        if self.window is not None:
            t = np.minimum(t, int(self.window))
        b = -(-t // self.block_tokens)
        return int(b) if b.ndim == 0 else b

    def admission_tokens(self, first_tokens: Any, final_tokens: Any) -> Any:
        """Tokens allocated at admission: the whole final context (``reserve``) or the first
        prefill's (``paged``)."""
        return first_tokens if self.policy.paged else final_tokens

    def pool_loads(self) -> np.ndarray:
        """float64 ``[n_pools]``: Σ ``tokens`` of the requests in each pool (the load a
        ``min_load`` placement balances)."""
        on = self.pool >= 0
        return np.bincount(self.pool[on], weights=self.tokens[on],
                           minlength=self.n_pools).astype(np.float64)

    # ---------------------------------------------------------------- changes
    def allocate(self, i: int, pool: int, tokens: int) -> None:
        """Give request ``i`` the blocks of ``tokens`` tokens from ``pool``.

        Raises:
            ArchsimError: the pool lacks them (a simulator bug: the scheduler checks first).
        """
        b = self.blocks_for(tokens)
        if self.held[i] or self.free[pool] < b:
            raise ArchsimError(f"simulator bug: request {i} allocates {b} KV blocks in pool "
                               f"{pool} ({self.free[pool]} free, {self.held[i]} held)")
        self.free[pool] -= b
        self.held[i], self.pool[i], self.tokens[i] = b, pool, int(tokens)
        self.peak_blocks = max(self.peak_blocks, self.used_blocks)

    def missing(self, i: int, tokens: int) -> int:
        """Blocks request ``i`` lacks to hold ``tokens`` tokens (0 when it holds enough)."""
        return max(0, self.blocks_for(tokens) - int(self.held[i]))

    def grow(self, i: int, tokens: int) -> bool:
        """Extend request ``i`` to ``tokens`` tokens; False (nothing changed) when its pool
        lacks the blocks."""
        b = self.missing(i, tokens)
        p = int(self.pool[i])
        if b > self.free[p]:
            return False
        self.free[p] -= b
        self.held[i] += b
        self.tokens[i] = max(int(self.tokens[i]), int(tokens))
        self.peak_blocks = max(self.peak_blocks, self.used_blocks)
        return True

    def release(self, i: int) -> int:
        """Free every block of request ``i``; returns how many."""
        b = int(self.held[i])
        if b:
            self.free[self.pool[i]] += b
        self.held[i], self.pool[i], self.tokens[i] = 0, -1, 0
        return b

    def bytes_of(self, blocks: int) -> int:
        """Bytes of ``blocks`` blocks on one device (what a swap copies)."""
        return int(blocks) * self.block_tokens * int(self.policy.kv_bytes_per_token)

    def swap_seconds(self, blocks: int) -> float:
        """Time to copy ``blocks`` blocks over the host link (one direction, one device; the
        tensor-parallel peers copy their shares at the same time over their own links):
        ``bytes_of(blocks) / swap_bandwidth_bytes_per_s``."""
        return self.bytes_of(blocks) / float(self.policy.swap_bandwidth_bytes_per_s)


__all__ = ["KvPolicy", "KvCache", "preemption_victim"]
