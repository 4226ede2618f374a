"""fusegrad.numpy: NumPy-named functions that work on arrays, eager tensors and tracers.

Each function normalizes NumPy's calling conventions (axis=None, negative axes, keepdims,
dtype promotion rules) and ends in lax, i.e. in bind. The tables HANDLED_FUNCTIONS and
HANDLED_UFUNCS map NumPy's own functions to these, so that `np.tanh(x)` or `np.sum(x, axis=0)`
on a tensor or tracer lands here through `__array_ufunc__` / `__array_function__`.

The modules import in one direction: base (shapes, dtypes, axes, keyword checks) <- elementwise
<- shapes <- reductions <- linalg, and indexing, rounding and constructors on top; this file
only gathers their names and builds the two tables.
"""

from __future__ import annotations

import numpy as np

# Every name imported here is public as fusegrad.numpy.<name> (the _helpers for fusegrad.nn and
# transforms.py), whether or not this file uses it.
# ruff: noqa: F401
from .base import (
    _axes, _dtype, _indices, _is_float, _keep, _ndim, _no_out, _numeric, _shape, astype, bool_,
    e, float32, float64, inf, int64, nan, newaxis, pi)
from .constructors import (array, asarray, copy, full_like, index_update, ones_like,
                           zeros_like)
from .elementwise import (UFUNC_FUNCTIONS, abs, absolute, add, clip, cosh, divide, equal, erf,
                          exp2, float_power, greater, greater_equal, less, less_equal, log2,
                          log10, logical_and, logical_not, logical_or, maximum, minimum,
                          multiply, negative, not_equal, positive, power, reciprocal, relu,
                          rsqrt, sigmoid, sign, sinh, square, subtract, tan, true_divide, where)
from .indexing import getitem
from .linalg import dot, inner, matmul, outer, vdot
from .reductions import (amax, amin, argmax, argmin, cumsum, logsumexp, max, mean, min, norm,
                         prod, std, sum, var)
from .rounding import around, ceil, floor, fmod, mod, remainder, rint, round, trunc
from .shapes import (broadcast_to, concatenate, expand_dims, moveaxis, ndim, ravel, reshape,
                     shape, size, squeeze, stack, swapaxes, take, take_along_axis, transpose)

globals().update((ufunc.__name__, fn) for ufunc, fn in UFUNC_FUNCTIONS.items())  # exp, tanh...

HANDLED_UFUNCS = {
    **UFUNC_FUNCTIONS,
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.true_divide: true_divide,
    np.power: power, np.maximum: maximum, np.minimum: minimum, np.negative: negative,
    np.positive: positive, np.absolute: absolute, np.sign: sign, np.tan: tan, np.sinh: sinh,
    np.cosh: cosh, np.exp2: exp2, np.log2: log2, np.log10: log10, np.square: square,
    np.reciprocal: reciprocal, np.less: less, np.less_equal: less_equal, np.greater: greater,
    np.greater_equal: greater_equal, np.equal: equal, np.not_equal: not_equal,
    np.logical_and: logical_and, np.logical_or: logical_or, np.logical_not: logical_not,
    np.matmul: matmul, np.float_power: float_power, np.floor: floor, np.ceil: ceil,
    np.trunc: trunc, np.rint: rint, np.remainder: remainder, np.fmod: fmod,
}

HANDLED_FUNCTIONS = {
    np.sum: sum, np.prod: prod, np.max: max, np.amax: max, np.min: min, np.amin: min,
    np.mean: mean, np.var: var, np.std: std, np.argmax: argmax, np.argmin: argmin,
    np.cumsum: cumsum, np.reshape: reshape, np.ravel: ravel, np.transpose: transpose,
    np.swapaxes: swapaxes, np.moveaxis: moveaxis, np.expand_dims: expand_dims,
    np.squeeze: squeeze, np.broadcast_to: broadcast_to, np.concatenate: concatenate,
    np.stack: stack, np.take: take, np.take_along_axis: take_along_axis, np.where: where,
    np.clip: clip, np.dot: dot, np.outer: outer, np.vdot: vdot, np.inner: inner,
    np.copy: copy, np.zeros_like: zeros_like, np.ones_like: ones_like,
    np.full_like: full_like, np.shape: shape, np.ndim: ndim, np.size: size,
    np.linalg.norm: norm, np.matmul: matmul, np.round: round, np.around: around,
    # NumPy dispatches its constructors only given like=x; without it conversion.py raises
    np.array: array, np.asarray: asarray, np.asanyarray: asarray, np.ascontiguousarray: asarray,
}
