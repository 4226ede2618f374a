"""Elementwise breadth (issue 14 item 1): NumPy's inverse trigonometric and hyperbolic
functions, arctan2, hypot, cbrt, sinc, logaddexp(2), fmax/fmin, fabs, copysign, signbit,
heaviside, deg2rad & co., isnan/isinf/isfinite, nan_to_num and clip with array bounds, called
as np.* on eager tensors (backend="eager") and tracers (interp, numba).

- forward: eager and interp equal NumPy bit for bit (values, dtypes, signed zeros, nan), with
  inf, nan, subnormal and out-of-domain inputs; numba within a few ulps, specials exact
- dtypes: ints and bools promote to float64, float32 stays float32, Python scalars are weak
- gradients: check_grads to order 2 in float64 on all three backends (three programs)
- conventions: clip's gradient reaches an active bound, sinc's derivatives at 0, hypot's
  gradient at 0, heaviside, fmax/fmin and logaddexp at ties, copysign at 0
(the kernel IR's mathlib accuracy in ulps: tests/test_kernel_ir_math.py)
"""

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.testing import check_grads

TINY = 5e-324
X = np.array([-np.inf, -3.5, -1.0, -0.75, -0.5, -1e-300, -0.0, 0.0, TINY, 0.25, 0.5, 0.999,
              1.0, 1.5, 2.0, 1e300, np.inf, np.nan])
Y = np.array([2.0, -0.0, np.inf, 0.75, -2.5, 1e-300, 0.0, -0.0, 3.0, -np.inf, 0.5, np.nan,
              -1.0, 1.5, 1e300, -1e300, np.inf, 1.0])

UNARY = {
    "arcsin": np.arcsin, "arccos": np.arccos, "arctan": np.arctan, "arcsinh": np.arcsinh,
    "arccosh": np.arccosh, "arctanh": np.arctanh, "cbrt": np.cbrt, "sinc": np.sinc,
    "fabs": np.fabs, "deg2rad": np.deg2rad, "rad2deg": np.rad2deg, "radians": np.radians,
    "degrees": np.degrees, "nan_to_num": np.nan_to_num, "signbit": np.signbit,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
}
BINARY = {
    "arctan2": np.arctan2, "hypot": np.hypot, "logaddexp": np.logaddexp,
    "logaddexp2": np.logaddexp2, "fmax": np.fmax, "fmin": np.fmin, "copysign": np.copysign,
    "heaviside": np.heaviside,
}
INEXACT = {"logaddexp2"}    # composed with exp2 = exp(x ln 2): not NumPy's bits (<= 1 ulp)


def everything(x, y):
    out = {name: f(x) for name, f in UNARY.items()}
    out.update({name: f(x, y) for name, f in BINARY.items()})
    out["nan_to_num_args"] = np.nan_to_num(x, nan=-1.0, posinf=7.0, neginf=-7.0)
    out["clip"] = np.clip(x, -np.abs(y), np.abs(y))
    return out


def _ulps(got, want):
    """ulp distance per element; 0 where both are nan or equal with the same sign bit."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype.kind == "b":
        return np.where(got == want, 0.0, np.inf)
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | \
        (np.isnan(got) & np.isnan(want))
    with np.errstate(all="ignore"):
        err = np.abs(got - want) / np.spacing(np.abs(want))
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf, posinf=np.inf))


def _check(got, want, max_ulp, name):
    assert np.asarray(got).dtype == want.dtype, (name, np.asarray(got).dtype, want.dtype)
    err = _ulps(got, want)
    worst = int(np.argmax(err))
    assert err[worst] <= max_ulp, f"{name}[{worst}]: {np.asarray(got)[worst]!r} != " \
                                  f"{want[worst]!r} ({err[worst]} ulp)"


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_forward_is_numpys_bit_for_bit(backend):
    with np.errstate(all="ignore"):
        want = everything(X, Y)
        got = fg.jit(everything, backend=backend)(X, Y)
    for name in want:
        _check(got[name], want[name], 1.0 if name in INEXACT else 0.0, name)


# The numba backend, in one small program per dtype: the binary mathlib functions, signbit and
# the compositions on it, special values included.
def compiled(x, y):
    return {"arctan2": np.arctan2(x, y), "hypot": np.hypot(x, y), "arccosh": np.arccosh(x),
            **{k: v for k, v in everything(x, y).items()
               if k in ("fmax", "fmin", "copysign", "heaviside", "nan_to_num_args", "clip",
                        "signbit", "isinf")}}


def test_forward_on_numba():
    with np.errstate(over="ignore"):
        args = (X, Y, X.astype(np.float32), Y.astype(np.float32))
    with np.errstate(all="ignore"):
        want = (compiled(*args[:2]), compiled(*args[2:]))
        got = fg.jit(lambda x, y, x32, y32: (compiled(x, y), compiled(x32, y32)),
                     backend="numba")(*args)
    for w, g in zip(want, got):
        for name in w:
            _check(g[name], w[name], 1.0, name)


# -- dtypes ---------------------------------------------------------------------------------

I = np.array([-3, 0, 2, 5])
F32 = np.array([-0.5, 0.0, 0.25, 2.0], np.float32)
PROMOTIONS = [  # (function, args): each compared with NumPy's result, dtype included
    *((f, (I,)) for f in (np.arcsinh, np.arctan, np.cbrt, np.sinc, np.fabs, np.deg2rad,
                          np.rad2deg, np.signbit, np.nan_to_num, np.isnan)),
    *((f, (F32,)) for f in (np.arcsinh, np.cbrt, np.sinc, np.fabs, np.deg2rad, np.rad2deg,
                            np.radians, np.degrees, np.nan_to_num)),
    (np.signbit, (I > 0,)),   # (float ufuncs of bools are float16 in NumPy: no such dtype here)
    *((f, (I, I[::-1])) for f in (np.arctan2, np.hypot, np.logaddexp, np.copysign,
                                  np.heaviside, np.fmax, np.fmin)),
    *((f, (F32, 2.0)) for f in (np.arctan2, np.hypot, np.logaddexp, np.logaddexp2,
                                np.copysign, np.heaviside, np.fmax)),
    *((f, (3, F32)) for f in (np.arctan2, np.copysign, np.heaviside)),
    *((f, (F32, I)) for f in (np.arctan2, np.hypot, np.copysign, np.heaviside, np.fmin)),
    *((f, (F32, F32.astype(np.float64))) for f in (np.arctan2, np.copysign, np.heaviside)),
    (np.clip, (I, 0.5, 2.5)), (np.clip, (F32, -0.25, 1.0)), (np.clip, (F32, I - 1, 3.0)),
    (np.fmax, (I > 0, I < 3)),
]


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_dtypes_promote_as_numpy(backend):
    for f, args in PROMOTIONS:
        with np.errstate(all="ignore"):
            want = f(*args)
            got = fg.jit(f, backend=backend)(*args)
        _check(got, np.asarray(want), 1.0 if f is np.logaddexp2 else 0.0, f.__name__)


def test_python_scalar_arguments_stay_weak_under_jit():
    def f(x, s):
        return np.arctan2(x, s), np.copysign(x, s), np.heaviside(x, s), np.hypot(s, x)
    for got in fg.jit(f, backend="interp")(F32, 2.0):
        assert got.dtype == np.float32


# -- gradients --------------------------------------------------------------------------------

rng = np.random.default_rng(14)
U = rng.uniform(-0.9, 0.9, 6)                                       # inside (-1, 1)
A = rng.standard_normal(6)
A = np.where(A > 0, A + 0.2, A - 0.2)                               # away from 0
P = rng.uniform(0.5, 2.5, 6)
D1, D2 = rng.permutation(6) * 0.3 - 0.8, rng.permutation(6) * 0.3 - 0.77   # never tie


def primitives_program(u, a, p, x, y):
    """The new primitives and the compositions around them; y broadcasts against the rest
    (so the un-broadcasting of its cotangents is checked too)."""
    return np.stack([np.arcsin(u), np.arccos(u), np.arctanh(u), np.arctan(a), np.arcsinh(a),
                     np.arccosh(1 + p), np.cbrt(a), np.sinc(a), np.arctan2(x, y),
                     np.hypot(x, y), np.logaddexp(x, y), np.copysign(x, y)])


def composed_program(a, u, x, y, d1, d2):
    """Compositions of select, comparisons and arithmetic only."""
    return np.stack([np.fabs(a), np.deg2rad(a), np.rad2deg(a), np.radians(u), np.degrees(u),
                     np.nan_to_num(a), np.logaddexp2(y, x), np.heaviside(x, y),
                     np.fmax(d1, d2) + np.fmin(d2, d1) * 2])


def clip_program(x, lo, hi):
    return np.clip(x, lo, hi) * np.arange(1, 7)


X23, Y3 = A.reshape(2, 3)[::-1], U[:3]
GRAD_CASES = [
    (primitives_program, (U.reshape(2, 3), A.reshape(2, 3), P.reshape(2, 3), X23, Y3),
     [None, "interp", "numba"]),
    (composed_program, (A.reshape(2, 3), U.reshape(2, 3), X23, Y3, D1.reshape(2, 3),
                        D2.reshape(2, 3)), [None, "interp"]),
    (clip_program, (np.array([-2.0, -0.5, 0.5, 2.0, 0.3, 1.2]),
                    np.array([-1.0, -1.0, 0.6, 1.0, 0.5, -1.0]),
                    np.array([1.0, 0.0, 1.0, 1.5, 0.4, 1.0])), [None, "interp"]),
]


@pytest.mark.parametrize("fun, args, backend", [
    (fun, args, b) for fun, args, backends in GRAD_CASES for b in backends],
    ids=[f"{c[0].__name__}-{b}" for c in GRAD_CASES for b in c[2]])
def test_gradients_to_order_two(fun, args, backend):
    check_grads(fun, args, order=2, backend=backend)


def _grads(f, args, backend):
    g = fg.grad(f, argnums=tuple(range(len(args))))
    return g(*args) if backend == "eager" else fg.jit(g, backend=backend)(*args)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_clip_gradient_reaches_the_active_bound(backend):
    # inside, below lo, above hi, lo > hi (NumPy gives hi), a tie with lo (x's), lo broadcast
    x = np.array([[0.2, -2.0, 3.0, 0.3, 0.5], [0.0, -3.0, 0.9, 0.1, 0.6]])
    lo = np.array([-1.0, -1.0, 0.0, 0.5, 0.5])
    hi = np.array([[1.0, 1.0, 2.0, 0.4, 0.8]])
    gx, glo, ghi = _grads(lambda x, lo, hi: np.sum(np.clip(x, lo, hi)), (x, lo, hi), backend)
    np.testing.assert_array_equal(gx, [[1, 0, 0, 0, 1], [1, 0, 1, 0, 1]])
    np.testing.assert_array_equal(glo, [0, 2, 0, 0, 0])
    np.testing.assert_array_equal(ghi, [[0, 0, 1, 2, 0]])
    with np.errstate(invalid="ignore"):
        got = fg.jit(np.clip, backend=backend)(x, np.array([np.nan, 0, 0, 0, 0]), hi)
    np.testing.assert_array_equal(got, np.clip(x, np.array([np.nan, 0, 0, 0, 0]), hi))


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_kinks_and_ties(backend):
    zero = np.array([0.0, 0.0])
    g = _grads(lambda x, y: np.sum(np.hypot(x, y)), (zero, zero), backend)
    np.testing.assert_array_equal(g, [[0, 0], [0, 0]])              # hypot at the origin
    x1, x2 = np.array([-1.0, 0.0, 1.0, np.nan]), np.array([0.3, 0.5, 0.7, 0.9])
    g1, g2 = _grads(lambda a, b: np.sum(np.heaviside(a, b)), (x1, x2), backend)
    np.testing.assert_array_equal(g1, [0, 0, 0, 0])
    np.testing.assert_array_equal(g2, [0, 1, 0, 0])
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, np.nan, 0.0])
    for f in (np.fmax, np.fmin):                     # ties and nan in x2 go to x1 (PyTorch)
        g1, g2 = _grads(lambda a, b, f=f: np.sum(f(a, b)), (a, b), backend)
        np.testing.assert_array_equal(g1, [1, 1, f is np.fmax])
        np.testing.assert_array_equal(g2, [0, 0, f is np.fmin])
    g1, g2 = _grads(lambda a, b: np.sum(np.logaddexp(a, b)), (a[:1], a[:1]), backend)
    np.testing.assert_array_equal([g1, g2], [[0.5], [0.5]])          # a tie splits evenly
    inf = np.array([-np.inf, np.inf])
    g1, g2 = _grads(lambda a, b: np.sum(np.logaddexp(a, b)), (inf, inf), backend)
    assert np.isfinite(g1).all() and np.isfinite(g2).all()
    g1, g2 = _grads(lambda a, b: np.sum(np.copysign(a, b)),
                    (np.array([0.0, -0.0, 2.0]), np.array([1.0, 1.0, -3.0])), backend)
    np.testing.assert_array_equal(g1, [1, -1, -1])                 # +-1, also at 0 (JAX)
    np.testing.assert_array_equal(g2, [0, 0, 0])


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_sinc_derivatives_at_zero(backend):
    def d(f):
        g = fg.grad(f)
        return g if backend == "eager" else fg.jit(g, backend=backend)
    assert d(lambda x: np.sinc(x))(0.0) == 0.0
    assert math.isclose(d(d(lambda x: np.sinc(x)))(0.0), -math.pi**2 / 3, rel_tol=1e-14)
    assert math.isclose(d(lambda x: np.sinc(x))(0.5), -4 / math.pi, rel_tol=1e-14)


def test_unsupported_arguments_raise():
    t = fg.tensor(np.array([1.0, np.nan]))
    with pytest.raises(TypeError, match="copy=False"):
        np.nan_to_num(t, copy=False)
    with pytest.raises(TypeError, match="out="):
        np.clip(t, 0, 1, out=np.empty(2))
