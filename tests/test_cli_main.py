"""The CLI entry point: exit codes and one-line errors."""
from __future__ import annotations

import typer

from archsim import cli


def test_typer_exit_code_is_returned(monkeypatch):
    app = typer.Typer()

    @app.command()
    def fail() -> None:
        raise typer.Exit(3)

    @app.command()
    def ok() -> None:
        pass

    monkeypatch.setattr(cli, "app", app)
    assert cli.main(["fail"]) == 3
    assert cli.main(["ok"]) == 0


def test_usage_error_is_exit_2(capsys):
    assert cli.main(["no-such-command"]) == 2
    assert "No such command" in capsys.readouterr().err
