"""Elementwise primitives: unary and binary (cotangents in the broadcast shape; the driver
un-broadcasts)."""

from __future__ import annotations

import math

from .. import lax
from .table import _vjp


@_vjp("neg", "NegBackward", reads="")
def neg(g, out, x):
    return (-g,)


@_vjp("abs", "AbsBackward", reads="x")
def abs(g, out, x):
    return (g * lax.sign(x),)


@_vjp("exp", "ExpBackward", reads="out")
def exp(g, out, x):
    return (g * out,)


@_vjp("expm1", "Expm1Backward", reads="out")
def expm1(g, out, x):
    return (g * (out + 1),)


@_vjp("exp2", "Exp2Backward", reads="out")
def exp2(g, out, x):
    return (g * out * math.log(2.0),)


@_vjp("log2", "Log2Backward", reads="x")
def log2(g, out, x):
    return (g / (x * math.log(2.0)),)


@_vjp("log", "LogBackward", reads="x")
def log(g, out, x):
    return (g / x,)


@_vjp("log1p", "Log1pBackward", reads="x")
def log1p(g, out, x):
    return (g / (x + 1),)


@_vjp("sqrt", "SqrtBackward", reads="out")
def sqrt(g, out, x):
    return (g / (2 * out),)


@_vjp("rsqrt", "RsqrtBackward", reads="out x")
def rsqrt(g, out, x):
    return (-0.5 * g * out / x,)


@_vjp("sin", "SinBackward", reads="x")
def sin(g, out, x):
    return (g * lax.cos(x),)


@_vjp("cos", "CosBackward", reads="x")
def cos(g, out, x):
    return (-g * lax.sin(x),)


@_vjp("tanh", "TanhBackward", reads="out")
def tanh(g, out, x):
    return (g * (1 - out * out),)


@_vjp("logistic", "SigmoidBackward", reads="out")
def logistic(g, out, x):
    return (g * out * (1 - out),)


@_vjp("erf", "ErfBackward", reads="x")
def erf(g, out, x):
    return (g * (2 / math.sqrt(math.pi)) * lax.exp(-x * x),)


@_vjp("atan", "AtanBackward", reads="x")
def atan(g, out, x):
    return (g / (1 + x * x),)


# The inverse functions as JAX writes them, with 1 - x**2 as (1 - x)(1 + x), exact near ±1.
@_vjp("asin", "AsinBackward", reads="x")
def asin(g, out, x):
    return (g * lax.rsqrt((1 - x) * (1 + x)),)


@_vjp("acos", "AcosBackward", reads="x")
def acos(g, out, x):
    return (-g * lax.rsqrt((1 - x) * (1 + x)),)


@_vjp("asinh", "AsinhBackward", reads="x")
def asinh(g, out, x):
    return (g * lax.rsqrt(x * x + 1),)


@_vjp("acosh", "AcoshBackward", reads="x")
def acosh(g, out, x):
    return (g * lax.rsqrt((x - 1) * (x + 1)),)


@_vjp("atanh", "AtanhBackward", reads="x")
def atanh(g, out, x):
    return (g / ((1 - x) * (1 + x)),)


@_vjp("cbrt", "CbrtBackward", reads="out")
def cbrt(g, out, x):
    return (g / (3 * out * out),)   # inf at 0, as the derivative


# ---------------------------------------------------------------------------------------------
# Elementwise: binary (results in the broadcast shape; the driver un-broadcasts).

@_vjp("add", "AddBackward", reads="")
def add(g, out, x, y):
    return g, g


@_vjp("sub", "SubBackward", reads="")
def sub(g, out, x, y):
    return g, -g


@_vjp("mul", "MulBackward", reads="x y")
def mul(g, out, x, y):
    return g * y, g * x


@_vjp("div", "DivBackward", reads="out y")
def div(g, out, x, y):
    return g / y, -g * out / y


def _pow_base(x, y):
    """d(x**y)/dx = y * x**(y-1), forced to 0 where x == y == 0 (0 * 0**-1 would be nan).

    Only there: elsewhere y * x**(y-1) is 0 at y == 0 by itself, and its own derivative in y,
    x**(y-1) (1 + y log x), is 1/x there, which a wider mask would make 0. The masked branch
    is computed at a safe exponent too (the double-where pattern), so that differentiating
    this rule again does not meet the where-trap (0 * inf) at x == 0."""
    zero = lax.and_(lax.eq(y, 0), lax.eq(x, 0))
    return lax.select(zero, 0.0, y * lax.pow(x, lax.select(zero, 1.0, y - 1)))


def _pow_exponent(out, x):
    """d(x**y)/dy = x**y * log(x), forced to 0 where x == 0 (0 * log 0 would be nan)."""
    zero = lax.eq(x, 0)
    return lax.select(zero, 0.0, out * lax.log(lax.select(zero, 1.0, x)))


@_vjp("pow", "PowBackward", reads="out x y")
def pow(g, out, x, y):
    return g * _pow_base(x, y), g * _pow_exponent(out, x)


def _share(g, mine, theirs):
    """g where only this operand is the result, g/2 where both are (a tie), 0 elsewhere."""
    return lax.select(mine, lax.select(theirs, 0.5 * g, g), 0.0)


def _is_result(x, y, beats):
    """Whether x is max(x, y) (beats=ge) or min (le): it wins or ties, or is nan."""
    return lax.or_(beats(x, y), lax.ne(x, x))


@_vjp("maximum", "MaximumBackward", reads="x y")
def maximum(g, out, x, y):
    xr, yr = _is_result(x, y, lax.ge), _is_result(y, x, lax.ge)
    return _share(g, xr, yr), _share(g, yr, xr)


@_vjp("minimum", "MinimumBackward", reads="x y")
def minimum(g, out, x, y):
    xr, yr = _is_result(x, y, lax.le), _is_result(y, x, lax.le)
    return _share(g, xr, yr), _share(g, yr, xr)


@_vjp("atan2", "Atan2Backward", reads="x y")
def atan2(g, out, x, y):
    """out = atan2(x, y), the angle of (y, x): y / r**2 and -x / r**2 (nan at the origin, as
    PyTorch and JAX)."""
    s = g / (x * x + y * y)
    return s * y, -s * x


@_vjp("hypot", "HypotBackward", reads="out x y")
def hypot(g, out, x, y):
    """x / out and y / out; 0 at the origin (as a norm's gradient there), where x = y = 0 and
    the denominator is made 1 (the double-where pattern keeps the second derivative finite)."""
    s = g / lax.select(lax.eq(out, 0), 1.0, out)
    return s * x, s * y


@_vjp("remainder", "RemainderBackward", reads="x y")
def remainder(g, out, x, y):
    return g, -g * lax.floor(x / y)


@_vjp("fmod", "FmodBackward", reads="x y")
def fmod(g, out, x, y):
    return g, -g * lax.trunc(x / y)


@_vjp("select", "WhereBackward", reads="pred")
def select(g, out, pred, on_true, on_false):
    return None, lax.select(pred, g, 0.0), lax.select(pred, 0.0, g)


@_vjp("convert", "ToBackward", reads="")
def convert(g, out, x, *, dtype):
    return (g,)  # the driver casts back to x's dtype
