"""Structured control flow: scan, while_loop and cond, each one op holding its body (or its
branches) as nested Functions in its params, as JAX's scan_p, while_p and cond_p hold jaxprs;
and ode_solve, SciPy's ODE solvers on a right-hand side held the same way (at the end).

A nested Function is closed: whatever the enclosing code computes and the body reads comes in
as an explicit operand (`consts`), so a body is a Function like any other, printed, parsed,
verified, optimized and compiled on its own. The operands of each op are laid out as

    scan        consts c…, initial carries k…, xs…    body (c…, k…, x…) -> (k…, y…)
    while_loop  cond consts, body consts, carries k…  cond (cc…, k…) -> bool[]
                                                      body (bc…, k…) -> k…
    cond        pred: bool[], operands a…             true_branch, false_branch (a…) -> r…

fori_loop with a static trip count is a scan whose first carry is the i64 counter (as in
JAX); with traced bounds it is a while_loop. The implementations run the nested Functions with
evaluate.eval_function, the interpreter's loop, so interp, constant folding and host steps
share one semantics.
"""

from __future__ import annotations

import numpy as np

from .evaluate import eval_function
from .registry import PRIMITIVES, Doc, define, fail
from .types import TensorType

SECTION = "Control flow"


def nested(op) -> list:
    """The (param name, Function) pairs an op holds, in the order of its entry's regions."""
    entry = PRIMITIVES.get(op.prim)
    return [(key, op.params[key]) for key in entry.regions] if entry is not None else []


def is_function(x) -> bool:
    """Duck-typed, so this module needs no import of core.py (which imports the registry)."""
    return all(hasattr(x, a) for a in ("name", "params", "ops", "results", "param_types"))


def _types(ts) -> str:
    return "(" + ", ".join(str(t) for t in ts) + ")"


def _check(prim, key, fn, params, results, operands):
    """fn takes `params` (types) and, where `results` is not None, returns `results`."""
    if not is_function(fn):
        fail(prim, f"param {key} must be a Function, got {type(fn).__name__}", *operands)
    if tuple(fn.param_types) != tuple(params):
        fail(prim, f"{key} @{fn.name} takes {_types(fn.param_types)} but the operands give "
                   f"{_types(params)}", *operands)
    if results is not None and tuple(fn.result_types) != tuple(results):
        fail(prim, f"{key} @{fn.name} returns {_types(fn.result_types)} but must return "
                   f"{_types(results)}", *operands)


def _one(values):
    return values[0] if len(values) == 1 else tuple(values)


# -- scan ---------------------------------------------------------------------------------------

def _scan_rule(prim, *types, body, length, reverse, num_consts, num_carry):
    n = num_consts + num_carry
    if min(length, num_consts, num_carry) < 0 or len(types) < n:
        fail(prim, f"needs num_consts={num_consts} and num_carry={num_carry} operands and "
                   f"length={length} >= 0", *types)
    xs = types[n:]
    for x in xs:
        if x.ndim == 0 or x.shape[0] != length:
            fail(prim, f"scanned operand {x} has no leading axis of length {length}", *types)
    _check(prim, "body", body, types[:n] + tuple(x.with_shape(x.shape[1:]) for x in xs),
           None, types)
    carry, ys = body.result_types[:num_carry], body.result_types[num_carry:]
    if tuple(carry) != types[num_consts:n]:
        fail(prim, f"body @{body.name} returns the carry {_types(carry)} for the carry "
                   f"{_types(types[num_consts:n])}", *types)
    return tuple(carry) + tuple(TensorType(y.dtype, (length,) + y.shape) for y in ys)


def _scan(*args, body, length, reverse, num_consts, num_carry):
    n = num_consts + num_carry
    consts, carry, xs = list(args[:num_consts]), list(args[num_consts:n]), args[n:]
    ys = [np.empty((length,) + t.shape, t.np_dtype) for t in body.result_types[num_carry:]]
    for i in range(length - 1, -1, -1) if reverse else range(length):
        outs = eval_function(body, consts + carry + [x[i] for x in xs])
        carry = outs[:num_carry]
        for y, out in zip(ys, outs[num_carry:]):
            y[i] = out
    return _one(carry + ys)


define("scan", "host", _scan_rule, _scan, section=SECTION, regions=("body",),
       doc=Doc("consts c…, initial carries k…, xs… (each with a leading axis of size `length`)",
               "`body`: a Function (c…, k…, x…) -> (k…, y…); `length`, `reverse` (bool), "
               "`num_consts`, `num_carry`",
               "k…'s types, then each y's with a leading axis of size `length`",
               "`for i in range(length)` (from the end with `reverse`): `k…, y… = body(c…, "
               "k…, x…[i])`, storing `y…[i]`; the final carries and the stacked ys "
               "(`jax.lax.scan`). `fg.lax.fori_loop` with static bounds is a scan that "
               "carries the i64 counter first"))


# -- while_loop ---------------------------------------------------------------------------------

def _while_rule(prim, *types, cond, body, cond_nconsts, body_nconsts):
    n = cond_nconsts + body_nconsts
    if min(cond_nconsts, body_nconsts) < 0 or len(types) < n:
        fail(prim, f"needs cond_nconsts={cond_nconsts} and body_nconsts={body_nconsts} "
                   f"operands before the carries", *types)
    carry = types[n:]
    _check(prim, "cond", cond, types[:cond_nconsts] + carry, (TensorType("bool", ()),), types)
    _check(prim, "body", body, types[cond_nconsts:n] + carry, carry, types)
    return carry


def _while_loop(*args, cond, body, cond_nconsts, body_nconsts):
    n = cond_nconsts + body_nconsts
    cond_consts, body_consts, carry = list(args[:cond_nconsts]), list(args[cond_nconsts:n]), \
        list(args[n:])
    while eval_function(cond, cond_consts + carry)[0]:
        carry = eval_function(body, body_consts + carry)
    return _one(carry)


define("while_loop", "host", _while_rule, _while_loop, section=SECTION, regions=("cond", "body"),
       doc=Doc("cond consts, body consts, initial carries k…",
               "`cond`: a Function (cond consts…, k…) -> bool[]; `body`: a Function (body "
               "consts…, k…) -> k…; `cond_nconsts`, `body_nconsts`",
               "k…'s types",
               "`while cond(…, k…): k… = body(…, k…)`; the final carries "
               "(`jax.lax.while_loop`). Reverse-mode differentiation of a traced while_loop "
               "is an error (its trip count is unknown when the program is traced)"))


# -- cond ---------------------------------------------------------------------------------------

def _cond_rule(prim, pred, *types, true_branch, false_branch):
    if pred != TensorType("bool", ()):
        fail(prim, f"the predicate must be bool[], got {pred}", pred, *types)
    _check(prim, "true_branch", true_branch, types, None, (pred, *types))
    _check(prim, "false_branch", false_branch, types, true_branch.result_types,
           (pred, *types))
    return tuple(true_branch.result_types)


def _cond(pred, *args, true_branch, false_branch):
    return _one(eval_function(true_branch if pred else false_branch, list(args)))


define("cond", "host", _cond_rule, _cond, section=SECTION,
       regions=("true_branch", "false_branch"),
       doc=Doc("pred: bool[], operands a…",
               "`true_branch`, `false_branch`: Functions (a…) -> r…, of equal types",
               "r…'s types",
               "`true_branch(a…)` if pred else `false_branch(a…)`; only the chosen branch "
               "runs (`jax.lax.cond`)"))


# -- ode_solve ----------------------------------------------------------------------------------
#
# Ordinary differential equations: `ode_solve`, SciPy's integrators run on a right-hand side
# held as a nested Function (scipy.integrate.odeint and solve_ivp on tensors and tracers).
#
# The op holds the right-hand side `rhs` (y, t, operands…) -> dy/dt as a region, as a scan holds
# its body, so whatever it closes over comes in as an operand and passes look into it. It is a
# host step: compiled code calls SciPy between kernels, and SciPy calls back into `rhs`, run by
# the interpreter's loop (evaluate.eval_function). `method` "odeint" is scipy.integrate.odeint
# (LSODA through ODEPACK, rtol and atol defaulting to 1.49012e-8, `max_step` its hmax and
# `mxstep` its step limit); any other is solve_ivp's method of that name ("RK45", "DOP853",
# "LSODA", ...) evaluated at the times t over [t[0], t_end] (t[-1] when t_end is None). A solver
# that fails raises with SciPy's message instead of returning its partial result.
#
# Its derivative is the adjoint method (formulas/control.py): an ode_solve of the augmented
# system run backward between the time points, so it differentiates again.
_F64 = TensorType("f64", ())


def _ode_rule(prim, y0, t, *xs, rhs, method, rtol, atol, t_end, max_step, mxstep):
    if y0.dtype != "f64" or y0.ndim != 1 or t.dtype != "f64" or t.ndim != 1:
        fail(prim, "needs y0: f64[n] and t: f64[T]", y0, t, *xs)
    _check(prim, "rhs", rhs, (y0, _F64, *xs), (y0,), (y0, t, *xs))
    return y0.with_shape((t.shape[0], y0.shape[0]))


def _integrate():
    try:
        import scipy.integrate
    except ImportError:  # pragma: no cover - scipy is optional
        raise ImportError("fusegrad solves ODEs with scipy.integrate: install scipy") from None
    return scipy.integrate


def _scipy(name):
    """SciPy's own solver (fusegrad.scipy's hook wraps it to reach fusegrad on tensors)."""
    fn = getattr(_integrate(), name)
    return getattr(fn, "__wrapped__", fn)


def _ode_solve(y0, t, *xs, rhs, method, rtol, atol, t_end, max_step, mxstep):
    xs = list(xs)

    def f(y, s):
        return eval_function(rhs, [y, np.asarray(s, np.float64)] + xs)[0]

    y0, t = np.asarray(y0, np.float64), np.asarray(t, np.float64)
    if method == "odeint":
        ys, info = _scipy("odeint")(f, y0, t, rtol=rtol, atol=atol, hmax=max_step,
                                    mxstep=mxstep, full_output=True)
        if info["message"] != "Integration successful.":
            raise RuntimeError(f"scipy.integrate.odeint failed: {info['message']}")
        return ys
    end = t[-1] if t_end is None else t_end
    if end == t[0]:                         # nothing to integrate (an empty backward interval)
        return np.repeat(y0[None], t.shape[0], 0)
    res = _scipy("solve_ivp")(lambda s, y: f(y, s), (t[0], end), y0, method=method,
                              t_eval=t[1:], rtol=rtol, atol=atol, max_step=max_step or np.inf)
    if not res.success:
        raise RuntimeError(f"scipy.integrate.solve_ivp ({method}) failed: {res.message}")
    return np.concatenate([y0[None], res.y.T])     # y(t[0]) is y0, as SciPy's own result


define("ode_solve", "host", _ode_rule, _ode_solve, section=SECTION, regions=("rhs",),
       doc=Doc("y0: f64[n], t: f64[T] (monotonic), operands x…",
               "`rhs`: a Function (y: f64[n], t: f64[], x…) -> f64[n]; `method` (\"odeint\" "
               "or a solve_ivp method), `rtol`, `atol`, `t_end`, `max_step`, `mxstep`",
               "f64[T, n]",
               "y at the times t of y' = rhs(y, t, x…), y(t[0]) = y0, by SciPy "
               "(`scipy.integrate.odeint`, or `solve_ivp` over [t[0], t_end]); host step"))
