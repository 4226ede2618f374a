"""The IR verifier: every pass must leave a Function that passes `verify`.

It checks what the Builder guarantees by construction and hand-built or transformed IR may break:
each Value is defined once (as a parameter or an op output) before it is used, results are
defined, primitives are known, and every op's output types are what its shape rule infers.
Messages name the op as printed (`%3 = mul`) and its source line, and all problems are reported
at once, one per line. Nested functions (a loop's body, a cond's branch) are checked too, and
must be closed: a value of the enclosing function used inside one is an error, since the op
must pass it in as an operand. That their types fit the op's operands is the op's shape rule.
"""

from __future__ import annotations

import re

from .core import Function, Op, Value
from .primitives import PRIMITIVES, infer_types
from .printer import describe_op, functions_of, value_names
from .types import TensorType


class VerifyError(ValueError):
    """Malformed IR; `.errors` lists one message per problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


def verify(fn: Function) -> Function:
    """Check fn's definitions, uses, primitives and types; returns fn or raises VerifyError."""
    errors = list(_problems(fn))
    if errors:
        raise VerifyError(errors)
    return fn


def _problems(fn: Function, outer: frozenset = frozenset()):
    """The problems of fn; `outer` holds the values of the functions fn is nested in."""
    names = value_names(fn)
    defined: dict[Value, str] = {}       # value -> where it was defined, for messages
    defined_by_op = {v for op in fn.ops for v in op.outputs if isinstance(v, Value)}
    for i, p in enumerate(fn.params):
        if not isinstance(p, Value):
            yield f"verify: parameter {i} is not a Value but {type(p).__name__}"
        elif p in defined:
            yield f"verify: parameter {names[p]} is listed twice"
        else:
            if not isinstance(p.type, TensorType):
                yield f"verify: parameter {names[p]} has no TensorType ({p.type!r})"
            defined[p] = "as a parameter"
    for op in fn.ops:
        where = f"verify: {describe_op(op, names)}" + (f" at {op.loc}" if op.loc else "")
        for problem in _op_problems(op, names, defined, defined_by_op, outer):
            yield f"{where}: {problem}"
        for key, sub in functions_of(op):
            for problem in _problems(sub, outer | set(defined)):
                yield f"{where}: {key} @{sub.name}: {problem.removeprefix('verify: ')}"
        for v in op.outputs:
            if isinstance(v, Value) and v not in defined:
                defined[v] = f"by {describe_op(op, names)}" + (f" at {op.loc}" if op.loc else "")
    for k, r in enumerate(fn.results):
        if not isinstance(r, Value):
            yield f"verify: result {k} is not a Value but {type(r).__name__}"
        elif r not in defined:
            what = "a value of the enclosing function (pass it in as an operand)" \
                if r in outer else "never defined"
            yield f"verify: result {k} ({names[r]}) is {what}"


def _op_problems(op: Op, names, defined: dict, defined_by_op: set, outer: frozenset):
    values_ok = True
    for i, v in enumerate(op.inputs):
        if not isinstance(v, Value):
            values_ok = False
            yield f"operand {i} is not a Value but {type(v).__name__}"
        elif v not in defined and v in outer:
            yield (f"uses a value of the enclosing function ({names[v]} here): a nested "
                   f"function is closed, so its op must pass the value in as an operand")
        elif v not in defined:
            when = " before it is defined" if v in defined_by_op else ", which is never defined"
            yield f"uses {names[v]}{when}"
    for v in op.outputs:
        if not isinstance(v, Value):
            values_ok = False
            yield f"an output is not a Value but {type(v).__name__}"
        elif v in defined:
            yield f"defines {names[v]} again (it is already defined {defined[v]})"
    if op.prim not in PRIMITIVES:
        yield f"unknown primitive {op.prim!r}"
    elif values_ok:
        yield from _type_problems(op, names)


def rule_error(prim: str, e: Exception) -> str:
    """A shape rule's complaint without its `prim: ` prefix or the rule's Python name."""
    if isinstance(e, TypeError):   # the rule's signature: wrong operand count or params
        return re.sub(r"^_?\w+\(\) ", f"{prim} ", str(e)).replace("positional argument",
                                                                  "operand")
    return str(e).removeprefix(f"{prim}: ")


def _type_problems(op: Op, names):
    try:
        inferred = infer_types(op.prim, [v.type for v in op.inputs], dict(op.params or {}))
    except Exception as e:  # noqa: BLE001 - ShapeError, TypeError for bad params, or worse
        yield f"the shape rule rejects it: {rule_error(op.prim, e)}"
        return
    if len(inferred) != len(op.outputs):
        yield f"has {len(op.outputs)} outputs but {op.prim} infers {len(inferred)}"
        return
    for v, t in zip(op.outputs, inferred, strict=True):
        if v.type != t:
            yield f"output {names[v]} has type {v.type} but {op.prim} infers {t}"
