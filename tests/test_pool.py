"""Big 2-D kernels as parts on OpenBLAS's threads (codegen/pool.py).

A big single-pass 2-D kernel that would run on one core is split by rows (or by columns when
it sums over rows) and handed to OpenBLAS's pool. Each part computes its rows or columns as
the serial loop does, so the results are bit-identical to the same kernel run serially, which
is what the launcher falls back to with one BLAS thread or a non-contiguous array.
"""

import ctypes

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen import blas, pool, pool_bind

pytestmark = [pytest.mark.skipif(not pool.AVAILABLE, reason=f"no BLAS pool: {pool.DESCRIPTION}"),
              pytest.mark.usefixtures("numba_codegen")]    # Numba's code generator
rng = np.random.default_rng(7)


@pytest.fixture(autouse=True, scope="module")
def numba_renderer():
    """This file splits the Numba renderer's kernels; float32 programs go to the kernel IR by
    default (tests/test_kernel_ir.py), so it is switched off here (module-wide: the compiled
    fixture outlives a test)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("fusegrad.codegen.choose.KERNEL_IR", False)
        yield


def layer(x, b):                       # tanh of a row-broadcast sum: independent rows
    return np.tanh(x + b)


def dtanh(h, dh):                      # an elementwise product and its column sums
    dz = dh * (1.0 - h * h)
    return dz, np.sum(dz, axis=0)


def row_sums(x):                       # sums over each row: still independent rows
    t = np.tanh(x)
    return t, np.sum(t, axis=1)


def scaled(x, b):                      # a size as a float constant: a C symbol in the task
    return np.tanh(x + b) / x.shape[1]


CASES = {"layer": (layer, "rows"), "dtanh": (dtanh, "cols"), "row_sums": (row_sums, "rows"),
         "scaled": (scaled, "rows")}


def args_of(name, dtype, shape=(256, 512)):  # big enough to split in float32 as well
    x = rng.standard_normal(shape).astype(dtype)
    if name in ("layer", "scaled"):
        return x, rng.standard_normal(shape[1]).astype(dtype)
    if name == "dtanh":
        return np.tanh(x), rng.standard_normal(shape).astype(dtype)
    return (x,)


def serial_twin(fun):
    """The same function compiled with the pool off: its kernels run on the calling thread."""
    def twin(*args):
        return fun(*args)
    twin.__name__ = f"{fun.__name__}_serial"
    return twin


@pytest.fixture(scope="module")
def compiled():
    """name -> (jit with the pool, jit without): each compiled once for the module."""
    out = {}
    for name, (fun, _) in CASES.items():
        out[name] = [fg.jit(fun)]
    saved, pool.AVAILABLE = pool.AVAILABLE, False
    try:
        for name, (fun, _) in CASES.items():
            twin = fg.jit(serial_twin(fun))
            for dtype in (np.float32, np.float64):
                twin.lower(*args_of(name, dtype))     # compile now, while the pool is off
            out[name].append(twin)
    finally:
        pool.AVAILABLE = saved
    return out


def as_list(result):
    return [np.asarray(r) for r in (result if isinstance(result, tuple) else (result,))]


def assert_same_bits(got, want):
    for g, w in zip(as_list(got), as_list(want), strict=True):
        assert g.dtype == w.dtype and np.array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(CASES))
def test_split_kernels_give_the_serial_bits(compiled, name, dtype):
    with_pool, serial = compiled[name]
    args = args_of(name, dtype)
    src = with_pool.lower(*args).source
    assert f"{'range(lo, hi)' if CASES[name][1] == 'rows' else 'numba.uint64(lo)'}" in src
    assert "_task(m, n, k, alpha, a, lda, b, ldb, c, ldc, sb)" in src and "TASKS" in src
    assert "pool_run(" not in serial.lower(*args).source
    assert ("f = t.view(np.float64)" in src) == (name == "scaled")
    got = with_pool(*args)
    assert_same_bits(got, serial(*args))
    want = CASES[name][0](*[a.astype(np.float64) for a in args])
    for g, w in zip(as_list(got), as_list(want)):
        np.testing.assert_allclose(g, w, rtol=2e-5 if dtype == np.float32 else 1e-12,
                                   atol=1e-5 if dtype == np.float32 else 1e-12)


def test_non_contiguous_arrays_run_serially(compiled):
    with_pool, serial = compiled["layer"]
    x = rng.standard_normal((256, 1024))[:, ::2]         # strided: carray cannot rebuild it
    b = rng.standard_normal(512)
    assert_same_bits(with_pool(x, b), serial(np.ascontiguousarray(x), b))
    np.testing.assert_allclose(with_pool(x, b), np.tanh(x + b), rtol=1e-12, atol=1e-12)


def test_one_blas_thread_runs_serially(compiled):
    """The launcher asks OpenBLAS for its thread count at every call (threadpoolctl and
    openblas_set_num_threads change it): with one, the kernel runs here."""
    lib = ctypes.CDLL(blas.LIBRARY)
    setter = next((getattr(lib, n) for n in ("scipy_openblas_set_num_threads64_",
                                            "openblas_set_num_threads64_",
                                            "openblas_set_num_threads") if hasattr(lib, n)),
                  None)
    if setter is None:
        pytest.skip("this OpenBLAS exports no openblas_set_num_threads")
    threads = pool._threads_function(lib)
    before = threads()
    with_pool, serial = compiled["dtanh"]
    args = args_of("dtanh", np.float64)
    want = serial(*args)
    setter(1)
    try:
        assert threads() == 1
        assert_same_bits(with_pool(*args), want)
    finally:
        setter(before)
    assert threads() == before


def test_small_kernels_stay_serial():
    x = rng.standard_normal((8, 8))
    assert "pool_run(" not in fg.jit(layer).lower(x, x[0]).source


def test_the_probe_rejects_a_pool_that_splits_otherwise():
    def halves(m, n, k, alpha, a, lda, b, ldb, c, ldc, task, threads):
        call = ctypes.CFUNCTYPE(ctypes.c_int, *pool_bind._ARGS)(task)
        call(m, 0, 0, 2.5, 0, 1, 0, 1, 0, 0, 0)    # one part only: the whole range
    assert not pool_bind._probe(halves, lambda: 2)

    def right(m, n, k, alpha, a, lda, b, ldb, c, ldc, task, threads):
        call = ctypes.CFUNCTYPE(ctypes.c_int, *pool_bind._ARGS)(task)
        for first in (0, m // 2):
            call(m // 2, 0, 0, 2.5, first << pool.SHIFT, 1, 0, 1, 0, 0, 0)
    assert pool_bind._probe(right, lambda: 2)
    assert not pool_bind._probe(right, lambda: 1)
