"""Errors say what went wrong, where in the user's code (file:line) and what to do instead."""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir import ShapeError
from fusegrad.tracer.tracer import ConcretizationError

X = np.arange(12.0).reshape(3, 4)
V = np.ones(3)


def jit(f, **kw):
    return fg.jit(f, backend="interp", **kw)


def where(f, offset=1):
    """`test_errors.py:<line>` of the line `offset` lines below f's def."""
    return f"test_errors.py:{f.__code__.co_firstlineno + offset}"


def error_of(exc_type, f, *args, **kw):
    with pytest.raises(exc_type) as info:
        jit(f, **kw)(*args)
    return str(info.value)


# -- data-dependent Python control flow --------------------------------------------------------

def branch(x):
    if np.sum(x) > 0:
        return x
    return -x


def to_int(x):
    return x * int(np.sum(x))


def to_float(x):
    return x * float(x[0, 0])


def item(x):
    return x * x.sum().item()


def index_with(x):
    return [1.0, 2.0, 3.0][np.argmax(x)]


@pytest.mark.parametrize("f, what", [(branch, "bool()"), (to_int, "int()"),
                                     (to_float, "float()"),
                                     (item, ".item()"), (index_with, "as an index")])
def test_concretization_errors_suggest_static_argnums_or_eager(f, what):
    msg = error_of(ConcretizationError, f, X)
    assert what in msg
    assert f"{__file__}:{f.__code__.co_firstlineno + 1}" in msg
    assert "static_argnums" in msg and 'backend="eager"' in msg
    assert "np.where" in msg


def test_concretization_error_is_a_type_error():
    assert issubclass(ConcretizationError, TypeError)


def test_the_same_code_runs_with_the_eager_backend_or_static_args():
    np.testing.assert_allclose(fg.jit(branch, backend="eager")(X), X)
    np.testing.assert_allclose(jit(lambda x, n: x * n, static_argnums=1)(X, 3), X * 3)


# -- unsupported NumPy functions are named, never silently constant ----------------------------

def eig(x):
    return np.linalg.eig(x)


def unique(x):
    return np.unique(x)


def spacing(x):
    return np.spacing(x)


def ufunc_reduce(x):
    return np.add.reduce(x)


@pytest.mark.parametrize("f, name", [(eig, "numpy.linalg.eig"), (unique, "numpy.unique"),
                                     (spacing, "numpy.spacing"),
                                     (ufunc_reduce, "numpy.add.reduce")])
def test_unsupported_numpy_function_is_named(f, name):
    msg = error_of(TypeError, f, X)
    assert f"fusegrad has no rule for {name}" in msg
    assert where(f) in msg
    assert "never falls back to a constant" in msg


def test_out_argument_is_refused():
    msg = error_of(TypeError, lambda x: np.tanh(x, out=np.empty((3, 4))), X)
    assert "out=" in msg


@pytest.mark.parametrize("f, word", [
    (lambda x: np.add(x, 1, where=x > 0), "numpy.add: fusegrad does not support the where="),
    (lambda x: np.tanh(x, dtype=np.float32), "numpy.tanh: fusegrad does not support the dtype="),
    (lambda x: np.take(x, [0, 9], axis=1, mode="clip"), "the mode= argument"),
    (lambda x: np.concatenate([x, x], dtype=np.float32), "the dtype= argument"),
    (lambda x: np.sum(x, initial=1.0), "the initial= argument of reductions"),
    (lambda x: np.mean(x, where=x > 0), "the where= argument of reductions"),
])
def test_unsupported_keyword_arguments_are_refused_not_ignored(f, word):
    assert word in error_of(TypeError, f, X)


# -- shapes ----------------------------------------------------------------------------------

def add_mismatch(x, v):
    return x + v


def matmul_mismatch(x, v):
    return x @ v


def concat_mismatch(x, v):
    return np.concatenate([x, v[None]], axis=0)


def where_mismatch(x, v):
    return np.where(x > 0, x, v)


@pytest.mark.parametrize("f, words", [
    (add_mismatch, ["add", "[3, 4]", "[3]"]),
    (matmul_mismatch, ["matmul", "[3, 4]", "[3]"]),
    (concat_mismatch, ["concatenate", "f64[3,4]", "f64[1,3]"]),
    (where_mismatch, ["select", "[3, 4]", "[3]"]),
])
def test_shape_mismatch_names_op_shapes_and_line(f, words):
    msg = error_of(ShapeError, f, X, V)
    for word in words:
        assert word in msg, (word, msg)
    assert where(f) in msg


def test_shape_error_is_a_value_error():
    assert issubclass(ShapeError, ValueError)


def test_reshape_mismatch():
    msg = error_of(ShapeError, lambda x: x.reshape(5, -1), X)
    assert "reshape" in msg and "12" in msg


# -- indexing ---------------------------------------------------------------------------------

def mask(x):
    return x[x > 0]


def test_boolean_mask_suggests_where():
    msg = error_of(IndexError, mask, X)
    assert "np.where(mask, x, 0)" in msg
    assert where(mask) in msg


@pytest.mark.parametrize("f, words", [
    (lambda x: x[3], ["index 3 is out of bounds for axis 0 with size 3"]),
    (lambda x: x[:, [0, 4]], ["index 4 is out of bounds for axis 1 with size 4"]),
    (lambda x: x[0, 0, 0], ["too many indices"]),
    (lambda x: x[[0, 1], [1, 2, 0]], ["shape mismatch: indexing arrays could not be broadcast"]),
    (lambda x: x[..., ...], ["single ellipsis"]),
    (lambda x: x["a"], ["unsupported index"]),
])
def test_index_errors(f, words):
    msg = error_of(IndexError, f, X)
    for word in words:
        assert word in msg
    assert "test_errors.py:" in msg


def test_item_assignment_into_a_traced_value_is_a_functional_update():
    def f(x):
        x[0] = 1.0          # iteration and item assignment are indexing (test_constructors.py)
        return x
    np.testing.assert_array_equal(jit(f)(X), np.vstack([np.ones(4), X[1:]]))


# -- traced values escaping the trace ----------------------------------------------------------

def test_leaked_tracer_used_after_the_trace():
    leaked = []

    def f(x):
        leaked.append(x * 2)
        return x
    jit(f)(X)

    def use():
        return leaked[0] + 1
    with pytest.raises(RuntimeError) as info:
        use()
    msg = str(info.value)
    assert "after its trace ended" in msg and "return it" in msg
    assert f"{__file__}:{use.__code__.co_firstlineno + 1}" in msg


def test_leaked_tracer_used_in_another_trace():
    leaked = []
    jit(lambda x: leaked.append(np.tanh(x)) or x)(X)

    def g(y):
        return y + leaked[0]
    with pytest.raises(RuntimeError) as info:
        jit(g)(X)
    msg = str(info.value)
    assert "escaped the trace" in msg and "f64[3,4]" in msg
    assert where(g) in msg


def test_leaked_tracer_cannot_be_converted():
    leaked = []
    jit(lambda x: leaked.append(x) or x)(X)
    with pytest.raises(ConcretizationError, match="static_argnums"):
        np.asarray(leaked[0])


# -- arguments ---------------------------------------------------------------------------------

def test_unsupported_argument_types():
    with pytest.raises(TypeError, match="cannot pass str"):
        jit(lambda x: x)("hello")
    with pytest.raises(TypeError, match="complex128"):
        jit(lambda x: x)(np.ones(2, complex))


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'gpu'"):
        fg.jit(lambda x: x, backend="gpu")


def test_bad_axis():
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds"):
        jit(lambda x: np.sum(x, axis=2))(X)


# -- errors of traced code name the user's line (issue 23): eager transforms and jit alike -----

def sum_axis_2(x):
    return np.sum(x, axis=2) + 1.0


def mean_axis_minus_3(x):
    return np.sum(x.mean(axis=-3))


def max_axis_9(x):
    return np.max(x, axis=9)


def vector_output(x):
    return x * 2.0


def integer_output(x):
    return np.sum(x > 0)


def no_pair(x):
    return np.sum(x)


def grads_inside(x):
    g = fg.grad(vector_output)(x)
    return g


def bad_cotangent(x):
    out, pullback = fg.vjp(vector_output, x)
    return pullback(np.ones(5))


def bad_keyword(x):
    return np.sum(x, where=x > 0)


# (exception type, message, function, the line it must name: a def's line + offset; None: the
# line of the test's call)
LOCATED = [
    (np.exceptions.AxisError, "axis 2 is out of bounds", sum_axis_2, 1),
    (np.exceptions.AxisError, "axis -3 is out of bounds", mean_axis_minus_3, 1),
    (np.exceptions.AxisError, "axis 9 is out of bounds", max_axis_9, 1),
    (TypeError, r"grad requires a scalar output, got shape \[3, 4\]", grads_inside, 1),
    (ValueError, r"shape \[5\]", bad_cotangent, 2),
    (TypeError, "where= argument", bad_keyword, 1),
]


@pytest.mark.parametrize("backend", ["eager", "interp"])
@pytest.mark.parametrize("exc, message, f, offset", LOCATED,
                         ids=lambda c: getattr(c, "__name__", None))
def test_errors_in_traced_code_name_the_line(backend, exc, message, f, offset):
    loss = lambda x: np.sum(f(x))      # noqa: E731 - the traced function, under grad
    with pytest.raises(exc, match=message) as info:
        run = fg.grad(loss) if backend == "eager" else fg.jit(fg.grad(loss), backend=backend)
        run(X)
    assert where(f, offset) in str(info.value)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_grad_output_errors_name_the_line(backend):
    def call(transform, f, **kw):
        g = transform(f, **kw)
        return g if backend == "eager" else fg.jit(g, backend=backend)

    for transform, f, kw, message in [
            (fg.grad, vector_output, {}, r"grad requires a scalar output, got shape \[3, 4\]"),
            (fg.value_and_grad, vector_output, {}, "value_and_grad requires a scalar output"),
            (fg.grad, integer_output, {}, "grad requires a floating-point output, got int64"),
            (fg.grad, no_pair, {"has_aux": True}, r"requires the function to return a pair"),
            (fg.value_and_grad, no_pair, {"has_aux": True}, "return a pair")]:
        with pytest.raises(TypeError, match=message) as info:
            call(transform, f, **kw)(X)
        line = info.traceback[0].lineno + 1     # the line above, of the call (0-based)
        assert f"test_errors.py:{line}" in str(info.value), (f.__name__, str(info.value))


def test_the_users_own_errors_are_left_alone():
    def mine(x):
        raise KeyError("mine")

    for run in (fg.grad(mine), jit(mine)):
        with pytest.raises(KeyError) as info:
            run(X)
        assert str(info.value) == "'mine'"
