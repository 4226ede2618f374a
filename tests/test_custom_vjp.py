"""fg.custom_vjp (fusegrad/custom.py): a user-written VJP, eager and under jit (interp, numba),
with pytrees, higher order through a differentiable bwd, NumPy-only functions eagerly, and
errors that name the function.

Compiled kernels are slow to build, so the jitted gradients are module-level and shared."""

import numpy as np
import pytest
import scipy.optimize

import fusegrad as fg
from fusegrad.tracer.tracer import ConcretizationError
from fusegrad.testing import assert_backends_agree, check_grads

BACKENDS = ("interp", "numba")


# -- a numerically stable log(1 + exp(x)) ------------------------------------------------------

def naive_log1pexp(x):
    return np.log(1.0 + np.exp(x))


@fg.custom_vjp
def log1pexp(x):
    return np.log(1.0 + np.exp(x))


def log1pexp_fwd(x):
    return log1pexp(x), x           # JAX's idiom: fwd calls f


def log1pexp_bwd(x, g):
    return (g * (1.0 / (1.0 + np.exp(-x))),)


log1pexp.defvjp(log1pexp_fwd, log1pexp_bwd)


def log1pexp_loss(x):
    return np.sum(log1pexp(x))


def sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


LOG1PEXP_GRAD = {b: fg.jit(fg.grad(log1pexp_loss), backend=b) for b in BACKENDS}
LOG1PEXP_HESSIAN = {b: fg.jit(fg.hessian(log1pexp_loss), backend=b) for b in BACKENDS}
X_BIG = np.array([-1000.0, -1.5, 0.0, 2.0, 1000.0])


def test_the_naive_gradient_is_nan_at_1000():
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(fg.grad(lambda x: np.sum(naive_log1pexp(x)))(np.array([1000.0]))[0])


@pytest.mark.parametrize("backend", ("eager",) + BACKENDS)
def test_log1pexp_gradient_is_exactly_one_at_1000(backend):
    grad = fg.grad(log1pexp_loss) if backend == "eager" else LOG1PEXP_GRAD[backend]
    with np.errstate(over="ignore"):
        g = grad(X_BIG)
    assert g[-1] == 1.0 and g[0] == 0.0
    np.testing.assert_allclose(g, sigmoid(X_BIG), rtol=1e-15)


@pytest.mark.parametrize("backend", ("eager",) + BACKENDS)
def test_log1pexp_hessian_differentiates_bwd(backend):
    x = np.array([-1.0, 0.0, 0.5])
    hess = fg.hessian(log1pexp_loss) if backend == "eager" else LOG1PEXP_HESSIAN[backend]
    s = sigmoid(x)
    np.testing.assert_allclose(hess(x), np.diag(s * (1 - s)), rtol=1e-12, atol=1e-15)


def test_log1pexp_matches_finite_differences():
    x = np.array([-1.0, 0.3, 2.0])
    check_grads(log1pexp_loss, (x,), order=2)
    check_grads(log1pexp_loss, (x,), order=2, backend="interp")


def test_tensor_backward_uses_the_rule():
    t = fg.tensor(np.array([0.0, 1000.0]), requires_grad=True)
    with np.errstate(over="ignore"):
        y = log1pexp(t)
    assert y.grad_fn.name == "CustomVjpBackward[log1pexp]"
    y.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), [0.5, 1.0])


# -- without differentiation f itself runs --------------------------------------------------------

CALLS = []


@fg.custom_vjp
def traced_calls(x):
    CALLS.append("f")
    return x * 2.0


def traced_calls_fwd(x):
    CALLS.append("fwd")
    return x * 2.0, None


traced_calls.defvjp(traced_calls_fwd, lambda res, g: (g * 2.0,))


def test_without_differentiation_f_runs():
    CALLS.clear()
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(traced_calls(x), [2.0, 4.0])
    np.testing.assert_array_equal(traced_calls(fg.tensor(x)).numpy(), [2.0, 4.0])
    with fg.no_grad():
        traced_calls(fg.tensor(x, requires_grad=True))
    assert CALLS == ["f", "f", "f"]
    CALLS.clear()
    np.testing.assert_array_equal(fg.grad(lambda x: np.sum(traced_calls(x)))(x), [2.0, 2.0])
    assert "fwd" in CALLS


def test_jit_without_differentiation_lowers_the_op_away():
    jitted = fg.jit(log1pexp_loss, backend="interp")
    x = np.array([0.0, 1.0])
    np.testing.assert_allclose(jitted(x), np.sum(np.log1p(np.exp(x))))
    traced = str(jitted.lower(x).traced)
    assert "custom_vjp_call" in traced and "custom_vjp[log1pexp] fwd" in traced
    optimized = str(jitted.lower(x).ir)
    assert "custom_vjp_call" not in optimized and "custom_vjp[log1pexp] fwd" in optimized


def test_ir_shows_which_ops_came_from_fwd_and_bwd():
    text = str(fg.make_ir(fg.grad(log1pexp_loss))(np.array([0.0, 1.0])))
    lines = text.splitlines()
    fwd = [line for line in lines if "custom_vjp[log1pexp] fwd" in line]
    bwd = [line for line in lines if "custom_vjp[log1pexp] bwd" in line]
    call = [line for line in lines if "custom_vjp_call" in line]
    assert fwd and bwd and len(call) == 1
    assert all("test_custom_vjp.py:" in line for line in fwd + bwd)
    assert any(" exp " in line for line in fwd) and any(" neg " in line for line in bwd)
    assert 'fun="log1pexp"' in call[0] and call[0].rstrip().endswith("custom_vjp[log1pexp]")
    with pytest.raises(fg.ir.ParseError, match="Python object"):
        fg.ir.parse(text)


# -- a clipped gradient: identity forward, bwd clips g ------------------------------------------

@fg.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (np.clip(g, -1.0, 1.0),))

C = np.array([0.5, 3.0, -5.0])


def clipped_loss(x):
    return np.sum(C * clip_gradient(x)) + np.sum(x * x)


CLIPPED_GRAD = {b: fg.jit(fg.grad(clipped_loss), backend=b) for b in BACKENDS}


@pytest.mark.parametrize("backend", ("eager",) + BACKENDS)
def test_clipped_gradient(backend):
    x = np.array([1.0, -2.0, 0.25])
    grad = fg.grad(clipped_loss) if backend == "eager" else CLIPPED_GRAD[backend]
    np.testing.assert_allclose(grad(x), np.clip(C, -1, 1) + 2 * x)


def test_clipped_value_is_the_identity_on_every_backend():
    report = assert_backends_agree(lambda x: fg.value_and_grad(clipped_loss)(x),
                                   np.array([1.0, -2.0, 0.25]))
    assert not report.skipped


# -- pytrees: dict and tuple inputs, a tuple output, a residual dict with non-array leaves --------

@fg.custom_vjp
def layer(p, x):
    h = np.tanh(x @ p["w"] + p["b"])
    return h, np.sum(h * h)


def layer_fwd(p, x):
    h = np.tanh(x @ p["w"] + p["b"])
    return (h, np.sum(h * h)), {"h": h, "xw": (x, p["w"]), "tag": "layer", "n": 3, "no": None}


def layer_bwd(res, g):
    assert res["tag"] == "layer" and res["n"] == 3 and res["no"] is None
    gh, gs = g
    h, (x, w) = res["h"], res["xw"]
    dz = (gh + 2.0 * gs * h) * (1.0 - h * h)
    return {"w": np.outer(x, dz), "b": dz}, dz @ w.T


layer.defvjp(layer_fwd, layer_bwd)

_rng = np.random.default_rng(0)
P = {"w": _rng.standard_normal((2, 3)), "b": _rng.standard_normal(3)}
X2 = _rng.standard_normal(2)
V3 = _rng.standard_normal(3)


def layer_loss(p, x):
    h, s = layer(p, x)
    return np.sum(h * V3) + s


def layer_reference(p, x):
    h = np.tanh(x @ p["w"] + p["b"])
    return np.sum(h * V3) + np.sum(h * h)


LAYER_GRAD = {b: fg.jit(fg.grad(layer_loss, argnums=(0, 1)), backend=b) for b in BACKENDS}


@pytest.mark.parametrize("backend", ("eager",) + BACKENDS)
def test_pytree_gradients(backend):
    grad = fg.grad(layer_loss, argnums=(0, 1)) if backend == "eager" else LAYER_GRAD[backend]
    (gp, gx), (rp, rx) = grad(P, X2), fg.grad(layer_reference, argnums=(0, 1))(P, X2)
    assert sorted(gp) == ["b", "w"]
    for got, want in ((gp["w"], rp["w"]), (gp["b"], rp["b"]), (gx, rx)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", [None, "interp"])
def test_pytree_second_order_matches_finite_differences(backend):
    check_grads(layer_loss, (P, X2), order=2, backend=backend)


def test_pytree_vjp_with_a_tuple_cotangent():
    (h, s), vjp_fn = fg.vjp(layer, P, X2)
    gp, gx = vjp_fn((V3, 2.0))
    (_, _), ref_fn = fg.vjp(lambda p, x: (np.tanh(x @ p["w"] + p["b"]),
                                          np.sum(np.tanh(x @ p["w"] + p["b"]) ** 2)), P, X2)
    rp, rx = ref_fn((V3, 2.0))
    np.testing.assert_allclose(gx, rx, rtol=1e-12)
    np.testing.assert_allclose(gp["w"], rp["w"], rtol=1e-12)


@fg.custom_vjp
def mixed(x):
    return (x * 2.0).astype(np.float32), np.sum(x), np.argmax(x)


def mixed_fwd(x):
    return mixed(x), None


def mixed_bwd(_, g):
    g32, gsum, gint = g
    assert np.shape(gint) == ()             # an integer output's cotangent: zeros
    return (2.0 * g32 + gsum,)


mixed.defvjp(mixed_fwd, mixed_bwd)


def mixed_loss(x):
    a, s, k = mixed(x)
    return np.sum(a * np.float32(3.0)) + s * 5.0 + k


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_outputs_of_several_dtypes(backend):
    x = np.array([0.5, -1.0, 2.0])
    grad = fg.grad(mixed_loss)
    g = grad(x) if backend == "eager" else fg.jit(grad, backend=backend)(x)
    np.testing.assert_allclose(g, np.full(3, 11.0))


@fg.custom_vjp
def scaled(x, n):
    return x * n


scaled.defvjp(lambda x, n: (x * n, n), lambda n, g: (g * n, np.ones(3)))


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_integer_inputs_get_no_cotangent(backend):
    n = np.array([1, 2, 3])

    def loss(x):
        return np.sum(scaled(x, n))
    grad = fg.grad(loss)
    g = grad(np.zeros(3)) if backend == "eager" else fg.jit(grad, backend=backend)(np.zeros(3))
    np.testing.assert_array_equal(g, [1.0, 2.0, 3.0])
    # a differentiated integer is an error before custom_vjp is reached, as for any function
    with pytest.raises(TypeError, match="floating-point inputs"):
        fg.grad(lambda x, n: np.sum(scaled(x, n)), argnums=1)(np.zeros(3), n)


@fg.custom_vjp
def product(x, y):
    return x * y


product.defvjp(lambda x, y: (x * y, x), lambda x, g: (None, g * x))


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_bwd_may_return_none_for_an_input(backend):
    grad = fg.grad(lambda x, y: np.sum(product(x, y)), argnums=(0, 1))
    if backend != "eager":
        grad = fg.jit(grad, backend=backend)
    gx, gy = grad(np.array([2.0, 3.0]), np.array([5.0, 7.0]))
    np.testing.assert_array_equal(gx, [0.0, 0.0])
    np.testing.assert_array_equal(gy, [2.0, 3.0])


# -- higher order: grad of grad through a differentiable bwd --------------------------------------

@fg.custom_vjp
def cube(x):
    return x * x * x


cube.defvjp(lambda x: (x * x * x, x * x), lambda x2, g: (3.0 * g * x2,))


def scalar_cube(x):
    return cube(x)


D2 = {b: fg.jit(fg.grad(fg.grad(scalar_cube)), backend=b) for b in BACKENDS}


@pytest.mark.parametrize("backend", ("eager",) + BACKENDS)
def test_grad_of_grad_is_the_analytic_second_derivative(backend):
    d2 = fg.grad(fg.grad(scalar_cube)) if backend == "eager" else D2[backend]
    for x in (-1.5, 0.0, 2.0):
        assert d2(x) == pytest.approx(6.0 * x, abs=1e-12)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_third_order(backend):
    d3 = fg.grad(fg.grad(fg.grad(scalar_cube)))
    if backend != "eager":
        d3 = fg.jit(d3, backend=backend)
    assert d3(0.7) == pytest.approx(6.0)


# -- a function fusegrad cannot trace: NumPy and SciPy on concrete values, eagerly ----------------

@fg.custom_vjp
def top_eigenvalue(a):
    return np.linalg.eigvalsh(np.asarray(a))[-1]


def top_eigenvalue_fwd(a):
    w, v = np.linalg.eig(np.asarray(a))       # general eig: fusegrad does not support it
    k = np.argmax(w)
    return w[k], v[:, k]


def top_eigenvalue_bwd(v, g):
    return (g * np.outer(v, v),)


top_eigenvalue.defvjp(top_eigenvalue_fwd, top_eigenvalue_bwd)
SYM = np.array([[2.0, 0.5, 0.1], [0.5, 1.0, -0.3], [0.1, -0.3, 0.5]])


def test_numpy_only_function_works_eagerly():
    g = fg.grad(top_eigenvalue)(SYM)
    v = np.linalg.eigh(SYM)[1][:, -1]
    np.testing.assert_allclose(g, np.outer(v, v), rtol=1e-12)
    eps, d = 1e-6, np.zeros((3, 3))
    d[0, 1] = d[1, 0] = 1.0
    fd = (top_eigenvalue(SYM + eps * d) - top_eigenvalue(SYM - eps * d)) / (2 * eps)
    assert np.sum(g * d) == pytest.approx(fd, rel=1e-6)
    t = fg.tensor(SYM, requires_grad=True)
    top_eigenvalue(t).backward()
    np.testing.assert_allclose(t.grad.numpy(), g)
    f = fg.jit(fg.grad(top_eigenvalue), backend="eager")
    np.testing.assert_allclose(f(SYM), g)


@fg.custom_vjp
def cubic_root(a):
    """y with y**3 + y = a, by SciPy's root finder on a Python float."""
    return scipy.optimize.brentq(lambda y: y ** 3 + y - float(a), -10.0, 10.0)


def cubic_root_fwd(a):
    y = cubic_root(a)
    return y, y


cubic_root.defvjp(cubic_root_fwd, lambda y, g: (g / (3.0 * y * y + 1.0),))


def test_scipy_root_finder_works_eagerly():
    g = fg.grad(cubic_root)(2.0)
    assert cubic_root(2.0) == pytest.approx(1.0)
    assert g == pytest.approx(0.25)
    eps = 1e-6
    assert g == pytest.approx((cubic_root(2.0 + eps) - cubic_root(2.0 - eps)) / (2 * eps),
                              rel=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_only_function_under_jit_is_a_clear_error(backend):
    with pytest.raises(TypeError, match=r"(?s)custom_vjp top_eigenvalue: top_eigenvalue_fwd cannot "
                                        r"be traced.*backend=\"eager\""):
        fg.jit(fg.grad(top_eigenvalue), backend=backend)(SYM)
    with pytest.raises(ConcretizationError, match=r"(?s)custom_vjp cubic_root: cubic_root_fwd "
                                                  r"cannot be traced.*float\(\)"):
        fg.jit(fg.grad(cubic_root), backend=backend)(2.0)


def test_numpy_only_fwd_cannot_be_differentiated_twice():
    with pytest.raises(RuntimeError, match="custom_vjp cubic_root: cubic_root_fwd could not run "
                                           "on fusegrad tensors.*cannot be differentiated"):
        fg.grad(fg.grad(cubic_root))(2.0)


# -- errors ---------------------------------------------------------------------------------------

def _custom(fwd, bwd, name="f"):
    def f(x):
        return np.sin(x)
    f.__name__ = name
    f = fg.custom_vjp(f)
    f.defvjp(fwd, bwd)
    return f


def f_fwd(x):
    return np.sin(x), np.cos(x)


def _loss_of(f):
    return lambda x: np.sum(f(x))


X23 = np.ones((2, 3))


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_bwd_returning_a_wrong_shape(backend):
    def f_bwd(c, g):
        return (np.sum(g * c, axis=0),)
    grad = fg.grad(_loss_of(_custom(f_fwd, f_bwd)))
    if backend != "eager":
        grad = fg.jit(grad, backend=backend)
    with pytest.raises(ValueError, match=r"^custom_vjp f: f_bwd returned a cotangent of shape "
                                         r"\(3,\) for input 0 \(x\), expected \(2, 3\)"):
        grad(X23)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_bwd_returning_the_wrong_number_of_cotangents(backend):
    def f_bwd(c, g):
        return g * c, g
    grad = fg.grad(_loss_of(_custom(f_fwd, f_bwd)))
    if backend != "eager":
        grad = fg.jit(grad, backend=backend)
    with pytest.raises(TypeError, match=r"custom_vjp f: f_bwd must return a tuple with one "
                                        r"cotangent per input of f, 1 \(x\), got a tuple of "
                                        r"length 2 \(for one input, return \(g,\)\)"):
        grad(X23)


def test_bwd_returning_a_bare_array():
    f = _custom(f_fwd, lambda c, g: g * c)
    with pytest.raises(TypeError, match=r"f's bwd must return a tuple .* got an array of shape "
                                        r"\(2, 3\) \(for one input, return \(g,\)\)"):
        fg.grad(_loss_of(f))(X23)


def test_bwd_returning_the_wrong_structure():
    @fg.custom_vjp
    def g(p):
        return np.sum(p["a"] * p["b"])

    g.defvjp(lambda p: (g(p), p), lambda p, ct: ({"a": ct * p["b"]},))
    with pytest.raises(TypeError, match=r"custom_vjp g: g's bwd returned a cotangent for input 0 "
                                        r"\(p\) with structure \{'a': \(2,\)\}, expected "
                                        r"\{'a': \(2,\), 'b': \(2,\)\}"):
        fg.grad(g)({"a": np.ones(2), "b": np.ones(2)})


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_fwd_output_must_match_f(backend):
    f = _custom(lambda x: ((np.sin(x), x), None), lambda _, g: (g[0],))
    grad = fg.grad(_loss_of(f))
    if backend != "eager":
        grad = fg.jit(grad, backend=backend)
    with pytest.raises(TypeError, match=r"custom_vjp f: f's fwd returned the output "
                                        r"\(f64\[2,3\], f64\[2,3\]\), but f returns f64\[2,3\]"):
        grad(X23)
    f = _custom(lambda x: (np.sin(x)[0], None), lambda _, g: (g,))
    with pytest.raises(TypeError, match=r"returned the output f64\[3\], but f returns "
                                        r"f64\[2,3\]"):
        fg.grad(_loss_of(f))(X23)


def test_fwd_must_return_a_pair():
    f = _custom(lambda x: np.sin(x), lambda _, g: (g,))
    with pytest.raises(TypeError, match=r"custom_vjp f: f's fwd must return a pair \(output, "
                                        r"residuals\), got an array of shape \(2, 3\)"):
        fg.grad(_loss_of(f))(X23)


def test_defvjp_missing_or_misused():
    @fg.custom_vjp
    def h(x):
        return x

    with pytest.raises(TypeError, match=r"custom_vjp h: no VJP is defined; call "
                                        r"h.defvjp\(h_fwd, h_bwd\)"):
        h(1.0)
    with pytest.raises(TypeError, match="defvjp needs a callable bwd"):
        h.defvjp(lambda x: (x, None), None)
    h.defvjp(lambda x: (x, None), lambda _, g: (g,))
    with pytest.raises(TypeError, match="pass the arguments positionally"):
        h(x=1.0)
    assert fg.grad(h)(3.0) == 1.0


def scaled_sine_loss(x, k):
    """A custom_vjp whose bwd closes over k, an argument of the jitted function that is not
    differentiated: its backward pass reads k from the enclosing trace."""
    @fg.custom_vjp
    def f(x):
        return np.sin(x) * k

    def fwd(x):
        return f(x), np.cos(x)

    def bwd(cos, g):
        return (g * cos * k,)
    f.defvjp(fwd, bwd)
    return np.sum(f(x))


@pytest.mark.parametrize("backend", ("eager",) + BACKENDS)
def test_a_bwd_closing_over_an_argument_of_the_jitted_function(backend):
    x = np.linspace(-1, 2, 5)
    want = 3.0 * np.cos(x)
    np.testing.assert_allclose(fg.jit(fg.grad(scaled_sine_loss), backend=backend)(x, 3.0), want,
                               rtol=1e-14)
    value, pullback = fg.vjp(lambda x: scaled_sine_loss(x, 3.0), x)
    np.testing.assert_allclose(pullback(2.0)[0], 2 * want, rtol=1e-14)
    per_example = fg.jit(fg.vmap(fg.grad(scaled_sine_loss), in_axes=(0, None)),
                         backend=backend)(np.stack([x, 2 * x]), 3.0)
    np.testing.assert_allclose(per_example, [want, 3.0 * np.cos(2 * x)], rtol=1e-14)


def test_vjp_of_a_bwd_closing_over_a_jitted_argument():
    x = np.linspace(-1, 2, 5)

    def pulled(x, k):
        _, pullback = fg.vjp(lambda x: scaled_sine_loss(x, k), x)
        return pullback(1.0)[0]
    np.testing.assert_allclose(fg.jit(pulled, backend="interp")(x, 3.0), 3 * np.cos(x),
                               rtol=1e-14)
