"""Elementwise functions: NumPy's ufuncs on arrays, eager tensors and tracers.

Float functions (exp, tanh, ...) promote integer and bool operands to float64 as NumPy does;
on two bools add and maximum are `or`, multiply and minimum `and`.

One primitive each: the FLOAT_UNARY table (arcsin, arccos, arctan, arcsinh, arccosh, arctanh,
cbrt, exp2, log2, ...), arctan2, hypot, signbit. Compositions, computed as NumPy computes them so that
eager and interp give NumPy's bits: sinc (sin(pi x)/(pi x)), logaddexp (max + log1p(exp(-|d|)),
equal infinities giving themselves), deg2rad & co. (x times NumPy's constant, rounded in
float32 for float32), copysign and fabs, fmax/fmin, heaviside, nan_to_num, isnan/isinf/
isfinite, clip, logaddexp2 (max + log1p(2**-|d|) / ln 2).

Kinks and conventions (as PyTorch or JAX):
    clip: g to x inside the closed range; g to a bound where it is active (x strictly past
        it, or the bound nan); a_max wins where a_min > a_max, as NumPy's value
    fmax/fmin: the gradient follows the value, ties to x1 (PyTorch's fmax), unlike maximum's
        even split; nan operands lose to numbers
    logaddexp: smooth at ties (gradient 1/2 each, Hessian 1/4 [[1, -1], [-1, 1]]); at equal
        infinities the value is that infinity and the gradient 1/2 each
    sinc: 1 - (pi x)**2/6 (1 - (pi x)**2/20) at exactly 0, so its derivatives there are
        right to order 5 (0, -pi**2/3, ...)
    copysign: +-g, also at x1 = 0 (JAX's; PyTorch's is 0 there); none to x2
    heaviside, signbit, isnan & co.: no gradient to x1; heaviside's x2 gets g where x1 == 0
    hypot: 0 at the origin; atan2: nan at the origin (PyTorch and JAX)
"""

from __future__ import annotations

import math

import numpy as np

from .. import lax
from ..dispatch import level
from .base import _as_bool, _dtype, _is_bool, _is_float, _no_out, astype


def _float_unary(prim, name=None):
    op = getattr(lax, prim)

    def fn(x):
        return op(x if _is_float(x) else lax.convert(x, "f64"))
    fn.__name__ = fn.__qualname__ = name or prim
    fn.prim = prim
    return fn


# NumPy's float functions that are one primitive each: this part of the dispatch table makes
# both fusegrad.numpy's function (named as the ufunc) and its HANDLED_UFUNCS entry.
FLOAT_UNARY = {
    np.exp: "exp", np.log: "log", np.log1p: "log1p", np.expm1: "expm1", np.sqrt: "sqrt",
    np.sin: "sin", np.cos: "cos", np.tanh: "tanh", np.arctan: "atan",
    np.arcsin: "asin", np.arccos: "acos", np.arcsinh: "asinh", np.arccosh: "acosh",
    np.arctanh: "atanh", np.cbrt: "cbrt", np.exp2: "exp2", np.log2: "log2",
}
UFUNC_FUNCTIONS = {ufunc: _float_unary(prim, ufunc.__name__) for ufunc, prim in FLOAT_UNARY.items()}
globals().update((ufunc.__name__, fn) for ufunc, fn in UFUNC_FUNCTIONS.items())  # exp, arctan...
exp, log, sqrt, sin, cos = (UFUNC_FUNCTIONS[u] for u in (np.exp, np.log, np.sqrt, np.sin, np.cos))
log1p = UFUNC_FUNCTIONS[np.log1p]
asin, acos, atan, asinh, acosh, atanh = (UFUNC_FUNCTIONS[u] for u in (  # NumPy 2's names
    np.arcsin, np.arccos, np.arctan, np.arcsinh, np.arccosh, np.arctanh))
erf = _float_unary("erf")
sigmoid = _float_unary("logistic")
rsqrt = _float_unary("rsqrt")
negative, absolute, sign = lax.neg, lax.abs, lax.sign
abs = absolute
subtract = lax.sub
less, less_equal, greater, greater_equal = lax.lt, lax.le, lax.gt, lax.ge
equal, not_equal = lax.eq, lax.ne


def positive(x):
    return x




def _both_bool(x, y) -> bool:
    return _is_bool(x) and _is_bool(y)


def _bool_as(logical, numeric):
    """On two bools NumPy's add/maximum are `or` and multiply/minimum are `and`."""
    def fn(x, y):
        return logical(x, y) if _both_bool(x, y) else numeric(x, y)
    fn.__name__ = numeric.__name__
    return fn


def true_divide(x, y):
    if _dtype(x).kind != "f" and _dtype(y).kind != "f":
        x = lax.convert(x, "f64")
    return lax.div(x, y)


divide = true_divide


def power(x, y):
    return lax.pow(x, y)


def float_power(x, y):
    return lax.pow(astype(x, np.float64), y)


def square(x):
    return lax.mul(x, x)


def reciprocal(x):
    return true_divide(1.0, x)


def log10(x):
    return true_divide(log(x), math.log(10.0))


def sinh(x):
    return multiply(subtract(exp(x), exp(negative(x))), 0.5)


def cosh(x):
    return multiply(add(exp(x), exp(negative(x))), 0.5)


def tan(x):
    return true_divide(sin(x), cos(x))




def _as_float(x):
    return x if _is_float(x) else lax.convert(x, "f64")


def _float_pair(x, y):
    """The operands of a float ufunc of two: ints and bools promote to float64 as in NumPy."""
    return (x, y) if _is_float(x) or _is_float(y) else (lax.convert(x, "f64"), y)


_WEAK = {"f": 0.0, "i": 0, "u": 0, "b": False}


def _float_dtype(*xs) -> np.dtype:
    """NumPy's result dtype for a float function of xs (Python scalars and weak traced values
    weak, ints and bools to float64), for compositions whose result is not one primitive's."""
    def standin(x):
        if type(x) in (bool, int, float):
            return x
        return _WEAK[_dtype(x).kind] if getattr(x, "weak", False) else _dtype(x)
    dtype = np.result_type(*[standin(x) for x in xs])
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def isnan(x):
    return lax.ne(x, x)


def isinf(x):
    return lax.eq(lax.abs(x), np.inf) if _is_float(x) else lax.ne(x, x)


def isfinite(x):
    return lax.lt(lax.abs(x), np.inf) if _is_float(x) else lax.eq(x, x)


def arctan2(x1, x2):
    return lax.atan2(*_float_pair(x1, x2))


atan2 = arctan2


def hypot(x1, x2):
    return lax.hypot(*_float_pair(x1, x2))


def signbit(x):
    return lax.signbit(_as_float(x))


def fabs(x):
    return lax.abs(_as_float(x))


def copysign(x1, x2):
    """x1 with x2's sign bit, exactly (signed zeros, nan). The gradient is ±g, also at
    x1 = 0 (JAX's; PyTorch's is 0 there); none reaches x2."""
    x1 = astype(x1, _float_dtype(x1, x2))
    flip = lax.ne(lax.signbit(x1), signbit(x2))
    return lax.select(flip, lax.neg(x1), x1)


def heaviside(x1, x2):
    """0 below 0, x2 at 0, 1 above, nan for nan. No gradient to x1; x2 gets g where x1 == 0."""
    t = _float_dtype(x1, x2).type
    step = where(greater(x1, 0), t(1), where(less(x1, 0), t(0), t(np.nan)))
    return where(equal(x1, 0), astype(x2, t), step)


def fmax(x1, x2):
    """max ignoring nan: x1 where x1 >= x2 or x2 is nan, else x2, as NumPy; the gradient
    follows the value (ties to x1, as PyTorch's fmax), not maximum's even split."""
    return where(_wins(greater_equal, x1, x2), x1, x2)


def fmin(x1, x2):
    return where(_wins(less_equal, x1, x2), x1, x2)


def _wins(beats, x1, x2):
    return logical_or(beats(x1, x2), isnan(x2)) if _is_float(x2) else beats(x1, x2)


def logaddexp(x1, x2):
    """log(exp(x1) + exp(x2)) as NumPy computes it, max + log1p(exp(-|x1 - x2|)) (the same
    bits); equal infinities give themselves, their gradient split evenly."""
    return _logaddexp(x1, x2, lambda d: log1p(exp(d)))


def logaddexp2(x1, x2):
    """log2(2**x1 + 2**x2): max + log1p(2**-|x1 - x2|) / ln 2."""
    return _logaddexp(x1, x2, lambda d: multiply(log1p(exp2(d)), 1 / math.log(2.0)))


def _logaddexp(x1, x2, softplus):
    """max + softplus(-|d|) written as the branch x1 + softplus(-d) where x1 >= x2, else
    x2 + softplus(d): NumPy's bits, and each branch is the smooth function itself, so every
    derivative is right at a tie too (max and abs would give their kinks' conventions: a zero
    Hessian). Equal infinities give their mean, d = 0 there so that no derivative meets inf -
    inf (the double-where pattern)."""
    x1, x2 = _float_pair(x1, x2)
    same_inf = logical_and(equal(x1, x2), isinf(x1))
    d = where(same_inf, 0.0, subtract(x1, x2))
    first = greater_equal(d, 0.0)
    lse = add(where(first, x1, x2), softplus(where(first, negative(d), d)))
    return where(same_inf, multiply(add(x1, x2), 0.5), lse)


def sinc(x):
    """sin(pi x) / (pi x) as NumPy computes it, and 1 at 0 through 1 - (pi x)**2/6 (1 - (pi
    x)**2/20), so that the derivatives at 0 are right too (0, -pi**2/3, ...)."""
    x = _as_float(x)
    zero = equal(x, 0)
    y = multiply(where(zero, 1.0, x), math.pi)      # safe at 0 (the double-where pattern)
    t = square(multiply(x, math.pi))
    near = subtract(1.0, multiply(true_divide(t, 6.0), subtract(1.0, true_divide(t, 20.0))))
    return where(zero, near, true_divide(sin(y), y))


def _scaled(x, f64, f32):
    """x times a constant, as NumPy's deg2rad & co. round it: in float32 their constant is
    computed in float32 (180f / pi_f), not rounded from float64."""
    x = _as_float(x)
    return multiply(x, f32 if _dtype(x) == np.float32 else f64)


_PI32, _D180 = np.float32(np.pi), np.float32(180.0)


def deg2rad(x):
    return _scaled(x, math.pi / 180.0, float(_PI32 / _D180))


def rad2deg(x):
    return _scaled(x, 180.0 / math.pi, float(_D180 / _PI32))


radians, degrees = deg2rad, rad2deg


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """nan, inf and -inf replaced (by default with 0 and the largest finite values); the
    gradient is g where x is finite and reaches array replacement values where used."""
    if not copy:
        raise TypeError("fusegrad's nan_to_num does not support copy=False (in place); use the "
                        "returned value")
    dtype = _dtype(x)
    if dtype.kind != "f":
        return astype(x, dtype)         # a copy, as NumPy
    info = np.finfo(dtype)
    fill = [info.max if posinf is None else posinf, info.min if neginf is None else neginf, nan]
    fill = [v if type(v) in (bool, int, float) else astype(v, dtype) for v in fill]
    y = where(isnan(x), fill[2], x)
    y = where(equal(x, np.inf), fill[0], y)
    return where(equal(x, -np.inf), fill[1], y)


def logical_and(x, y):
    return lax.and_(_as_bool(x), _as_bool(y))


def logical_or(x, y):
    return lax.or_(_as_bool(x), _as_bool(y))


def logical_not(x):
    return lax.not_(_as_bool(x))


add, maximum = _bool_as(lax.or_, lax.add), _bool_as(lax.or_, lax.maximum)
multiply, minimum = _bool_as(lax.and_, lax.mul), _bool_as(lax.and_, lax.minimum)


def where(condition, x, y):
    return lax.select(_as_bool(condition), x, y)


def clip(x, a_min=None, a_max=None, *, min=None, max=None, **kwargs):  # noqa: A002
    """NumPy's min(max(x, a_min), a_max), nan from x or a bound propagating; bounds may be
    arrays, tensors or tracers (broadcast with x). The gradient is g for x inside the closed
    range, and g for a bound where it is active (x strictly beyond it, or the bound nan): where
    a_min > a_max, a_max. So PyTorch's clamp and JAX's clip with array bounds."""
    _no_out(kwargs)
    a_min = min if a_min is None or a_min is np._NoValue else a_min
    a_max = max if a_max is None or a_max is np._NoValue else a_max
    a_min, a_max = (np.asarray(b) if isinstance(b, (list, tuple)) else b for b in (a_min, a_max))
    if a_min is not None:
        x = where(_beyond(less, x, a_min), a_min, x)
    if a_max is not None:
        x = where(_beyond(greater, x, a_max), a_max, x)
    return x


def _beyond(past, x, bound):
    """Where clip takes the bound: x past it, or the bound nan (a constant one is known)."""
    if not level(bound) and np.ndim(bound) == 0:
        return True if np.isnan(bound) else past(x, bound)
    return logical_or(past(x, bound), isnan(bound)) if _is_float(bound) else past(x, bound)


def relu(x):
    return where(greater(x, 0), x, 0)


# The names fusegrad.numpy exports from here (the FLOAT_UNARY functions are added to them).
__all__ = [
    "abs", "absolute", "add", "clip", "cosh", "divide", "equal", "erf", "exp2", "float_power",
    "greater", "greater_equal", "less", "less_equal", "log10", "log2", "logical_and", "logical_not",
    "logical_or", "maximum", "minimum", "multiply", "negative", "not_equal", "positive", "power",
    "reciprocal", "relu", "rsqrt", "sigmoid", "sign", "sinh", "square", "subtract", "tan",
    "true_divide", "where",
    # elementwise breadth (issue 14), and NumPy 2's short names of the inverse functions
    "acos", "acosh", "arctan2", "asin", "asinh", "atan", "atan2", "atanh", "copysign",
    "deg2rad", "degrees", "fabs", "fmax", "fmin", "heaviside", "hypot", "isfinite", "isinf",
    "isnan", "logaddexp", "logaddexp2", "nan_to_num", "rad2deg", "radians", "signbit", "sinc",
] + [ufunc.__name__ for ufunc in FLOAT_UNARY]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    **UFUNC_FUNCTIONS,
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.true_divide: true_divide,
    np.power: power, np.maximum: maximum, np.minimum: minimum, np.negative: negative,
    np.positive: positive, np.absolute: absolute, np.sign: sign, np.tan: tan, np.sinh: sinh,
    np.cosh: cosh, np.log10: log10, np.square: square,
    np.reciprocal: reciprocal, np.less: less, np.less_equal: less_equal, np.greater: greater,
    np.greater_equal: greater_equal, np.equal: equal, np.not_equal: not_equal,
    np.logical_and: logical_and, np.logical_or: logical_or, np.logical_not: logical_not,
    np.float_power: float_power, np.where: where, np.clip: clip,
    # elementwise breadth (issue 14)
    np.arctan2: arctan2, np.hypot: hypot, np.signbit: signbit, np.fabs: fabs,
    np.copysign: copysign, np.heaviside: heaviside, np.fmax: fmax, np.fmin: fmin,
    np.logaddexp: logaddexp, np.logaddexp2: logaddexp2, np.sinc: sinc, np.deg2rad: deg2rad,
    np.rad2deg: rad2deg, np.radians: radians, np.degrees: degrees, np.nan_to_num: nan_to_num,
    np.isnan: isnan, np.isinf: isinf, np.isfinite: isfinite,
}
