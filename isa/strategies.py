"""Hypothesis strategies over the instruction table (for property tests and RTL co-simulation).

Needs the ``hypothesis`` package (a dev dependency); nothing else in ``isa`` imports this.
"""
from __future__ import annotations

from hypothesis import strategies as st

from isa.encoding import Instruction
from isa.spec import SPEC, InstrSpec


def codes_for(spec: InstrSpec) -> st.SearchStrategy[tuple[int, ...]]:
    """Legal encoding-domain operand codes of ``spec`` (every field in its legal range)."""
    return st.tuples(*(st.integers(f.lo, f.hi) for f in spec.fields))


def instruction_of(spec: InstrSpec) -> st.SearchStrategy[Instruction]:
    """Random legal instructions of one spec."""
    return codes_for(spec).map(lambda c: Instruction.from_codes(spec, c))


instructions: st.SearchStrategy[Instruction] = st.sampled_from(SPEC).flatmap(instruction_of)
"""Random legal instructions of any kind."""

__all__ = ["codes_for", "instruction_of", "instructions"]
