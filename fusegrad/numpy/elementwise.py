"""Elementwise functions: NumPy's ufuncs on arrays, eager tensors and tracers.

Float functions (exp, tanh, ...) promote integer and bool operands to float64 as NumPy does;
on two bools add and maximum are `or`, multiply and minimum `and`.
"""

from __future__ import annotations

import math

import numpy as np

from .. import lax
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
}
UFUNC_FUNCTIONS = {ufunc: _float_unary(prim, ufunc.__name__) for ufunc, prim in FLOAT_UNARY.items()}
globals().update((ufunc.__name__, fn) for ufunc, fn in UFUNC_FUNCTIONS.items())  # exp, arctan...
exp, log, sqrt, sin, cos = (UFUNC_FUNCTIONS[u] for u in (np.exp, np.log, np.sqrt, np.sin, np.cos))
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


def exp2(x):
    return exp(multiply(x, math.log(2.0)))


def log2(x):
    return true_divide(log(x), math.log(2.0))


def log10(x):
    return true_divide(log(x), math.log(10.0))


def sinh(x):
    return multiply(subtract(exp(x), exp(negative(x))), 0.5)


def cosh(x):
    return multiply(add(exp(x), exp(negative(x))), 0.5)


def tan(x):
    return true_divide(sin(x), cos(x))




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
    """Clamp with gradient 1 inside the closed range and 0 outside, as the seed chapter."""
    _no_out(kwargs)
    a_min = min if a_min is None or a_min is np._NoValue else a_min
    a_max = max if a_max is None or a_max is np._NoValue else a_max
    if a_min is not None:
        x = where(less(x, a_min), a_min, x)
    if a_max is not None:
        x = where(greater(x, a_max), a_max, x)
    return x


def relu(x):
    return where(greater(x, 0), x, 0)


# The names fusegrad.numpy exports from here (the FLOAT_UNARY functions are added to them).
__all__ = [
    "abs", "absolute", "add", "clip", "cosh", "divide", "equal", "erf", "exp2", "float_power",
    "greater", "greater_equal", "less", "less_equal", "log10", "log2", "logical_and", "logical_not",
    "logical_or", "maximum", "minimum", "multiply", "negative", "not_equal", "positive", "power",
    "reciprocal", "relu", "rsqrt", "sigmoid", "sign", "sinh", "square", "subtract", "tan",
    "true_divide", "where",
] + [ufunc.__name__ for ufunc in FLOAT_UNARY]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    **UFUNC_FUNCTIONS,
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.true_divide: true_divide,
    np.power: power, np.maximum: maximum, np.minimum: minimum, np.negative: negative,
    np.positive: positive, np.absolute: absolute, np.sign: sign, np.tan: tan, np.sinh: sinh,
    np.cosh: cosh, np.exp2: exp2, np.log2: log2, np.log10: log10, np.square: square,
    np.reciprocal: reciprocal, np.less: less, np.less_equal: less_equal, np.greater: greater,
    np.greater_equal: greater_equal, np.equal: equal, np.not_equal: not_equal,
    np.logical_and: logical_and, np.logical_or: logical_or, np.logical_not: logical_not,
    np.float_power: float_power, np.where: where, np.clip: clip,
}
