"""Every worked example of the seed chapter (shared/seeds/000_*.txt), with its printed numbers,
run on the eager engine."""

import io

import numpy as np
import pytest

from fusegrad import lax, nn
from fusegrad.runtime import hooks
from fusegrad.runtime.grad_mode import is_grad_enabled, no_grad
from fusegrad.runtime.graph import AccumulateGrad
from fusegrad.runtime.tensor import tensor


def leaf(values, dtype=None):
    return tensor(values, dtype=dtype, requires_grad=True)


@pytest.fixture
def trace():
    stream = io.StringIO()
    hooks.set_backward_trace(stream)
    yield stream
    hooks.set_backward_trace(hooks._UNSET)


def test_chain_rule_numeric_check():
    x = leaf(2.0)
    u = 3 * x
    y = u * u
    y.backward()
    assert x.grad.item() == 36.0


def test_vjp_of_elementwise_multiplication():
    a, b = leaf([1.0, 2, 3]), leaf([4.0, 5, 6])
    (a * b).backward(tensor([1.0, 1, 1]))
    np.testing.assert_array_equal(a.grad, [4, 5, 6])
    np.testing.assert_array_equal(b.grad, [1, 2, 3])


def test_worked_example_values_graph_and_gradients():
    x, w = leaf([1.0, 2]), leaf([0.5, -1])
    u = x * w
    v = u + x
    t = np.tanh(v)
    L = t.sum()
    np.testing.assert_allclose(u.data, [0.5, -2])
    np.testing.assert_allclose(v.data, [1.5, 0])
    np.testing.assert_allclose(t.data, [0.905148, 0], atol=1e-6)
    assert L.item() == pytest.approx(0.905148, abs=1e-6)
    assert L.grad_fn.name == "SumBackward"
    tanh_node = L.grad_fn.next_functions[0][0]
    add_node = tanh_node.next_functions[0][0]
    mul_node, acc_x = (edge for edge, _ in add_node.next_functions)
    assert (tanh_node.name, add_node.name, mul_node.name) == \
        ("TanhBackward", "AddBackward", "MulBackward")
    assert isinstance(acc_x, AccumulateGrad) and acc_x.variable is x
    assert mul_node.next_functions[0][0] is acc_x  # one shared accumulator for x
    assert mul_node.next_functions[1][0].variable is w
    L.backward()
    np.testing.assert_allclose(x.grad.data, [0.271060, 0], atol=1e-6)
    np.testing.assert_allclose(w.grad.data, [0.180707, 2], atol=1e-6)


def test_worked_example_trace_prints_six_lines(trace):
    x, w = leaf([1.0, 2]), leaf([0.5, -1])
    np.tanh(x * w + x).sum().backward()
    assert trace.getvalue().splitlines() == [
        "backward SumBackward shape=[] norm=1",
        "backward TanhBackward shape=[2] norm=1.41421",
        "backward AddBackward shape=[2] norm=1.0162",
        "backward MulBackward shape=[2] norm=1.0162",
        "backward AccumulateGrad shape=[2] norm=2.00815",
        "backward AccumulateGrad shape=[2] norm=0.27106",
    ]


def test_diamond_waits_for_both_paths(trace):
    x = leaf([1.0, 2])
    y = (x * 2 + x * 3).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad, [5, 5])
    lines = trace.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == [
        "SumBackward", "AddBackward", "MulBackward", "MulBackward", "AccumulateGrad"]
    assert lines[-1] == "backward AccumulateGrad shape=[2] norm=7.07107"


def test_scalar_neuron_matches_hand_derivation():
    w1, x1, w2, x2, b = (leaf(v) for v in (0.5, 2.0, -1.5, 0.5, 0.25))
    y = np.tanh(w1 * x1 + w2 * x2 + b)
    y.backward()
    assert y.item() == pytest.approx(0.462117, abs=1e-6)
    for t, expected in ((w1, 1.572895), (x1, 0.393224), (w2, 0.393224), (x2, -1.179672),
                        (b, 0.786448)):
        assert t.grad.item() == pytest.approx(expected, abs=2e-6)


def test_micrograd_checks_repeated_input_diamond_and_exp():
    a = leaf(3.0)
    (a * a).backward()
    assert a.grad.item() == 6.0
    x = leaf(2.0)
    (x * 2 + x * 3).backward()
    assert x.grad.item() == 5.0
    z = leaf(0.7)
    out = np.exp(z)
    assert out.grad_fn.name == "ExpBackward"
    out.backward()
    assert z.grad.item() == pytest.approx(out.item())


def test_graph_of_broadcast_product_sum():
    a, b = leaf(np.ones((2, 3))), leaf(np.ones(3))
    y = (a * b).sum()
    mul = y.grad_fn.next_functions[0][0]
    assert [y.grad_fn.name, mul.name] == ["SumBackward", "MulBackward"]
    assert [e.variable for e, _ in mul.next_functions] == [a, b]


def test_modifying_saved_input_throws():
    x = leaf([1.0, 2])
    constant = tensor([3.0, 4])
    y = (x * constant).sum()
    constant.add_(1)
    with pytest.raises(RuntimeError) as info:
        y.backward()
    message = str(info.value)
    assert message.startswith("one of the variables needed for gradient computation has been "
                              "modified by an inplace operation: expected version 0, got 1")
    assert "add_ at" in message and "test_seed_chapter.py:" in message  # where it happened


@pytest.mark.parametrize("op", ["add_", "sub_", "mul_", "fill_", "zero_"])
def test_inplace_rules(op):
    def run(t, *args):
        return getattr(t, op)(*args) if op != "zero_" else t.zero_()

    arg = () if op == "zero_" else (2.0,)
    plain = tensor([1.0, 2])
    run(plain, *arg)
    assert plain.version == 1
    parameter = leaf([1.0, 2])
    with pytest.raises(RuntimeError, match=f"a leaf tensor that requires grad is being used in "
                                           f"the in-place operation {op}"):
        run(parameter, *arg)
    with no_grad():
        run(parameter, *arg)  # optimizer updates
    assert parameter.version == 1
    # The seed rejects in-place ops on tensors with history; fusegrad records them as PyTorch
    # does (docs/design.md, "In-place operations"): the history is rebased onto the new node.
    history = parameter * 2
    run(history, *arg)
    history.sum().backward()
    expected = {"add_": 2, "sub_": 2, "mul_": 4, "fill_": 0, "zero_": 0}[op]
    np.testing.assert_array_equal(parameter.grad, [expected, expected])
    with no_grad():
        run(history, *arg)
    assert history.version == 2


def test_inplace_with_a_source_that_requires_grad():
    target, source = tensor([1.0, 2]), leaf([1.0, 1])
    target.add_(source)  # PyTorch's rule (the seed raises): target gets the history
    assert not target.is_leaf and target.grad_fn.name == "AddBackward"
    (target * 3).sum().backward()
    np.testing.assert_array_equal(source.grad, [3, 3])
    with no_grad():
        target.add_(source)
    np.testing.assert_array_equal(target.data, [3, 4])


def test_seeding_rules():
    x = leaf([[1.0, 2, 3], [4, 5, 6]])
    x.mean(axis=1).backward(tensor([3.0, 6]))
    np.testing.assert_array_equal(x.grad, [[1, 1, 1], [2, 2, 2]])
    one = leaf([5.0])
    one.backward()  # a leaf root starts at its own AccumulateGrad
    np.testing.assert_array_equal(one.grad, [1.0])
    y = leaf([1.0, 2]) * 2
    with pytest.raises(RuntimeError, match=r"grad can be implicitly created only for scalar "
                                           r"outputs, got shape \[2\]"):
        y.backward()
    with pytest.raises(RuntimeError, match=r"gradient shape \[3\] does not match output shape "
                                           r"\[2\]"):
        y.backward(tensor([1.0, 1, 1]))
    with pytest.raises(RuntimeError, match="backward needs a tensor that requires grad"):
        tensor([1.0]).backward()


def test_leaf_shared_by_two_graphs_accumulates_and_zero_grad_resets():
    x = leaf([1.0, 2])
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad, [5, 5])
    x.zero_grad()
    assert x.grad is None


def test_grad_is_a_copy_of_the_propagated_gradient():
    x = leaf([1.0, 2])
    seed = tensor([3.0, 4])
    x.backward(seed)  # the seed reaches AccumulateGrad unchanged
    np.testing.assert_array_equal(x.grad, [3, 4])
    assert not np.shares_memory(x.grad.data, seed.data)
    assert not x.grad.requires_grad and x.grad.grad_fn is None


def test_second_backward_throws_and_retain_graph_accumulates():
    x = leaf([1.0, 2])
    y = (x * 2).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"Trying to backward through the graph a second "
                                           r"time \(SumBackward\); specify retain_graph=true"):
        y.backward()
    z = leaf([1.0, 2])
    loss = (z * z * 3).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    np.testing.assert_array_equal(z.grad, [12, 24])


def test_invalid_gradient_names_the_node(monkeypatch):
    from fusegrad import formulas
    monkeypatch.setitem(formulas.vjp_rules, "mul", lambda g, out, x, y: (g, np.ones((2, 3))))
    a, b = leaf([1.0, 2, 3]), leaf([1.0, 2, 3])
    with pytest.raises(RuntimeError, match=r"Function MulBackward returned an invalid gradient "
                                           r"at index 1 - got \[2, 3\] but expected shape \[3\]"):
        (a * b).sum().backward()


def test_mul_with_broadcasting():
    a, b = leaf([[1.0, 2, 3], [4, 5, 6]]), leaf([10.0, 20, 30])
    (a * b).sum().backward()
    np.testing.assert_array_equal(a.grad, [[10, 20, 30], [10, 20, 30]])
    np.testing.assert_array_equal(b.grad, [5, 7, 9])
    c, d = leaf(np.ones((4, 1))), leaf(np.ones(3))
    (c * d).sum().backward()
    assert c.grad.shape == (4, 1) and d.grad.shape == (3,)
    np.testing.assert_array_equal(c.grad, np.full((4, 1), 3.0))
    np.testing.assert_array_equal(d.grad, [4, 4, 4])


def test_mixed_precision_input_keeps_its_dtype():
    a = leaf([1.0, 2], dtype=np.float32)
    b = leaf([3.0, 4], dtype=np.float64)
    y = (a * b).sum()
    assert y.dtype == np.float64
    y.backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_array_equal(a.grad, [3, 4])


def test_tanh_worked_example():
    x = leaf(0.5)
    np.tanh(x).backward(tensor(2.0))
    assert x.grad.item() == pytest.approx(1.572896, abs=1e-6)


def test_conventions_at_non_differentiable_points():
    x = leaf([-1.0, 0.0, 1.0])
    x.relu().sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 0, 1])
    y = leaf([-1.0, 0.0, 1.0])
    abs(y).sum().backward()
    np.testing.assert_array_equal(y.grad, [-1, 0, 1])
    z = leaf([-2.0, -1.0, 0.0, 1.0, 2.0])
    z.clamp(-1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(z.grad, [0, 1, 1, 1, 0])  # 1 inside the closed range


def test_matmul_worked_examples():
    A, B = leaf([[1.0, 2], [3, 4]]), leaf([[5.0, 6], [7, 8]])
    (A @ B).sum().backward()
    np.testing.assert_array_equal(A.grad, [[11, 15], [11, 15]])
    np.testing.assert_array_equal(B.grad, [[4, 4], [6, 6]])
    v, M = leaf([1.0, 2, 3]), leaf(np.arange(12.0).reshape(3, 4))
    out = v @ M
    assert out.shape == (4,)
    out.sum().backward()
    np.testing.assert_array_equal(v.grad, M.data.sum(axis=1))
    np.testing.assert_array_equal(M.grad, np.repeat([[1.0], [2], [3]], 4, axis=1))


def test_batched_matmul_sums_broadcast_batch_dimensions():
    a = leaf(np.arange(24.0).reshape(2, 3, 4))
    b = leaf(np.ones((4, 2)))
    lax.matmul(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, np.full((2, 3, 4), 2.0))
    np.testing.assert_array_equal(b.grad, np.repeat(a.data.sum(axis=(0, 1))[:, None], 2, 1))


def test_prod_with_zeros():
    for values, expected in (([2.0, 0, 3], [0, 6, 0]), ([2.0, 0, 0], [0, 0, 0]),
                             ([2.0, 4, 3], [12, 6, 8])):
        x = leaf(values)
        x.prod().backward()
        np.testing.assert_array_equal(x.grad, expected)


def test_max_splits_ties_evenly():
    x = leaf([3.0, 3, 1, 3])
    x.max().backward()
    np.testing.assert_allclose(x.grad, [1 / 3, 1 / 3, 0, 1 / 3])
    y, z = leaf([1.0, 2.0]), leaf([1.0, 3.0])
    np.maximum(y, z).sum().backward()  # maximum: g/2 to each side of a tie
    np.testing.assert_array_equal(y.grad, [0.5, 0])
    np.testing.assert_array_equal(z.grad, [0.5, 1])


def test_cumsum_backward_is_the_reverse_cumulative_sum():
    x = leaf([1.0, 2, 3, 4])
    np.cumsum(x).backward(tensor([1.0, 10, 100, 1000]))
    np.testing.assert_array_equal(x.grad, [1111, 1110, 1100, 1000])


def test_softmax_worked_example():
    x = leaf([1.0, 2, 3])
    y = nn.softmax(x)
    np.testing.assert_allclose(y.data, [0.0900, 0.2447, 0.6652], atol=1e-4)
    y.backward(tensor([1.0, 0, 0]))
    np.testing.assert_allclose(x.grad, [0.0819, -0.0220, -0.0599], atol=1e-4)
    assert abs(x.grad.data.sum()) < 1e-15


def test_log_softmax_backward():
    x = leaf([1.0, 2, 3])
    nn.log_softmax(x).backward(tensor([1.0, 0, 0]))
    softmax = np.exp([1.0, 2, 3]) / np.exp([1.0, 2, 3]).sum()
    np.testing.assert_allclose(x.grad, [1, 0, 0] - softmax)


def test_cross_entropy_worked_example():
    logits = leaf([[2.0, 1, 0.1]])
    loss = nn.cross_entropy(logits, np.array([0]))
    assert loss.item() == pytest.approx(0.4170, abs=1e-4)
    assert loss.grad_fn.name == "CrossEntropyBackward"
    assert loss.grad_fn.next_functions[1] == (None, 0)  # targets get no edge
    loss.backward()
    np.testing.assert_allclose(logits.grad, [[-0.3410, 0.2424, 0.0986]], atol=1e-4)


def test_cross_entropy_gradient_is_divided_by_n():
    logits = leaf([[2.0, 1, 0.1], [2.0, 1, 0.1]])
    nn.cross_entropy(logits, np.array([0, 0])).backward()
    np.testing.assert_allclose(logits.grad, [[-0.3410 / 2, 0.2424 / 2, 0.0986 / 2]] * 2,
                               atol=1e-4)


def test_layer_norm_backward_is_the_chapter_formula():
    rng = np.random.default_rng(0)
    x, g = leaf(rng.standard_normal((2, 5))), rng.standard_normal((2, 5))
    y = nn.layer_norm(x, eps=1e-5)
    y.backward(tensor(g))
    sigma = np.sqrt(x.data.var(axis=1, keepdims=True) + 1e-5)
    yd = y.data
    expected = (g - g.mean(1, keepdims=True) - yd * (g * yd).mean(1, keepdims=True)) / sigma
    np.testing.assert_allclose(x.grad, expected, rtol=1e-12)


def test_views_and_indexing_examples():
    x = leaf([1.0, 2, 3, 4])
    x[1:3].backward(tensor([7.0, 9]))
    np.testing.assert_array_equal(x.grad, [0, 7, 9, 0])
    y = leaf([1.0, 2, 3])
    y[np.array([2, 0, 2])].sum().backward()
    np.testing.assert_array_equal(y.grad, [1, 0, 2])
    z = leaf(np.arange(24.0).reshape(2, 3, 4))
    p = z.permute(2, 0, 1)
    assert p.shape == (4, 2, 3)
    p.backward(tensor(np.arange(24.0).reshape(4, 2, 3)))
    np.testing.assert_array_equal(z.grad, np.arange(24.0).reshape(4, 2, 3).transpose(1, 2, 0))
    e = leaf([[1.0], [2.0]])
    e.expand(2, 3).sum().backward()
    np.testing.assert_array_equal(e.grad, [[3], [3]])


def test_split_and_concatenate_accumulates_pieces():
    x = leaf([1.0, 2, 3, 4, 5])
    swapped = np.concatenate([x[3:], x[:3]])
    swapped.backward(tensor([10.0, 20, 1, 2, 3]))
    np.testing.assert_array_equal(x.grad, [1, 2, 3, 10, 20])


def test_where_routes_the_gradient_to_each_branch():
    a, b = leaf([1.0, 2, 3]), leaf(5.0)
    mask = np.array([True, False, True])
    np.where(mask, a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [1, 0, 1])
    assert b.grad.item() == 1.0  # broadcast scalar branch: summed by sum_to_shape


def test_detach_cuts_the_gradient():
    x = leaf([1.0, 2])
    (x.detach() * x).sum().backward()
    np.testing.assert_array_equal(x.grad, [1, 2])


def test_detach_shares_the_version_counter():
    x = leaf([1.0, 2])
    y = np.exp(x)
    alias = y.detach()
    alias.add_(1)
    assert y.version == 1
    with pytest.raises(RuntimeError, match="expected version 0, got 1"):
        y.sum().backward()


def test_retain_grad_stores_intermediate_gradient():
    x = leaf([1.0, 1])
    middle = x * 3
    middle.retain_grad()
    (middle * 2).sum().backward()
    np.testing.assert_array_equal(middle.grad, [2, 2])
    np.testing.assert_array_equal(x.grad, [6, 6])
    x.retain_grad()  # a no-op on a leaf
    with pytest.raises(RuntimeError, match="retain_grad needs a tensor that requires grad"):
        tensor([1.0]).retain_grad()


def test_detach_in_place_on_a_leaf_in_the_graph_skips_its_gradient():
    x, w = leaf([1.0, 2]), leaf([3.0, 4])
    y = (x * w).sum()
    x.detach_()
    assert x.is_leaf and not x.requires_grad
    y.backward()
    assert x.grad is None
    np.testing.assert_array_equal(w.grad, [1, 2])


def test_detach_in_place_on_a_retained_output_skips_its_gradient():
    x = leaf([1.0, 1])
    y = x * 2
    y.retain_grad()
    z = (y * 3).sum()
    y.detach_()
    z.backward()
    np.testing.assert_array_equal(x.grad, [6, 6])
    assert y.grad is None


def test_grad_mode_default_nesting_and_exceptions():
    assert is_grad_enabled()
    with no_grad():
        assert not is_grad_enabled()
        with pytest.raises(ZeroDivisionError), no_grad():
            raise ZeroDivisionError
        assert not is_grad_enabled()
    assert is_grad_enabled()
    x = leaf([1.0])
    with no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None


def test_requires_grad_rules():
    x = tensor([1.0, 2])
    assert x.is_leaf and not x.requires_grad and x.grad is None and x.version == 0
    with pytest.raises(RuntimeError, match="only floating point tensors can require gradients"):
        tensor([1, 2]).requires_grad_()
    y = x.requires_grad_() * 2
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf "
                                           "tensors"):
        y.requires_grad_(False)
    view = tensor([1.0, 2, 3, 4])
    reshaped = view.reshape(2, 2)
    view.requires_grad_()
    assert not reshaped.requires_grad  # a view does not share requires_grad without history
    assert reshaped._version is view._version  # but it shares the storage version


def test_integer_outputs_never_record():
    x = leaf([-1.0, 0.5, 2.0])
    for result in (x > 0, np.argmax(x), np.sign(x), x.astype(np.int64)):
        assert result.grad_fn is None and not result.requires_grad


def test_deep_chains_backward_and_destruction():
    x = leaf([1.0])
    y = x
    for _ in range(10_000):
        y = y + 1.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [1.0])
    z = x
    for _ in range(50_000):
        z = z + 1.0
    del z  # no backward: every node is fully populated, destruction must not recurse


def test_detached_saved_output_does_not_leak():
    import weakref
    x = leaf([1.0, 2])
    y = np.exp(x)
    node = weakref.ref(y.grad_fn)
    del y
    assert node() is None


def test_central_difference_example():
    def f(x):
        return x ** 3
    assert (f(1.1) - f(1.0)) / 0.1 == pytest.approx(3.31)
    assert (f(1.1) - f(0.9)) / 0.2 == pytest.approx(3.01)
