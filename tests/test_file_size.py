"""Source files stay small (DESIGN §8: "each a package of small modules"; STYLE: files of at most
about 800 lines, or the file says why at the top).

A ``.py`` file under ``archsim/``, ``mapping/``, ``workloads/`` or ``isa/`` has at most
:data:`MAX_LINES` lines, or the first paragraph of its module docstring contains a sentence that
starts with :data:`MARKER` and gives the reason. A file back under the limit must drop the
sentence (a stale reason reads as a licence to grow).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("archsim", "mapping", "workloads", "isa")
MAX_LINES = 800
MARKER = "Over 800 lines because"
#: The reason after the marker must say something (not just "it is big").
MIN_REASON_CHARS = 40


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _reason(path: Path) -> str | None:
    """The sentence of the docstring's first paragraph that starts with MARKER, or None."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0].split())
    i = first.find(MARKER)
    if i < 0 or (i > 0 and not first[:i].rstrip().endswith((".", ":", ";"))):
        return None
    return first[i:]


def test_every_source_file_is_small_or_says_why_at_the_top():
    bad = []
    for p in _sources():
        n = _lines(p)
        if n <= MAX_LINES:
            continue
        why = _reason(p)
        rel = p.relative_to(ROOT).as_posix()
        if why is None:
            bad.append(f"{rel}: {n} lines and no '{MARKER} ...' sentence in the first "
                       "paragraph of its docstring (split it, or say why it is one file)")
        elif len(why) - len(MARKER) < MIN_REASON_CHARS:
            bad.append(f"{rel}: {n} lines; the reason '{why}' says too little")
    assert not bad, "\n".join(bad)


def test_a_file_back_under_the_limit_drops_its_reason():
    stale = [f"{p.relative_to(ROOT).as_posix()} ({_lines(p)} lines)" for p in _sources()
             if _lines(p) <= MAX_LINES and _reason(p) is not None]
    assert not stale, f"files under {MAX_LINES} lines still saying '{MARKER}': {stale}"


def test_the_check_finds_a_reason_only_at_the_top(tmp_path):
    ok = tmp_path / "ok.py"
    ok.write_text(f'"""One thing. {MARKER.replace(" ", chr(10), 1)} x.\n\nMore."""\n')
    late = tmp_path / "late.py"
    late.write_text(f'"""One thing.\n\n{MARKER} x."""\n')
    inline = tmp_path / "inline.py"
    inline.write_text(f'"""One thing, not {MARKER} x."""\n')
    assert _reason(ok) == f"{MARKER} x."
    assert _reason(late) is None and _reason(inline) is None
