"""Long all-scalar functions compiled straight to LLVM (codegen/straight.py) against the
interpreter: every primitive the path takes, gradients included, nan handling of maximum and
minimum, and the fallback to Numba for what it does not take."""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen import straight


@pytest.fixture
def always_straight(monkeypatch):
    monkeypatch.setattr(straight, "MIN_OPS", 0)


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
def test_scalar_zoo_and_its_gradient_match_the_interpreter(always_straight, x, y):
    fast, ref = _jit_pair(zoo)
    (value, grads), (want, want_grads) = fast(x, y), ref(x, y)
    assert fast.lower(x, y).source.startswith("declare")      # it took the LLVM path
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.float64
    np.testing.assert_allclose(value, want, rtol=1e-13)
    np.testing.assert_allclose(grads, want_grads, rtol=1e-13, atol=1e-15)


def test_maximum_and_minimum_propagate_nan(always_straight):
    def f(x, y):
        return np.maximum(x, y) * 2.0 + np.minimum(y, x)
    run = fg.jit(f, backend="numba")
    assert np.isnan(run(np.nan, 1.0)) and np.isnan(run(1.0, np.nan))
    assert run(1.0, 2.0) == 5.0 and run(2.0, 1.0) == 5.0


def test_a_long_chain_is_exact_and_takes_the_path_by_default():
    def chain(x, y):
        for _ in range(150):
            x = x * 1.0000001 + 1e-7 * np.sin(x)
        return x * y
    fast, ref = _jit_pair(chain)
    assert fast.lower(0.3, 0.3).source.startswith("declare")
    (value, grads), (want, want_grads) = fast(0.3, 0.2), ref(0.3, 0.2)
    for got, expected in zip((value, *grads), (want, *want_grads)):
        assert got.tobytes() == expected.tobytes()


def test_arrays_and_other_dtypes_stay_with_numba(always_straight):
    f = fg.jit(lambda x: np.sin(x) * 2.0, backend="numba")
    assert not f.lower(np.ones(3)).source.startswith("declare")
    assert not f.lower(np.float32(1.0)).source.startswith("declare")
    np.testing.assert_allclose(f(np.float32(1.0)), np.sin(np.float32(1.0)) * 2, rtol=1e-6)


def _every_llvm_form():
    """A Function applying each registry primitive with a straight-line form to scalars x, y
    (comparisons and logic pick x or y, so every result is an f64)."""
    from fusegrad.ir import Builder, TensorType
    from fusegrad.ir.primitives import PRIMITIVES
    b = Builder("forms")
    f64 = TensorType("f64", ())
    x, y = b.param(f64, "x"), b.param(f64, "y")
    lt, gt = b.add1("lt", [x, y]), b.add1("gt", [x, y])
    outs = []
    for p in PRIMITIVES.values():
        if p.llvm is None or p.category != "elementwise":
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
    run, text = straight.compile_straight(fn)
    want = eval_function(fn, [np.float64(x), np.float64(y)])
    with np.errstate(all="ignore"):
        got = run([x, y])
    np.testing.assert_allclose(np.array(got, float), np.array(want, float), rtol=1e-14,
                               equal_nan=True)
