"""``archsim cosim``: co-simulate the RTL blocks of ``rtl/`` against the simulator's models.

Each block variant is built with Icarus Verilog (once per parameter set; later runs reuse the
build) and driven by its cocotb test bench with seeded random stimulus; the report gives per
block variant the stimulus items applied, the clock cycles simulated, the wall time and
PASS/FAIL (with each mismatch message on failure). See :mod:`archsim.cosim`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import typer

SET_HELP = "Override a key, e.g. --set memory.timing.tRCDRD=16 (repeatable; value parsed as YAML)."

STIMULUS_UNITS = {
    "pim_mac": "COMP steps",
    "systolic_array": "input rows",
    "bank_dual_rowbuf": "command slots",
    "isa_decoder": "instruction words",
}


def register(app: typer.Typer) -> None:
    """Add the ``cosim`` command to ``app``."""

    @app.command("cosim")
    def cosim_cmd(
        blocks: list[str] = typer.Argument(None, help="blocks to run (default: all): "
                                           "pim_mac systolic_array bank_dual_rowbuf isa_decoder"),
        waves: bool = typer.Option(False, "--waves", help="dump an FST waveform per run (kept "
                                   "in the run directory, path printed)"),
        variant: list[str] = typer.Option([], "--variant", help="run only these variants "
                                          "(repeatable; default: every variant of the block)"),
        config: str = typer.Option("neupims", "--config", help="preset or YAML file the "
                                   "parameters and models come from"),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        seed: int = typer.Option(None, "--seed", help="base seed of the random stimulus "
                                 "(default: the fixed seed of the test suite)"),
        scale: float = typer.Option(1.0, "--scale", min=0.01, max=1000.0,
                                    help="multiply every test's stimulus count"),
        mutation: str = typer.Option(None, "--mutation", help="perturb the Python model "
                                     "(e.g. cycle, bit): the run is then expected to FAIL"),
        build_dir: Path = typer.Option(None, "--build-dir", help="builds and runs go here "
                                       "(default rtl/sim_build)"),
        json_out: Path = typer.Option(None, "--json", help="also write the results as JSON"),
        list_: bool = typer.Option(False, "--list", help="list blocks, variants and mutations"),
        write_isa_fields: bool = typer.Option(False, "--write-isa-fields", help="regenerate "
                                              "rtl/generated/isa_fields.vh from the ISA table "
                                              "and exit"),
    ) -> None:
        """Run RTL co-simulations (cocotb + Icarus) and report per block: stimulus count,
        cycles simulated, wall time, PASS/FAIL. Exit code 1 if any block fails."""
        from archsim import cosim

        if write_isa_fields:
            path = cosim.write_isa_fields_vh()
            typer.echo(f"wrote {path}")
            return
        if list_:
            for b in cosim.BLOCKS.values():
                typer.echo(f"{b.name:17s} variants: "
                           f"{', '.join(v.name for v in b.variants):24s} mutations: "
                           f"{', '.join(b.mutations):28s} model: {b.model}")
            return
        names = list(blocks or cosim.BLOCKS)
        selected = []
        for name in names:
            block = cosim.get_block(name)
            vs = [v.name for v in block.variants]
            chosen = [v for v in variant if v in vs] if variant else vs
            for v in variant:
                if len(names) == 1 and v not in vs:
                    cosim.get_variant(block, v)  # raises CosimError naming the variants
            selected += [(name, v) for v in chosen]
        if not selected:
            raise cosim.CosimError(f"no variant {variant} in blocks {names}")
        typer.echo(f"co-simulating {len(selected)} block variant(s) with config '{config}'"
                   + (f", mutation '{mutation}'" if mutation else "")
                   + "; cycles are clock cycles of each block (tCK for the memory/PIM blocks, "
                     "the NPU clock for systolic_array)")
        header = (f"{'block':17s} {'variant':9s} {'tests':>6s} {'stimuli':>8s} "
                  f"{'cycles':>8s} {'wall s':>7s}  result")
        typer.echo(header)
        typer.echo("-" * len(header))
        t0 = time.perf_counter()
        results = []
        kwargs = {"config": config, "overrides": tuple(set_), "waves": waves,
                  "mutation": mutation, "stimulus_scale": scale, "build_root": build_dir}
        if seed is not None:
            kwargs["seed"] = seed
        for name, v in selected:
            r = cosim.run_variant(name, v, **kwargs)
            results.append(r)
            n_ok = sum(t.passed for t in r.tests)
            verdict = "PASS" if r.passed else "FAIL"
            typer.echo(f"{name:17s} {v:9s} {n_ok:>3d}/{len(r.tests):<2d} {r.stimuli:>8d} "
                       f"{r.cycles:>8d} {r.wall_s:>7.2f}  {verdict}  "
                       f"({STIMULUS_UNITS.get(name, 'items')})")
            if not r.passed:
                typer.echo("  " + r.failure_summary().replace("\n", "\n  "))
            if r.waves:
                typer.echo(f"  waves: {r.waves}")
        wall = time.perf_counter() - t0
        n_pass = sum(r.passed for r in results)
        typer.echo(f"total: {n_pass}/{len(results)} passed, "
                   f"{sum(r.stimuli for r in results)} stimuli, "
                   f"{sum(r.cycles for r in results)} cycles, {wall:.1f} s wall")
        if json_out is not None:
            json_out.write_text(json.dumps({"config": config, "overrides": list(set_),
                                            "mutation": mutation, "wall_s": wall,
                                            "results": [r.to_dict() for r in results]},
                                           indent=1))
            typer.echo(f"wrote {json_out}")
        if n_pass != len(results):
            raise typer.Exit(1)
