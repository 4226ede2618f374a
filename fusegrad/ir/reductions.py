"""Reductions, scans and matrix products: each one's shape rule, NumPy semantics and docs row.

Compiled loops fold reductions with an (identity, combine) row each (codegen/kernel_ir/build.py's
REDUCTIONS); cumsum is a scan step and matmul a BLAS call (or, for a few terms, a fused loop).
"""

from __future__ import annotations

import numpy as np

from .registry import Doc, check_axis, define, fail, reduced_shape
from .types import TensorType

# A max, min, argmax or argmin over an empty axis has no value: NumPy raises these, so every
# backend does, at trace time (compiled loops would return their start value, -inf or 0).
_EMPTY = {"reduce_max": "zero-size array to reduction operation maximum which has no identity",
          "reduce_min": "zero-size array to reduction operation minimum which has no identity",
          "argmax": "attempt to get argmax of an empty sequence",
          "argmin": "attempt to get argmin of an empty sequence"}


def _nonempty(prim, x, axes):
    if prim in _EMPTY and any(0 <= a < x.ndim and x.shape[a] == 0 for a in axes):
        fail(prim, _EMPTY[prim], x)


def _reduce_rule(prim, x, *, axes):
    if x.dtype == "bool":
        fail(prim, "needs a numeric operand (convert bool to i64 first)", x)
    _nonempty(prim, x, axes)
    return x.with_shape(reduced_shape(prim, x, axes))


def _reducer(fn):
    def reduce(x, *, axes):
        x = np.asarray(x)
        return np.asarray(fn(x, axis=tuple(axes)), dtype=x.dtype)
    return reduce


for _name, _fn in (("reduce_sum", np.sum), ("reduce_max", np.max), ("reduce_min", np.min),
                   ("reduce_prod", np.prod)):
    define(_name, "reduction", _reduce_rule, _reducer(_fn), section="Reductions and scans",
           doc=Doc("x: f32/f64/i64", "`axes`: sorted tuple of distinct axes",
                   "x's dtype, x's shape without `axes` (no keepdims)",
                   f"`np.{_fn.__name__}(x, axis=axes)` in x's dtype; `axes=()` is the identity"))


def _argreduce_rule(prim, x, *, axis):
    _nonempty(prim, x, (axis,))
    return TensorType("i64", reduced_shape(prim, x, (axis,)))


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    define(_name, "reduction", _argreduce_rule,
           lambda x, *, axis, _fn=_fn: _fn(x, axis=axis).astype(np.int64),
           section="Reductions and scans",
           doc=Doc("x", "`axis`", "i64, x's shape without `axis`",
                   f"`np.{_name}(x, axis)` (first index on ties)"))


def _cumsum_rule(prim, x, *, axis, reverse=False):
    if x.ndim == 0 or x.dtype == "bool":
        fail(prim, "needs a numeric operand of rank >= 1", x)
    check_axis(prim, axis, x.ndim, x)
    return x


def _cumsum(x, *, axis, reverse=False):
    x = np.asarray(x)
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return np.cumsum(x, axis=axis, dtype=x.dtype)


define("cumsum", "scan", _cumsum_rule, _cumsum, section="Reductions and scans",
       doc=Doc("x", "`axis`, `reverse` (bool, default False)", "same as x",
               "`np.cumsum(x, axis)` in x's dtype; with `reverse`, summed from the end"))


def _cumprod_rule(prim, x, *, axis):
    return _cumsum_rule(prim, x, axis=axis)


define("cumprod", "host", _cumprod_rule,
       lambda x, *, axis: np.cumprod(x, axis=axis, dtype=np.asarray(x).dtype),
       section="Reductions and scans",
       doc=Doc("x", "`axis`", "same as x",
               "`np.cumprod(x, axis)` in x's dtype: NumPy's running product from the left, bit "
               "for bit (compiled code calls it between kernels)"))


def _matmul_rule(prim, a, b):
    if a.ndim < 2 or a.ndim != b.ndim or a.dtype != b.dtype or a.dtype == "bool" \
            or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        fail(prim, "needs [..., m, k] @ [..., k, n] with equal batch shapes and dtypes", a, b)
    return a.with_shape(a.shape[:-1] + b.shape[-1:])


define("matmul", "linalg", _matmul_rule, np.matmul, section="Linear algebra",
       doc=Doc("a: [..., m, k], b: [..., k, n], equal numeric dtypes, equal batch dims, "
               "rank ≥ 2", "", "[..., m, n]",
               "`a @ b`; 1-D operands and batch broadcasting are made explicit by the tracer "
               "with `reshape` and `broadcast_in_dim`"))
