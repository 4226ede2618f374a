"""x[key] for tensors and tracers, with NumPy's rules: basic indexing becomes slice (+ rev for
negative steps) and reshape; integer-array indices (any number, constant or traced, broadcast
together) become one take. Several constant index arrays become one flat index into their axes
merged; traced ones (whose bounds are known only at run time) take along each axis in turn, so
each entry is checked against its own axis. The broadcast index dimensions replace the indexed
axes where those are adjacent in the key (ints count as array indices) and go first where a
slice, None or ... separates them, as in NumPy.

A constant boolean mask is its np.nonzero index arrays (the result shape is known). A traced
mask is refused: the result shape would depend on the data. The masked form
`np.where(mask, x, 0)` keeps the shape static.

Also here: sort, argsort, partition and argpartition (the `argsort` / `argpartition` host
primitives, then take_along_axis: the gradient follows the permutation), select, and the
triangles and diagonals (tril, triu, diag, diagonal).
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from .. import lax
from ..dispatch import level
from ..tracer.location import user_location
from .base import _axes, _dtype, _indices, _ndim, _shape, astype
from .elementwise import where
from .lazy import concrete
from .reductions import sum as _sum
from .shapes import broadcast_to, ravel, reshape, transpose


def _index_error(msg):
    at = user_location(full=True)
    return IndexError(f"{msg}{f' (at {at})' if at else ''}")


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


def _expand_masks(key):
    """Constant boolean arrays in a key as their np.nonzero index arrays (one per axis)."""
    out = []
    for k in key if isinstance(key, tuple) else (key,):
        if _is_array_index(k) and not level(k) and np.asarray(k).dtype == np.bool_ \
                and np.ndim(k) > 0:
            out.extend(np.nonzero(np.asarray(k)))
        else:
            out.append(k)
    return tuple(out)


def getitem(x, key):
    shape = _shape(x)
    key = _normalize(_expand_masks(concrete(key)), len(shape))
    start, stop, step, flips, ints, arrays = [], [], [], [], [], []
    final, advanced, axis = [], [], 0       # final: the result's dims, "S" for the arrays'
    for pos, k in enumerate(key):
        if k is None:
            final.append(1)
            continue
        n = shape[axis]
        if isinstance(k, (bool, np.bool_)):
            raise _index_error("boolean scalar indices are not supported")
        if isinstance(k, (int, np.integer)):
            i = int(k)
            if not -n <= i < n:
                raise _index_error(f"index {i} is out of bounds for axis {axis} with size {n}")
            start.append(i % n), stop.append(i % n + 1), step.append(1)
            ints.append(axis), advanced.append(pos)
        elif isinstance(k, slice):
            a, b, s = k.indices(n)
            count = len(range(a, b, s))
            if not count:
                start.append(0), stop.append(0), step.append(1)
            elif s < 0:
                last = a + (count - 1) * s       # the same elements, ascending, then reversed
                start.append(last), stop.append(a + 1), step.append(-s)
                flips.append(axis)
            else:
                start.append(a), stop.append(builtins.max(a, b)), step.append(s)
            final.append(count)
        elif _is_array_index(k):
            if _dtype(k) == np.bool_:
                raise _index_error("boolean mask indexing makes the result shape depend on "
                                   "the data; use np.where(mask, x, 0) (or x * mask) instead")
            arrays.append((axis, _indices(k) if level(k) else _constant_indices(k, n, axis)))
            start.append(0), stop.append(n), step.append(1)
            if "S" not in final:
                final.append("S")
            advanced.append(pos)
        else:
            raise _index_error(f"unsupported index {k!r}: use ints, slices, None, ..., integer "
                               f"arrays or a constant boolean mask")
        axis += 1
    if (tuple(start), tuple(stop), tuple(step)) != ((0,) * len(shape), shape, (1,) * len(shape)):
        x = lax.slice(x, start, stop, step)
    if flips:
        x = lax.rev(x, flips)
    kept = [a for a in range(len(shape)) if a not in ints]
    if ints:
        x = reshape(x, [_shape(x)[a] for a in kept])
    if not arrays:
        return reshape(x, final) if tuple(final) != _shape(x) else x
    # NumPy puts the indexed dimensions first when integer and array indices are not adjacent
    to_front = advanced != list(range(advanced[0], advanced[-1] + 1))
    x, S = _gather(x, [(kept.index(a), idx) for a, idx in arrays], to_front)
    if to_front:
        final = ["S"] + [n for n in final if n != "S"]
    target = [m for n in final for m in (S if n == "S" else (n,))]
    return reshape(x, target) if tuple(target) != _shape(x) else x


def _gather(x, arrays, to_front):
    """x indexed by integer arrays along the given (adjacent unless to_front) axes: the rest of
    x's axes in order, with the arrays' broadcast shape S where the first indexed axis was
    (to_front: first). Returns (result, S)."""
    try:
        S = tuple(np.broadcast_shapes(*[_shape(idx) for _, idx in arrays]))
    except ValueError:
        shapes = " ".join(str(_shape(idx)) for _, idx in arrays)
        raise _index_error(f"shape mismatch: indexing arrays could not be broadcast together "
                           f"with shapes {shapes}") from None
    axes = [a for a, _ in arrays]
    q = 0 if to_front else axes[0]
    if len(arrays) == 1:
        y = lax.take(x, arrays[0][1], axes[0])
        if to_front and axes[0]:
            k = len(S)
            y = transpose(y, [*range(axes[0], axes[0] + k), *range(axes[0]),
                              *range(axes[0] + k, _ndim(y))])
        return y, S
    rest = [a for a in range(_ndim(x)) if a not in axes]
    x = transpose(x, rest[:q] + axes + rest[q:])
    sizes = [_shape(x)[q + i] for i in range(len(axes))]
    if not any(level(idx) for _, idx in arrays):      # one take of the flat index
        flat = np.ravel_multi_index(np.broadcast_arrays(*[idx for _, idx in arrays]), sizes)
        x = reshape(x, _shape(x)[:q] + (math.prod(sizes),) + _shape(x)[q + len(sizes):])
        return lax.take(x, flat.astype(np.int64), q), S
    first, *others = [broadcast_to(idx, S) for _, idx in arrays]
    x = lax.take(x, _indices(first), q)
    at = q + len(S)                    # the next indexed axis, once the previous one is S
    for idx in others:
        shape = list(_shape(x))
        shape[at] = 1
        along = lax.broadcast_in_dim(_indices(idx), shape, range(q, at))
        x = lax.take_along_axis(x, along, at)
        x = reshape(x, shape[:at] + shape[at + 1:])
    return x, S


# -- sorting: a permutation (computed by NumPy, also in compiled code), then a gather -------


def _sort_axis(a, axis):
    if axis is None:
        return ravel(a), 0
    (axis,) = _axes(axis, _ndim(a))
    return a, axis


def _no_order(order):
    if order is not None:
        raise NotImplementedError("fusegrad sorts plain arrays: order= (fields of a structured "
                                  "array) is not supported")


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """NumPy's default sort, or a stable one for kind="stable"/"mergesort" or stable=True."""
    _no_order(order)
    a, axis = _sort_axis(a, axis)
    return lax.argsort(a, axis, bool(stable) or kind in ("stable", "mergesort"))


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """take_along_axis of argsort: each sorted element's gradient goes back where it came
    from (tied elements: to the one the permutation picked)."""
    a, axis = _sort_axis(a, axis)
    return lax.take_along_axis(a, argsort(a, axis, kind, order, stable=stable), axis)


def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    _no_order(order)
    if level(kth):
        raise TypeError("np.partition with a traced kth: pass kth as a constant")
    a, axis = _sort_axis(a, axis)
    return lax.argpartition(a, np.atleast_1d(np.asarray(kth)).tolist(), axis)


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """take_along_axis of argpartition (NumPy's introselect): the gradient follows the
    permutation."""
    a, axis = _sort_axis(a, axis)
    return lax.take_along_axis(a, argpartition(a, kth, axis, kind, order), axis)


def select(condlist, choicelist, default=0):
    """NumPy's: the first true condition's choice, else default, as nested wheres (the last
    condition innermost), in one result dtype."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not len(condlist):
        raise ValueError("select with an empty condition list is not possible")
    # Python numbers stay weak in the result dtype, as in NumPy's select
    choices = [c if level(c) or type(c) in (int, float) else np.asarray(c)
               for c in [*choicelist, default]]
    dtype = np.result_type(*[c if type(c) in (int, float) else _dtype(c) for c in choices])
    choices = [np.asarray(c, dtype) if type(c) in (int, float) else c for c in choices]
    for i, cond in enumerate(condlist):
        if _dtype(cond) != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    result = choices[-1] if _dtype(choices[-1]) == dtype else astype(choices[-1], dtype)
    for cond, choice in zip(reversed(condlist), reversed(choices[:-1])):
        result = where(cond, choice if _dtype(choice) == dtype else astype(choice, dtype),
                       result)
    shape = np.broadcast_shapes(*[_shape(c) for c in [*condlist, *choices]])
    return broadcast_to(result, shape) if _shape(result) != shape else result


# -- triangles and diagonals -----------------------------------------------------------------


def _tri_mask(shape, k):
    n, m = (shape[-1], shape[-1]) if len(shape) == 1 else shape[-2:]
    return np.tri(n, m, k, dtype=bool)


def tril(m, k=0):
    """where with a constant np.tri mask: no gradient flows above the k-th diagonal."""
    return where(_tri_mask(_shape(m), k), m, np.zeros(1, _dtype(m)))


def triu(m, k=0):
    """where with a constant np.tri mask: no gradient flows below the k-th diagonal."""
    return where(_tri_mask(_shape(m), k - 1), np.zeros(1, _dtype(m)), m)


def diag(v, k=0):
    """1-D: v spread with m zeros between its elements (lax.pad's interior) fills an m x m
    matrix's k-th diagonal, read row by row; 2-D: diagonal(v, k)."""
    if _ndim(v) == 2:
        return diagonal(v, k)
    if _ndim(v) != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = _shape(v)[0]
    m = n + builtins.abs(k)
    low = k if k >= 0 else -k * m
    covered = n + (n - 1) * m if n else 0
    flat = lax.pad(v, (low,), (m * m - low - covered,), (m,))
    return reshape(flat, (m, m))


def diagonal(a, offset=0, axis1=0, axis2=1):
    """The two axes last and merged: the diagonal is a slice of step n2 + 1."""
    if _ndim(a) < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    nd = _ndim(a)
    (axis1,), (axis2,) = _axes(axis1, nd), _axes(axis2, nd)
    if axis1 == axis2:
        raise ValueError("axis1 and axis2 cannot be the same")
    rest = [i for i in range(nd) if i not in (axis1, axis2)]
    a = transpose(a, rest + [axis1, axis2])
    lead, (n1, n2) = _shape(a)[:-2], _shape(a)[-2:]
    count = builtins.max(0, builtins.min(n1, n2 - offset) if offset >= 0
                         else builtins.min(n1 + offset, n2))
    first = offset if offset >= 0 else -offset * n2
    flat = reshape(a, lead + (n1 * n2,))
    if not count:
        return _last_axis_slice(flat, 0, 0, 1)
    return _last_axis_slice(flat, first, first + (count - 1) * (n2 + 1) + 1, n2 + 1)


def _last_axis_slice(x, start, stop, step):
    nd = _ndim(x)
    return lax.slice(x, (0,) * (nd - 1) + (start,), _shape(x)[:-1] + (stop,),
                     (1,) * (nd - 1) + (step,))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """The sum of diagonal(a, offset, axis1, axis2)."""
    if out is not None:
        raise TypeError("fusegrad functions do not support out=; assign the result instead")
    return _sum(diagonal(a, offset, axis1, axis2), -1, dtype=dtype)


__all__ = [
    "argpartition", "argsort", "diag", "diagonal", "getitem", "partition", "select", "sort",
    "trace", "tril", "triu",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.argsort: argsort, np.sort: sort, np.argpartition: argpartition, np.partition: partition,
    np.select: select, np.tril: tril, np.triu: triu, np.diag: diag, np.diagonal: diagonal,
    np.trace: trace,
}
