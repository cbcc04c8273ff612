"""Golden validation: the mapper's programs, run on values, reproduce PyTorch (issue 7).

Every (model, system, dtype) of the acceptance grid runs one decode step of three requests
whose prompts cross a 32-bank key row group and a 128-token PIM value run; one longer case
runs two steps so that the device's own KV rows are carried between compilations. A program
whose KV append puts a key row in the wrong bank (PIM) or at the wrong token (streaming KV)
must fail.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mapping.compiler as mc  # noqa: E402
from archsim.cli import main  # noqa: E402
from archsim.validation import ValidationError, validate  # noqa: E402
from archsim.validation.bounds import (ErrorModel, Precision, gamma,  # noqa: E402
                                       reduction_depth)

LENS = [3, 40, 130]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny float64 references: torch's thread pool only adds contention on 2 cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("system", ["npu", "npu-pim", "npu-pim-blocked-fused", "neupims"])
@pytest.mark.parametrize("model", ["tiny-gpt", "tiny-llama"])
def test_compiled_decode_step_matches_pytorch_within_tolerance(model, system, dtype):
    rep = validate(model, system, dtype=dtype, steps=1, prompt_lens=LENS)
    assert rep.passed, [(c.name, c.max_abs_err, c.max_allowed) for c in rep.failures()]
    abs_err, rel_err = rep.max_errors()
    # fp32: close to exact; fp16: a few units in the last place of fp16
    assert rel_err < (2e-6 if dtype == "fp32" else 5e-3)
    assert rep.attention_engine == ("npu" if system == "npu" else "pim")
    assert rep.top1_agreement == 1.0


def test_device_kv_rows_carry_across_decode_steps():
    rep = validate("tiny-llama", "neupims", dtype="bf16", steps=3, prompt_lens=[1, 33])
    assert rep.passed
    assert {c.step for c in rep.checks} == {0, 1, 2}
    assert all(len(r["channel"]) == 3 for r in rep.requests)


def _misplace_appended_key(monkeypatch):
    """Wrap compile_model: the first DMA_STORE of every KV append (the new key row) goes one
    bank further (PIM layout) or one token further (streaming layout)."""
    real = mc.compile_model
    mutated = []

    def broken(*args, **kwargs):
        cp = real(*args, **kwargs)
        eb = cp.tensors["hidden.0"].elem_bytes
        shift = (cp.plan.bank_stride() if cp.plan.pim_layout is not None
                 else cp.model.head_dim * eb)
        for l in cp.layers:
            for rid in cp.batch.ids:
                done = False
                for stream, idx in cp.op_instructions(f"L{l}.kv_append.r{rid}").items():
                    for j in idx:
                        ins = cp.program.streams[stream][j]
                        if ins.mnemonic == "DMA_STORE" and not done:
                            cp.program.streams[stream][j] = ins.replace(hbm=ins["hbm"] + shift)
                            mutated.append((l, rid))
                            done = True
        return cp
    monkeypatch.setattr(mc, "compile_model", broken)
    return mutated


@pytest.mark.parametrize("system", ["neupims", "npu"])
def test_key_row_in_the_wrong_place_fails_validation(monkeypatch, system):
    mutated = _misplace_appended_key(monkeypatch)
    rep = validate("tiny-gpt", system, dtype="fp16", steps=1, prompt_lens=LENS)
    assert mutated
    assert not rep.passed
    failed = {c.name for c in rep.failures()}
    assert "L0.k_new" in failed
    assert max(c.usage for c in rep.failures()) > 10


def test_kv_addresses_that_disagree_with_the_program_fail_validation(monkeypatch):
    """The compiler reports token 1's keys where token 2's are: the prefill K/V land where the
    program does not read them."""
    from mapping.memplan import HbmPlan

    orig = HbmPlan.kv_element_addresses

    def wrong(self, layer, request):
        k, v = orig(self, layer, request)
        k = k.copy()
        if k.shape[0] > 3:
            k[1] = k[2]
        return k, v
    monkeypatch.setattr(HbmPlan, "kv_element_addresses", wrong)
    rep = validate("tiny-gpt", "neupims", dtype="fp32", steps=1, prompt_lens=[40])
    assert not rep.passed
    assert max(c.usage for c in rep.failures()) > 10


def test_reduction_depth_of_pim_adder_tree_and_sequential_order():
    assert reduction_depth(32, "pim", 16) == 4 + 2       # 4 tree levels + 2 COMP steps
    assert reduction_depth(33, "pim", 16) == 4 + 3
    assert reduction_depth(128, "sequential") == 129     # k products + the accumulator add
    assert gamma(10, 2.0 ** -24) == pytest.approx(10 * 2.0 ** -24, rel=1e-6)


def test_error_models_combine_independent_errors_in_quadrature_or_linearly():
    e = np.array([3.0, 4.0])
    assert ErrorModel("probabilistic").add(e[:1], e[1:])[0] == pytest.approx(5.0)
    assert ErrorModel("worst_case").add(e[:1], e[1:])[0] == pytest.approx(7.0)
    w = np.array([[1.0], [-1.0]])
    assert ErrorModel("probabilistic").through(e, w)[0] == pytest.approx(5.0)
    assert ErrorModel("worst_case").through(e, w)[0] == pytest.approx(7.0)
    assert Precision("bf16").u == 2.0 ** -8 and Precision("fp16").u == 2.0 ** -11


def test_bad_arguments_are_validation_errors():
    with pytest.raises(ValidationError, match="dtype"):
        validate("tiny-gpt", "neupims", dtype="int8")
    with pytest.raises(ValidationError, match="unknown system"):
        validate("tiny-gpt", "tpu")
    with pytest.raises(ValidationError, match="GPU roofline"):
        validate("tiny-gpt", "gpu-a100")
    with pytest.raises(ValidationError, match="max_seq_len"):
        validate("tiny-gpt", "neupims", prompt_lens=[300])
    with pytest.raises(ValidationError, match="small models"):
        validate("gpt3-7b", "neupims", batch=1)


def test_cli_validate_writes_json_and_exits_zero(tmp_path, capsys):
    out = tmp_path / "v.json"
    rc = main(["validate", "--model", "tiny-llama", "--system", "npu-pim", "--dtype", "fp16",
               "--steps", "1", "--prompt-lens", "2,35", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "PASS: tiny-llama on npu-pim in fp16" in text and "L1.k_new" in text
    doc = json.loads(out.read_text())
    assert doc["passed"] is True and len(doc["runs"]) == 1
    run = doc["runs"][0]
    assert run["attention_engine"] == "pim"
    assert {s["tensor"] for s in run["summary"]} >= {"L0.out", "L1.out", "logits"}
    assert run["tolerance"]["unit_roundoff"] == 2.0 ** -11


def test_cli_validate_exits_one_on_a_broken_mapping(monkeypatch, capsys):
    _misplace_appended_key(monkeypatch)
    rc = main(["validate", "--model", "tiny-gpt", "--system", "neupims", "--dtype", "fp32",
               "--steps", "1", "--prompt-lens", "5", "--quiet"])
    assert rc == 1
    assert "FAIL: tiny-gpt on neupims in fp32" in capsys.readouterr().out


def test_cli_validate_user_error_is_one_line(capsys):
    rc = main(["validate", "--dtype", "fp8"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "fp8" in err and "Traceback" not in err
