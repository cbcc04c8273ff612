"""Statistics of one timing run (plain data; the core prints nothing).

All cycles are NPU clock cycles (``npu.freq_mhz``) unless a name says otherwise.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

STALL_CAUSES = ("semaphore", "memory", "array", "vector", "setup")
"""Why a stream's next instruction could not issue: waiting on a semaphore (WAIT), on the
memory system (DMA out of outstanding-request slots or back-pressured by the memory), on a free
systolic array (its instruction queue full), on a free vector unit, or on the DMA's per-transfer
setup."""


@dataclass
class StreamStats:
    """One stream: instructions issued, stall cycles by cause, and the cycle it finished.

    ``stall_cycles[cause]`` counts cycles during which the stream's next instruction was ready
    in program order but could not issue for that cause (see :data:`STALL_CAUSES`).
    """

    name: str
    kind: str
    instructions: int = 0
    finish_cycle: int = 0
    stall_cycles: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STALL_CAUSES, 0))


@dataclass
class ArrayStats:
    """One systolic array.

    Attributes:
        tiles: SA_MATMUL instructions executed.
        preloads: SA_LOADW instructions executed.
        macs: multiply-accumulates (sum of m*n*k).
        feed_cycles: cycles its input was streaming rows (sum of max(m, 4)).
        busy_cycles: cycles with at least one tile in flight (union of [start, finish)).
    """

    tiles: int = 0
    preloads: int = 0
    macs: int = 0
    feed_cycles: int = 0
    busy_cycles: int = 0


@dataclass
class VectorStats:
    """One vector unit: instructions, elements processed and busy cycles."""

    ops: int = 0
    elements: int = 0
    busy_cycles: int = 0


@dataclass
class DmaStats:
    """The DMA engine (all DMA streams together).

    Attributes:
        instructions: DMA_LOAD/DMA_STORE executed.
        requests: memory requests issued.
        bytes_read / bytes_written: bytes moved from / to HBM.
        busy_cycles: cycles with at least one request in flight.
    """

    instructions: int = 0
    requests: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    busy_cycles: int = 0


@dataclass
class PimChannelStats:
    """One PIM channel: broadcast commands issued and cycles spent waiting for them."""

    commands: int = 0
    busy_cycles: int = 0


@dataclass
class NpuStats:
    """Result of a timing run of one program on one device.

    Attributes:
        cycles: NPU cycles from start until the last stream finished.
        freq_mhz: NPU clock.
        array_macs_per_cycle: peak MACs per cycle of all arrays (n_arrays x H x W).
        peak_memory_bytes_per_cycle: the memory's peak bandwidth in bytes per NPU cycle
            (0 when unknown).
        streams / arrays / vector_units / dma / pim: per-engine statistics.
    """

    cycles: int = 0
    freq_mhz: float = 1000.0
    array_macs_per_cycle: int = 0
    peak_memory_bytes_per_cycle: float = 0.0
    streams: dict[str, StreamStats] = field(default_factory=dict)
    arrays: list[ArrayStats] = field(default_factory=list)
    vector_units: list[VectorStats] = field(default_factory=list)
    dma: DmaStats = field(default_factory=DmaStats)
    pim: dict[int, PimChannelStats] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Simulated time in seconds (cycles / NPU clock)."""
        return self.cycles / (self.freq_mhz * 1e6)

    @property
    def macs(self) -> int:
        """MACs of all arrays."""
        return sum(a.macs for a in self.arrays)

    @property
    def array_utilisation(self) -> float:
        """MACs done / (peak MACs per cycle x cycles), in [0, 1]."""
        if not self.cycles or not self.array_macs_per_cycle:
            return 0.0
        return self.macs / (self.array_macs_per_cycle * self.cycles)

    @property
    def bytes_moved(self) -> int:
        """DMA bytes read plus written."""
        return self.dma.bytes_read + self.dma.bytes_written

    @property
    def memory_bandwidth_utilisation(self) -> float:
        """DMA bytes / (peak memory bytes per cycle x cycles); 0 when the peak is unknown."""
        if not self.cycles or not self.peak_memory_bytes_per_cycle:
            return 0.0
        return self.bytes_moved / (self.peak_memory_bytes_per_cycle * self.cycles)

    def busy_fractions(self) -> dict[str, float]:
        """Fraction of the run each engine class was busy: ``compute`` (most-fed array's
        feed cycles), ``memory`` (DMA requests in flight), ``vector`` (busiest vector unit),
        ``pim`` (busiest PIM channel)."""
        c = max(self.cycles, 1)
        return {
            "compute": max((a.feed_cycles for a in self.arrays), default=0) / c,
            "memory": self.dma.busy_cycles / c,
            "vector": max((v.busy_cycles for v in self.vector_units), default=0) / c,
            "pim": max((p.busy_cycles for p in self.pim.values()), default=0) / c,
        }

    @property
    def bound(self) -> str:
        """The engine class that limited the run: the one busy for the largest fraction of it
        (``compute``, ``memory``, ``vector`` or ``pim``; ``idle`` for an empty run)."""
        fr = self.busy_fractions()
        best = max(fr, key=lambda k: fr[k])
        return best if fr[best] > 0 else "idle"

    def stall_cycles(self, cause: str) -> int:
        """Stall cycles of one cause summed over all streams."""
        return sum(s.stall_cycles.get(cause, 0) for s in self.streams.values())

    def to_dict(self) -> dict:
        """Plain-data form (JSON friendly), with the derived metrics included."""
        d = asdict(self)
        d["pim"] = {str(k): v for k, v in d["pim"].items()}
        d.update(seconds=self.seconds, macs=self.macs, array_utilisation=self.array_utilisation,
                 bytes_moved=self.bytes_moved,
                 memory_bandwidth_utilisation=self.memory_bandwidth_utilisation,
                 busy_fractions=self.busy_fractions(), bound=self.bound)
        return d


__all__ = ["STALL_CAUSES", "StreamStats", "ArrayStats", "VectorStats", "DmaStats",
           "PimChannelStats", "NpuStats"]
