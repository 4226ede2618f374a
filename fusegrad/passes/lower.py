"""Lower composites into core primitives.

Composites (softmax, log_softmax, logsumexp, cross_entropy, layer_norm, gelu) are single ops
for autodiff; before fusion they become primitives. The pass re-traces the function: ordinary
ops are copied, and each composite runs its registry entry's `lower(lax, *inputs, **params)`
(ir/composites.py) on Tracers, so the expansion is ordinary traced code. Every op a lowering
emits keeps the composite's source location and gets the note `lower[<prim>]`. A lowering
returns one value, or a tuple with one per output of the op (custom_vjp_call returns its output
operands, so it leaves no op behind). The Functions of control-flow ops are lowered too.

`optimization_barrier` (fg.checkpoint's) is kept by the first run, so that CSE cannot merge a
recomputation into the forward pass, and removed by `lower_barriers` at the end of the
pipeline.
"""

from __future__ import annotations

from .. import lax
from ..ir.core import Function
from ..ir.primitives import PRIMITIVES
from ..tracer.tracer import TraceContext, Tracer
from .nested import HOLDERS, nested_params


LATE = frozenset({"optimization_barrier"})


def _lowering(prim, barriers=False):
    return PRIMITIVES[prim].lower if barriers or prim not in LATE else None


def lower_barriers(fn: Function) -> Function:
    """fn without its optimization barriers (after the passes they shield from)."""
    return lower(fn, barriers=True)


def lower(fn: Function, barriers: bool = False) -> Function:
    """fn with every composite op expanded into primitives (and the barriers, with
    `barriers`)."""
    if not any(_lowering(op.prim, barriers) or op.prim in HOLDERS for op in fn.ops):
        return fn
    with TraceContext(fn.name) as ctx:
        builder = ctx.builder
        env = {p: ctx.new_param(p.type, p.hint).value for p in fn.params}
        for op in fn.ops:
            inputs = [env[v] for v in op.inputs]
            lowering = _lowering(op.prim, barriers)
            if lowering is None:
                params = nested_params(op, lambda f: lower(f, barriers)) if op.prim in HOLDERS \
                    else op.params
                outs = builder.add(op.prim, inputs, params, op.loc, op.note)
            else:
                start = len(builder.ops)
                out = lowering(lax, *(Tracer(v, ctx) for v in inputs), **op.params)
                outs = tuple(ctx.read(o) for o in out) if isinstance(out, tuple) \
                    else (ctx.read(out),)
                note = f"lower[{op.prim}]" if op.note is None else f"{op.note}; lower[{op.prim}]"
                for new in builder.ops[start:]:
                    new.loc, new.note = op.loc, note
            env.update(zip(op.outputs, outs))
    return builder.build([env[r] for r in fn.results])
