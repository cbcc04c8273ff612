"""The memory system: all channels behind the :class:`archsim.memport.MemoryPort` contract.

Channels share nothing, so each :class:`ChannelController` keeps its own clock; this class
splits requests into bursts, routes them by :class:`AddressMapping`, and gathers completions,
command logs and statistics. All cycles are memory-clock cycles (tCK).
"""
from __future__ import annotations

import numpy as np

from archsim.errors import SimulationError
from archsim.memory.addrmap import AddressMapping
from archsim.memory.cmdlog import CommandRecord
from archsim.memory.controller import _UNKNOWN, INF, Burst, ChannelController, ReqTracker
from archsim.memory.energy import channel_energy_pj
from archsim.memory.spec import command_names, compile_table
from archsim.memport import Completion, MemRequest, PimRequest


class LatencyCounts:
    """Latencies of completed requests (cycles, arrival to completion) as counts per value:
    ``hist[l]`` requests of latency ``l`` for ``0 <= l < len(hist)``, and the rarer longer
    latencies listed in ``spill`` (any order). What the compiled memory kernel keeps instead of
    one entry per request (:data:`archsim.memory.kernel.layout.LAT_BINS`); a list of latencies
    becomes one with :meth:`of`. The statistics of :func:`summarize` come from here for every
    engine, so they agree exactly.

    Args:
        hist: int64 ``[bins]``; spill: int64 ``[k]``, every value ``>= bins``.
    """

    def __init__(self, hist: np.ndarray, spill: np.ndarray) -> None:
        self.hist = np.asarray(hist, dtype=np.int64)
        self.spill = np.sort(np.asarray(spill, dtype=np.int64))
        self._cum = np.cumsum(self.hist)
        self.n = int(self._cum[-1] if self._cum.size else 0) + int(self.spill.size)

    @classmethod
    def of(cls, latencies, bins: int = 1 << 14) -> "LatencyCounts":
        """The counts of a list or array of latencies (cycles, ``>= 0``); ``bins`` only
        splits histogram from list (any value gives the same statistics). Raises ValueError
        for a negative or fractional latency."""
        raw = np.asarray(latencies).reshape(-1)
        if raw.size and (not np.array_equal(raw, np.floor(raw)) or raw.min() < 0):
            raise ValueError("latencies are whole numbers of cycles >= 0")
        lat = raw.astype(np.int64)
        short = lat[lat < bins]
        return cls(np.bincount(short, minlength=bins)[:bins], lat[lat >= bins])

    @classmethod
    def from_kernel(cls, X: np.ndarray, n_spill: int) -> "LatencyCounts":
        """The counts of a kernel latency buffer ``X`` (``MLAT`` / ``PLAT``: histogram of
        ``LAT_BINS`` bins, then ``n_spill`` longer latencies)."""
        from archsim.memory.kernel.layout import LAT_BINS
        return cls(X[:LAT_BINS].copy(), X[LAT_BINS:LAT_BINS + n_spill].copy())

    def mean(self) -> float:
        """Mean latency (cycles; 0.0 without requests): the exact integer sum over the count."""
        if not self.n:
            return 0.0
        total = int(self.hist @ np.arange(self.hist.size, dtype=np.int64)) + int(self.spill.sum())
        return total / self.n

    def _kth(self, k: int) -> int:
        """The ``k``-th smallest latency (0-based)."""
        short = int(self._cum[-1]) if self._cum.size else 0
        if k < short:
            return int(np.searchsorted(self._cum, k, side="right"))
        return int(self.spill[k - short])

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (cycles; 0.0 without requests), numpy's default ``linear``
        method (``np.percentile`` of the list of latencies, the same float). Raises ValueError
        for ``q`` outside 0..100."""
        if not 0 <= q <= 100:
            raise ValueError(f"percentile q must be in 0..100, got {q}")
        if not self.n:
            return 0.0
        v = (self.n - 1) * (q / 100.0)
        lo = int(np.floor(v))
        hi = min(lo + 1, self.n - 1)
        g = v - lo
        a, b = float(self._kth(lo)), float(self._kth(hi))
        d = b - a
        return b - d * (1 - g) if g >= 0.5 else a + d * g


def _completion_key(x: Completion) -> tuple[int, int]:
    return (x.cycle, x.req_id)


class MemorySystem:
    """HBM2 (+ PIM) memory of one device, exact event-driven path.

    Args:
        cfg: :class:`archsim.config.MachineConfig` (``memory`` and ``pim`` sections used).
        engine: ``"exact"`` (default) or ``"exact-py"``. Both are the same exact controller
            and give identical command logs, completions and statistics
            (``tests/test_memport_speed_identity.py``); ``"exact"`` memoises each channel's
            next scheduling decision between state changes and skips idle channels, while
            ``"exact-py"`` is the unoptimised reference path that re-decides at every query.

    Raises:
        SimulationError: an unknown ``engine``.

    Implements :class:`archsim.memport.MemoryPort`: ``submit``, ``submit_pim``,
    ``can_accept``, ``next_event_cycle``, ``advance_to``; plus :meth:`run_to_idle`,
    :meth:`command_log` and :meth:`stats` for stand-alone runs.
    """

    ENGINES = ("exact", "exact-py")

    def __init__(self, cfg, engine: str = "exact") -> None:
        if engine not in self.ENGINES:
            raise SimulationError(f"unknown memory engine '{engine}'; known: "
                                  f"{', '.join(self.ENGINES)}")
        self.engine = engine
        self.cfg = cfg
        self.map = AddressMapping(cfg.memory)
        self.table = compile_table(cfg)
        memo = engine == "exact"
        self._fast = memo
        self.channels = [ChannelController(cfg, c, self.table, memo=memo)
                         for c in range(cfg.memory.org.channels)]
        self.burst_bytes = cfg.memory.org.burst_bytes
        self._seq = 0
        self._trackers: dict[int, ReqTracker] = {}
        self._pim_arrival: dict[int, int] = {}
        self.latencies: list[int] = []          # completed memory requests, cycles
        self.pim_latencies: list[int] = []
        self._now = -1
        G, B = cfg.memory.org.bank_groups, cfg.memory.org.banks_per_group
        self._GB, self._B = G * B, B

    # ---------------------------------------------------------------- MemoryPort
    def submit(self, req: MemRequest) -> None:
        """Queue a read/write of ``req.size_bytes`` at ``req.addr`` (split into bursts).

        Raises SimulationError for a non-positive size, a duplicate outstanding id or an address
        range beyond the capacity."""
        if req.size_bytes <= 0:
            raise SimulationError(f"request {req.req_id}: size_bytes must be > 0, got "
                                  f"{req.size_bytes}")
        if req.req_id in self._trackers:
            raise SimulationError(f"request id {req.req_id} is already outstanding")
        last = req.addr + req.size_bytes - 1
        self.map._check(req.addr)
        self.map._check(last)
        bb = self.burst_bytes
        first_b, last_b = req.addr // bb, last // bb
        tr = ReqTracker(req.req_id, req.arrival_cycle, last_b - first_b + 1, req.is_write,
                        req.size_bytes)
        self._trackers[req.req_id] = tr
        for k in range(first_b, last_b + 1):
            ch, ra, bg, ba, row, col = self.map.decode(k * bb)
            chan = self.channels[ch]
            self._seq += 1
            chan.push_burst(Burst(self._seq, tr, (ra * self._GB + bg * self._B + ba), ra, bg,
                                  ba, row, col, req.is_write,
                                  max(req.arrival_cycle, chan.now + 1)))

    def submit_many(self, addrs, is_write: bool, arrivals, ids, size_bytes: int | None = None,
                    check: bool = True) -> int:
        """Queue many requests of one direction in order, as repeated :meth:`submit` calls
        (each preceded by :meth:`can_accept` when ``check``) would; identical results.

        Args:
            addrs: int array (N,) of byte addresses.
            is_write: direction of every request.
            arrivals: int array (N,) of arrival cycles (tCK), or one int for all.
            ids: int array (N,) of request ids (unique among outstanding requests).
            size_bytes: bytes per request (> 0); default one burst
                (``memory.org.burst_bytes``).
            check: stop at the first request whose queue is full (``can_accept`` False).

        Returns:
            The number of requests queued (a prefix of the arrays).

        Raises:
            SimulationError: an address beyond the capacity (raised before anything is
                queued), a non-positive size or a duplicate outstanding id.
        """
        bb = self.burst_bytes
        size = bb if size_bytes is None else int(size_bytes)
        a = np.asarray(addrs, dtype=np.int64)
        n = int(a.shape[0])
        if n == 0:
            return 0
        arr = np.broadcast_to(np.asarray(arrivals, dtype=np.int64), (n,))
        rid = np.asarray(ids, dtype=np.int64)
        if size != bb or (a % bb).any():
            # requests spanning several bursts: the general per-request path
            submit, accept = self.submit, self.can_accept
            al, rl, il = a.tolist(), arr.tolist(), rid.tolist()
            for i in range(n):
                if check and not accept(al[i], is_write):
                    return i
                submit(MemRequest(il[i], al[i], size, is_write, rl[i]))
            return n
        f = self.map.decode_array(a)
        chl = f[:, 0].tolist()
        bankl = (f[:, 1] * self._GB + f[:, 2] * self._B + f[:, 3]).tolist()
        ral, bgl, bal, rol, col = (f[:, j].tolist() for j in range(1, 6))
        arrl, idl = arr.tolist(), rid.tolist()
        trackers, chans = self._trackers, self.channels
        seq = self._seq
        for i in range(n):
            chan = chans[chl[i]]
            b = bankl[i]
            if check and not chan.room_for(b, is_write):
                self._seq = seq
                return i
            r = idl[i]
            if r in trackers:
                self._seq = seq
                raise SimulationError(f"request id {r} is already outstanding")
            a_i = arrl[i]
            tr = ReqTracker(r, a_i, 1, is_write, size)
            trackers[r] = tr
            seq += 1
            t = chan.now + 1
            chan.push_burst(Burst(seq, tr, b, ral[i], bgl[i], bal[i], rol[i], col[i], is_write,
                                  a_i if a_i > t else t))
        self._seq = seq
        return n

    def can_accept_pim(self, channel: int) -> bool:
        """False while ``channel`` has ``pim.command_queue_depth`` PIM requests in flight
        (submitted and not yet completed); True for a channel out of range (submit_pim
        raises)."""
        if not 0 <= channel < len(self.channels):
            return True
        return self.channels[channel].pim_room()

    def submit_pim(self, req: PimRequest) -> None:
        """Queue a broadcast PIM command for ``req.channel``.

        Raises SimulationError for a channel out of range or a malformed request."""
        if not 0 <= req.channel < len(self.channels):
            raise SimulationError(f"PIM request {req.req_id}: channel {req.channel} out of "
                                  f"range 0..{len(self.channels) - 1}")
        self.channels[req.channel].push_pim(req)
        self._pim_arrival[req.req_id] = req.arrival_cycle

    def can_accept(self, addr: int, is_write: bool = False) -> bool:
        """False when the bank ``addr`` maps to already has ``queue_size_per_bank`` bursts
        waiting, or its channel ``command_queue_size`` (drain write policy: that many reads,
        or ``write_queue_size`` writes; back-pressure)."""
        ch, ra, bg, ba, _, _ = self.map.decode(addr)
        return self.channels[ch].room_for(ra * self._GB + bg * self._B + ba, is_write)

    def next_event_cycle(self) -> int | None:
        """Earliest cycle at which a command may issue or a request complete; None if idle."""
        if self._fast:
            return self._next_event_fast()
        best = None
        for c in self.channels:
            if c.has_work() or c.completions:
                e = c.next_event()
                if e is not None and (best is None or e < best):
                    best = e
        return best

    def _next_event_fast(self) -> int | None:
        """next_event_cycle of the exact engine: a channel's memoised decision is read in
        place (same value as ChannelController.next_event)."""
        best = INF
        for c in self.channels:
            comp = c.completions
            nxt = comp[0][0] if comp else INF
            if c.staging or c.nq or c.pim_q:
                d = c._dec
                if d is _UNKNOWN:
                    d = c._decide(c.now)
                    c._dec = d
                if d is not None and d[0] < nxt:
                    nxt = d[0]
            elif not comp:
                continue
            if nxt < INF:
                if nxt <= c.now:
                    nxt = c.now + 1
                if nxt < best:
                    best = nxt
        return None if best >= INF else best

    def _advance_fast(self, cycle: int) -> list[Completion]:
        """advance_to of the exact engine: channels whose memoised decision lies after
        ``cycle`` and with no completion due are only moved to ``cycle`` (what
        ChannelController.advance_to would do); completions sorted by (cycle, req_id)."""
        pairs: list = []
        for c in self.channels:
            if cycle <= c.now:
                comp = c.completions
                if comp and comp[0][0] <= cycle:
                    pairs.extend(self._completions(c._pop_done(cycle)))
                continue
            d = c._dec
            comp = c.completions
            if d is not _UNKNOWN and (d is None or d[0] > cycle) and not (
                    comp and comp[0][0] <= cycle):
                c.now = cycle
                if c.t_min <= cycle:
                    c.t_min = cycle + 1
                continue
            done = c.advance_to(cycle)
            if done:
                pairs.extend(self._completions(done))   # latencies in channel order, as before
        self._now = max(self._now, cycle)
        if len(pairs) > 1:
            pairs.sort(key=_completion_key)
        return pairs

    def advance_to(self, cycle: int) -> list[Completion]:
        """Simulate every channel up to and including ``cycle``; return completed requests."""
        if self._fast:
            return self._advance_fast(cycle)
        out: list[Completion] = []
        for c in self.channels:
            if c.has_work() or c.completions or c.now < cycle:
                out.extend(self._completions(c.advance_to(cycle)))
        self._now = max(self._now, cycle)
        out.sort(key=lambda x: (x.cycle, x.req_id))
        return out

    # ---------------------------------------------------------------- stand-alone runs
    def run_to_idle(self) -> list[Completion]:
        """Serve everything queued (channels independently), then bring every channel to the
        cycle the busiest one ended at, so that idle channels refresh (and draw background
        power) over the same span as in a device that ran; return all completions."""
        out: list[Completion] = []
        for c in self.channels:
            c.run_to_idle()
        end = max((c.now for c in self.channels), default=-1)
        for c in self.channels:
            if c.now < end:
                out.extend(self._completions(c.advance_to(end)))
            out.extend(self._completions(c._pop_done(INF)))
        out.sort(key=lambda x: (x.cycle, x.req_id))
        return out

    def _completions(self, pairs) -> list[Completion]:
        res = []
        for cyc, rid in pairs:
            tr = self._trackers.pop(rid, None)
            if tr is not None:
                self.latencies.append(cyc - tr.arrival)
            else:
                arr = self._pim_arrival.pop(rid, None)
                if arr is not None:
                    self.pim_latencies.append(cyc - arr)
            res.append(Completion(rid, cyc))
        return res

    def command_log(self) -> list[CommandRecord]:
        """Every issued command of every channel, ordered by (cycle, channel)."""
        recs = [CommandRecord(*r) for c in self.channels for r in c.log]
        recs.sort(key=lambda r: (r.cycle, r.channel))
        return recs

    def stats(self) -> dict:
        """Statistics of everything simulated so far (see :func:`summarize`)."""
        return summarize(self.cfg, [_channel_view(c) for c in self.channels],
                         LatencyCounts.of(self.latencies), LatencyCounts.of(self.pim_latencies))


def _channel_view(c: ChannelController) -> dict:
    """Raw per-channel counters used by :func:`summarize`."""
    counts = {c.names[i]: n for i, n in enumerate(c.counts) if n}
    counts.update(pim_act_banks=c.pim_act_banks, pim_pre_banks=c.pim_pre_banks,
                  comp_bank_steps=c.comp_bank_steps)
    first = c.first_cycle if c.first_cycle < INF else 0
    end = max(c.last_data_cycle, c.now + 1 if c.log else 0)
    return {"channel": c.channel, "counts": counts, "bytes_read": c.bytes_read,
            "bytes_written": c.bytes_written, "first_cycle": first, "end_cycle": end,
            "active_cycles": c.finish_energy_window(end)}


def summarize(cfg, channels: list[dict], latencies: LatencyCounts,
              pim_latencies: LatencyCounts | None = None) -> dict:
    """Statistics with units in every key.

    Per channel (``channels[i]``): ``bytes_read``, ``bytes_written``, ``busy_span_cycles``
    (from its first arrival to its last data beat), ``bandwidth_bytes_per_cycle`` (bytes moved
    over that span, tCK), ``bandwidth_gb_per_s``, ``peak_fraction`` (of
    ``peak_bandwidth_bytes_per_cycle_per_channel``), ``row_hit_rate`` (fraction of column
    accesses that needed no ACT: 1 − ACT/(RD+WR+RDA+WRA)), ``commands`` and ``energy_pj``.
    Device-wide: totals, request latency ``avg``/``p99`` in cycles (arrival to completion,
    from ``latencies``; ``pim_latencies`` gives the count of PIM requests), and ``sim_cycles``
    (the largest channel end cycle).
    """
    peak = cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel
    names = command_names(cfg)
    tck = cfg.memory.timing.tCK_ns
    chans = []
    tot_counts: dict[str, int] = {}
    tot_energy: dict[str, float] = {}
    for v in channels:
        span = max(0, v["end_cycle"] - v["first_cycle"])
        moved = v["bytes_read"] + v["bytes_written"]
        counts = v["counts"]
        col = sum(counts.get(c, 0) for c in ("RD", "WR", "RDA", "WRA"))
        energy = channel_energy_pj(cfg, counts, v["active_cycles"], v["end_cycle"])
        bw = moved / span if span else 0.0
        chans.append({
            "channel": v["channel"], "bytes_read": v["bytes_read"],
            "bytes_written": v["bytes_written"], "busy_span_cycles": span,
            "bandwidth_bytes_per_cycle": bw, "bandwidth_gb_per_s": bw / tck,
            "peak_fraction": bw / peak if peak else 0.0,
            "row_hit_rate": max(0.0, 1 - counts.get("ACT", 0) / col) if col else 0.0,
            "commands": {k: n for k, n in counts.items() if k in names},
            "energy_pj": energy,
        })
        for k, n in chans[-1]["commands"].items():
            tot_counts[k] = tot_counts.get(k, 0) + n
        for k, e in energy.items():
            tot_energy[k] = tot_energy.get(k, 0.0) + e
    used = [c for c in chans if c["bytes_read"] + c["bytes_written"]]
    col = sum(tot_counts.get(c, 0) for c in ("RD", "WR", "RDA", "WRA"))
    return {
        "clock": f"memory clock, tCK = {tck} ns",
        "channels": chans,
        "requests": latencies.n,
        "latency_avg_cycles": latencies.mean(),
        "latency_p99_cycles": latencies.percentile(99),
        "pim_requests": 0 if pim_latencies is None else pim_latencies.n,
        "bytes_total": int(sum(c["bytes_read"] + c["bytes_written"] for c in chans)),
        "sim_cycles": int(max((v["end_cycle"] for v in channels), default=0)),
        "row_hit_rate": max(0.0, 1 - tot_counts.get("ACT", 0) / col) if col else 0.0,
        "commands": tot_counts,
        "energy_pj": tot_energy,
        "mean_channel_bandwidth_bytes_per_cycle": (
            float(np.mean([c["bandwidth_bytes_per_cycle"] for c in used])) if used else 0.0),
        "peak_bandwidth_bytes_per_cycle_per_channel": peak,
    }


__all__ = ["LatencyCounts", "MemorySystem", "summarize"]
