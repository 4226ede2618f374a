"""Batching as a Function -> Function transform: fg.vmap's pass.

The pass re-traces fn with some params given a leading batch axis. Values that do not depend
on a batched param stay as they are (their ops are shared with fn, computed once for the
whole batch); every op reading a batched value runs its registry entry's batching rule
(ir/batching.py) on tracers, with the batch axis first in and out. A primitive without a rule
becomes a scan over the batch running the op once per example, with one warning per
primitive naming it. Each new op keeps the source line of the op it batches and the note
`vmap[prim]`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from .. import lax
from ..ir.batching import FALLBACK, lift
from ..ir.core import Function, Op, Value
from ..ir.primitives import PRIMITIVES
from ..ir.types import TensorType
from ..tracer.tracer import TraceContext, Tracer
from .batching_control import install as _install_control

_warned: set = set()


def batch(fn: Function, batched: Sequence[bool], size: int, name: str | None = None,
          force: Sequence[bool] | None = None) -> tuple[Function, list[bool]]:
    """fn with the params where `batched` is true taking a leading axis of `size` examples.

    Returns the new Function (same params, the batched ones retyped; same results, the ones
    that depend on a batched param with the batch axis first) and, per result, whether it is
    batched. A result whose `force` flag is true is batched in any case (lifted if it does not
    depend on a batched param), as a loop body's carries must be.
    """
    with TraceContext(name or f"vmap_{fn.name}") as ctx:
        b = ctx.builder
        on: set = set()           # the new Values that carry the batch axis
        env: dict = {}
        for p, flag in zip(fn.params, batched, strict=True):
            if flag:
                new = b.param(TensorType(p.type.dtype, (size,) + p.type.shape), p.hint)
                env[p] = new
                on.add(new)
            else:
                b.params.append(p)
        for op in fn.ops:
            ins = [env.get(v, v) for v in op.inputs]
            flags = [v in on for v in ins]
            if not any(flags):
                b.ops.append(op if all(a is v for a, v in zip(ins, op.inputs)) else
                             Op(op.prim, ins, op.params, op.outputs, op.loc, op.note))
                continue
            outs = _batched_op(ctx, op, ins, flags, size)
            env.update(zip(op.outputs, outs))
            on.update(outs)
        results = [env.get(r, r) for r in fn.results]
        for i, flag in enumerate(force or ()):
            if flag and results[i] not in on:
                results[i] = lift_result(ctx, results[i], size)
                on.add(results[i])
    return b.build(results), [r in on for r in results]


def _batched_op(ctx, op: Op, ins, flags, size) -> list[Value]:
    rule = PRIMITIVES[op.prim].batch
    saved, ctx.fixed_loc = ctx.fixed_loc, op.loc
    start = len(ctx.builder.ops)
    try:
        if rule == FALLBACK:
            outs = _scan_over_batch(ctx, op, ins, flags, size)
        else:
            out = rule(lax, op.prim, size, [Tracer(v, ctx) for v in ins], flags, **op.params)
            outs = [ctx.read(o) for o in (out if isinstance(out, tuple) else (out,))]
    finally:
        ctx.fixed_loc = saved
    for new in ctx.builder.ops[start:]:
        new.note = f"vmap[{op.prim}]"
    return outs


def _scan_over_batch(ctx, op: Op, ins, flags, size) -> list[Value]:
    """op once per example: a scan whose xs are the batched operands, the others its consts."""
    if op.prim not in _warned:
        _warned.add(op.prim)
        warnings.warn(f"fg.vmap: primitive {op.prim!r} (at {op.loc}) has no batching rule; it "
                      f"runs as a scan over the batch, one example at a time", stacklevel=2)
    params = [Value(v.type) for v in op.inputs]
    outs = [Value(v.type) for v in op.outputs]
    order = [i for i, f in enumerate(flags) if not f] + [i for i, f in enumerate(flags) if f]
    body = Function(f"vmap_{op.prim}", [params[i] for i in order],
                    [Op(op.prim, params, op.params, outs, op.loc, op.note)], outs)
    return list(ctx.builder.add("scan", [ins[i] for i in order], {
        "body": body, "length": size, "reverse": False,
        "num_consts": len(order) - sum(flags), "num_carry": 0}))


def lift_result(ctx, value: Value, size: int) -> Value:
    """An unbatched result with the batch axis added."""
    return ctx.read(lift(lax, size, Tracer(value, ctx)))


_install_control(batch)   # the rules of the ops holding Functions, which call batch
