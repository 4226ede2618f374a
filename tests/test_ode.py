"""scipy.integrate.odeint and solve_ivp called as users call them, on eager tensors and under
jit (interp and numba), differentiated by the adjoint method with respect to the initial state,
the time points and the arguments of the right-hand side, against central finite differences
of SciPy itself on plain arrays; and an ODE-net fit (autograd's ode_net example shape: a tiny
MLP right-hand side, a few gradient steps) whose gradient matches finite differences too.
"""

import numpy as np
import pytest
import scipy.integrate as si

import fusegrad as fg

T = np.linspace(0.0, 1.5, 5)
Y0 = np.array([1.0, 0.3])
K, W = 1.3, 0.2
TOL = dict(rtol=1e-10, atol=1e-10)


def damped(y, t, k, w):
    """A time-dependent oscillator, its right-hand side written as a list (as users do)."""
    return [y[1], -k * y[0] - w * y[1] * t]


def odeint_loss(y0, k, w, t):
    ys = si.odeint(damped, y0, t, args=(k, w), **TOL)
    return np.sum(ys ** 2 * np.arange(1, 3))


def ivp_loss(method):
    def loss(y0, k, w, t):
        res = si.solve_ivp(lambda s, y, k, w: damped(y, s, k, w), (t[0], t[-1]), y0,
                           method=method, t_eval=t[1:], args=(k, w), **TOL)
        return np.sum(res.y ** 2 * np.arange(1, 3)[:, None])
    loss.__name__ = f"ivp_{method}"
    return loss


def finite_differences(f, args, h=1e-6):
    """Central differences of f (SciPy on plain arrays) in every element of every argument."""
    grads = []
    for i, a in enumerate(args):
        a = np.asarray(a, np.float64)
        g = np.zeros(a.shape)
        for j in np.ndindex(a.shape):
            up, down = [list(args) for _ in range(2)]
            up[i], down[i] = a.copy(), a.copy()
            up[i][j] += h
            down[i][j] -= h
            g[j] = (f(*up) - f(*down)) / (2 * h)
        grads.append(g)
    return grads


LOSSES = [odeint_loss, ivp_loss("RK45"), ivp_loss("DOP853"), ivp_loss("LSODA")]
ARGS = (Y0, np.float64(K), np.float64(W), T)


@pytest.fixture(scope="module", params=LOSSES, ids=lambda f: f.__name__)
def reference(request):
    f = request.param
    return f, f(*ARGS), finite_differences(f, ARGS)


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_gradient_matches_finite_differences(reference, backend):
    f, value, fd = reference
    vg = fg.value_and_grad(f, argnums=(0, 1, 2, 3))
    if backend != "eager":
        vg = fg.jit(vg, backend=backend)
    got_value, grads = vg(*ARGS)
    np.testing.assert_allclose(got_value, value, rtol=1e-12)
    for g, want in zip(grads, fd):
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7)


def test_results_are_scipys():
    ys = fg.jit(lambda y0: si.odeint(damped, y0, T, args=(K, W)), backend="interp")(Y0)
    np.testing.assert_array_equal(ys, si.odeint(damped, Y0, T, args=(K, W)))
    res = si.solve_ivp(lambda s, y: damped(y, s, K, W), (0.0, 2.0), fg.tensor(Y0), t_eval=T)
    want = si.solve_ivp(lambda s, y: damped(y, s, K, W), (0.0, 2.0), Y0, t_eval=T)
    np.testing.assert_array_equal(res.y.numpy(), want.y)
    assert res.success and np.array_equal(res.t, T)


# -- the right-hand side closes over traced values; 0-d y0 -------------------------------------

def test_closures_and_scalar_state():
    def loss(k, y0):
        ys = si.odeint(lambda y, t: -k * y * (1.0 + t), y0, T, **TOL)    # closes over k
        return np.sum(ys)

    def exact(k, y0):       # y = y0 exp(-k (t + t²/2))
        return np.sum(y0 * np.exp(-k * (T + T ** 2 / 2)))

    want = finite_differences(exact, (0.7, 1.2))
    for run in (fg.grad(loss, argnums=(0, 1)),
                fg.jit(fg.grad(loss, argnums=(0, 1)), backend="interp")):
        got = run(0.7, 1.2)
        np.testing.assert_allclose(got, want, rtol=1e-7)
    assert si.odeint(lambda y, t: -y, fg.tensor(1.0), T).shape == (5, 1)   # SciPy's shape


def test_unsupported_options_raise():
    with pytest.raises(TypeError, match="Dfun"):
        si.odeint(damped, fg.tensor(Y0), T, args=(K, W), Dfun=lambda y, t, k, w: None)
    with pytest.raises(TypeError, match="t_eval"):
        si.solve_ivp(lambda s, y: -y, (0.0, 1.0), fg.tensor(Y0))
    with pytest.raises(TypeError, match="events"):
        si.solve_ivp(lambda s, y: -y, (0.0, 1.0), fg.tensor(Y0), t_eval=T, events=[None])


# -- an ODE net: a tiny MLP right-hand side fitted to a trajectory (autograd's ode_net) --------

def mlp(y, t, params):
    h = y
    for w, b in params[:-1]:
        h = np.tanh(h @ w + b)
    w, b = params[-1]
    return h @ w + b


def init(rng, sizes=(2, 8, 2)):
    return [(0.3 * rng.standard_normal((m, n)), 0.1 * rng.standard_normal(n))
            for m, n in zip(sizes[:-1], sizes[1:])]


def true_dynamics(y, t):
    return np.array([y[1], -y[0] - 0.1 * y[1]])


TARGET_T = np.linspace(0.0, 2.0, 8)
TARGET = si.odeint(true_dynamics, Y0, TARGET_T)


def ode_net_loss(params, y0, t):
    pred = si.odeint(mlp, y0, t, args=(params,), rtol=1e-9, atol=1e-9)
    return np.mean((pred - TARGET) ** 2)


def test_ode_net_gradient_and_fit():
    params = init(np.random.default_rng(0))
    grad = fg.jit(fg.value_and_grad(ode_net_loss), backend="numba")
    value, g = grad(params, Y0, TARGET_T)
    flat, unravel = fg.tree.ravel(params)

    def flat_loss(p):
        return ode_net_loss(unravel(p), Y0, TARGET_T)
    fd = finite_differences(flat_loss, (flat,), h=1e-5)[0]
    np.testing.assert_allclose(fg.tree.ravel(g)[0], fd, rtol=1e-4, atol=1e-7)
    eager_value, eager_g = fg.value_and_grad(ode_net_loss)(params, Y0, TARGET_T)
    np.testing.assert_allclose(eager_value, value, rtol=1e-12)
    np.testing.assert_allclose(fg.tree.ravel(eager_g)[0], fg.tree.ravel(g)[0], rtol=1e-9)
    losses = [value]
    for _ in range(5):          # a few steps of gradient descent lower the loss
        params = [(w - 0.5 * gw, b - 0.5 * gb) for (w, b), (gw, gb) in zip(params, g)]
        value, g = grad(params, Y0, TARGET_T)
        losses.append(value)
    assert losses[-1] < 0.9 * losses[0], losses


def test_second_derivative():
    """The adjoint is itself an ode_solve, so it differentiates again."""
    def loss(k):
        ys = si.odeint(lambda y, t, k: -k * y * y, np.array([1.0]), T, args=(k,), **TOL)
        return np.sum(ys)

    def exact(k):          # y = 1 / (1 + k t)
        return np.sum(1.0 / (1.0 + k * T))

    want = np.sum(2 * T ** 2 / (1.0 + 0.7 * T) ** 3)
    assert np.isclose(exact(0.7), loss(0.7), rtol=1e-9)
    for run in (fg.grad(fg.grad(loss)), fg.jit(fg.grad(fg.grad(loss)), backend="interp")):
        np.testing.assert_allclose(run(0.7), want, rtol=1e-7)
