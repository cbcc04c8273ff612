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

Which decorator, and the cold JIT's cost. ``njit_inline`` (numba's ``inline="always"``)
inlines at the level of numba's own IR: at every call site numba runs the callee's untyped
pipeline again (inlining the callee's own ``inline="always"`` callees inside it) and copies
its IR, so a tree of nested inlined helpers costs the one-time JIT in proportion to its
transitive call sites. Only the large hot bodies that LLVM would not inline on its own use it
(the scheduler's ``_decide`` and its candidates, ``_issue``, the NPU loop's issue stages); the
small leaf helpers (``_key``, ``_earliest``, the policy functions, the NPU unit helpers ...)
are plain ``njit`` functions, which LLVM inlines when numba links their code into the caller's
module and optimises it. Making the NPU unit stages plain functions too saves 5 s of JIT and
costs the layer's loop 18 % (their shared helpers alone: 3 s and 6 %), so they stay inlined.

numba compiles a plain ``njit`` function once per combination of *literal* arguments at its
call sites (``_earliest(S, c, 0, ACT)`` and ``_earliest(S, c, node, q)`` are two versions):
the hot helpers keep those versions (the loop is 5-11 % slower without them all,
docs/results.md); the timing helpers ``_record``, ``_earliest`` and those of refresh, PIM and
the command log, and the NPU's ``_block`` (``njit_plain``) are compiled once for their
arguments' plain types, at the loop's speed. With numba's inliner copying a callee's IR in
one piece (:func:`_share_scope_copy_when_inlining`) and ``_next_event`` sharing
``_advance_all``'s body (:func:`archsim.memory.kernel.drive._drive`: one inlined ``_decide``),
a cold ``archsim run --model tiny-gpt`` compiled in about 50 s instead of 115 s (the layer's
loop alone: 43 s instead of 70 s) with the same loop speed (paired runs on the 2-core
machine, docs/results.md). Skipping numba's unused block-entry liveness in the kernels'
compilations (:func:`_entry_liveness_when_needed`) takes it from 30-31 s to 26-27 s on the
faster 2-core machine of 2026-12-05, with the loop's machine code byte for byte the same.

Without numba, or with its JIT disabled (``NUMBA_DISABLE_JIT=1``), the decorators return the
plain Python functions (same results, slow).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from archsim.workers import in_fork_server

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

    if numba.config.DISABLE_JIT:    # NUMBA_DISABLE_JIT=1 (debugging): numba's decorators
        raise ImportError("numba's JIT is disabled")  # return plain functions: as without it
    from numba.core import config as _nbconfig

    HAVE_NUMBA = True

    from numba.core.types import unliteral as _unliteral

    def _no_literal_specialisation(disp):
        """Make kernel-to-kernel calls of dispatcher ``disp`` compile it for the arguments'
        plain types only. numba's own dispatcher compiles one specialisation per combination
        of literal arguments at the call sites (``_earliest(S, c, 0, ACT)`` and
        ``_earliest(S, c, node, q)`` were two of ten), each a full compilation. Used by
        ``njit_plain`` (module docstring: the hot helpers keep their literal versions)."""
        typed = disp.get_call_template

        def get_call_template(args, kws):
            return typed(tuple(_unliteral(a) for a in args),
                         {k: _unliteral(v) for k, v in kws.items()})

        disp.get_call_template = get_call_template
        return disp

    def _share_scope_copy_when_inlining() -> bool:
        """Make numba's ``inline="always"`` copy a callee's IR in one piece instead of block by
        block. ``InlineWorker.inline_ir`` deep-copies the callee twice per call site, each block
        with a fresh memo, so every block drags its own copy of the function's whole ``Scope``
        (every variable): blocks x variables, 3.5 M ``ir.Var`` copies, half of a cold ``archsim
        run --model tiny-gpt`` under cProfile (which inflates it: about 5 s of wall). Sharing
        one memo between the blocks of one IR (keyed by their common scope) for the length of
        one ``inline_ir`` call makes the copy exactly that of the whole IR at once — the
        blocks then share one copied scope, as the original blocks share theirs; numba renames
        the callee's variables by name, so the inlined code is the same. Applied only when
        numba's source is the one this was written against (the line below); returns whether
        it was."""
        import copy as _copy
        import inspect

        from numba.core import inline_closurecall as _icc, ir as _nbir
        worker = _icc.InlineWorker
        try:
            src = inspect.getsource(worker.inline_ir)
        except (OSError, TypeError):  # pragma: no cover - no source shipped
            return False
        if "copy.deepcopy(the_ir.blocks[block_label])" not in src or _icc.copy is not _copy:
            return False
        memos = None

        class _SharedScopeCopy:
            """``copy`` for numba's inliner: :func:`copy.deepcopy` of an ``ir.Block`` within
            one ``inline_ir`` call uses the memo of its scope."""

            def __getattr__(self, name):
                return getattr(_copy, name)

            @staticmethod
            def deepcopy(x, memo=None):
                if memo is None and memos is not None and isinstance(x, _nbir.Block):
                    memo = memos.setdefault(id(x.scope), {})
                return _copy.deepcopy(x, memo)

        inline_ir = worker.inline_ir

        def shared_inline_ir(self, *args, **kwargs):
            nonlocal memos
            outer, memos = memos, {}
            try:
                return inline_ir(self, *args, **kwargs)
            finally:
                memos = outer

        shared_inline_ir.__doc__ = inline_ir.__doc__
        _icc.copy = _SharedScopeCopy()
        worker.inline_ir = shared_inline_ir
        return True

    INLINE_COPY_SHARED = None
    """Whether numba's inliner copies in one piece (:func:`_share_scope_copy_when_inlining`):
    None until numba first inlines (the patch imports numba's inliner, ~0.1 s a process, only
    when something is compiled), then True, or False for a numba whose inliner differs."""

    def _patch_inliner_on_first_use() -> None:
        from numba.core import untyped_passes as _up
        run_pass = _up.InlineInlinables.run_pass

        def first_use(self, state):
            global INLINE_COPY_SHARED
            if INLINE_COPY_SHARED is None:
                INLINE_COPY_SHARED = _share_scope_copy_when_inlining()
            return run_pass(self, state)

        first_use.__doc__ = run_pass.__doc__
        _up.InlineInlinables.run_pass = first_use

    _patch_inliner_on_first_use()

    _COMPILING = 0
    """How many compilations of the kernels' own dispatchers are under way in this process (they
    nest: a kernel's callees compile while it is typed). :func:`_entry_liveness_when_needed`
    acts only while it is positive."""

    def _entry_liveness_when_needed() -> bool:
        """Make numba's ``PostProcessor.run`` skip the block-entry liveness of a non-generator
        function while the kernels compile. numba runs the post-processor after every pass that
        changes the IR (681 times for the loop) and each run solves two data-flow fix points
        over all blocks and variables (``analysis.compute_live_map``, then the dead maps and the
        entry sets): 5.3 s of a 31 s cold JIT on the loop's inlined body, whose only
        consumers are a generator's state (``_compute_generator_info``) and object-mode lowering
        (``pylowering``), neither of which a kernel uses (``njit``: nopython, no ``yield``). The
        passes that do read liveness (``func_ir.variable_lifetime``: the ``del`` insertion, loop
        lifting, literal unrolling) still compute it, lazily, from the same blocks. Outside
        the kernels' compilations (``_COMPILING`` zero) numba's own ``run`` runs unchanged.
        The same change went into NVIDIA's numba-cuda-mlir (pull request 200). Applied only
        when numba's ``run`` is the one this was written against; returns whether it was."""
        import inspect

        from numba.core import postproc as _pp, transforms as _tf
        pp = _pp.PostProcessor
        try:
            src = inspect.getsource(pp.run)
        except (OSError, TypeError):  # pragma: no cover - no source shipped
            return False
        if ("analysis.compute_live_variables" not in src or "_compute_generator_info" not in src
                or not hasattr(_pp, "VariableLifetime")):
            return False
        run = pp.run

        def run_entry_liveness_when_needed(self, emit_dels=False, extend_lifetimes=False):
            fir = self.func_ir
            if _COMPILING <= 0 or fir.is_generator:
                return run(self, emit_dels, extend_lifetimes)
            fir.blocks = _tf.canonicalize_cfg(fir.blocks)
            fir.variable_lifetime = _pp.VariableLifetime(fir.blocks)
            fir.generator_info = None
            if emit_dels:
                self._insert_var_dels(extend_lifetimes=extend_lifetimes)

        run_entry_liveness_when_needed.__doc__ = run.__doc__
        pp.run = run_entry_liveness_when_needed
        return True

    ENTRY_LIVENESS_SKIPPED = _entry_liveness_when_needed()
    """Whether the kernels' compilations skip numba's unused block-entry liveness
    (:func:`_entry_liveness_when_needed`): False for a numba whose post-processor differs."""

    def _kernel_llvm_pipeline() -> bool:
        """Optimise the kernels' LLVM modules without loop vectorization and loop unrolling:
        llvmlite's ``create_pass_builder`` (which numba calls with its pipeline tuning options
        each time it optimises a module) gets them switched off while ``_COMPILING`` is
        positive; numba's own options otherwise. The kernels' loops are short walks over
        banks, channels and queues with early exits and data-dependent trip counts, where
        vectorized or unrolled copies only add code to the hot path: the GPT3-7B clb-0 layer's
        event loop 1.88 -> 1.775 s without the vectorizer (5 paired runs), 1.77 -> 1.72 s
        more without unrolling (7 pairs), the same cycles; the cold JIT 2 s shorter
        (docs/results.md). Returns whether llvmlite's options have the two fields."""
        from llvmlite import binding as _llvm
        try:
            pto = _llvm.create_pipeline_tuning_options()
            pto.loop_vectorization, pto.loop_unrolling = False, False
        except (AttributeError, TypeError):  # pragma: no cover - another llvmlite
            return False
        create = _llvm.create_pass_builder

        def create_pass_builder(tm, pto, *args, **kwargs):
            if _COMPILING > 0:
                pto.loop_vectorization = False
                pto.loop_unrolling = False
            return create(tm, pto, *args, **kwargs)

        create_pass_builder.__doc__ = create.__doc__
        _llvm.create_pass_builder = create_pass_builder
        return True

    KERNEL_LLVM_PIPELINE = _kernel_llvm_pipeline()
    """Whether the kernels are optimised without loop vectorization and unrolling
    (:func:`_kernel_llvm_pipeline`)."""

    def _registries_without_blas() -> bool:
        """Make numba's first target set-up (``CPUContext.load_additional_registries``, run once
        per process before the first kernel loads) import its array-math registry without
        scipy's BLAS bindings: ``numba.np.arraymath`` checks at import whether
        ``scipy.linalg.cython_blas`` imports (for ``np.dot`` and friends, which no kernel
        uses), and that import, all of ``scipy.linalg``, was 0.13-0.15 s of every process's
        first kernel call (a fresh ``bench_system.py --what layer``: 0.32 s of numba set-up,
        each of ``archsim compare``'s workers too). While the registries load, the module
        resolves to nothing (``sys.modules`` entry ``None``: the check sees an ImportError);
        the entry is removed afterwards, so scipy imports normally later (the serving
        surrogate's scikit-learn). When scipy's BLAS is already imported nothing changes.
        Returns whether numba's method was found."""
        import sys

        from numba.core import cpu as _cpu
        load = getattr(_cpu.CPUContext, "load_additional_registries", None)
        if load is None:  # pragma: no cover - another numba
            return False
        name = "scipy.linalg.cython_blas"

        def load_additional_registries(self):
            if name in sys.modules:
                return load(self)
            sys.modules[name] = None    # type: ignore[assignment]
            try:
                return load(self)
            finally:
                if sys.modules.get(name, 0) is None:
                    del sys.modules[name]

        load_additional_registries.__doc__ = load.__doc__
        _cpu.CPUContext.load_additional_registries = load_additional_registries
        return True

    REGISTRIES_WITHOUT_BLAS = _registries_without_blas()
    """Whether numba's target set-up skips scipy's BLAS bindings
    (:func:`_registries_without_blas`)."""

    def _no_wraparound_in_kernels() -> bool:
        """Compile the kernels' array accesses without numba's negative-index fix-up. numba
        lowers every access ``a[i, j, k]`` with a signed index as ``i < 0 ? i + size : i`` per
        axis (``numba.np.arrayobj.fix_integer_index``: Python's ``a[-1]``), a compare and a
        select on every axis of every load and store; the kernels index only with
        non-negative values (their sentinels, -1 for "none", are tested before use). While
        the kernels compile (``_COMPILING`` positive) a signed index is used as it is; other
        numba code in the process keeps the fix-up. The GPT3-7B clb-0 layer's event loop
        1.44 -> 1.34 s (4 pairs), the same cycles. Checked: the identity tests and GPT3-7B
        runs on neupims, npu-pim, npu and neupims-hbm3 with ``NUMBA_BOUNDSCHECK=1`` (numba's
        bounds check raises on a negative index once the fix-up is gone) pass; run them so
        after a kernel change that could index with a negative value. Returns whether
        numba's function was found."""
        from numba.core import types as _t
        from numba.np import arrayobj as _ao
        fix = getattr(_ao, "fix_integer_index", None)
        if fix is None:  # pragma: no cover - another numba
            return False

        def fix_integer_index(context, builder, idxty, idx, size):
            if _COMPILING > 0 and idxty.signed:
                return context.cast(builder, idx, idxty, _t.intp)
            return fix(context, builder, idxty, idx, size)

        fix_integer_index.__doc__ = fix.__doc__
        _ao.fix_integer_index = fix_integer_index
        return True

    NO_WRAPAROUND = _no_wraparound_in_kernels()
    """Whether the kernels' indices skip numba's negative-index fix-up
    (:func:`_no_wraparound_in_kernels`)."""

    def _count_compilations(disp):
        """Make ``disp.compile`` (every path numba takes to compile or load a kernel: its
        first call, a kernel calling it, an explicit ``compile``) count in ``_COMPILING``."""
        compile_ = disp.compile

        def compile(sig):
            global _COMPILING
            _COMPILING += 1
            try:
                return compile_(sig)
            finally:
                _COMPILING -= 1

        compile.__doc__ = compile_.__doc__
        disp.compile = compile
        return disp

    def _decorate(plain=False, **opts):
        def deco(f):
            # numba reads config.CACHE_DIR when the dispatcher enables caching (at decoration):
            # point it at our keyed directory for these functions only
            old = _nbconfig.CACHE_DIR
            _nbconfig.CACHE_DIR = str(CACHE_DIR)
            try:
                disp = numba.njit(cache=True, nogil=True, _nrt=False, **opts)(f)
            finally:
                _nbconfig.CACHE_DIR = old
            disp = _count_compilations(disp)
            return _no_literal_specialisation(disp) if plain else disp
        return deco

    # no reference counting (_nrt=False): the kernels never allocate, and with it the inlined
    # helpers paid an atomic incref/decref per array argument per call (measured: half of the
    # memory kernel's time on the GPT3-7B layer)
    njit = _decorate()
    njit_inline = _decorate(inline="always")   # large hot bodies only (module docstring)
    njit_plain = _decorate(plain=True)         # off the hot path: one version (module docstring)

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
    INLINE_COPY_SHARED = ENTRY_LIVENESS_SKIPPED = KERNEL_LLVM_PIPELINE = False
    REGISTRIES_WITHOUT_BLAS = NO_WRAPAROUND = False

    def njit(f):
        """No numba: the function itself."""
        return f

    njit_inline = njit_plain = njit

    def ctz(x):
        """Index of the lowest set bit of ``x`` (x != 0)."""
        x = int(x)                  # numpy integers have no bit_length
        return (x & -x).bit_length() - 1


def warm_target() -> None:
    """Set numba's CPU target up now (its typing and lowering registries and runtime, what
    the first kernel's load would do: 0.13 s) rather than at the first kernel call. A fork
    server that preloads the kernels (:func:`archsim.workers.process_pool` with
    ``archsim.npu.compiled`` in its preload list) does it once, below, so that the workers
    forked from it start with numba imported and set up (0.27 s each, both together).
    Nothing without numba."""
    if HAVE_NUMBA:
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()       # refreshes its typing context too


def is_cached(module: str, function: str) -> bool:
    """True when numba's cache (:data:`CACHE_DIR`) holds compiled code of ``function`` of
    ``module`` (its last dotted component, e.g. ``cloop``, ``_loop``)."""
    return CACHE_DIR.is_dir() and any(CACHE_DIR.rglob(f"{module}.{function}-*.nbi"))


if in_fork_server():
    warm_target()

__all__ = ["njit", "njit_inline", "njit_plain", "ctz", "HAVE_NUMBA", "CACHE_DIR", "KERNEL_SOURCES",
           "source_hash", "cache_dir", "is_cached", "warm_target"]
