"""Special functions: the VJP rules of ir/special.py's primitives.

Each derivative is another member of the family, so every order differentiates again:
lgamma' = digamma (polygamma 0), gamma' = Γ ψ, polygamma n' = polygamma n+1, erfc' =
-2/√π e^-x², erfinv' = √π/2 e^(erfinv(x)²) and erfcinv' = -√π/2 e^(erfcinv(x)²) (both through
the output), log_ndtr' = φ(x)/Φ(x) = exp(log φ(x) - log Φ(x)) (through the output, so finite
far in the left tail), I₀' = I₁, I₁' = I₀ - I₁/x (1/2 at x = 0), and for the scaled
functions i0e' = i1e - sign(x) i0e, i1e' = i0e - i1e (sign(x) + 1/x) (1/2 at x = 0; the kink
of e^-|x| at 0 gets sign(0) = 0, as abs does).

The host primitives have no fusegrad.lax function (lax makes them for elementwise ones only),
so the rules bind them by name.
"""

from __future__ import annotations

import math

from .. import lax
from ..dispatch import bind
from .table import _vjp

_SQRT_PI_2 = math.sqrt(math.pi) / 2
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _polygamma(x, n):
    return bind("polygamma", x, n=n)


def _at_zero(x, value, elsewhere):
    """`value` where x == 0, else elsewhere(x with its zeros replaced by 1): the double-where
    pattern, so a derivative of the masked branch never meets 0/0."""
    zero = lax.eq(x, 0)
    return lax.select(zero, value, elsewhere(lax.select(zero, 1.0, x)))


@_vjp("lgamma", "LgammaBackward", reads="x")
def lgamma(g, out, x):
    return (g * _polygamma(x, 0),)


@_vjp("gamma", "GammaBackward", reads="out x")
def gamma(g, out, x):
    return (g * out * _polygamma(x, 0),)


@_vjp("polygamma", "PolygammaBackward", reads="x")
def polygamma(g, out, x, *, n):
    return (g * _polygamma(x, n + 1),)


@_vjp("erfc", "ErfcBackward", reads="x")
def erfc(g, out, x):
    return (g * (-1 / _SQRT_PI_2) * lax.exp(-x * x),)


@_vjp("erfinv", "ErfinvBackward", reads="out")
def erfinv(g, out, x):
    return (g * _SQRT_PI_2 * lax.exp(out * out),)


@_vjp("erfcinv", "ErfcinvBackward", reads="out")
def erfcinv(g, out, x):
    return (g * -_SQRT_PI_2 * lax.exp(out * out),)


@_vjp("log_ndtr", "LogNdtrBackward", reads="out x")
def log_ndtr(g, out, x):
    return (g * _INV_SQRT_2PI * lax.exp(-0.5 * x * x - out),)


@_vjp("i0", "I0Backward", reads="x")
def i0(g, out, x):
    return (g * bind("i1", x),)


@_vjp("i1", "I1Backward", reads="out x")
def i1(g, out, x):
    return (g * _at_zero(x, 0.5, lambda safe: bind("i0", x) - out / safe),)


@_vjp("i0e", "I0eBackward", reads="out x")
def i0e(g, out, x):
    return (g * (bind("i1e", x) - lax.sign(x) * out),)


@_vjp("i1e", "I1eBackward", reads="out x")
def i1e(g, out, x):
    return (g * _at_zero(x, 0.5, lambda safe: bind("i0e", x) - out * (lax.sign(x) + 1 / safe)),)
