"""The dependency direction of CONTRIBUTING.md: imports only point down the stack."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> project packages it may import
ALLOWED = {
    "workloads": {"workloads"},
    "isa": {"isa"},
    "mapping": {"mapping", "isa", "workloads", "archsim.config", "archsim.errors",
                "archsim.memory.addrmap", "archsim.yamlfile"},
    "archsim": {"archsim", "mapping", "isa", "workloads"},
}
# Leaf modules of archsim that the compiler may import: they import nothing above them.
LEAVES = {"archsim/config.py": {"archsim.errors", "archsim.memory.standards",
                                "archsim.yamlfile",
                                "archsim.energy.schema"},
          "archsim/yamlfile.py": set(), "archsim/errors.py": set(),
          "archsim/memory/standards.py": set(), "archsim/memory/policy.py": set(),
          "archsim/energy/schema.py": set(),
          "archsim/energy/__init__.py": set(),
          "archsim/memory/addrmap.py": {"archsim.errors", "archsim.config"}}
PROJECT = ("workloads", "isa", "mapping", "archsim")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return {m for m in out if m.split(".")[0] in PROJECT}


def _allowed(mod: str, allowed: set[str]) -> bool:
    return any(mod == a or mod.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_point_down_the_stack(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        allowed = LEAVES.get(rel, ALLOWED[package])
        for mod in _imports(path):
            if not _allowed(mod, allowed):
                bad.append(f"{rel} imports {mod}")
    assert not bad, "imports against the dependency direction:\n" + "\n".join(bad)


def test_archsim_core_does_not_import_the_cli():
    bad = [p.relative_to(ROOT).as_posix() for p in (ROOT / "archsim").rglob("*.py")
           if "cli" not in p.relative_to(ROOT / "archsim").parts
           and any(m.startswith("archsim.cli") for m in _imports(p))]
    assert not bad, f"core modules importing the CLI: {bad}"
