"""Structured control flow (fg.lax.scan, fori_loop, while_loop, cond): JAX's semantics on the
eager, interp and numba backends (first calls), one IR op each with its body nested (printed,
parsed back, verified, drawn), reverse-mode derivatives of order 1 and 2 against the unrolled
Python loop and finite differences, and the errors.

The suite runs in poison mode (tests/conftest.py); test_poison_mode_gives_the_same_bits
compiles the RNN gradient once more without it.
"""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir import parse, verify
from fusegrad.passes.pipeline import optimize
from fusegrad.testing import check_grads
from fusegrad.tree import flatten, unflatten

BACKENDS = ("eager", "interp", "numba")
COMPILED = ("interp", "numba")
rng = np.random.default_rng(0)
W, U = 0.5 * rng.standard_normal((3, 3)), 0.5 * rng.standard_normal((3, 2))
H0, XS = rng.standard_normal(3), rng.standard_normal((4, 2))
RNN_ARGS = (W, U, H0, XS)


def reference_scan(f, init, xs, length=None, reverse=False):
    """jax.lax.scan's documented semantics, as a Python loop over NumPy values."""
    leaves, tree = flatten(xs)
    length = len(leaves[0]) if leaves else length
    carry, ys = init, [None] * length
    for i in reversed(range(length)) if reverse else range(length):
        carry, ys[i] = f(carry, unflatten(tree, [x[i] for x in leaves]))
    columns, y_tree = flatten(ys[0]) if ys else ([], ("none",))
    stacked = [np.stack([flatten(y)[0][k] for y in ys]) for k in range(len(columns))]
    return carry, unflatten(y_tree, stacked)


def close(a, b, rtol=1e-13):
    la, ta = flatten(a)
    lb, tb = flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        assert np.shape(x) == np.shape(y) and np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-14)


# -- the programs, each jitted once per backend --------------------------------------------------

def rnn(w, u, h0, xs):
    """An RNN: h <- tanh(W h + U x) over xs; the loss sums the last state and each step's |h|²."""
    def step(h, x):
        h = np.tanh(w @ h + u @ x)
        return h, np.sum(h * h)
    h, ys = fg.lax.scan(step, h0, xs)
    return np.sum(h) + np.sum(ys * ys)


def rnn_unrolled(w, u, h0, xs):
    h, total = h0, 0.0
    for x in xs:
        h = np.tanh(w @ h + u @ x)
        total = total + np.sum(h * h) ** 2
    return np.sum(h) + total


def euler(k, y0):
    """Five explicit Euler steps of y' = -k y + sin(t), t = 0.1 i (fori_loop, static bounds)."""
    return np.sum(fg.lax.fori_loop(0, 5, lambda i, y: y + 0.1 * (-k * y + np.sin(0.1 * i)), y0)
                  ** 2)


def euler_unrolled(k, y0):
    y = y0
    for i in range(5):
        y = y + 0.1 * (-k * y + np.sin(0.1 * i))
    return np.sum(y ** 2)


def branchy(x, y):
    """A cond on the data: x sin(y) where sum(x) > 0, else x - y²."""
    out = fg.lax.cond(np.sum(x) > 0, lambda a, b: a * np.sin(b), lambda a, b: a - b * b, x, y)
    return np.sum(out * out)


def branchy_python(x, y):
    return np.sum((x * np.sin(y) if np.sum(x) > 0 else x - y * y) ** 2)


def pytree_scan(c, xs, reverse):
    """Pytree carry, xs and ys (with a None leaf), an integer carry, reverse."""
    def f(carry, x):
        s = carry["s"] * 0.9 + x[0] * x[1]["b"]
        return {"s": s, "n": carry["n"] + 1}, (s * x[1]["b"], None, carry["n"])
    return fg.lax.scan(f, c, xs, reverse=reverse)


def counted(n, x):
    """fori_loop with traced bounds (a while_loop), a while_loop counting its steps, and a cond
    on an integer predicate."""
    a = fg.lax.fori_loop(1, n, lambda i, c: c * 1.5 + i, x)
    b, steps = fg.lax.while_loop(lambda c: c[1] < n + 2, lambda c: (c[0] * 2.0 + 1.0, c[1] + 1),
                                 (x, 0))
    return a, b, steps, fg.lax.cond(n - 3, lambda p, q: p - q, lambda p, q: p + q, a, b)


RNN = {b: fg.jit(rnn, backend=b) for b in BACKENDS}
RNN_GRAD = {b: fg.jit(fg.grad(rnn, argnums=(0, 1, 2, 3)), backend=b) for b in BACKENDS}
PYTREE = {b: fg.jit(pytree_scan, static_argnums=2, backend=b) for b in BACKENDS}
COUNTED = {b: fg.jit(counted, backend=b) for b in BACKENDS}
C0 = {"s": np.array([0.5, -1.0]), "n": np.int64(0)}
PY_XS = (rng.standard_normal((3, 2)), {"b": rng.standard_normal(3)})


# -- forward: JAX's semantics ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_of_pytrees_matches_the_python_loop(backend, reverse):
    def f(carry, x):
        s = carry["s"] * 0.9 + x[0] * x[1]["b"]
        return {"s": s, "n": carry["n"] + 1}, (s * x[1]["b"], None, carry["n"])
    expected = reference_scan(f, C0, PY_XS, reverse=reverse)
    carry, ys = PYTREE[backend](C0, PY_XS, reverse)
    assert ys[1] is None and carry["n"] == 3
    np.testing.assert_array_equal(ys[2], [2, 1, 0] if reverse else [0, 1, 2])
    close((carry, ys), expected, rtol=1e-15 if backend != "numba" else 1e-13)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rnn_forward_matches_the_unrolled_loop(backend):
    np.testing.assert_allclose(RNN[backend](*RNN_ARGS), rnn_unrolled(*RNN_ARGS), rtol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_over_a_length_with_no_xs_and_no_ys(backend):
    run = fg.jit(lambda c: fg.lax.scan(lambda c, x: (c * 2.0 + 1.0, None), c, None, length=5),
                 backend=backend)
    carry, ys = run(np.array([1.0, -2.0]))
    assert ys is None
    np.testing.assert_array_equal(carry, [63.0, -33.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fori_while_and_cond_with_traced_values(backend):
    x = np.array([1.0, 2.0])
    for n in (3, 5):
        a, b, steps, c = COUNTED[backend](n, x)
        ea = x
        for i in range(1, n):
            ea = ea * 1.5 + i
        eb = x
        for _ in range(n + 2):
            eb = eb * 2.0 + 1.0
        close((a, b, int(steps), c), (ea, eb, n + 2, ea + eb if n == 3 else ea - eb))


def test_plain_numpy_and_eager_tensors_run_python_loops():
    carry, ys = fg.lax.scan(lambda c, x: (c + x, c * x), 0.0, np.arange(4.0))
    assert carry == 6.0 and ys.tolist() == [0.0, 0.0, 2.0, 9.0]
    assert fg.lax.fori_loop(0, 5, lambda i, c: c + i, 0) == 10
    assert fg.lax.while_loop(lambda c: c < 10, lambda c: c * 2, 1) == 16
    assert fg.lax.cond(0, lambda a: a + 1, lambda a: a - 1, 3) == 2
    w = fg.tensor(W, requires_grad=True)
    loss = rnn(w, U, H0, XS)
    loss.backward()
    np.testing.assert_allclose(w.grad, fg.grad(rnn_unrolled)(*RNN_ARGS), rtol=1e-14)
    assert loss.grad_fn is not None      # the tape has every step: no scan node
    _, empty = fg.lax.scan(lambda c, x: (c, x * 2.0), 0.0, np.zeros((0, 3)))
    assert empty.shape == (0, 3)


@pytest.mark.parametrize("backend", COMPILED)
def test_weak_carries_take_the_dtype_the_body_gives_them(backend):
    x = np.array(0.5, np.float32)
    f = fg.jit(lambda x: fg.lax.fori_loop(0, 3, lambda i, c: c + x * i, 0.0), backend=backend)
    out = f(x)
    assert out.dtype == np.float32 and out == 1.5
    g = fg.jit(lambda x: fg.lax.scan(lambda c, y: (c + y, 2.0), x, x * np.ones(2, np.float32)),
               backend=backend)
    carry, ys = g(x)       # ys of Python floats stack as NumPy stacks them (the eager loop)
    assert carry.dtype == np.float32 and carry == 1.5
    assert ys.dtype == np.float64 and ys.tolist() == [2.0, 2.0]


# -- the IR: one op each, nested bodies -----------------------------------------------------------

def test_each_construct_is_one_op_holding_its_body():
    fn = fg.make_ir(counted)(4, np.ones(2))
    prims = [op.prim for op in fn.ops]
    assert prims.count("while_loop") == 2 and prims.count("cond") == 1
    static = fg.make_ir(euler)(0.5, np.ones(2))
    (scan,) = [op for op in static.ops if op.prim == "scan"]
    assert scan.params["length"] == 5 and scan.params["num_carry"] == 2
    assert str(scan.inputs[scan.params["num_consts"]].type) == "i64[]"   # the counter first
    body = scan.params["body"]
    assert [op.prim for op in body.ops].count("sin") == 1 and len(body.results) == 2
    text = str(fg.make_ir(rnn)(*RNN_ARGS))
    assert text.count(" = scan ") == 1 and "    func @step(" in text


def test_gradient_ir_prints_parses_back_and_verifies():
    def f(w, u, h0, xs):
        inner = fg.lax.scan(lambda c, x: (np.sin(c) * x[0], None), h0, xs)[0]
        return rnn(w, u, inner, xs) + branchy(inner, h0)
    fn = optimize(fg.make_ir(fg.grad(f, argnums=(0, 2)))(*RNN_ARGS))
    text = str(fn)
    assert text.count(" = scan ") >= 4 and " = cond " in text
    assert str(parse(text)) == text
    verify(parse(text))
    assert verify(fn) is fn


def test_dot_draws_each_body_as_a_cluster():
    src = fg.make_ir(rnn)(*RNN_ARGS).to_dot()
    assert "subgraph cluster_op" in src and 'label="body @step"' in src
    assert '_body_op' in src and "= tanh" in src and "style=dashed" in src


def test_gradient_of_w_alone_prunes_the_other_cotangents():
    fn = optimize(fg.make_ir(fg.grad(rnn))(*RNN_ARGS))
    forward, backward = [op for op in fn.ops if op.prim == "scan"]
    assert not backward.params["reverse"] == forward.params["reverse"]
    # carries: dW's running sum and dh (which dW needs); no dU sum, no dxs
    assert [str(v.type) for v in backward.outputs] == ["f64[3,3]", "f64[3]"]
    assert backward.params["num_carry"] == 2 and len(backward.params["body"].results) == 2


# -- reverse mode ---------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", COMPILED)
def test_rnn_gradient_matches_the_unrolled_loop(backend):
    got = RNN_GRAD[backend](*RNN_ARGS)
    expected = fg.grad(rnn_unrolled, argnums=(0, 1, 2, 3))(*RNN_ARGS)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("backend", [None, *COMPILED])
def test_rnn_derivatives_of_order_two_match_finite_differences(backend):
    check_grads(rnn, RNN_ARGS, order=2, backend=backend)


@pytest.mark.parametrize("backend", COMPILED)
def test_hessian_of_the_rnn_matches_the_unrolled_loop(backend):
    def loss(h0):
        return rnn(W, U, h0, XS)
    got = fg.jit(fg.hessian(loss), backend=backend)(H0)
    expected = fg.hessian(lambda h0: rnn_unrolled(W, U, h0, XS))(H0)
    np.testing.assert_allclose(got, expected, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("backend", COMPILED)
def test_euler_integrator_derivatives(backend):
    args = (0.7, np.array([1.0, -2.0]))
    got = fg.jit(fg.grad(euler, argnums=(0, 1)), backend=backend)(*args)
    for g, e in zip(got, fg.grad(euler_unrolled, argnums=(0, 1))(*args), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-13)
    check_grads(euler, args, order=2, backend=backend)


@pytest.mark.parametrize("backend", COMPILED)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_derivatives_follow_the_branch_taken(backend, sign):
    x, y = sign * np.array([1.0, 2.0]), np.array([0.5, -0.3])
    got = fg.jit(fg.grad(branchy, argnums=(0, 1)), backend=backend)(x, y)
    for g, e in zip(got, fg.grad(branchy_python, argnums=(0, 1))(x, y), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-14)
    check_grads(branchy, (x, y), order=2, backend=backend)


# -- errors ---------------------------------------------------------------------------------------

def test_reverse_mode_through_a_traced_while_loop_is_an_error():
    with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                                         "fg.lax.while_loop.*Use fg.lax.scan, or "
                                         "fg.lax.fori_loop with static"):
        fg.jit(fg.grad(lambda x, n: fg.lax.fori_loop(0, n, lambda i, v: v * 2.0, x)),
               backend="interp")(1.0, 3)
    # a while_loop no gradient flows through is fine, and so is one the eager engine runs
    count = fg.jit(fg.grad(lambda x: x * fg.lax.while_loop(lambda c: c < 5, lambda c: c + 1, 0)),
                   backend="interp")
    assert count(2.0) == 5.0
    assert fg.grad(lambda x: fg.lax.while_loop(lambda v: v < 10.0, lambda v: v * 2.0, x))(
        3.0) == 4.0


def test_branches_of_different_types_are_named_in_the_error():
    def f(x):
        return fg.lax.cond(x[0] > 0, lambda a: a, lambda a: a.astype(np.float32), x)
    with pytest.raises(TypeError, match=r"true_fun '<lambda>' and false_fun '<lambda>' must "
                                        r"return the same .*returns f64\[2\] and false_fun "
                                        r"returns f32\[2\]"):
        fg.make_ir(f)(np.ones(2))
    with pytest.raises(TypeError, match=r"returns \(f64\[2\], f64\[2\]\) and false_fun "
                                        r"returns f64\[2\]"):
        fg.make_ir(lambda x: fg.lax.cond(True, lambda a: (a, a), lambda a: a, x))(np.ones(2))


def test_a_carry_that_changes_type_is_named_in_the_error():
    def f(x):
        return fg.lax.scan(lambda c, x: (np.stack([c, c]), None), x, None, length=2)
    with pytest.raises(TypeError, match=r"fg.lax.scan: the body '<lambda>' must return a carry "
                                        r".*input carry is f64\[2\] and it returns f64\[2,2\]"):
        fg.make_ir(f)(np.ones(2))
    with pytest.raises(TypeError, match=r"must return a pair \(carry, y\), got float"):
        fg.lax.scan(lambda c, x: c, 0.0, np.ones(3))
    with pytest.raises(ValueError, match=r"length=4 disagrees with the leading axis size \[3\]"):
        fg.lax.scan(lambda c, x: (c, x), 0.0, np.ones(3), length=4)
    with pytest.raises(ValueError, match=r"different leading axis sizes \[2, 3\]"):
        fg.lax.scan(lambda c, x: (c, x), 0.0, (np.ones(3), np.ones(2)))
    with pytest.raises(TypeError, match=r"cond's pred must be a scalar, got shape \[2\]"):
        fg.lax.cond(np.ones(2), lambda: 0, lambda: 1)
    with pytest.raises(TypeError, match="lower and upper must be integer scalars, got f64"):
        fg.lax.fori_loop(0, 2.5, lambda i, c: c, 0.0)


# -- numba ----------------------------------------------------------------------------------------

def test_poison_mode_gives_the_same_bits(monkeypatch):
    poisoned = RNN_GRAD["numba"](*RNN_ARGS)
    monkeypatch.setenv("FUSEGRAD_POISON", "0")
    plain = fg.jit(fg.grad(rnn, argnums=(0, 1, 2, 3)), backend="numba")(*RNN_ARGS)
    for a, b in zip(poisoned, plain, strict=True):
        assert a.tobytes() == b.tobytes()
    source = fg.jit(fg.grad(rnn, argnums=(0, 1, 2, 3))).lower(*RNN_ARGS).source
    assert "as kernel IR" in source and "host step" not in source     # both scans compiled


def nested(w, a):
    """A scan whose body runs a scan over a's rows and a cond on its result."""
    def outer(c, row):
        inner, _ = fg.lax.scan(lambda d, x: (np.sin(d * x + w), None), c, a)
        c = fg.lax.cond(np.sum(inner) > 0, lambda u: u * 2.0, lambda u: np.cos(u), inner * row)
        return c, np.sum(c * w)
    c, ys = fg.lax.scan(outer, w, a)
    return np.sum(c) + np.sum(ys)


def nested_python(w, a):
    c, total = w, 0.0
    for row in a:
        d = c
        for x in a:
            d = np.sin(d * x + w)
        u = d * row
        c = u * 2.0 if np.sum(d) > 0 else np.cos(u)
        total = total + np.sum(c * w)
    return np.sum(c) + total


@pytest.mark.parametrize("backend", COMPILED)
def test_nested_loops_and_branches(backend):
    args = (rng.standard_normal(2), rng.standard_normal((3, 2)))
    np.testing.assert_allclose(fg.jit(nested, backend=backend)(*args), nested_python(*args),
                               rtol=1e-14)
    got = fg.jit(fg.grad(nested, argnums=(0, 1)), backend=backend)(*args)
    for g, e in zip(got, fg.grad(nested_python, argnums=(0, 1))(*args), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)
    if backend == "interp":
        check_grads(nested, args, order=2, backend=backend)


def reversed_rnn(w, h0, xs):
    h, ys = fg.lax.scan(lambda h, x: (np.tanh(w * h + x), h * x), h0, xs, reverse=True)
    return np.sum(h) + np.sum(np.sin(ys))


def reversed_rnn_python(w, h0, xs):
    h, ys = h0, [None] * len(xs)
    for i in reversed(range(len(xs))):
        h, ys[i] = np.tanh(w * h + xs[i]), h * xs[i]
    return np.sum(h) + np.sum(np.sin(np.stack(ys)))


@pytest.mark.parametrize("backend", COMPILED)
def test_reverse_scan_gradient_matches_the_reversed_loop(backend):
    args = (rng.standard_normal(2), rng.standard_normal(2), rng.standard_normal((3, 2)))
    got = fg.jit(fg.grad(reversed_rnn, argnums=(0, 1, 2)), backend=backend)(*args)
    for g, e in zip(got, fg.grad(reversed_rnn_python, argnums=(0, 1, 2))(*args), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-15)


def test_numba_runs_the_loop_with_the_bits_of_interp():
    """A body of adds and multiplies compiles to NumPy's bits, so the loop gives interp's."""
    def f(c, xs):
        return fg.lax.scan(lambda c, x: (c * 0.5 + x, c * x - 1.0), c, xs)
    c, xs = rng.standard_normal(3), rng.standard_normal((5, 3))
    numba, interp = (fg.jit(f, backend=b)(c, xs) for b in COMPILED)
    for a, b in zip(flatten(numba)[0], flatten(interp)[0], strict=True):
        assert a.tobytes() == b.tobytes()


def swapping(c, xs):
    """Carries that trade places each step, an array and a scalar among them, and ys that
    are carries: the loop must read every result before it writes a carry."""
    def f(c, x):
        a, b, s, t = c
        return (b, a + x, t, s * 2.0 + np.sum(x)), (a, s, x)
    return fg.lax.scan(f, c, xs)


SWAP_C = (np.array([1.0, 2.0]), np.array([-1.0, 0.5]), 0.25, -3.0)


@pytest.mark.parametrize("backend", COMPILED)
@pytest.mark.parametrize("steps", [0, 1, 5])
def test_carries_that_swap_and_alias_the_ys(backend, steps):
    xs = rng.standard_normal((steps, 2))
    got = fg.jit(swapping, backend=backend)(SWAP_C, xs)
    want = reference_scan(lambda c, x: ((c[1], c[0] + x, c[3], c[2] * 2.0 + np.sum(x)),
                                        (c[0], c[2], x)), SWAP_C, xs)
    if steps == 0:
        want = (SWAP_C, (np.zeros((0, 2)), np.zeros(0), np.zeros((0, 2))))
    close(got, want, rtol=0)
