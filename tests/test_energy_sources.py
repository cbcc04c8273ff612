"""Every energy, power and area constant of every preset carries its source, and bad energy
input is a one-line error naming the key (before anything runs)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from archsim.cli import main
from archsim.config import PRESET_DIR, list_presets, load_config
from archsim.energy.schema import SOURCE_MIN_CHARS
from archsim.errors import ConfigError

#: Sections whose constants carry a source here. The DRAM IDD currents (memory.power) are the
#: memory standard's: their sources live with the standard tables of the memory model.
SOURCED = ("energy", "area", "npu.process")


def _constants(node, path=""):
    """Every mapping of ``node`` that holds a number to be sourced: ``{value: ...}`` objects,
    and tables (their numbers' source is the mapping's ``source``)."""
    if isinstance(node, dict):
        if "value" in node or "ops" in node or any(
                isinstance(v, (int, float, list)) and not isinstance(v, bool)
                for k, v in node.items() if k != "source"):
            yield path, node
        for k, v in node.items():
            if isinstance(v, dict):
                yield from _constants(v, f"{path}.{k}" if path else k)


def _section(d, dotted):
    for part in dotted.split("."):
        d = d.get(part, {}) if isinstance(d, dict) else {}
    return d


@pytest.mark.parametrize("preset", list_presets())
def test_every_constant_of_every_preset_file_has_a_source(preset):
    """Read each preset file as written (not merged): a preset that sets a constant also says
    where it comes from."""
    raw = yaml.safe_load((PRESET_DIR / f"{preset}.yaml").read_text())
    missing = []
    for sec in SOURCED:
        for path, node in _constants(_section(raw, sec), sec):
            if path.endswith(".ops"):          # the ops table's source is its parent's
                continue
            src = node.get("source", "")
            if len(str(src)) < SOURCE_MIN_CHARS:
                missing.append(path)
    assert not missing, f"{preset}: constants without a source: {missing}"


@pytest.mark.parametrize("preset", list_presets())
def test_every_loaded_constant_has_a_source(preset):
    cfg = load_config(preset).to_dict()
    for sec in SOURCED:
        for path, node in _constants(_section(cfg, sec), sec):
            if path.endswith(".ops"):
                continue
            assert len(node.get("source", "")) >= SOURCE_MIN_CHARS, f"{preset}: {path}"


def test_a_constant_without_its_source_is_rejected(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("base: neupims\nenergy:\n  link_pj_per_byte: {value: 5.0, source: ''}\n")
    with pytest.raises(ConfigError, match=r"energy\.link_pj_per_byte\.source: String should "
                                          r"have at least"):
        load_config(f)


def test_a_missing_energy_constant_is_a_one_line_error_naming_the_key(tmp_path):
    data = yaml.safe_load((PRESET_DIR / "neupims.yaml").read_text())
    del data["energy"]["npu"]["mac_pj"]
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        load_config(f)
    msg = str(exc.value)
    assert "\n" not in msg and "energy.npu.mac_pj: Field required" in msg, msg


@pytest.mark.parametrize("override, key", [
    ("energy.npu.mac_pj.value=-1", "energy.npu.mac_pj.value"),
    ("energy.gpu.idle_w.value=-5", "energy.gpu.idle_w.value"),
    ("energy.npu.vector_ops_per_element.ops.gelu=-2", "energy.npu.vector_ops_per_element"),
    ("area.dram_logic_factor.value=-1", "area.dram_logic_factor.value"),
])
def test_a_negative_constant_is_a_one_line_error_naming_the_key(override, key, capsys):
    rc = main(["run", "--system", "neupims", "--model", "tiny-gpt", "--batch", "2",
               "--set", override, "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and key in err and "Traceback" not in err, err
    assert ">= 0" in err or "greater than or equal to 0" in err, err


def test_the_gpu_power_must_be_ordered():
    with pytest.raises(ConfigError, match="max_w .* must be >= idle_w"):
        load_config("gpu-a100", ["energy.gpu.idle_w.value=500"])
