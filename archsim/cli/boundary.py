"""The CLI boundary: what a command checks before it starts, and how a failure is reported.

Every ``archsim`` command goes through :func:`run_app`, which turns an exception into an exit
code and a message on stderr:

* **a user's mistake** — an error of the project's own types (bad file, key, value or flag
  combination), an ``OSError`` (a file that cannot be read or written; the message names it),
  a ``UnicodeDecodeError`` (a binary file where text was expected; the boundary finds which of
  the files named on the command line it is) or a usage error of the command line: **one line**
  ``archsim: error: ...``, exit code **2**, no traceback;
* **an internal failure** — a :class:`archsim.errors.SimulationError` raised while a
  simulation runs on inputs that were already checked (a deadlock of a compiled program, a
  kernel's inconsistency: :func:`simulating` marks that phase) or any other unexpected
  exception: the traceback, then one line saying that this is a bug of the simulator, not of the
  input, where it was raised (``file:line in function``, the innermost frame) and what to put
  in a report, exit code **3**;
* **a missing optional dependency** — a ``ModuleNotFoundError`` of a module that an extra of
  :data:`archsim.extras.EXTRAS` provides (torch, matplotlib, scikit-learn, cocotb, ...): one line
  naming the command and the ``pip install 'archsim[extra]'`` to run, exit code **2** (the
  user's setup, not a bug);
* Ctrl-C / SIGTERM: exit code **130** (commands that keep partial results say where).

Output paths are checked before any work starts (:func:`check_output_file`,
:func:`check_output_dir`): a simulation never runs for minutes to fail at writing its result.
"""
from __future__ import annotations

import contextlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

EXIT_USER = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class SimulatorBug(Exception):
    """An internal failure: the simulator broke on inputs it had accepted (exit code 3).

    ``cause`` is the original exception (its traceback is printed with the report).
    """

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


@contextlib.contextmanager
def simulating() -> Iterator[None]:
    """Mark the phase in which checked inputs are simulated.

    A :class:`archsim.errors.SimulationError` raised inside (deadlock, an inconsistent kernel
    state) is not the user's fault any more: it is re-raised as :class:`SimulatorBug`. The
    project's other errors (a capacity limit, a bad value found late) stay user errors.
    """
    from archsim.errors import SimulationError

    try:
        yield
    except SimulationError as exc:
        raise SimulatorBug(exc) from exc


def _first_existing(p: Path) -> Path:
    q = p.absolute()
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def _check_creatable(p: Path, option: str) -> None:
    """The nearest existing ancestor of ``p`` must be a writable directory."""
    anc = _first_existing(p.parent if p.parent != p else p)
    if not anc.is_dir():
        from archsim.errors import ArchsimError

        raise ArchsimError(f"{option} {p}: cannot be created: {anc} is a file, not a directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        from archsim.errors import ArchsimError

        raise ArchsimError(f"{option} {p}: cannot be created: no permission to write in {anc}")


def check_output_file(path: str | Path | None, option: str) -> None:
    """Check, without writing anything, that ``path`` can be written as a file.

    Args:
        path: the file a command will write (None: nothing to check).
        option: the flag that named it, for the message (``--json``).

    Raises:
        ArchsimError: it is an existing directory, an existing file without write permission,
            or its parent cannot be created (an ancestor is a file, or not writable).
    """
    if path is None:
        return
    from archsim.errors import ArchsimError

    p = Path(path)
    if p.is_dir():
        raise ArchsimError(f"{option} {p}: is a directory; give a file name")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise ArchsimError(f"{option} {p}: the file exists and is not writable")
        return
    _check_creatable(p, option)


def check_output_dir(path: str | Path | None, option: str) -> None:
    """Check, without creating anything, that ``path`` is or can become a writable directory.

    Raises:
        ArchsimError: it is an existing file, an unwritable directory, or cannot be created.
    """
    if path is None:
        return
    from archsim.errors import ArchsimError

    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise ArchsimError(f"{option} {p}: exists and is not a directory; give a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ArchsimError(f"{option} {p}: the directory is not writable")
        return
    _check_creatable(p, option)


def check_workload_flags(*, seed: int = 0, requests: Any = None, dataset: Any = None,
                         keep_channels: bool = False) -> None:
    """Rules shared by every command that builds a request batch (run, compare, compile,
    workload show): ``--seed`` >= 0 (numpy seeds), ``--dataset`` xor ``--requests``,
    ``--keep-channels`` only with a ``--requests`` file.

    Raises:
        ArchsimError: naming the flags.
    """
    from archsim.errors import ArchsimError

    if seed < 0:
        raise ArchsimError(f"--seed {seed}: must be >= 0 (numpy's generators take "
                           "non-negative seeds)")
    if requests is not None and dataset is not None:
        raise ArchsimError("--dataset and --requests are exclusive: the request file gives the "
                           "lengths")
    if keep_channels and requests is None:
        raise ArchsimError("--keep-channels keeps the channels of a --requests snapshot file "
                           "(seq_len,ch_idx); give --requests FILE.csv")


def resolve_jobs(jobs: int | None, what: str) -> int:
    """``--jobs``: None is the CPUs this process may use (:func:`archsim.workers.usable_cpus`);
    ``what`` names what the workers run, for the message.

    Raises:
        ArchsimError: ``jobs < 1``.
    """
    from archsim.errors import ArchsimError
    from archsim.workers import usable_cpus

    if jobs is None:
        return usable_cpus()
    if jobs < 1:
        raise ArchsimError(f"--jobs {jobs}: must be >= 1 (1 runs the {what} in this process)")
    return jobs


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception types that describe a user's mistake (printed as one line, exit code 2)."""
    from archsim.errors import ArchsimError
    from isa.errors import IsaError
    from mapping.errors import MappingError
    from workloads.errors import WorkloadError

    return (ArchsimError, IsaError, WorkloadError, MappingError)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _binary_arguments(argv: Sequence[str]) -> list[str]:
    """The arguments of ``argv`` (``--opt=FILE`` too) that name files that are not UTF-8."""
    out = []
    for a in argv:
        cand = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        p = Path(cand)
        try:
            if p.is_file():
                p.read_bytes()[:1 << 20].decode("utf-8")
        except UnicodeDecodeError:
            out.append(cand)
        except OSError:
            pass
    return out


def describe_os_error(exc: OSError) -> str:
    """``FILE: reason`` of an ``OSError`` (both file names of a rename)."""
    names = [n for n in (exc.filename, getattr(exc, "filename2", None)) if n is not None]
    reason = exc.strerror or str(exc)
    return f"{' -> '.join(map(str, names))}: {reason}" if names else reason


def _is_usage_error(exc: BaseException) -> bool:
    # typer may ship its own copy of click: recognise click's exceptions by their interface
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def _usage_line(exc: Any) -> str:
    ctx = getattr(exc, "ctx", None)
    cmd = ctx.command_path if ctx is not None else "archsim"
    hint = f" (see '{cmd} --help')" if ctx is not None else ""
    return f"{cmd}: error: {_one_line(exc.format_message())}{hint}"


def raise_site(exc: BaseException) -> str:
    """``FILE:LINE in FUNCTION`` of the innermost frame of ``exc``'s traceback (where it was
    raised); paths inside the project are relative to its root. Empty without a traceback."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    frame = traceback.extract_tb(tb)[-1]
    path = Path(frame.filename)
    root = Path(__file__).resolve().parents[2]
    try:
        path = path.resolve().relative_to(root)
    except (OSError, ValueError):
        pass
    return f"{path.as_posix()}:{frame.lineno} in {frame.name}"


def _internal_line(what: str, exc: BaseException | None = None) -> str:
    where = raise_site(exc) if exc is not None else ""
    at = f" at {where}" if where else ""
    return (f"archsim: internal error{at} (a bug in the simulator, not a problem with your "
            f"input; please report it with the command line and the traceback above): "
            f"{_one_line(what)}")


def _command_of(argv: Sequence[str]) -> str:
    """``archsim SUBCOMMAND [ACTION]`` of a command line (its leading non-option words)."""
    words = []
    for a in argv:
        if a.startswith("-") or len(words) == 2:
            break
        words.append(a)
    if len(words) == 2 and ("/" in words[1] or "." in words[1]):
        words = words[:1]   # a file argument, not a sub-subcommand
    return " ".join(["archsim", *words])


def _missing_extra_line(exc: ModuleNotFoundError, argv: Sequence[str]) -> str | None:
    """The one line for a missing optional dependency, or None when ``exc`` names a module no
    extra provides (then it is an internal failure)."""
    from archsim.extras import extra_of_module, missing_extra_message

    e = extra_of_module(exc.name)
    if e is None:
        return None
    return f"archsim: error: {missing_extra_message(e.name, _command_of(argv), exc.name)}"


def run_app(app_call: Callable[[], Any], argv: Sequence[str]) -> int:
    """Run ``app_call()`` (the click/typer app) and turn what it raises into an exit code.

    Returns 0 (or the command's own exit code), 2 for a user's mistake (one line on stderr),
    3 for an internal failure (traceback, then a line saying it is a simulator bug), 130 when
    interrupted. See the module docstring.
    """
    err = sys.stderr
    try:
        rv = app_call()
        # In click's non-standalone mode a ``typer.Exit(code)`` raised by a command is caught
        # by click and its code returned here, not raised: pass it on as the exit code.
        if isinstance(rv, int) and not isinstance(rv, bool):
            if rv == EXIT_INTERRUPTED:   # typer turns Ctrl-C into this code, silently
                print("archsim: interrupted", file=err)
            return rv
        return 0
    except SimulatorBug as exc:
        traceback.print_exception(exc.cause, file=err)
        print(_internal_line(str(exc), exc.cause), file=err)
        return EXIT_INTERNAL
    except user_error_types() as exc:
        print(f"archsim: error: {_one_line(str(exc))}", file=err)
        return EXIT_USER
    except UnicodeDecodeError as exc:
        files = _binary_arguments(argv)
        what = (f"{', '.join(files)}: not a text file (binary?)" if files else
                f"a file given is not UTF-8 text ({exc.reason} at byte {exc.start})")
        print(f"archsim: error: {what}", file=err)
        return EXIT_USER
    except ModuleNotFoundError as exc:
        line = _missing_extra_line(exc, argv)
        if line is None:
            traceback.print_exc(file=err)
            print(_internal_line(f"{type(exc).__name__}: {exc}", exc), file=err)
            return EXIT_INTERNAL
        print(line, file=err)
        return EXIT_USER
    except OSError as exc:
        print(f"archsim: error: {describe_os_error(exc)}", file=err)
        return EXIT_USER
    except KeyboardInterrupt:
        print("archsim: interrupted", file=err)
        return EXIT_INTERRUPTED
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:  # noqa: BLE001 - the last line of defence
        if type(exc).__name__ == "Exit" and isinstance(getattr(exc, "exit_code", None), int):
            return exc.exit_code                  # typer.Exit / click.exceptions.Exit
        if type(exc).__name__ == "Abort":
            print("archsim: aborted", file=err)
            return EXIT_INTERRUPTED
        if _is_usage_error(exc):
            print(_usage_line(exc), file=err)
            return EXIT_USER
        traceback.print_exc(file=err)
        print(_internal_line(f"{type(exc).__name__}: {exc}", exc), file=err)
        return EXIT_INTERNAL


__all__ = ["run_app", "simulating", "SimulatorBug", "check_output_file", "check_output_dir",
           "check_workload_flags", "resolve_jobs",
           "user_error_types", "describe_os_error", "raise_site", "EXIT_USER", "EXIT_INTERNAL",
           "EXIT_INTERRUPTED"]
