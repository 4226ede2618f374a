"""Lower composites into core primitives.

Composites (softmax, log_softmax, logsumexp, cross_entropy, layer_norm, gelu) are single ops
for autodiff; before fusion they become primitives. The pass re-traces the function: ordinary
ops are copied, and each composite runs its entry in `lowerings`, a function written with `lax`
on Tracers, so the expansion is ordinary traced code. Every op a lowering emits keeps the
composite's source location and gets the note `lower[<prim>]`.

The expansions are numerically stable like the interpreter's reference implementations: they
subtract the maximum, replaced by 0 where it is not finite, so rows of -inf give -inf (not nan)
and +inf gives +inf.
"""

from __future__ import annotations

import math

from .. import lax
from ..ir.core import Function
from ..tracer.tracer import TraceContext, Tracer


def _expand(r, x, axes):
    """Broadcast a reduction result r back over x's shape (numpy's keepdims, explicit)."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    return lax.broadcast_in_dim(r, x.shape, kept)


def _stable_max(x, axes):
    """max over axes, with non-finite maxima replaced by 0 so that x - max never makes nan."""
    m = lax.reduce_max(x, axes)
    return lax.select(lax.lt(lax.abs(m), math.inf), m, 0.0)


def _shifted_exp_sum(x, axes):
    """(x - max, sum(exp(x - max))): the shared core of the softmax family."""
    shifted = lax.sub(x, _expand(_stable_max(x, axes), x, axes))
    return shifted, lax.reduce_sum(lax.exp(shifted), axes)


def logsumexp(x, *, axes):
    m = _stable_max(x, axes)
    s = lax.reduce_sum(lax.exp(lax.sub(x, _expand(m, x, axes))), axes)
    return lax.add(lax.log(s), m)


def softmax(x, *, axis):
    e = lax.exp(lax.sub(x, _expand(_stable_max(x, (axis,)), x, (axis,))))
    return lax.div(e, _expand(lax.reduce_sum(e, (axis,)), x, (axis,)))


def log_softmax(x, *, axis):
    shifted, s = _shifted_exp_sum(x, (axis,))
    return lax.sub(shifted, _expand(lax.log(s), x, (axis,)))


def cross_entropy(logits, targets):
    """-mean(log_softmax(logits)[row, target]); only the picked entries are normalized."""
    n = logits.shape[0]
    shifted, s = _shifted_exp_sum(logits, (1,))
    picked = lax.take_along_axis(shifted, lax.reshape(targets, (n, 1)), 1)
    logp = lax.sub(lax.reshape(picked, (n,)), lax.log(s))
    return lax.neg(lax.div(lax.reduce_sum(logp, (0,)), n))


def layer_norm(x, *, ndim, eps):
    axes = tuple(range(x.ndim - ndim, x.ndim))
    n = math.prod(x.shape[a] for a in axes)
    mean = lax.div(lax.reduce_sum(x, axes), n)
    centered = lax.sub(x, _expand(mean, x, axes))
    var = lax.div(lax.reduce_sum(lax.mul(centered, centered), axes), n)
    return lax.div(centered, _expand(lax.sqrt(lax.add(var, eps)), x, axes))


def gelu(x, *, approximate):
    if approximate:
        cube = lax.mul(lax.mul(lax.mul(0.044715, x), x), x)
        inner = lax.tanh(lax.mul(math.sqrt(2 / math.pi), lax.add(x, cube)))
    else:
        inner = lax.erf(lax.div(x, math.sqrt(2)))
    return lax.mul(lax.mul(0.5, x), lax.add(1.0, inner))


lowerings = {"softmax": softmax, "log_softmax": log_softmax, "logsumexp": logsumexp,
             "cross_entropy": cross_entropy, "layer_norm": layer_norm, "gelu": gelu}


def lower(fn: Function) -> Function:
    """fn with every composite op expanded into primitives."""
    if not any(op.prim in lowerings for op in fn.ops):
        return fn
    with TraceContext(fn.name) as ctx:
        builder = ctx.builder
        env = {p: ctx.new_param(p.type, p.hint).value for p in fn.params}
        for op in fn.ops:
            inputs = [env[v] for v in op.inputs]
            if op.prim not in lowerings:
                outs = builder.add(op.prim, inputs, op.params, op.loc, op.note)
            else:
                start = len(builder.ops)
                out = lowerings[op.prim](*(Tracer(v, ctx) for v in inputs), **op.params)
                outs = (ctx.read(out),)
                note = f"lower[{op.prim}]" if op.note is None else f"{op.note}; lower[{op.prim}]"
                for new in builder.ops[start:]:
                    new.loc, new.note = op.loc, note
            env.update(zip(op.outputs, outs))
    return builder.build([env[r] for r in fn.results])
