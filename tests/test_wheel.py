"""The wheel works as an installed package: built from a copy of the sources, installed into a
fresh virtual environment, and run from a directory that is not the checkout.

The fresh environment gets the wheel alone (``--no-deps``); its dependencies (torch, numpy,
cocotb, ...) come from this test's own environment through a ``.pth`` line, so nothing is
downloaded. That line adds the directory to ``sys.path`` without processing the ``.pth`` files
in it, so this checkout's editable install does not leak in: ``archsim`` must come from the
wheel (checked). Runs ``archsim --version``, ``archsim cosim pim_mac`` (needs Icarus Verilog,
which ``make test`` installs), a small ``archsim run`` and ``archsim compile``, and a sweep of
a shipped example spec.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "sim_build",
                                "__pycache__", ".pytest_cache", ".hypothesis", "out")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 240) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin directory, a working directory outside the checkout, environment)."""
    try:
        import setuptools
        import wheel  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"building the wheel needs setuptools and wheel here ({exc})")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} < 77 (SPDX license expressions)")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          str(src), "-w", str(tmp / "dist")], tmp, env)
    (whl,) = (tmp / "dist").glob("archsim-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
          str(whl)], tmp, env)
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp, env).strip())
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (site / "zz_archsim_test_deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    work = tmp / "elsewhere"
    work.mkdir()
    env = dict(env, PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               XDG_CACHE_HOME=str(tmp / "cache"))
    return venv / "bin", work, env, whl


def test_the_wheel_ships_rtl_examples_and_the_license(installed):
    *_, whl = installed
    names = set(zipfile.ZipFile(whl).namelist())
    for rtl in sorted(p.relative_to(ROOT) for p in (ROOT / "rtl").rglob("*")
                      if p.suffix in (".v", ".vh", ".py") and "sim_build" not in p.parts):
        assert f"archsim/{rtl.as_posix()}" in names, rtl
    for ex in (ROOT / "examples").glob("*.yaml"):
        assert f"archsim/examples/{ex.name}" in names
    for preset in (ROOT / "archsim" / "presets").glob("*.yaml"):
        assert f"archsim/presets/{preset.name}" in names
    assert "workloads/data/length_summary.json" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    meta = next(zipfile.ZipFile(whl).read(n).decode() for n in names if n.endswith("METADATA"))
    assert "License-Expression: Apache-2.0" in meta


def test_installed_archsim_is_the_wheel_and_has_a_version(installed):
    bindir, work, env, _ = installed
    out = _run([str(bindir / "archsim"), "--version"], work, env)
    assert out.startswith("archsim 0.1.0") and "git" not in out   # not the checkout
    where = _run([str(bindir / "python"), "-c", "import archsim; print(archsim.__file__)"],
                 work, env)
    assert str(bindir.parent) in where and str(ROOT) not in where


def test_installed_cosim_runs_a_block(installed):
    if shutil.which("iverilog") is None:
        pytest.skip("Icarus Verilog (iverilog) is not installed; make test installs it")
    bindir, work, env, _ = installed
    out = _run([str(bindir / "archsim"), "cosim", "pim_mac"], work, env)
    assert re.search(r"total: (\d+)/\1 passed", out), out
    assert (Path(env["XDG_CACHE_HOME"]) / "archsim" / "sim_build").is_dir()
    assert not list((bindir.parent / "lib").rglob("sim_build"))   # not in site-packages


def test_installed_run_compile_and_example_sweep(installed):
    bindir, work, env, _ = installed
    arch = str(bindir / "archsim")
    out = _run([arch, "run", "--system", "gpu", "--model", "tiny-gpt", "--batch", "4",
                "--quiet", "--json", "r.json"], work, env)
    assert "tokens/s" in out and (work / "r.json").is_file()
    _run([arch, "compile", "--system", "npu", "--model", "tiny-gpt", "--batch", "2", "-o",
          "c"], work, env)
    assert (work / "c" / "program.bin").is_file()
    examples = Path(_run([str(bindir / "python"), "-c",
                          "import archsim.examples as e; print(e.__path__[0])"], work, env).strip())
    spec = work / "quick.yaml"   # the shipped example, cut to 2 points
    text = (examples / "sweep_gpu_quick.yaml").read_text()
    spec.write_text(text.replace("batch: [16, 32, 64, 128, 256, 512]", "batch: [16]")
                    .replace("model: [gpt3-7b, gpt3-13b]", "model: [gpt3-7b]")
                    .replace("gpu.gemm_efficiency: [0.6, 0.8]", "gpu.gemm_efficiency: [0.6]"))
    out = _run([arch, "sweep", str(spec), "--out", "sw", "--jobs", "1", "-q"], work, env)
    assert "2 points evaluated (2 ok)" in out, out
