"""Buffer reuse across calls and chunked parallel kernels (the numba backend).

A compiled entry keeps the buffers it returned in a pool and reuses one at the next call only
when nobody else holds it; results the caller keeps are never overwritten. Large 1-D kernels
run as chunks of a size set by the length alone (large row kernels as rows) under prange, with
partials folded in order, so their bits do not depend on the thread count.
"""

import numba
import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen.chunks import CHUNK, SMALL_MAX, min_parallel_size

pytestmark = pytest.mark.usefixtures("numba_codegen")   # Numba's code generator


@pytest.fixture(autouse=True)
def numba_renderer(monkeypatch):
    """This file reads the Numba renderer's parallel source; float32 programs go to the kernel
    IR by default (tests/test_kernel_ir.py), so it is switched off here."""
    monkeypatch.setattr("fusegrad.codegen.choose.KERNEL_IR", False)


def loss(x, w, b):
    return np.sum(np.tanh(x * w + b) * (1 / (1 + np.exp(-x))))


def inputs(n, dtype=np.float64, seed=0):
    r = np.random.default_rng(seed)
    return [r.standard_normal(n).astype(dtype) for _ in range(3)]


VG = fg.jit(fg.value_and_grad(loss, argnums=(0, 1, 2)))


def test_held_results_are_never_overwritten():
    a = inputs(1000)
    value, grads = VG(*a)
    kept = [g.copy() for g in grads]
    view = grads[1][::2]
    value2, grads2 = VG(*inputs(1000, seed=1))
    assert all(np.array_equal(k, g) for k, g in zip(kept, grads))
    assert not {id(g) for g in grads2} & {id(g) for g in grads}
    del grads
    _, grads3 = VG(*inputs(1000, seed=2))
    assert np.array_equal(view, kept[1][::2])      # the view keeps its base out of the pool
    assert value != value2


def test_dropped_results_are_reused():
    a = inputs(1000)
    _, grads = VG(*a)
    pointers = sorted(g.ctypes.data for g in grads)
    del grads
    value, grads = VG(*a)
    assert sorted(g.ctypes.data for g in grads) == pointers
    want = fg.value_and_grad(loss, argnums=(0, 1, 2))(*a)
    assert np.allclose(value, want[0]) and all(
        np.allclose(g, w) for g, w in zip(grads, want[1]))


def test_large_1d_kernels_are_chunked_and_small_ones_serial():
    assert min_parallel_size(2) < 10**4 < min_parallel_size(2, itemsize=4)  # tanh, exp weigh
    assert 10**4 < min_parallel_size(0)
    big = VG.lower(*inputs(min_parallel_size(2))).source
    small = VG.lower(*inputs(min_parallel_size(2) - 1)).source
    assert "prange(chunks)" in big and "parallel=True" in big
    assert "prange" not in small.split("def make_run")[0].replace("from numba import prange", "")
    assert "parallel=True" not in small


@pytest.mark.parametrize("n", [10**4 + 123, SMALL_MAX + 3 * CHUNK + 123])
def test_chunked_results_do_not_depend_on_thread_count(n):
    for dtype in (np.float64, np.float32):
        a = inputs(n, dtype)
        old = numba.get_num_threads()
        try:
            outs = []
            for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
                numba.set_num_threads(threads)
                value, grads = VG(*a)
                outs.append([np.asarray(value).tobytes()] + [g.tobytes() for g in grads])
            assert all(o == outs[0] for o in outs)
        finally:
            numba.set_num_threads(old)
        want = fg.value_and_grad(loss, argnums=(0, 1, 2))(*[x.astype(np.float64) for x in a])
        tol = 1e-10 if dtype == np.float64 else 1e-4
        assert np.allclose(value, want[0], rtol=tol)
        assert all(np.allclose(g, w, rtol=tol, atol=tol) for g, w in zip(grads, want[1]))


def softmax_loss(x, c):
    import fusegrad.nn as fnn
    return np.sum(fnn.softmax(fnn.layer_norm(x, eps=1e-5)) * c)


SOFTMAX_VG = fg.jit(fg.value_and_grad(softmax_loss, argnums=0))


def test_large_row_kernels_run_rows_in_prange_and_compute_exp_once():
    r = np.random.default_rng(3)
    x, c = (r.standard_normal((64, 1024)).astype(np.float32) for _ in range(2))
    src = SOFTMAX_VG.lower(x, c).source
    assert "prange(d0)" in src and "parallel=True" in src
    assert src.count("exp_f32(") == 1                 # computed in one pass only
    assert "_row = np." in src
    old = numba.get_num_threads()
    try:
        outs = []
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            value, grad = SOFTMAX_VG(x, c)
            outs.append((np.asarray(value).tobytes(), grad.tobytes()))
        assert all(o == outs[0] for o in outs)
    finally:
        numba.set_num_threads(old)
    want = fg.value_and_grad(softmax_loss, argnums=0)(x.astype(np.float64), c.astype(np.float64))
    assert np.allclose(value, want[0], rtol=1e-4, atol=1e-4)
    assert np.allclose(grad, want[1], rtol=1e-3, atol=1e-5)


def test_chunked_and_row_kernels_agree_with_the_interpreter():
    def several(x, y):
        z = np.sin(x) * y
        return np.sum(z), np.max(z), np.exp(-x) + y, np.min(np.abs(y)[::-1])

    def rows(a):
        e = np.exp(a - np.max(a, axis=1, keepdims=True))
        return np.max(e / np.sum(e, axis=1, keepdims=True)), np.sum(a * a)

    r = np.random.default_rng(4)
    x, y = r.standard_normal(SMALL_MAX + 5), r.standard_normal(SMALL_MAX + 5)
    a = r.standard_normal((64, 1024))
    for f, args in ((several, (x, y)), (rows, (a,))):
        got = fg.jit(f)(*args)
        want = fg.jit(f, backend="interp")(*args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_serial_row_kernels_allocate_their_scratch_once():
    r = np.random.default_rng(5)
    x, c = (r.standard_normal((4, 16)).astype(np.float32) for _ in range(2))
    src = SOFTMAX_VG.lower(x, c).source
    kernel = next(k for k in src.split("@numba.njit") if "_row = np." in k)
    assert "prange" not in kernel
    assert kernel.index("_row = np.") < kernel.index("for i0 in range(")
    value, grad = SOFTMAX_VG(x, c)
    want = fg.value_and_grad(softmax_loss, argnums=0)(x.astype(np.float64), c.astype(np.float64))
    assert np.allclose(value, want[0], rtol=1e-5, atol=1e-5)
    assert np.allclose(grad, want[1], rtol=1e-4, atol=1e-6)
