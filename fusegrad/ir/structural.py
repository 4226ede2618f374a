"""Shape, indexing and creation primitives: each one's shape rule, NumPy semantics and docs row.

Compiled code computes these as affine index maps inside loops (codegen/kernel_ir/build.py), so
they have no scalar rule; their gradients are other primitives of this file (slice <-> pad, take <->
scatter_add).
"""

from __future__ import annotations

import numpy as np

from .registry import Doc, check_axis, define, fail
from .types import NP_DTYPES, TensorType

# -- shapes ----------------------------------------------------------------------------------


def _broadcast_in_dim_rule(prim, x, *, shape, dims):
    shape, dims = tuple(shape), tuple(dims)
    if len(dims) != x.ndim or any(not 0 <= d < len(shape) for d in dims) \
            or list(dims) != sorted(set(dims)):
        fail(prim, f"dims {dims} must map each operand axis to increasing output axes of "
             f"{list(shape)}", x)
    for axis, d in enumerate(dims):
        if x.shape[axis] not in (1, shape[d]):
            fail(prim, f"cannot broadcast axis {axis} of size {x.shape[axis]} to {shape[d]}", x)
    return x.with_shape(shape)


def _broadcast_in_dim(x, *, shape, dims):
    x = np.asarray(x)
    expanded = [1] * len(shape)
    for axis, d in enumerate(dims):
        expanded[d] = x.shape[axis]
    return np.broadcast_to(x.reshape(expanded), tuple(shape))


define("broadcast_in_dim", "shape", _broadcast_in_dim_rule, _broadcast_in_dim,
       section="Shape manipulation",
       doc=Doc("x", "`shape`, `dims`", "x's dtype, `shape`",
               "jax.lax semantics: `dims[i]` is the output axis of operand axis i; `dims` "
               "strictly increasing, one per operand axis; an operand axis of size 1 "
               "broadcasts, others must equal `shape[dims[i]]`; unlisted output axes are new"))


def _reshape_rule(prim, x, *, shape):
    shape = tuple(shape)
    if any(s < 0 for s in shape) or TensorType(x.dtype, shape).size != x.size:
        fail(prim, f"cannot reshape {x.size} elements into {list(shape)}", x)
    return x.with_shape(shape)


define("reshape", "shape", _reshape_rule, lambda x, *, shape: np.reshape(x, tuple(shape)),
       section="Shape manipulation",
       doc=Doc("x", "`shape`", "`shape`", "row-major reshape; sizes must agree, no -1"))


def _transpose_rule(prim, x, *, perm):
    if sorted(perm) != list(range(x.ndim)):
        fail(prim, f"perm {tuple(perm)} is not a permutation of the operand's axes", x)
    return x.with_shape(x.shape[p] for p in perm)


define("transpose", "shape", _transpose_rule, lambda x, *, perm: np.transpose(x, tuple(perm)),
       section="Shape manipulation",
       doc=Doc("x", "`perm`", "`x.shape[perm[i]]`", "`np.transpose(x, perm)`"))


def _slice_rule(prim, x, *, start, stop, step):
    if not len(start) == len(stop) == len(step) == x.ndim:
        fail(prim, "start, stop and step need one entry per axis", x)
    shape = []
    for n, a, b, s in zip(x.shape, start, stop, step):
        if s < 1 or not 0 <= a <= b <= n:
            fail(prim, f"bad slice {a}:{b}:{s} of an axis of size {n}", x)
        shape.append(max(0, -(-(b - a) // s)))
    return x.with_shape(shape)


def _slice(x, *, start, stop, step):
    return np.asarray(x)[tuple(map(slice, start, stop, step))]


define("slice", "shape", _slice_rule, _slice, section="Shape manipulation",
       doc=Doc("x", "`start`, `stop`, `step` (one entry per axis)",
               "`ceil((stop-start)/step)` per axis",
               "`x[start:stop:step, ...]`; 0 ≤ start ≤ stop ≤ size, step ≥ 1"))


def _pad_rule(prim, x, *, low, high, interior):
    if not len(low) == len(high) == len(interior) == x.ndim:
        fail(prim, "low, high and interior need one entry per axis", x)
    if any(v < 0 for v in (*low, *high, *interior)):
        fail(prim, "padding must be non-negative", x)
    return x.with_shape(lo + hi + n + max(n - 1, 0) * it
                        for n, lo, hi, it in zip(x.shape, low, high, interior))


def _pad(x, *, low, high, interior):
    x = np.asarray(x)
    shape = [lo + hi + n + max(n - 1, 0) * it
             for n, lo, hi, it in zip(x.shape, low, high, interior)]
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(lo, lo + n + max(n - 1, 0) * it, it + 1)
              for n, lo, it in zip(x.shape, low, interior))] = x
    return out


define("pad", "shape", _pad_rule, _pad, section="Shape manipulation",
       doc=Doc("x", "`low`, `high`, `interior` (one per axis, ≥ 0)",
               "`low + high + n + (n-1)*interior` per axis",
               "lax.pad with zeros: `interior` zeros between elements, `low`/`high` zeros at "
               "the ends"))


def _concatenate_rule(prim, *xs, axis):
    if not xs:
        fail(prim, "needs at least one operand")
    first = xs[0]
    if first.ndim == 0:
        fail(prim, "cannot concatenate 0-d operands", *xs)
    axis = check_axis(prim, axis, first.ndim, first)
    for x in xs:
        if x.dtype != first.dtype or x.ndim != first.ndim or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis):
            fail(prim, f"operands must agree except along axis {axis}", *xs)
    size = sum(x.shape[axis] for x in xs)
    return first.with_shape(first.shape[:axis] + (size,) + first.shape[axis + 1:])


define("concatenate", "shape", _concatenate_rule,
       lambda *xs, axis: np.concatenate(xs, axis=axis), section="Shape manipulation",
       doc=Doc("x1, ..., xk: equal dtype and rank, equal shapes except along axis; not 0-d",
               "`axis` (may be negative)", "sum of sizes along axis",
               "`np.concatenate(xs, axis)`"))


def _rev_rule(prim, x, *, axes):
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < x.ndim for a in axes):
        fail(prim, f"axes {tuple(axes)} must be sorted, distinct axes of the operand", x)
    return x


define("rev", "shape", _rev_rule, lambda x, *, axes: np.flip(x, tuple(axes)),
       section="Shape manipulation",
       doc=Doc("x", "`axes` (sorted, distinct)", "same as x",
               "`np.flip(x, axes)`: element `i` of a reversed axis of size n is `x`'s `n-1-i` "
               "(lax.rev); a view, as NumPy's (negative strides)"))

# -- gathers and their transposes -----------------------------------------------------------


def _check_index(prim, idx, *types):
    if idx.dtype != "i64":
        fail(prim, "indices must be i64", *types)


def _take_rule(prim, x, idx, *, axis):
    _check_index(prim, idx, x, idx)
    axis = check_axis(prim, axis, x.ndim, x)
    return x.with_shape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


define("take", "index", _take_rule, lambda x, idx, *, axis: np.take(x, idx, axis=axis),
       section="Indexing and scatter",
       doc=Doc("x, idx: i64", "`axis`", "`x.shape[:axis] + idx.shape + x.shape[axis+1:]`",
               "`np.take(x, idx, axis)`"))


def _take_along_axis_rule(prim, x, idx, *, axis):
    _check_index(prim, idx, x, idx)
    axis = check_axis(prim, axis, x.ndim, x)
    if idx.ndim != x.ndim or any(a != b for i, (a, b) in enumerate(zip(idx.shape, x.shape))
                                 if i != axis):
        fail(prim, f"indices must match the operand's shape except along axis {axis}", x, idx)
    return x.with_shape(idx.shape)


define("take_along_axis", "index", _take_along_axis_rule,
       lambda x, idx, *, axis: np.take_along_axis(np.asarray(x), np.asarray(idx), axis=axis),
       section="Indexing and scatter",
       doc=Doc("x, idx: i64 of x's rank, x's shape except along axis", "`axis`",
               "idx's shape, x's dtype", "`np.take_along_axis(x, idx, axis)`"))


def _scatter_add_rule(prim, idx, g, *, axis, shape):
    _check_index(prim, idx, idx, g)
    shape = tuple(shape)
    if g.shape != shape[:axis] + idx.shape + shape[axis + 1:]:
        fail(prim, f"updates do not match take's output for shape {list(shape)}", idx, g)
    return g.with_shape(shape)


def _scatter_add(idx, g, *, axis, shape):
    g = np.asarray(g)
    out = np.zeros(shape, g.dtype)
    np.add.at(out, (slice(None),) * axis + (np.asarray(idx),), g)
    return out


define("scatter_add", "index", _scatter_add_rule, _scatter_add, section="Indexing and scatter",
       doc=Doc("idx: i64, g", "`axis`, `shape`", "`shape`, g's dtype",
               "the transpose of `take`: `zeros(shape)` with `np.add.at` of g's slices at idx "
               "along axis; g's shape must be take's output shape for `shape`"))


def _scatter_add_along_axis_rule(prim, idx, g, *, axis, shape):
    _check_index(prim, idx, idx, g)
    if idx.shape != g.shape or len(shape) != g.ndim:
        fail(prim, "indices and updates must have equal shapes", idx, g)
    return g.with_shape(shape)


def _scatter_add_along_axis(idx, g, *, axis, shape):
    g, idx = np.asarray(g), np.asarray(idx)
    out = np.zeros(shape, g.dtype)
    index = list(np.indices(idx.shape, sparse=True))
    index[axis] = idx
    np.add.at(out, tuple(index), g)
    return out


define("scatter_add_along_axis", "index", _scatter_add_along_axis_rule, _scatter_add_along_axis,
       section="Indexing and scatter",
       doc=Doc("idx: i64, g: idx's shape", "`axis`, `shape` (g's rank)", "`shape`, g's dtype",
               "the transpose of `take_along_axis`: `zeros(shape)` with g added at idx along "
               "axis"))

# -- sorting: the permutation, computed by NumPy between kernels --------------------------


def _sort_rule(prim, x, *, axis, stable=False, kth=()):
    if x.ndim == 0:
        fail(prim, "needs an operand of rank >= 1", x)
    n = x.shape[check_axis(prim, axis, x.ndim, x)]
    if any(not -n <= k < n for k in kth):
        fail(prim, f"kth {tuple(kth)} out of bounds for an axis of size {n}", x)
    return TensorType("i64", x.shape)


define("argsort", "host", _sort_rule,
       lambda x, *, axis, stable: np.argsort(x, axis=axis, stable=stable).astype(np.int64),
       section="Indexing and scatter",
       doc=Doc("x: rank ≥ 1", "`axis`, `stable` (bool)", "i64, x's shape",
               "`np.argsort(x, axis, stable=stable)`: NumPy's default sort unless stable (nan "
               "last); `sort` is `take_along_axis(x, argsort(x))`"))
define("argpartition", "host", _sort_rule,
       lambda x, *, axis, kth: np.argpartition(x, kth, axis=axis).astype(np.int64),
       section="Indexing and scatter",
       doc=Doc("x: rank ≥ 1", "`axis`, `kth` (tuple of ints)", "i64, x's shape",
               "`np.argpartition(x, kth, axis)`: `partition` is `take_along_axis(x, "
               "argpartition(x))`"))

# -- creation -------------------------------------------------------------------------------


def _iota(*, shape, dtype, axis):
    index = np.arange(shape[axis], dtype=NP_DTYPES[dtype])
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.broadcast_to(index.reshape(view), tuple(shape))


define("full", "nullary", lambda prim, *, shape, dtype, value: TensorType(dtype, tuple(shape)),
       lambda *, shape, dtype, value: np.full(tuple(shape), value, NP_DTYPES[dtype]),
       section="Creation (no operands)",
       doc=Doc("", "`shape`, `dtype`, `value` (a Python number or bool)", "`dtype[shape]`",
               "`np.full(shape, value, dtype)`"))
define("iota", "nullary", lambda prim, *, shape, dtype, axis: TensorType(dtype, tuple(shape)),
       _iota, section="Creation (no operands)",
       doc=Doc("", "`shape`, `dtype`, `axis`", "`dtype[shape]`",
               "the index along `axis`, broadcast to `shape` (`0, 1, 2, ...`)"))
define("constant", "nullary", lambda prim, *, value: TensorType.of(value),
       lambda *, value: value, section="Creation (no operands)",
       doc=Doc("", "`value`: an ndarray", "the array's type", "the array itself"))
