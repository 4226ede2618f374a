"""fusegrad.numpy: NumPy-named functions that work on arrays, eager tensors and tracers.

Each function normalizes NumPy's calling conventions (axis=None, negative axes, keepdims,
dtype promotion rules) and ends in lax, i.e. in bind. The tables HANDLED_FUNCTIONS and
HANDLED_UFUNCS map NumPy's own functions to these, so that `np.tanh(x)` or `np.sum(x, axis=0)`
on a tensor or tracer lands here through `__array_ufunc__` / `__array_function__`.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from . import lax
from .dispatch import level
from .ir.types import dtype_name

pi, e, inf, nan, newaxis = np.pi, np.e, np.inf, np.nan, None
float32, float64, int64, bool_ = np.float32, np.float64, np.int64, np.bool_


def _shape(x) -> tuple:
    return tuple(x.shape) if level(x) else np.shape(x)


def _dtype(x) -> np.dtype:
    if level(x) or isinstance(x, (np.ndarray, np.generic)):
        return np.dtype(x.dtype)
    return np.result_type(x) if isinstance(x, (bool, int, float)) else np.asarray(x).dtype


def _ndim(x) -> int:
    return len(_shape(x))


def _is_float(x) -> bool:
    return _dtype(x).kind == "f"


def _axes(axis, ndim) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < builtins.max(ndim, 1):
            raise np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension "
                                          f"{ndim}")
        out.append(a % builtins.max(ndim, 1))
    return tuple(sorted(out))


def _keep(y, shape, axes, keepdims):
    if not keepdims:
        return y
    return lax.reshape(y, [1 if i in axes else n for i, n in enumerate(shape)])


def astype(x, dtype):
    return lax.convert(x, dtype_name(dtype))


# -- elementwise ---------------------------------------------------------------------------

def _float_unary(prim):
    op = getattr(lax, prim)

    def fn(x):
        return op(x if _is_float(x) else lax.convert(x, "f64"))
    fn.__name__ = prim
    return fn


exp, log, log1p, expm1, sqrt, sin, cos, tanh, erf = map(
    _float_unary, ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "erf"))
sigmoid = _float_unary("logistic")
rsqrt = _float_unary("rsqrt")
negative, absolute, sign = lax.neg, lax.abs, lax.sign
abs = absolute
subtract = lax.sub
less, less_equal, greater, greater_equal = lax.lt, lax.le, lax.gt, lax.ge
equal, not_equal = lax.eq, lax.ne


def positive(x):
    return x


def _is_bool(x) -> bool:
    t = type(x)     # Python numbers first, then anything with a dtype: this runs on every add
    if t is float or t is int:      # and multiply
        return False
    if t is bool:
        return True
    dtype = getattr(x, "dtype", None)
    return dtype.kind == "b" if isinstance(dtype, np.dtype) else _dtype(x).kind == "b"


def _both_bool(x, y) -> bool:
    return _is_bool(x) and _is_bool(y)


def _bool_as(logical, numeric):
    """On two bools NumPy's add/maximum are `or` and multiply/minimum are `and`."""
    def fn(x, y):
        return logical(x, y) if _both_bool(x, y) else numeric(x, y)
    fn.__name__ = numeric.__name__
    return fn


def true_divide(x, y):
    if _dtype(x).kind != "f" and _dtype(y).kind != "f":
        x = lax.convert(x, "f64")
    return lax.div(x, y)


divide = true_divide


def power(x, y):
    return lax.pow(x, y)


def float_power(x, y):
    return lax.pow(astype(x, np.float64), y)


def square(x):
    return lax.mul(x, x)


def reciprocal(x):
    return true_divide(1.0, x)


def exp2(x):
    return exp(multiply(x, math.log(2.0)))


def log2(x):
    return true_divide(log(x), math.log(2.0))


def log10(x):
    return true_divide(log(x), math.log(10.0))


def sinh(x):
    return multiply(subtract(exp(x), exp(negative(x))), 0.5)


def cosh(x):
    return multiply(add(exp(x), exp(negative(x))), 0.5)


def tan(x):
    return true_divide(sin(x), cos(x))


def _as_bool(x):
    return x if _dtype(x) == np.bool_ else lax.ne(x, 0)


def logical_and(x, y):
    return lax.and_(_as_bool(x), _as_bool(y))


def logical_or(x, y):
    return lax.or_(_as_bool(x), _as_bool(y))


def logical_not(x):
    return lax.not_(_as_bool(x))


add, maximum = _bool_as(lax.or_, lax.add), _bool_as(lax.or_, lax.maximum)
multiply, minimum = _bool_as(lax.and_, lax.mul), _bool_as(lax.and_, lax.minimum)


def where(condition, x, y):
    return lax.select(_as_bool(condition), x, y)


def clip(x, a_min=None, a_max=None, *, min=None, max=None, **kwargs):  # noqa: A002
    """Clamp with gradient 1 inside the closed range and 0 outside, as the seed chapter."""
    _no_out(kwargs)
    a_min = min if a_min is None or a_min is np._NoValue else a_min
    a_max = max if a_max is None or a_max is np._NoValue else a_max
    if a_min is not None:
        x = where(less(x, a_min), a_min, x)
    if a_max is not None:
        x = where(greater(x, a_max), a_max, x)
    return x


def relu(x):
    return where(greater(x, 0), x, 0)


# -- reductions ----------------------------------------------------------------------------

def _numeric(x):
    return lax.convert(x, "i64") if _dtype(x) == np.bool_ else x


def _reduce(op, keeps_bool=False):
    def fn(x, axis=None, keepdims=False, dtype=None, **kwargs):
        _no_out(kwargs)
        x = x if dtype is None else astype(x, dtype)
        was_bool = keeps_bool and _dtype(x) == np.bool_
        x = _numeric(x)
        axes = _axes(axis, _ndim(x))
        y = _keep(op(x, axes), _shape(x), axes, keepdims)
        return lax.convert(y, "bool") if was_bool else y    # max/min of bools are bools
    return fn


_HARMLESS = {("mode", "raise"), ("casting", "same_kind")}   # NumPy's defaults


def _no_out(kwargs):
    """Refuse the NumPy keyword arguments fusegrad does not implement, rather than ignore them."""
    if kwargs.get("out") is not None:
        raise TypeError("fusegrad functions do not support out=; assign the result instead")
    for key, value in kwargs.items():
        if value is None or value is np._NoValue or (key, value) in _HARMLESS:
            continue
        what = " of reductions" if key in ("initial", "where") else ""
        raise TypeError(f"fusegrad does not support the {key}= argument{what}")


sum = _reduce(lax.reduce_sum)
prod = _reduce(lax.reduce_prod)
max = amax = _reduce(lax.reduce_max, keeps_bool=True)
min = amin = _reduce(lax.reduce_min, keeps_bool=True)


def _count(x, axes) -> int:
    return int(np.prod([_shape(x)[a] for a in axes], dtype=np.int64))


def mean(x, axis=None, keepdims=False, dtype=None, **kwargs):
    if dtype is None and not _is_float(x):
        dtype = np.float64
    x = x if dtype is None else astype(x, dtype)
    axes = _axes(axis, _ndim(x))
    return true_divide(sum(x, axes, keepdims, **kwargs), float(_count(x, axes)))


def var(x, axis=None, keepdims=False, ddof=0, dtype=None, **kwargs):
    centered = subtract(x, mean(x, axis, True, dtype, **kwargs))
    axes = _axes(axis, _ndim(x))
    count = builtins.max(_count(x, axes) - ddof, 0)     # NumPy's: ddof >= n divides by 0
    return true_divide(sum(square(centered), axes, keepdims), float(count))


def std(x, axis=None, keepdims=False, ddof=0, dtype=None, **kwargs):
    """sqrt(var). Where var is 0 (a constant slice, a 0-d x) the gradient is 0, as PyTorch's,
    not 0 * inf = nan: sqrt only sees the safe branch (as in norm)."""
    v = var(x, axis, keepdims, ddof, dtype, **kwargs)
    zero = equal(v, 0)
    return where(zero, 0.0, sqrt(where(zero, 1.0, v)))


def norm(x, ord=None, axis=None, keepdims=False):
    """The 2-norm. Its gradient at 0 is 0 (not nan): sqrt only sees the safe branch."""
    if ord not in (None, 2, "fro"):
        raise NotImplementedError(f"fusegrad supports the 2-norm only, not ord={ord!r}")
    squares = sum(square(x), axis, keepdims)
    positive = greater(squares, 0)
    return where(positive, sqrt(where(positive, squares, 1)), 0)


def _arg_reduce(op):
    def fn(x, axis=None, keepdims=False, **kwargs):
        _no_out(kwargs)
        if axis is None:
            y = op(reshape(x, (-1,)), 0)
            return reshape(y, (1,) * _ndim(x)) if keepdims else y
        (axis,) = _axes(axis, _ndim(x))
        return _keep(op(x, axis), _shape(x), (axis,), keepdims)
    return fn


argmax = _arg_reduce(lax.argmax)
argmin = _arg_reduce(lax.argmin)


def cumsum(x, axis=None, dtype=None, **kwargs):
    _no_out(kwargs)
    x = _numeric(x if dtype is None else astype(x, dtype))
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    (axis,) = _axes(axis, _ndim(x))
    return lax.cumsum(x, axis)


def logsumexp(x, axis=None, keepdims=False):
    axes = _axes(axis, _ndim(x))
    return _keep(lax.logsumexp(x, axes), _shape(x), axes, keepdims)


# -- shapes --------------------------------------------------------------------------------

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
    (axis,) = _axes(axis, _ndim(x))
    return lax.take_along_axis(x, _indices(indices), axis)


def _indices(idx):
    if level(idx):
        if _dtype(idx).kind not in "iu":
            raise IndexError(f"indices must be integers, got {_dtype(idx)}")
        return idx if _dtype(idx) == np.int64 else astype(idx, np.int64)
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise IndexError(f"indices must be integers, got {idx.dtype}")
    return idx.astype(np.int64)


def matmul(a, b, **kwargs):
    _no_out(kwargs)
    a_vec, b_vec = _ndim(a) == 1, _ndim(b) == 1
    if _ndim(a) == 0 or _ndim(b) == 0:
        raise _shape_error("matmul: operands must be at least 1-D (use * for scalars)", a, b)
    if _shape(a)[-1] != _shape(b)[0 if b_vec else -2]:
        raise _shape_error("matmul: inner dimensions differ", a, b)
    if a_vec:
        a = reshape(a, (1,) + _shape(a))
    if b_vec:
        b = reshape(b, _shape(b) + (1,))
    out = lax.matmul(a, b)
    if a_vec or b_vec:
        shape = _shape(out)
        out = reshape(out, shape[:-2] + (() if a_vec else shape[-2:-1])
                      + (() if b_vec else shape[-1:]))
    return out


def _shape_error(msg, a, b):
    from .ir.primitives import ShapeError
    from .tracer.location import user_location
    return ShapeError(f"{msg}: shapes {list(_shape(a))} @ {list(_shape(b))} at "
                      f"{user_location()}")


def dot(a, b):
    if _ndim(a) == 0 or _ndim(b) == 0:      # np.dot makes Python scalars arrays: not weak
        return multiply(*(x if level(x) else np.asarray(x) for x in (a, b)))
    if _ndim(b) > 2:
        raise NotImplementedError("fusegrad's dot supports b of rank <= 2; use matmul")
    return matmul(a, b)


def outer(a, b):
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def vdot(a, b):
    return sum(multiply(ravel(a), ravel(b)))


def inner(a, b):
    """np.inner: a * b if either is 0-d, else the sum over both last axes, of shape
    a.shape[:-1] + b.shape[:-1] (one matmul of the operands flattened to rows)."""
    if _ndim(a) == 0 or _ndim(b) == 0:
        return dot(a, b)
    k = _shape(a)[-1]
    if _shape(b)[-1] != k:
        raise _shape_error("inner: the last axes differ", a, b)
    if _ndim(a) == 1 and _ndim(b) == 1:
        return vdot(a, b)
    rows = matmul(reshape(a, (-1, k)), transpose(reshape(b, (-1, k))))
    return reshape(rows, _shape(a)[:-1] + _shape(b)[:-1])


def copy(x):
    """A new array object, so that item assignment into it leaves x alone: for tensors and
    tracers a convert to x's own dtype (a copy eagerly; simplify drops it from the IR)."""
    return lax.convert(x, _dtype(x)) if level(x) else np.copy(x)


def full_like(x, fill_value, dtype=None, order="K", subok=True, shape=None):
    """An eager tensor's is a tensor (as torch.zeros_like), so `z[i] = v` records into it."""
    out = lax.full(_shape(x) if shape is None else _shape_arg(shape), fill_value,
                   dtype or _dtype(x))
    return type(x)(out) if level(x) == 1 else out


def zeros_like(x, dtype=None, order="K", subok=True, shape=None):
    return full_like(x, 0, dtype, shape=shape)


def ones_like(x, dtype=None, order="K", subok=True, shape=None):
    return full_like(x, 1, dtype, shape=shape)


def _shape_arg(shape) -> tuple:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)


def shape(x):
    return _shape(x)


def ndim(x):
    return _ndim(x)


def size(x):
    return int(np.prod(_shape(x), dtype=np.int64))


from .indexing import getitem  # noqa: E402,F401 - indexing uses the functions above
from .rounding import (around, ceil, floor, fmod, mod, remainder, rint,  # noqa: E402,F401
                       round, trunc)
from .constructors import array, asarray, index_update  # noqa: E402,F401 - as indexing

HANDLED_UFUNCS = {
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.true_divide: true_divide,
    np.power: power, np.maximum: maximum, np.minimum: minimum, np.negative: negative,
    np.positive: positive, np.absolute: absolute, np.sign: sign, np.exp: exp, np.log: log,
    np.log1p: log1p, np.expm1: expm1, np.sqrt: sqrt, np.sin: sin, np.cos: cos, np.tan: tan,
    np.tanh: tanh, np.sinh: sinh, np.cosh: cosh, np.exp2: exp2, np.log2: log2,
    np.log10: log10, np.square: square, np.reciprocal: reciprocal, np.less: less,
    np.less_equal: less_equal, np.greater: greater, np.greater_equal: greater_equal,
    np.equal: equal, np.not_equal: not_equal, np.logical_and: logical_and,
    np.logical_or: logical_or, np.logical_not: logical_not, np.matmul: matmul,
    np.float_power: float_power, np.floor: floor, np.ceil: ceil, np.trunc: trunc,
    np.rint: rint, np.remainder: remainder, np.fmod: fmod,
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
