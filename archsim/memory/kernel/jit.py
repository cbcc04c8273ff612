"""numba decorators for the compiled kernels, with a cache that can never go stale.

numba's on-disk cache (``cache=True``) keys each compiled function by the source file it is
defined in, and by nothing else: a kernel that calls functions of another module, or reads a
module-level constant of another module (the command codes of
:data:`archsim.memory.spec.COMMANDS`), keeps loading its old machine code after that other
file changes (numba issue #6845). The kernels of :mod:`archsim.memory.kernel` and
:mod:`archsim.npu.cloop` span several files, so their cache directory is named after a hash
of *every* file they are built from (:data:`KERNEL_SOURCES`): any edit of any of them —
a reordered command table included — selects a fresh directory and numba compiles again.

The directory is ``archsim/memory/kernel/__pycache__/numba-<hash>`` when the package directory
is writable (a checkout), else ``$XDG_CACHE_HOME/archsim/numba-<hash>`` (an installed wheel);
``ARCHSIM_KERNEL_CACHE`` overrides the base directory. Older ``numba-*`` directories of the
in-tree base are removed when a new one is made.

Which decorator (the cold JIT's cost). ``njit_inline`` (numba's ``inline="always"``) inlines
at the level of numba's own IR: at every call site numba runs the callee's untyped pipeline
again (inlining the callee's own ``inline="always"`` callees inside it) and deep-copies its IR
block by block (numba issues #8989, #9204), so a tree of nested inlined helpers costs the
one-time JIT in proportion to its transitive call sites. Only the large hot bodies that LLVM
would not inline on its own use it (the scheduler's ``_decide``, ``_issue``, the NPU loop's
issue stages); the small leaf helpers (``_key``, ``_earliest``, the policy functions, the NPU
unit helpers ...) are plain ``njit`` functions, which LLVM inlines when numba links their code
into the caller's module and optimises it (same loop speed, measured). Measured on the GPT3-7B
clb-0 layer and a cold ``archsim run --model tiny-gpt`` on one idle core: everything
``inline="always"`` 268 s of JIT, leaves as calls 125 s, and ``drive._next_event`` calling
``_decide`` instead of inlining it 98 s; the layer's event loop 3.6 s in all three. Leaving the
scheduler's ``_admit`` / ``_bank_candidate`` / ``_pim_candidate`` to LLVM as well (89 s) made
the layer about 7 % slower: LLVM does not inline them.

Without numba the decorators return the plain Python functions (same results, slow).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

_PKG = Path(__file__).resolve().parent
_ARCHSIM = _PKG.parents[1]

KERNEL_SOURCES: tuple[Path, ...] = (
    *sorted(_PKG.glob("*.py")),
    _ARCHSIM / "memory" / "spec.py",
    _ARCHSIM / "memory" / "policy.py",
    _ARCHSIM / "npu" / "cloop.py",
    _ARCHSIM / "npu" / "cunits.py",
    _ARCHSIM / "npu" / "cstate.py",
)
"""Every file whose content the compiled kernels depend on (code or constants)."""


def source_hash(paths=KERNEL_SOURCES) -> str:
    """SHA-256 (first 16 hex digits) over the names and bytes of ``paths`` (missing files count
    as empty): the cache key of the kernels."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        try:
            h.update(p.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:16]


def cache_dir(key: str | None = None) -> Path:
    """The directory the kernels' machine code is cached in (see the module docstring)."""
    key = key or source_hash()
    base = os.environ.get("ARCHSIM_KERNEL_CACHE")
    if base:
        return Path(base) / f"numba-{key}"
    intree = _PKG / "__pycache__"
    try:
        intree.mkdir(exist_ok=True)
        if os.access(intree, os.W_OK):
            d = intree / f"numba-{key}"
            if not d.exists():
                for old in intree.glob("numba-*"):
                    shutil.rmtree(old, ignore_errors=True)
            return d
    except OSError:
        pass
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(xdg) / "archsim" / f"numba-{key}"


CACHE_DIR = cache_dir()

try:  # pragma: no cover - exercised implicitly
    import numba
    from numba.core import config as _nbconfig

    HAVE_NUMBA = True

    def _decorate(**opts):
        def deco(f):
            # numba reads config.CACHE_DIR when the dispatcher enables caching (at decoration):
            # point it at our keyed directory for these functions only
            old = _nbconfig.CACHE_DIR
            _nbconfig.CACHE_DIR = str(CACHE_DIR)
            try:
                return numba.njit(cache=True, nogil=True, _nrt=False, **opts)(f)
            finally:
                _nbconfig.CACHE_DIR = old
        return deco

    # no reference counting (_nrt=False): the kernels never allocate, and with it the inlined
    # helpers paid an atomic incref/decref per array argument per call (measured: half of the
    # memory kernel's time on the GPT3-7B layer)
    njit = _decorate()
    njit_inline = _decorate(inline="always")   # large hot bodies only (module docstring)

    from llvmlite import ir as _llir
    from numba.core import cgutils as _cgutils, types as _nbtypes
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def ctz(typingctx, x):
        """Index of the lowest set bit of int64 ``x`` (x != 0): LLVM's cttz."""
        def codegen(context, builder, signature, args):
            i64 = _llir.IntType(64)
            fn = _cgutils.get_or_insert_function(
                builder.module, _llir.FunctionType(i64, [i64, _llir.IntType(1)]),
                "llvm.cttz.i64")
            return builder.call(fn, [args[0], _llir.Constant(_llir.IntType(1), 1)])
        return _nbtypes.int64(_nbtypes.int64), codegen
except Exception:  # pragma: no cover - numba absent: plain Python (same results, slow)
    HAVE_NUMBA = False

    def njit(f):
        """No numba: the function itself."""
        return f

    njit_inline = njit

    def ctz(x):
        """Index of the lowest set bit of ``x`` (x != 0)."""
        return (x & -x).bit_length() - 1


def is_cached(module: str, function: str) -> bool:
    """True when numba's cache (:data:`CACHE_DIR`) holds compiled code of ``function`` of
    ``module`` (its last dotted component, e.g. ``cloop``, ``_loop``)."""
    return CACHE_DIR.is_dir() and any(CACHE_DIR.rglob(f"{module}.{function}-*.nbi"))


__all__ = ["njit", "njit_inline", "ctz", "HAVE_NUMBA", "CACHE_DIR", "KERNEL_SOURCES",
           "source_hash", "cache_dir", "is_cached"]
