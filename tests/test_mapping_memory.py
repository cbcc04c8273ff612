"""HBM plan and KV layout: every KV byte placed exactly once, inside its channel's capacity."""
from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsim.config import load_config
from archsim.memory.addrmap import AddressMapping
from mapping import CapacityError, CompileOptions, compile_layer, compile_model
from mapping.kvlayout import PimKvLayout
from mapping.memplan import SpadAllocator
from mapping.errors import MappingError
from workloads.models import get_model
from workloads.requests import Batch, Request


def _batch(lens, channels=None):
    return Batch(tuple(Request(i, None, None, L, None if channels is None else channels[i])
                       for i, L in enumerate(lens)))


def _check_kv(cp):
    """All K/V element addresses: unique, inside their channel and the KV region."""
    model, tp = cp.model, cp.tp
    Hkv, hd = model.kv_heads_per_device(tp), model.head_dim
    eb = cp.plan.tensors[f"hidden.{cp.layers[0]}"].elem_bytes
    amap = AddressMapping(cp.cfg.memory)
    chunks = []
    for (l, i), p in sorted(cp.plan.kv.items()):
        k, v = cp.kv_addresses(l, i)
        assert k.shape == v.shape == (p.seq_len, Hkv, hd)
        a = np.concatenate([k.ravel(), v.ravel()])
        chunks.append(a)
        assert a.size * eb == 2 * p.seq_len * Hkv * hd * eb
        if p.layout == "pim":
            f = amap.decode_array(a)
            assert (f[:, 0] == p.channel).all()          # channel
            rows = f[:, 4]
            assert rows.min() >= p.key_row and rows.max() < p.key_row + p.rows
            assert rows.min() >= cp.plan.kv_row0
        else:
            kv = cp.tensors["kv"]
            assert a.min() >= kv.addr and a.max() + eb <= kv.addr + kv.size_bytes
    allb = np.concatenate(chunks)
    # element granularity: every element's bytes are distinct from every other element's
    assert np.unique(allb).size == allb.size
    assert (np.diff(np.sort(allb)) >= eb).all()
    return allb


@pytest.mark.parametrize("system", ["neupims", "npu-only"])
@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_every_kv_element_placed_exactly_once_in_its_channel(system, name):
    cfg = load_config(system)
    cp = compile_model(get_model(name), _batch([1, 31, 32, 33, 200, 7, 64, 129]), cfg)
    _check_kv(cp)
    if system == "neupims":
        fp = cp.kv_footprint_per_channel()
        cap = cfg.memory.org.channel_capacity_bytes
        assert all(0 <= b <= cap for b in fp)
        # the KV region does not overlap the linear region
        assert cp.plan.kv_row0 * 32 * 32 * 1024 >= cp.plan.linear_bytes


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 300), st.sampled_from([16, 32, 48, 64, 128]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([None, 16, 64, 512]))
def test_pim_layout_positions_are_a_bijection(L, hd, kv, run):
    lay = PimKvLayout.create(banks=32, page_bytes=1024, elem_bytes=2, mults=16, head_dim=hd,
                             kv_heads=kv, run=run)
    t, h, d = np.meshgrid(np.arange(L), np.arange(kv), np.arange(hd), indexing="ij")
    t, h, d = t.ravel(), h.ravel(), d.ravel()
    # keys: row, bank, element (vectorised key_pos); fewer KV heads than key slots pack
    # key_pack token groups into a row, slot (group mod key_pack) * kv + head
    hpr, tpk, rpk = lay.heads_per_key_row, lay.key_pack, lay.value_pack
    assert tpk == max(1, hpr // kv) and rpk == max(1, lay.slots // kv)
    g = t // 32
    kr = (g // tpk) * lay.key_chunks + h // hpr
    kb, ke = t % 32, ((g % tpk) * min(kv, hpr) + h % hpr) * lay.head_stride + d
    for i in np.random.default_rng(0).integers(0, t.size, 20):
        assert lay.key_pos(int(t[i]), int(h[i])) == (kr[i], kb[i], ke[i] - d[i])
    vr = np.array([lay.value_pos(a, b, c) for a, b, c in zip(t[:50], h[:50], d[:50])])
    u, gv, j = t // lay.run, h // lay.slots, d // 32
    vrow = ((u // rpk) * lay.value_groups + gv) * lay.dim_tiles + j
    vb, ve = d % 32, ((u % rpk) * min(kv, lay.slots) + h % lay.slots) * lay.run + t % lay.run
    assert np.array_equal(vr, np.stack([vrow, vb, ve], 1)[:50])
    assert (ke < lay.page_elems).all() and (ve < lay.page_elems).all()
    assert kr.max() < lay.key_rows(L) and vrow.max() < lay.value_rows(L)
    keys = np.unique((kr * 32 + kb) * lay.page_elems + ke)
    vals = np.unique((vrow * 32 + vb) * lay.page_elems + ve)
    assert keys.size == vals.size == t.size


def test_default_value_run_is_fill_free_and_capacity_is_counted():
    lay = PimKvLayout.create(banks=32, page_bytes=1024, elem_bytes=2, mults=16, head_dim=128,
                             kv_heads=8, gemv_fill=6)
    assert lay.run == 128 and lay.slots == 4 and lay.key_chunks == 2 and lay.dim_tiles == 4
    assert lay.rows(300) == 10 * 2 + 3 * 2 * 4
    assert lay.kv_bytes(300) <= lay.rows(300) * lay.row_group_bytes()


def _fields_match_message(exc, resource):
    """The structured fields of a CapacityError say what its message says."""
    assert re.fullmatch(resource, exc.resource), exc.resource
    assert exc.needed_bytes > exc.available_bytes >= 0
    assert f"{exc.needed_bytes} bytes" in str(exc) and f"{exc.available_bytes} bytes" in str(exc)
    back = pickle.loads(pickle.dumps(exc))
    assert (str(back), back.resource, back.needed_bytes, back.available_bytes) == (
        str(exc), exc.resource, exc.needed_bytes, exc.available_bytes)


def test_kv_that_does_not_fit_names_channel_and_bytes():
    cfg = load_config("neupims", ["memory.org.rows=32"])
    with pytest.raises(CapacityError, match=r"KV cache does not fit channel \d+: needs \d+ bytes "
                                            r".* available \d+ bytes") as ei:
        compile_layer(get_model("tiny-gpt"), _batch([256] * 160), cfg,
                      options=CompileOptions(kv_placement="fixed"))
    _fields_match_message(ei.value, r"KV rows of channel \d+")


def test_kv_that_does_not_fit_the_device_names_bytes_needed_and_free():
    """With spilling (``auto``'s last resort) only a device that is really full stops the
    compiler, and it says how much the batch needs and the device has free."""
    cfg = load_config("neupims", ["memory.org.rows=32"])
    with pytest.raises(CapacityError, match=r"KV cache does not fit the device: the batch needs "
                                            r"\d+ bytes .*, \d+ bytes are free") as ei:
        compile_layer(get_model("tiny-gpt"), _batch([256] * 512), cfg)
    _fields_match_message(ei.value, "KV rows of the device")


def test_rotation_spreads_the_layers_of_an_overloaded_channel():
    cfg = load_config("neupims", ["memory.org.rows=8"])
    m = get_model("tiny-gpt")
    lens = [200] + [1] * 31
    b = _batch(lens, list(range(32)))
    opts = CompileOptions(channels="keep", kv_placement="fixed")
    with pytest.raises(CapacityError, match="kv_placement tried: fixed"):
        compile_model(m, b, cfg, options=opts)
    cp = compile_model(m, b, cfg, options=CompileOptions(channels="keep"))
    assert cp.plan.kv_placement == "rotate"
    assert cp.plan.kv[(0, 0)].channel == 0 and cp.plan.kv[(1, 0)].channel == 1
    _check_kv(cp)


def test_weights_that_do_not_fit_the_device():
    cfg = load_config("npu-only", ["memory.org.rows=2", "memory.org.channels=1"])
    with pytest.raises(CapacityError,
                       match="HBM: .* need \\d+ bytes, the device has \\d+") as ei:
        compile_layer(get_model("gpt3-7b"), _batch([10] * 4), cfg)
    _fields_match_message(ei.value, "HBM")


def test_scratchpad_overflow_names_the_buffer():
    cfg = load_config("neupims", ["npu.scratchpad.size_bytes=65536"])
    with pytest.raises(CapacityError, match="scratchpad: .* needs \\d+ bytes") as ei:
        compile_layer(get_model("tiny-gpt"), _batch([10] * 4), cfg)
    _fields_match_message(ei.value, "scratchpad")


def test_spad_allocator_reuses_and_reports_release_events():
    a = SpadAllocator(4096)
    x, ev = a.alloc(1000)
    y, _ = a.alloc(1000)
    a.free(x, {"vu0": 7})
    z, ev = a.alloc(512)
    assert z == x and ev == {"vu0": 7}
    a.free(y, {"sa1": 3})
    a.free(z, {"vu0": 9})
    w, ev = a.alloc(3000)
    assert w == 0 and ev == {"vu0": 9, "sa1": 3}
    with pytest.raises(MappingError):
        a.free(12345, {})


def test_spad_allocator_prefers_memory_freed_by_the_same_owner():
    a = SpadAllocator(8192)
    x0, _ = a.alloc(1024, owner=0)
    x1, _ = a.alloc(1024, owner=1)
    a.free(x0, {"vu0": 5})
    # sub-batch 1 does not take what sub-batch 0 just freed (it would wait for vu0)
    y1, ev = a.alloc(1024, owner=1)
    assert y1 == 2048 and ev == {}
    y0, ev = a.alloc(512, owner=0)
    assert y0 == x0 and ev == {"vu0": 5}
    # no preference: plain first fit
    a.free(x1, {"sa0": 2})
    z, ev = a.alloc(512)
    assert z == 512 and ev == {"vu0": 5}


def test_spad_allocator_falls_back_to_other_owners_memory_when_full():
    a = SpadAllocator(4096)
    x, _ = a.alloc(2048, owner=0)
    y, _ = a.alloc(2048, owner=1)
    a.free(x, {"vu1": 4})
    z, ev = a.alloc(2048, owner=1)
    assert z == x and ev == {"vu1": 4}
    with pytest.raises(CapacityError, match="largest free range is 0 bytes"):
        a.alloc(64, owner=1)


def test_tensor_image_round_trips_tiled_weights():
    cp = compile_layer(get_model("tiny-llama"), _batch([4, 9]), load_config("neupims"))
    t = cp.tensors["L0.ffn2_w"]           # [352, 128], tiled 128 x 128 with a partial tile
    assert t.layout == "tiled" and t.shape == (352, 128)
    v = np.arange(352 * 128, dtype=np.float64).reshape(352, 128)
    img = t.to_image(v)
    addr = t.element_addresses()
    assert np.array_equal(img[(addr - t.addr) // t.elem_bytes], v)
    assert np.unique(addr).size == v.size


def test_a_gemm_that_no_scratchpad_block_fits_is_a_capacity_error_with_numbers():
    """A machine's too-small scratchpad is the user's machine, not a simulator bug: the GEMM
    builder says so as a CapacityError (``archsim compare --paper`` reports 'does not fit')."""
    from archsim.config import load_config
    from mapping.errors import CapacityError
    from mapping.gemm import build_gemm_program

    cfg = load_config("neupims", ["npu.scratchpad.size_bytes=4096"])
    with pytest.raises(CapacityError, match="scratchpad") as e:
        build_gemm_program(64, 4096, 4096, cfg, b_slots=4)
    assert e.value.resource == "scratchpad"
    assert e.value.needed_bytes > e.value.available_bytes == 4096
