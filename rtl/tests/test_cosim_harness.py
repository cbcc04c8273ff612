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


def test_cli_reports_counts_and_a_caught_mutation_as_expected_with_exit_0(capsys, tmp_path):
    cosim.require_icarus_or_skip()
    assert main(["cosim", "pim_mac", "--variant", "l8_acc24", "--scale", "0.2",
                 "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "pim_mac" in out and "PASS" in out and "stimuli" in out and "cycles" in out
    assert "total: 1/1 passed on icarus" in out
    assert (tmp_path / "r.json").exists()
    assert main(["cosim", "pim_mac", "--scale", "0.2", "--mutation", "bit"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("pim_mac ")]
    assert len(rows) == 2 and all("failed as expected: mutation caught" in r for r in rows)
    assert "total: 2/2 runs caught mutation 'bit' (each failed as expected)" in out
    assert "FAIL " not in out and "0/2" not in out.split("total:")[1]


def test_cli_mutation_that_is_not_caught_says_so_and_exits_1(capsys):
    # tFAW + 1 cannot bind a single bank with one shared row buffer (tRC 48 > tFAW 30, see
    # test_cosim_bank_dual_rowbuf): a real mutation this bench cannot see
    cosim.require_icarus_or_skip()
    assert main(["cosim", "bank_dual_rowbuf", "--variant", "single", "--scale", "0.2",
                 "--mutation", "faw"]) == 1
    out = capsys.readouterr().out
    assert "NOT CAUGHT: passed with the model perturbed" in out
    assert "total: 0/1 runs caught mutation 'faw'" in out


def test_cli_unknown_block_is_a_one_line_error(capsys):
    assert main(["cosim", "alu"]) == 2
    assert "unknown RTL block 'alu'" in capsys.readouterr().err


def test_cli_unknown_simulator_is_a_one_line_error_naming_the_allowed_ones(capsys):
    assert main(["cosim", "pim_mac", "--simulator", "modelsim"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "unknown simulator 'modelsim'; allowed: icarus, verilator" in err


def test_cli_missing_verilator_is_a_one_line_error_naming_the_install(capsys, monkeypatch,
                                                                     tmp_path):
    from archsim.cosim import simulators

    monkeypatch.setenv("PATH", str(tmp_path))   # no verilator (nor anything else) on PATH
    simulators.verilator_version.cache_clear()
    try:
        assert main(["cosim", "pim_mac", "--simulator", "verilator"]) == 2
    finally:
        simulators.verilator_version.cache_clear()
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "verilator executable is not on PATH" in err and "apt-get install verilator" in err
    assert "allowed simulators: icarus, verilator" in err


@pytest.mark.parametrize("make_args, message", [
    (lambda d: ["--json", str(d)], "is a directory; give a file path"),
    (lambda d: ["--json", str(d / "missing" / "r.json")], "does not exist"),
    (lambda d: ["--build-dir", str(d / "afile" / "builds")], "cannot write there"),
    (lambda d: ["--build-dir", str(d / "afile")], "is a file, not a folder"),
])
def test_cli_bad_output_paths_are_one_line_errors_before_anything_is_built(
        capsys, tmp_path, make_args, message):
    (tmp_path / "afile").write_text("x")
    builds = tmp_path / "builds"
    args = ["cosim", "pim_mac", "--build-dir", str(builds)] + make_args(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and message in err, err
    assert not builds.exists() or not any(builds.iterdir()), "something was built first"


def test_cli_without_the_cosim_extra_names_the_extra_to_install(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cocotb_tools" else real(name, *a))
    assert main(["cosim", "pim_mac"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "ModuleNotFoundError" not in err
    assert "archsim cosim needs cocotb" in err and "pip install 'archsim[cosim]'" in err


def test_an_unknown_simulator_in_the_bench_environment_variable_is_an_error(monkeypatch):
    monkeypatch.setenv("ARCHSIM_COSIM_SIMULATORS", "icarus,questa")
    with pytest.raises(cosim.CosimError, match="unknown simulator 'questa'"):
        cosim.bench_simulators()


@pytest.mark.parametrize("block", sorted(cosim.BLOCKS))
def test_sources_lint_clean_with_verilator(block):
    # every Verilator warning is fatal in a build except WIDTH (see VERILATOR_BUILD_ARGS)
    from archsim.cosim import simulators

    cosim.require_simulator_or_skip("verilator")
    b = cosim.BLOCKS[block]
    cmd = ["verilator", "--lint-only", *simulators.VERILATOR_BUILD_ARGS,
           "--top-module", b.toplevel, *[f"-I{cosim.RTL_DIR / d}" for d in b.includes],
           *[str(cosim.RTL_DIR / s) for s in b.sources]]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr


def test_verilator_smoke_fp16_mac_passes_and_a_mutation_is_caught():
    # the default suite's one Verilator build (the full benches on Verilator are slow tests:
    # ARCHSIM_COSIM_SIMULATORS=icarus,verilator)
    r = cosim.assert_cosim_passes("pim_mac_fp", "fp16", simulator="verilator",
                                  stimulus_scale=0.2)
    assert r.simulator == "verilator" and r.stimuli > 2000
    cosim.assert_mutation_detected("pim_mac_fp", "fp16", "nan", simulator="verilator")
