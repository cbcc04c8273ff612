"""Mixed (chunked-prefill) programs: decode steps and prompt chunks in one compiled program.

Values against the PyTorch reference (each request alone, its cached prefix in the cache), a
chunked prompt equal to the unchunked one, decode steps unchanged by a chunk riding along, and
the program identities: a mixed program without chunks is the decode program, one without
decode steps the prefill program.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from archsim.config import load_config  # noqa: E402
from archsim.functional import FunctionalMachine, round_to  # noqa: E402
from mapping import verify  # noqa: E402
from mapping.compiler import compile_layer  # noqa: E402
from mapping.errors import UnsupportedError  # noqa: E402
from mapping.subbatch import split_with_chunks  # noqa: E402
from test_mapping_functional import _layer_params, _read_at, _write_at  # noqa: E402
from workloads.graph import build_layer_graph  # noqa: E402
from workloads.models import get_model  # noqa: E402
from workloads.reference import KVCache, reference_layer, rope_cos_sin  # noqa: E402
from workloads.requests import Batch, Request  # noqa: E402


def _mixed(specs, channels=None):
    """Batch of ``(seq_len, q_tokens)`` pairs (ids 0..n-1)."""
    return Batch(tuple(Request(i, None, None, L, None if channels is None else channels[i],
                               q_tokens=q) for i, (L, q) in enumerate(specs)))


class _Run:
    """One compiled layer-0 program run functionally on given inputs and cached K/V."""

    def __init__(self, model, cfg, batch, phase, seed=0, xs=None, past=None):
        self.cp = cp = compile_layer(model, batch, cfg, phase=phase)
        self.dt = dt = cp.program.data[0].dtype
        fm = FunctionalMachine(cp.program, cfg)
        ref = reference_layer(model, seed=seed, layer_index=0, dtype=torch.float64)
        for name, v in _layer_params(ref, model).items():
            tp = cp.tensors[f"L0.{name}"]
            fm.hbm.write_tensor(tp.name, tp.to_image(v.reshape(tp.shape)))
        if model.positional == "rope":
            cos, sin = rope_cos_sin(torch.tensor(cp.rope_positions()), model.head_dim,
                                    model.rope_theta, torch.float64)
            h = model.head_dim // 2
            fm.hbm.write_tensor("rope", np.stack([cos[:, :h].numpy(), sin[:, :h].numpy()],
                                                 axis=1))
        q = cp.q_tokens
        for i, x in enumerate(xs):
            _write_at(fm, cp.hidden_token_addresses(0, i), x, dt)
            L = int(cp.batch.seq_lens[i])
            P = L - int(q[i])
            if P:
                k, v = past[i]
                ka, va = cp.kv_addresses(0, i)
                _write_at(fm, ka[:P], k[:P], dt)
                _write_at(fm, va[:P], v[:P], dt)
        fm.run()
        self.fm, self.ref = fm, ref
        self.out = [_read_at(fm, cp.hidden_token_addresses(1, i), dt) for i in range(len(xs))]
        self.kv = [tuple(_read_at(fm, a, dt) for a in cp.kv_addresses(0, i))
                   for i in range(len(xs))]


def _reference(model, ref, dt, x, past_k, past_v):
    """The reference layer on ``x [q, d]`` after a cached prefix (``past_* [P, kv, hd]``);
    returns the outputs and the whole cache ``K, V [P + q, kv, hd]``."""
    with torch.no_grad():
        for prm in ref.parameters():
            prm.copy_(torch.tensor(round_to(prm.detach().numpy(), dt), dtype=torch.float64))
        cache = KVCache()
        if len(past_k):
            cache.append(torch.tensor(round_to(past_k, dt), dtype=torch.float64)
                         .permute(1, 0, 2)[None],
                         torch.tensor(round_to(past_v, dt), dtype=torch.float64)
                         .permute(1, 0, 2)[None])
        out = ref(torch.tensor(round_to(x, dt), dtype=torch.float64)[None], cache)[0].numpy()
    return out, cache.k[0].permute(1, 0, 2).numpy(), cache.v[0].permute(1, 0, 2).numpy()


def _inputs(model, specs, seed=1):
    rng = np.random.default_rng(seed)
    kv, hd = model.n_kv_heads, model.head_dim
    xs = [rng.standard_normal((q, model.d_model)) for _, q in specs]
    past = [(rng.standard_normal((L - q, kv, hd)), rng.standard_normal((L - q, kv, hd)))
            for L, q in specs]
    return xs, past


SPECS = [(5, 1), (70, 30), (33, 1), (40, 8), (64, 1), (37, 37), (17, 1), (140, 100)]
"""Decode steps (q = 1), chunks after a cached prefix, a whole prompt (37, 37); a chunk of
100 rows needs a query tile of 100 over 140 keys."""


@pytest.mark.parametrize("system,name", [
    ("neupims", "tiny-gpt"), ("neupims", "tiny-llama"), ("npu-only", "tiny-gpt"),
    ("npu-only", "tiny-llama"), ("npu-pim-blocked", "tiny-llama")])
def test_mixed_layer_matches_reference_and_appends_the_chunks(system, name):
    model = get_model(name).replace(dtype_bytes=4)
    cfg = load_config(system)
    xs, past = _inputs(model, SPECS)
    run = _Run(model, cfg, _mixed(SPECS), "mixed", xs=xs, past=past)
    assert run.cp.phase == "mixed" and int(run.cp.q_tokens.sum()) == sum(q for _, q in SPECS)
    for i, (L, q) in enumerate(SPECS):
        out, rk, rv = _reference(model, run.ref, run.dt, xs[i], *past[i])
        scale = max(1.0, np.abs(out).max())
        assert np.abs(run.out[i] - out).max() < 2e-4 * scale, (i, L, q)
        k, v = run.kv[i]
        assert np.abs(k[L - q:] - rk[L - q:]).max() < 1e-5 * max(1.0, np.abs(rk).max()), i
        assert np.abs(v[L - q:] - rv[L - q:]).max() < 1e-5 * max(1.0, np.abs(rv).max()), i
        # the cached prefix is read, never overwritten
        assert np.array_equal(k[:L - q], round_to(past[i][0], run.dt)), i


@pytest.mark.parametrize("name,sets", [("tiny-llama", ()), ("tiny-mixtral", ()),
                                       ("tiny-mixtral", ("system.expert_parallel=2",))])
def test_mixed_program_is_race_free_and_enforces_the_graph(name, sets):
    """Dense and mixture-of-experts layers (the routing covers each request's q_tokens rows,
    expert parallelism splits the requests over devices)."""
    model = get_model(name)
    cfg = load_config("neupims", list(sets))
    cp = compile_layer(model, _mixed(SPECS), cfg, phase="mixed")
    hb = verify.happens_before(cp.program)
    assert verify.check_graph_dependencies(cp, hb) == []
    assert verify.find_races(cp.program, cp.cfg, hb) == []
    if cp.routing is not None:
        assert cp.routing.n_tokens == sum(q for _, q in SPECS)
        assert int(cp.q_tokens.sum()) == sum(q for _, q in SPECS[::cp.expert_parallel])


@pytest.mark.parametrize("system", ["neupims", "npu-only"])
def test_chunked_prompt_equals_the_unchunked_prompt_bitwise(system):
    """A 100-token prompt prefilled whole, or as chunks of 40 and 60 tokens (the second after
    the first's K/V, read back from the device's cache) riding along with decode steps:
    the same fp16 outputs and KV cache, bit for bit."""
    model = get_model("tiny-llama")
    cfg = load_config(system)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((100, model.d_model))
    whole = _Run(model, cfg, _mixed([(100, 100)]), "prefill", xs=[x], past=[None])
    dec = [(33, 1), (9, 1)]
    dxs, dpast = _inputs(model, dec, seed=4)
    first = _Run(model, cfg, _mixed(dec + [(40, 40)]), "mixed", xs=dxs + [x[:40]],
                 past=dpast + [None])
    k40, v40 = first.kv[2]
    second = _Run(model, cfg, _mixed(dec + [(100, 60)]), "mixed", xs=dxs + [x[40:]],
                  past=dpast + [(k40[:40], v40[:40])])
    assert np.array_equal(np.concatenate([first.out[2], second.out[2]]), whole.out[0])
    for a, b in zip(second.kv[2], whole.kv[0]):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("system", ["neupims", "npu-only"])
def test_decode_steps_are_unchanged_by_a_chunk_riding_along(system):
    model = get_model("tiny-gpt")
    cfg = load_config(system)
    dec = [(5, 1), (33, 1), (64, 1), (17, 1), (129, 1)]
    xs, past = _inputs(model, dec + [(90, 50)], seed=5)
    alone = _Run(model, cfg, _mixed(dec), "decode", xs=xs[:5], past=past[:5])
    mixed = _Run(model, cfg, _mixed(dec + [(90, 50)]), "mixed", xs=xs, past=past)
    for i in range(5):
        assert np.array_equal(mixed.out[i], alone.out[i]), i
        assert all(np.array_equal(a, b) for a, b in zip(mixed.kv[i], alone.kv[i])), i


def test_mixed_row_blocks_split_decode_and_chunk_rows():
    """A small scratchpad cuts a sub-batch into row blocks, one of them holding decode rows and
    chunk rows (the copy seams of mapping.codegen.mixed): values still match."""
    model = get_model("tiny-llama").replace(dtype_bytes=4)
    cfg = load_config("neupims", ["npu.scratchpad.size_bytes=1245184",
                                  "system.sub_batches=1"])
    specs = [(5 + 3 * i, 1) for i in range(6)] + [(60, 24)]
    xs, past = _inputs(model, specs, seed=6)
    run = _Run(model, cfg, _mixed(specs), "mixed", xs=xs, past=past)
    assert run.cp.row_block < 30
    for i in range(len(specs)):
        out, _, _ = _reference(model, run.ref, run.dt, xs[i], *past[i])
        assert np.abs(run.out[i] - out).max() < 2e-4 * max(1.0, np.abs(out).max()), i


@pytest.mark.parametrize("system,sets", [("neupims", ()), ("npu-only", ()),
                                         ("neupims", ("system.sub_batches=3",))])
def test_mixed_without_chunks_is_the_decode_program(system, sets):
    model = get_model("tiny-llama")
    cfg = load_config(system, list(sets))
    lens = [5, 33, 40, 129, 9, 17]
    a = compile_layer(model, _mixed([(L, 1) for L in lens]), cfg, phase="mixed")
    b = compile_layer(model, _mixed([(L, None) for L in lens]), cfg, phase="decode")
    assert a.program.streams == b.program.streams


def test_mixed_without_decode_steps_is_the_prefill_program():
    model = get_model("tiny-llama")
    cfg = load_config("neupims")
    lens = [3, 37, 140]
    a = compile_layer(model, _mixed([(L, L) for L in lens]), cfg, phase="mixed")
    b = compile_layer(model, _mixed([(L, None) for L in lens]), cfg, phase="prefill")
    assert a.sub_batches.n_sub_batches == 1
    assert a.program.streams == b.program.streams


def test_chunks_join_the_sub_batch_with_the_fewest_rows():
    sub = split_with_chunks([10, 20, 30, 40, 50, 60], None, [1, 1, 1, 200, 1, 30], 2)
    # decode steps 0, 1, 2, 4 split 2 / 2; the 200-row chunk joins sub-batch 0, the 30-row one
    # then the lighter sub-batch 1
    assert sub.sub_batch.tolist() == [0, 0, 1, 0, 1, 1]


def test_graph_of_a_mixed_iteration_places_decode_on_pim_and_chunks_on_the_arrays():
    from mapping.placement import place_graph

    model = get_model("tiny-llama")
    g = build_layer_graph(model, "mixed", _mixed([(30, 1), (50, 20)]))
    assert g.graph["tokens"] == 21
    assert g.nodes["L0.qkv"]["shape"]["m"] == 21
    assert g.nodes["L0.attn_score.r0"]["phase"] == "decode"
    assert g.nodes["L0.attn_score.r1"]["shape"]["m"] == 20 * model.n_heads // model.n_kv_heads
    pl = place_graph(g, ("npu", "pim"), details={"ffn_act": model.activation})
    assert pl["L0.attn_score.r0"].engine == "pim" and pl["L0.attn_score.r1"].engine == "sa"


def test_a_chunk_in_a_decode_or_prefill_program_is_refused():
    model = get_model("tiny-llama")
    cfg = load_config("neupims")
    with pytest.raises(UnsupportedError, match="phase 'mixed'"):
        compile_layer(model, _mixed([(30, 1), (50, 20)]), cfg, phase="prefill")
    with pytest.raises(UnsupportedError, match="phase 'mixed'"):
        compile_layer(model, _mixed([(30, 2)]), cfg, phase="decode")


@pytest.mark.parametrize("system,name", [("neupims", "tiny-llama-long"), ("npu-only", "tiny-gpt")])
def test_chunks_in_key_blocks_match_reference(system, name, monkeypatch, tmp_path):
    """A chunk longer than the buffer plan's key block (attention may take 1 % of a 2 MiB
    scratchpad: blocks of 128 tokens) runs block by block: the blocks before its first row
    partly or wholly from the KV cache, query tiles cut where a block starts inside the chunk
    (prefixes 270, 257, 150 are not block multiples), race-free and graph-enforcing."""
    import json

    from mapping import bufplan
    from test_mapping_longctx import TINY_LLAMA_LONG
    from workloads.models import load_hf_config

    monkeypatch.setattr(bufplan, "ATTN_SHARE", 0.01)
    if name == "tiny-llama-long":
        p = tmp_path / "config.json"
        p.write_text(json.dumps(TINY_LLAMA_LONG))
        model = load_hf_config(str(p)).replace(dtype_bytes=4)
        specs = [(300, 1), (400, 130), (270, 13)]
    else:
        model = get_model(name).replace(dtype_bytes=4)
        specs = [(250, 1), (250, 100), (200, 200), (190, 40), (130, 1)]
    cfg = load_config(system, ["npu.scratchpad.size_bytes=2097152"])
    xs, past = _inputs(model, specs)
    run = _Run(model, cfg, _mixed(specs), "mixed", xs=xs, past=past)
    assert run.cp.buffer_plan.attn_block_tokens == 128 and run.cp.buffer_plan.attn_blocks_max > 1
    for i, (L, q) in enumerate(specs):
        out, rk, rv = _reference(model, run.ref, run.dt, xs[i], *past[i])
        assert np.abs(run.out[i] - out).max() < 1e-6 * max(1.0, np.abs(out).max()), (i, L, q)
        k, v = run.kv[i]
        assert np.abs(k[L - q:] - rk[L - q:]).max() < 1e-5 * max(1.0, np.abs(rk).max()), i
        assert np.abs(v[L - q:] - rv[L - q:]).max() < 1e-5 * max(1.0, np.abs(rv).max()), i
        assert np.array_equal(k[:L - q], round_to(past[i][0], run.dt)), i
    hb = verify.happens_before(run.cp.program)
    assert verify.check_graph_dependencies(run.cp, hb) == []
    assert verify.find_races(run.cp.program, run.cp.cfg, hb) == []
