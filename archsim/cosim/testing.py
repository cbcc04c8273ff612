"""pytest helpers (used by ``rtl/tests/test_cosim_*.py``).

Which simulators the benches run on: Icarus always; Verilator as well when the environment
variable ``ARCHSIM_COSIM_SIMULATORS`` lists it (``ARCHSIM_COSIM_SIMULATORS=icarus,verilator
make test``). Its runs are marked ``slow``: a Verilator build compiles C++ for tens of seconds
per parameter set, too much for every variant in the default suite, which keeps one Verilator
smoke test (``rtl/tests/test_cosim_harness.py``).
"""
from __future__ import annotations

import os
import shutil
from typing import Any

from archsim.cosim import simulators
from archsim.cosim.common import CosimError
from archsim.cosim.runner import CosimResult, run_variant

SIMULATORS_ENV = "ARCHSIM_COSIM_SIMULATORS"


def bench_simulators() -> list:
    """pytest parameters of the simulators the benches run on (see the module docstring).

    Raises CosimError when ``ARCHSIM_COSIM_SIMULATORS`` names an unknown simulator.
    """
    import pytest

    names = [n.strip() for n in os.environ.get(SIMULATORS_ENV, "icarus").split(",") if n.strip()]
    for n in names:
        try:
            simulators.check_simulator_name(n)
        except CosimError as exc:
            raise CosimError(f"{SIMULATORS_ENV}={os.environ[SIMULATORS_ENV]!r}: {exc}") from None
    if "icarus" not in names:
        names.insert(0, "icarus")
    return [pytest.param(n, id=n, marks=[pytest.mark.slow] if n == "verilator" else [])
            for n in names]


def require_simulator_or_skip(simulator: str = simulators.DEFAULT_SIMULATOR) -> None:
    """Skip the calling pytest test when ``simulator`` is not installed (with the install
    hint); an unknown name is an error, not a skip."""
    import pytest

    simulators.check_simulator_name(simulator)
    try:
        simulators.check_simulator(simulator)
    except CosimError as exc:
        pytest.skip(str(exc))


def require_icarus_or_skip() -> None:
    """Skip the calling pytest test when Icarus is not installed (with the install hint)."""
    require_simulator_or_skip("icarus")


def assert_cosim_passes(block_name: str, variant: str, **kwargs: Any) -> CosimResult:
    """Run one variant and fail the calling test with every mismatch message if it fails
    (skipped when its simulator, ``simulator=`` of :func:`run_variant`, is not installed)."""
    require_simulator_or_skip(kwargs.get("simulator", simulators.DEFAULT_SIMULATOR))
    result = run_variant(block_name, variant, **kwargs)
    assert result.passed, result.failure_summary()
    assert result.stimuli > 0 and result.cycles > 0, f"{block_name}[{variant}] ran no stimulus"
    return result


def assert_mutation_detected(block_name: str, variant: str, mutation: str,
                             **kwargs: Any) -> CosimResult:
    """Run one variant with the model perturbed by ``mutation``; the co-simulation must fail
    on a comparison (an assertion naming a cycle), not on an error of the harness."""
    require_simulator_or_skip(kwargs.get("simulator", simulators.DEFAULT_SIMULATOR))
    kwargs.setdefault("stimulus_scale", 0.25)   # a one-cycle/one-bit change shows at once
    result = run_variant(block_name, variant, mutation=mutation, **kwargs)
    assert not result.passed, (f"{block_name}[{variant}]: the co-simulation still passes with "
                               f"the model perturbed by '{mutation}': it cannot see that change")
    assert not result.error, f"the mutated run failed for another reason: {result.error}"
    assert result.mutation_caught(), (
        "mutated run failed without a cycle-level comparison message:\n"
        + result.failure_summary())
    if result.run_dir:
        shutil.rmtree(result.run_dir, ignore_errors=True)
    return result
