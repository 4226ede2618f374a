"""fusegrad.numpy's special functions (scipy.special's, on arrays, tensors and tracers) and
direct convolution (np.convolve, np.correlate; scipy.signal's reuse it).

Most of SciPy's special functions are ufuncs: fusegrad.scipy registers these functions in
HANDLED_UFUNCS under the ufunc objects once SciPy is imported, so that `gammaln(x)` on a tensor or
tracer lands here through __array_ufunc__ (this module never imports SciPy: see
fusegrad/scipy/__init__.py). Like the ufuncs they promote integer and bool operands to float64
and keep float32.

Primitives where composition would lose accuracy (ir/special.py: lgamma, gamma, erfc,
polygamma, erfinv, erfcinv, log_ndtr, i0, i1, i0e, i1e); compositions elsewhere:
    expit = logistic; logit(p) = log(p) - log1p(-p); ndtr(x) = erfc(-x/√2)/2;
    ndtri(p) = -√2 erfcinv(2p); betaln(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b) (it loses
    digits when a and b are both large, where SciPy switches to an asymptotic series);
    xlogy(x, y) = x log(y) and xlog1py(x, y) = x log1p(y), 0 where x == 0 (SciPy's convention,
    also for y = 0 or inf; nan stays nan). There the log's argument is replaced by 1 only where
    the product would be nan, so d/dx xlogy(0, y) is log(y) for y > 0, as in JAX, and the
    gradient at x = y = 0 is 0, not nan.

Convolution is direct, O(output size × smaller operand size): the larger operand's windows are
gathered (one `take` with a constant index table, a zero past the end standing for the padding)
and contracted with the smaller operand by one matmul, in any number of dimensions. Its gradient
is a scatter and a matmul, with no rule of its own.
"""

from __future__ import annotations

import math

import numpy as np

from .. import lax
from ..dispatch import bind, level
from .base import _dtype, _is_float, _ndim, _shape, astype
from .elementwise import (equal, erf, expm1, less_equal, log, log1p, logical_and, logical_or,
                          multiply, negative, sigmoid, subtract, where)
from .linalg import matmul
from .shapes import broadcast_to, reshape, take


def _float(x):
    """x as a float operand: Python numbers stay weak (float32 stays float32), integer and
    bool arrays become float64, as SciPy's ufuncs promote."""
    if type(x) in (int, bool):
        return float(x)
    if type(x) is float or _is_float(x):
        return x
    return astype(x, np.float64) if level(x) else np.asarray(x, dtype=np.float64)


def _unary(prim, name, doc):
    def fn(x):
        return bind(prim, _float(x))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn.prim = prim
    return fn


gammaln = _unary("lgamma", "gammaln", "log|Γ(x)|, +inf at the poles.")
gamma = _unary("gamma", "gamma", "Γ(x); nan at the negative integers.")
erfc = _unary("erfc", "erfc", "1 - erf(x), accurate where erf(x) is close to 1.")
erfinv = _unary("erfinv", "erfinv", "The inverse of erf on [-1, 1] (±inf at ±1, nan outside).")
erfcinv = _unary("erfcinv", "erfcinv", "The inverse of erfc on [0, 2] (±inf at 0 and 2).")
log_ndtr = _unary("log_ndtr", "log_ndtr", "log Φ(x), the log standard normal CDF, accurate in "
                  "both tails.")
i0 = _unary("i0", "i0", "The modified Bessel function of order 0, I₀(x).")
i1 = _unary("i1", "i1", "The modified Bessel function of order 1, I₁(x).")
i0e = _unary("i0e", "i0e", "The exponentially scaled I₀: e^-|x| I₀(x).")
i1e = _unary("i1e", "i1e", "The exponentially scaled I₁: e^-|x| I₁(x).")


def expit(x):
    """The logistic sigmoid 1/(1 + e^-x), computed stably."""
    return sigmoid(_float(x))


def logit(p):
    """log(p / (1 - p)), as log(p) - log1p(-p)."""
    p = _float(p)
    return subtract(log(p), log1p(negative(p)))


def ndtr(x):
    """Φ(x), the standard normal CDF, as erfc(-x/√2)/2."""
    return multiply(erfc(multiply(_float(x), -1 / math.sqrt(2))), 0.5)


def ndtri(p):
    """Φ⁻¹(p), the standard normal quantile, as -√2 erfcinv(2p)."""
    return multiply(erfcinv(multiply(_float(p), 2.0)), -math.sqrt(2))


def digamma(x):
    """ψ(x) = Γ'(x)/Γ(x), the polygamma function of order 0."""
    return bind("polygamma", _float(x), n=0)


psi = digamma


def polygamma(n, x):
    """ψ⁽ⁿ⁾(x), in float64 as SciPy's. n: a concrete non-negative integer or integer array (it
    broadcasts against x); an order, not a variable, so it has no gradient and is not traced."""
    if level(n):
        raise TypeError("polygamma: the order n must be concrete integers, not a tensor or "
                        "traced value (mark it static)")
    orders = np.asarray(n)
    if orders.dtype.kind not in "iub" and not np.all(orders == np.round(orders)) \
            or np.any(orders < 0):
        raise ValueError(f"polygamma: the order n must be non-negative integers, got {n!r}")
    orders = orders.astype(np.int64)
    x = _float(x)
    if _dtype(x) == np.float32:       # SciPy's polygamma is Python code that computes in float64
        x = astype(x, np.float64)
    if orders.ndim == 0:
        return bind("polygamma", x, n=int(orders))
    shape = np.broadcast_shapes(orders.shape, _shape(x))
    out = None
    for k in np.unique(orders):         # one primitive per distinct order, picked elementwise
        value = bind("polygamma", x, n=int(k))
        out = value if out is None else where(orders == k, value, out)
    return out if _shape(out) == shape else broadcast_to(out, shape)


def betaln(a, b):
    """log|B(a, b)|, as gammaln(a) + gammaln(b) - gammaln(a + b)."""
    a, b = _float(a), _float(b)
    return subtract(gammaln(a) + gammaln(b), gammaln(a + b))


def _masked_log(log_fn, x, y, bad):
    """x * log_fn(y), with y replaced by a harmless value where x == 0 would meet nan."""
    x, y = _float(x), _float(y)
    bad = logical_and(equal(x, 0), bad(y))
    return multiply(x, log_fn(where(bad, 1.0 if log_fn is log else 0.0, y)))


def xlogy(x, y):
    """x log(y), 0 where x == 0 (unless y is nan)."""
    return _masked_log(log, x, y, lambda y: logical_or(less_equal(y, 0), equal(y, np.inf)))


def xlog1py(x, y):
    """x log1p(y), 0 where x == 0 (unless y is nan)."""
    return _masked_log(log1p, x, y, lambda y: logical_or(less_equal(y, -1), equal(y, np.inf)))


# -- convolution -------------------------------------------------------------------------------

def _size(shape) -> int:
    return math.prod(shape)


def _window_table(x_shape, w_shape, out_shape, alpha, beta, gamma):
    """The flat index into x (x's size: the zero past its end) of each (output, weight) pair,
    where dimension d reads x[alpha o_d + beta j_d + gamma_d]; shape [out size, w size]."""
    n = len(out_shape)
    flat = np.zeros((1,) * 2 * n, np.int64)
    inside = np.ones((1,) * 2 * n, bool)
    stride = 1
    for d in reversed(range(n)):
        o = np.arange(out_shape[d]).reshape((1,) * d + (-1,) + (1,) * (2 * n - d - 1))
        j = np.arange(w_shape[d]).reshape((1,) * (n + d) + (-1,) + (1,) * (n - d - 1))
        idx = alpha * o + beta * j + gamma[d]
        inside = inside & (idx >= 0) & (idx < x_shape[d])
        flat = flat + idx * stride
        stride *= x_shape[d]
    table = np.where(inside, flat, stride)
    return table.reshape(_size(out_shape), _size(w_shape)), bool(inside.all())


def direct_convolution(a, v, out_shape, start, correlate=False):
    """out[o] = full[o + start], where full is the full convolution of a and v, or their
    correlation full[k] = Σ_i a[i] v[i - k + len(v) - 1] (NumPy's and SciPy's), per dimension.
    The larger operand is windowed, the smaller one is the matmul's weights."""
    a_shape, v_shape = _shape(a), _shape(v)
    dtype = np.result_type(_dtype(a), _dtype(v))
    if dtype == np.bool_:
        raise TypeError("convolution of two bool arrays is not supported; convert them to int")
    a, v = (t if _dtype(t) == dtype else astype(t, dtype) for t in (a, v))
    window_a = _size(v_shape) <= _size(a_shape)
    x, w = (a, v) if window_a else (v, a)
    k = [V - 1 for V in v_shape]
    if not correlate:
        alpha, beta, gamma = 1, -1, list(start)
    elif window_a:
        alpha, beta, gamma = 1, 1, [s - m for s, m in zip(start, k)]
    else:
        alpha, beta, gamma = -1, 1, [m - s for s, m in zip(start, k)]
    table, inside = _window_table(_shape(x), _shape(w), out_shape, alpha, beta, gamma)
    flat = reshape(x, (-1,))
    if not inside:      # one zero after the end: the padding every outside index reads
        flat = lax.pad(flat, (0,), (1,))
    out = matmul(take(flat, table, axis=0), reshape(w, (-1,)))
    return reshape(out, tuple(out_shape))


def _numpy_1d(name, a, v, mode):
    a, v = (reshape(t, (1,)) if _ndim(t) == 0 else t for t in (a, v))
    if _ndim(a) != 1 or _ndim(v) != 1:
        raise ValueError(f"{name}: object too deep for desired array (fusegrad, as NumPy, "
                         f"takes 1-D operands)")
    (n,), (m,) = _shape(a), _shape(v)
    if n == 0 or m == 0:
        raise ValueError(f"{name}: {'a' if n == 0 else 'v'} cannot be empty")
    if mode == "full":
        length, start = n + m - 1, 0
    elif mode == "same":     # centred on the longer operand; np.correlate leans right when v
        lean = n < m and name.endswith("correlate")     # is the longer one
        length, start = max(n, m), (min(n, m) - 1 + lean) // 2
    elif mode == "valid":
        length, start = abs(n - m) + 1, min(n, m) - 1
    else:
        raise ValueError(f"{name}: mode must be one of 'valid', 'same', 'full', got {mode!r}")
    return direct_convolution(a, v, (length,), (start,), correlate=name.endswith("correlate"))


def convolve(a, v, mode="full"):
    """np.convolve: the discrete linear convolution of two 1-D sequences."""
    return _numpy_1d("numpy.convolve", a, v, mode)


def correlate(a, v, mode="valid"):
    """np.correlate: c[k] = Σ_n a[n + k] v[n] (real operands)."""
    return _numpy_1d("numpy.correlate", a, v, mode)


def _np_i0(x):
    """np.i0 (not a ufunc): float64 for every real input, as NumPy's."""
    return i0(astype(x, np.float64) if level(x) else np.asarray(x, np.float64))


__all__ = [
    "betaln", "convolve", "correlate", "digamma", "erfc", "erfcinv", "erfinv", "expit", "gamma",
    "gammaln", "i0", "i0e", "i1", "i1e", "log_ndtr", "logit", "ndtr", "ndtri", "polygamma", "psi",
    "xlog1py", "xlogy",
]

# NumPy's functions that land here through __array_function__ (SciPy's ufuncs are added by
# fusegrad.scipy when SciPy is imported).
HANDLED = {np.convolve: convolve, np.correlate: correlate, np.i0: _np_i0}

# scipy.special's ufuncs (and polygamma, a Python function) that these functions implement, by
# name: fusegrad.scipy.special's table refers to them.
SCIPY_SPECIAL = {
    "expit": expit, "logit": logit, "erf": erf, "erfc": erfc, "erfinv": erfinv,
    "erfcinv": erfcinv, "gammaln": gammaln, "gamma": gamma, "digamma": digamma, "psi": psi,
    "polygamma": polygamma, "xlogy": xlogy, "xlog1py": xlog1py, "ndtr": ndtr,
    "log_ndtr": log_ndtr, "ndtri": ndtri, "betaln": betaln, "i0": i0, "i1": i1, "i0e": i0e,
    "i1e": i1e, "log1p": log1p, "expm1": expm1,
}
