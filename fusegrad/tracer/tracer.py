"""Tracing: run a Python function on Tracer values and record every primitive as an IR Op.

A TraceContext owns a Builder. Tracers belong to one context; the innermost active context
records each bind. A tracer of an enclosing context used inside an inner trace (a closure in a
nested grad) is lifted into a parameter of the inner function and recorded in `captures`, so the
inner Function stays closed and its callers pass the outer value in. NumPy broadcasting and
NEP 50 promotion are made explicit here with broadcast_in_dim, convert and full, so the IR never
broadcasts implicitly.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import dispatch
from ..conversion import ConcretizationError, conversion_error, storing
from ..dispatch import LazyArray, level
from ..ir.core import Builder, Function, Value
from ..ir.primitives import ELEMENTWISE, UNARY_FLOAT, ShapeError
from ..ir.types import TensorType, dtype_name
from ..state import add_busy
from ..tree import flatten
from . import views
from .location import call_located, user_location
from .methods import ArrayMethods

class _State(threading.local):
    stack = None        # a class default, so the first read in a thread does not raise


_state = _State()


def _stack() -> list:
    stack = _state.stack
    if stack is None:
        stack = _state.stack = []
    return stack


def is_tracing() -> bool:
    return bool(_state.stack)


_WALK = object()


class TraceContext:
    def __init__(self, name: str):
        self.builder = Builder(name)
        self.captures: list[tuple[object, Value]] = []   # (outer tracer, inner param)
        self._lifted: dict[int, Value] = {}
        self.fixed_loc = _WALK      # a pass replaying ops sets the loc instead of a frame walk
        self.lift_tensors = False   # eager tensors that require grad become captures too
        self.shadows: dict = {}     # id(root) -> (root, positions): see views.py
        self.writes: dict = {}      # id(tracer) -> the user's line of its last in-place write
        self.rebinds: dict = {}     # id(0-d tracer) -> the line of its first `+=` (a rebind)

    def __enter__(self):
        _stack().append(self)
        add_busy(1)
        return self

    def __exit__(self, *exc):
        _stack().pop()
        add_busy(-1)

    def new_param(self, type: TensorType, hint=None, weak=False) -> "Tracer":
        return Tracer(self.builder.param(type, hint), self, weak)

    def read(self, x, dtype: str | None = None) -> Value:
        """The IR value of x in this context: lifts outer tracers, embeds constants."""
        if isinstance(x, Tracer):
            if x.ctx is self:
                return x.value
            return self._lift(x)
        if level(x) > 0:                        # an eager tensor: its data, as a constant
            if self.lift_tensors and x.requires_grad:
                return self._lift_tensor(x)
            x = x.data
        elif isinstance(x, LazyArray):         # numpy/lazy.py: its numbers as they are now
            x = np.array(x)
        array = np.asarray(x, dtype=None if dtype is None else TensorType(dtype, ()).np_dtype)
        if array.dtype != np.dtype(TensorType.of(array).np_dtype):
            array = array.astype(TensorType.of(array).np_dtype)
        if array.ndim == 0:
            return self.builder.add1("full", (), dict(shape=(), dtype=dtype_name(array.dtype),
                                                      value=array.item()), loc=user_location())
        return self.builder.add1("constant", (), dict(value=array), loc=user_location())

    def _lift(self, x: "Tracer") -> Value:
        if x.ctx not in _stack():
            raise RuntimeError(
                f"a traced value of type {x.value.type} escaped the trace of "
                f"{x.ctx.builder.name!r} that created it and was used at "
                f"{user_location(full=True)} (stored in a global or returned through a side "
                f"channel?); return it from the function instead")
        key = id(x.value)
        if key not in self._lifted:
            self._lifted[key] = self.builder.param(x.value.type, "captured")
            self.captures.append((x, self._lifted[key]))
        return self._lifted[key]


    def _lift_tensor(self, x) -> Value:
        """An eager tensor a function traced for an op of the eager engine closes over (the
        right-hand side of an ODE): a param, and the tensor a capture the op takes as an
        operand, so that its gradient is recorded."""
        key = id(x)
        if key not in self._lifted:
            self._lifted[key] = self.builder.param(TensorType.of(x.data), "captured")
            self.captures.append((x, self._lifted[key]))
        return self._lifted[key]


def _current() -> TraceContext:
    stack = _stack()
    if not stack:
        raise RuntimeError(f"a traced value was used after its trace ended, at "
                           f"{user_location(full=True)}; return it from the traced function "
                           f"instead of storing it")
    return stack[-1]


def _weak_standin(x):
    """What np.result_type should see for x: Python scalars and weak tracers stay weak."""
    if isinstance(x, Tracer):
        if x.weak:
            return {"f64": 0.0, "f32": 0.0, "i64": 0, "bool": False}[x.value.type.dtype]
        return x.value.type.np_dtype
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return x
    return np.asarray(x.data if level(x) > 0 else x).dtype


def result_dtype(*xs) -> str:
    return dtype_name(np.result_type(*[_weak_standin(x) for x in xs]))


def _shape_of(x) -> tuple:
    return x.value.type.shape if isinstance(x, Tracer) else np.shape(x.data if level(x) else x)


class TracerSlots(ArrayMethods):
    """A Tracer's storage, shared with lazy.LazyTraced so an object can become a Tracer."""
    __slots__ = ("_value", "ctx", "weak", "base")


class Tracer(TracerSlots):
    __slots__ = ()
    _fg_level = 2

    def __init__(self, value: Value, ctx: TraceContext, weak: bool = False):
        self._value = value
        self.ctx = ctx
        self.weak = weak
        self.base = None    # a views.View when this is a NumPy view of another traced array

    @property
    def value(self) -> Value:
        """The IR value; a view whose root was written since is computed from the root again."""
        view = self.base
        if view is not None and view.stale():
            self._value = view.recompute()
        return self._value

    @value.setter
    def value(self, value: Value):
        self._value = value

    @property
    def aval(self) -> TensorType:
        return self._value.type

    @property
    def shape(self) -> tuple:
        return self._value.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self._value.type.np_dtype

    @property
    def ndim(self) -> int:
        return self._value.type.ndim

    @property
    def size(self) -> int:
        return self._value.type.size

    def __repr__(self):
        return f"Tracer<{self.value.type}>"

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d traced value")
        return self.shape[0]

    def _concrete(self, what: str):
        where = user_location(full=True) or "<unknown>"
        raise ConcretizationError(
            f"{what} of a traced value at {where}: its value is not known while "
            f"{self.ctx.builder.name!r} is traced (Python control flow on traced values is "
            f"data-dependent). Mark the argument static with static_argnums=..., use "
            f"np.where instead of if/else, or run with fg.jit(..., backend=\"eager\").")

    def __bool__(self):
        self._concrete("bool()")

    def __int__(self):
        self._concrete("int()")

    def __float__(self):
        if storing():               # `h[0] = x` into an ndarray: not control flow
            raise conversion_error("float()", traced=True)
        self._concrete("float()")

    def __index__(self):
        self._concrete("using as an index (__index__)")

    def item(self):
        self._concrete(".item()")

    def tolist(self):
        self._concrete(".tolist()")

    def __array__(self, dtype=None, copy=None):
        raise conversion_error("NumPy called __array__", traced=True)

    def __getitem__(self, key):
        """x[key]; a basic index (ints, slices) is a view in NumPy, so the result is one here
        too (views.py): it sees later writes into x, and writes into it reach x."""
        out = ArrayMethods.__getitem__(self, key)
        keys = key if isinstance(key, tuple) else (key,)
        if all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice))
               for k in keys):
            views.track(out, self, lambda shadow: shadow[key])
        return out

    def _assign(self, new, label):
        """Every write ends here (`x[key] = v`, `x += v`, out=x): x now names the new value,
        so every name bound to x sees it; a view writes into its root (views.py)."""
        if level(new) == 0 and _stack() and _stack()[-1] is self.ctx:     # x[...] = 0.0
            new = Tracer(self.ctx.read(np.asarray(new, dtype=self.dtype)), self.ctx)
        if not isinstance(new, Tracer) or new.ctx is not self.ctx:
            raise TypeError(f"{label} at {user_location(full=True)}: the target is a traced "
                            f"value of an enclosing trace; assign into a copy made here")
        if self.base is not None:
            views.write_through(self, new, label)
            return
        self._value = new.value
        self.ctx.writes[id(self)] = user_location(full=True)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """np.add(a, b, out=x) with x traced is `x = a + b` written into x (views.update)."""
        out = kwargs.get("out")
        out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
        if isinstance(out, Tracer) and method == "__call__":
            rest = {k: v for k, v in kwargs.items() if k != "out"}
            new = ArrayMethods.__array_ufunc__(self, ufunc, method, *inputs, **rest)
            return views.update(out, new, f"numpy.{ufunc.__name__}(..., out=x)", ufunc.__name__)
        return ArrayMethods.__array_ufunc__(self, ufunc, method, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        out = ArrayMethods.__array_function__(self, func, types, args, kwargs)
        if func in views.VIEW_FUNCTIONS and args and args[0] is self:
            views.track(out, self, lambda shadow: func(shadow, *args[1:], **kwargs))
        return out

    @classmethod
    def _fg_trace(cls, fun, in_types, weak, name):
        """trace_flat, for code below the tracer (fusegrad/control_flow.py traces loop
        bodies with it) that finds this class as dispatch.ambient_handler() in a trace."""
        return trace_flat(fun, in_types, name, weak=weak)

    @classmethod
    def _fg_bind(cls, prim, args, params):
        ctx = _current()
        loc = user_location() if ctx.fixed_loc is _WALK else ctx.fixed_loc
        weak = False
        if prim in ELEMENTWISE:
            values = _explicit_elementwise(ctx, prim, args, loc)
            weak = prim not in _STRONG_RESULT and all(_is_weak(a) for a in args)
        elif prim == "matmul":
            values = _explicit_matmul(ctx, args, loc)
        else:
            values = [ctx.read(a) for a in args]
        outs = ctx.builder.add(prim, values, params, loc=loc)
        tracers = [Tracer(v, ctx, weak) for v in outs]
        return tracers[0] if len(tracers) == 1 else tuple(tracers)


_STRONG_RESULT = frozenset(("convert", "lt", "le", "gt", "ge", "eq", "ne"))

views.install(Tracer, ArrayMethods)


def _is_weak(x) -> bool:
    """Python scalars and the tracers computed only from them promote weakly (NEP 50)."""
    if type(x) is Tracer:
        return x.weak
    return type(x) in (bool, int, float)


def _broadcast(ctx, value: Value, shape: tuple, loc) -> Value:
    if value.type.shape == shape:
        return value
    offset = len(shape) - value.type.ndim
    return ctx.builder.add1("broadcast_in_dim", [value], dict(
        shape=shape, dims=tuple(range(offset, len(shape)))), loc=loc)


def _convert(ctx, value: Value, dtype: str, loc) -> Value:
    if value.type.dtype == dtype:
        return value
    return ctx.builder.add1("convert", [value], dict(dtype=dtype), loc=loc)


def _operand(ctx, x, dtype, shape, loc) -> Value:
    if not isinstance(x, Tracer) and level(x) == 0 and np.ndim(x) == 0:
        value = np.asarray(x).astype(TensorType(dtype, ()).np_dtype).item()
        return ctx.builder.add1("full", (), dict(shape=shape, dtype=dtype, value=value), loc=loc)
    return _broadcast(ctx, _convert(ctx, ctx.read(x), dtype, loc), shape, loc)


def _broadcast_shape(prim, args, loc) -> tuple:
    shapes = [_shape_of(a) for a in args]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(list(s)) for s in shapes)
        raise ShapeError(f"{prim}: operands could not be broadcast together: shapes {listed}"
                         f" at {loc}") from None


def _explicit_elementwise(ctx, prim, args, loc) -> list[Value]:
    first = args[0]
    if type(first) is Tracer and prim != "select" and prim != "convert":
        t = first.value.type
        if all(type(a) is Tracer and a.ctx is ctx and a.value.type == t for a in args) \
                and (t.is_float or prim not in UNARY_FLOAT):
            return [a.value for a in args]      # the common case: nothing to make explicit
    shape = _broadcast_shape(prim, args, loc)
    if prim == "select":
        pred, *branches = args
        dtype = result_dtype(*branches)
        return [_operand(ctx, pred, "bool", shape, loc)] + \
            [_operand(ctx, b, dtype, shape, loc) for b in branches]
    if prim == "convert":
        return [_operand(ctx, args[0], result_dtype(args[0]), shape, loc)]
    dtype = result_dtype(*args)
    if prim in UNARY_FLOAT and dtype not in ("f32", "f64"):
        dtype = "f64"
    return [_operand(ctx, a, dtype, shape, loc) for a in args]


def _explicit_matmul(ctx, args, loc) -> list[Value]:
    a, b = args
    dtype = result_dtype(a, b)
    sa, sb = _shape_of(a), _shape_of(b)
    if len(sa) < 2 or len(sb) < 2:
        raise ShapeError(f"matmul: operands need rank >= 2 here (got {list(sa)} and "
                         f"{list(sb)}) at {loc}")
    try:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions {list(sa[:-2])} and {list(sb[:-2])} do "
                         f"not broadcast at {loc}") from None
    return [_operand(ctx, a, dtype, batch + sa[-2:], loc),
            _operand(ctx, b, dtype, batch + sb[-2:], loc)]


def inline(fn: Function, args) -> list:
    """Replay fn's ops in the current trace on args (tracers or constants)."""
    ctx = _current()
    env = {p: ctx.read(a) for p, a in zip(fn.params, args, strict=True)}
    for op in fn.ops:
        outs = ctx.builder.add(op.prim, [env[v] for v in op.inputs], op.params, op.loc, op.note)
        env.update(zip(op.outputs, outs))
    return [Tracer(env[r], ctx) for r in fn.results]


def trace_flat(fun, in_types, name, weak=None, hints=None, lift_tensors=False, writeback=None):
    """Trace fun(*tracers) for the given param types.

    Returns (Function, out_treedef, captures): the outputs of fun may be any pytree; captures
    lists the outer tracers lifted into extra trailing params of the Function (and with
    lift_tensors, the eager tensors requiring grad that fun closes over). Given a list as
    `writeback`, the params fun updated in place get their final values as extra trailing
    results, and the list gets (param index, the user's line of the last write, "write") for
    each, and (index, line, "rebind") for a 0-d param that `+=` rebound as a NumPy scalar.
    """
    weak = weak or [False] * len(in_types)
    hints = hints or [None] * len(in_types)
    with TraceContext(name) as ctx:
        ctx.lift_tensors = lift_tensors
        tracers = [ctx.new_param(t, h, w) for t, h, w in zip(in_types, hints, weak)]
        params = [t.value for t in tracers]
        leaves, out_tree = flatten(call_located(fun, *tracers))
        results = [ctx.read(leaf) for leaf in leaves]
        if writeback is not None:
            for i, (t, p) in enumerate(zip(tracers, params)):
                if t.value is not p:
                    writeback.append((i, ctx.writes.get(id(t)), "write"))
                    results.append(t.value)
                elif id(t) in ctx.rebinds:
                    writeback.append((i, ctx.rebinds[id(t)], "rebind"))
    fn = ctx.builder.build(results)
    return fn, out_tree, [outer for outer, _ in ctx.captures]


dispatch.ambient_handler = lambda: Tracer if _stack() else None
