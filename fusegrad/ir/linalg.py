"""Linear algebra primitives beyond matmul (issue 14): each one's shape rule, NumPy (LAPACK)
implementation and docs row. Compiled code runs them as host steps (category "host": the
implementation is called between kernels), so a factorization is always LAPACK's, through
np.linalg or scipy.linalg, and a singular input raises NumPy's LinAlgError on every backend.

Every operand is a stack of matrices: leading axes are batch axes, equal across operands (the
front end broadcasts them explicitly, as for matmul). A factorization with several results
(eigh, svd, qr, slogdet) returns them packed into one array, in one LAPACK call: the IR, the
interpreter, the eager engine and codegen all deal in ops with one output, and fusegrad.numpy
cuts the pieces out with `slice` and `reshape` (whose VJPs pad the cotangents back into the
packed layout, zeros where a piece is unused). `packed_parts` describes each layout.

These implementations read only what NumPy reads: cholesky and eigh one triangle of `a`,
triangular_solve one triangle of `a` (not its diagonal with `unit_diagonal`). svd with
`full_matrices` and qr with mode "complete" or "raw" are NumPy's calls with those arguments, so
NumPy's bits; `require_zero` is the check the gradients of their full factors make
(formulas/linalg.py).
"""

from __future__ import annotations

import math

import numpy as np

from .registry import Doc, define, fail, require_float

SECTION = "Linear algebra"


def _matrices(prim, *types, square=True):
    """Float stacks of matrices with equal dtypes and batch axes; `a` (the first) square."""
    require_float(prim, *types)
    if any(t.ndim < 2 for t in types) or any(t.dtype != types[0].dtype for t in types) \
            or any(t.shape[:-2] != types[0].shape[:-2] for t in types):
        fail(prim, "needs stacks of matrices [..., m, n] with equal dtypes and batch axes",
             *types)
    a = types[0]
    if square and a.shape[-1] != a.shape[-2]:
        fail(prim, "needs square matrices [..., n, n]", *types)
    return a


def packed_parts(prim: str, shape, **params) -> list:
    """[(start, stop, shape)] of each result packed in the last axis of prim's output, for an
    operand of `shape` [..., m, n] and prim's params: eigh (w, v), svd (u, s, vt; u [m, m] and
    vt [n, n] with `full_matrices`), qr (q, r; mode "complete": q [m, m], r [m, n]; mode
    "raw": h [n, m], tau), slogdet (sign, logabsdet). The pieces' shapes exclude the batch
    axes."""
    m, n = shape[-2:]
    k = min(m, n)
    full = params.get("full_matrices", False)
    qr = {"reduced": [(m, k), (k, n)], "complete": [(m, m), (m, n)],
          "raw": [(n, m), (k,)]}[params.get("mode", "reduced")] if prim == "qr" else None
    pieces = {"eigh": [(n,), (n, n)], "svd": [(m, m if full else k), (k,), (n if full else k, n)],
              "qr": qr, "slogdet": [(), ()]}[prim]
    out, start = [], 0
    for p in pieces:
        size = math.prod(p)
        out.append((start, start + size, p))
        start += size
    return out


def _packed_rule(prim, a, **params):
    _matrices(prim, a, square=prim in ("eigh", "slogdet"))
    if params.get("mode", "reduced") not in ("reduced", "complete", "raw"):
        fail(prim, f"mode must be 'reduced', 'complete' or 'raw', not {params['mode']!r}", a)
    return a.with_shape(a.shape[:-2] + (packed_parts(prim, a.shape, **params)[-1][1],))


def _pack(*pieces, batch):
    return np.concatenate([np.reshape(p, batch + (-1,)) for p in pieces], axis=-1)


def _dtype_of(a):
    return np.asarray(a).dtype


# -- solves -----------------------------------------------------------------------------------

def _solve_rule(prim, a, b, **params):
    _matrices(prim, a, b)
    if b.shape[-2] != a.shape[-1]:
        fail(prim, "needs b with as many rows as a", a, b)
    return b


def _solve(a, b):
    return np.linalg.solve(a, b).astype(_dtype_of(a), copy=False)


define("solve", "host", _solve_rule, _solve, section=SECTION,
       doc=Doc("a: [..., n, n], b: [..., n, k], equal float dtypes and batch axes", "",
               "b's type", "`np.linalg.solve(a, b)` (LAPACK gesv: LU with partial pivoting); "
               "singular a raises LinAlgError"))


def _triangular_solve(a, b, *, lower, transpose, unit_diagonal):
    from scipy.linalg import solve_triangular
    a, b = np.asarray(a), np.asarray(b)
    kw = dict(trans=1 if transpose else 0, lower=lower, unit_diagonal=unit_diagonal,
              check_finite=False)
    out = np.empty(b.shape, b.dtype)
    for i in np.ndindex(a.shape[:-2]):   # one LAPACK trtrs per matrix, in any SciPy version
        out[i] = solve_triangular(a[i], b[i], **kw)
    return out


define("triangular_solve", "host", _solve_rule, _triangular_solve, section=SECTION,
       doc=Doc("a: [..., n, n] triangular, b: [..., n, k], equal float dtypes and batch axes",
               "`lower`, `transpose`, `unit_diagonal` (bools)", "b's type",
               "x with `op(a) @ x = b`, op(a) = aᵀ with `transpose`: "
               "`scipy.linalg.solve_triangular` (LAPACK trtrs), reading only a's lower (upper) "
               "triangle, and not its diagonal with `unit_diagonal` (taken as ones); a zero on "
               "the diagonal raises LinAlgError"))


# -- factorizations ---------------------------------------------------------------------------

def _square_rule(prim, a, **params):
    return _matrices(prim, a)


def _cholesky(a, *, upper):
    a = np.asarray(a)
    if not upper:
        return np.linalg.cholesky(a)
    try:        # NumPy 2: LAPACK potrf on the upper triangle (not bitwise the transposed one)
        return np.linalg.cholesky(a, upper=True)
    except TypeError:
        return np.swapaxes(np.linalg.cholesky(np.swapaxes(a, -1, -2)), -1, -2)


define("cholesky", "host", _square_rule, _cholesky, section=SECTION,
       doc=Doc("a: [..., n, n] float, symmetric positive definite", "`upper` (bool)",
               "same as a", "`np.linalg.cholesky(a)`: lower-triangular l with a = l lᵀ, "
               "reading a's lower triangle; with `upper`, uᵀ u = a from a's upper triangle "
               "(the transposed problem); not positive definite raises LinAlgError"))


def _eigh(a, *, lower):
    a = np.asarray(a)
    w, v = np.linalg.eigh(a, UPLO="L" if lower else "U")
    return _pack(w, v, batch=a.shape[:-2])


define("eigh", "host", _packed_rule, _eigh, section=SECTION,
       doc=Doc("a: [..., n, n] float, symmetric", "`lower` (bool: the triangle read)",
               "[..., n + n²]: w, then v row-major",
               "`np.linalg.eigh(a, UPLO)` packed: eigenvalues w ascending, eigenvectors the "
               "columns of v (fusegrad.numpy slices them apart)"))


def _svd(a, *, full_matrices=False):
    a = np.asarray(a)
    u, s, vt = np.linalg.svd(a, full_matrices=full_matrices)
    return _pack(u, s, vt, batch=a.shape[:-2])


define("svd", "host", _packed_rule, _svd, section=SECTION,
       doc=Doc("a: [..., m, n] float", "`full_matrices` (bool, default False)",
               "[..., mk + k + kn], k = min(m, n): u, s, vt (full: mm + k + nn)",
               "`np.linalg.svd(a, full_matrices)` packed: u [m, k] ([m, m] full), singular "
               "values s descending, vt [k, n] ([n, n] full), each row-major"))


def _qr(a, *, mode="reduced"):
    a = np.asarray(a)
    return _pack(*np.linalg.qr(a, mode=mode), batch=a.shape[:-2])


define("qr", "host", _packed_rule, _qr, section=SECTION,
       doc=Doc("a: [..., m, n] float", '`mode`: "reduced" (default), "complete", "raw"',
               "[..., mk + kn], k = min(m, n): q, r (complete: mm + mn; raw: nm + k)",
               "`np.linalg.qr(a, mode)` packed, each row-major: q [m, k] with orthonormal "
               "columns and upper-triangular r [k, n]; complete: q [m, m], r [m, n]; raw: "
               "LAPACK geqrf's Householder reflectors h [n, m] and their factors tau [k]"))


def _require_zero(x, *, shape, message):
    if np.any(np.asarray(x) != 0):
        raise NotImplementedError(message)
    return np.zeros(tuple(shape), np.asarray(x).dtype)


def _require_zero_rule(prim, x, *, shape, message):
    require_float(prim, x)
    return x.with_shape(tuple(shape))


define("require_zero", "host", _require_zero_rule, _require_zero, section=SECTION,
       doc=Doc("x float", "`shape`, `message` (str)", "x's dtype, `shape`",
               "zeros; raises NotImplementedError(message) when x has an element that is not "
               "0. The gradients of svd and qr with full matrices check with it that no "
               "cotangent reached the singular vectors (columns of q) that are not unique"))


def _slogdet(a):
    a = np.asarray(a)
    sign, logabsdet = np.linalg.slogdet(a)
    return _pack(sign, logabsdet, batch=a.shape[:-2])


define("slogdet", "host", _packed_rule, _slogdet, section=SECTION,
       doc=Doc("a: [..., n, n] float", "", "[..., 2]: sign, log|det|",
               "`np.linalg.slogdet(a)` packed (LU); a singular a gives sign 0, log|det| -inf; "
               "`np.linalg.det` is sign · exp(log|det|), as NumPy computes it"))


def _expm(a):
    from scipy.linalg import expm
    a = np.asarray(a)
    return np.asarray(expm(a)).astype(a.dtype, copy=False)


define("expm", "host", _square_rule, _expm, section=SECTION,
       doc=Doc("a: [..., n, n] float", "", "same as a",
               "`scipy.linalg.expm(a)`: the matrix exponential (scaling and squaring with Padé "
               "approximants)"))
