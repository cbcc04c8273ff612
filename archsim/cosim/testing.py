"""pytest helpers (used by ``rtl/tests/test_cosim_*.py``)."""
from __future__ import annotations

import shutil
from typing import Any

from archsim.cosim.build import _check_icarus
from archsim.cosim.common import CosimError
from archsim.cosim.runner import CosimResult, run_variant

def require_icarus_or_skip() -> None:
    """Skip the calling pytest test when Icarus is not installed (with the install hint)."""
    import pytest

    try:
        _check_icarus()
    except CosimError as exc:
        pytest.skip(str(exc))


def assert_cosim_passes(block_name: str, variant: str, **kwargs: Any) -> CosimResult:
    """Run one variant and fail the calling test with every mismatch message if it fails."""
    require_icarus_or_skip()
    result = run_variant(block_name, variant, **kwargs)
    assert result.passed, result.failure_summary()
    assert result.stimuli > 0 and result.cycles > 0, f"{block_name}[{variant}] ran no stimulus"
    return result


def assert_mutation_detected(block_name: str, variant: str, mutation: str,
                             **kwargs: Any) -> CosimResult:
    """Run one variant with the model perturbed by ``mutation``; the co-simulation must fail
    on a comparison (an assertion naming a cycle), not on an error of the harness."""
    require_icarus_or_skip()
    kwargs.setdefault("stimulus_scale", 0.25)   # a one-cycle/one-bit change shows at once
    result = run_variant(block_name, variant, mutation=mutation, **kwargs)
    assert not result.passed, (f"{block_name}[{variant}]: the co-simulation still passes with "
                               f"the model perturbed by '{mutation}': it cannot see that change")
    assert not result.error, f"the mutated run failed for another reason: {result.error}"
    failed = [t for t in result.tests if not t.passed]
    assert failed and all("cycle" in t.message for t in failed), (
        "mutated run failed without a cycle-level comparison message:\n"
        + result.failure_summary())
    if result.run_dir:
        shutil.rmtree(result.run_dir, ignore_errors=True)
    return result
