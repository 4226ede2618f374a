"""NumPy's views and in-place updates on traced arrays, by functionalization (torch.compile's).

A trace has no memory to share, so every write makes a new IR value and the traced object the
user holds is rebound to it: `x += v`, `x[k] = v` and `np.add(x, v, out=x)` change `x.value`,
and every Python name bound to that object sees the update, as with an ndarray. A 0-d value
that is not a view is a NumPy scalar (what reductions and scalar indexing return): `s += v`
makes a new one and rebinds the name, as NumPy does.

Views. NumPy decides which results alias their input; we ask NumPy itself. Each traced array
that gives out a view gets a shadow: `np.arange(size).reshape(shape)`, the flat position of
every element. Applying the user's view operation (a basic index, reshape, transpose, ravel,
diagonal, np.flip...) to the shadow gives, when NumPy returns a view of it, the positions in
the root array of every element of the view, and whether NumPy would let one write through it.
A view then
* reads: while its root still has the value the view was computed from, its own value; after a
  write into the root (or into another view of it), the root's elements at its positions again
  (one gather), exactly what NumPy's view would show;
* writes: into the root, at its positions (a functional update of the root), so the root and
  every other view of it see the write.
The jit entry (api.py) writes a traced argument's final value back into the caller's array.
"""

from __future__ import annotations

import numpy as np

from ..dispatch import level
from .location import user_location
from .methods import face


class View:
    """What a traced view knows: its root array, its shadow (the root's flat positions, as
    NumPy's view of the root's shadow) and the root's value it was last computed from."""

    __slots__ = ("root", "shadow", "synced")

    def __init__(self, root, shadow):
        self.root, self.shadow, self.synced = root, shadow, root._value

    def stale(self) -> bool:
        return self.synced is not self.root._value

    def recompute(self):
        """The root's elements at the view's positions, as the view's new IR value."""
        fnp = face()
        self.synced = self.root._value
        flat = fnp.reshape(self.root, (-1,))
        return fnp.take(flat, np.ascontiguousarray(self.shadow), axis=0).value


def shadow_of(x):
    """(root, shadow) of a tracer: a view's own, or a fresh root's (kept for the trace)."""
    if x.base is not None:
        return x.base.root, x.base.shadow
    entry = x.ctx.shadows.get(id(x))
    if entry is None or entry[0] is not x:
        entry = x.ctx.shadows[id(x)] = (x, np.arange(x.size, dtype=np.int64).reshape(x.shape))
    return entry


def track(out, x, op):
    """`out = op(x)` was computed from tracer x; if NumPy's op on an array returns a view of
    it, out is marked as that view (op is then applied to x's shadow, not to data)."""
    if level(out) != 2 or level(x) != 2 or out is x or out.ctx is not x.ctx:
        return out
    root, shadow = shadow_of(x)
    try:
        result = op(shadow)
    except Exception:  # noqa: BLE001 - out was computed already; no view to follow
        return out
    if isinstance(result, np.ndarray) and result.shape == out.shape \
            and np.may_share_memory(result, shadow):
        out.base = View(root, result)
    return out


def write_through(view_tracer, new, label):
    """A write of `new` (the view's whole new value) into a view: into its root's elements."""
    view = view_tracer.base
    if not view.shadow.flags.writeable:
        raise ValueError(f"assignment destination is read-only: {label} at "
                         f"{user_location(full=True)} writes into a read-only view (np.diagonal"
                         f" and np.broadcast_to make those, as in NumPy); write into a .copy()")
    root = view.root
    key = np.unravel_index(np.asarray(view.shadow), root.shape)
    root._assign(face().index_update(root, key, new), label)


def update(x, new, label, name):
    """x takes new (the result of an in-place operator or of out=x) as NumPy would write it:
    same shape, cast to x's dtype under NumPy's same_kind rule. Returns x."""
    astype = face().astype
    new_shape, new_dtype = np.shape(new) if level(new) != 2 else new.shape, _dtype(new)
    if tuple(new_shape) != x.shape:
        raise ValueError(f"non-broadcastable output operand with shape {x.shape} doesn't match "
                         f"the broadcast shape {tuple(new_shape)} ({label} at "
                         f"{user_location(full=True)})")
    if not np.can_cast(new_dtype, x.dtype, "same_kind"):
        raise TypeError(f"Cannot cast ufunc '{name}' output from {new_dtype!r} to {x.dtype!r} "
                        f"with casting rule 'same_kind' ({label} at {user_location(full=True)})")
    if level(new) != 2:                 # out=x of a ufunc on constants
        new = type(x)(x.ctx.read(np.asarray(new, dtype=x.dtype)), x.ctx)
    elif new_dtype != x.dtype:
        new = astype(new, x.dtype)
    x._assign(new, label)
    return x


def _dtype(x):
    return x.dtype if level(x) else np.result_type(x)


# -- the in-place operators ---------------------------------------------------------------------

INPLACE = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
           "pow": "**", "matmul": "@", "and": "&", "or": "|"}
_UFUNCS = {"add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
           "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "matmul": "matmul",
           "and": "logical_and", "or": "logical_or"}


def inplace_operator(name):
    """`x op= v` on a tracer: a new value for x (every name bound to x sees it), or for a 0-d
    value that is not a view, a new NumPy scalar bound to the name (Python rebinds it)."""
    symbol, ufunc = INPLACE[name], _UFUNCS[name]

    def method(self, other):
        new = getattr(face(), ufunc)(self, other)
        if self.ndim == 0 and self.base is None:
            self.ctx.rebinds.setdefault(id(self), user_location(full=True))
            return new
        return update(self, new, f"`x {symbol}= ...`", ufunc)
    method.__name__ = f"__i{name}__"
    return method


# -- which results are views --------------------------------------------------------------------

# NumPy functions whose result is a view of their first argument (when NumPy makes one)
VIEW_FUNCTIONS = frozenset((
    np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis, np.squeeze, np.expand_dims,
    np.diagonal, np.flip, np.fliplr, np.flipud, np.rot90, np.broadcast_to, np.atleast_1d,
    np.atleast_2d, np.atleast_3d))


def _torch_transpose(shadow, *axes):
    axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
    return np.swapaxes(shadow, *axes) if len(axes) == 2 and shadow.ndim != 2 \
        else shadow.transpose(*axes)


def _expand(shadow, *sizes):
    sizes = sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    offset = len(sizes) - shadow.ndim
    return np.broadcast_to(shadow, [shadow.shape[i - offset] if s == -1 else s
                                    for i, s in enumerate(sizes)])


# the array methods (ArrayMethods') that return views, and the NumPy operation each is
_VIEW_METHODS = (("reshape", np.ndarray.reshape), ("view", np.ndarray.reshape),
                 ("ravel", np.ravel), ("transpose", _torch_transpose),
                 ("permute", _torch_transpose), ("swapaxes", np.swapaxes),
                 ("squeeze", np.squeeze), ("unsqueeze", np.expand_dims), ("expand", _expand))


def _view_method(general, shadow_op):
    def method(self, *args, **kwargs):
        return track(general(self, *args, **kwargs), self,
                     lambda shadow: shadow_op(shadow, *args, **kwargs))
    method.__name__ = general.__name__
    return method


def install(cls, general):
    """Give the tracer class its in-place operators and view-tracking methods (general: the
    ArrayMethods class whose methods compute the values)."""
    for name in INPLACE:
        setattr(cls, f"__i{name}__", inplace_operator(name))
    for name, op in _VIEW_METHODS:
        setattr(cls, name, _view_method(getattr(general, name), op))
    cls.T = property(_view_method(general.T.fget, np.transpose))
    cls.mT = property(_view_method(general.mT.fget, lambda shadow: np.swapaxes(shadow, -1, -2)))
