"""Command log records and their CSV form (the input of the independent timing checker).

CSV columns (header line required): ``cycle,channel,rank,bankgroup,bank,command,row,column``.
``cycle`` is the memory-clock cycle (tCK) at which the command was on the command bus; fields a
broadcast command does not name are ``-1`` (REF: bank group and bank; G_ACT: bank; channel-wide
PIM commands: rank, bank group, bank). ``column`` carries the burst's first column for RD/WR,
the step index of a COMP, ``k`` (COMP steps) of a PIM_GEMV and the announced GEMV count of a
PIM_HEADER; ``row`` is the row of ACT/PRE/RD/WR/G_ACT.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, NamedTuple

from archsim.errors import ArchsimError

CSV_HEADER = ("cycle", "channel", "rank", "bankgroup", "bank", "command", "row", "column")


class CommandRecord(NamedTuple):
    """One command on a channel's command bus (see the module docstring for the fields)."""

    cycle: int
    channel: int
    rank: int
    bankgroup: int
    bank: int
    command: str
    row: int = -1
    column: int = -1


def write_log_csv(records: Iterable[tuple], path: str | Path) -> None:
    """Write records (CommandRecord or plain 8-tuples) as CSV with :data:`CSV_HEADER`."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_HEADER)
        w.writerows(records)


def read_log_csv(path: str | Path) -> list[CommandRecord]:
    """Read a command log CSV. Raises ArchsimError naming the file and line of a bad line."""
    out: list[CommandRecord] = []
    try:
        fh = open(path, newline="")
    except OSError as exc:
        raise ArchsimError(f"{path}: cannot read command log: {exc.strerror}") from None
    with fh:
        rows = csv.reader(fh)
        header = next(rows, None)
        if header is None or tuple(h.strip() for h in header) != CSV_HEADER:
            raise ArchsimError(f"{path}:1: expected header {','.join(CSV_HEADER)}")
        for lineno, row in enumerate(rows, start=2):
            if not row:
                continue
            try:
                if len(row) != 8:
                    raise ValueError(f"expected 8 fields, got {len(row)}")
                out.append(CommandRecord(int(row[0]), int(row[1]), int(row[2]), int(row[3]),
                                         int(row[4]), row[5].strip(), int(row[6]),
                                         int(row[7])))
            except ValueError as exc:
                raise ArchsimError(f"{path}:{lineno}: bad command log line: {exc}") from None
    return out


__all__ = ["CommandRecord", "CSV_HEADER", "write_log_csv", "read_log_csv"]
