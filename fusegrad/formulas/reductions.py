"""Reductions and scans: broadcast g back over the reduced axes, times a local factor."""

from __future__ import annotations

from .. import lax
from .table import _expand, _vjp


@_vjp("reduce_sum", "SumBackward", reads="x.shape")
def reduce_sum(g, out, x, *, axes):
    return (_expand(g, x.shape, axes),)


def _extreme_grad(g, out, x, axes):
    """Every element equal to the max (min) gets an equal share of g: ties split evenly. A nan
    in the slice is its max: the nans share g."""
    hit = lax.convert(lax.or_(lax.eq(x, _expand(out, x.shape, axes)), lax.ne(x, x)), x.dtype)
    return hit * _expand(g / lax.reduce_sum(hit, axes), x.shape, axes)


@_vjp("reduce_max", "MaxBackward", reads="out x")
def reduce_max(g, out, x, *, axes):
    return (_extreme_grad(g, out, x, axes),)


@_vjp("reduce_min", "MinBackward", reads="out x")
def reduce_min(g, out, x, *, axes):
    return (_extreme_grad(g, out, x, axes),)


def _prod_grad(g, out, x, axes):
    """out / x without dividing by zero: one zero -> product of the others there; several -> 0."""
    zero = lax.eq(x, 0)
    safe = lax.select(zero, 1.0, x)
    count = _expand(lax.reduce_sum(lax.convert(zero, x.dtype), axes), x.shape, axes)
    others = _expand(lax.reduce_prod(safe, axes), x.shape, axes)
    local = lax.select(zero, lax.select(lax.eq(count, 1), others, 0.0),
                       _expand(out, x.shape, axes) / safe)  # out == 0 if the slice has a zero
    return local * _expand(g, x.shape, axes)


@_vjp("reduce_prod", "ProdBackward", reads="out x")
def reduce_prod(g, out, x, *, axes):
    return (_prod_grad(g, out, x, axes),)


@_vjp("cumsum", "CumsumBackward", reads="")
def cumsum(g, out, x, *, axis, reverse=False):
    return (lax.cumsum(g, axis, reverse=not reverse),)


def _part(x, axis, start, stop):
    """x[start:stop] along axis."""
    lo, hi = [0] * len(x.shape), list(x.shape)
    lo[axis], hi[axis] = start, stop
    return lax.slice(x, tuple(lo), tuple(hi))


def _suffix_affine_scan(a, b, axis):
    """r with r_i = b_i + a_i r_(i+1) along axis (r past the end is 0), in log2(n) rounds that
    compose neighbouring maps (Hillis and Steele): products and sums only."""
    n, shift = a.shape[axis], 1
    while shift < n:
        head = n - shift
        a_head, a_next = _part(a, axis, 0, head), _part(a, axis, shift, n)
        b_head, b_next = _part(b, axis, 0, head), _part(b, axis, shift, n)
        b = lax.concatenate([b_head + a_head * b_next, _part(b, axis, head, n)], axis)
        a = lax.concatenate([a_head * a_next, _part(a, axis, head, n)], axis)
        shift *= 2
    return b


@_vjp("cumprod", "CumprodBackward", reads="out x")
def cumprod(g, out, x, *, axis):
    """x̄_i = out_(i-1) · Σ_(j≥i) g_j ∏_(i<m≤j) x_m: no division, so exact where x has zeros,
    to any order (out / x would divide by them)."""
    n = x.shape[axis]
    if n < 2:
        return (g,)
    edge = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    before = lax.concatenate([lax.full(edge, 1.0, x.dtype), _part(out, axis, 0, n - 1)], axis)
    after = lax.concatenate([_part(x, axis, 1, n), lax.full(edge, 0.0, x.dtype)], axis)
    return (before * _suffix_affine_scan(after, g, axis),)
