"""Host steps: ops the kernel IR runs in Python between compiled parts (nodes.Host).

Linear algebra, sorts, the special functions NumPy and SciPy compute (erfinv, i0, polygamma...),
ode_solve and require_zero run their registry implementation, and so do the few ops with no
compiled form (cover.host_reason); scan, while_loop and cond whose Functions hold a host step
run their loop or branch in Python (`control`) around those Functions compiled on their own,
each computing what the interpreter computes for it, so the loop does too. A step reads its
operands as NumPy views of their buffers and writes each result into its own buffer,
converted as the interpreter converts (evaluate.eval_function), so a host step computes what
interp computes, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.control import nested
from ...ir.evaluate import apply
from .nodes import ITEMSIZE, Host

NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "bool": np.bool_}


def build_host(k, plan, ops):
    """The group of one host op: a Host node over its operands' and results' buffers."""
    (op,) = ops
    k.b.out.append(Host(op, tuple((plan.buffer(v), v.shape) for v in op.inputs),
                        tuple((plan.buffer(v), v.shape) for v in op.outputs)))


def view(arrays, buf, shape) -> np.ndarray:
    """The buffer as a C-contiguous array of shape, a view of the table's array."""
    a, size = arrays[buf.slot], math.prod(shape)
    if buf.slot == 0:
        flat = a[buf.byte:buf.byte + size * ITEMSIZE[buf.dtype]].view(NP[buf.dtype])
    else:
        flat = a.reshape(-1)[:size]
    return flat.reshape(shape)


def step(node: Host, compile_fn):
    """`run(arrays, status)`: the host step on the table of arrays. compile_fn compiles the nested
    Functions of control flow (codegen.compile.compile_numba), now."""
    op = node.op
    if op.prim in _RUNS:
        impl = control(op, compile_fn)
    else:
        def impl(*args):
            return apply(op.prim, list(args), op.params)
    single = len(op.outputs) == 1

    def run(arrays, status=None):
        args = [view(arrays, b, shape) for b, shape in node.inputs]
        try:
            out = impl(*args)
        except IndexError as e:         # as the interpreter says it: where it was used
            raise IndexError(f"{e} (at {op.loc})" if op.loc else str(e)) from None
        for (b, shape), x in zip(node.outputs, (out,) if single else out, strict=True):
            x = np.asarray(x)
            if x.dtype != NP[b.dtype]:
                x = x.astype(NP[b.dtype])
            if x.shape != tuple(shape):
                raise RuntimeError(f"host step {op.prim}: got shape {x.shape} for {shape}")
            view(arrays, b, shape)[...] = x
    run.compiled = getattr(impl, "compiled", {})
    return run


def control(op, compile_fn):
    """The loop or branch of a control-flow op in Python: its nested Functions compiled now
    (compile_fn(fn, scan=(num_consts, num_carry) for a scan's body, else None)), called with
    the operands and returning the outputs (one, or a tuple)."""
    scan = (op.params["num_consts"], op.params["num_carry"]) if op.prim == "scan" else None
    compiled = {key: compile_fn(fn, scan=scan) for key, fn in nested(op)}
    run, params = _RUNS[op.prim], op.params

    def impl(*args):
        outs = run(compiled, [np.asarray(a, NP[v.dtype]) for a, v in zip(args, op.inputs)],
                   **params)
        return outs[0] if len(outs) == 1 else tuple(outs)
    impl.compiled = compiled
    return impl


def _scan(compiled, args, *, body, length, reverse, num_consts, num_carry):
    step, n = compiled["body"], num_consts + num_carry
    consts, carry, xs = args[:num_consts], args[num_consts:n], args[n:]
    ys = [np.empty((length,) + t.shape, NP[t.dtype]) for t in body.result_types[num_carry:]]
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
