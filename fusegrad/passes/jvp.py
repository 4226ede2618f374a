"""Forward mode as a Function -> Function transform, derived from the VJP table by transposition.

No JVP is written anywhere. A VJP rule is linear in its cotangent g: x_bar_i = J_i^T g. So
the JVP of an op, out_dot = sum_i J_i x_dot_i, is the gradient with respect to g of
<rule(g), x_dot>: the reverse-mode pass run on the rule itself, with the input tangents as
the cotangents of the rule's results. Per primitive (and input types, params and which inputs
carry tangents) this pass traces the rule into a small Function L(inputs, outputs, g) ->
cotangents, runs passes/autodiff.vjp on it with respect to g, sets g to zero (the result does
not depend on it) and lets DCE delete L's own ops: what is left reads the op's inputs and
outputs and the tangents, nothing of the reverse half. That Function is cached and inlined
after each forward op, with the op's source line and the note `jvp[prim]`.

The ops that hold Functions (scan, while_loop, cond: formulas/control_jvp.py) have structural
rules: the loop or branch of the JVP of its Functions, which is this pass again, so a scan's
forward mode stores no per-step residuals. custom_vjp_call is derived like any op, from the
user's bwd: exact when bwd is linear in g (as a VJP is).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..formulas import NON_DIFFERENTIABLE, unbroadcast_and_cast, vjp_rules
from ..formulas.control_jvp import JVP_RULES, install
from ..ir.core import Function, Op, Value
from ..tracer.tracer import TraceContext, Tracer
from . import autodiff
from .dce import dce


def jvp(fn: Function, wrt: Sequence[int], name: str | None = None) -> Function:
    """The forward-mode derivative of fn with respect to the params at positions `wrt`.

    Returns a Function with fn's params followed by one tangent param per `wrt` param (of its
    type), whose results are fn's results followed by one tangent per result (zeros for the
    results that do not depend on the `wrt` params, and for integer and bool results).
    """
    wrt = tuple(wrt)
    for i in wrt:
        if not fn.params[i].type.is_float:
            raise TypeError(f"jvp: cannot differentiate with respect to param {i} of type "
                            f"{fn.params[i].type}; only f32 and f64 params have tangents")
    with TraceContext(name or f"jvp_{fn.name}") as ctx:
        b = ctx.builder
        b.params.extend(fn.params)
        tan = {fn.params[i]: b.param(fn.params[i].type, "t") for i in wrt}
        for op in fn.ops:
            if op.prim in NON_DIFFERENTIABLE or not any(v in tan for v in op.inputs):
                b.ops.append(op)
                continue
            rule = JVP_RULES.get(op.prim)
            if rule is not None:
                new, dots = rule(ctx, op, tan)
                b.ops.append(new)
            else:
                b.ops.append(op)
                dots = _derived(ctx, op, tan)
            tan.update((v, d) for v, d in zip(op.outputs, dots) if d is not None)
        dots = [tan.get(r) or _zeros(ctx, r) for r in fn.results]
    return b.build(list(fn.results) + dots)


def active_results(fn: Function, wrt: Sequence[int]) -> list[int]:
    """The floating-point results of fn that may depend on the params at `wrt`."""
    active = {fn.params[i] for i in wrt}
    for op in fn.ops:
        if op.prim not in NON_DIFFERENTIABLE and any(v in active for v in op.inputs):
            active.update(v for v in op.outputs if v.type.is_float)
    return [k for k, r in enumerate(fn.results) if r in active and r.type.is_float]


def _zeros(ctx, v: Value) -> Value:
    t = v.type
    value = 0.0 if t.is_float else 0 if t.dtype != "bool" else False
    return ctx.builder.add1("full", (), {"shape": t.shape, "dtype": t.dtype, "value": value})


# -- one op: its VJP rule, transposed -------------------------------------------------------

_CACHE: dict = {}


def _derived(ctx, op: Op, tan) -> list:
    """The tangents of op's outputs (None for non-float ones), appended to ctx."""
    active = tuple(v in tan and v.type.is_float for v in op.inputs)
    key = _key(op, active)
    fn = _CACHE.get(key) if key is not None else None
    if fn is None:
        fn = _transposed_rule(op, active)
        if key is not None:
            if len(_CACHE) > 4096:
                _CACHE.clear()
            _CACHE[key] = fn
    args = list(op.inputs) + list(op.outputs) + [tan[v] for v, a in zip(op.inputs, active) if a]
    env = dict(zip(fn.params, args, strict=True))
    note = f"jvp[{op.prim}]"
    for f in fn.ops:
        outs = ctx.builder.add(f.prim, [env[v] for v in f.inputs], f.params, op.loc, note)
        env.update(zip(f.outputs, outs))
    dots = iter(env[r] for r in fn.results)
    return [next(dots) if v.type.is_float else None for v in op.outputs]


def _key(op: Op, active):
    try:
        params = tuple(sorted(op.params.items()))
        hash(params)
    except TypeError:       # an unhashable param (a constant's array): not cached
        return None
    return (op.prim, tuple(v.type for v in op.inputs), params, active)


def _transposed_rule(op: Op, active) -> Function:
    """(inputs, outputs, tangents of the active inputs) -> tangents of the float outputs."""
    lin = _linear_rule(op, active)
    n = len(op.inputs) + len(op.outputs)
    g_pos = range(n, len(lin.params))
    back = autodiff.vjp(lin, g_pos, range(len(lin.results)), cotangent_params=True)
    gs = [lin.params[i] for i in g_pos]
    fills = [Op("full", (), {"shape": g.type.shape, "dtype": g.type.dtype, "value": 0.0}, (g,))
             for g in gs]
    params = [p for p in back.params if p not in gs]
    return dce(Function(f"jvp_{op.prim}", params, fills + list(back.ops),
                        back.results[len(lin.results):]))


def _linear_rule(op: Op, active) -> Function:
    """L(inputs, outputs, g) -> the rule's cotangents of the active inputs (unbroadcast and
    cast as the autodiff driver does); g has a param per float output, zeros for others."""
    rule = vjp_rules[op.prim]
    with TraceContext(f"vjp_rule_{op.prim}") as ctx:
        ins = [ctx.new_param(v.type) for v in op.inputs]
        outs = [ctx.new_param(v.type) for v in op.outputs]
        g = [ctx.new_param(v.type) if v.type.is_float else None for v in op.outputs]
        g = [x if x is not None else Tracer(_zeros(ctx, v), ctx) for x, v in zip(g, op.outputs)]
        one = len(op.outputs) == 1
        cts = rule(g[0] if one else tuple(g), outs[0] if one else tuple(outs), *ins,
                   **op.params)
        results = []
        for v, ct, a in zip(op.inputs, cts, active):
            if a and ct is not None:
                ct = unbroadcast_and_cast(autodiff.as_tracer(ctx, ct, v), v.type.shape,
                                          v.type.dtype)
                results.append(ctx.read(ct))
            elif a:
                results.append(_zeros(ctx, v))
    return ctx.builder.build(results)


install(jvp, active_results)
