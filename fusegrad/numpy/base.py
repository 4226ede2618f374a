"""The helpers every fusegrad.numpy function uses: shapes, dtypes, axes and keyword checks.

They work on arrays, Python numbers, eager tensors and tracers alike (`level(x)` tells the boxed
ones apart). The other modules of the package import from here and never the other way.
"""

from __future__ import annotations

import builtins

import numpy as np

from .. import lax
from ..dispatch import level
from ..ir.primitives import ShapeError
from ..ir.types import dtype_name
from ..tracer.location import user_location

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


def _is_bool(x) -> bool:
    t = type(x)     # Python numbers first, then anything with a dtype: this runs on every add
    if t is float or t is int:      # and multiply
        return False
    if t is bool:
        return True
    dtype = getattr(x, "dtype", None)
    return dtype.kind == "b" if isinstance(dtype, np.dtype) else _dtype(x).kind == "b"


def _as_bool(x):
    return x if _dtype(x) == np.bool_ else lax.ne(x, 0)


def _numeric(x):
    return lax.convert(x, "i64") if _dtype(x) == np.bool_ else x


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


def _indices(idx):
    if level(idx):
        if _dtype(idx).kind not in "iu":
            raise IndexError(f"indices must be integers, got {_dtype(idx)}")
        return idx if _dtype(idx) == np.int64 else astype(idx, np.int64)
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise IndexError(f"indices must be integers, got {idx.dtype}")
    return idx.astype(np.int64)


def _shape_arg(shape) -> tuple:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)


def _shape_error(msg, a, b):
    return ShapeError(f"{msg}: shapes {list(_shape(a))} @ {list(_shape(b))} at "
                      f"{user_location()}")
