"""The checks of fg.custom_vjp (custom.py): what bwd returned against f's inputs, fwd's output
against f's, and the texts that describe pytrees of arrays in their messages.

A message names the function, the rule (`f_bwd`, or `f's bwd` for a lambda), the input by
position and parameter name (`input 0 (x)`, `input 1 (params['w'])` for a pytree leaf) and the
shapes, as Python tuples: `custom_vjp f: f_bwd returned a cotangent of shape (3,) for input 0
(x), expected (2, 3)`.
"""

from __future__ import annotations

import numpy as np

from .dispatch import level
from .ir.types import dtype_name
from .runtime.grad_mode import no_grad
from .runtime.signature import leaf_type
from .runtime.tensor import Tensor
from .tracer.tracer import Tracer, trace_flat
from .tree import flatten, num_leaves, unflatten


def check_cotangents(spec, arg_trees, in_info, cts, traced) -> list:
    """bwd's result checked against the inputs (arg_trees, in_info: input_info's rows): one
    cotangent per operand input, None where none flows."""
    n_args = len(arg_trees)
    bwd = spec._role("bwd")
    if not isinstance(cts, (tuple, list)) or len(cts) != n_args:
        names = ", ".join(spec._arg_name(i) for i in range(n_args))
        got = (f"a {type(cts).__name__} of length {len(cts)}"
               if isinstance(cts, (tuple, list)) else describe(cts))
        hint = " (for one input, return (g,))" if n_args == 1 else ""
        raise TypeError(f"custom_vjp {spec.name}: {bwd} must return a tuple with one "
                        f"cotangent per input of {spec.name}, {n_args} ({names}), got "
                        f"{got}{hint}")
    values = []
    for i, (ct, tree) in enumerate(zip(cts, arg_trees)):
        if not matches(tree, ct, values):
            ct_leaves, ct_tree = flatten(ct)
            expected = [info[2] for info in in_info if info[0] == i]
            raise TypeError(
                f"custom_vjp {spec.name}: {bwd} returned a cotangent for input {i} "
                f"({spec._arg_name(i)}) with structure "
                f"{render(ct_tree, [_shape_text(shape_of(x)) for x in ct_leaves])}, "
                f"expected {render(tree, [_shape_text(s) for s in expected])}")
    out = []
    for value, (i, path, shape, dtype, operand) in zip(values, in_info):
        if operand is None:
            continue
        if value is None or np.dtype(dtype).kind != "f":
            out.append(None)            # no cotangent: zero, and none for int/bool inputs
            continue
        got = shape_of(value)
        if got != shape:
            raise ValueError(
                f"custom_vjp {spec.name}: {bwd} returned a cotangent of shape "
                f"{_shape_text(got)} for input {i} ({spec._arg_name(i)}{path}), expected "
                f"{_shape_text(shape)}")
        if not traced and not isinstance(value, Tensor):
            value = np.asarray(value)
        out.append(value)
    return out


def input_info(args) -> list:
    """Per leaf of the inputs: (argument index, path in it, shape, dtype, operand index, or
    None for a leaf that is not an array and so not an operand)."""
    info, k = [], 0
    for i, a in enumerate(args):
        leaves, tree = flatten(a)
        for x, path in zip(leaves, _paths(tree)):
            if is_numeric(x):
                info.append((i, path, shape_of(x), dtype_of(x), k))
                k += 1
            else:
                info.append((i, path, shape_of(x) if is_numeric(x) else (), "O", None))
    return info


def matches(tree, ct, values) -> bool:
    """Append ct's leaves for tree's leaves to values (None under a None); False when ct does
    not have tree's structure (lists and tuples are interchangeable)."""
    kind = tree[0]
    if ct is None:
        values.extend([None] * num_leaves(tree))
        return True
    if kind == "leaf":
        if isinstance(ct, (list, tuple, dict)):
            return False
        values.append(ct)
        return True
    if kind == "none":
        return False
    if kind == "dict":
        if not isinstance(ct, dict) or sorted(ct, key=repr) != sorted(tree[1], key=repr):
            return False
        return all(matches(child, ct[key], values) for key, child in zip(tree[1], tree[2]))
    if not isinstance(ct, (list, tuple)) or len(ct) != len(tree[1]):
        return False
    return all(matches(child, c, values) for child, c in zip(tree[1], ct))


def is_numeric(x) -> bool:
    return level(x) > 0 or isinstance(x, (np.ndarray, np.generic, bool, int, float))


def shape_of(x) -> tuple:
    if isinstance(x, Tensor):
        return tuple(x.data.shape)
    if isinstance(x, Tracer):
        return tuple(x.shape)
    return tuple(np.shape(x)) if is_numeric(x) else ()


def dtype_of(x) -> np.dtype:
    if isinstance(x, Tensor):
        return x.data.dtype
    if isinstance(x, Tracer):
        return x.dtype
    return np.asarray(x).dtype


def type_of(x) -> tuple:
    """(shape, dtype name, weak): what fwd's output is compared to fun's by."""
    weak = type(x) in (bool, int, float) or (isinstance(x, Tracer) and x.weak)
    return (shape_of(x), dtype_name(dtype_of(x)), weak)


def same_output(a, b) -> bool:
    (tree_a, types_a), (tree_b, types_b) = a, b
    return tree_a == tree_b and all(
        sa == sb and (da == db or wa or wb)
        for (sa, da, wa), (sb, db, wb) in zip(types_a, types_b))


def signature(args):
    """A hashable key for the input types of a call (None when a static leaf is not
    hashable): fun's output structure depends on it."""
    leaves, tree = flatten(args)
    key = [tree]
    for x in leaves:
        if isinstance(x, Tracer):
            key.append((x.aval, x.weak))
        elif is_numeric(x):
            key.append(leaf_type(x))
        else:
            try:
                hash(x)
            except TypeError:
                return None
            key.append(("static", x))
    return tuple(key)


def abstract_output(fun, args):
    """(out tree, leaf types) of fun traced on abstract values of args; None when it cannot
    be traced (NumPy code that needs numbers, say)."""
    leaves, tree = flatten(args)
    slots = [k for k, x in enumerate(leaves) if is_numeric(x)]
    types = [(leaves[k].aval, leaves[k].weak) if isinstance(leaves[k], Tracer)
             else leaf_type(leaves[k]) for k in slots]

    def flat(*tracers):
        new = list(leaves)
        for k, t in zip(slots, tracers):
            new[k] = t
        return fun(*unflatten(tree, new))
    try:
        with no_grad():
            fn, out_tree, _ = trace_flat(flat, [t for t, _ in types], "custom_vjp_check",
                                         weak=[w for _, w in types])
    except Exception:       # noqa: BLE001 - only a check: a function that cannot be traced
        return None
    return out_tree, [(r.type.shape, r.type.dtype, False) for r in fn.results]


def _paths(tree, prefix="") -> list:
    kind = tree[0]
    if kind == "leaf":
        return [prefix]
    if kind == "none":
        return []
    if kind == "dict":
        return [p for key, child in zip(tree[1], tree[2])
                for p in _paths(child, f"{prefix}[{key!r}]")]
    return [p for i, child in enumerate(tree[1]) for p in _paths(child, f"{prefix}[{i}]")]


def _shape_text(shape) -> str:
    return str(tuple(shape))


def describe(x) -> str:
    if is_numeric(x):
        return f"an array of shape {_shape_text(shape_of(x))}"
    return f"a {type(x).__name__}"


def render(tree, leaf_texts) -> str:
    """A pytree structure with its leaves described: `{'b': f64[3], 'w': f64[2,3]}`."""
    texts = [t if isinstance(t, str) else _type_text(t) for t in leaf_texts]
    it = iter(texts)

    def walk(node):
        kind = node[0]
        if kind == "leaf":
            return next(it)
        if kind == "none":
            return "None"
        if kind == "dict":
            return "{" + ", ".join(f"{k!r}: {walk(c)}" for k, c in zip(node[1], node[2])) + "}"
        items = [walk(c) for c in node[1]]
        if kind == "list":
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return walk(tree)


def _type_text(t) -> str:
    shape, dtype, _ = t
    return f"{dtype}[{','.join(str(n) for n in shape)}]"
