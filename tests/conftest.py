"""Shared pytest fixtures of the whole suite (add new fixtures here, one small function each)."""
from __future__ import annotations

from pathlib import Path

import pytest

#: The repository root (the folder holding pyproject.toml).
REPO_ROOT = Path(__file__).resolve().parents[1]

#: Shared data beside the checkout (``../shared/data``); CI clones into another folder with
#: ``shared/`` next to it, so the path is always taken relative to the repository root.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True)
def _one_job_by_default(monkeypatch):
    """``archsim compare`` (and a sweep without ``jobs``) runs in the test's own process unless the
    test asks for workers (``--jobs N``): pytest-xdist already uses the cores, and the stand-ins
    tests install with ``monkeypatch`` exist only in this process."""
    monkeypatch.setattr("archsim.workers.usable_cpus", lambda: 1)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root directory."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; the test is skipped when it is absent.

    These files are for tests and checks only and are never committed (DESIGN.md §4).
    """
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (expected ../shared/data beside the "
                    "checkout)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_file(shared_data: Path):
    """A function ``relative -> Path`` inside ``shared_data`` that skips when the file is absent.

    Example: ``shared_file("neupims/lengths/sharegpt.tsv")``.
    """

    def get(relative: str) -> Path:
        path = shared_data / relative
        if not path.is_file():
            pytest.skip(f"shared data file not found: {path}")
        return path

    return get


@pytest.fixture(scope="module")
def torch_one_thread():
    """Torch on one thread for the module (tiny float64 references: its thread pool only adds
    contention on 2 cores); skips when torch is absent. Use with
    ``pytestmark = pytest.mark.usefixtures("torch_one_thread")``."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
