"""The contract between the engines that issue memory traffic and the memory system.

The NPU's DMA engine (``archsim.npu``) and the PIM channel engines submit requests; the
memory system (``archsim.memory``) schedules the DRAM/PIM commands and reports completions.
The system simulator advances everything by events:

1. ``t = min(next engine event, memory.next_event_cycle())``
2. ``memory.advance_to(t)`` commits every DRAM command issued at a cycle <= ``t`` and returns
   the requests that completed at or before ``t``;
3. engines react to completions and may ``submit`` new requests with ``arrival_cycle >= t``.

All cycles here are memory-controller clock cycles (tCK of the memory config); callers on
another clock convert at the boundary (``archsim.config.MachineConfig.npu_to_mem_cycles``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol


@dataclass(slots=True)
class MemRequest:
    """One read or write of ``size_bytes`` starting at byte address ``addr``.

    Requests larger than one burst (``memory.org.burst_bytes``) are split by the memory system;
    the request completes when its last burst's data has crossed the data bus
    (reads: last data beat returned; writes: last data beat written, i.e. CWL + burst after WR).

    Attributes:
        req_id: caller-chosen id, unique among outstanding requests.
        addr: byte address in the device's flat HBM address space.
        size_bytes: bytes to move (> 0).
        is_write: True for a write.
        arrival_cycle: memory-clock cycle at which the request enters the controller queue.
        source: who issued it ("dma", "trace", ...), kept for statistics.
    """

    req_id: int
    addr: int
    size_bytes: int
    is_write: bool
    arrival_cycle: int
    source: str = "dma"


class PimOpKind(str, Enum):
    """PIM commands of DESIGN §3 (Newton-style, plus the NeuPIMs additions)."""

    HEADER = "PIM_HEADER"
    GWRITE = "GWRITE"
    G_ACT = "G_ACT"
    COMP = "COMP"
    READRES = "READRES"
    GEMV = "PIM_GEMV"
    PRECHARGE = "PIM_PRECHARGE"


@dataclass(slots=True)
class PimRequest:
    """One broadcast PIM command to every bank of ``channel`` (lockstep).

    Attributes:
        req_id: caller-chosen id, unique among outstanding requests.
        channel: target channel index.
        kind: the PIM command.
        row: DRAM row for G_ACT (ignored otherwise).
        n_comps: number of COMP column steps for COMP / PIM_GEMV; for PIM_HEADER the number of
            row-GEMVs the header announces.
        bank_group_mask: bank groups a G_ACT activates (bit i = bank group i; 0 means all).
        arrival_cycle: memory-clock cycle at which the command enters the PIM queue.
    """

    req_id: int
    channel: int
    kind: PimOpKind
    arrival_cycle: int
    row: int = 0
    n_comps: int = 0
    bank_group_mask: int = 0
    extra: dict = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class Completion:
    """A finished request: its id and the memory-clock cycle at which it completed."""

    req_id: int
    cycle: int


class MemoryPort(Protocol):
    """What the system simulator and engines need from a memory system."""

    def submit(self, req: MemRequest) -> None:
        """Queue a read/write; raises ``archsim.errors.SimulationError`` on a bad address."""

    def submit_pim(self, req: PimRequest) -> None:
        """Queue a broadcast PIM command."""

    def can_accept(self, addr: int, is_write: bool = False) -> bool:
        """False when the queue that ``addr`` maps to is full for a request of that direction
        (back-pressure)."""

    def can_accept_pim(self, channel: int) -> bool:
        """False while ``channel`` has ``pim.command_queue_depth`` PIM requests in flight."""

    def next_event_cycle(self) -> int | None:
        """Earliest cycle at which a queued request may complete or a command may issue,
        assuming no new arrivals; None when idle."""

    def advance_to(self, cycle: int) -> list[Completion]:
        """Simulate up to and including ``cycle``; return the requests completed by then."""
