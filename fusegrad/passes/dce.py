"""Dead code elimination: keep only the ops the results depend on.

One backward walk: a value is live when it is a result or an operand of a live op; an op is
live when one of its outputs is. Every primitive is pure, so dead ops can simply go. Params are
never removed, so the signature stays the same even when a parameter is unused. A control-flow
op keeps only its live outputs and the operands its nested Functions still read, and those
Functions go through dce too (nested.prune).
"""

from __future__ import annotations

from ..ir.core import Function
from .nested import HOLDERS, prune


def dce(fn: Function) -> Function:
    """fn without the ops whose outputs no result needs."""
    live = set(fn.results)
    kept = []
    changed = False
    for op in reversed(fn.ops):
        if any(v in live for v in op.outputs):
            if op.prim in HOLDERS:
                new = prune(op, live, dce)
                changed, op = changed or new is not op, new
            kept.append(op)
            live.update(op.inputs)
    if len(kept) == len(fn.ops) and not changed:
        return fn
    return Function(fn.name, fn.params, kept[::-1], fn.results)
