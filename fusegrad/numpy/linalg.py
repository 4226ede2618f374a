"""Products: matmul (the @ operator), dot, outer, vdot, inner.

NumPy's 1-D conventions (a vector is a row on the left, a column on the right) become reshapes
around one 2-D or batched matmul primitive.
"""

from __future__ import annotations

import numpy as np

from .. import lax
from ..dispatch import level
from .base import _ndim, _no_out, _shape, _shape_error
from .elementwise import multiply
from .reductions import sum
from .shapes import ravel, reshape, transpose


def matmul(a, b, **kwargs):
    _no_out(kwargs)
    a_vec, b_vec = _ndim(a) == 1, _ndim(b) == 1
    if _ndim(a) == 0 or _ndim(b) == 0:
        raise _shape_error("matmul: operands must be at least 1-D (use * for scalars)", a, b)
    if _shape(a)[-1] != _shape(b)[0 if b_vec else -2]:
        raise _shape_error("matmul: inner dimensions differ", a, b)
    if a_vec:
        a = reshape(a, (1,) + _shape(a))
    if b_vec:
        b = reshape(b, _shape(b) + (1,))
    out = lax.matmul(a, b)
    if a_vec or b_vec:
        shape = _shape(out)
        out = reshape(out, shape[:-2] + (() if a_vec else shape[-2:-1])
                      + (() if b_vec else shape[-1:]))
    return out


def dot(a, b):
    if _ndim(a) == 0 or _ndim(b) == 0:      # np.dot makes Python scalars arrays: not weak
        return multiply(*(x if level(x) else np.asarray(x) for x in (a, b)))
    if _ndim(b) > 2:
        raise NotImplementedError("fusegrad's dot supports b of rank <= 2; use matmul")
    return matmul(a, b)


def outer(a, b):
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def vdot(a, b):
    return sum(multiply(ravel(a), ravel(b)))


def inner(a, b):
    """np.inner: a * b if either is 0-d, else the sum over both last axes, of shape
    a.shape[:-1] + b.shape[:-1] (one matmul of the operands flattened to rows)."""
    if _ndim(a) == 0 or _ndim(b) == 0:
        return dot(a, b)
    k = _shape(a)[-1]
    if _shape(b)[-1] != k:
        raise _shape_error("inner: the last axes differ", a, b)
    if _ndim(a) == 1 and _ndim(b) == 1:
        return vdot(a, b)
    rows = matmul(reshape(a, (-1, k)), transpose(reshape(b, (-1, k))))
    return reshape(rows, _shape(a)[:-1] + _shape(b)[:-1])


__all__ = [
    "dot", "inner", "matmul", "outer", "vdot",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.matmul: matmul, np.dot: dot, np.outer: outer, np.vdot: vdot, np.inner: inner,
}
