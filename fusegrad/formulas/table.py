"""The table itself: the registration decorator, the rules by primitive name, and the helpers
rules share (un-broadcasting, expanding reduced values back)."""

from __future__ import annotations

import math

from .. import lax
from ..ir.types import NP_DTYPES, dtype_name

NON_DIFFERENTIABLE = frozenset((
    "sign", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not",
    "argmax", "argmin", "full", "iota", "constant", "floor", "ceil", "round", "trunc",
    # shapes, joining and indexing (issue 14): the permutations sort and partition take along
    "argsort", "argpartition",
    # elementwise breadth (issue 14): the sign bit
    "signbit",
    # linear algebra (issue 14): zeros, or an error (formulas/linalg.py's full factors)
    "require_zero",
))

vjp_rules: dict = {}
node_names: dict = {}


def _vjp(prim, name, reads=None):
    """Register fn as prim's VJP rule, with its eager node's name and what it reads besides g
    (see the module docstring); the eager engine saves only that. Undeclared: it saves all."""
    def register(fn):
        if reads is not None:
            fn.reads = reads
        vjp_rules[prim] = fn
        node_names[prim] = name
        return fn
    return register


# ---------------------------------------------------------------------------------------------
# Shared helpers: shapes, broadcasting back over reduced axes.

def _fmt(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def sum_to_shape(g, shape):
    """Undo broadcasting: sum g's leading axes and the axes where `shape` has size 1."""
    shape, gshape = tuple(shape), tuple(g.shape)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    if lead < 0 or any(n not in (1, m) for n, m in zip(shape, gshape[lead:])):
        raise ValueError(f"cannot reduce gradient of shape {_fmt(gshape)} to {_fmt(shape)}")
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and gshape[lead + i] != 1)
    return lax.reshape(lax.reduce_sum(g, axes), shape)


def _dtype_key(dtype) -> str:
    return dtype if isinstance(dtype, str) and dtype in NP_DTYPES else dtype_name(dtype)


def unbroadcast_and_cast(g, shape, dtype):
    """What a driver does with every cotangent: sum_to_shape, then cast to the input's dtype."""
    g = sum_to_shape(g, shape)
    if _dtype_key(g.dtype) != _dtype_key(dtype):
        g = lax.convert(g, dtype)
    return g


def _expand(v, shape, axes):
    """Broadcast a reduced value back over the reduced `axes` of `shape`."""
    if not axes:
        return v
    return lax.broadcast_in_dim(v, shape, tuple(i for i in range(len(shape)) if i not in axes))


def _mean(v, axes):
    """Mean over axes, broadcast back to v's shape (keepdims + expand)."""
    count = math.prod(v.shape[a] for a in axes)
    return _expand(lax.reduce_sum(v, axes) / count, tuple(v.shape), axes)


def _mT(x):
    n = len(x.shape)
    return lax.transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)
