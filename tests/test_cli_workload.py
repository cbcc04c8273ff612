"""``archsim workload show``: table, totals, JSON, request files and one-line errors."""
from __future__ import annotations

import json

import pytest

from archsim.cli import main
from archsim.cli.workload import PIM_MAX_FLOP_PER_BYTE, suited_engine
from workloads.graph import OpKind
from workloads.models import get_model


def test_show_decode_prints_table_totals_and_caption(capsys):
    rc = main(["workload", "show", "--model", "gpt3-7b", "--phase", "decode", "--batch", "32",
               "--dataset", "alpaca"])
    out = capsys.readouterr().out
    assert rc == 0
    for text in ("qkv", "attn_score", "ffn2", "proj_allreduce", "systolic array", "PIM",
                 "vector unit", "total", "per device", "one decoder layer", "tp=4",
                 "one decode iteration of 32 requests"):
        assert text in out, text
    # per-request attention rows are aggregated: one row with the request count
    score_rows = [line for line in out.splitlines() if "attn_score" in line]
    assert len(score_rows) == 1 and "│    32 │" in score_rows[0]


def test_show_json_holds_every_op_and_consistent_totals(tmp_path, capsys):
    path = tmp_path / "w.json"
    rc = main(["workload", "show", "--model", "llama2-70b", "--phase", "decode", "--batch", "16",
               "--seed", "3", "--json", str(path)])
    assert rc == 0 and f"wrote {path}" in capsys.readouterr().out
    rep = json.loads(path.read_text())
    m = get_model("llama2-70b")
    assert rep["tp"] == m.tensor_parallel == 8
    assert len(rep["ops"]) == rep["totals"]["ops"] == 13 + 4 * 16
    assert sum(op["flops"] for op in rep["ops"]) == rep["totals"]["flops"]
    assert sum(grp["flops"] for grp in rep["groups"]) == rep["totals"]["flops"]
    gemm = sum(op["flops"] for op in rep["ops"] if op["kind"] == "gemm")
    assert gemm == 2 * m.layer_matmul_params(8) * 16
    assert len(rep["batch"]["per_request"]) == 16
    scores = [op for op in rep["ops"] if op["kind"] == "attention_score"]
    assert {op["request_id"] for op in scores} == {r["id"] for r in rep["batch"]["per_request"]}
    # GQA group of 8 query heads per KV head: intensity ~ 8 FLOP/B, still below the PIM limit
    assert all(op["engine"] == "PIM" for op in scores)
    assert rep["edges"] and all(len(e) == 4 for e in rep["edges"])


def test_show_uses_a_decode_snapshot_file_as_is(tmp_path, capsys):
    p = tmp_path / "snap.csv"
    p.write_text("seq_len,ch_idx\n100,0\n2048,1\n7,1\n")
    path = tmp_path / "w.json"
    rc = main(["workload", "show", "--requests", str(p), "--tp", "2", "--json", str(path)])
    assert rc == 0
    rep = json.loads(path.read_text())
    assert [r["seq_len"] for r in rep["batch"]["per_request"]] == [100, 2048, 7]
    assert rep["tp"] == 2 and rep["batch"]["channels_used"] == 2
    assert "L 7..2048" in capsys.readouterr().out
    assert main(["workload", "show", "--requests", str(p), "--batch", "2", "--json",
                 str(path)]) == 0
    assert json.loads(path.read_text())["batch"]["requests"] == 2


def test_show_prefill_from_a_length_table(tmp_path, capsys):
    p = tmp_path / "lens.tsv"
    p.write_text("input_toks\toutput_toks\n10\t5\n30\t2\n")
    path = tmp_path / "w.json"
    rc = main(["workload", "show", "--model", "tiny-llama", "--phase", "prefill",
               "--requests", str(p), "--batch", "4", "--json", str(path)])
    assert rc == 0
    rep = json.loads(path.read_text())
    lens = [r["seq_len"] for r in rep["batch"]["per_request"]]
    assert set(lens) <= {10, 30} and rep["totals"]["tokens"] == sum(lens)
    assert "rope" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["--model", "gpt5"], "unknown model 'gpt5'; valid names: gpt3-7b"),
    (["--phase", "train"], "--phase 'train' not one of ['prefill', 'decode']"),
    (["--dataset", "lmsys"], "--dataset 'lmsys' not one of ['sharegpt', 'alpaca']"),
    (["--tp", "3"], "tensor-parallel degree 3 must divide n_heads=32"),
    (["--policy", "random"], "--policy 'random' not one of ['min_load', 'round_robin']"),
])
def test_show_user_errors_are_one_line_with_exit_code_2(args, message, capsys):
    rc = main(["workload", "show", "--batch", "4"] + args)
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_show_bad_request_file_names_file_and_line(tmp_path, capsys):
    p = tmp_path / "snap.csv"
    p.write_text("seq_len,ch_idx\n100,0\nabc,1\n")
    rc = main(["workload", "show", "--requests", str(p)])
    assert rc == 2
    assert f"{p}:3: seq_len = 'abc' is not an integer" in capsys.readouterr().err


def test_show_snapshot_longer_than_context_names_the_request(tmp_path, capsys):
    p = tmp_path / "snap.csv"
    p.write_text("seq_len,ch_idx\n100,0\n300,1\n")
    rc = main(["workload", "show", "--model", "tiny-gpt", "--requests", str(p)])
    assert rc == 2
    assert "request index 1 (id 1) has seq_len 300 > max_seq_len 256" in capsys.readouterr().err


def test_models_lists_the_registry(capsys):
    assert main(["workload", "models"]) == 0
    out = capsys.readouterr().out
    assert "gpt3-175b" in out and "llama3-8b" in out and "TP8 PP4" in out


def test_engine_rule_from_kind_and_intensity():
    assert suited_engine(OpKind.GEMM, 200.0) == "systolic array"
    assert suited_engine(OpKind.GEMM, 1.0) == "PIM"  # batch-1 GEMV
    assert suited_engine(OpKind.ATTENTION_SCORE, PIM_MAX_FLOP_PER_BYTE) == "systolic array"
    assert suited_engine(OpKind.ATTENTION_CONTEXT, 0.99) == "PIM"
    assert suited_engine(OpKind.SOFTMAX, 1.5) == "vector unit"
    assert suited_engine(OpKind.ALLREDUCE, 0.2) == "interconnect"
    assert suited_engine(OpKind.KV_APPEND, 0.0) == "DMA"
