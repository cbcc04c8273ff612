"""The Verilog front end: pyverilog parses each block and its ports and parameters are compared
with what the Python side drives (Icarus would silently ignore a misspelt ``-P`` parameter)."""
from __future__ import annotations

import functools
import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from archsim.cosim.blocks import get_block
from archsim.cosim.common import DEFAULT_BUILD_ROOT, RTL_DIR, CosimError, file_lock
from archsim.cosim.params import expected_ports, verilog_parameters


@dataclass(frozen=True)
class ModuleInterface:
    """Ports and parameters of one Verilog module as parsed by pyverilog.

    ``ports`` maps a port name to ``(direction, width in bits)`` evaluated with ``params``;
    ``parameters`` maps a parameter name to its default value (int) as written in the source.
    """

    name: str
    ports: dict[str, tuple[str, int]]
    parameters: dict[str, int]


def _eval_expr(node, env: dict[str, int]) -> int:
    """Evaluate a constant pyverilog expression AST with parameter values ``env``."""
    from pyverilog.vparser import ast as vast

    if node is None:
        return 0
    if isinstance(node, vast.IntConst):
        text = node.value.replace("_", "")
        if "'" in text:
            size, _, rest = text.partition("'")
            base, digits = rest[0].lower(), rest[1:]
            if base == "s":
                base, digits = digits[0].lower(), digits[1:]
            return int(digits, {"d": 10, "h": 16, "b": 2, "o": 8}[base])
        return int(text)
    if isinstance(node, vast.Identifier):
        if node.name not in env:
            raise CosimError(f"expression uses '{node.name}', which is not a known parameter")
        return env[node.name]
    if isinstance(node, vast.Rvalue):
        return _eval_expr(node.var, env)
    if isinstance(node, vast.Cond):
        return (_eval_expr(node.true_value, env) if _eval_expr(node.cond, env)
                else _eval_expr(node.false_value, env))
    if isinstance(node, vast.UnaryOperator):
        v = _eval_expr(node.right, env)
        return {"Uminus": -v, "Uplus": v, "Ulnot": int(not v)}[type(node).__name__]
    ops: dict[str, Callable[[int, int], int]] = {
        "Plus": lambda a, b: a + b, "Minus": lambda a, b: a - b, "Times": lambda a, b: a * b,
        "Divide": lambda a, b: a // b, "Mod": lambda a, b: a % b, "Power": lambda a, b: a ** b,
        "Sll": lambda a, b: a << b, "Srl": lambda a, b: a >> b, "Sra": lambda a, b: a >> b,
        "LessThan": lambda a, b: int(a < b), "GreaterThan": lambda a, b: int(a > b),
        "LessEq": lambda a, b: int(a <= b), "GreaterEq": lambda a, b: int(a >= b),
        "Eq": lambda a, b: int(a == b), "NotEq": lambda a, b: int(a != b),
    }
    name = type(node).__name__
    if name in ops:
        return ops[name](_eval_expr(node.left, env), _eval_expr(node.right, env))
    raise CosimError(f"cannot evaluate Verilog expression node {name}")


@functools.lru_cache(maxsize=32)
def _parse_verilog(path: str, digest: str, include_dirs: tuple[str, ...]):
    """pyverilog AST of one file (cached per process by path and content digest)."""
    from pyverilog.vparser.parser import VerilogCodeParser

    # ply's parser tables are generated once (seconds) into a shared cache directory, under a
    # lock so parallel runs never read a half-written table; the preprocessed text goes to a
    # private temporary directory.
    tables = DEFAULT_BUILD_ROOT / "pyverilog-tables"
    tables.mkdir(parents=True, exist_ok=True)
    with file_lock(tables / "lock"), tempfile.TemporaryDirectory(prefix="pyverilog-") as tmp:
        parser = VerilogCodeParser([path], preprocess_output=str(Path(tmp) / "pp.out"),
                                   preprocess_include=list(include_dirs),
                                   outputdir=str(tables), debug=False)
        try:
            return parser.parse()
        except Exception as exc:  # pyverilog raises plain ParseError/IOError
            raise CosimError(f"{path}: pyverilog cannot parse it: {exc}") from exc


def parse_module_interface(path: Path, module: str, params: dict[str, int] | None = None,
                           include_dirs: tuple[Path, ...] = ()) -> ModuleInterface:
    """Parse ``module`` in ``path`` with pyverilog; port widths evaluated with ``params``
    (defaults of the source for parameters not given).

    pyverilog writes its parser tables and preprocessed text into the working directory by
    default; here the tables go to a cache under ``rtl/sim_build`` (written under a lock) and
    the preprocessed text to a private temporary directory, so parallel runs never collide.

    Raises CosimError when the file has no such module or cannot be parsed.
    """
    from pyverilog.vparser import ast as vast

    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    tree = _parse_verilog(str(path), digest, tuple(str(d) for d in include_dirs))
    defs = [d for d in tree.description.definitions
            if isinstance(d, vast.ModuleDef) and d.name == module]
    if not defs:
        raise CosimError(f"{path}: no module '{module}'")
    mod = defs[0]
    defaults: dict[str, int] = {}
    env: dict[str, int] = {}
    for p in (mod.paramlist.params if mod.paramlist else ()):
        for decl in (p.list if isinstance(p, vast.Decl) else [p]):
            if isinstance(decl, vast.Parameter):
                val = _eval_expr(decl.value.var if decl.value is not None else None, env)
                defaults[decl.name] = val
                env[decl.name] = val
    env.update(params or {})
    ports: dict[str, tuple[str, int]] = {}
    for port in mod.portlist.ports:
        first = port.first if isinstance(port, vast.Ioport) else port
        direction = type(first).__name__.lower()  # input / output / inout
        width = 1
        if first.width is not None:
            width = abs(_eval_expr(first.width.msb, env) - _eval_expr(first.width.lsb, env)) + 1
        ports[first.name] = (direction, width)
    return ModuleInterface(module, ports, defaults)


def check_interface(block_name: str, cfg, dtype: str | None = None) -> list[str]:
    """Compare the Verilog module's ports and parameters with what the Python side expects.

    Returns a list of mismatch descriptions (empty when they agree): a parameter the Python
    side sets that the module lacks (Icarus would silently ignore it), a missing or extra
    port, a wrong direction or width.
    """
    block = get_block(block_name)
    params = verilog_parameters(block_name, cfg, dtype)
    iface = parse_module_interface(RTL_DIR / block.sources[0], block.toplevel, params,
                                   tuple(RTL_DIR / d for d in block.includes))
    problems = [f"{block_name}: parameter {k} is set from Python but the module has no such "
                f"parameter" for k in params if k not in iface.parameters]
    want = expected_ports(block_name, params)
    for name, (d, w) in want.items():
        if name not in iface.ports:
            problems.append(f"{block_name}: port {name} ({d}, {w} bits) is missing")
        elif iface.ports[name] != (d, w):
            problems.append(f"{block_name}: port {name} is {iface.ports[name]}, Python expects "
                            f"{(d, w)}")
    problems += [f"{block_name}: port {n} is not known to the Python side"
                 for n in iface.ports if n not in want]
    return problems
