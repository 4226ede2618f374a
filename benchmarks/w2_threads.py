"""W2's elementwise kernels on one core, on Numba's threads, or on OpenBLAS's own threads.

    python benchmarks/w2_threads.py [f32|f64]

The prototype of fusegrad's codegen/pool.py, kept to compare the three ways side by side
(fusegrad's generated step splits the tanh kernel by rows and the dtanh one by columns). It
runs the W2 step's five matmuls (fusegrad's gemm) with its two big elementwise kernels in
between, written by hand:
tanh(Z + b1) after X @ W1, and dZ = dH * (1 - H*H) with the column sums db1 before X.T @ dZ.
The kernels run three ways:

- serial: on the calling thread (fusegrad with FUSEGRAD_POOL=0);
- prange: the tanh kernel under Numba's prange (its OpenMP threads, with fusegrad's defaults);
- openblas: both kernels split by columns over OpenBLAS's own threads, through pool.py's
  `pool_run` (OpenBLAS's internal `blas_level1_thread`) with a Numba cfunc as the task; the
  column is skipped when pool.py's import probe found no usable pool.

It prints each column's median ratio to NumPy's five GEMMs alone (references.GEMMS), all
interleaved in one process. A column split keeps the column sums in one order whatever the
thread count.
"""

import os
import sys

import numba
import numpy as np
from numba import carray, cfunc, prange

from fusegrad.codegen import pool  # first: sets the OpenMP defaults before Numba loads it
from fusegrad.codegen.blas import gemm
from fusegrad.codegen.pool import SHIFT, address, pool_run, task_signature
from fusegrad.codegen.mathlib import FUNCS

sys.path.insert(0, os.path.dirname(__file__))
import references as ref  # noqa: E402

DTYPE = np.float64 if sys.argv[1:] == ["f64"] else np.float32
TANH = FUNCS["tanh", "f64" if DTYPE == np.float64 else "f32"]
ONE = DTYPE(1)
FLOAT = numba.from_dtype(DTYPE)
_jit = numba.njit(error_model="numpy", nogil=True)


@_jit
def tanh_columns(z, b1, h, lo, hi):
    lo, hi = np.uint64(lo), np.uint64(hi)       # unsigned: no wraparound checks, so it vectorizes
    for i in range(z.shape[0]):
        for j in range(lo, hi):
            h[i, j] = TANH(z[i, j] + b1[j])


@numba.njit(error_model="numpy", nogil=True, fastmath={"reassoc"})
def dtanh_columns(h, dh, dz, db1, lo, hi):
    lo, hi = np.uint64(lo), np.uint64(hi)
    for j in range(lo, hi):
        db1[j] = 0
    for i in range(h.shape[0]):
        for j in range(lo, hi):
            dz[i, j] = dh[i, j] * (ONE - h[i, j] * h[i, j])
            db1[j] += dz[i, j]


@numba.njit(error_model="numpy", nogil=True, parallel=True)
def tanh_prange(z, b1, h):
    for i in prange(z.shape[0]):
        for j in range(z.shape[1]):
            h[i, j] = TANH(z[i, j] + b1[j])


@numba.njit(inline="always")
def _floats(ctx, i, shape):             # the float array whose address is ctx[i]
    return carray(address(ctx[i]), shape, FLOAT)


@cfunc(task_signature, error_model="numpy")
def _tanh_part(m, n, k, alpha, a, lda, b, ldb, c, ldc, sb):
    ctx = carray(address(c), 5, np.int64)   # z, b1, h, rows, columns
    rows, cols, lo = ctx[3], ctx[4], a >> SHIFT
    tanh_columns(_floats(ctx, 0, (rows, cols)), _floats(ctx, 1, cols),
                 _floats(ctx, 2, (rows, cols)), lo, lo + m)
    return 0


@cfunc(task_signature, error_model="numpy")
def _dtanh_part(m, n, k, alpha, a, lda, b, ldb, c, ldc, sb):
    ctx = carray(address(c), 6, np.int64)   # h, dh, dz, db1, rows, columns
    rows, cols, lo = ctx[4], ctx[5], a >> SHIFT
    dtanh_columns(_floats(ctx, 0, (rows, cols)), _floats(ctx, 1, (rows, cols)),
                  _floats(ctx, 2, (rows, cols)), _floats(ctx, 3, cols), lo, lo + m)
    return 0


def main():
    W1, b1, W2, b2, X, y = args = ref.w2_inputs(DTYPE)
    B, H, K = X.shape[0], W1.shape[1], W2.shape[1]
    z, h = np.empty((B, H), DTYPE), np.empty((B, H), DTYPE)
    logits, dl = np.empty((B, K), DTYPE), np.ones((B, K), DTYPE)
    dz, db1, dW2, dW1 = np.empty((B, H), DTYPE), np.empty(H, DTYPE), np.empty((H, K), DTYPE), \
        np.empty(W1.shape, DTYPE)
    tanh_ctx = np.array([z.ctypes.data, b1.ctypes.data, h.ctypes.data, B, H], np.int64)
    dtanh_ctx = np.array([h.ctypes.data, z.ctypes.data, dz.ctypes.data, db1.ctypes.data, B, H],
                         np.int64)
    tanh_part, dtanh_part = _tanh_part.address, _dtanh_part.address

    @_jit
    def step(mode, X, W1, b1, W2, z, h, logits, dl, dz, db1, dW2, dW1, tctx, dctx):
        gemm(X, W1, z)
        if mode == 0:
            tanh_columns(z, b1, h, 0, h.shape[1])
        elif mode == 1:
            tanh_prange(z, b1, h)
        else:
            pool_run(tanh_part, tctx, h.shape[1], 2)
        gemm(h, W2, logits)
        gemm(dl, W2.T, z)                   # dH, into Z's buffer as fusegrad's planner does
        gemm(h.T, dl, dW2)
        if mode == 2:
            pool_run(dtanh_part, dctx, h.shape[1], 2)
        else:
            dtanh_columns(h, z, dz, db1, 0, h.shape[1])
        gemm(X.T, dz, dW1)

    buffers = (X, W1, b1, W2, z, h, logits, dl, dz, db1, dW2, dW1, tanh_ctx, dtanh_ctx)
    calls = {"numpy GEMMs": ref.GEMMS["W2"](*args), "serial": lambda: step(0, *buffers),
             "prange tanh": lambda: step(1, *buffers)}
    if pool.AVAILABLE:
        calls["openblas threads"] = lambda: step(2, *buffers)
        step(0, *buffers)
        want = h.copy(), dz.copy(), db1.copy()
        step(2, *buffers)
        assert all(np.array_equal(w, g) for w, g in zip(want, (h, dz, db1)))
    else:
        print(f"no BLAS pool ({pool.DESCRIPTION}): no openblas column")
    ref.print_interleaved(calls, DTYPE, repeats=31)


if __name__ == "__main__":
    main()
