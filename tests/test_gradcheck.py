"""gradcheck itself: it passes correct gradients, fails wrong ones with a readable report,
validates and restores its inputs, and accepts NumPy arrays and any callable."""

import numpy as np
import pytest

from fusegrad import lax
from fusegrad.runtime.grad_mode import is_grad_enabled
from fusegrad.runtime.gradcheck import GradcheckResult, gradcheck
from fusegrad.runtime.tensor import tensor


def leaf(values, dtype=None):
    return tensor(values, dtype=dtype, requires_grad=True)


def test_passes_a_correct_gradient():
    x, w = leaf([0.3, -1.2, 2.0]), leaf([[1.0, 2, 3], [0.5, -1, 0.25]])
    result = gradcheck(lambda x, w: np.tanh(w @ x) * 2.0, [x, w])
    assert isinstance(result, GradcheckResult)
    assert result.passed and bool(result) and result.report == ""


def test_detects_a_wrong_gradient():
    # slope 2 while recording, slope 3 under no_grad where the finite differences run
    result = gradcheck(lambda x: x * 2.0 if is_grad_enabled() else x * 3.0, [leaf([1.0, 2.0])])
    assert not result.passed
    lines = result.report.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("input 0 element [0]: analytic ")
    analytic, numeric = (float(s) for s in lines[0].split("analytic ")[1].split(" != numeric "))
    assert numeric == pytest.approx(1.5 * analytic, rel=1e-5)


def test_detects_a_monkeypatched_rule(monkeypatch):
    from fusegrad import formulas
    monkeypatch.setitem(formulas.vjp_rules, "sin", lambda g, out, x: (g * lax.sin(x),))
    result = gradcheck(np.sin, [leaf([[0.1, 0.7], [1.3, -0.4]])])
    assert not result.passed
    assert "input 0 element [1, 0]: analytic" in result.report


def test_report_index_of_a_multi_dimensional_input():
    result = gradcheck(lambda a, b: a * b if is_grad_enabled() else a * b * 1.1,
                       [leaf(np.ones((2, 2))), leaf(np.full((2, 2), 2.0))])
    assert "input 1 element [1, 1]: analytic" in result.report


def test_requires_float64_input():
    with pytest.raises(TypeError, match="gradcheck needs float64 inputs .* input 0 is float32"):
        gradcheck(np.tanh, [leaf([1.0], dtype=np.float32)])
    with pytest.raises(TypeError, match="input 1 is float32"):
        gradcheck(lambda a, b: a * b, [np.ones(2), np.ones(2, np.float32)])


def test_requires_input_with_grad_and_leaf():
    with pytest.raises(ValueError, match="gradcheck input 0 must be a leaf that requires grad"):
        gradcheck(np.tanh, [tensor([1.0])])
    with pytest.raises(ValueError, match="must be a leaf"):
        gradcheck(np.tanh, [leaf([1.0]) * 2])


def test_restores_input_values():
    x = leaf([0.1, 0.2, 0.3])
    before = x.data.copy()
    gradcheck(lambda x: x * x * x, [x])
    np.testing.assert_array_equal(x.data, before)
    array = np.array([0.1, 0.2])
    gradcheck(lambda a: a * a, [array])
    np.testing.assert_array_equal(array, [0.1, 0.2])


def test_accepts_numpy_arrays_constants_and_several_outputs():
    logits = np.array([[2.0, 1, 0.1], [0.3, 0.2, 0.9]])
    targets = np.array([0, 2])
    assert gradcheck(lambda z, t: lax.cross_entropy(z, t), [logits, targets]).passed
    assert gradcheck(lambda a, k: (np.exp(a) * k, a * a), [np.array([0.5, -0.5]), 3.0]).passed


def test_leaves_grad_of_tensor_inputs_untouched():
    x = leaf([1.0, 2.0])
    gradcheck(lambda x: (x * x).sum(), [x])
    assert x.grad is None


def test_refuses_a_function_without_tensor_outputs():
    with pytest.raises(TypeError, match="returned no fusegrad tensor"):
        gradcheck(lambda a: np.asarray(a) * 2, [np.ones(2)])


def test_tolerances_are_used():
    def off_by_5e_5(x):  # a relative error of 5e-5
        return x * 2.0 if is_grad_enabled() else x * 2.0001
    assert gradcheck(off_by_5e_5, [leaf([1.0])]).passed  # within rtol=1e-3
    assert not gradcheck(off_by_5e_5, [leaf([1.0])], atol=0.0, rtol=1e-6).passed
    assert gradcheck(off_by_5e_5, [leaf([1.0])], atol=1.0, rtol=0.0).passed


def test_checks_jitted_functions_and_compiled_gradients():
    import fusegrad as fg
    from fusegrad.transforms import grad

    def f(x, w):
        return np.sum(np.tanh(x * w) * x)

    x, w = np.array([0.3, -0.2, 1.1]), np.array([0.5, 1.5, -0.7])
    assert gradcheck(fg.jit(f, backend="interp"), [x, w]).passed
    # the numeric side runs the compiled gradient, the analytic side the eager engine
    assert gradcheck(fg.jit(grad(f, argnums=(0, 1)), backend="interp"), [x, w]).passed
