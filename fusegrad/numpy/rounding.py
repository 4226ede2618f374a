"""NumPy's rounding and modular arithmetic on arrays, eager tensors and tracers: floor, ceil,
trunc, rint, round (around), remainder (mod, the % operator) and fmod.

On floats each is one primitive (floor, ceil, round, trunc, remainder, fmod), so every backend
rounds exactly as NumPy does; their derivatives are in fusegrad/formulas/. NumPy 2 returns integers
unchanged from floor, ceil, trunc and round (rint makes them float64), so integer input never
reaches a rounding primitive. remainder takes the divisor's sign and fmod the dividend's, and an
integer x % 0 is 0, as in NumPy.
"""

from __future__ import annotations

import numpy as np

from .. import lax
from .base import _dtype, _no_out, _numeric, astype


def _is_integer(x) -> bool:
    return _dtype(x).kind in "iub"


def _rounding(prim):
    op = getattr(lax, prim)

    def fn(x, **kwargs):
        _no_out(kwargs)
        return x if _is_integer(x) else op(x)
    fn.__name__ = prim
    return fn


floor, ceil, trunc = map(_rounding, ("floor", "ceil", "trunc"))


def rint(x, **kwargs):
    _no_out(kwargs)
    return lax.round(astype(x, np.float64) if _is_integer(x) else x)


def round(x, decimals=0, out=None):  # noqa: A001 - NumPy's name
    """Ties to even. With decimals, NumPy's own recipe: rint(x * 10**d) / 10**d, or for d < 0
    rint(x / 10**-d) * 10**-d, in x's dtype (integers in float64, then back)."""
    _no_out({"out": out})
    decimals = int(decimals)
    if _is_integer(x):
        if decimals >= 0:
            return x
        return astype(round(astype(x, np.float64), decimals), _dtype(x))
    if decimals > 0:
        return lax.div(lax.round(lax.mul(x, 10.0 ** decimals)), 10.0 ** decimals)
    if decimals < 0:
        return lax.mul(lax.round(lax.div(x, 10.0 ** -decimals)), 10.0 ** -decimals)
    return lax.round(x)


around = round


def remainder(x, y):
    return lax.remainder(_numeric(x), _numeric(y))


def fmod(x, y):
    return lax.fmod(_numeric(x), _numeric(y))


mod = remainder


__all__ = [
    "around", "ceil", "floor", "fmod", "mod", "remainder", "rint", "round", "trunc",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.floor: floor, np.ceil: ceil, np.trunc: trunc, np.rint: rint, np.remainder: remainder,
    np.fmod: fmod, np.round: round, np.around: around,
}
