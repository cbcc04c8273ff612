"""How the kernels' one-time JIT is kept short (archsim.memory.kernel.jit).

Both measures change how numba compiles, never what the kernels compute: the identity tests of
the compiled loop (test_compiled_executor, test_system_fastmem, ...) pin the results; these pin
that each measure is in force and keeps numba's own results, so that a numba upgrade that
changes the inliner patched here is noticed, not felt as a slower JIT.
"""
from __future__ import annotations

import pytest

from archsim.memory.kernel import jit

numba = pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(not jit.HAVE_NUMBA, reason="numba is not installed")


def test_a_kernel_called_with_literal_arguments_compiles_once():
    def add(a, b):
        return a + 2 * b

    leaf = jit._no_literal_specialisation(numba.njit(add))

    @numba.njit
    def caller(x):
        return leaf(x, 0) + leaf(x, 1) + leaf(0, x) + leaf(x, x)

    assert caller(3) == 3 + 5 + 6 + 9
    # the plain numba dispatcher compiles four specialisations here (two literal arguments)
    assert [tuple(str(t) for t in s) for s in leaf.signatures] == [("int64", "int64")]


def test_the_inliner_copies_a_callee_in_one_piece_and_inlines_the_same_code():
    one = numba.njit(inline="always")(lambda x: x + 1)

    @numba.njit
    def first(x):
        return one(x)

    assert first(1) == 2                          # numba's first inlining applies the patch
    assert jit.INLINE_COPY_SHARED, (
        "numba's InlineWorker.inline_ir no longer has the per-block copy that "
        "archsim.memory.kernel.jit._share_scope_copy_when_inlining replaces: check the new "
        "numba's inliner (the kernels' cold JIT is longer without it)")

    def branchy(x, n):
        s = 0
        for i in range(n):
            if (x + i) % 3 == 0:
                s += i
            elif (x + i) % 3 == 1:
                s -= 2 * i
            else:
                s ^= i
        return s

    inner = numba.njit(inline="always")(branchy)

    @numba.njit
    def outer(x):
        return inner(x, 10) + inner(x + 1, 7) * 3

    for x in range(5):
        assert outer(x) == branchy(x, 10) + branchy(x + 1, 7) * 3


def test_the_kernels_llvm_pipeline_is_in_force_only_while_a_kernel_compiles(monkeypatch):
    assert jit.KERNEL_LLVM_PIPELINE, (
        "llvmlite's pipeline tuning options no longer have loop_vectorization and "
        "loop_unrolling: check archsim.memory.kernel.jit._kernel_llvm_pipeline (the event "
        "loop is ~8 % slower with them on)")
    from llvmlite import binding as llvm

    seen = []
    monkeypatch.setattr(jit, "_COMPILING", 0)
    pto = llvm.create_pipeline_tuning_options()
    pto.loop_vectorization = pto.loop_unrolling = True
    seen.append((pto.loop_vectorization, pto.loop_unrolling))
    llvm.create_pass_builder(llvm.Target.from_default_triple().create_target_machine(), pto)
    seen.append((pto.loop_vectorization, pto.loop_unrolling))       # numba's own: untouched
    monkeypatch.setattr(jit, "_COMPILING", 1)
    llvm.create_pass_builder(llvm.Target.from_default_triple().create_target_machine(), pto)
    seen.append((pto.loop_vectorization, pto.loop_unrolling))       # a kernel: both off
    assert seen == [(True, True), (True, True), (False, False)]


def _branchy(x, n):
    s = 0
    for i in range(n):
        if (x + i) % 3 == 0:
            s += i
        else:
            s -= 2 * i
    return s


def test_kernel_compilations_skip_the_unused_block_entry_liveness(monkeypatch):
    assert jit.ENTRY_LIVENESS_SKIPPED, (
        "numba's PostProcessor.run no longer looks like the one "
        "archsim.memory.kernel.jit._entry_liveness_when_needed patches: check the new numba "
        "(the kernels' cold JIT is longer without it)")
    from numba.core import analysis

    calls = []
    real = analysis.compute_live_variables
    monkeypatch.setattr(analysis, "compute_live_variables",
                        lambda *a, **k: calls.append(1) or real(*a, **k))

    plain = numba.njit(_branchy)                # not a kernel: numba's own post-processor
    assert plain(3, 10) == _branchy(3, 10)
    assert calls
    calls.clear()
    kernel = jit._count_compilations(numba.njit(_branchy))
    assert kernel(3, 10) == _branchy(3, 10)
    assert not calls and jit._COMPILING == 0


def test_with_numbas_jit_disabled_the_kernels_run_as_python_with_the_same_results():
    """NUMBA_DISABLE_JIT=1 (how numba code is debugged) makes numba's decorators return plain
    functions: the kernels then run as the Python they are written in, with the same output."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "archsim", "run", "--model", "tiny-gpt", "--batch", "2"]

    def run(**env):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                             env={**os.environ, **env})
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    assert run(NUMBA_DISABLE_JIT="1") == run()


_SETUP_PROBE = r"""
import sys
from archsim.workers import process_pool


def probe():
    import sys
    seen = ("numba.np.arraymath" in sys.modules, "scipy.linalg.cython_blas" in sys.modules)
    import numba.np.arraymath as am
    import scipy.linalg.cython_blas  # noqa: F401  (imports normally afterwards)
    return seen + (am._HAVE_BLAS,)


if __name__ == "__main__":
    pool = process_pool(1, sys.argv[1:])
    print(pool.submit(probe).result())
    pool.shutdown()
"""


@pytest.mark.parametrize("preload, expected", [
    ([], (False, False)),                           # a worker sets numba up itself
    (["archsim.npu.compiled"], (True, False)),      # its fork server did, without scipy's BLAS
])
def test_a_fork_server_that_preloads_the_kernels_sets_numba_up_without_blas(
        tmp_path, preload, expected):
    import subprocess
    import sys

    pytest.importorskip("scipy")
    script = tmp_path / "probe.py"
    script.write_text(_SETUP_PROBE)
    out = subprocess.run([sys.executable, str(script), *preload], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    loaded, blas, have_blas = eval(out.stdout.strip().splitlines()[-1])
    assert (loaded, blas) == expected
    # numba's BLAS check saw no scipy bindings only where the fork server set numba up
    assert have_blas is (not preload)


def test_the_kernels_index_without_the_negative_index_fix_up_and_other_code_with_it():
    import numpy as np

    def read(a, i):
        return a[i]

    base = np.arange(10, dtype=np.int64)
    view = base[5:]                         # a[-1] without the fix-up reads base[4]
    assert jit.NO_WRAPAROUND
    kernel = jit._count_compilations(numba.njit(read))     # compiled as a kernel
    assert kernel(view, -1) == 4
    assert numba.njit(read)(view, -1) == 9                  # numba's own: Python's a[-1]
