"""The co-simulation harness itself: Verilog-2001 sources, one build per parameter set,
errors as CosimError, and the ``archsim cosim`` report."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from archsim import cosim
from archsim.cli import main

pytestmark = pytest.mark.cosim


@pytest.mark.parametrize("block", sorted(cosim.BLOCKS))
def test_sources_compile_as_verilog_2001_without_warnings(block, tmp_path):
    cosim.require_icarus_or_skip()
    b = cosim.BLOCKS[block]
    cmd = ["iverilog", "-g2001", "-Wall", "-o", str(tmp_path / "a.vvp"),
           *[f"-I{cosim.RTL_DIR / d}" for d in b.includes],
           *[str(cosim.RTL_DIR / s) for s in b.sources]]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr


@pytest.mark.parametrize("block", sorted(cosim.BLOCKS))
def test_every_source_starts_with_a_header_comment_and_sets_a_timescale(block):
    for src in cosim.BLOCKS[block].sources:
        text = (cosim.RTL_DIR / src).read_text()
        assert text.startswith("// "), f"{src}: no header comment"
        for word in ("Interface", "Timing", "Number format"):
            assert word in text.split("`timescale")[0], f"{src}: header lacks '{word}'"
        assert "`timescale 1ns/1ps" in text, f"{src}: no `timescale"


def test_build_key_differs_per_parameter_set_and_waves():
    b = cosim.BLOCKS["systolic_array"]
    keys = {cosim.build_key(b, {"H": h, "W": 4}, waves) for h in (4, 8) for waves in (0, 1)}
    assert len(keys) == 4
    assert cosim.build_key(b, {"H": 4, "W": 4}, False) == cosim.build_key(b, {"W": 4, "H": 4},
                                                                            False)


def test_parameters_follow_config_overrides():
    cfg = cosim.load_cosim_config("neupims", ["memory.timing.tRCDRD=17", "pim.acc_bits=20"])
    assert cosim.verilog_parameters("bank_dual_rowbuf", cfg)["T_RCDRD"] == 17
    assert cosim.verilog_parameters("pim_mac", cfg)["ACC_W"] == 20
    cfg = cosim.load_cosim_config("neupims", ["npu.array_height=6", "npu.array_width=3"])
    p = cosim.verilog_parameters("systolic_array", cfg)
    assert (p["H"], p["W"], p["MIN_ROWS"], p["ACC_W"]) == (6, 3, 4, 2 * 16 + 3)


@pytest.mark.parametrize("call, message", [
    (lambda: cosim.get_block("alu"), "unknown RTL block 'alu'"),
    (lambda: cosim.run_variant("pim_mac", "l99"), "no variant 'l99'"),
    (lambda: cosim.run_variant("pim_mac", mutation="flip"), "no mutation 'flip'"),
])
def test_user_mistakes_raise_cosim_error(call, message):
    with pytest.raises(cosim.CosimError, match=message):
        call()


def test_cli_reports_counts_and_exits_1_when_a_mutated_model_disagrees(capsys, tmp_path):
    cosim.require_icarus_or_skip()
    assert main(["cosim", "pim_mac", "--variant", "l8_acc24", "--scale", "0.2",
                 "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "pim_mac" in out and "PASS" in out and "stimuli" in out and "cycles" in out
    assert (tmp_path / "r.json").exists()
    assert main(["cosim", "pim_mac", "--variant", "l8_acc24", "--scale", "0.2",
                 "--mutation", "bit"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "cycle" in out
    for line in out.splitlines():
        if "run dir:" in line:
            shutil.rmtree(line.split("run dir:")[1].strip(), ignore_errors=True)


def test_cli_unknown_block_is_a_one_line_error(capsys):
    assert main(["cosim", "alu"]) == 2
    assert "unknown RTL block 'alu'" in capsys.readouterr().err
