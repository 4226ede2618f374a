"""x[key] for tensors and tracers: basic indexing becomes slice + reshape, one integer-array
index becomes take, a negative step becomes take with constant indices.

Boolean masks are refused: their result shape depends on the data. The masked form
`np.where(mask, x, 0)` keeps the shape static.
"""

from __future__ import annotations

import numpy as np

from . import lax
from .dispatch import level
from . import numpy as fnp


def _normalize(key, ndim):
    key = key if isinstance(key, tuple) else (key,)
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(k)
    if not any(k is Ellipsis for k in key):
        out.extend([slice(None)] * (ndim - used))
    if used > ndim:
        raise IndexError(f"too many indices: array is {ndim}-dimensional, but {used} were "
                         f"indexed")
    return out


def _is_array_index(k) -> bool:
    if level(k):
        return True
    return isinstance(k, (list, np.ndarray)) and not isinstance(k, np.generic)


def getitem(x, key):
    shape = fnp._shape(x)
    key = _normalize(key, len(shape))
    start, stop, step, final_shape, arrays = [], [], [], [], []
    reversed_axes, axis = [], 0
    for k in key:
        if k is None:
            final_shape.append(1)
            continue
        n = shape[axis]
        if isinstance(k, (bool, np.bool_)):
            raise IndexError("boolean scalar indices are not supported")
        if isinstance(k, (int, np.integer)):
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            start.append(i), stop.append(i + 1), step.append(1)
        elif isinstance(k, slice):
            a, b, s = k.indices(n)
            if s < 0:
                reversed_axes.append((axis, np.arange(a, b, s)))
                a, b, s = 0, n, 1
            start.append(a), stop.append(max(a, b)), step.append(s)
            final_shape.append(len(range(a, max(a, b), s)) if s > 0 else n)
        elif _is_array_index(k):
            if fnp._dtype(k) == np.bool_:
                raise IndexError("boolean mask indexing makes the result shape depend on the "
                                 "data; use np.where(mask, x, 0) (or x * mask) instead")
            arrays.append((axis, len(final_shape), k))
            start.append(0), stop.append(n), step.append(1)
            final_shape.append(None)
        else:
            raise IndexError(f"unsupported index {k!r}: use ints, slices, None, ... or one "
                             f"integer array")
        axis += 1
    return _apply(x, shape, start, stop, step, final_shape, arrays, reversed_axes)


def _apply(x, shape, start, stop, step, final_shape, arrays, reversed_axes):
    if len(arrays) > 1:
        raise IndexError("fusegrad supports one integer-array index per subscript; index one "
                         "axis at a time (x[i][:, j])")
    if (tuple(start), tuple(stop), tuple(step)) != ((0,) * len(shape), shape, (1,) * len(shape)):
        x = lax.slice(x, start, stop, step)
    for axis, idx in reversed_axes:
        x = lax.take(x, idx.astype(np.int64), axis)
    kept = [n for n in final_shape if n is not None]
    if arrays:
        (axis, pos, idx), = arrays
        idx = fnp._indices(idx)
        x = lax.take(x, idx, axis)
        idx_shape = fnp._shape(idx)
        shape_before = [n for n in final_shape[:pos] if n is not None]
        shape_after = [n for n in final_shape[pos + 1:] if n is not None]
        target = shape_before + list(idx_shape) + shape_after
        return fnp.reshape(x, target) if tuple(target) != fnp._shape(x) else x
    return fnp.reshape(x, kept) if tuple(kept) != fnp._shape(x) else x
