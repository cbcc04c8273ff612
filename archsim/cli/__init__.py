"""The ``archsim`` command line.

Every subcommand lives in its own module of this package and exposes ``register(app)``;
this module only assembles them and turns the project's own errors into one-line messages
(no traceback for a user's mistake).
"""
from __future__ import annotations

import importlib
import sys

import typer

# Subcommand modules, each with ``register(app: typer.Typer) -> None``.
SUBCOMMAND_MODULES: list[str] = [
    "archsim.cli.config_cmd",
    "archsim.cli.isa_cmd",
    "archsim.cli.workload",
    "archsim.cli.run",
    "archsim.cli.mem",
    "archsim.cli.cosim",
    "archsim.cli.sweep",
    "archsim.cli.compile",
    "archsim.cli.validate",
]

app = typer.Typer(
    name="archsim",
    help="NPU + PIM co-design framework for batched LLM inference.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _mod in SUBCOMMAND_MODULES:
    importlib.import_module(_mod).register(app)


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception types that describe a user's mistake (printed as one line, exit code 2)."""
    from archsim.errors import ArchsimError
    from isa.errors import IsaError
    from workloads.errors import WorkloadError

    types: list[type[BaseException]] = [ArchsimError, IsaError, WorkloadError]
    try:
        from mapping.errors import MappingError

        types.append(MappingError)
    except ImportError:  # pragma: no cover - mapping not built yet
        pass
    return tuple(types)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``archsim`` console script.

    Returns the process exit code: 0 on success, 2 for a user error (bad file, key or value,
    reported on one line on stderr), 1 for anything else.
    """
    try:
        # In click's non-standalone mode a ``typer.Exit(code)`` raised by a command is caught by
        # click and its code returned here, not raised: pass it on as the exit code.
        rv = app(args=argv, standalone_mode=False)
        if isinstance(rv, int) and not isinstance(rv, bool):
            return rv
    except user_error_types() as exc:
        print(f"archsim: error: {exc}", file=sys.stderr)
        return 2
    except typer.Exit as exc:  # raised by commands that set their own exit code
        return exc.exit_code
    except typer.Abort:
        print("archsim: aborted", file=sys.stderr)
        return 1
    except Exception as exc:
        # Usage errors (unknown option, missing argument) are click exceptions; typer may ship
        # its own copy of click, so recognise them by their interface.
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return exc.exit_code
        raise
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
