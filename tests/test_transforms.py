"""grad, value_and_grad, vjp, and fg.hessian and fg.hvp on them: the contract, eager and jit.

The seed examples run through fg.jit(..., backend="interp") and eagerly: tanh derivatives of
order 1-3 at 0.5 and the Hessian [[-4, 3], [3, 0]] of w0^2 * w1 at (1.5, -2.0) from the course
reading (seeds/002, "Differentiating the derivative").
"""

import tracemalloc

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import hessian, hvp
from fusegrad.transforms import grad, value_and_grad, vjp


def interp(fun):
    return fg.jit(fun, backend="interp")


def both(fun):
    """The eager transform and the same one compiled for the interpreter."""
    return [fun, interp(fun)]


def loss(x, w):
    return np.sum(np.tanh(x * w) ** 2)


X, W = np.linspace(-1.0, 1.0, 5), np.full(5, 0.7)


def loss_grads(x, w):
    t = np.tanh(x * w)
    d = 2 * t * (1 - t * t)
    return d * w, d * x


# -- seeds ------------------------------------------------------------------------------------

T = np.tanh(0.5)
TANH_DERIVATIVES = [1 - T * T, -2 * T * (1 - T * T), (1 - T * T) * (6 * T * T - 2)]
d1 = grad(np.tanh)
d2 = grad(d1)
d3 = grad(d2)
D_INTERP = [interp(d) for d in (d1, d2, d3)]


def seed_f(w):
    return w[0] ** 2 * w[1]


HESS_INTERP = interp(hessian(seed_f))


@pytest.mark.parametrize("order", [1, 2, 3])
def test_seed_tanh_derivatives(order):
    expected = TANH_DERIVATIVES[order - 1]
    assert [d1, d2, d3][order - 1](0.5) == pytest.approx(expected, rel=1e-12)
    assert D_INTERP[order - 1](0.5) == pytest.approx(expected, rel=1e-12)
    assert f"{float(D_INTERP[order - 1](0.5)):9.6f}" == \
        ["0.786448", "-0.726862", "-0.565209"][order - 1].rjust(9)


def test_seed_hessian():
    w = np.array([1.5, -2.0])
    expected = np.array([[-4.0, 3.0], [3.0, 0.0]])
    np.testing.assert_allclose(hessian(seed_f)(w), expected)
    np.testing.assert_allclose(HESS_INTERP(w), expected)


def test_seed_hvp_is_one_hessian_row():
    w, v = np.array([1.5, -2.0]), np.array([0.0, 1.0])
    np.testing.assert_allclose(hvp(seed_f, (w,), (v,)), [3.0, 0.0])
    jitted = interp(lambda w, v: hvp(seed_f, (w,), (v,)))
    np.testing.assert_allclose(jitted(w, v), [3.0, 0.0])


# -- grad and value_and_grad ------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["eager", "interp"])
def test_grad_argnums_int_and_tuple(mode):
    wrap = interp if mode == "interp" else (lambda f: f)
    gx, gw = loss_grads(X, W)
    np.testing.assert_allclose(wrap(grad(loss))(X, W), gx)
    np.testing.assert_allclose(wrap(grad(loss, argnums=1))(X, W), gw)
    both_grads = wrap(grad(loss, argnums=(0, 1)))(X, W)
    assert isinstance(both_grads, tuple) and len(both_grads) == 2
    np.testing.assert_allclose(both_grads[1], gw)
    np.testing.assert_allclose(wrap(grad(loss, argnums=-1))(X, W), gw)


def test_bare_decorators():
    @fg.jit
    @grad
    def f(x):
        return x * x * x

    @grad
    def g(x):
        return np.sin(x)

    assert f(2.0) == pytest.approx(12.0)
    assert g(0.0) == pytest.approx(1.0)
    assert f.__name__ == "f"


def test_grads_are_numpy_arrays_zero_d_for_scalars():
    g = grad(lambda x: x * x)(3.0)
    assert isinstance(g, np.ndarray) and g.shape == () and g == 6.0
    g32 = grad(lambda x: np.sum(x * x))(np.ones(3, np.float32))
    assert isinstance(g32, np.ndarray) and g32.dtype == np.float32


def test_value_and_grad_and_has_aux():
    for vg in both(value_and_grad(loss)):
        value, g = vg(X, W)
        assert value == pytest.approx(loss(X, W))
        np.testing.assert_allclose(g, loss_grads(X, W)[0])

    def with_aux(x, w):
        h = np.tanh(x * w)
        return np.sum(h ** 2), {"h": h, "n": 3}

    (value, aux), g = value_and_grad(with_aux, has_aux=True)(X, W)
    np.testing.assert_allclose(aux["h"], np.tanh(X * W))
    assert isinstance(aux["h"], np.ndarray)
    np.testing.assert_allclose(g, loss_grads(X, W)[0])
    g2, _ = grad(lambda x, w: with_aux(x, w)[:1] + (np.tanh(x * w),), has_aux=True)(X, W)
    np.testing.assert_allclose(g2, loss_grads(X, W)[0])
    jitted = interp(value_and_grad(lambda x, w: (with_aux(x, w)[0], np.tanh(x * w)),
                                   has_aux=True))
    (value, aux), g = jitted(X, W)
    np.testing.assert_allclose(aux, np.tanh(X * W))
    np.testing.assert_allclose(g, loss_grads(X, W)[0])


def test_pytree_arguments_and_grads():
    params = {"w": W, "layers": [np.float64(0.3), (X, X * 2)]}

    def f(p, x):
        a, b = p["layers"][1]
        return np.sum(np.tanh(p["w"] * x) * a) + p["layers"][0] * np.sum(b)

    for gf in both(grad(f)):
        g = gf(params, X)
        assert set(g) == {"w", "layers"} and isinstance(g["layers"], list)
        assert isinstance(g["layers"][1], tuple)
        np.testing.assert_allclose(g["w"], (1 - np.tanh(W * X) ** 2) * X * X)
        np.testing.assert_allclose(g["layers"][0], np.sum(X * 2))
        np.testing.assert_allclose(g["layers"][1][1], np.full(5, 0.3))


def test_unused_argument_gets_zeros():
    for gf in both(grad(lambda x, y: np.sum(y * 2.0), argnums=(0, 1))):
        gx, gy = gf(X, W)
        np.testing.assert_array_equal(gx, np.zeros(5))
        np.testing.assert_allclose(gy, np.full(5, 2.0))
    assert grad(lambda x: 3.0)(1.0) == 0.0


def test_grad_of_x_to_the_zero_at_zero_is_zero():
    for gf in both(grad(lambda x: x ** 0)):
        assert gf(0.0) == 0.0
    for gf in both(grad(lambda x: np.sum(np.power(x, 0.0)))):
        np.testing.assert_array_equal(gf(np.zeros(3)), np.zeros(3))


def test_keyword_arguments_pass_through():
    def f(x, scale=1.0):
        return x * scale

    assert grad(f)(2.0, scale=3.0) == pytest.approx(3.0)


def test_python_control_flow_runs_eagerly():
    def f(x):
        if x > 0:
            return x * x
        return -x

    assert grad(f)(3.0) == 6.0 and grad(f)(-3.0) == -1.0


# -- vjp --------------------------------------------------------------------------------------

def test_vjp_eager_and_under_jit():
    def f(x, w):
        return np.tanh(x * w), np.sum(x)

    u = (np.arange(5.0), np.float64(2.0))
    out, vjp_fn = vjp(f, X, W)
    np.testing.assert_allclose(out[0], np.tanh(X * W))
    gx, gw = vjp_fn(u)
    d = u[0] * (1 - np.tanh(X * W) ** 2)
    np.testing.assert_allclose(gx, d * W + 2.0)
    np.testing.assert_allclose(gw, d * X)
    gx2, _ = vjp_fn(u)                          # vjp_fn can be called again
    np.testing.assert_allclose(gx2, gx)

    def traced(x, w, u0, u1):
        out, fn = vjp(f, x, w)
        return out, fn((u0, u1))

    out_j, (gx_j, gw_j) = interp(traced)(X, W, *u)
    np.testing.assert_allclose(out_j[0], out[0])
    np.testing.assert_allclose(gx_j, gx)
    np.testing.assert_allclose(gw_j, gw)


def test_vjp_cotangent_structure_is_checked():
    _, vjp_fn = vjp(lambda x: (x, x), X)
    with pytest.raises(ValueError, match="structure"):
        vjp_fn(X)


# -- hessian and hvp --------------------------------------------------------------------------

def quadratic_form(x, a):
    return 0.5 * x @ a @ x + np.sum(np.sin(x))


A = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, -1.0], [0.0, -1.0, 4.0]])
X3 = np.array([0.1, -0.4, 0.7])


def test_hessian_of_a_vector_argument():
    expected = A - np.diag(np.sin(X3))
    for h in both(hessian(quadratic_form)):
        np.testing.assert_allclose(h(X3, A), expected, atol=1e-12)


def test_hessian_with_tuple_argnums_is_nested():
    def f(x, y):
        return x * x * y + y ** 3

    h = hessian(f, argnums=(0, 1))(2.0, 3.0)
    np.testing.assert_allclose(np.array(h, dtype=float), [[6.0, 4.0], [4.0, 18.0]])
    hj = interp(hessian(f, argnums=(0, 1)))(2.0, 3.0)
    np.testing.assert_allclose(np.array(hj, dtype=float), [[6.0, 4.0], [4.0, 18.0]])


def test_hessian_of_a_pytree_argument_is_nested_like_it():
    def f(p):
        return p["a"] ** 2 * p["b"]

    for h in both(hessian(f)):
        out = h({"a": 1.0, "b": 2.0})
        assert set(out) == {"a", "b"} and set(out["a"]) == {"a", "b"}
        assert [[float(out[i][j]) for j in "ab"] for i in "ab"] == [[4.0, 2.0], [2.0, 0.0]]


def test_hvp_matches_hessian_times_vector():
    v = np.array([1.0, -2.0, 0.5])
    def f(x):
        return quadratic_form(x, A)
    expected = (A - np.diag(np.sin(X3))) @ v
    np.testing.assert_allclose(hvp(f, (X3,), (v,)), expected)
    np.testing.assert_allclose(interp(lambda x, v: hvp(f, (x,), (v,)))(X3, v), expected)


# -- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("arg, got", [(1, "int64"), (np.arange(3), "int64"), (True, "bool"),
                                      (np.array([True]), "bool")])
def test_grad_of_integer_or_bool_argument_is_a_type_error(arg, got):
    def f(x):
        return np.sum(x * 1.0)
    for gf in both(grad(f)):
        with pytest.raises(TypeError, match=rf"grad requires floating-point inputs, got {got} "
                           rf"for argument 0; pass .* or use \.astype\(np\.float64\)"):
            gf(arg)


def test_grad_of_int_suggests_a_float():
    with pytest.raises(TypeError, match=r"pass 1\.0 instead of 1"):
        grad(lambda x: x * 2.0)(1)


def test_grad_of_non_scalar_output():
    msg = r"grad requires a scalar output, got shape \[3\]; use fg.vjp for vector outputs"
    for gf in both(grad(lambda x: x * 2.0)):
        with pytest.raises(TypeError, match=msg):
            gf(np.ones(3))


def test_grad_of_tuple_output_suggests_has_aux():
    with pytest.raises(TypeError, match="has_aux=True"):
        grad(lambda x: (x * 2.0, x))(1.0)


def test_has_aux_misuse():
    for gf in both(grad(lambda x: x * 2.0, has_aux=True)):
        with pytest.raises(TypeError, match=r"has_aux=True\) requires the function to return "
                                            r"a pair \(output, aux\), got"):
            gf(1.0)
    with pytest.raises(TypeError, match="length 3"):
        grad(lambda x: (x, x, x), has_aux=True)(1.0)


def test_integer_output_is_an_error():
    with pytest.raises(TypeError, match="floating-point output"):
        grad(lambda x: np.sum(x > 0))(np.ones(3))


def test_argnums_out_of_range():
    with pytest.raises(ValueError, match="argnums"):
        grad(loss, argnums=2)(X, W)


# -- memory -----------------------------------------------------------------------------------

def test_eager_grad_calls_do_not_leak():
    gf = grad(lambda w, x: np.sum(np.tanh(x @ w)), argnums=0)
    w, x = np.ones((3, 2)), np.ones((4, 3))
    for _ in range(50):
        gf(w, x)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            gf(w, x)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1_000_000
