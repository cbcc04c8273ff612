"""Error types of the ``workloads`` package (turned into one-line messages by the CLI)."""


class WorkloadError(Exception):
    """Base of every error raised by the ``workloads`` package (bad model, request file, batch)."""
