"""The shipped example programs assemble, disassemble to the same binary and run; a compiled
program directory runs through the CLI to the cycles of `archsim run`'s simulation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from archsim.cli import main

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.asm"))


def test_the_three_example_programs_are_shipped():
    assert {p.stem for p in EXAMPLES} >= {"gemm_tile", "pim_gemv_rowgroup",
                                          "dma_semaphore_pipeline"}


@pytest.mark.parametrize("src", EXAMPLES, ids=lambda p: p.stem)
def test_example_assembles_round_trips_and_runs(src, tmp_path, capsys):
    b1 = tmp_path / "a.bin"
    assert main(["asm", str(src), "-o", str(b1)]) == 0
    assert main(["disasm", str(b1)]) == 0
    text = capsys.readouterr().out.split("\n", 0)[0]
    lines = [l for l in text.splitlines() if not l.startswith(str(b1))]
    (tmp_path / "b.asm").write_text("\n".join(lines) + "\n")
    assert main(["asm", str(tmp_path / "b.asm"), "-o", str(tmp_path / "b.bin")]) == 0
    assert (tmp_path / "b.bin").read_bytes() == b1.read_bytes()
    out = tmp_path / "r.json"
    for prog in (src, b1):
        assert main(["run", "--program", str(prog), "--json", str(out)]) == 0
        assert json.loads(out.read_text())["cycles"] > 0


def test_compiled_directory_runs_to_the_cycles_of_archsim_run(tmp_path):
    from archsim.config import load_config
    from archsim.system import simulate
    from workloads import default_batch, get_model

    d = tmp_path / "c"
    assert main(["compile", "--model", "tiny-gpt", "--batch", "8", "--system", "npu",
                 "--layers", "window", "-o", str(d)]) == 0
    assert main(["run", "--program", str(d), "--json", str(tmp_path / "r.json")]) == 0
    got = json.loads((tmp_path / "r.json").read_text())["cycles_per_iteration"]
    model = get_model("tiny-gpt")
    cfg = load_config("npu-only")
    batch = default_batch(model, 8, "sharegpt", 0, n_channels=cfg.memory.org.channels,
                          policy=cfg.system.channel_policy)
    assert got == simulate(cfg, model, batch).result.cycles_per_iteration
