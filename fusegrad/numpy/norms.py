"""np.linalg's norms on arrays, eager tensors and tracers.

Norms (norm, vector_norm, matrix_norm) take every `ord` NumPy accepts: vectors None, 2, 1,
-1, inf, -inf, 0 and any p; matrices 'fro', 'nuc', 1, -1, 2, -2, inf, -inf. Their gradients:
the 2-norm, the Frobenius norm and p-norms are 0 at the zero vector (not nan: the root only
sees a safe branch), inf / 1-type norms go through max and min (ties split the gradient) and
abs (abs'(0) = 0), ord=0 counts and has none, 2, -2 and 'nuc' go through the SVD.

The 2, -2 and 'nuc' matrix norms call linalg.svd, imported where they run: linalg.py imports
this module (np.linalg.norm is one of its functions), not the other way round.
"""

from __future__ import annotations

import numpy as np

from .base import _dtype, _ndim, _shape, astype
from .elementwise import absolute, greater, not_equal, power, sqrt, square, where
from .reductions import max, min, sum
from .shapes import reshape, transpose


def _safe_root(s, root=sqrt):
    """root(s), with gradient 0 (not nan) where s is 0: the root only sees the safe branch."""
    positive = greater(s, 0)
    return where(positive, root(where(positive, s, 1)), 0)


def _vector_norm(x, ord, axis, keepdims):
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    if ord is None or ord == 2:
        return _safe_root(sum(square(x), axis, keepdims))
    if ord == 0:
        return sum(astype(not_equal(x, 0), _dtype(x)), axis, keepdims)
    if _shape(x)[axis] == 0 and ord == np.inf:
        return sum(absolute(x), axis, keepdims)        # NumPy's max(..., initial=0)
    if ord == np.inf:
        return max(absolute(x), axis, keepdims)
    if ord == -np.inf:
        return min(absolute(x), axis, keepdims)
    if ord == 1:
        return sum(absolute(x), axis, keepdims)
    ord = float(ord)
    total = sum(power(absolute(x), ord), axis, keepdims)
    return _safe_root(total, lambda t: power(t, 1.0 / ord)) if ord > 0 else \
        power(total, 1.0 / ord)


def _svd_norm(x, rows, cols, reduce):
    rest = [i for i in range(_ndim(x)) if i not in (rows, cols)]
    from .linalg import svd
    s = svd(transpose(x, rest + [rows, cols]), compute_uv=False)
    return reduce(s, axis=-1)


def _matrix_norm(x, ord, rows, cols):
    if rows == cols:
        raise ValueError("Duplicate axes given.")
    if ord in (2, -2):
        return _svd_norm(x, rows, cols, max if ord == 2 else min)
    if ord == "nuc":
        return _svd_norm(x, rows, cols, sum)
    if ord in (None, "fro", "f"):
        return _safe_root(sum(square(x), (rows, cols)))
    if ord in (1, -1, np.inf, -np.inf):
        inner, outer = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = sum(absolute(x), inner)
        outer -= outer > inner
        if ord in (1, np.inf) and _shape(sums)[outer] == 0:
            return sum(sums, outer)                    # NumPy's max(..., initial=0)
        return (max if ord in (1, np.inf) else min)(sums, outer)
    raise ValueError("Invalid norm order for matrices.")


def norm(x, ord=None, axis=None, keepdims=False):
    """Every ord NumPy accepts (vectors: None, 2, 1, -1, inf, -inf, 0, any p; matrices: 'fro',
    'nuc', 1, -1, 2, -2, inf, -inf); gradient 0 at zero for the root norms."""
    if _dtype(x).kind not in "f":
        from .linalg import _floats
        x = _floats(x)
    nd = _ndim(x)
    if axis is None and (ord is None or ord in ("f", "fro") and nd == 2 or ord == 2 and nd == 1):
        out = _safe_root(sum(square(x)))
        return reshape(out, (1,) * nd) if keepdims else out
    if axis is None:
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        try:
            axis = (int(axis),)
        except Exception as e:
            raise TypeError("'axis' must be None, an integer or a tuple of integers") from e
    if len(axis) == 1:
        return _vector_norm(x, ord, _normalize(axis[0], nd), keepdims)
    if len(axis) != 2:
        raise ValueError("Improper number of dimensions to norm.")
    rows, cols = (_normalize(a, nd) for a in axis)
    out = _matrix_norm(x, ord, rows, cols)
    if keepdims:
        out = reshape(out, tuple(1 if i in (rows, cols) else n for i, n in enumerate(_shape(x))))
    return out


def _normalize(axis, nd):
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension "
                                      f"{nd}")
    return axis % nd


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """NumPy 2's: the vector norm over `axis` (None: all; a tuple: those axes flattened)."""
    shape, nd = _shape(x), _ndim(x)
    if axis is None:
        y, axes = reshape(x, (-1,)), tuple(range(nd))
    else:
        axes = tuple(_normalize(a, nd) for a in (axis if isinstance(axis, tuple) else (axis,)))
        rest = tuple(i for i in range(nd) if i not in axes)
        y = reshape(transpose(x, axes + rest), (-1,) + tuple(shape[i] for i in rest))
    out = norm(y, ord=ord, axis=0)
    if keepdims:
        out = reshape(out, tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return out


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """norm over the last two axes (NumPy 2's np.linalg.matrix_norm)."""
    return norm(x, axis=(-2, -1), keepdims=keepdims, ord=ord)
