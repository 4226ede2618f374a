"""Host steps: ops the kernel IR runs in Python between compiled parts (nodes.Host).

Linear algebra, sorts, the special functions NumPy and SciPy compute (erfinv, i0, polygamma...),
ode_solve and require_zero run their registry implementation; scan, while_loop and cond run
their loop or branch in Python around nested Functions compiled on their own (codegen/loops.py's
host). A step reads its operands as NumPy views of their buffers and writes each result into
its own buffer, converted as the interpreter converts (evaluate.eval_function), so a host step
computes what interp computes, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

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
    if op.prim in ("scan", "while_loop", "cond"):
        from .. import loops
        impl = loops.host(op, compile_fn)
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
