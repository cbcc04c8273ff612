"""KV that outgrows its channel (issue 18 item 2) and the packed PIM layout.

A request whose KV does not fit its channel keeps the head of its tokens there and spills the
tail, in whole rows of the layout, to the channels with the most free rows
(``kv_placement`` ``spill``, the last resort of ``auto``); its attention runs on every segment's
channel and the parts are merged on the NPU with their log-sum-exps. The machine here has 16
DRAM rows per bank (15 free above the weights): four requests on channel 0 need 26 (fp32) or 14
(fp16) row groups per layer, and each layer may use 7 of a channel's.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_one_thread")

from archsim.config import load_config  # noqa: E402
from archsim.validation import validate  # noqa: E402
from mapping import CapacityError, CompileOptions, compile_model  # noqa: E402
from mapping.kvlayout import PimKvLayout  # noqa: E402
from mapping.memplan import spill_segments  # noqa: E402
from workloads import get_model  # noqa: E402
from workloads.requests import Batch, Request  # noqa: E402

ROWS = ["memory.org.rows=16"]
LENS, CHANNELS = [250, 250, 250, 3], [0, 0, 0, 0]


def _batch(lens, channels=None):
    return Batch(tuple(Request(id=i, input_len=None, output_len=None, seq_len=L,
                               channel=None if channels is None else channels[i])
                       for i, L in enumerate(lens)))


@pytest.mark.parametrize("kv_heads,run", [(1, None), (4, None), (8, 64), (3, None)])
def test_spill_keeps_rows_token_order_and_every_channel_within_its_rows(kv_heads, run):
    lay = PimKvLayout.create(banks=32, page_bytes=1024, elem_bytes=2, mults=16, head_dim=64,
                             kv_heads=kv_heads, run=run)
    rng = np.random.default_rng(kv_heads)
    room = [int(x) for x in rng.integers(1, 3000, 40)]
    home = np.zeros(40, dtype=np.int64)            # everything on channel 0 at first
    home[::3] = rng.integers(0, 8, len(home[::3]))
    rows = [lay.rows(r) for r in room]
    cap = -(-sum(rows) // 8) + lay.rows(lay.granule())     # just enough room in 8 channels
    segs = spill_segments(lay, room, home, 8, cap, 1, 0)
    load = np.zeros(8, dtype=np.int64)
    for r, sg in zip(room, segs):
        assert sg[0][0] == 0 and sum(n for _, n, _ in sg) == r          # all tokens, in order
        assert all(a[0] + a[1] == b[0] for a, b in zip(sg, sg[1:]))
        assert all(t0 % lay.granule() == 0 for t0, _, _ in sg)           # whole rows
        assert sum(lay.rows(n) for _, n, _ in sg) == lay.rows(r)         # spilling costs no row
        for _, n, c in sg:
            load[c] += lay.rows(n)
    assert load.max() <= cap and load.sum() == sum(rows)


def test_spill_only_when_the_device_is_full():
    lay = PimKvLayout.create(banks=32, page_bytes=1024, elem_bytes=2, mults=16, head_dim=64,
                             kv_heads=4)
    room = [1000] * 16
    need = sum(lay.rows(r) for r in room)
    with pytest.raises(CapacityError, match="does not fit the device") as ei:
        spill_segments(lay, room, np.zeros(16, dtype=np.int64), 4, need // 4 - 1, 2, 123)
    e = ei.value
    assert e.needed_bytes == 2 * need * lay.row_group_bytes() > e.available_bytes
    assert f"{e.needed_bytes} bytes" in str(e) and f"{e.available_bytes} bytes" in str(e)


def test_auto_spills_when_neither_fixed_nor_rotate_fits():
    cfg = load_config("neupims", ["memory.org.rows=8"])
    m = get_model("tiny-gpt")
    b = _batch(LENS, CHANNELS)
    for pol in ("fixed", "rotate"):
        with pytest.raises(CapacityError, match=f"kv_placement tried: {pol}"):
            compile_model(m, b, cfg, options=CompileOptions(channels="keep", kv_placement=pol))
    cp = compile_model(m, b, cfg, options=CompileOptions(channels="keep"))
    assert cp.plan.kv_placement == "spill" and cp.plan.kv_spilled >= 2
    assert cp.summary()["kv_spilled_requests"] == cp.plan.kv_spilled
    spilled = [kp for (l, i), kp in cp.plan.kv.items() if l == 0 and kp.spilled]
    kp = spilled[0]
    assert kp.channel == kp.segments[0].channel and len({s.channel for s in kp.segments}) > 1
    assert max(cp.plan.kv_rows_used) <= 7                 # every channel within its rows
    # every K/V element of every request has its own address
    addrs = np.concatenate([np.concatenate([a.ravel() for a in cp.plan.kv_element_addresses(l, i)])
                            for l in cp.layers for i in range(len(b))])
    assert np.unique(addrs).size == addrs.size
    # the merged attention of a spilled request reads PIM rows on every segment's channel
    pim = {s for s, instrs in cp.program.streams.items() if s.startswith("pim")
           for ins in instrs if ins.mnemonic == "G_ACT"}
    assert {f"pim{s.channel}" for s in kp.segments} <= pim


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("system", ["neupims", "npu-pim-blocked"])
def test_spilled_kv_matches_pytorch(system, dtype):
    rep = validate("tiny-gpt", system, dtype=dtype, steps=2, prompt_lens=LENS,
                   channels=CHANNELS, overrides=ROWS,
                   options=CompileOptions(kv_placement="spill"))
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.max_errors()[1] < (2e-6 if dtype == "fp32" else 5e-3)


def test_spilled_prefill_fills_every_segment():
    from test_mapping_functional import run_prefill

    model = get_model("tiny-gpt").replace(dtype_bytes=4)
    worst, cp = run_prefill(model, [250, 250, 250], "neupims", overrides=tuple(ROWS))
    assert cp.plan.kv_placement == "spill" and cp.plan.kv_spilled >= 1
    assert worst["out"] < 2e-4 and worst["k"] < 1e-5 and worst["v"] < 1e-5, worst


def test_packed_rows_hold_a_single_kv_head_four_times_denser():
    """LLaMA-2 70B on 8 devices keeps one KV head each: a row of 4 key slots holds 4 token
    groups, a row of 4 value slots 4 runs, so 64 requests of 4,096 tokens fit the device
    (unpacked they needed 1.34 GB per channel of 0.54 GB free)."""
    m = get_model("llama2-70b")
    lay = PimKvLayout.create(banks=32, page_bytes=1024, elem_bytes=2, mults=16,
                             head_dim=m.head_dim, kv_heads=m.kv_heads_per_device(8), q_per_kv=8)
    assert (lay.key_pack, lay.value_pack) == (4, 4)
    assert lay.rows(4096) * lay.row_group_bytes() == lay.kv_bytes(4096)      # no padding


@pytest.mark.parametrize("policy", ["fixed", "rotate", "spill"])
def test_kv_placements_equal_those_of_their_constructors(policy):
    """place_kv_pim builds its frozen placements and segments without their constructor
    (mapping.memplan._frozen_maker): they equal the constructor's, field by field and in the
    instance dictionary's order."""
    import dataclasses

    m = get_model("tiny-gpt")
    b = Batch(tuple(Request(i, None, None, L, 0) for i, L in enumerate([250, 250, 250, 3])))
    cp = compile_model(m, b, load_config("neupims", ["memory.org.rows=8"] if policy == "spill"
                                         else []),
                       options=CompileOptions(channels="keep", kv_placement=policy))
    assert cp.plan.kv_placement == policy and cp.plan.kv
    for p in cp.plan.kv.values():
        for got in (p, *p.segments):
            ref = dataclasses.replace(got)
            assert ref == got and list(vars(ref).items()) == list(vars(got).items())

