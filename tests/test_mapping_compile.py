"""Compiled programs: MACs, dependencies, determinism, schedule and stream structure."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from archsim.config import load_config
from mapping import CompileOptions, compile_layer, compile_model
from mapping.builder import ROLES
from mapping.errors import MappingError
from mapping.schedule import stage_schedule
from mapping.verify import check_graph_dependencies, find_races, happens_before
from workloads.graph import OpKind
from workloads.models import get_model
from workloads.requests import Batch, Request, default_batch

LENS = [5, 40, 33, 17, 64, 9, 100, 1, 250, 12]


def _batch(lens=LENS):
    return Batch(tuple(Request(i, None, None, L) for i, L in enumerate(lens)))


SYSTEMS = ["neupims", "npu-only", "npu-pim-blocked"]
MODELS = ["tiny-gpt", "tiny-llama"]


@pytest.fixture(scope="module")
def compiled():
    cache = {}

    def get(model="tiny-gpt", system="neupims", layers="one", sets=(), lens=tuple(LENS)):
        key = (model, system, layers, sets, lens)
        if key not in cache:
            cfg = load_config(system, list(sets))
            m = get_model(model)
            f = compile_layer if layers == "one" else compile_model
            cache[key] = f(m, _batch(list(lens)), cfg)
        return cache[key]
    return get


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("model", MODELS)
def test_compiled_macs_equal_graph_macs_per_op(compiled, model, system):
    cp = compiled(model, system, "all")
    want = {n: a["flops"] // 2 for n, a in cp.graph.nodes(data=True)
            if a["kind"] in (OpKind.GEMM, OpKind.ATTENTION_SCORE, OpKind.ATTENTION_CONTEXT)}
    got = cp.macs_by_op()
    assert got == want
    assert cp.total_macs() == sum(want.values())


def test_macs_by_engine_follow_placement(compiled):
    pim = compiled("tiny-gpt", "neupims").macs_by_engine()
    npu = compiled("tiny-gpt", "npu-only").macs_by_engine()
    assert pim["pim"] > 0 and pim.get("vu", 0) == 0
    assert "pim" not in npu and npu["vu"] == pim["pim"] and npu["sa"] == pim["sa"]


@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("model", MODELS)
def test_every_graph_dependency_is_enforced_by_semaphores(compiled, model, system):
    for layers in ("one", "all"):
        cp = compiled(model, system, layers)
        hb = happens_before(cp.program)
        assert check_graph_dependencies(cp, hb) == []
        assert find_races(cp.program, cp.cfg, hb) == []


def test_dependencies_hold_with_three_balanced_sub_batches(compiled):
    cp = compiled("tiny-llama", "neupims", "all",
                  ("system.sub_batches=3", "system.sub_batch_policy=balanced_kv"))
    hb = happens_before(cp.program)
    assert check_graph_dependencies(cp, hb) == []
    assert find_races(cp.program, cp.cfg, hb) == []


def test_removing_a_wait_is_caught(compiled):
    cp = compiled("tiny-gpt", "neupims")
    prog = cp.program
    # drop the WAITs before the first GWRITE of a PIM stream: it reads q unordered
    name = next(s for s in prog.streams if s.startswith("pim"))
    k = next(i for i, ins in enumerate(prog.streams[name]) if ins.mnemonic == "GWRITE")
    from isa.encoding import Instruction
    broken = [Instruction("NOP") if i < k and ins.mnemonic == "WAIT" else ins
              for i, ins in enumerate(prog.streams[name])]
    saved = prog.streams[name]
    prog.streams[name] = broken
    try:
        hb = happens_before(prog)
        problems = check_graph_dependencies(cp, hb) + find_races(prog, cp.cfg, hb)
    finally:
        prog.streams[name] = saved
    assert problems


def test_compiling_twice_gives_byte_identical_programs():
    cfg = load_config("neupims")
    a = compile_model(get_model("tiny-llama"), _batch(), cfg)
    b = compile_model(get_model("tiny-llama"), _batch(), cfg)
    assert a.program.to_bytes() == b.program.to_bytes()
    assert a.program.to_text() == b.program.to_text()


@pytest.mark.parametrize("enabled", [True, False])
def test_compiling_leaves_the_callers_gc_setting_also_when_it_raises(enabled):
    """compile_layers turns the cyclic GC off while it builds, then restores the caller's
    setting (and collects only if the GC was on)."""
    cfg = load_config("neupims")
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        compile_layer(get_model("tiny-gpt"), _batch(), cfg)
        assert gc.isenabled() == enabled
        with pytest.raises(MappingError):
            compile_layer(get_model("tiny-gpt"), _batch(), cfg, phase="bogus")
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_identical_layers_differ_only_in_base_addresses():
    cfg = load_config("neupims")
    m = get_model("tiny-gpt")
    a = compile_layer(m, _batch(), cfg, layer=0)
    b = compile_layer(m, _batch(), cfg, layer=1)
    assert a.layer_key == b.layer_key
    assert list(a.program.streams) == list(b.program.streams)
    addr_fields = {"hbm", "row"}
    for s in a.program.streams:
        ia, ib = a.program.streams[s], b.program.streams[s]
        assert len(ia) == len(ib)
        for x, y in zip(ia, ib):
            assert x.mnemonic == y.mnemonic
            ox, oy = x.operands(), y.operands()
            assert {k: v for k, v in ox.items() if k not in addr_fields} == \
                   {k: v for k, v in oy.items() if k not in addr_fields}


def test_sub_batch_split_in_program_respects_channels(compiled):
    cp = compiled("tiny-gpt", "neupims", "one", (), tuple(range(1, 41)))
    sb = cp.sub_batches
    assert sorted(np.concatenate([sb.members(s) for s in range(sb.n_sub_batches)]).tolist()) \
        == list(range(40))
    ch = cp.batch.channels
    for c in np.unique(ch):
        per = np.bincount(sb.sub_batch[ch == c], minlength=2)
        assert per.max() - per.min() <= 1
    # each request's row in the hidden tensors is unique
    assert sorted(cp.row_of_request.tolist()) == list(range(40))


def test_stage_schedule_is_the_design_table_for_two_sub_batches():
    st = stage_schedule([0, 1, 2], 2)
    names = [s.name.split(":")[1] for s in st]
    assert names == ["A", "B", "C", "D", "C", "D", "E", "F"]
    fmt = [([f"{i.kind}{i.layer}.{i.sub}" for i in s.npu], [f"{i.kind}{i.layer}.{i.sub}"
                                                              for i in s.attn]) for s in st]
    assert fmt[0] == (["qkv0.0"], [])
    assert fmt[1] == (["qkv0.1"], ["attn0.0"])
    assert fmt[2] == (["pf0.0", "qkv1.0"], ["attn0.1"])
    assert fmt[3] == (["pf0.1", "qkv1.1"], ["attn1.0"])
    assert fmt[-2] == (["pf2.0"], ["attn2.1"])
    assert fmt[-1] == (["pf2.1"], [])


@pytest.mark.parametrize("n_sub", [1, 2, 3, 5])
def test_stage_schedule_runs_every_item_once_after_its_dependencies(n_sub):
    st = stage_schedule([3, 4, 5, 6], n_sub)
    where = {}
    for k, s in enumerate(st):
        for it in s.npu + s.attn:
            key = (it.kind, it.layer, it.sub)
            assert key not in where
            where[key] = (k, 0 if it in s.npu else 1)
    assert len(where) == 3 * 4 * n_sub
    for l in range(3, 7):
        for s in range(n_sub):
            assert where[("qkv", l, s)][0] < where[("attn", l, s)][0] <= where[("pf", l, s)][0]
            if l < 6:
                assert where[("pf", l, s)][0] <= where[("qkv", l + 1, s)][0]


def test_serial_schedule_without_interleaving(compiled):
    cp = compiled("tiny-gpt", "npu-pim-blocked")
    assert [s.split(":")[1] for s in cp.stages] == ["QKV(L0)", "ATTN(L0)", "PF(L0)"]


def test_streams_semaphores_and_roles_are_consistent(compiled):
    cp = compiled("tiny-llama", "neupims")
    prog = cp.program
    kinds = {s.rstrip("0123456789") for s in prog.streams}
    assert kinds == {"dma", "sa", "vu", "pim"}
    for s, instrs in prog.streams.items():
        assert instrs[-1].mnemonic == "END"
        assert len(cp.meta[s].op) == len(instrs)
        for ins, role in zip(instrs, cp.meta[s].role):
            assert (ins.mnemonic in ("SIGNAL", "WAIT", "END")) == (ROLES[role] == "sync")
    signals = sum(i.mnemonic == "SIGNAL" for v in prog.streams.values() for i in v)
    waits = sum(i["count"] for v in prog.streams.values() for i in v if i.mnemonic == "WAIT")
    assert signals == waits  # every signal is consumed


@pytest.mark.parametrize("size_mib,n", [(8, 5), (32, 16), (256, 24)])
def test_weight_ring_deepens_with_the_scratchpad(size_mib, n):
    """5 tiles per array at least (a preload-bound tile never waits), 1/8 of the scratchpad
    beyond that, at most 24 (issue 18)."""
    cfg = load_config("neupims", [f"npu.scratchpad.size_bytes={size_mib << 20}"])
    m = get_model("gpt3-7b")
    cp = compile_layer(m, default_batch(m, 8, "sharegpt", seed=0), cfg)
    assert cp.buffer_plan.weight_buffers == n
    assert len({i["spad"] for i in cp.program.streams["dma0"] if i.mnemonic == "DMA_LOAD"}) == n


def test_gemm_weight_tiles_are_multi_buffered():
    cfg = load_config("neupims", ["npu.scratchpad.size_bytes=8388608"])
    m = get_model("tiny-gpt")
    cp = compile_layer(m, default_batch(m, 4, "sharegpt", seed=0), cfg)
    prog = cp.program
    loads = [i["spad"] for i in prog.streams["dma0"] if i.mnemonic == "DMA_LOAD"]
    n = cp.buffer_plan.weight_buffers       # 5 on 8 MiB
    assert n == 5
    assert len(set(loads)) == n and loads[:n] == loads[n:2 * n]  # a ring of n tile buffers
    # the DMA of tiles t+1..t+n-1 does not wait for the matmul of tile t: no WAIT between the
    # first n loads of dma0 (the next one waits for the buffer of the first)
    seq = [i.mnemonic for i in prog.streams["dma0"]]
    pos = [k for k, m in enumerate(seq) if m == "DMA_LOAD"]
    assert "WAIT" not in seq[pos[0]:pos[n - 1]]


@pytest.mark.parametrize("ring", [2, 3])
def test_weight_ring_slot_reuse_is_ordered_and_its_missing_wait_is_caught(ring):
    """The GEMM tracks its weight ring with explicit events (a slot's load waits for the
    array's SA_LOADW of the slot's previous tile, the SA_LOADW for its load; not the slots'
    Buf hazard state): the programs are race-free, and without the WAIT before the first
    reuse of a slot the race checker finds the load overwriting a tile not yet loaded into
    the array."""
    m = get_model("tiny-gpt")
    cp = compile_layer(m, _batch([5, 40, 33]), load_config("neupims"),
                       options=CompileOptions(weight_buffers=ring))
    prog = cp.program
    hb = happens_before(prog)
    assert check_graph_dependencies(cp, hb) == [] and find_races(prog, cp.cfg, hb) == []
    seq = prog.streams["dma0"]
    pos = [k for k, ins in enumerate(seq) if ins.mnemonic == "DMA_LOAD"]
    assert len({seq[k]["spad"] for k in pos}) == ring
    k = pos[ring] - 1                          # the WAIT before the first reuse of slot 0
    assert seq[k].mnemonic == "WAIT"
    from isa.encoding import Instruction
    prog.streams["dma0"] = seq[:k] + [Instruction("NOP")] + seq[k + 1:]
    try:
        assert find_races(prog, cp.cfg, happens_before(prog))
    finally:
        prog.streams["dma0"] = seq


@pytest.mark.parametrize("size_bytes,ring", [(1310720, 2), (2097152, 5)])
def test_weight_buffers_fall_back_to_two_only_when_no_row_fits_beside_the_ring(size_bytes,
                                                                                ring):
    """5 tiles per array take 1.25 MiB: a 1.25 MiB scratchpad has no room left for a GEMM
    row, so the ring is cut to double buffering; 2 MiB keeps it (before issue 18 the ring was
    cut wherever it took more than 1/8 of the scratchpad)."""
    with pytest.raises(MappingError, match="weight_buffers = 1"):
        CompileOptions(weight_buffers=1)
    cfg = load_config("neupims", [f"npu.scratchpad.size_bytes={size_bytes}"])
    cp = compile_layer(get_model("tiny-gpt"), default_batch(get_model("tiny-gpt"), 4,
                                                            "sharegpt", seed=0), cfg)
    loads = {i["spad"] for i in cp.program.streams["dma0"] if i.mnemonic == "DMA_LOAD"}
    assert len(loads) == ring == cp.buffer_plan.weight_buffers


def test_op_and_stage_correspondence(compiled):
    cp = compiled("tiny-gpt", "neupims")
    got = cp.op_instructions("L0.qkv")
    assert set(got) >= {f"sa{i}" for i in range(1)} and all(len(v) for v in got.values())
    mn = {cp.program.streams[s][i].mnemonic for s, ix in got.items() for i in ix}
    assert {"SA_MATMUL", "SA_LOADW", "DMA_LOAD", "VU_COPY"} <= mn
    st = cp.stage_instructions(cp.stages[1])
    assert any(s.startswith("pim") for s in st)
    with pytest.raises(Exception, match="no operator 'nope'"):
        cp.op_instructions("nope")


def test_summary_has_the_documented_fields(compiled):
    s = compiled("tiny-gpt", "neupims").summary()
    for key in ("instruction_counts", "bytes_by_engine", "macs_by_engine",
                "kv_footprint_bytes_per_channel", "sub_batches", "stages", "buffer_plan",
                "kv_placement", "kv_spilled_requests"):
        assert key in s
    assert s["macs_total"] == sum(s["macs_by_engine"].values())


def test_tensor_parallel_emits_allreduce_points():
    cfg = load_config("neupims", ["system.tensor_parallel=2"])
    cp = compile_layer(get_model("tiny-gpt"), _batch(), cfg)
    links = cp.link_instructions()
    ops = [c["op"] for c in links]
    assert ops == ["L0.proj_allreduce", "L0.ffn_allreduce"] * 2
    assert all(c["instruction"] == "ALL_REDUCE" and c["group"] == 2 and c["algo"] == "ring"
               and c["bytes"] > 0 for c in links)
    assert not any(i.mnemonic == "NOP" for v in cp.program.streams.values() for i in v)
    assert cp.tp == 2
    hb = happens_before(cp.program)
    assert check_graph_dependencies(cp, hb) == []
    # each device holds half of the heads
    assert cp.tensors["L0.qkv_w"].shape == (128, 3 * 128 // 2)


def test_options_value_run_and_dtype():
    cfg = load_config("neupims")
    cp = compile_layer(get_model("tiny-gpt"), _batch(), cfg,
                       options=CompileOptions(value_run=512, dtype="bf16"))
    assert cp.plan.pim_layout.run == 512
    assert cp.program.data[0].dtype == "bf16"


@pytest.mark.parametrize("system", ["neupims", "npu-only"])
@pytest.mark.parametrize("model", MODELS)
def test_prefill_macs_dependencies_and_races(model, system):
    cfg = load_config(system)
    cp = compile_model(get_model(model), _batch([3, 40, 130, 17]), cfg, phase="prefill")
    want = {n: a["flops"] // 2 for n, a in cp.graph.nodes(data=True)
            if a["kind"] in (OpKind.GEMM, OpKind.ATTENTION_SCORE, OpKind.ATTENTION_CONTEXT)}
    assert cp.macs_by_op() == want
    assert "pim" not in cp.macs_by_engine()
    hb = happens_before(cp.program)
    assert check_graph_dependencies(cp, hb) == []
    assert find_races(cp.program, cfg, hb) == []


def _waits_while_a_pim_row_is_open(program) -> list[tuple[str, int, int]]:
    """``(stream, position of the PIM_HEADER/G_ACT opening the row, position of the WAIT)`` of
    every WAIT between a PIM row's announcement (PIM_HEADER, else G_ACT) and its
    PIM_PRECHARGE, on every PIM stream."""
    bad = []
    for s, instrs in program.streams.items():
        if not s.startswith("pim"):
            continue
        opened = None
        for k, ins in enumerate(instrs):
            m = ins.mnemonic
            if m in ("PIM_HEADER", "G_ACT"):
                opened = k if opened is None else opened
            elif m == "PIM_PRECHARGE":
                opened = None
            elif m == "WAIT" and opened is not None:
                bad.append((s, opened, k))
        assert opened is None, f"{s}: PIM row opened at {opened} never precharged"
    return bad


@pytest.mark.parametrize("system", ["neupims", "npu-pim-blocked"])
@pytest.mark.parametrize("model", MODELS)
def test_no_pim_stream_waits_while_it_holds_a_pim_row_open(compiled, model, system):
    """The controller postpones refresh while a PIM row is open, so a PIM stream waiting on
    another engine between G_ACT and PIM_PRECHARGE could starve refresh (REFRESH_INTERVAL)."""
    for layers in ("one", "all"):
        prog = compiled(model, system, layers).program
        assert sum(i.mnemonic == "G_ACT" for v in prog.streams.values() for i in v) > 0
        assert _waits_while_a_pim_row_is_open(prog) == []


def test_no_pim_stream_waits_while_it_holds_a_pim_row_open_on_a_gpt3_layer():
    """The GPT3-7B decode layer (16 ShareGPT requests) that starved refresh before."""
    from workloads import default_batch

    model = get_model("gpt3-7b").replace(n_layers=1)
    cp = compile_layer(model, default_batch(model, 16, "sharegpt", seed=0),
                       load_config("neupims"))
    assert _waits_while_a_pim_row_is_open(cp.program) == []


def test_pim_attention_split_into_head_units_is_checked_unit_by_unit():
    # GPT3-7B decode on PIM does a request's attention in several units of KV heads; the scores
    # of unit k+1 are computed before the softmax of unit k reads its own scores. The graph
    # check used to pair them as one operator and report 48 false edges here.
    model = get_model("gpt3-7b").replace(d_ff=1024)
    cp = compile_layer(model, default_batch(model, n=16), load_config("neupims"))
    score = next(k for k, o in enumerate(cp.ops) if ".attn_score." in o)
    units = {(int(p) >> 20) & 0xFFFFF for m in cp.meta.values() for p in m.part[m.op == score]}
    assert len(units) > 1 and 0 not in units
    assert check_graph_dependencies(cp, happens_before(cp.program)) == []


def test_kv_appends_of_a_depth_step_are_interleaved_across_channels():
    """A request's KV append is many scattered stores into ONE channel; the appends of the
    requests that start attention together (one per channel) are interleaved store by store,
    so that consecutive stores of an attention DMA stream go to different channels."""
    from archsim.memory.addrmap import AddressMapping

    cfg = load_config("neupims")
    model = get_model("tiny-gpt")
    cp = compile_layer(model, _batch([40] * 16), cfg)
    amap = AddressMapping(cfg.memory)
    names = {i for i, n in enumerate(cp.ops) if ".kv_append." in n}
    for s, ins in cp.program.streams.items():
        if not s.startswith("dma"):
            continue
        chans = [amap.decode(i["hbm"])[0] for j, i in enumerate(ins)
                 if i.mnemonic == "DMA_STORE" and cp.meta[s].op[j] in names]
        if len(set(chans)) < 2:
            continue
        switches = sum(a != b for a, b in zip(chans, chans[1:]))
        assert switches >= len(chans) // 2, (s, chans[:20])
        return
    raise AssertionError("no attention DMA stream stores KV into two channels")


def test_tiles_the_arrays_load_together_are_neighbours_in_memory(compiled):
    cp = compiled("tiny-gpt", "neupims")
    t = cp.tensors["L0.ffn1_w"]
    k, n = t.shape
    H, W = t.tile
    kb = 0
    for nb in range(n // W - 1):
        assert t.tile_offset(kb, nb + 1) - t.tile_offset(kb, nb) == H * W * t.elem_bytes
    assert t.tile_offset(1, 0) == H * n * t.elem_bytes


def test_prefill_is_one_sub_batch_even_with_interleaving_on():
    """Sub-batch interleaving overlaps PIM attention with the NPU; prefill attention runs on
    the NPU, so the compiler does not split a prefill (decode of the same batch is split)."""
    cfg = load_config("neupims")
    assert cfg.system.sub_batches == 2
    pf = compile_layer(get_model("tiny-gpt"), _batch([3, 40, 130, 17]), cfg, phase="prefill")
    dec = compile_layer(get_model("tiny-gpt"), _batch([3, 40, 130, 17]), cfg)
    assert pf.sub_batches.n_sub_batches == 1 and dec.sub_batches.n_sub_batches == 2


def test_a_stream_that_wrote_part_of_a_buffer_still_waits_for_the_other_writers():
    """Prefill attention on every VU reads pf_qkv from DMA queues that also stored parts of it:
    each such read waits for the other queues' stores (a race before the hazard fix)."""
    cfg = load_config("npu-only")
    cp = compile_model(get_model("tiny-gpt"), _batch([3, 40, 130, 17]), cfg, phase="prefill")
    softmax = {s for n in cp.ops if "attn_softmax" in n for s in cp.op_instructions(n)
               if s.startswith("vu")}
    assert len(softmax) == cfg.npu.vector.count          # all eight VUs share the attention
    assert find_races(cp.program, cfg) == []


@pytest.mark.parametrize("model,phase", [("tiny-gpt", "decode"), ("tiny-mixtral", "decode"),
                                         ("tiny-llama", "prefill")])
def test_layer_stack_graph_equals_the_layer_by_layer_compose(model, phase):
    """The compiler's operator graph of a layer stack (built in place, one compose) is the
    graph of composing the layer graphs one after another, in every order it keeps: nodes,
    edges, each node's successors and predecessors, attributes."""
    import networkx as nx

    from mapping.compiler import _resolve_tp
    from mapping.layergraph import stack_graph
    from mapping.moe import resolve_routing
    from workloads.graph import build_layer_graph

    m = get_model(model)
    cfg = load_config("neupims")
    b = default_batch(m, 4, n_channels=None)
    tp = _resolve_tp(m, cfg)
    layers = list(range(min(m.n_layers, 3)))
    routing = resolve_routing(m, b, cfg, phase, layers, None)
    ref, prev = nx.DiGraph(), None
    for l in layers:
        gl = build_layer_graph(m, phase, b, tp=tp, layer=l, routing=routing)
        ref = nx.compose(ref, gl)
        if prev is not None:
            size = gl.graph["tokens"] * m.d_model * m.dtype_bytes
            ref.add_edge(f"L{prev}.ffn_residual", f"L{l}.attn_norm", tensor="hidden",
                         size_bytes=size)
            ref.add_edge(f"L{prev}.ffn_residual", f"L{l}.attn_residual", tensor="residual",
                         size_bytes=size)
        prev = l
    ref.graph.update(model=m.name, phase=phase, tp=tp, layers=layers,
                     requests=gl.graph["requests"], routing=gl.graph.get("routing"))
    got = stack_graph(m, b, phase, tp, layers, routing)
    assert len(layers) > 1
    assert list(got.nodes(data=True)) == list(ref.nodes(data=True))
    assert list(got.edges(data=True)) == list(ref.edges(data=True))
    assert all(list(got.pred[n]) == list(ref.pred[n]) for n in ref)
    assert list(got.graph.items()) == list(ref.graph.items())
