"""RTL co-simulation: run the Verilog blocks of ``rtl/`` against the simulator's own models.

Each block (``pim_mac``, ``systolic_array``, ``bank_dual_rowbuf``, ``isa_decoder``) is built with
Icarus Verilog through ``cocotb_tools.runner`` and driven by a cocotb test bench
(``rtl/tests/tb_<block>.py``) that feeds the same seeded random stimulus to the Verilog and to the
Python model the simulator uses (never a copy written for the test), comparing every output and
every accept/reject decision cycle for cycle.

One source of truth: :func:`verilog_parameters` derives every Verilog parameter from the machine
configuration (:mod:`archsim.config`), the timing table (:mod:`archsim.memory.spec`), the NPU
timing model and the ISA table; the test bench rebuilds the model from the same configuration.
The ISA decoder's field constants are generated from the ISA table
(:func:`generate_isa_fields_vh`, committed as ``rtl/generated/isa_fields.vh``).

How a run flows:

1. :func:`build` compiles one parameter set into its own directory under the build root, named
   by a hash of the block, its parameters and the text of every source (a stale ``sim.vvp`` can
   never be reused for other parameters or sources); a file lock makes parallel builds of the
   same set (pytest-xdist, two shells) wait for each other instead of colliding.
2. :func:`run_variant` writes a job file (``cosim_job.json``: configuration, parameters, seed,
   mutation) into a fresh run directory, runs the simulator there (the test bench reads the
   job from its working directory), and reads the xUnit results file and the test bench's
   per-test report (stimulus count, cycles simulated) itself: ``runner.test()`` does not raise
   outside pytest and calls ``sys.exit`` inside it.
3. A *mutation* (``--mutation`` / ``mutation=``) makes the test bench perturb the Python model by
   one cycle or one bit before the run; the co-simulation must then fail (the mutation tests).

The harness does file I/O and starts processes; the simulator core never imports it.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from archsim.errors import ArchsimError

REPO_ROOT = Path(__file__).resolve().parents[1]
#: A source checkout has ``rtl/`` beside the packages; an installed wheel ships it as the
#: package data directory ``archsim/rtl`` (see setup.py), and builds then go to the user's
#: cache (site-packages may not be writable).
_IN_CHECKOUT = (REPO_ROOT / "rtl").is_dir() and (REPO_ROOT / "pyproject.toml").is_file()
RTL_DIR = REPO_ROOT / "rtl" if _IN_CHECKOUT else Path(__file__).resolve().parent / "rtl"
TB_DIR = RTL_DIR / "tests"
GENERATED_DIR = RTL_DIR / "generated"
DEFAULT_BUILD_ROOT = RTL_DIR / "sim_build" if _IN_CHECKOUT else Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "archsim" / "sim_build"
JOB_FILE = "cosim_job.json"
REPORT_FILE = "cosim_report.jsonl"
DEFAULT_SEED = 20240427
CLOCK_PERIOD_NS = 10
TB_FILE_PATTERN = "tb_*.py"
"""Only the test benches get pytest's assertion rewriting inside the simulator (DESIGN §6:
the default pattern would re-compile every imported module, torch included, on every run)."""


class CosimError(ArchsimError):
    """The co-simulation could not run: unknown block or variant, missing Icarus, failed build,
    or a Python model the test bench needs is missing."""


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One parameter set of a block: config overrides applied on top of the chosen config."""

    name: str
    overrides: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class Block:
    """A Verilog block, its sources (relative to ``rtl/``), test bench and variants.

    Attributes:
        name: block name used on the command line.
        toplevel: Verilog top module.
        sources: Verilog files, relative to ``rtl/``.
        tb_module: cocotb test module in ``rtl/tests``.
        variants: parameter sets run by default (the first is the block's reference set).
        mutations: names of the model perturbations its mutation test may apply
            (see :data:`MUTATIONS`).
        includes: include directories relative to ``rtl/``.
        model: where the Python model it is checked against lives (for reports).
    """

    name: str
    toplevel: str
    sources: tuple[str, ...]
    tb_module: str
    variants: tuple[Variant, ...]
    mutations: tuple[str, ...]
    includes: tuple[str, ...] = ()
    model: str = ""


BLOCKS: dict[str, Block] = {
    "pim_mac": Block(
        name="pim_mac", toplevel="pim_mac", sources=("pim_mac.v",), tb_module="tb_pim_mac",
        variants=(Variant("l16", (), "reference: 16 lanes, 16-bit operands, 32-bit accumulator"),
                  Variant("l8_acc24", ("pim.multipliers_per_bank=8", "pim.acc_bits=24"),
                          "8 lanes (a padding pipeline stage), 24-bit wrapping accumulator")),
        mutations=("bit", "cycle"),
        model="archsim.functional.pim_comp_step + FILL of archsim.memory.spec"),
    "systolic_array": Block(
        name="systolic_array", toplevel="systolic_array",
        sources=("systolic_array.v", "systolic_pe.v"), tb_module="tb_systolic_array",
        variants=(Variant("4x4", ("npu.array_height=4", "npu.array_width=4")),
                  Variant("8x8", ("npu.array_height=8", "npu.array_width=8")),
                  Variant("4x8", ("npu.array_height=4", "npu.array_width=8"))),
        mutations=("cycle", "bit", "preload", "interval"),
        model="archsim.npu.timing (tile latency, issue interval, preload) + numpy matmul"),
    "bank_dual_rowbuf": Block(
        name="bank_dual_rowbuf", toplevel="bank_dual_rowbuf", sources=("bank_dual_rowbuf.v",),
        tb_module="tb_bank_dual_rowbuf",
        variants=(Variant("dual", ("pim.row_buffer_mode=dual",)),
                  Variant("single", ("pim.row_buffer_mode=single",))),
        mutations=("cycle", "faw"),
        model="archsim.memory.bank.BankTimingModel"),
    "isa_decoder": Block(
        name="isa_decoder", toplevel="isa_decoder", sources=("isa_decoder.v",),
        tb_module="tb_isa_decoder", includes=("generated",),
        variants=(Variant("default", ()),),
        mutations=("bit",),
        model="isa.encoding.decode over isa.spec.SPEC"),
}


def get_block(name: str) -> Block:
    """The :class:`Block` called ``name``. Raises CosimError listing the known blocks."""
    try:
        return BLOCKS[name]
    except KeyError:
        raise CosimError(f"unknown RTL block '{name}'; known: {', '.join(BLOCKS)}") from None


def get_variant(block: Block, name: str | None) -> Variant:
    """A variant of ``block`` by name (``None``: the first). Raises CosimError if unknown."""
    if name is None:
        return block.variants[0]
    for v in block.variants:
        if v.name == name:
            return v
    raise CosimError(f"block '{block.name}' has no variant '{name}'; "
                     f"known: {', '.join(v.name for v in block.variants)}")


def clog2(n: int) -> int:
    """ceil(log2(n)) for n >= 1 (the Verilog $clog2)."""
    return max(0, (int(n) - 1).bit_length())


# --------------------------------------------------------------------------------------------
# Parameters: one source of truth
# --------------------------------------------------------------------------------------------
def load_cosim_config(config: str = "neupims", overrides: tuple[str, ...] | list[str] = ()):
    """The machine configuration a co-simulation uses (a preset or file plus overrides)."""
    from archsim.config import load_config

    return load_config(config, list(overrides))


def verilog_parameters(block_name: str, cfg) -> dict[str, int]:
    """The Verilog parameters of ``block_name`` for the machine ``cfg``.

    Every value comes from the configuration or from the Python model it is checked against:
    the test bench builds that model from the same ``cfg``.

    Raises CosimError for an unknown block or a missing model.
    """
    get_block(block_name)
    if block_name == "systolic_array":
        h, w = cfg.npu.array_height, cfg.npu.array_width
        data_w = 8 * cfg.npu.dtype_bytes
        return {"H": h, "W": w, "DATA_W": data_w, "ACC_W": 2 * data_w + clog2(h),
                "MIN_ROWS": npu_min_rows(cfg), "NROWS_W": 16}
    if block_name == "pim_mac":
        return {"LANES": cfg.pim.multipliers_per_bank, "DATA_W": pim_operand_bits(cfg),
                "ACC_W": cfg.pim.acc_bits, "FILL_CYCLES": pim_fill_cycles(cfg)}
    if block_name == "bank_dual_rowbuf":
        return bank_verilog_parameters(cfg)
    if block_name == "isa_decoder":
        return isa_verilog_parameters()
    raise CosimError(f"no parameter rule for block '{block_name}'")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# Interface checks with pyverilog
# --------------------------------------------------------------------------------------------
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
    with _file_lock(tables / "lock"), tempfile.TemporaryDirectory(prefix="pyverilog-") as tmp:
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


def expected_ports(block_name: str, params: dict[str, int]) -> dict[str, tuple[str, int]]:
    """The ports (direction, width) the Python side drives and reads for ``block_name``."""
    p = params
    if block_name == "systolic_array":
        return {"clk": ("input", 1), "rst_n": ("input", 1), "load": ("input", 1),
                "w_ready": ("output", 1), "w_data": ("input", p["W"] * p["DATA_W"]),
                "load_ready": ("output", 1), "shadow_valid": ("output", 1),
                "start": ("input", 1), "swap": ("input", 1), "n_rows": ("input", p["NROWS_W"]),
                "start_ready": ("output", 1), "a_ready": ("output", 1),
                "a_data": ("input", p["H"] * p["DATA_W"]), "c_valid": ("output", 1),
                "c_data": ("output", p["W"] * p["ACC_W"]), "done": ("output", 1)}
    if block_name == "pim_mac":
        return {"clk": ("input", 1), "rst_n": ("input", 1), "in_valid": ("input", 1),
                "in_first": ("input", 1), "bank_data": ("input", p["LANES"] * p["DATA_W"]),
                "gb_data": ("input", p["LANES"] * p["DATA_W"]), "out_valid": ("output", 1),
                "acc": ("output", p["ACC_W"])}
    if block_name == "bank_dual_rowbuf":
        return bank_expected_ports(p)
    if block_name == "isa_decoder":
        return isa_expected_ports(p)
    raise CosimError(f"no port list for block '{block_name}'")  # pragma: no cover


def check_interface(block_name: str, cfg) -> list[str]:
    """Compare the Verilog module's ports and parameters with what the Python side expects.

    Returns a list of mismatch descriptions (empty when they agree): a parameter the Python
    side sets that the module lacks (Icarus would silently ignore it), a missing or extra
    port, a wrong direction or width.
    """
    block = get_block(block_name)
    params = verilog_parameters(block_name, cfg)
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


# --------------------------------------------------------------------------------------------
# Build and run
# --------------------------------------------------------------------------------------------
@dataclass
class TestOutcome:
    """One cocotb test of a run: name, pass/fail, failure message, stimulus and cycle counts."""

    name: str
    passed: bool
    message: str = ""
    stimuli: int = 0
    cycles: int = 0


@dataclass
class CosimResult:
    """The outcome of one block variant's co-simulation run.

    Attributes:
        block, variant: what ran.
        passed: every test ran and passed.
        tests: per-test outcomes (names, failure messages, stimulus/cycle counts).
        stimuli: stimulus items applied (sum over tests; what an item is depends on the block:
            a COMP step, a tile row, a command slot, an instruction word).
        cycles: clock cycles simulated (sum over tests, from the test bench).
        wall_s: wall time of build (if any) + simulation, seconds.
        build_dir, run_dir: where the build and this run live (run_dir removed on success
            unless kept).
        waves: the FST file when waves were requested.
        mutation: the model perturbation applied, if any.
        error: a message when the simulator did not produce results at all.
    """

    block: str
    variant: str
    passed: bool
    tests: list[TestOutcome] = field(default_factory=list)
    stimuli: int = 0
    cycles: int = 0
    wall_s: float = 0.0
    build_dir: str = ""
    run_dir: str = ""
    waves: str | None = None
    mutation: str | None = None
    error: str = ""
    parameters: dict[str, int] = field(default_factory=dict)

    def failure_summary(self) -> str:
        """One paragraph naming each failed test and its message (for assertion messages)."""
        lines = [f"{self.block}[{self.variant}] failed"
                 + (f" (mutation {self.mutation})" if self.mutation else "")
                 + (f": {self.error}" if self.error else "")]
        lines += [f"  {t.name}: {t.message}" for t in self.tests if not t.passed]
        if self.run_dir:
            lines.append(f"  run dir: {self.run_dir}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the result."""
        return asdict(self)


def _sources_digest(block: Block) -> str:
    h = hashlib.sha256()
    files = [RTL_DIR / s for s in block.sources]
    for d in block.includes:
        files += sorted((RTL_DIR / d).glob("*.vh"))
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def build_key(block: Block, params: dict[str, int], waves: bool) -> str:
    """Directory name of one build: block, parameters, waves and a digest of the sources."""
    h = hashlib.sha256(json.dumps([block.name, sorted(params.items()), waves,
                                   _sources_digest(block)]).encode()).hexdigest()[:16]
    return f"{block.name}-{h}{'-waves' if waves else ''}"


def _check_icarus() -> None:
    if shutil.which("iverilog") is None or shutil.which("vvp") is None:
        raise CosimError("Icarus Verilog (iverilog, vvp) not found: install it with "
                         "'apt-get install iverilog' or run 'make test' (scripts/setup.sh "
                         "--system installs it)")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _absolute_sys_path() -> Iterator[None]:
    """sys.path made absolute, with the test benches and the repository first.

    The runner exports ``sys.path`` as the simulator's PYTHONPATH and the simulator runs in
    another directory: a relative entry (``''``) would point elsewhere there.
    """
    saved = list(sys.path)
    paths = [str(TB_DIR), str(REPO_ROOT)]
    for p in saved:
        ap = os.path.abspath(p) if p else os.getcwd()
        if ap not in paths:
            paths.append(ap)
    sys.path[:] = paths
    try:
        yield
    finally:
        sys.path[:] = saved


def build(block_name: str, params: dict[str, int], *, build_root: Path | None = None,
          waves: bool = False) -> Path:
    """Compile one parameter set of a block (once; later calls reuse it). Returns its dir.

    The directory is keyed by :func:`build_key`, so new parameters or edited sources get a new
    build; a lock serialises concurrent builders of the same key. Raises CosimError when
    Icarus is missing or the compilation fails (the log is in the build dir).
    """
    from cocotb_tools.runner import get_runner

    _check_icarus()
    block = get_block(block_name)
    root = Path(build_root or DEFAULT_BUILD_ROOT).resolve()
    bdir = root / build_key(block, params, waves)
    stamp = bdir / "built.ok"
    with _file_lock(root / f"{bdir.name}.lock"):
        if stamp.exists() and (bdir / "sim.vvp").exists():
            return bdir
        bdir.mkdir(parents=True, exist_ok=True)
        runner = get_runner("icarus")
        try:
            with _absolute_sys_path():
                runner.build(
                    sources=[RTL_DIR / s for s in block.sources],
                    includes=[RTL_DIR / d for d in block.includes],
                    hdl_toplevel=block.toplevel, parameters=dict(params), build_dir=bdir,
                    always=True, waves=waves, timescale=("1ns", "1ps"),
                    log_file=bdir / "build.log")
        except (RuntimeError, SystemExit, OSError) as exc:
            log = (bdir / "build.log").read_text(errors="replace")[-2000:] \
                if (bdir / "build.log").exists() else ""
            raise CosimError(f"building {block_name} with {params} failed: {exc}\n{log}") \
                from None
        stamp.write_text(json.dumps(params))
    return bdir


def _read_results(xml_path: Path, report_path: Path) -> list[TestOutcome]:
    counts: dict[str, dict[str, int]] = {}
    if report_path.exists():
        for line in report_path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                c = counts.setdefault(rec["test"], {"stimuli": 0, "cycles": 0})
                c["stimuli"] += int(rec.get("stimuli", 0))
                c["cycles"] += int(rec.get("cycles", 0))
    out: list[TestOutcome] = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = case.get("name", "?")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        msg = ""
        if bad is not None:
            msg = (bad.get("message") or bad.text or "").strip()
        c = counts.get(name, {"stimuli": 0, "cycles": 0})
        out.append(TestOutcome(name, bad is None and case.find("skipped") is None, msg,
                               c["stimuli"], c["cycles"]))
    return out


def run_variant(block_name: str, variant: str | None = None, *, config: str = "neupims",
                overrides: tuple[str, ...] | list[str] = (), build_root: Path | None = None,
                waves: bool = False, mutation: str | None = None, seed: int = DEFAULT_SEED,
                testcase: str | None = None, keep: bool = False,
                stimulus_scale: float = 1.0) -> CosimResult:
    """Build (if needed) and co-simulate one variant of a block.

    Args:
        block_name: a key of :data:`BLOCKS`.
        variant: a variant name (default: the block's first).
        config: preset name or YAML file the machine comes from.
        overrides: extra ``dotted.key=value`` applied after the variant's own.
        build_root: where builds and runs live (default ``rtl/sim_build``).
        waves: dump an FST waveform (kept in the run dir).
        mutation: a model perturbation of :data:`MUTATIONS` (the run is then expected to fail).
        seed: base seed of every test's random stimulus (logged by the test bench).
        testcase: run only the cocotb test of this name.
        keep: keep the run directory even when everything passed.
        stimulus_scale: multiply each test's stimulus count (CLI ``--scale``).

    Returns:
        A :class:`CosimResult`; never raises for a failing comparison.

    Raises:
        CosimError: unknown block/variant/mutation, Icarus missing, build failure.
        ConfigError: invalid configuration or override.
    """
    from cocotb_tools.runner import get_runner

    block = get_block(block_name)
    var = get_variant(block, variant)
    if mutation is not None and mutation not in block.mutations:
        raise CosimError(f"block '{block_name}' has no mutation '{mutation}'; known: "
                         f"{', '.join(block.mutations)}")
    all_overrides = tuple(var.overrides) + tuple(overrides)
    cfg = load_cosim_config(config, all_overrides)
    params = verilog_parameters(block_name, cfg)
    t0 = time.perf_counter()
    bdir = build(block_name, params, build_root=build_root, waves=waves)
    root = bdir.parent
    (root / "runs").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{block_name}-{var.name}-", dir=root / "runs"))
    job = {"block": block_name, "variant": var.name, "config": str(config),
           "overrides": list(all_overrides), "parameters": params, "seed": int(seed),
           "mutation": mutation, "report": str(run_dir / REPORT_FILE),
           "stimulus_scale": float(stimulus_scale), "clock_period_ns": CLOCK_PERIOD_NS}
    (run_dir / JOB_FILE).write_text(json.dumps(job, indent=1))
    xml_path = run_dir / "results.xml"
    waves_path = run_dir / f"{block.toplevel}.fst" if waves else None
    runner = get_runner("icarus")
    error = ""
    extra_env = {"COCOTB_REWRITE_ASSERTION_FILES": TB_FILE_PATTERN}
    saved_env = {k: os.environ.get(k) for k in extra_env}
    try:
        # os.environ wins over extra_env inside the runner: set both for the call.
        os.environ.update(extra_env)
        with _absolute_sys_path():
            runner.test(test_module=block.tb_module, hdl_toplevel=block.toplevel,
                        hdl_toplevel_lang="verilog", build_dir=bdir, test_dir=run_dir,
                        results_xml=str(xml_path), extra_env=extra_env, waves=waves,
                        seed=seed, testcase=testcase, log_file=run_dir / "sim.log",
                        plusargs=[f"+dumpfile_path={waves_path}"] if waves else [])
    except SystemExit as exc:  # raised by the runner under pytest on failures
        if not xml_path.exists():
            error = f"simulator exited with {exc.code} without results"
    except RuntimeError as exc:
        error = str(exc)
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    tests: list[TestOutcome] = []
    if xml_path.exists():
        tests = _read_results(xml_path, run_dir / REPORT_FILE)
    elif not error:
        error = "the simulator produced no results file"
    if error:
        log = run_dir / "sim.log"
        if log.exists():
            error += "\n" + log.read_text(errors="replace")[-3000:]
    passed = bool(tests) and not error and all(t.passed for t in tests)
    result = CosimResult(block_name, var.name, passed, tests,
                         sum(t.stimuli for t in tests), sum(t.cycles for t in tests),
                         time.perf_counter() - t0, str(bdir), str(run_dir),
                         str(waves_path) if waves_path else None, mutation, error, params)
    if passed and not keep and not waves:
        shutil.rmtree(run_dir, ignore_errors=True)
        result.run_dir = ""
    return result


def run_block(block_name: str, *, variants: list[str] | None = None,
              **kwargs: Any) -> list[CosimResult]:
    """Run every variant (or the named ones) of a block; see :func:`run_variant`."""
    block = get_block(block_name)
    names = variants or [v.name for v in block.variants]
    return [run_variant(block_name, n, **kwargs) for n in names]


# --------------------------------------------------------------------------------------------
# Test-bench side: the job a simulator run was started with
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CosimJob:
    """What a test bench needs to know about its run (read from the job file).

    ``cfg`` is the machine configuration rebuilt from the same preset and overrides as the
    Verilog parameters, so the model and the RTL share one source of truth.
    """

    block: str
    variant: str
    cfg: Any
    parameters: dict[str, int]
    seed: int
    mutation: str | None
    report: Path
    stimulus_scale: float
    clock_period_ns: int

    def rng_seed(self, test_name: str) -> int:
        """The seed of one test: the run's seed mixed with the test name (stable)."""
        return int(hashlib.sha256(f"{self.seed}:{test_name}".encode()).hexdigest()[:8], 16)

    def count(self, n: int) -> int:
        """A test's stimulus count ``n`` scaled by the run's ``stimulus_scale`` (at least 1)."""
        return max(1, int(round(n * self.stimulus_scale)))

    def record(self, test_name: str, stimuli: int, cycles: int, **extra: Any) -> None:
        """Append one test's stimulus and cycle counts to the run's report."""
        with open(self.report, "a") as fh:
            fh.write(json.dumps({"test": test_name, "stimuli": int(stimuli),
                                 "cycles": int(cycles), **extra}) + "\n")


def load_job(run_dir: Path | None = None) -> CosimJob:
    """Read the job file of the current simulator run (the test bench's working directory).

    Raises CosimError when there is none (the test bench was started outside
    :func:`run_variant`) or when the Verilog parameters no longer match the configuration.
    """
    path = Path(run_dir or Path.cwd()) / JOB_FILE
    if not path.exists():
        raise CosimError(f"{path} not found: run test benches through archsim.cosim "
                         "(archsim cosim, or pytest rtl/tests)")
    raw = json.loads(path.read_text())
    cfg = load_cosim_config(raw["config"], tuple(raw["overrides"]))
    params = verilog_parameters(raw["block"], cfg)
    if params != raw["parameters"]:
        raise CosimError(f"Verilog parameters {raw['parameters']} were built for another "
                         f"configuration than the model's {params}")
    return CosimJob(raw["block"], raw["variant"], cfg, params, int(raw["seed"]),
                    raw.get("mutation"), Path(raw["report"]), float(raw["stimulus_scale"]),
                    int(raw["clock_period_ns"]))

# --------------------------------------------------------------------------------------------
# Adapters to the simulator's own models (looked up at call time, so a mutation that
# monkeypatches the model module is seen by every caller)
# --------------------------------------------------------------------------------------------
def npu_timing_module():
    """The module of the NPU model with ``tile_latency_cycles(H, W, n_rows)``,
    ``tile_issue_interval_cycles(n_rows)`` and ``weight_preload_cycles(H)``.

    Raises CosimError when the NPU model is not built yet.
    """
    import importlib

    for name in ("archsim.npu.timing", "archsim.npu"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "tile_latency_cycles"):
            return mod
    raise CosimError("the NPU timing model (archsim.npu ... tile_latency_cycles) is missing")


def npu_tile_latency_cycles(h: int, w: int, n_rows: int) -> int:
    """Cycles of one weight-stationary tile of ``n_rows`` rows after weight preload, from the
    NPU model the simulator uses (DESIGN §3: ``H + W - 2 + max(n, 4)``)."""
    return int(npu_timing_module().tile_latency_cycles(h, w, n_rows))


def npu_min_rows(cfg) -> int:
    """The minimum rows a tile is charged for, read off the NPU model
    (``tile_issue_interval_cycles(1)``, 4 in the reference), after checking that the model's
    rules have the shape the RTL implements. Drives ``MIN_ROWS``. Raises CosimError if not."""
    h, w = cfg.npu.array_height, cfg.npu.array_width
    mod = npu_timing_module()
    m = int(mod.tile_issue_interval_cycles(1))
    fill = npu_tile_latency_cycles(h, w, 1) - m
    ok = m >= 1 and int(mod.weight_preload_cycles(h)) == h and all(
        npu_tile_latency_cycles(h, w, n) == fill + max(n, m)
        and int(mod.tile_issue_interval_cycles(n)) == max(n, m) for n in range(1, m + 3))
    if not ok or fill != h + w - 2:
        raise CosimError(f"the NPU model's tile timing is not preload H, latency "
                         f"H + W - 2 + max(n, MIN_ROWS), interval max(n, MIN_ROWS) for a "
                         f"{h}x{w} array: the systolic_array RTL cannot be parameterised to it")
    return m


def pim_operand_bits(cfg) -> int:
    """Bit width of one PIM operand in the integer datapath: 16 (the fp16 element width)."""
    return 16


def pim_fill_cycles(cfg) -> int:
    """The COMP pipeline depth the PIM timing table assumes (``FILL`` of
    :func:`archsim.memory.spec.latency_names`, ``pim.gemv_pipeline_fill``, 6 in the reference):
    the cycles from a COMP step entering ``pim_mac`` to its sum being in the accumulator."""
    from archsim.memory import spec

    return int(spec.latency_names(cfg)["FILL"])


def wrap_signed(value: int, bits: int) -> int:
    """``value`` reduced to a ``bits``-bit two's complement integer."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def pim_mac_step(acc: int, bank_burst, gbuf_burst, first: bool, acc_bits: int) -> int:
    """One COMP step of one bank in the fixed-point datapath of ``pim_mac``.

    The arithmetic is the simulator's own :func:`archsim.functional.pim_comp_step` (products,
    pairwise adder tree, accumulate) applied to int64 arrays of one bank, exact; the only
    addition here is the accumulator's width: the result is wrapped to ``acc_bits`` two's
    complement bits (``pim.acc_bits``), which commutes with every addition, so it equals the
    RTL's modulo-2^ACC_W datapath bit for bit. ``first`` starts a new dot product
    (accumulator from 0, as after READRES).
    """
    import numpy as np

    from archsim import functional

    a = np.array([0 if first else acc], dtype=np.int64)
    out = functional.pim_comp_step(a, np.array([list(bank_burst)], dtype=np.int64),
                                   np.array(list(gbuf_burst), dtype=np.int64))
    return wrap_signed(int(out[0]), acc_bits)


BANK_COMMANDS: tuple[str, ...] = ("NOP", "ACT", "RD", "WR", "PRE", "G_ACT", "COMP", "PIM_PRE")
"""Command codes of ``bank_dual_rowbuf``'s ``cmd`` port (index = code), in the names of
:mod:`archsim.memory.spec` (the RTL calls G_ACT ``PIM_ACT``)."""
BANK_RTL_NAMES: tuple[str, ...] = ("NOP", "ACT", "RD", "WR", "PRE", "PIM_ACT", "COMP",
                                   "PIM_PRE")


def bank_verilog_parameters(cfg) -> dict[str, int]:
    """Parameters of ``bank_dual_rowbuf`` for ``cfg``: the primitive timing values of
    :func:`archsim.memory.spec.latency_names`, the tFAW window (span, activation budget and
    weights) of the compiled constraint table, and the row-buffer mode.

    The RTL combines the primitive values into per-command-pair latencies itself (it is an
    independent implementation of the table's rules for one bank); the model is
    :class:`archsim.memory.bank.BankTimingModel` built from the same ``cfg``.
    """
    from archsim.memory.spec import CMD_INDEX, compile_table, latency_names

    n = latency_names(cfg)
    mode = cfg.pim.row_buffer_mode
    table = compile_table(cfg, mode)
    faw = [w for lv in table.windows.values() for w in lv if w[0] == "tFAW"]
    if len(faw) != 1:
        raise CosimError(f"the constraint table has {len(faw)} tFAW windows; bank_dual_rowbuf "
                         "implements exactly one")
    _, _, n_max, span, weights = faw[0]
    params = {"DUAL": int(mode == "dual"), "ROW_W": max(1, clog2(cfg.memory.org.rows))}
    for key, name in (("T_RCDRD", "tRCDRD"), ("T_RCDWR", "tRCDWR"), ("T_RAS", "tRAS"),
                      ("T_RC", "tRC"), ("T_RP", "tRP"), ("T_RRD_S", "tRRD_S"),
                      ("T_RRD_L", "tRRD_L"), ("T_CCD_S", "tCCD_S"), ("T_CCD_L", "tCCD_L"),
                      ("T_WTR_S", "tWTR_S"), ("T_WTR_L", "tWTR_L"), ("T_RTP_S", "tRTP_S"),
                      ("T_RTP_L", "tRTP_L"), ("T_WR", "tWR"), ("CL", "CL"), ("CWL", "CWL"),
                      ("BL", "BL")):
        params[key] = int(n[name])
    params.update({"T_FAW": int(span), "FAW_ACTS": int(n_max),
                   "ACT_WEIGHT": int(weights[CMD_INDEX["ACT"]]),
                   "GACT_WEIGHT": int(weights[CMD_INDEX["G_ACT"]])})
    longest = max(params["T_RC"], params["CWL"] + params["BL"] + params["T_WR"],
                  params["CWL"] + params["BL"] + max(params["T_WTR_S"], params["T_WTR_L"]),
                  params["CL"] + params["BL"], params["T_FAW"], params["T_RAS"])
    params["CNT_W"] = clog2(longest + 2) + 1
    return params


def bank_expected_ports(params: dict[str, int]) -> dict[str, tuple[str, int]]:
    """Ports of ``bank_dual_rowbuf`` as the test bench drives and reads them."""
    r = params["ROW_W"]
    return {"clk": ("input", 1), "rst_n": ("input", 1), "cmd": ("input", 3), "row": ("input", r),
            "can_issue": ("output", 8), "accept": ("output", 1), "mem_open": ("output", 1),
            "mem_row": ("output", r), "pim_open": ("output", 1), "pim_row": ("output", r)}


def bank_model(cfg):
    """The simulator's per-bank timing model for ``cfg`` (stand-alone: every level's rules)."""
    from archsim.memory import bank

    return bank.BankTimingModel(cfg)


ISA_FIELDS_VH = GENERATED_DIR / "isa_fields.vh"
ISA_KIND_CODES = {"u": 0, "s": 1, "enum": 2, "f32": 3}
"""Field kinds as the generated include encodes them (``isa_field_kind``)."""


def isa_engines() -> list:
    """Engines of the ISA in the order of their ``engine`` code (index)."""
    from isa.spec import Engine

    return list(Engine)


def isa_verilog_parameters() -> dict[str, int]:
    """Parameters of ``isa_decoder`` from the ISA table (:data:`isa.spec.SPEC`): word and
    opcode widths, the most fields of any instruction (output slots) and the widest field."""
    from isa import spec

    return {"WORD_BITS": spec.WORD_BITS, "OPCODE_BITS": spec.OPCODE_BITS,
            "MAX_FIELDS": max(len(s.fields) for s in spec.SPEC),
            "FIELD_W": max(f.width for s in spec.SPEC for f in s.fields),
            "SLOT_BITS": max(1, clog2(max(len(s.fields) for s in spec.SPEC) + 1)),
            "ENGINE_BITS": max(1, clog2(len(isa_engines())))}


def isa_expected_ports(params: dict[str, int]) -> dict[str, tuple[str, int]]:
    """Ports of ``isa_decoder`` as the test bench drives and reads them."""
    p = params
    return {"clk": ("input", 1), "rst_n": ("input", 1), "in_valid": ("input", 1),
            "instr": ("input", p["WORD_BITS"]), "out_valid": ("output", 1),
            "opcode": ("output", p["OPCODE_BITS"]), "legal": ("output", 1),
            "err_opcode": ("output", 1), "err_reserved": ("output", 1),
            "err_field": ("output", 1), "engine": ("output", p["ENGINE_BITS"]),
            "n_fields": ("output", p["SLOT_BITS"]),
            "fields": ("output", p["MAX_FIELDS"] * p["FIELD_W"])}


def _field_raw_range(f) -> tuple[int, int]:
    """Legal raw (unsigned, as stored) codes of one field: [lo, hi]."""
    if f.kind == "u":
        return f.min_value, f.mask
    if f.kind == "enum":
        return 0, len(f.enum) - 1
    return 0, f.mask


def generate_isa_fields_vh() -> str:
    """The text of ``rtl/generated/isa_fields.vh``: the ISA table as Verilog constants and
    ROM functions (opcode known, used bits, engine, field count, and per field slot its lsb,
    width, kind and legal raw range), generated from :data:`isa.spec.SPEC`.

    Included inside ``isa_decoder``; the decoder logic itself is generic over these functions.
    """
    from isa import spec

    p = isa_verilog_parameters()
    fw, ob, sb = p["FIELD_W"], p["OPCODE_BITS"], p["SLOT_BITS"]
    engines = isa_engines()
    out: list[str] = []
    w = out.append
    w("// isa_fields.vh -- GENERATED from isa/spec.py by archsim.cosim.generate_isa_fields_vh().")
    w("// Do not edit: regenerate with `archsim cosim --write-isa-fields`; a test checks that this")
    w("// file equals the generator's output for the current ISA table.")
    w("// Included inside module isa_decoder.")
    w(f"localparam integer ISA_WORD_BITS   = {spec.WORD_BITS};")
    w(f"localparam integer ISA_OPCODE_BITS = {ob};")
    w(f"localparam integer ISA_MAX_FIELDS  = {p['MAX_FIELDS']};")
    w(f"localparam integer ISA_FIELD_W     = {fw};")
    w(f"localparam integer ISA_N_ENGINES   = {len(engines)};")
    for k, v in ISA_KIND_CODES.items():
        w(f"localparam [1:0] ISA_KIND_{k.upper()} = 2'd{v};")
    for i, e in enumerate(engines):
        w(f"localparam integer ISA_ENGINE_{e.name} = {i};")
    for s in spec.SPEC:
        w(f"localparam [{ob - 1}:0] OP_{s.mnemonic} = {ob}'h{s.opcode:02X};")
    for s in spec.SPEC:
        for f in s.fields:
            n = f"{s.mnemonic}_{f.name.upper()}"
            w(f"localparam integer {n}_LSB = {f.lsb}, {n}_W = {f.width};")

    def rom(name: str, width: str, per_op, default: str) -> None:
        w("")
        w(f"function {width}{name};")
        w(f"    input [{ob - 1}:0] op;")
        w("    begin")
        w(f"        case (op)")
        for s in spec.SPEC:
            w(f"            OP_{s.mnemonic}: {name} = {per_op(s)};")
        w(f"            default: {name} = {default};")
        w("        endcase")
        w("    end")
        w("endfunction")

    def rom_slot(name: str, width: str, per_field, default: str) -> None:
        w("")
        w(f"function {width}{name};")
        w(f"    input [{ob - 1}:0] op;")
        w(f"    input [{sb - 1}:0] slot;")
        w("    begin")
        w(f"        {name} = {default};")
        w("        case (op)")
        for s in spec.SPEC:
            if not s.fields:
                continue
            w(f"            OP_{s.mnemonic}:")
            w("                case (slot)")
            for i, f in enumerate(s.fields):
                w(f"                    {sb}'d{i}: {name} = {per_field(s, f)};")
            w(f"                    default: {name} = {default};")
            w("                endcase")
        w(f"            default: {name} = {default};")
        w("        endcase")
        w("    end")
        w("endfunction")

    rom("isa_known", "", lambda s: "1'b1", "1'b0")
    rom("isa_used_bits", "[7:0] ", lambda s: f"8'd{s.used_bits}", "8'd0")
    rom("isa_engine", f"[{p['ENGINE_BITS'] - 1}:0] ",
        lambda s: f"ISA_ENGINE_{s.engine.name}", "0")
    rom("isa_n_fields", f"[{sb - 1}:0] ", lambda s: f"{sb}'d{len(s.fields)}", f"{sb}'d0")
    rom_slot("isa_field_lsb", "[7:0] ",
             lambda s, f: f"{s.mnemonic}_{f.name.upper()}_LSB", "8'd0")
    rom_slot("isa_field_width", "[7:0] ",
             lambda s, f: f"{s.mnemonic}_{f.name.upper()}_W", "8'd0")
    rom_slot("isa_field_kind", "[1:0] ", lambda s, f: f"ISA_KIND_{f.kind.upper()}",
             "ISA_KIND_U")
    rom_slot("isa_field_min", f"[{fw - 1}:0] ",
             lambda s, f: f"{fw}'d{_field_raw_range(f)[0]}", f"{fw}'d0")
    rom_slot("isa_field_max", f"[{fw - 1}:0] ",
             lambda s, f: f"{fw}'d{_field_raw_range(f)[1]}", f"{fw}'d0")
    return "\n".join(out) + "\n"


def write_isa_fields_vh(path: Path | None = None) -> Path:
    """Write :func:`generate_isa_fields_vh` to ``rtl/generated/isa_fields.vh`` (or ``path``)."""
    target = Path(path or ISA_FIELDS_VH)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(generate_isa_fields_vh())
    return target


def isa_model_decode(word: int):
    """The simulator's decoder (:func:`isa.encoding.decode`), looked up at call time."""
    from isa import encoding

    return encoding.decode(word)


def isa_model_encode(spec, codes) -> int:
    """The simulator's encoder applied to ``codes`` of ``spec`` (:func:`isa.encoding.encode`)."""
    from isa import encoding

    return encoding.encode(encoding.Instruction.from_codes(spec, codes))


# --------------------------------------------------------------------------------------------
# Mutations: perturb a model by one cycle or one bit; the co-simulation must then fail
# --------------------------------------------------------------------------------------------
def _mutate_npu_cycle() -> None:
    mod = npu_timing_module()
    orig = mod.tile_latency_cycles
    mod.tile_latency_cycles = lambda h, w, n, *a, **k: orig(h, w, n, *a, **k) + 1


def _mutate_npu_preload() -> None:
    mod = npu_timing_module()
    orig = mod.weight_preload_cycles
    mod.weight_preload_cycles = lambda h, *a, **k: orig(h, *a, **k) + 1


def _mutate_npu_interval() -> None:
    mod = npu_timing_module()
    orig = mod.tile_issue_interval_cycles
    mod.tile_issue_interval_cycles = lambda n, *a, **k: orig(n, *a, **k) + 1


def _mutate_systolic_bit() -> None:
    global reference_matmul
    orig = reference_matmul

    def flipped(a, b):
        out = orig(a, b)
        out[-1, -1] ^= 1
        return out

    reference_matmul = flipped


def reference_matmul(a, b):
    """The value reference of the systolic array: numpy's matmul in int64 (exact)."""
    import numpy as np

    return np.matmul(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))


def _mutate_bank_cycle() -> None:
    """ACT -> RD one cycle longer in the bank model's compiled table (tRCDRD + 1)."""
    from archsim.memory import bank, spec

    orig = bank.compile_table

    def compile_table(cfg, mode=None, rule_names=None):
        table = orig(cfg, mode, rule_names)
        act, rd = spec.CMD_INDEX["ACT"], spec.CMD_INDEX["RD"]
        lst = table.updates["bank"][act]
        for i, (q, lat) in enumerate(lst):
            if q == rd:
                lst[i] = (q, lat + 1)
        return table

    bank.compile_table = compile_table


def _mutate_bank_faw() -> None:
    """The tFAW window one cycle longer in the bank model's compiled table."""
    from archsim.memory import bank

    orig = bank.compile_table

    def compile_table(cfg, mode=None, rule_names=None):
        table = orig(cfg, mode, rule_names)
        for lv, wins in table.windows.items():
            wins[:] = [(n, c, m, span + 1 if n == "tFAW" else span, w)
                       for (n, c, m, span, w) in wins]
        return table

    bank.compile_table = compile_table


def _mutate_pim_bit() -> None:
    """Bit 0 of every adder-tree sum flipped in the functional PIM model."""
    from archsim import functional

    orig = functional.pim_adder_tree
    functional.pim_adder_tree = lambda products: orig(products) ^ 1


def _mutate_pim_cycle() -> None:
    """The PIM pipeline fill (FILL) one cycle longer in the timing table's names."""
    from archsim.memory import spec

    orig = spec.latency_names

    def latency_names(cfg):
        names = dict(orig(cfg))
        names["FILL"] += 1
        return names

    spec.latency_names = latency_names


def _mutate_isa_bit() -> None:
    """Bit 0 of the last operand of every decoded instruction flipped in isa.encoding.decode."""
    from isa import encoding

    orig = encoding.decode

    def decode(word):
        ins = orig(word)
        if not ins.codes:
            return ins
        codes = list(ins.codes)
        codes[-1] ^= 1
        return encoding.Instruction.from_codes(ins.spec, codes)

    encoding.decode = decode


MUTATIONS: dict[tuple[str, str], Callable[[], None]] = {
    ("isa_decoder", "bit"): _mutate_isa_bit,
    ("pim_mac", "bit"): _mutate_pim_bit,
    ("pim_mac", "cycle"): _mutate_pim_cycle,
    ("bank_dual_rowbuf", "cycle"): _mutate_bank_cycle,
    ("bank_dual_rowbuf", "faw"): _mutate_bank_faw,
    ("systolic_array", "cycle"): _mutate_npu_cycle,
    ("systolic_array", "bit"): _mutate_systolic_bit,
    ("systolic_array", "preload"): _mutate_npu_preload,
    ("systolic_array", "interval"): _mutate_npu_interval,
}
"""(block, mutation) -> a function that perturbs the model in the running process."""


def apply_mutation(job: "CosimJob") -> None:
    """Apply the job's mutation (if any) to the models in this process (test-bench side)."""
    if job.mutation is None:
        return
    try:
        MUTATIONS[(job.block, job.mutation)]()
    except KeyError:
        raise CosimError(f"no mutation '{job.mutation}' for block '{job.block}'") from None


# --------------------------------------------------------------------------------------------
# pytest helpers (used by rtl/tests/test_cosim_*.py)
# --------------------------------------------------------------------------------------------
def require_icarus_or_skip() -> None:
    """Skip the calling pytest test when Icarus is not installed (with the install hint)."""
    import pytest

    try:
        _check_icarus()
    except CosimError as exc:
        pytest.skip(str(exc))


def assert_cosim_passes(block_name: str, variant: str, **kwargs: Any) -> CosimResult:
    """Run one variant and fail the calling test with every mismatch message if it fails."""
    require_icarus_or_skip()
    result = run_variant(block_name, variant, **kwargs)
    assert result.passed, result.failure_summary()
    assert result.stimuli > 0 and result.cycles > 0, f"{block_name}[{variant}] ran no stimulus"
    return result


def assert_mutation_detected(block_name: str, variant: str, mutation: str,
                             **kwargs: Any) -> CosimResult:
    """Run one variant with the model perturbed by ``mutation``; the co-simulation must fail
    on a comparison (an assertion naming a cycle), not on an error of the harness."""
    require_icarus_or_skip()
    kwargs.setdefault("stimulus_scale", 0.25)   # a one-cycle/one-bit change shows at once
    result = run_variant(block_name, variant, mutation=mutation, **kwargs)
    assert not result.passed, (f"{block_name}[{variant}]: the co-simulation still passes with "
                               f"the model perturbed by '{mutation}': it cannot see that change")
    assert not result.error, f"the mutated run failed for another reason: {result.error}"
    failed = [t for t in result.tests if not t.passed]
    assert failed and all("cycle" in t.message for t in failed), (
        "mutated run failed without a cycle-level comparison message:\n"
        + result.failure_summary())
    if result.run_dir:
        shutil.rmtree(result.run_dir, ignore_errors=True)
    return result


__all__ = ["BLOCKS", "Block", "Variant", "CosimError", "CosimResult", "TestOutcome",
           "CosimJob", "verilog_parameters", "expected_ports", "check_interface",
           "parse_module_interface", "build", "run_variant", "run_block", "load_job",
           "get_block", "get_variant", "build_key", "clog2", "DEFAULT_BUILD_ROOT", "RTL_DIR",
           "assert_cosim_passes", "assert_mutation_detected", "MUTATIONS", "apply_mutation"]
