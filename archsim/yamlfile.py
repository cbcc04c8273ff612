"""User files as text and YAML: one-line errors naming the file, line and key.

A leaf (it imports nothing from the project): :mod:`archsim.config` reads machine files with
it, :mod:`archsim.sweep.spec` sweep specs, :mod:`archsim.memory.trace` traces. Each function
raises the error type its caller passes, so every package keeps its own exception types.

* :func:`read_text_file` — the UTF-8 text of a file (a missing file, a directory, no permission
  or a binary file is one line naming it);
* :func:`parse_yaml_mapping` — a YAML mapping, rejecting a key given twice in one mapping
  (:class:`UniqueKeyLoader`; PyYAML would keep the last value silently);
* :func:`yaml_key_lines` — the line of every dotted key, for ``FILE:LINE: key: ...`` messages.

Parsing uses libyaml (``CSafeLoader``) when PyYAML was built with it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when built with it


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A YAML mapping gives the same key twice (YAML 1.2 requires unique keys; PyYAML would
    silently keep the last value). ``key``, ``line`` (1-based, the repeat) and ``first_line``."""

    def __init__(self, key: Any, line: int, first_line: int, mark: Any) -> None:
        super().__init__(None, None, f"duplicate key {key!r} (first given on line "
                         f"{first_line})", mark)
        self.key, self.line, self.first_line = key, line, first_line


class UniqueKeyLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader that rejects a mapping key given twice (:class:`DuplicateKeyError`).

    Merge keys (``<<``) may still be overridden by explicit keys, as YAML intends."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, _ in node.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(k, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:            # an unhashable key: PyYAML reports it itself
                    continue
                if first is not None:
                    raise DuplicateKeyError(key, k.start_mark.line + 1, first, k.start_mark)
                seen[key] = k.start_mark.line + 1
        return super().construct_mapping(node, deep)


def yaml_key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each dotted key path of a YAML mapping document to its 1-based line number."""
    lines: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=_BaseLoader)
    except yaml.YAMLError:
        return lines

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = path + (str(k.value),)
                lines[key] = k.start_mark.line + 1
                walk(v, key)

    walk(root, ())
    return lines


def parse_yaml_mapping(text: str, source: str, error: type[Exception], what: str) -> dict[str, Any]:
    """Parse YAML ``text`` that must be a mapping (an empty document is ``{}``).

    Args:
        text: the YAML document.
        source: how to name it in messages (a file path or preset).
        error: the exception type to raise (ConfigError, SweepSpecError, ...).
        what: what the mapping should hold, for the message (e.g. "sections npu, memory, ...").

    Raises:
        error: not valid YAML (``source:line:column: not valid YAML: ...``), a key given twice
            in one mapping (``source:line: duplicate key 'k' (first given on line n)``), or not
            a mapping.
    """
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a safe loader
    except DuplicateKeyError as exc:
        raise error(f"{source}:{exc.line}: duplicate key {str(exc.key)!r} (first given on line "
                    f"{exc.first_line}); a key may appear once per mapping") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise error(f"{source}{where}: not valid YAML: "
                    f"{getattr(exc, 'problem', exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise error(f"{source}: must be a YAML mapping of {what}, got {type(data).__name__}")
    return data


def read_text_file(path: str | Path, what: str, error: type[Exception]) -> str:
    """The text of a file a user named (UTF-8).

    Raises:
        error: ``PATH: cannot read WHAT: <reason>`` when it cannot be read (missing, a
            directory, no permission) and ``PATH: not a text file (binary?); expected WHAT``
            when it is not UTF-8 text.
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{p}: cannot read {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"{p}: not a text file (byte {exc.start} is not UTF-8; binary?); expected "
                    f"{what}") from None


__all__ = ["read_text_file", "parse_yaml_mapping", "yaml_key_lines", "UniqueKeyLoader",
           "DuplicateKeyError"]
