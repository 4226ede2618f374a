"""Forward mode through the ops that hold Functions: the loop or branch of their JVPs.

Every other primitive's JVP is derived from its VJP rule by passes/jvp.py. A control-flow op
instead becomes the same op over the JVP of its Functions (that pass again, installed here
when it loads), with each tangent next to its primal: a scan carries (k, k_dot) and scans
(x, x_dot), so forward mode through a loop runs one loop and stores nothing per step; a
while_loop is differentiable in forward mode, as in JAX; a cond takes the tangents as
operands and returns the branch's. A carry whose initial value has no tangent but whose body
makes it depend on one gets a zero tangent (a fixed point over the carries).

A rule is `rule(ctx, op, tan) -> (new_op, dots)`: the op to run in op's place (its first
outputs are op's own Values) and one tangent Value (or None) per output of op.
"""

from __future__ import annotations

from ..ir.core import Function, Op, Value

_jvp = None
_active_results = None


def install(jvp, active_results) -> None:
    """Called once by passes/jvp.py with its `jvp(fn, wrt)` and `active_results(fn, wrt)`."""
    global _jvp, _active_results
    _jvp, _active_results = jvp, active_results


def _zeros(ctx, v: Value) -> Value:
    return ctx.builder.add1("full", (), {"shape": v.type.shape, "dtype": v.type.dtype,
                                         "value": 0.0})


def _carried(body: Function, fixed: list[int], carry_pos: list[int], nk: int) -> list[int]:
    """The carries (0..nk-1) with a tangent: those whose initial value has one, and those the
    body makes depend on a param with one, to a fixed point."""
    carries = sorted({k for k in range(nk) if carry_pos[0] + k in fixed})
    while True:
        wrt = sorted(set(fixed) | {carry_pos[0] + k for k in carries})
        more = [k for k in _active_results(body, wrt) if k < nk and k not in carries]
        if not more:
            return carries
        carries = sorted(carries + more)


def _tangent_body(body: Function, groups, out_groups, name) -> Function:
    """The JVP of body with its params laid out group by group, each group's primals then
    their tangents; results likewise. `groups` are lists of param positions whose tangents
    follow them ((positions, with_tangent) pairs); `out_groups` the same for results."""
    wrt = [i for positions, dotted in groups for i in positions if i in dotted]
    jvp = _jvp(body, wrt)
    n_p, n_r = len(body.params), len(body.results)
    dot_of = dict(zip(wrt, jvp.params[n_p:]))
    params, results = [], []
    for positions, dotted in groups:
        params += [body.params[i] for i in positions]
        params += [dot_of[i] for i in positions if i in dotted]
    for positions, dotted in out_groups:
        results += [jvp.results[k] for k in positions]
        results += [jvp.results[n_r + k] for k in positions if k in dotted]
    return Function(name, params, jvp.ops, results)


def scan(ctx, op: Op, tan):
    p = op.params
    body, nc, nk = p["body"], p["num_consts"], p["num_carry"]
    ins = op.inputs
    consts, xs = range(nc), range(nc + nk, len(ins))
    fixed = [i for i in list(consts) + list(xs) if ins[i] in tan]
    carries = _carried(body, fixed + [nc + k for k in range(nk) if ins[nc + k] in tan], [nc], nk)
    dotted = set(fixed) | {nc + k for k in carries}
    ys = [k for k in _active_results(body, sorted(dotted)) if k >= nk]
    new_body = _tangent_body(body, [(consts, dotted), (range(nc, nc + nk), dotted),
                                    (xs, dotted)],
                             [(range(nk), set(carries)), (range(nk, len(body.results)),
                                                          set(ys))], f"jvp_{body.name}")
    k_dots = [Value(op.outputs[k].type) for k in carries]
    y_dots = [Value(op.outputs[k].type) for k in ys]
    outputs = list(op.outputs[:nk]) + k_dots + list(op.outputs[nk:]) + y_dots
    new = Op("scan", _scan_inputs(ctx, ins, dotted, nc, nk, tan), {
        **p, "body": new_body, "num_consts": nc + sum(i in dotted for i in consts),
        "num_carry": nk + len(carries)}, outputs, op.loc, op.note)
    dots = [None] * len(op.outputs)
    for k, d in zip(carries + ys, k_dots + y_dots):
        dots[k] = d
    return new, dots


def _scan_inputs(ctx, ins, dotted, nc, nk, tan) -> list:
    """consts then their tangents, carries then theirs, xs then theirs."""
    out = []
    for group in (range(nc), range(nc, nc + nk), range(nc + nk, len(ins))):
        out += [ins[i] for i in group]
        out += [tan.get(ins[i]) or _zeros(ctx, ins[i]) for i in group if i in dotted]
    return out


def cond(ctx, op: Op, tan):
    pred, xs = op.inputs[0], op.inputs[1:]
    fixed = [i for i, v in enumerate(xs) if v in tan]
    t, f = op.params["true_branch"], op.params["false_branch"]
    outs = sorted(set(_active_results(t, fixed)) | set(_active_results(f, fixed)))
    branches = {}
    for key, fn in (("true_branch", t), ("false_branch", f)):
        jvp = _jvp(fn, fixed)
        n_r = len(fn.results)
        branches[key] = Function(f"jvp_{fn.name}", jvp.params, jvp.ops,
                                 list(jvp.results[:n_r]) + [jvp.results[n_r + k] for k in outs])
    dots_out = [Value(op.outputs[k].type) for k in outs]
    new = Op("cond", [pred, *xs, *[tan[xs[i]] for i in fixed]], {**op.params, **branches},
             list(op.outputs) + dots_out, op.loc, op.note)
    dots = [None] * len(op.outputs)
    for k, d in zip(outs, dots_out):
        dots[k] = d
    return new, dots


def while_loop(ctx, op: Op, tan):
    p = op.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    body, cond_fn = p["body"], p["cond"]
    ins = op.inputs
    nk = len(ins) - cn - bn
    fixed = [i for i in range(bn) if ins[cn + i] in tan]
    carries = _carried(body, fixed + [bn + k for k in range(nk) if ins[cn + bn + k] in tan],
                       [bn], nk)
    dotted = set(fixed) | {bn + k for k in carries}
    new_body = _tangent_body(body, [(range(bn), dotted), (range(bn, bn + nk), dotted)],
                             [(range(nk), set(carries))], f"jvp_{body.name}")
    k_dots_in = [Value(ins[cn + bn + k].type) for k in carries]
    new_cond = Function(cond_fn.name, list(cond_fn.params) + k_dots_in, cond_fn.ops,
                        cond_fn.results)
    inputs = list(ins[:cn + bn]) + [tan[ins[cn + i]] for i in fixed] + list(ins[cn + bn:]) + \
        [tan.get(ins[cn + bn + k]) or _zeros(ctx, ins[cn + bn + k]) for k in carries]
    k_dots = [Value(op.outputs[k].type) for k in carries]
    new = Op("while_loop", inputs, {**p, "cond": new_cond, "body": new_body,
                                    "body_nconsts": bn + len(fixed)},
             list(op.outputs) + k_dots, op.loc, op.note)
    dots = [None] * len(op.outputs)
    for k, d in zip(carries, k_dots):
        dots[k] = d
    return new, dots


JVP_RULES = {"scan": scan, "cond": cond, "while_loop": while_loop}
