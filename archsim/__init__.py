"""archsim package."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def version_string() -> str:
    """``archsim <package version> (git <short commit>)`` of this process (computed once).

    The version is the installed distribution's (``importlib.metadata``); the commit is added
    only when running from a source checkout (a ``pyproject.toml`` beside the package).
    """
    import subprocess
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    try:
        v = version("archsim")
    except PackageNotFoundError:  # not installed as a distribution
        v = "unknown"
    root = Path(__file__).resolve().parents[1]
    commit = ""
    if (root / "pyproject.toml").is_file():
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                                    capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
    return f"archsim {v}" + (f" (git {commit})" if commit else "")
