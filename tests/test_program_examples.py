"""The shipped example programs assemble, disassemble to the same binary and run; a compiled
program directory runs through the CLI to the cycles of `archsim run`'s simulation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from archsim.cli import main

EXAMPLE_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(EXAMPLE_DIR.glob("*.asm"))


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


@pytest.mark.parametrize("src", EXAMPLES, ids=lambda p: p.stem)
def test_a_program_file_runs_in_the_compiled_loop_to_the_reference_loops_cycles(src, tmp_path):
    """`run --program FILE` runs the executor's compiled loop (a hand-written program of
    16 DMA streams of row-missing loads took minutes in the Python loop): the cycles of the
    readable reference loop (``fast_forward=False``) on the same program."""
    from archsim.config import load_config
    from archsim.memory.kernel import KernelMemory
    from archsim.npu.executor import Executor
    from archsim.npu.loader import load_program
    from isa.program import Program

    out = tmp_path / "r.json"
    assert main(["run", "--program", str(src), "--json", str(out)]) == 0
    cfg = load_config("neupims")
    ref = Executor(load_program(Program.from_text(src.read_text(), str(src)), cfg), cfg,
                   KernelMemory(cfg), fast_forward=False).run()
    assert json.loads(out.read_text())["cycles"] == ref.cycles > 0


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


@pytest.mark.parametrize("flags", [["--batch", "8"], ["--model", "tiny-gpt"], ["--serve"],
                                   ["--iterations", "2"], ["--keep-channels"],
                                   ["--trace", "t.json"]])
def test_run_program_refuses_the_workload_flags_it_cannot_use(flags, capsys):
    """``--program`` fixes model, batch and mapping: a workload flag beside it would be
    silently ignored, so it is refused in one line (exit 2) naming the flag."""
    rc = main(["run", "--program", str(EXAMPLE_DIR / "gemm_tile.asm"), *flags])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert flags[0] in err and "allowed with --program" in err, err


def test_program_directory_refuses_an_explicit_system_even_the_default(tmp_path, capsys):
    """A program directory carries its machine: ``--system neupims`` written by the user is
    refused like any other system (it used to pass because it equals the default)."""
    d = tmp_path / "c"
    assert main(["compile", "--model", "tiny-gpt", "--batch", "4", "--system", "npu",
                 "--layers", "window", "-o", str(d)]) == 0
    capsys.readouterr()
    rc = main(["run", "--program", str(d), "--system", "neupims"])
    err = capsys.readouterr().err
    assert rc == 2 and "--system and --set do not apply" in err, err


def test_python_dash_m_archsim_is_the_cli():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "archsim", "run", "--program",
                        str(EXAMPLE_DIR / "gemm_tile.asm")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "NPU cycles" in r.stdout, r.stderr


def test_a_hand_written_program_that_deadlocks_is_the_authors_error(tmp_path, capsys):
    """A deadlock of the user's own program names the file, the stream and the semaphore on
    one line with exit 2 (a compiled program's deadlock is a simulator bug, exit 3:
    tests/test_cli_boundary.py)."""
    src = tmp_path / "dead.asm"
    src.write_text(".spad 33554432\n.stream vu0\n    WAIT sem=7, count=1\n")
    assert main(["run", "--program", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(src) in err[0] and "vu0 waits on semaphore 7" in err[0]
