"""The compiled kernels can never load stale machine code (archsim.memory.kernel.jit).

numba's cache is keyed by the source file of each function only; the kernels span several
files and read the command codes of archsim.memory.spec. Their cache directory is therefore
named after a hash of every source they depend on: these tests pin that any edit of those
files — a reordered command table included — changes the directory, and that no compiled
kernel lives outside the hashed set.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from archsim.memory.kernel import jit

ROOT = Path(__file__).resolve().parents[1]


def test_cache_directory_is_named_after_the_source_hash():
    assert jit.CACHE_DIR.name == f"numba-{jit.source_hash()}"


def test_every_file_with_a_compiled_kernel_is_in_the_hashed_sources():
    hashed = {p.resolve() for p in jit.KERNEL_SOURCES}
    users = [p for p in (ROOT / "archsim").rglob("*.py")
             if re.search(r"^@(njit|njit_inline)\b", p.read_text(), re.M)]
    assert users, "no compiled kernels found"
    missing = [str(p.relative_to(ROOT)) for p in users if p.resolve() not in hashed]
    assert not missing, f"kernel sources not in jit.KERNEL_SOURCES: {missing}"
    assert (ROOT / "archsim" / "memory" / "spec.py").resolve() in hashed


def test_reordering_the_command_table_changes_the_cache_key(tmp_path):
    copies = []
    for p in jit.KERNEL_SOURCES:
        q = tmp_path / p.parent.name / p.name
        q.parent.mkdir(exist_ok=True)
        if p.exists():
            shutil.copy(p, q)
        copies.append(q)
    before = jit.source_hash(copies)
    assert before == jit.source_hash(jit.KERNEL_SOURCES)
    spec = next(q for q in copies if q.name == "spec.py")
    text = spec.read_text()
    old = 'MEM_COMMANDS = ("ACT", "PRE",'
    assert old in text
    spec.write_text(text.replace(old, 'MEM_COMMANDS = ("PRE", "ACT",'))
    assert jit.source_hash(copies) != before


def test_an_edit_of_any_kernel_module_changes_the_cache_key(tmp_path):
    copies = []
    for p in jit.KERNEL_SOURCES:
        q = tmp_path / f"{len(copies)}_{p.name}"
        if p.exists():
            shutil.copy(p, q)
        copies.append(q)
    before = jit.source_hash(copies)
    for q in copies:
        if not q.exists():
            continue
        saved = q.read_bytes()
        q.write_bytes(saved + b"\n# edited\n")
        assert jit.source_hash(copies) != before, q.name
        q.write_bytes(saved)
    assert jit.source_hash(copies) == before
