"""The buffer-plan search (mapping.bufplan.search_buffer_plan) on synthetic fit functions.

With or without ``largest_first`` (each row block tried with the largest attention block
first), the rows, ring and staging it picks must be those of the search with the smallest
block only (the same function called with ``attn_full == attn_min``) and the attention block
the largest that fits beside them; with it, the smallest block is never compiled for rows the
largest fits beside.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mapping.bufplan import RING_MIN, search_buffer_plan
from mapping.errors import CapacityError


def _fit_function(cap, per_row, per_key, per_slot, stage_saves):
    """A monotone scratchpad model: rows x per_row + key block x per_key + ring slots x
    per_slot (staging q|k|v saves ``stage_saves`` per row) <= cap; logs every attempt."""
    calls = []

    def attempt(rows, w, attn, staged):
        need = rows * (per_row - (stage_saves if staged else 0)) + attn * per_key + w * per_slot
        ok = need <= cap
        calls.append(((rows, w, attn, staged), ok))
        if ok:
            return ("program", rows, w, attn, staged)
        return CapacityError("scratchpad", resource="scratchpad", needed_bytes=need,
                             available_bytes=cap)

    return attempt, calls


@settings(max_examples=300, deadline=None)
@given(rows_max=st.integers(1, 3000), attn_full=st.integers(128, 2200),
       granule=st.sampled_from([64, 128]), cap=st.integers(2_000, 400_000),
       per_row=st.integers(20, 200), per_key=st.integers(1, 100), per_slot=st.integers(0, 4000),
       stage_saves=st.integers(0, 19), ring=st.integers(2, 24), can_stage=st.booleans(),
       largest_first=st.booleans())
def test_rows_of_the_smallest_block_and_the_largest_block_that_fits(
        rows_max, attn_full, granule, cap, per_row, per_key, per_slot, stage_saves, ring,
        can_stage, largest_first):
    attn_min = min(128, attn_full)
    args = dict(rows_max=rows_max, ring=ring, scratchpad_bytes=cap, granule=granule,
                can_stage=can_stage)
    attempt, calls = _fit_function(cap, per_row, per_key, per_slot, stage_saves)
    try:
        got, rows, attn, staged = search_buffer_plan(attempt, attn_full=attn_full,
                                                     attn_min=attn_min,
                                                     largest_first=largest_first, **args)
    except CapacityError:
        got = None
    probe, _ = _fit_function(cap, per_row, per_key, per_slot, stage_saves)
    fits = lambda *k: isinstance(probe(*k), tuple)                           # noqa: E731
    if fits(rows_max, ring, attn_full, False):                              # step 1
        assert (got[1:], rows, attn, staged) == ((rows_max, ring, attn_full, False),
                                                 rows_max, attn_full, False)
        return
    # the reference: the same search with the smallest key block only, from step 2 on (its
    # step 1, the smallest block with the full ring, is not one the search makes unless
    # that ring is already the smallest)
    ref_attempt, _ = _fit_function(cap, per_row, per_key, per_slot, stage_saves)

    def ref(rows_, w_, attn_, staged_):
        if (rows_, w_, staged_) == (rows_max, ring, False) and ring > RING_MIN:
            return CapacityError("step 1", resource="scratchpad")
        return ref_attempt(rows_, w_, attn_, staged_)

    try:
        r = search_buffer_plan(ref, attn_full=attn_min, attn_min=attn_min, **args)
    except CapacityError:
        assert got is None
        return
    assert got is not None and (rows, got[2], staged) == (r[1], r[0][2], r[3])
    assert got == ("program", rows, got[2], attn, staged)
    sizes = {attn_min, *range(granule * (attn_min // granule + 1), attn_full + 1, granule),
             attn_full}
    assert attn == max(s for s in sizes if fits(rows, got[2], s, staged))
    # the smallest block only for rows the largest did not fit beside
    for i, ((r_, w_, a_, st_), _ok) in enumerate(calls):
        if largest_first and a_ == attn_min < attn_full:
            assert ((r_, w_, attn_full, st_), False) in calls[:i]
