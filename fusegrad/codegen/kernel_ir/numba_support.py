"""What the kernel IR's Numba rendering imports: the scalar ops Python has no spelling for.

Each is the LLVM instruction llvm.py writes for the same op, so both renderings give the same
bits: fma, sqrt, fabs, rint, floor and copysign call the llvm.* intrinsic of the operand's
type; as_f32/as_f64/as_i32/as_i64 reinterpret a value's bits (LLVM's bitcast); sdiv and srem
divide truncating toward zero, as LLVM's do (Python's // and % floor); select is LLVM's
select, where Python's `x if c else y` would be three basic blocks; gemm is one call of the
?gemm the LLVM rendering calls (cblas.py's fusegrad_sgemm/dgemm, NumPy's CBLAS: np.matmul's
bits). This file's text is part of the disk-cache key.
"""

from __future__ import annotations

import importlib.util
import sys

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import cblas

_FLOATS = {types.float32: "f32", types.float64: "f64"}


def _intrinsic(name: str, arity: int):
    """A Numba function calling llvm.<name>.f32/f64 on `arity` operands of one float type."""
    def typer(args):
        if len(set(args)) != 1 or args[0] not in _FLOATS:
            return None
        t = args[0]

        def codegen(context, builder, signature, values):
            real = context.get_value_type(t)
            fn = builder.module.declare_intrinsic(f"llvm.{name}", [real],
                                                  ir.FunctionType(real, [real] * arity))
            return builder.call(fn, values)
        return t(*args), codegen
    typers = {1: lambda typingctx, x: typer((x,)),      # Numba reads the arity off the typer
              2: lambda typingctx, x, y: typer((x, y)),
              3: lambda typingctx, x, y, z: typer((x, y, z))}
    typers[arity].__name__ = name
    return intrinsic(typers[arity])


fma = _intrinsic("fma", 3)
sqrt = _intrinsic("sqrt", 1)
fabs = _intrinsic("fabs", 1)
rint = _intrinsic("rint", 1)
floor = _intrinsic("floor", 1)
copysign = _intrinsic("copysign", 2)


def _bitcast(to):
    width = to.bitwidth

    def typer(typingctx, x):
        if x not in (types.float32, types.float64, types.int32, types.int64) or \
                x.bitwidth != width:
            return None

        def codegen(context, builder, signature, values):
            return builder.bitcast(values[0], context.get_value_type(to))
        return to(x), codegen
    typer.__name__ = f"as_{to}"
    return intrinsic(typer)


as_f32, as_f64 = _bitcast(types.float32), _bitcast(types.float64)
as_i32, as_i64 = _bitcast(types.int32), _bitcast(types.int64)


@intrinsic
def select(typingctx, cond, x, y):
    """x if cond else y as LLVM's select: no branch, so no basic blocks for Numba to type."""
    t = typingctx.unify_types(x, y)
    if cond != types.boolean or not isinstance(t, (types.Number, types.Boolean)):
        return None

    def codegen(context, builder, signature, values):
        c, a, b = values
        return builder.select(c, context.cast(builder, a, x, t), context.cast(builder, b, y, t))
    return t(cond, x, y), codegen


@njit(inline="always", error_model="numpy")
def sdiv(x, y):
    """x / y rounded toward zero (y is never 0, nor -1 under INT64_MIN: the rules see to it)."""
    return x // y + ((x % y != 0) & ((x ^ y) < 0))


@njit(inline="always", error_model="numpy")
def srem(x, y):
    """x - sdiv(x, y) * y: the sign of x, as LLVM's srem."""
    r = x % y
    return r - y * ((r != 0) & ((x ^ y) < 0))


@intrinsic
def gemm(typingctx, a, b, out):
    """out = a @ b for C-contiguous 2-D arrays of one float dtype (the views the rendering
    passes), by one call of ?gemm: the LLVM rendering's call, operand for operand."""
    arrays = (a, b, out)
    if not all(isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C" for x in arrays) \
            or a.dtype not in _FLOATS or len({x.dtype for x in arrays}) != 1:
        return None

    def codegen(context, builder, signature, args):
        real, i32, n = context.get_value_type(a.dtype), ir.IntType(32), ir.IntType(cblas.BITS)
        ptr = real.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, n, n, n, real, ptr, n, ptr, n,
                                               real, ptr, n])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"fusegrad_{'s' if a.dtype == types.float32 else 'd'}gemm")
        structs = [context.make_array(t)(context, builder, v) for t, v in zip(arrays, args)]
        (m, k), (_, cols) = (cgutils.unpack_tuple(builder, x.shape, 2) for x in structs[:2])
        m, k, cols = (builder.trunc(v, n) if n.width < v.type.width else v for v in (m, k, cols))
        flag = [ir.Constant(i32, f) for f in (cblas.ROW_MAJOR, cblas.NO_TRANS, cblas.NO_TRANS)]
        builder.call(fn, [*flag, m, cols, k, ir.Constant(real, 1.0), structs[0].data, k,
                          structs[1].data, cols, ir.Constant(real, 0.0), structs[2].data, cols])
        return context.get_dummy_value()
    return types.void(a, b, out), codegen


def _defer_numba_blas_probe() -> None:
    """Stop Numba from importing scipy.linalg (0.3 s) when it first compiles or loads a module.

    Loading its NumPy support, Numba asks once whether SciPy's BLAS is there, by importing it,
    to decide how np.cov and friends compute inner products. Generated code calls NumPy's own
    CBLAS (gemm above), so fusegrad never needs that import: here the question is answered by
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


_defer_numba_blas_probe()
