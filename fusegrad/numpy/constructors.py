"""Arrays built from tensors and tracers, and item assignment, as recorded operations; also
copy and the *_like constructors.

NumPy's own constructors cannot record (conversion.py says why and raises), so
fusegrad.numpy.array / asarray build an array from nested lists of tensors, tracers and numbers
as a stack, as autograd's np.array does. `x[key] = v` on a tensor or tracer is the functional
update `index_update(x, key, v)` (JAX's x.at[key].set(v), PyTorch's index_put_): NumPy itself
works out which elements of x the key selects and which element of v lands on each, on index
arrays, and the update is a take from v and a select against x. Its gradient needs no rule of
its own: x gets g where it was kept, v the sum of g over the places it was written to.

linspace with traced endpoints follows NumPy's arithmetic: start + i * ((stop - start) / div),
the last sample replaced by stop itself. (NumPy, where that step underflows to 0, divides i
first; a traced step's value is not known, so that denormal case is not reproduced.) meshgrid is
reshapes and broadcasts.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import math
import sys
import threading

import numpy as np

from .. import lax
from ..dispatch import level
from ..tracer.location import _is_foreign, _is_internal, instruction_at, user_location
from .base import _dtype, _shape, _shape_arg, astype
from .elementwise import where
from .lazy import LazyMethods, concrete
from .shapes import broadcast_to, concatenate, moveaxis, reshape, stack


def copy(x):
    """A new array object, so that item assignment into it leaves x alone: for tensors and
    tracers a convert to x's own dtype (a copy eagerly; simplify drops it from the IR)."""
    return lax.convert(x, _dtype(x)) if level(x) else np.copy(x)


_copy = copy      # array() has a parameter named copy


def full_like(x, fill_value, dtype=None, order="K", subok=True, shape=None):
    """An eager tensor's is a tensor (as torch.zeros_like), so `z[i] = v` records into it."""
    out = lax.full(_shape(x) if shape is None else _shape_arg(shape), fill_value,
                   dtype or _dtype(x))
    return type(x)(out) if level(x) == 1 else out


def zeros_like(x, dtype=None, order="K", subok=True, shape=None):
    return full_like(x, 0, dtype, shape=shape)


def ones_like(x, dtype=None, order="K", subok=True, shape=None):
    return full_like(x, 1, dtype, shape=shape)


def _boxed(x) -> bool:
    """Whether x is, or a nested list of x holds, a tensor or tracer."""
    if isinstance(x, (list, tuple)):
        return any(_boxed(e) for e in x)
    return level(x) > 0


def array(obj, dtype=None, *, copy=True, **kwargs):
    """np.array that records: nested lists of tensors or tracers become a stack."""
    if level(obj):
        out = _copy(obj) if copy else obj
    elif _boxed(obj):
        out = _stack_nested(obj)
    else:
        return np.array(obj, dtype=dtype, copy=copy, **kwargs)
    return out if dtype is None or _dtype(out) == np.dtype(dtype) else astype(out, dtype)


def asarray(obj, dtype=None, **kwargs):
    """np.asarray that records: a tensor or tracer is returned as it is, lists are stacked."""
    if level(obj) or _boxed(obj):
        return array(obj, dtype, copy=False)
    return np.asarray(obj, dtype=dtype, **kwargs)


# -- NumPy's constructors while fusegrad traces or differentiates -----------------------------
# NumPy builds an array from a foreign object through __array__, which can only hand back
# numbers. So while a trace or an eager transform runs, np.array, np.asarray, np.asanyarray and
# np.ascontiguousarray are wrapped: called from user code on a tensor, a tracer or nested lists
# of them, they record (a stack, as autograd's np.array). Called from user code otherwise, they
# and np.zeros and the rest of LAZY_CONSTRUCTORS return a new array as a lazy one (lazy.py:
# an ndarray until a traced value is written into it). Every call from NumPy, SciPy, another
# installed library or fusegrad itself goes to NumPy unchanged. Restored when the last ends.

_CONSTRUCTORS = {"array": array, "asarray": asarray, "asanyarray": asarray,
                 "ascontiguousarray": asarray}
LAZY_CONSTRUCTORS = (
    "array", "asarray", "asanyarray", "ascontiguousarray", "copy", "zeros", "ones", "empty",
    "full", "zeros_like", "ones_like", "empty_like", "full_like", "eye", "identity", "tri",
    "arange", "linspace", "logspace", "geomspace", "meshgrid")
_NUMPY = {name: getattr(np, name) for name in LAZY_CONSTRUCTORS}
_active = [0]
_lock = threading.Lock()
_local = threading.local()          # .lazy: the stack of lazy-array factories of this thread


def _from_user(filename) -> bool:
    return not (_is_internal(filename) or _is_foreign(filename)
                or "site-packages" in filename or "dist-packages" in filename)


def _wrapper(name):
    numpy_fn, ours = _NUMPY[name], _CONSTRUCTORS.get(name)

    def constructor(*args, **kwargs):
        frame = sys._getframe(1)
        if not _from_user(frame.f_code.co_filename):
            return numpy_fn(*args, **kwargs)
        if ours is not None and args and _boxed(args[0]):
            return ours(*args, **kwargs)
        out = numpy_fn(*args, **kwargs)
        stack = getattr(_local, "lazy", None)
        if not stack or stack[-1] is None or not _calls(frame.f_code, frame.f_lasti, name):
            return out
        return _lazy(out, args, stack[-1])
    constructor.__name__ = constructor.__qualname__ = name
    constructor.__doc__ = numpy_fn.__doc__
    return constructor


@functools.lru_cache(maxsize=4096)
def _calls(code, lasti, name) -> bool:
    """Whether the call the user's frame is making is to `np.<name>` itself. Compiled code
    (a Cython Generator method: RNG.normal) calls np.empty without a frame of its own, so the
    user's frame seems to call it; such a caller needs a real ndarray."""
    ins = instruction_at(code, lasti)
    pos = getattr(ins, "positions", None)
    if pos is None or pos.lineno is None or pos.col_offset is None:
        return False
    line = linecache.getline(code.co_filename, pos.lineno)[pos.col_offset:]
    callee = line.split("(", 1)[0].strip()
    return callee.rsplit(".", 1)[-1] == name


def _lazy(out, args, make):
    """A new C-contiguous ndarray as a lazy array (each of meshgrid's); anything else as it is,
    an array that shares memory with an argument (np.asarray(a) is a) included."""
    if isinstance(out, (list, tuple)):
        return type(out)(_lazy(o, args, make) for o in out)
    if type(out) is not np.ndarray or not out.flags.c_contiguous or any(
            np.may_share_memory(out, concrete(a)) for a in args
            if isinstance(a, (np.ndarray, LazyMethods))):
        return out
    return make(out)


_WRAPPED = {name: _wrapper(name) for name in LAZY_CONSTRUCTORS}


@contextlib.contextmanager
def numpy_constructors(lazy=None):
    """Make np.array and friends record, and np.zeros and friends return lazy arrays made by
    `lazy(ndarray)` (None: plain ones), for the duration (see above); nests."""
    with _lock:
        _active[0] += 1
        if _active[0] == 1:
            for name, fn in _WRAPPED.items():
                setattr(np, name, fn)
    stack = _local.__dict__.setdefault("lazy", [])
    stack.append(lazy)
    try:
        yield
    finally:
        stack.pop()
        with _lock:
            _active[0] -= 1
            if _active[0] == 0:
                for name, fn in _NUMPY.items():
                    setattr(np, name, fn)


def _stack_nested(obj):
    if not isinstance(obj, (list, tuple)):
        return obj
    items = [_stack_nested(e) for e in obj]
    shapes = {_shape(e) for e in items}
    if len(shapes) > 1:
        raise ValueError(f"setting an array element with a sequence: the nested lists have "
                         f"different shapes {sorted(shapes)} (at {user_location(full=True)})")
    return stack(items) if items else np.array(obj)


def index_update(x, key, value):
    """x with x[key] replaced by value, as a new array (JAX's x.at[key].set(value)).

    Works on arrays, tensors and tracers and records the update when any of them needs it;
    `x[key] = value` on a tensor or tracer calls it. The key must be concrete (ints, slices,
    None, ..., integer or boolean arrays); value broadcasts to x[key] and is cast to x's dtype.
    """
    shape, dtype = _shape(x), _dtype(x)
    positions = _positions(shape, key)
    value = _operand(value, dtype)
    sources = _sources(_shape(value), positions.shape)
    src = np.full(math.prod(shape), -1, np.int64)
    src[positions.reshape(-1)] = sources.reshape(-1)      # NumPy's order: the last write wins
    src = src.reshape(shape)
    written = src >= 0
    if not written.any():
        return x
    placed = lax.take(reshape(value, (-1,)), np.maximum(src, 0), 0)
    return placed if written.all() else where(written, placed, x)


def set_item(x, key, value) -> None:
    """`x[key] = value` on a tensor or tracer: x takes the value of index_update(x, key, value)."""
    x._assign(index_update(x, key, value), "item assignment x[...] = value")


def _positions(shape, key) -> np.ndarray:
    """The flat positions in an array of `shape` that x[key] selects, in x[key]'s shape."""
    try:
        return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)[_static_key(key)]
    except IndexError as e:
        raise IndexError(f"{e} (at {user_location(full=True)})") from None


def _static_key(key):
    if isinstance(key, tuple):
        return tuple(_static_key(k) for k in key)
    if level(key) == 2:
        raise IndexError(f"item assignment with a traced index at {user_location(full=True)}: "
                         f"the positions would depend on the data; write "
                         f"np.where(mask, value, x) instead")
    return key.data if level(key) == 1 else concrete(key)   # integer or boolean: no gradient


def _operand(value, dtype):
    if not level(value) and not _boxed(value):
        return np.asarray(value, dtype=dtype)
    value = asarray(value)
    return value if _dtype(value) == dtype else astype(value, dtype)


def _sources(value_shape, target_shape) -> np.ndarray:
    """For each selected element, the flat index of the element of value written there."""
    flat = np.arange(math.prod(value_shape), dtype=np.int64).reshape(value_shape)
    try:
        return np.broadcast_to(flat, target_shape)
    except ValueError:
        raise ValueError(f"could not broadcast input array from shape {list(value_shape)} into "
                         f"shape {list(target_shape)} (at {user_location(full=True)})") from None


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """NumPy's arithmetic (module docstring), differentiable in start and stop."""
    num = int(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = num - 1 if endpoint else num
    start, stop = (v if level(v) or isinstance(v, (int, float)) else np.asarray(v)
                   for v in (start, stop))
    # inexact, as NumPy's; Python numbers are weak (a float32 endpoint keeps float32)
    dt = np.result_type(*(_dtype(v) if level(v) else v for v in (start, stop)), np.float16)
    start, stop = (v if _dtype(v) == dt else astype(v, dt) for v in (start, stop))
    delta = stop - start
    shape = (num,) + _shape(delta)
    y = lax.iota(shape, dt, 0)
    if div > 0:
        step = delta / div
        y = y * lax.broadcast_in_dim(step, shape, range(1, len(shape)))
    else:
        step = np.nan
        y = y * lax.broadcast_in_dim(delta, shape, range(1, len(shape)))
    y = y + start
    if endpoint and num > 1:
        last = reshape(broadcast_to(stop, _shape(delta)), (1,) + _shape(delta))
        y = concatenate([lax.slice(y, (0,) * len(shape), (num - 1,) + shape[1:]), last], 0)
    if axis != 0:
        y = moveaxis(y, 0, axis)
    if dtype is not None and np.dtype(dtype).kind in "iu":
        y = lax.floor(y)
    if dtype is not None and np.dtype(dtype) != dt:
        y = astype(y, dtype)
    return (y, step) if retstep else y


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    ndim = len(xi)
    shapes = [[1] * ndim for _ in xi]
    for i, row in enumerate(shapes):
        row[i] = -1
    if indexing == "xy" and ndim > 1:
        shapes[0][:2], shapes[1][:2] = [1, -1], [-1, 1]
    out = [reshape(x if level(x) else np.asarray(x), shape) for x, shape in zip(xi, shapes)]
    if not sparse:
        full = np.broadcast_shapes(*[_shape(x) for x in out])
        out = [broadcast_to(x, full) for x in out]
    return tuple(out)


__all__ = [
    "array", "asarray", "copy", "full_like", "index_update", "ones_like", "zeros_like",
    # issue 14, shapes and joining
    "linspace", "meshgrid",
]

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.copy: copy, np.zeros_like: zeros_like, np.ones_like: ones_like, np.full_like: full_like,
    # NumPy dispatches its constructors only given like=x; without it conversion.py raises
    np.array: array, np.asarray: asarray, np.asanyarray: asarray, np.ascontiguousarray: asarray,
    np.linspace: linspace, np.meshgrid: meshgrid,
}
