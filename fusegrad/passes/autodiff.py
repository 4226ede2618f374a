"""Reverse-mode autodiff as a Function -> Function transform.

The pass re-traces: it opens a TraceContext, replays the forward ops unchanged, then walks them
in reverse and calls `formulas.vjp_rules[op.prim]` on tracers, so every rule appends its backward
ops through bind, exactly as it computes on arrays in the eager engine. The driver (this file)
does what rules never do: it seeds the output cotangent, skips ops no gradient reaches (values
that do not depend on the differentiated params, integer and bool values, NON_DIFFERENTIABLE
primitives), un-broadcasts and casts each cotangent once, sums the cotangents of values used more
than once, and fills zeros for params the output does not depend on. Dead forward values are
left for DCE.

Each backward op carries the forward op's source location and a note naming it, so the IR reads

    %12 = mul %g, %w : f64[4]   # model.py:7  vjp[mul] of %0

Both walks are loops over the op list: a 100 000-op chain needs no recursion.

Control flow (formulas/control.py) adds two things. The forward replay runs a primitive's
FORWARD_RULES entry on each op a gradient flows through, and keeps the op it returns (a scan
that also stacks the per-step values its VJP reads) with the same outputs first. And a rule
marked `partial_g` gets None in g for outputs no cotangent reaches. The VJP of a nested
Function is this pass again: it is installed into formulas/control.py below.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..formulas import FORWARD_RULES, NON_DIFFERENTIABLE, control, unbroadcast_and_cast, vjp_rules
from ..ir.core import Function, Op, Value
from ..ir.printer import value_names
from ..tracer.tracer import TraceContext, Tracer


def vjp(fn: Function, wrt: Sequence[int], outputs: Sequence[int] = (0,),
        cotangent_params: bool = False, name: str | None = None,
        captures: list | None = None) -> Function:
    """Append the backward pass of `fn` for the params at positions `wrt`.

    Args:
        fn: a closed Function.
        wrt: indices of the params to differentiate with respect to (floating-point).
        outputs: indices of the results to differentiate.
        cotangent_params: False differentiates the sum of the chosen results, each of which
            must be a floating-point scalar (the seed is 1). True appends one param per chosen
            result, its cotangent (same type), after fn's params: a general VJP.
        name: the new Function's name (default `vjp_<fn.name>`).
        captures: where a rule that runs user code (custom_vjp's bwd) reads a value of an
            enclosing trace that fn does not hold (bwd closing over an argument of the jitted
            function), the new Function gets one more param for it, after all others, and the
            outer value is appended here for the caller to pass. None: such a read raises.

    Returns:
        A Function with fn's params (plus the cotangent params), whose results are fn's results
        followed by one gradient per `wrt` param, each of that param's type.
    """
    wrt, outputs = tuple(wrt), tuple(outputs)
    _check(fn, wrt, outputs, cotangent_params)
    names = value_names(fn)
    with TraceContext(name or f"vjp_{fn.name}") as ctx:
        active = _active_values(fn, [fn.params[i] for i in wrt])
        forward = _replay_forward(ctx.builder, fn, active)
        seeds = _seeds(ctx, fn, outputs, cotangent_params)
        cts = _backward(ctx, forward, active, seeds, names)
        grads = [_grad_of(ctx, fn.params[i], cts, names) for i in wrt]
    if ctx.captures:
        if captures is None:
            raise ValueError(
                f"the backward pass of {fn.name} reads a traced value from outside it (a "
                f"custom_vjp bwd closing over a variable of an enclosing fg.jit or transform) "
                f"where that cannot be passed in; pass the value to the function as an "
                f"argument instead")
        captures.extend(outer for outer, _ in ctx.captures)
    return ctx.builder.build(list(fn.results) + grads)


def _replay_forward(builder, fn: Function, active) -> list[Op]:
    """Start the new Function with fn's params and ops; returns the forward ops.

    Values and Ops are immutable and compared by identity, so the new Function shares them
    with fn instead of copying: replaying is free, and the forward values keep their names.
    An op with a forward rule that a gradient may flow through is replaced by the rule's op.
    """
    builder.params.extend(fn.params)
    if not any(op.prim in FORWARD_RULES for op in fn.ops):
        builder.ops.extend(fn.ops)
        return list(fn.ops)
    for op in fn.ops:
        rule = FORWARD_RULES.get(op.prim)
        if rule is not None and any(v in active for v in op.inputs):
            op = rule(op)
        builder.ops.append(op)
    return list(builder.ops)


def _check(fn: Function, wrt, outputs, cotangent_params) -> None:
    for i in wrt:
        if not 0 <= i < len(fn.params):
            raise ValueError(f"vjp: param index {i} out of range for {len(fn.params)} params")
        if not fn.params[i].type.is_float:
            raise TypeError(f"vjp: cannot differentiate with respect to param {i} of type "
                            f"{fn.params[i].type}; only f32 and f64 params have gradients")
    for k in outputs:
        if not 0 <= k < len(fn.results):
            raise ValueError(f"vjp: result index {k} out of range for {len(fn.results)} results")
        t = fn.results[k].type
        if not cotangent_params and (t.shape != () or not t.is_float):
            raise TypeError(f"vjp: result {k} has type {t}; seeding with 1 needs a "
                            f"floating-point scalar (pass cotangent_params=True for a VJP)")


def _seeds(ctx, fn, outputs, cotangent_params) -> list[tuple[Value, Value]]:
    """(forward result, its cotangent in the new function) per differentiated result."""
    seeds = []
    for n, k in enumerate(outputs):
        r = fn.results[k]
        if cotangent_params:
            hint = "g" if len(outputs) == 1 else f"g{n}"
            seeds.append((r, ctx.builder.param(r.type, hint)))
        else:
            seeds.append((r, None))
    return seeds


def _active_values(fn: Function, wrt_params) -> set:
    """Floating-point values that depend on a wrt param through differentiable ops."""
    active = set(wrt_params)
    for op in fn.ops:
        if op.prim not in NON_DIFFERENTIABLE and any(v in active for v in op.inputs):
            active.update(v for v in op.outputs if v.type.is_float)
    return active


def _backward(ctx, forward, active, seeds, names) -> dict:
    """Walk the forward ops in reverse; returns the cotangent (new Value) of every active
    value."""
    cts: dict[Value, Value] = {}
    saved_loc = ctx.fixed_loc
    for r, seed in seeds:
        if r not in active:
            continue
        if seed is None:
            seed = _fill(ctx, r.type, 1, _producer_loc(forward, r), f"vjp seed of {names[r]}")
        _accumulate(ctx, cts, r, seed)
    for op in reversed(forward):
        if not any(v in cts for v in op.outputs):
            continue
        start = len(ctx.builder.ops)
        ctx.fixed_loc = op.loc
        try:
            _apply_rule(ctx, op, cts, active)
        finally:
            ctx.fixed_loc = saved_loc
        note = f"vjp[{op.prim}] of {names[op.outputs[0]]}"
        for new in ctx.builder.ops[start:]:
            if new.note is None:    # a custom_vjp's bwd notes its ops and keeps their lines
                new.loc, new.note = op.loc, note
    return cts


def _apply_rule(ctx, op: Op, cts, active) -> None:
    rule = vjp_rules.get(op.prim)
    if rule is None:
        raise NotImplementedError(f"no VJP rule for primitive {op.prim!r} (at {op.loc}); add "
                                  f"one to fusegrad/formulas/ or list it in "
                                  f"NON_DIFFERENTIABLE")
    partial = getattr(rule, "partial_g", False)
    gs = [cts.pop(v) if v in cts else None if partial else _fill(ctx, v.type, 0, None, None)
          for v in op.outputs]
    g, out = _wrap(ctx, gs), _wrap(ctx, op.outputs)
    in_cts = rule(g, out, *[Tracer(v, ctx) for v in op.inputs], **op.params)
    if len(in_cts) != len(op.inputs):
        raise RuntimeError(f"VJP rule for {op.prim!r} returned {len(in_cts)} cotangents for "
                           f"{len(op.inputs)} inputs")
    for v, ct in zip(op.inputs, in_cts):
        if ct is None or v not in active:
            continue
        ct = unbroadcast_and_cast(as_tracer(ctx, ct, v), v.type.shape, v.type.dtype)
        _accumulate(ctx, cts, v, ctx.read(ct))


def _wrap(ctx, values):
    tracers = [None if v is None else Tracer(v, ctx) for v in values]
    return tracers[0] if len(tracers) == 1 else tuple(tracers)


def as_tracer(ctx, ct, v: Value) -> Tracer:
    """A rule's cotangent as a tracer; constants (a rule's `0.0`) become full of v's shape."""
    if isinstance(ct, Tracer):
        return ct
    value = ctx.read(ct)
    if value.type.shape != v.type.shape:
        dims = tuple(range(v.type.ndim - value.type.ndim, v.type.ndim))
        value = ctx.builder.add1("broadcast_in_dim", [value],
                                 {"shape": v.type.shape, "dims": dims})
    return Tracer(value, ctx)


def _accumulate(ctx, cts: dict, v: Value, ct: Value) -> None:
    prev = cts.get(v)
    cts[v] = ct if prev is None else ctx.builder.add1("add", [prev, ct])


def _fill(ctx, type, value, loc, note) -> Value:
    value = float(value) if type.is_float else int(value)
    params = {"shape": type.shape, "dtype": type.dtype, "value": value}
    return ctx.builder.add1("full", (), params, loc=loc, note=note)


def _grad_of(ctx, param: Value, cts, names) -> Value:
    ct = cts.get(param)
    if ct is not None:
        return ct
    return _fill(ctx, param.type, 0.0, None, f"vjp zeros for {names[param]}")


def _producer_loc(ops, r: Value):
    for op in reversed(ops):
        if r in op.outputs:
            return op.loc
    return None


control.install(vjp)
