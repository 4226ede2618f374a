"""Big elementwise kernels on OpenBLAS's own threads.

A kernel between two matrix products (an MLP's tanh, its derivative) runs on one core while
the BLAS thread on the other sits idle, and Numba's OpenMP threads are no way to use that
core: they compete with the OpenBLAS thread, which is still spinning from the last product
(benchmarks/w2_threads.py measures all three). So such a kernel is split by rows (or by
columns, when it sums over rows) and the parts are handed to OpenBLAS's pool, through the
function its own level-1 routines use to split a vector, `blas_level1_thread`:

    blas_level1_thread(mode, m, n, k, alpha, a, lda, b, ldb, c, ldc, routine, nthreads)

splits m into `nthreads` parts and calls, on the caller's thread and on the pool's,

    routine(m_part, n, k, alpha[0], a + first << shift, lda, b, ldb, c, ldc, buffer)

The routine is the kernel's Numba cfunc (`task`): `c` carries the address of an int64 array
holding the kernel's sizes, array addresses and float constants; `a` carries the part's first
row. This function is internal to OpenBLAS, so on import the module checks what it does with a
probe: the right split, the offsets, the legacy calling convention. Only when that passes (and
`FUSEGRAD_POOL` is not 0) is `AVAILABLE` true; otherwise kernels stay serial. The launcher
also asks OpenBLAS how many threads it may use on every call (threadpoolctl can change it), and
runs the kernel serially when that is one or when an array is not C-contiguous (`carray` can
rebuild only those).

A part computes its rows or columns exactly as the serial loop would, so the bits of every
result are the same for any number of threads.
"""

from __future__ import annotations

import ctypes
import os

import llvmlite.binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import blas

_LONG = ctypes.c_int64
_ARGS = (_LONG, _LONG, _LONG, ctypes.c_double, _LONG, _LONG, _LONG, _LONG, _LONG, _LONG, _LONG)
# BLAS_DOUBLE in OpenBLAS's mode bits: 3 since 0.3.22 (bfloat16 took 1), 1 before
_MODES = (3, 1)
SHIFT = 3  # a part's first index arrives in `a` as first << SHIFT (8-byte elements)

# the signature of a kernel's task, as Numba types: what blas_level1_thread calls
task_signature = types.int64(types.int64, types.int64, types.int64, types.float64,
                             *[types.int64] * 7)


def _threads_function(lib):
    for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                 "openblas_get_num_threads"):
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, []
            return fn
    return None


def _probe(split, threads) -> bool:
    """Whether split(mode, m=10, ...) gives two parts of 5 with offsets 0 and 5 << SHIFT and
    passes alpha by value, as this module's tasks expect."""
    seen = []
    callback = ctypes.CFUNCTYPE(ctypes.c_int, *_ARGS)(
        lambda m, n, k, alpha, a, *rest: seen.append((m, a, alpha)) or 0)
    alpha = ctypes.c_double(2.5)
    split(10, 0, 0, ctypes.addressof(alpha), 0, 1, 0, 1, 0, 0,
          ctypes.cast(callback, ctypes.c_void_p).value, 2)
    return threads() >= 2 and sorted(seen) == [(5, 0, 2.5), (5, 5 << SHIFT, 2.5)]


def _bind() -> tuple[int, str] | None:
    """(mode, description) after registering fusegrad_pool_split and fusegrad_pool_threads
    with LLVM, or None when NumPy's BLAS has no pool this module can use."""
    if not blas.LIBRARY or os.environ.get("FUSEGRAD_POOL", "1") == "0":
        return None
    lib = ctypes.CDLL(blas.LIBRARY)
    threads = _threads_function(lib)
    if threads is None or not hasattr(lib, "blas_level1_thread") or threads() < 2:
        return None  # one thread now: nothing to split over, and the probe would wait forever
    raw = lib.blas_level1_thread
    raw.restype, raw.argtypes = ctypes.c_int, [ctypes.c_int] + [_LONG] * 11 + [ctypes.c_int]
    for mode in _MODES:
        if _probe(lambda *args, mode=mode: raw(mode, *args), threads):
            for name, fn in (("split", raw), ("threads", threads)):
                llvm.add_symbol(f"fusegrad_pool_{name}",
                                ctypes.cast(fn, ctypes.c_void_p).value)
            return mode, f"blas_level1_thread mode {mode}"
    return None


_BOUND = _bind()
AVAILABLE = _BOUND is not None
DESCRIPTION = _BOUND[1] if _BOUND else "none"


@intrinsic
def pool_threads(typingctx):
    """The number of threads OpenBLAS may use now."""
    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "fusegrad_pool_threads")
        return builder.sext(builder.call(fn, []), ir.IntType(64))

    return types.int64(), codegen


@intrinsic
def pool_run(typingctx, task, context_array, m, threads):
    """Split range(m) over `threads` threads of OpenBLAS's pool, each part a call of the task
    at address `task` with context_array's address as `c` (and as alpha's address)."""
    if not (isinstance(context_array, types.Array) and context_array.dtype == types.int64):
        return None

    def codegen(context, builder, sig, args):
        task_, ctx, m_, threads_ = args
        i32, i64 = ir.IntType(32), ir.IntType(64)
        fnty = ir.FunctionType(i32, [i32] + [i64] * 11 + [i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "fusegrad_pool_split")
        data = context.make_array(sig.args[1])(context, builder, ctx).data
        address = builder.ptrtoint(data, i64)
        zero, one = ir.Constant(i64, 0), ir.Constant(i64, 1)
        builder.call(fn, [ir.Constant(i32, _BOUND[0] if _BOUND else 0), m_, zero, zero,
                          address, zero, one, zero, one, address, zero, task_,
                          builder.trunc(threads_, i32)])
        return context.get_dummy_value()

    return types.none(types.int64, context_array, types.int64, types.int64), codegen


@intrinsic
def address(typingctx, value):
    """An int64 address as a void pointer, for numba.carray(pointer, shape, dtype)."""
    if not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return types.voidptr(value), codegen
