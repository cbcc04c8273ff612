"""Build one parameter set of a block, once, into a directory keyed by everything it depends on."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Iterator

from archsim.cosim.blocks import Block, get_block
from archsim.cosim import simulators
from archsim.cosim.common import (DEFAULT_BUILD_ROOT, REPO_ROOT, RTL_DIR, TB_DIR, CosimError,
                                  file_lock)


def _sources_digest(block: Block) -> str:
    h = hashlib.sha256()
    files = [RTL_DIR / s for s in block.sources]
    for d in block.includes:
        files += sorted((RTL_DIR / d).glob("*.vh"))
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def build_key(block: Block, params: dict[str, int], waves: bool,
              simulator: str = simulators.DEFAULT_SIMULATOR) -> str:
    """Directory name of one build: block, simulator, parameters, waves and a digest of the
    sources (and, for Verilator, the harness's main, compiled into the build, and the build
    arguments)."""
    extra = ([simulators.VERILATOR_MAIN.read_text(), simulators.build_args(simulator)]
             if simulator == "verilator" else [])
    h = hashlib.sha256(json.dumps([block.name, simulator, sorted(params.items()), waves,
                                   _sources_digest(block), *extra]).encode()).hexdigest()[:16]
    return f"{block.name}-{simulator}-{h}{'-waves' if waves else ''}"


@contextlib.contextmanager
def _absolute_sys_path() -> Iterator[None]:
    """sys.path made absolute, with the test benches and the repository first.

    The runner exports ``sys.path`` as the simulator's PYTHONPATH and the simulator runs in
    another directory: a relative entry (``''``) would point elsewhere there.
    """
    saved = list(sys.path)
    paths = [str(TB_DIR), str(REPO_ROOT)]
    for p in saved:
        ap = os.path.abspath(p) if p else os.getcwd()
        if ap not in paths:
            paths.append(ap)
    sys.path[:] = paths
    try:
        yield
    finally:
        sys.path[:] = saved


def build(block_name: str, params: dict[str, int], *, build_root: Path | None = None,
          waves: bool = False, simulator: str = simulators.DEFAULT_SIMULATOR) -> Path:
    """Compile one parameter set of a block for ``simulator`` (once; later calls reuse it).
    Returns its directory.

    The directory is keyed by :func:`build_key`, so new parameters, another simulator or
    edited sources get a new build; a lock serialises concurrent builders of the same key.
    A Verilator build takes tens of seconds (C++ compilation), an Icarus build well under
    one. Raises CosimError when the simulator is unknown or missing or the compilation fails
    (the log is in the build dir).
    """
    sim_runner = simulators.runner(simulator)
    block = get_block(block_name)
    root = Path(build_root or DEFAULT_BUILD_ROOT).resolve()
    bdir = root / build_key(block, params, waves, simulator)
    stamp = bdir / "built.ok"
    product = simulators.build_product(simulator, bdir, block.toplevel)
    with file_lock(root / f"{bdir.name}.lock"):
        if stamp.exists() and product.exists():
            return bdir
        bdir.mkdir(parents=True, exist_ok=True)
        runner = sim_runner
        try:
            with _absolute_sys_path():
                runner.build(
                    sources=[RTL_DIR / s for s in block.sources],
                    includes=[RTL_DIR / d for d in block.includes],
                    hdl_toplevel=block.toplevel, parameters=dict(params), build_dir=bdir,
                    always=True, waves=waves, timescale=("1ns", "1ps"),
                    build_args=simulators.build_args(simulator),
                    log_file=bdir / "build.log")
        except (RuntimeError, SystemExit, OSError) as exc:
            log = (bdir / "build.log").read_text(errors="replace")[-2000:] \
                if (bdir / "build.log").exists() else ""
            raise CosimError(f"building {block_name} with {params} on {simulator} failed: "
                             f"{exc}\n{log}") from None
        stamp.write_text(json.dumps({"simulator": simulator, "parameters": params}))
    return bdir
