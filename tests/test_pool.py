"""OpenBLAS's thread pool as the kernel IR's parallel loops use it (codegen/pool_bind.py): the
probe that checks how `blas_level1_thread` splits a range before `AVAILABLE` is true.
tests/test_kernel_ir_rewrite.py checks that threaded loops give the serial bits."""

import ctypes

from fusegrad.codegen import pool_bind


def test_the_probe_rejects_a_pool_that_splits_otherwise():
    def halves(m, n, k, alpha, a, lda, b, ldb, c, ldc, task, threads):
        call = ctypes.CFUNCTYPE(ctypes.c_int, *pool_bind._ARGS)(task)
        call(m, 0, 0, 2.5, 0, 1, 0, 1, 0, 0, 0)    # one part only: the whole range
    assert not pool_bind._probe(halves, lambda: 2)

    def right(m, n, k, alpha, a, lda, b, ldb, c, ldc, task, threads):
        call = ctypes.CFUNCTYPE(ctypes.c_int, *pool_bind._ARGS)(task)
        for first in (0, m // 2):
            call(m // 2, 0, 0, 2.5, first << pool_bind.SHIFT, 1, 0, 1, 0, 0, 0)
    assert pool_bind._probe(right, lambda: 2)
    assert not pool_bind._probe(right, lambda: 1)
