"""The tracer: what IR a NumPy function becomes (explicit broadcasts and promotions, weak
scalars, constants, parameter names, source lines), nested traces and captures."""

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as fnn
from fusegrad.ir import Function, TensorType
from fusegrad.tracer.tracer import ConcretizationError, Tracer, is_tracing, trace_flat

rng = np.random.default_rng(2)
X = rng.standard_normal((3, 4))
X32 = X.astype(np.float32)
V = rng.standard_normal(4)
CONST = rng.standard_normal((3, 4))


def prims(fn):
    return [op.prim for op in fn.ops]


def test_make_ir_returns_a_function_with_typed_params_and_results():
    def loss(x, w, b):
        return np.sum(np.tanh(x * w + b))
    fn = fg.make_ir(loss)(V, V, V)
    assert isinstance(fn, Function)
    assert fn.name == "loss"
    assert fn.param_types == (TensorType("f64", (4,)),) * 3
    assert fn.result_types == (TensorType("f64", ()),)
    assert prims(fn) == ["mul", "add", "tanh", "reduce_sum"]
    text = str(fn)
    assert text.startswith("func @loss(%x: f64[4], %w: f64[4], %b: f64[4]) -> (f64[]) {")
    assert "reduce_sum %2 {axes=(0,)} : f64[]" in text


def test_broadcasting_is_explicit():
    fn = fg.make_ir(lambda x, v: x + v)(X, V)
    assert prims(fn) == ["broadcast_in_dim", "add"]
    bcast = fn.ops[0]
    assert bcast.params == {"shape": (3, 4), "dims": (1,)}
    assert bcast.inputs == (fn.params[1],)
    assert all(v.type == TensorType("f64", (3, 4)) for v in fn.ops[1].inputs)


def test_size_one_axes_broadcast_both_ways():
    fn = fg.make_ir(lambda a, b: a * b)(np.ones((3, 1)), np.ones((1, 4)))
    assert prims(fn) == ["broadcast_in_dim", "broadcast_in_dim", "mul"]
    assert fn.result_types == (TensorType("f64", (3, 4)),)


def test_promotion_is_explicit():
    fn = fg.make_ir(lambda x, y: x + y)(X32, X)
    assert prims(fn) == ["convert", "add"]
    assert fn.ops[0].params == {"dtype": "f64"}
    fn = fg.make_ir(lambda i, b: i * b)(np.ones(3, np.int64), np.ones(3, bool))
    assert prims(fn) == ["convert", "mul"]
    assert fn.result_types == (TensorType("i64", (3,)),)


def test_python_scalars_are_weak_constants():
    fn = fg.make_ir(lambda x: 2 * x + 1.5)(X32)
    assert prims(fn) == ["full", "mul", "full", "add"]
    assert fn.ops[0].params == {"shape": (3, 4), "dtype": "f32", "value": 2.0}
    assert fn.result_types == (TensorType("f32", (3, 4)),)


def test_python_scalar_arguments_are_weak_params():
    fn = fg.make_ir(lambda x, s: x * s)(X32, 3.0)
    assert fn.param_types == (TensorType("f32", (3, 4)), TensorType("f64", ()))
    assert fn.result_types == (TensorType("f32", (3, 4)),)
    out = fg.jit(lambda x, s: x * s, backend="interp")(X32, 3.0)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, X32 * 3.0)


def test_numpy_scalar_arguments_are_strong():
    out = fg.jit(lambda x, s: x * s, backend="interp")(X32, np.float64(3.0))
    assert out.dtype == (X32 * np.float64(3.0)).dtype == np.float64


def test_closed_over_arrays_become_constants():
    def f(x):
        return x * CONST
    fn = fg.make_ir(f)(X)
    assert prims(fn) == ["constant", "mul"]
    np.testing.assert_array_equal(fn.ops[0].params["value"], CONST)
    assert len(fn.params) == 1
    np.testing.assert_allclose(fg.jit(f, backend="interp")(X), X * CONST)


def test_closed_over_arrays_are_read_at_trace_time():
    table = {"w": np.ones(4)}
    f = fg.jit(lambda x: x * table["w"], backend="interp")
    np.testing.assert_allclose(f(V), V)
    table["w"] = np.zeros(4)          # like JAX: the constant is baked into the trace
    np.testing.assert_allclose(f(V), V)


def test_every_op_records_the_callers_line():
    def f(x, v):
        y = np.tanh(x) + v
        z = np.sum(y, axis=0, keepdims=True)
        return fnn.softmax(z @ x.T)[0, ::-1]
    first = f.__code__.co_firstlineno
    fn = fg.make_ir(f)(X, V)
    expected = {"tanh": {1}, "broadcast_in_dim": {1}, "add": {1}, "reduce_sum": {2},
                "reshape": {2, 3}, "transpose": {3}, "matmul": {3}, "softmax": {3},
                "slice": {3}, "rev": {3}}
    for op in fn.ops:
        file, line = op.loc.rsplit(":", 1)
        assert file == "test_tracer.py" and int(line) - first in expected[op.prim], op
    assert {op.prim for op in fn.ops} >= {"tanh", "reduce_sum", "matmul", "softmax", "rev"}


def test_loc_of_ops_from_numpy_composites_is_the_user_line():
    def f(x):
        return np.std(x, axis=-1) + np.var(x) + np.mean(x)
    line = f.__code__.co_firstlineno + 1
    fn = fg.make_ir(f)(X)
    assert len(fn.ops) > 8
    assert {op.loc for op in fn.ops} == {f"test_tracer.py:{line}"}


def test_loc_is_printed_as_a_comment():
    def f(x):
        return np.exp(x)
    line = f.__code__.co_firstlineno + 1
    assert f"# test_tracer.py:{line}" in str(fg.make_ir(f)(X))


def test_param_names_follow_python_names_and_pytree_paths():
    def step(params, x, lr):
        return {"w": params["w"] - lr * x, "b": params["b"][0]}
    fn = fg.make_ir(step, static_argnums=2)({"w": V, "b": [V]}, V, 0.1)
    assert str(fn).startswith("func @step(%params.b.0: f64[4], %params.w: f64[4], %x: f64[4])")
    assert len(fn.params) == 3


def test_static_args_are_not_params():
    def f(x, n, axis):
        return np.sum(x ** n, axis=axis)
    fn = fg.make_ir(f, static_argnums=(1, 2))(X, 3, 0)
    assert len(fn.params) == 1
    assert fn.result_types == (TensorType("f64", (4,)),)


def test_results_can_be_params_and_constants():
    fn = fg.make_ir(lambda x: (x, 2.0, CONST))(V)
    assert fn.results[0] is fn.params[0]
    assert prims(fn) == ["full", "constant"]
    assert fn.result_types[1:] == (TensorType("f64", ()), TensorType("f64", (3, 4)))


def test_tracer_attributes():
    seen = {}

    def f(x):
        seen.update(shape=x.shape, dtype=x.dtype, ndim=x.ndim, size=x.size, len=len(x),
                    repr=repr(x), tracing=is_tracing(), type=type(x))
        return x
    fg.make_ir(f)(X32)
    assert seen == {"shape": (3, 4), "dtype": np.dtype(np.float32), "ndim": 2, "size": 12,
                    "len": 3, "repr": "Tracer<f32[3,4]>", "tracing": True, "type": Tracer}
    assert not is_tracing()


def test_len_of_0d_tracer_is_an_error():
    with pytest.raises(TypeError, match="len"):
        fg.make_ir(lambda x: len(x))(np.float64(1.0))


def test_nested_jit_is_inlined():
    inner = fg.jit(lambda x: np.tanh(x) * 2, backend="interp")
    outer = fg.jit(lambda x: inner(x) + 1, backend="interp")
    np.testing.assert_allclose(outer(V), np.tanh(V) * 2 + 1)
    assert inner.cache_size == 0           # traced through, never compiled on its own
    assert prims(fg.make_ir(lambda x: inner(x) + 1)(V)) == ["tanh", "full", "mul", "full",
                                                            "add"]


def test_trace_flat_pytree_outputs():
    fn, out_tree, captures = trace_flat(lambda x, y: {"s": x + y, "p": [x * y, None]},
                                        [TensorType("f64", (2,))] * 2, "f")
    assert captures == []
    assert len(fn.results) == 2
    assert out_tree == ("dict", ("p", "s"), (("list", (("leaf",), ("none",))), ("leaf",)))


def test_trace_flat_lifts_outer_tracers_into_params():
    t = TensorType("f64", (3,))

    def outer(x):
        inner, _, captures = trace_flat(lambda y: y * x, [t], "inner")
        assert captures == [x]
        assert len(inner.params) == 2 and inner.params[1].hint == "captured"
        return x
    trace_flat(outer, [t], "outer")


def test_concrete_values_inside_trace_are_errors():
    with pytest.raises(ConcretizationError):
        fg.make_ir(lambda x: float(x[0]))(V)
