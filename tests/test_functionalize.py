"""In-place updates and views of traced arrays follow NumPy (issue 23, points 1 and 4): every
write makes a new value that every name bound to the array sees; a view (basic index, reshape,
transpose, ravel, diagonal, np.flip, ...) read after a write into its base shows the write, and
a write into a view reaches its base; an argument updated in place is written back into the
caller's array. Values are compared with NumPy running the same function, gradients with
central differences, on interp (the reference) and on numba's first call for a few.
"""

import numpy as np
import pytest

import fusegrad as fg
from domains import central_difference

X = np.array([0.3, -0.7, 1.1, 0.4, -0.2, 0.9])


def assert_numpys(f, x=X, backends=("interp",)):
    expected = f(x.copy())
    expected_grad = central_difference(lambda v: f(v.copy()), x)
    for backend in backends:
        np.testing.assert_allclose(fg.jit(f, backend=backend)(x.copy()), expected, rtol=1e-12,
                                   err_msg=backend)
        np.testing.assert_allclose(fg.jit(fg.grad(f), backend=backend)(x.copy()), expected_grad,
                                   rtol=1e-6, atol=1e-8, err_msg=backend)


# -- the wrong answer issue 23 found, on every backend ----------------------------------------

def issue_example(x):
    y = x * 1.0
    v = y[1:]
    y[1] = 5.0
    return np.sum(v * x[1:])


def test_a_view_read_after_an_item_assignment_into_its_base():
    x = np.array([0.3, -0.7, 1.1])
    assert issue_example(x.copy()) == pytest.approx(5.0 * -0.7 + 1.1 * 1.1)
    for backend in ("eager", "interp", "numba"):
        assert fg.jit(issue_example, backend=backend)(x) == pytest.approx(issue_example(x.copy()))
    assert_numpys(issue_example, x, ("interp", "numba"))


# -- every way a view is made, every write ----------------------------------------------------

VIEWS = {
    "slice": lambda y: y[1:5],
    "step": lambda y: y[::-2],
    "row": lambda y: y.reshape(2, 3)[1],
    "reshape": lambda y: y.reshape(3, 2),
    "np.reshape": lambda y: np.reshape(y, (2, 3)),
    "transpose": lambda y: y.reshape(2, 3).T,
    "np.transpose": lambda y: np.transpose(y.reshape(2, 3)),
    "ravel": lambda y: y.reshape(2, 3).ravel(),
    "diagonal": lambda y: np.diagonal(y.reshape(2, 3)),
    "flip": lambda y: np.flip(y),
    "swapaxes": lambda y: np.swapaxes(y.reshape(3, 2), 0, 1),
    "expand_dims": lambda y: np.expand_dims(y, 0),
    "ellipsis": lambda y: y[...],
}

WRITES = {
    "item": "y[2] = x[0] * 3.0",
    "slice": "y[:3] = x[3:] ** 2",
    "add": "y += x[::-1]",
    "sub": "y -= 2.0 * x",
    "mul": "y *= x",
    "div": "y /= 2.0 + x ** 2",
    "pow": "y **= 2.0",
    "out": "np.multiply(y, x, out=y)",
}


def _program(make_view, write):
    namespace = {"np": np}
    exec(f"def update(x, y):\n    {write}\n", namespace)
    update = namespace["update"]

    def f(x):
        y = x * 1.0
        v = make_view(y)
        update(x, y)
        w = np.cos(np.arange(v.size, dtype=np.float64)).reshape(v.shape)
        return np.sum(np.tanh(v) * w) + np.sum(y * y)
    return f


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("write", WRITES)
def test_a_view_sees_a_later_write_into_its_base(view, write):
    assert_numpys(_program(VIEWS[view], WRITES[write]))


@pytest.mark.parametrize("view", [v for v in VIEWS if v != "diagonal"])
@pytest.mark.parametrize("write", ["v[0] = x[1] * x[2]", "v += x[0]", "v *= 3.0",
                                   "np.add(v, 1.0, out=v)"])
def test_a_write_into_a_view_reaches_its_base_and_other_views(view, write):
    make = VIEWS[view]
    namespace = {"np": np}
    exec(f"def update(x, v):\n    {write}\n", namespace)
    update = namespace["update"]

    def f(x):
        y = x * 1.0
        other = y[::2]
        v = make(y)
        update(x, v.reshape(-1) if "[0]" in write and v.ndim > 1 else v)
        return np.sum(y ** 3) + np.sum(other * x[:3]) + np.sum(v * v)
    assert_numpys(f)


def test_a_write_into_a_diagonal_is_numpys_read_only_error():
    def f(x):
        y = x.reshape(2, 3) * 1.0
        d = np.diagonal(y)
        d[0] = 1.0
        return np.sum(y)
    with pytest.raises(ValueError, match="read-only"):
        f(X.copy())
    with pytest.raises(ValueError, match="assignment destination is read-only.*"
                                         "test_functionalize.py"):
        fg.jit(f, backend="interp")(X)


def test_views_of_views_and_numba_first_call():
    def f(x):
        y = x * 1.0
        m = y.reshape(2, 3)
        col = m.T[1]                 # a view of a view
        m[:, 1] *= 10.0              # an in-place op on a slice, written into y
        y[0] -= col[1]
        return np.sum(col * x[:2]) + np.sum(y ** 2)
    assert_numpys(f, X, ("interp", "numba"))


# -- in-place operators: names, scalars, out= --------------------------------------------------

def test_every_name_bound_to_the_array_sees_the_update():
    def f(x):
        y = x * 2.0
        alias = y
        rows = [y, y]
        y += 1.0
        return np.sum(alias * rows[1] * x)
    assert_numpys(f, X, ("interp", "numba"))


def test_a_0d_value_rebinds_but_a_0d_view_writes_through():
    def f(x):
        s = np.sum(x)
        kept = s
        s *= 2.0                             # a new scalar: kept is the old one
        y = x * 1.0
        e = y[2:3].reshape(())               # a 0-d view of y
        e += 100.0
        return s + 3.0 * kept + np.sum(y * x)
    assert_numpys(f)


def test_ufunc_out_on_a_traced_array_and_from_constants():
    def f(x):
        y = x * 1.0
        np.add(y, x ** 2, out=y)
        np.exp(x, out=y)
        z = x * 0.0
        np.multiply(np.arange(6.0), 2.0, out=z)     # constants written into a traced array
        return np.sum(y * z * x)
    assert_numpys(f)


def test_inplace_errors_are_numpys():
    def widen(x):
        y = x[:2] * 1.0
        y += x.reshape(3, 2)
        return np.sum(y)

    def cast(x):
        n = np.arange(3)
        n = n + (x[:3] > 0)             # a traced integer array
        n += 0.5 * x[:3]
        return np.sum(n)

    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        fg.jit(widen, backend="interp")(X)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output .*'same_kind'"):
        fg.jit(cast, backend="interp")(X)


# -- // and np.floor_divide ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_floor_divide_is_numpys_bits(backend):
    a = np.array([1.0, -1.0, 7.5, -7.5, 0.0, -0.0, 1.0, 5.0, np.inf, 3.0, 0.3, -3.0])
    b = np.array([0.1, 0.1, 2.0, 2.0, 3.0, -3.0, 0.0, -0.0, 2.0, np.inf, -0.1, 0.7])
    with np.errstate(divide="ignore", invalid="ignore"):     # NumPy's warnings for x // 0
        out = np.asarray(fg.jit(lambda p, q: p // q, backend=backend)(a, b))
        expected = np.floor_divide(a, b)
    np.testing.assert_array_equal(out, expected)           # 1 // 0.1 is 9.0, as in NumPy
    np.testing.assert_array_equal(np.signbit(out), np.signbit(expected))
    i, j = np.array([7, -7, 7, -7]), np.array([2, 2, -2, -2])
    np.testing.assert_array_equal(fg.jit(np.floor_divide, backend=backend)(i, j), i // j)


def test_floor_divide_has_no_gradient_and_floordiv_assign_works():
    def f(x):
        y = x * 2.9                 # away from the steps of // at X
        y //= 0.7
        return np.sum(y * x)
    assert_numpys(f)
    np.testing.assert_allclose(fg.grad(f)(X), central_difference(f, X), atol=1e-8)


# -- writing updated arguments back into the caller's arrays ------------------------------------

def step(params, grad, lr):
    params["w"] -= lr * grad                # SGD written as NumPy code
    params["b"][0] = np.sum(grad)
    return np.sum(params["w"] ** 2)


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_an_argument_updated_in_place_is_written_back(backend):
    reference = {"w": np.array([1.0, 2.0, 3.0]), "b": np.zeros(2)}
    expected = step(reference, np.array([0.5, -1.0, 2.0]), 0.1)
    params = {"w": np.array([1.0, 2.0, 3.0]), "b": np.zeros(2)}
    out = fg.jit(step, backend=backend)(params, np.array([0.5, -1.0, 2.0]), 0.1)
    assert out == pytest.approx(expected)
    np.testing.assert_array_equal(params["w"], reference["w"])
    np.testing.assert_array_equal(params["b"], reference["b"])
    again = fg.jit(step, backend=backend)
    for _ in range(2):                           # every call writes back, the cached one too
        again(params, np.array([0.5, -1.0, 2.0]), 0.1)
        step(reference, np.array([0.5, -1.0, 2.0]), 0.1)
    np.testing.assert_allclose(params["w"], reference["w"], rtol=1e-15)


def test_writing_back_into_a_read_only_or_shared_array_raises_before_running():
    def bump(x, y):
        x += 1.0
        return np.sum(x * y)

    frozen = np.array([1.0, 2.0])
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"bump updates argument leaf 0 in place \(last at "
                                         r".*test_functionalize.py:\d+\).*read-only"):
        fg.jit(bump, backend="interp")(frozen, np.ones(2))
    shared = np.array([1.0, 2.0])
    with pytest.raises(ValueError, match="shares memory with argument leaf 1"):
        fg.jit(bump, backend="interp")(shared, shared)
    np.testing.assert_array_equal(shared, [1.0, 2.0])

    def fill(x):
        x[...] = 2.0                # NumPy: a Python float supports no item assignment
        return x * 1.0
    with pytest.raises(TypeError, match="caller passed a float, not a NumPy array"):
        fg.jit(fill, backend="interp")(1.0)


def test_make_ir_shows_the_written_back_value_as_a_result():
    fn = fg.make_ir(bump_first)(np.ones(3))
    assert len(fn.results) == 2 and "return" in str(fn)


def bump_first(x):
    x[0] += 1.0
    return np.sum(x)


def test_a_0d_array_argument_rebound_by_plus_equals_raises_and_a_number_is_fine():
    def f(s, x):
        s += np.sum(x)                  # NumPy: a 0-d array is updated, a float rebound
        return s * 2.0
    jitted = fg.jit(f, backend="interp")
    assert jitted(1.0, X) == pytest.approx(2 * (1.0 + np.sum(X)))
    assert jitted(np.float64(1.0), X) == pytest.approx(2 * (1.0 + np.sum(X)))
    with pytest.raises(TypeError, match=r"rebinds argument leaf 0, a 0-d array, .* at "
                                        r".*test_functionalize.py:\d+"):
        jitted(np.array(1.0), X)
