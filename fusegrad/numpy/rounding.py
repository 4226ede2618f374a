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
from .elementwise import _float_dtype


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


def floor_divide(x, y):
    """x // y. Integers: the div primitive (floor division; x // 0 is 0). Floats: NumPy's own
    recipe (npy_divmod) from fmod, so that 1 // 0.1 is 9.0 as in NumPy, not floor(1 / 0.1) =
    10.0; piecewise constant, so no gradient reaches x or y except through floor's zero."""
    x, y = _numeric(x), _numeric(y)
    if _is_integer(x) and _is_integer(y):
        return lax.div(x, y)
    x, y = _common_float(x, y)
    mod = lax.fmod(x, y)
    div = lax.div(lax.sub(x, mod), y)
    fix = lax.and_(lax.ne(mod, 0.0), lax.ne(lax.lt(y, 0.0), lax.lt(mod, 0.0)))
    div = lax.select(fix, lax.sub(div, 1.0), div)
    floor_div = lax.floor(div)
    floor_div = lax.select(lax.gt(lax.sub(div, floor_div), 0.5), lax.add(floor_div, 1.0),
                           floor_div)
    quotient = lax.div(x, y)
    out = lax.select(lax.eq(div, 0.0), lax.mul(quotient, 0.0), floor_div)   # a signed zero
    return lax.select(lax.eq(y, 0.0), lax.floor(quotient), out)


def _common_float(x, y):
    dtype = _float_dtype(x, y)
    return astype(x, dtype), astype(y, dtype)


__all__ = [
    "around", "ceil", "floor", "floor_divide", "fmod", "mod", "remainder", "rint", "round",
    "trunc",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.floor: floor, np.ceil: ceil, np.trunc: trunc, np.rint: rint, np.remainder: remainder,
    np.fmod: fmod, np.round: round, np.around: around, np.floor_divide: floor_divide,
}
