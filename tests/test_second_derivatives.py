"""Second derivatives of every binary elementwise function where formulas branch (issue 23).

A formula written with kinks (max, abs, a select) can give the right first derivative at a tie
and a wrong second one: np.logaddexp's Hessian at equal arguments was 0 on every backend. So
every binary elementwise function, the registry's primitives (through fusegrad.lax) and every
binary float ufunc fusegrad.numpy handles (its compositions: logaddexp, fmax, xlogy, ...), is
differentiated twice at equal arguments, at zero and at the branch points of its formula, and
the four second derivatives (d/dx d/dx, d/dy d/dx, d/dx d/dy, d/dy d/dy) are compared with
central finite differences of the eager first derivative.

Where the function itself is not twice differentiable (max at a tie, hypot at the origin, a
pole) no finite difference means anything: NOT_SMOOTH declares those points, each with its
reason; every other point is checked, and a finite difference that is not finite there fails
the test until it is declared. All functions and points run in one jitted function per backend
(one compile each).
"""

import math

import numpy as np
import pytest
import scipy.special  # noqa: F401 - registers SciPy's binary ufuncs (xlogy, betaln, ...)

import fusegrad as fg
from fusegrad import lax
from fusegrad.formulas import vjp_rules
from fusegrad.ir.primitives import PRIMITIVES
from fusegrad.numpy import HANDLED_UFUNCS

EQUAL = [(0.4, 0.4), (-1.3, -1.3), (0.0, 0.0), (2.5, 2.5)]
ZERO = [(0.0, 0.7), (0.7, 0.0), (0.0, -0.7), (-0.7, 0.0)]
BRANCHES = {                # the points where a formula selects, beyond ties and zeros
    "pow": [(0.0, 2.0), (0.0, 3.0), (2.0, 0.0), (0.5, 1.0)],
    "remainder": [(1.5, 0.5), (-1.5, 0.5), (0.75, -0.25), (1.2, 0.5)],
    "xlog1py": [(0.0, -1.0), (0.7, -0.5)],
}
for _alias in ("power", "float_power"):
    BRANCHES[_alias] = BRANCHES["pow"]
BRANCHES["fmod"] = BRANCHES["floor_divide"] = BRANCHES["remainder"]


def _registry_functions() -> dict:
    prims = [p.name for p in PRIMITIVES.values()
             if p.category == "elementwise" and p.arity == 2 and p.name in vjp_rules]
    return {f"lax.{name}": getattr(lax, name) for name in prims}


def _numpy_functions() -> dict:
    out = {}
    for ufunc in HANDLED_UFUNCS:
        if ufunc.nin == 2 and ufunc.nout == 1 and ufunc.signature is None and \
                np.dtype(ufunc(0.5, 0.5).dtype).kind == "f":
            out[ufunc.__name__] = ufunc
    return out


FUNCTIONS = {**_registry_functions(), **_numpy_functions()}


def _base(name):
    """The function's name without lax., aliases of a primitive under its NumPy name."""
    name = name.removeprefix("lax.")
    return {"sub": "subtract", "mul": "multiply", "div": "divide", "atan2": "arctan2",
            "power": "pow", "float_power": "pow"}.get(name, name)


def _integer(q):
    return np.isfinite(q) and q == np.round(q)


# (function names, where(x, y), the entries not checkable there, why). An entry names which
# first derivative is differenced ("x": d/dx, "y": d/dy) and along which variable: "xy" is
# d/dy of d/dx f.
ALL = ("xx", "xy", "yx", "yy")
NOT_SMOOTH = [
    ({"maximum", "minimum", "fmax", "fmin"}, lambda x, y: x == y, ALL,
     "max and min have a kink at a tie: the first derivative jumps"),
    ({"hypot"}, lambda x, y: x == y == 0, ALL, "a cone at the origin"),
    ({"arctan2"}, lambda x, y: x == y == 0, ALL, "the angle is singular at the origin"),
    ({"divide"}, lambda x, y: y == 0, ALL, "a pole at y = 0"),
    ({"pow"}, lambda x, y: x < 0 or x == 0 and not (_integer(y) and y >= 2), ALL,
     "x ** y is nan for x < 0 and not twice differentiable in x at 0 unless y is 0, 1 or >= 2"),
    ({"pow"}, lambda x, y: x == 0, ("yx",),
     "d/dy x ** y = x ** y log x is nan left of 0"),
    ({"remainder"}, lambda x, y: y == 0 or _integer(x / y), ("yx", "yy"),
     "d/dy = -floor(x / y) jumps where x / y is an integer"),
    ({"remainder"}, lambda x, y: y == 0, ALL, "x % 0 is nan"),
    ({"fmod"}, lambda x, y: y == 0 or x != 0 and _integer(x / y), ("yx", "yy"),
     "d/dy = -trunc(x / y) jumps where x / y is a nonzero integer"),
    ({"fmod"}, lambda x, y: y == 0, ALL, "fmod(x, 0) is nan"),
    ({"floor_divide"}, lambda x, y: y == 0, ALL, "x // 0 is inf or nan"),
    ({"floor_divide"}, lambda x, y: y != 0 and _integer(x / y), ALL,
     "floor(x / y) jumps where x / y is an integer"),
    ({"copysign"}, lambda x, y: x == 0, ("xx", "yx"),
     "|x| sign(y) has a kink at x = 0"),
    ({"copysign"}, lambda x, y: y == 0, ("xy", "yy"), "the sign of y jumps at 0"),
    ({"heaviside"}, lambda x, y: x == 0, ("xx", "xy"), "the step at x = 0"),
    ({"xlogy"}, lambda x, y: y <= 0, ALL, "log y: a pole at 0, nan below"),
    ({"xlog1py"}, lambda x, y: y <= -1, ALL, "log1p y: a pole at -1, nan below"),
    ({"betaln"}, lambda x, y: x == 0 or y == 0 or _integer(x + y) and x + y <= 0, ALL,
     "lgamma has poles at 0 and the negative integers"),
]


def _skipped(name, x, y) -> dict:
    out = {}
    for names, where, entries, why in NOT_SMOOTH:
        if _base(name) in names and where(x, y):
            out.update(dict.fromkeys(entries, why))
    return out


def _points(name) -> np.ndarray:
    return np.array(EQUAL + ZERO + BRANCHES.get(_base(name), []), dtype=np.float64)


def _second_derivatives(xs: dict, ys: dict) -> dict:
    """Per function, its four second derivatives at its points (one traced function)."""
    out = {}
    for name, f in FUNCTIONS.items():
        gx, gy = fg.elementwise_grad(f, 0), fg.elementwise_grad(f, 1)
        x, y = xs[name], ys[name]
        out[name] = {"xx": fg.elementwise_grad(gx, 0)(x, y),
                     "xy": fg.elementwise_grad(gx, 1)(x, y),
                     "yx": fg.elementwise_grad(gy, 0)(x, y),
                     "yy": fg.elementwise_grad(gy, 1)(x, y)}
    return out


def _finite_differences(name, x, y, h=1e-5) -> dict:
    """Central differences of the eager first derivatives."""
    f = FUNCTIONS[name]
    first = {"x": fg.elementwise_grad(f, 0), "y": fg.elementwise_grad(f, 1)}
    out = {}
    for d, g in first.items():
        with np.errstate(all="ignore"):
            out[d + "x"] = (g(x + h, y) - g(x - h, y)) / (2 * h)
            out[d + "y"] = (g(x, y + h) - g(x, y - h)) / (2 * h)
    return out


@pytest.fixture(scope="module")
def references():
    points = {name: _points(name) for name in FUNCTIONS}
    xs = {name: p[:, 0].copy() for name, p in points.items()}
    ys = {name: p[:, 1].copy() for name, p in points.items()}
    fd = {name: _finite_differences(name, xs[name], ys[name]) for name in FUNCTIONS}
    return xs, ys, fd


def test_every_binary_primitive_and_ufunc_is_covered():
    prims = {p.name for p in PRIMITIVES.values() if p.category == "elementwise"
             and p.arity == 2 and p.name in vjp_rules}
    assert {f"lax.{p}" for p in prims} <= set(FUNCTIONS)
    assert {"logaddexp", "logaddexp2", "xlogy", "betaln", "fmax", "copysign"} <= set(FUNCTIONS)
    assert len(FUNCTIONS) >= 28


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_second_derivatives_match_finite_differences(backend, references):
    xs, ys, fd = references
    with np.errstate(all="ignore"):
        got = fg.jit(_second_derivatives, backend=backend)(xs, ys)
    wrong = []
    for name in FUNCTIONS:
        for i, (x, y) in enumerate(zip(xs[name], ys[name])):
            skipped = _skipped(name, x, y)
            for entry in ALL:
                if entry in skipped:
                    continue
                want, have = fd[name][entry][i], got[name][entry][i]
                if not math.isfinite(want):
                    wrong.append(f"{name}({x}, {y}) {entry}: the finite difference is {want}; "
                                 f"declare the point in NOT_SMOOTH")
                elif not math.isclose(have, want, rel_tol=1e-5, abs_tol=1e-6):
                    wrong.append(f"{name}({x}, {y}) {entry}: {have}, finite differences {want}")
    assert not wrong, "\n".join(wrong)


def test_logaddexp_hessian_at_a_tie():
    hess = fg.hessian(lambda v: np.logaddexp(v[0], v[1]))(np.array([0.4, 0.4]))
    np.testing.assert_allclose(hess, [[0.25, -0.25], [-0.25, 0.25]], rtol=1e-15)
    hess = fg.jit(fg.hessian(lambda v: np.logaddexp2(v[0], v[1])), backend="interp")(
        np.array([-1.0, -1.0]))
    np.testing.assert_allclose(hess, math.log(2) / 4 * np.array([[1, -1], [-1, 1]]),
                               rtol=1e-14)
