"""``archsim cosim``: co-simulate the RTL blocks of ``rtl/`` against the simulator's models.

Each block variant is built with the chosen HDL simulator (Icarus Verilog or Verilator; once
per parameter set, later runs reuse the build) and driven by its cocotb test bench with seeded
random stimulus; the report gives per block variant the stimulus items applied, the clock
cycles simulated, the build and simulation wall times and PASS/FAIL (with each mismatch
message on failure). With ``--mutation`` every run is expected to fail: the report says per
run whether the mutation was caught, and the exit code is 0 when all were. Every check of the
user's input (simulator, blocks, variants, mutation, output paths, installed tools) happens
before anything is built. See :mod:`archsim.cosim`.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import typer

SET_HELP = "Override a key, e.g. --set memory.timing.tRCDRD=16 (repeatable; value parsed as YAML)."

STIMULUS_UNITS = {
    "pim_mac": "COMP steps",
    "pim_mac_fp": "COMP steps",
    "pim_mac_fp_replay": "COMP steps of a functional run",
    "systolic_array": "input rows",
    "bank_dual_rowbuf": "command slots",
    "pim_channel": "command slots",
    "pim_channel_replay": "logged commands",
    "isa_decoder": "instruction words",
}


def _check_json_path(path: Path) -> None:
    """``--json PATH`` must name a file that can be written: one line otherwise (exit 2)."""
    from archsim.cosim import CosimError

    if path.is_dir():
        raise CosimError(f"--json {path}: is a directory; give a file path, e.g. "
                         f"{path / 'cosim.json'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CosimError(f"--json {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise CosimError(f"--json {path}: folder {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise CosimError(f"--json {path}: the file exists and is not writable")


def _check_build_dir(path: Path) -> None:
    """``--build-dir DIR`` must be a folder the harness can create and write into."""
    from archsim.cosim import CosimError

    if path.exists() and not path.is_dir():
        raise CosimError(f"--build-dir {path}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise CosimError(f"--build-dir {path}: cannot write there "
                         f"({exc.strerror or exc})") from None


def _select(cosim, blocks: list[str] | None, variant: list[str],
            mutation: str | None, log: Path | None = None,
            channel: int | None = None) -> list[tuple[str, str]]:
    """(block, variant) pairs to run; raises CosimError for unknown names, for a mutation
    that a selected block does not have, and for ``--log``/``--channel`` outside a single
    ``pim_channel_replay`` variant. Without ``--variant`` a block runs its default variants
    (the long replays run only when named)."""
    names = list(blocks or cosim.BLOCKS)
    if (log is not None or channel is not None) and names != ["pim_channel_replay"]:
        raise cosim.CosimError("--log and --channel apply to block pim_channel_replay only "
                               f"(selected: {', '.join(names)})")
    if log is not None and len(variant) > 1:
        raise cosim.CosimError("--log replays one log: give at most one --variant (it names "
                               "the configuration the log must belong to)")
    selected = []
    for name in names:
        block = cosim.get_block(name)
        vs = [v.name for v in block.variants]
        for v in variant:
            if len(names) == 1 and v not in vs:
                cosim.get_variant(block, v)  # raises CosimError naming the variants
        chosen = ([v for v in variant if v in vs] if variant
                  else [v.name for v in block.variants if v.default])
        if log is not None:
            chosen = chosen[:1]
        if chosen and mutation is not None and mutation not in block.mutations:
            raise cosim.CosimError(f"block '{name}' has no mutation '{mutation}'; known: "
                                   f"{', '.join(block.mutations)}")
        selected += [(name, v) for v in chosen]
    if not selected:
        raise cosim.CosimError(f"no variant {variant} in blocks {names}")
    return selected


def register(app: typer.Typer) -> None:
    """Add the ``cosim`` command to ``app``."""

    @app.command("cosim")
    def cosim_cmd(
        blocks: list[str] = typer.Argument(None, help="blocks to run (default: all): "
                                           "pim_mac pim_mac_fp pim_mac_fp_replay "
                                           "systolic_array bank_dual_rowbuf pim_channel "
                                           "pim_channel_replay isa_decoder"),
        simulator: str = typer.Option("icarus", "--simulator", help="HDL simulator: icarus "
                                      "or verilator (Verilator compiles C++: tens of "
                                      "seconds per new parameter set, then fast)"),
        waves: bool = typer.Option(False, "--waves", help="dump a waveform per run (FST with "
                                   "Icarus, VCD with Verilator; kept in the run directory, "
                                   "path printed)"),
        variant: list[str] = typer.Option([], "--variant", help="run only these variants "
                                          "(repeatable; default: every default variant of "
                                          "the block; the GPT3 replays run only when named)"),
        config: str = typer.Option(None, "--config", help="preset or YAML file the "
                                   "parameters and models come from (default: the variant's "
                                   "preset, else neupims)"),
        log: Path = typer.Option(None, "--log", help="pim_channel_replay: replay this "
                                 "command log (a CSV of 'archsim mem --log' or an .npz of a "
                                 "replay) instead of the variant's workload; it must belong "
                                 "to the configuration"),
        channel: int = typer.Option(None, "--channel", min=0, help="pim_channel_replay: the "
                                    "channel of the log to replay (default: the busiest)"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        seed: int = typer.Option(None, "--seed", help="base seed of the random stimulus "
                                 "(default: the fixed seed of the test suite)"),
        scale: float = typer.Option(1.0, "--scale", min=0.01, max=1000.0,
                                    help="multiply every test's stimulus count (a replay "
                                    "takes that fraction of its log, at most all of it)"),
        mutation: str = typer.Option(None, "--mutation", help="perturb the Python model "
                                     "(e.g. cycle, bit): every run must then FAIL; exit 0 "
                                     "when every mutation was caught"),
        build_dir: Path = typer.Option(None, "--build-dir", help="builds and runs go here "
                                       "(default rtl/sim_build)"),
        json_out: Path = typer.Option(None, "--json", help="also write the results as JSON "
                                      "to this file"),
        list_: bool = typer.Option(False, "--list", help="list blocks, variants and mutations"),
        write_isa_fields: bool = typer.Option(False, "--write-isa-fields", help="regenerate "
                                              "rtl/generated/isa_fields.vh from the ISA table "
                                              "and exit"),
    ) -> None:
        """Run RTL co-simulations (cocotb + Icarus or Verilator) and report per block: stimulus
        count, cycles simulated, build and simulation time, PASS/FAIL. Exit code 1 if any
        block fails (with --mutation: if any mutation was not caught)."""
        from archsim import cosim

        if write_isa_fields:
            path = cosim.write_isa_fields_vh()
            typer.echo(f"wrote {path}")
            return
        if list_:
            for b in cosim.BLOCKS.values():
                typer.echo(f"{b.name:18s} variants: "
                           f"{', '.join(v.name + ('' if v.default else ' (named only)') for v in b.variants)}"
                           f"  mutations: {', '.join(b.mutations)}  model: {b.model}")
            typer.echo(f"simulators: {', '.join(cosim.SIMULATORS)} (--simulator)")
            return
        # every check of the user's input before anything is built
        cosim.check_simulator_name(simulator)
        selected = _select(cosim, blocks, variant, mutation, log, channel)
        if json_out is not None:
            _check_json_path(json_out)
        if build_dir is not None:
            _check_build_dir(build_dir)
        for name, v in selected if (log is not None or channel is not None) else ():
            # the log must belong to the configuration, the channel exist: before any build
            var = cosim.get_variant(cosim.get_block(name), v)
            vcfg = cosim.load_cosim_config(config or var.config or "neupims",
                                           tuple(var.overrides) + tuple(set_))
            chans = vcfg.memory.org.channels
            if channel is not None and channel >= chans:
                raise cosim.CosimError(f"--channel {channel} is outside memory.org.channels="
                                       f"{chans} of variant {v} (allowed 0..{chans - 1})")
            if log is not None:
                cosim.load_channel_log(log, vcfg, channel)
        cosim.check_simulator(simulator)

        typer.echo(f"co-simulating {len(selected)} block variant(s) on {simulator} with config "
                   f"'{config or 'of each variant'}'"
                   + (f", mutation '{mutation}' (every run must fail)" if mutation else "")
                   + "; cycles are clock cycles of each block (tCK for the memory/PIM blocks, "
                     "the NPU clock for systolic_array; a replay: the span of its log); prep s "
                     "makes a replay's stimulus (0 when cached), build s is 0 for a cached "
                     "build")
        header = (f"{'block':18s} {'variant':14s} {'tests':>6s} {'stimuli':>8s} "
                  f"{'cycles':>8s} {'prep s':>7s} {'build s':>7s} {'sim s':>7s}  result")
        typer.echo(header)
        typer.echo("-" * len(header))
        t0 = time.perf_counter()
        results = []
        kwargs = {"config": config, "overrides": tuple(set_), "waves": waves,
                  "mutation": mutation, "stimulus_scale": scale, "build_root": build_dir,
                  "simulator": simulator, "log": log, "channel": channel}
        if seed is not None:
            kwargs["seed"] = seed
        for name, v in selected:
            r = cosim.run_variant(name, v, **kwargs)
            results.append(r)
            n_ok = sum(t.passed for t in r.tests)
            if mutation is None:
                verdict = "PASS" if r.passed else "FAIL"
            elif r.mutation_caught():
                verdict = "failed as expected: mutation caught"
            elif r.passed:
                verdict = "NOT CAUGHT: passed with the model perturbed"
            else:
                verdict = "ERROR: failed without a cycle-level comparison"
            typer.echo(f"{name:18s} {v:14s} {n_ok:>3d}/{len(r.tests):<2d} {r.stimuli:>8d} "
                       f"{r.cycles:>8d} {r.stimulus_s:>7.2f} {r.build_s:>7.2f} {r.sim_s:>7.2f}  "
                       f"{verdict}  "
                       f"({STIMULUS_UNITS.get(name, 'items')})")
            if mutation is None and not r.passed:
                typer.echo("  " + r.failure_summary().replace("\n", "\n  "))
            elif mutation is not None and not r.mutation_caught():
                typer.echo("  " + r.failure_summary().replace("\n", "\n  "))
            if mutation is not None and r.mutation_caught() and r.run_dir:
                import shutil

                shutil.rmtree(r.run_dir, ignore_errors=True)   # the expected failure's logs
            if r.waves:
                typer.echo(f"  waves: {r.waves}")
        wall = time.perf_counter() - t0
        totals = (f"{sum(r.stimuli for r in results)} stimuli, "
                  f"{sum(r.cycles for r in results)} cycles, {wall:.1f} s wall")
        if mutation is None:
            ok = sum(r.passed for r in results)
            typer.echo(f"total: {ok}/{len(results)} passed on {simulator}, {totals}")
        else:
            ok = sum(r.mutation_caught() for r in results)
            typer.echo(f"total: {ok}/{len(results)} runs caught mutation '{mutation}' (each "
                       f"failed as expected) on {simulator}, {totals}")
        if json_out is not None:
            json_out.write_text(json.dumps({"config": config, "overrides": list(set_),
                                            "mutation": mutation, "simulator": simulator,
                                            "wall_s": wall,
                                            "results": [r.to_dict() for r in results]},
                                           indent=1))
            typer.echo(f"wrote {json_out}")
        if ok != len(results):
            raise typer.Exit(1)
