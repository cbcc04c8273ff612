"""Error types of the ``mapping`` package (turned into one-line messages by the CLI).

Every error is raised where the fault is found; its message names the offending item (op,
channel, request, key) and what would have been acceptable.
"""
from __future__ import annotations


class MappingError(Exception):
    """Base of every error raised by the ``mapping`` compiler."""


class PlacementError(MappingError):
    """An operator cannot be placed: the message names the op and the engines that were tried."""


class CapacityError(MappingError):
    """A tensor does not fit its memory (HBM channel, scratchpad): the message names the
    memory (e.g. ``channel 7``), the bytes needed and the bytes available.

    The same facts are fields, for callers that report a point that does not fit instead of
    stopping (``archsim compare --paper``); each is None when the raiser did not give it.

    Attributes:
        resource: the memory that ran out, e.g. ``"KV rows of channel 7"``, ``"HBM"``,
            ``"scratchpad"``.
        needed_bytes: what the tensor (or the region) needs, bytes.
        available_bytes: what that memory offers, bytes (the largest free range of a
            scratchpad; the KV rows above the weights region of a channel).
    """

    def __init__(self, message: str, *, resource: str | None = None,
                 needed_bytes: int | None = None, available_bytes: int | None = None) -> None:
        super().__init__(message)
        self.resource = resource
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes

    def __reduce__(self):  # keep the fields across processes (sweep workers pickle errors)
        return (_capacity_error, (str(self), self.resource, self.needed_bytes,
                                  self.available_bytes))


def _capacity_error(message: str, resource: str | None, needed_bytes: int | None,
                    available_bytes: int | None) -> CapacityError:
    return CapacityError(message, resource=resource, needed_bytes=needed_bytes,
                         available_bytes=available_bytes)


class ScheduleError(MappingError):
    """The schedule cannot be built (unknown stage, inconsistent sub-batches, cyclic graph)."""


class UnsupportedError(MappingError):
    """A workload feature the mapper does not support yet (named in the message)."""


__all__ = ["MappingError", "PlacementError", "CapacityError", "ScheduleError",
           "UnsupportedError"]
