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
CONFIG_LEAF = {"archsim.config", "archsim.errors", "archsim.memory.standards", "archsim.yamlfile",
               "archsim.energy.schema"}
LEAVES = {**{p.relative_to(ROOT).as_posix(): CONFIG_LEAF
             for p in (ROOT / "archsim" / "config").glob("*.py")},
          "archsim/yamlfile.py": set(), "archsim/errors.py": set(),
          "archsim/memory/standards.py": set(), "archsim/memory/policy.py": set(),
          "archsim/energy/schema.py": set(),
          "archsim/energy/__init__.py": set(),
          "archsim/memory/addrmap.py": {"archsim.errors", "archsim.config"}}
PROJECT = ("workloads", "isa", "mapping", "archsim")
# Packages split by concern: each module may import only the modules listed before it (the
# package's __init__ re-exports them all). A new module must be placed in the order.
INNER_ORDER = {
    "archsim/config": ("base", "memory", "machine", "loading"),
    "archsim/serving": ("systems", "requests", "kvcache", "router", "timers", "surrogate",
                        "scheduler", "grid"),
}
# archsim.serving (the Python API of run/compare/serve) sits on the whole-system simulator and
# the GPU model; only the layers above it import it.
SERVING_MAY_IMPORT = {"archsim.serving", "archsim.config", "archsim.errors", "archsim.gpu",
                      "archsim.results", "archsim.system", "archsim.workers", "mapping",
                      "workloads"}
ABOVE_SERVING = ("archsim/serving/", "archsim/cli/", "archsim/sweep/", "archsim/ablation.py")


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
           and p.name != "__main__.py"          # python -m archsim: the CLI's entry point
           and any(m.startswith("archsim.cli") for m in _imports(p))]
    assert not bad, f"core modules importing the CLI: {bad}"


@pytest.mark.parametrize("package", sorted(INNER_ORDER))
def test_modules_of_a_split_package_import_only_those_before_them(package):
    order = INNER_ORDER[package]
    dotted = package.replace("/", ".")
    files = {p.stem for p in (ROOT / package).glob("*.py")} - {"__init__"}
    assert files == set(order), f"{package}: modules not in INNER_ORDER: {files ^ set(order)}"
    bad = []
    for i, name in enumerate(order):
        for mod in _imports(ROOT / package / f"{name}.py"):
            if mod == dotted or (mod.startswith(dotted + ".")
                                 and mod[len(dotted) + 1:].split(".")[0] not in order[:i]):
                bad.append(f"{package}/{name}.py imports {mod}")
    assert not bad, "imports against the order of the package's modules:\n" + "\n".join(bad)


def test_serving_sits_on_the_system_simulator_and_only_the_layers_above_import_it():
    bad = []
    for path in sorted((ROOT / "archsim").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for mod in _imports(path):
            if rel.startswith("archsim/serving/") and not _allowed(mod, SERVING_MAY_IMPORT):
                bad.append(f"{rel} imports {mod}")
            if _allowed(mod, {"archsim.serving"}) and not rel.startswith(ABOVE_SERVING):
                bad.append(f"{rel} imports {mod} (below archsim.serving)")
    assert not bad, "\n".join(bad)
