"""Forward mode from the VJP table: jvp, linearize, jacfwd, jacrev, hessian, hvp.

Every value is checked against central finite differences (or a NumPy closed form), eager and
on the interpreter, through scan, fori_loop, while_loop, cond and custom_vjp; one test runs
the zoo on all three backends together (numba on the first call). The optimized IR of a jvp
holds the forward and tangent ops only.
"""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import lax
from fusegrad.testing import assert_backends_agree

RNG = np.random.default_rng(0)
X, T = RNG.normal(size=3), RNG.normal(size=3)
W, TW = RNG.normal(size=(3, 3)), RNG.normal(size=(3, 3))


def fd_jvp(f, xs, ts, eps=1e-6):
    plus = f(*[x + eps * t for x, t in zip(xs, ts)])
    minus = f(*[x - eps * t for x, t in zip(xs, ts)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


def fd_jacobian(f, x, eps=1e-6):
    cols = [(np.asarray(f(x + eps * e)) - np.asarray(f(x - eps * e))) / (2 * eps)
            for e in np.eye(x.size).reshape((x.size,) + x.shape)]
    return np.stack(cols, -1).reshape(np.shape(f(x)) + x.shape)


def rnn(x, w):
    def body(h, xi):
        h = np.tanh(w @ h + xi)
        return h, h.sum()
    h, ys = lax.scan(body, x, np.stack([x, 2 * x, -x]))
    return h.sum() + ys.sum()


def fori(x, w):
    return lax.fori_loop(0, 4, lambda i, h: np.sin(w @ h) * 0.9, x).sum()


def while_(x, w):
    c = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, np.cos(w @ c[1])), (0, x))
    return c[1].sum()


def cond(x, w):
    return lax.cond(x.sum() > 0, lambda a, b: np.exp(a) * b[0], lambda a, b: a * b[1],
                    x, w).sum()


@fg.custom_vjp
def cube(x):
    return x ** 3


cube.defvjp(lambda x: (x ** 3, x), lambda r, g: (3 * r ** 2 * g,))


def custom(x, w):
    return (cube(x) * np.diag(w)).sum()


def composite(x, w):
    return (fg.nn.softmax(w @ x) * np.log1p(x ** 2)).sum() + np.max(w, axis=0) @ np.abs(x)


def linalg(x, w):
    return np.linalg.solve(w + 3 * np.eye(3), x) * np.linalg.norm(w @ x)


def carry_only(x, w):
    """Only the scan's initial carry has a tangent: the consts and xs are constants."""
    def body(h, xi):
        h = np.tanh(W @ h + xi)
        return h, (h * h).sum()
    h, ys = lax.scan(body, x * w[0, 0], np.ones((3, 3)))
    return h.sum() + (ys ** 2).sum()


ZOO = [rnn, fori, while_, cond, custom, composite, linalg, carry_only]


def jvp_of(f):
    def both(x, w, t, tw):
        return fg.jvp(f, (x, w), (t, tw))
    both.__name__ = f"jvp_{f.__name__}"
    return both


@pytest.mark.parametrize("backend", ["eager", "interp"])
@pytest.mark.parametrize("f", ZOO, ids=lambda f: f.__name__)
def test_jvp_matches_finite_differences(f, backend):
    out, dot = fg.jit(jvp_of(f), backend=backend)(X, W, T, TW)
    np.testing.assert_allclose(out, f(X, W), rtol=1e-12)
    np.testing.assert_allclose(dot, fd_jvp(f, [X, W], [T, TW]), rtol=1e-6, atol=1e-8)


def test_jvp_zoo_agrees_on_every_backend_first_call():
    def zoo(x, w, t, tw):
        return [fg.jvp(f, (x, w), (t, tw)) for f in ZOO]
    report = assert_backends_agree(zoo, X, W, T, TW, rtol=1e-9, atol=1e-12)
    for f, (_, dot) in zip(ZOO, report.outputs["numba"]):
        np.testing.assert_allclose(dot, fd_jvp(f, [X, W], [T, TW]), rtol=1e-6, atol=1e-8)


def _prims(fn) -> list:
    return [op.prim for op in fn.ops]


def test_the_optimized_jvp_holds_no_reverse_pass():
    jvp_ir = fg.jit(jvp_of(rnn), backend="interp").lower(X, W, T, TW).ir
    vjp_ir = fg.jit(fg.grad(rnn, argnums=(0, 1)), backend="interp").lower(X, W).ir
    assert _prims(jvp_ir).count("scan") == 1        # one loop: primal and tangent carries
    assert _prims(vjp_ir).count("scan") == 2        # forward with residuals, then reverse
    (scan,) = [op for op in jvp_ir.ops if op.prim == "scan"]
    assert not scan.params["reverse"] and len(scan.outputs) == 4    # h, h_dot, ys, ys_dot

    def mlp(x, w):
        return np.tanh(w @ np.tanh(w @ x)).sum()
    jvp_ir = fg.jit(jvp_of(mlp), backend="interp").lower(X, W, T, TW).ir
    assert "transpose" not in _prims(jvp_ir)    # the VJP's transposed matmuls are gone
    assert _prims(jvp_ir).count("matmul") == 6  # two forward, two per layer for the tangent


def test_jvp_of_an_mlp_layer_reads_like_forward_mode():
    def f(x, w):
        return np.tanh(x * w).sum()
    ir = fg.jit(jvp_of(f), backend="interp").lower(X, X, T, T).ir
    assert _prims(ir) == ["mul", "mul", "mul", "add", "tanh", "mul", "full", "sub", "mul",
                          "reduce_sum", "reduce_sum"]


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_higher_order_compositions(backend):
    def g(x):
        return (np.sin(x) ** 2 * x).sum() * np.cos(x).sum()
    hess = fd_jacobian(fg.grad(g), X)
    jit = fg.jit
    np.testing.assert_allclose(jit(fg.hessian(g), backend=backend)(X), hess, atol=1e-6)
    np.testing.assert_allclose(jit(lambda x, t: fg.hvp(g, (x,), (t,)), backend=backend)(X, T),
                               hess @ T, atol=1e-6)
    jvp2 = jit(lambda x, t: fg.jvp(lambda y: fg.jvp(g, (y,), (t,))[1], (x,), (t,))[1],
               backend=backend)(X, T)
    np.testing.assert_allclose(jvp2, T @ hess @ T, atol=1e-6)
    grad_of_jvp = jit(fg.grad(lambda x, t: fg.jvp(g, (x,), (t,))[1]), backend=backend)(X, T)
    np.testing.assert_allclose(grad_of_jvp, hess @ T, atol=1e-6)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_jacfwd_and_jacrev_match_finite_differences(backend):
    def f(x):
        return np.sin(x) * x[::-1] + np.exp(x).sum()
    ref = fd_jacobian(f, X)
    for jac in (fg.jacfwd, fg.jacrev, fg.jacobian):
        np.testing.assert_allclose(fg.jit(jac(f), backend=backend)(X), ref, atol=1e-7)

    def g(m):       # matrix in, vector out: blocks of shape out + in
        return np.tanh(m @ X)
    for jac in (fg.jacfwd, fg.jacrev):
        np.testing.assert_allclose(fg.jit(jac(g), backend=backend)(W), fd_jacobian(g, W),
                                   atol=1e-7)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_jacobians_of_pytrees_with_argnums_and_aux(backend):
    def p(params, z):
        out = {"a": np.tanh(params["w"] @ z), "b": (params["b"] * z).sum()}
        return out, z.sum()
    params = {"w": W, "b": X}
    fwd, aux = fg.jit(fg.jacfwd(p, argnums=(0, 1), has_aux=True), backend=backend)(params, X)
    rev, aux2 = fg.jit(fg.jacrev(p, argnums=(0, 1), has_aux=True), backend=backend)(params, X)
    assert np.allclose(aux, X.sum()) and np.allclose(aux2, X.sum())
    ref_w = fd_jacobian(lambda w: np.tanh(w @ X), W)
    ref_z = fd_jacobian(lambda z: (X * z).sum(), X)
    for jac in (fwd, rev):
        assert fg.tree.flatten(jac)[1] == fg.tree.flatten(
            {"a": ({"b": 0, "w": 0}, 0), "b": ({"b": 0, "w": 0}, 0)})[1]
        np.testing.assert_allclose(jac["a"][0]["w"], ref_w, atol=1e-7)
        np.testing.assert_allclose(jac["b"][1], ref_z, atol=1e-7)
        np.testing.assert_allclose(jac["b"][0]["b"], X, atol=1e-12)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_linearize(backend):
    def f(x, w):
        return np.tanh(w @ x), (x ** 2).sum()

    def run(x, w, t, tw):
        out, f_jvp = fg.linearize(f, x, w)
        return out, f_jvp(t, tw), f_jvp(2 * t, 0 * tw)
    out, d1, d2 = fg.jit(run, backend=backend)(X, W, T, TW)
    np.testing.assert_allclose(out[0], np.tanh(W @ X))
    ref = fd_jvp(lambda x, w: f(x, w)[0], [X, W], [T, TW])
    np.testing.assert_allclose(d1[0], ref, atol=1e-8)
    np.testing.assert_allclose(d2[1], 4 * X @ T, atol=1e-12)


def test_integer_arguments_and_outputs_get_no_tangent():
    def f(x, n):
        return x * n, n + 1
    for backend in ("eager", "interp"):
        (y, m), (dy, dm) = fg.jit(lambda x, t: fg.jvp(f, (x, 3), (t, 0)),
                                  backend=backend)(X, T)
        np.testing.assert_allclose(dy, 3 * T)
        assert m == 4 and np.all(dm == 0)


def test_bad_tangents_name_the_argument():
    f = np.sin
    with pytest.raises(ValueError, match=r"tangent of argument 0 has shape \[2\], but the "
                                         r"primal has shape \[3\]"):
        fg.jvp(f, (X,), (np.ones(2),))
    with pytest.raises(TypeError, match="tangent of argument 0 has dtype float32, but the "
                                        "primal has dtype float64"):
        fg.jvp(f, (X,), (np.ones(3, np.float32),))
    with pytest.raises(TypeError, match="must be tuples or lists"):
        fg.jvp(f, X, T)
    with pytest.raises(ValueError, match="1 primals but 2 tangents"):
        fg.jvp(f, (X,), (T, T))
    with pytest.raises(TypeError, match="tangent of argument 0 has another tree structure"):
        fg.jvp(lambda d: d["a"], ({"a": X},), ({"b": X},))
    with pytest.raises(ValueError, match=r"tangent of argument 1 has shape \[4\], .* \(at "):
        fg.jit(lambda x, t: fg.jvp(lambda a, b: a * b, (x, x), (t, np.ones(4))),
               backend="interp")(X, T)
    with pytest.raises(ValueError, match=r"linearize's f_jvp: the tangent of argument 0 has "
                                         r"shape \[4\]"):
        fg.linearize(f, X)[1](np.ones(4))


def test_bad_jacobian_arguments_name_the_argument():
    def f(a, n):
        return a * n
    for jac in ("jacfwd", "jacrev"):
        with pytest.raises(TypeError, match=f"{jac} requires floating-point inputs, got int64 "
                                            f"for argument 1"):
            getattr(fg, jac)(f, argnums=(0, 1))(X, np.arange(3))
        with pytest.raises(ValueError, match=f"{jac}: argnums=2 names argument 2, but the "
                                             f"function was called with 2 positional"):
            getattr(fg, jac)(f, argnums=2)(X, 2)
