"""scipy.stats' distributions on tensors and tracers: the methods users differentiate.

Each distribution is a namespace of functions with SciPy's signatures (`norm.logpdf(x, loc=0,
scale=1)`, `t.logpdf(x, df, loc=0, scale=1)`, ...), so fusegrad.scipy.stats.norm.logpdf(x) reads
as SciPy's, and fusegrad.scipy routes `scipy.stats.norm.logpdf(x)` and frozen distributions
(`scipy.stats.norm(mu, sigma).logpdf(x)`, whose methods call the distribution's) here when an
argument is a tensor or tracer. multivariate_normal's frozen form has methods of its own:
`multivariate_normal(mean, cov)` with a tensor or traced mean or cov is a
FrozenMultivariateNormal (its `__call__` is routed here), and SciPy's frozen object, made of
arrays, has its logpdf and pdf routed here when x is a tensor or tracer.

As SciPy: results are float64 (SciPy computes distributions in float64 whatever the input), a
point outside the support has logpdf -inf (pdf 0), and invalid parameters (scale <= 0, a shape
parameter out of range) give nan. Outside the support the formula is evaluated at a harmless
point inside it and then replaced (the double-where pattern), so the gradient there is 0, never
nan. Written with fusegrad.numpy: the logs of the normal CDF and the gamma functions are
primitives (log_ndtr, lgamma), the rest composes. multivariate_normal.logpdf factors cov with
Cholesky: in NumPy when cov is a constant, through np.linalg.cholesky and np.linalg.solve (which
must then have fusegrad implementations) when it is differentiated.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from .. import numpy as fnp
from ..dispatch import level
from ..numpy.constructors import asarray
from ..numpy.special import betaln, gammaln, log_ndtr, ndtr, ndtri, xlog1py, xlogy

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _f64(x):
    """x as a float64 operand (SciPy's distributions compute in float64)."""
    if type(x) in (int, float, bool):
        return float(x)
    x = asarray(x)
    if level(x):
        return x if fnp._dtype(x) == np.float64 else fnp.astype(x, np.float64)
    return np.asarray(x, dtype=np.float64)


def _standardize(x, loc, scale):
    x, loc, scale = _f64(x), _f64(loc), _f64(scale)
    return fnp.true_divide(fnp.subtract(x, loc), scale), scale


def _where_valid(valid, out):
    """out where the parameters are valid, nan elsewhere (no op when they are constants that
    are all valid)."""
    if not level(valid) and np.all(valid):
        return out
    return fnp.where(valid, out, np.nan)


def _distribution(name, **methods):
    """A namespace of the methods, each named as SciPy's (`norm.logpdf`)."""
    for method, fn in methods.items():
        fn.__name__, fn.__qualname__ = method, f"{name}.{method}"
    return SimpleNamespace(**methods)


def _on_support(inside, z, safe, formula, outside):
    """formula(z) where `inside`, else `outside`; formula sees `safe` outside, so neither its
    value nor its gradient there is nan."""
    if not level(inside) and np.all(inside):
        return formula(z)
    return fnp.where(inside, formula(fnp.where(inside, z, safe)), outside)


# -- norm ---------------------------------------------------------------------------------------

def _norm_logpdf(x, loc=0, scale=1):
    """-z²/2 - log(√(2π) scale), z = (x - loc) / scale."""
    z, scale = _standardize(x, loc, scale)
    out = fnp.subtract(fnp.multiply(fnp.multiply(z, z), -0.5), _LOG_SQRT_2PI)
    return _where_valid(fnp.greater(scale, 0), fnp.subtract(out, fnp.log(scale)))


def _norm_pdf(x, loc=0, scale=1):
    """exp(norm.logpdf)."""
    return fnp.exp(_norm_logpdf(x, loc, scale))


def _norm_cdf(x, loc=0, scale=1):
    """Φ(z) (ndtr), z = (x - loc) / scale."""
    z, scale = _standardize(x, loc, scale)
    return _where_valid(fnp.greater(scale, 0), ndtr(z))


def _norm_logcdf(x, loc=0, scale=1):
    """log Φ(z) (log_ndtr, accurate in the left tail)."""
    z, scale = _standardize(x, loc, scale)
    return _where_valid(fnp.greater(scale, 0), log_ndtr(z))


def _norm_sf(x, loc=0, scale=1):
    """Φ(-z)."""
    z, scale = _standardize(x, loc, scale)
    return _where_valid(fnp.greater(scale, 0), ndtr(fnp.negative(z)))


def _norm_logsf(x, loc=0, scale=1):
    """log Φ(-z) (accurate in the right tail)."""
    z, scale = _standardize(x, loc, scale)
    return _where_valid(fnp.greater(scale, 0), log_ndtr(fnp.negative(z)))


def _norm_ppf(q, loc=0, scale=1):
    """loc + scale Φ⁻¹(q) (ndtri)."""
    q, loc, scale = _f64(q), _f64(loc), _f64(scale)
    out = fnp.add(loc, fnp.multiply(scale, ndtri(q)))
    return _where_valid(fnp.greater(scale, 0), out)


norm = _distribution("norm", pdf=_norm_pdf, logpdf=_norm_logpdf, cdf=_norm_cdf,
                     logcdf=_norm_logcdf, sf=_norm_sf, logsf=_norm_logsf, ppf=_norm_ppf)


# -- t, gamma, beta -----------------------------------------------------------------------------

def _t_logpdf(x, df, loc=0, scale=1):
    """Student's t log density, through gammaln and log1p(z²/df)."""
    z, scale = _standardize(x, loc, scale)
    df = _f64(df)
    half = fnp.multiply(fnp.add(df, 1.0), 0.5)
    out = fnp.subtract(gammaln(half), gammaln(fnp.multiply(df, 0.5)))
    out = fnp.subtract(out, fnp.multiply(fnp.log(fnp.multiply(df, math.pi)), 0.5))
    out = fnp.subtract(out, fnp.multiply(half, fnp.log1p(fnp.true_divide(fnp.multiply(z, z),
                                                                         df))))
    valid = fnp.logical_and(fnp.greater(scale, 0), fnp.greater(df, 0))
    return _where_valid(valid, fnp.subtract(out, fnp.log(scale)))


def _t_pdf(x, df, loc=0, scale=1):
    """exp(t.logpdf)."""
    return fnp.exp(_t_logpdf(x, df, loc, scale))


t = _distribution("t", pdf=_t_pdf, logpdf=_t_logpdf)


def _gamma_logpdf(x, a, loc=0, scale=1):
    """xlogy(a - 1, z) - z - gammaln(a) - log(scale) for z >= 0, -inf below."""
    z, scale = _standardize(x, loc, scale)
    a = _f64(a)

    def formula(z):
        return fnp.subtract(fnp.subtract(xlogy(fnp.subtract(a, 1.0), z), z), gammaln(a))
    out = _on_support(fnp.greater_equal(z, 0), z, 1.0, formula, -np.inf)
    valid = fnp.logical_and(fnp.greater(scale, 0), fnp.greater(a, 0))
    return _where_valid(valid, fnp.subtract(out, fnp.log(scale)))


def _gamma_pdf(x, a, loc=0, scale=1):
    """exp(gamma.logpdf)."""
    return fnp.exp(_gamma_logpdf(x, a, loc, scale))


gamma = _distribution("gamma", pdf=_gamma_pdf, logpdf=_gamma_logpdf)


def _beta_logpdf(x, a, b, loc=0, scale=1):
    """xlogy(a - 1, z) + xlog1py(b - 1, -z) - betaln(a, b) - log(scale) on [0, 1], -inf
    outside."""
    z, scale = _standardize(x, loc, scale)
    a, b = _f64(a), _f64(b)

    def formula(z):
        out = fnp.add(xlog1py(fnp.subtract(b, 1.0), fnp.negative(z)),
                      xlogy(fnp.subtract(a, 1.0), z))
        return fnp.subtract(out, betaln(a, b))
    inside = fnp.logical_and(fnp.greater_equal(z, 0), fnp.less_equal(z, 1))
    out = _on_support(inside, z, 0.5, formula, -np.inf)
    valid = fnp.logical_and(fnp.greater(scale, 0),
                            fnp.logical_and(fnp.greater(a, 0), fnp.greater(b, 0)))
    return _where_valid(valid, fnp.subtract(out, fnp.log(scale)))


def _beta_pdf(x, a, b, loc=0, scale=1):
    """exp(beta.logpdf)."""
    return fnp.exp(_beta_logpdf(x, a, b, loc, scale))


beta = _distribution("beta", pdf=_beta_pdf, logpdf=_beta_logpdf)


# -- poisson ------------------------------------------------------------------------------------

def _poisson_logpmf(k, mu, loc=0):
    """xlogy(k, mu) - gammaln(k + 1) - mu at integers k >= 0, -inf elsewhere."""
    k = fnp.subtract(_f64(k), _f64(loc))
    mu = _f64(mu)

    def formula(k):
        return fnp.subtract(fnp.subtract(xlogy(k, mu), gammaln(fnp.add(k, 1.0))), mu)
    inside = fnp.logical_and(fnp.greater_equal(k, 0), fnp.equal(k, fnp.floor(k)))
    return _where_valid(fnp.greater_equal(mu, 0), _on_support(inside, k, 0.0, formula, -np.inf))


def _poisson_pmf(k, mu, loc=0):
    """exp(poisson.logpmf)."""
    return fnp.exp(_poisson_logpmf(k, mu, loc))


poisson = _distribution("poisson", pmf=_poisson_pmf, logpmf=_poisson_logpmf)


# -- multivariate_normal --------------------------------------------------------------------------

def _mvn_parameters(mean, cov):
    """(mean [dim], cov [dim, dim], dim) by SciPy's conventions: the dimension from mean, else
    a matrix cov, else 1; a scalar cov is cov * I and a vector one its diagonal."""
    mean = None if mean is None else _f64(mean)
    cov = _f64(cov)
    if mean is not None:
        dim = fnp.size(mean)
    else:
        dim = fnp.shape(cov)[0] if fnp.ndim(cov) == 2 else 1
    mean = np.zeros(dim) if mean is None else fnp.reshape(mean, (dim,))
    if fnp.ndim(cov) < 2:        # a scalar times I, or the diagonal
        cov = fnp.multiply(cov, np.eye(dim))
    if fnp.shape(cov) != (dim, dim):
        raise ValueError(f"multivariate_normal: cov has shape {list(fnp.shape(cov))}, expected "
                         f"[{dim}, {dim}]")
    return mean, cov, dim


def _mvn_points(x, dim):
    """x of rank 0 or 1 is one point, or with dimension 1 that many points."""
    x = _f64(x)
    if fnp.ndim(x) == 0:
        x = fnp.reshape(x, (1,))
    if fnp.ndim(x) == 1:
        x = fnp.reshape(x, (-1, 1) if dim == 1 else (1, -1))
    if fnp.shape(x)[-1] != dim:
        raise ValueError(f"multivariate_normal: x's last axis has {fnp.shape(x)[-1]} entries, "
                         f"expected {dim}")
    return x


def _mvn_logpdf(x, mean=None, cov=1, allow_singular=False):
    """log N(x; mean, cov) over x's last axis, squeezed as SciPy's result."""
    mean, cov, dim = _mvn_parameters(mean, cov)
    dev = fnp.subtract(_mvn_points(x, dim), mean)
    if level(cov):
        chol = np.linalg.cholesky(cov)      # fusegrad's, through __array_function__
        white = np.linalg.solve(chol, fnp.reshape(dev, (-1, dim)).T).T
        logdet = fnp.multiply(fnp.sum(fnp.log(chol[np.arange(dim), np.arange(dim)])), 2.0)
    else:
        try:
            chol = np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            raise ValueError("multivariate_normal: cov is not positive definite (fusegrad does "
                             "not implement allow_singular for singular cov)") from None
        white = fnp.matmul(fnp.reshape(dev, (-1, dim)), np.linalg.inv(chol).T)
        logdet = 2.0 * float(np.sum(np.log(np.diag(chol))))
    maha = fnp.reshape(fnp.sum(fnp.multiply(white, white), axis=-1), fnp.shape(dev)[:-1])
    return fnp.squeeze(fnp.multiply(fnp.add(maha, dim * 2 * _LOG_SQRT_2PI + logdet), -0.5))


def _mvn_pdf(x, mean=None, cov=1, allow_singular=False):
    """exp(multivariate_normal.logpdf)."""
    return fnp.exp(_mvn_logpdf(x, mean, cov, allow_singular))


class FrozenMultivariateNormal:
    """`multivariate_normal(mean, cov)` when mean or cov is a tensor or traced: SciPy's frozen
    distribution would convert them to arrays. `mean`, `cov` and `dim` as SciPy's, and the
    methods fusegrad differentiates, logpdf and pdf."""

    def __init__(self, mean=None, cov=1, allow_singular=False):
        self.mean, self.cov, self.dim = _mvn_parameters(mean, cov)
        self.allow_singular = allow_singular

    def logpdf(self, x):
        return _mvn_logpdf(x, self.mean, self.cov, self.allow_singular)

    def pdf(self, x):
        return _mvn_pdf(x, self.mean, self.cov, self.allow_singular)


def _mvn_freeze(mean=None, cov=1, allow_singular=False, seed=None, **kwds):
    """`multivariate_normal(mean, cov)` of a tensor or traced mean or cov: a frozen
    distribution whose logpdf and pdf are fusegrad's (FrozenMultivariateNormal; seed and the
    cdf's tolerances do not apply to them)."""
    return FrozenMultivariateNormal(mean, cov, allow_singular)


multivariate_normal = _distribution("multivariate_normal", pdf=_mvn_pdf, logpdf=_mvn_logpdf,
                                    __call__=_mvn_freeze)


def _frozen_logpdf(frozen, x):
    """multivariate_normal.logpdf with the frozen distribution's mean and cov."""
    return _mvn_logpdf(x, frozen.mean, frozen.cov, frozen.allow_singular)


def _frozen_pdf(frozen, x):
    """exp(multivariate_normal.logpdf) with the frozen distribution's mean and cov."""
    return _mvn_pdf(x, frozen.mean, frozen.cov, frozen.allow_singular)


DISTRIBUTIONS = {"norm": norm, "t": t, "gamma": gamma, "beta": beta, "poisson": poisson,
                 "multivariate_normal": multivariate_normal}

# SciPy's frozen multivariate normal (multivariate_normal(mean, cov) of arrays), whose methods
# fusegrad.scipy wraps on the class: they get the frozen object first.
FROZEN = "scipy.stats._multivariate.multivariate_normal_frozen"

HANDLED = {f"scipy.stats.{name}.{method}": fn for name, dist in DISTRIBUTIONS.items()
           for method, fn in vars(dist).items()}
HANDLED.update({f"{FROZEN}.logpdf": _frozen_logpdf, f"{FROZEN}.pdf": _frozen_pdf})

__all__ = sorted(DISTRIBUTIONS)
