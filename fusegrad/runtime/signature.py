"""Call signatures: what a compiled entry is specialized on, and why a call missed the cache.

A signature is the tree structure of the dynamic arguments, the type of every leaf (shape,
dtype, and whether it is a weakly typed Python scalar) and the values of the static arguments.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np

from ..dispatch import level
from ..ir.types import TensorType, dtype_name
from ..tree import flatten

_PY_SCALARS = {bool: "bool", int: "i64", float: "f64"}


@dataclass(frozen=True)
class Signature:
    treedef: tuple
    types: tuple            # (TensorType, weak) per leaf
    static: tuple           # (argnum, value) pairs
    static_types: tuple = ()  # the types of the static values: 1, 1.0 and True are equal keys


def leaf_array(x):
    """A dynamic argument leaf as an ndarray of an IR dtype (tensors give their data)."""
    if level(x) == 1:
        x = x.data
    array = np.asarray(x)
    want = TensorType.of(array).np_dtype if array.dtype.kind in "fiub" else None
    if want is None:
        raise TypeError(f"cannot pass {type(x).__name__} {x!r:.60} to a jitted function: "
                        f"arguments must be arrays, numbers or pytrees (dict/list/tuple) of "
                        f"them; mark other arguments static with static_argnums")
    return array if array.dtype == want else array.astype(want)


def leaf_type(x) -> tuple[TensorType, bool]:
    kind = _PY_SCALARS.get(type(x))
    if kind is not None:
        return TensorType(kind, ()), True
    if level(x) == 1:
        x = x.data
    if isinstance(x, (np.ndarray, np.generic)):
        return TensorType(dtype_name(x.dtype), x.shape), False
    return TensorType.of(leaf_array(x)), False


def split_args(args, static_argnums) -> tuple[list, tuple]:
    for i in static_argnums:
        if not -len(args) <= i < len(args):
            raise TypeError(f"static_argnums names argument {i}, but the function was called "
                            f"with {len(args)} positional arguments")
    static_argnums = tuple(sorted(i % len(args) for i in static_argnums))
    static = tuple((i, args[i]) for i in static_argnums)
    for i, value in static:
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"static argument {i} of type {type(value).__name__} is not "
                            f"hashable; pass a tuple instead of a list, or make it dynamic") \
                from None
    dynamic = [a for i, a in enumerate(args) if i not in static_argnums]
    return dynamic, static


def signature_of(args, static_argnums) -> tuple[Signature, list]:
    dynamic, static = split_args(args, static_argnums)
    leaves, treedef = flatten(dynamic)
    static_types = tuple(type(v) for _, v in static)
    return Signature(treedef, tuple(leaf_type(x) for x in leaves), static, static_types), leaves


def explain_miss(name: str, old: Signature | None, new: Signature) -> str:
    """A one-line reason for a new trace, e.g. `arg 0 shape (3,) -> (5,)`."""
    if old is None:
        return f"trace {name}: first call"
    if old.treedef != new.treedef:
        return f"retrace {name}: argument tree structure changed"
    if old.static != new.static or old.static_types != new.static_types:
        return f"retrace {name}: static arguments {old.static} -> {new.static}"
    for i, ((a, wa), (b, wb)) in enumerate(zip(old.types, new.types)):
        if a.shape != b.shape:
            return f"retrace {name}: arg {i} shape {a.shape} -> {b.shape}"
        if a.dtype != b.dtype or wa != wb:
            return (f"retrace {name}: arg {i} dtype {a.dtype}{' (weak)' * wa} -> "
                    f"{b.dtype}{' (weak)' * wb}")
    return f"retrace {name}: new signature"


def log_compile(message: str) -> None:
    if "compile" in os.environ.get("FUSEGRAD_LOG", "").split(","):
        print(f"[fusegrad] {message}", file=sys.stderr)
