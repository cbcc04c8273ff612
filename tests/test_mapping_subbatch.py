"""Sub-batch partitioners: every request in exactly one sub-batch, per-channel balance."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapping.errors import MappingError
from mapping.subbatch import split_balanced_kv, split_half, split_sub_batches


def _batches():
    return st.integers(1, 60).flatmap(lambda n: st.tuples(
        st.lists(st.integers(1, 2048), min_size=n, max_size=n),
        st.lists(st.integers(0, 7), min_size=n, max_size=n),
        st.integers(1, 5)))


@settings(max_examples=60, deadline=None)
@given(_batches(), st.sampled_from(["half", "balanced_kv"]))
def test_every_request_in_exactly_one_sub_batch_and_counts_balanced(data, policy):
    seq, ch, n_sub = data
    a = split_sub_batches(seq, ch, n_sub, policy)
    assert a.sub_batch.shape == (len(seq),)
    assert ((a.sub_batch >= 0) & (a.sub_batch < n_sub)).all()
    sizes = a.sizes()
    assert sum(sizes) == len(seq)
    assert max(sizes) - min(sizes) <= 1
    ch = np.asarray(ch)
    for c in np.unique(ch):
        per = np.bincount(a.sub_batch[ch == c], minlength=n_sub)
        assert per.max() - per.min() <= 1, f"channel {c} counts {per}"


@settings(max_examples=60, deadline=None)
@given(_batches())
def test_balanced_kv_never_worse_than_half_on_any_channel(data):
    seq, ch, n_sub = data
    half = split_half(seq, ch, n_sub)
    bal = split_balanced_kv(seq, ch, n_sub)
    kh = half.kv_tokens(seq, ch, 8)
    kb = bal.kv_tokens(seq, ch, 8)
    for c in range(8):
        assert kb[c].max() - kb[c].min() <= kh[c].max() - kh[c].min()
    # group sizes are the same as half's per channel
    assert (np.sort(half.sizes()) == np.sort(bal.sizes())).all()


def test_half_alternates_ceil_and_floor_over_channels():
    # three channels with three requests each: the extra request goes to 0, then 1, then 0
    ch = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    a = split_half([10] * 9, ch, 2)
    assert a.sub_batch.tolist() == [0, 0, 1, 0, 1, 1, 0, 0, 1]
    assert a.sizes() == [5, 4]


def test_balanced_kv_balances_tokens_where_half_does_not():
    seq = [1000, 900, 10, 20]
    a = split_half(seq, [0, 0, 0, 0], 2)
    b = split_balanced_kv(seq, [0, 0, 0, 0], 2)
    assert a.kv_tokens(seq).tolist() == [1900, 30]
    assert sorted(b.kv_tokens(seq).tolist()) == [920, 1010]


def test_one_sub_batch_holds_everything():
    a = split_sub_batches([5, 6, 7], [1, 0, 1], 1, "balanced_kv")
    assert a.sub_batch.tolist() == [0, 0, 0]


def test_bad_inputs_are_mapping_errors():
    with pytest.raises(MappingError, match="unknown sub-batch policy 'x'; valid: half"):
        split_sub_batches([1], [0], 2, "x")
    with pytest.raises(MappingError, match="2 sequence lengths but 1 channels"):
        split_half([1, 2], [0], 2)
    with pytest.raises(MappingError, match="positive integer"):
        split_half([1], [0], 0)
