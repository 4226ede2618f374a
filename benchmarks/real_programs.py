"""Four programs of the kinds scientists write in plain NumPy and SciPy (the kinds HIPS
autograd's examples are), each a loss of parameters whose gradient is wanted:

- gmm: a Gaussian mixture's negative log likelihood, a loop over components of
  scipy.stats.multivariate_normal.logpdf with covariances LᵀL, combined by logsumexp.
- mog_vi: black-box variational inference with a mixture of diagonal Gaussians as the
  approximation (Graves' trick: sample each component, weight its ELBO by the mixture weight),
  scipy.stats.norm.logpdf everywhere, the noise drawn outside and passed in.
- gp: a Gaussian process's negative log marginal likelihood with an RBF kernel with one
  lengthscale per input dimension, through a Cholesky factor and scipy.linalg.solve_triangular.
- convnet: a LeNet-style convnet (two scipy.signal.convolve layers, each a loop over filters,
  max pooling by reshape, two dense layers) with a softmax cross-entropy loss and L2.

Each builder takes the NumPy namespace (numpy, or jax.numpy in the benchmark's jax column), the
SciPy names it uses (`scipy_names()` or `jax_scipy_names()`) and a size ("bench": realistic
but modest, as timed by compile_time.py; "small": for the tests' finite differences), and
returns (loss, args, argnums) with the data built from a fixed seed.
"""

from types import SimpleNamespace

import numpy


def scipy_names():
    """SciPy's functions, as a user imports them (after fusegrad, which routes them)."""
    import scipy.linalg
    import scipy.signal
    import scipy.special
    import scipy.stats
    return SimpleNamespace(logsumexp=scipy.special.logsumexp, norm=scipy.stats.norm,
                           mvn=scipy.stats.multivariate_normal, convolve=scipy.signal.convolve,
                           solve_triangular=scipy.linalg.solve_triangular)


def jax_scipy_names():
    import jax.scipy as js
    return SimpleNamespace(logsumexp=js.special.logsumexp, norm=js.stats.norm,
                           mvn=js.stats.multivariate_normal, convolve=js.signal.convolve,
                           solve_triangular=js.linalg.solve_triangular)


def gmm(np, sp, size="bench"):
    K, D, N = (10, 2, 300) if size == "bench" else (2, 2, 8)
    rng = numpy.random.default_rng(10)
    centres = rng.standard_normal((3, D)) * 2.0
    data = centres[rng.integers(0, 3, N)] + 0.4 * rng.standard_normal((N, D))

    def loss(log_proportions, means, lower_triangles):
        log_proportions = log_proportions - sp.logsumexp(log_proportions)
        cluster_lls = []
        for k in range(K):
            cov = lower_triangles[k].T @ lower_triangles[k]
            cluster_lls.append(log_proportions[k] + sp.mvn.logpdf(data, means[k], cov))
        return -np.sum(sp.logsumexp(np.vstack(cluster_lls), axis=0))
    args = (0.1 * rng.standard_normal(K), rng.standard_normal((K, D)),
            numpy.eye(D) + 0.1 * rng.standard_normal((K, D, D)))
    return loss, args, (0, 1, 2)


def mog_vi(np, sp, size="bench"):
    k, S = (10, 40) if size == "bench" else (3, 4)
    D = 2
    rng = numpy.random.default_rng(11)

    def log_density(x):                       # the target: a bimodal funnel in (mu, log_sigma)
        mu, log_sigma = x[:, 0], x[:, 1]
        first = sp.norm.logpdf(log_sigma, 0.0, 1.35) + sp.norm.logpdf(mu, -0.5,
                                                                       np.exp(log_sigma))
        second = sp.norm.logpdf(log_sigma, 0.1, 1.35) + sp.norm.logpdf(mu, 0.5,
                                                                        np.exp(log_sigma))
        return np.logaddexp(first, second)

    def unpack(params):
        log_weights = params[:k] - sp.logsumexp(params[:k])
        components = np.reshape(params[k:], (k, 2 * D))
        return log_weights, components[:, :D], components[:, D:]

    def mixture_log_density(params, x):
        log_weights, means, log_stds = unpack(params)
        per_component = np.vstack([np.sum(sp.norm.logpdf(x, means[j], np.exp(log_stds[j])),
                                          axis=-1) for j in range(k)]).T
        return sp.logsumexp(per_component + log_weights, axis=1)

    def loss(params, noise):
        log_weights, means, log_stds = unpack(params)
        elbos = []
        for j in range(k):
            samples = noise[j] * np.exp(log_stds[j]) + means[j]
            elbos.append(np.mean(log_density(samples) - mixture_log_density(params, samples)))
        return -np.sum(np.stack(elbos) * np.exp(log_weights))
    init = numpy.concatenate([numpy.ones(k)] + [numpy.concatenate(
        [-1.0 + 0.5 * rng.standard_normal(D), -1.0 + 0.1 * rng.standard_normal(D)])
        for _ in range(k)])
    return loss, (init, rng.standard_normal((k, S, D))), 0


def gp(np, sp, size="bench"):
    N, D = (50, 2) if size == "bench" else (6, 2)
    rng = numpy.random.default_rng(12)
    x = rng.uniform(-2.0, 2.0, (N, D))
    y = numpy.cos(2.0 * x[:, 0]) * numpy.sin(x[:, 1]) + 0.1 * rng.standard_normal(N)

    def rbf(log_scale, log_lengths, a, b):
        diffs = (a[:, None, :] - b[None, :, :]) / np.exp(log_lengths)
        return np.exp(log_scale) * np.exp(-0.5 * np.sum(diffs ** 2, axis=2))

    def loss(params):
        mean, noise = params[0], np.exp(params[1]) + 1e-4
        K = rbf(params[2], params[3:], x, x) + noise * np.eye(N)
        L = np.linalg.cholesky(K)
        r = y - mean
        alpha = sp.solve_triangular(L.T, sp.solve_triangular(L, r, lower=True), lower=False)
        log_lik = (-0.5 * np.dot(r, alpha) - np.sum(np.log(np.diag(L)))
                   - 0.5 * N * np.log(2 * np.pi))
        return -log_lik
    return loss, (numpy.array([0.1, -2.0, 0.2] + [-0.3] * D),), 0


def convnet(np, sp, size="bench"):
    """LeNet-5's shape at batch 32 on 28x28 images ("small": 2 images of 10x10)."""
    if size == "bench":
        B, H, (k1, f1), (k2, f2), hidden, classes = 32, 28, (5, 6), (5, 16), (120, 84), 10
    else:
        B, H, (k1, f1), (k2, f2), hidden, classes = 2, 10, (3, 2), (3, 2), (3,), 3
    rng = numpy.random.default_rng(13)
    images = rng.uniform(0.0, 1.0, (B, 1, H, H))
    labels = numpy.eye(classes)[rng.integers(0, classes, B)]

    def conv(x, filters, biases):           # one scipy.signal.convolve per output channel
        out = np.concatenate([sp.convolve(x, filters[o:o + 1], mode="valid")
                              for o in range(filters.shape[0])], axis=1)
        return out + biases[None, :, None, None]

    def maxpool(x):
        b, c, h, w = x.shape
        return np.max(np.max(x.reshape((b, c, h // 2, 2, w // 2, 2)), axis=3), axis=4)

    def loss(params):
        (w1, b1), (w2, b2), *dense = params
        x = maxpool(np.tanh(conv(images, w1, b1)))
        x = maxpool(np.tanh(conv(x, w2, b2)))
        x = x.reshape((B, -1))
        for W, b in dense[:-1]:
            x = np.tanh(x @ W + b)
        W, b = dense[-1]
        logits = x @ W + b
        log_probs = logits - sp.logsumexp(logits, axis=1, keepdims=True)
        l2 = sum(np.sum(W * W) for W, _ in params)
        return -np.sum(log_probs * labels) / B + 1e-3 * l2
    side = ((H - k1 + 1) // 2 - k2 + 1) // 2
    sizes = [f2 * side * side, *hidden, classes]
    params = [(0.3 * rng.standard_normal((f1, 1, k1, k1)), 0.1 * rng.standard_normal(f1)),
              (0.3 * rng.standard_normal((f2, f1, k2, k2)), 0.1 * rng.standard_normal(f2))]
    params += [(rng.standard_normal((m, n)) / numpy.sqrt(m), 0.1 * rng.standard_normal(n))
               for m, n in zip(sizes[:-1], sizes[1:])]
    return loss, (params,), 0


PROGRAMS = {"gmm": gmm, "mog_vi": mog_vi, "gp": gp, "convnet": convnet}
