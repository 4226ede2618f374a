"""The scalar examples of the two course documents (shared/seeds/002_*.txt, 003_*.txt) on the
eager Tensor engine, with 0-d tensors in place of the toy Value class."""

import numpy as np
import pytest

from fusegrad.runtime.engine import grad
from fusegrad.runtime.grad_mode import no_grad
from fusegrad.runtime.tensor import tensor


def value(x):
    return tensor(float(x), requires_grad=True)


# -- 003: computational graphs and a micrograd-style Value -------------------------------------

def test_part1_graph():
    a, b, c, d = value(2), value(3), value(1), value(1.5)
    n1 = a * b
    n2 = n1 + c
    n3 = d.relu()
    L = n2 * n3
    assert (n1.item(), n2.item(), n3.item(), L.item()) == (6.0, 7.0, 1.5, 10.5)
    L.backward()
    assert (a.grad.item(), b.grad.item(), c.grad.item(), d.grad.item()) == (4.5, 3.0, 1.5, 7.0)


def test_part5_neuron_matches_hand_derivation():
    x1, x2, w1, w2, b = value(1.0), value(2.0), value(0.5), value(0.3), value(0.1)
    target = tensor(1.0)
    z = w1 * x1 + w2 * x2 + b
    a = z.relu()
    loss = (a - target) ** 2 * 0.5
    assert z.item() == pytest.approx(1.2) and loss.item() == pytest.approx(0.02)
    loss.backward()
    hand = {"w1": 0.2, "w2": 0.4, "b": 0.2, "x1": 0.1, "x2": 0.06}
    for name, var in (("w1", w1), ("w2", w2), ("b", b), ("x1", x1), ("x2", x2)):
        assert abs(var.grad.item() - hand[name]) < 1e-9, name


def test_part5_sgd_step_lowers_the_loss():
    w1, w2, b = value(0.5), value(0.3), value(0.1)

    def loss():
        return ((w1 * 1.0 + w2 * 2.0 + b).relu() - 1.0) ** 2 * 0.5

    loss().backward()
    with no_grad():
        for p in (w1, w2, b):
            p.sub_(p.grad * 0.1)
            p.zero_grad()
    assert loss().item() < 0.02


def test_reuse_stress_tests():
    x = value(3)
    y = x * x + x
    y.backward()
    assert (y.item(), x.grad.item()) == (12.0, 7.0)
    a = value(2)
    c = (a + a) * a
    c.backward()
    assert (c.item(), a.grad.item()) == (8.0, 8.0)


def test_chain_rule_and_finite_difference_checks():
    x = value(1.0)
    ((2 * x + 1) ** 3).backward()
    assert x.grad.item() == 54.0
    z = value(1.5)
    z.exp().log().backward()
    eps = 1e-6
    numeric = (np.log(np.exp(1.5 + eps)) - np.log(np.exp(1.5 - eps))) / (2 * eps)
    assert abs(z.grad.item() - numeric) / abs(numeric) < 1e-5
    assert z.grad.item() == pytest.approx(1.0)


def test_value_operations():
    a, b = value(2.0), value(-3.0)
    out = (-a - b / a + a ** 2 * b.tanh()).exp() + (a * 4.0).log() + b.relu()
    out.backward()
    t = np.tanh(-3.0)
    inner = -2.0 + 1.5 + 4 * t
    assert out.item() == pytest.approx(np.exp(inner) + np.log(8.0))
    assert a.grad.item() == pytest.approx(np.exp(inner) * (-1 - 3 / 4 + 4 * t) + 0.5)
    assert b.grad.item() == pytest.approx(np.exp(inner) * (-0.5 + 4 * (1 - t * t)))


def test_pytorch_snippet_of_the_neuron():
    x, w, b = tensor([1.0, 2.0], requires_grad=True), tensor([0.5, 0.3], requires_grad=True), \
        value(0.1)
    z = (x * w).sum() + b
    loss = 0.5 * (z.relu() - 1.0) ** 2
    loss.backward()
    np.testing.assert_allclose(w.grad, [0.2, 0.4])
    assert b.grad.item() == pytest.approx(0.2)


# -- 002: a sixty-line engine, kinks, graph lifecycle, higher order -----------------------------

def test_tanh_neuron_and_accumulation():
    x1, x2, w1, w2, b = value(1.5), value(-2.0), value(0.6), value(0.4), value(0.1)
    y = (w1 * x1 + w2 * x2 + b).tanh()
    y.backward()
    assert f"{y.item():.4f}" == "0.1974"
    assert f"{w1.grad.item():.4f}" == f"{1.5 * (1 - y.item() ** 2):.4f}" == "1.4416"
    assert f"{w2.grad.item():.4f}" == "-1.9221"
    assert f"{b.grad.item():.4f}" == "0.9610"
    assert f"{x1.grad.item():.4f}" == "0.5766"
    a = value(3.0)
    f = a * a + a
    f.backward()
    assert (f.item(), a.grad.item()) == (12.0, 7.0)


def test_expression_with_reuse_nesting_and_a_nonlinearity():
    def expression(a, b, c):
        d = a * b + c
        e = (d + a).tanh()
        return e * d + b

    a, b, c = value(0.7), value(-1.3), value(2.0)
    out = expression(a, b, c)
    out.backward()
    assert f"{out.item():.6f}" == "-0.269121"
    assert f"{a.grad.item():.6f}" == "-1.263999"
    assert f"{b.grad.item():.6f}" == "1.742557"
    assert f"{c.grad.item():.6f}" == "1.060796"


def test_kinks_and_the_where_trap():
    x = tensor([-1.0, 0.0, 1.0], requires_grad=True)
    x.relu().sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]
    xa = tensor([-1.0, 0.0, 1.0], requires_grad=True)
    xa.abs().sum().backward()
    assert xa.grad.tolist() == [-1.0, 0.0, 1.0]
    xs = tensor([0.0, 1.0], requires_grad=True)
    xs.sqrt().sum().backward()
    assert xs.grad.tolist() == [np.inf, 0.5]
    xw = tensor([0.0, 4.0], requires_grad=True)
    np.where(xw > 0, xw.sqrt(), 0.0).sum().backward()
    assert np.isnan(xw.grad.data[0]) and xw.grad.data[1] == 0.25
    xf = tensor([0.0, 4.0], requires_grad=True)
    positive = xf > 0
    safe = np.where(positive, np.where(positive, xf, 1.0).sqrt(), 0.0)  # mask BEFORE sqrt
    safe.sum().backward()
    assert xf.grad.tolist() == [0.0, 0.25]


def test_graph_lifecycle_retention_accumulation_detach_no_grad():
    w = tensor(2.0, dtype=np.float32, requires_grad=True)
    loss = (w * w) * 3.0
    loss.backward()
    assert w.grad.item() == 12.0
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        loss.backward()
    w.grad = None
    loss = (w * w) * 3.0
    loss.backward(retain_graph=True)
    loss.backward()
    assert w.grad.item() == 24.0 and w.grad.dtype == np.float32
    a = value(3.0)
    b = (a * a).detach()
    c = b * a
    c.backward()
    assert (b.item(), a.grad.item()) == (9.0, 9.0)
    with no_grad():
        d = a * a
    assert not d.requires_grad


def test_tanh_derivatives_of_order_1_to_3():
    x = value(0.5)
    y = x.tanh()
    (g1,) = grad(y, x, create_graph=True)
    (g2,) = grad(g1, x, create_graph=True)
    (g3,) = grad(g2, x)
    t = y.item()
    assert f"{t:.6f}" == "0.462117"
    assert f"{g1.item():9.6f}" == f"{1 - t * t:9.6f}" == " 0.786448"
    assert f"{g2.item():9.6f}" == f"{-2 * t * (1 - t * t):9.6f}" == "-0.726862"
    assert f"{g3.item():9.6f}" == f"{(1 - t * t) * (6 * t * t - 2):9.6f}" == "-0.565209"


def hessian(f, w):
    """Rows of the Hessian by reverse over reverse: one create_graph gradient, then n grads."""
    w = tensor(w, requires_grad=True)
    (g,) = grad(f(w), w, create_graph=True)
    return np.array([grad(g[i], w, retain_graph=True)[0].data for i in range(w.shape[0])])


def test_hessian_of_w0_squared_times_w1():
    H = hessian(lambda w: w[0] ** 2 * w[1], [1.5, -2.0])
    np.testing.assert_array_equal(H, [[-4.0, 3.0], [3.0, 0.0]])


def test_hessian_vector_products():
    def f(w):
        return (w[0] ** 2 * w[1]) + (w * w * w).sum()

    w0 = np.array([1.5, -2.0])
    H = hessian(f, w0)
    for v in (np.array([1.0, 0.0]), np.array([0.3, -0.7])):
        w = tensor(w0, requires_grad=True)
        (g,) = grad(f(w), w, create_graph=True)
        (hv,) = grad((g * tensor(v)).sum(), w)  # gradient of g . v with v held constant
        np.testing.assert_allclose(hv, H @ v, rtol=1e-12)
    np.testing.assert_allclose(H, [[2 * -2.0 + 6 * 1.5, 3.0], [3.0, 6 * -2.0]])


def test_sixth_derivative_of_reciprocal():
    x = value(4.0)
    y = 1 / x
    for _ in range(6):
        (y,) = grad(y, x, create_graph=True)
    assert y.item() == 0.0439453125
