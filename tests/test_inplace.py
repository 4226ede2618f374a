"""In-place semantics (issue 12, item 5): PyTorch's autograd rules on eager tensors, NumPy's
aliasing or one clear error under tracing, and the same answer (or error) from every backend."""

import re

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.runtime.grad_mode import no_grad
from fusegrad.runtime.tensor import tensor

LEAF_ERROR = re.escape("a leaf Variable that requires grad is being used in an in-place "
                       "operation.")
VERSION_ERROR = ("one of the variables needed for gradient computation has been modified by "
                 "an inplace operation: expected version 0, got 1")
BACKENDS = ("eager", "interp", "numba")


def leaf(values):
    return tensor(values, requires_grad=True)


# -- leaves that require grad ------------------------------------------------------------------

@pytest.mark.parametrize("update", [
    lambda t: t.__iadd__(1.0), lambda t: t.__isub__(1.0), lambda t: t.__imul__(2.0),
    lambda t: t.__itruediv__(2.0), lambda t: t.__ipow__(2.0), lambda t: t.add_(1.0),
    lambda t: t.sub_(1.0), lambda t: t.mul_(2.0), lambda t: t.div_(2.0), lambda t: t.zero_(),
    lambda t: np.add(t, 1.0, out=t)])
def test_an_inplace_op_on_a_leaf_that_requires_grad_raises(update):
    w = leaf([1.0, 2.0])
    buffer = w.data
    with pytest.raises(RuntimeError, match=LEAF_ERROR):
        update(w)
    assert w.data is buffer and w.version == 0 and w.is_leaf and w.requires_grad
    np.testing.assert_array_equal(w.data, [1.0, 2.0])


def test_augmented_assignment_on_a_leaf_names_the_line_and_the_fix():
    w = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError) as info:
        w += 1.0
    message = str(info.value)
    assert "in the in-place operation += at " in message and "test_inplace.py:" in message
    assert "with fg.no_grad():" in message


@pytest.mark.parametrize("reset", ["none", "zero_grad"])
def test_the_sgd_loop_updates_the_same_leaf(reset):
    x, target, lr = np.array([1.0, 2.0, 3.0]), np.array([2.0, 1.0, 0.0]), 0.05
    w = leaf([0.5, -0.5, 1.0])
    buffer, expected = w.data, np.array([0.5, -0.5, 1.0])
    for step in range(1, 4):
        loss = ((w * x - target) ** 2).sum()
        loss.backward()
        grad = 2 * (expected * x - target) * x           # by hand, on the NumPy mirror
        np.testing.assert_allclose(w.grad, grad, rtol=1e-14)
        before = w
        with fg.no_grad():
            w -= lr * w.grad
        expected = expected - lr * grad
        assert w is before and w.data is buffer
        assert w.version == step and w.is_leaf and w.requires_grad and w.grad_fn is None
        np.testing.assert_allclose(w.data, expected, rtol=1e-14)
        if reset == "none":
            w.grad = None
        else:
            w.zero_grad()


def test_a_step_between_forward_and_backward_is_caught():
    w = leaf([1.0, 2.0])
    loss = (w * w).sum()                        # MulBackward saves w
    with no_grad():
        w -= 0.1
    with pytest.raises(RuntimeError, match=re.escape(VERSION_ERROR)):
        loss.backward()


def test_every_augmented_operator_under_no_grad_matches_numpy():
    w, mirror = leaf([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 4.0])
    with no_grad():
        w += 1.0
        w -= tensor([0.5, 0.5, 0.5])
        w *= 3.0
        w /= 2.0
        w **= 2.0
        w %= 7.0
    mirror += 1.0
    mirror -= 0.5
    mirror *= 3.0
    mirror /= 2.0
    mirror **= 2.0
    mirror %= 7.0
    np.testing.assert_array_equal(w.data, mirror)
    assert w.version == 6 and w.is_leaf and w.requires_grad


def test_inplace_on_plain_tensors_follows_numpy():
    a = tensor(np.eye(2))
    a @= tensor([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(a.data, [[1, 2], [3, 4]])
    m = tensor([True, False, True])
    m &= tensor([True, True, False])
    np.testing.assert_array_equal(m.data, [True, False, False])
    counts = tensor([1, 2, 3])
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype"):
        counts += 1.5                    # NumPy's own error for the same write
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        counts += tensor(np.ones((2, 3), dtype=np.int64))
    np.testing.assert_array_equal(counts.data, [1, 2, 3])


def test_numpy_ufunc_out_is_the_same_inplace_write():
    t = tensor([1.0, 2.0])
    assert np.add(t, 1.0, out=t) is t and t.version == 1
    np.testing.assert_array_equal(t.data, [2.0, 3.0])
    w = leaf([1.0, 2.0])
    (w * w).sum().backward()
    with no_grad():
        np.subtract(w, 0.5 * w.grad, out=(w,))
    np.testing.assert_array_equal(w.data, [0.0, 0.0])
    assert w.is_leaf and w.version == 1
    with pytest.raises(TypeError, match=r"numpy.add\(..., out=...\) at .*test_inplace.py:"):
        buffer = np.zeros(2)
        buffer += w                      # a tensor written into an array would lose its grad


# -- non-leaves: recorded as PyTorch does, or refused at backward ------------------------------

@pytest.mark.parametrize("update, grad", [
    (lambda y: y.__iadd__(1.0), [2.0, 2.0]), (lambda y: y.sub_(1.0), [2.0, 2.0]),
    (lambda y: y.__imul__(3.0), [6.0, 6.0]), (lambda y: y.mul_(3.0), [6.0, 6.0]),
    (lambda y: y.__itruediv__(4.0), [0.5, 0.5]), (lambda y: y.__ipow__(2.0), [8.0, 16.0]),
    (lambda y: np.multiply(y, 3.0, out=y), [6.0, 6.0]), (lambda y: y.fill_(7.0), [0.0, 0.0]),
    (lambda y: y.__imod__(3.0), [2.0, 2.0])])
def test_an_inplace_op_on_an_unsaved_non_leaf_is_recorded(update, grad):
    x = leaf([1.0, 2.0])
    y = x * 2
    buffer = y.data
    assert update(y) is y
    assert y.data is buffer and y.version == 1 and not y.is_leaf
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, grad)


def test_names_bound_to_the_same_tensor_see_the_update_and_its_gradient():
    x = leaf([1.0, 2.0])
    y = x * 2
    z = y
    y += 1.0                                    # z is y: both are 2x + 1
    np.testing.assert_array_equal(z.data, [3.0, 5.0])
    (z * y).sum().backward()
    np.testing.assert_array_equal(x.grad, 4 * (2 * np.array([1.0, 2.0]) + 1))


def test_a_source_that_requires_grad_is_recorded():
    x = leaf([1.0, 2.0])
    y = x * 2
    y.mul_(x)                                   # y = 2x^2: the old y is kept for x's share
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [4.0, 8.0])
    plain, source = tensor([0.0, 0.0]), leaf([3.0, 4.0])
    plain += source
    (plain * plain).sum().backward()
    np.testing.assert_array_equal(source.grad, [6.0, 8.0])


def test_retain_grad_follows_the_tensor_through_an_inplace_op():
    x = leaf([1.0, 1.0])
    y = x * 2
    y.retain_grad()
    y += 1.0
    (y * 3).sum().backward()
    np.testing.assert_array_equal(y.grad, [3.0, 3.0])
    np.testing.assert_array_equal(x.grad, [6.0, 6.0])


@pytest.mark.parametrize("update", [lambda y: y.__iadd__(1.0), lambda y: y.add_(1.0),
                                    lambda y: y.__imul__(2.0)])
def test_an_inplace_op_on_a_saved_output_raises_at_backward(update):
    x = leaf([1.0, 2.0])
    y = x.exp()                                 # ExpBackward saves y
    update(y)
    with pytest.raises(RuntimeError) as info:
        y.sum().backward()
    assert str(info.value).startswith(VERSION_ERROR)
    assert " at " in str(info.value) and "test_inplace.py:" in str(info.value)


def test_an_inplace_op_on_a_saved_input_raises_at_backward():
    x = leaf([1.0, 2.0])
    y = x * 2
    loss = (y * y).sum()                        # MulBackward saves y
    y += 1.0
    with pytest.raises(RuntimeError, match=re.escape(VERSION_ERROR)):
        loss.backward()


def test_an_inplace_op_next_to_a_live_view_raises_while_recording():
    x = leaf([1.0, 2.0, 3.0, 4.0])
    y = x * 2
    view = y.reshape(2, 2)
    for target in (y, view):
        with pytest.raises(RuntimeError, match="shares its storage with a live view"):
            target += 1.0
    np.testing.assert_array_equal(y.data, [2.0, 4.0, 6.0, 8.0])
    with no_grad():
        view += 1.0                             # not recorded: NumPy's aliasing
    np.testing.assert_array_equal(y.data, [3.0, 5.0, 7.0, 9.0])
    del view, target
    y += 1.0                                    # no live view any more
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0, 2.0, 2.0, 2.0])


# -- traced code: NumPy's aliasing by functionalization (tests/test_functionalize.py has more) --

def aliased(x):
    y = x
    x += 1.0
    return np.sum(x * y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_augmented_assignment_on_a_traced_value_follows_numpy(backend):
    reference = np.array([1.0, 2.0, 3.0])
    expected = aliased(reference)               # NumPy: y is x, so sum((x + 1)^2)
    assert expected == 29.0
    x = np.array([1.0, 2.0, 3.0])
    assert fg.jit(aliased, backend=backend)(x) == expected
    np.testing.assert_array_equal(x, reference)   # the caller's array is updated, as by NumPy


@pytest.mark.parametrize("symbol, a, b", [
    ("+", [1.5, -2.0], [0.5, 3.0]), ("-", [1.5, -2.0], [0.5, 3.0]),
    ("*", [1.5, -2.0], [0.5, 3.0]), ("/", [1.5, -2.0], [0.5, 3.0]),
    ("//", [7.5, -7.5], [2.0, 0.1]), ("%", [7.5, -7.5], [2.0, 0.1]),
    ("**", [1.5, 2.0], [0.5, 3.0]), ("@", [[1.0, 2.0], [3.0, 4.0]], [[0.5, 1.0], [-1.0, 2.0]]),
    ("&", [True, False], [True, True]), ("|", [True, False], [False, False])])
def test_every_augmented_operator_on_a_tracer_is_numpys(symbol, a, b):
    namespace = {}
    exec(f"def f(x, y):\n    z = x\n    x {symbol}= y\n    return z\n", namespace)
    f = namespace["f"]
    expected_x = np.array(a)
    expected = f(expected_x, np.array(b))
    x = np.array(a)
    out = fg.jit(f, backend="interp")(x, np.array(b))
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(x, expected_x)


def test_grad_of_an_inplace_update_of_the_differentiated_argument():
    """Eagerly it is PyTorch's leaf error; traced, the function differentiated is the one
    NumPy computes, x -> sum((x + 1)^2), and the caller's array is left alone (the
    differentiated argument is a traced copy, as for item assignment)."""
    def f(x):
        x += 1.0
        return np.sum(x * x)

    with pytest.raises(RuntimeError, match=LEAF_ERROR):          # eager: x is the leaf
        fg.grad(f)(np.ones(3))
    with pytest.raises(RuntimeError, match=LEAF_ERROR):
        fg.jit(fg.grad(f), backend="eager")(np.ones(3))
    for backend in ("interp", "numba"):
        x = np.array([1.0, -2.0, 0.5])
        np.testing.assert_allclose(fg.jit(fg.grad(f), backend=backend)(x),
                                   2 * (np.array([1.0, -2.0, 0.5]) + 1), rtol=1e-14)
        np.testing.assert_array_equal(x, [1.0, -2.0, 0.5])


def test_eager_grad_through_an_inplace_update_of_a_non_leaf():
    def f(x):
        z = x * 1.0
        y = z
        z += 1.0                                # y is z: sum((x + 1)^2), as NumPy computes it
        return np.sum(z * y)

    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(fg.grad(f)(x), 2 * (x + 1), rtol=1e-14)
    assert f(x.copy()) == np.sum((x + 1) ** 2)


def test_inplace_on_python_floats_and_local_arrays_is_untouched():
    def f(x):
        scale = 1.0
        scale += 1.0
        c = np.ones(3)
        c += 1.0
        return np.sum(x * c) * scale

    x = np.array([1.0, 2.0, 3.0])
    for backend in BACKENDS:
        assert fg.jit(f, backend=backend)(x) == 24.0, backend
    for backend in ("interp", "numba"):
        np.testing.assert_array_equal(fg.jit(fg.grad(f), backend=backend)(x), [4.0, 4.0, 4.0])
