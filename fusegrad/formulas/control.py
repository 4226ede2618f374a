"""Control flow (ir/control.py): scan, cond and while_loop differentiate through the VJPs of
their nested Functions, which the autodiff pass derives from this table like any other code.

scan (fori_loop with static bounds is one) is differentiated as JAX does: a forward scan that
also stacks, per step, the values the body's VJP reads (residuals), then a reverse scan whose
body is that VJP. `scan_forward` is the forward half: the autodiff pass runs it on every scan
a gradient flows through, before the backward walk, so the program computes the forward loop
once, with the residuals as extra ys. The rule `scan` is the backward half: it takes the
body's VJP apart into the values it reads (params of the reverse body, sliced from the
stacked residuals, the xs or the consts; what depends on neither carries nor xs is recomputed
in the reverse body instead of stored) and its own ops, and runs it from the last step to the
first with the carry's cotangent (and accumulated const cotangents) as the carry.

cond is differentiated through a cond of the branches' VJPs (each recomputes its branch's
forward values). A traced while_loop has no reverse mode, as in JAX: its trip count is unknown
when the program is traced, so no buffer can be sized for its residuals.

ode_solve is differentiated by the adjoint method: ode_solves of the augmented system, backward
through each interval between time points, whose right-hand side is the VJP of the op's.

Called by the eager engine on concrete values (a control op bound on tensors directly), the
rules run the same VJPs as Python loops, recording under create_graph like any rule.

The VJP of a nested Function comes from passes/autodiff.py, which imports this package; it
installs its `vjp` here when it loads (importing fusegrad loads it).
"""

from __future__ import annotations

import numpy as np

from .. import lax
from ..dispatch import EAGER_LEVEL, TRACE_LEVEL, bind, level
from ..ir.core import Builder, Function, Op, Value
from ..ir.types import TensorType
from .table import _vjp

_function_vjp = None


def install(vjp) -> None:
    """Called once by passes/autodiff.py with its `vjp(fn, wrt, outputs, cotangent_params)`."""
    global _function_vjp
    _function_vjp = vjp


def _body_vjp(fn: Function, wrt, outputs) -> Function:
    """fn's params, then one cotangent param per output in `outputs`; fn's results, then one
    gradient per param in `wrt`."""
    return _function_vjp(fn, wrt, outputs, cotangent_params=True)


def _floats(values) -> list[int]:
    return [i for i, v in enumerate(values) if v.type.is_float]


def _traced(*values) -> bool:
    return any(level(v) == TRACE_LEVEL for v in values)


# -- scan: the forward half (residuals) --------------------------------------------------------

def scan_forward(op: Op) -> Op:
    """op with its body returning, as extra stacked ys, the per-step values the body's VJP
    reads that depend on the carries or xs (itself when there are none). A value a view or a
    convert makes from another per-step value is stored as that value (the reverse body
    redoes the view)."""
    p = op.params
    body, nc, nk = p["body"], p["num_consts"], p["num_carry"]
    vjp = _body_vjp(body, _floats(body.params), _floats(body.results))
    fwd = vjp.ops[:len(body.ops)]
    variant, producer = set(body.params[nc:]), {}
    for f in fwd:
        producer.update((v, f) for v in f.outputs)
        if any(v in variant for v in f.inputs):
            variant.update(f.outputs)
    stacked = set(body.results[nk:]) | set(body.params[nc + nk:])
    residuals: dict = {}
    for v in _reads(vjp, body):
        while v in producer and producer[v].prim in _VIEWS and producer[v].inputs[0] in variant:
            v = producer[v].inputs[0]
        if v in variant and v not in stacked:
            residuals[v] = None
    if not residuals and all(a is b for a, b in zip(fwd, body.ops)):
        return op
    new_body = Function(body.name, body.params, fwd, body.results + tuple(residuals))
    outs = [Value(TensorType(v.dtype, (p["length"],) + v.shape)) for v in residuals]
    return Op(op.prim, op.inputs, {**p, "body": new_body}, op.outputs + tuple(outs), op.loc,
              op.note)


_VIEWS = frozenset(("reshape", "broadcast_in_dim", "transpose", "convert"))


def _reads(vjp: Function, body: Function) -> list[Value]:
    """The forward values (body's params or forward op outputs) vjp's backward ops and
    gradients read, in first-read order."""
    n_fwd, n_results = len(body.ops), len(body.results)
    forward = set(body.params) | {v for f in vjp.ops[:n_fwd] for v in f.outputs}
    seen: dict = {}
    for f in vjp.ops[n_fwd:]:
        seen.update((v, None) for v in f.inputs if v in forward)
    seen.update((v, None) for v in vjp.results[n_results:] if v in forward)
    return list(seen)


# -- scan: the backward half -------------------------------------------------------------------

@_vjp("scan", "ScanBackward", reads="xs")
def scan(g, out, *xs, body, length, reverse, num_consts, num_carry):
    """The reverse scan of the body's VJP over the forward scan's residuals (traced), or the
    body's VJP run step by step from the last (concrete values)."""
    gs = g if isinstance(g, tuple) else (g,)
    nk = num_carry
    wrt = _floats(body.params)
    outputs = [k for k in _floats(body.results) if k < nk or gs[k] is not None]
    if not wrt:
        return (None,) * len(xs)
    vjp = _body_vjp(body, wrt, outputs)
    if _traced(*gs, *xs):
        outs = out if isinstance(out, tuple) else (out,)
        return _reverse_scan(vjp, gs, outs[nk:], xs, body, wrt, outputs, length, reverse,
                             num_consts, nk)
    consts, seq = list(xs[:num_consts]), xs[num_consts + nk:]
    steps = range(length - 1, -1, -1) if reverse else range(length)
    carry, trace = list(xs[num_consts:num_consts + nk]), []
    for i in steps:
        trace.append((i, carry))
        carry = _call(body, consts + carry + [x[i] for x in seq])[:nk]
    return _unrolled(vjp, body, gs, consts, trace, seq, wrt, outputs, num_consts, nk)


scan.partial_g = True   # g holds None for the outputs (residuals, say) no gradient reaches


def _reverse_scan(vjp, gs, ys, xs, body, wrt, outputs, length, reverse, nc, nk):
    """Bind the reverse scan; its body takes (consts; const-cotangent sums, carry cotangents;
    the values it reads per step, the ys' cotangents)."""
    params, n_res = body.params, len(body.results)
    grads = dict(zip(wrt, vjp.results[n_res:]))
    cts = vjp.params[len(params):]
    # Where the reverse body finds each value it reads: a const, an x slice, a stacked y.
    source: dict = {}
    for j, v in enumerate(body.results[nk:]):
        source.setdefault(v, ys[j])
    for j, v in enumerate(params[nc + nk:]):
        source[v] = xs[nc + nk + j]
    for v in params[:nc]:
        source[v] = None
    n_fwd = len(body.ops)
    ops = _rematerialize(vjp.ops[:n_fwd], _reads(vjp, body), source, body.name)
    b = Builder(f"vjp_{body.name}")
    float_consts = [i for i in wrt if i < nc]
    float_carries = [k for k in range(nk) if nc + k in grads]
    sums = [Value(params[i].type, f"sum_{i}") for i in float_consts]
    read = [v for v in _used(ops + list(vjp.ops[n_fwd:]), grads.values()) if source.get(v)
            is not None]
    b.params = [*params[:nc], *sums, *[cts[outputs.index(k)] for k in float_carries], *read,
                *[cts[outputs.index(k)] for k in outputs if k >= nk]]
    b.ops = ops + list(vjp.ops[n_fwd:])
    results = [b.add1("add", [s, grads[i]], note="vjp[scan] sum over steps")
               for s, i in zip(sums, float_consts)]
    results += [grads[nc + k] for k in float_carries]
    results += [grads[i] for i in wrt if i >= nc + nk]
    carry_cts = [gs[k] if gs[k] is not None else lax.full(params[nc + k].shape, 0,
                                                           params[nc + k].dtype)
                 for k in float_carries]
    zeros = [lax.full(params[i].shape, 0, params[i].dtype) for i in float_consts]
    res = bind("scan", *xs[:nc], *zeros, *carry_cts, *[source[v] for v in read],
               *[gs[k] for k in outputs if k >= nk], body=b.build(results), length=length,
               reverse=not reverse, num_consts=nc, num_carry=len(sums) + len(float_carries))
    res = list(res) if isinstance(res, tuple) else [res]
    ct = [None] * len(xs)
    for i in float_consts + [nc + k for k in float_carries] + [i for i in wrt if i >= nc + nk]:
        ct[i] = res.pop(0)
    return tuple(ct)


def _rematerialize(fwd, reads, source, name) -> list:
    """The forward ops the reverse body reruns: those computing a value it reads that is not
    a param of it (a value of neither the carries nor the xs, which scan_forward stores)."""
    needed = {v for v in reads if v not in source}
    picked = []
    for f in reversed(fwd):
        if any(v in needed for v in f.outputs):
            picked.append(f)
            needed.update(v for v in f.inputs if v not in source)
            needed.difference_update(f.outputs)
    if needed:
        raise AssertionError(f"scan @{name}: the body's VJP reads per-step values the forward "
                             f"scan does not store; please report this program")
    return picked[::-1]


def _used(ops, results) -> list[Value]:
    """The values ops and results read that no op defines, in first-read order."""
    defined, seen = set(), {}
    for f in ops:
        seen.update((v, None) for v in f.inputs if v not in defined)
        defined.update(f.outputs)
    seen.update((v, None) for v in results if v not in defined)
    return list(seen)


# -- concrete values: the VJP step by step -------------------------------------------------------

def _call(fn: Function, args) -> list:
    """fn's ops bound one by one on args (arrays, or tensors, which record)."""
    env = dict(zip(fn.params, args, strict=True))
    for f in fn.ops:
        out = bind(f.prim, *[env[v] for v in f.inputs], **f.params)
        env.update(zip(f.outputs, out if len(f.outputs) != 1 else (out,)))
    return [env[r] for r in fn.results]


def _unrolled(vjp, body, gs, consts, trace, seq, wrt, outputs, nc, nk):
    """The cotangents of consts, initial carries and xs from the body's VJP run on each step
    of `trace` ((index, carry) in execution order) from the last."""
    n_res = len(body.results)
    carry_ct = [gs[k] if gs[k] is not None else _zeros(body.params[nc + k]) for k in range(nk)]
    ct: list = [None] * len(body.params)
    x_ct = {j: [None] * len(trace) for j in range(len(seq))}
    for i, carry in reversed(trace):
        y_ct = [gs[k][i] for k in outputs if k >= nk]
        step = _call(vjp, consts + carry + [x[i] for x in seq] +
                     [carry_ct[k] for k in outputs if k < nk] + y_ct)
        grads = dict(zip(wrt, step[n_res:]))
        for i_c in (i for i in wrt if i < nc):
            ct[i_c] = grads[i_c] if ct[i_c] is None else ct[i_c] + grads[i_c]
        carry_ct = [grads.get(nc + k, carry_ct[k]) for k in range(nk)]
        for j in x_ct:
            if nc + nk + j in grads:
                x_ct[j][i] = grads[nc + nk + j]
    for k in range(nk):
        if nc + k in wrt:
            ct[nc + k] = carry_ct[k]
    for j, column in x_ct.items():
        if nc + nk + j in wrt:
            ct[nc + nk + j] = _stack(column, body.params[nc + nk + j])
    return tuple(ct[i] if i in wrt else None for i in range(len(body.params)))


def _zeros(v: Value):
    return lax.full(v.shape, 0, v.dtype)


def _stack(values, param: Value):
    if not values:
        return lax.full((0,) + param.shape, 0, param.dtype)
    return lax.concatenate([lax.reshape(v, (1,) + param.shape) for v in values], 0)


# -- while_loop ---------------------------------------------------------------------------------

@_vjp("while_loop", "WhileLoopBackward", reads="xs")
def while_loop(g, out, *xs, cond, body, cond_nconsts, body_nconsts):
    """No reverse mode when traced (JAX's rule). On concrete values the trip count is known:
    the loop runs again and its body's VJP steps back through it."""
    gs = g if isinstance(g, tuple) else (g,)
    if _traced(*gs, *xs):
        raise ValueError(
            f"Reverse-mode differentiation does not work for fg.lax.while_loop, nor for "
            f"fg.lax.fori_loop with traced bounds (the loop body @{body.name}): its trip count "
            f"is not known when the program is traced, so the values its backward pass needs "
            f"cannot be stored. Use fg.lax.scan, or fg.lax.fori_loop with static (Python "
            f"int) bounds.")
    n = cond_nconsts + body_nconsts
    cond_consts, consts, carry = list(xs[:cond_nconsts]), list(xs[cond_nconsts:n]), list(xs[n:])
    trace = []
    while _truth(_call(cond, cond_consts + carry)[0]):
        trace.append((len(trace), carry))
        carry = _call(body, consts + carry)
    wrt, outputs = _floats(body.params), _floats(body.results)
    if not wrt:
        return (None,) * len(xs)
    vjp = _body_vjp(body, wrt, outputs)
    ct = _unrolled(vjp, body, gs, consts, trace, [], wrt, outputs, body_nconsts, len(carry))
    return (None,) * cond_nconsts + ct


def _truth(x) -> bool:
    """A boolean scalar's value (a tensor's data); anything else is an error."""
    data = np.asarray(x.data if level(x) == EAGER_LEVEL else x)
    if data.shape != () or data.dtype.kind != "b":
        raise TypeError(f"expected a boolean scalar, got {type(x).__name__}")
    return bool(data)


# -- cond ---------------------------------------------------------------------------------------

@_vjp("cond", "CondBackward", reads="pred xs")
def cond(g, out, pred, *xs, true_branch, false_branch):
    """A cond of the branches' VJPs (traced), or the chosen branch's VJP (concrete pred)."""
    gs = g if isinstance(g, tuple) else (g,)
    wrt = _floats(true_branch.params)
    outputs = [k for k in _floats(true_branch.results) if gs[k] is not None]
    if not wrt or not outputs:
        return (None,) * (1 + len(xs))
    cts = [gs[k] for k in outputs]
    if not _traced(pred, *gs, *xs):
        branch = true_branch if _truth(pred) else false_branch
        grads = _call(_grads_of(branch, wrt, outputs), list(xs) + cts)
    else:
        grads = bind("cond", pred, *xs, *cts, true_branch=_grads_of(true_branch, wrt, outputs),
                     false_branch=_grads_of(false_branch, wrt, outputs))
        grads = list(grads) if isinstance(grads, tuple) else [grads]
    ct = [None] * len(xs)
    for i, grad in zip(wrt, grads):
        ct[i] = grad
    return (None, *ct)


cond.partial_g = True


def _grads_of(branch: Function, wrt, outputs) -> Function:
    """The branch's VJP with only the gradients as results (its other ops are left to DCE)."""
    vjp = _body_vjp(branch, wrt, outputs)
    return Function(vjp.name, vjp.params, vjp.ops, vjp.results[len(branch.results):])


# -- ode_solve: the adjoint method --------------------------------------------------------------

@_vjp("ode_solve", "OdeSolveBackward", reads="out t xs")
def ode_solve(g, out, y0, t, *xs, rhs, **solver):
    """The adjoint method (Pontryagin; Chen et al. 2018): from the last time point back to the
    first, the state [y, a, x̄] of the augmented system y' = f, a' = -aᵀ ∂f/∂y,
    x̄' = -aᵀ ∂f/∂x runs backward through each interval by ode_solve itself, y restarting from
    the forward solution and a gaining each output's cotangent; a time point's cotangent is
    g[i]·f(y[i], t[i]), and the first one's -a·f(y0, t0), moving the start along the flow."""
    wrt, (steps, n) = _floats(rhs.params), out.shape
    sizes = [rhs.params[i].type.size for i in wrt[2:]]
    aug, back = _adjoint_dynamics(rhs, wrt), dict(solver, t_end=None)
    a, x_bar, t_bars = lax.full((n,), 0.0, "f64"), lax.full((sum(sizes),), 0.0, "f64"), []
    for i in range(steps - 1, 0, -1):
        y, g_i = _row(out, i), _row(g, i)
        a = a + g_i
        t_bars.append(_dot(g_i, _call(rhs, [y, _row(t, i), *xs])[0]))
        state = lax.concatenate([y, a, x_bar], 0)
        end = _row(bind("ode_solve", state, lax.rev(lax.slice(t, (i - 1,), (i + 1,)), (0,)),
                        *xs, rhs=aug, **back), 1)
        a, x_bar = lax.slice(end, (n,), (2 * n,)), lax.slice(end, (2 * n,), end.shape)
    t_bars.append(-_dot(a, _call(rhs, [_row(out, 0), _row(t, 0), *xs])[0]))
    ct, offset = [None] * len(xs), 0
    for i, size in zip(wrt[2:], sizes):
        shape = rhs.params[i].type.shape
        ct[i - 2] = lax.reshape(lax.slice(x_bar, (offset,), (offset + size,)), shape)
        offset += size
    return (a + _row(g, 0), lax.concatenate([lax.reshape(b, (1,)) for b in t_bars[::-1]], 0),
            *ct)


def _row(x, i):
    """x[i] of a [T, ...] value or a [T] one (0-d)."""
    start, stop = (i,) + (0,) * (len(x.shape) - 1), (i + 1,) + tuple(x.shape[1:])
    return lax.reshape(lax.slice(x, start, stop), tuple(x.shape[1:]))


def _dot(u, v):
    return lax.reduce_sum(lax.mul(u, v), (0,))


def _adjoint_dynamics(rhs: Function, wrt) -> Function:
    """(s, t, x…) -> s' of the augmented state s = [y, a, x̄ raveled] (all f64), from the VJP
    of rhs; rhs's t cotangent is left to DCE."""
    vjp = _body_vjp(rhs, wrt, (0,))       # (y, t, x…, a) -> (f, ȳ, t̄, x̄…)
    n = rhs.params[0].type.shape[0]
    bars = [rhs.params[i].type for i in wrt[2:]]
    b = Builder(f"adjoint_{rhs.name}")
    s = b.param(TensorType("f64", (2 * n + sum(x.size for x in bars),)), "state")
    rest = [b.param(p.type) for p in rhs.params[1:]]
    y, a = (b.add1("slice", [s], dict(start=(lo,), stop=(lo + n,), step=(1,)))
            for lo in (0, n))
    env = dict(zip(vjp.params, [y, *rest, a]))
    for op in vjp.ops:
        env.update(zip(op.outputs, b.add(op.prim, [env[v] for v in op.inputs], op.params,
                                         op.loc, op.note)))
    f, y_bar, _, *x_bars = (env[r] for r in vjp.results)
    parts = [f, b.add1("neg", [y_bar])]
    for x, t in zip(x_bars, bars):
        flat = b.add1("reshape", [x], dict(shape=(t.size,)))
        if t.dtype != "f64":
            flat = b.add1("convert", [flat], dict(dtype="f64"))
        parts.append(b.add1("neg", [flat]))
    return b.build([b.add1("concatenate", parts, dict(axis=0))])
