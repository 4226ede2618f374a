"""scipy.linalg on tensors and tracers: solve_triangular, cholesky, cho_factor, cho_solve, expm.

They are LAPACK's, as SciPy calls them, through the host primitives of ir/linalg.py
(triangular_solve, cholesky, expm) and so differentiate, compile and batch over leading axes
like np.linalg (fusegrad/numpy/linalg.py). SciPy's conventions: cholesky and cho_factor give
the upper factor unless lower=True; cho_factor's c holds the factor in one triangle and a's own
entries in the other (SciPy's "random data"), so its gradient reaches a's other triangle
through them; cho_solve solves with the factor's triangle only, as two triangular solves
(SciPy's potrs, bit for bit). solve_triangular's `trans` is 0/'N', 1/'T' or 2/'C' (the same
for real matrices), b a vector or a stack of matrices; a zero on the diagonal raises
LinAlgError. overwrite_* and check_finite are accepted and ignored (nothing is overwritten).
Integer inputs are computed in float64, float32 ones in float32. fusegrad never imports SciPy
itself: the host steps import scipy.linalg when they first run.
"""

from __future__ import annotations

from .. import lax
from ..dispatch import bind
from ..numpy.base import _ndim, _shape
from ..numpy.elementwise import where
from ..numpy.linalg import _broadcast_stacks, _floats, _stacked
from ..numpy.shapes import reshape

_TRANS = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}


def _triangular(a, b, lower, transpose, unit_diagonal=False):
    """x with op(a) x = b, b a vector or a stack of matrices broadcast against a."""
    a, b = _floats(a, b)
    if _ndim(a) < 2 or _shape(a)[-1] != _shape(a)[-2]:
        raise ValueError("expected square matrix")
    vector = _ndim(b) == 1
    if vector:
        b = reshape(b, _shape(b) + (1,))
    if _shape(b)[-2] != _shape(a)[-1]:
        raise ValueError(f"shapes of a {_shape(a)} and b {_shape(b)} are incompatible")
    a, b = _broadcast_stacks(a, b)
    x = bind("triangular_solve", a, b, lower=bool(lower), transpose=transpose,
             unit_diagonal=bool(unit_diagonal))
    return reshape(x, _shape(x)[:-1]) if vector else x


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """x with op(a) x = b from a's lower (upper) triangle; trans 0/'N', 1/'T', 2/'C'; batched."""
    if trans not in _TRANS:
        raise ValueError("Unknown trans value")
    return _triangular(a, b, lower, _TRANS[trans], unit_diagonal)


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The upper factor u with uᵀ u = a (lower=True: l with l lᵀ = a), from that triangle."""
    a = _stacked(_floats(a), square=True)
    return bind("cholesky", a, upper=not lower)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """(c, lower): the factor in one triangle of c, a's entries in the other."""
    a = _stacked(_floats(a), square=True)
    factor = bind("cholesky", a, upper=not lower)
    n = _shape(a)[-1]
    rows, cols = lax.iota((n, n), "i64", 0), lax.iota((n, n), "i64", 1)
    return where((lax.ge if lower else lax.le)(rows, cols), factor, a), bool(lower)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """x with a x = b from cho_factor's (c, lower): two triangular solves."""
    c, lower = c_and_lower
    y = _triangular(c, b, lower, not lower)         # l y = b, or uᵀ y = b
    return _triangular(c, y, lower, lower)


def expm(A):
    """The matrix exponential (SciPy's Padé); gradient through the block-matrix Fréchet
    derivative."""
    a = _stacked(_floats(A), square=True)
    return bind("expm", a)


HANDLED = {
    "scipy.linalg.solve_triangular": solve_triangular,
    "scipy.linalg.cholesky": cholesky,
    "scipy.linalg.cho_factor": cho_factor,
    "scipy.linalg.cho_solve": cho_solve,
    "scipy.linalg.expm": expm,
}
