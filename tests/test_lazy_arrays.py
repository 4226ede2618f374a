"""NumPy constructors called from user code while fusegrad traces or differentiates give lazy
arrays (issue 23, point 2; fusegrad/numpy/lazy.py): ndarrays while constant, traced from the
moment a traced value is written into them or indexes them; on eager (fg.grad), interp and
numba. Calls from NumPy, SciPy and fusegrad itself get NumPy's own arrays."""

import numpy as np
import pytest
import scipy.special

import fusegrad as fg
from fusegrad.numpy.constructors import LAZY_CONSTRUCTORS
from fusegrad.numpy.lazy import LazyMethods

X = np.array([0.3, -0.7, 1.1])
BACKENDS = ("eager", "interp", "numba")

# one call per wrapped constructor, as user code writes it
CALLS = {
    "array": lambda: np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
    "asarray": lambda: np.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
    "asanyarray": lambda: np.asanyarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
    "ascontiguousarray": lambda: np.ascontiguousarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
    "copy": lambda: np.copy(np.ones((2, 3))),
    "zeros": lambda: np.zeros((2, 3)),
    "ones": lambda: np.ones((2, 3)),
    "empty": lambda: np.empty((2, 3)),
    "full": lambda: np.full((2, 3), 0.5),
    "zeros_like": lambda: np.zeros_like(np.ones((2, 3))),
    "ones_like": lambda: np.ones_like(np.ones((2, 3))),
    "empty_like": lambda: np.empty_like(np.ones((2, 3))),
    "full_like": lambda: np.full_like(np.ones((2, 3)), 2.0),
    "eye": lambda: np.eye(2, 3),
    "identity": lambda: np.identity(3)[:2],
    "tri": lambda: np.tri(2, 3),
    "arange": lambda: np.arange(6.0).reshape(2, 3),
    "linspace": lambda: np.linspace(0.0, 1.0, 6).reshape(2, 3),
    "logspace": lambda: np.logspace(0.0, 1.0, 6).reshape(2, 3),
    "geomspace": lambda: np.geomspace(1.0, 4.0, 6).reshape(2, 3),
    "meshgrid": lambda: np.meshgrid(np.arange(3.0), np.arange(2.0))[0],
}


def test_every_wrapped_constructor_has_a_case():
    assert set(CALLS) == set(LAZY_CONSTRUCTORS) and len(LAZY_CONSTRUCTORS) == 21


def filled(name):
    def f(x):
        a = CALLS[name]()
        assert isinstance(np.asarray(a), np.ndarray)     # lazy under a transform, else NumPy
        a[1] = a[1] * 0.0 + 1.0 if name == "empty" or name == "empty_like" else a[1]
        numbers = np.asarray(a).copy()           # its numbers, as NumPy's asarray gives
        a[0] = np.tanh(x) * a[0]                 # a traced row: a becomes traced
        return np.sum(a * a) + np.sum(numbers)
    return f


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_constructed_array_becomes_traced_when_written(name):
    f = filled(name)
    rows = np.asarray(CALLS[name]())
    if name in ("empty", "empty_like"):
        rows = rows.copy()
        rows[1] = 1.0
    expected = np.sum((np.tanh(X) * rows[0]) ** 2) + np.sum(rows[1] ** 2) + np.sum(rows)
    for backend in ("eager", "interp"):
        np.testing.assert_allclose(fg.jit(f, backend=backend)(X), expected, rtol=1e-12)
    np.testing.assert_allclose(fg.jit(fg.grad(f), backend="interp")(X),
                               2 * np.tanh(X) * (1 - np.tanh(X) ** 2) * rows[0] ** 2,
                               rtol=1e-12)
    np.testing.assert_allclose(fg.grad(f)(X),
                               2 * np.tanh(X) * (1 - np.tanh(X) ** 2) * rows[0] ** 2,
                               rtol=1e-12)


def constant_use(x):
    """While constant it is an ndarray to NumPy, SciPy and Python."""
    c = np.arange(1.0, 4.0)
    assert float(c[0]) == 1.0 and c.shape == (3,) and len(c) == 3 and c.dtype == np.float64
    assert bool(c.sum() == 6.0) and list(c) == [1.0, 2.0, 3.0]
    g = scipy.special.gammaln(c)                 # SciPy reads its numbers
    c += 1.0                                     # NumPy's own in-place write
    assert np.asarray(c).tolist() == [2.0, 3.0, 4.0]
    return np.sum(x * g * c)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_constant_array_acts_as_an_ndarray(backend):
    expected = scipy.special.gammaln(np.arange(1.0, 4.0)) * np.arange(2.0, 5.0)
    grad = fg.grad(constant_use) if backend == "eager" else \
        fg.jit(fg.grad(constant_use), backend=backend)
    np.testing.assert_allclose(grad(X), expected, rtol=1e-12)


def gather(w, y):
    return np.sum(np.eye(3)[y] * w.reshape(2, 3)) + np.sum(np.linspace(0.0, 1.0, 3)[y] * w[:2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_indexing_a_constant_with_a_traced_index_is_a_gather(backend):
    w, y = np.arange(6.0), np.array([2, 0])
    expected = np.zeros(6)
    expected[[2, 3]] = 1.0
    expected[:2] += np.linspace(0.0, 1.0, 3)[y]
    grad = fg.grad(gather) if backend == "eager" else fg.jit(fg.grad(gather), backend=backend)
    np.testing.assert_allclose(grad(w, y), expected)


def packed_cholesky(l):
    L = np.zeros((3, 3))
    rows, cols = np.tril_indices(3)
    L[rows, cols] = l                           # a scatter of the packed entries
    return np.sum(np.log(np.diag(L) ** 2)) + np.sum(L @ L.T)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cholesky_factor_filled_from_its_packed_entries(backend):
    l = np.array([1.2, 0.3, 0.9, -0.4, 0.2, 1.5])
    eps, expected = 1e-6, np.zeros(6)
    for i in range(6):
        step = np.zeros(6)
        step[i] = eps
        expected[i] = (packed_cholesky(l + step) - packed_cholesky(l - step)) / (2 * eps)
    grad = fg.grad(packed_cholesky) if backend == "eager" else \
        fg.jit(fg.grad(packed_cholesky), backend=backend)
    np.testing.assert_allclose(grad(l), expected, rtol=1e-6)


def views_of_a_constant(x):
    grid = np.zeros((2, 3))
    row, col, flat = grid[1], grid.T[0], grid.reshape(-1)
    grid[1, 1:] = x[1:] * 2.0                   # grid becomes traced; its views follow it
    col += x[0]                                 # a write into a view reaches grid
    return np.sum(row * x) + np.sum(flat ** 2) + np.sum(col)


def test_eager_grad_refuses_an_inplace_write_into_a_view_of_a_constant():
    """The eager engine's views do not follow their base (docs/design.md); rather than give
    another answer than NumPy, the recorded in-place write into one raises."""
    with pytest.raises(RuntimeError, match="shares its storage with a live view"):
        fg.grad(views_of_a_constant)(X)


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_views_of_a_constant_follow_it_when_it_becomes_traced(backend):
    eps, expected = 1e-6, np.zeros(3)
    for i in range(3):
        step = np.zeros(3)
        step[i] = eps
        expected[i] = (views_of_a_constant(X + step) - views_of_a_constant(X - step)) / (2 * eps)
    assert fg.jit(views_of_a_constant, backend=backend)(X) == pytest.approx(
        views_of_a_constant(X))
    np.testing.assert_allclose(fg.jit(fg.grad(views_of_a_constant), backend=backend)(X),
                               expected, rtol=1e-6)


def test_numpy_and_fusegrad_calls_get_plain_arrays_and_constructors_come_back():
    before = {name: getattr(np, name) for name in LAZY_CONSTRUCTORS}
    seen = {}

    def f(x):
        seen["linspace"] = np.linspace(0.0, 1.0, 3)         # user code: lazy
        seen["histogram"] = np.histogram(X, bins=2)[0]      # made inside NumPy: plain
        return np.sum(x)
    fg.jit(f, backend="interp")(X)
    assert isinstance(seen["linspace"], LazyMethods)
    assert type(seen["histogram"]) is np.ndarray
    assert {name: getattr(np, name) for name in LAZY_CONSTRUCTORS} == before
    assert type(np.zeros(2)) is np.ndarray                  # outside a transform: NumPy's
