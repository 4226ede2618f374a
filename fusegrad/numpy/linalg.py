"""np.linalg on arrays, eager tensors and tracers, and the matrix product (the @ operator).

matmul: NumPy's 1-D conventions (a vector is a row on the left, a column on the right) become
reshapes around one 2-D or batched matmul primitive; the tracer broadcasts batch axes.

The factorizations are LAPACK's, called as host steps by compiled code (ir/linalg.py): solve,
cholesky, eigh, svd, qr, slogdet; the rest is composed from them and matmul, as NumPy composes
it: inv is solve(a, I) and det is sign · exp(log|det|) (NumPy's bits for both), pinv is NumPy's
SVD formula, matrix_power NumPy's square-and-multiply. eigh, svd, qr and slogdet return their
results packed in one array (one LAPACK call, ops with one output everywhere); the functions
here slice them apart. Like NumPy, integer and bool inputs are computed in float64, float32
stays float32, and every function broadcasts over leading (batch) axes. A singular matrix
raises NumPy's LinAlgError on every backend (from the host step under jit), and so does a
stack that is not square, with NumPy's messages.

Norms (norm, vector_norm, matrix_norm) take every `ord` NumPy accepts: vectors None, 2, 1,
-1, inf, -inf, 0 and any p; matrices 'fro', 'nuc', 1, -1, 2, -2, inf, -inf. Their gradients:
the 2-norm, the Frobenius norm and p-norms are 0 at the zero vector (not nan: the root only
sees a safe branch), inf / 1-type norms go through max and min (ties split the gradient) and
abs (abs'(0) = 0), ord=0 counts and has none, 2, -2 and 'nuc' go through the SVD.

svd with full_matrices=True and qr with mode='complete' of non-square matrices return NumPy's
full factors; the singular vectors (columns of q) past min(m, n) are not unique, nor their
gradient, which goes through the first min(m, n) only: a cotangent that reaches the rest
raises NotImplementedError when the gradient runs. qr mode='raw' has no gradient. Deliberately
left out (each raises, naming the argument): hermitian=True, qr's deprecated modes. Gradients
through eigenvectors and singular vectors assume distinct eigenvalues and singular values; see
fusegrad/formulas/linalg.py for what happens at repeated ones. lstsq's residuals are always
the squared residual norms when m > n: NumPy returns an empty array when `a` is rank-deficient,
which a trace cannot know. cond with p other than None, 2 and -2 raises LinAlgError for a
singular matrix where NumPy returns inf.
"""

from __future__ import annotations

import builtins
import operator

import numpy as np

from .. import lax
from ..dispatch import bind
from ..ir.linalg import packed_parts
from .base import _dtype, _ndim, _no_out, _shape, _shape_error, astype
from .elementwise import (absolute, exp, greater, multiply, not_equal, power, sqrt,
                          square, true_divide, where)
from .reductions import max, min, sum
from .shapes import broadcast_to, reshape, swapaxes, transpose

LinAlgError = np.linalg.LinAlgError
_RESULTS = getattr(np.linalg, "_linalg", None)


def _result(name):
    """NumPy 2's named result tuples (SVDResult, ...), or plain tuples where NumPy has none."""
    cls = getattr(_RESULTS, name, None)
    return (lambda *xs: cls(*xs)) if cls is not None else (lambda *xs: tuple(xs))


def matmul(a, b, **kwargs):
    _no_out(kwargs)
    a_vec, b_vec = _ndim(a) == 1, _ndim(b) == 1
    if _ndim(a) == 0 or _ndim(b) == 0:
        raise _shape_error("matmul: operands must be at least 1-D (use * for scalars)", a, b)
    if _shape(a)[-1] != _shape(b)[0 if b_vec else -2]:
        raise _shape_error("matmul: inner dimensions differ", a, b)
    if a_vec:
        a = reshape(a, (1,) + _shape(a))
    if b_vec:
        b = reshape(b, _shape(b) + (1,))
    out = lax.matmul(a, b)
    if a_vec or b_vec:
        shape = _shape(out)
        out = reshape(out, shape[:-2] + (() if a_vec else shape[-2:-1])
                      + (() if b_vec else shape[-1:]))
    return out


# -- helpers: NumPy's checks and types, stacks, packed results --------------------------------

def _float_type(*xs) -> np.dtype:
    """NumPy's _commonType: float32 only if every operand is float32, else float64."""
    if any(_dtype(x).kind == "c" for x in xs):
        raise TypeError("fusegrad's linear algebra is real-valued: complex arrays are not "
                        "supported")
    single = all(_dtype(x) == np.float32 for x in xs)
    return np.dtype(np.float32 if single else np.float64)


def _floats(*xs):
    dtype = _float_type(*xs)
    out = tuple(x if _dtype(x) == dtype else astype(x, dtype) for x in xs)
    return out if len(out) > 1 else out[0]


def _stacked(a, square=False):
    if _ndim(a) < 2:
        raise LinAlgError(f"{_ndim(a)}-dimensional array given. Array must be at least "
                          f"two-dimensional")
    if square and _shape(a)[-1] != _shape(a)[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    return a


def _square(a):
    return _stacked(_floats(a), square=True)


def _pieces(prim, packed, shape, **params):
    """The results prim packs in its output's last axis (ir/linalg.packed_parts)."""
    batch = _shape(packed)[:-1]
    r = len(batch)
    return [reshape(lax.slice(packed, (0,) * r + (start,), batch + (stop,)), batch + piece)
            for start, stop, piece in packed_parts(prim, shape, **params)]


def _eye_like(a):
    """The identity, broadcast to a's stack of square matrices, in a's dtype."""
    n = _shape(a)[-1]
    eye = lax.convert(lax.eq(lax.iota((n, n), "i64", 0), lax.iota((n, n), "i64", 1)),
                      _dtype(a))
    return broadcast_to(eye, _shape(a))


def _mT(x):
    return swapaxes(x, -1, -2)


def _broadcast_stacks(a, b):
    """a and b with their batch axes (all but the last two) broadcast against each other."""
    batch = tuple(np.broadcast_shapes(_shape(a)[:-2], _shape(b)[:-2]))
    return broadcast_to(a, batch + _shape(a)[-2:]), broadcast_to(b, batch + _shape(b)[-2:])


# -- solves, inverses, determinants -----------------------------------------------------------

def solve(a, b):
    """NumPy 2's solve: b is a vector only when 1-D, else a stack of [n, k] matrices."""
    a, b = _floats(a, b)
    _stacked(a, square=True)
    n, vector = _shape(a)[-1], _ndim(b) == 1
    if vector:
        b = reshape(b, (_shape(b)[0], 1))
    if _ndim(b) < 2 or _shape(b)[-2] != n:
        raise ValueError(f"solve: b of shape {_shape(b)} does not match a of shape "
                         f"{_shape(a)}: b needs {n} rows")
    a, b = _broadcast_stacks(a, b)
    x = bind("solve", a, b)
    return reshape(x, _shape(x)[:-1]) if vector else x


def inv(a):
    """solve(a, I): NumPy's bits (LAPACK gesv with b = I); a singular a raises LinAlgError."""
    a = _square(a)
    return bind("solve", a, _eye_like(a))       # np.linalg.inv is LAPACK gesv with b = I


def slogdet(a):
    """(sign, log|det|) from LAPACK's LU; the gradient of log|det| is a⁻ᵀ (LinAlgError at a
    singular a), the sign has none."""
    a = _square(a)
    sign, logabsdet = _pieces("slogdet", bind("slogdet", a), _shape(a))
    return _result("SlogdetResult")(sign, logabsdet)


def det(a):
    """sign · exp(log|det|), NumPy's own formula and bits; its gradient det · a⁻ᵀ raises
    LinAlgError at a singular a."""
    sign, logabsdet = slogdet(a)
    return multiply(sign, exp(logabsdet))       # NumPy's own formula (umath_linalg)


def matrix_power(a, n):
    """NumPy's square-and-multiply, so products happen in NumPy's order; integer matrices stay
    integer unless n < 0."""
    a = _stacked(a, square=True)
    try:
        n = operator.index(n)
    except TypeError as e:
        raise TypeError("exponent must be an integer") from e
    if n == 0:
        return _eye_like(a)
    if n < 0:
        a, n = inv(a), -n
    if n <= 3:
        return {1: lambda: a, 2: lambda: matmul(a, a), 3: lambda: matmul(matmul(a, a), a)}[n]()
    z = result = None
    while n > 0:
        z = a if z is None else matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else matmul(result, z)
    return result


# -- factorizations ---------------------------------------------------------------------------

def cholesky(a, /, *, upper=False):
    """l with a = l lᵀ from a's lower triangle (upper=True: u with uᵀ u = a from the upper);
    the gradient (Murray 2016) lands on the triangle read."""
    return bind("cholesky", _square(a), upper=bool(upper))


def _uplo(UPLO) -> bool:
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    return UPLO == "L"


def eigh(a, UPLO="L"):
    """(eigenvalues ascending, eigenvectors as columns) from the UPLO triangle, whose gradient
    lands there; with repeated eigenvalues see fusegrad/formulas/linalg.py."""
    a = _square(a)
    w, v = _pieces("eigh", bind("eigh", a, lower=_uplo(UPLO)), _shape(a))
    return _result("EighResult")(w, v)


def eigvalsh(a, UPLO="L"):
    """eigh's eigenvalues (LAPACK computes the vectors too: one primitive for both)."""
    return eigh(a, UPLO)[0]


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """(u, s, vh), or s with compute_uv=False; gradients assume distinct singular values, and
    with full_matrices=True go through u's (vh's) first min(m, n) columns (rows) only
    (formulas/linalg.py)."""
    a = _stacked(_floats(a))
    if hermitian:
        raise NotImplementedError("fusegrad's svd does not support hermitian=True; use "
                                  "np.linalg.eigh for symmetric matrices")
    m, n = _shape(a)[-2:]
    full = bool(full_matrices and compute_uv and m != n)
    params = {"full_matrices": True} if full else {}
    u, s, vt = _pieces("svd", bind("svd", a, **params), _shape(a), **params)
    return _result("SVDResult")(u, s, vt) if compute_uv else s


def svdvals(x, /):
    """The singular values, descending (svd with compute_uv=False)."""
    return svd(x, compute_uv=False)


def qr(a, mode="reduced"):
    """(q, r) with mode 'reduced' or 'complete', r alone with 'r', LAPACK's (h, tau) with
    'raw'; gradients for tall, square and wide matrices (r must be invertible), through q's
    first n columns with 'complete', none with 'raw' (formulas/linalg.py)."""
    a = _stacked(_floats(a))
    if mode in ("full", "f", "economic", "e"):
        raise NotImplementedError(f"fusegrad's qr does not support NumPy's deprecated "
                                  f"mode={mode!r}: use 'reduced', 'complete', 'r' or 'raw'")
    if mode not in ("reduced", "complete", "r", "raw"):
        raise ValueError(f"Unrecognized mode '{mode}'")
    params = {"mode": mode} if mode in ("complete", "raw") else {}
    first, second = _pieces("qr", bind("qr", a, **params), _shape(a), **params)
    if mode == "raw":
        return first, second
    return second if mode == "r" else _result("QRResult")(first, second)


# -- composed from the SVD --------------------------------------------------------------------

def _reciprocal_above(s, cutoff):
    """1 / s where s > cutoff, else 0; the double where keeps the gradient finite at s = 0."""
    large = greater(s, cutoff)
    return where(large, true_divide(1.0, where(large, s, 1.0)), 0.0)


def pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    """NumPy's: v diag(1/s) uᵀ over the singular values above rcond · max(s)."""
    a = _stacked(_floats(a))
    if rcond is None:
        rcond = 1e-15 if rtol is np._NoValue else \
            builtins.max(_shape(a)[-2:]) * np.finfo(_dtype(a)).eps if rtol is None else rtol
    elif rtol is not np._NoValue:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    if 0 in _shape(a)[-2:]:
        return _mT(a)                               # empty, [..., n, m]: NumPy's too
    u, s, vt = svd(a, full_matrices=False, hermitian=hermitian)
    cutoff = multiply(reshape(np.asarray(rcond), np.shape(rcond) + (1,)), max(s, -1, True))
    sinv = _reciprocal_above(s, cutoff)
    return matmul(_mT(vt), multiply(reshape(sinv, _shape(sinv) + (1,)), _mT(u)))


def lstsq(a, b, rcond=None):
    """(x, residuals, rank, s) as NumPy's (gelsd): x from the singular values above
    rcond · max(s), rcond defaulting to eps · max(m, n). residuals: see the module docstring."""
    a, b = _floats(a, b)
    if _ndim(a) != 2 or _ndim(b) not in (1, 2):
        raise LinAlgError(f"{_ndim(a if _ndim(a) != 2 else b)}-dimensional array given. "
                          f"Array must be {'two' if _ndim(a) != 2 else 'one or two'}-dimensional")
    (m, n), vector = _shape(a), _ndim(b) == 1
    if _shape(b)[0] != m:
        raise LinAlgError("Incompatible dimensions")
    b2 = reshape(b, (m, 1)) if vector else b
    if rcond is None:
        rcond = np.finfo(_dtype(a)).eps * builtins.max(m, n)
    u, s, vt = svd(a, full_matrices=False)
    cutoff = multiply(rcond, max(s)) if n and m else 0.0
    sinv = _reciprocal_above(s, cutoff)
    x = matmul(_mT(vt), multiply(reshape(sinv, (-1, 1)), matmul(_mT(u), b2)))
    rank = sum(greater(s, cutoff), dtype=np.int64)
    if m > n:
        resids = sum(square(b2 - matmul(a, x)), axis=0)
    else:
        resids = np.zeros(0, _dtype(x))
    return (reshape(x, (n,)) if vector else x), resids, rank, s


def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """The count of singular values above NumPy's tolerance: int64, no gradient."""
    A = _floats(A)
    if _ndim(A) < 2:
        return astype(greater(sum(not_equal(A, 0)), 0), np.int64)
    s = svd(A, compute_uv=False, hermitian=hermitian)
    if tol is None:
        rtol = builtins.max(_shape(A)[-2:]) * np.finfo(_dtype(s)).eps if rtol is None else \
            reshape(np.asarray(rtol), np.shape(rtol) + (1,))
        tol = multiply(max(s, -1, True), rtol)
    else:
        tol = reshape(np.asarray(tol), np.shape(tol) + (1,))
    return sum(greater(s, tol), axis=-1)


def cond(x, p=None):
    """s_max / s_min (p None, 2; -2 the inverse); other p: norm(x, p) · norm(inv(x), p), which
    raises LinAlgError at a singular x where NumPy returns inf."""
    x = _stacked(_floats(x))
    if p is None or p == 2 or p == -2:
        s = svd(x, compute_uv=False)
        first, last = (lax.slice(s, (0,) * (_ndim(s) - 1) + (i,),
                                 _shape(s)[:-1] + (i + 1,)) for i in (0, _shape(s)[-1] - 1))
        r = true_divide(last, first) if p == -2 else true_divide(first, last)
        return reshape(r, _shape(r)[:-1])
    return multiply(norm(x, p, axis=(-2, -1)), norm(inv(x), p, axis=(-2, -1)))


# -- norms ------------------------------------------------------------------------------------

def _safe_root(s, root=sqrt):
    """root(s), with gradient 0 (not nan) where s is 0: the root only sees the safe branch."""
    positive = greater(s, 0)
    return where(positive, root(where(positive, s, 1)), 0)


def _vector_norm(x, ord, axis, keepdims):
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    if ord is None or ord == 2:
        return _safe_root(sum(square(x), axis, keepdims))
    if ord == 0:
        return sum(astype(not_equal(x, 0), _dtype(x)), axis, keepdims)
    if _shape(x)[axis] == 0 and ord == np.inf:
        return sum(absolute(x), axis, keepdims)        # NumPy's max(..., initial=0)
    if ord == np.inf:
        return max(absolute(x), axis, keepdims)
    if ord == -np.inf:
        return min(absolute(x), axis, keepdims)
    if ord == 1:
        return sum(absolute(x), axis, keepdims)
    ord = float(ord)
    total = sum(power(absolute(x), ord), axis, keepdims)
    return _safe_root(total, lambda t: power(t, 1.0 / ord)) if ord > 0 else \
        power(total, 1.0 / ord)


def _svd_norm(x, rows, cols, reduce):
    rest = [i for i in range(_ndim(x)) if i not in (rows, cols)]
    s = svd(transpose(x, rest + [rows, cols]), compute_uv=False)
    return reduce(s, axis=-1)


def _matrix_norm(x, ord, rows, cols):
    if rows == cols:
        raise ValueError("Duplicate axes given.")
    if ord in (2, -2):
        return _svd_norm(x, rows, cols, max if ord == 2 else min)
    if ord == "nuc":
        return _svd_norm(x, rows, cols, sum)
    if ord in (None, "fro", "f"):
        return _safe_root(sum(square(x), (rows, cols)))
    if ord in (1, -1, np.inf, -np.inf):
        inner, outer = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = sum(absolute(x), inner)
        outer -= outer > inner
        if ord in (1, np.inf) and _shape(sums)[outer] == 0:
            return sum(sums, outer)                    # NumPy's max(..., initial=0)
        return (max if ord in (1, np.inf) else min)(sums, outer)
    raise ValueError("Invalid norm order for matrices.")


def norm(x, ord=None, axis=None, keepdims=False):
    """Every ord NumPy accepts (vectors: None, 2, 1, -1, inf, -inf, 0, any p; matrices: 'fro',
    'nuc', 1, -1, 2, -2, inf, -inf); gradient 0 at zero for the root norms."""
    if _dtype(x).kind not in "f":
        x = _floats(x)
    nd = _ndim(x)
    if axis is None and (ord is None or ord in ("f", "fro") and nd == 2 or ord == 2 and nd == 1):
        out = _safe_root(sum(square(x)))
        return reshape(out, (1,) * nd) if keepdims else out
    if axis is None:
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        try:
            axis = (int(axis),)
        except Exception as e:
            raise TypeError("'axis' must be None, an integer or a tuple of integers") from e
    if len(axis) == 1:
        return _vector_norm(x, ord, _normalize(axis[0], nd), keepdims)
    if len(axis) != 2:
        raise ValueError("Improper number of dimensions to norm.")
    rows, cols = (_normalize(a, nd) for a in axis)
    out = _matrix_norm(x, ord, rows, cols)
    if keepdims:
        out = reshape(out, tuple(1 if i in (rows, cols) else n for i, n in enumerate(_shape(x))))
    return out


def _normalize(axis, nd):
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension "
                                      f"{nd}")
    return axis % nd


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """NumPy 2's: the vector norm over `axis` (None: all; a tuple: those axes flattened)."""
    shape, nd = _shape(x), _ndim(x)
    if axis is None:
        y, axes = reshape(x, (-1,)), tuple(range(nd))
    else:
        axes = tuple(_normalize(a, nd) for a in (axis if isinstance(axis, tuple) else (axis,)))
        rest = tuple(i for i in range(nd) if i not in axes)
        y = reshape(transpose(x, axes + rest), (-1,) + tuple(shape[i] for i in rest))
    out = norm(y, ord=ord, axis=0)
    if keepdims:
        out = reshape(out, tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return out


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """norm over the last two axes (NumPy 2's np.linalg.matrix_norm)."""
    return norm(x, axis=(-2, -1), keepdims=keepdims, ord=ord)


__all__ = ["matmul", "norm"]    # the rest is np.linalg's: fusegrad.numpy.linalg.solve, ...

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.matmul: matmul,
    np.linalg.solve: solve, np.linalg.inv: inv, np.linalg.det: det, np.linalg.slogdet: slogdet,
    np.linalg.matrix_power: matrix_power, np.linalg.cholesky: cholesky, np.linalg.eigh: eigh,
    np.linalg.eigvalsh: eigvalsh, np.linalg.svd: svd, np.linalg.qr: qr, np.linalg.pinv: pinv,
    np.linalg.lstsq: lstsq, np.linalg.matrix_rank: matrix_rank, np.linalg.cond: cond,
    np.linalg.norm: norm,
    **{getattr(np.linalg, name): fn for name, fn in (
        ("svdvals", svdvals), ("vector_norm", vector_norm), ("matrix_norm", matrix_norm),
        ("matmul", matmul)) if hasattr(np.linalg, name)},
}
