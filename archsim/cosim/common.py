"""Paths, constants, the error type and small helpers shared by the co-simulation harness."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from archsim.errors import ArchsimError

REPO_ROOT = Path(__file__).resolve().parents[2]
#: A source checkout has ``rtl/`` beside the packages; an installed wheel ships it as the
#: package data directory ``archsim/rtl`` (see setup.py), and builds then go to the user's
#: cache (site-packages may not be writable).
_IN_CHECKOUT = (REPO_ROOT / "rtl").is_dir() and (REPO_ROOT / "pyproject.toml").is_file()
RTL_DIR = REPO_ROOT / "rtl" if _IN_CHECKOUT else Path(__file__).resolve().parents[1] / "rtl"
TB_DIR = RTL_DIR / "tests"
GENERATED_DIR = RTL_DIR / "generated"
DEFAULT_BUILD_ROOT = RTL_DIR / "sim_build" if _IN_CHECKOUT else Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "archsim" / "sim_build"
JOB_FILE = "cosim_job.json"
REPORT_FILE = "cosim_report.jsonl"
DEFAULT_SEED = 20240427
CLOCK_PERIOD_NS = 10
TB_FILE_PATTERN = "tb_*.py"
"""Only the test benches get pytest's assertion rewriting inside the simulator (DESIGN §6:
the default pattern would re-compile every imported module, torch included, on every run)."""


class CosimError(ArchsimError):
    """The co-simulation could not run: unknown block or variant, missing Icarus, failed build,
    or a Python model the test bench needs is missing."""


def clog2(n: int) -> int:
    """ceil(log2(n)) for n >= 1 (the Verilog $clog2)."""
    return max(0, (int(n) - 1).bit_length())


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with its parent directories)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
