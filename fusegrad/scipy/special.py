"""scipy.special on tensors and tracers.

The special functions themselves (gammaln, digamma, erfinv, xlogy, ...) are written in
fusegrad/numpy/special.py, since SciPy's ufuncs reach them through __array_ufunc__; this module
adds SciPy's Python functions, logsumexp, softmax and log_softmax, on fusegrad's stable
composites, and names everything in HANDLED.

logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False) is SciPy's: all axes by
default, b broadcast against a as weights (terms with b == 0 drop out, even where a is inf),
log(sum(b exp(a - m))) + m with m the largest finite max, nan for a negative sum unless
return_sign, which returns (log|sum|, sign(sum)). Without b it is the logsumexp composite
(its gradient is exactly 0 on an all -inf slice). softmax and log_softmax default to all axes
too, as SciPy's (fusegrad.nn's default to the last axis); one axis uses the composites, several
exp(x - logsumexp) and x - logsumexp.
"""

from __future__ import annotations

import numpy as np

from .. import lax
from .. import numpy as fnp
from ..numpy.constructors import asarray
from ..numpy.special import (  # noqa: F401 - fusegrad.scipy.special's names, as SciPy's
    SCIPY_SPECIAL, _float, betaln, digamma, erf, erfc, erfcinv, erfinv, expit, expm1, gamma,
    gammaln, i0, i0e, i1, i1e, log1p, log_ndtr, logit, ndtr, ndtri, polygamma, psi, xlog1py,
    xlogy)


def _operand(x):
    return _float(asarray(x))


def _drop(y, axes, keepdims):
    return y if keepdims or not axes else fnp.squeeze(y, axis=axes)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """log(sum(b * exp(a))) over axis (all axes by default), computed stably."""
    a = _operand(a)
    if b is None and not return_sign:
        return fnp.logsumexp(a, axis=axis, keepdims=keepdims)
    if b is not None:
        b = _operand(b)
        shape = np.broadcast_shapes(fnp.shape(a), fnp.shape(b))
        a, b = fnp.broadcast_to(a, shape), fnp.broadcast_to(b, shape)
        a = fnp.where(fnp.equal(b, 0), -np.inf, a)          # a term with no weight drops out
    axes = fnp._axes(axis, fnp.ndim(a))
    m = fnp.max(a, axis=axes, keepdims=True) if axes else a
    m = fnp.where(fnp.less(fnp.absolute(m), np.inf), m, 0.0)
    e = fnp.exp(fnp.subtract(a, m))
    s = fnp.sum(e if b is None else fnp.multiply(b, e), axis=axes, keepdims=True)
    if not return_sign:
        return _drop(fnp.add(fnp.log(s), m), axes, keepdims)
    out = fnp.add(fnp.log(fnp.absolute(s)), m)
    return _drop(out, axes, keepdims), _drop(fnp.sign(s), axes, keepdims)


def _single_axis(x, axis):
    """The one axis softmax works along, or None when it is all axes or several."""
    if axis is None or isinstance(axis, (tuple, list)) and len(axis) != 1:
        return None if fnp.ndim(x) != 1 else 0
    (axis,) = fnp._axes(axis, fnp.ndim(x))
    return axis


def softmax(x, axis=None):
    """exp(x) / sum(exp(x)) over axis (all axes by default), computed stably."""
    x = _operand(x)
    one = _single_axis(x, axis)
    if one is not None:
        return lax.softmax(x, one)
    return fnp.exp(fnp.subtract(x, fnp.logsumexp(x, axis=axis, keepdims=True)))


def log_softmax(x, axis=None):
    """x - logsumexp(x) over axis (all axes by default)."""
    x = _operand(x)
    one = _single_axis(x, axis)
    if one is not None:
        return lax.log_softmax(x, one)
    return fnp.subtract(x, fnp.logsumexp(x, axis=axis, keepdims=True))


# Digamma and the gamma family, the error functions, and the rest of fusegrad.numpy.special.
_UFUNCS = {f"scipy.special.{name}": fn for name, fn in SCIPY_SPECIAL.items()}

HANDLED = {
    **_UFUNCS,
    "scipy.special.logsumexp": logsumexp,
    "scipy.special.softmax": softmax,
    "scipy.special.log_softmax": log_softmax,
}

__all__ = ["log_softmax", "logsumexp", "softmax"] + sorted(SCIPY_SPECIAL)
