"""A program directory written once simulates to the cycles of the compile-and-run path."""
from __future__ import annotations

import json

import pytest

from archsim.config import load_config
from archsim.system import load_program_dir, simulate, simulate_program, write_program_dir
from archsim.system.core import DEFAULT_WINDOW
from mapping.compiler import compile_layers
from workloads import default_batch, get_model


@pytest.mark.parametrize("preset,sets", [
    ("neupims", []), ("npu-pim-blocked", []), ("npu-only", []),
    ("neupims", ["system.tensor_parallel=2", "system.pipeline_parallel=2"]),
])
def test_program_dir_simulates_to_the_cycles_of_simulate(tmp_path, preset, sets):
    cfg = load_config(preset, sets)
    model = get_model("tiny-gpt")
    batch = default_batch(model, 12, "sharegpt", seed=3)
    ref = simulate(cfg, model, batch)
    cp = compile_layers(model, batch, cfg, "decode", list(range(len(ref.window.layer_end))))
    d = write_program_dir(tmp_path / "prog", cp)
    got = simulate_program(d)
    assert got.result.cycles_per_iteration == ref.result.cycles_per_iteration
    assert [l.cycles for l in got.result.layers] == [l.cycles for l in ref.result.layers]
    assert got.result.energy_j == ref.result.energy_j
    prog, man = load_program_dir(d)
    assert prog.debug is not None and man["model"] == "tiny-gpt"
    if "system.pipeline_parallel=2" in sets:
        sends = [i for i in prog.streams["link"] if i.mnemonic == "SEND"]
        assert len(sends) == 1 and sends[0]["peer"] == 1
        assert ref.result.extra["pipeline_handoff_cycles"] > 0


def test_a_later_pipeline_stage_receives_its_input_and_sends_nothing_past_the_last(tmp_path):
    from mapping.compiler import CompileOptions

    cfg = load_config("neupims", ["system.pipeline_parallel=2"])
    model = get_model("tiny-gpt")
    batch = default_batch(model, 4, "sharegpt", seed=0)
    per = model.n_layers // 2
    cp = compile_layers(model, batch, cfg, "decode", [per], CompileOptions(stage=1))
    link = [i.mnemonic for i in cp.program.streams["link"] if i.spec.engine.value == "link"]
    assert link == ["RECV"]


def test_a_directory_without_manifest_is_a_one_line_error(tmp_path):
    from archsim.errors import ArchsimError

    with pytest.raises(ArchsimError, match="manifest.json missing"):
        load_program_dir(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "x"}))
    (tmp_path / "program.bin").write_bytes(b"")
    with pytest.raises(ArchsimError, match="expected 'archsim-program-dir'"):
        load_program_dir(tmp_path)
