"""Functions of scalars and small arrays compiled through the kernel IR (what straight-line
LLVM, codegen/straight.py, compiled before it: cold groups, small loops unrolled, math a call
of one scalar Function each) against the interpreter and NumPy: every elementwise primitive,
gradients included, nan handling of maximum and minimum, summation order, bool and empty
arrays, float32, int64 and indexing (which straight.py left to Numba)."""

import inspect

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen.kernel_ir import compile_kernel_ir
from fusegrad.testing import check_grads


def took_kernel_ir(source: str) -> bool:
    return "as kernel IR" in source.splitlines()[0]


def zoo(x, y):
    a = np.sin(x) * np.cos(y) + np.exp(-x * x) / (1.0 + y * y) - np.log(1.0 + x * x)
    b = np.tanh(a) + np.log1p(x * x) + np.expm1(-y * y) + np.sqrt(1.0 + x * x) + np.abs(y - x)
    c = np.maximum(a, b) - np.minimum(x, y) + np.where((x > y) | (a <= b), a, b * 2.0)
    d = np.where(~(x == y) & (x != 0.5) & (y >= x) | (x < 0.1), np.abs(b) ** 1.5, -b)
    return c * d + x ** 3


def _jit_pair(fun):
    return (fg.jit(fg.value_and_grad(fun, argnums=(0, 1)), backend="numba"),
            fg.jit(fg.value_and_grad(fun, argnums=(0, 1)), backend="interp"))


@pytest.mark.parametrize("x, y", [(0.7, 1.3), (1.3, 0.7), (0.05, 2.0), (-0.4, -0.4)])
def test_scalar_zoo_and_its_gradient_match_the_interpreter(x, y):
    fast, ref = _jit_pair(zoo)
    (value, grads), (want, want_grads) = fast(x, y), ref(x, y)
    assert took_kernel_ir(fast.lower(x, y).source)
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.float64
    np.testing.assert_allclose(value, want, rtol=1e-13)
    np.testing.assert_allclose(grads, want_grads, rtol=1e-13, atol=1e-15)


def test_maximum_and_minimum_propagate_nan():
    def f(x, y):
        return np.maximum(x, y) * 2.0 + np.minimum(y, x)
    run = fg.jit(f, backend="numba")
    assert np.isnan(run(np.nan, 1.0)) and np.isnan(run(1.0, np.nan))
    assert run(1.0, 2.0) == 5.0 and run(2.0, 1.0) == 5.0


def test_a_long_chain_takes_the_path_by_default():
    def chain(x, y):
        for _ in range(150):
            x = x * 1.0000001 + 1e-7 * np.sin(x)
        return x * y
    fast, ref = _jit_pair(chain)
    assert took_kernel_ir(fast.lower(0.3, 0.3).source)
    (value, grads), (want, want_grads) = fast(0.3, 0.2), ref(0.3, 0.2)
    for got, expected in zip((value, *grads), (want, *want_grads)):     # C's sin, NumPy's
        assert got.tobytes() == expected.tobytes()


def test_other_dtypes_indexing_and_big_arrays_take_the_path_too():
    f = fg.jit(lambda x: np.sin(x) * 2.0, backend="numba")
    big = np.linspace(0.0, 1.0, 65)
    for x in (np.float32(1.0), np.ones(3, np.float32), big):
        assert took_kernel_ir(f.lower(x).source)
        np.testing.assert_allclose(f(x), np.sin(x) * 2, rtol=1e-6)
    counts = fg.jit(lambda x: np.sum(x > 0.5) * x, backend="numba")          # i64 inside
    taken = fg.jit(lambda x, i: np.take(x, i) * 2.0, backend="numba")       # indexing
    x, i = np.array([0.2, 0.7, 0.9]), np.array([2, 0])
    assert took_kernel_ir(counts.lower(x).source)
    assert took_kernel_ir(taken.lower(x, i).source)
    np.testing.assert_array_equal(counts(x), 2 * x)
    np.testing.assert_array_equal(taken(x, i), [1.8, 0.4])
    with pytest.raises(IndexError, match="index 3 is out of bounds"):
        taken(x, np.array([3, 0]))


def _every_llvm_form():
    """A Function applying to scalars x, y each elementwise registry primitive of one or two
    operands and no params, through its scalar rule (comparisons and logic pick x or y, so
    every result is an f64)."""
    from fusegrad.ir import Builder, TensorType
    from fusegrad.ir.primitives import PRIMITIVES
    b = Builder("forms")
    f64 = TensorType("f64", ())
    x, y = b.param(f64, "x"), b.param(f64, "y")
    lt, gt = b.add1("lt", [x, y]), b.add1("gt", [x, y])
    outs = []
    for p in PRIMITIVES.values():
        if p.scalar is None or p.category != "elementwise" or p.arity > 2 or \
                "params" in inspect.signature(p.shape_rule).parameters or \
                any(q.kind == q.KEYWORD_ONLY for q in
                    inspect.signature(p.shape_rule).parameters.values()):
            continue
        if p.name in ("and", "or", "not"):
            flag = b.add1(p.name, [lt, gt][:p.arity])
        elif p.shape_rule("probe", *[f64] * p.arity).dtype == "bool":
            flag = b.add1(p.name, [x, y][:p.arity])
        else:
            outs.append(b.add1(p.name, [x, y][:p.arity]))
            continue
        outs.append(b.add1("select", [flag, x, y]))
    return b.build(outs)


@pytest.mark.parametrize("x, y", [(0.7, 1.3), (1.3, 0.7), (-0.4, 0.25), (0.5, 0.5)])
def test_every_registry_form_matches_the_interpreter(x, y):
    from fusegrad.runtime.interpreter import eval_function
    fn = _every_llvm_form()
    run, text = compile_kernel_ir(fn)
    want = eval_function(fn, [np.float64(x), np.float64(y)])
    with np.errstate(all="ignore"):
        got = run([x, y])
    np.testing.assert_allclose(np.array(got, float), np.array(want, float), rtol=1e-14,
                               equal_nan=True)


# -- small arrays -------------------------------------------------------------------------------

def array_zoo(x, W, m):
    """Every shape op, a small matmul, broadcasting, a bool param, reductions and cumsums over
    each axis."""
    h = np.tanh(W @ x[:, None] + 0.5)[:, 0]
    a = np.concatenate([h, np.sin(x[::2]), np.flip(x)])
    b = a.reshape(3, 3).T * np.arange(3.0)
    c = np.where(m, b, -b) + np.maximum(b, 0.1) + (b > 0.2).astype(float)
    d = np.max(c, axis=0) - np.min(c, axis=1) + np.prod(c[:2], axis=0) + np.sum(c, axis=1) \
        + np.cumsum(c, axis=0)[2] * np.cumsum(c, axis=1)[:, 1]
    return np.sum(d * np.array([1.0, -2.0, 3.0])) + np.sum(np.exp(-x * x)) / np.sum(W ** 2)


ZOO_ARGS = (np.array([0.3, -1.2, 0.7, 2.0]),
            np.array([[0.5, -0.3, 0.2, 0.1], [0.4, 0.9, -0.6, 0.3], [-0.2, 0.1, 0.8, -0.7]]),
            np.array([[True, False, True], [False, False, True], [True, True, False]]))


@pytest.mark.parametrize("poison", ["0", "1"])
def test_small_array_zoo_and_its_gradients_match_the_interpreter(monkeypatch,
                                                                 poison):
    monkeypatch.setenv("FUSEGRAD_POISON", poison)
    fast = fg.jit(fg.value_and_grad(array_zoo, argnums=(0, 1)), backend="numba")
    ref = fg.jit(fg.value_and_grad(array_zoo, argnums=(0, 1)), backend="interp")
    assert took_kernel_ir(fast.lower(*ZOO_ARGS).source)
    (value, grads), (want, want_grads) = fast(*ZOO_ARGS), ref(*ZOO_ARGS)
    np.testing.assert_allclose(value, array_zoo(*ZOO_ARGS), rtol=1e-14)
    np.testing.assert_allclose(value, want, rtol=1e-14)
    for got, expected in zip(grads, want_grads):
        assert got.shape == expected.shape and got.dtype == np.float64
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15)


def test_small_array_gradients_match_finite_differences():
    x, W, m = ZOO_ARGS
    check_grads(lambda x, W: array_zoo(x, W, m), (x, W), order=2, backend="numba")


def test_sums_follow_numpys_order_below_eight_terms():
    """Below eight terms NumPy's pairwise sum is the sequential loop the kernel IR writes (its
    lanes start at 16 terms): the same bits along either axis, and for products, max, min and
    running sums."""
    def f(x):
        return (np.sum(x, axis=0), np.sum(x, axis=1), np.prod(x, axis=1), np.max(x, axis=0),
                np.min(x, axis=1), np.sum(x[:, :4] * 3.0), np.cumsum(x, axis=1),
                np.cumsum(x, axis=0))
    x = np.random.default_rng(0).standard_normal((3, 7)) * 10.0 ** np.arange(7)
    got = fg.jit(f, backend="numba")(x)
    assert took_kernel_ir(fg.jit(f, backend="numba").lower(x).source)
    for a, b in zip(got, f(x)):
        assert a.tobytes() == b.tobytes()


def test_nan_inf_and_signed_zeros_match_numpy():
    """Signed zeros as the interpreter's, except maximum and minimum of opposite zeros: the
    Numba backend's templates (and the kernel IR's rules) return the first operand, NumPy 2's
    loops the second."""
    def f(x, y):
        return (np.maximum(x, y), np.minimum(y, x), np.max(x), np.min(y), np.sum(x * y),
                np.where(x > y, x, y), x / y, np.sqrt(x), (x == x).astype(float))
    x = np.array([np.nan, 1.0, -np.inf, -0.0, 2.0, 0.0])
    y = np.array([1.0, np.nan, 3.0, 0.0, np.inf, -0.0])
    with np.errstate(all="ignore"):
        want = f(x, y)
        got = fg.jit(f, backend="numba")(x, y)
        interp = fg.jit(f, backend="interp")(x, y)
    for i, (a, b, c) in enumerate(zip(got, want, interp)):
        np.testing.assert_array_equal(a, b)
        if i >= 2:
            np.testing.assert_array_equal(np.signbit(a), np.signbit(c))


def test_bool_params_and_results():
    def f(x, m):
        return (x > 0.5) & ~m, np.where(m | (x < 0.1), x, 2.0 * x), m
    x, m = np.array([[0.2, 0.7], [0.05, 0.9]]), np.array([[True, False], [False, False]])
    jitted = fg.jit(f, backend="numba")
    assert took_kernel_ir(jitted.lower(x, m).source)
    for got, want in zip(jitted(x, m), f(x, m)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_empty_arrays():
    def f(x, y):
        return np.sum(x) + np.sum(np.sin(y), axis=1), np.sum(y, axis=0) * 2.0
    x, y = np.zeros(0), np.zeros((3, 0))
    assert took_kernel_ir(fg.jit(f, backend="numba").lower(x, y).source)
    value = fg.jit(f, backend="numba")(x, y)
    np.testing.assert_array_equal(value[0], np.zeros(3))
    assert value[1].shape == (0,)
    grads = fg.jit(fg.grad(lambda x, y: np.sum(f(x, y)[0]), argnums=(0, 1)), backend="numba")
    gx, gy = grads(x, y)
    assert gx.shape == (0,) and gy.shape == (3, 0)


def test_a_long_small_array_chain_takes_the_path_by_default():
    """The issue's chain: a sum of four terms is sequential, sin is C's (NumPy's): exact."""
    def chain(y):
        for i in range(200):
            y = y * 1.0001 if i % 2 else np.sin(y)
        return np.sum(y)
    y = np.linspace(0.1, 0.4, 4)
    fast = fg.jit(fg.value_and_grad(chain), backend="numba")
    assert took_kernel_ir(fast.lower(y).source)
    (value, grad), (want, want_grad) = fast(y), fg.jit(fg.value_and_grad(chain),
                                                      backend="interp")(y)
    assert value.tobytes() == want.tobytes() and grad.tobytes() == want_grad.tobytes()


def test_created_values_match_the_interpreter():
    """iota, full (f64 and bool) and constants become literals; a bool param comes in as 0/1."""
    from fusegrad.ir import Builder, TensorType
    from fusegrad.runtime.interpreter import eval_function
    b = Builder("created")
    x, m = b.param(TensorType("f64", (2, 3)), "x"), b.param(TensorType("bool", (2, 3)), "m")
    i = b.add1("iota", [], {"shape": (2, 3), "dtype": "f64", "axis": 1})
    c = b.add1("constant", [], {"value": np.array([[1.5, -0.0, np.inf], [2.0, np.nan, 3.0]])})
    t = b.add1("full", [], {"shape": (2, 3), "dtype": "bool", "value": True})
    y = b.add1("select", [b.add1("and", [m, t]), b.add1("mul", [x, i]), c])
    fn = b.build([y, b.add1("not", [m]), b.add1("convert", [m], {"dtype": "f64"})])
    run, _ = compile_kernel_ir(fn)
    args = [np.arange(6.0).reshape(2, 3) - 2.5, np.array([[True, False, True]] * 2)]
    for got, want in zip(run(args), eval_function(fn, args)):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == np.asarray(want).tobytes()
