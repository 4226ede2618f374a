"""Shapes: reshape, transpose and friends, broadcast_to, concatenate, stack, take; atleast_*d,
flip and rot90, roll and rollaxis, repeat and tile.

Each is an index map in the IR (or nothing at all when the shape does not change). A reversed
axis is the `rev` primitive, whose index map reads element n-1-i: a take with a reversed
constant index would load an index array in every kernel that reads it, and its gradient would
be a scatter_add loop, where rev's is rev again, fused like any index map (measured here on a
1000 x 1000 flip inside a product: forward alike, gradient about 1.4x faster). A gather along
one axis with a constant index vector (roll, pad's edge/reflect/symmetric/wrap modes, repeat
with counts) is split into runs of equal step, each a slice (reversed where the step is
negative, broadcast where it is 0), joined by one concatenate: index maps whose gradients are
pads and slices. Beyond MAX_RUNS runs it is a take.
"""

from __future__ import annotations

import builtins

import numpy as np

from .. import lax
from ..dispatch import level
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
    """NumPy's: x and the indices broadcast against each other on every axis but `axis`."""
    if axis is None:
        x, axis = ravel(x), 0
    (axis,) = _axes(axis, _ndim(x))
    indices = _indices(indices)
    if _ndim(indices) != _ndim(x):
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    sx, si = list(_shape(x)), list(_shape(indices))
    common = list(np.broadcast_shapes(*[tuple(s[:axis] + [1] + s[axis + 1:]) for s in (sx, si)]))
    x = broadcast_to(x, common[:axis] + sx[axis:axis + 1] + common[axis + 1:])
    indices = broadcast_to(indices, common[:axis] + si[axis:axis + 1] + common[axis + 1:])
    return lax.take_along_axis(x, indices, axis)


def shape(x):
    return _shape(x)


def ndim(x):
    return _ndim(x)


def size(x):
    return int(np.prod(_shape(x), dtype=np.int64))


# -- gathers along one axis with a constant index vector, as slices -------------------------

MAX_RUNS = 8      # more runs than this: one take (its index array is one load per element)


def _runs(idx) -> list:
    """A constant index vector as maximal runs (first, step, length) of equal step."""
    runs, i, n = [], 0, len(idx)
    while i < n:
        step = int(idx[i + 1] - idx[i]) if i + 1 < n else 1
        j = i + 1
        while j < n and idx[j] - idx[j - 1] == step:
            j += 1
        runs.append((int(idx[i]), step, j - i))
        i = j
    return runs


def _axis_slice(x, axis, start, stop, step=1):
    shape = _shape(x)
    return lax.slice(x, [start if a == axis else 0 for a in range(len(shape))],
                     [stop if a == axis else n for a, n in enumerate(shape)],
                     [step if a == axis else 1 for a in range(len(shape))])


def _run(x, axis, first, step, length):
    if step == 0 or length == 1:
        piece = _axis_slice(x, axis, first, first + 1)
        if length == 1:
            return piece
        shape = list(_shape(x))
        shape[axis] = length
        return lax.broadcast_in_dim(piece, shape, range(len(shape)))
    if step > 0:
        return _axis_slice(x, axis, first, first + (length - 1) * step + 1, step)
    last = first + (length - 1) * step
    return lax.rev(_axis_slice(x, axis, last, first + 1, -step), (axis,))


def gather_axis(x, idx, axis):
    """x indexed along `axis` by the constant, non-negative in-bounds index vector idx."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    n = _shape(x)[axis]
    if len(idx) == n and np.array_equal(idx, np.arange(n)):
        return x
    if len(idx) == 0:
        return _axis_slice(x, axis, 0, 0)
    runs = _runs(idx)
    if len(runs) > MAX_RUNS:
        return lax.take(x, idx, axis)
    pieces = [_run(x, axis, *r) for r in runs]
    return pieces[0] if len(pieces) == 1 else lax.concatenate(pieces, axis)


# -- atleast, flips, rolls, repeats ---------------------------------------------------------


def _atleast(shape_of):
    def fn(*arys):
        out = tuple(reshape(a, shape_of(_shape(a))) for a in arys)
        return out[0] if len(out) == 1 else out
    return fn


atleast_1d = _atleast(lambda s: s if len(s) >= 1 else (1,))
atleast_2d = _atleast(lambda s: s if len(s) >= 2 else (1,) * (2 - len(s)) + s)
atleast_3d = _atleast(lambda s: s if len(s) >= 3 else {0: (1, 1, 1), 1: (1,) + s + (1,),
                                                        2: s + (1,)}[len(s)])
atleast_1d.__name__, atleast_2d.__name__, atleast_3d.__name__ = \
    "atleast_1d", "atleast_2d", "atleast_3d"


def flip(m, axis=None):
    """The `rev` primitive on the given axes (all by default); its gradient is rev again."""
    axes = _axes(axis, _ndim(m))
    axes = tuple(a for a in axes if _shape(m)[a] > 1)
    return lax.rev(m, axes) if axes else lax.convert(m, _dtype(m))


def flipud(m):
    if _ndim(m) < 1:
        raise ValueError("Input must be >= 1-d.")
    return flip(m, 0)


def fliplr(m):
    if _ndim(m) < 2:
        raise ValueError("Input must be >= 2-d.")
    return flip(m, 1)


def rot90(m, k=1, axes=(0, 1)):
    """NumPy's: flips of one or both axes and a swap of the two."""
    axes, n = tuple(axes), _ndim(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    if axes[0] == axes[1] or builtins.abs(axes[0] - axes[1]) == n:
        raise ValueError("Axes must be different.")
    if not all(-n <= a < n for a in axes):
        raise ValueError(f"Axes={axes} out of range for array of ndim={n}.")
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(m, axes)
    perm = list(range(n))
    perm[axes[0]], perm[axes[1]] = perm[axes[1]], perm[axes[0]]
    if k == 1:
        return transpose(flip(m, axes[1]), perm)
    return flip(transpose(m, perm), axes[1])


def roll(a, shift, axis=None):
    """Two slices joined the other way round, per rolled axis."""
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), _shape(a))
    shifts, axes = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
    total = {}
    for s, ax in zip(shifts.reshape(-1), axes.reshape(-1)):
        (ax,) = _axes(int(ax), _ndim(a))
        total[ax] = total.get(ax, 0) + int(s)
    for ax, s in total.items():
        n = _shape(a)[ax]
        if n:
            a = gather_axis(a, (np.arange(n) - s) % n, ax)
    return a


def rollaxis(a, axis, start=0):
    n = _ndim(a)
    (axis,) = _axes(axis, n)
    start = start + n if start < 0 else start
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(f"'start' arg requires {-n} <= start < {n + 1}, but "
                                      f"{start} was passed in")
    start -= axis < start
    perm = [i for i in range(n) if i != axis]
    perm.insert(start, axis)
    return transpose(a, perm)


def repeat(a, repeats, axis=None):
    """A count for all: a broadcast over a new axis after `axis`, merged into it; counts per
    element: a gather of runs (repeats of one index are broadcasts)."""
    if level(repeats):
        raise TypeError("np.repeat with traced repeats: the result's shape would depend on "
                        "the data; pass the counts as constants")
    if axis is None:
        a, axis = ravel(a), 0
    (axis,) = _axes(axis, _ndim(a))
    shape, counts = _shape(a), np.asarray(repeats)
    if counts.ndim == 0 or counts.shape == (1,):
        r = int(counts.reshape(-1)[0])
        if r < 0:
            raise ValueError("repeats may not contain negative values.")
        wide = lax.broadcast_in_dim(a, shape[:axis + 1] + (r,) + shape[axis + 1:],
                                    [d + (d > axis) for d in range(len(shape))])
        return reshape(wide, shape[:axis] + (shape[axis] * r,) + shape[axis + 1:])
    return gather_axis(a, np.repeat(np.arange(shape[axis]), counts), axis)


def tile(A, reps):
    """x broadcast over a new axis before each of its own, merged pairwise."""
    reps = tuple(int(r) for r in np.atleast_1d(np.asarray(reps)))
    shape = _shape(A)
    d = builtins.max(len(reps), len(shape))
    shape, reps = (1,) * (d - len(shape)) + shape, (1,) * (d - len(reps)) + reps
    if builtins.min(reps, default=1) < 0:
        raise ValueError("negative dimensions are not allowed")
    x = reshape(A, shape)
    wide = lax.broadcast_in_dim(x, [n for pair in zip(reps, shape) for n in pair],
                                range(1, 2 * d, 2))
    return reshape(wide, [r * n for r, n in zip(reps, shape)])


__all__ = [
    "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_to", "concatenate", "expand_dims",
    "flip", "fliplr", "flipud", "moveaxis", "ndim", "ravel", "repeat", "reshape", "roll",
    "rollaxis", "rot90", "shape", "size", "squeeze", "stack", "swapaxes", "take",
    "take_along_axis", "tile", "transpose",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.reshape: reshape, np.ravel: ravel, np.transpose: transpose, np.swapaxes: swapaxes,
    np.moveaxis: moveaxis, np.expand_dims: expand_dims, np.squeeze: squeeze,
    np.broadcast_to: broadcast_to, np.concatenate: concatenate, np.stack: stack, np.take: take,
    np.take_along_axis: take_along_axis, np.shape: shape, np.ndim: ndim, np.size: size,
    np.atleast_1d: atleast_1d, np.atleast_2d: atleast_2d, np.atleast_3d: atleast_3d,
    np.flip: flip, np.flipud: flipud, np.fliplr: fliplr, np.rot90: rot90, np.roll: roll,
    np.rollaxis: rollaxis, np.repeat: repeat, np.tile: tile,
}
