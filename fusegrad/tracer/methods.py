"""ArrayMethods: the NumPy (and a few PyTorch) operators and methods shared by eager tensors
and tracers. Every method forwards to fusegrad.numpy, so the two value types behave alike.

A class using it provides `shape`, `dtype` and `ndim`, plus `_fg_level` / `_fg_bind` for bind.

The mixin sits below both value types (tracer.py and runtime/tensor.py import it), so it
never imports fusegrad.numpy, which is above them: fusegrad.numpy installs itself here when
it is imported (`install`), as the engine installs itself in runtime/engine_entry.py.
Importing fusegrad imports fusegrad.numpy, so it is installed before any tensor or tracer
exists. `install` also fills UNARY_UFUNCS, NumPy's ufuncs that fusegrad.numpy maps to one
primitive of a float operand (the eager tensors' fast path).
"""

from __future__ import annotations

import numpy as np

from .location import foreign_caller, user_location

_FNP = None
UNARY_UFUNCS: dict = {}     # ufunc -> primitive name, filled by install


def install(namespace, unary_ufuncs: dict) -> None:
    """Called once by fusegrad/numpy/__init__.py with itself and its one-primitive ufuncs."""
    global _FNP
    _FNP = namespace
    UNARY_UFUNCS.update(unary_ufuncs)


def face():
    """fusegrad.numpy as it installed itself: the functions modules below it may call."""
    if _FNP is None:
        raise RuntimeError("fusegrad.numpy is not loaded: import fusegrad")
    return _FNP


_fnp = face


def _unsupported(what, hint=""):
    where = user_location(full=True)
    library = foreign_caller()         # reached inside SciPy: name what the user called
    if library is not None:
        what = f"{what}, which {library} calls,"
        hint = f" {library} is not differentiable through fusegrad yet.{hint}"
    raise TypeError(f"fusegrad has no rule for {what}{f' (at {where})' if where else ''}; "
                    f"it never falls back to a constant.{hint} See fusegrad.numpy for the "
                    f"supported functions.")


def _axis_arg(axis, dim):
    return dim if axis is None else axis


class ArrayMethods:
    __slots__ = ()
    __array_priority__ = 1000
    __hash__ = object.__hash__

    # operators -----------------------------------------------------------------------------
    def __add__(self, other): return _fnp().add(self, other)
    def __radd__(self, other): return _fnp().add(other, self)
    def __sub__(self, other): return _fnp().subtract(self, other)
    def __rsub__(self, other): return _fnp().subtract(other, self)
    def __mul__(self, other): return _fnp().multiply(self, other)
    def __rmul__(self, other): return _fnp().multiply(other, self)
    def __truediv__(self, other): return _fnp().true_divide(self, other)
    def __rtruediv__(self, other): return _fnp().true_divide(other, self)
    def __floordiv__(self, other): return _fnp().floor_divide(self, other)
    def __rfloordiv__(self, other): return _fnp().floor_divide(other, self)
    def __mod__(self, other): return _fnp().remainder(self, other)
    def __rmod__(self, other): return _fnp().remainder(other, self)
    def __pow__(self, other): return _fnp().power(self, other)
    def __rpow__(self, other): return _fnp().power(other, self)
    def __matmul__(self, other): return _fnp().matmul(self, other)
    def __rmatmul__(self, other): return _fnp().matmul(other, self)
    def __neg__(self): return _fnp().negative(self)
    def __pos__(self): return self
    def __abs__(self): return _fnp().absolute(self)
    def __lt__(self, other): return _fnp().less(self, other)
    def __le__(self, other): return _fnp().less_equal(self, other)
    def __gt__(self, other): return _fnp().greater(self, other)
    def __ge__(self, other): return _fnp().greater_equal(self, other)
    def __eq__(self, other): return _fnp().equal(self, other)  # noqa: E704
    def __ne__(self, other): return _fnp().not_equal(self, other)
    def __and__(self, other): return _fnp().logical_and(self, other)
    def __rand__(self, other): return _fnp().logical_and(other, self)
    def __or__(self, other): return _fnp().logical_or(self, other)
    def __ror__(self, other): return _fnp().logical_or(other, self)
    def __invert__(self): return _fnp().logical_not(self)
    def __getitem__(self, key): return _fnp().getitem(self, key)

    def __setitem__(self, key, value):
        """A functional update recorded like any op (constructors.index_update); the tensor or
        tracer then names the new value."""
        _fnp().constructors.set_item(self, key, value)

    def __iter__(self):
        """x[0], x[1], ...: the shape is static, so iterating (and `a, b = x`) is indexing."""
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    # NumPy protocols -----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fnp = _fnp()
        fn = fnp.HANDLED_UFUNCS.get(ufunc)
        if method != "__call__" or fn is None:
            name = ufunc.__name__ + ("" if method == "__call__" else f".{method}")
            return _unsupported(f"{_ufunc_module(ufunc)}.{name}")
        if kwargs.get("out") is not None:   # an in-place write: a tensor's own is handled first
            raise TypeError(
                f"numpy.{ufunc.__name__}(..., out=...) at {user_location(full=True)}: fusegrad "
                f"does not support out= here (writing a traced value, or a tensor into a NumPy "
                f"array, would lose its gradient); write `a = a + x` for a new value")
        for key, value in kwargs.items():
            if key != "out" and value is not None:
                raise TypeError(f"numpy.{ufunc.__name__}: fusegrad does not support the "
                                f"{key}= argument")
        return fn(*inputs)

    def __array_function__(self, func, types, args, kwargs):
        fn = _fnp().HANDLED_FUNCTIONS.get(func)
        if fn is None:
            name = f"{getattr(func, '__module__', 'numpy')}.{getattr(func, '__name__', func)}"
            return _unsupported(name,
                                " Write it with supported NumPy functions, or call it on "
                                "concrete values outside the traced function.")
        return fn(*args, **kwargs)

    # NumPy methods -------------------------------------------------------------------------
    def sum(self, axis=None, keepdims=False, dtype=None, *, dim=None, keepdim=None):
        return _fnp().sum(self, _axis_arg(axis, dim), keepdims or bool(keepdim), dtype)

    def mean(self, axis=None, keepdims=False, dtype=None, *, dim=None, keepdim=None):
        return _fnp().mean(self, _axis_arg(axis, dim), keepdims or bool(keepdim), dtype)

    def prod(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _fnp().prod(self, _axis_arg(axis, dim), keepdims or bool(keepdim))

    def max(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _fnp().max(self, _axis_arg(axis, dim), keepdims or bool(keepdim))

    def min(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _fnp().min(self, _axis_arg(axis, dim), keepdims or bool(keepdim))

    def var(self, axis=None, keepdims=False, ddof=0, *, dim=None, keepdim=None,
            correction=None):
        ddof = ddof if correction is None else correction
        return _fnp().var(self, _axis_arg(axis, dim), keepdims or bool(keepdim), ddof)

    def std(self, axis=None, keepdims=False, ddof=0, *, dim=None, keepdim=None):
        return _fnp().std(self, _axis_arg(axis, dim), keepdims or bool(keepdim), ddof)

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        """torch.Tensor.norm: the vector p-norm over `dim`, of every element when it is None
        ('fro' is p = 2, whatever the rank), or with p='nuc' the nuclear norm of the matrices
        over the two axes `dim` (a 2-D tensor's when None). np.linalg.norm keeps NumPy's
        meaning (matrix norms of 2-D arrays)."""
        linalg = _fnp().linalg
        x = self if dtype is None else self.astype(dtype)
        dim = tuple(dim) if isinstance(dim, list) else dim
        if p == "nuc":
            return linalg.norm(x, "nuc", dim, keepdim)
        if isinstance(p, str) and p != "fro":
            raise ValueError(f"norm: p must be a number, 'fro' or 'nuc', not {p!r}")
        return linalg.vector_norm(x, axis=dim, keepdims=keepdim, ord=2 if p == "fro" else p)

    def argmax(self, axis=None, keepdims=False):
        return _fnp().argmax(self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return _fnp().argmin(self, axis, keepdims)

    def cumsum(self, axis=None, *, dim=None):
        return _fnp().cumsum(self, _axis_arg(axis, dim))

    def reshape(self, *shape):
        return _fnp().reshape(self, shape[0] if len(shape) == 1 else shape)

    view = reshape

    def flatten(self):
        return _fnp().ravel(self)

    ravel = flatten

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        if len(axes) == 2 and self.ndim != 2:          # torch's transpose(dim0, dim1)
            return _fnp().swapaxes(self, *axes)
        return _fnp().transpose(self, axes or None)

    @property
    def T(self):
        return _fnp().transpose(self)

    @property
    def mT(self):
        return _fnp().swapaxes(self, -1, -2)

    def permute(self, *dims):
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return _fnp().transpose(self, dims)

    def swapaxes(self, axis1, axis2):
        return _fnp().swapaxes(self, axis1, axis2)

    def squeeze(self, axis=None):
        return _fnp().squeeze(self, axis)

    def unsqueeze(self, dim):
        return _fnp().expand_dims(self, dim)

    def expand(self, *sizes):
        sizes = sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
        offset = len(sizes) - self.ndim
        shape = [self.shape[i - offset] if s == -1 else s for i, s in enumerate(sizes)]
        return _fnp().broadcast_to(self, shape)

    def astype(self, dtype):
        return _fnp().astype(self, dtype)

    def clip(self, min=None, max=None):
        return _fnp().clip(self, min, max)

    clamp = clip

    def dot(self, other):
        return _fnp().dot(self, other)

    def copy(self):
        return _fnp().copy(self)

    clone = copy

    def exp(self): return _fnp().exp(self)
    def log(self): return _fnp().log(self)
    def log1p(self): return _fnp().log1p(self)
    def expm1(self): return _fnp().expm1(self)
    def tanh(self): return _fnp().tanh(self)
    def sigmoid(self): return _fnp().sigmoid(self)
    def relu(self): return _fnp().relu(self)
    def sqrt(self): return _fnp().sqrt(self)
    def rsqrt(self): return _fnp().rsqrt(self)
    def abs(self): return _fnp().absolute(self)
    def sin(self): return _fnp().sin(self)
    def cos(self): return _fnp().cos(self)
    def neg(self): return _fnp().negative(self)
    def square(self): return _fnp().square(self)
    def floor(self): return _fnp().floor(self)
    def ceil(self): return _fnp().ceil(self)
    def trunc(self): return _fnp().trunc(self)
    def round(self, decimals=0): return _fnp().round(self, decimals)


def _ufunc_module(ufunc) -> str:
    """`numpy` for NumPy's ufuncs; SciPy's (scipy.special.expit) name their module."""
    if getattr(np, ufunc.__name__, None) is ufunc:
        return "numpy"
    import sys
    special = sys.modules.get("scipy.special")
    return "scipy.special" if getattr(special, ufunc.__name__, None) is ufunc else "numpy"


__all__ = ["ArrayMethods", "np"]
