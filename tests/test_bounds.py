"""Indices out of range raise NumPy's IndexError on every backend, on the first call, with the
user's line; negative indices count from the end, as in NumPy. Compiled code checks an index
array in memory once before the kernels that use it, and an index it computes where it uses it.
"""

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as fnn

BACKENDS = ("eager", "interp", "numba")
X = np.array([1.0, 2.0, 4.0])
M = np.arange(12.0).reshape(3, 4) / 7


def first_calls(f, *args, backends=BACKENDS):
    """f's result on each backend, each a fresh jit: nothing warmed up."""
    return {b: fg.jit(f, backend=b)(*args) for b in backends}


def raises_everywhere(f, *args, match, backends=BACKENDS):
    for b in backends:
        with pytest.raises(IndexError, match=match):
            fg.jit(f, backend=b)(*args)


def gather_sum(x, i):
    return np.sum(x[i])


def gather_rows(m, i):
    return np.sum(np.tanh(m[:, i]))


def along(m, i):
    return np.sum(np.take_along_axis(m, i, axis=1) ** 2)


def ce(logits, labels):
    return fnn.cross_entropy(logits, labels)


@pytest.mark.parametrize("idx", [[0, 7], [0, 3], [-4, 1], [10**9], [-(10**9)]])
def test_gather_out_of_range_raises_numpys_error(idx):
    bad = next(i for i in idx if not -3 <= i < 3)
    message = rf"index {bad} is out of bounds for axis 0 with size 3"
    raises_everywhere(gather_sum, X, np.array(idx), match=message)


@pytest.mark.parametrize("idx", [[0, 7], [-4], [10**9]])
def test_gradient_of_a_gather_out_of_range_raises_and_names_the_line(idx):
    # the index 10**9 used to write past the gradient's buffer and crash the interpreter
    for b in ("interp", "numba"):
        with pytest.raises(IndexError, match=r"out of bounds for axis 0 with size 3 "
                                             r"\(at test_bounds.py:\d+\)"):
            fg.jit(fg.grad(gather_sum), backend=b)(X, np.array(idx))
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 3"):
        fg.grad(gather_sum)(X, np.array(idx))


def test_negative_indices_count_from_the_end_with_their_gradient():
    idx = np.array([-1, 0, -3, 2, -1])
    expected_grad = np.zeros(3)
    np.add.at(expected_grad, idx, 1.0)
    for b, (value, grad) in first_calls(fg.value_and_grad(gather_sum), X, idx).items():
        assert value == pytest.approx(np.sum(X[idx])), b
        np.testing.assert_array_equal(grad, expected_grad, err_msg=b)


def test_column_gather_checks_the_axis_it_indexes():
    raises_everywhere(gather_rows, M, np.array([1, 4]),
                      match="index 4 is out of bounds for axis 1 with size 4")
    idx = np.array([3, -4, -1])
    expected = np.sum(np.tanh(M[:, idx]))
    for b, value in first_calls(gather_rows, M, idx).items():
        assert value == pytest.approx(expected, rel=1e-12), b


def test_take_along_axis_out_of_range():
    raises_everywhere(along, M, np.array([[0], [4], [1]]),
                      match="index 4 is out of bounds for axis 1 with size 4")
    idx = np.array([[0, -1], [3, -4], [1, 2]])
    expected_grad = np.zeros_like(M)
    np.put_along_axis(expected_grad, idx % 4, 2 * np.take_along_axis(M, idx, 1), 1)
    for b, grad in first_calls(fg.grad(along), M, idx).items():
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-12, err_msg=b)


def test_cross_entropy_with_a_label_out_of_range():
    logits = np.array([[0.5, 1.0, -1.0], [2.0, 0.0, 1.0]])
    raises_everywhere(ce, logits, np.array([1, 3]),
                      match="index 3 is out of bounds for axis 1 with size 3")
    raises_everywhere(fg.grad(ce), logits, np.array([-7, 0]), backends=("interp", "numba"),
                      match="index -7 is out of bounds for axis 1 with size 3")


def test_an_index_computed_in_the_kernel_is_checked_where_it_is_used():
    def shifted(x, i):
        return np.sum(x[i + 1] * 2.0)

    raises_everywhere(shifted, X, np.array([0, 2]), match="index 3 is out of bounds")
    for b, value in first_calls(shifted, X, np.array([0, 1, -3])).items():
        assert value == pytest.approx(2 * (X[1] + X[2] + X[-2])), b


def test_index_of_the_maximum_used_as_an_index():
    def pick(x, y):
        return np.sum(x[np.argmax(y, axis=1)])

    y = np.array([[0.0, 5.0, 1.0], [9.0, 0.0, 1.0]])
    for b, value in first_calls(pick, X, y).items():
        assert value == pytest.approx(X[1] + X[0]), b
    raises_everywhere(pick, X[:1], y, backends=("interp", "numba"),
                      match="index 1 is out of bounds for axis 0 with size 1")


def test_empty_index_arrays_gather_nothing():
    for b, value in first_calls(gather_sum, X, np.zeros(0, np.int64)).items():
        assert value == 0.0, b
