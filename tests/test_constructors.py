"""Arrays built from tensors and tracers, item assignment and iteration record; what NumPy cannot
let fusegrad record (np.array of tensors, item assignment into an ndarray, SciPy) is a clear
error naming the call and the user's line, on the eager engine and under jit, never a silent
zero gradient.

Gradients are checked against central differences of the same function run on plain arrays,
on the first call of a fresh fg.grad / fg.jit for every backend.
"""

import numpy as np
import pytest
import scipy.special
import scipy.stats

import fusegrad as fg
from domains import central_difference
import fusegrad.numpy as fnp
from fusegrad.conversion import ConversionError
from fusegrad.tracer.tracer import ConcretizationError

BACKENDS = ("eager", "interp", "numba")
X = np.array([0.3, -0.7, 1.1])
M = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]])


def grad_on(backend, f):
    return fg.grad(f) if backend == "eager" else fg.jit(fg.grad(f), backend=backend)


def assert_grads(f, x=X):
    """f's value (jit) and gradient match NumPy and central differences on every backend."""
    expected = central_difference(f, x)
    for b in BACKENDS:
        np.testing.assert_allclose(grad_on(b, f)(x), expected, rtol=1e-6, atol=1e-8,
                                   err_msg=b)
        np.testing.assert_allclose(fg.jit(f, backend=b)(x), f(x), rtol=1e-12, err_msg=b)


def line_of(f, offset=1):
    return f"test_constructors.py:{f.__code__.co_firstlineno + offset}"


def raises_everywhere(f, match, x=X, error=ConversionError):
    """The same clear error from eager fg.grad and from every jit backend; returns the text."""
    messages = []
    for b in BACKENDS:
        with pytest.raises(error, match=match) as info:
            grad_on(b, f)(x)
        messages.append(str(info.value))
    return messages


# -- fnp.array / fnp.asarray: nested lists of tensors and tracers are a stack ---------------------

def nested(x):
    a = fnp.array([[x[0], 2.0 * x[1]], [x[1] ** 2, 1.5]])
    return np.sum(np.tanh(a) * np.array([[1.0, 2.0], [3.0, 4.0]]))


def test_fnp_array_of_nested_lists_of_tensors_is_a_stack():
    assert_grads(nested)


def euler_states(x):
    """A scientist's loop: collect the states, then turn the list into an array."""
    states = [x]
    for _ in range(3):
        states.append(states[-1] + 0.1 * np.sin(states[-1]) * x)
    traj = fnp.array(states)                    # np.stack(states) records the same
    return np.sum(traj[1:] ** 2) + np.sum(np.stack(states)[-1])


def test_a_list_of_states_turned_into_an_array_records():
    assert_grads(euler_states)


def test_asarray_with_like_dispatches_and_records():
    def f(x):
        return np.sum(np.asarray([x[0] * x[1], x[2]], like=x) ** 2)
    assert_grads(f)


def test_fnp_array_on_plain_data_is_numpy_and_asarray_keeps_a_tensor():
    assert fnp.array([[1, 2], [3, 4]]).dtype == np.int64
    t = fg.tensor([1.0, 2.0], requires_grad=True)
    assert fnp.asarray(t) is t and fnp.array(t) is not t
    np.testing.assert_array_equal(np.asarray(fnp.array([1.0, t[0]]).data), [1.0, 1.0])
    with pytest.raises(ValueError, match="different shapes"):
        fnp.array([t, t[0]])


# -- item assignment into a tensor or tracer is a functional update ----------------------------

def trajectory(x):
    """traj[t] = state into an array made from x, as NumPy code writes it."""
    traj = np.zeros_like(x, shape=(4, 3))
    traj[0] = x
    for t in range(1, 4):
        traj[t] = traj[t - 1] * 0.9 + np.tanh(x) * t
    return np.sum(traj ** 2)


def test_traj_item_assignment_in_a_loop():
    assert_grads(trajectory)


def scatter(x):
    y = x * 1.0
    y[[0, 0, 2]] = np.array([1.0, 2.0, 3.0]) * x[1]   # repeated index: the last write wins
    y[::-2] = y[::-2] + x[:1]                             # step, broadcast value
    y[np.array([True, False, False])] = x[2] ** 3         # a concrete boolean mask
    y[-2] = 7.0                                           # a constant
    return np.sum(y * np.array([1.0, 2.0, 3.0]) * x)


def test_item_assignment_keys_follow_numpy():
    assert_grads(scatter)


def test_functional_update_of_an_ndarray_then_item_assignment():
    def f(x):
        h = fnp.index_update(np.zeros((2, 3)), (0, slice(None)), x)
        h[1, 1:] = x[1:] * x[0]
        return np.sum(np.exp(h))
    assert_grads(f)


def test_a_copy_is_assigned_into_and_the_original_is_untouched():
    def f(x):
        y = np.copy(x)
        y[0] = 10.0 * x[1]
        z = x.copy()
        z[1:] = 0.0
        return np.sum(x * 2.0) + np.sum(y ** 2) + np.sum(z)
    assert_grads(f)


def test_a_view_read_after_a_recorded_assignment():
    """NumPy's view sees the write: traced, the view is computed from its base again
    (tracer/views.py). The eager engine's recorded views do not follow their base, so reading
    one after the write raises, naming both lines, instead of a silently wrong gradient; a
    view taken after the write, or one never read again, is fine."""
    def f(x):
        y = x * 1.0
        head = y[:2]
        y[0] = 100.0
        return np.sum(head) + np.sum(y)
    with pytest.raises(RuntimeError, match=f"read at .*{line_of(f, 4)} after item assignment"
                                           f".*{line_of(f, 3)}.*fg.jit"):
        grad_on("eager", f)(X)
    for b in ("interp", "numba"):
        np.testing.assert_array_equal(grad_on(b, f)(X), [0.0, 2.0, 1.0])

    def g(x):
        y = x * 1.0
        unused = y[:2]          # noqa: F841 - a view that is not read after the write
        y[0] = 100.0
        head = y[:2]
        return np.sum(head * head) + np.sum(y)
    want = np.array([0.0, 2 * X[1] + 1.0, 1.0])
    for b in ("eager", "interp", "numba"):
        np.testing.assert_allclose(grad_on(b, g)(X), want, rtol=1e-14)


def test_assigning_into_a_differentiated_leaf_says_to_copy():
    def f(x):
        x[0] = 1.0
        return np.sum(x)
    with pytest.raises(RuntimeError, match=f"{line_of(f)} writes into a leaf tensor .* x.copy"):
        fg.grad(f)(X)


def test_item_assignment_with_a_traced_index_is_refused():
    def f(x):
        y = x * 1.0
        y[np.argmax(x)] = 0.0
        return np.sum(y)
    with pytest.raises(IndexError, match=f"traced index at .*{line_of(f, 2)}.*np.where"):
        fg.jit(fg.grad(f), backend="interp")(X)


def test_eager_tensors_without_grad_are_written_in_place():
    t = fg.tensor([1.0, 2.0, 3.0])
    view = t[1:]
    t[1] = 5.0
    np.testing.assert_array_equal(view.data, [5.0, 3.0])
    assert t.version == 1


# -- iteration and tuple unpacking are indexing ------------------------------------------------

def unpack(x):
    a, b, c = x
    rows = [np.sum(row * w) for row, w in zip(x.reshape(3, 1), (a, b, c))]
    return a * b + c ** 2 + sum(rows)


def test_tuple_unpacking_and_iteration():
    assert_grads(unpack)


def test_iterating_over_matrix_rows():
    def f(m):
        total = 0.0
        for i, row in enumerate(m):
            total = total + (i + 1) * np.sum(np.tanh(row))
        return total
    assert_grads(f, M)


def test_iterating_over_a_0d_value_is_numpys_type_error():
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        fg.jit(lambda x: list(np.sum(x)), backend="interp")(X)
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        list(fg.tensor(1.0))


# -- what NumPy cannot record raises, naming the call and the line -----------------------------

def via_asarray(x):
    return np.sum(np.asarray(x) * x)


def via_array_of_list(x):
    return np.sum(np.array([x[0], 2 * x[1]]))


def via_ascontiguousarray(x):
    return np.sum(np.ascontiguousarray(x))


def via_r_(x):
    return np.sum(np.r_[x, x])


def via_sum_of_list(x):
    return np.sum([x[0], x[1]])


def via_mean_of_list(x):
    return np.mean([x[0], x[2]])


def via_norm_of_list(x):
    return np.linalg.norm([x[0], x[1]])


def via_float64(x):
    return np.float64(x[0]) * x[1]


@pytest.mark.parametrize("f", [via_asarray, via_array_of_list, via_ascontiguousarray])
def test_numpy_constructors_called_by_the_user_record(f):
    """np.array/np.asarray/np.ascontiguousarray of tensors, tracers and lists of them record
    while fusegrad traces or differentiates (constructors.numpy_constructors)."""
    expected = central_difference(f, X)
    for b in BACKENDS:
        np.testing.assert_allclose(grad_on(b, f)(X), expected, rtol=1e-6, atol=1e-8,
                                   err_msg=b)


def test_numpy_constructors_are_numpys_again_after_a_transform():
    before = (np.array, np.asarray, np.asanyarray, np.ascontiguousarray)
    fg.grad(via_array_of_list)(X)
    fg.jit(fg.grad(via_asarray), backend="interp")(X)
    assert (np.array, np.asarray, np.asanyarray, np.ascontiguousarray) == before


@pytest.mark.parametrize("f, call", [
    (via_r_, "np.r_[x, x]"),
    (via_sum_of_list, "np.sum([x[0], x[1]])"), (via_mean_of_list, "np.mean([x[0], x[2]])"),
    (via_norm_of_list, "np.linalg.norm([x[0], x[1]])"), (via_float64, "np.float64(x[0])"),
])
def test_numpy_constructors_of_tensors_raise_with_the_call_and_line(f, call):
    eager, *traced = raises_everywhere(f, match=f"{line_of(f)}: `")
    for msg in (eager, *traced):
        assert f"`{call}`" in msg and "np.stack" in msg and "fusegrad.numpy.array" in msg
    assert "would drop its gradient" in eager and "not known while tracing" in traced[0]
    assert "control flow" not in traced[0] and 'backend="eager"' not in traced[0]


def test_the_conversion_error_is_a_concretization_error_and_a_type_error():
    assert issubclass(ConversionError, ConcretizationError)
    assert issubclass(ConversionError, TypeError)


# An ndarray made outside the traced function (inside, np.zeros gives a lazy array that
# becomes traced: tests/test_lazy_arrays.py) keeps only numbers.
OUTSIDE = np.zeros((2, 3))


def test_item_assignment_of_a_row_into_an_ndarray_says_how_to_write_it():
    def f(x):
        traj = OUTSIDE.copy()
        traj[1] = x
        return np.sum(traj)
    for msg in raises_everywhere(f, match=f"{line_of(f, 2)}: `traj\\[1\\] = x` stores"):
        assert "np.stack(values)" in msg and "fusegrad.numpy.index_update" in msg


def test_item_assignment_of_a_scalar_into_an_ndarray_names_the_cause():
    """NumPy replaces any error from __float__ in `h[0] = v` with its own ValueError; fusegrad's
    message is the direct cause, printed first in the traceback."""
    def f(x):
        h = OUTSIDE[0].copy()
        h[0] = 2 * x[0]
        return np.sum(h)
    for b in BACKENDS:
        with pytest.raises(ValueError) as info:
            grad_on(b, f)(X)
        cause = info.value.__cause__
        assert isinstance(cause, ConversionError), b
        assert f"{line_of(f, 2)}: `h[0] = 2 * x[0]` stores" in str(cause)
        assert "fusegrad.numpy.index_update" in str(cause)


def test_plain_tensors_and_tensors_outside_transforms_convert():
    t = fg.tensor([1.0, 2.0], requires_grad=True)
    assert np.asarray(t) is t.data and float(t[0]) == 1.0     # PyTorch style: t.numpy()
    assert np.array([fg.tensor(1.0), 2.0]).tolist() == [1.0, 2.0]

    def f(x):                   # a constant on purpose, inside a grad
        with fg.no_grad():
            c = float(x[1])
        return x[0] * c + x[2] * np.asarray(x.detach())[0]
    np.testing.assert_array_equal(fg.grad(f)(X), [X[1], 0.0, X[0]])


def test_float_and_item_inside_an_eager_grad_raise():
    def f(x):
        return x[0] * x[1].item()
    with pytest.raises(ConversionError, match=f"{line_of(f)}: `x\\[1\\].item\\(\\)` .*item"):
        fg.grad(f)(X)


# -- SciPy: the function the user called is named --------------------------------------------

def laplace_logpdf(x):
    return np.sum(scipy.stats.laplace.logpdf(x, loc=1.0, scale=2.0))


def frozen_mvn_cdf(x):      # its logpdf and pdf are covered (tests/test_scipy.py)
    return scipy.stats.multivariate_normal(mean=np.zeros(3), cov=np.eye(3)).cdf(x)


def entropy(x):
    return scipy.stats.entropy(x * x)


# SciPy functions fusegrad covers (logsumexp, norm.logpdf, ...: tests/test_scipy.py) record;
# these it does not cover raise, naming the function and the user's line.
@pytest.mark.parametrize("f, name, instead", [
    (laplace_logpdf, "scipy.stats.laplace.logpdf", "NumPy operations"),
    (frozen_mvn_cdf, "scipy.stats", "NumPy operations"),
    (entropy, "scipy.stats.entropy", "NumPy operations"),
])
def test_scipy_functions_are_named_with_the_users_line(f, name, instead):
    for msg in raises_everywhere(f, match=f"^{name}.* is not differentiable"):
        assert line_of(f) in msg and instead in msg and "scipy/" not in msg


def test_a_scipy_ufunc_is_named_as_scipys():
    def f(x):
        return np.sum(scipy.special.erfcx(x))
    raises_everywhere(f, match=f"no rule for scipy.special.erfcx \\(at .*{line_of(f)}\\)",
                      error=TypeError)


# -- views and item assignment under jit -------------------------------------------------------

def _view_read_after_assignment(x):
    head = x[:2]
    x[0] = 5.0
    return np.sum(head)


def _assignment_into_a_view(x):
    x = x * 1.0
    row = x[1:]
    row[0] = 3.0
    return np.sum(x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slice_read_after_an_assignment_into_its_array_sees_it(backend):
    reference = np.array([1.0, 2.0, 3.0])
    assert _view_read_after_assignment(reference) == 7.0       # NumPy's view shows the write
    x = np.array([1.0, 2.0, 3.0])
    assert fg.jit(_view_read_after_assignment, backend=backend)(x) == 7.0
    np.testing.assert_array_equal(x, reference)                # and the caller's array has it


@pytest.mark.parametrize("backend", BACKENDS)
def test_assignment_into_a_slice_writes_through(backend):
    assert _assignment_into_a_view(np.array([1.0, 2.0, 3.0])) == 7.0   # NumPy writes through
    assert fg.jit(_assignment_into_a_view, backend=backend)(np.array([1.0, 2.0, 3.0])) == 7.0


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_copies_and_slices_taken_after_an_assignment_follow_numpy(backend):
    def f(x):
        x = x.copy()
        head = x[:2].copy()
        x[0] = 5.0 * x[2]
        tail = x[:2]
        return np.sum(head) + np.sum(tail * tail)

    x = np.array([1.0, 2.0, 3.0])
    assert fg.jit(f, backend=backend)(x) == pytest.approx(f(x.copy()))
    np.testing.assert_allclose(fg.jit(fg.grad(f), backend=backend)(x), [1.0, 1.0 + 4.0, 150.0])
