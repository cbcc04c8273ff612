"""``archsim compile``: files written, round trips, one-line errors."""
from __future__ import annotations

import json

import networkx as nx
import pytest

from archsim.cli import main
from isa.program import Program


def _run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compile_writes_program_graph_and_summary(tmp_path, capsys):
    out = tmp_path / "o"
    code, stdout, err = _run(["compile", "--model", "tiny-llama", "--batch", "6", "--system",
                              "neupims", "--verify", "-o", str(out)], capsys)
    assert code == 0, err
    assert "compiled tiny-llama" in stdout and "lower bound" in stdout
    prog = Program.from_bytes((out / "program.bin").read_bytes())
    text = (out / "program.s").read_text()
    assert prog.debug is not None          # the binary carries op/layer/stage per instruction
    prog.debug = None                      # the text form does not
    assert Program.from_text(text).to_bytes() == prog.to_bytes()
    streams = sorted(p.stem for p in (out / "asm").glob("*.s"))
    assert streams == sorted(prog.streams)
    assert "; L0." in (out / "asm" / "pim0.s").read_text() or not (out / "asm" / "pim0.s").exists()
    g = nx.read_graphml(out / "graph.graphml")
    assert g.nodes["L0.qkv"]["engine"] == "sa"
    assert any(a["engine"] == "pim" for _, a in g.nodes(data=True))
    assert (out / "graph.dot").read_text().startswith("digraph ops {")
    s = json.loads((out / "summary.json").read_text())
    assert s["instructions"] == prog.n_instructions
    assert set(s["instruction_counts"]) >= {"PIM_GEMV", "SA_MATMUL", "GWRITE", "WAIT", "SIGNAL"}
    assert s["macs_by_engine"]["pim"] > 0 and s["bytes_by_engine"]["dma"] > 0
    assert len(s["kv_footprint_bytes_per_channel"]) == 32
    assert sorted(s["sub_batches"]["sub_batch"]) == sorted(s["sub_batches"]["sub_batch"])
    lb = s["latency_lower_bound"]
    assert lb["cycles"] > 0 and lb["binding_engine"] in ("sa", "dma", "pim", "vu")
    assert "not a simulation" in lb["note"]
    assert s["verify"]["dependency_violations"] == [] and s["verify"]["races"] == []
    bp = s["buffer_plan"]                  # which buffer plan the compiler chose (issue 18)
    assert bp["scratchpad_bytes"] == 32 << 20 and bp["attn_blocks_max"] == 1
    assert 0 < bp["attention_bytes"] < bp["peak_bytes"] <= bp["scratchpad_bytes"]
    assert bp["row_block"] == bp["rows_max"] and bp["weight_buffers"] >= 5
    assert s["kv_placement"] == "fixed" and s["kv_spilled_requests"] == 0


def test_compile_all_layers_npu_only(tmp_path, capsys):
    code, stdout, err = _run(["compile", "--model", "tiny-gpt", "--batch", "4", "--system",
                              "npu-only", "--layers", "all", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["layers"] == [0, 1] and "pim" not in s["macs_by_engine"]
    assert s["kv_footprint_bytes_per_channel"] == []


def test_compile_reads_a_snapshot_and_keeps_its_channels(tmp_path, capsys):
    f = tmp_path / "b.csv"
    f.write_text("seq_len,ch_idx\n10,3\n20,3\n30,5\n")
    code, _, err = _run(["compile", "--model", "tiny-gpt", "--requests", str(f),
                         "--keep-channels", "-o", str(tmp_path / "o")], capsys)
    assert code == 0, err
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["channels"] == [3, 3, 5] and s["seq_lens"] == [10, 20, 30]


@pytest.mark.parametrize("args, msg", [
    (["--model", "nope"], "unknown model 'nope'; valid names"),
    (["--layers", "3"], "--layers '3': expected 1, window or all"),
    (["--dataset", "wiki"], "unknown dataset 'wiki'; valid datasets: sharegpt, alpaca"),
    (["--set", "memory.org.rows=32", "--batch", "1024"], "KV cache does not fit the device"),
    (["--system", "gpu-a100"], "GPU roofline"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, args, msg):
    base = ["compile", "--model", "tiny-gpt", "--batch", "4", "-o", str(tmp_path)]
    code, _, err = _run(base + args if args[0] != "--model" else
                        ["compile", "--batch", "4", "-o", str(tmp_path)] + args, capsys)
    assert code == 2
    assert msg in err and len(err.strip().splitlines()) == 1


def test_compile_a_prefill(tmp_path, capsys):
    f = tmp_path / "b.csv"
    f.write_text("seq_len,ch_idx\n10,3\n20,3\n")
    code, _, err = _run(["compile", "--model", "tiny-llama", "--requests", str(f), "--phase",
                         "prefill", "--verify", "-o", str(tmp_path / "o")], capsys)
    assert code == 0, err
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["phase"] == "prefill" and s["macs_by_engine"]["sa"] > 0
    assert "pim" not in s["macs_by_engine"]
