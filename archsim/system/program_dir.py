"""Compile once, simulate anywhere: a program directory and its simulation.

A program directory holds what the simulator needs to time one iteration, nothing more:

* ``program.bin`` — the device's program (stage 0, the simulated window of layers) in the
  binary container with its debug table (op, layer, stage per instruction; version 2);
* ``manifest.json`` — ``format`` (``archsim-program-dir``, version 1), the machine config as
  resolved (every key, so no preset is looked up again), the model name, the phase, the batch
  (``seq_lens``, ``ids``, the ``channels`` the compiler used) and the compile facts the report
  states (KV placement, sub-batches), plus provenance (``source``: batch origin, versions).

:func:`simulate_program` executes ``program.bin`` (no compiler) and assembles the iteration
exactly as :func:`archsim.system.core.simulate` does, so it gives the same cycles as
``archsim run`` for the same model, batch and machine (``tests/test_program_dir.py``).
The core does no I/O: this module is the file-in/file-out shell around it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from archsim.errors import ArchsimError

FORMAT = "archsim-program-dir"
FORMAT_VERSION = 1
PROGRAM_FILE = "program.bin"
MANIFEST_FILE = "manifest.json"


def write_program_dir(out: str | Path, compiled: Any, *, source: str = "") -> Path:
    """Write ``compiled`` (a :class:`mapping.compiler.CompiledProgram` of stage 0's window of
    layers) as a program directory ``out`` (created; its two files replaced). Returns the
    directory."""
    from archsim.system.core import program_info

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / PROGRAM_FILE).write_bytes(compiled.program.to_bytes())
    b = compiled.batch
    manifest = {
        "format": FORMAT, "version": FORMAT_VERSION,
        "config": compiled.cfg.model_dump(mode="json"),
        "model": compiled.model.name, "phase": compiled.phase,
        "layers": list(compiled.layers), "stage": int(compiled.options.stage),
        "batch": {"seq_lens": [int(x) for x in b.seq_lens], "ids": [int(x) for x in b.ids],
                  "channels": [int(x) for x in b.channels]},
        "compile": program_info(compiled),
        "source": source or getattr(b, "source", ""),
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def load_program_dir(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """``(program, manifest)`` of a program directory.

    Raises:
        ArchsimError: a missing file, a manifest of another format or version, or a program
            the container reader rejects (the message names the file).
    """
    from isa.errors import IsaError
    from isa.program import Program

    path = Path(path)
    man_p, prog_p = path / MANIFEST_FILE, path / PROGRAM_FILE
    for p in (man_p, prog_p):
        if not p.is_file():
            raise ArchsimError(f"{path}: not a program directory ({p.name} missing; write one "
                               "with `archsim compile -o DIR`)")
    try:
        man = json.loads(man_p.read_text())
    except json.JSONDecodeError as exc:
        raise ArchsimError(f"{man_p}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if man.get("format") != FORMAT or man.get("version") != FORMAT_VERSION:
        raise ArchsimError(f"{man_p}: format {man.get('format')!r} version "
                           f"{man.get('version')!r}; expected {FORMAT!r} version "
                           f"{FORMAT_VERSION}")
    try:
        prog = Program.from_bytes(prog_p.read_bytes())
    except IsaError as exc:
        raise ArchsimError(f"{prog_p}: {exc}") from None
    return prog, man


def manifest_config(man: dict[str, Any]):
    """The :class:`archsim.config.MachineConfig` stored in a manifest (validated again)."""
    from archsim.config import MachineConfig

    return MachineConfig.model_validate(man["config"])


def manifest_batch(man: dict[str, Any]):
    """The :class:`workloads.requests.Batch` of a manifest (ids, lengths, channels)."""
    from workloads.requests import Batch, Request

    b = man["batch"]
    return Batch(tuple(Request(i, None, None, L, c) for i, L, c in
                       zip(b["ids"], b["seq_lens"], b["channels"])), man.get("source", ""))


def simulate_program(path: str | Path, *, system: str | None = None, memory: str = "fast",
                     with_events: bool = True, include_lm_head: bool = True,
                     allreduce: bool = True):
    """Simulate the iteration of a program directory: execute its program (stage 0's window)
    and assemble the iteration as :func:`archsim.system.core.simulate` does.

    Returns:
        :class:`archsim.system.core.SystemRun` (``.result`` the IterationResult).

    Raises:
        ArchsimError: see :func:`load_program_dir`; an unknown model name.
        SimulationError: the program does not fit the machine or deadlocks.
    """
    from archsim.system.core import assemble_iteration, execute_program
    from workloads.models import get_model

    prog, man = load_program_dir(path)
    cfg = manifest_config(man)
    model = get_model(man["model"])
    batch = manifest_batch(man)
    if man.get("stage", 0) != 0:
        raise ArchsimError(f"{path}: the iteration is assembled from stage 0's window; this "
                           f"program is stage {man['stage']} (run it alone with "
                           "`archsim run --program FILE.bin`)")
    win = execute_program(prog, cfg, memory=memory, allreduce=allreduce)
    return assemble_iteration(win, cfg, model, batch, man["phase"], man["compile"],
                              system=system, with_events=with_events, allreduce=allreduce,
                              include_lm_head=include_lm_head)


__all__ = ["write_program_dir", "load_program_dir", "simulate_program", "manifest_config",
           "manifest_batch", "FORMAT", "FORMAT_VERSION"]
