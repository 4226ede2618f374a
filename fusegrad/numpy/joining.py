"""Joining and splitting: the stack family, append, the split family, kron, pad, cross.

All are compositions of index maps (concatenate, slice, broadcast_in_dim, reshape, rev) and
elementwise products, so compiled code stays fused loops and the gradients are the index maps'
transposes: a split's pieces get their slices of g back (pads of g), a tile or kron sums g over
the copies.

pad: mode "constant" joins blocks of the constant value axis by axis (the last axis's value
wins in a corner, as NumPy's); "edge", "reflect", "symmetric" and "wrap" are, per axis, the
gather of NumPy's own pad of an index vector (np.pad(arange(n), ...) says which element lands
where), made of slices, reversed slices and broadcasts (shapes.gather_axis). Each padded
element's gradient is the sum over the places it was copied to.
"""

from __future__ import annotations

import builtins
import warnings

import numpy as np

from .. import lax
from ..dispatch import level
from ..ir.types import dtype_name
from .base import _axes, _dtype, _ndim, _shape, astype
from .elementwise import multiply, negative, subtract
from .shapes import (_axis_slice, atleast_1d, atleast_2d, atleast_3d, concatenate, gather_axis,
                     moveaxis, ravel, reshape, stack)


def _cast_all(arrays, dtype):
    arrays = [a if level(a) else np.asarray(a) for a in arrays]
    if dtype is None:
        return arrays
    return [a if _dtype(a) == np.dtype(dtype) else astype(a, dtype) for a in arrays]


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


# -- the stack family ------------------------------------------------------------------------


def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate(_cast_all(_as_tuple(atleast_2d(*tup)), dtype), 0)


def hstack(tup, *, dtype=None, casting="same_kind"):
    arrays = _cast_all(_as_tuple(atleast_1d(*tup)), dtype)
    return concatenate(arrays, 0 if arrays and _ndim(arrays[0]) == 1 else 1)


def dstack(tup):
    return concatenate(_as_tuple(atleast_3d(*tup)), 2)


def column_stack(tup):
    """1-D (and 0-d) arrays become columns; 2-D ones are joined as they are."""
    columns = [reshape(a, (-1, 1)) if _ndim(a) < 2 else a for a in _cast_all(tup, None)]
    return concatenate(columns, 1)


def append(arr, values, axis=None):
    if axis is None:
        arr, values = ravel(arr), ravel(values)
        axis = _ndim(arr) - 1
    return concatenate(_cast_all((arr, values), None), axis)


# -- the split family ------------------------------------------------------------------------


def array_split(ary, indices_or_sections, axis=0):
    """NumPy's: `k` pieces, the first n % k one longer, or the pieces between the given
    indices (Python slice semantics: negative indices count from the end, empty past it)."""
    (axis,) = _axes(axis, _ndim(ary))
    n = _shape(ary)[axis]
    if np.ndim(indices_or_sections) == 0:
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError("number sections must be larger than 0.")
        each, extras = divmod(n, k)
        points = np.cumsum([0] + extras * [each + 1] + (k - extras) * [each]).tolist()
    else:
        points = [0] + [int(i) for i in indices_or_sections] + [n]
    pieces = []
    for st, end in zip(points[:-1], points[1:]):
        a, b, _ = builtins.slice(st, end).indices(n)
        pieces.append(_axis_slice(ary, axis, a, builtins.max(a, b)))
    return pieces


def split(ary, indices_or_sections, axis=0):
    """array_split that requires equal pieces when given their number."""
    if np.ndim(indices_or_sections) == 0 and _shape(ary)[_axes(axis, _ndim(ary))[0]] \
            % int(indices_or_sections):
        raise ValueError("array split does not result in an equal division")
    return array_split(ary, indices_or_sections, axis)


def hsplit(ary, indices_or_sections):
    if _ndim(ary) == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(ary, indices_or_sections, 1 if _ndim(ary) > 1 else 0)


def vsplit(ary, indices_or_sections):
    if _ndim(ary) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    if _ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(ary, indices_or_sections, 2)


def unstack(x, /, *, axis=0):
    """The slices along axis, each without it (NumPy 2.1)."""
    (axis,) = _axes(axis, _ndim(x))
    shape = _shape(x)
    return tuple(reshape(_axis_slice(x, axis, i, i + 1), shape[:axis] + shape[axis + 1:])
                 for i in range(shape[axis]))


# -- products that join ------------------------------------------------------------------------


def kron(a, b):
    """NumPy's: both operands padded to one rank, interleaved with unit axes, multiplied
    (a broadcast product, no copies) and the pairs of axes merged."""
    nda, ndb = _ndim(a), _ndim(b)
    if nda == 0 or ndb == 0:
        return multiply(a, b)
    nd = builtins.max(nda, ndb)
    as_ = (1,) * (nd - nda) + _shape(a)
    bs = (1,) * (nd - ndb) + _shape(b)
    a = reshape(a, [n for d in as_ for n in (d, 1)])
    b = reshape(b, [n for d in bs for n in (1, d)])
    return reshape(multiply(a, b), [p * q for p, q in zip(as_, bs)])


def _component(v, c):
    return reshape(_axis_slice(v, _ndim(v) - 1, c, c + 1), _shape(v)[:-1])


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """NumPy's formulas, in its order of operations, for vectors of 2 or 3 components."""
    if axis is not None:
        axisa = axisb = axisc = axis
    if _ndim(a) < 1 or _ndim(b) < 1:
        raise ValueError("At least one array has zero dimension")
    a, b = moveaxis(a, axisa, -1), moveaxis(b, axisb, -1)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n"
                         "(dimension must be 2 or 3)")
    if na == 2 or nb == 2:
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of "
                      "3-dimensional vectors instead. (deprecated in NumPy 2.0)",
                      DeprecationWarning, stacklevel=2)
    dtype = np.promote_types(_dtype(a), _dtype(b))
    a, b = _cast_all((a, b), dtype)
    (a0, a1, *a2), (b0, b1, *b2) = ([_component(v, c) for c in range(n)]
                                    for v, n in ((a, na), (b, nb)))
    cp2 = subtract(multiply(a0, b1), multiply(a1, b0))
    if na == 2 and nb == 2:
        return cp2
    if na == 2:
        cp0, cp1 = multiply(a1, b2[0]), negative(multiply(a0, b2[0]))
    elif nb == 2:
        cp0, cp1 = negative(multiply(a2[0], b1)), multiply(a2[0], b0)
    else:
        cp0 = subtract(multiply(a1, b2[0]), multiply(a2[0], b1))
        cp1 = subtract(multiply(a2[0], b0), multiply(a0, b2[0]))
    return moveaxis(stack([cp0, cp1, cp2], -1), -1, axisc)


# -- pad ---------------------------------------------------------------------------------------

_INDEX_MODES = ("edge", "reflect", "symmetric", "wrap")


def _pairs(value, ndim, what):
    """NumPy's _as_pairs: a number, a pair or one pair per axis, as ndim (before, after)."""
    arr = np.asarray(value)
    try:
        return np.broadcast_to(arr, (ndim, 2)).tolist() if arr.ndim else [[arr.item()] * 2] * ndim
    except ValueError:
        raise ValueError(f"{what} of shape {arr.shape} cannot be broadcast to ({ndim}, 2)") \
            from None


def pad(array, pad_width, mode="constant", **kwargs):
    """Modes constant (constant_values per axis and side, or one traced scalar), edge,
    reflect, symmetric and wrap (reflect_type="even"); other modes raise."""
    ndim = _ndim(array)
    if isinstance(pad_width, dict):
        seq = [(0, 0)] * ndim
        for ax, width in pad_width.items():
            seq[ax] = (width, width) if np.ndim(width) == 0 else tuple(width)
        pad_width = seq
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    widths = [[int(w) for w in pair] for pair in _pairs(widths, ndim, "pad_width")]
    if any(w < 0 for pair in widths for w in pair):
        raise ValueError("index can't contain negative values")
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"},
               "symmetric": {"reflect_type"}, "edge": set(), "wrap": set()}
    if not isinstance(mode, str) or mode not in allowed:
        raise NotImplementedError(f"fusegrad's np.pad supports the modes {sorted(allowed)}, "
                                  f"not {mode!r}")
    if set(kwargs) - allowed[mode]:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': "
                         f"{set(kwargs) - allowed[mode]}")
    if kwargs.get("reflect_type", "even") != "even":
        raise NotImplementedError("fusegrad's np.pad supports reflect_type='even' only")
    if mode == "constant":
        return _pad_constant(array, widths, kwargs.get("constant_values", 0))
    for ax, (lo, hi) in enumerate(widths):
        if (lo or hi) and _shape(array)[ax] == 0:
            raise ValueError(f"can't extend empty axis {ax} using modes other than 'constant' "
                             f"or 'empty'")
        if lo or hi:
            index = np.pad(np.arange(_shape(array)[ax]), (lo, hi), mode=mode)
            array = gather_axis(array, index, ax)
    return array


def _pad_constant(array, widths, values):
    dtype = _dtype(array)
    if level(values):
        if _ndim(values) != 0:
            raise NotImplementedError("traced constant_values must be a scalar")
        fill = [[values, values]] * len(widths)
    else:
        fill = _pairs(values, len(widths), "constant_values")
    if not any(lo or hi for lo, hi in widths):
        return array
    for ax, ((lo, hi), (vlo, vhi)) in enumerate(zip(widths, fill)):
        pieces = [_block(array, ax, lo, vlo, dtype), array, _block(array, ax, hi, vhi, dtype)]
        pieces = [p for p in pieces if p is not None]
        if len(pieces) > 1:
            array = lax.concatenate(_cast_all(pieces, dtype), ax)
    return array


def _block(array, axis, width, value, dtype):
    """`width` copies of value along axis, of array's other sizes and dtype (None if 0)."""
    if not width:
        return None
    shape = list(_shape(array))
    shape[axis] = width
    if level(value):
        value = value if _dtype(value) == dtype else astype(value, dtype)
        return lax.broadcast_in_dim(value, shape, ())
    return lax.full(shape, np.asarray(value).astype(dtype), dtype_name(dtype))


__all__ = [
    "append", "array_split", "column_stack", "cross", "dsplit", "dstack", "hsplit", "hstack",
    "kron", "pad", "split", "unstack", "vsplit", "vstack",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.vstack: vstack, np.hstack: hstack, np.dstack: dstack, np.column_stack: column_stack,
    np.append: append, np.array_split: array_split, np.split: split, np.hsplit: hsplit,
    np.vsplit: vsplit, np.dsplit: dsplit, np.kron: kron, np.cross: cross, np.pad: pad,
    np.unstack: unstack,
}
