"""Issue 14, shapes, joining and splitting, indexing: unmodified NumPy code on tracers and eager
tensors gives NumPy's results (bit for bit, shapes and dtypes), and
gradients that check_grads confirms to order 2 in float64: every function on eager and interp,
and on numba what is new to compiled code (see "compiled" below; FUSEGRAD_TEST_NUMBA_BREADTH=1
compiles one call of every kind of composition too, about three minutes here).

Many functions share one program (a group returns a tuple) so that each backend traces a few
programs, not one per function; check_grads sees sin of a group's float outputs raveled and
joined.
"""

import os
import warnings

import numpy as np
from domains import scalarized as _scalar
import pytest

import fusegrad as fg
import fusegrad.numpy as fnp
from fusegrad.conversion import ConversionError
from fusegrad.testing import check_grads

BACKENDS = ("eager", "interp", "numba")
rng = np.random.default_rng(14)
X = rng.standard_normal((3, 4))
V = rng.standard_normal(4)
A = rng.standard_normal((2, 3, 4))
S = rng.standard_normal((4, 4))
D = (rng.permutation(15) * 0.25 - 1.5).reshape(3, 5)         # distinct: no ties to sort
Z = np.array([[0.5, 0.0, -1.5, 2.0, 0.0], [1.25, -0.75, 0.0, 3.0, -2.0]])   # zeros
MASK = np.array([True, False, True, True])
MASK2 = rng.standard_normal((3, 4)) > 0
TABLE = rng.standard_normal((5, 3))


def joining(x, v, a):
    return (np.vstack([x, v]), np.hstack([x, x[:, :2]]), np.hstack([v, v[0]]),
            np.dstack([x, x * 2]), np.column_stack([v[:3], x]), np.append(x, v),
            np.append(x, x[:1], axis=0), np.atleast_1d(v[0]), np.atleast_2d(v),
            np.atleast_3d(x), *np.atleast_3d(v, a), np.stack([v, v * 2], axis=1),
            np.array([[v[0], 1.0], (x[0, 0], v[1])]), np.asarray((v, v)),
            *np.split(x, 2, axis=1), *np.array_split(a, 3, axis=2), *np.hsplit(x, [1, 3]),
            *np.vsplit(x, [1]), *np.dsplit(a, 2), *np.split(x, [1, -1, 10], 1),
            *np.unstack(a, axis=1))


def copies(x, v, a):
    return (np.repeat(x, 2), np.repeat(x, [1, 0, 2], axis=0), np.repeat(v, 3, axis=-1),
            np.tile(v, (2, 2)), np.tile(x, 2), np.kron(x, v[:2]), np.kron(v[:3], x),
            np.roll(x, 1), np.roll(x, (1, -2), axis=(0, 1)), np.rollaxis(a, 2),
            np.rollaxis(a, 0, 3), np.flip(a), np.flip(a, (0, 2)), np.flipud(x), np.fliplr(x),
            np.rot90(x), np.rot90(a, 2, (1, 2)), np.rot90(x, -1), np.rot90(a, 1, (2, 0)),
            x[::-1, 1::2], a[:, ::-2, 1:], a[1, 2:0:-1])


def pads(x):
    return (np.pad(x, 1), np.pad(x, ((1, 2), (0, 3)), constant_values=((1.0, 2.0), (3.0, 4.0))),
            np.pad(x, 2, mode="edge"), np.pad(x, (3, 5), mode="reflect"),
            np.pad(x, (1, 7), mode="wrap"), np.pad(x, 2, mode="symmetric"),
            np.pad(x, {1: (2, 0)}, mode="reflect"), np.pad(x, 1, constant_values=x[0, 0]))


def matrices(s, v, a, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)         # 2-vectors, as NumPy 2
        cross2 = np.cross(s[:, :2], x[0, 1:])
    return (np.tril(s), np.triu(s, 1), np.tril(a, -1), np.triu(v), np.diag(v), np.diag(v, -2),
            np.diag(s, 1), np.diag(x, -1), np.diagonal(a, 1, 2, 1), np.diagonal(a, -1),
            np.trace(s), np.trace(a, -1, 1, 2), np.cross(s[:, :3], x[:, :3][0]),
            np.cross(a, x, axisa=1, axisb=0, axisc=0), cross2,
            np.outer(a, v), np.outer(v, x), *np.meshgrid(v, x[:, 0]),
            *np.meshgrid(v[:2], x[0], v[:3], indexing="ij"), *np.meshgrid(v, x[0], sparse=True),
            np.select([s > 0, s < -0.5], [s, s ** 2], default=v),
            np.select([s > 0], [1.5], default=s))


def series(x, v, lo, hi):
    return (np.diff(x), np.diff(x, 2, axis=0), np.diff(x, prepend=0.5, append=x[:, :1]),
            np.diff(v, 3), np.ediff1d(x), np.ediff1d(x, to_begin=v[0], to_end=[1.0, 2.0]),
            np.linspace(lo, hi, 5), np.linspace(lo, hi, 4, endpoint=False),
            np.linspace(v, hi, 3, axis=-1), np.linspace(lo, v, 2),
            *np.linspace(lo, hi, 6, retstep=True), np.linspace(lo, hi, 1),
            np.cumulative_sum(v, include_initial=True))


def sorting(d):
    return (np.sort(d), np.sort(d, axis=0), np.sort(d, axis=None), np.sort(d, kind="stable"),
            np.partition(d, 2), np.partition(d, (0, 2), axis=0), np.partition(d, -1, axis=None),
            np.argsort(d), np.argsort(d, axis=0, stable=True), np.argpartition(d, 1))


def products(z):
    return (np.cumprod(z, axis=1), np.cumprod(z, axis=0), np.cumprod(z), np.cumprod(z[0, :3]),
            np.cumulative_prod(z, axis=1, include_initial=True))


def fancy(a):
    return (a[[0, 1], [2, 0]], a[:, [0, 2], [1, 3]], a[[1, 0], :, [3, 1]], a[0, :, [1, 2]],
            a[[[1], [0]], [[0, 2]]], a[..., MASK], a[1, MASK2], a[::-1, [2, 0]],
            a[None, [1], 1:, [0]], a[:, [2], ::-1], a[[1, -1], -2], a[np.array([0, 1]), :, 3],
            a[[0, 1], [1, 2], [3, -4]], a[:, MASK2[:, 0]])


GROUPS = {
    "joining": (joining, (X, V, A)),
    "copies": (copies, (X, V, A)),
    "pads": (pads, (X,)),
    "matrices": (matrices, (S, V, A, X)),
    "series": (series, (X, V, np.float64(-1.3), np.float64(2.2))),
    "sorting": (sorting, (D,)),
    "products": (products, (Z,)),
    "fancy": (fancy, (A,)),
}
APPROXIMATE: set = set()      # every group bit for bit (cumprod is np.cumprod's own products)


def _leaves(out):
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return [np.asarray(o.data if hasattr(o, "data") else o) for o in out]


def _same(got, want, approx):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                                 got.dtype, want.dtype)
    if approx:
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", GROUPS)
def test_forward_matches_numpy(name):
    f, args = GROUPS[name]
    want = _leaves(f(*args))
    runs = {"interp": fg.jit(f, backend="interp")(*args),
            "tensors": f(*(fg.tensor(a) for a in args))}
    for backend, out in runs.items():
        got = _leaves(out)
        assert len(got) == len(want), backend
        for i, (g, w) in enumerate(zip(got, want)):
            try:
                _same(g, w, name in APPROXIMATE)
            except AssertionError as e:
                raise AssertionError(f"{name} output {i} on {backend}: {e}") from None


def _joined(f):
    """sin of f's floating-point outputs raveled and joined: one array for check_grads, whose
    gradients depend on x (a linear function's would be constants, folded away)."""
    def joined(*args):
        outs = [o for o in f(*args) if np.dtype(o.dtype).kind == "f"]
        return np.sin(fnp.concatenate([fnp.ravel(o) for o in outs]))
    joined.__name__ = f.__name__
    return joined


@pytest.mark.parametrize("backend", ["eager", "interp"])
@pytest.mark.parametrize("name", GROUPS)
def test_gradients_to_order_two(name, backend):
    f, args = GROUPS[name]
    check_grads(_joined(f), args, order=2, backend=None if backend == "eager" else backend)


# -- compiled ---------------------------------------------------------------------------------
# Numba compiles each fused kernel separately, one to three seconds each on this machine, and
# each distinct output shape costs a kernel forward and one or two backward: the groups above
# took over four minutes compiled (the copies and matrices programs below, one call of each
# kind of composition). The IR is the same for every backend and the tests above check it, so
# by default numba runs what is new to its code, rev's index map and the argsort and
# argpartition host steps, on outputs of one shape; the gathers and scatters of traced indices
# are compiled in test_traced_index_arrays. The loss is sin of the outputs, so that no gradient
# is a constant (a linear function's is, and the simplifier would fold it).
# FUSEGRAD_TEST_NUMBA_BREADTH=1 also compiles the two breadth programs.

def compiled_core(x):
    """Outputs of one shape: one kernel forward, few backward."""
    return (np.flip(x, 0), np.rot90(x, 2), x[:, ::-1], np.sort(x, axis=0),
            np.partition(x, 1, axis=1))


def compiled_copies(x, v, a):
    return (np.pad(x, ((1, 2), (0, 3)), mode="reflect"), np.pad(x, 2, mode="edge"),
            np.pad(x, (1, 7), mode="wrap"), np.pad(x, 1, constant_values=v[0]),
            np.rot90(a, 1, (2, 0)), np.roll(x, (1, -2), axis=(0, 1)),
            np.repeat(x, [1, 0, 2], axis=0), np.tile(v, (2, 2)), np.kron(x[:2, :2], v[:2]),
            x[::-1, 1::2], np.hstack(np.split(x, 2, axis=1)[::-1]), np.vstack([x, v]),
            np.dstack([x, x]), np.array([[v[0], 1.0], (x[0, 0], v[1])]))


def compiled_matrices(x, v, a, z):
    return (np.diag(v, 1), np.diagonal(a, 1, 2, 1), np.trace(x), np.tril(x, 1),
            np.cross(a[..., :3], x[:, 1:]), np.diff(x, 2, axis=0, prepend=0.5),
            np.cumprod(z, axis=1), np.linspace(v[0], v[1], 5), np.sort(x, axis=0),
            np.partition(x, 1, axis=1), a[[1, 0], :, [3, 1]], x[[0, 2], [1, 3]],
            np.select([x > 0], [x ** 2], default=v), np.outer(v, x[0]))


BREADTH = os.environ.get("FUSEGRAD_TEST_NUMBA_BREADTH", "") not in ("", "0")
COMPILED = {
    "core": (compiled_core, (X,)),
    "copies": (compiled_copies, (X, V, A)),
    "matrices": (compiled_matrices, (X, V, A, Z)),
}


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_gradients_to_order_two(name):
    if name != "core" and not BREADTH:
        pytest.skip("minutes of numba compiles: set FUSEGRAD_TEST_NUMBA_BREADTH=1")
    f, args = COMPILED[name]
    if name == "core":      # stacked: one kernel
        _same(fg.jit(lambda *xs: np.stack(f(*xs)), backend="numba")(*args), np.stack(f(*args)),
              False)
    check_grads(_scalar(f, args), args, order=2, backend="numba")


CUMPROD_INPUTS = [rng.uniform(0.5, 1.5, 17), rng.standard_normal((3, 9)), Z,
                  np.array([1e200, 1e100, 1e-300, 3.0, 1e-10, 7.0])]


@pytest.mark.parametrize("backend", ["tensors", "interp", "numba"])
def test_cumprod_is_numpys_running_product_bit_for_bit(backend):
    """np.cumprod multiplies left to right (out[i] = out[i-1] * x[i]); a scan that pairs the
    products differently differs in the last bit (11 of 17 elements of the first input did).
    fusegrad's cumprod is NumPy's own: eager, interpreted and between compiled kernels."""
    def f(a, b, z, big):
        return (np.cumprod(a), np.cumprod(b, axis=1), np.cumprod(b, axis=0), np.cumprod(z),
                np.cumprod(big), np.cumprod(2.0 * b, axis=-1)[1:])
    want = f(*CUMPROD_INPUTS)
    got = (f(*(fg.tensor(x) for x in CUMPROD_INPUTS)) if backend == "tensors" else
           fg.jit(f, backend=backend)(*CUMPROD_INPUTS))
    for g, w in zip(_leaves(got), _leaves(want), strict=True):
        _same(g, w, False)


@pytest.mark.parametrize("backend", [None, "interp", "numba"])
def test_cumprod_gradient_to_order_two_with_zeros(backend):
    """The rule has no division (an exclusive product times a suffix scan), so it holds at one
    zero and at several, to order two, along either axis."""
    check_grads(lambda z: np.sin(np.cumprod(z, axis=1)) + np.cumprod(z, axis=0)[::-1], (Z,),
                order=2, backend=backend)


def test_cumprod_gradient_with_zeros_is_exact():
    """d cumprod(z)[i] / d z[k] = prod of z[:i+1] without z[k]: nonzero at a lone zero."""
    z = Z[0]
    u = np.arange(1.0, 6.0)
    want = np.array([sum(u[i] * np.prod(np.delete(z[:i + 1], k)) for i in range(k, 5))
                     for k in range(5)])
    for backend in ("eager", "interp"):          # numba: compiled_core, at the same zeros
        got = fg.jit(fg.grad(lambda z: np.sum(np.cumprod(z) * u)), backend=backend)(z)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, err_msg=backend)


# -- traced index arrays ----------------------------------------------------------------------

I = np.array([1, -1, 0])
J = np.array([[1], [0]])


def traced_indexing(a, i, j):
    return (a[i, j], a[:, j, i], a[i, :, j], a[j, 1], a[0, i, 1:], a[j, [0, 2]][..., None],
            fnp.take(TABLE, i, axis=0), fnp.getitem(TABLE, (j, i)), fnp.getitem(TABLE, i),
            np.take_along_axis(TABLE, j, axis=0), np.take_along_axis(a, j[None], 1))


def _scatter_gradient(a, i, j, u):
    """The gradient of <u, traced_indexing(a, i, j)[:6]> by NumPy's np.add.at."""
    g = np.zeros_like(a)
    keys = [(i, j), (slice(None), j, i), (i, slice(None), j), (j, 1), (0, i, slice(1, None)),
            (j, [0, 2])]
    for key, w in zip(keys, u):
        np.add.at(g, key, w.reshape(a[key].shape))
    return g


def test_traced_index_arrays():
    want = _leaves(traced_indexing(A, I, J))
    us = [np.random.default_rng(k).standard_normal(w.shape) for k, w in enumerate(want[:6])]

    def loss(a, i, j):
        return sum(np.sum(o * u) for o, u in zip(traced_indexing(a, i, j)[:6], us))
    expected = _scatter_gradient(A, I, J, us)
    runs = {"interp": fg.jit(traced_indexing, backend="interp")(A, I, J),
            "tensors": traced_indexing(fg.tensor(A), fg.tensor(I), fg.tensor(J))}
    for backend, out in runs.items():
        for k, (g, w) in enumerate(zip(_leaves(out), want)):
            _same(g, w, False), (backend, k)
    for backend in ("eager", "interp"):
        grad = fg.jit(fg.grad(loss), backend=backend)(A, I, J)
        np.testing.assert_allclose(grad, expected, rtol=1e-14, err_msg=backend)

    def loss2(a, i, j):         # compiled: a take along one axis, then along the other
        return np.sum(a[i, :, j] * us[2])
    grad = fg.jit(fg.grad(loss2), backend="numba")(A, I, J)
    np.testing.assert_allclose(grad, _scatter_gradient(A, I, J, [0 * us[0], 0 * us[1], us[2]]),
                               rtol=1e-14)


def test_traced_index_out_of_bounds_raises_per_axis():
    """x[i, j] checks each index against its own axis (a flat index would not)."""
    for backend in ("interp", "numba"):
        with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
            fg.jit(lambda x, i, j: x[i, j], backend=backend)(X, np.array([0, 1]),
                                                              np.array([4, 0]))


def test_a_numpy_array_indexed_by_a_tracer_needs_fusegrad():
    """NumPy's ndarray.__getitem__ and np.take (which dispatches on the array alone) cannot
    return a traced value: NumPy converts the index with __array__ (or __index__), which can
    only return numbers, and indexing has no dispatch protocol. The error says so, for an index
    array and a 0-d one, and names the spellings that record (test_traced_index_arrays)."""
    for f in (lambda i: TABLE[i], lambda i: TABLE[i[0]], lambda i: TABLE[i, 1],
              lambda i: TABLE[np.argmax(i)]):
        with pytest.raises(ConversionError, match=r"`TABLE\[.*\]` indexes a NumPy array with a "
                                                  r"traced index: .* fusegrad.numpy.take\("):
            fg.jit(f, backend="interp")(I)
    with pytest.raises(ConversionError):
        fg.jit(lambda i: np.take(TABLE, i, axis=0), backend="interp")(I)


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_a_constant_table_indexed_by_a_computed_index(backend):
    """The recording spellings, with the index computed from a traced value (np.argmax,
    np.argsort): the table is a constant input of a take, and the gradient flows to what it
    multiplies. Eagerly, NumPy's own `TABLE[i]` works too: an integer tensor carries no
    gradient, so NumPy may read its numbers."""
    x = np.array([0.3, 2.0, -1.0, 0.5, 1.5])

    def f(x):
        i, order = np.argmax(x), np.argsort(x)
        rows = fnp.take(TABLE, order, axis=0) if backend != "eager" else TABLE[order]
        row = fnp.take(TABLE, i, axis=0) if backend != "eager" else TABLE[i]
        return np.sum(rows * x[:, None]) + np.sum(row * x[:3])

    want = np.sum(TABLE[np.argsort(x)] * x[:, None]) + np.sum(TABLE[np.argmax(x)] * x[:3])
    grad = TABLE[np.argsort(x)].sum(1)
    grad[:3] += TABLE[np.argmax(x)]
    run = f if backend == "eager" else fg.jit(f, backend=backend)
    np.testing.assert_allclose(run(x), want, rtol=1e-14)
    g = fg.grad(f) if backend == "eager" else fg.jit(fg.grad(f), backend=backend)
    np.testing.assert_allclose(g(x), grad, rtol=1e-14)


def test_rev_is_a_view_as_in_numpy():
    """np.flip and negative steps are views in NumPy: on eager tensors too, sharing the
    storage and its version (a write into one shows in the other; with gradients recorded, a
    write into the view raises rather than losing the base's gradient)."""
    x = np.arange(6.0).reshape(2, 3)
    t = fg.tensor(x.copy())
    for view, np_view in ((np.flip(t, 1), np.flip(x, 1)), (t[::-1, ::-2], x[::-1, ::-2])):
        view[0, 0] = view[0, 0] + 10.0
        np_view[0, 0] += 10.0
        np.testing.assert_array_equal(t.numpy(), x)
        assert np.shares_memory(view.numpy(), t.numpy())
    w = fg.tensor(np.ones(3), requires_grad=True) * 2.0
    flipped = np.flip(w)
    with pytest.raises(RuntimeError, match="shares its storage with a live view"):
        flipped += 1.0


# -- what fusegrad refuses, with NumPy's errors where NumPy has one -----------------------------

@pytest.mark.parametrize("f, error, words", [
    (lambda x: x[x > 0], IndexError, "np.where(mask, x, 0)"),
    (lambda x: np.repeat(x, x.shape[0] + 0 * x.astype(np.int64)[0]), TypeError, "traced"),
    (lambda x: np.pad(x, 1, mode="mean"), NotImplementedError, "modes"),
    (lambda x: np.pad(x, 1, mode="reflect", reflect_type="odd"), NotImplementedError, "even"),
    (lambda x: np.sort(x, order="a"), NotImplementedError, "order="),
    (lambda x: np.split(x, 3, axis=1), ValueError, "equal division"),
    (lambda x: np.fliplr(x[0]), ValueError, ">= 2-d"),
    (lambda x: np.diag(x[None]), ValueError, "1- or 2-d"),
    (lambda x: np.select([x], [x]), TypeError, "condlist"),
])
def test_errors(f, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        fg.jit(f, backend="interp")(X)
