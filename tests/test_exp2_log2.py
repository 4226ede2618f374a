"""np.exp2 and np.log2 are primitives: exact where NumPy is exact (2**n at integers, n at powers
of two), which their old spellings exp(x ln 2) and log(x) / ln 2 were not (exp(3 ln 2) =
7.999999999999998, so int(np.log2(8)) could be 2), on every backend, in both dtypes."""

import numpy as np
import pytest

import fusegrad as fg

BACKENDS = ("interp", "numba")
EDGES = [np.inf, -np.inf, np.nan, 0.0, -0.0]


def _exact(got, ref):
    return np.all((got == ref) & (np.signbit(got) == np.signbit(ref)) |
                  np.isnan(got) & np.isnan(ref))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_at_integers_and_powers_of_two(backend, dtype):
    top = 1100 if dtype == np.float64 else 160
    n = np.arange(-top, top + 1).astype(dtype)
    exp2 = fg.jit(lambda x: np.exp2(x), backend=backend)
    log2 = fg.jit(lambda x: np.log2(x), backend=backend)
    with np.errstate(all="ignore"):
        x = np.concatenate([n, EDGES]).astype(dtype)
        assert _exact(exp2(x), np.exp2(x))
        lo, hi = (-1074, 1023) if dtype == np.float64 else (-149, 127)
        powers = np.ldexp(dtype(1), np.arange(lo, hi + 1))        # subnormals included
        y = np.concatenate([powers, EDGES, [-1.0, -np.inf]]).astype(dtype)
        assert _exact(log2(y), np.log2(y))
        assert _exact(log2(powers), np.arange(lo, hi + 1).astype(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_to_numpy_between(backend):
    x = np.random.default_rng(0).uniform(-30, 30, 257)
    np.testing.assert_allclose(fg.jit(lambda v: np.exp2(v), backend=backend)(x), np.exp2(x),
                               rtol=3e-16, atol=0)
    y = np.exp(x)
    np.testing.assert_allclose(fg.jit(lambda v: np.log2(v), backend=backend)(y), np.log2(y),
                               rtol=4e-16, atol=0)


def _f(x):
    return np.sum(np.exp2(x) * np.log2(x * x + 1.0))


def test_gradients_on_every_backend():
    x = np.array([-1.5, 0.0, 0.25, 3.0])
    u = x * x + 1.0
    expected = np.log(2) * np.exp2(x) * np.log2(u) + np.exp2(x) * 2 * x / (u * np.log(2))
    for backend in BACKENDS:
        np.testing.assert_allclose(fg.jit(fg.grad(_f), backend=backend)(x), expected, rtol=1e-14)
    t = fg.tensor(x, requires_grad=True)
    _f(t).backward()
    np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-14)
    second = fg.grad(lambda v: fg.grad(_f)(v).sum())(x)         # second order, finite differences
    h = 1e-6
    fd = [(fg.grad(_f)(x + h * e).sum() - fg.grad(_f)(x - h * e).sum()) / (2 * h)
          for e in np.eye(4)]
    np.testing.assert_allclose(second, fd, rtol=1e-6, atol=1e-8)
