"""Control flow on the numba backend (scan, while_loop, cond: ir/control.py), first stage.

Each nested Function is compiled once, on its own, by the ordinary pipeline (compile_numba,
which compile.py passes in), and the op is a host step of the generated module: the runner
calls the function made here, which runs the loop in Python around the compiled body, one
call per iteration, storing the ys in buffers it allocates (poisoned under FUSEGRAD_POISON).
A body compiled alone computes what interp computes for it, so the loop does too.

A later stage replaces this with a real njit loop around the fused body (residuals written
straight into preallocated stacked buffers); that belongs to codegen's loop tree.
"""

from __future__ import annotations

import numpy as np

from ..ir.control import nested
from .templates import poison_on

HOSTS = frozenset(("scan", "while_loop", "cond"))
_POISON = {"f32": np.nan, "f64": np.nan, "i64": np.iinfo(np.int64).min, "bool": True}


def host(op, compile_fn):
    """The host function for a control-flow op: its nested Functions compiled now, the loop
    run when called. Takes the operands (arrays or scalars) and returns the outputs (one, or
    a tuple), 0-d ones as NumPy scalars, as compile.py's host steps do."""
    compiled = {key: compile_fn(fn) for key, fn in nested(op)}
    run, params = _RUNS[op.prim], op.params
    in_types = [v.type for v in op.inputs]
    out_types = [v.type for v in op.outputs]

    def control(*args):
        outs = run(compiled, [np.asarray(a, t.np_dtype) for a, t in zip(args, in_types)],
                   **params)
        outs = [np.asarray(o, t.np_dtype) for o, t in zip(outs, out_types)]
        outs = [o[()] if o.ndim == 0 else np.ascontiguousarray(o) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)
    control.__name__ = f"host_{op.prim}"
    return control


def _buffer(shape, t):
    if poison_on():
        return np.full(shape, _POISON[t.dtype], t.np_dtype)
    return np.empty(shape, t.np_dtype)


def _scan(compiled, args, *, body, length, reverse, num_consts, num_carry):
    step, n = compiled["body"], num_consts + num_carry
    consts, carry, xs = args[:num_consts], args[num_consts:n], args[n:]
    ys = [_buffer((length,) + t.shape, t) for t in body.result_types[num_carry:]]
    for i in range(length - 1, -1, -1) if reverse else range(length):
        outs = step(consts + carry + [x[i] for x in xs])
        carry = outs[:num_carry]
        for y, out in zip(ys, outs[num_carry:]):
            y[i] = out
    return carry + ys


def _while_loop(compiled, args, *, cond, body, cond_nconsts, body_nconsts):
    test, step, n = compiled["cond"], compiled["body"], cond_nconsts + body_nconsts
    cond_consts, consts, carry = args[:cond_nconsts], args[cond_nconsts:n], args[n:]
    while test(cond_consts + carry)[0]:
        carry = step(consts + carry)
    return carry


def _cond(compiled, args, *, true_branch, false_branch):
    pred, *operands = args
    return compiled["true_branch" if pred else "false_branch"](operands)


_RUNS = {"scan": _scan, "while_loop": _while_loop, "cond": _cond}
