"""Constant folding and exact algebraic identities, to a fixed point in one forward pass.

Ops are visited in order with an env from old values to their replacements. An op whose
operands are all constants (`full`, `constant`, `iota`) is evaluated with the interpreter and
becomes a `full` when the result is uniform, or a `constant` when it is small; otherwise the
rules below may replace it by one of its operands or rewrite it into another op, which is then
simplified again. Rules only look at operands, which are final when an op is visited, so one
pass reaches the fixed point.

Only identities that hold bit for bit in floating point are used (x*1, x-0, x/1, neg(neg x),
pow(x, 1), reshape/transpose/broadcast composition, ...), plus x+0 -> x, which can only change
the sign of a zero result. Never x*0 -> 0 or x-x -> 0 (wrong for inf and nan), and never a
reassociation. Control-flow ops are never folded (a loop is not run at compile time); their
nested Functions are simplified on their own.
"""

from __future__ import annotations

import numpy as np

from ..ir.core import Builder, Function, Op, Value
from ..ir.primitives import ELEMENTWISE, infer_types
from ..ir.types import dtype_name
from ..ir.evaluate import apply
from .nested import HOLDERS, nested_params

SMALL = 64            # fold into a `constant` only results this small (uniform ones become `full`)
MATERIALIZE = 1 << 16  # evaluate non-uniform constant operands only up to this many elements
CONSTANT_PRIMS = ("full", "constant", "iota")
SHAPE_PRIMS = frozenset(("broadcast_in_dim", "reshape", "transpose", "slice"))


class _Simplifier:
    def __init__(self, fn: Function):
        self.builder = Builder(fn.name)
        self.builder.params = list(fn.params)
        self.producer: dict[Value, Op] = {}

    def scalar(self, v: Value):
        """The value of a `full` operand, else None."""
        op = self.producer.get(v)
        return op.params["value"] if op is not None and op.prim == "full" else None

    def is_scalar(self, v: Value, value) -> bool:
        s = self.scalar(v)
        return s is not None and not isinstance(s, bool) and s == value

    def emit(self, prim, inputs, params, loc, note, original: Op | None) -> Value:
        """Simplify prim(inputs) to a fixed point; append it unless it became an operand."""
        while True:
            rewritten = self.rewrite(prim, inputs, params)
            if rewritten is None:
                break
            if isinstance(rewritten, Value):
                return rewritten
            prim, inputs, params = rewritten
            original = None
        if original is None:
            out = self.builder.add1(prim, inputs, params, loc, note)
        else:   # replacements have their value's type, so the output types stay
            if tuple(inputs) != original.inputs:
                original = Op(prim, inputs, params, [Value(original.out.type, original.out.hint)],
                              loc, note)
            self.builder.append(original)
            out = original.out
        self.producer[out] = self.builder.ops[-1]
        return out

    def rewrite(self, prim, inputs, params):
        """A replacement Value, a new (prim, inputs, params), or None when nothing applies."""
        if inputs and all(self.producer.get(v) is not None and
                          self.producer[v].prim in CONSTANT_PRIMS for v in inputs):
            folded = self.fold(prim, inputs, params)
            if folded is not None:
                return folded
        if prim == "constant":
            return _uniform_full(params["value"])
        rule = RULES.get(prim)
        return rule(self, *inputs, **params) if rule is not None else None

    def fold(self, prim, inputs, params):
        """Evaluate prim on constant operands: a `full` or small `constant`, or None."""
        scalars = [self.scalar(v) for v in inputs]
        (out_type,) = infer_types(prim, [v.type for v in inputs], params)
        uniform = all(x is not None for x in scalars)
        small = sum(v.type.size for v in inputs) + out_type.size <= MATERIALIZE \
            and (uniform or out_type.size <= SMALL)
        try:
            if uniform and (prim in ELEMENTWISE or prim in SHAPE_PRIMS):
                value = _fold_scalars(prim, inputs, scalars, params, out_type)
                return "full", (), {"shape": out_type.shape, "dtype": out_type.dtype,
                                    "value": value.item()}
            if not small:
                return None
            args = [apply(self.producer[v].prim, [], self.producer[v].params) for v in inputs]
            value = apply(prim, args, params).astype(out_type.np_dtype)
        except (ArithmeticError, IndexError, TypeError, ValueError):   # leave it to run time
            return None
        if value.shape != out_type.shape:
            return None
        full = _uniform_full(value)
        if full is not None:
            return full
        return ("constant", (), {"value": value}) if value.size <= SMALL else None


def _fold_scalars(prim, inputs, scalars, params, out_type):
    """The one element of an elementwise or shape op on `full` operands, as a 0-d array."""
    if prim in SHAPE_PRIMS:
        return np.asarray(scalars[0], inputs[0].type.np_dtype)
    args = [np.asarray(x, v.type.np_dtype) for x, v in zip(scalars, inputs)]
    return apply(prim, args, params).astype(out_type.np_dtype)


def _uniform_full(value):
    """`full` params for an array whose elements are bitwise equal (size >= 1), else None."""
    value = np.asarray(value)
    if value.size == 0:
        return None
    first = value.reshape(-1)[:1]
    if value.tobytes() != first.tobytes() * value.size:
        return None
    return "full", (), {"shape": value.shape, "dtype": dtype_name(value.dtype),
                        "value": first[0].item()}


# ---- the rules: one function per primitive, operands positional, params as keywords ----

def _mul(s, x, y):
    if s.is_scalar(y, 1):
        return x
    if s.is_scalar(x, 1):
        return y


def _add(s, x, y):
    # only -0.0 is an exact additive identity: x + 0.0 turns x = -0.0 into +0.0
    for a, b in ((x, y), (y, x)):
        zero = s.scalar(b)
        if zero is not None and zero == 0 and (np.signbit(zero) or a.type.dtype == "i64"):
            return a


def _sub(s, x, y):
    zero = s.scalar(y)
    if zero is not None and zero == 0 and not np.signbit(zero):  # x - (-0.0) is x + 0.0
        return x


def _div(s, x, y):
    if s.is_scalar(y, 1):
        return x


def _pow(s, x, y):
    if s.is_scalar(y, 1):
        return x
    if s.is_scalar(y, 2):
        return "mul", (x, x), {}


def _neg(s, x):
    inner = s.producer.get(x)
    if inner is not None and inner.prim == "neg":
        return inner.inputs[0]


def _select(s, pred, on_true, on_false):
    if on_true is on_false:
        return on_true
    choice = s.scalar(pred)
    if choice is not None:
        return on_true if choice else on_false


def _convert(s, x, *, dtype):
    if x.type.dtype == dtype:
        return x


def _reshape(s, x, *, shape):
    if x.type.shape == tuple(shape):
        return x
    inner = s.producer.get(x)
    if inner is not None and inner.prim == "reshape":
        return "reshape", inner.inputs, {"shape": tuple(shape)}


def _transpose(s, x, *, perm):
    if tuple(perm) == tuple(range(len(perm))):
        return x
    inner = s.producer.get(x)
    if inner is not None and inner.prim == "transpose":
        return "transpose", inner.inputs, {"perm": tuple(inner.params["perm"][p] for p in perm)}


def _broadcast_in_dim(s, x, *, shape, dims):
    if x.type.shape == tuple(shape):
        return x                                  # dims are then the identity (shape rule)
    inner = s.producer.get(x)
    if inner is not None and inner.prim == "broadcast_in_dim":
        return "broadcast_in_dim", inner.inputs, {
            "shape": tuple(shape), "dims": tuple(dims[d] for d in inner.params["dims"])}


RULES = {"mul": _mul, "add": _add, "sub": _sub, "div": _div, "pow": _pow, "neg": _neg,
         "select": _select, "convert": _convert, "reshape": _reshape, "transpose": _transpose,
         "broadcast_in_dim": _broadcast_in_dim}


def simplify(fn: Function) -> Function:
    """fn with constants folded and exact identities applied."""
    s = _Simplifier(fn)
    env = {p: p for p in fn.params}
    for op in fn.ops:
        inputs = tuple(env[v] for v in op.inputs)
        if len(op.outputs) != 1 or op.prim in HOLDERS:
            params = nested_params(op, simplify) if op.prim in HOLDERS else op.params
            s.builder.add(op.prim, inputs, params, op.loc, op.note)
            env.update(zip(op.outputs, s.builder.ops[-1].outputs))
            continue
        env[op.out] = s.emit(op.prim, inputs, op.params, op.loc, op.note, op)
    return s.builder.build([env[r] for r in fn.results])
