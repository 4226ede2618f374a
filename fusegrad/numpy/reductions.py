"""Reductions: sum, prod, max, min, mean, var, std, norm, argmax, argmin, cumsum, logsumexp.

axis=None, negative and tuple axes and keepdims are normalized here; the primitives take sorted
non-negative axes. Sums of bools count (int64), as in NumPy.
"""

from __future__ import annotations

import builtins

import numpy as np

from .. import lax
from .base import _axes, _dtype, _is_float, _keep, _ndim, _no_out, _numeric, _shape, astype
from .elementwise import equal, greater, sqrt, square, subtract, true_divide, where
from .shapes import reshape


def _reduce(op, keeps_bool=False):
    def fn(x, axis=None, keepdims=False, dtype=None, **kwargs):
        _no_out(kwargs)
        x = x if dtype is None else astype(x, dtype)
        was_bool = keeps_bool and _dtype(x) == np.bool_
        x = _numeric(x)
        axes = _axes(axis, _ndim(x))
        y = _keep(op(x, axes), _shape(x), axes, keepdims)
        return lax.convert(y, "bool") if was_bool else y    # max/min of bools are bools
    return fn






sum = _reduce(lax.reduce_sum)
prod = _reduce(lax.reduce_prod)
max = amax = _reduce(lax.reduce_max, keeps_bool=True)
min = amin = _reduce(lax.reduce_min, keeps_bool=True)


def _count(x, axes) -> int:
    return int(np.prod([_shape(x)[a] for a in axes], dtype=np.int64))


def mean(x, axis=None, keepdims=False, dtype=None, **kwargs):
    if dtype is None and not _is_float(x):
        dtype = np.float64
    x = x if dtype is None else astype(x, dtype)
    axes = _axes(axis, _ndim(x))
    return true_divide(sum(x, axes, keepdims, **kwargs), float(_count(x, axes)))


def var(x, axis=None, keepdims=False, ddof=0, dtype=None, **kwargs):
    centered = subtract(x, mean(x, axis, True, dtype, **kwargs))
    axes = _axes(axis, _ndim(x))
    count = builtins.max(_count(x, axes) - ddof, 0)     # NumPy's: ddof >= n divides by 0
    return true_divide(sum(square(centered), axes, keepdims), float(count))


def std(x, axis=None, keepdims=False, ddof=0, dtype=None, **kwargs):
    """sqrt(var). Where var is 0 (a constant slice, a 0-d x) the gradient is 0, as PyTorch's,
    not 0 * inf = nan: sqrt only sees the safe branch (as in norm)."""
    v = var(x, axis, keepdims, ddof, dtype, **kwargs)
    zero = equal(v, 0)
    return where(zero, 0.0, sqrt(where(zero, 1.0, v)))


def norm(x, ord=None, axis=None, keepdims=False):
    """The 2-norm. Its gradient at 0 is 0 (not nan): sqrt only sees the safe branch."""
    if ord not in (None, 2, "fro"):
        raise NotImplementedError(f"fusegrad supports the 2-norm only, not ord={ord!r}")
    squares = sum(square(x), axis, keepdims)
    positive = greater(squares, 0)
    return where(positive, sqrt(where(positive, squares, 1)), 0)


def _arg_reduce(op):
    def fn(x, axis=None, keepdims=False, **kwargs):
        _no_out(kwargs)
        if axis is None:
            y = op(reshape(x, (-1,)), 0)
            return reshape(y, (1,) * _ndim(x)) if keepdims else y
        (axis,) = _axes(axis, _ndim(x))
        return _keep(op(x, axis), _shape(x), (axis,), keepdims)
    return fn


argmax = _arg_reduce(lax.argmax)
argmin = _arg_reduce(lax.argmin)


def cumsum(x, axis=None, dtype=None, **kwargs):
    _no_out(kwargs)
    x = _numeric(x if dtype is None else astype(x, dtype))
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    (axis,) = _axes(axis, _ndim(x))
    return lax.cumsum(x, axis)


def logsumexp(x, axis=None, keepdims=False):
    axes = _axes(axis, _ndim(x))
    return _keep(lax.logsumexp(x, axes), _shape(x), axes, keepdims)


__all__ = [
    "amax", "amin", "argmax", "argmin", "cumsum", "logsumexp", "max", "mean", "min", "norm", "prod",
    "std", "sum", "var",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.sum: sum, np.prod: prod, np.max: max, np.amax: max, np.min: min, np.amin: min, np.mean: mean,
    np.var: var, np.std: std, np.argmax: argmax, np.argmin: argmin, np.cumsum: cumsum,
    np.linalg.norm: norm,
}
