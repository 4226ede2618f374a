"""np.linalg and scipy.linalg (issue 14 item 4) on tensors and tracers: NumPy's and SciPy's
values (bit for bit where fusegrad calls the same LAPACK routine on the same matrix), shapes
and dtypes, batched over leading axes; gradients that check_grads confirms to order 2 in
float64; LinAlgError for singular input on every backend; the derivative conventions at
repeated eigenvalues and singular values.

Functions share programs (a group returns a tuple) so each backend compiles a few programs.
Numba compiles every fused kernel separately (one to two seconds each here), and a group's
second-order gradient holds dozens: by default numba compiles what is new to its code, the
host steps (every LAPACK primitive forward, and the backward of solve to order 2); the IR it
compiles is the IR interp runs, which the tests check for every group.
FUSEGRAD_TEST_NUMBA_BREADTH=1 also checks every group's gradients compiled (minutes).
"""

import os

import numpy as np
import pytest
import scipy.linalg as sl

import fusegrad as fg
import fusegrad.numpy as fnp
import fusegrad.scipy  # noqa: F401 - routes scipy.linalg calls on tensors and tracers
from fusegrad.ir import PRIMITIVES
from fusegrad.scipy import linalg as fsl
from domains import scalarized as _scalar
from fusegrad.testing import check_grads

L = np.linalg
rng = np.random.default_rng(4)


def r(*shape):
    return rng.standard_normal(shape)


def _spd(x):
    return x @ np.swapaxes(x, -1, -2) + np.eye(x.shape[-1])


A = r(3, 3) + 3 * np.eye(3)                     # well conditioned
AB = r(2, 3, 3) + 3 * np.eye(3)                 # a batch of them
S, SB = _spd(A), _spd(AB)                       # symmetric positive definite
T, W = r(4, 3), r(2, 3)                         # tall, wide
TB = r(2, 4, 3)                                 # a batch of tall ones
B, V = r(3, 2), r(3)
LOW = np.tril(A)
DIST = (rng.permutation(12) * 0.3 - 1.55).reshape(3, 4)     # distinct, nonzero: no ties


def solves(a, ab, b, v):
    return (L.solve(a, v), L.solve(a, b), L.solve(ab, b), L.solve(a, np.stack([b, b])),
            L.solve(ab, v), L.inv(a), L.inv(ab), L.det(a), L.det(ab), *L.slogdet(ab),
            L.matrix_power(a, 0), L.matrix_power(a, 1), L.matrix_power(0.5 * a, 2),
            L.matrix_power(0.5 * a, 3), L.matrix_power(0.3 * ab, 6), L.matrix_power(a, -2))


def factorizations(s, sb, t, w):
    return (L.cholesky(s), L.cholesky(sb, upper=True), *L.eigh(sb), L.eigh(s, "U")[0],
            L.eigvalsh(s), *L.svd(t, full_matrices=False), *L.svd(w, full_matrices=False),
            *L.svd(s), L.svd(sb, compute_uv=False), L.svdvals(t), *L.qr(t), *L.qr(w),
            L.qr(sb, "r"), *L.qr(w, "complete"))


def full_factors(t, w, tb):
    """svd with full_matrices=True and qr mode='complete' of non-square matrices, through the
    parts that have a gradient: u's (q's) first min(m, n) columns, vh's first min(m, n) rows;
    and mode 'r'."""
    u, s, vh = L.svd(t)
    u2, s2, vh2 = L.svd(w)
    ub, sb, vhb = L.svd(tb)
    q, r_ = L.qr(t, "complete")
    qb, rb = L.qr(tb, "complete")
    return (u[:, :3], s, vh, u2, s2, vh2[:2], ub[..., :3], sb, vhb, q[:, :3], r_, qb[..., :3],
            rb, L.qr(t, "r"), *L.qr(w, "complete"))


def composed(a, t, w, v):
    x, resids, _, sv = L.lstsq(t, np.concatenate([v, v[:1]]))
    return (L.pinv(t), L.pinv(w), L.pinv(a, rtol=1e-3), x, resids, sv,
            L.lstsq(w, a[:2])[0], L.cond(a), L.cond(a, -2), L.cond(a, 1), L.cond(a, "fro"),
            L.cond(a, -np.inf))


def norms(x, v):
    vector = [L.norm(v, o) for o in (None, 2, 1, -1, np.inf, -np.inf, 0, 3, 0.5, -2.5)]
    matrix = [L.norm(x, o) for o in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)]
    x3 = np.stack([x, 2 * x])
    return (*vector, *matrix, L.norm(x, axis=0), L.norm(x, 3, axis=-1, keepdims=True),
            L.norm(x3, 1, axis=(2, 0)), L.norm(x3, "nuc", axis=(0, 2), keepdims=True),
            L.norm(x3, -2, axis=(1, 2)), L.norm(x3), L.norm(x, np.inf, axis=1),
            L.vector_norm(x3, axis=(0, 2), ord=3), L.vector_norm(x, keepdims=True),
            L.matrix_norm(x3, ord=np.inf), L.matrix_norm(x3, keepdims=True))


def scipy_linalg(low, s, b, v, a):
    c, lower = sl.cho_factor(s)
    cl = sl.cho_factor(s, lower=True)
    return (sl.solve_triangular(low, b, lower=True), sl.solve_triangular(low, v, trans=1,
            lower=True), sl.solve_triangular(low.T, b, trans="T", unit_diagonal=True),
            sl.solve_triangular(np.stack([low, 2 * low]), b, lower=True), c,
            sl.cho_solve((c, lower), b), cl[0], sl.cho_solve(cl, v), sl.cholesky(s),
            sl.cholesky(s, lower=True), sl.expm(np.stack([0.3 * a, -0.5 * a])))


def extras(a, t):
    return (L.matrix_transpose(t), L.diagonal(t), L.diagonal(a, offset=-1), L.trace(t),
            L.trace(a, offset=1), L.diagonal(t, offset=7))


GROUPS = {
    "solves": (solves, (A, AB, B, V)),
    "factorizations": (factorizations, (S, SB, T, W)),
    "full_factors": (full_factors, (T, W, TB)),
    "composed": (composed, (A, T, W, V)),
    "norms": (norms, (DIST, DIST[0])),
    "scipy": (scipy_linalg, (LOW, S, B, V, A)),
    "extras": (extras, (A, T)),
}
# Where fusegrad's LAPACK calls differ from NumPy's and SciPy's (eigvalsh: NumPy skips the
# vectors; svd's compute_uv=False likewise; lstsq: gelsd against an SVD; cho_solve of a vector:
# potrs against two triangular solves), values agree to rounding.
APPROXIMATE = {"factorizations", "composed", "norms", "scipy"}


def _leaves(out):
    return [np.asarray(o.numpy() if isinstance(o, fg.Tensor) else o) for o in out]


@pytest.mark.parametrize("name", GROUPS)
def test_forward_matches_numpy(name):
    f, args = GROUPS[name]
    want = _leaves(f(*args))
    runs = {b: fg.jit(f, backend=b)(*args) for b in ("interp",)}
    runs["tensors"] = f(*(fg.tensor(a) for a in args))
    for backend, out in runs.items():
        got = _leaves(out)
        assert len(got) == len(want), backend
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, (name, backend, i, g.shape, w.shape)
            if name in APPROXIMATE:
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13,
                                           err_msg=f"{name} output {i} on {backend}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{name} output {i} on {backend}")


@pytest.mark.parametrize("backend", ["eager", "interp"])
@pytest.mark.parametrize("name", GROUPS)
def test_gradients_to_order_two(name, backend):
    f, args = GROUPS[name]
    check_grads(_scalar(f, args), args, order=2, backend=None if backend == "eager" else backend)


# -- compiled ---------------------------------------------------------------------------------

def host_steps(a, s, t, b, low):
    """Every LAPACK primitive once, as host steps between kernels."""
    w, v = L.eigh(s)
    return (L.solve(a, b), *L.slogdet(a), L.cholesky(s), w, v, *L.svd(t, full_matrices=False),
            *L.qr(t), sl.solve_triangular(low, b, lower=True), sl.expm(0.3 * a))


def test_compiled_host_steps_match_numpy():
    args = (A, S, T, B, LOW)
    got, want = fg.jit(host_steps, backend="numba")(*args), host_steps(*args)
    for i, (g, w) in enumerate(zip(_leaves(got), _leaves(want))):
        np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


def test_compiled_solve_gradient_to_order_two():
    check_grads(lambda a, b: np.sum(np.sin(L.solve(a, b))), (A, B), order=2, backend="numba")


BREADTH = os.environ.get("FUSEGRAD_TEST_NUMBA_BREADTH", "") not in ("", "0")


@pytest.mark.skipif(not BREADTH, reason="minutes of numba compiles: set "
                                        "FUSEGRAD_TEST_NUMBA_BREADTH=1")
@pytest.mark.parametrize("name", GROUPS)
def test_compiled_gradients_to_order_two(name):
    f, args = GROUPS[name]
    check_grads(_scalar(f, args), args, order=2, backend="numba")


# -- dtypes, the IR, dispatch -----------------------------------------------------------------

def test_dtypes_follow_numpy():
    ints = np.array([[2, 1], [1, 3]])
    for f in (L.inv, L.det, L.cholesky, L.eigvalsh, lambda x: L.norm(x, "nuc"), sl.expm):
        for x in (ints, ints.astype(np.float32)):
            got = fg.jit(f, backend="interp")(x)
            assert got.dtype == np.asarray(f(x)).dtype, (f, x.dtype)
            np.testing.assert_allclose(got, f(x), rtol=1e-5)
    assert fg.jit(lambda x: L.matrix_power(x, 3), backend="interp")(ints).dtype == np.int64


def test_lapack_runs_as_host_primitives():
    ops = [op.prim for op in fg.make_ir(lambda a: L.inv(a) + L.det(a) + L.eigh(a)[0])(S).ops]
    assert {"solve", "slogdet", "eigh"} <= set(ops)
    assert all(PRIMITIVES[p].category == "host" for p in ("solve", "slogdet", "eigh"))


def test_results_are_numpys_named_tuples():
    x = fg.tensor(S)
    assert L.eigh(x).eigenvalues.shape == (3,)
    assert L.svd(x).S.shape == (3,) and L.qr(x).R.shape == (3, 3)
    assert L.slogdet(x).logabsdet.shape == ()


def test_scipy_names_are_routed_to_fusegrad():
    assert fusegrad.scipy.HANDLED["scipy.linalg.cho_solve"] is fsl.cho_solve
    f = fg.jit(lambda s, b: sl.cho_solve(sl.cho_factor(s), b), backend="interp")
    np.testing.assert_array_equal(f(S, B), sl.cho_solve(sl.cho_factor(S), B))


# -- errors -----------------------------------------------------------------------------------

SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])


@pytest.mark.parametrize("f, x, words", [
    (L.inv, SINGULAR, "Singular matrix"),
    (lambda x: L.solve(x, np.ones(2)), SINGULAR, "Singular matrix"),
    (L.cholesky, -np.eye(2), "not positive definite"),
    (lambda x: sl.solve_triangular(x, np.ones(2)), np.triu(SINGULAR) * [[1, 1], [1, 0]],
     "singular matrix"),
])
@pytest.mark.parametrize("backend", ["tensors", "interp", "numba"])
def test_singular_input_raises_linalgerror(f, x, words, backend):
    with pytest.raises(L.LinAlgError, match=words):
        if backend == "tensors":
            f(fg.tensor(x, requires_grad=True))
        else:
            fg.jit(f, backend=backend)(x)


def test_gradient_of_slogdet_at_a_singular_matrix_raises():
    with pytest.raises(L.LinAlgError):
        fg.grad(lambda x: L.slogdet(x)[1])(SINGULAR)


@pytest.mark.parametrize("f, x, error, words", [
    (L.inv, np.ones((2, 3)), L.LinAlgError, "must be square"),
    (L.det, np.ones(3), L.LinAlgError, "1-dimensional array given"),
    (lambda x: L.solve(x, np.ones(3)), np.eye(2), ValueError, "needs 2 rows"),
    (lambda x: L.svd(x, hermitian=True), np.eye(2), NotImplementedError, "hermitian"),
    (lambda x: L.qr(x, "full"), np.eye(2), NotImplementedError, "deprecated mode='full'"),
    (lambda x: L.qr(x, "x"), np.eye(2), ValueError, "Unrecognized mode 'x'"),
    (lambda x: L.norm(x, "fro"), np.ones(3), ValueError, "Invalid norm order 'fro'"),
    (lambda x: L.norm(x, 3), np.ones((2, 2)), ValueError, "Invalid norm order for matrices"),
    (lambda x: L.norm(x, axis=(0, 1, 2)), np.ones((2, 2, 2)), ValueError, "Improper number"),
    (lambda x: L.eigh(x, "X"), np.eye(2), ValueError, "UPLO"),
    (lambda x: L.matrix_power(x, 1.5), np.eye(2), TypeError, "exponent must be an integer"),
])
def test_argument_errors(f, x, error, words):
    with pytest.raises(error, match=words):
        fg.jit(f, backend="interp")(x)
    with pytest.raises(error, match=words):
        f(fg.tensor(x))


# -- full factors of non-square matrices ---------------------------------------------------------

def full_outputs(t, w, tb):
    return (*L.svd(t), *L.svd(w), *L.svd(tb), *L.qr(t, "complete"), *L.qr(tb, "complete"),
            *L.qr(t, "raw"), *L.qr(w, "raw"), *L.qr(tb, "raw"), L.qr(w, "r"), L.qr(tb, "r"))


@pytest.mark.parametrize("backend", ["tensors", "interp", "numba"])
def test_full_factors_and_raw_qr_match_numpy(backend):
    """NumPy's own LAPACK calls (gesdd for all the vectors, geqrf and orgqr for m columns,
    geqrf alone for raw), so its bits, and its result types."""
    args = (T, W, TB)
    got = (full_outputs(*(fg.tensor(a) for a in args)) if backend == "tensors" else
           fg.jit(full_outputs, backend=backend)(*args))
    for i, (g, w) in enumerate(zip(_leaves(got), _leaves(full_outputs(*args)), strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape)
        np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
    x = fg.tensor(T)
    assert type(L.svd(x)).__name__ == "SVDResult" and L.svd(x).U.shape == (4, 4)
    assert type(L.qr(x, "complete")).__name__ == "QRResult" and type(L.qr(x, "raw")) is tuple


def _reconstruction(a):
    """a from its full svd and complete qr: the cotangents of the extra columns are zeros."""
    u, s, vh = L.svd(a)
    sigma = np.concatenate([np.diag(s), np.zeros((1, 3))])       # [4, 3]
    q, r_ = L.qr(a, "complete")
    return np.sum(np.sin(u @ sigma @ vh) + np.sin(q @ r_))


def test_gradient_through_full_factors_where_it_is_defined():
    """u @ Σ @ vh and q @ r rebuild a, reading u's and q's last column times zeros: the check
    passes, and the gradient is the one of sin(a) twice, on every backend."""
    for backend in (None, "interp", "numba"):
        g = fg.grad(_reconstruction)
        g = fg.jit(g, backend=backend) if backend else g
        np.testing.assert_allclose(g(T), 2 * np.cos(T), rtol=1e-12, err_msg=str(backend))


@pytest.mark.parametrize("f, words", [
    (lambda a: np.sum(L.svd(a).U ** 2), r"svd\(full_matrices=True\) of \[4, 3\] .* "
                                         r"u\[\.\.\., :, 3:\]"),
    (lambda a: np.sum(np.sin(L.svd(a.T).Vh)), r"of \[3, 4\] .* vh\[\.\.\., 3:, :\]"),
    (lambda a: np.sum(L.qr(a, "complete").Q[:, -1]),
     r"qr\(mode='complete'\) .* q\[\.\.\., :, 3:\]"),
    (lambda a: np.sum(L.qr(a, "raw")[1]), r"qr\(mode='raw'\) has no gradient"),
])
@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_gradient_through_parts_that_are_not_unique_raises(f, words, backend):
    """JAX refuses every gradient of a full svd, PyTorch silently drops the extra columns'
    cotangent: fusegrad differentiates through the unique parts and raises when a nonzero
    cotangent reaches the rest, naming the call and the part."""
    g = fg.grad(f) if backend == "eager" else fg.jit(fg.grad(f), backend=backend)
    with pytest.raises(NotImplementedError, match=words):
        g(T)


# -- derivative conventions -------------------------------------------------------------------

def test_repeated_eigenvalues_have_the_eigenvalue_gradient():
    """At a = I every eigenvalue is 1: sum(w²) = ‖a‖² of the triangle eigh reads, so the
    gradient is 2a there, on that triangle (Φ(Ā + Āᵀ) with Ā = 2a): finite, no 1/0."""
    for backend in (None, "interp"):
        g = fg.grad(lambda x: np.sum(L.eigvalsh(x) ** 2))
        g = fg.jit(g, backend=backend) if backend else g
        np.testing.assert_allclose(g(np.eye(3)), 2 * np.eye(3), atol=1e-12)
        up = fg.grad(lambda x: np.sum(L.eigh(x, "U")[0] ** 3))(2 * np.eye(2))
        np.testing.assert_allclose(up, 12 * np.eye(2), atol=1e-12)


def test_gradient_lands_on_the_triangle_read():
    x = fg.grad(lambda a: np.sum(L.cholesky(a)))(S)
    assert np.all(np.triu(x, 1) == 0) and np.any(np.tril(x, -1) != 0)
    x = fg.grad(lambda a: np.sum(L.eigh(a, "U")[1] ** 3))(S)
    assert np.all(np.tril(x, -1) == 0)


def test_singular_values_at_zero_and_repeated():
    """The nuclear norm of a rank-1 matrix (two zero singular values) and the spectral norm
    of 2·I (equal ones) have finite gradients; the latter's is the exact one of ‖·‖₂ of a
    multiple of the identity along the diagonal."""
    rank1 = np.outer([1.0, 2.0, 2.0], [2.0, 1.0, 0.0])
    g = fg.grad(lambda x: L.norm(x, "nuc"))(rank1)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(np.sum(g * rank1), L.norm(rank1, "nuc"), rtol=1e-12)
    g = fg.grad(lambda x: np.sum(L.svd(x, compute_uv=False)))(2 * np.eye(3))
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)


def test_norm_gradients_at_zero_are_zero():
    for ord in (None, 2, 3, 1):
        assert np.all(fg.grad(lambda x: L.norm(x, ord))(np.zeros(3)) == 0)
    assert np.all(fg.grad(lambda x: L.norm(x))(np.zeros((2, 2))) == 0)


TORCH_NORMS = [((), {}), ((1,), {}), ((3,), {}), ((np.inf,), {}), ((-np.inf,), {}),
               ((0,), {}), ((0.5,), {}), (("fro",), {}), ((2, 1), {}), ((1, (0, 2)), {}),
               ((3,), {"dim": -1, "keepdim": True}), (("fro", (1, 2)), {}),
               (("nuc", (1, 2)), {}), ((np.inf, [0, 1], True), {}), ((2,), {"dim": [2, 0]})]


def _torch_norm(x, p="fro", dim=None, keepdim=False):
    """torch.Tensor.norm by definition: the vector norm of the elements over dim (all when
    None; 'fro' is 2), or the nuclear norm over two dims."""
    dim = tuple(dim) if isinstance(dim, list) else dim
    if p == "nuc":
        return L.matrix_norm(np.moveaxis(x, dim, (-2, -1)), ord="nuc")
    return L.vector_norm(x, axis=dim, keepdims=keepdim, ord=2 if p == "fro" else p)


@pytest.mark.parametrize("args, kwargs", TORCH_NORMS)
def test_tensor_norm_is_pytorchs(args, kwargs):
    """Tensor.norm(p) is PyTorch's vector norm of the (flattened) elements, not NumPy's
    matrix norm: for a 2-D tensor, p=1 sums every |x| (np.linalg.norm(x, 1) is the largest
    column sum) and p=inf is the largest |x|; np.linalg.norm of a tensor keeps NumPy's."""
    x3 = np.stack([DIST, -2 * DIST[::-1]])
    want = _torch_norm(x3, *args, **kwargs)
    got = fg.tensor(x3).norm(*args, **kwargs)
    assert got.shape == np.shape(want) and got.dtype == np.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-14)
    traced = fg.jit(lambda x: x.norm(*args, **kwargs), backend="interp")(x3)
    np.testing.assert_allclose(traced, want, rtol=1e-14)


def test_tensor_norm_against_np_linalg_norm_and_its_gradient():
    x = fg.tensor(DIST, requires_grad=True)
    assert float(x.norm(1)) == np.sum(np.abs(DIST)) != L.norm(DIST, 1)
    assert float(L.norm(x, 1)) == L.norm(DIST, 1)
    assert float(x.norm(np.inf)) == np.max(np.abs(DIST)) != L.norm(DIST, np.inf)
    assert x.norm(2, dtype=np.float32).dtype == np.float32
    with pytest.raises(ValueError, match="p must be a number, 'fro' or 'nuc'"):
        x.norm("f")
    x.norm(3, dim=1).sum().backward()
    want = np.sign(DIST) * DIST ** 2 / (L.norm(DIST, 3, axis=1, keepdims=True) ** 2)
    np.testing.assert_allclose(x.grad, want, rtol=1e-13)
    norm = fg.Tensor.norm           # the method on arrays too, for the finite differences
    for backend in (None, "interp"):
        check_grads(lambda v: norm(v, 1.5, dim=(0, 1)) + norm(v, "nuc"), (DIST,), order=2,
                    backend=backend)
    check_grads(lambda v: norm(v, 1.5, dim=0), (DIST,), order=2, backend="numba")


def test_fnp_names():
    assert fnp.norm is fnp.linalg.norm
    np.testing.assert_allclose(fnp.linalg.det(A), L.det(A))
