"""SciPy called as users call it (issue 14 item 5): scipy.special, scipy.stats' distributions and
scipy.signal's convolutions on eager tensors and tracers, through fusegrad.scipy's hook.

Forward values are compared with SciPy's own on the same arrays, on interp and eager, and in one
numba program; gradients are checked against finite differences to order 2 in float64 on eager,
interp and numba, a few programs each summing many functions (so Numba compiles little; the
report of check_grads names the argument, and so the function, that is wrong). Then the hook:
both import orders, frozen distributions, plain arrays untouched, errors that name the SciPy
function. This module imports fusegrad before SciPy's names, as users are told to.
"""

import importlib
import inspect
import pickle
import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.numpy as fnp
import fusegrad.scipy as fscipy
import scipy.signal
import scipy.special
import scipy.stats
from fusegrad.conversion import ConversionError
from fusegrad.testing import check_grads
from scipy.signal import convolve, convolve2d, correlate, correlate2d, fftconvolve
from scipy.special import log_softmax, logsumexp, polygamma, softmax
from scipy.stats import beta, gamma, multivariate_normal, norm, poisson, t

sp, st = scipy.special, scipy.stats
rng = np.random.default_rng(14)
X = rng.standard_normal((3, 4))
Y = rng.standard_normal((3, 4))
P = rng.uniform(0.05, 0.95, (3, 4))
POS = rng.uniform(0.3, 4.0, (3, 4))
W = rng.uniform(0.2, 3.0, (3, 4))
COV = np.array([[2.0, 0.3, 0.0, 0.1], [0.3, 1.0, 0.2, 0.0], [0.0, 0.2, 1.5, 0.0],
                [0.1, 0.0, 0.0, 1.0]])
K = np.array([0.0, 1.0, 2.5, -1.0])            # poisson: 2.5 and -1 are outside the support
K4 = np.array([0.0, 1.0, 2.0, 4.0])

# -- forward: fusegrad's value is SciPy's --------------------------------------------------------

FORWARD = {
    "logsumexp": (lambda x: logsumexp(x), [X]),
    "logsumexp_axis_keepdims": (lambda x: logsumexp(x, axis=1, keepdims=True), [X]),
    "logsumexp_axes": (lambda x: logsumexp(x, axis=(0, 1)), [X]),
    "logsumexp_b": (lambda x, b: logsumexp(x, axis=0, b=b), [X, W]),
    "logsumexp_b_zero": (lambda x: logsumexp(x, axis=1, b=np.array([1.0, 0.0, 2.0, 3.0])), [X]),
    "logsumexp_sign": (lambda x, b: logsumexp(x, axis=1, b=b - 1.5, return_sign=True), [X, W]),
    "softmax": (lambda x: softmax(x), [X]),
    "softmax_axis": (lambda x: softmax(x, axis=1), [X]),
    "softmax_axes": (lambda x: softmax(x, axis=(0,)), [X]),
    "log_softmax": (lambda x: log_softmax(x), [X]),
    "log_softmax_axis": (lambda x: log_softmax(x, axis=0), [X]),
    "expit": (sp.expit, [X]),
    "logit": (sp.logit, [P]),
    "erf": (sp.erf, [X]),
    "erfc": (sp.erfc, [3 * X]),
    "erfinv": (sp.erfinv, [2 * P - 1]),
    "erfcinv": (sp.erfcinv, [2 * P]),
    "gammaln": (sp.gammaln, [3 * X]),
    "gamma": (sp.gamma, [3 * X]),
    "digamma": (sp.digamma, [POS]),
    "psi": (sp.psi, [POS]),
    "polygamma": (lambda x: polygamma(2, x), [POS]),
    "polygamma_orders": (lambda x: polygamma(np.array([0, 1, 3, 1]), x), [POS]),
    "xlogy": (sp.xlogy, [X, POS]),
    "xlogy_zeros": (lambda y: sp.xlogy(np.array([0.0, 0.0, 0.0, 1.0]), y),
                    [np.array([0.0, np.inf, np.nan, 2.0])]),
    "xlog1py": (sp.xlog1py, [X, P]),
    "ndtr": (sp.ndtr, [X]),
    "log_ndtr": (sp.log_ndtr, [10 * X]),
    "ndtri": (sp.ndtri, [P]),
    "betaln": (sp.betaln, [POS, W]),
    "i0": (sp.i0, [3 * X]), "i1": (sp.i1, [3 * X]), "i0e": (sp.i0e, [3 * X]),
    "i1e": (sp.i1e, [3 * X]), "np_i0": (np.i0, [X]),
    "log1p": (sp.log1p, [POS]), "expm1": (sp.expm1, [X]),
    "norm_pdf": (lambda x: norm.pdf(x, 0.5, 2.0), [X]),
    "norm_logpdf": (lambda x, s: norm.logpdf(x, scale=s), [X, POS]),
    "norm_logpdf_bad_scale": (lambda x, s: norm.logpdf(x, 0.0, s - 2.0), [X, POS]),
    "norm_cdf": (lambda x: norm.cdf(x, 0.5), [X]),
    "norm_logcdf": (lambda x: norm.logcdf(10 * x), [X]),
    "norm_sf": (norm.sf, [X]),
    "norm_logsf": (lambda x: norm.logsf(10 * x), [X]),
    "norm_ppf": (lambda q: norm.ppf(q, 1.0, 2.0), [P]),
    "norm_frozen": (lambda x, mu: norm(mu, 2.0).logpdf(x), [X, Y]),
    "t_logpdf": (lambda x, df: t.logpdf(x, df, 0.3, 1.5), [X, POS]),
    "t_pdf": (lambda x: t.pdf(x, 4.0), [X]),
    "gamma_logpdf": (lambda x, a: gamma.logpdf(x, a, scale=2.0), [2 * X, POS]),
    "gamma_pdf": (lambda x: gamma.pdf(x, 2.5), [POS]),
    "beta_logpdf": (lambda x, a, b: beta.logpdf(x, a, b), [X, POS, W]),
    "beta_pdf": (lambda x: beta.pdf(x, 2.0, 3.0), [P]),
    "poisson_logpmf": (lambda mu: poisson.logpmf(K, mu), [POS]),
    "poisson_pmf": (lambda mu: poisson.pmf(3, mu), [POS]),
    "mvn_logpdf": (lambda x, m: multivariate_normal.logpdf(x, m, COV), [X, Y[0]]),
    "mvn_one_point": (lambda x: multivariate_normal.logpdf(x, np.zeros(4), 2.0), [X[0]]),
    "mvn_diagonal": (lambda x: multivariate_normal.pdf(x, np.ones(4), np.arange(1.0, 5.0)),
                     [X]),
    "mvn_dim_1": (lambda x: multivariate_normal.logpdf(x, 0.5, 2.0), [X[0]]),
    "mvn_traced_cov": (lambda x, c: multivariate_normal.logpdf(x, cov=c @ c.T + np.eye(4)),
                       [X, rng.standard_normal((4, 4))]),
    # frozen distributions: traced parameters, traced x, or both
    "norm_frozen_scale": (lambda x, s: norm(0.5, s).logpdf(x), [X, POS]),
    "norm_frozen_methods": (lambda x, mu: (norm(mu, 2.0).pdf(x), norm(loc=mu).cdf(x),
                                           norm(mu, 3.0).logcdf(x), norm(mu).sf(x)), [X, Y]),
    "norm_frozen_constant": (lambda x: (norm(0.5, 2.0).logpdf(x), norm(0.5).ppf(x)), [P]),
    "t_frozen": (lambda x, df: (t(df, 0.3, 1.5).logpdf(x), t(df=df).pdf(x)), [X, POS]),
    "gamma_frozen": (lambda x, a: (gamma(a, scale=2.0).logpdf(x), gamma(a).pdf(x)),
                     [2 * X, POS]),
    "beta_frozen": (lambda x, a, b: (beta(a, b).logpdf(x), beta(a, b, scale=2.0).pdf(x)),
                    [P, POS, W]),
    "poisson_frozen": (lambda mu: (poisson(mu).logpmf(K), poisson(mu, loc=1).pmf(K4)), [POS]),
    "mvn_frozen": (lambda x, m: (multivariate_normal(m, COV).logpdf(x),
                                 multivariate_normal(mean=m, cov=2.0).pdf(x)), [X, Y[0]]),
    "mvn_frozen_traced_cov": (lambda x, c: multivariate_normal(np.ones(4), c @ c.T + np.eye(4))
                              .logpdf(x), [X, rng.standard_normal((4, 4))]),
    "mvn_frozen_constant": (lambda x: (multivariate_normal(Y[0], COV).logpdf(x),
                                       multivariate_normal(Y[0], COV).pdf(x[0])), [X]),
}


def _same(expected, actual):
    expected, actual = np.asarray(expected), np.asarray(actual)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, \
        (actual.shape, expected.shape, actual.dtype, expected.dtype)
    np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-13, equal_nan=True)


@pytest.mark.parametrize("case", sorted(FORWARD))
def test_forward_matches_scipy(case):
    fun, args = FORWARD[case]
    expected = fun(*args)
    for backend in ("interp", "eager"):
        actual = fg.jit(fun, backend=backend)(*args)
        pairs = zip(expected, actual) if isinstance(expected, tuple) else [(expected, actual)]
        for e, a in pairs:
            _same(e, a)


def _special_outputs(x, p, pos, i):
    return (sp.gammaln(x), sp.gamma(pos), sp.erfc(x), sp.erfinv(np.tanh(x)), sp.digamma(pos),
            sp.polygamma(1, pos), sp.expit(x), sp.logit(p), sp.xlogy(x, pos), sp.i0e(x),
            sp.log_ndtr(x), logsumexp(x, axis=1), softmax(x, axis=0),
            convolve(x, pos[:2, :2], mode="same"), norm.logpdf(x), sp.gammaln(i),
            sp.xlogy(i, i), logsumexp(i))


def test_dtypes_match_scipy():
    """float32 stays float32 in the ufuncs, logsumexp, softmax and convolve; polygamma and the
    distributions compute in float64, as SciPy's; integers become float64."""
    args = (X.astype(np.float32), P.astype(np.float32), POS.astype(np.float32),
            rng.integers(1, 5, (3, 4)))
    for backend in ("interp", "eager"):
        for e, a in zip(_special_outputs(*args), fg.jit(_special_outputs, backend=backend)(*args)):
            a = np.asarray(a)
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=3e-6, atol=1e-6)


def _compiled_outputs(x, p):
    return sp.gammaln(p), sp.gamma(p), sp.erfc(x), sp.erfinv(p - 1.0), logsumexp(x, axis=1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_values_match_scipy(dtype):
    """lgamma, gamma and erfc as fused loops (C's lgamma, tgamma, erfc), erfinv a host step."""
    x, p = X.astype(dtype), (2 * P).astype(dtype)
    rtol = 1e-13 if dtype == np.float64 else 2e-6
    for e, a in zip(_compiled_outputs(x, p), fg.jit(_compiled_outputs, backend="numba")(x, p)):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-6 * (dtype == np.float32))


CONV_1D = [(n, m) for n in (1, 2, 4, 5) for m in (1, 2, 3, 5)]


@pytest.mark.parametrize("n, m", CONV_1D)
def test_one_dimensional_convolutions_match(n, m):
    a, v = rng.standard_normal(n), rng.standard_normal(m)
    for fun in (np.convolve, np.correlate, convolve, correlate, fftconvolve):
        for mode in ("full", "same", "valid"):
            _same(fun(a, v, mode), fg.jit(lambda a, v: fun(a, v, mode), backend="interp")(a, v))


@pytest.mark.parametrize("fun", [convolve, correlate, convolve2d, correlate2d])
def test_two_dimensional_convolutions_match(fun):
    for a_shape in [(3, 4), (4, 2), (5, 5)]:
        for v_shape in [(2, 3), (1, 2), (3, 3), (4, 5)]:
            a, v = rng.standard_normal(a_shape), rng.standard_normal(v_shape)
            for mode in ("full", "same", "valid"):
                try:
                    expected = fun(a, v, mode)
                except ValueError:
                    with pytest.raises(ValueError, match="at least as large"):
                        fg.jit(lambda a, v: fun(a, v, mode), backend="interp")(a, v)
                    continue
                _same(expected, fg.jit(lambda a, v: fun(a, v, mode), backend="interp")(a, v))


def test_convolutions_of_integers_and_of_three_dimensions():
    a, v = np.array([1, 2, 3]), np.array([1, -1])
    _same(np.convolve(a, v), fg.jit(lambda a: np.convolve(a, v), backend="interp")(a))
    a3, v3 = rng.standard_normal((3, 2, 4)), rng.standard_normal((2, 2, 3))
    _same(convolve(a3, v3, "same"),
          fg.jit(lambda a: convolve(a, v3, "same"), backend="interp")(a3))


# -- gradients: check_grads to order 2 on every backend -------------------------------------------

def special_program(x, p, pos, w, u, z):
    """Each function reads its own argument(s), so a wrong derivative is named."""
    total = np.sum(sp.gammaln(pos) + sp.gamma(pos) + sp.digamma(pos) + polygamma(2, pos))
    total = total + np.sum(sp.erfc(x) + sp.erfinv(0.9 * np.tanh(z)) + sp.erfcinv(p) + sp.ndtri(p))
    total = total + np.sum(sp.expit(u) * sp.logit(p) + sp.log_ndtr(3 * u) + sp.ndtr(u))
    total = total + np.sum(sp.xlogy(w, pos) + sp.xlog1py(w, p) + sp.betaln(pos, w))
    total = total + np.sum(sp.i0(x) + sp.i1(x) + sp.i0e(x) + sp.i1e(x))
    total = total + np.sum(logsumexp(u, axis=1) * 0.3) + logsumexp(z, b=w, axis=None)
    return total + np.sum(softmax(z, axis=0) * u) + np.sum(log_softmax(z) * p)


def stats_program(x, mu, s, df, a, b, lam, xm):
    total = np.sum(norm.logpdf(x, mu, s) + norm.pdf(x, 0.3, s) + norm.cdf(x, mu))
    total = total + np.sum(norm.logcdf(x, mu) + norm(mu, 2.0).logsf(x) + norm.ppf(0.5 * s / 4, mu))
    total = total + np.sum(t.logpdf(x, df, mu, s) + gamma.logpdf(s, a, scale=df))
    total = total + np.sum(beta.logpdf(0.5 * a / 4, a, b) + poisson.logpmf(K4, lam))
    return total + np.sum(multivariate_normal.logpdf(x, xm, COV))


MVN = multivariate_normal(Y[1], COV)           # SciPy's frozen object, of arrays


def frozen_program(x, mu, s, df, a, b, lam, m, c):
    """The frozen forms of the methods stats_program calls, parameters and x traced."""
    total = np.sum(norm(mu, s).logpdf(x) + norm(mu, s).pdf(x) + norm(loc=mu).cdf(x))
    total = total + np.sum(norm(mu, s).logcdf(x) + norm(mu, 2.0).logsf(x) + norm(mu, s).sf(x))
    total = total + np.sum(norm(mu, s).ppf(0.5 * s / 4) + t(df, mu, s).logpdf(x))
    total = total + np.sum(t(df).pdf(x) + gamma(a, scale=df).logpdf(s) + gamma(a).pdf(s))
    total = total + np.sum(beta(a, b).logpdf(0.5 * a / 4) + beta(a, b).pdf(0.4 * a / 4))
    total = total + np.sum(poisson(lam).logpmf(K4) + poisson(lam).pmf(K4))
    total = total + np.sum(multivariate_normal(m, COV).logpdf(x) + MVN.logpdf(x))
    total = total + np.sum(multivariate_normal(m, c @ c.T + np.eye(4)).logpdf(x))
    return total + np.sum(multivariate_normal(mean=m, cov=2.0).pdf(x) + MVN.pdf(x))


A5, V3 = rng.standard_normal(5), rng.standard_normal(3)
IMG, KER = rng.standard_normal((4, 5)), rng.standard_normal((2, 3))


def signal_program(a, v, img, ker):
    total = 0.0
    for mode in ("full", "same", "valid"):
        total = total + np.sum(np.sin(convolve(a, v, mode)))
        total = total + np.sum(correlate(v, a, mode) ** 2)
        total = total + np.sum(np.sin(convolve2d(img, ker, mode)))
        total = total + np.sum(correlate2d(ker, img, mode) ** 2)
    return total + np.sum(np.convolve(a, v) ** 2) + np.sum(np.correlate(a, v, "same") ** 3)


def special_compiled(x, p, pos):
    """Every special-function primitive, and its derivatives to order 3, compiled."""
    return np.sum(sp.gammaln(pos) + sp.gamma(pos) + sp.erfc(x) + sp.erfinv(p - 0.5)
                  + sp.erfcinv(p) + sp.log_ndtr(x) + sp.i0(x) + sp.i1(x) + sp.i0e(x) + sp.i1e(x)
                  + polygamma(1, pos))


def signal_compiled(img, ker):
    return np.sum(np.sin(convolve2d(img, ker, "same")))


def frozen_compiled(x, mu, s):
    """Frozen distributions with traced parameters and x, and SciPy's frozen MVN, compiled."""
    return np.sum(norm(mu, s).logpdf(x) + t(s + 2.0).logpdf(x)) + np.sum(
        MVN.logpdf(x) + multivariate_normal(mu[0], COV).logpdf(x))


PROGRAMS = {
    "special": (special_program, (X, P, POS, W, Y, 0.5 * X)),
    "stats": (stats_program, (X, Y, POS, POS + 2.0, POS + 1.0, W + 1.0, POS, X[0])),
    "frozen": (frozen_program, (X, Y, POS, POS + 2.0, POS + 1.0, W + 1.0, POS, X[0],
                                rng.standard_normal((4, 4)))),
    "signal": (signal_program, (A5, V3, IMG, KER)),
}


@pytest.mark.parametrize("backend", [None, "interp"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradients_to_order_two(name, backend):
    fun, args = PROGRAMS[name]
    check_grads(fun, args, order=2, backend=backend)


@pytest.mark.parametrize("fun, args", [(special_compiled, (X, P, POS)),
                                       (signal_compiled, (IMG, KER)),
                                       (frozen_compiled, (X, Y, POS))],
                         ids=["special", "signal", "frozen"])
def test_compiled_gradients_to_order_two(fun, args):
    """Numba compiles are seconds each: every new primitive, and one convolution (the same
    gather, matmul and scatter in any dimension and mode), rather than every function."""
    check_grads(fun, args, order=2, backend="numba")


def test_derivative_identities():
    """gammaln' = digamma, digamma' = polygamma(1), erfinv' = √π/2 exp(erfinv²), and the
    limits the rules choose where the formula is 0/0 (i1'(0) = 1/2, xlogy at x = y = 0)."""
    x = np.array([0.3, 1.7, 4.0])
    np.testing.assert_allclose(fg.grad(lambda x: np.sum(sp.gammaln(x)))(x), sp.digamma(x))
    np.testing.assert_allclose(fg.grad(lambda x: np.sum(sp.digamma(x)))(x), sp.polygamma(1, x))
    np.testing.assert_allclose(fg.grad(lambda x: np.sum(polygamma(2, x)))(x), sp.polygamma(3, x))
    q = np.array([-0.9, 0.1, 0.7])
    np.testing.assert_allclose(fg.grad(lambda q: np.sum(sp.erfinv(q)))(q),
                               np.sqrt(np.pi) / 2 * np.exp(sp.erfinv(q) ** 2))
    np.testing.assert_array_equal(fg.grad(lambda x: np.sum(sp.i1(x) + sp.i1e(x)))(np.zeros(2)),
                                  [1.0, 1.0])
    gx, gy = fg.grad(lambda x, y: np.sum(sp.xlogy(x, y)), argnums=(0, 1))(
        np.array([0.0, 0.0, 1.0]), np.array([0.0, 2.0, 2.0]))
    np.testing.assert_allclose(gx, [0.0, np.log(2.0), np.log(2.0)])
    np.testing.assert_allclose(gy, [0.0, 0.0, 0.5])
    far = np.array([-40.0, 40.0])          # φ/Φ far in the left tail, where Φ underflows
    np.testing.assert_allclose(fg.grad(lambda x: np.sum(sp.log_ndtr(x)))(far),
                               np.exp(norm.logpdf(far) - sp.log_ndtr(far)), rtol=1e-12)


def test_outside_the_support_the_gradient_is_zero_not_nan():
    g = fg.grad(lambda x: np.sum(gamma.logpdf(x, 2.0) + beta.logpdf(x, 2.0, 3.0)))(
        np.array([-1.0, 0.5, 2.0]))
    np.testing.assert_allclose(g, [0.0, (1 / 0.5 - 1) + (1 / 0.5 - 2 / 0.5), 1 / 2 - 1])
    g = fg.grad(lambda x: logsumexp(x, axis=1).sum())(np.array([[-np.inf, -np.inf], [1.0, 1.0]]))
    np.testing.assert_array_equal(g, [[0.0, 0.0], [0.5, 0.5]])


# -- the hook -----------------------------------------------------------------------------------

def test_covered_names_are_installed():
    names = fscipy.covered_names()
    assert names == sorted(names) and "scipy.special.logsumexp" in names
    assert "scipy.stats.norm.logpdf" in names and "scipy.signal.convolve" in names
    for name in names:
        module, _, rest = name.partition(".")[2].partition(".")
        owner = importlib.import_module(f"scipy.{module}")
        *path, attr = rest.split(".")
        for part in path:
            owner = getattr(owner, part)
        holder = owner if isinstance(owner, type) else type(owner) if path else owner
        value = getattr(holder, attr)
        if isinstance(value, np.ufunc):
            assert fnp.HANDLED_UFUNCS[value] is fscipy.HANDLED[name], name
        else:
            assert value._fusegrad_impl is fscipy.HANDLED[name], name


def test_wrappers_leave_plain_arrays_to_scipy():
    assert logsumexp is sp.logsumexp and logsumexp.__wrapped__.__module__.startswith("scipy.")
    assert inspect.signature(logsumexp) == inspect.signature(logsumexp.__wrapped__)
    assert logsumexp.__doc__ == logsumexp.__wrapped__.__doc__
    assert type(logsumexp(X)) is type(logsumexp.__wrapped__(X))
    assert norm.logpdf(X).tolist() == norm.logpdf.__wrapped__(norm, X).tolist()
    assert pickle.loads(pickle.dumps(sp.logsumexp)) is sp.logsumexp


def test_frozen_multivariate_normals():
    """multivariate_normal(mean, cov) of a tensor or tracer is fusegrad's frozen distribution;
    SciPy's, of arrays, stays SciPy's and routes logpdf and pdf of a tensor or tracer x."""
    assert type(MVN).__name__ == "multivariate_normal_frozen"
    assert MVN.logpdf(X).tolist() == MVN.logpdf.__wrapped__(MVN, X).tolist()
    frozen = multivariate_normal(fg.tensor(Y[1]), COV)
    assert isinstance(frozen, fscipy.stats.FrozenMultivariateNormal) and frozen.dim == 4
    np.testing.assert_allclose(frozen.mean.numpy(), MVN.mean)
    np.testing.assert_allclose(frozen.cov, MVN.cov)
    np.testing.assert_allclose(frozen.pdf(X).numpy(), MVN.pdf(X), rtol=1e-12)
    x = fg.tensor(X, requires_grad=True)
    MVN.logpdf(x).sum().backward()
    np.testing.assert_allclose(x.grad, -np.linalg.solve(COV, (X - Y[1]).T).T, rtol=1e-12)
    mean = fg.tensor(Y[1], requires_grad=True)
    multivariate_normal(mean, COV).logpdf(X).sum().backward()
    np.testing.assert_allclose(mean.grad, np.linalg.solve(COV, (X - Y[1]).sum(0)), rtol=1e-12)


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_frozen_forms_under_jit(backend):
    """The forward of every frozen method, traced and compiled (one program)."""
    for name in ("norm_frozen_methods", "mvn_frozen", "mvn_frozen_constant"):
        fun, args = FORWARD[name]
        for want, got in zip(fun(*args), fg.jit(fun, backend=backend)(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


def test_eager_tensors_pytorch_style():
    x = fg.tensor(POS, requires_grad=True)
    y = sp.gammaln(x).sum() + logsumexp(x) + norm(1.0, 2.0).logpdf(x).sum()
    assert isinstance(y, fg.Tensor)
    y.backward()
    expected = sp.digamma(POS) + sp.softmax(POS) - (POS - 1.0) / 4.0
    np.testing.assert_allclose(x.grad, expected, rtol=1e-12)


def test_a_scipy_original_bound_elsewhere_says_to_import_fusegrad_first():
    original = sp.logsumexp.__wrapped__          # what a name bound before fusegrad holds
    for backend in ("eager", "interp"):
        with pytest.raises(ConversionError, match="scipy.special.logsumexp reached SciPy's own "
                                                  "function .*Import fusegrad first"):
            fg.jit(fg.grad(lambda x: original(x)), backend=backend)(X)


def test_uncovered_scipy_functions_are_named():
    with pytest.raises(ConversionError, match="^scipy.stats.entropy is not differentiable"):
        fg.grad(lambda x: st.entropy(x * x))(P)
    with pytest.raises(TypeError, match="scipy.special.zeta"):
        fg.grad(lambda x: np.sum(sp.zeta(x, 2.0)))(POS)
    with pytest.raises(ConversionError, match="^scipy.stats.erlang.logpdf"):  # gamma's subclass
        fg.grad(lambda x: np.sum(st.erlang.logpdf(x, 2)))(POS)


def test_argument_errors():
    with pytest.raises(TypeError, match="order n must be concrete"):
        fg.jit(lambda n, x: polygamma(n, x), backend="interp")(np.array(1), POS)
    with pytest.raises(ValueError, match="non-negative integers"):
        fg.grad(lambda x: np.sum(polygamma(1.5, x)))(POS)
    with pytest.raises(ValueError, match="mode must be one of"):
        fg.grad(lambda a: np.sum(np.convolve(a, V3, "wide")))(A5)
    with pytest.raises(ValueError, match="same dimensionality"):
        fg.grad(lambda a: np.sum(convolve(a, KER)))(A5)
    with pytest.raises(ValueError, match="acceptable method"):
        fg.grad(lambda a: np.sum(convolve(a, V3, method="slow")))(A5)
    with pytest.raises(NotImplementedError, match="boundary='fill'"):
        fg.grad(lambda a: np.sum(convolve2d(a, KER, boundary="wrap")))(IMG)


IMPORT_ORDERS = """
import sys
from scipy.special import logsumexp as early      # bound before fusegrad: rebound by its import
import fusegrad as fg
import numpy as np
assert "scipy.stats" not in sys.modules and "scipy.signal" not in sys.modules
from scipy.signal import convolve                  # imported after: installed as it loads
import scipy.stats
x = np.array([0.5, 1.0, 2.0])
f = lambda x: early(x) + np.sum(convolve(x, x)) + np.sum(scipy.stats.norm.logpdf(x))
print((fg.jit(fg.grad(f), backend="interp")(x).tolist(), fg.grad(f)(x).tolist()))
"""


def test_import_orders_and_import_cost():
    """In a fresh interpreter: fusegrad's import loads no SciPy; a name bound from SciPy before
    fusegrad, and SciPy modules imported after it, both dispatch."""
    out = subprocess.run([sys.executable, "-c", "import sys, fusegrad; "
                          "print(sorted(m for m in sys.modules if m.startswith('scipy')))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    out = subprocess.run([sys.executable, "-c", IMPORT_ORDERS], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    x = np.array([0.5, 1.0, 2.0])
    expected = sp.softmax(x) + 2 * np.sum(x) - x
    interp, eager = eval(out.stdout)
    np.testing.assert_allclose(interp, expected, rtol=1e-12)
    np.testing.assert_allclose(eager, expected, rtol=1e-12)
