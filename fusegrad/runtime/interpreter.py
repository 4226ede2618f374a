"""The IR interpreter: each primitive's NumPy implementation and the env/read/write loop.

This is the reference semantics of the IR; every backend is compared with it. The same
`impl_rules` table evaluates primitives on concrete arrays for the eager engine and for bind()
on plain NumPy inputs. Implementations broadcast and promote as NumPy does, which the eager
engine relies on; in the IR operands already have equal types.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ..ir.types import NP_DTYPES



def _erf(x):
    """scipy's erf when available (imported lazily: it costs ~0.5 s), else math.erf."""
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is optional
        erf = np.frompyfunc(math.erf, 1, 1)
    return np.asarray(erf(x), dtype=np.asarray(x).dtype)


impl_rules: dict = {}


def _impl(*names):
    def register(fn):
        for name in names:
            impl_rules[name] = fn
        return fn
    return register


_UFUNCS = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "exp": np.exp, "log": np.log,
    "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "add": np.add, "sub": np.subtract, "mul": np.multiply, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not, "select": np.where,
    "matmul": np.matmul, "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "trunc": np.trunc, "remainder": np.remainder, "fmod": np.fmod,
}
impl_rules.update(_UFUNCS)


@_impl("rsqrt")
def _rsqrt(x):
    return 1 / np.sqrt(x)


@_impl("erf")
def _erf_impl(x):
    x = np.asarray(x)
    return np.asarray(_erf(x), dtype=x.dtype)


@_impl("logistic")
def _logistic(x):
    e = np.exp(-np.abs(x))
    return np.where(np.asarray(x) >= 0, 1, e) / (1 + e)


@_impl("div")
def _div(x, y):
    if np.asarray(x).dtype.kind in "iub" and np.asarray(y).dtype.kind in "iub":
        return np.floor_divide(x, y)
    return np.true_divide(x, y)


@_impl("convert")
def _convert(x, *, dtype):
    return np.asarray(x).astype(NP_DTYPES[dtype])


@_impl("broadcast_in_dim")
def _broadcast_in_dim(x, *, shape, dims):
    x = np.asarray(x)
    expanded = [1] * len(shape)
    for axis, d in enumerate(dims):
        expanded[d] = x.shape[axis]
    return np.broadcast_to(x.reshape(expanded), tuple(shape))


@_impl("reshape")
def _reshape(x, *, shape):
    return np.reshape(x, tuple(shape))


@_impl("transpose")
def _transpose(x, *, perm):
    return np.transpose(x, tuple(perm))


@_impl("slice")
def _slice(x, *, start, stop, step):
    return np.asarray(x)[tuple(map(slice, start, stop, step))]


@_impl("pad")
def _pad(x, *, low, high, interior):
    x = np.asarray(x)
    shape = [lo + hi + n + max(n - 1, 0) * it
             for n, lo, hi, it in zip(x.shape, low, high, interior)]
    out = np.zeros(shape, x.dtype)
    out[tuple(slice(lo, lo + n + max(n - 1, 0) * it, it + 1)
              for n, lo, it in zip(x.shape, low, interior))] = x
    return out


@_impl("concatenate")
def _concatenate(*xs, axis):
    return np.concatenate(xs, axis=axis)


@_impl("take")
def _take(x, idx, *, axis):
    return np.take(x, idx, axis=axis)


@_impl("take_along_axis")
def _take_along_axis(x, idx, *, axis):
    return np.take_along_axis(np.asarray(x), np.asarray(idx), axis=axis)


@_impl("scatter_add")
def _scatter_add(idx, g, *, axis, shape):
    g = np.asarray(g)
    out = np.zeros(shape, g.dtype)
    np.add.at(out, (slice(None),) * axis + (np.asarray(idx),), g)
    return out


@_impl("scatter_add_along_axis")
def _scatter_add_along_axis(idx, g, *, axis, shape):
    g, idx = np.asarray(g), np.asarray(idx)
    out = np.zeros(shape, g.dtype)
    index = list(np.indices(idx.shape, sparse=True))
    index[axis] = idx
    np.add.at(out, tuple(index), g)
    return out


def _reducer(fn):
    def reduce(x, *, axes):
        x = np.asarray(x)
        return np.asarray(fn(x, axis=tuple(axes)), dtype=x.dtype)
    return reduce


impl_rules["reduce_sum"] = _reducer(np.sum)
impl_rules["reduce_max"] = _reducer(np.max)
impl_rules["reduce_min"] = _reducer(np.min)
impl_rules["reduce_prod"] = _reducer(np.prod)


@_impl("argmax")
def _argmax(x, *, axis):
    return np.argmax(x, axis=axis).astype(np.int64)


@_impl("argmin")
def _argmin(x, *, axis):
    return np.argmin(x, axis=axis).astype(np.int64)


@_impl("cumsum")
def _cumsum(x, *, axis, reverse=False):
    x = np.asarray(x)
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
    return np.cumsum(x, axis=axis, dtype=x.dtype)


@_impl("full")
def _full(*, shape, dtype, value):
    return np.full(tuple(shape), value, NP_DTYPES[dtype])


@_impl("iota")
def _iota(*, shape, dtype, axis):
    index = np.arange(shape[axis], dtype=NP_DTYPES[dtype])
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.broadcast_to(index.reshape(view), tuple(shape))


@_impl("constant")
def _constant(*, value):
    return value


def _stable_max(x, axes):
    """max over axes, keepdims, with infinite maxima replaced by 0 so x - m never makes nan."""
    m = np.max(x, axis=axes, keepdims=True)
    return np.where(np.isfinite(m), m, 0).astype(x.dtype)


@_impl("logsumexp")
def _logsumexp(x, *, axes):
    x = np.asarray(x)
    axes = tuple(axes)
    m = _stable_max(x, axes)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return np.squeeze(out, axis=axes)


@_impl("softmax")
def _softmax(x, *, axis):
    x = np.asarray(x)
    e = np.exp(x - _stable_max(x, (axis,)))
    return e / np.sum(e, axis=axis, keepdims=True)


@_impl("log_softmax")
def _log_softmax(x, *, axis):
    x = np.asarray(x)
    return x - np.expand_dims(_logsumexp(x, axes=(axis,)), axis)


@_impl("cross_entropy")
def _cross_entropy(logits, targets):
    logp = _log_softmax(logits, axis=1)
    picked = np.take_along_axis(logp, np.asarray(targets)[:, None], axis=1)
    return np.asarray(-np.mean(picked), dtype=logp.dtype)


@_impl("layer_norm")
def _layer_norm(x, *, ndim, eps):
    x = np.asarray(x)
    axes = tuple(range(x.ndim - ndim, x.ndim))
    centered = x - np.mean(x, axis=axes, keepdims=True)
    var = np.mean(centered * centered, axis=axes, keepdims=True)
    return centered / np.sqrt(var + x.dtype.type(eps))


@_impl("gelu")
def _gelu(x, *, approximate):
    x = np.asarray(x)
    if approximate:
        c = x.dtype.type(math.sqrt(2 / math.pi))
        return 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + _erf_impl(x / x.dtype.type(math.sqrt(2))))


try:  # NumPy 2's error state is a context variable; np.errstate() costs ~1 us per op
    from numpy._core._ufunc_config import _extobj_contextvar as _errstate_var
    with np.errstate(all="ignore"):
        _IGNORE_ERRORS = _errstate_var.get()
except (ImportError, AttributeError):  # pragma: no cover - other NumPy versions
    _errstate_var = None


_F64 = np.dtype(np.float64)
_SCALAR_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def apply(prim: str, args, params) -> np.ndarray:
    """Evaluate one primitive on concrete operands, floating-point warnings off; always
    returns an ndarray. (The eager engine calls this once per op: it sets NumPy's error state
    through its context variable, which np.errstate() does at ten times the cost.)

    Adding, subtracting or multiplying two float64 scalars is done in Python floats, which
    round exactly as NumPy does (IEEE binary64) and never warn, at a quarter of the cost of a
    ufunc call on 0-d arrays: scalar programs on the eager engine are made of these."""
    arith = _SCALAR_ARITH.get(prim)
    if arith is not None:
        a, b = args
        ta, tb = type(a), type(b)
        if (ta is float or ta is np.ndarray and a.dtype is _F64 and not a.shape) and \
                (tb is float or tb is np.ndarray and b.dtype is _F64 and not b.shape):
            return np.asarray(arith(float(a), float(b)))
    if _errstate_var is None:
        with np.errstate(all="ignore"):
            return np.asarray(impl_rules[prim](*args, **params))
    token = _errstate_var.set(_IGNORE_ERRORS)
    try:
        return np.asarray(impl_rules[prim](*args, **params))
    finally:
        _errstate_var.reset(token)


def eval_function(fn, args) -> list:
    """Run a Function on concrete arrays, one op at a time: the reference semantics."""
    env = {}

    def read(v):
        return env[v]

    def write(v, x):
        x = np.asarray(x)
        if x.dtype != v.type.np_dtype:
            x = x.astype(v.type.np_dtype)
        if x.shape != v.type.shape:
            raise RuntimeError(f"interpreter: got shape {x.shape} for a value of type {v.type}")
        env[v] = x

    for p, a in zip(fn.params, args, strict=True):
        write(p, a)
    for op in fn.ops:
        try:
            out = apply(op.prim, [read(v) for v in op.inputs], op.params)
        except IndexError as e:     # a gather's index out of bounds: say where it was used
            raise IndexError(f"{e} (at {op.loc})" if op.loc else str(e)) from None
        write(op.out, out)
    return [read(r) for r in fn.results]


class Interpreted:
    """The "interp" backend: the optimized Function run by eval_function."""

    kernels = 0
    source = ""

    def __init__(self, fn):
        self.ir = fn

    def __call__(self, leaves) -> list:
        return eval_function(self.ir, leaves)
