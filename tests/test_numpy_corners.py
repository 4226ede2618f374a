"""NumPy's corner cases on every backend, first calls: np.inner of every rank, std at zero,
empty max/min/argmax, nan in maximum, logsumexp of -inf, rounding and remainders bit for bit,
and the third-order VJP of np.dot(vector, matrix).

Each test compiles fresh (fg.jit(f, backend=b) per backend, the first call compared). The
eager backend runs f on the NumPy arrays themselves, so forward values are also checked on
eager tensors; gradients go through fg.grad, which the eager backend runs on its tape.
"""

import itertools

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as fnn
from fusegrad.testing import check_grads

BACKENDS = ("eager", "interp", "numba")
rng = np.random.default_rng(12)


def first_calls(f, *args):
    return {b: fg.jit(f, backend=b)(*args) for b in BACKENDS}


def on_tensors(f, *args):
    """f on eager tensors (the eager backend itself would hand f plain arrays)."""
    out = f(*(fg.tensor(a) if isinstance(a, np.ndarray) else a for a in args))
    return [np.asarray(o.data) for o in out] if isinstance(out, tuple) else np.asarray(out.data)


def bits(x):
    """x's bytes with every nan made the same nan: equal bits means NumPy's exact result,
    signed zeros included."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        x = np.where(np.isnan(x), np.array(np.nan, x.dtype), x)
    return x.dtype, x.shape, x.tobytes()


# -- np.inner -----------------------------------------------------------------------------------

V3, W3, M23, M43, T243 = (rng.standard_normal(s) for s in [(3,), (3,), (2, 3), (4, 3), (2, 4, 3)])
INNER_CASES = [(1.5, W3), (V3, 2.0), (np.float64(2.5), M23), (V3, W3), (V3, M43), (M23, V3),
               (M23, M43), (T243, M23), (V3, T243)]


@pytest.mark.parametrize("a, b", INNER_CASES, ids=lambda x: str(np.shape(x)))
def test_inner_follows_numpy_for_every_rank(a, b):
    want = np.inner(a, b)
    for backend in ("interp", "numba"):
        got = fg.jit(np.inner, backend=backend)(a, b)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(on_tensors(np.inner, a, b), want, rtol=1e-12)


@pytest.mark.parametrize("a, b", INNER_CASES[3:], ids=lambda x: str(np.shape(x)))
def test_inner_gradients(a, b):
    def loss(a, b):
        return np.sum(np.sin(np.inner(a, b)))
    grads = first_calls(fg.grad(loss, argnums=(0, 1)), a, b)
    for backend in ("interp", "numba"):
        for g, e in zip(grads[backend], grads["eager"]):
            np.testing.assert_allclose(g, e, rtol=1e-12)
    check_grads(loss, (a, b), order=2)


def test_inner_of_a_scalar_has_the_gradient_of_a_product():
    grads = first_calls(fg.grad(lambda s, b: np.sum(np.inner(s, b) ** 2), argnums=(0, 1)),
                        1.5, W3)
    for gs, gb in grads.values():
        np.testing.assert_allclose(gs, 2 * 1.5 * np.sum(W3 ** 2), rtol=1e-12)
        np.testing.assert_allclose(gb, 2 * 1.5 ** 2 * W3, rtol=1e-12)


def test_inner_with_different_last_axes_raises():
    for backend in ("interp", "numba"):
        with pytest.raises(ValueError, match=r"inner: the last axes differ: shapes \[3\] @ \[2\]"):
            fg.jit(np.inner, backend=backend)(V3, np.ones(2))
    with pytest.raises(ValueError, match="the last axes differ"):
        on_tensors(np.inner, V3, np.ones(2))


# -- np.std and np.var --------------------------------------------------------------------------

def test_std_gradient_at_zero_spread_is_zero():
    """The std of one element (or of equal ones) is 0 and its gradient 0, as PyTorch's: not
    the nan of 0 * sqrt'(0)."""
    def f(s, v):
        return np.std(s) + np.std(v) + np.sum(np.std(v.reshape(1, 3), axis=0))
    for gs, gv in first_calls(fg.grad(f, argnums=(0, 1)), 2.0, np.full(3, 0.5)).values():
        assert gs == 0.0 and np.array_equal(gv, np.zeros(3))


@pytest.mark.parametrize("axis, ddof, keepdims", [(None, 0, False), (0, 1, False), (1, 1, True),
                                                  ((0, 1), 2, False)])
def test_var_and_std_with_ddof_and_axis(axis, ddof, keepdims):
    x = rng.standard_normal((3, 4))

    def f(x):
        return np.var(x, axis=axis, ddof=ddof, keepdims=keepdims), \
            np.std(x, axis=axis, ddof=ddof, keepdims=keepdims)
    want = f(x)
    for backend in ("interp", "numba"):
        for got, w in zip(fg.jit(f, backend=backend)(x), want):
            assert got.shape == w.shape
            np.testing.assert_allclose(got, w, rtol=1e-12)
    for got, w in zip(on_tensors(f, x), want):
        np.testing.assert_allclose(got, w, rtol=1e-12)
    check_grads(lambda x: np.sum(np.sin(f(x)[1])) + np.sum(f(x)[0]), (x,), order=2)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")       # NumPy's own, on the eager backend
def test_ddof_at_least_the_count_divides_by_zero_as_numpy():
    x = np.array([1.0, 2.0])

    def f(x):
        return np.var(x, ddof=2), np.std(x, ddof=3), np.var(np.array([4.0, 4.0]) + 0 * x, ddof=2)
    with np.errstate(all="ignore"):
        want = f(x)
    assert np.isinf(want[0]) and np.isinf(want[1]) and np.isnan(want[2])
    for backend, out in first_calls(f, x).items():
        assert [bits(o) for o in out] == [bits(w) for w in want], backend


# -- empty reductions ---------------------------------------------------------------------------

EMPTY = [(np.max, "maximum"), (np.amax, "maximum"), (np.min, "minimum"), (np.amin, "minimum"),
         (lambda x: x.max(), "maximum")]


@pytest.mark.parametrize("f, name", EMPTY)
def test_max_and_min_of_an_empty_array_raise_numpys_error(f, name):
    msg = f"zero-size array to reduction operation {name} which has no identity"
    for backend in BACKENDS:                # at trace time for interp and numba
        with pytest.raises(ValueError, match=msg):
            fg.jit(f, backend=backend)(np.zeros(0))
    with pytest.raises(ValueError, match=msg):
        on_tensors(f, np.zeros((2, 0)))


@pytest.mark.parametrize("f, name", [(np.argmax, "argmax"), (np.argmin, "argmin")])
def test_argmax_of_an_empty_axis_raises_numpys_error(f, name):
    for backend in BACKENDS:
        with pytest.raises(ValueError, match=f"attempt to get {name} of an empty sequence"):
            fg.jit(lambda x: f(x, axis=1), backend=backend)(np.zeros((2, 0)))


def test_reductions_over_nonempty_axes_of_empty_arrays_are_empty():
    def f(x):
        return np.max(x, axis=1), np.argmin(x, axis=1), np.sum(x, axis=0), np.max(x, axis=())
    want = f(np.zeros((0, 2)))
    for backend, out in first_calls(f, np.zeros((0, 2))).items():
        assert [bits(o) for o in out] == [bits(w) for w in want], backend


# -- nan in maximum, -inf in logsumexp ----------------------------------------------------------

def test_maximum_and_max_propagate_nan_and_send_it_the_gradient():
    """maximum(nan, 1) is nan (NumPy); the gradient goes to the nan operand, as it would to the
    winner, and two nans split it like a tie (docs/design.md)."""
    x = np.array([np.nan, 0.0, 2.0, np.nan])
    y = np.array([1.0, 1.0, 1.0, np.nan])
    w = np.array([1.0, 2.0, 3.0, 4.0])

    def f(x, y):
        return np.maximum(x, y) * w, np.minimum(y, x) * w, np.max(x), np.min(x[1:3])

    def loss(x, y):
        a, b, c, d = f(x, y)
        return np.sum(a) + np.sum(b) + c + d
    want = f(x, y)
    for backend in ("interp", "numba"):
        assert [bits(o) for o in fg.jit(f, backend=backend)(x, y)] == [bits(v) for v in want]
    for gx, gy in first_calls(fg.grad(loss, argnums=(0, 1)), x, y).values():
        # x[0] is nan: all of maximum's and minimum's, half of max's (x[3] is the other nan);
        # x[3] and y[3] are both nan: a tie in maximum and minimum
        np.testing.assert_array_equal(gx, [1 + 1 + 0.5, 0 + 2 + 1, 3 + 0, 2 + 2 + 0.5])
        np.testing.assert_array_equal(gy, [0, 2 + 0, 0 + 3, 2 + 2])


def test_logsumexp_of_all_minus_inf_is_minus_inf_with_zero_gradient():
    """PyTorch's value (-inf, not nan); gradient 0, where PyTorch and JAX give nan."""
    x = np.array([[-np.inf, -np.inf], [0.0, np.log(3.0)]])

    def f(x):
        return np.sum(fnn.logsumexp(x, axis=1) * np.array([2.0, 1.0]))
    for backend, (value, g) in first_calls(fg.value_and_grad(f), x).items():
        assert value == -np.inf, backend
        np.testing.assert_allclose(g, [[0.0, 0.0], [0.25, 0.75]], rtol=1e-15)
    for backend, out in first_calls(lambda x: fnn.logsumexp(x, axis=1), x).items():
        np.testing.assert_allclose(out, [-np.inf, np.log(4.0)], rtol=1e-15)


# -- rounding and remainders --------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, -3.0, 7.25, -7.25, np.inf,
           -np.inf, np.nan, 1e300, 1e-300, 5e-324, 0.49999999999999994, 4503599627370495.5]
INTS = [0, 1, -1, 2, -3, 7, -7, 2 ** 62, -2 ** 63, 2 ** 63 - 1]


def pairs(values, dtype):
    a, b = np.array(list(itertools.product(values, values))).T
    with np.errstate(over="ignore"):                # 1e300 is inf in float32
        return a.astype(dtype), b.astype(dtype)


def rounding(x, y):
    return (np.floor(x), np.ceil(x), np.trunc(x), np.rint(x), np.round(x), np.around(x, 1),
            np.round(x, -1), x.round(2), x % y, np.remainder(x, y), np.mod(x, 2), 5 % x,
            np.fmod(x, y), np.fmod(-3, x))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_rounding_and_remainders_match_numpy_bit_for_bit(dtype):
    """Signed zeros, inf, nan and ties included; the remainder takes the divisor's sign, fmod
    the dividend's, and an integer x % 0 is 0."""
    x, y = pairs(INTS if dtype == np.int64 else SPECIAL, dtype)
    with np.errstate(all="ignore"):
        want = [bits(v) for v in rounding(x, y)]
    for backend in ("interp", "numba"):
        assert [bits(v) for v in fg.jit(rounding, backend=backend)(x, y)] == want, backend
    assert [bits(v) for v in on_tensors(rounding, x, y)] == want


def test_scalar_rounding_matches_numpy_on_every_compiled_path():
    """0-d float64 functions compile through the kernel IR."""

    def f(x, y):
        return np.floor(x), np.ceil(x), np.trunc(x), np.rint(x), x % y, np.fmod(x, y)
    jitted = fg.jit(f, backend="numba")
    assert "as kernel IR" in jitted.lower(1.0, 2.0).source
    for a, b in itertools.product([-7.25, -0.0, 2.5, np.inf, np.nan], [3.0, -3.0, 0.0, np.inf]):
        with np.errstate(all="ignore"):
            want = [bits(v) for v in f(np.float64(a), np.float64(b))]
        assert [bits(v) for v in jitted(a, b)] == want, (a, b)


def test_rounding_has_zero_gradient_and_remainders_numpys_slopes():
    x = np.array([3.7, -3.7, 5.5, -0.2])
    y = np.array([1.5, 1.5, -2.0, 0.7])

    def f(x, y):
        return np.sum(np.floor(x) + np.ceil(x) + np.trunc(x) + np.rint(x) + np.round(x, 1)
                      + 2 * (x % y) + 3 * np.fmod(x, y))
    for backend, (gx, gy) in first_calls(fg.grad(f, argnums=(0, 1)), x, y).items():
        np.testing.assert_array_equal(gx, np.full(4, 5.0))
        np.testing.assert_array_equal(gy, -2 * np.floor(x / y) - 3 * np.trunc(x / y))
    check_grads(lambda x, y: np.sum(np.sin(x % y) * np.fmod(x, y)), (x, y), order=2)


# -- the third-order VJP of np.dot(vector, matrix) ----------------------------------------------

def dot_vjp3(v, M, c1, c2v, c2M, c3a, c3b, c3c):
    """vjp of vjp of vjp of np.dot(v, M), every cotangent an argument."""
    def first(v, M, c1):
        return fg.vjp(np.dot, v, M)[1](c1)

    def second(v, M, c1):
        return fg.vjp(first, v, M, c1)[1]((c2v, c2M))
    return fg.vjp(second, v, M, c1)[1]((c3a, c3b, c3c))


def dot_vjp3_chained(v, M):
    """The same, each cotangent computed from the values before it."""
    def first(v, M):
        out, back = fg.vjp(np.dot, v, M)
        return back(np.sin(out))

    def second(v, M):
        out, back = fg.vjp(first, v, M)
        return back((np.cos(out[0]), out[1] * 2.0))
    out, back = fg.vjp(second, v, M)
    return back((out[0] * out[0], np.tanh(out[1])))


def test_third_order_vjp_of_a_vector_matrix_dot():
    """Before the fusion fix a small matmul's operand (M transposed) was copied to memory after
    an earlier kernel had read it inline, so numba read it before it was written."""
    n, m = 3, 4
    v, M, c1, c2v, c2M, c3a, c3b, c3c = (rng.standard_normal(s) for s in
                                         [n, (n, m), m, n, (n, m), n, (n, m), m])
    want = (c2M @ c3c, np.outer(c2v, c3c), c2M.T @ c3a + c3b.T @ c2v)   # by hand: f is bilinear
    for backend, out in first_calls(dot_vjp3, v, M, c1, c2v, c2M, c3a, c3b, c3c).items():
        for got, w in zip(out, want):
            np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-14)
    chained = first_calls(dot_vjp3_chained, v, M)
    for backend in ("interp", "numba"):
        for got, w in zip(chained[backend], chained["eager"]):
            np.testing.assert_allclose(got, w, rtol=1e-12)
