"""Eager tensors: NumPy arrays that record a backward graph as operations run (define-by-run).

Every operation on a Tensor ends in `Tensor._fg_bind` (through bind(), or directly from the
arithmetic operators and unary ufuncs on float operands, which skip the general front end):
compute the primitive with the interpreter's NumPy implementation, wrap the result, and, when
grad mode is on, the result is floating point, the primitive has a VJP rule and some input
requires grad, record one Node (graph.py) whose rule comes from the formula table. Operators
and NumPy methods come from ArrayMethods, shared with tracers; only eager-specific members live
here: gradients, backward, detach, conversion to Python and NumPy values; the in-place
operations come from InplaceMethods (inplace.py).

Storage versions: every tensor has a version counter shared with the tensors that view the
same NumPy buffer (detach(), and reshape/transpose/slice/broadcast results that alias their
input). In-place operations bump it and remember the user's line, so a node whose saved value
was overwritten after the forward pass fails at backward time and says where it happened.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..dispatch import LazyArray
from ..formulas import node_names, vjp_rules
from ..ir.types import NP_DTYPES, dtype_name
from ..tracer.location import user_location
from ..tracer.methods import UNARY_UFUNCS, ArrayMethods
from . import hooks
from .grad_mode import _state as _grad_state
from .graph import Node, SavedTensor, _Meta, gradient_edge, rule_reads
from .inplace import STALE, InplaceMethods, orphan_views, stale_error
from ..ir.evaluate import apply

_VIEW_PRIMS = frozenset(("reshape", "transpose", "slice", "broadcast_in_dim", "rev"))
_NO_INPUT = (None, None, None)
_NO_PARAMS: dict = {}  # shared by every parameterless node; nothing writes a node's params


class _Version:
    """A storage's version counter, where the last in-place write happened, and the tensors
    that share the storage through view ops (weakly: a view that is gone aliases nothing)."""

    __slots__ = ("limit", "op", "value", "views", "where")

    def __init__(self):
        self.value, self.op, self.where, self.views = 0, None, None, None

    def bump(self, op, where):
        self.value += 1
        self.op, self.where = op, where

    def add_view(self, base, view):
        views = self.views      # id -> weakref (a WeakSet would compare tensors with __eq__)
        if views is None:
            views = self.views = {}
            self.limit = 16
        elif len(views) >= self.limit:      # forget dead views; amortized O(1) per view
            for key in [k for k, ref in views.items() if ref() is None]:
                del views[key]
            self.limit = 2 * len(views) + 16
        views[id(base)], views[id(view)] = weakref.ref(base), weakref.ref(view)

    def aliased(self, t) -> bool:
        """Whether a live tensor other than t sees this storage through a view op."""
        return self.views is not None and any(
            v is not None and v is not t for v in (ref() for ref in self.views.values()))


def _shortcut(prim, general, reflected=False):
    """A Tensor operator that binds `prim` directly for a float tensor and a Python float or
    int or another float tensor: for those operands fusegrad.numpy's add/subtract/multiply/
    true_divide come down to exactly this one bind, and skipping the three calls in between
    saves about 0.7 us of an op's 4. Anything else (bool or int tensors, tracers, arrays) takes
    the general path of ArrayMethods."""
    if reflected:
        def op(self, other):
            if self.data.dtype.kind == "f" and _fast_operand(other):
                return Tensor._fg_bind(prim, (other, self), _NO_PARAMS)
            return general(self, other)
    else:
        def op(self, other):
            if self.data.dtype.kind == "f" and _fast_operand(other):
                return Tensor._fg_bind(prim, (self, other), _NO_PARAMS)
            return general(self, other)
    op.__name__ = general.__name__
    return op


class TensorSlots(InplaceMethods, ArrayMethods):
    """A Tensor's storage, shared with lazy.LazyEager so an object can become a Tensor."""

    __slots__ = (
        "__weakref__",
        "_accumulator",
        "_requires_grad",
        "_version",
        "data",
        "grad",
        "grad_fn",
    )


class Tensor(TensorSlots):
    """An eager array with autograd metadata. Create it with `fusegrad.tensor(...)`."""

    __slots__ = ()
    _fg_level = 1

    def __init__(self, data, dtype=None, requires_grad=False):
        _init(self, _to_array(data, dtype), requires_grad)

    # -- dispatch: every primitive on a Tensor lands here -------------------------------------
    @classmethod
    def _fg_bind(cls, prim, args, params):
        needs_grad = False
        datas = []
        for a in args:
            if isinstance(a, Tensor):
                if STALE and (error := stale_error(a)) is not None:
                    raise error
                datas.append(a.data)
                if a._requires_grad:
                    needs_grad = True
            elif isinstance(a, LazyArray):     # a constant now: its numbers, as they are
                args = _snapshot(args)
                return cls._fg_bind(prim, args, params)
            else:
                datas.append(a)
        data = apply(prim, datas, params)
        out = _wrap(data)
        if prim in _VIEW_PRIMS and np.may_share_memory(data, datas[0]):
            out._version = version = args[0]._vc()
            version.add_view(args[0], out)
        if needs_grad and data.dtype.kind == "f" and _grad_state.enabled:
            rule = vjp_rules.get(prim)
            if rule is not None:
                _record(prim, rule, args, out, params)
        return out

    # Shortcuts for the arithmetic that scalar programs are made of (see _shortcut).
    __add__ = _shortcut("add", ArrayMethods.__add__)
    __radd__ = _shortcut("add", ArrayMethods.__radd__, reflected=True)
    __sub__ = _shortcut("sub", ArrayMethods.__sub__)
    __rsub__ = _shortcut("sub", ArrayMethods.__rsub__, reflected=True)
    __mul__ = _shortcut("mul", ArrayMethods.__mul__)
    __rmul__ = _shortcut("mul", ArrayMethods.__rmul__, reflected=True)
    __truediv__ = _shortcut("div", ArrayMethods.__truediv__)
    __rtruediv__ = _shortcut("div", ArrayMethods.__rtruediv__, reflected=True)

    def __neg__(self):
        if self.data.dtype.kind == "f":
            return Tensor._fg_bind("neg", (self,), _NO_PARAMS)
        return ArrayMethods.__neg__(self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        prim = _FLOAT_UNARY_UFUNCS.get(ufunc)
        if prim is not None and len(inputs) == 1 and method == "__call__" and not kwargs \
                and self.data.dtype.kind == "f":
            return Tensor._fg_bind(prim, inputs, _NO_PARAMS)
        if kwargs.get("out") is not None:
            done = self._ufunc_out(ufunc, method, inputs, kwargs)   # np.add(t, v, out=t)
            if done is not None:
                return done
        return ArrayMethods.__array_ufunc__(self, ufunc, method, *inputs, **kwargs)

    # -- array attributes ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    def __len__(self):
        return len(self.data)

    def item(self):
        if self._requires_grad and _grad_state.enabled:
            _refuse("item()")
        return self.data.item()

    def tolist(self):
        if self._requires_grad and _grad_state.enabled:
            _refuse("tolist()")
        return self.data.tolist()

    def numpy(self) -> np.ndarray:
        """The underlying array (shared, like torch's detach().numpy())."""
        return self.data

    def __array__(self, dtype=None, copy=None):
        if self._requires_grad and _grad_state.enabled:    # np.asarray would drop the gradient
            _refuse("NumPy called __array__")
        if copy:
            return np.array(self.data, dtype=dtype)
        return self.data if dtype is None else self.data.astype(dtype, copy=False)

    def __float__(self):
        if self._requires_grad and _grad_state.enabled:
            _refuse("float()")
        return float(self.data)

    def _assign(self, new, label):
        """`t[key] = v` (ArrayMethods.__setitem__). Unrecorded, NumPy's write into t's buffer
        (an in-place fill). Recorded, t takes the update's new buffer and history, as a traced
        array does: views and saved copies of the old value keep it, so eager and jit agree
        and `traj[t] = traj[t - 1] + ...` needs no view rules."""
        if not isinstance(new, Tensor):
            raise TypeError(f"{label} at {user_location(full=True)}: a traced value cannot be "
                            f"stored into an eager tensor")
        if not new._requires_grad:
            self._inplace("fill", new, label)
        elif self.grad_fn is None and self._requires_grad:
            raise RuntimeError(
                f"{label} at {user_location(full=True)} writes into a leaf tensor that requires "
                f"grad (a differentiated input): assign into a copy, y = x.copy(), or make the "
                f"update under `with fg.no_grad():`")
        elif new is not self:
            orphan_views(self, label)
            self.data, self.grad_fn, self._version = new.data, new.grad_fn, None
            self._requires_grad = True

    def __int__(self):
        return int(self.data)

    def __index__(self):
        return self.data.__index__()

    def __bool__(self):
        return bool(self.data)

    def __repr__(self):
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = ""
        if self.data.dtype != np.float64 and self.data.dtype.kind == "f" or \
                self.data.dtype.kind not in "fb" and self.data.size == 0:
            extra += f", dtype={dtype_name(self.data.dtype)}"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{self.grad_fn.name}>"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # -- autograd metadata --------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool):
        self.requires_grad_(flag)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def version(self) -> int:
        return 0 if self._version is None else self._version.value

    def _vc(self) -> _Version:
        """The storage's version counter, created on first need (most tensors never need it)."""
        if self._version is None:
            self._version = _Version()
        return self._version

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        flag = bool(requires_grad)
        if self.grad_fn is not None:
            if not flag:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf tensors; use detach() to "
                    "get a tensor without history")
            return self
        if flag and self.data.dtype.kind != "f":
            raise RuntimeError(f"only floating point tensors can require gradients, got "
                               f"{dtype_name(self.data.dtype)}; convert with "
                               f".astype(np.float64) first")
        self._requires_grad = flag
        return self

    def retain_grad(self) -> None:
        """Keep this intermediate tensor's gradient in `.grad` during backward."""
        if not self._requires_grad:
            raise RuntimeError("retain_grad needs a tensor that requires grad")
        if self.grad_fn is not None:
            self.grad_fn.retained = weakref.ref(self)

    def zero_grad(self) -> None:
        """Reset `.grad` to None (not to zeros)."""
        self.grad = None

    def detach(self) -> Tensor:
        """A tensor on the same buffer and version counter, without history."""
        t = _wrap(self.data)
        t._version = self._vc()
        return t

    def detach_(self) -> Tensor:
        """Drop this tensor's history in place: it becomes a leaf that does not require grad."""
        self.grad_fn = None
        self._requires_grad = False
        self._accumulator = None
        return self

    def backward(self, gradient=None, retain_graph=None, create_graph=False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's `.grad` (see engine.backward)."""
        from .engine_entry import backward     # engine.py installs it: engine imports us
        backward(self, gradient, retain_graph, create_graph)


def _refuse(what):
    from ..conversion import refuse
    refuse(what)


def _init(t, data, requires_grad=False):
    t.data = data
    t.grad = t.grad_fn = t._version = t._accumulator = None
    t._requires_grad = False
    if requires_grad:
        t.requires_grad_(True)


def _snapshot(args) -> tuple:
    """Lazy arrays (numpy/lazy.py) among an op's operands as copies of their numbers: a later
    NumPy write into one, or its becoming a tensor, must not change a recorded constant."""
    return tuple(np.array(a) if isinstance(a, LazyArray) else a for a in args)


def _wrap(data) -> Tensor:
    """A new leaf Tensor on `data` (no copy)."""
    t = _new_tensor(Tensor)
    t.data = data
    t.grad = t.grad_fn = t._version = t._accumulator = None
    t._requires_grad = False
    return t


_new_tensor = Tensor.__new__


def _fast_operand(x) -> bool:
    t = type(x)
    return t is float or t is int or t is Tensor and x.data.dtype.kind == "f"


# NumPy ufuncs that fusegrad.numpy maps to one primitive on a float operand (see
# fusegrad.numpy.HANDLED_UFUNCS; fusegrad.numpy fills the table when it installs itself in
# tracer/methods.py); tests check that the two agree.
_FLOAT_UNARY_UFUNCS = UNARY_UFUNCS


def _to_array(data, dtype) -> np.ndarray:
    if isinstance(data, Tensor):
        data = data.data
    if dtype is not None:
        dtype = NP_DTYPES[dtype] if isinstance(dtype, str) and dtype in NP_DTYPES else dtype
        array = np.array(data, dtype=np.dtype(dtype))
    else:
        array = np.array(data)
    target = NP_DTYPES[dtype_name(array.dtype)]
    return array if array.dtype == target else array.astype(target)


def tensor(data, dtype=None, requires_grad=False) -> Tensor:
    """A new leaf tensor holding a copy of `data` (list, scalar, array or tensor).

    dtype: float32, float64, int64 or bool (other NumPy dtypes widen: int32 -> int64,
    float16 -> float32). Python floats give float64, as in NumPy.
    """
    return Tensor(data, dtype, requires_grad)


# -- recording ------------------------------------------------------------------------------

_recipes: dict = {}  # prim -> (rule, node name, out mode, input modes, rest mode)


def _recipe(prim, rule) -> tuple:
    recipe = _recipes[prim] = (rule, node_names.get(prim, prim), *rule_reads(rule))
    return recipe


def _record(prim, rule, args, out, params) -> None:
    recipe = _recipes.get(prim)
    if recipe is None or recipe[0] is not rule:  # first use, or vjp_rules[prim] was replaced
        recipe = _recipe(prim, rule)
    _, name, out_mode, in_modes, rest = recipe
    n = len(args)
    modes = in_modes if n == len(in_modes) else (in_modes + (rest,) * n)[:n]
    saved = [None if out_mode is None else _save(out_mode, out, True)]
    inputs = []
    for a, mode in zip(args, modes):
        saved.append(None if mode is None else _save(mode, a, False))
        if isinstance(a, Tensor) and a._requires_grad:
            data = a.data
            inputs.append((a.grad_fn or gradient_edge(a), data.shape, data.dtype))
        else:
            inputs.append(_NO_INPUT)
    out.grad_fn = Node(name, rule, params or _NO_PARAMS, saved, inputs, out.data.shape,
                       user_location(full=True) if hooks.anomaly_enabled else None)
    out._requires_grad = True


def _save(mode, value, is_output):
    """What a node keeps of one rule argument it reads: its shape and dtype, or the value."""
    if isinstance(value, Tensor):
        if mode == "meta":
            return _Meta(value.data.shape, value.data.dtype)
        return SavedTensor(value, is_output)
    if mode == "meta" and isinstance(value, np.ndarray):
        return _Meta(value.shape, value.dtype)
    return value
