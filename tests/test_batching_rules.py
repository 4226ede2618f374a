"""fg.vmap's batching rules for gathers and scatters, host linear algebra and special functions,
scan, fori_loop, cond, while_loop and custom_vjp: each against a Python loop over the batch, on
the interpreter (no fallback warning allowed), with a few first calls on numba."""

import warnings

import numpy as np
import pytest
import scipy.special

import fusegrad as fg
from fusegrad import lax

RNG = np.random.default_rng(7)
B = 3
X = RNG.normal(size=(B, 4, 3))
V = RNG.normal(size=(B, 4))
IDX = np.array([[2, 0, 3], [1, 1, -1], [3, 2, 0]])
SPD = np.einsum("bij,bkj->bik", X, X) + 3 * np.eye(4)
SQ = SPD + RNG.normal(size=(B, 4, 4))


def looped(f, args, axes):
    outs = [f(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, axes)])
            for i in range(B)]
    return fg.tree.unflatten(fg.tree.flatten(outs[0])[1], [np.stack(leaves) for leaves in zip(
        *[fg.tree.flatten(o)[0] for o in outs])])


def check(f, args, axes, backend="interp", rtol=1e-12):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a fallback to the scan would warn
        got = fg.jit(fg.vmap(f, in_axes=tuple(axes)), backend=backend)(*args)
        ir = fg.make_ir(fg.vmap(f, in_axes=tuple(axes)))(*args)
    want = looped(f, args, axes)
    for g, w in zip(fg.tree.flatten(got)[0], fg.tree.flatten(want)[0]):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12)
    return ir


def cumsum_take(x, i):
    return np.cumsum(np.take(x, i, axis=0), axis=1) + np.take(x, i % 3, axis=1)[:3]


GATHERS = [
    (cumsum_take, (X, IDX), (0, 0)),
    (cumsum_take, (X, IDX), (0, None)),
    (cumsum_take, (X[0], IDX), (None, 0)),
    (lambda x, i: np.take_along_axis(x, np.broadcast_to(i[:, None], (3, 3)), axis=0),
     (X, IDX), (0, 0)),
    (lambda x, i: np.take_along_axis(x, np.broadcast_to(i[:, None], (3, 3)), axis=0),
     (X[0], IDX), (None, 0)),
    (lambda x, i: np.argsort(x, axis=-1) + np.take(x, i % 3, axis=-1).sum(), (X, IDX), (0, 0)),
]


@pytest.mark.parametrize("case", range(len(GATHERS)))
def test_gathers(case):
    f, args, axes = GATHERS[case]
    check(f, args, axes)


def scatter(x, i, g):
    return lax.scatter_add(i, g, 0, (5, 3)) + lax.scatter_add(i, g.T, 1, (3, 5)).T + \
        lax.scatter_add_along_axis(
        np.broadcast_to(i[:, None] % 4, (3, 3)), x[:3], 0, (4, 3)).sum()


@pytest.mark.parametrize("axes", [(0, 0, 0), (0, None, 0), (None, 0, None), (0, 0, None)])
def test_scatters(axes):
    i = np.abs(IDX)
    g = RNG.normal(size=(B, 3, 3))
    args = [X if axes[0] == 0 else X[0], i if axes[1] == 0 else i[0],
            g if axes[2] == 0 else g[0]]
    check(scatter, args, axes)


def test_gradients_of_gathers_batch_into_scatters():
    f = fg.grad(lambda x, i: (np.take(x, i, axis=0) ** 2).sum())
    ir = check(f, (V, IDX), (0, 0))
    assert "scan" not in [op.prim for op in ir.ops]


LINALG = [
    lambda a, b: np.linalg.solve(a, b),
    lambda a, b: np.linalg.cholesky(a) @ b,
    lambda a, b: np.linalg.eigh(a)[0] * b.sum(),
    lambda a, b: np.abs(np.linalg.qr(a)[1]) @ b,
    lambda a, b: np.linalg.svd(a, compute_uv=False) + b[0, 0],
    lambda a, b: np.linalg.slogdet(a)[1] * b,
    lambda a, b: fg.scipy.linalg.solve_triangular(np.tril(a), b, lower=True),
    lambda a, b: fg.scipy.linalg.expm(a / 10) @ b,
]


@pytest.mark.parametrize("case", range(len(LINALG)))
@pytest.mark.parametrize("axes", [(0, 0), (0, None), (None, 0)])
def test_linear_algebra_over_the_batch_axis(case, axes):
    b = X[:, :, :2]
    check(LINALG[case], [SPD if axes[0] == 0 else SPD[0], b if axes[1] == 0 else b[0]], axes,
          rtol=1e-10)


def test_special_functions_and_cross_entropy():
    t = np.array([[0, 2, 1, 2], [1, 1, 0, 0], [2, 0, 0, 1]])
    def f(x, t):
        return (fg.nn.cross_entropy(x, t) + scipy.special.erfinv(np.tanh(x) / 2).sum()
                + scipy.special.polygamma(1, x * x + 1).sum() + scipy.special.i0e(x).sum())
    ir = check(f, (X, t), (0, 0))
    assert {"log_softmax", "erfinv", "polygamma", "i0e"} <= {op.prim for op in ir.ops}
    check(f, (X[0], t), (None, 0))


def rnn(h, xs, w):
    def step(h, x):
        h = np.tanh(h @ w + x)
        return h, h.sum()
    return lax.scan(step, h, xs)


@pytest.mark.parametrize("axes", [(0, 0, None), (None, 0, None), (None, None, 0), (0, None, 0)])
def test_scan(axes):
    w = RNG.normal(size=(3, 3)) / 2
    args = [X[:, 0] if axes[0] == 0 else X[0, 0], X if axes[1] == 0 else X[0],
            np.stack([w] * B) + X[:, :3] / 10 if axes[2] == 0 else w]
    ir = check(rnn, args, axes)
    assert [op.prim for op in ir.ops].count("scan") == 1


def test_fori_loop_and_grad_of_scan():
    check(lambda x, n: lax.fori_loop(0, 3, lambda i, c: c * x.sum() + i, n), (V, V[:, 0]), (0, 0))
    check(fg.grad(lambda w, xs: rnn(xs[0], xs, w)[1].sum()),
          (RNG.normal(size=(B, 3, 3)) / 2, X), (0, None))


def branches(p, x):
    return lax.cond(p, lambda x: (np.sin(x), x.sum()), lambda x: (x * 2, x.max()), x)


@pytest.mark.parametrize("axes", [(0, 0), (None, 0), (0, None)])
def test_cond(axes):
    p = np.array([True, False, True])
    ir = check(branches, (p if axes[0] == 0 else p[1], X if axes[1] == 0 else X[0]), axes)
    assert ("cond" in [op.prim for op in ir.ops]) == (axes[0] is None)


def newton_sqrt(a, x0):
    def body(c):
        x, n = c
        return (x + a / x) / 2, n + 1
    return lax.while_loop(lambda c: np.abs(c[0] * c[0] - a).max() > 1e-9, body, (x0, 0))


@pytest.mark.parametrize("axes", [(0, None), (None, 0), (0, 0)])
def test_while_loop_runs_while_any_example_runs(axes):
    """Each example stops after its own number of steps (the counts differ per example)."""
    a, x0 = np.array([[2.0], [50.0], [1e4]]), np.array([[1.0], [3.0], [1.0]])
    check(newton_sqrt, (a if axes[0] == 0 else a[1], x0 if axes[1] == 0 else x0[0]), axes)


@fg.custom_vjp
def clipped(x, s):
    return np.sin(x) * s


clipped.defvjp(lambda x, s: (np.sin(x) * s, (np.cos(x), s)),
               lambda r, g: (np.clip(g * r[0] * r[1], -0.5, 0.5), None))


@pytest.mark.parametrize("axes", [(0, None), (0, 0)])
def test_custom_vjp_keeps_the_users_rule_per_example(axes):
    s = np.array([1.0, 3.0, 0.5])
    f = fg.grad(lambda x, s: clipped(x, s).sum())
    check(f, (V, s if axes[1] == 0 else s[1]), axes)
    check(lambda x, s: clipped(x, s), (V, s if axes[1] == 0 else s[1]), axes)


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_grad_of_vmap_runs_the_users_bwd_per_example(backend):
    s = np.array([1.0, 3.0, 0.5])
    g = fg.jit(fg.grad(lambda x: fg.vmap(clipped)(x, s).sum()), backend=backend)(V)
    want = np.clip(np.cos(V) * s[:, None], -0.5, 0.5)
    np.testing.assert_allclose(g, want, rtol=1e-12)
    assert np.abs(g).max() == 0.5          # the clip acted: bwd ran, not fwd's derivative


@pytest.mark.parametrize("case", [0, 1])
def test_first_calls_on_numba(case):
    f, args, axes = [(rnn, (X[:, 0], X, np.eye(3) / 2), (0, 0, None)),
                     (cumsum_take, (X, IDX), (0, 0))][case]
    check(f, args, axes, backend="numba")

