"""The core simulator imports no optional dependency; the table of extras is the one place that
says which command needs which, and pyproject.toml and the README agree with it."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from archsim import extras
from archsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "matplotlib", "sklearn", "scipy", "cocotb", "cocotb_tools", "pandas",
         "pyarrow", "optuna", "transformers", "pyverilog", "dask", "distributed")

_PROBE = """
import sys
{body}
heavy = {heavy!r}
print("loaded:" + ",".join(sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy))))
"""


def _loaded_after(body: str) -> set[str]:
    code = _PROBE.format(body=body, heavy=HEAVY)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("loaded:"), r.stdout
    return set(filter(None, last[len("loaded:"):].split(",")))


@pytest.mark.parametrize("body", [
    "import archsim.system",
    "import archsim.serving, archsim.npu.executor, mapping.compiler",
    "import contextlib, io\nfrom archsim.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n    main(['--help'])",
    "import contextlib, io\nfrom archsim.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n    main(['run', '--help'])",
], ids=["archsim.system", "serving+engine+compiler", "archsim --help", "archsim run --help"])
def test_core_imports_no_optional_dependency(body):
    assert _loaded_after(body) == set()


def test_every_optional_module_belongs_to_one_extra():
    assert {m for m in HEAVY if extras.extra_of_module(m) is None} == set()
    assert extras.extra_of_module("torch.fx").name == "validate"
    assert extras.extra_of_module("numpy") is None


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[=<>\[; ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_pyproject_extras_match_the_table_and_the_core_is_light():
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    opt = proj["optional-dependencies"]
    for e in extras.EXTRAS.values():
        assert e.name in opt, e.name
        assert {p.split("[")[0].lower() for p in e.packages} <= _names(opt[e.name]), e.name
    core = _names(proj["dependencies"])
    optional = {p.split("[")[0].lower() for e in extras.EXTRAS.values() for p in e.packages}
    assert core & optional == set()
    assert not {"pyarrow", "tqdm", "scipy", "torch", "matplotlib"} & core
    assert opt["all"] == [f"archsim[{','.join(extras.EXTRAS)}]"]
    assert "archsim[all]" in opt["dev"]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '-e ".[dev]"' in setup


def test_readme_shows_the_table_of_extras():
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- extras-table:[^\n]*-->\n(.*?)\n<!-- /extras-table -->", readme, re.S)
    assert m, "README.md lost its extras table markers"
    assert m.group(1) == extras.markdown_table()


def test_missing_extra_is_one_line_exit_2_before_any_work(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["validate", "--model", "tiny-gpt"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("archsim: error: archsim validate needs torch: pip install "
                   "'archsim[validate]' (from a checkout: pip install -e '.[validate]')")


def test_plots_without_matplotlib_fail_before_simulating(monkeypatch, capsys, tmp_path):
    import importlib.util

    import archsim.serving as serving

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))

    def never(*a, **k):
        raise AssertionError("simulated although an extra is missing")
    monkeypatch.setattr(serving, "run_iterations", never)
    assert main(["run", "--model", "tiny-gpt", "--batch", "2", "--quiet",
                 "--plots", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "archsim run --plots needs matplotlib" in err
    assert "pip install 'archsim[plots]'" in err


def test_an_import_of_a_missing_extra_deep_inside_is_still_one_line(monkeypatch, capsys):
    """A lazy import that no command-level check covered: the boundary names the extra."""
    import archsim.serving as serving

    def lazy(*a, **k):
        raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")
    monkeypatch.setattr(serving, "run_iterations", lazy)
    assert main(["run", "--model", "tiny-gpt", "--batch", "2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("archsim: error: archsim run needs sklearn: pip install 'archsim[surrogate]' "
                   "(from a checkout: pip install -e '.[surrogate]')")


def test_a_missing_module_that_is_no_extra_is_a_simulator_bug(monkeypatch, capsys):
    import archsim.serving as serving

    def broken(*a, **k):
        raise ModuleNotFoundError("No module named 'archsim.nothere'", name="archsim.nothere")
    monkeypatch.setattr(serving, "run_iterations", broken)
    assert main(["run", "--model", "tiny-gpt", "--batch", "2", "--quiet"]) == 3
    assert "bug in the simulator" in capsys.readouterr().err.splitlines()[-1]
