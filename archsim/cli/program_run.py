"""``archsim run --program PATH``: simulate a program written earlier instead of compiling.

* a program directory (``archsim compile --layers window -o DIR``): the iteration, exactly as
  ``archsim run`` times the same model, batch and machine
  (:func:`archsim.system.simulate_program`; the machine is the manifest's, so ``--system`` and
  ``--set`` are refused with it);
* a single ``.asm`` (text) or ``.bin`` (container) program for one device: executed as is on
  ``--system`` with ``--set`` (NPU cycles of the program, no layer breakdown needed).
"""
from __future__ import annotations

import json
from pathlib import Path

import typer

from archsim.errors import ArchsimError, ProgramFault

#: The flags of ``archsim run`` that mean something with ``--program``; every other flag
#: (workload, serving, output of a compiled run) is refused with a message naming it.
PROGRAM_OPTIONS = ("--program", "--system", "--set", "--json", "--quiet")


def run_program(path: str, system: str | None, sets: list[str], json_path: str | None) -> dict:
    """What ``archsim run --program`` does; returns the JSON-friendly result it prints.

    Raises:
        ArchsimError: a missing path, ``--system``/``--set`` with a program directory, a file
            that is neither ``.asm``/``.s`` nor ``.bin``, a bad program (one line at the CLI).
    """
    p = Path(path)
    if p.is_dir():
        if system is not None or sets:
            raise ArchsimError(f"--program {path}: a program directory carries its machine "
                               "(manifest.json); --system and --set do not apply")
        from archsim.system import simulate_program

        r = simulate_program(p).result
        out = {"program": str(p), "cycles_per_iteration": r.cycles_per_iteration,
               "seconds_per_iteration": r.cycles_per_iteration / (r.npu_freq_mhz * 1e6),
               "tokens_per_s": r.tokens_per_s, "model": r.model, "system": r.system,
               "batch": r.batch_size}
        typer.echo(f"{p}: {r.model} on {r.system}, {r.batch_size} requests: "
                   f"{r.cycles_per_iteration:,.0f} NPU cycles per iteration (system), "
                   f"{out['tokens_per_s']:,.1f} tokens/s")
    else:
        out = _run_file(p, system or "neupims", sets)
        typer.echo(f"{p}: {out['instructions']} instructions on {out['system']}: "
                   f"{out['cycles']:,} NPU cycles (one device, the program as written)")
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=1) + "\n")
    return out


def _run_file(p: Path, system: str, sets: list[str]) -> dict:
    from archsim.npu.executor import Executor
    from archsim.memory.kernel import KernelMemory
    from archsim.npu.loader import load_program
    from archsim.serving import resolve_system
    from isa.errors import IsaError
    from isa.program import Program

    if not p.is_file():
        raise ArchsimError(f"--program {p}: no such file or directory")
    try:
        if p.suffix in (".asm", ".s"):
            prog = Program.from_text(p.read_text(), str(p))
        elif p.suffix == ".bin":
            prog = Program.from_bytes(p.read_bytes())
        else:
            raise ArchsimError(f"--program {p}: expected a program directory, a .asm/.s text "
                               "program or a .bin container")
    except IsaError as exc:
        raise ArchsimError(f"{p}: {exc}") from None
    _, cfg = resolve_system(system, list(sets))
    from archsim.cli.boundary import simulating

    lp = load_program(prog, cfg)          # a program that does not fit: the user's error
    with simulating():
        try:
            stats = Executor(lp, cfg, KernelMemory(cfg), fast_forward=True).run()
        except ProgramFault as exc:       # the hand-written program deadlocked or faulted
            raise ArchsimError(f"{p}: {exc}") from None
    return {"program": str(p), "system": cfg.name, "instructions": prog.n_instructions,
            "cycles": int(stats.cycles)}


__all__ = ["run_program"]
