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

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import blas  # noqa: F401 - the BLAS symbols Numba's kernels call, registered on import
from .pool_bind import (_BOUND, _LONG, AVAILABLE, DESCRIPTION,  # noqa: F401 - the interface
                        SHIFT, _threads_function)

# the signature of a kernel's task, as Numba types: what blas_level1_thread calls
task_signature = types.int64(types.int64, types.int64, types.int64, types.float64,
                             *[types.int64] * 7)


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
