"""The flag walk: every option of ``archsim run``, ``archsim compare`` and ``archsim mem run``
changes what the command produces, or is rejected, or is listed with the reason (the CLI
side of the key walk, ``tests/test_config_keywalk.py``).

The options are read from the commands themselves (typer/click parameters), so an option added
later is walked too and fails until :data:`WALKS` says how to walk it. Each walk runs the
command in-process under a small context (tiny-gpt, batch 8; the GPU system for serving runs;
a 300-request trace on 2 channels) without the option and with it, and compares the result:
the JSON the command writes (wall-clock times removed) and its printed output. An option must
change the JSON (``result``), make the command fail with a one-line error (``rejected``: it
needs another option, which the error names), or produce what its entry claims (``file``: the
file it names is written; ``display``: only the terminal output changes; ``execution``: how
the command runs, e.g. in worker processes, and the result must be the same).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer

from archsim.cli import app, main

RUN = ["run", "--model", "tiny-gpt", "--batch", "8", "--quiet"]
SERVE = ["run", "--system", "gpu", "--model", "tiny-gpt", "--serve", "--num-requests", "6",
         "--dataset", "alpaca", "--quiet"]
SERVE_NPU = ["run", "--model", "tiny-gpt", "--serve", "--requests", "{lengths}", "--quiet"]
COMPARE = ["compare", "--model", "tiny-gpt", "--batch", "8", "--systems", "gpu,npu", "--quiet"]
TIGHT = ["run", "--system", "gpu", "--model", "tiny-gpt", "--batch", "64", "--set",
         "gpu.memory_bytes=4000000", "--quiet"]        # weights fit, the KV cache of 64 does not
MEM = ["mem", "run", "--trace", "{trace}", "--set", "memory.org.channels=2"]

#: {(command, option): (context, arguments with the option, claim, why)}. ``claim``: ``result``
#: (the JSON changes), ``rejected`` (exit 2, one line naming the option), ``file`` (the path
#: after the option is written), ``display`` (printed output only), ``execution`` (how it runs,
#: the result unchanged). ``{name}`` in an argument is
#: a file the test writes (:func:`_files`).
WALKS: dict[tuple[str, str], tuple[list[str], list[str], str, str]] = {
    ("run", "--system"): (RUN, ["--system", "npu"], "result", ""),
    ("run", "--model"): (RUN, ["--model", "tiny-llama"], "result", ""),
    ("run", "--requests"): (RUN, ["--requests", "{snapshot}"], "result", "a decode snapshot"),
    ("run", "--batch"): (RUN, ["--batch", "16"], "result", ""),
    ("run", "--dataset"): (RUN, ["--dataset", "alpaca"], "result", ""),
    ("run", "--seed"): (RUN, ["--seed", "1"], "result", ""),
    ("run", "--set"): (RUN, ["--set", "npu.n_arrays=2"], "result", ""),
    ("run", "--iterations"): (RUN, ["--iterations", "2"], "result", ""),
    ("run", "--serve"): (RUN, ["--serve", "--num-requests", "3", "--system", "gpu"], "result",
                         "a serving run instead of decode iterations"),
    ("run", "--num-requests"): (SERVE, ["--num-requests", "4"], "result", ""),
    ("run", "--arrival"): (SERVE, ["--arrival", "poisson", "--rate", "50"], "result",
                           "poisson needs --rate"),
    ("run", "--rate"): (SERVE + ["--arrival", "poisson", "--rate", "50"], ["--rate", "5"],
                        "result", "the later --rate wins"),
    ("run", "--timestamps"): (SERVE + ["--num-requests", "3"], ["--timestamps", "{timestamps}"],
                              "result", ""),
    ("run", "--chunked-prefill"): (SERVE, ["--chunked-prefill", "8"], "result", ""),
    ("run", "--max-prefill-tokens"): (SERVE, ["--max-prefill-tokens", "8"], "result", ""),
    ("run", "--timing"): (SERVE_NPU, ["--timing", "exact"], "result",
                          "NPU systems only (default surrogate)"),
    ("run", "--slo-ttft"): (SERVE, ["--slo-ttft", "0.05"], "result",
                            "SLO attainment and goodput in the JSON"),
    ("run", "--slo-tpot"): (SERVE, ["--slo-tpot", "0.01"], "result",
                            "SLO attainment and goodput in the JSON"),
    ("run", "--csv"): (SERVE, ["--csv", "{out}/requests.csv"], "file", ""),
    ("run", "--replicas"): (SERVE, ["--replicas", "2"], "result",
                            "two copies of the system share the requests"),
    ("run", "--router"): (SERVE + ["--replicas", "3", "--arrival", "poisson", "--rate", "3000"],
                          ["--router", "least-loaded"], "result",
                          "round-robin without it; needs --replicas"),
    ("run", "--json"): (RUN, ["--json", "{out}/other.json"], "file", ""),
    ("run", "--trace"): (RUN, ["--trace", "{out}/trace.json"], "file", ""),
    ("run", "--plots"): (RUN, ["--plots", "{out}/plots"], "file", ""),
    ("run", "--ignore-capacity"): (TIGHT,
                                   ["--ignore-capacity"], "result",
                                   "a batch the GPU memory cannot hold is rejected without it"),
    ("run", "--keep-channels"): (RUN + ["--requests", "{snapshot}"], ["--keep-channels"],
                                 "result", "the snapshot's channels instead of min_load"),
    ("run", "--quiet"): (RUN[:-1], ["--quiet"], "display", "the progress bar (a terminal only)"),
    ("run", "--program"): (RUN, ["--program", str(Path(__file__).resolve().parents[1] / "examples"
                                                   / "gemm_tile.asm")], "rejected",
                           "a program fixes model and batch: --model/--batch beside it are "
                           "refused (tests/test_program_examples.py runs it alone)"),
    ("compare", "--model"): (COMPARE, ["--model", "tiny-llama"], "result", ""),
    ("compare", "--requests"): (COMPARE, ["--requests", "{snapshot}"], "result", ""),
    ("compare", "--batch"): (COMPARE, ["--batch", "16"], "result", ""),
    ("compare", "--dataset"): (COMPARE, ["--dataset", "alpaca"], "result", ""),
    ("compare", "--seed"): (COMPARE, ["--seed", "1"], "result", ""),
    ("compare", "--set"): (COMPARE, ["--set", "npu.n_arrays=2"], "result", ""),
    ("compare", "--systems"): (COMPARE, ["--systems", "gpu,npu-pim"], "result", ""),
    ("compare", "--paper"): (COMPARE, ["--paper", "--batch", "8"], "rejected",
                             "the grid fixes its own batches (tests/test_cli_run.py runs it "
                             "with a stand-in simulator)"),
    ("compare", "--json"): (COMPARE, ["--json", "{out}/other.json"], "file", ""),
    ("compare", "--plots"): (COMPARE, ["--plots", "{out}/plots"], "file", ""),
    ("compare", "--ignore-capacity"): (["compare", "--systems", "gpu"] + TIGHT[3:],
                                       ["--ignore-capacity"], "result",
                                       "a batch the GPU memory cannot hold is rejected "
                                       "without it"),
    ("compare", "--quiet"): (COMPARE[:-1], ["--quiet"], "display", "the progress bar"),
    ("compare", "--jobs"): (["compare", "--model", "tiny-gpt", "--batch", "8", "--systems",
                             "npu,npu-pim", "--quiet"], ["--jobs", "2"], "execution",
                            "two worker processes run the systems; the result must not change"),
    ("compare", "--ablation"): (COMPARE[:5] + ["--quiet"], ["--ablation"], "result",
                                "the feature ablation instead of the systems"),
    ("compare", "--keep-channels"): (COMPARE + ["--requests", "{snapshot}"], ["--keep-channels"],
                                     "result", "the snapshot's channels on npu (gpu: ignored, "
                                     "said so)"),
    ("mem run", "--trace"): (MEM, ["--trace", "{trace2}"], "result", ""),
    ("mem run", "--config"): (MEM, ["--config", "{slow_config}"], "result", ""),
    ("mem run", "--set"): (MEM, ["--set", "memory.timing.tRCDRD=20"], "result", ""),
    ("mem run", "--format"): (MEM, ["--format", "ramulator"], "rejected",
                              "a DRAMsim3 trace read as Ramulator's format"),
    ("mem run", "--engine"): (MEM, ["--engine", "exact"], "result",
                              "the JSON names the engine (both engines give identical "
                              "statistics: tests/test_memory_fast.py)"),
    ("mem run", "--json"): (MEM, ["--json", "{out}/other.json"], "file", ""),
    ("mem run", "--log"): (MEM, ["--log", "{out}/log.csv"], "file", ""),
    ("mem run", "--check"): (MEM, ["--check"], "result", "runs the timing checker"),
}


def _options(command: str) -> list[str]:
    """The long options of ``archsim <command>`` (``mem run``: a subcommand)."""
    cmd = typer.main.get_command(app)
    for part in command.split():
        cmd = cmd.commands[part]
    return [next(o for o in p.opts if o.startswith("--")) for p in cmd.params
            if any(o.startswith("--") for o in p.opts) and "--help" not in p.opts]


def _files(d: Path) -> dict[str, str]:
    (d / "out").mkdir()
    (d / "snapshot.csv").write_text("seq_len,ch_idx\n" + "".join(
        f"{40 + 7 * i},{(5 * i) % 3}\n" for i in range(8)))
    (d / "lengths.tsv").write_text("input_toks\toutput_toks\n4\t2\n9\t3\n6\t2\n")
    (d / "timestamps.txt").write_text("0\n0.001\n0.01\n")
    (d / "trace.trc").write_text("".join(f"{(i * 64 * 7) % (1 << 22):#x} "
                                         f"{'WRITE' if i % 4 == 0 else 'READ'} {i // 2}\n"
                                         for i in range(300)))
    (d / "trace2.trc").write_text("".join(f"{i * 64:#x} READ {i}\n" for i in range(300)))
    (d / "slow.yaml").write_text("base: neupims\nmemory:\n  timing:\n    tRCDRD: 24\n"
                                 "    tRCDWR: 24\n    tRAS: 40\n")
    names = {"snapshot": "snapshot.csv", "lengths": "lengths.tsv",
             "timestamps": "timestamps.txt", "trace": "trace.trc", "trace2": "trace2.trc",
             "slow_config": "slow.yaml", "out": "out"}
    return {k: str(d / v) for k, v in names.items()}


def _strip_wall(x):
    if isinstance(x, dict):
        return {k: _strip_wall(v) for k, v in x.items() if "wall" not in k}
    if isinstance(x, list):
        return [_strip_wall(v) for v in x]
    return x


def _invoke(capsys, args: list[str], files: dict[str, str], json_path: Path):
    """Run ``archsim args --json json_path``: (exit code, JSON or None, stdout, stderr)."""
    args = [a.format(**files) for a in args]
    if "--json" not in args:
        args = args + ["--json", str(json_path)]
    if json_path.exists():
        json_path.unlink()
    rc = main(args)
    out = capsys.readouterr()
    data = _strip_wall(json.loads(json_path.read_text())) if json_path.exists() else None
    return rc, data, re.sub(r"wall[^\n]*", "", out.out), out.err


@pytest.mark.parametrize("command,option", sorted(WALKS))
def test_each_option_changes_the_result_or_is_rejected_or_listed(command, option, tmp_path,
                                                                 capsys):
    context, extra, claim, why = WALKS[(command, option)]
    files = _files(tmp_path)
    rc0, before, out0, err0 = _invoke(capsys, context, files, tmp_path / "a.json")
    if option != "--ignore-capacity":        # its context is rejected without it
        assert rc0 == 0, f"the context of {option} fails: {err0}"
    rc1, after, out1, err1 = _invoke(capsys, context + extra, files, tmp_path / "b.json")
    what = f"archsim {command} {' '.join(extra)} ({why or 'under ' + ' '.join(context)})"
    if claim == "rejected":
        assert rc1 == 2 and err1.count("\n") == 1 and err1.startswith("archsim: error:"), (
            f"{what}: expected a one-line rejection, got exit {rc1}: {err1}")
        return
    assert rc1 == 0, f"{what} failed: {err1}"
    if claim == "result":
        assert after != before or rc0 != rc1, f"{what} changed nothing in the JSON result"
    elif claim == "file":
        target = Path(extra[extra.index(option) + 1].format(**files))
        assert target.exists() and (target.is_file() or any(target.iterdir())), (
            f"{what} wrote nothing at {target}")
    else:
        assert after == before, f"{what} is listed as {claim}-only but changed the result"


@pytest.mark.parametrize("command", ["run", "compare", "mem run"])
def test_every_option_of_the_command_is_walked(command):
    options = _options(command)
    assert len(options) >= 7
    missing = [o for o in options if (command, o) not in WALKS]
    assert not missing, f"options of archsim {command} nobody walks: {missing} (add to WALKS)"
    stale = [o for c, o in WALKS if c == command and o not in options]
    assert not stale, f"WALKS names options archsim {command} does not have: {stale}"
