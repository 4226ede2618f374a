"""scipy.integrate.odeint and solve_ivp on tensors and tracers: differentiable ODE solutions.

Called as users call SciPy, `odeint(func, y0, t, args=(...))` or `solve_ivp(fun, t_span, y0,
method, t_eval=t, args=(...))`, with a tensor or tracer anywhere in the arguments (or inside a
trace or an eager transform, where func may close over traced values). The right-hand side is
traced once into a Function (its arguments' pytree leaves are operands; values it closes over,
tracers or tensors that require grad, become operands too) and the solve is one `ode_solve` op
(ir/control.py), a host step that runs SciPy's solver; its gradient with respect to y0, the
time points and every operand is the adjoint method (formulas/control.py), which integrates the
augmented system backward with the same SciPy solver. y and t are float64, as SciPy computes.

Covered: odeint's rtol, atol, hmax, mxstep and tfirst; solve_ivp's method (RK45, DOP853,
LSODA, ... by name), t_eval (required: the time points must be known when the program is
traced), args, rtol, atol and max_step. Its result has SciPy's fields `t`, `y` (n × T),
`status`, `message` and `success` (a failed solve raises instead); `sol`, events and the
counters are None. Other options (Dfun, full_output, dense_output, events, ...) raise.
"""

from __future__ import annotations

import numpy as np

from .. import numpy as fnp
from ..dispatch import bind, level
from ..ir.types import TensorType
from ..runtime.signature import leaf_type
from ..tracer.tracer import Tracer, trace_flat
from ..tree import flatten, unflatten

_ODEINT_DEFAULTS = dict(Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None, tcrit=None,
                        h0=0.0, hmin=0.0, ixpr=0, mxhnil=0, mxordn=12, mxords=5, printmessg=0)


def odeint(func, y0, t, args=(), *, rtol=None, atol=None, hmax=0.0, mxstep=0, tfirst=False,
           **options):
    """scipy.integrate.odeint: y at the times t, shape [len(t), len(y0)]."""
    _refuse("odeint", {k: v for k, v in options.items() if _ODEINT_DEFAULTS.get(k, v) != v},
            set(options) - set(_ODEINT_DEFAULTS))
    rhs = (lambda y, s, *a: func(s, y, *a)) if tfirst else func
    return _solve(rhs, y0, t, args, "odeint", 1.49012e-8 if rtol is None else rtol,
                  1.49012e-8 if atol is None else atol, None, hmax, mxstep, func)


def solve_ivp(fun, t_span, y0, method="RK45", t_eval=None, dense_output=False, events=None,
              vectorized=False, args=None, *, rtol=1e-3, atol=1e-6, max_step=np.inf,
              **options):
    """scipy.integrate.solve_ivp at the times t_eval: its result's y is [len(y0), len(t_eval)]."""
    _refuse("solve_ivp", {k: v for k, v in dict(dense_output=dense_output, events=events,
                                                vectorized=vectorized).items() if v},
            set(options))
    if t_eval is None:
        raise TypeError("scipy.integrate.solve_ivp on tensors or tracers needs t_eval=...: the "
                        "time points the solution is returned at must be known when the "
                        "program is traced")
    t0, t_end = t_span
    times = fnp.concatenate([fnp.reshape(fnp.asarray(t0, np.float64), (1,)),
                             fnp.astype(fnp.asarray(t_eval), np.float64)])
    end = None if level(t_end) else float(t_end)
    ys = _solve(lambda y, s, *a: fun(s, y, *a), y0, times, args or (), method, rtol, atol,
                end, 0.0 if max_step == np.inf else max_step, 0, fun)
    from scipy.integrate._ivp.ivp import OdeResult
    return OdeResult(t=t_eval, y=fnp.transpose(ys[1:]), sol=None, t_events=None,
                     y_events=None, nfev=None, njev=None, nlu=None, status=0,
                     message="The solver successfully reached the end of the integration "
                             "interval.", success=True)


def _refuse(who, set_, unknown):
    bad = sorted(set_) + sorted(unknown)
    if bad:
        raise TypeError(f"scipy.integrate.{who} on tensors or tracers: fusegrad does not "
                        f"support {', '.join(bad)}")


def _solve(rhs, y0, t, args, method, rtol, atol, t_end, max_step, mxstep, func):
    """One ode_solve op: rhs(y, t, *args) traced into a Function of y, t and the array leaves
    of args (the other leaves, and what rhs closes over, as the trace finds them)."""
    if not (np.ndim(rtol) == np.ndim(atol) == 0):
        raise TypeError("scipy.integrate on tensors or tracers: rtol and atol must be scalars")
    y0 = fnp.astype(fnp.reshape(fnp.asarray(y0), (-1,)), np.float64)
    t = fnp.astype(fnp.asarray(t), np.float64)
    n = fnp._shape(y0)[0]
    leaves, tree = flatten(tuple(args))
    arrays = [i for i, x in enumerate(leaves) if _is_array(x)]
    operands = [fnp.asarray(leaves[i]) for i in arrays]

    def traced(y, s, *xs):
        full = list(leaves)
        for i, x in zip(arrays, xs):
            full[i] = x
        dy = rhs(y, s, *unflatten(tree, full))
        return fnp.astype(fnp.reshape(fnp.asarray(dy), (n,)), np.float64)

    types = [TensorType("f64", (n,)), TensorType("f64", ())]
    types += [x.aval if isinstance(x, Tracer) else leaf_type(x)[0] for x in operands]
    fn, _, captures = trace_flat(traced, types, f"rhs_{getattr(func, '__name__', 'f')}",
                                 lift_tensors=True)
    return bind("ode_solve", y0, t, *operands, *captures, rhs=fn, method=method,
                rtol=float(rtol), atol=float(atol), t_end=t_end, max_step=float(max_step),
                mxstep=int(mxstep))


def _is_array(x) -> bool:
    return bool(level(x)) or isinstance(x, (np.ndarray, np.generic, int, float, bool))


# Inside a trace or an eager transform SciPy's own odeint would call func on arrays, which may
# close over traced values: fusegrad's runs there whatever the arguments (scipy/__init__.py).
odeint.traced = solve_ivp.traced = True

HANDLED = {
    "scipy.integrate.odeint": odeint,
    "scipy.integrate.solve_ivp": solve_ivp,
}

__all__ = ["odeint", "solve_ivp"]
