"""Shape and indexing primitives: route each output element back to where it was read."""

from __future__ import annotations

from itertools import accumulate

from .. import lax
from .table import _inverse, _vjp


@_vjp("broadcast_in_dim", "ExpandBackward", reads="x.shape")
def broadcast_in_dim(g, out, x, *, shape, dims):
    return (lax.reshape(lax.reduce_sum(g, _broadcast_axes(x.shape, shape, dims)), x.shape),)


def _broadcast_axes(x_shape, shape, dims):
    """The output axes a broadcast created or stretched: the ones its VJP sums over."""
    stretched = [d for axis, d in enumerate(dims) if x_shape[axis] == 1 and shape[d] != 1]
    return tuple(sorted([i for i in range(len(shape)) if i not in dims] + stretched))


@_vjp("reshape", "ViewBackward", reads="x.shape")
def reshape(g, out, x, *, shape):
    return (lax.reshape(g, x.shape),)


@_vjp("transpose", "TransposeBackward", reads="")
def transpose(g, out, x, *, perm):
    return (lax.transpose(g, _inverse(perm)),)


@_vjp("slice", "SliceBackward", reads="out.shape x.shape")
def slice(g, out, x, *, start, stop, step):
    return (lax.pad(g, start, _slice_high(x.shape, out.shape, start, step),
                    tuple(s - 1 for s in step)),)


def _slice_high(shape, out_shape, start, step):
    """Padding after a slice's last element, so padding g restores the input's shape."""
    return tuple(n - (a + (k - 1) * s + 1 if k else a)
                 for n, k, a, s in zip(shape, out_shape, start, step))


@_vjp("pad", "PadBackward", reads="x.shape")
def pad(g, out, x, *, low, high, interior):
    stop = tuple(lo + (n - 1) * (it + 1) + 1 if n else lo
                 for n, lo, it in zip(x.shape, low, interior))
    return (lax.slice(g, low, stop, tuple(it + 1 for it in interior)),)


@_vjp("concatenate", "CatBackward", reads="xs.shape")
def concatenate(g, out, *xs, axis):
    axis %= len(g.shape)
    full, ends = tuple(g.shape), list(accumulate(x.shape[axis] for x in xs))
    return tuple(lax.slice(g, (0,) * axis + (a,) + (0,) * (len(full) - axis - 1),
                           full[:axis] + (b,) + full[axis + 1:])
                 for a, b in zip([0] + ends[:-1], ends))


@_vjp("rev", "FlipBackward", reads="")
def rev(g, out, x, *, axes):
    return (lax.rev(g, axes),)


@_vjp("take", "IndexSelectBackward", reads="x.shape idx")
def take(g, out, x, idx, *, axis):
    return lax.scatter_add(idx, g, axis % len(x.shape), x.shape), None


@_vjp("take_along_axis", "GatherBackward", reads="x.shape idx")
def take_along_axis(g, out, x, idx, *, axis):
    return lax.scatter_add_along_axis(idx, g, axis % len(x.shape), x.shape), None


@_vjp("scatter_add", "ScatterAddBackward", reads="idx")
def scatter_add(g, out, idx, updates, *, axis, shape):
    return None, lax.take(g, idx, axis)


@_vjp("scatter_add_along_axis", "ScatterAddBackward", reads="idx")
def scatter_add_along_axis(g, out, idx, updates, *, axis, shape):
    return None, lax.take_along_axis(g, idx, axis)
