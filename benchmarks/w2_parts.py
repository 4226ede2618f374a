"""Where the W2 step's time goes, everything timed interleaved in one process (drift cancels).

    python benchmarks/w2_parts.py [f32|f64]

Rows: the five matmuls as NumPy calls (references.GEMMS, the W2 floor); the same five through
fusegrad's gemm (codegen/blas.py) on the step's shapes and layouts; those again with one
single-threaded write of a (B, H) array before the last GEMM, once into that GEMM's input (as the
step's dtanh kernel writes dZ before dW1 = X.T @ dZ) and once into an array no GEMM reads; the
fusegrad step; the same step with its big kernels on the calling thread instead of OpenBLAS's
(codegen/pool.py off); that one compiled with plain stores where it streams dZ (support.stream_row).
Ratios are medians of per-repeat ratios to the NumPy GEMMs. Step minus our GEMMs is what the
fused kernels and the data moving between them cost; the two "write" rows apart are what a GEMM
pays for reading, on both cores, an input that one core has just written.
"""

import os
import sys

import numba
import numpy as np

import fusegrad as fg
import fusegrad.nn as fnn
from fusegrad.codegen import blas, kernel, pool

sys.path.insert(0, os.path.dirname(__file__))
import references as ref  # noqa: E402


def w2(W1, b1, W2, b2, X, y):
    return fnn.cross_entropy(np.tanh(X @ W1 + b1) @ W2 + b2, y)


def w2_plain(W1, b1, W2, b2, X, y):  # another function: its own source and compile
    return fnn.cross_entropy(np.tanh(X @ W1 + b1) @ W2 + b2, y)


def w2_serial(W1, b1, W2, b2, X, y):  # and another
    return fnn.cross_entropy(np.tanh(X @ W1 + b1) @ W2 + b2, y)


@numba.njit(error_model="numpy", nogil=True)
def _write(src, dst):  # one pass on the calling thread, as a fused kernel would write
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = src[i, j] * 0.5


def main():
    dtype = np.float64 if sys.argv[1:] == ["f64"] else np.float32
    args = ref.w2_inputs(dtype)
    W1, b1, W2, b2, X, y = args
    step = fg.jit(fg.value_and_grad(w2, argnums=(0, 1, 2, 3)))
    step(*args)
    pool.AVAILABLE = False             # kernels on the calling thread (FUSEGRAD_POOL=0)
    serial = fg.jit(fg.value_and_grad(w2_serial, argnums=(0, 1, 2, 3)))
    serial(*args)
    kernel.STREAM_MIN_BYTES = 1 << 62  # stream_row's threshold, as compiled into the source
    plain = fg.jit(fg.value_and_grad(w2_plain, argnums=(0, 1, 2, 3)))
    B, H, K = X.shape[0], W1.shape[1], W2.shape[1]
    H_, dl = np.tanh(X @ W1), np.ones((B, K), dtype)
    o = [np.empty(s, dtype) for s in ((B, H), (B, K), (B, H), (H, K), W1.shape)]

    dZ, elsewhere = H_.copy(), np.empty_like(H_)

    def ours(write_to=None):
        blas.gemm(X, W1, o[0])
        blas.gemm(H_, W2, o[1])
        blas.gemm(dl, W2.T, o[2])
        blas.gemm(H_.T, dl, o[3])
        if write_to is not None:
            _write(H_, write_to)
        blas.gemm(X.T, dZ, o[4])

    calls = {"numpy GEMMs": ref.GEMMS["W2"](*args), "our gemm": ours,
             "+ write input": lambda: ours(dZ), "+ write other": lambda: ours(elsewhere),
             "fusegrad step": lambda: step(*args), "serial kernels": lambda: serial(*args),
             "plain stores": lambda: plain(*args)}
    ref.print_interleaved(calls, dtype, repeats=25)


if __name__ == "__main__":
    main()
