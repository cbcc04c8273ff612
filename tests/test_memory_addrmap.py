"""Address mapping: decode/encode are inverse, vectorised forms agree, bad addresses fail."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.config import load_config
from archsim.errors import SimulationError
from archsim.memory.addrmap import AddressMapping

CFG = load_config("neupims")
AM = AddressMapping(CFG.memory)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, CFG.memory.org.capacity_bytes // 16 - 1))
def test_decode_then_encode_returns_the_column_address(col_index):
    addr = col_index * 16
    assert AM.encode(*AM.decode(addr)) == addr


def test_default_mapping_puts_column_lowest_then_channel():
    assert AM.decode(0) == (0, 0, 0, 0, 0, 0)
    assert AM.decode(16) == (0, 0, 0, 0, 0, 1)
    assert AM.decode(1024) == (1, 0, 0, 0, 0, 0)          # next channel after one page
    assert AM.decode(32 * 1024) == (0, 0, 0, 1, 0, 0)     # then the bank
    assert AM.decode(CFG.memory.org.capacity_bytes - 1)[4] == CFG.memory.org.rows - 1


def test_vectorised_decode_and_encode_match_scalar():
    rng = np.random.default_rng(1)
    addrs = rng.integers(0, CFG.memory.org.capacity_bytes // 16, 1000) * 16
    f = AM.decode_array(addrs)
    assert [tuple(r) for r in f.tolist()] == [AM.decode(int(a)) for a in addrs]
    assert (AM.encode_array(f) == addrs).all()


def test_other_mapping_string_is_honoured():
    cfg = load_config("neupims", ["memory.controller.address_mapping=chrorabgbaco"])
    am = AddressMapping(cfg.memory)
    assert am.decode(1024)[3] == 1 and am.decode(1024)[0] == 0
    assert am.decode(cfg.memory.org.capacity_bytes - 1)[0] == cfg.memory.org.channels - 1


def test_address_beyond_capacity_is_a_clear_error():
    with pytest.raises(SimulationError, match="outside the memory"):
        AM.decode(CFG.memory.org.capacity_bytes)
    with pytest.raises(SimulationError, match="outside the memory"):
        AM.decode_array(np.array([0, CFG.memory.org.capacity_bytes + 5]))
    with pytest.raises(SimulationError, match="out of range"):
        AM.encode(0, 0, 0, 0, CFG.memory.org.rows, 0)
