"""Physical address mapping: byte address <-> (channel, rank, bank group, bank, row, column).

The mapping string of ``memory.controller.address_mapping`` (e.g. ``rorabgbachco``) lists the
fields from the most to the least significant bit; below the column field sit the
log2(column_width_bits / 8) byte-offset bits of one column access (16 B for HBM2's 128-bit
columns). Field widths are log2 of the organisation's counts (all powers of two), so the
mapping is a bijection on [0, capacity_bytes) at column granularity.
"""
from __future__ import annotations

import numpy as np

from archsim.errors import SimulationError

FIELD_ORDER = ("ch", "ra", "bg", "ba", "ro", "co")
"""Order of the tuple returned by :meth:`AddressMapping.decode`."""


class AddressMapping:
    """Decode/encode byte addresses for one memory configuration.

    Args:
        memory: a :class:`archsim.config.MemoryConfig`.

    Attributes:
        capacity_bytes: device capacity in bytes (addresses must be below it).
        column_bytes: bytes of one column (the offset bits below the column field).
        shifts / masks: per field (keys of :data:`FIELD_ORDER`), the bit position and mask.
    """

    def __init__(self, memory) -> None:
        org = memory.org
        self.capacity_bytes = org.capacity_bytes
        self.column_bytes = org.column_width_bits // 8
        self.burst_bytes = org.burst_bytes
        counts = {"ch": org.channels, "ra": org.ranks, "bg": org.bank_groups,
                  "ba": org.banks_per_group, "ro": org.rows, "co": org.columns}
        self.counts = counts
        shift = int(self.column_bytes).bit_length() - 1
        self.shifts: dict[str, int] = {}
        self.masks: dict[str, int] = {}
        for f in reversed(memory.controller.address_fields):
            self.shifts[f] = shift
            self.masks[f] = counts[f] - 1
            shift += counts[f].bit_length() - 1
        self.mapping = memory.controller.address_mapping

    def _check(self, addr: int) -> None:
        if addr < 0 or addr >= self.capacity_bytes:
            raise SimulationError(
                f"address {addr:#x} is outside the memory (capacity {self.capacity_bytes:#x} "
                f"bytes = {self.capacity_bytes / 2**30:g} GiB)")

    def decode(self, addr: int) -> tuple[int, int, int, int, int, int]:
        """Byte address -> (channel, rank, bank group, bank, row, column index).

        Raises SimulationError when ``addr`` is negative or not below the capacity.
        """
        self._check(addr)
        s, m = self.shifts, self.masks
        return ((addr >> s["ch"]) & m["ch"], (addr >> s["ra"]) & m["ra"],
                (addr >> s["bg"]) & m["bg"], (addr >> s["ba"]) & m["ba"],
                (addr >> s["ro"]) & m["ro"], (addr >> s["co"]) & m["co"])

    def encode(self, ch: int, ra: int, bg: int, ba: int, row: int, col: int) -> int:
        """Inverse of :meth:`decode`: the byte address of column ``col`` (offset 0).

        Raises SimulationError when a field is out of range.
        """
        vals = dict(zip(FIELD_ORDER, (ch, ra, bg, ba, row, col)))
        addr = 0
        for f, v in vals.items():
            if v < 0 or v > self.masks[f]:
                raise SimulationError(f"address field {f}={v} out of range 0..{self.masks[f]}")
            addr |= int(v) << self.shifts[f]
        return addr

    def decode_array(self, addrs: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`decode`: int array of shape (N,) -> int64 array (N, 6), columns in
        :data:`FIELD_ORDER`. Raises SimulationError naming the first out-of-range address."""
        a = np.asarray(addrs, dtype=np.int64)
        bad = (a < 0) | (a >= self.capacity_bytes)
        if bad.any():
            self._check(int(a[np.argmax(bad)]))
        out = np.empty((a.shape[0], 6), dtype=np.int64)
        for j, f in enumerate(FIELD_ORDER):
            out[:, j] = (a >> self.shifts[f]) & self.masks[f]
        return out

    def encode_array(self, fields: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`encode`: int array (N, 6) in :data:`FIELD_ORDER` -> addresses (N,).

        Raises SimulationError when any field is out of range."""
        f = np.asarray(fields, dtype=np.int64)
        addr = np.zeros(f.shape[0], dtype=np.int64)
        for j, name in enumerate(FIELD_ORDER):
            col = f[:, j]
            if ((col < 0) | (col > self.masks[name])).any():
                raise SimulationError(f"address field {name} out of range 0..{self.masks[name]}")
            addr |= col << self.shifts[name]
        return addr

    def __repr__(self) -> str:
        return f"AddressMapping('{self.mapping}', capacity={self.capacity_bytes:#x})"
