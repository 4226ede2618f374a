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
- openblas: both kernels split by columns over OpenBLAS's own threads. This uses
  `blas_level1_thread`, an internal function that OpenBLAS exports, with a Numba cfunc as the
  callback. Its mode argument and calling convention are OpenBLAS internals, so the script
  first checks them with a ctypes callback and skips this column if they differ.

It prints each column's median ratio to NumPy's five GEMMs alone (references.GEMMS), all
interleaved in one process. A column split keeps the column sums in one order whatever the
thread count.
"""

import ctypes
import os
import sys

import numba
import numpy as np
from numba import carray, cfunc, prange, types
from numba.extending import intrinsic

import fusegrad.codegen  # noqa: F401 - sets the OpenMP defaults before Numba loads OpenMP
from fusegrad.codegen import blas
from fusegrad.codegen.blas import gemm
from fusegrad.codegen.mathlib import FUNCS

sys.path.insert(0, os.path.dirname(__file__))
import references as ref  # noqa: E402

DTYPE = np.float64 if sys.argv[1:] == ["f64"] else np.float32
TANH = FUNCS["tanh", "f64" if DTYPE == np.float64 else "f32"]
ONE = DTYPE(1)
BLAS_DOUBLE = 3         # OpenBLAS 0.3.2x+: the precision bits of the mode (1 before)
LONG = ctypes.c_int64
CALLBACK = (LONG, LONG, LONG, ctypes.c_double, LONG, LONG, LONG, LONG, LONG, LONG, LONG)


def _level1_thread():
    """blas_level1_thread of NumPy's OpenBLAS, if it splits m the way this script assumes."""
    for path in blas._candidate_libraries():
        lib = ctypes.CDLL(path)
        if hasattr(lib, "blas_level1_thread"):
            break
    else:
        return None
    fn = lib.blas_level1_thread
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int] + [LONG] * 11 + [ctypes.c_int]
    seen = []
    probe = ctypes.CFUNCTYPE(ctypes.c_int, *CALLBACK)(
        lambda m, n, k, alpha, a, *rest: seen.append((m, a, alpha)) or 0)
    alpha = ctypes.c_double(2.5)
    fn(BLAS_DOUBLE, 10, 0, 0, ctypes.addressof(alpha), 0, 1, 0, 1, 0, 0,
       ctypes.cast(probe, ctypes.c_void_p).value, 2)
    return fn if sorted(seen) == [(5, 0, 2.5), (5, 40, 2.5)] else None  # a = first column * 8


def _pointer_to(dtype):
    @intrinsic
    def as_pointer(typingctx, address):
        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))
        return types.CPointer(dtype)(types.int64), codegen
    return as_pointer


_floats, _ints = _pointer_to(numba.from_dtype(DTYPE)), _pointer_to(types.int64)
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


_SIGNATURE = types.int64(types.int64, types.int64, types.int64, types.float64, types.int64,
                         types.int64, types.int64, types.int64, types.int64, types.int64,
                         types.int64)


@cfunc(_SIGNATURE, error_model="numpy")
def _tanh_part(m, n, k, alpha, a, lda, b, ldb, c, ldc, sb):
    ctx = carray(_ints(c), 5)               # z, b1, h, rows, columns
    rows, cols = ctx[3], ctx[4]
    tanh_columns(carray(_floats(ctx[0]), (rows, cols)), carray(_floats(ctx[1]), cols),
                 carray(_floats(ctx[2]), (rows, cols)), a >> 3, (a >> 3) + m)
    return 0


@cfunc(_SIGNATURE, error_model="numpy")
def _dtanh_part(m, n, k, alpha, a, lda, b, ldb, c, ldc, sb):
    ctx = carray(_ints(c), 6)               # h, dh, dz, db1, rows, columns
    rows, cols = ctx[4], ctx[5]
    dtanh_columns(carray(_floats(ctx[0]), (rows, cols)), carray(_floats(ctx[1]), (rows, cols)),
                  carray(_floats(ctx[2]), (rows, cols)), carray(_floats(ctx[3]), cols),
                  a >> 3, (a >> 3) + m)
    return 0


def main():
    level1 = _level1_thread()
    W1, b1, W2, b2, X, y = args = ref.w2_inputs(DTYPE)
    B, H, K = X.shape[0], W1.shape[1], W2.shape[1]
    z, h = np.empty((B, H), DTYPE), np.empty((B, H), DTYPE)
    logits, dl = np.empty((B, K), DTYPE), np.ones((B, K), DTYPE)
    dz, db1, dW2, dW1 = np.empty((B, H), DTYPE), np.empty(H, DTYPE), np.empty((H, K), DTYPE), \
        np.empty(W1.shape, DTYPE)
    tanh_ctx = np.array([z.ctypes.data, b1.ctypes.data, h.ctypes.data, B, H], np.int64)
    dtanh_ctx = np.array([h.ctypes.data, z.ctypes.data, dz.ctypes.data, db1.ctypes.data, B, H],
                         np.int64)
    alpha = np.ones(1)
    call = None if level1 is None else ctypes.cast(level1, ctypes.c_void_p).value
    split = None if level1 is None else ctypes.CFUNCTYPE(
        ctypes.c_int, ctypes.c_int, *[LONG] * 11, ctypes.c_int)(call)
    tanh_part, dtanh_part = _tanh_part.address, _dtanh_part.address

    @_jit
    def step(mode, X, W1, b1, W2, z, h, logits, dl, dz, db1, dW2, dW1, tctx, dctx, alpha):
        gemm(X, W1, z)
        if mode == 0:
            tanh_columns(z, b1, h, 0, h.shape[1])
        elif mode == 1:
            tanh_prange(z, b1, h)
        else:
            split(BLAS_DOUBLE, h.shape[1], 0, 0, alpha.ctypes.data, 0, 1, 0, 1,
                  tctx.ctypes.data, 0, tanh_part, 2)
        gemm(h, W2, logits)
        gemm(dl, W2.T, z)                   # dH, into Z's buffer as fusegrad's planner does
        gemm(h.T, dl, dW2)
        if mode == 2:
            split(BLAS_DOUBLE, h.shape[1], 0, 0, alpha.ctypes.data, 0, 1, 0, 1,
                  dctx.ctypes.data, 0, dtanh_part, 2)
        else:
            dtanh_columns(h, z, dz, db1, 0, h.shape[1])
        gemm(X.T, dz, dW1)

    buffers = (X, W1, b1, W2, z, h, logits, dl, dz, db1, dW2, dW1, tanh_ctx, dtanh_ctx, alpha)
    calls = {"numpy GEMMs": ref.GEMMS["W2"](*args), "serial": lambda: step(0, *buffers),
             "prange tanh": lambda: step(1, *buffers)}
    if level1 is not None:
        calls["openblas threads"] = lambda: step(2, *buffers)
        step(0, *buffers)
        want = h.copy(), dz.copy(), db1.copy()
        step(2, *buffers)
        assert all(np.array_equal(w, g) for w, g in zip(want, (h, dz, db1)))
    else:
        print("blas_level1_thread missing or not as expected: no openblas column")
    ref.print_interleaved(calls, DTYPE, repeats=31)


if __name__ == "__main__":
    main()
