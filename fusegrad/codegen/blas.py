"""The matrix product of the kernel IR's Numba rendering: `gemm(a, b, out)` (numba_support.py
imports it; the LLVM rendering calls the same ?gemm, cblas.py).

It calls the CBLAS that NumPy itself links (OpenBLAS in the NumPy wheels), found among the
shared libraries this process has loaded and bound by symbol name, so that:

- a compiled matrix product gives the same bits as `np.matmul` on the same machine (NumPy
  itself calls ?gemm for those; for a vector operand it may use ?gemv or its own loop). A
  product of at most SMALL_DOT_K terms never gets here: the kernel IR's loops compute it;
- one BLAS thread pool serves NumPy and fusegrad (Numba's `np.dot` goes through SciPy's
  separately built OpenBLAS, whose threads compete with NumPy's on a small machine);
- transposed operands are passed as BLAS transpose flags, never copied;
- loading a cached module never imports scipy.linalg (0.3 s at start-up).

The generated code names `fusegrad_sgemm` / `fusegrad_dgemm`, which cblas.py registers with
LLVM when this module is imported, which every generated module does first. Without
a usable CBLAS (or with FUSEGRAD_BLAS=numba), `gemm` falls back to Numba's `np.dot`.
`DESCRIPTION` says which one is in use; it and this file's text are part of the disk-cache key.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .cblas import BOUND as _BOUND
from .cblas import DESCRIPTION, LIBRARY  # noqa: F401 - part of this module's interface
from .cblas import NO_TRANS as _NO_TRANS
from .cblas import ROW_MAJOR as _ROW_MAJOR
from .cblas import TRANS as _TRANS


def _defer_numba_blas_probe() -> None:
    """Stop Numba from importing scipy.linalg (0.3 s) when it first compiles or loads a kernel.

    Loading its NumPy support, Numba asks once whether SciPy's BLAS is there, by importing it,
    to decide how np.cov and friends compute inner products. Generated code calls NumPy's own
    CBLAS (above), so fusegrad never needs that import: here the question is answered by
    whether scipy is installed, without importing it. Numba's BLAS functions (np.dot,
    np.linalg) still import SciPy themselves when first compiled, as before. A Numba without
    this probe is left alone.
    """
    if "numba.np.arraymath" in sys.modules:
        return
    import numba.np.linalg as linalg
    real = getattr(linalg, "ensure_blas", None)
    if real is None:
        return

    def probe():
        if importlib.util.find_spec("scipy") is None:
            raise ImportError("scipy 0.16+ is required for linear algebra")
    linalg.ensure_blas = probe
    try:
        import numba.np.arraymath as arraymath
        arraymath.ensure_blas = real
    finally:
        linalg.ensure_blas = real


if _BOUND:
    _defer_numba_blas_probe()


if _BOUND:
    _INT = ir.IntType(_BOUND[0])

    @intrinsic
    def _cblas_gemm(typingctx, a, b, out):
        """out = a @ b by one call of ?gemm, for 2-D arrays of one float dtype: a and b C- or
        F-contiguous (an F array is the transpose of a C one: a BLAS transpose flag), out C.
        Everything is decided by the types, so the call has no branches and no copies."""
        arrays = (a, b, out)
        if not all(isinstance(x, types.Array) and x.ndim == 2 for x in arrays) or \
                a.dtype not in (types.float32, types.float64) or \
                len({x.dtype for x in arrays}) != 1 or out.layout != "C" or \
                a.layout not in "CF" or b.layout not in "CF":
            return None
        dtype = a.dtype

        def codegen(context, builder, signature, args):
            real = context.get_value_type(dtype)
            ptr, i32 = real.as_pointer(), ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, _INT, _INT, _INT, real, ptr,
                                                   _INT, ptr, _INT, real, ptr, _INT])
            name = "fusegrad_sgemm" if dtype == types.float32 else "fusegrad_dgemm"
            fn = cgutils.get_or_insert_function(builder.module, fnty, name)
            structs = [context.make_array(t)(context, builder, v) for t, v in zip(arrays, args)]
            (m, k), (_, n) = (cgutils.unpack_tuple(builder, x.shape, 2) for x in structs[:2])
            one = ir.Constant(m.type, 1)

            def at_least_one(v):
                v = builder.select(builder.icmp_signed("<", v, one), one, v)
                return builder.trunc(v, _INT) if _INT.width < v.type.width else v

            def operand(t, rows, cols):        # (transpose flag, leading dimension)
                if t.layout == "C":
                    return ir.Constant(i32, _NO_TRANS), at_least_one(cols)
                return ir.Constant(i32, _TRANS), at_least_one(rows)

            (ta, lda), (tb, ldb) = operand(a, m, k), operand(b, k, n)
            size = [builder.trunc(v, _INT) if _INT.width < v.type.width else v for v in (m, n, k)]
            builder.call(fn, [ir.Constant(i32, _ROW_MAJOR), ta, tb, *size,
                              ir.Constant(real, 1.0), structs[0].data, lda, structs[1].data,
                              ldb, ir.Constant(real, 0.0), structs[2].data, at_least_one(n)])
            return context.get_dummy_value()
        return types.void(a, b, out), codegen

    def _blasable(x):
        """x itself if BLAS can read it in place, else a C-contiguous copy."""

    @overload(_blasable, jit_options={"error_model": "numpy"})
    def _blasable_impl(x):
        if x.layout in "CF":
            return lambda x: x
        return lambda x: np.ascontiguousarray(x)

    @njit(error_model="numpy", nogil=True)
    def gemm(a, b, out):
        """out[m, n] = a[m, k] @ b[k, n], out C-contiguous (a buffer of ours)."""
        _cblas_gemm(_blasable(a), _blasable(b), out)
else:
    @njit(error_model="numpy", nogil=True)
    def gemm(a, b, out):
        """out[m, n] = a[m, k] @ b[k, n] through Numba's np.dot."""
        np.dot(a, b, out)

