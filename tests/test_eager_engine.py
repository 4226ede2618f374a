"""Mechanics of the eager engine beyond the chapter's worked examples: deep graphs, threads,
memory, the functional grad, grad mode, debug hooks, views and the Tensor API."""

import gc
import io
import sys
import threading
import tracemalloc
import weakref

import numpy as np
import pytest

from fusegrad import lax
from fusegrad.runtime import hooks
from fusegrad.runtime.engine import backward, grad
from fusegrad.runtime.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from fusegrad.runtime.graph_dot import graph_dot
from fusegrad.runtime.tensor import Tensor, tensor


def leaf(values, dtype=None):
    return tensor(values, dtype=dtype, requires_grad=True)


# -- deep graphs -------------------------------------------------------------------------------

def test_backward_through_100000_chained_ops_at_the_default_recursion_limit():
    assert sys.getrecursionlimit() == 1000  # Python's default: nothing may recurse per node
    x = leaf(1.0)
    y = x
    for _ in range(100_000):
        y = y * 1.0000001
    y.backward()
    assert x.grad.item() == y.item()  # the same sequence of roundings as the forward pass
    assert x.grad.item() == pytest.approx(1.0100501665850403, rel=1e-14)


def test_dropping_a_100000_chain_without_backward_frees_it_iteratively():
    x = leaf([1.0])
    y = x
    for _ in range(100_000):
        y = y + 1.0
    first = weakref.ref(y.grad_fn)
    deepest = y.grad_fn
    for _ in range(99_999):
        deepest = deepest.next_functions[0][0]
    last = weakref.ref(deepest)
    del deepest, y
    assert first() is None and last() is None  # freed by reference counting, no cycles


def test_graph_of_a_released_backward_still_frees():
    x = leaf([1.0, 2])
    y = np.tanh(x * 2).sum()
    node = weakref.ref(y.grad_fn)
    y.backward()
    del y
    assert node() is None


# -- threads and memory ------------------------------------------------------------------------

def test_ten_threads_each_with_its_own_graph_share_one_leaf():
    shared = leaf([1.0, 2.0])
    results, errors = [None] * 10, []

    def work(k):
        try:
            own = leaf([float(k)])
            for _ in range(50):
                loss = (shared * own).sum() * 1.0
                loss.backward()
            results[k] = own.grad.item()
        except Exception as e:  # noqa: BLE001 - any failure in a thread is reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [50 * 3.0] * 10
    np.testing.assert_array_equal(shared.grad, [50 * sum(range(10))] * 2)


def test_grad_mode_is_thread_local():
    seen = []
    with no_grad():
        t = threading.Thread(target=lambda: seen.append(is_grad_enabled()))
        t.start()
        t.join()
        assert not is_grad_enabled()
    assert seen == [True]


def test_memory_stays_flat_over_1000_backward_calls():
    w = leaf(np.ones(16))

    def step():
        loss = (np.tanh(w * 2.0 + 1.0) * w).sum()
        loss.backward()
        w.zero_grad()

    for _ in range(50):
        step()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(1000):
        step()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert after - before < 1_000_000


def test_a_long_chain_backpropagates_exactly():
    # The per-op time of this chain is a benchmark figure (benchmarks/run.py, "eager"), not a
    # test: a timed assertion fails under load.
    x = leaf(1.0)
    y = x
    for _ in range(1000):
        y = y * 1.0000001
    y.backward()
    expected = np.prod(np.full(1000, 1.0000001))
    assert x.grad.item() == pytest.approx(expected, rel=1e-14)


# -- the functional grad -----------------------------------------------------------------------

def test_grad_returns_gradients_without_touching_leaf_grad():
    x, w = leaf([1.0, 2]), leaf([3.0, 4])
    y = (x * w).sum()
    gx, gw = grad(y, [x, w])
    np.testing.assert_array_equal(gx, [3, 4])
    np.testing.assert_array_equal(gw, [1, 2])
    assert x.grad is None and w.grad is None


def test_grad_of_an_intermediate_and_unused_inputs():
    x = leaf([1.0, 2])
    h = x * 3
    y = (h * h).sum()
    unused = leaf([0.0])
    gh, gx, gu = grad(y, [h, x, unused], retain_graph=True)
    np.testing.assert_array_equal(gh, [6, 12])
    np.testing.assert_array_equal(gx, [18, 36])
    assert gu is None
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        grad(y, [unused], allow_unused=False)
    with pytest.raises(RuntimeError, match="does not require grad"):
        grad(y, [tensor([1.0])])


def test_grad_runs_only_the_nodes_that_lead_to_the_requested_inputs():
    """A branch that ends only at a leaf nobody asked for is not run (its rule would fail
    here); when every leaf is requested, everything runs without a pruning pass."""
    x, w = leaf(2.0), leaf(3.0)
    y = x * 5 + w.exp()
    exp_node = y.grad_fn.next_functions[1][0]
    exp_node.rule = None                     # running it would raise a TypeError
    (gx,) = grad(y, [x], retain_graph=True)
    assert gx.item() == 5.0 and x.grad is None and w.grad is None
    with pytest.raises(TypeError):
        grad(y, [x, w])
    stream = io.StringIO()
    hooks.set_backward_trace(stream)
    try:
        z = x * x
        (gx,) = grad(z, [x])
    finally:
        hooks.set_backward_trace(hooks._UNSET)
    assert gx.item() == 4.0
    assert stream.getvalue().splitlines() == ["backward MulBackward shape=[] norm=1"]


def test_grad_with_create_graph_gives_higher_order_derivatives():
    x = leaf(4.0)
    y = 1 / x
    for _ in range(6):
        (y,) = grad(y, x, create_graph=True)
    assert y.item() == 0.0439453125  # 720 / 4**7


def test_backward_with_create_graph_puts_a_differentiable_gradient_in_grad():
    x = leaf(3.0)
    (x * x * x).backward(create_graph=True)
    assert x.grad.item() == 27.0 and x.grad.grad_fn is not None
    (g2,) = grad(x.grad, x)
    assert g2.item() == 18.0


def test_backward_of_several_roots():
    x = leaf([1.0, 2])
    y = x * 2
    z = (y * y).sum()
    backward([y, z], [tensor([1.0, 1]), None])
    np.testing.assert_array_equal(x.grad, [2 + 8, 2 + 16])


# -- grad mode ---------------------------------------------------------------------------------

def test_grad_mode_guards_as_decorators_and_functions():
    @no_grad()
    def off():
        return is_grad_enabled()

    @set_grad_enabled(False)
    def also_off():
        return is_grad_enabled()

    assert is_grad_enabled() and not off() and not also_off() and is_grad_enabled()
    with no_grad():
        with enable_grad():
            assert is_grad_enabled()
        assert not is_grad_enabled()
    set_grad_enabled(False)
    try:
        assert not is_grad_enabled()
    finally:
        set_grad_enabled(True)
    with set_grad_enabled(False):
        assert not is_grad_enabled()
    assert is_grad_enabled()


def test_exception_inside_a_guard_restores_the_mode():
    with pytest.raises(ValueError), no_grad():
        raise ValueError
    assert is_grad_enabled()


# -- debug hooks -------------------------------------------------------------------------------

def test_trace_from_the_environment(monkeypatch, capsys):
    monkeypatch.setattr(hooks, "_trace_stream", hooks._UNSET)
    monkeypatch.setenv("FUSEGRAD_TRACE_BACKWARD", "1")
    x = leaf([3.0, 4.0])
    (x * 1.0).sum().backward()
    assert capsys.readouterr().err.splitlines() == [
        "backward SumBackward shape=[] norm=1",
        "backward MulBackward shape=[2] norm=1.41421",
        "backward AccumulateGrad shape=[2] norm=1.41421",
    ]
    monkeypatch.setenv("FUSEGRAD_TRACE_BACKWARD", "0")
    (x * 1.0).sum().backward()
    assert capsys.readouterr().err == ""


def test_anomaly_detection_names_the_node_and_the_forward_line():
    x = leaf([0.0, 4.0])
    y = np.where(x > 0, np.sqrt(x), 0.0).sum()  # the where-trap
    y.backward(retain_graph=True)
    assert np.isnan(x.grad.data[0])
    with hooks.detect_anomaly():
        z = np.where(x > 0, np.sqrt(x), 0.0).sum()
        with pytest.raises(RuntimeError, match=r"Function SqrtBackward returned NaN in its "
                                               r"gradient \(its forward op ran at .*"
                                               r"test_eager_engine.py:\d+\)"):
            z.backward()
    assert not hooks.anomaly_enabled


def test_errors_inside_a_rule_name_the_node(monkeypatch):
    from fusegrad import formulas

    def broken(g, out, x):
        raise ZeroDivisionError("boom")
    monkeypatch.setitem(formulas.vjp_rules, "exp", broken)
    x = leaf([1.0])
    with pytest.raises(ZeroDivisionError) as info:
        np.exp(x).sum().backward()
    assert "while running ExpBackward in backward" in info.value.__notes__


def test_graph_dot_shows_nodes_and_gradient_shapes():
    x, w = leaf([1.0, 2]), leaf([[1.0, 2], [3, 4]])
    dot = graph_dot((w @ x).sum())
    assert dot.startswith("digraph backward {") and dot.rstrip().endswith("}")
    for text in ("SumBackward", "MatmulBackward", "AccumulateGrad\\n[2, 2] float64",
                 'label="[2]"', 'label="[2, 2]"'):
        assert text in dot
    assert "tensor without history" in graph_dot(tensor([1.0]))


# -- versions and views ------------------------------------------------------------------------

def test_every_inplace_op_bumps_the_version_and_views_share_it():
    x = tensor(np.arange(6.0))
    view = x.reshape(2, 3)
    copy = x.astype(np.float32)
    for op, args in (("add_", (1.0,)), ("sub_", (1.0,)), ("mul_", (2.0,)), ("fill_", (3.0,)),
                     ("zero_", ())):
        getattr(view, op)(*args)
    assert x.version == view.version == 5 and copy.version == 0
    np.testing.assert_array_equal(x, np.zeros(6))


def test_writing_through_a_view_trips_the_saved_tensor_check():
    w = leaf([1.0, 2, 3, 4])
    c = tensor([1.0, 2, 3, 4])
    y = (w * c).sum()
    c.reshape(2, 2).mul_(2.0)
    with pytest.raises(RuntimeError, match="expected version 0, got 1"):
        y.backward()


def test_a_version_counter_made_after_saving_still_guards_the_saved_input():
    """A saved input gets its version counter only when something needs one (here detach());
    writes after that are still caught, and making the counter alone is not a write."""
    x = leaf([1.0, 2.0])
    a = x * 1.0
    y = (a * a).sum()                    # saves a, which has no counter yet
    alias = a.detach()                   # creates a's counter, at version 0
    y.backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad, [2, 4])
    alias.mul_(3.0)
    with pytest.raises(RuntimeError, match="expected version 0, got 1"):
        y.backward()


def test_inplace_then_backward_on_a_saved_output():
    a = leaf(np.ones(3))
    b = np.exp(a)
    b.add_(1.0)  # recorded, as in PyTorch; ExpBackward saved b, so backward refuses
    with no_grad():
        b.add_(1.0)
    assert b.version == 2 and b.grad_fn.name == "AddBackward"
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient "
                                           "computation has been modified by an inplace "
                                           "operation"):
        b.sum().backward()


# -- the Tensor API ----------------------------------------------------------------------------

def test_tensor_construction_and_dtypes():
    assert tensor(1.0).dtype == np.float64
    assert tensor([1, 2]).dtype == np.int64
    assert tensor(np.ones(2, np.int32)).dtype == np.int64
    assert tensor(np.ones(2, np.float16)).dtype == np.float32
    assert tensor([1, 2], dtype="f32").dtype == np.float32
    assert tensor([True]).dtype == np.bool_
    source = np.array([1.0, 2])
    t = tensor(source)
    source[0] = 9
    assert t.data[0] == 1.0  # tensor() copies
    assert isinstance(Tensor([1.0]), Tensor)


def test_tensor_conversions_and_repr():
    t = leaf([1.5, 2.5])
    assert t.shape == (2,) and t.ndim == 1 and t.size == 2 and len(t) == 2
    assert t.numpy() is t.data and np.asarray(t) is t.data
    assert tensor(2.5).item() == 2.5 and float(tensor(2.5)) == 2.5
    assert repr(t) == "tensor([1.5, 2.5], requires_grad=True)"
    assert repr(t * 2) == "tensor([3., 5.], grad_fn=<MulBackward>)"
    assert repr(tensor([1.0], dtype=np.float32)) == "tensor([1.], dtype=f32)"
    t.requires_grad = False
    assert not t.requires_grad


def test_numpy_functions_on_tensors_record():
    x = leaf([0.5, 1.0])
    y = np.sum(np.tanh(x) * np.exp(x))
    assert isinstance(y, Tensor) and y.grad_fn.name == "SumBackward"
    y.backward()
    expected = (1 - np.tanh([0.5, 1.0]) ** 2) * np.exp([0.5, 1.0]) + \
        np.tanh([0.5, 1.0]) * np.exp([0.5, 1.0])
    np.testing.assert_allclose(x.grad, expected)


def test_lax_calls_on_mixed_tensors_and_arrays():
    x = leaf([1.0, 2.0])
    y = lax.mul(x, np.array([3.0, 4.0]))
    assert y.grad_fn.next_functions[1] == (None, 0)
    lax.reduce_sum(y, (0,)).backward()
    np.testing.assert_array_equal(x.grad, [3, 4])


def test_io_stream_trace_can_be_turned_off():
    stream = io.StringIO()
    hooks.set_backward_trace(stream)
    try:
        leaf(1.0).backward()
    finally:
        hooks.set_backward_trace(None)
    leaf(1.0).backward()
    hooks.set_backward_trace(hooks._UNSET)
    assert stream.getvalue() == "backward AccumulateGrad shape=[] norm=1\n"


def test_design_methods_record_and_differentiate():
    from fusegrad.runtime.gradcheck import gradcheck
    methods = [
        lambda t: t.sum(axis=0), lambda t: t.mean(), lambda t: t.max(axis=1),
        lambda t: t.min(), lambda t: t.prod(axis=1), lambda t: t.var(axis=1),
        lambda t: t.norm(), lambda t: t.exp(), lambda t: (t * t + 1).log(),
        lambda t: t.tanh(), lambda t: t.sigmoid(), lambda t: t.relu(),
        lambda t: (t * t + 1).sqrt(), lambda t: t.abs(), lambda t: t.clamp(-0.5, 0.5),
        lambda t: t.reshape(3, 2), lambda t: t.view(6), lambda t: t.transpose(),
        lambda t: t.T, lambda t: t.permute(1, 0), lambda t: t.reshape(1, 2, 3).squeeze(0),
        lambda t: t.unsqueeze(1), lambda t: t.reshape(2, 1, 3).expand(2, 4, 3),
        lambda t: t[1, ::2], lambda t: t[:, np.array([2, 2, 0])], lambda t: -t / 3 - 1,
        lambda t: t @ t.T, lambda t: 2.0 ** t,
    ]
    x = tensor([[0.3, -1.2, 0.7], [1.1, 0.45, -0.8]], requires_grad=True)
    for k, method in enumerate(methods):
        assert method(x).requires_grad, k
        result = gradcheck(method, [x])
        assert result.passed, (k, result.report)


# -- the operator and ufunc shortcuts of Tensor ------------------------------------------------

def test_tensor_ufunc_shortcuts_agree_with_fusegrad_numpy():
    import fusegrad.numpy as fnp
    from fusegrad.runtime.tensor import _FLOAT_UNARY_UFUNCS
    for ufunc in _FLOAT_UNARY_UFUNCS:
        for dtype in ("float32", "float64"):
            x = leaf([0.25, 0.5, 1.5], dtype)
            fast, general = ufunc(x), fnp.HANDLED_UFUNCS[ufunc](x)
            assert fast.dtype == general.dtype == x.dtype
            np.testing.assert_array_equal(fast.data, general.data)
            assert fast.grad_fn.name == general.grad_fn.name, ufunc


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv"])
def test_tensor_operator_shortcuts_agree_with_fusegrad_numpy(op):
    import operator

    import fusegrad.numpy as fnp
    general = {"add": fnp.add, "sub": fnp.subtract, "mul": fnp.multiply,
               "truediv": fnp.true_divide}[op]
    apply = getattr(operator, op)
    x32, x64 = leaf([1.5, -2.0], "float32"), leaf([1.5, -2.0])
    for a, b in [(x32, 3.0), (3.0, x32), (x32, 2), (2, x32), (x64, x32), (x32, x64)]:
        fast, slow = apply(a, b), general(a, b)
        assert fast.dtype == slow.dtype
        np.testing.assert_array_equal(fast.data, slow.data)
        assert fast.grad_fn.name == slow.grad_fn.name
    flags = tensor([True, False])
    if op in ("add", "mul"):  # two bools: logical or / and, as in NumPy, not arithmetic
        assert apply(flags, flags).dtype == np.bool_
    ints = tensor([3, 4])
    np.testing.assert_array_equal(apply(ints, 2).data, apply(np.array([3, 4]), 2))


def test_scalar_chain_gradients_are_arrays_not_numpy_scalars():
    def chain(x):
        for _ in range(5):
            x = x * 1.5 + 0.25 * np.sin(x)
        return x

    x = leaf(0.5)
    chain(x).backward()
    assert type(x.grad.data) is np.ndarray and x.grad.shape == ()
    (gx,) = grad(chain(x), [x])
    assert type(gx.data) is np.ndarray and gx.shape == ()
    assert gx.item() == x.grad.item()
