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
