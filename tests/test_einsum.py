"""Contractions (issue 14 item 3): np.einsum with any subscripts, tensordot, dot and inner of any
ranks, vdot, outer, vecdot, multi_dot and batched matmul with broadcast batch axes, on tensors
and tracers: NumPy's values (to the rounding of sums in another order), shapes and dtypes, and
gradients that check_grads confirms to order 2 in float64 on eager, interp and numba. The IR is
matmul, or broadcast, multiply and reduce_sum: never a loop per element.

Many contractions share one program (a group returns a tuple), so each backend compiles a few.
"""

import os

import numpy as np
from domains import scalarized as _scalar
import pytest

import fusegrad as fg
import fusegrad.numpy as fnp
from fusegrad.testing import check_grads

rng = np.random.default_rng(3)


def r(*shape):
    return rng.standard_normal(shape)


X, Y, Z = r(2, 3), r(3, 4), r(4, 2)
Q, Q3 = r(3, 3), r(3, 3, 3)
B1, B2 = r(2, 1, 3, 2), r(4, 2, 3)
V3, V4 = r(3), r(4)


def explicit(x, y, z, q):
    return (np.einsum("ij,jk->ik", x, y), np.einsum("ij,jk,kl->il", x, y, z),
            np.einsum("ij->ji", x), np.einsum("ij->", x), np.einsum("ij,ij->ij", x, x),
            np.einsum("ij,kl->ijkl", x, z), np.einsum("ab,cd,bc->ad", x, z, y[:, :4]),
            np.einsum("ik,kj,jl,li->", x, y[:, :2], z[:2], q[:2, :2]),
            np.einsum(" i j , j k -> k i ", x, y), np.einsum("ij,jk", x, y),
            np.einsum("Ba,aC", x, y), np.einsum("i,i,i->", y[0], y[1], y[2]),
            np.einsum("ij,i->j", y, q[0]))


def diagonals(q, q3, x):
    return (np.einsum("ii", q), np.einsum("ii->i", q), np.einsum("iij->ij", q3),
            np.einsum("iji->j", q3), np.einsum("iii->i", q3), np.einsum("iii", q3),
            np.einsum("ii,ij->j", q, x.T), np.einsum("ijj,kj->ik", q3, x))


def broadcasting(b1, b2, x, q3):
    return (np.einsum("...ij,...jk->...ik", b1, b2), np.einsum("...ij,j", b1, x[0, :2]),
            np.einsum("i...i", q3), np.einsum("...ii->...i", q3), np.einsum("ij,ij->ij",
            x[:, :1], x), np.einsum("ij,jk", x[:, :1], b2[0, :1]),
            np.einsum("...,...", x, x[0]), np.einsum("b...i,b...i->b...", b2, b2),
            np.einsum(x, [0, 1], x[0], [1], [0]),
            np.einsum(b1, [Ellipsis, 1, 2], x[:, :2], [3, 2]))


def products(x, y, z, q3, b1, b2, v3, v4):
    return (np.tensordot(q3, y, 1), np.tensordot(q3, q3, axes=([1, 0], [0, 2])),
            np.tensordot(x, z, 0), np.tensordot(q3, q3), np.dot(x, q3), np.dot(v3, q3),
            np.dot(q3, v3), np.dot(x, y), np.inner(q3, x), np.inner(v3, x), np.inner(q3, q3),
            np.vdot(x, x), np.outer(x, v4), np.matmul(b1, b2), b2 @ y, v3 @ q3, q3 @ v3,
            np.linalg.multi_dot([x, y, z]), np.linalg.multi_dot([v3, y, z, x]),
            np.linalg.multi_dot([x, y, z, x, y, v4]), np.linalg.multi_dot([v3, y[:, :3], v3]),
            np.tensordot(y, v4, axes=(1, 0)))


GROUPS = {
    "explicit": (explicit, (X, Y, Z, Q)),
    "diagonals": (diagonals, (Q, Q3, X)),
    "broadcasting": (broadcasting, (B1, B2, X, Q3)),
    "products": (products, (X, Y, Z, Q3, B1, B2, V3, V4)),
}
if hasattr(np, "vecdot"):
    GROUPS["vecdot"] = (lambda x, v: (np.vecdot(x, v), np.linalg.vecdot(x.T, v[:, None], axis=0),
                                      np.linalg.outer(v, x[0]), np.linalg.tensordot(x, x)),
                        (X, V3))


def _leaves(out):
    return [np.asarray(o.numpy() if isinstance(o, fg.Tensor) else o) for o in out]


def _check_forward(name, got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, i, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14, err_msg=f"{name} output {i}")


@pytest.mark.parametrize("name", GROUPS)
def test_forward_matches_numpy(name):
    f, args = GROUPS[name]
    want = _leaves(f(*args))
    _check_forward(f"{name} interp", _leaves(fg.jit(f, backend="interp")(*args)), want)
    _check_forward(f"{name} tensors", _leaves(f(*(fg.tensor(a) for a in args))), want)


@pytest.mark.parametrize("backend", ["eager", "interp"])
@pytest.mark.parametrize("name", GROUPS)
def test_gradients_to_order_two(name, backend):
    f, args = GROUPS[name]
    check_grads(_scalar(f, args), args, order=2, backend=None if backend == "eager" else backend)


# Numba compiles each fused kernel separately (one to two seconds each here); a second-order
# gradient of a group holds dozens. The IR is the one interp runs above, and its index maps
# and matmuls are codegen's usual ones, so by default numba runs one program of every kind of
# contraction forward, and the gradient of one with a diagonal (a strided slice, whose
# gradient is an interior pad) and a matmul to order two; FUSEGRAD_TEST_NUMBA_BREADTH=1 also
# checks the first program's gradients (minutes).

def compiled(x, y, z, q3, b1, b2):
    """A chain in greedy order, a diagonal, a broadcast batch, a tensordot and a dot of rank 3."""
    return (np.einsum("ij,jk,kl->il", x, y, z), np.einsum("iij,kj->ik", q3, x),
            np.einsum("...ij,...jk->...ik", b1, b2), np.tensordot(q3, y, 1), np.dot(x, q3))


def test_forward_compiled():
    args = (X, Y, Z, Q3, B1, B2)
    _check_forward("numba", _leaves(fg.jit(compiled, backend="numba")(*args)),
                   _leaves(compiled(*args)))


def test_compiled_gradient_to_order_two():
    f = lambda q3, y: np.sum(np.sin(np.einsum("iij,jk->ik", q3, y)))  # noqa: E731
    check_grads(f, (Q3, Y), order=2, backend="numba")


@pytest.mark.skipif(os.environ.get("FUSEGRAD_TEST_NUMBA_BREADTH", "") in ("", "0"),
                    reason="minutes of numba compiles: set FUSEGRAD_TEST_NUMBA_BREADTH=1")
def test_compiled_gradients_to_order_two():
    args = (X, Y, Z, Q3, B1, B2)
    check_grads(_scalar(compiled, args), args, order=2, backend="numba")


# -- dtypes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("i,i", np.array([True, False, True]), np.array([True, True, False])),
    ("ij,jk", np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)),
    ("ij,j", X.astype(np.float32), V3.astype(np.float32)),
    ("ij,j", X.astype(np.float32), V3),
    ("ij,j", np.arange(6).reshape(2, 3), V3.astype(np.float32)),
    ("", np.float64(2.5)),
    ("i->", np.arange(4)),
])
def test_dtypes_follow_numpy(args):
    want = np.einsum(*args)
    got = fg.jit(lambda *a: np.einsum(args[0], *a), backend="interp")(*args[1:])
    assert got.dtype == want.dtype and got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert fnp.einsum("ij->", X, dtype=np.float32).dtype == np.float32


# -- the IR: BLAS calls and index maps, in greedy order ---------------------------------------

def test_chain_is_contracted_in_greedy_order_with_matmuls():
    """(ij,jk,kl) with j, k large and i, l small: b @ c first, whose result is smaller."""
    a, b, c = r(2, 50), r(50, 60), r(60, 3)
    fn = fg.make_ir(lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c))(a, b, c)
    matmuls = [op for op in fn.ops if op.prim == "matmul"]
    assert [m.inputs[0].shape for m in matmuls] == [(50, 60), (2, 50)]
    assert not any(op.prim in ("take", "take_along_axis") for op in fn.ops)


def test_diagonal_is_a_strided_slice():
    fn = fg.make_ir(lambda q: np.einsum("ii->i", q))(Q)
    (op,) = [op for op in fn.ops if op.prim == "slice"]
    assert op.params["step"] == (4,)


def test_batch_dot_is_a_fused_multiply_and_sum():
    fn = fg.make_ir(lambda a, b: np.einsum("bi,bi->b", a, b))(X, X)
    assert [op.prim for op in fn.ops] == ["mul", "reduce_sum"]


# -- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("f, words", [
    (lambda x: np.einsum("ij,jk", x, np.ones((4, 2))), "could not be broadcast"),
    (lambda x: np.einsum("ii", x), "don't match"),
    (lambda x: np.einsum("ij->k", x), "never appeared"),
    (lambda x: np.einsum("ij->ii", x), "multiple times"),
    (lambda x: np.einsum("...j->j", np.ones((2, 2, 3))), "no '...' ellipsis"),
    (lambda x: np.einsum("ij,jk", x), "fewer operands"),
    (lambda x: np.einsum("ijk", x), "2 dimensions"),
    (lambda x: np.einsum("i1", x), "invalid subscript"),
    (lambda x: np.tensordot(x, x, 1), "shape-mismatch"),
])
def test_errors_say_what_is_wrong(f, words):
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match=words):
        fg.jit(f, backend="interp")(x)
