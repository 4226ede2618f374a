"""One thin function per primitive, for code that thinks in primitives: the formula table,
the lower pass and the NumPy front end.

Each function normalizes its static params (tuples of ints, IR dtype names) and calls bind, so
it works on plain arrays, eager tensors and tracers alike. Elementwise functions accept
operands of different shapes and dtypes and Python scalars: NumPy broadcasting and NEP 50
promotion apply, made explicit in the IR by the tracer.

`fg.lax.scan`, `fori_loop`, `while_loop` and `cond` (JAX's structured control flow) are
defined in control_flow.py and re-exported here at the end.
"""

from __future__ import annotations

import numpy as np

from .dispatch import bind
from .ir.primitives import PRIMITIVES
from .ir.types import NP_DTYPES, dtype_name


def _unary(prim):
    def op(x):
        return bind(prim, x)
    op.__name__ = op.__qualname__ = prim
    return op


def _binary(prim):
    def op(x, y):
        return bind(prim, x, y)
    op.__name__ = op.__qualname__ = prim
    return op


# One function per elementwise primitive of the registry without params (`and_`, `or_` and
# `not_` for the Python keywords).
for _p in PRIMITIVES.values():
    if _p.category == "elementwise" and _p.arity in (1, 2) and _p.name != "convert":
        _name = _p.name + ("_" if _p.name in ("and", "or", "not") else "")
        globals()[_name] = (_unary if _p.arity == 1 else _binary)(_p.name)

sigmoid = logistic  # noqa: F821 - defined by the loop above


def select(pred, on_true, on_false):
    return bind("select", pred, on_true, on_false)


def convert(x, dtype):
    return bind("convert", x, dtype=_name(dtype))


def broadcast_in_dim(x, shape, dims):
    return bind("broadcast_in_dim", x, shape=tuple(shape), dims=tuple(dims))


def reshape(x, shape):
    return bind("reshape", x, shape=tuple(int(s) for s in shape))


def transpose(x, perm):
    return bind("transpose", x, perm=tuple(perm))


def slice(x, start, stop, step=None):
    step = tuple(step) if step is not None else (1,) * len(start)
    return bind("slice", x, start=tuple(start), stop=tuple(stop), step=step)


def pad(x, low, high, interior=None):
    interior = tuple(interior) if interior is not None else (0,) * len(low)
    return bind("pad", x, low=tuple(low), high=tuple(high), interior=interior)


def concatenate(xs, axis):
    return bind("concatenate", *xs, axis=axis)


def rev(x, axes):
    return bind("rev", x, axes=tuple(sorted(axes)))


def argsort(x, axis, stable=False):
    return bind("argsort", x, axis=axis, stable=bool(stable))


def argpartition(x, kth, axis):
    return bind("argpartition", x, axis=axis, kth=tuple(int(k) for k in kth))


def take(x, idx, axis):
    return bind("take", x, idx, axis=axis)


def take_along_axis(x, idx, axis):
    return bind("take_along_axis", x, idx, axis=axis)


def scatter_add(idx, g, axis, shape):
    return bind("scatter_add", idx, g, axis=axis, shape=tuple(shape))


def scatter_add_along_axis(idx, g, axis, shape):
    return bind("scatter_add_along_axis", idx, g, axis=axis, shape=tuple(shape))


def _reduction(prim):
    def op(x, axes):
        return bind(prim, x, axes=tuple(sorted(axes)))
    op.__name__ = op.__qualname__ = prim
    return op


reduce_sum = _reduction("reduce_sum")
reduce_max = _reduction("reduce_max")
reduce_min = _reduction("reduce_min")
reduce_prod = _reduction("reduce_prod")


def argmax(x, axis):
    return bind("argmax", x, axis=axis)


def argmin(x, axis):
    return bind("argmin", x, axis=axis)


def cumsum(x, axis, reverse=False):
    return bind("cumsum", x, axis=axis, reverse=bool(reverse))


def matmul(a, b):
    return bind("matmul", a, b)


def full(shape, value, dtype):
    dtype = _name(dtype)
    value = np.asarray(value).astype(NP_DTYPES[dtype]).item()
    return bind("full", shape=tuple(shape), dtype=dtype, value=value)


def iota(shape, dtype, axis):
    return bind("iota", shape=tuple(shape), dtype=_name(dtype), axis=axis)


def constant(value):
    return bind("constant", value=np.asarray(value))


def softmax(x, axis):
    return bind("softmax", x, axis=axis)


def log_softmax(x, axis):
    return bind("log_softmax", x, axis=axis)


def logsumexp(x, axes):
    return bind("logsumexp", x, axes=tuple(sorted(axes)))


def cross_entropy(logits, targets):
    return bind("cross_entropy", logits, targets)


def layer_norm(x, ndim=1, eps=1e-5):
    return bind("layer_norm", x, ndim=ndim, eps=float(eps))


def gelu(x, approximate=False):
    return bind("gelu", x, approximate=bool(approximate))


def _name(dtype) -> str:
    return dtype if dtype in ("f32", "f64", "i64", "bool") else dtype_name(dtype)


# Structured control flow (JAX's lax.scan, fori_loop, while_loop, cond): control_flow.py.
from .control_flow import cond, fori_loop, scan, while_loop  # noqa: E402, F401
