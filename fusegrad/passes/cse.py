"""Common subexpression elimination by value numbering.

Every primitive is pure, so two ops with the same primitive, the same operand values (by
identity, after earlier merges) and equal params compute the same result: the later one is
dropped and its uses read the earlier one's outputs. Params are compared by a hashable key that
is exact where Python's == is not: floats by their bits (0.0 is not -0.0, nan equals nan), arrays
by dtype, shape and bytes, and bool, int and float are never equal to each other; a nested
Function (a loop body) by its text, after cse has run on it too.
"""

from __future__ import annotations

import numpy as np

from ..ir.control import is_function
from ..ir.core import Builder, Function, Op, Value
from .nested import HOLDERS, with_nested


def param_key(value):
    """A hashable key equal for two param values exactly when they mean the same thing."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, np.ascontiguousarray(value).tobytes())
    if isinstance(value, (bool, np.bool_)):
        return ("bool", bool(value))
    if isinstance(value, (int, np.integer)):
        return ("int", int(value))
    if isinstance(value, (float, np.floating)):
        return ("float", float(value).hex())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(param_key(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((str(k), param_key(v)) for k, v in value.items()))
    if value is None or isinstance(value, str):
        return value
    if is_function(value):
        return ("function", str(value))
    return ("object", id(value))   # unknown: equal only to itself


def _rewired(op: Op, inputs) -> Op:
    """op reading new operands of the same types, so its output types stay as they are."""
    return Op(op.prim, inputs, op.params, [Value(v.type, v.hint) for v in op.outputs],
              op.loc, op.note)


def cse(fn: Function) -> Function:
    """fn with duplicate computations merged into their first occurrence."""
    builder = Builder(fn.name)
    builder.params = list(fn.params)
    env = {p: p for p in fn.params}
    seen: dict = {}
    for op in fn.ops:
        if op.prim in HOLDERS:
            op = with_nested(op, cse)
        inputs = tuple(env[v] for v in op.inputs)
        key = (op.prim, inputs, param_key(op.params) if op.params else None)
        first = seen.get(key)
        if first is None:
            builder.append(op if inputs == op.inputs else _rewired(op, inputs))
            first = seen[key] = builder.ops[-1].outputs
        env.update(zip(op.outputs, first))
    return builder.build([env[r] for r in fn.results])
