"""Optional dependencies: which command needs which pip extra of archsim (the one table).

The core simulator (``archsim run`` / ``compare`` / ``compile`` / ``mem`` / ``isa`` / ``config``
/ ``workload`` / ``sweep``, and ``import archsim.system``) needs only the packages of
``[project] dependencies`` in ``pyproject.toml``. What only some commands need is an *extra*
(``pip install 'archsim[validate]'``) and is imported lazily, inside the function that uses it,
so that the core imports in well under a second and works without it.

:data:`EXTRAS` is the single table: :func:`require` and :func:`missing_extra_message` print from
it the one-line error of a command that lacks its extra (exit code 2, see
:mod:`archsim.cli.boundary`), :func:`markdown_table` renders it for the README (a test keeps
the README's copy equal), and ``pyproject.toml``'s ``[project.optional-dependencies]`` lists
the same packages (``tests/test_import_light.py`` checks that too).

This module imports nothing but the standard library and :mod:`archsim.errors`.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from archsim.errors import ArchsimError


@dataclass(frozen=True)
class Extra:
    """One optional feature.

    Attributes:
        name: the pip extra (``archsim[name]``).
        modules: top-level Python modules it provides (what ``import`` names).
        packages: the pip distributions of the extra (as in ``pyproject.toml``, unpinned).
        commands: the commands (or options) that need it, as a user types them.
    """

    name: str
    modules: tuple[str, ...]
    packages: tuple[str, ...]
    commands: tuple[str, ...]


EXTRAS: dict[str, Extra] = {e.name: e for e in (
    Extra("validate", ("torch",), ("torch",),
          ("archsim validate",)),
    Extra("hf", ("transformers",), ("transformers",),
          ("archsim validate --reference hf",)),
    Extra("plots", ("matplotlib",), ("matplotlib",),
          ("archsim run --plots", "archsim compare --plots", "archsim sweep report")),
    Extra("surrogate", ("sklearn", "scipy"), ("scikit-learn", "scipy"),
          ("archsim run --serve (--timing surrogate, the default)",
           "python -m archsim.gpu.calibration")),
    Extra("cosim", ("cocotb", "cocotb_tools", "pyverilog"), ("cocotb", "pyverilog"),
          ("archsim cosim",)),
    Extra("sweep", ("pandas", "pyarrow", "optuna", "distributed", "dask"),
          ("pandas", "pyarrow", "optuna", "dask[distributed]"),
          ("archsim sweep export", "archsim sweep report", "archsim sweep (strategy: optuna)",
           "archsim sweep --dask")),
)}
"""Extras by name. ``all`` installs every one of them; ``dev`` is ``all`` plus the test tools
(pytest, pytest-xdist, hypothesis); ``scripts/setup.sh`` installs ``dev``."""

_BY_MODULE = {m: e for e in EXTRAS.values() for m in e.modules}


def extra_of_module(module: str | None) -> Extra | None:
    """The extra that provides the top-level module of ``module`` (``"torch.fx"`` -> validate),
    or None when it is not an optional dependency."""
    if not module:
        return None
    return _BY_MODULE.get(module.split(".")[0])


def missing_extra_message(extra: str, what: str | None = None, module: str | None = None) -> str:
    """The one line telling the user what to install.

    Args:
        extra: name of the extra (a key of :data:`EXTRAS`).
        what: the command that needs it (default: the extra's first command).
        module: the missing module (default: the extra's first module).

    Example: ``archsim validate needs torch: pip install 'archsim[validate]'``.
    """
    e = EXTRAS[extra]
    what = what or e.commands[0]
    module = (module or e.modules[0]).split(".")[0]
    return (f"{what} needs {module}: pip install 'archsim[{e.name}]' "
            f"(from a checkout: pip install -e '.[{e.name}]')")


class MissingExtraError(ArchsimError):
    """An optional dependency of the command is not installed (a user's setup, exit code 2)."""


def require(extra: str, what: str | None = None, modules: tuple[str, ...] | None = None) -> None:
    """Check, without importing them, that the modules of ``extra`` are installed.

    Call it where a command starts, before any simulation, so that a missing package is found
    at once and not after minutes of work.

    Args:
        extra: a key of :data:`EXTRAS`.
        what: the command, for the message (default: the extra's first command).
        modules: only these of the extra's modules (default: all of them).

    Raises:
        MissingExtraError: naming the command, the first missing module and the pip command.
        KeyError: ``extra`` is not in :data:`EXTRAS` (a bug of the caller).
    """
    e = EXTRAS[extra]
    for m in modules or e.modules:
        if m not in e.modules:
            raise KeyError(f"extra {extra!r} does not provide {m!r}")
        if importlib.util.find_spec(m) is None:
            raise MissingExtraError(missing_extra_message(extra, what, m))


def markdown_table() -> str:
    """The README's table of extras (command -> extra -> packages), from :data:`EXTRAS`."""
    rows = ["| command | extra | packages |", "|---|---|---|"]
    for e in EXTRAS.values():
        rows.append(f"| {'<br>'.join(f'`{c}`' for c in e.commands)} | `{e.name}` | "
                    f"{', '.join(e.packages)} |")
    return "\n".join(rows)


__all__ = ["Extra", "EXTRAS", "MissingExtraError", "extra_of_module", "missing_extra_message",
           "require", "markdown_table"]
