"""``archsim asm``, ``archsim disasm`` and ``archsim isa doc``: the ISA on the command line."""
from __future__ import annotations

from pathlib import Path

import typer

from isa.asm import assemble
from isa.doc import generate_markdown
from isa.errors import IsaError
from isa.program import Program


def _read(path: Path, binary: bool) -> bytes | str:
    try:
        return path.read_bytes() if binary else path.read_text()
    except OSError as exc:
        raise IsaError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise IsaError(f"{path}: not a text file (is it a binary program? use "
                       "`archsim disasm`)") from None


def _write(path: Path, data: bytes | str) -> None:
    try:
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    except OSError as exc:
        raise IsaError(f"{path}: cannot write: {exc.strerror}") from None


def register(app: typer.Typer) -> None:
    """Add ``asm``, ``disasm`` and the ``isa`` group (``isa doc``) to ``app``."""

    @app.command("asm")
    def asm_cmd(file: Path = typer.Argument(..., help="assembly source (.s/.asm)"),
                out: Path = typer.Option(None, "-o", "--out",
                                         help="binary program to write (default: FILE.bin)")
                ) -> None:
        """Assemble a text program into the binary container (errors name line and column)."""
        from archsim.cli.boundary import check_output_file

        out = out or file.with_suffix(".bin")
        check_output_file(out, "-o")
        prog = assemble(_read(file, False), str(file))
        blob = prog.to_bytes()
        _write(out, blob)
        typer.echo(f"{out}: {prog.n_instructions} instructions in {len(prog.streams)} streams "
                   f"({', '.join(f'{k}:{len(v)}' for k, v in prog.streams.items())}), "
                   f"{len(prog.data)} data allocations, {len(blob)} bytes")

    @app.command("disasm")
    def disasm_cmd(file: Path = typer.Argument(..., help="binary program"),
                   out: Path = typer.Option(None, "-o", "--out",
                                            help="write the text here instead of stdout")
                   ) -> None:
        """Print a binary program as assembly text (assembling it again gives the same binary)."""
        from archsim.cli.boundary import check_output_file

        check_output_file(out, "-o")
        try:
            text = Program.from_bytes(_read(file, True)).to_text()
        except IsaError as exc:
            msg = str(exc)
            raise IsaError(msg if msg.startswith(str(file)) else f"{file}: {msg}") from None
        if out is None:
            typer.echo(text, nl=False)
        else:
            _write(out, text)

    grp = typer.Typer(help="The custom instruction set.", no_args_is_help=True)

    @grp.command("doc")
    def doc_cmd(out: Path = typer.Option(None, "-o", "--out",
                                         help="write the Markdown here (e.g. docs/isa.md)")
                ) -> None:
        """Generate the ISA reference (Markdown) from the instruction table."""
        text = generate_markdown()
        if out is None:
            typer.echo(text, nl=False)
        else:
            _write(out, text)
            typer.echo(f"{out}: ISA reference written")

    app.add_typer(grp, name="isa")
