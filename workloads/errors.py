"""Error types of the ``workloads`` package (turned into one-line messages by the CLI)."""


class WorkloadError(Exception):
    """Base of every error raised by the ``workloads`` package (bad model, request file, batch)."""


def read_text(path, what: str) -> str:
    """The UTF-8 text of a file the user named (a request file, a model config).

    ``archsim.yamlfile.read_text_file`` is the same for the ``archsim`` package (``workloads``
    may not import it).

    Raises:
        WorkloadError: ``PATH: cannot read WHAT (<reason>)`` (missing, a directory, no
            permission) or ``PATH: not a text file (binary?); expected WHAT``.
    """
    from pathlib import Path

    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read {what} ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{p}: not a text file (byte {exc.start} is not UTF-8; binary?); "
                            f"expected {what}") from None
