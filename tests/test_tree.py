"""Pytrees: dicts, lists, tuples and None, flattened to leaves and rebuilt; in and out of jit."""

import numpy as np
import pytest

import fusegrad as fg
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
