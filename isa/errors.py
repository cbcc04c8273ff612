"""Error types of the ``isa`` package (turned into one-line messages by the CLI)."""


class IsaError(Exception):
    """Base of every error raised by the ``isa`` package."""
