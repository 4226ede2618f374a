"""Nested and higher-order differentiation, eager and under jit.

Compositions: grad of grad, closures over an outer differentiated variable (no perturbation
confusion), grad of a function that calls a jitted function, jit of grad of grad, vjp inside
grad, and the deep 100 000-op chain at the default recursion limit.
"""

import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.runtime.tensor import tensor
from fusegrad import hessian
from fusegrad.transforms import grad, value_and_grad, vjp


def interp(fun):
    return fg.jit(fun, backend="interp")


def closure(x):
    return x * grad(lambda y: x * y)(2.0)


def same_input_closure(x):
    return grad(lambda y: x * y)(x)     # d/dy (x*y) = x, not 2x


def inv(x):
    return 1.0 / x


SIXTH = inv
for _ in range(6):
    SIXTH = grad(SIXTH)
SIXTH_INTERP = interp(SIXTH)


@pytest.mark.parametrize("mode", ["eager", "interp"])
def test_closure_over_outer_variable(mode):
    wrap = interp if mode == "interp" else (lambda f: f)
    assert wrap(grad(closure))(1.0) == 2.0
    assert wrap(grad(same_input_closure))(3.0) == 1.0


def test_sixth_derivative_of_reciprocal():
    assert SIXTH(4.0) == pytest.approx(0.0439453125, rel=1e-12)
    assert SIXTH_INTERP(4.0) == pytest.approx(0.0439453125, rel=1e-12)


def test_second_derivative_of_x_to_the_zero_at_zero():
    f = grad(grad(lambda x: x ** 0))
    assert f(0.0) == 0.0 and interp(f)(0.0) == 0.0


def test_grad_of_a_function_calling_a_jitted_function():
    inner = fg.jit(lambda x: np.sin(x) * x, backend="interp")

    def f(x):
        return inner(x) * 2.0

    expected = 2 * (np.cos(0.3) * 0.3 + np.sin(0.3))
    assert grad(f)(0.3) == pytest.approx(expected)
    assert interp(grad(f))(0.3) == pytest.approx(expected)
    assert inner(0.3) == pytest.approx(np.sin(0.3) * 0.3)   # still compiled outside grad


def test_jitted_function_closing_over_an_eager_variable():
    def f(x):
        return fg.jit(lambda y: x * y * y, backend="interp")(3.0)

    assert grad(f)(2.0) == pytest.approx(9.0)


def test_jit_of_grad_of_grad():
    def f(x):
        return np.sum(np.tanh(x) ** 3)
    x = np.array([0.2, -0.5])
    gg = grad(lambda x: np.sum(grad(f)(x) * np.array([1.0, 2.0])))
    expected = gg(x)
    np.testing.assert_allclose(interp(gg)(x), expected, rtol=1e-12)
    t = np.tanh(x)
    second = 6 * t * (1 - t * t) ** 2 - 6 * t ** 3 * (1 - t * t)   # d2/dx2 of tanh^3
    np.testing.assert_allclose(expected, second * np.array([1.0, 2.0]), rtol=1e-12)


def test_grad_of_value_and_grad_and_of_vjp():
    def f(x):
        value, g = value_and_grad(lambda y: y ** 3)(x)
        return value + g              # x^3 + 3x^2 -> 3x^2 + 6x

    assert grad(f)(2.0) == pytest.approx(24.0)
    assert interp(grad(f))(2.0) == pytest.approx(24.0)

    def h(x):
        _, vjp_fn = vjp(lambda y: np.sin(y) * y, x)
        (g,) = vjp_fn(np.float64(1.0))
        return g                      # d/dx (x cos x + sin x) = 2 cos x - x sin x

    assert grad(h)(0.7) == pytest.approx(2 * np.cos(0.7) - 0.7 * np.sin(0.7))
    assert interp(grad(h))(0.7) == pytest.approx(2 * np.cos(0.7) - 0.7 * np.sin(0.7))


def test_hessian_of_a_function_with_a_nested_grad():
    def f(x):
        return np.sum(grad(lambda y: np.sum(y ** 3))(x) * x)   # sum 3x^3 -> H = diag(18x)

    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(hessian(f)(x), np.diag(18 * x))
    np.testing.assert_allclose(interp(hessian(f))(x), np.diag(18 * x))


def test_make_ir_of_grad_of_grad_shows_both_backward_passes():
    text = str(fg.make_ir(grad(grad(lambda x: x * x * x)))(1.5))
    assert "vjp[mul]" in text and "vjp[vjp" not in text
    assert text.count("= mul") >= 6


def test_eager_grad_of_a_tensor_requiring_grad_keeps_history():
    x = tensor(1.5, requires_grad=True)
    g = grad(lambda y: y ** 3)(x)              # like a gradient penalty: differentiable
    g.backward()
    assert float(g.data) == pytest.approx(3 * 1.5 ** 2)
    assert float(x.grad.data) == pytest.approx(6 * 1.5)


CHAIN_N = 100_000
CHAIN_EXPECTED = 1.0100501665850403


def chain(x):
    y = x
    for _ in range(CHAIN_N):
        y = y * 1.0000001
    return y


def test_100k_op_chain_eager_and_jit_at_default_recursion_limit():
    """Eager tape, and jit: tracing, the autodiff pass, inlining and the passes, no recursion."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)          # CPython's default
    try:
        assert grad(chain)(1.0) == pytest.approx(CHAIN_EXPECTED, rel=1e-12)
        assert interp(grad(chain))(1.0) == pytest.approx(CHAIN_EXPECTED, rel=1e-12)
    finally:
        sys.setrecursionlimit(old)
