"""Run one block variant in the simulator and read its results; the job a test bench reads."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from archsim.cosim import simulators
from archsim.cosim.blocks import get_block, get_variant
from archsim.cosim.build import _absolute_sys_path, build
from archsim.cosim.common import (CLOCK_PERIOD_NS, DEFAULT_BUILD_ROOT, DEFAULT_SEED,
                                  JOB_FILE, REPORT_FILE, TB_FILE_PATTERN, CosimError)
from archsim.cosim.models import load_cosim_config
from archsim.cosim.params import verilog_parameters


@dataclass
class TestOutcome:
    """One cocotb test of a run: name, pass/fail, failure message, stimulus and cycle counts,
    and the other counts its test bench reported (``extra``, e.g. a replay's
    ``disagreements`` and ``moved``: summed over the test's reports)."""

    name: str
    passed: bool
    message: str = ""
    stimuli: int = 0
    cycles: int = 0
    extra: dict = field(default_factory=dict)


@dataclass
class CosimResult:
    """The outcome of one block variant's co-simulation run.

    Attributes:
        block, variant: what ran.
        passed: every test ran and passed.
        tests: per-test outcomes (names, failure messages, stimulus/cycle counts).
        stimuli: stimulus items applied (sum over tests; what an item is depends on the block:
            a COMP step, a tile row, a command slot, an instruction word).
        cycles: clock cycles simulated (sum over tests, from the test bench).
        wall_s: wall time of build (if any) + simulation, seconds.
        build_dir, run_dir: where the build and this run live (run_dir removed on success
            unless kept).
        waves: the FST file when waves were requested.
        mutation: the model perturbation applied, if any.
        error: a message when the simulator did not produce results at all.
        parameters: the Verilog parameters of the build.
        simulator: the HDL simulator it ran on (``icarus`` or ``verilator``).
        build_s, sim_s: wall seconds of the build step (near 0 when the build was cached) and
            of the simulation (simulator start-up, Python test bench and models included).
        stimulus_s: wall seconds spent preparing a replay's stimulus (the simulator run that
            produces a command log, or the functional run of a COMP trace; near 0 when
            cached).
    """

    block: str
    variant: str
    passed: bool
    tests: list[TestOutcome] = field(default_factory=list)
    stimuli: int = 0
    cycles: int = 0
    wall_s: float = 0.0
    build_dir: str = ""
    run_dir: str = ""
    waves: str | None = None
    mutation: str | None = None
    error: str = ""
    parameters: dict[str, int] = field(default_factory=dict)
    simulator: str = "icarus"
    build_s: float = 0.0
    sim_s: float = 0.0
    stimulus_s: float = 0.0

    def failure_summary(self) -> str:
        """One paragraph naming each failed test and its message (for assertion messages)."""
        lines = [f"{self.block}[{self.variant}] failed"
                 + (f" (mutation {self.mutation})" if self.mutation else "")
                 + (f": {self.error}" if self.error else "")]
        lines += [f"  {t.name}: {t.message}" for t in self.tests if not t.passed]
        if self.run_dir:
            lines.append(f"  run dir: {self.run_dir}")
        return "\n".join(lines)

    def mutation_caught(self) -> bool:
        """A mutated run failed as it must: on cycle-level comparisons (every failed test's
        message names a cycle), not on an error of the harness or the simulator."""
        failed = [t for t in self.tests if not t.passed]
        return (not self.passed and not self.error and bool(failed)
                and all("cycle" in t.message for t in failed))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the result."""
        return asdict(self)


def _read_results(xml_path: Path, report_path: Path) -> list[TestOutcome]:
    counts: dict[str, dict[str, int]] = {}
    extras: dict[str, dict] = {}
    if report_path.exists():
        for line in report_path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                c = counts.setdefault(rec["test"], {"stimuli": 0, "cycles": 0})
                c["stimuli"] += int(rec.get("stimuli", 0))
                c["cycles"] += int(rec.get("cycles", 0))
                ex = extras.setdefault(rec["test"], {})
                for k, v in rec.items():
                    if k in ("test", "stimuli", "cycles"):
                        continue
                    if isinstance(v, int) and not isinstance(v, bool):
                        ex[k] = ex.get(k, 0) + v
                    else:
                        ex[k] = v
    out: list[TestOutcome] = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = case.get("name", "?")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        msg = ""
        if bad is not None:
            msg = (bad.get("message") or bad.text or "").strip()
        c = counts.get(name, {"stimuli": 0, "cycles": 0})
        out.append(TestOutcome(name, bad is None and case.find("skipped") is None, msg,
                               c["stimuli"], c["cycles"], extras.get(name, {})))
    return out


def _prepare_stimulus(block, var, cfg, label: str, root: Path, run_dir: Path,
                      log: str | Path | None, channel: int | None) -> str | None:
    """The real stimulus of a replay block, as a file the test bench reads (None for the
    blocks driven by random stimulus): a channel command log (the variant's workload run on
    ``cfg``, or the user's ``log`` checked against ``cfg``) or a COMP operand trace.

    Raises CosimError for ``log``/``channel`` given to another block and for a log that does
    not belong to ``cfg`` (:func:`archsim.cosim.replay.load_channel_log`)."""
    from archsim.cosim import replay

    if block.name != "pim_channel_replay" and (log is not None or channel is not None):
        raise CosimError(f"--log and --channel apply to block pim_channel_replay, not "
                         f"{block.name}")
    if block.name == "pim_channel_replay":
        if log is not None:
            rows, header = replay.load_channel_log(log, cfg, channel)
            return str(replay.write_channel_log(rows, header, run_dir / "channel_log.npz"))
        path = replay.channel_log(cfg, var.workload, root, channel, label=label)
        replay.load_channel_log(path, cfg, channel)     # the header matches cfg
        return str(path)
    if block.name == "pim_mac_fp_replay":
        return str(replay.comp_trace(cfg, var.dtype, root))
    return None


def run_variant(block_name: str, variant: str | None = None, *, config: str | None = None,
                overrides: tuple[str, ...] | list[str] = (), build_root: Path | None = None,
                waves: bool = False, mutation: str | None = None, seed: int = DEFAULT_SEED,
                testcase: str | None = None, keep: bool = False,
                stimulus_scale: float = 1.0,
                simulator: str = simulators.DEFAULT_SIMULATOR,
                log: str | Path | None = None, channel: int | None = None) -> CosimResult:
    """Build (if needed) and co-simulate one variant of a block.

    Args:
        block_name: a key of :data:`BLOCKS`.
        variant: a variant name (default: the block's first).
        config: preset name or YAML file the machine comes from (default: the variant's
            preset, else ``neupims``).
        overrides: extra ``dotted.key=value`` applied after the variant's own.
        build_root: where builds and runs live (default ``rtl/sim_build``).
        waves: dump an FST waveform (kept in the run dir).
        mutation: a model perturbation of :data:`MUTATIONS` (the run is then expected to fail).
        seed: base seed of every test's random stimulus (logged by the test bench).
        testcase: run only the cocotb test of this name.
        keep: keep the run directory even when everything passed.
        stimulus_scale: multiply each test's stimulus count (CLI ``--scale``).
        simulator: ``icarus`` or ``verilator`` (:data:`archsim.cosim.simulators.SIMULATORS`).
        log: ``pim_channel_replay`` only: replay this command log (``.npz`` of the harness or
            a command-log CSV) instead of the variant's workload.
        channel: ``pim_channel_replay`` only: the channel of the log to replay (default: the
            one with the most commands).

    Returns:
        A :class:`CosimResult`; never raises for a failing comparison.

    Raises:
        CosimError: unknown block/variant/mutation/simulator, simulator missing, build
            failure.
        ConfigError: invalid configuration or override.
    """
    simulators.check_simulator_name(simulator)
    block = get_block(block_name)
    var = get_variant(block, variant)
    if mutation is not None and mutation not in block.mutations:
        raise CosimError(f"block '{block_name}' has no mutation '{mutation}'; known: "
                         f"{', '.join(block.mutations)}")
    all_overrides = tuple(var.overrides) + tuple(overrides)
    config = str(config or var.config or "neupims")
    cfg = load_cosim_config(config, all_overrides)
    params = verilog_parameters(block_name, cfg, var.dtype)
    root = Path(build_root or DEFAULT_BUILD_ROOT).resolve()
    (root / "runs").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{block_name}-{var.name}-", dir=root / "runs"))
    try:     # the stimulus first: a bad log is refused before anything is built
        t_stim = time.perf_counter()
        stimulus = _prepare_stimulus(block, var, cfg, " ".join((config,) + all_overrides),
                                     root, run_dir, log, channel)
        stimulus_s = time.perf_counter() - t_stim
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    t0 = time.perf_counter()
    bdir = build(block_name, params, build_root=root, waves=waves, simulator=simulator)
    build_s = time.perf_counter() - t0
    job = {"block": block_name, "variant": var.name, "config": config,
           "overrides": list(all_overrides), "parameters": params, "seed": int(seed),
           "mutation": mutation, "report": str(run_dir / REPORT_FILE),
           "stimulus_scale": float(stimulus_scale), "clock_period_ns": CLOCK_PERIOD_NS,
           "simulator": simulator, "dtype": var.dtype, "stimulus": stimulus}
    (run_dir / JOB_FILE).write_text(json.dumps(job, indent=1))
    xml_path = run_dir / "results.xml"
    waves_path = simulators.waves_file(simulator, run_dir, block.toplevel) if waves else None
    runner = simulators.runner(simulator)
    error = ""
    extra_env = {"COCOTB_REWRITE_ASSERTION_FILES": TB_FILE_PATTERN,
                 **simulators.run_env(simulator)}
    saved_env = {k: os.environ.get(k) for k in extra_env}
    try:
        # os.environ wins over extra_env inside the runner: set both for the call.
        os.environ.update(extra_env)
        with _absolute_sys_path():
            runner.test(test_module=block.tb_module, hdl_toplevel=block.toplevel,
                        hdl_toplevel_lang="verilog", build_dir=bdir, test_dir=run_dir,
                        results_xml=str(xml_path), extra_env=extra_env, waves=waves,
                        seed=seed, testcase=testcase, log_file=run_dir / "sim.log",
                        plusargs=([f"+dumpfile_path={waves_path}"]
                                  if waves and simulator == "icarus" else []))
    except SystemExit as exc:  # raised by the runner under pytest on failures
        if not xml_path.exists():
            error = f"simulator exited with {exc.code} without results"
    except RuntimeError as exc:
        error = str(exc)
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    tests: list[TestOutcome] = []
    if xml_path.exists():
        tests = _read_results(xml_path, run_dir / REPORT_FILE)
    elif not error:
        error = "the simulator produced no results file"
    if error:
        log = run_dir / "sim.log"
        if log.exists():
            error += "\n" + log.read_text(errors="replace")[-3000:]
    passed = bool(tests) and not error and all(t.passed for t in tests)
    wall_s = time.perf_counter() - t0
    result = CosimResult(block_name, var.name, passed, tests,
                         sum(t.stimuli for t in tests), sum(t.cycles for t in tests),
                         wall_s, str(bdir), str(run_dir),
                         str(waves_path) if waves_path else None, mutation, error, params,
                         simulator, build_s, wall_s - build_s, stimulus_s)
    if passed and not keep and not waves:
        shutil.rmtree(run_dir, ignore_errors=True)
        result.run_dir = ""
    return result


def run_block(block_name: str, *, variants: list[str] | None = None,
              **kwargs: Any) -> list[CosimResult]:
    """Run every default variant (or the named ones) of a block; see :func:`run_variant`."""
    block = get_block(block_name)
    names = variants or [v.name for v in block.variants if v.default]
    return [run_variant(block_name, n, **kwargs) for n in names]


@dataclass(frozen=True)
class CosimJob:
    """What a test bench needs to know about its run (read from the job file).

    ``cfg`` is the machine configuration rebuilt from the same preset and overrides as the
    Verilog parameters, so the model and the RTL share one source of truth. ``simulator`` is
    the HDL simulator running the bench, ``dtype`` the operand type of a floating-point
    variant (``None`` for the others), ``stimulus`` the file of a replay's real stimulus
    (:mod:`archsim.cosim.replay`; ``None`` for random-stimulus blocks).
    """

    block: str
    variant: str
    cfg: Any
    parameters: dict[str, int]
    seed: int
    mutation: str | None
    report: Path
    stimulus_scale: float
    clock_period_ns: int
    simulator: str = "icarus"
    dtype: str | None = None
    stimulus: str | None = None

    def rng_seed(self, test_name: str) -> int:
        """The seed of one test: the run's seed mixed with the test name (stable)."""
        return int(hashlib.sha256(f"{self.seed}:{test_name}".encode()).hexdigest()[:8], 16)

    def count(self, n: int) -> int:
        """A test's stimulus count ``n`` scaled by the run's ``stimulus_scale`` (at least 1)."""
        return max(1, int(round(n * self.stimulus_scale)))

    def record(self, test_name: str, stimuli: int, cycles: int, **extra: Any) -> None:
        """Append one test's stimulus and cycle counts to the run's report."""
        with open(self.report, "a") as fh:
            fh.write(json.dumps({"test": test_name, "stimuli": int(stimuli),
                                 "cycles": int(cycles), **extra}) + "\n")


def load_job(run_dir: Path | None = None) -> CosimJob:
    """Read the job file of the current simulator run (the test bench's working directory).

    Raises CosimError when there is none (the test bench was started outside
    :func:`run_variant`) or when the Verilog parameters no longer match the configuration.
    """
    path = Path(run_dir or Path.cwd()) / JOB_FILE
    if not path.exists():
        raise CosimError(f"{path} not found: run test benches through archsim.cosim "
                         "(archsim cosim, or pytest rtl/tests)")
    raw = json.loads(path.read_text())
    cfg = load_cosim_config(raw["config"], tuple(raw["overrides"]))
    params = verilog_parameters(raw["block"], cfg, raw.get("dtype"))
    if params != raw["parameters"]:
        raise CosimError(f"Verilog parameters {raw['parameters']} were built for another "
                         f"configuration than the model's {params}")
    return CosimJob(raw["block"], raw["variant"], cfg, params, int(raw["seed"]),
                    raw.get("mutation"), Path(raw["report"]), float(raw["stimulus_scale"]),
                    int(raw["clock_period_ns"]), raw.get("simulator", "icarus"),
                    raw.get("dtype"), raw.get("stimulus"))
