"""Error types of the ``mapping`` package (turned into one-line messages by the CLI).

Every error is raised where the fault is found; its message names the offending item (op,
channel, request, key) and what would have been acceptable.
"""


class MappingError(Exception):
    """Base of every error raised by the ``mapping`` compiler."""


class PlacementError(MappingError):
    """An operator cannot be placed: the message names the op and the engines that were tried."""


class CapacityError(MappingError):
    """A tensor does not fit its memory (HBM channel, scratchpad): the message names the
    memory (e.g. ``channel 7``), the bytes needed and the bytes available."""


class ScheduleError(MappingError):
    """The schedule cannot be built (unknown stage, inconsistent sub-batches, cyclic graph)."""


class UnsupportedError(MappingError):
    """A workload feature the mapper does not support yet (named in the message)."""


__all__ = ["MappingError", "PlacementError", "CapacityError", "ScheduleError",
           "UnsupportedError"]
