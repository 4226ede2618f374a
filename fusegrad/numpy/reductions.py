"""Reductions: sum, prod, max, min, mean, var, std, argmax, argmin, cumsum, logsumexp.

axis=None, negative and tuple axes and keepdims are normalized here; the primitives take sorted
non-negative axes. Sums of bools count (int64), as in NumPy.

cumprod is the cumprod primitive, np.cumprod itself (NumPy's running product from the left,
bit for bit; compiled code calls it between kernels), whose gradient has no division, so it is
exact where elements are 0 (formulas/reductions.py). diff and ediff1d are differences of two
slices.
"""

from __future__ import annotations

import builtins

import numpy as np

from .. import lax
from ..dispatch import bind, level
from .base import _axes, _dtype, _is_float, _keep, _ndim, _no_out, _numeric, _shape, astype
from .elementwise import equal, not_equal, sqrt, square, subtract, true_divide, where
from .shapes import _axis_slice, broadcast_to, concatenate, ravel, reshape


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
    not 0 * inf = nan: sqrt only sees the safe branch (as in linalg.norm)."""
    v = var(x, axis, keepdims, ddof, dtype, **kwargs)
    zero = equal(v, 0)
    return where(zero, 0.0, sqrt(where(zero, 1.0, v)))


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


def cumprod(x, axis=None, dtype=None, **kwargs):
    """np.cumprod's own products, bit for bit; gradients exact at zeros."""
    _no_out(kwargs)
    x = _numeric(x if dtype is None else astype(x, dtype))
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    (axis,) = _axes(axis, _ndim(x))
    return bind("cumprod", x, axis=axis)


def _cumulative(scan, identity):
    """NumPy 2's cumulative_sum / cumulative_prod: axis required above 1-D, and with
    include_initial the identity first."""
    def fn(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        _no_out({"out": out})
        if axis is None and _ndim(x) > 1:
            raise ValueError("For arrays which have more than one dimension ``axis`` argument "
                             "is required.")
        y = scan(x, 0 if axis is None else axis, dtype)
        if not include_initial:
            return y
        (axis,) = _axes(0 if axis is None else axis, _ndim(y))
        shape = list(_shape(y))
        shape[axis] = 1
        return concatenate([lax.full(shape, identity, _dtype(y)), y], axis)
    fn.__name__ = fn.__qualname__ = f"cumulative_{scan.__name__[3:]}"
    return fn


def _edge(value, like, axis):
    """diff's prepend/append: a scalar is broadcast to one slice of `like` along axis."""
    if _ndim(value) != 0:
        return value
    shape = list(_shape(like))
    shape[axis] = 1
    return broadcast_to(value if level(value) else np.asarray(value), shape)


def _differences(a, axis, op=subtract):
    """a[1:] - a[:-1] along axis (empty where a is)."""
    size = _shape(a)[axis]
    return op(_axis_slice(a, axis, builtins.min(1, size), size),
              _axis_slice(a, axis, 0, builtins.max(size - 1, 0)))


def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    """a[1:] - a[:-1] along axis, n times (not_equal for bools), after prepend and append."""
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if n == 0:
        return a
    if _ndim(a) == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    (axis,) = _axes(axis, _ndim(a))
    pieces = [_edge(prepend, a, axis)] if prepend is not np._NoValue else []
    pieces += [a] + ([_edge(append, a, axis)] if append is not np._NoValue else [])
    if len(pieces) > 1:
        a = concatenate(pieces, axis)
    for _ in range(n):
        a = _differences(a, axis, not_equal if _dtype(a) == np.bool_ else subtract)
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    ary = ravel(ary)
    dtype, pieces = _dtype(ary), [_differences(ary, 0)]
    for value, name in ((to_begin, "to_begin"), (to_end, "to_end")):
        if value is None:
            continue
        if not np.can_cast(_dtype(value), dtype, casting="same_kind"):
            raise TypeError(f"dtype of `{name}` must be compatible with input `ary` under the "
                            f"`same_kind` rule.")
        value = ravel(value if level(value) else np.asarray(value))
        value = value if _dtype(value) == dtype else astype(value, dtype)
        pieces.insert(0 if name == "to_begin" else len(pieces), value)
    return concatenate(pieces) if len(pieces) > 1 else pieces[0]


cumulative_sum = _cumulative(cumsum, 0)
cumulative_prod = _cumulative(cumprod, 1)


def logsumexp(x, axis=None, keepdims=False):
    axes = _axes(axis, _ndim(x))
    return _keep(lax.logsumexp(x, axes), _shape(x), axes, keepdims)


__all__ = [
    "amax", "amin", "argmax", "argmin", "cumsum", "logsumexp", "max", "mean", "min", "prod",
    "std", "sum", "var",
    # issue 14, shapes and joining
    "cumprod", "cumulative_prod", "cumulative_sum", "diff", "ediff1d",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.sum: sum, np.prod: prod, np.max: max, np.amax: max, np.min: min, np.amin: min, np.mean: mean,
    np.var: var, np.std: std, np.argmax: argmax, np.argmin: argmin, np.cumsum: cumsum,
    np.cumprod: cumprod, np.diff: diff, np.ediff1d: ediff1d, np.cumulative_sum: cumulative_sum,
    np.cumulative_prod: cumulative_prod,
}
