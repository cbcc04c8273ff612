"""Long contexts: attention in key blocks sized from the scratchpad (issue 18 item 1).

A request whose attention buffers would take more than the buffer plan's share of the
scratchpad is attended block by block, the blocks merged with their log-sum-exps
(``VU_SOFTMAX lse=1``; :mod:`mapping.codegen.pim_attention`). The tiny test models are too
small to need blocks on a real scratchpad, so the functional tests shrink the attention share
(``mapping.bufplan.ATTN_SHARE``) until 250-token requests take two blocks of 128; the
full-size test compiles LLaMA-3 8B at 8,192 tokens on the reference scratchpad.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_one_thread")

import mapping.bufplan as bufplan  # noqa: E402
from archsim.config import load_config  # noqa: E402
from archsim.validation import validate  # noqa: E402
from mapping.codegen.pim_attention import PimAttention  # noqa: E402
from mapping.compiler import compile_layer  # noqa: E402
from workloads import get_model  # noqa: E402
from workloads.requests import Batch, Request  # noqa: E402

LENS = [3, 40, 250]
LONG_LENS = [3, 40, 600]
TINY_LLAMA_LONG = {
    "model_type": "llama", "hidden_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 352, "num_hidden_layers": 2,
    "max_position_embeddings": 1024, "vocab_size": 512, "rms_norm_eps": 1e-5,
    "torch_dtype": "float16"}
"""tiny-llama with a 1,024-token context: GQA 4:2 with head_dim 32, so the PIM layout packs 8
token groups per key row and 2 runs per value row (granule 256 tokens): 600 tokens take three
key blocks."""


@pytest.fixture
def tiny_llama_long(tmp_path):
    import json

    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY_LLAMA_LONG))
    return str(p)


def _batch(lens):
    return Batch(tuple(Request(id=i, input_len=None, output_len=None, seq_len=L)
                       for i, L in enumerate(lens)))


@pytest.fixture
def small_share(monkeypatch):
    """Attention may take 1 % of a 2 MiB scratchpad: 250-token requests need 2 key blocks."""
    monkeypatch.setattr(bufplan, "ATTN_SHARE", 0.01)


def _softmax_lse(cp) -> int:
    return sum(1 for instrs in cp.program.streams.values() for ins in instrs
               if ins.mnemonic == "VU_SOFTMAX" and ins["lse"])


@pytest.mark.parametrize("system", ["neupims", "npu-only"])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_small_share_cuts_long_requests_into_key_blocks(small_share, system, phase):
    cfg = load_config(system, ["npu.scratchpad.size_bytes=2097152"])
    cp = compile_layer(get_model("tiny-gpt"), _batch(LENS), cfg, phase)
    bp = cp.buffer_plan
    assert (bp.attn_block_tokens, bp.attn_blocks_max, bp.max_attn_tokens) == (128, 2, 250)
    assert _softmax_lse(cp) > 0 and bp.peak_bytes <= cfg.npu.scratchpad.size_bytes
    assert "attention blocks of 128 tokens (2 per request at most)" in bp.describe()
    assert cp.summary()["buffer_plan"]["attn_block_tokens"] == 128


def test_a_request_that_fits_is_one_block_and_writes_no_lse():
    cp = compile_layer(get_model("tiny-llama"), _batch(LENS), load_config("neupims"))
    assert cp.buffer_plan.attn_blocks_max == 1 and _softmax_lse(cp) == 0


def test_gqa_model_with_packed_rows_takes_three_blocks(small_share, tiny_llama_long):
    from workloads.models import load_hf_config

    cfg = load_config("neupims", ["npu.scratchpad.size_bytes=2097152"])
    cp = compile_layer(load_hf_config(tiny_llama_long), _batch(LONG_LENS), cfg)
    lay = cp.plan.pim_layout
    assert (lay.key_pack, lay.value_pack, lay.granule()) == (8, 2, 256)
    assert (cp.buffer_plan.attn_block_tokens, cp.buffer_plan.attn_blocks_max) == (256, 3)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("system", ["neupims", "npu-only", "npu-pim-blocked"])
@pytest.mark.parametrize("model", ["tiny-llama-long", "tiny-gpt"])
def test_blocked_decode_matches_pytorch(small_share, tiny_llama_long, model, system, dtype):
    long = model == "tiny-llama-long"
    rep = validate(tiny_llama_long if long else model, system, dtype=dtype, steps=2,
                   prompt_lens=LONG_LENS if long else LENS,
                   overrides=["npu.scratchpad.size_bytes=2097152"])
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.max_errors()[1] < (2e-6 if dtype == "fp32" else 5e-3)


def test_a_merge_that_drops_later_blocks_is_caught(small_share, monkeypatch):
    """The golden check sees the merge: keeping only each request's first key block fails."""
    real = PimAttention.merge_block

    def first_block_only(self, sv, acc, part, lse_b, rows, cols, b):
        if b == 0:
            real(self, sv, acc, part, lse_b, rows, cols, b)
    monkeypatch.setattr(PimAttention, "merge_block", first_block_only)
    rep = validate("tiny-gpt", "neupims", dtype="fp32", steps=1, prompt_lens=LENS,
                   overrides=["npu.scratchpad.size_bytes=2097152"])
    assert not rep.passed


@pytest.mark.parametrize("system,name", [("neupims", "tiny-gpt"), ("npu-only", "tiny-llama")])
def test_blocked_prefill_matches_reference_and_fills_the_kv_cache(small_share, system, name):
    from test_mapping_functional import run_prefill

    model = get_model(name).replace(dtype_bytes=4)
    worst, cp = run_prefill(model, [3, 37, 250], system,
                            overrides=("npu.scratchpad.size_bytes=2097152",))
    assert cp.buffer_plan.attn_blocks_max == 2      # query tiles of 128 set the granule
    assert worst["out"] < 2e-4 and worst["k"] < 1e-5 and worst["v"] < 1e-5, worst


@pytest.mark.slow
def test_llama3_8b_at_its_full_context_fits_the_reference_scratchpad():
    """LLaMA-3 8B decode, 16 requests at 8,192 tokens: 'scratchpad: sc10.0 needs 524288 bytes' before key
    blocks; now the attention buffers stay within half of the 32 MiB."""
    cfg = load_config("neupims")
    cp = compile_layer(get_model("llama3-8b"), _batch([8192] * 16), cfg)
    bp = cp.buffer_plan
    assert 1 < bp.attn_blocks_max and bp.attn_block_tokens % 128 == 0
    assert bp.attention_bytes <= cfg.npu.scratchpad.size_bytes // 2
    assert bp.peak_bytes <= cfg.npu.scratchpad.size_bytes
    # PIM work is that of the whole context: one q.K row-GEMV per token group and head
    gemvs = sum(1 for s, instrs in cp.program.streams.items() if s.startswith("pim")
                for ins in instrs if ins.mnemonic == "PIM_GEMV")
    lay = cp.plan.pim_layout
    per_req = (lay.token_groups(8192) * lay.kv_heads * lay.q_per_kv
               + lay.runs(8192) * lay.dim_tiles * lay.kv_heads * lay.q_per_kv)
    assert gemvs == 16 * per_req


def test_block_choice_is_monotone_and_respects_the_isa_fields():
    calls = []

    def fits(t):
        calls.append(t)
        return t <= 1000
    assert bufplan.choose_block(4096, 128, 65535 // 128 * 128, fits) == 896
    assert bufplan.choose_block(900, 128, 65535, fits) == 900       # one block: as it is
    assert bufplan.choose_block(4096, 128, 65535, lambda t: False) == 128
    assert bufplan.max_block_tokens(128, 4, npu=False) == 16256     # gather stride 4 x block
    assert bufplan.max_block_tokens(128, 1, npu=True) == 16256      # 14-bit DMA rows
    assert np.all(np.diff(calls[1:]) != 0)


def test_plan_search_gives_the_gemm_rows_first_then_grows_the_attention_block():
    """A toy cost: each GEMM row 10 bytes, each attention token 1 byte, each weight tile 100
    (prefill: q|k|v always go through HBM, nothing to stage)."""
    from mapping.errors import CapacityError

    def attempt_for(size):
        calls = []

        def attempt(rows, ring, attn, staged):
            calls.append((rows, ring, attn, staged))
            need = 10 * rows + attn + 100 * ring
            if need <= size:
                return ("fits", ring)
            return CapacityError("scratchpad: x", resource="scratchpad", needed_bytes=need,
                                 available_bytes=size)
        return attempt, calls

    def search(size):
        attempt, calls = attempt_for(size)
        (_, ring), rows, attn, staged = bufplan.search_buffer_plan(attempt, 256, 5, size, 2000,
                                                                   128, 128)
        assert not staged and not any(c[3] for c in calls)
        return rows, ring, attn, calls
    rows, ring, attn, calls = search(10_000)        # everything fits: one attempt
    assert (rows, ring, attn, len(calls)) == (256, 5, 2000, 1)
    assert search(3_200)[:3] == (256, 5, 128)       # 256 rows only beside the smallest block
    assert search(1_400)[:3] == (64, 5, 256)        # rows blocked, the block grows into the rest
    rows, ring, attn, _ = search(600)               # no row beside 5 tiles: the ring falls to 2
    assert (rows, ring, attn) == (26, 2, 128)       # the fewest blocks (10) that fit
    with pytest.raises(CapacityError, match="npu.scratchpad.size_bytes = 300 is too small"):
        search(300)


def test_plan_search_tries_the_largest_block_beside_the_rows_before_bisecting():
    """A long prefill: the rows must be halved, and beside the halved rows even the largest
    attention block fits. Two successful attempts (the rows' with the smallest block, then the
    largest block, kept), not a bisection's four more; the plan a bisection finds."""
    from mapping.errors import CapacityError

    calls = []

    def attempt(rows, ring, attn, staged):
        need = 10 * rows + attn + 100 * ring
        calls.append(need <= 12_000)
        if need <= 12_000:
            return ("fits", ring)
        return CapacityError("scratchpad: x", resource="scratchpad", needed_bytes=need,
                             available_bytes=12_000)
    (_, ring), rows, attn, staged = bufplan.search_buffer_plan(attempt, 1916, 16, 12_000,
                                                               1893, 128, 128)
    assert (rows, ring, attn, staged) == (958, 5, 1893, False)
    assert calls.count(True) == 2


def test_plan_search_stages_qkv_through_hbm_before_it_blocks_the_gemm_rows():
    """Decode toy cost: as above, plus 6 bytes per row of q|k|v unless staged through HBM."""
    from mapping.errors import CapacityError

    def search(size):
        calls = []

        def attempt(rows, ring, attn, staged):
            calls.append((rows, ring, attn, staged))
            need = 10 * rows + attn + 100 * ring + (0 if staged else 6 * 256)
            if need <= size:
                return ("fits", ring)
            return CapacityError("scratchpad: x", resource="scratchpad", needed_bytes=need,
                                 available_bytes=size)
        (_, ring), rows, attn, staged = bufplan.search_buffer_plan(
            attempt, 256, 5, size, 2000, 128, 128, can_stage=True)
        return rows, ring, attn, staged, calls
    assert search(10_000)[:4] == (256, 5, 2000, False)     # fits resident: one attempt
    assert search(4_800)[:4] == (256, 5, 128, False)       # resident beside the smallest block
    # 256 rows need 4,724 bytes resident, 3,188 staged: staged before blocking the rows, and
    # the key block grows into the rest (7 granules: 3,956 bytes)
    assert search(4_000)[:4] == (256, 5, 896, True)
    assert search(1_400)[:4] == (64, 5, 256, True)
    rows, ring, attn, staged, calls = search(600)
    assert (rows, ring, attn, staged) == (26, 2, 128, True)
    assert not any(c[3] is False and c[0] < 256 for c in calls)   # no resident row blocks
    with pytest.raises(CapacityError, match="q|k|v through HBM"):
        search(300)


@pytest.fixture
def qkv_staged(monkeypatch):
    """Every decode buffer plan stages q|k|v through HBM (tiny batches never need it)."""
    import mapping.compiler as compiler

    real = bufplan.search_buffer_plan

    def staged_search(attempt, *args, can_stage=False, **kw):
        got, rows, attn, _ = real(lambda r, w, a, st: attempt(r, w, a, can_stage), *args,
                                  can_stage=False, **kw)
        return got, rows, attn, can_stage
    monkeypatch.setattr(compiler, "search_buffer_plan", staged_search)


@pytest.mark.parametrize("system", ["neupims", "npu-only"])
def test_decode_with_qkv_staged_through_hbm_matches_pytorch(small_share, qkv_staged, system):
    """q|k|v stored by the QKV GEMM to dq_qkv rows and loaded per request by the KV append and
    every q.K piece (PIM) or by the NPU attention lane: the same values as resident q|k|v."""
    cfg = load_config(system, ["npu.scratchpad.size_bytes=2097152"])
    cp = compile_layer(get_model("tiny-gpt"), _batch(LENS), cfg)
    assert cp.buffer_plan.qkv_staged and "q|k|v through HBM" in cp.buffer_plan.describe()
    loads = [ins for instrs in cp.program.streams.values() for ins in instrs
             if ins.mnemonic == "DMA_LOAD"]
    assert any(d.name == "dq_qkv" for d in cp.program.data)
    assert loads
    rep = validate("tiny-gpt", system, dtype="fp32", steps=2, prompt_lens=LENS,
                   overrides=["npu.scratchpad.size_bytes=2097152"])
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    assert rep.max_errors()[1] < 2e-6
