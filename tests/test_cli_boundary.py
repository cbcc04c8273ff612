"""The CLI boundary (archsim.cli.boundary): exit codes and the one line a failure prints."""
from __future__ import annotations

import subprocess
import sys

import pytest

import archsim.serving as serving
from archsim.cli import main
from archsim.cli.boundary import check_output_dir, check_output_file
from archsim.errors import ArchsimError, SimulationError

TINY = ["run", "--model", "tiny-gpt", "--batch", "2", "--quiet"]


def _err_lines(capsys) -> list[str]:
    return [x for x in capsys.readouterr().err.splitlines() if x.strip()]


def test_simulation_error_while_simulating_is_a_simulator_bug(monkeypatch, capsys):
    def deadlock(*a, **k):
        raise SimulationError("deadlock: stream sa0 waits on semaphore 3 (count 0)")
    monkeypatch.setattr(serving, "run_iterations", deadlock)
    assert main(TINY) == 3
    lines = _err_lines(capsys)
    assert lines[0].startswith("Traceback")       # the bug report needs it
    assert lines[-1].startswith("archsim: internal error at tests/test_cli_boundary.py:")
    assert "(a bug in the simulator, not a problem with your input" in lines[-1]
    assert "deadlock: stream sa0" in lines[-1]


def test_simulation_error_in_the_input_is_a_user_error(tmp_path, capsys):
    t = tmp_path / "big.trc"
    t.write_text("0xfffffffffff READ 0\n")           # an address beyond the device
    assert main(["mem", "run", "--trace", str(t)]) == 2
    (line,) = _err_lines(capsys)
    assert "big.trc:1: address" in line


def test_an_unexpected_exception_is_exit_3_with_the_reason(monkeypatch, capsys):
    def broken(*a, **k):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")
    monkeypatch.setattr(serving, "make_batch", broken)
    assert main(TINY) == 3
    lines = _err_lines(capsys)
    assert "Traceback" in lines[0] and "TypeError: unsupported operand" in lines[-1]
    assert "bug in the simulator" in lines[-1]


def test_a_capacity_error_found_while_simulating_stays_a_user_error(monkeypatch, capsys):
    def full(*a, **k):
        raise ArchsimError("memory capacity: the batch needs more than the device")
    monkeypatch.setattr(serving, "run_iterations", full)
    assert main(TINY) == 2
    assert _err_lines(capsys) == ["archsim: error: memory capacity: the batch needs more "
                                  "than the device"]


def test_os_error_names_the_file(monkeypatch, capsys):
    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", "/data/requests.tsv")
    monkeypatch.setattr(serving, "make_batch", denied)
    assert main(TINY) == 2
    assert _err_lines(capsys) == ["archsim: error: /data/requests.tsv: Permission denied"]


def test_unicode_error_names_the_binary_argument(monkeypatch, tmp_path, capsys):
    blob = tmp_path / "weird.tsv"
    blob.write_bytes(b"\xff\xfe\x00binary")

    def decode(*a, **k):
        return b"\xff".decode("utf-8")
    monkeypatch.setattr(serving, "make_batch", decode)
    assert main(TINY + ["--requests", str(blob)]) == 2
    assert _err_lines(capsys) == [f"archsim: error: {blob}: not a text file (binary?)"]


def test_keyboard_interrupt_is_130(monkeypatch, capsys):
    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(serving, "make_batch", interrupt)
    assert main(TINY) == 130
    assert _err_lines(capsys) == ["archsim: interrupted"]


def test_usage_errors_are_one_line(capsys):
    assert main(["run", "--batch", "many"]) == 2
    (line,) = _err_lines(capsys)
    assert line.startswith("archsim run: error: Invalid value for '--batch'")
    assert "see 'archsim run --help'" in line


def test_version_and_short_help(capsys):
    from archsim import version_string

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == version_string()
    assert version_string().startswith("archsim 0.1.0")
    assert main(["-h"]) == 0
    assert "Usage: archsim" in capsys.readouterr().out
    assert main(["mem", "run", "-h"]) == 0
    assert "--trace" in capsys.readouterr().out


def test_console_script_exit_code_and_no_traceback(tmp_path):
    """The real entry point, as a user runs it."""
    code = "import sys; from archsim.cli import main; sys.exit(main())"
    r = subprocess.run([sys.executable, "-c", code, "run", "--seed", "-1"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("archsim: error: --seed -1: must be >= 0 (numpy's generators "
                                "take non-negative seeds)")


@pytest.mark.parametrize("make,check,fragment", [
    (lambda d: d, check_output_file, "is a directory"),
    (lambda d: (d / "f").touch() or d / "f" / "x.json", check_output_file, "is a file"),
    (lambda d: (d / "f").touch() or d / "f", check_output_dir, "is not a directory"),
    (lambda d: (d / "f").touch() or d / "f" / "a" / "b", check_output_dir, "is a file"),
])
def test_output_checks(tmp_path, make, check, fragment):
    with pytest.raises(ArchsimError, match=fragment):
        check(make(tmp_path), "--out")


def test_output_checks_accept_new_and_existing_targets(tmp_path):
    check_output_file(tmp_path / "new" / "deeper" / "x.json", "--json")
    (tmp_path / "old.json").write_text("{}")
    check_output_file(tmp_path / "old.json", "--json")
    check_output_dir(tmp_path, "--plots")
    check_output_dir(tmp_path / "a" / "b", "--plots")
    assert not (tmp_path / "new").exists() and not (tmp_path / "a").exists()  # nothing made


def test_a_real_deadlock_is_exit_3_and_says_where_it_was_raised(monkeypatch, capsys):
    """A compiled program that deadlocks in the executor: a simulator bug, with the file and
    line of the raise and what to report."""
    from archsim.config import load_config
    from archsim.npu.executor import run_timing
    from isa.encoding import Instruction as I
    from isa.program import Program

    def deadlocking(*a, **k):
        cfg = load_config("neupims")
        p = Program(spad_size_bytes=cfg.npu.scratchpad.size_bytes)
        p.stream("sa")
        p.emit("sa", I("WAIT", sem=3, count=1))       # nobody signals semaphore 3
        p.emit("sa", I("END"))
        run_timing(p, cfg)
    monkeypatch.setattr(serving, "run_iterations", deadlocking)
    assert main(TINY) == 3
    lines = _err_lines(capsys)
    assert lines[0].startswith("Traceback")
    last = lines[-1]
    assert last.startswith("archsim: internal error at archsim/npu/executor.py:")
    assert "bug in the simulator" in last and "please report it" in last
    assert "deadlock" in last.lower()


def test_the_internal_error_names_the_innermost_raise_site(monkeypatch, capsys):
    def broken(*a, **k):
        return {}["missing key"]
    monkeypatch.setattr(serving, "make_batch", broken)
    assert main(TINY) == 3
    last = _err_lines(capsys)[-1]
    assert f"at tests/test_cli_boundary.py:{broken.__code__.co_firstlineno + 1} in broken" in last
    assert "KeyError: 'missing key'" in last


def test_a_users_mistake_stays_one_line_without_a_site(capsys):
    assert main(["run", "--model", "no-such-model", "--batch", "2", "--quiet"]) == 2
    (line,) = _err_lines(capsys)
    assert line.startswith("archsim: error: ") and "internal" not in line and ".py:" not in line
