"""Unmodified NumPy code under fg.jit(backend="interp") equals NumPy: values, shapes and dtypes.

Each row is a function written with NumPy and its inputs; the jitted result must match the
plain NumPy call exactly in shape and dtype (NEP 50: Python scalars are weak, float32 stays
float32, int and bool promote as NumPy 2) and closely in value.
"""

import numpy as np
import pytest
from scipy import special

import fusegrad as fg
import fusegrad.nn as fnn
import fusegrad.numpy as fnp

rng = np.random.default_rng(1)
X = rng.standard_normal((3, 4))
X32 = X.astype(np.float32)
W = rng.standard_normal((4, 5))
V = rng.standard_normal(4)
A3 = rng.standard_normal((2, 3, 4))
I = rng.integers(-5, 6, (3, 4))
IP = rng.integers(1, 4, (3, 4))
B = X > 0
IDX = rng.integers(0, 4, (3, 2))
IDX0 = rng.integers(-3, 3, (2, 4))


def run(f, *args, **kw):
    return fg.jit(f, backend="interp", **kw)(*args)


def assert_same(actual, expected, rtol=1e-6, atol=1e-12):
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, rtol, atol)
        return
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


def check(f, *args, rtol=1e-6):
    with np.errstate(all="ignore"):
        expected = f(*args)
    assert_same(run(f, *args), expected, rtol=rtol)


NUMPY_CASES = {
    # elementwise, broadcasting
    "tanh": (np.tanh, X),
    "tanh f32": (np.tanh, X32),
    "tanh i64 -> f64": (np.tanh, I),
    "exp log sqrt": (lambda x: np.exp(x) + np.log(np.abs(x)) + np.sqrt(np.abs(x)), X),
    "unary zoo": (lambda x: (np.sin(x), np.cos(x), np.tan(x), np.sinh(x), np.cosh(x),
                             np.log1p(np.abs(x)), np.expm1(x), np.exp2(x), np.log2(np.abs(x)),
                             np.log10(np.abs(x)), np.square(x), np.reciprocal(x), np.sign(x),
                             np.negative(x), np.positive(x), np.absolute(x)), X32),
    "broadcast rows": (lambda x, v: x * v + v, X, V),
    "broadcast column": (lambda x: x - x[:, :1], X),
    "broadcast 3-d": (lambda a, x: a * x[None] + x[0], A3, X),
    "maximum": (np.maximum, X32, X[0]),
    "maximum scalar f32": (lambda x: np.maximum(x, 0), X32),
    "minimum int": (np.minimum, I, IP),
    "where": (lambda x, y: np.where(x > 0, x, y), X, X32[0]),
    "where scalars keep f32": (lambda x: np.where(x > 0, x, 0.0), X32),
    "where two scalars": (lambda x: np.where(x > 0, 1.0, 0), X32),
    "where int cond": (lambda i, x: np.where(i, x, -x), I, X),
    "clip": (lambda x: np.clip(x, -0.5, 0.5), X),
    "clip f32 one-sided": (lambda x: np.clip(x, -0.5, None), X32),
    "clip method": (lambda x: x.clip(0, 1), X32),
    "clip min= max=": (lambda x: (np.clip(x, min=0), np.clip(x, max=0.5, min=-0.5)), X),
    # scalars both sides, NEP 50
    "f32 scalar arithmetic": (lambda x: (x + 1, 1 + x, x - 1.5, 1.5 - x, x * 2, 2 * x, x / 3,
                                         3 / x, -x, +x, abs(x)), X32),
    "f64 scalar arithmetic": (lambda x: (x + 1, 2.5 - x, x * True, 3 / x), X),
    "i64 scalar arithmetic": (lambda x: (x + 1, 1.5 + x, x * 2, x / 2, 2 / x, True + x, x - 3),
                              IP),
    "bool arithmetic": (lambda b: (b + 1, b * 2.0, b + b, b * b, np.maximum(b, b), b & b), B),
    "f32 + f64 array": (lambda x, y: x + y, X32, X),
    "f32 + i64 array": (lambda x, i: x + i, X32, I),
    "i64 + bool": (lambda i, b: i + b, I, B),
    "i64 / i64": (lambda i, j: i / j, I, IP),
    "numpy scalar is strong": (lambda x: (x + np.float64(1.0), x * np.float32(2)), X32),
    "0-d array is strong": (lambda x: x + np.array(1.0), X32),
    "pow": (lambda x: (x ** 2, x ** 3.0, 2 ** x, np.power(np.abs(x), x), np.abs(x) ** 0.5), X32),
    "pow int": (lambda i: (i ** 2, 2 ** i), IP),
    "float_power": (lambda x: np.float_power(np.abs(x), 2), X32),
    "comparisons": (lambda x, y: (x < y, x <= 0.5, x > y, x >= y, x == y, x != 1, 0 < x),
                    X, X32),
    "logical": (lambda x: (np.logical_and(x > 0, x < 1), np.logical_or(x > 0, x < -1),
                           np.logical_not(x > 0), (x > 0) & (x < 1), (x > 0) | (x < 1),
                           ~(x > 0)), X),
    "astype": (lambda x: (x.astype(np.float32), x.astype(np.int64), x.astype(bool),
                          x.astype("float64")), X32),
    # reductions
    "sum axis 0 keepdims": (lambda x: np.sum(x, axis=0, keepdims=True), X),
    "sum negative axis f32": (lambda x: np.sum(x, axis=-1), X32),
    "sum all": (np.sum, A3),
    "sum tuple axes": (lambda a: np.sum(a, axis=(0, -1)), A3),
    "sum i64": (np.sum, I),
    "sum bool -> i64": (lambda b: np.sum(b, axis=1), B),
    "sum dtype": (lambda x: np.sum(x, dtype=np.float32), X),
    "sum method": (lambda x: x.sum(axis=1, keepdims=True), X32),
    "mean": (lambda x: np.mean(x, axis=-1), X32),
    "mean all": (np.mean, A3),
    "mean keepdims": (lambda a: np.mean(a, axis=(1, 2), keepdims=True), A3),
    "mean i64 -> f64": (np.mean, I),
    "var": (lambda x: np.var(x, axis=0), X),
    "var ddof keepdims": (lambda x: np.var(x, axis=(0, 1), ddof=1, keepdims=True), X),
    "var f32": (np.var, X32),
    "std": (lambda x: np.std(x, axis=-1), X32),
    "std keepdims": (lambda a: np.std(a, axis=1, keepdims=True), A3),
    "max keepdims": (lambda x: np.max(x, axis=1, keepdims=True), X),
    "min all f32": (np.min, X32),
    "max/min methods": (lambda x: (x.max(), x.min(axis=0), np.amax(x, -1), np.amin(x)), I),
    "max bool": (lambda b: np.max(b, axis=0), B),
    "prod": (lambda x: np.prod(x, axis=0), X),
    "prod i64": (lambda i: np.prod(i, axis=-1, keepdims=True), IP),
    "argmax": (np.argmax, X),
    "argmax axis": (lambda x: np.argmax(x, axis=-1), X32),
    "argmax keepdims": (lambda x: np.argmax(x, axis=0, keepdims=True), X),
    "argmax keepdims all axes": (lambda x: np.argmax(x, keepdims=True), X),
    "argmin": (lambda x: (np.argmin(x, axis=0), x.argmax(axis=1)), X),
    "cumsum": (lambda x: np.cumsum(x, axis=-1), X),
    "cumsum flat": (np.cumsum, X32),
    "cumsum i64 bool": (lambda i, b: (np.cumsum(i, axis=0), np.cumsum(b, axis=1)), I, B),
    # linear algebra
    "matmul 1-d 1-d": (np.matmul, V, V),
    "matmul 1-d 2-d": (np.matmul, V, W),
    "matmul 2-d 1-d": (np.matmul, W.T, V),
    "matmul 2-d 2-d": (np.matmul, X, W),
    "matmul batched": (np.matmul, A3, W),
    "matmul batched 1-d": (np.matmul, A3, V),
    "matmul 1-d batched": (np.matmul, V, rng.standard_normal((2, 4, 3))),
    "matmul broadcast batch": (np.matmul, rng.standard_normal((2, 1, 3, 4)),
                               rng.standard_normal((5, 4, 2))),
    "@ f32": (lambda x, w: x @ w, X32, W.astype(np.float32)),
    "@ f32 f64": (lambda x, w: x @ w, X32, W),
    "@ i64 f64": (lambda i, w: i @ w, I, W),
    "@ i64": (lambda i, j: i @ j.T, I, IP),
    "@ constant": (lambda x: x @ W, X),
    "r@ constant": (lambda x: W.T @ x.T, X),
    "dot": (np.dot, X, W),
    "dot 1-d": (np.dot, V, V),
    "dot scalar": (lambda x: np.dot(x, 2.0), X32),
    "dot method": (lambda x: x.dot(W), X),
    "outer": (np.outer, V, V[:3]),
    "vdot inner": (lambda a, b: (np.vdot(a, b), np.inner(a, b)), V, V[::-1].copy()),
    "linalg.norm": (lambda x: np.linalg.norm(x), X),
    # shapes
    "transpose": (np.transpose, A3),
    "transpose axes": (lambda a: np.transpose(a, (1, -1, 0)), A3),
    ".T": (lambda x: x.T, X),
    ".T 1-d": (lambda v: v.T, V),
    "swapaxes": (lambda a: np.swapaxes(a, 0, -1), A3),
    "swapaxes method": (lambda a: a.swapaxes(1, 2), A3),
    "moveaxis": (lambda a: np.moveaxis(a, 0, -1), A3),
    "expand_dims": (lambda x: np.expand_dims(x, -1), X),
    "expand_dims tuple": (lambda x: np.expand_dims(x, (0, 2)), X),
    "squeeze": (np.squeeze, X[None, :, None]),
    "squeeze axis": (lambda x: np.squeeze(x, axis=-1), X[:, :, None]),
    "broadcast_to": (lambda x: np.broadcast_to(x, (2, 3, 4)), X),
    "broadcast_to size 1": (lambda x: np.broadcast_to(x[:1], (3, 4)), X),
    "reshape(-1, 2)": (lambda x: x.reshape(-1, 2), X),
    "reshape tuple": (lambda x: x.reshape((2, -1)), X),
    "np.reshape": (lambda a: np.reshape(a, (6, 4)), A3),
    "ravel flatten": (lambda a: (np.ravel(a), a.flatten()), A3),
    "concatenate": (lambda x, y: np.concatenate([x, y], axis=-1), X, X32),
    "concatenate axis 0": (lambda x: np.concatenate([x, x * 2, x[:1]]), X),
    "concatenate axis None": (lambda x: np.concatenate([x, x], axis=None), X),
    "concatenate constant": (lambda x: np.concatenate([x, W.T[:2]], 0), X),
    "stack": (lambda x, y: np.stack([x, y]), X, X),
    "stack axis -1": (lambda x, y: np.stack([x, y], axis=-1), X, X32),
    "take_along_axis": (lambda x: np.take_along_axis(x, IDX, axis=-1), X),
    "take_along_axis 0": (lambda x: np.take_along_axis(x, IDX0 % 3, axis=0), X),
    "take": (lambda x: np.take(x, [0, -1, 2], axis=1), X),
    "take flat": (lambda x: np.take(x, [0, 11, 5]), X),
    "take mode=raise": (lambda x: np.take(x, [3, 0], axis=1, mode="raise"), X),
    "take 2-d indices": (lambda x: np.take(x, IDX % 3, axis=0), X),
    "zeros/ones/full_like": (lambda x: (np.zeros_like(x), np.ones_like(x),
                                        np.full_like(x, 2.5)), X32),
    "shape queries": (lambda x: x * (np.shape(x)[0] + np.ndim(x) + np.size(x) + len(x)), X),
}


@pytest.mark.parametrize("name", list(NUMPY_CASES))
def test_numpy_function_matches_numpy(name):
    f, *args = NUMPY_CASES[name]
    check(f, *args, rtol=3e-6 if any(np.asarray(a).dtype == np.float32 for a in args)
          else 1e-6)


INDEX_CASES = {
    "int": lambda x: x[1],
    "negative ints": lambda x: x[-1, -2],
    "slices with steps": lambda x: x[::2, 1:3],
    "negative steps": lambda x: x[::-1, ::-2],
    "negative steps with bounds": lambda x: x[1:0:-1, -1:0:-2],
    "reversed 3-d": lambda a: a[:, ::-1, -1::-1],
    "empty slice": lambda x: x[2:1],
    "None": lambda x: x[None, :, None],
    "Ellipsis": lambda a: a[..., 1],
    "Ellipsis and None": lambda a: a[0, ..., None],
    "integer array": lambda x: x[np.array([0, -1, 1])],
    "list of ints": lambda x: x[:, [0, -1, -2]],
    "2-d integer array": lambda x: x[np.array([[0, 1], [2, -1]])],
    "slice array None": lambda a: a[1:, [2, 0], None],
    "ellipsis negative step array": lambda a: a[..., ::-1, [0, -1]],
    "int array slice (adjacent)": lambda a: a[0, [1, 2], 1:],
    "int then array apart (numpy moves the dims first)": lambda a: a[None, [1, 0], ::2, -1],
    "array then int apart": lambda a: a[[1, 0], :, 0],
    "int None array": lambda a: a[0, None, [1, 2]],
    "chained": lambda a: a[1][::-1][:, [3, 0]],
}


@pytest.mark.parametrize("name", list(INDEX_CASES))
def test_indexing_matches_numpy(name):
    f = INDEX_CASES[name]
    arg = A3 if f.__code__.co_varnames[0] == "a" else X
    check(f, arg)


def test_traced_integer_index():
    check(lambda x, i: (x[i], x[:, i], x[i[0]]), X, np.array([2, 0, -1]))


def test_traced_index_f32_stays_f32():
    check(lambda x, i: x[i] * 2.0, X32, np.array([1, 1]))


# -- fusegrad.nn composites vs a NumPy reference -----------------------------------------------

def softmax_ref(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def gelu_ref(x):
    return 0.5 * x * (1 + special.erf(x / np.sqrt(2)))


def gelu_tanh_ref(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def layer_norm_ref(x, eps=1e-5, ndim=1):
    axes = tuple(range(x.ndim - ndim, x.ndim))
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


T = np.array([0, 3, 1])

NN_CASES = {
    "softmax": (fnn.softmax, softmax_ref, X),
    "softmax axis 0 f32": (lambda x: fnn.softmax(x, axis=0), lambda x: softmax_ref(x, 0), X32),
    "softmax large": (fnn.softmax, softmax_ref, X * 1000),
    "log_softmax": (fnn.log_softmax, lambda x: np.log(softmax_ref(x)), X),
    "log_softmax 3-d axis 1": (lambda a: fnn.log_softmax(a, axis=1),
                               lambda a: np.log(softmax_ref(a, 1)), A3),
    "logsumexp": (lambda x: fnn.logsumexp(x, axis=1),
                  lambda x: special.logsumexp(x, axis=1), X),
    "logsumexp keepdims": (lambda x: fnn.logsumexp(x, axis=-1, keepdims=True),
                           lambda x: special.logsumexp(x, axis=-1, keepdims=True), X),
    "logsumexp all": (fnn.logsumexp, special.logsumexp, A3),
    "cross_entropy": (lambda x: fnn.cross_entropy(x, T),
                      lambda x: -np.mean(np.log(softmax_ref(x))[np.arange(3), T]), X),
    "layer_norm": (fnn.layer_norm, layer_norm_ref, X),
    "layer_norm 2 axes eps": (lambda a: fnn.layer_norm(a, eps=1e-3, ndim=2),
                              lambda a: layer_norm_ref(a, 1e-3, 2), A3),
    "gelu": (fnn.gelu, gelu_ref, X),
    "gelu tanh": (lambda x: fnn.gelu(x, approximate=True), gelu_tanh_ref, X),
    "gelu 'tanh' f32": (lambda x: fnn.gelu(x, approximate="tanh"),
                        lambda x: gelu_tanh_ref(x).astype(np.float32), X32),
    "relu": (fnn.relu, lambda x: np.maximum(x, 0), X32),
    "sigmoid": (fnn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), X),
    "softplus": (fnn.softplus, lambda x: np.log1p(np.exp(x)), X),
}


@pytest.mark.parametrize("name", list(NN_CASES))
def test_nn_composite_matches_reference(name):
    f, ref, x = NN_CASES[name]
    with np.errstate(over="ignore"):
        expected = ref(x)
    expected = np.asarray(expected, dtype=x.dtype)
    assert_same(run(f, x), expected, rtol=2e-5 if x.dtype == np.float32 else 1e-7,
                atol=1e-6 if x.dtype == np.float32 else 1e-12)


def test_cross_entropy_traced_targets():
    got = run(fnn.cross_entropy, X, T)
    assert_same(got, -np.mean(np.log(softmax_ref(X))[np.arange(3), T]))


def test_nn_composites_are_single_ops():
    fn = fg.make_ir(lambda x: fnn.softmax(x) + fnn.gelu(x) + fnn.layer_norm(x))(X)
    assert [op.prim for op in fn.ops] == ["softmax", "gelu", "add", "layer_norm", "add"]


def test_fnp_functions_work_on_numpy_arrays_too():
    assert_same(fnp.sum(X, axis=0, keepdims=True), np.sum(X, axis=0, keepdims=True))
    assert_same(fnp.matmul(V, W), V @ W)
    assert_same(fnp.getitem(A3, (Ellipsis, slice(None, None, -1), [0, -1])),
                A3[..., ::-1, [0, -1]])
    assert_same(fnn.softmax(X), softmax_ref(X))


def test_fnp_functions_under_jit():
    def f(x, w):
        return fnp.sum(fnp.tanh(fnp.matmul(x, w)), axis=-1)
    assert_same(run(f, X, W), np.sum(np.tanh(X @ W), axis=-1))


def test_eager_backend_agrees_on_plain_numpy():
    f = NUMPY_CASES["broadcast 3-d"][0]
    assert_same(fg.jit(f, backend="eager")(A3, X), run(f, A3, X))


def test_a_traced_integer_scalar_indexes_like_numpy():
    """logits[y] with y a jitted int argument (softmax regression's label): a gather, not an
    == against Ellipsis on the tracer; out of range raises IndexError on every backend."""
    def f(logits, y):
        return logits[y] - np.log(np.sum(np.exp(logits)))
    logits = np.array([0.1, 0.5, -0.3])
    p = np.exp(logits) / np.sum(np.exp(logits))
    for backend in ("eager", "interp", "numba"):
        jitted = fg.jit(f, backend=backend, tiered=False)
        grad = fg.jit(fg.grad(f), backend=backend, tiered=False)
        for y in (1, -1):
            np.testing.assert_allclose(jitted(logits, y), f(logits, y), rtol=1e-14)
            np.testing.assert_allclose(grad(logits, y), np.eye(3)[y] - p, rtol=1e-12)
        with pytest.raises(IndexError, match="out of bounds"):
            jitted(logits, 3)
