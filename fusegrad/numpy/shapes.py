"""Shapes: reshape, transpose and friends, broadcast_to, concatenate, stack, take.

Each is an index map in the IR (or nothing at all when the shape does not change).
"""

from __future__ import annotations

import numpy as np

from .. import lax
from .base import _axes, _dtype, _indices, _ndim, _no_out, _shape, astype


def reshape(x, shape, order="C"):
    if order != "C":
        raise NotImplementedError("fusegrad reshapes in C order only")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        size = int(np.prod(_shape(x), dtype=np.int64))
        shape = tuple(size // known if known and s == -1 else s for s in shape)
    if tuple(shape) == _shape(x):
        return x
    return lax.reshape(x, shape)


def ravel(x):
    return reshape(x, (-1,))


def transpose(x, axes=None):
    n = _ndim(x)
    perm = tuple(reversed(range(n))) if axes is None else tuple(a % n for a in axes)
    return x if perm == tuple(range(n)) else lax.transpose(x, perm)


def swapaxes(x, axis1, axis2):
    perm = list(range(_ndim(x)))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return transpose(x, perm)


def moveaxis(x, source, destination):
    n = _ndim(x)
    perm = [a for a in range(n) if a != source % n]
    perm.insert(destination % n, source % n)
    return transpose(x, perm)


def expand_dims(x, axis):
    shape = list(_shape(x))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    ndim = len(shape) + len(axes)
    for a in sorted(a % ndim for a in axes):
        shape.insert(a, 1)
    return reshape(x, shape)


def squeeze(x, axis=None):
    shape = _shape(x)
    axes = [i for i, n in enumerate(shape) if n == 1] if axis is None else _axes(axis, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {shape[a]}")
    return reshape(x, [n for i, n in enumerate(shape) if i not in axes])


def broadcast_to(x, shape):
    shape = tuple(shape)
    src = _shape(x)
    if src == shape:
        return x
    np.broadcast_shapes(src, shape)  # raises NumPy's own message on mismatch
    if np.broadcast_shapes(src, shape) != shape:
        raise ValueError(f"cannot broadcast shape {src} to {shape}")
    return lax.broadcast_in_dim(x, shape, range(len(shape) - len(src), len(shape)))


def concatenate(arrays, axis=0, **kwargs):
    _no_out(kwargs)
    arrays = list(arrays)
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    dtype = np.result_type(*[_dtype(a) for a in arrays])
    arrays = [a if _dtype(a) == dtype else astype(a, dtype) for a in arrays]
    (axis,) = _axes(axis, _ndim(arrays[0]))
    return lax.concatenate(arrays, axis)


def stack(arrays, axis=0, **kwargs):
    arrays = list(arrays)
    axis = axis % (_ndim(arrays[0]) + 1)
    return concatenate([expand_dims(a, axis) for a in arrays], axis, **kwargs)


def take(x, indices, axis=None, **kwargs):
    _no_out(kwargs)
    if axis is None:
        x, axis = ravel(x), 0
    (axis,) = _axes(axis, _ndim(x))
    return lax.take(x, _indices(indices), axis)


def take_along_axis(x, indices, axis):
    (axis,) = _axes(axis, _ndim(x))
    return lax.take_along_axis(x, _indices(indices), axis)


def shape(x):
    return _shape(x)


def ndim(x):
    return _ndim(x)


def size(x):
    return int(np.prod(_shape(x), dtype=np.int64))


__all__ = [
    "broadcast_to", "concatenate", "expand_dims", "moveaxis", "ndim", "ravel", "reshape", "shape",
    "size", "squeeze", "stack", "swapaxes", "take", "take_along_axis", "transpose",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.reshape: reshape, np.ravel: ravel, np.transpose: transpose, np.swapaxes: swapaxes,
    np.moveaxis: moveaxis, np.expand_dims: expand_dims, np.squeeze: squeeze,
    np.broadcast_to: broadcast_to, np.concatenate: concatenate, np.stack: stack, np.take: take,
    np.take_along_axis: take_along_axis, np.shape: shape, np.ndim: ndim, np.size: size,
}
