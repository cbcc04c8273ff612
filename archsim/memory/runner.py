"""Batch runs of a known request list (trace replay, self-tests), exact or fast path.

``exact`` is the reference controller (:class:`archsim.memory.system.MemorySystem`), ``fast``
the compiled one (:class:`archsim.memory.kernel.KernelMemory`); both implement the policy of
:mod:`archsim.memory.controller` and give identical command logs
(``tests/test_memory_fast.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from archsim.errors import SimulationError
from archsim.memory.system import MemorySystem
from archsim.memport import MemRequest

ENGINES = ("fast", "exact")


@dataclass
class RunResult:
    """Outcome of a batch run.

    Attributes:
        stats: see :func:`archsim.memory.system.summarize` (units in every key), plus
            ``system``: the whole device's bandwidth (:func:`system_bandwidth`).
        latencies: per request, completion − arrival cycles (tCK), shape (N,), request order.
        engine: ``fast`` or ``exact``.
        _log: the command log as 8-tuples ``(cycle, channel, rank, bankgroup, bank, command,
            row, column)``, or a callable building it (the fast path converts lazily).
    """

    stats: dict
    latencies: np.ndarray
    engine: str
    _log: object = field(default=None, repr=False)

    def log(self) -> list[tuple]:
        """The command log, ordered by (cycle, channel)."""
        if callable(self._log):
            self._log = self._log()
        return self._log


def run_requests(cfg, addrs, sizes, is_write, arrivals, engine: str = "fast") -> RunResult:
    """Serve N requests to completion.

    Args:
        cfg: :class:`archsim.config.MachineConfig`.
        addrs, sizes, is_write, arrivals: arrays of shape (N,): byte address, size in bytes
            (> 0), write flag, arrival cycle (tCK, non-decreasing is expected: requests enter
            the channel FIFOs in array order).
        engine: ``fast`` (the compiled controller) or ``exact`` (the reference).

    Raises SimulationError for an address beyond capacity, a non-positive size or an unknown
    engine.
    """
    if engine not in ENGINES:
        raise SimulationError(f"unknown engine '{engine}'; choose one of {', '.join(ENGINES)}")
    addrs = np.asarray(addrs, np.int64)
    sizes = np.asarray(sizes, np.int64)
    is_write = np.asarray(is_write, np.bool_)
    arrivals = np.asarray(arrivals, np.int64)
    if sizes.size and sizes.min() <= 0:
        i = int(np.argmin(sizes))
        raise SimulationError(f"request {i}: size_bytes must be > 0, got {int(sizes[i])}")
    if engine == "exact":
        res = _run_exact(cfg, addrs, sizes, is_write, arrivals)
    else:
        res = _run_fast(cfg, addrs, sizes, is_write, arrivals)
    res.stats["system"] = system_bandwidth(cfg, res.stats, arrivals)
    return res


def system_bandwidth(cfg, stats: dict, arrivals) -> dict:
    """Whole-device bandwidth of a run: every byte moved over the device's busy span.

    Returns ``{"bytes", "span_cycles" (first arrival to the last channel's last data beat,
    tCK), "bandwidth_bytes_per_cycle", "bandwidth_gb_per_s", "peak_bytes_per_cycle" (external
    peak of all channels), "peak_fraction"}``; a run without requests has zeros.
    """
    arrivals = np.asarray(arrivals, np.int64)
    first = int(arrivals.min()) if arrivals.size else 0
    span = max(0, int(stats["sim_cycles"]) - first)
    moved = int(stats["bytes_total"])
    bw = moved / span if span else 0.0
    peak = cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel * cfg.memory.org.channels
    return {"bytes": moved, "span_cycles": span, "bandwidth_bytes_per_cycle": bw,
            "bandwidth_gb_per_s": bw / cfg.memory.timing.tCK_ns,
            "peak_bytes_per_cycle": peak, "peak_fraction": bw / peak if peak else 0.0}


def _run_exact(cfg, addrs, sizes, is_write, arrivals) -> RunResult:
    mem = MemorySystem(cfg)
    for i in range(addrs.shape[0]):
        mem.submit(MemRequest(i, int(addrs[i]), int(sizes[i]), bool(is_write[i]),
                              int(arrivals[i]), "trace"))
    comps = mem.run_to_idle()
    lat = np.zeros(addrs.shape[0], np.int64)
    for c in comps:
        lat[c.req_id] = c.cycle - arrivals[c.req_id]
    return RunResult(mem.stats(), lat, "exact", [tuple(r) for r in mem.command_log()])


def _run_fast(cfg, addrs, sizes, is_write, arrivals) -> RunResult:
    from archsim.memory.kernel import KernelMemory

    mem = KernelMemory(cfg, keep_log=True)
    mem.submit_arrays(addrs, sizes, is_write, arrivals)
    done = mem.run_to_idle(addrs.shape[0])
    lat = done - arrivals
    return RunResult(mem.stats(), lat, "fast", lambda: [tuple(r) for r in mem.command_log()])


__all__ = ["RunResult", "run_requests", "system_bandwidth", "ENGINES"]
