"""fg.tree.ravel (jax.flatten_util.ravel_pytree) and fg.elementwise_grad (autograd's).

ravel: round trips on nested dict/list/tuple trees with mixed shapes and dtypes, the dtype
rules, errors, NumPy/tensor/tracer leaves, gradients through ravel and unravel on every
backend, and the flat-parameter optimizer loop it exists for. elementwise_grad: closed forms,
finite differences, second order and argnums, eager and compiled.
"""

from collections import namedtuple

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.testing import check_grads

RNG = np.random.default_rng(0)
BACKENDS = [None, "interp", "numba"]        # None: eager


def _tree():
    """Nested dict/list/tuple, shapes () to (2, 3), float32 and float64 leaves, None."""
    return {
        "w": RNG.standard_normal((2, 3)).astype(np.float32),
        "layers": [np.arange(4.0), (np.float32(2.5), RNG.standard_normal((3, 1)))],
        "a": {"z": np.array(0.5), "skip": None},
    }


def _leaves_in_order(tree):
    return [tree["a"]["z"], tree["layers"][0], tree["layers"][1][0], tree["layers"][1][1],
            tree["w"]]


def _assert_same_tree(got, want):
    got_leaves, got_def = fg.tree.flatten(got)
    want_leaves, want_def = fg.tree.flatten(want)
    assert got_def == want_def
    for g, w in zip(got_leaves, want_leaves):
        g = np.asarray(g.data if isinstance(g, fg.Tensor) else g)
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)


# ---- ravel: values, dtypes, errors -----------------------------------------------------------

def test_ravel_round_trip_on_a_nested_tree_with_mixed_shapes_and_dtypes():
    tree = _tree()
    flat, unravel = fg.tree.ravel(tree)
    assert flat.dtype == np.float64 and flat.shape == (1 + 4 + 1 + 3 + 6,)
    want = np.concatenate([np.ravel(x).astype(np.float64) for x in _leaves_in_order(tree)])
    np.testing.assert_array_equal(flat, want)
    back = unravel(flat)
    _assert_same_tree(back, tree)
    assert isinstance(back["layers"], list) and isinstance(back["layers"][1], tuple)
    assert back["a"]["skip"] is None
    flat -= 1.0                                  # unravelled leaves are copies, not views
    _assert_same_tree(back, tree)


def test_single_dtype_trees_keep_the_dtype_unravel_is_given():
    tree = {"a": np.ones((2, 2), np.float32), "b": [np.zeros(3, np.float32)]}
    flat, unravel = fg.tree.ravel(tree)
    assert flat.dtype == np.float32
    back = unravel(flat.astype(np.float64))      # dtype-polymorphic, as JAX's
    assert back["a"].dtype == back["b"][0].dtype == np.float64


def test_python_scalars_ints_and_empty_trees():
    flat, unravel = fg.tree.ravel({"n": np.arange(3), "s": 1.5, "f": np.ones(2, np.float32)})
    assert flat.dtype == np.float64              # np.result_type(float32, int64, float64)
    back = unravel(flat)
    assert back["n"].dtype == np.int64 and back["s"].shape == () and back["s"] == 1.5
    assert back["f"].dtype == np.float32
    flat, unravel = fg.tree.ravel({"a": None, "b": []})
    assert flat.shape == (0,) and flat.dtype == np.float64
    assert unravel(flat) == {"a": None, "b": []}


def test_named_tuples_ravel_in_field_order_and_come_back():
    layer = namedtuple("Layer", "w b")
    tree = [layer(np.arange(4.0).reshape(2, 2), np.array([4.0, 5.0])), {"z": np.array(6.0)}]
    flat, unravel = fg.tree.ravel(tree)
    np.testing.assert_array_equal(flat, np.arange(7.0))
    back = unravel(flat + 1.0)
    assert type(back[0]) is layer and back[0]._fields == ("w", "b")
    np.testing.assert_array_equal(back[0].b, [5.0, 6.0])
    g = fg.grad(lambda f: np.sum(unravel(f)[0].w ** 2))(flat)
    np.testing.assert_array_equal(g, [0.0, 2.0, 4.0, 6.0, 0.0, 0.0, 0.0])


def test_unravel_checks_shape_and_mixed_dtype():
    flat, unravel = fg.tree.ravel(_tree())
    with pytest.raises(ValueError, match=r"shape \(15,\).*got shape \(14,\)"):
        unravel(flat[:-1])
    with pytest.raises(ValueError, match="got shape"):
        unravel(flat.reshape(3, 5))
    with pytest.raises(TypeError, match="dtype float32 but expected float64"):
        unravel(flat.astype(np.float32))


# ---- tensors and tracers ----------------------------------------------------------------------

def test_ravel_on_eager_tensors_records_the_graph():
    x = fg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = fg.tensor(np.array([1.0, -2.0]), requires_grad=True)
    flat, unravel = fg.tree.ravel({"x": x, "y": [y]})
    assert isinstance(flat, fg.Tensor) and flat.shape == (8,)
    back = unravel(flat * 3.0)
    assert isinstance(back["x"], fg.Tensor) and back["x"].shape == (2, 3)
    (np.sum(back["x"] ** 2) + np.sum(back["y"][0])).backward()
    np.testing.assert_allclose(x.grad, 18 * x.data)
    np.testing.assert_allclose(y.grad, [3.0, 3.0])


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_ravel_and_unravel_under_jit(backend):
    tree = _tree()
    flat, unravel = fg.tree.ravel(tree)

    def both(t, f):
        traced_flat, traced_unravel = fg.tree.ravel(t)
        return traced_flat, traced_unravel(f * 2.0), unravel(f)

    got_flat, got_back, got_closed = fg.jit(both, backend=backend)(tree, flat)
    np.testing.assert_array_equal(got_flat, flat)
    _assert_same_tree(got_closed, tree)
    _assert_same_tree(got_back, unravel(flat * 2.0))


# ---- gradients ----------------------------------------------------------------------------------

def _f64_tree():
    return {"w": RNG.standard_normal((2, 3)), "b": [RNG.standard_normal(3), (np.array(0.7),)]}


def _loss(p):
    h = np.tanh(p["w"] @ p["b"][0]) * p["b"][1][0]
    return np.sum(h ** 2) + np.sum(np.sin(p["w"]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_through_unravel_and_ravel(backend):
    tree = _f64_tree()
    flat, unravel = fg.tree.ravel(tree)
    w = RNG.standard_normal(flat.shape)

    def fun(f, t):      # d/d flat through unravel, d/d every leaf of t through ravel
        return _loss(unravel(f)) + np.sum(np.sin(fg.tree.ravel(t)[0]) * w)

    check_grads(fun, (flat, _f64_tree()), order=2, backend=backend)


def test_flat_gradient_equals_the_raveled_tree_gradient_with_mixed_dtypes():
    tree = {"w": RNG.standard_normal((2, 3)).astype(np.float32),
            "b": [RNG.standard_normal(3), (np.array(0.7),)]}
    flat, unravel = fg.tree.ravel(tree)
    g_flat = fg.grad(lambda f: _loss(unravel(f)))(flat)
    tree64 = dict(tree, w=tree["w"].astype(np.float64))
    g_tree = fg.grad(_loss)(tree64)
    assert g_flat.dtype == np.float64
    # the float32 leaf is cast on the way in, so its part of the gradient is float32's
    np.testing.assert_allclose(g_flat, fg.tree.ravel(g_tree)[0], rtol=1e-5)


def test_optimizer_loop_on_the_flat_vector():
    x = RNG.standard_normal((20, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.3
    params = {"w": np.zeros(3), "b": np.array(0.0)}

    def loss(p):
        return np.mean((x @ p["w"] + p["b"] - y) ** 2)

    flat, unravel = fg.tree.ravel(params)
    step_grad = fg.grad(lambda f: loss(unravel(f)))
    compiled = fg.jit(lambda f: f - 0.1 * step_grad(f))
    flat_jit = flat.copy()
    for _ in range(300):
        flat -= 0.1 * step_grad(flat)
        flat_jit = compiled(flat_jit)
    np.testing.assert_allclose(flat_jit, flat, rtol=1e-12)
    fitted = unravel(flat)
    coef, *_ = np.linalg.lstsq(np.c_[x, np.ones(20)], y, rcond=None)
    np.testing.assert_allclose(np.r_[fitted["w"], fitted["b"]], coef, atol=1e-8)
    assert params["w"].tolist() == [0.0, 0.0, 0.0]          # ravel copied the params


# ---- elementwise_grad ---------------------------------------------------------------------------

def _chain(x):
    return np.sin(np.sin(x))


def _chain_d1(x):
    return np.cos(np.sin(x)) * np.cos(x)


def _chain_d2(x):
    return -np.sin(np.sin(x)) * np.cos(x) ** 2 - np.cos(np.sin(x)) * np.sin(x)


def _tanh_d1(x):
    return 1 - np.tanh(x) ** 2


def _tanh_d2(x):
    return -2 * np.tanh(x) * _tanh_d1(x)


def _derivatives(x):
    eg = fg.elementwise_grad
    return (eg(np.tanh)(x), eg(eg(np.tanh))(x), eg(_chain)(x), eg(eg(_chain))(x))


X = np.linspace(-2.0, 2.0, 7).reshape(7, 1) + np.array([[0.0, 0.05]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_grad_closed_forms(backend):
    fn = _derivatives if backend is None else fg.jit(_derivatives, backend=backend)
    got = fn(X)
    want = (_tanh_d1(X), _tanh_d2(X), _chain_d1(X), _chain_d2(X))
    for g, w in zip(got, want):
        assert np.shape(g) == X.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_elementwise_grad_against_finite_differences():
    eps = 1e-6
    for f in (np.tanh, _chain, fg.elementwise_grad(_chain)):
        fd = (np.asarray(f(X + eps)) - np.asarray(f(X - eps))) / (2 * eps)
        np.testing.assert_allclose(fg.elementwise_grad(f)(X), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
def test_elementwise_grad_check_grads(backend):
    check_grads(fg.elementwise_grad(_chain), (X,), order=2, backend=backend)


def test_elementwise_grad_argnums_scalars_and_errors():
    x, y = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    gx, gy = fg.elementwise_grad(lambda a, b: a * np.sin(b), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, np.sin(y))
    np.testing.assert_allclose(gy, x * np.cos(y))
    assert fg.elementwise_grad(np.tanh)(0.5) == pytest.approx(_tanh_d1(0.5))
    gb = fg.grad(lambda b: np.sum(fg.elementwise_grad(lambda a: a * b)(x) ** 2))(y)
    np.testing.assert_allclose(gb, 2 * y)                   # composes with grad
    with pytest.raises(TypeError, match="return an array, got a tuple"):
        fg.elementwise_grad(lambda a: (a, a))(x)
