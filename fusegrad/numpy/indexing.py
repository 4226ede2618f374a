"""x[key] for tensors and tracers: basic indexing becomes slice + reshape, one integer-array
index becomes take, a negative step becomes take with constant indices.

Boolean masks are refused: their result shape depends on the data. The masked form
`np.where(mask, x, 0)` keeps the shape static.
"""

from __future__ import annotations

import numpy as np

from .. import lax
from ..dispatch import level
from ..tracer.location import user_location
from .base import _dtype, _indices, _shape
from .shapes import reshape, transpose


def _index_error(msg):
    where = user_location(full=True)
    return IndexError(f"{msg}{f' (at {where})' if where else ''}")


def _normalize(key, ndim):
    key = key if isinstance(key, tuple) else (key,)
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise _index_error("an index can only have a single ellipsis ('...')")
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(k)
    if not any(k is Ellipsis for k in key):
        out.extend([slice(None)] * (ndim - used))
    if used > ndim:
        raise _index_error(f"too many indices: array is {ndim}-dimensional, but {used} were "
                           f"indexed")
    return out


def _is_array_index(k) -> bool:
    if level(k):
        return True
    return isinstance(k, (list, np.ndarray)) and not isinstance(k, np.generic)


def _constant_indices(k, n, axis):
    """A constant integer-array index with negative entries wrapped, checked against n."""
    idx = np.asarray(k)
    if idx.dtype.kind not in "iu":
        return k
    bad = idx[(idx < -n) | (idx >= n)]
    if bad.size:
        raise _index_error(f"index {int(bad.flat[0])} is out of bounds for axis {axis} with "
                           f"size {n}")
    return np.where(idx < 0, idx + n, idx).astype(np.int64)


def getitem(x, key):
    shape = _shape(x)
    key = _normalize(key, len(shape))
    start, stop, step, final_shape, arrays = [], [], [], [], []
    reversed_axes, advanced, axis = [], [], 0
    for pos, k in enumerate(key):
        if k is None:
            final_shape.append(1)
            continue
        n = shape[axis]
        if isinstance(k, (bool, np.bool_)):
            raise _index_error("boolean scalar indices are not supported")
        if isinstance(k, (int, np.integer)):
            i = int(k)
            if not -n <= i < n:
                raise _index_error(f"index {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            start.append(i), stop.append(i + 1), step.append(1)
            advanced.append(pos)
        elif isinstance(k, slice):
            a, b, s = k.indices(n)
            if s < 0:
                indices = np.arange(a, b, s)
                reversed_axes.append((axis, indices))
                start.append(0), stop.append(n), step.append(1)
                final_shape.append(len(indices))
            else:
                start.append(a), stop.append(max(a, b)), step.append(s)
                final_shape.append(len(range(a, max(a, b), s)))
        elif _is_array_index(k):
            if _dtype(k) == np.bool_:
                raise _index_error("boolean mask indexing makes the result shape depend on "
                                   "the data; use np.where(mask, x, 0) (or x * mask) instead")
            if not level(k):
                k = _constant_indices(k, n, axis)
            arrays.append((axis, len(final_shape), k))
            start.append(0), stop.append(n), step.append(1)
            final_shape.append(None)
            advanced.append(pos)
        else:
            raise _index_error(f"unsupported index {k!r}: use ints, slices, None, ... or one "
                               f"integer array")
        axis += 1
    # NumPy puts the indexed dimensions first when integer and array indices are not adjacent
    to_front = bool(arrays) and advanced != list(range(advanced[0], advanced[-1] + 1))
    return _apply(x, shape, start, stop, step, final_shape, arrays, reversed_axes, to_front)


def _apply(x, shape, start, stop, step, final_shape, arrays, reversed_axes, to_front):
    if len(arrays) > 1:
        raise _index_error("fusegrad supports one integer-array index per subscript; index one "
                           "axis at a time (x[i][:, j])")
    if (tuple(start), tuple(stop), tuple(step)) != ((0,) * len(shape), shape, (1,) * len(shape)):
        x = lax.slice(x, start, stop, step)
    for axis, idx in reversed_axes:
        x = lax.take(x, idx.astype(np.int64), axis)
    kept = [n for n in final_shape if n is not None]
    if not arrays:
        return reshape(x, kept) if tuple(kept) != _shape(x) else x
    (axis, pos, idx), = arrays
    idx = _indices(idx)
    x = lax.take(x, idx, axis)
    idx_shape = list(_shape(idx))
    before = [n for n in final_shape[:pos] if n is not None]
    after = [n for n in final_shape[pos + 1:] if n is not None]
    if to_front:
        k, rank = len(idx_shape), len(_shape(x))
        perm = [*range(axis, axis + k), *range(axis), *range(axis + k, rank)]
        x = transpose(x, perm)
        target = idx_shape + before + after
    else:
        target = before + idx_shape + after
    return reshape(x, target) if tuple(target) != _shape(x) else x


__all__ = [
    "getitem",
]

HANDLED: dict = {}
