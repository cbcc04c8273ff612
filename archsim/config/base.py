"""The base of every config section and the error of a rule between keys.

:class:`FrozenSection` makes a section immutable and strict about unknown keys;
:class:`CrossFieldError` is what a section's validator raises when a rule between several of its
keys is broken (:func:`archsim.config.load_config` names the key, its line or the ``--set``).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenSection(BaseModel):
    """Base of every config section: immutable and strict about unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


class CrossFieldError(ValueError):
    """A rule between several keys of one config section is broken.

    ``keys`` are the section's keys the rule relates (the first is the one reported, e.g.
    ``tRAS``); :func:`load_config` turns it into ``FILE:LINE: memory.timing.tRAS: ...`` with
    the line of that key (or the ``--set`` that changed any of them).
    """

    def __init__(self, keys: tuple[str, ...], text: str) -> None:
        super().__init__(text)
        self.keys = keys


__all__ = ["FrozenSection", "CrossFieldError"]
