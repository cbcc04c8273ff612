"""The HDL simulators a co-simulation can run on: Icarus Verilog and Verilator.

Both are driven through ``cocotb_tools.runner`` with the same test benches, sources and
parameters; what differs is checked and set here:

* **icarus** (Debian ``iverilog``, 11): an event-driven interpreter; builds in well under a
  second, runs a cycle of the blocks here in tens of microseconds to milliseconds.
* **verilator** (Debian ``verilator``, 5.006 on Debian 12): compiles the design to C++ and
  then with the system C++ compiler (``g++``/``c++``) and ``make``, so a build takes tens of
  seconds (cached per parameter set like an Icarus build), and a simulated cycle is cheap.
  cocotb 2.1's own Verilator main needs Verilator 5.036 or newer; the harness builds with
  :data:`VERILATOR_MAIN` instead (see its header) and runs with
  ``COCOTB_TRUST_INERTIAL_WRITES=0``.

Every check raises :class:`~archsim.cosim.common.CosimError` with a one-line message that
names what is missing or wrong and what is allowed; the CLI turns it into exit code 2 before
anything is built.
"""
from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

from archsim.cosim.common import CosimError

SIMULATORS: tuple[str, ...] = ("icarus", "verilator")
"""Simulator names accepted by ``--simulator``, :func:`run_variant` and the test benches."""
DEFAULT_SIMULATOR = "icarus"
VERILATOR_MIN_VERSION = (5, 6)
"""The oldest Verilator the harness was checked on (Debian 12's 5.006); 4.x has no VPI that
cocotb 2 supports."""
VERILATOR_MAIN = Path(__file__).resolve().parent / "verilator_main.cpp"
_INSTALL_HINT = ("install it with 'apt-get install {pkg}' or run 'scripts/setup.sh --system' "
                 "(installs it when run as root)")


def check_simulator_name(name: str) -> str:
    """``name`` if it is a known simulator. Raises CosimError naming the allowed ones."""
    if name not in SIMULATORS:
        raise CosimError(f"unknown simulator '{name}'; allowed: {', '.join(SIMULATORS)}")
    return name


@functools.lru_cache(maxsize=None)
def verilator_version() -> tuple[int, int]:
    """(major, minor) of the ``verilator`` on PATH, e.g. (5, 6) for 5.006.

    Raises CosimError when it is missing or its ``--version`` cannot be read.
    """
    exe = shutil.which("verilator")
    if exe is None:
        raise CosimError("simulator 'verilator': the verilator executable is not on PATH; "
                         + _INSTALL_HINT.format(pkg="verilator")
                         + f"; allowed simulators: {', '.join(SIMULATORS)}")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CosimError(f"simulator 'verilator': '{exe} --version' failed: {exc}") from None
    m = re.search(r"Verilator (\d+)\.(\d+)", out)
    if not m:
        raise CosimError(f"simulator 'verilator': cannot read a version from '{exe} --version' "
                         f"({out.strip()[:80]!r})")
    return int(m.group(1)), int(m.group(2))


def require_cocotb() -> None:
    """Raise CosimError (one line, naming the extra to install) when cocotb's runner or
    pyverilog is not importable: they come with archsim's ``cosim`` extra (and ``dev``);
    the message is :func:`archsim.extras.missing_extra_message`'s."""
    import importlib.util

    from archsim.extras import missing_extra_message

    missing = [m for m in ("cocotb_tools", "pyverilog") if importlib.util.find_spec(m) is None]
    if missing:
        pkg = {"cocotb_tools": "cocotb"}.get(missing[0], missing[0])   # the pip name
        raise CosimError(missing_extra_message("cosim", "archsim cosim", pkg))


def check_simulator(name: str) -> str:
    """Check that simulator ``name`` is known and installed with what its builds need, and
    that cocotb is (:func:`require_cocotb`).

    Icarus needs ``iverilog`` and ``vvp``; Verilator needs ``verilator`` (5.006 or newer), a
    C++ compiler and ``make``. Returns ``name``. Raises CosimError (one line) otherwise.
    """
    check_simulator_name(name)
    require_cocotb()
    if name == "icarus":
        if shutil.which("iverilog") is None or shutil.which("vvp") is None:
            raise CosimError("simulator 'icarus': Icarus Verilog (iverilog, vvp) not found; "
                             + _INSTALL_HINT.format(pkg="iverilog"))
        return name
    major, minor = verilator_version()
    if (major, minor) < VERILATOR_MIN_VERSION:
        raise CosimError(f"simulator 'verilator': Verilator {major}.{minor:03d} is too old, "
                         f"the harness needs {VERILATOR_MIN_VERSION[0]}."
                         f"{VERILATOR_MIN_VERSION[1]:03d} or newer")
    missing = [t for t, alts in (("a C++ compiler (g++ or c++)", ("g++", "c++")),
                                 ("make", ("make",)))
               if not any(shutil.which(a) for a in alts)]
    if missing:
        raise CosimError(f"simulator 'verilator' needs {' and '.join(missing)} to build; "
                         "install them with 'apt-get install g++ make'")
    return name


def runner(name: str):
    """The ``cocotb_tools.runner`` runner of simulator ``name`` (checked first)."""
    from cocotb_tools.runner import get_runner

    check_simulator(name)
    if name == "verilator":
        return _verilator_runner()
    return get_runner(name)


def _verilator_runner():
    """cocotb's Verilator runner, building with :data:`VERILATOR_MAIN` instead of cocotb's
    main (which needs Verilator 5.036+). cocotb is pinned (2.1.0); the swap is checked, so a
    cocotb whose build command no longer names its main fails loudly instead of silently."""
    import cocotb_tools.config
    from cocotb_tools.runner import Verilator

    cocotb_main = str(cocotb_tools.config.share_dir / "lib" / "verilator" / "verilator.cpp")

    class ArchsimVerilator(Verilator):
        def _build_command(self):  # noqa: D401 - cocotb's hook
            cmds = super()._build_command()
            if cocotb_main not in cmds[0]:
                raise CosimError("this cocotb's Verilator build command does not name "
                                 f"{cocotb_main}: the harness cannot put its own main in "
                                 "(a simulator bug: cocotb is pinned to 2.1.0)")
            cmds[0] = [str(VERILATOR_MAIN) if a == cocotb_main else a for a in cmds[0]]
            return cmds

    return ArchsimVerilator()


VERILATOR_BUILD_ARGS: tuple[str, ...] = ("-Wno-WIDTH",)
"""Extra Verilator arguments. The blocks rely on Verilog's implicit extension of 32-bit
``integer`` parameters in expressions, which Verilator's WIDTH lint reports; every other
warning stays fatal (``iverilog -Wall`` and ``verilator --lint-only`` both run clean in
``rtl/tests/test_cosim_harness.py``)."""


def build_args(name: str) -> list[str]:
    """Extra build arguments of simulator ``name``."""
    return list(VERILATOR_BUILD_ARGS) if name == "verilator" else []


def build_product(name: str, build_dir: Path, toplevel: str) -> Path:
    """The file a finished build of simulator ``name`` leaves in ``build_dir``."""
    return build_dir / ("sim.vvp" if name == "icarus" else toplevel)


def run_env(name: str) -> dict[str, str]:
    """Environment the simulator process of ``name`` needs beyond the harness's own."""
    return {"COCOTB_TRUST_INERTIAL_WRITES": "0"} if name == "verilator" else {}


def waves_file(name: str, run_dir: Path, toplevel: str) -> Path:
    """Where a run of ``name`` writes its waveform: FST for Icarus, VCD for Verilator."""
    return run_dir / (f"{toplevel}.fst" if name == "icarus" else "dump.vcd")


__all__ = ["SIMULATORS", "DEFAULT_SIMULATOR", "VERILATOR_MAIN", "check_simulator", "require_cocotb",
           "check_simulator_name", "verilator_version", "runner", "build_product", "run_env",
           "waves_file"]
