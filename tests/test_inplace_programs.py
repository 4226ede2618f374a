"""Issue 23's program patterns, written as NumPy users write them and run unmodified: in-place
operators (`loglik += ...`, `vx -= ...`, `v += dt * a`), arrays preallocated with np.zeros and
filled with traced values, constant tables and grids indexed with traced indices (np.eye(k)[y]).
Each gradient is checked against central differences of the same function run by NumPy, on the
first call of a fresh fg.grad (eager) and fg.jit(fg.grad) (interp, numba); values against NumPy.
"""

import numpy as np
import pytest

import fusegrad as fg
from domains import central_difference

BACKENDS = ("eager", "interp", "numba")
RNG = np.random.default_rng(23)


def assert_program(f, theta, *rest, rtol=1e-6, atol=1e-8):
    """f(theta, *rest): value and gradient in theta on every backend, the first call each."""
    expected_grad = central_difference(lambda t: f(t, *rest), theta)
    expected = f(theta.copy(), *rest)
    for backend in BACKENDS:
        grad = fg.grad(f) if backend == "eager" else fg.jit(fg.grad(f), backend=backend)
        np.testing.assert_allclose(grad(theta.copy(), *rest), expected_grad, rtol=rtol,
                                   atol=atol, err_msg=backend)
        value = fg.jit(f, backend=backend)(theta.copy(), *rest)
        np.testing.assert_allclose(value, expected, rtol=1e-10, err_msg=backend)


# -- an RNN and an LSTM accumulating a log-likelihood with += --------------------------------

H, D, K, T = 3, 2, 3, 4
XS = RNG.normal(size=(T, D))
YS = np.array([0, 2, 1, 2])


def rnn_loglik(theta, xs, ys):
    W = theta[:H * H].reshape(H, H)
    U = theta[H * H:H * H + H * D].reshape(H, D)
    V = theta[H * H + H * D:].reshape(K, H)
    h = np.zeros(H)
    loglik = 0.0
    for t in range(len(xs)):
        h = np.tanh(W @ h + U @ xs[t])
        logits = V @ h
        loglik += logits[ys[t]] - np.log(np.sum(np.exp(logits)))
    return loglik


def lstm_loglik(theta, xs, ys):
    Wg = theta[:4 * H * (H + D)].reshape(4 * H, H + D)
    V = theta[4 * H * (H + D):].reshape(K, H)
    h, c = np.zeros(H), np.zeros(H)
    loglik = 0.0
    for t in range(len(xs)):
        gates = Wg @ np.concatenate([h, xs[t]])
        i, f, o = (1 / (1 + np.exp(-gates[k * H:(k + 1) * H])) for k in range(3))
        c = f * c + i * np.tanh(gates[3 * H:])
        h = o * np.tanh(c)
        logits = V @ h
        logits -= np.max(logits)                    # in place on a traced value
        loglik += np.sum(logits[ys[t]]) - np.log(np.sum(np.exp(logits)))
    return loglik


@pytest.mark.parametrize("model, n", [(rnn_loglik, H * H + H * D + K * H),
                                      (lstm_loglik, 4 * H * (H + D) + K * H)])
def test_recurrent_log_likelihood_accumulated_with_plus_equals(model, n):
    assert_program(model, 0.5 * RNG.normal(size=n), XS, YS)


def test_a_0d_accumulator_rebinds_as_numpys_scalar_does():
    """loglik += ... on a reduction's 0-d result: NumPy makes a new scalar, so a name bound to
    the old one keeps it."""
    def f(x):
        total = np.sum(x)
        first = total
        total += np.sum(x ** 2)
        return total * 10.0 + first
    x = np.array([0.5, -1.5, 2.0])
    for backend in BACKENDS:
        assert fg.jit(f, backend=backend)(x) == pytest.approx(f(x)), backend


# -- a fluid-like simulation: fields updated with -=, a constant grid indexed by traced indices --

N = 5


def fluid(v0):
    vx, vy = v0[:N * N].reshape(N, N) * 1.0, v0[N * N:].reshape(N, N) * 1.0
    rows, cols = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")   # a constant grid
    smoke = np.linspace(0.0, 1.0, N * N).reshape(N, N)
    for _ in range(2):
        p = np.zeros((N, N))
        div = -0.5 * (np.roll(vx, -1, 1) - np.roll(vx, 1, 1) + np.roll(vy, -1, 0)
                      - np.roll(vy, 1, 0))
        for _ in range(3):
            p = (div + np.roll(p, 1, 0) + np.roll(p, -1, 0) + np.roll(p, 1, 1)
                 + np.roll(p, -1, 1)) / 4.0
        vx -= 0.5 * (np.roll(p, -1, 1) - np.roll(p, 1, 1))
        vy -= 0.5 * (np.roll(p, -1, 0) - np.roll(p, 1, 0))
        x, y = cols - 0.3 * vx, rows - 0.3 * vy              # where each cell came from
        left, top = np.floor(x).astype(int), np.floor(y).astype(int)
        wx, wy = x - left, y - top
        left, top = np.mod(left, N), np.mod(top, N)
        right, bottom = np.mod(left + 1, N), np.mod(top + 1, N)
        smoke = ((1 - wy) * ((1 - wx) * smoke[top, left] + wx * smoke[top, right])
                 + wy * ((1 - wx) * smoke[bottom, left] + wx * smoke[bottom, right]))
    return np.sum(smoke * np.linspace(-1.0, 1.0, N * N).reshape(N, N))


def test_fluid_simulation_updates_fields_in_place_and_indexes_a_constant_grid():
    # small velocities: the traced floor never crosses a cell boundary within the FD step
    assert_program(fluid, 0.2 * RNG.normal(size=2 * N * N), rtol=1e-5, atol=1e-7)


# -- an n-body integrator filling a preallocated trajectory -------------------------------

BODIES, STEPS = 3, 4
MASSES = np.array([1.0, 0.5, 2.0])


def nbody(state, masses):
    x = state[:2 * BODIES].reshape(BODIES, 2)
    v = state[2 * BODIES:].reshape(BODIES, 2) * 1.0
    traj = np.zeros((STEPS, BODIES, 2))
    dt = 0.05
    for t in range(STEPS):
        diff = x[:, None, :] - x[None, :, :]
        r2 = np.sum(diff ** 2, axis=-1) + 0.1
        a = -np.sum(diff / r2[..., None] ** 1.5 * masses[None, :, None], axis=1)
        v += dt * a
        x = x + dt * v
        traj[t] = x
    return np.sum(traj[-1] ** 2) + np.sum(traj[:, 0, 0])


def test_nbody_fills_a_preallocated_trajectory():
    state = np.concatenate([RNG.normal(size=2 * BODIES), 0.3 * RNG.normal(size=2 * BODIES)])
    assert_program(nbody, state, MASSES)


# -- softmax regression with a one-hot table np.eye(k)[y] ----------------------------------

def softmax_regression(w, X, y):
    k = 3
    W = w.reshape(X.shape[1], k)
    logits = X @ W
    logits -= np.max(logits, axis=1, keepdims=True)
    logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.sum(np.eye(k)[y] * logp) / len(y)


def test_softmax_regression_with_a_one_hot_gather():
    X = RNG.normal(size=(6, 2))
    y = np.array([0, 2, 1, 1, 0, 2])        # dynamic under jit: np.eye(k)[y] is a gather
    assert_program(softmax_regression, RNG.normal(size=6), X, y)
