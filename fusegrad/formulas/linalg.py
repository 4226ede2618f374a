"""Linear algebra: matmul and the LAPACK-backed primitives of ir/linalg.py.

The formulas are the literature's, each rule written with matmul, the solves and the
factorizations themselves, so every order differentiates again:

* solve (x = a⁻¹ b): b̄ = a⁻ᵀ ḡ, ā = -b̄ xᵀ (Giles 2008, 2.2.3); triangular_solve alike, ā kept
  on the triangle the solve reads.
* slogdet: ∂ log|det a| = a⁻ᵀ (Giles 2.2.4); the sign is piecewise constant.
* cholesky (a = l lᵀ): Murray 2016, ā = Φ(l⁻ᵀ Φ(lᵀ l̄) l⁻¹) symmetrized, Φ the lower triangle
  with its diagonal halved.
* eigh (a = v diag(w) vᵀ): ā = v (diag(w̄) + F ∘ (vᵀ v̄)) vᵀ, F_ij = 1 / (w_j - w_i) (Giles 3.1).
* svd (a = u diag(s) vᵀ, reduced): Townsend 2016, "Differentiating the singular value
  decomposition", with F_ij = 1 / (s_j² - s_i²) and the two projector terms for m ≠ n.
* qr (reduced, m ≥ n): ā = (q̄ + q copyltu(M)) r⁻ᵀ, M = r r̄ᵀ - q̄ᵀ q (Walter and Lehmann 2018;
  copyltu(M) is M's lower triangle mirrored). For m < n, a = [x | y] with x square:
  ȳ = q r̄_y and x's QR sees q̄ + y r̄_yᵀ (the derivation PyTorch uses).
* expm: the adjoint of the Fréchet derivative, L(aᵀ, ḡ): the top-right block of
  expm([[aᵀ, ḡ], [0, aᵀ]]) (Al-Mohy and Higham 2009).

Conventions:
* cholesky and eigh read one triangle of a (NumPy's UPLO), so the gradient is the gradient of
  that function and lands on that triangle: Φ(Ā + Āᵀ) for the symmetric-input gradient Ā.
  JAX and PyTorch return Ā's symmetric part instead; for a matrix built symmetric (x + xᵀ,
  x xᵀ) both give the same gradient to what built it.
* Degenerate spectra: F_ij is set to 0 where w_i = w_j (s_i = s_j) exactly, and 1/s to 0 where
  s = 0. So a loss of the eigenvalues (singular values) alone has its exact gradient even with
  repeated ones (the eigenvector cotangent is zero there). Eigenvectors (singular vectors) of
  a repeated eigenvalue (singular value) are not unique, and neither is their derivative: the
  part of the gradient through them that mixes the degenerate subspace is dropped, as if the
  loss did not depend on the choice of basis within it; nearly equal ones give large
  gradients, as in JAX and PyTorch.
* Singular matrices: the gradients of solve, inv, slogdet (det) and of qr and triangular
  solves with a singular r or a need a⁻¹ and raise LinAlgError, as the forward solve does.
* Packed results (ir/linalg.py): the rules of eigh, svd, qr and slogdet get g and out in the
  packed layout and cut them with `_unpack`.
* Full factors of a non-square a (svd with full_matrices, qr mode "complete" of a tall a): the
  columns of u (q) and rows of vt past min(m, n) are any orthonormal basis of a complement, so
  they have no derivative. The gradient goes through the first min(m, n), which are the
  reduced factors, as PyTorch's does; unlike PyTorch, which drops a cotangent that reaches the
  rest, the rule adds `require_zero` of it, which raises NotImplementedError at run time when
  it is not all zeros (JAX refuses every gradient of a full svd). r's rows past n are zeros
  and their cotangent is rightly dropped. qr mode "raw" (LAPACK's reflectors) has no rule: its
  gradient raises NotImplementedError.
"""

from __future__ import annotations

from .. import lax
from ..dispatch import bind
from ..ir.linalg import packed_parts
from .table import _mT, _vjp


def _matmul_vjp(g, a, b):
    """g @ b^T and a^T @ g, with 1-D operands promoted to a row (a) or a column (b) and back.

    Batch dimensions that were broadcast come back in the broadcast shape; the driver sums them.
    """
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    a2 = lax.reshape(a, (1,) + tuple(a.shape)) if a_vec else a
    b2 = lax.reshape(b, tuple(b.shape) + (1,)) if b_vec else b
    batch = tuple(g.shape)[:len(g.shape) - (not a_vec) - (not b_vec)]
    g2 = lax.reshape(g, batch + (a2.shape[-2], b2.shape[-1]))
    ga, gb = lax.matmul(g2, _mT(b2)), lax.matmul(_mT(a2), g2)
    if a_vec:
        ga = lax.reshape(ga, batch + tuple(a.shape))
    if b_vec:
        gb = lax.reshape(gb, batch + tuple(b.shape))
    return ga, gb


@_vjp("matmul", "MatmulBackward", reads="a b")
def matmul(g, out, a, b):
    return _matmul_vjp(g, a, b)


# ---------------------------------------------------------------------------------------------
# Helpers: the host primitives by name (lax has functions for the elementwise ones only),
# triangles, identities, scaled rows and columns, packed layouts, guarded reciprocals.

def _solve(a, b):
    return bind("solve", a, b)


def _trsolve(a, b, lower, transpose, unit_diagonal=False):
    return bind("triangular_solve", a, b, lower=lower, transpose=transpose,
                unit_diagonal=unit_diagonal)


def _triangle(n, lower, strict=False):
    """The [n, n] mask of the lower (upper) triangle, with or without the diagonal."""
    rows, cols = lax.iota((n, n), "i64", 0), lax.iota((n, n), "i64", 1)
    if lower:
        return lax.gt(rows, cols) if strict else lax.ge(rows, cols)
    return lax.lt(rows, cols) if strict else lax.le(rows, cols)


def _keep(x, mask):
    return lax.select(mask, x, 0.0)


def _phi(x, lower=True):
    """Φ: the lower (upper) triangle with the diagonal halved."""
    n = x.shape[-1]
    return lax.select(_triangle(n, lower, True), x,
                      lax.select(_triangle(n, lower), 0.5 * x, 0.0))


def _eye(n, like):
    return lax.convert(lax.eq(lax.iota((n, n), "i64", 0), lax.iota((n, n), "i64", 1)),
                       like.dtype)


def _rows(v):
    """v [..., k] as [..., 1, k]: multiplying by it scales columns."""
    return lax.reshape(v, tuple(v.shape)[:-1] + (1, v.shape[-1]))


def _cols(v):
    """v [..., k] as [..., k, 1]: multiplying by it scales rows."""
    return lax.reshape(v, tuple(v.shape) + (1,))


def _unpack(prim, packed, shape, **params):
    """The results packed in `packed`'s last axis, for an operand of `shape` and prim's
    params."""
    batch = tuple(packed.shape)[:-1]
    r = len(batch)
    return [lax.reshape(lax.slice(packed, (0,) * r + (start,), batch + (stop,)), batch + piece)
            for start, stop, piece in packed_parts(prim, shape, **params)]


def _gaps(w, squared=False):
    """F_ij = 1 / (w_j - w_i) (or 1 / (w_j² - w_i²)), 0 where they are equal (the diagonal,
    degenerate pairs); the double where keeps higher derivatives finite there."""
    if squared:
        w = w * w
    d = _rows(w) - _cols(w)
    same = lax.eq(d, 0.0)
    return lax.select(same, 0.0, 1.0 / lax.select(same, 1.0, d))


def _safe_inverse(s):
    zero = lax.eq(s, 0.0)
    return lax.select(zero, 0.0, 1.0 / lax.select(zero, 1.0, s))


def _onto_triangle(abar, lower):
    """The gradient for a function of one triangle of a symmetric matrix: Φ(Ā + Āᵀ)."""
    return _phi(abar + _mT(abar), lower)


# ---------------------------------------------------------------------------------------------
# Solves and determinants.

@_vjp("solve", "SolveBackward", reads="out a")
def solve(g, out, a, b):
    gb = _solve(_mT(a), g)
    return -lax.matmul(gb, _mT(out)), gb


@_vjp("triangular_solve", "TriangularSolveBackward", reads="out a")
def triangular_solve(g, out, a, b, *, lower, transpose, unit_diagonal):
    gb = _trsolve(a, g, lower, not transpose, unit_diagonal)
    ga = lax.matmul(out, _mT(gb)) if transpose else lax.matmul(gb, _mT(out))
    return -_keep(ga, _triangle(a.shape[-1], lower, strict=unit_diagonal)), gb


@_vjp("slogdet", "SlogdetBackward", reads="x")
def slogdet(g, out, x):
    _, glog = _unpack("slogdet", g, x.shape)
    n = x.shape[-1]
    scaled = _eye(n, x) * lax.reshape(glog, tuple(glog.shape) + (1, 1))
    return (_solve(_mT(x), scaled),)


# ---------------------------------------------------------------------------------------------
# Factorizations.

@_vjp("cholesky", "CholeskyBackward", reads="out")
def cholesky(g, out, a, *, upper):
    l, gl = (_mT(out), _mT(g)) if upper else (out, g)
    p = _phi(lax.matmul(_mT(l), gl))
    x = _trsolve(l, p, True, True)                       # l⁻ᵀ Φ(lᵀ l̄)
    s_t = _trsolve(l, _mT(x), True, True)                # (l⁻ᵀ Φ(lᵀ l̄) l⁻¹)ᵀ
    ga = _onto_triangle(s_t, True)
    return (_mT(ga) if upper else ga,)


@_vjp("eigh", "EighBackward", reads="out a.shape")
def eigh(g, out, a, *, lower):
    w, v = _unpack("eigh", out, a.shape)
    gw, gv = _unpack("eigh", g, a.shape)
    inner = _gaps(w) * lax.matmul(_mT(v), gv) + _eye(a.shape[-1], v) * _cols(gw)
    abar = lax.matmul(lax.matmul(v, inner), _mT(v))
    return (_onto_triangle(abar, lower),)


def _not_unique(extra, a, call, part):
    """Zeros of a's shape, added to ā so that the check stays in the program: it raises when a
    cotangent reached `extra`, the part of a full factor that is not unique."""
    m, n = a.shape[-2:]
    return bind("require_zero", extra, shape=tuple(a.shape), message=(
        f"np.linalg.{call} of [{m}, {n}] matrices: the gradient reached {part}, which is not "
        f"unique (any orthonormal basis of a complement will do), nor is its derivative: "
        f"differentiate through the first {min(m, n)} only, or use the reduced factorization"))


@_vjp("svd", "SvdBackward", reads="out a.shape")
def svd(g, out, a, *, full_matrices=False):
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, vt = _unpack("svd", out, a.shape, full_matrices=full_matrices)
    gu, gs, gvt = _unpack("svd", g, a.shape, full_matrices=full_matrices)
    if not full_matrices or m == n:
        return (_svd_reduced(gu, gs, gvt, u, s, vt),)
    if m > n:           # u [m, m]: its first k columns are the reduced u
        (u, _), (gu, extra) = _split_columns(u, k), _split_columns(gu, k)
        part = f"u[..., :, {k}:]"
    else:               # vt [n, n]: its first k rows are the reduced vt
        (vt, _), (gvt, extra) = _split_rows(vt, k), _split_rows(gvt, k)
        part = f"vh[..., {k}:, :]"
    check = _not_unique(extra, a, "svd(full_matrices=True)", part)
    return (_svd_reduced(gu, gs, gvt, u, s, vt) + check,)


def _svd_reduced(gu, gs, gvt, u, s, vt):
    """ā for the reduced factors u [m, k], s [k], vt [k, n] (Townsend 2016)."""
    m, n = u.shape[-2], vt.shape[-1]
    f, k = _gaps(s, squared=True), min(m, n)
    utgu, vtgv = lax.matmul(_mT(u), gu), lax.matmul(vt, _mT(gvt))
    inner = (f * (utgu - _mT(utgu))) * _rows(s) + _cols(s) * (f * (vtgv - _mT(vtgv))) \
        + _eye(k, s) * _cols(gs)
    abar = lax.matmul(lax.matmul(u, inner), vt)
    sinv = _safe_inverse(s)
    if m > k:       # (1 - u uᵀ) ū s⁻¹ vᵀ
        abar = abar + lax.matmul((gu - lax.matmul(u, utgu)) * _rows(sinv), vt)
    if n > k:       # u s⁻¹ v̄ᵀ (1 - v vᵀ)
        abar = abar + lax.matmul(u, _cols(sinv) * (gvt - lax.matmul(_mT(vtgv), vt)))
    return abar


def _qr_square_or_tall(gq, gr, q, r):
    """ā for a = q r with m ≥ n: (q̄ + q copyltu(r r̄ᵀ - q̄ᵀ q)) r⁻ᵀ."""
    mm = lax.matmul(r, _mT(gr)) - lax.matmul(_mT(gq), q)
    low = _keep(mm, _triangle(mm.shape[-1], True, True))
    b = gq + lax.matmul(q, low + _mT(low) + _eye(mm.shape[-1], mm) * mm)
    return _mT(_trsolve(r, _mT(b), False, False))


def _split_columns(x, m):
    """x[..., :m] and x[..., m:]."""
    shape, rank = tuple(x.shape), len(x.shape)
    return (lax.slice(x, (0,) * rank, shape[:-1] + (m,)),
            lax.slice(x, (0,) * (rank - 1) + (m,), shape))


def _split_rows(x, m):
    """x[..., :m, :] and x[..., m:, :]."""
    top, bottom = _split_columns(_mT(x), m)
    return _mT(top), _mT(bottom)


@_vjp("qr", "QrBackward", reads="out a.shape")
def qr(g, out, a, *, mode="reduced"):
    m, n = a.shape[-2:]
    if mode == "raw":
        raise NotImplementedError(
            "np.linalg.qr(mode='raw') has no gradient in fusegrad: the Householder reflectors "
            "h and factors tau are LAPACK's storage, not a function fusegrad differentiates; "
            "use mode='reduced' (q, r)")
    q, r = _unpack("qr", out, a.shape, mode=mode)
    gq, gr = _unpack("qr", g, a.shape, mode=mode)
    if m > n and mode == "complete":    # q's first n columns and r's first n rows are the
        (q, _), (gq, extra) = _split_columns(q, n), _split_columns(gq, n)   # reduced ones;
        r, gr = _split_rows(r, n)[0], _split_rows(gr, n)[0]                 # r's rest is 0
        check = _not_unique(extra, a, "qr(mode='complete')", f"q[..., :, {n}:]")
        return (_qr_square_or_tall(gq, gr, q, r) + check,)
    if m >= n:
        return (_qr_square_or_tall(gq, gr, q, r),)
    (rx, ry), (grx, gry) = _split_columns(r, m), _split_columns(gr, m)
    y = lax.matmul(q, ry)                                # a's columns past the square part
    gx = _qr_square_or_tall(gq + lax.matmul(y, _mT(gry)), grx, q, rx)
    return (lax.concatenate([gx, lax.matmul(q, gry)], len(a.shape) - 1),)


@_vjp("expm", "ExpmBackward", reads="x")
def expm(g, out, x):
    n, at = x.shape[-1], _mT(x)
    top = lax.concatenate([at, g], len(x.shape) - 1)
    bottom = lax.concatenate([lax.full(tuple(x.shape), 0.0, x.dtype), at], len(x.shape) - 1)
    big = bind("expm", lax.concatenate([top, bottom], len(x.shape) - 2))
    rank = len(x.shape)
    return (lax.slice(big, (0,) * (rank - 1) + (n,), tuple(x.shape[:-2]) + (n, 2 * n)),)
