"""The primitive set and its shape rules, in the style of jax.lax.

A primitive is just a name. Each table keyed by primitive name gives one interpretation:
here the shape/dtype rule; elsewhere the NumPy implementation (runtime/interpreter.py), the VJP
rule (formulas.py), the lowering of composites (passes/lower.py) and the scalar code template
(codegen). A shape rule takes the input TensorTypes and the static params and returns the output
types, or raises ShapeError naming the primitive and the offending shapes.

There is no implicit broadcasting and no implicit promotion: elementwise operands have equal
types; the tracer inserts broadcast_in_dim and convert.
"""

from __future__ import annotations

import re

from .types import FLOAT_DTYPES, NP_DTYPES, TensorType


class ShapeError(ValueError):
    """A primitive was applied to operands of incompatible shapes or dtypes."""


class Prim:
    """Primitive names as attributes: `Prim.tanh == "tanh"`."""


UNARY_FLOAT = ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
               "logistic", "erf", "floor", "ceil", "round", "trunc")
UNARY_NUMERIC = ("neg", "abs", "sign")
BINARY_NUMERIC = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGICAL = ("and", "or", "not")
ELEMENTWISE = frozenset(UNARY_FLOAT + UNARY_NUMERIC + BINARY_NUMERIC + COMPARISONS + LOGICAL
                        + ("select", "convert"))
REDUCTIONS = frozenset(("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"))
COMPOSITES = frozenset(("softmax", "log_softmax", "logsumexp", "cross_entropy", "layer_norm",
                        "gelu"))
NULLARY = frozenset(("full", "iota", "constant"))

shape_rules: dict = {}


def _rule(*names):
    def register(fn):
        for name in names:
            shape_rules[name] = fn
            setattr(Prim, name, name)
        return fn
    return register


def infer_types(prim: str, in_types: list[TensorType], params: dict) -> tuple[TensorType, ...]:
    rule = shape_rules.get(prim)
    if rule is None:
        raise ShapeError(f"unknown primitive {prim!r}")
    try:
        out = rule(prim, *in_types, **params)
    except TypeError as e:                      # wrong operand count or params
        detail = re.sub(r"^_?\w+[(][)] ", "", str(e))
        raise ShapeError(f"{prim} {detail}") from None
    return out if isinstance(out, tuple) else (out,)


def _fail(prim, msg, *types):
    shapes = ", ".join(str(t) for t in types)
    raise ShapeError(f"{prim}: {msg} (operands {shapes})")


def _axis(prim, axis, ndim, t):
    if not -ndim <= axis < max(ndim, 1):
        _fail(prim, f"axis {axis} out of range for rank {ndim}", t)
    return axis % max(ndim, 1)


def _require_float(prim, *types):
    for t in types:
        if t.dtype not in FLOAT_DTYPES:
            _fail(prim, f"needs floating-point operands, got {t.dtype}", *types)


def _require_same(prim, *types):
    if any(t != types[0] for t in types):
        _fail(prim, "operands must have equal shapes and dtypes (broadcast and convert first)",
              *types)


@_rule(*UNARY_FLOAT)
def _unary_float(prim, x):
    _require_float(prim, x)
    return x


@_rule(*UNARY_NUMERIC)
def _unary_numeric(prim, x):
    if x.dtype == "bool":
        _fail(prim, "needs a numeric operand, got bool", x)
    return x


@_rule(*BINARY_NUMERIC)
def _binary(prim, x, y):
    _require_same(prim, x, y)
    if x.dtype == "bool":
        _fail(prim, "needs numeric operands, got bool", x, y)
    return x


@_rule(*COMPARISONS)
def _compare(prim, x, y):
    _require_same(prim, x, y)
    return x.with_dtype("bool")


@_rule("and", "or")
def _logical(prim, x, y):
    _require_same(prim, x, y)
    if x.dtype not in ("bool", "i64"):
        _fail(prim, "needs bool or i64 operands", x, y)
    return x


@_rule("not")
def _not(prim, x):
    if x.dtype not in ("bool", "i64"):
        _fail(prim, "needs a bool or i64 operand", x)
    return x


@_rule("select")
def _select(prim, pred, on_true, on_false):
    if pred.dtype != "bool":
        _fail(prim, "predicate must be bool", pred, on_true, on_false)
    if pred.shape != on_true.shape:
        _fail(prim, "predicate and branches must have equal shapes", pred, on_true, on_false)
    _require_same(prim, on_true, on_false)
    return on_true


@_rule("convert")
def _convert(prim, x, *, dtype):
    if dtype not in NP_DTYPES:
        _fail(prim, f"unknown dtype {dtype!r}", x)
    return x.with_dtype(dtype)


@_rule("broadcast_in_dim")
def _broadcast_in_dim(prim, x, *, shape, dims):
    shape, dims = tuple(shape), tuple(dims)
    if len(dims) != x.ndim or any(not 0 <= d < len(shape) for d in dims) \
            or list(dims) != sorted(set(dims)):
        _fail(prim, f"dims {dims} must map each operand axis to increasing output axes of "
              f"{list(shape)}", x)
    for axis, d in enumerate(dims):
        if x.shape[axis] not in (1, shape[d]):
            _fail(prim, f"cannot broadcast axis {axis} of size {x.shape[axis]} to {shape[d]}", x)
    return x.with_shape(shape)


@_rule("reshape")
def _reshape(prim, x, *, shape):
    shape = tuple(shape)
    if any(s < 0 for s in shape) or TensorType(x.dtype, shape).size != x.size:
        _fail(prim, f"cannot reshape {x.size} elements into {list(shape)}", x)
    return x.with_shape(shape)


@_rule("transpose")
def _transpose(prim, x, *, perm):
    if sorted(perm) != list(range(x.ndim)):
        _fail(prim, f"perm {tuple(perm)} is not a permutation of the operand's axes", x)
    return x.with_shape(x.shape[p] for p in perm)


@_rule("slice")
def _slice(prim, x, *, start, stop, step):
    if not len(start) == len(stop) == len(step) == x.ndim:
        _fail(prim, "start, stop and step need one entry per axis", x)
    shape = []
    for n, a, b, s in zip(x.shape, start, stop, step):
        if s < 1 or not 0 <= a <= b <= n:
            _fail(prim, f"bad slice {a}:{b}:{s} of an axis of size {n}", x)
        shape.append(max(0, -(-(b - a) // s)))
    return x.with_shape(shape)


@_rule("pad")
def _pad(prim, x, *, low, high, interior):
    if not len(low) == len(high) == len(interior) == x.ndim:
        _fail(prim, "low, high and interior need one entry per axis", x)
    if any(v < 0 for v in (*low, *high, *interior)):
        _fail(prim, "padding must be non-negative", x)
    return x.with_shape(lo + hi + n + max(n - 1, 0) * it
                        for n, lo, hi, it in zip(x.shape, low, high, interior))


@_rule("concatenate")
def _concatenate(prim, *xs, axis):
    if not xs:
        _fail(prim, "needs at least one operand")
    first = xs[0]
    if first.ndim == 0:
        _fail(prim, "cannot concatenate 0-d operands", *xs)
    axis = _axis(prim, axis, first.ndim, first)
    for x in xs:
        if x.dtype != first.dtype or x.ndim != first.ndim or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis):
            _fail(prim, f"operands must agree except along axis {axis}", *xs)
    size = sum(x.shape[axis] for x in xs)
    return first.with_shape(first.shape[:axis] + (size,) + first.shape[axis + 1:])


def _check_index(prim, idx, *types):
    if idx.dtype != "i64":
        _fail(prim, "indices must be i64", *types)


@_rule("take")
def _take(prim, x, idx, *, axis):
    _check_index(prim, idx, x, idx)
    axis = _axis(prim, axis, x.ndim, x)
    return x.with_shape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


@_rule("take_along_axis")
def _take_along_axis(prim, x, idx, *, axis):
    _check_index(prim, idx, x, idx)
    axis = _axis(prim, axis, x.ndim, x)
    if idx.ndim != x.ndim or any(a != b for i, (a, b) in enumerate(zip(idx.shape, x.shape))
                                 if i != axis):
        _fail(prim, f"indices must match the operand's shape except along axis {axis}", x, idx)
    return x.with_shape(idx.shape)


@_rule("scatter_add")
def _scatter_add(prim, idx, g, *, axis, shape):
    """The transpose of take: zeros(shape) with g's slices added at idx along axis."""
    _check_index(prim, idx, idx, g)
    shape = tuple(shape)
    if g.shape != shape[:axis] + idx.shape + shape[axis + 1:]:
        _fail(prim, f"updates do not match take's output for shape {list(shape)}", idx, g)
    return g.with_shape(shape)


@_rule("scatter_add_along_axis")
def _scatter_add_along_axis(prim, idx, g, *, axis, shape):
    """The transpose of take_along_axis."""
    _check_index(prim, idx, idx, g)
    if idx.shape != g.shape or len(shape) != g.ndim:
        _fail(prim, "indices and updates must have equal shapes", idx, g)
    return g.with_shape(shape)


def _reduced(prim, x, axes):
    axes = tuple(axes)
    if any(not 0 <= a < x.ndim for a in axes) or len(set(axes)) != len(axes):
        _fail(prim, f"bad axes {axes} for rank {x.ndim}", x)
    return tuple(n for i, n in enumerate(x.shape) if i not in axes)


@_rule("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(prim, x, *, axes):
    if x.dtype == "bool":
        _fail(prim, "needs a numeric operand (convert bool to i64 first)", x)
    _nonempty(prim, x, axes)
    return x.with_shape(_reduced(prim, x, axes))


@_rule("argmax", "argmin")
def _argreduce(prim, x, *, axis):
    _nonempty(prim, x, (axis,))
    return TensorType("i64", _reduced(prim, x, (axis,)))


# A max, min, argmax or argmin over an empty axis has no value: NumPy raises these, so every
# backend does, at trace time (compiled loops would return their start value, -inf or 0).
_EMPTY = {"reduce_max": "zero-size array to reduction operation maximum which has no identity",
          "reduce_min": "zero-size array to reduction operation minimum which has no identity",
          "argmax": "attempt to get argmax of an empty sequence",
          "argmin": "attempt to get argmin of an empty sequence"}


def _nonempty(prim, x, axes):
    if prim in _EMPTY and any(0 <= a < x.ndim and x.shape[a] == 0 for a in axes):
        _fail(prim, _EMPTY[prim], x)


@_rule("cumsum")
def _cumsum(prim, x, *, axis, reverse=False):
    if x.ndim == 0 or x.dtype == "bool":
        _fail(prim, "needs a numeric operand of rank >= 1", x)
    _axis(prim, axis, x.ndim, x)
    return x


@_rule("matmul")
def _matmul(prim, a, b):
    if a.ndim < 2 or a.ndim != b.ndim or a.dtype != b.dtype or a.dtype == "bool" \
            or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        _fail(prim, "needs [..., m, k] @ [..., k, n] with equal batch shapes and dtypes", a, b)
    return a.with_shape(a.shape[:-1] + b.shape[-1:])


@_rule("full")
def _full(prim, *, shape, dtype, value):
    return TensorType(dtype, tuple(shape))


@_rule("iota")
def _iota(prim, *, shape, dtype, axis):
    return TensorType(dtype, tuple(shape))


@_rule("constant")
def _constant(prim, *, value):
    return TensorType.of(value)


@_rule("softmax", "log_softmax")
def _softmax(prim, x, *, axis):
    _require_float(prim, x)
    _axis(prim, axis, x.ndim, x)
    return x


@_rule("logsumexp")
def _logsumexp(prim, x, *, axes):
    _require_float(prim, x)
    return x.with_shape(_reduced(prim, x, axes))


@_rule("cross_entropy")
def _cross_entropy(prim, logits, targets):
    _require_float(prim, logits)
    if logits.ndim != 2 or targets.shape != logits.shape[:1] or targets.dtype != "i64":
        _fail(prim, "needs logits [N, C] and i64 targets [N]", logits, targets)
    return logits.with_shape(())


@_rule("layer_norm")
def _layer_norm(prim, x, *, ndim, eps):
    _require_float(prim, x)
    if not 1 <= ndim <= x.ndim:
        _fail(prim, f"cannot normalize {ndim} trailing axes of rank {x.ndim}", x)
    return x


@_rule("gelu")
def _gelu(prim, x, *, approximate):
    _require_float(prim, x)
    return x
