"""The ``archsim`` command line.

Every subcommand lives in its own module of this package and exposes ``register(app)``;
this module only assembles them; :mod:`archsim.cli.boundary` turns what they raise into exit
codes and one-line messages (no traceback for a user's mistake).
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
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from archsim import version_string

        typer.echo(version_string())
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """NPU + PIM co-design framework for batched LLM inference."""


for _mod in SUBCOMMAND_MODULES:
    importlib.import_module(_mod).register(app)


def _note(message: str) -> None:
    """Print a progress note of the core (:mod:`archsim.notes`) on stderr."""
    print(f"archsim: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``archsim`` console script.

    Returns the process exit code: 0 on success, 2 for a user's mistake (bad file, key, value
    or flag combination, reported on one line on stderr), 3 for an internal failure (a bug of
    the simulator: traceback and a line saying so), 130 when interrupted; see
    :mod:`archsim.cli.boundary`.
    """
    from archsim import notes
    from archsim.cli.boundary import run_app

    notes.listen(_note)
    args = list(sys.argv[1:] if argv is None else argv)
    return run_app(lambda: app(args=args, prog_name="archsim", standalone_mode=False), args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
