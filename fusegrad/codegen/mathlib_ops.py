"""The LLVM-level building blocks of codegen/mathlib.py's functions: fma, rounding, copysign,
bare division, exponent-bit tricks (2**k, ldexp, frexp, the bits of a float as an integer) and
Horner's rule as an fma chain, each emitted in place so that the loop vectorizer sees through it
(a libm call would stop it). mathlib.py and mathlib_arc.py build their functions from these.
"""

from llvmlite import ir
from numba import njit, types
from numba.core.registry import CPUDispatcher
from numba.extending import intrinsic

# inline="always": Numba pastes the IR into the caller. Used for the building blocks below and
# for the functions themselves when a test calls them; kernels call `llvm_inlined` copies.
_jit = njit(inline="always", error_model="numpy", fastmath=False)


class _LLVMInlined(CPUDispatcher):
    """A Numba function compiled on its own and inlined by LLVM into every caller.

    Numba's own inline="always" pastes the callee's Numba IR at each call site, and its SSA
    and type passes grow faster than linearly with the pasted code: 200 sin calls in one
    kernel took 111 s to compile that way, 5 s this way. Here each specialization is compiled
    once, and its LLVM function gets the `alwaysinline` attribute before any caller links it,
    so LLVM pastes it (erf and logistic are too big for LLVM's inliner otherwise, and a call
    left in a loop body stops vectorization). The machine code is the same.
    """

    def add_overload(self, cres):
        module = cres.library._final_module
        module.get_function(cres.fndesc.llvm_func_name).add_function_attribute("alwaysinline")
        super().add_overload(cres)


def llvm_inlined(fn):
    """An `_LLVMInlined` copy of a jitted function, with the same options minus `inline`."""
    options = {k: v for k, v in fn.targetoptions.items() if k != "inline"}
    return _LLVMInlined(py_func=fn.py_func, locals={}, targetoptions=options)


# LLVM intrinsics, emitted in place: the vectorizer sees through them, not through a libm call.
# Each accepts one float type only: a float64 sneaking into a float32 function is a typing error.


def _llvm(name):
    def codegen(context, builder, sig, args):
        ty = args[0].type
        fnty = ir.FunctionType(ty, [ty] * len(args))
        return builder.call(builder.module.declare_intrinsic(name, [ty], fnty), args)

    return codegen


def _same_float(*tys):
    return tys[0] if isinstance(tys[0], types.Float) and len(set(tys)) == 1 else None


@intrinsic
def fma(typingctx, a, b, c):
    """a*b + c with one rounding."""
    t = _same_float(a, b, c)
    return t and (t(t, t, t), _llvm("llvm.fma"))


@intrinsic
def rint(typingctx, x):
    """x rounded to the nearest integer, ties to even."""
    t = _same_float(x)
    return t and (t(t), _llvm("llvm.rint"))


@intrinsic
def floor(typingctx, x):
    """x rounded down, as a float."""
    t = _same_float(x)
    return t and (t(t), _llvm("llvm.floor"))


@intrinsic
def copysign(typingctx, a, b):
    """|a| with the sign bit of b."""
    t = _same_float(a, b)
    return t and (t(t, t), _llvm("llvm.copysign"))


@intrinsic
def _div(typingctx, a, b):
    """a / b as a bare fdiv: no zero-division check, whatever the caller's error model."""
    t = _same_float(a, b)
    return t and (t(t, t), lambda context, builder, sig, args: builder.fdiv(*args))


@intrinsic
def _select(typingctx, c, a, b):
    """a if c else b as one LLVM select: no branch for Numba and LLVM to if-convert, which
    keeps big branch-free functions quick to compile."""
    t = _same_float(a, b)
    if t is None or not isinstance(c, types.Boolean):
        return None
    return t(c, t, t), lambda context, builder, sig, args: builder.select(*args)


def _layout(fty):
    """(int type, mantissa bits, exponent bias) of an LLVM float type."""
    return (ir.IntType(64), 52, 1023) if fty == ir.DoubleType() else (ir.IntType(32), 23, 127)


def _to_int(builder, k):
    # k + 1.5*2**mant puts the integer k in the low bits. Unlike fptosi, this is defined for
    # nan (which the callers then discard by arithmetic or a select).
    ity, mant, _ = _layout(k.type)
    magic = ir.Constant(k.type, 1.5 * 2.0**mant)
    return builder.sub(builder.bitcast(builder.fadd(k, magic), ity), builder.bitcast(magic, ity))


def _pow2_bits(builder, ki, fty):
    ity, mant, bias = _layout(fty)
    e = builder.shl(builder.add(ki, ir.Constant(ity, bias)), ir.Constant(ity, mant))
    return builder.bitcast(e, fty)


@intrinsic
def _pow2(typingctx, k):
    """2**k for an integer-valued float k in the normal exponent range."""
    def codegen(context, builder, sig, args):
        return _pow2_bits(builder, _to_int(builder, args[0]), args[0].type)

    return k(k), codegen


@intrinsic
def _ldexp(typingctx, p, k):
    """p * 2**k as p * 2**(k//2) * 2**(k - k//2): one rounding even when the result overflows
    or is subnormal, for integer-valued |k| up to twice the exponent range."""
    if p != k:
        return None

    def codegen(context, builder, sig, args):
        p, k = args
        ki = _to_int(builder, k)
        k1 = builder.ashr(ki, ir.Constant(ki.type, 1))
        s1, s2 = (_pow2_bits(builder, e, p.type) for e in (k1, builder.sub(ki, k1)))
        return builder.fmul(builder.fmul(p, s1), s2)

    return p(p, k), codegen


@intrinsic
def _frexp(typingctx, x):
    """(m, k) with x = m * 2**k and sqrt(1/2) <= m < sqrt(2), for positive normal x."""
    def codegen(context, builder, sig, args):
        ity, mant, bias = _layout(args[0].type)
        # Offsetting the bits by (1 - sqrt(1/2)) carries into the exponent exactly when the
        # mantissa is >= sqrt(2); adding sqrt(1/2) back to the masked mantissa gives m.
        one, low = (1023 << 52, 0x3FE6A09E << 32) if mant == 52 else (0x3F800000, 0x3F3504F3)
        bits = builder.add(builder.bitcast(args[0], ity), ir.Constant(ity, one - low))
        k = builder.sub(builder.lshr(bits, ir.Constant(ity, mant)), ir.Constant(ity, bias))
        m = builder.and_(bits, ir.Constant(ity, (1 << mant) - 1))
        m = builder.bitcast(builder.add(m, ir.Constant(ity, low)), args[0].type)
        pair = (m, builder.sitofp(k, args[0].type))
        return context.make_tuple(builder, sig.return_type, pair)

    return types.UniTuple(x, 2)(x), codegen


@intrinsic
def _horner(typingctx, x, coeffs):
    """Polynomial with coefficients highest degree first, as a chain of fma."""
    if not (isinstance(coeffs, types.UniTuple) and coeffs.dtype == x):
        return None  # a float64 table in a float32 function would widen every lane

    def codegen(context, builder, sig, args):
        fma_ = _llvm("llvm.fma")
        acc = builder.extract_value(args[1], 0)
        for i in range(1, sig.args[1].count):
            acc = fma_(context, builder, sig, [acc, args[0], builder.extract_value(args[1], i)])
        return acc

    return x(x, coeffs), codegen


def _typed(T, table):
    """Cast every constant to T, so a float32 kernel never sees a float64."""
    return {k: tuple(map(T, v)) if isinstance(v, tuple) else T(v) for k, v in table.items()}
