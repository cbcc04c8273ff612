"""Configuration: presets, overrides, and the messages bad configurations must produce."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from archsim.cli import main
from archsim.config import MachineConfig, list_presets, load_config
from archsim.errors import ConfigError


def test_every_preset_loads_and_is_frozen():
    assert set(list_presets()) >= {"neupims", "npu-pim-blocked", "npu-only", "gpu-a100"}
    for name in list_presets():
        cfg = load_config(name)
        assert cfg.name == name
        with pytest.raises(ValidationError):
            cfg.npu.n_arrays = 3  # frozen


def test_neupims_preset_has_reference_values():
    cfg = load_config("neupims")
    t = cfg.memory.timing
    assert (t.CL, t.CWL, t.tRCDRD, t.tRP, t.tRAS, t.tRFC, t.tREFI, t.tFAW) == (
        14, 4, 14, 14, 34, 260, 3900, 30)
    assert t.tRC_cycles == 48
    assert cfg.memory.org.burst_bytes == 64
    assert cfg.memory.peak_bandwidth_bytes_per_cycle_per_channel == 32
    assert cfg.memory.org.channel_capacity_bytes == 2**30
    assert cfg.pim.row_buffer_mode == "dual" and cfg.system.sub_batches == 2
    assert cfg.system.channel_policy == "min_load"


def test_baseline_presets_differ_only_where_documented():
    neu = load_config("neupims").to_dict()
    blk = load_config("npu-pim-blocked").to_dict()
    assert blk["pim"]["row_buffer_mode"] == "single"
    assert blk["system"]["sub_batches"] == 1
    assert blk["system"]["channel_policy"] == "round_robin"
    assert blk["memory"] == neu["memory"] and blk["npu"] == neu["npu"]
    assert load_config("npu-only").system.engines == ("npu",)
    assert load_config("gpu-a100").system.engines == ("gpu",)


def test_override_changes_value():
    cfg = load_config("neupims", ["memory.timing.tRCDRD=16", "pim.multipliers_per_bank=32"])
    assert cfg.memory.timing.tRCDRD == 16 and cfg.pim.multipliers_per_bank == 32


def test_user_file_inherits_from_preset(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("base: neupims\nnpu:\n  n_arrays: 4\n")
    cfg = load_config(f)
    assert cfg.npu.n_arrays == 4 and cfg.npu.array_height == 128 and cfg.name == "mine"


BAD_OVERRIDES = [
    # (override, fragments the message must contain)
    ("memory.timing.tRCDR=16", ["unknown key 'memory.timing.tRCDR'", "did you mean",
                                "memory.timing.tRCDRD"]),
    ("npu.n_arays=4", ["unknown key 'npu.n_arays'", "npu.n_arrays"]),
    ("memory.timing.tRCDRD=-1", ["memory.timing.tRCDRD", "greater than or equal to 1",
                                 "--set memory.timing.tRCDRD=-1"]),
    ("pim.row_buffer_mode=triple", ["pim.row_buffer_mode", "'dual' or 'single'", "triple"]),
    ("memory.org.channels=24", ["channels = 24 is not a power of two", "rorabgbachco"]),
    ("memory.org.page_size_bytes=2048", ["page_size_bytes (2048) must equal columns"]),
    ("system.engines=[gpu,npu]", ["'gpu' is a system of its own"]),
    ("system.engines=[pim]", ["'pim' needs an 'npu'"]),
    ("memory.controller.address_mapping=rorabgbach", ["address_mapping 'rorabgbach'",
                                                      "exactly once"]),
    ("memory.timing.tRC=10", ["tRC (10) must be >= tRAS + tRP = 48"]),
    ("memory.timing.tRFC=5000", ["tRFC (5000) must be < tREFI"]),
    ("memory.timing.tCCD_L=0", ["memory.timing.tCCD_L", "greater than or equal to 1"]),
    ("npu.freq_mhz=fast", ["npu.freq_mhz", "valid number", "fast"]),
    ("npu.freq_mhz=1e-9", ["npu.freq_mhz", "greater than or equal to 10"]),
    ("nonsense", ["expected KEY=VALUE"]),
]


@pytest.mark.parametrize("override,fragments", BAD_OVERRIDES, ids=[b[0] for b in BAD_OVERRIDES])
def test_bad_override_message(override, fragments):
    with pytest.raises(ConfigError) as info:
        load_config("neupims", [override])
    for frag in fragments:
        assert frag in str(info.value)


def test_bad_file_names_file_line_and_closest_key(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("npu:\n  n_arrays: 4\n  arary_height: 3\nmemory:\n  timing:\n    tRP: abc\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    msg = str(info.value)
    assert f"{f}:3: unknown key 'npu.arary_height'" in msg and "npu.array_height" in msg
    assert f"{f}:6: memory.timing.tRP" in msg and "'abc'" in msg


def test_malformed_yaml_names_line(tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("npu:\n  n_arrays: [4\n")
    with pytest.raises(ConfigError, match=r"broken.yaml:\d+:\d+: not valid YAML"):
        load_config(f)


def test_unknown_preset_lists_presets():
    with pytest.raises(ConfigError, match="presets: gpu-a100, gpu-h100, neupims, neupims-hbm3, npu-only"):
        load_config("neupimz")


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_config(f)


def test_base_loop_is_reported(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(f"base: {b}\n")
    b.write_text(f"base: {a}\n")
    with pytest.raises(ConfigError, match="inheritance loops"):
        load_config(a)


def test_defaults_equal_neupims_preset():
    """The schema's defaults are the reference machine: the preset only documents them."""
    preset = load_config("neupims")
    assert MachineConfig(name="neupims", energy=preset.energy,
                         area=preset.area).to_dict() == preset.to_dict()


def test_cli_config_show_and_validate(capsys, tmp_path):
    assert main(["config", "show", "neupims", "--set", "npu.n_arrays=2"]) == 0
    assert "n_arrays: 2" in capsys.readouterr().out
    f = tmp_path / "ok.yaml"
    f.write_text("base: npu-only\n")
    assert main(["config", "validate", str(f)]) == 0
    assert "valid" in capsys.readouterr().out
    assert main(["config", "list"]) == 0
    assert "npu-pim-blocked" in capsys.readouterr().out


def test_cli_bad_config_is_one_line_exit_2(capsys):
    assert main(["config", "show", "neupims", "--set", "pim.row_buffer_mode=x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("archsim: error:") and "Traceback" not in err
    assert err.count("\n") == 1


def test_bad_entries_of_dict_valued_settings_name_the_override_and_the_full_key():
    with pytest.raises(ConfigError) as e:
        load_config("neupims", ["npu.vector.passes.bogus=2"])
    msg = str(e.value)
    assert "with --set npu.vector.passes.bogus=2" in msg and "[key]" not in msg
    assert "npu.vector.passes.bogus" in msg and "'softmax'" in msg
    with pytest.raises(ConfigError, match=r"passes\.softmax must be >= 1 \(got 0\)"):
        load_config("neupims", ["npu.vector.passes.softmax=0"])


# ------------------------------------------------------------------ cross-field timing rules
TIMING_BREAKS = [
    # (overrides, the key named, a fragment of the rule)
    (["memory.timing.tRAS=5"], "memory.timing.tRAS", "tRAS (5) must be >= tRCDRD (14)"),
    (["memory.timing.tRCDWR=40", "memory.timing.tRCDRD=14"], "memory.timing.tRAS",
     "tRAS (34) must be >= tRCDWR (40)"),
    (["memory.timing.tRC=40"], "memory.timing.tRC", "tRC (40) must be >= tRAS + tRP = 48"),
    (["memory.timing.tRTP_L=40"], "memory.timing.tRTP_L",
     "tRTP_L (40) must be <= tRAS (34)"),
    (["memory.timing.tWR=50"], "memory.timing.tWR", "tWR (50) must be <= tRAS (34)"),
    (["memory.timing.CWL=20"], "memory.timing.CWL", "CWL (20) must be <= CL (14)"),
    (["memory.timing.tWTR_L=2"], "memory.timing.tWTR_L", "tWTR_L (2) must be >= tWTR_S (6)"),
    (["memory.timing.tCCD_S=3"], "memory.timing.tCCD_L", "tCCD_L (2) must be >= tCCD_S (3)"),
    (["memory.timing.tRRD_L=3"], "memory.timing.tRRD_L", "tRRD_L (3) must be >= tRRD_S (4)"),
    (["memory.timing.tFAW=3", "memory.timing.tRRD_S=4"], "memory.timing.tFAW",
     "tFAW (3) must be >= tRRD_S (4)"),
    (["memory.timing.tRFC=40"], "memory.timing.tRFC", "tRFC (40) must be >= tRC (48)"),
    (["memory.timing.tRFC=5000"], "memory.timing.tRFC", "tRFC (5000) must be < tREFI (3900)"),
]


@pytest.mark.parametrize("overrides,key,fragment", TIMING_BREAKS,
                         ids=[" ".join(t[0]) for t in TIMING_BREAKS])
def test_timing_rule_names_the_key_and_the_set(overrides, key, fragment):
    with pytest.raises(ConfigError) as info:
        load_config("neupims", overrides)
    msg = str(info.value)
    assert f"{key}: {fragment}" in msg and "--set memory.timing." in msg
    assert "\n" not in msg


def test_every_timing_rule_has_a_breaking_case():
    from archsim.config import TIMING_RULES

    def broken_by(fragment: str, r) -> bool:
        return (fragment.startswith(f"{r.lhs.replace('+', ' + ')} (")
                and f" {r.op} {r.rhs.replace('+', ' + ')} " in fragment)

    missing = [(r.lhs, r.op, r.rhs) for r in TIMING_RULES
               if not any(broken_by(f, r) for _, _, f in TIMING_BREAKS)]
    assert not missing, f"timing rules without a case in TIMING_BREAKS: {missing}"


def test_timing_rule_in_a_file_names_its_line(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("base: neupims\nmemory:\n  timing:\n    tRCDRD: 14\n    tRAS: 5\n")
    with pytest.raises(ConfigError, match=rf"{f}:5: memory.timing.tRAS: tRAS \(5\)"):
        load_config(f)


def test_the_presets_satisfy_every_timing_rule():
    from archsim.config import timing_rule_violations

    for name in list_presets():
        assert timing_rule_violations(load_config(name).memory.timing) == []


# ------------------------------------------------------------------ YAML files
def test_duplicate_yaml_key_names_file_line_and_key(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("base: neupims\nmemory:\n  timing:\n    tRAS: 40\n    tRAS: 41\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert str(info.value) == (f"{f}:5: duplicate key 'tRAS' (first given on line 4); a key "
                               "may appear once per mapping")


def test_binary_config_file_is_one_line(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ConfigError, match=rf"{f}: not a text file"):
        load_config(f)


def test_a_preset_is_parsed_once_per_process(monkeypatch):
    import archsim.config.loading as c      # where load_config looks both up

    calls = []
    real = c.parse_yaml_mapping
    monkeypatch.setattr(c, "_YAML_CACHE", {})
    monkeypatch.setattr(c, "parse_yaml_mapping", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    first = [load_config("neupims", [f"npu.n_arrays={n}"]) for n in (1, 2, 4, 8)]
    assert len(calls) == 1
    assert first[3] == load_config("neupims") and first[0].npu.n_arrays == 1


def test_a_changed_file_is_parsed_again(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("base: neupims\nnpu:\n  n_arrays: 4\n")
    assert load_config(f).npu.n_arrays == 4
    f.write_text("base: neupims\nnpu:\n  n_arrays: 16\n")   # size changes with the value
    assert load_config(f).npu.n_arrays == 16
