"""Elementwise primitives: each one's shape rule, NumPy semantics, docs row, test domain and
scalar rule over the kernel IR's builder.

There is no implicit broadcasting and no implicit promotion in the IR: operands have equal types;
the tracer inserts broadcast_in_dim and convert. The implementations still broadcast and promote
as NumPy does, which the eager engine relies on.

Semantics worth knowing (the scalar rules follow the implementations bit for bit): integer div is
floor division; maximum/minimum propagate nan; logistic is the stable form; `and`/`or`/`not` on
i64 are logical (0 or 1), as NumPy's logical ufuncs cast back to i64; np.floor & co. are LLVM's
rounding intrinsics; float % is Python's (the divisor's sign, a signed zero copied from it, nan
for x % 0); an integer x % 0 is 0, as in
NumPy, and integer fmod is built on % (np.fmod would trap on x % 0 and on INT64_MIN % -1).
"""

from __future__ import annotations

import math

import numpy as np

from .registry import PRIMITIVES, Doc, define, fail, require_float, require_same
from .types import NP_DTYPES

FLOAT = "x: f32/f64"
NUMERIC = "x: f32/f64/i64"
PAIR = "x, y: equal numeric types"


def _unary_float(prim, x):
    require_float(prim, x)
    return x


def _unary_numeric(prim, x):
    if x.dtype == "bool":
        fail(prim, "needs a numeric operand, got bool", x)
    return x


def _binary(prim, x, y):
    require_same(prim, x, y)
    if x.dtype == "bool":
        fail(prim, "needs numeric operands, got bool", x, y)
    return x


def _binary_float(prim, x, y):
    require_same(prim, x, y)
    require_float(prim, x, y)
    return x


def _float_predicate(prim, x):
    require_float(prim, x)
    return x.with_dtype("bool")


def _compare(prim, x, y):
    require_same(prim, x, y)
    return x.with_dtype("bool")


def _logical(prim, x, y):
    require_same(prim, x, y)
    if x.dtype not in ("bool", "i64"):
        fail(prim, "needs bool or i64 operands", x, y)
    return x


def _not(prim, x):
    if x.dtype not in ("bool", "i64"):
        fail(prim, "needs a bool or i64 operand", x)
    return x


def unary_float(name, impl, semantics, *, domain="normal", **fields):
    """A float -> float function: exp, tanh, floor, ..."""
    return define(name, "elementwise", _unary_float, impl, section="Elementwise",
                  doc=Doc(FLOAT, "", "same as x", semantics), domain=domain, **fields)


def unary_numeric(name, impl, semantics, *, domain="normal", **fields):
    return define(name, "elementwise", _unary_numeric, impl, section="Elementwise",
                  doc=Doc(NUMERIC, "", "same as x", semantics), domain=domain, **fields)


def binary(name, impl, semantics, *, domain=("normal", "normal"), **fields):
    return define(name, "elementwise", _binary, impl, section="Elementwise",
                  doc=Doc(PAIR, "", "same as x", semantics), domain=domain, **fields)


def binary_float(name, impl, semantics, *, domain=("normal", "normal"), **fields):
    return define(name, "elementwise", _binary_float, impl, section="Elementwise",
                  doc=Doc("x, y: equal float types", "", "same as x", semantics), domain=domain,
                  **fields)


def comparison(name, impl, symbol):
    return define(name, "elementwise", _compare, impl, section="Elementwise",
                  doc=Doc("x, y: equal types", "", "bool, x's shape", f"x {symbol} y"))


# -- implementations that are not one NumPy ufunc --------------------------------------------

def _erf(x):
    """scipy's erf when available (imported lazily: it costs ~0.5 s), else math.erf."""
    x = np.asarray(x)
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is optional
        erf = np.frompyfunc(math.erf, 1, 1)
    return np.asarray(erf(x), dtype=x.dtype)


def _logistic(x):
    e = np.exp(-np.abs(x))
    return np.where(np.asarray(x) >= 0, 1, e) / (1 + e)


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _div(x, y):
    if np.asarray(x).dtype.kind in "iub" and np.asarray(y).dtype.kind in "iub":
        return np.floor_divide(x, y)
    return np.true_divide(x, y)


def _logical_impl(ufunc):
    """np.logical_and & co. in the operands' dtype: 0 or 1 for i64, as the shape rule says (the
    ufuncs return bool)."""
    def impl(*xs):
        out, dtype = ufunc(*xs), np.result_type(*xs)
        return out if dtype == np.bool_ else out.astype(dtype)
    impl.__name__ = impl.__qualname__ = ufunc.__name__
    return impl


def _convert_rule(prim, x, *, dtype):
    if dtype not in NP_DTYPES:
        fail(prim, f"unknown dtype {dtype!r}", x)
    return x.with_dtype(dtype)


def _convert(x, *, dtype):
    return np.asarray(x).astype(NP_DTYPES[dtype])


def _select_rule(prim, pred, on_true, on_false):
    if pred.dtype != "bool":
        fail(prim, "predicate must be bool", pred, on_true, on_false)
    if pred.shape != on_true.shape:
        fail(prim, "predicate and branches must have equal shapes", pred, on_true, on_false)
    require_same(prim, on_true, on_false)
    return on_true


# -- the table ------------------------------------------------------------------------------

unary_float("exp", np.exp, "e^x")
unary_float("log", np.log, "ln x", domain="positive")
unary_float("log1p", np.log1p, "ln(1 + x)", domain="positive")
unary_float("expm1", np.expm1, "e^x - 1")
unary_float("exp2", np.exp2, "2^x, exact at integers")
unary_float("log2", np.log2, "log₂ x, exact at powers of two", domain="positive")
unary_float("sqrt", np.sqrt, "√x", domain="positive")
unary_float("rsqrt", _rsqrt, "1/√x", domain="positive")
unary_float("sin", np.sin, "sine")
unary_float("cos", np.cos, "cosine")
unary_float("tanh", np.tanh, "hyperbolic tangent")
unary_float("logistic", _logistic, "sigmoid 1/(1+e^-x), computed stably")
unary_float("erf", _erf, "the error function")
unary_float("atan", np.arctan, "arc tangent")
# The inverse functions, cbrt and hypot: mathlib's vectorized forms (kernel_ir/mathlib_arc.py)
unary_float("asin", np.arcsin, "arc sine; nan outside [-1, 1]", domain="unit")
unary_float("acos", np.arccos, "arc cosine; nan outside [-1, 1]", domain="unit")
unary_float("asinh", np.arcsinh, "inverse hyperbolic sine")
unary_float("acosh", np.arccosh, "inverse hyperbolic cosine; nan below 1", domain="above_one")
unary_float("atanh", np.arctanh, "inverse hyperbolic tangent; ±inf at ±1, nan beyond",
            domain="unit")
unary_float("cbrt", np.cbrt, "cube root, odd (cbrt(-8) = -2)", domain="away_from_zero")
binary_float("atan2", np.arctan2, "`np.arctan2(x, y)`: the angle of the point (y, x), in "
             "[-π, π]")
binary_float("hypot", np.hypot, "√(x² + y²) without overflow; inf if either is inf")
define("signbit", "elementwise", _float_predicate, np.signbit, section="Elementwise",
       doc=Doc(FLOAT, "", "bool, x's shape", "the sign bit: true for x < 0, -0.0 and -nan; "
               "no gradient"))
for _name, _np, _what in (("floor", "floor", "round down"), ("ceil", "ceil", "round up"),
                          ("round", "rint", "round to nearest, ties to even (`np.rint`)"),
                          ("trunc", "trunc", "round toward zero")):
    unary_float(_name, getattr(np, _np), f"{_what}; no gradient")

unary_numeric("neg", np.negative, "-x")
unary_numeric("abs", np.abs, "\\|x\\|", domain="away_from_zero")
unary_numeric("sign", np.sign, "-1, 0 or 1 (x itself for nan)")

binary("add", np.add, "x + y")
binary("sub", np.subtract, "x - y")
binary("mul", np.multiply, "x * y")
binary("div", _div, "x / y (floor division for i64)", domain=("normal", "away_from_zero"))
binary("pow", np.power, "x ** y", domain=("positive", "normal"))
for _name, _np in (("maximum", np.maximum), ("minimum", np.minimum)):
    binary(_name, _np, f"{_name[:3]}(x, y); nan propagates", domain=("distinct", "distinct"))
binary("remainder", np.remainder, "`np.remainder` (Python's `%`: the sign of y); an i64 x % 0 "
       "is 0", domain=("normal", "away_from_zero"))
binary("fmod", np.fmod, "`np.fmod` (the sign of x); an i64 x % 0 is 0",
       domain=("normal", "away_from_zero"))

comparison("lt", np.less, "<")
comparison("le", np.less_equal, "<=")
comparison("gt", np.greater, ">")
comparison("ge", np.greater_equal, ">=")
comparison("eq", np.equal, "==")
comparison("ne", np.not_equal, "!=")

for _name, _np in (("and", np.logical_and), ("or", np.logical_or)):
    define(_name, "elementwise", _logical, _logical_impl(_np), section="Elementwise",
           doc=Doc("x, y: equal bool or i64 types", "", "same as x",
                   f"logical {_name} (np.logical_{_name}; 0 or 1 for i64)"))
define("not", "elementwise", _not, _logical_impl(np.logical_not), section="Elementwise",
       doc=Doc("x: bool or i64", "", "same as x", "logical not (0 or 1 for i64)"))
define("select", "elementwise", _select_rule, np.where, section="Elementwise",
       doc=Doc("pred: bool, on_true, on_false: equal types, pred's shape", "",
               "same as on_true", "`np.where(pred, on_true, on_false)`"))
define("convert", "elementwise", _convert_rule, _convert, section="Elementwise",
       doc=Doc("x", '`dtype`: "f32"/"f64"/"i64"/"bool"', "x's shape, `dtype`",
               "`x.astype(dtype)`"))


# -- scalar rules over the kernel IR's builder (codegen/kernel_ir/builder.py) -----------------

def _math(name):
    return lambda b, x: b.math(name, x)


def _same(method):
    return lambda b, *xs: getattr(b, method)(*xs)


def _div_rule(b, x, y):
    """x / y, or for i64 NumPy's floor division, x // 0 == 0 (the divisor made 1 first, so
    nothing traps, INT64_MIN // -1 included)."""
    if b.is_float(x):
        return b.fdiv(x, y)
    zero = b.eq(y, 0)
    minus = b.and_(b.eq(y, -1), b.eq(x, -(2 ** 63)))
    safe = b.select(b.or_(zero, minus), 1, y)
    q, r = b.sdiv(x, safe), b.srem(x, safe)
    q = b.sub(q, b.convert(b.and_(b.ne(r, 0), b.ne(b.lt(r, 0), b.lt(safe, 0))), "i64"))
    return b.select(zero, 0, b.select(minus, x, q))


def _abs_rule(b, x):
    return b.fabs(x) if b.is_float(x) else b.select(b.lt(x, 0), b.neg(x), x)


def _extremum(how):
    """The first operand if it wins or is nan (NumPy's nan propagation), else the second."""
    return lambda b, x, y: b.select(b.or_(b.cmp(how, x, y), b.ne(x, x)), x, y)


def _logical(how):
    def rule(b, x, y):
        if x.dtype == "bool":
            return getattr(b, how)(x, y)
        return b.convert(getattr(b, how)(b.ne(x, 0), b.ne(y, 0)), "i64")
    return rule


def _not_rule(b, x):
    return b.xor(x, True) if x.dtype == "bool" else b.convert(b.eq(x, 0), "i64")


def _safe_divisor(b, x, y):
    """(y with 0 and -1 made 1, y == 0): srem by it never traps; x % -1 is 0 anyway."""
    zero = b.eq(y, 0)
    return b.select(b.or_(zero, b.eq(y, -1)), 1, y), zero


def _remainder_rule(b, x, y):
    """NumPy's remainder (npy_divmod): fmod moved to y's sign; a zero takes y's sign; for
    i64 the floor modulus, x % 0 == 0."""
    if not b.is_float(x):
        safe, _ = _safe_divisor(b, x, y)
        r = b.srem(x, safe)
        return b.select(b.and_(b.ne(r, 0), b.ne(b.lt(r, 0), b.lt(safe, 0))), b.add(r, safe), r)
    m = b.libm("fmod", x, y)
    nz = b.ne(m, 0.0)                                   # true for nan too
    moved = b.and_(nz, b.ne(b.lt(y, 0.0), b.lt(m, 0.0)))
    return b.select(nz, b.select(moved, b.add(m, y), m), b.copysign(b.const(0.0, x.dtype), y))


def _fmod_rule(b, x, y):
    """C's fmod (exact, the sign of x); for i64 the truncated remainder, x % 0 == 0."""
    if b.is_float(x):
        return b.libm("fmod", x, y)
    return b.srem(x, _safe_divisor(b, x, y)[0])


def _pow_rule(b, x, y):
    """mathlib_pow.py's for floats; for i64 NumPy's: a negative exponent raises ValueError,
    else square-and-multiply over the exponent's 63 bits, wrapping as NumPy's int64 does."""
    if b.is_float(x):
        return b.math("pow", x, y)
    b.fail(b.lt(y, 0), ValueError, "Integers to negative integer powers are not allowed.")
    acc, base = b.const(1, "i64"), x
    for bit in range(63):
        acc = b.select(b.ne(b.and_(y, 1 << bit), 0), b.mul(acc, base), acc)
        base = b.mul(base, base) if bit < 62 else base
    return acc


def _sign_rule(b, x):
    """-1, 0 or 1; 0.0 for both zeros, nan for nan (np.sign)."""
    zero = b.const(0, x.dtype)
    rest = b.select(b.eq(x, zero), zero, x) if b.is_float(x) else zero
    return b.select(b.gt(x, zero), b.const(1, x.dtype),
                    b.select(b.lt(x, zero), b.const(-1, x.dtype), rest))


def _signbit_rule(b, x):
    return b.lt(b.bitcast(x, "i64" if x.dtype == "f64" else "i32"), 0)


_SCALAR = {
    "add": _same("add"), "sub": _same("sub"), "mul": _same("mul"), "div": _div_rule,
    "neg": _same("neg"), "abs": _abs_rule, "sqrt": _same("sqrt"),
    "rsqrt": lambda b, x: b.fdiv(1.0, b.sqrt(x)),
    "maximum": _extremum("ge"), "minimum": _extremum("le"),
    "remainder": _remainder_rule, "fmod": _fmod_rule, "pow": _pow_rule,
    "sign": _sign_rule, "signbit": _signbit_rule,
    "floor": _same("floor"), "round": _same("rint"),
    "ceil": lambda b, x: b.neg(b.floor(b.neg(x))),
    "trunc": lambda b, x: b.copysign(b.floor(b.fabs(x)), x),
    **{name: _math(name) for name in (
        "exp", "expm1", "exp2", "log", "log1p", "log2", "tanh", "logistic", "erf", "atan",
        "asin", "acos", "asinh", "acosh", "atanh", "cbrt")},
    "sin": lambda b, x: b.libm("sin", x), "cos": lambda b, x: b.libm("cos", x),
    "atan2": lambda b, x, y: b.math("atan2", x, y),
    "hypot": lambda b, x, y: b.math("hypot", x, y),
    "and": _logical("and_"), "or": _logical("or_"), "not": _not_rule,
    "select": lambda b, p, x, y: b.select(p, x, y),
    "convert": lambda b, x, *, dtype: b.convert(x, dtype),
    **{c: (lambda how: lambda b, x, y: b.cmp(how, x, y))(c)
       for c in ("lt", "le", "gt", "ge", "eq", "ne")},
}
for _name, _rule in _SCALAR.items():
    PRIMITIVES[_name].scalar = _rule
