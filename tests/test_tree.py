"""Pytrees: dicts, lists, tuples, named tuples and None, flattened to leaves and rebuilt; in
and out of jit, and through grad."""

from collections import namedtuple

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.testing import check_grads
from fusegrad.tree import flatten, num_leaves, tree_map, unflatten


@pytest.mark.parametrize("tree, n", [
    (1.0, 1),
    (None, 0),
    ([], 0),
    ((1, 2), 2),
    ([1, (2, 3), {"a": 4}], 4),
    ({"b": [1, None], "a": (2,)}, 2),
    ({"x": {"y": {"z": [None, None, 5]}}}, 1),
])
def test_flatten_unflatten_round_trip(tree, n):
    leaves, treedef = flatten(tree)
    assert len(leaves) == n == num_leaves(treedef)
    assert unflatten(treedef, leaves) == tree
    hash(treedef)


def test_dict_keys_are_sorted_and_types_kept():
    leaves, treedef = flatten({"b": 1, "a": [2, 3], "c": (4,)})
    assert leaves == [2, 3, 1, 4]
    rebuilt = unflatten(treedef, ["A0", "A1", "B", "C"])
    assert rebuilt == {"a": ["A0", "A1"], "b": "B", "c": ("C",)}
    assert isinstance(rebuilt["a"], list) and isinstance(rebuilt["c"], tuple)


def test_arrays_are_leaves():
    x = np.ones((2, 3))
    leaves, treedef = flatten({"w": x, "b": [x[0]]})
    assert treedef == ("dict", ("b", "w"), (("list", (("leaf",),)), ("leaf",)))
    assert leaves[1] is x


def test_structure_distinguishes_list_tuple_and_none():
    defs = {flatten(t)[1] for t in ([1], (1,), [1, None], {"0": 1}, 1)}
    assert len(defs) == 5


def test_unflatten_checks_the_leaf_count():
    _, treedef = flatten([1, 2])
    with pytest.raises(ValueError, match="more leaves"):
        unflatten(treedef, [1, 2, 3])
    with pytest.raises(ValueError, match="fewer leaves"):
        unflatten(treedef, [1])


def test_tree_map():
    assert tree_map(lambda v: v * 10, {"a": [1, (2, None)], "b": 3}) == \
        {"a": [10, (20, None)], "b": 30}


def test_pytrees_in_and_out_of_jit():
    def f(params, xs, nothing):
        assert nothing is None
        a, (b, c) = xs
        return {"sum": params["w"] @ a + params["b"], "pair": (b * c, [c, None])}

    params = {"w": np.arange(6.0).reshape(2, 3), "b": np.ones(2)}
    xs = [np.ones(3), (np.float32(2.0), np.arange(2.0))]
    out = fg.jit(f, backend="interp")(params, xs, None)
    ref = f(params, xs, None)
    assert set(out) == {"sum", "pair"}
    assert isinstance(out["pair"], tuple) and isinstance(out["pair"][1], list)
    assert out["pair"][1][1] is None
    np.testing.assert_allclose(out["sum"], ref["sum"])
    np.testing.assert_allclose(out["pair"][0], ref["pair"][0])
    np.testing.assert_allclose(out["pair"][1][0], ref["pair"][1][0])
    assert out["pair"][0].dtype == ref["pair"][0].dtype == np.float64


def test_jit_returning_none_and_empty_containers():
    out = fg.jit(lambda x: (None, [], {}, x), backend="interp")(np.ones(2))
    assert out[:3] == (None, [], {})
    np.testing.assert_allclose(out[3], np.ones(2))


def test_make_ir_flattens_pytree_args_in_sorted_key_order():
    fn = fg.make_ir(lambda p: p["z"] * p["a"])({"z": np.ones(2), "a": np.ones(2, np.float32)})
    assert [str(t) for t in fn.param_types] == ["f32[2]", "f64[2]"]


# ---- named tuples: nodes that keep their class -------------------------------------------

Params = namedtuple("Params", "w b")
State = namedtuple("State", "h count")


def test_named_tuples_are_nodes_that_keep_their_class():
    tree = {"p": Params(np.ones(2), [3.0, None]), "t": (1, 2)}
    leaves, treedef = flatten(tree)
    assert len(leaves) == 4 == num_leaves(treedef)
    assert treedef[2][0] == ("namedtuple", (("leaf",), ("list", (("leaf",), ("none",)))), Params)
    back = unflatten(treedef, leaves)
    assert type(back["p"]) is Params and back["p"].b == [3.0, None] and back == tree
    assert tree_map(lambda v: v * 2, Params(1, (2,))) == Params(2, (4,))
    other = namedtuple("Params", "w b")             # same name and fields, another class
    defs = {flatten(t)[1] for t in (Params(1, 2), other(1, 2), (1, 2), State(1, 2))}
    assert len(defs) == 4
    hash(treedef)


def test_numpys_result_tuples_come_back_from_jit():
    """np.linalg's results are named tuples in NumPy 2: jit returns them as such, on the first
    call and on the fast path of later ones, and grad of a function returning one works."""
    s = np.array([[2.0, 0.5], [0.5, 1.0]])
    for fun, cls in ((np.linalg.eigh, "EighResult"), (np.linalg.svd, "SVDResult"),
                     (np.linalg.slogdet, "SlogdetResult"), (np.linalg.qr, "QRResult")):
        want = fun(s)
        for backend in ("eager", "interp"):
            jitted = fg.jit(fun, backend=backend)
            for got in (jitted(s), jitted(s)):
                assert type(got).__name__ == cls and got._fields == want._fields
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g, w)
    g = fg.grad(lambda a: np.linalg.eigh(a).eigenvalues[1])(s)
    v = np.linalg.eigh(s).eigenvectors[:, 1]
    np.testing.assert_allclose(g, np.tril(2 * np.outer(v, v) - np.diag(v * v)), rtol=1e-12)


def _step(p: Params, state: State, x):
    """One recurrent step on named tuples: the state is the loop's carry."""
    h = np.tanh(p.w @ x + p.b + state.h)
    return State(h, state.count + 1)


def _unrolled(p, x):
    state = State(np.zeros(2), 0.0)
    for _ in range(3):
        state = _step(p, state, x)
    return state


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_named_tuples_as_arguments_results_carries_and_gradients(backend):
    p = Params(np.arange(6.0).reshape(2, 3) / 10, np.array([0.1, -0.2]))
    x = np.array([0.5, -1.0, 2.0])
    want = _unrolled(p, x)
    got = fg.jit(_unrolled, backend=backend)(p, x)
    assert type(got) is State
    np.testing.assert_allclose(got.h, want.h, rtol=1e-14)
    assert float(got.count) == 3.0

    def loss(p, x):
        return np.sum(_unrolled(p, x).h ** 2)
    g = fg.jit(fg.grad(loss), backend=backend)(p, x)
    assert type(g) is Params and g.w.shape == (2, 3) and g.b.shape == (2,)
    check_grads(loss, (p, x), order=1, backend=None if backend == "eager" else backend)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_named_tuples_as_the_carry_of_lax_loops(backend):
    def f(x):
        state = fg.lax.fori_loop(0, 3, lambda i, s: State(np.tanh(s.h * x), s.count + 1.0),
                                 State(x, 0.0))
        carry, ys = fg.lax.scan(lambda s, xi: (State(s.h * xi, s.count + xi), State(s.h, xi)),
                                State(1.0, 0.0), x)
        return state, carry, ys

    x = np.array([0.5, 1.5, -0.3])
    state, carry, ys = fg.jit(f, backend=backend)(x)
    assert type(state) is type(carry) is type(ys) is State
    h = x
    for _ in range(3):
        h = np.tanh(h * x)
    np.testing.assert_allclose(state.h, h, rtol=1e-14)
    np.testing.assert_allclose(ys.h, np.cumprod(np.concatenate([[1.0], x[:-1]])), rtol=1e-14)
    np.testing.assert_allclose([carry.h, carry.count], [np.prod(x), np.sum(x)], rtol=1e-14)
    check_grads(lambda x: np.sum(f(x)[0].h) + f(x)[1].h, (x,), order=1,
                backend=None if backend == "eager" else backend)
