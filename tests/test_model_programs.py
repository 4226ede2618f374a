"""Small models written the way scientists write them in plain NumPy and SciPy (the kind of
program HIPS autograd's examples are): a Gaussian process marginal likelihood through a
Cholesky factor, an LSTM over a few time steps, a variational autoencoder's ELBO with
scipy.stats.norm, an HMM forward pass with logsumexp, and a Gaussian mixture with
scipy.stats.multivariate_normal. Each runs unmodified on eager, interp and numba, and its
gradient matches central finite differences. Sizes are small: every time step is unrolled into
the compiled program, and Numba's compile time grows with it (issue 15)."""

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal, norm

import fusegrad as fg
from fusegrad.testing import assert_backends_agree, check_grads

rng = np.random.default_rng(31)

# -- a Gaussian process: log marginal likelihood of an RBF kernel ---------------------------------

GP_X = np.linspace(-2.0, 2.0, 7)[:, None]
GP_Y = np.cos(2 * GP_X[:, 0]) + 0.1 * rng.standard_normal(7)


def gp_log_marginal(params):
    log_scale, log_length, log_noise = params[0], params[1], params[2]
    diffs = (GP_X[:, None, :] - GP_X[None, :, :]) / np.exp(log_length)
    K = np.exp(log_scale) * np.exp(-0.5 * np.sum(diffs ** 2, axis=2))
    K = K + (np.exp(log_noise) + 1e-6) * np.eye(len(GP_Y))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, GP_Y))
    return (-0.5 * np.dot(GP_Y, alpha) - np.sum(np.log(np.diag(L)))
            - 0.5 * len(GP_Y) * np.log(2 * np.pi))


# -- an LSTM: hidden state over time, softmax outputs normalized with logsumexp ------------------

LSTM_IN, LSTM_HID, LSTM_OUT, LSTM_T, LSTM_SEQS = 3, 4, 3, 3, 2
LSTM_INPUTS = rng.standard_normal((LSTM_T, LSTM_SEQS, LSTM_IN))
LSTM_TARGETS = np.eye(LSTM_OUT)[rng.integers(0, LSTM_OUT, (LSTM_T, LSTM_SEQS))]


def sigmoid(x):
    return 0.5 * (np.tanh(x) + 1.0)


def lstm_log_likelihood(params):
    init_hidden, init_cells, change, forget, ingate, outgate, predict = params
    hiddens = np.repeat(init_hidden, LSTM_SEQS, axis=0)
    cells = np.repeat(init_cells, LSTM_SEQS, axis=0)
    total = 0.0
    for t in range(LSTM_T):
        full = np.hstack((np.ones((LSTM_SEQS, 1)), LSTM_INPUTS[t], hiddens))
        change_now = np.tanh(full @ change)
        cells = cells * sigmoid(full @ forget) + sigmoid(full @ ingate) * change_now
        hiddens = sigmoid(full @ outgate) * np.tanh(cells)
        logits = np.hstack((np.ones((LSTM_SEQS, 1)), hiddens)) @ predict
        log_probs = logits - logsumexp(logits, axis=1, keepdims=True)
        total = total + np.sum(log_probs * LSTM_TARGETS[t])
    return total / (LSTM_T * LSTM_SEQS)


def lstm_params():
    gate = (1 + LSTM_IN + LSTM_HID, LSTM_HID)
    return (0.1 * rng.standard_normal((1, LSTM_HID)), 0.1 * rng.standard_normal((1, LSTM_HID)),
            *(0.3 * rng.standard_normal(gate) for _ in range(4)),
            0.3 * rng.standard_normal((LSTM_HID + 1, LSTM_OUT)))


# -- a variational autoencoder: the ELBO of a Bernoulli decoder, one fixed noise draw -------------

VAE_DATA = (rng.uniform(size=(4, 6)) > 0.5).astype(float)
VAE_EPS = rng.standard_normal((4, 2))


def mlp(params, x):
    for W, b in params[:-1]:
        x = np.tanh(x @ W + b)
    W, b = params[-1]
    return x @ W + b


def vae_elbo(enc, dec):
    out = mlp(enc, VAE_DATA)
    mean, log_std = out[:, :2], out[:, 2:]
    z = mean + np.exp(log_std) * VAE_EPS
    logits = mlp(dec, z)
    log_lik = np.sum(VAE_DATA * logits - np.logaddexp(0.0, logits), axis=1)
    log_prior = np.sum(norm.logpdf(z, 0.0, 1.0), axis=1)
    log_q = np.sum(norm.logpdf(z, mean, np.exp(log_std)), axis=1)
    return np.mean(log_lik + log_prior - log_q)


def vae_params():
    def layers(sizes):
        return [(0.4 * rng.standard_normal((m, n)), 0.1 * rng.standard_normal(n))
                for m, n in zip(sizes[:-1], sizes[1:])]
    return layers([6, 5, 4]), layers([2, 5, 6])


# -- a hidden Markov model: the forward algorithm in log space ------------------------------------

HMM_OBS = rng.integers(0, 3, 5)


def hmm_log_likelihood(log_pi, log_A, log_B):
    """log p(observations): log_pi, log_A and log_B unnormalized, normalized here."""
    log_pi = log_pi - logsumexp(log_pi)
    log_A = log_A - logsumexp(log_A, axis=1, keepdims=True)
    log_B = log_B - logsumexp(log_B, axis=1, keepdims=True)
    log_alpha = log_pi + log_B[:, HMM_OBS[0]]
    for t in range(1, len(HMM_OBS)):
        log_alpha = logsumexp(log_alpha[:, None] + log_A, axis=0) + log_B[:, HMM_OBS[t]]
    return logsumexp(log_alpha)


# -- a Gaussian mixture: log likelihood with full covariances ------------------------------------

GMM_X = rng.standard_normal((10, 2)) + np.array([[1.0, -0.5]])


def gmm_log_likelihood(log_weights, means, chols):
    log_weights = log_weights - logsumexp(log_weights)
    per_component = []
    for k in range(len(means)):
        cov = chols[k] @ chols[k].T + 0.1 * np.eye(2)
        per_component.append(log_weights[k] + multivariate_normal.logpdf(GMM_X, means[k], cov))
    return np.sum(logsumexp(np.array(per_component), axis=0))


PROGRAMS = {
    "gaussian_process": (gp_log_marginal, (np.array([0.2, -0.3, -2.0]),), 0),
    "lstm": (lstm_log_likelihood, (lstm_params(),), 0),
    "vae": (vae_elbo, vae_params(), (0, 1)),
    "hmm": (hmm_log_likelihood, (rng.standard_normal(3), rng.standard_normal((3, 3)),
                                 rng.standard_normal((3, 3))), (0, 1, 2)),
    "mixture": (gmm_log_likelihood, (rng.standard_normal(2), rng.standard_normal((2, 2)),
                                     0.5 * rng.standard_normal((2, 2, 2))), (0, 1, 2)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_value_and_gradient_agree_on_every_backend(name):
    fun, args, argnums = PROGRAMS[name]
    assert_backends_agree(fg.value_and_grad(fun, argnums=argnums), *args, rtol=1e-9,
                          atol=1e-10)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradient_matches_finite_differences(name):
    fun, args, argnums = PROGRAMS[name]
    nums = argnums if isinstance(argnums, tuple) else (argnums,)

    def of_chosen(*chosen):
        full = list(args)
        for i, value in zip(nums, chosen):
            full[i] = value
        return fun(*full)
    check_grads(of_chosen, tuple(args[i] for i in nums), order=1)
