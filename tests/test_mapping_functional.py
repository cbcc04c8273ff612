"""Compiled programs compute the layer: functional execution against the PyTorch reference.

This is the mapper's own end-to-end check (the full validation CLI is issue 7): weights, past
K/V and inputs are written where :class:`mapping.CompiledProgram` says they live, the program
runs in :mod:`archsim.functional`, and every request's output row must match the reference
decoder layer run on that request alone.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from archsim.config import load_config  # noqa: E402
from archsim.functional import FunctionalMachine, values_to_bytes  # noqa: E402
from mapping.compiler import compile_layer, compile_model  # noqa: E402
from workloads.models import get_model  # noqa: E402
from workloads.reference import KVCache, reference_layer, rope_cos_sin  # noqa: E402
from workloads.requests import Batch, Request  # noqa: E402


def _batch(lens, channels=None):
    return Batch(tuple(Request(i, None, None, L, None if channels is None else channels[i])
                       for i, L in enumerate(lens)))


def _write_at(fm: FunctionalMachine, addrs: np.ndarray, values: np.ndarray, dtype: str) -> None:
    """Write ``values`` element by element at byte addresses ``addrs`` (same shape)."""
    es = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    raw = values_to_bytes(np.asarray(values, dtype=np.float32).reshape(-1), dtype).reshape(-1, es)
    a = np.asarray(addrs).reshape(-1)
    mem = fm.hbm
    for alloc in mem.allocs:
        sel = (a >= alloc.addr) & (a < alloc.end)
        if not sel.any():
            continue
        off = a[sel] - alloc.addr
        buf = mem.buffers[alloc.name]
        for k in range(es):
            buf[off + k] = raw[sel, k]
        a = np.where(sel, -1, a)
    assert (a == -1).all(), "address outside every allocation"


def _read_at(fm: FunctionalMachine, addrs: np.ndarray, dtype: str) -> np.ndarray:
    from archsim.functional import bytes_to_values
    es = {"fp16": 2, "bf16": 2, "fp32": 4}[dtype]
    a = np.asarray(addrs).reshape(-1)
    out = np.zeros((a.size, es), dtype=np.uint8)
    for alloc in fm.hbm.allocs:
        sel = (a >= alloc.addr) & (a < alloc.end)
        off = a[sel] - alloc.addr
        for k in range(es):
            out[sel, k] = fm.hbm.buffers[alloc.name][off + k]
    return bytes_to_values(out.reshape(-1), dtype, np.asarray(addrs).shape)


def _layer_params(ref, model):
    """Parameters of a reference layer under the mapper's tensor names (tp = 1)."""
    p = {}
    ln = model.norm == "layernorm"
    t = lambda x: x.detach().double().numpy()  # noqa: E731
    p["attn_norm"] = np.stack([t(ref.attn_norm_weight), t(ref.attn_norm_bias)]) if ln else \
        t(ref.attn_norm_weight)[None]
    p["ffn_norm"] = np.stack([t(ref.ffn_norm_weight), t(ref.ffn_norm_bias)]) if ln else \
        t(ref.ffn_norm_weight)[None]
    for name in ("qkv", "proj", "ffn_gate", "ffn1", "ffn2"):
        w = getattr(ref, name + "_weight", None)
        if w is not None:
            p[name + "_w"] = t(w)
        b = getattr(ref, name + "_bias", None)
        if b is not None:
            p[name + "_b"] = t(b)
    return p


def run_layers(model, lens, system="neupims", overrides=(), seed=0, layers=(0,),
               options=None, dtype=torch.float64):
    """Compile ``layers`` for a batch of ``lens``, run functionally, return (out, ref, cp)."""
    cfg = load_config(system, list(overrides))
    batch = _batch(lens)
    if len(layers) == model.n_layers:
        cp = compile_model(model, batch, cfg, options=options)
    else:
        cp = compile_layer(model, batch, cfg, layer=layers[0], options=options)
    dt = cp.program.data[0].dtype
    fm = FunctionalMachine(cp.program, cfg)
    rng = np.random.default_rng(seed)
    n, d = len(lens), model.d_model
    x = rng.standard_normal((n, d))
    refs = {l: reference_layer(model, seed=seed, layer_index=l, dtype=dtype) for l in layers}
    # inputs
    _write_at(fm, cp.hidden_row_addresses(layers[0])[:, None] + np.arange(d) * (
        4 if dt == "fp32" else 2), x, dt)
    for l in layers:
        for name, v in _layer_params(refs[l], model).items():
            tp = cp.tensors[f"L{l}.{name}"]
            fm.hbm.write_tensor(tp.name, tp.to_image(v.reshape(tp.shape)))
    if model.positional == "rope":
        pos = cp.rope_positions()
        cos, sin = rope_cos_sin(torch.tensor(pos), model.head_dim, model.rope_theta,
                                torch.float64)
        h = model.head_dim // 2
        fm.hbm.write_tensor("rope", np.stack([cos[:, :h].numpy(), sin[:, :h].numpy()], axis=1))
    past = {}
    for l in layers:
        for i, L in enumerate(lens):
            kv, hd = model.n_kv_heads, model.head_dim
            k = rng.standard_normal((L - 1, kv, hd))
            v = rng.standard_normal((L - 1, kv, hd))
            past[(l, i)] = (k, v)
            ka, va = cp.kv_addresses(l, i)
            if L > 1:
                _write_at(fm, ka[:L - 1], k, dt)
                _write_at(fm, va[:L - 1], v, dt)
    fm.run()
    out = _read_at(fm, cp.hidden_row_addresses(layers[-1] + 1)[:, None]
                   + np.arange(d) * (4 if dt == "fp32" else 2), dt)
    # reference: each request alone, with its past K/V (rounded like the device's storage)
    from archsim.functional import round_to
    ref = np.zeros((n, d))
    for i, L in enumerate(lens):
        h = torch.tensor(round_to(x[i], dt), dtype=dtype)[None, None, :]
        for l in layers:
            layer = refs[l]
            with torch.no_grad():
                for prm in layer.parameters():
                    prm.copy_(torch.tensor(round_to(prm.detach().numpy(), dt), dtype=dtype))
            cache = KVCache()
            k, v = past[(l, i)]
            if L > 1:
                cache.append(torch.tensor(round_to(k, dt), dtype=dtype).permute(1, 0, 2)[None],
                             torch.tensor(round_to(v, dt), dtype=dtype).permute(1, 0, 2)[None])
            with torch.no_grad():
                # the reference positions come from the cache length (= L - 1)
                h = layer(h, cache)
        ref[i] = h[0, 0].numpy()
    return out, ref, cp


@pytest.mark.parametrize("system", ["neupims", "npu-only", "npu-pim-blocked"])
@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_one_layer_matches_reference_fp32(system, name):
    model = get_model(name).replace(dtype_bytes=4)
    lens = [1, 5, 33, 40, 17, 64, 129, 9]
    out, ref, cp = run_layers(model, lens, system)
    err = np.abs(out - ref).max()
    assert err < 2e-4 * max(1.0, np.abs(ref).max()), f"max abs error {err}"


@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_fp16_outputs_are_bitwise_identical_across_systems_and_sub_batches(name):
    """Same dtype, same reduction order: the request's output does not depend on the system
    (PIM or NPU attention), its channel or its sub-batch (DESIGN §5 / issue 7 invariance)."""
    model = get_model(name)
    lens = [1, 33, 40, 129, 9]
    outs = {}
    for system, sets in (("neupims", ()), ("npu-only", ()),
                         ("neupims", ("system.sub_batches=3", "system.channel_policy=round_robin",
                                      "system.sub_batch_policy=balanced_kv"))):
        out, ref, _ = run_layers(model, lens, system, overrides=sets)
        assert np.abs(out - ref).max() < 0.05 * max(1.0, np.abs(ref).max())
        outs[(system, sets)] = out
    first = next(iter(outs.values()))
    for key, out in outs.items():
        assert np.array_equal(out, first), f"{key} differs from neupims"


def test_two_layers_compiled_together_match_reference():
    model = get_model("tiny-llama").replace(dtype_bytes=4)
    out, ref, cp = run_layers(model, [3, 50, 7, 31, 16], "neupims", layers=(0, 1))
    assert cp.layers == [0, 1]
    assert np.abs(out - ref).max() < 2e-4 * max(1.0, np.abs(ref).max())


def test_row_blocks_when_a_sub_batch_does_not_fit_the_scratchpad():
    model = get_model("tiny-llama").replace(dtype_bytes=4)
    lens = [5 + 3 * i for i in range(12)]
    out, ref, cp = run_layers(model, lens, "neupims",
                              overrides=("npu.scratchpad.size_bytes=1245184",))
    assert cp.row_block < 6
    assert np.abs(out - ref).max() < 2e-4 * max(1.0, np.abs(ref).max())


def run_prefill(model, lens, system="neupims", overrides=(), seed=0, dtype=torch.float64):
    """Compile a prefill of ``lens`` prompt tokens (layer 0), run it, return outputs, K/V read
    back from the cache, and the reference's outputs and K/V."""
    cfg = load_config(system, list(overrides))
    cp = compile_layer(model, _batch(lens), cfg, phase="prefill")
    dt = cp.program.data[0].dtype
    es = 4 if dt == "fp32" else 2
    fm = FunctionalMachine(cp.program, cfg)
    rng = np.random.default_rng(seed)
    ref_layer = reference_layer(model, seed=seed, layer_index=0, dtype=dtype)
    for name, v in _layer_params(ref_layer, model).items():
        tp = cp.tensors[f"L0.{name}"]
        fm.hbm.write_tensor(tp.name, tp.to_image(v.reshape(tp.shape)))
    if model.positional == "rope":
        pos = cp.rope_positions()
        cos, sin = rope_cos_sin(torch.tensor(pos), model.head_dim, model.rope_theta,
                                torch.float64)
        h = model.head_dim // 2
        fm.hbm.write_tensor("rope", np.stack([cos[:, :h].numpy(), sin[:, :h].numpy()], axis=1))
    xs = [rng.standard_normal((L, model.d_model)) for L in lens]
    for i, x in enumerate(xs):
        _write_at(fm, cp.hidden_token_addresses(0, i), x, dt)
    fm.run()
    from archsim.functional import round_to
    with torch.no_grad():
        for prm in ref_layer.parameters():
            prm.copy_(torch.tensor(round_to(prm.detach().numpy(), dt), dtype=dtype))
    worst = {"out": 0.0, "k": 0.0, "v": 0.0}
    for i, x in enumerate(xs):
        out = _read_at(fm, cp.hidden_token_addresses(1, i), dt)
        cache = KVCache()
        with torch.no_grad():
            ref = ref_layer(torch.tensor(round_to(x, dt), dtype=dtype)[None], cache)[0].numpy()
        ka, va = cp.kv_addresses(0, i)
        k = _read_at(fm, ka, dt)
        v = _read_at(fm, va, dt)
        rk = cache.k[0].permute(1, 0, 2).numpy()
        rv = cache.v[0].permute(1, 0, 2).numpy()
        scale = max(1.0, np.abs(ref).max())
        worst["out"] = max(worst["out"], np.abs(out - ref).max() / scale)
        worst["k"] = max(worst["k"], np.abs(k - rk).max() / max(1.0, np.abs(rk).max()))
        worst["v"] = max(worst["v"], np.abs(v - rv).max() / max(1.0, np.abs(rv).max()))
    return worst, cp


@pytest.mark.parametrize("system", ["neupims", "npu-only"])
@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_prefill_matches_reference_and_fills_the_kv_cache(system, name):
    model = get_model(name).replace(dtype_bytes=4)
    worst, cp = run_prefill(model, [3, 37, 140], system)
    assert cp.phase == "prefill" and int(cp.q_tokens.sum()) == 180
    assert worst["out"] < 2e-4 and worst["k"] < 1e-5 and worst["v"] < 1e-5, worst


def test_prefill_kv_append_in_many_slabs_matches_reference(monkeypatch):
    """One token group per K slab (the smallest slab): the PIM-layout K store still fills the
    cache exactly and attention is unchanged."""
    import mapping.codegen.kv_store as kv_store
    monkeypatch.setattr(kv_store, "PREFILL_SLAB_BYTES", 1)
    model = get_model("tiny-llama").replace(dtype_bytes=4)
    worst, cp = run_prefill(model, [5, 70], "neupims")
    assert worst["out"] < 2e-4 and worst["k"] < 1e-5 and worst["v"] < 1e-5, worst


def test_long_prompt_attention_leaves_the_gemm_chain_the_scratchpad():
    """Prefill attention holds one KV head per lane, not a request's whole K/V: a 1,900-token
    GPT3-7B prompt (TP4) runs its GEMM chain in 2 row blocks (all K/V at once left room for
    13, each streaming the weights again), and its 8 KV heads run on all 4 attention VUs."""
    cp = compile_layer(get_model("gpt3-7b"), _batch([1900]), load_config("neupims"),
                       phase="prefill")
    assert cp.row_block >= 950
    softmax = cp.op_instructions(f"L0.attn_softmax.r{cp.batch.requests[0].id}")
    assert len([s for s in softmax if s.startswith("vu")]) == 4
