"""The optimization passes: lower, simplify, cse, dce and the pipeline.

Each pass is tested as IR text in, IR text out (expected texts are normalized by a parse/print
round trip, so only names, ops, params and comments matter, not column alignment), checked to
leave IR that verifies and its input unchanged, and run on traced NumPy programs whose results
must not change.
"""

import math
import zlib

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as fnn
from fusegrad.ir import (COMPOSITES, PRIMITIVES, Builder, Function, TensorType, parse,
                         print_function, verify)
from fusegrad.passes import pipeline
from fusegrad.passes.cse import cse
from fusegrad.passes.dce import dce
from fusegrad.passes.lower import lower
from fusegrad.passes.pipeline import PASSES, optimize
from fusegrad.passes.simplify import simplify
from fusegrad.runtime.interpreter import eval_function


def run_pass(pass_, fn):
    """pass_(fn), checking that the output verifies and that fn is left unchanged."""
    before = print_function(fn)
    ops_before = [(op.prim, op.inputs, op.outputs, op.loc, op.note) for op in fn.ops]
    out = pass_(fn)
    assert print_function(fn) == before
    assert [(op.prim, op.inputs, op.outputs, op.loc, op.note) for op in fn.ops] == ops_before
    verify(out)
    assert out.param_types == fn.param_types and out.result_types == fn.result_types
    return out


def golden(pass_, src: str, expected: str):
    out = run_pass(pass_, parse(src))
    assert str(out) == str(parse(expected))
    return out


def prims(fn) -> list[str]:
    return [op.prim for op in fn.ops]


# ---------------------------------------------------------------- lower

def test_lowerings_cover_exactly_the_composites():
    lowered = {p.name for p in PRIMITIVES.values() if p.lower is not None}
    assert lowered == COMPOSITES


def test_lower_softmax_keeps_loc_and_appends_note():
    golden(lower, """
func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = softmax %x {axis=1} : f32[2,3]   # m.py:3  vjp[exp]
  %1 = neg %0 : f32[2,3]                # m.py:4  vjp[neg]
  return %1
}""", """
func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = reduce_max %x {axes=(1,)} : f32[2]                         # m.py:3  vjp[exp]; lower[softmax]
  %1 = abs %0 : f32[2]                                            # m.py:3  vjp[exp]; lower[softmax]
  %2 = full {dtype="f32", shape=(2,), value=inf} : f32[2]         # m.py:3  vjp[exp]; lower[softmax]
  %3 = lt %1, %2 : bool[2]                                        # m.py:3  vjp[exp]; lower[softmax]
  %4 = full {dtype="f32", shape=(2,), value=0.0} : f32[2]         # m.py:3  vjp[exp]; lower[softmax]
  %5 = select %3, %0, %4 : f32[2]                                 # m.py:3  vjp[exp]; lower[softmax]
  %6 = broadcast_in_dim %5 {dims=(0,), shape=(2, 3)} : f32[2,3]   # m.py:3  vjp[exp]; lower[softmax]
  %7 = sub %x, %6 : f32[2,3]                                      # m.py:3  vjp[exp]; lower[softmax]
  %8 = exp %7 : f32[2,3]                                          # m.py:3  vjp[exp]; lower[softmax]
  %9 = reduce_sum %8 {axes=(1,)} : f32[2]                         # m.py:3  vjp[exp]; lower[softmax]
  %10 = broadcast_in_dim %9 {dims=(0,), shape=(2, 3)} : f32[2,3]  # m.py:3  vjp[exp]; lower[softmax]
  %11 = div %8, %10 : f32[2,3]                                    # m.py:3  vjp[exp]; lower[softmax]
  %12 = neg %11 : f32[2,3]                                        # m.py:4  vjp[neg]
  return %12
}""")


def test_lower_gelu_exact_and_layer_norm():
    golden(lower, """
func @f(%x: f64[2,3]) -> (f64[2,3], f64[2,3]) {
  %0 = gelu %x {approximate=False} : f64[2,3]           # m.py:5
  %1 = layer_norm %x {eps=0.001, ndim=1} : f64[2,3]     # m.py:6
  return %0, %1
}""", """
func @f(%x: f64[2,3]) -> (f64[2,3], f64[2,3]) {
  %0 = full {dtype="f64", shape=(2, 3), value=1.4142135623730951} : f64[2,3]   # m.py:5  lower[gelu]
  %1 = div %x, %0 : f64[2,3]                                                   # m.py:5  lower[gelu]
  %2 = erf %1 : f64[2,3]                                                       # m.py:5  lower[gelu]
  %3 = full {dtype="f64", shape=(2, 3), value=0.5} : f64[2,3]                  # m.py:5  lower[gelu]
  %4 = mul %3, %x : f64[2,3]                                                   # m.py:5  lower[gelu]
  %5 = full {dtype="f64", shape=(2, 3), value=1.0} : f64[2,3]                  # m.py:5  lower[gelu]
  %6 = add %5, %2 : f64[2,3]                                                   # m.py:5  lower[gelu]
  %7 = mul %4, %6 : f64[2,3]                                                   # m.py:5  lower[gelu]
  %8 = reduce_sum %x {axes=(1,)} : f64[2]  # m.py:6  lower[layer_norm]
  %9 = full {dtype="f64", shape=(2,), value=3.0} : f64[2]  # m.py:6  lower[layer_norm]
  %10 = div %8, %9 : f64[2]  # m.py:6  lower[layer_norm]
  %11 = broadcast_in_dim %10 {dims=(0,), shape=(2, 3)} : f64[2,3]  # m.py:6  lower[layer_norm]
  %12 = sub %x, %11 : f64[2,3]  # m.py:6  lower[layer_norm]
  %13 = mul %12, %12 : f64[2,3]  # m.py:6  lower[layer_norm]
  %14 = reduce_sum %13 {axes=(1,)} : f64[2]  # m.py:6  lower[layer_norm]
  %15 = full {dtype="f64", shape=(2,), value=3.0} : f64[2]  # m.py:6  lower[layer_norm]
  %16 = div %14, %15 : f64[2]  # m.py:6  lower[layer_norm]
  %17 = full {dtype="f64", shape=(2,), value=0.001} : f64[2]  # m.py:6  lower[layer_norm]
  %18 = add %16, %17 : f64[2]  # m.py:6  lower[layer_norm]
  %19 = sqrt %18 : f64[2]  # m.py:6  lower[layer_norm]
  %20 = broadcast_in_dim %19 {dims=(0,), shape=(2, 3)} : f64[2,3]  # m.py:6  lower[layer_norm]
  %21 = div %12, %20 : f64[2,3]  # m.py:6  lower[layer_norm]
  return %7, %21
}""")


def test_lower_leaves_other_ops_alone():
    src = """
func @f(%x: f64[4], %w: f64[4]) -> (f64[]) {
  %0 = mul %x, %w : f64[4]                 # model.py:7
  %1 = tanh %0 : f64[4]                    # model.py:7  vjp[tanh]
  %2 = reduce_sum %1 {axes=(0,)} : f64[]   # model.py:8
  return %2
}"""
    golden(lower, src, src)


def _composite_fn(prim, x_type, params, with_targets=False):
    b = Builder(prim)
    inputs = [b.param(x_type, "x")]
    if with_targets:
        inputs.append(b.param(TensorType("i64", x_type.shape[:1]), "t"))
    return b.build([b.add1(prim, inputs, params, loc="m.py:1")])


ROWS = {
    "random": lambda rng, n, c: rng.standard_normal((n, c)) * 3,
    "large": lambda rng, n, c: np.full((n, c), 1000.0) + rng.standard_normal((n, c)),
    "very negative": lambda rng, n, c: np.full((n, c), -1000.0) + rng.standard_normal((n, c)),
    "spread": lambda rng, n, c: rng.choice([-1000.0, 0.0, 1000.0, 1e-3], size=(n, c)),
    "-inf rows": lambda rng, n, c: np.where(np.arange(n)[:, None] % 2 == 0, -np.inf,
                                            rng.standard_normal((n, c))),
    "some -inf": lambda rng, n, c: np.where(rng.random((n, c)) < 0.4, -np.inf,
                                            rng.standard_normal((n, c))),
    "+inf entries": lambda rng, n, c: np.where(rng.random((n, c)) < 0.2, np.inf,
                                               rng.standard_normal((n, c))),
}

CASES = [
    ("softmax", {"axis": 1}), ("softmax", {"axis": 0}),
    ("log_softmax", {"axis": 1}), ("log_softmax", {"axis": 0}),
    ("logsumexp", {"axes": (1,)}), ("logsumexp", {"axes": (0, 1)}), ("logsumexp", {"axes": (0,)}),
    ("cross_entropy", {}),
    ("layer_norm", {"ndim": 1, "eps": 1e-5}), ("layer_norm", {"ndim": 2, "eps": 1e-3}),
    ("gelu", {"approximate": False}), ("gelu", {"approximate": True}),
]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("rows", list(ROWS))
@pytest.mark.parametrize("prim, params", CASES, ids=lambda c: str(c))
def test_lowered_composite_matches_interpreter(prim, params, rows, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{prim} {rows} {dtype}".encode()))
    x = ROWS[rows](rng, 5, 7).astype(TensorType(dtype, ()).np_dtype)
    args = [x]
    if prim == "cross_entropy":
        args.append(rng.integers(0, 7, size=5))
    fn = _composite_fn(prim, TensorType.of(x), params, prim == "cross_entropy")
    lowered = run_pass(lower, fn)
    assert not set(prims(lowered)) & COMPOSITES
    assert all(op.loc == "m.py:1" and op.note == f"lower[{prim}]" for op in lowered.ops)
    with np.errstate(all="ignore"):
        (want,), (got,) = eval_function(fn, args), eval_function(lowered, args)
    assert got.dtype == want.dtype and got.shape == want.shape
    # the reference itself rounds x - logsumexp(x) to the precision of x's magnitude
    eps = np.finfo(x.dtype).eps
    scale = max(1.0, np.abs(x[np.isfinite(x)]).max(initial=0))
    np.testing.assert_allclose(got, want, rtol=32 * eps, atol=32 * eps * scale, equal_nan=True)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_lowered_logsumexp_of_infinite_rows(dtype):
    x = np.array([[-np.inf] * 3, [np.inf, 0.0, 1.0], [np.inf] * 3, [1000.0, 1000.0, 1000.0]],
                 dtype=TensorType(dtype, ()).np_dtype)
    fn = lower(_composite_fn("logsumexp", TensorType.of(x), {"axes": (1,)}))
    (got,) = eval_function(fn, [x])
    assert got[0] == -np.inf and got[1] == np.inf and got[2] == np.inf
    np.testing.assert_allclose(got[3], 1000 + math.log(3), rtol=1e-6)
    (sm,) = eval_function(lower(_composite_fn("softmax", TensorType.of(x), {"axis": 1})), [x])
    assert np.isnan(sm[0]).all() and np.isnan(sm[2]).all()
    np.testing.assert_allclose(sm[3], np.full(3, 1 / 3), rtol=1e-6)


# ---------------------------------------------------------------- simplify

def test_simplify_multiplicative_and_additive_identities():
    golden(simplify, """
func @f(%x: f64[3], %i: i64[3]) -> (f64[3], i64[3]) {
  %0 = full {dtype="f64", shape=(3,), value=1.0} : f64[3]
  %1 = full {dtype="f64", shape=(3,), value=-0.0} : f64[3]
  %2 = mul %x, %0 : f64[3]    # a.py:1
  %3 = mul %0, %2 : f64[3]    # a.py:2
  %4 = add %3, %1 : f64[3]    # a.py:3
  %5 = add %1, %4 : f64[3]    # a.py:4
  %z = full {dtype="f64", shape=(3,), value=0.0} : f64[3]
  %6 = sub %5, %z : f64[3]    # a.py:5
  %7 = div %6, %0 : f64[3]    # a.py:6
  %8 = pow %7, %0 : f64[3]    # a.py:7
  %9 = neg %8 : f64[3]        # a.py:8
  %10 = neg %9 : f64[3]       # a.py:9
  %11 = full {dtype="i64", shape=(3,), value=1} : i64[3]
  %12 = mul %i, %11 : i64[3]
  %13 = div %12, %11 : i64[3]
  return %10, %13
}""", """
func @f(%x: f64[3], %i: i64[3]) -> (f64[3], i64[3]) {
  %0 = full {dtype="f64", shape=(3,), value=1.0} : f64[3]
  %1 = full {dtype="f64", shape=(3,), value=-0.0} : f64[3]
  %2 = full {dtype="f64", shape=(3,), value=0.0} : f64[3]
  %3 = neg %x : f64[3]        # a.py:8
  %4 = full {dtype="i64", shape=(3,), value=1} : i64[3]
  return %x, %i
}""")


def test_simplify_keeps_x_plus_positive_zero():
    # -0.0 + 0.0 is +0.0, so x + 0.0 is not x
    fn = parse("""
func @f(%x: f64[3]) -> (f64[3]) {
  %0 = full {dtype="f64", shape=(3,), value=0.0} : f64[3]
  %1 = add %x, %0 : f64[3]
  return %1
}""")
    assert [op.prim for op in simplify(fn).ops] == ["full", "add"]


def test_simplify_never_touches_unsafe_identities():
    src = """
func @f(%x: f64[3]) -> (f64[3], f64[3], f64[3], f64[3], f64[3]) {
  %0 = full {dtype="f64", shape=(3,), value=0.0} : f64[3]
  %1 = mul %x, %0 : f64[3]
  %2 = sub %x, %x : f64[3]
  %3 = full {dtype="f64", shape=(3,), value=1.0} : f64[3]
  %4 = add %x, %3 : f64[3]
  %5 = add %4, %3 : f64[3]
  %6 = full {dtype="f64", shape=(3,), value=-0.0} : f64[3]
  %7 = sub %x, %6 : f64[3]
  %8 = div %0, %x : f64[3]
  return %1, %2, %5, %7, %8
}"""
    golden(simplify, src, src)


def test_simplify_pow_two_becomes_mul():
    golden(simplify, """
func @f(%x: f32[2]) -> (f32[2]) {
  %0 = full {dtype="f32", shape=(2,), value=2.0} : f32[2]
  %1 = pow %x, %0 : f32[2]   # p.py:3  vjp[pow]
  return %1
}""", """
func @f(%x: f32[2]) -> (f32[2]) {
  %0 = full {dtype="f32", shape=(2,), value=2.0} : f32[2]
  %1 = mul %x, %x : f32[2]   # p.py:3  vjp[pow]
  return %1
}""")


def test_simplify_shape_ops_compose_and_vanish():
    golden(simplify, """
func @f(%x: f64[2,3], %y: f64[3]) -> (f64[6], f64[2,3], f64[3,2], f64[4,2,3], f64[2,3]) {
  %0 = reshape %x {shape=(3, 2)} : f64[3,2]           # s.py:1
  %1 = reshape %0 {shape=(6,)} : f64[6]               # s.py:2
  %2 = reshape %x {shape=(2, 3)} : f64[2,3]           # s.py:3
  %3 = transpose %x {perm=(1, 0)} : f64[3,2]          # s.py:4
  %4 = transpose %3 {perm=(1, 0)} : f64[2,3]          # s.py:5
  %5 = transpose %4 {perm=(1, 0)} : f64[3,2]          # s.py:6
  %6 = broadcast_in_dim %y {dims=(1,), shape=(2, 3)} : f64[2,3]        # s.py:7
  %7 = broadcast_in_dim %6 {dims=(1, 2), shape=(4, 2, 3)} : f64[4,2,3]  # s.py:8
  %8 = broadcast_in_dim %x {dims=(0, 1), shape=(2, 3)} : f64[2,3]      # s.py:9
  %9 = convert %8 {dtype="f64"} : f64[2,3]            # s.py:10
  %10 = transpose %x {perm=(0, 1)} : f64[2,3]         # s.py:11
  %11 = add %9, %10 : f64[2,3]                        # s.py:12
  return %1, %2, %5, %7, %11
}""", """
func @f(%x: f64[2,3], %y: f64[3]) -> (f64[6], f64[2,3], f64[3,2], f64[4,2,3], f64[2,3]) {
  %0 = reshape %x {shape=(3, 2)} : f64[3,2]           # s.py:1
  %1 = reshape %x {shape=(6,)} : f64[6]               # s.py:2
  %2 = transpose %x {perm=(1, 0)} : f64[3,2]          # s.py:4
  %3 = transpose %x {perm=(1, 0)} : f64[3,2]          # s.py:6
  %4 = broadcast_in_dim %y {dims=(1,), shape=(2, 3)} : f64[2,3]        # s.py:7
  %5 = broadcast_in_dim %y {dims=(2,), shape=(4, 2, 3)} : f64[4,2,3]   # s.py:8
  %6 = add %x, %x : f64[2,3]                          # s.py:12
  return %1, %x, %3, %5, %6
}""")


def test_simplify_composes_3d_transposes():
    fn = run_pass(simplify, parse("""
func @f(%x: f64[2,3,4]) -> (f64[3,4,2]) {
  %0 = transpose %x {perm=(2, 0, 1)} : f64[4,2,3]
  %1 = transpose %0 {perm=(2, 0, 1)} : f64[3,4,2]
  return %1
}"""))
    x = np.arange(24.0).reshape(2, 3, 4)
    assert fn.ops[-1].params["perm"] == (1, 2, 0)
    want = x.transpose(2, 0, 1).transpose(2, 0, 1)
    np.testing.assert_array_equal(eval_function(fn, [x])[0], want)


def test_simplify_select_and_convert():
    golden(simplify, """
func @f(%p: bool[2], %x: f32[2]) -> (f32[2], f32[2], f32[2], f64[2]) {
  %0 = select %p, %x, %x : f32[2]
  %1 = full {dtype="bool", shape=(2,), value=True} : bool[2]
  %2 = neg %x : f32[2]
  %3 = select %1, %2, %x : f32[2]
  %4 = full {dtype="bool", shape=(2,), value=False} : bool[2]
  %5 = select %4, %2, %x : f32[2]
  %6 = convert %x {dtype="f64"} : f64[2]
  return %0, %3, %5, %6
}""", """
func @f(%p: bool[2], %x: f32[2]) -> (f32[2], f32[2], f32[2], f64[2]) {
  %0 = full {dtype="bool", shape=(2,), value=True} : bool[2]
  %1 = neg %x : f32[2]
  %2 = full {dtype="bool", shape=(2,), value=False} : bool[2]
  %3 = convert %x {dtype="f64"} : f64[2]
  return %x, %1, %x, %3
}""")


def test_simplify_folds_constants():
    golden(simplify, """
func @f(%x: f64[2,3]) -> (f64[2,3], f64[2,3], f64[], i64[3]) {
  %0 = full {dtype="f64", shape=(), value=2.0} : f64[]                     # c.py:1
  %1 = broadcast_in_dim %0 {dims=(), shape=(2, 3)} : f64[2,3]              # c.py:2
  %2 = exp %1 : f64[2,3]                                                   # c.py:3
  %3 = mul %x, %2 : f64[2,3]                                               # c.py:4
  %4 = constant {value=array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], f64)} : f64[2,3]
  %5 = constant {value=array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], f64)} : f64[2,3]
  %6 = add %4, %5 : f64[2,3]                                               # c.py:7
  %7 = reduce_sum %6 {axes=(0, 1)} : f64[]                                 # c.py:8
  %8 = iota {axis=0, dtype="i64", shape=(3,)} : i64[3]
  %9 = iota {axis=0, dtype="i64", shape=(3,)} : i64[3]
  %10 = mul %8, %9 : i64[3]                                                # c.py:11
  return %3, %6, %7, %10
}""", """
func @f(%x: f64[2,3]) -> (f64[2,3], f64[2,3], f64[], i64[3]) {
  %0 = full {dtype="f64", shape=(), value=2.0} : f64[]                     # c.py:1
  %1 = full {dtype="f64", shape=(2, 3), value=2.0} : f64[2,3]              # c.py:2
  %2 = full {dtype="f64", shape=(2, 3), value=7.38905609893065} : f64[2,3]   # c.py:3
  %3 = mul %x, %2 : f64[2,3]                                               # c.py:4
  %4 = constant {value=array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], f64)} : f64[2,3]
  %5 = full {dtype="f64", shape=(2, 3), value=1.0} : f64[2,3]
  %6 = constant {value=array([[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]], f64)} : f64[2,3]   # c.py:7
  %7 = full {dtype="f64", shape=(), value=27.0} : f64[]                    # c.py:8
  %8 = iota {axis=0, dtype="i64", shape=(3,)} : i64[3]
  %9 = iota {axis=0, dtype="i64", shape=(3,)} : i64[3]
  %10 = constant {value=array([0, 1, 4], i64)} : i64[3]                    # c.py:11
  return %3, %6, %7, %10
}""")


def test_simplify_does_not_bloat_the_ir_with_large_constants():
    b = Builder("big")
    iota = b.add1("iota", [], {"shape": (100, 100), "dtype": "f64", "axis": 1})
    ones = b.add1("full", [], {"shape": (100, 100), "dtype": "f64", "value": 1.0})
    nonuniform = b.add1("add", [iota, ones])                      # 10 000 distinct values
    big = b.add1("full", [], {"shape": (1000, 1000), "dtype": "f32", "value": 3.0})
    uniform = b.add1("sqrt", [b.add1("mul", [big, big])])          # folded on one element
    summed = b.add1("reduce_sum", [ones], {"axes": (0,)})         # uniform result: a full
    fn = run_pass(simplify, b.build([nonuniform, uniform, summed]))
    assert [op.prim for op in fn.ops] == ["iota", "full", "add", "full", "full", "full", "full"]
    assert fn.ops[-2].params == {"shape": (1000, 1000), "dtype": "f32", "value": 3.0}
    assert fn.ops[-1].params == {"shape": (100,), "dtype": "f64", "value": 100.0}


def test_simplify_leaves_folding_errors_to_run_time():
    src = """
func @f() -> (f64[2]) {
  %0 = constant {value=array([1.0, 2.0], f64)} : f64[2]
  %1 = constant {value=array([5, 0], i64)} : i64[2]
  %2 = take %0, %1 {axis=0} : f64[2]
  return %2
}"""
    golden(simplify, src, src)


def test_simplify_uniform_constant_becomes_full():
    golden(simplify, """
func @f() -> (f32[2,2], f64[2]) {
  %0 = constant {value=array([[1.5, 1.5], [1.5, 1.5]], f32)} : f32[2,2]   # k.py:1
  %1 = constant {value=array([0.0, -0.0], f64)} : f64[2]
  return %0, %1
}""", """
func @f() -> (f32[2,2], f64[2]) {
  %0 = full {dtype="f32", shape=(2, 2), value=1.5} : f32[2,2]   # k.py:1
  %1 = constant {value=array([0.0, -0.0], f64)} : f64[2]
  return %0, %1
}""")


# ---------------------------------------------------------------- cse

def test_cse_merges_equal_ops_transitively():
    golden(cse, """
func @f(%x: f64[3], %y: f64[3]) -> (f64[3]) {
  %0 = mul %x, %y : f64[3]                     # a.py:1
  %1 = mul %x, %y : f64[3]                     # a.py:2
  %2 = tanh %0 : f64[3]                        # a.py:3
  %3 = tanh %1 : f64[3]                        # a.py:4
  %4 = mul %y, %x : f64[3]                     # a.py:5
  %5 = add %2, %3 : f64[3]
  %6 = add %5, %4 : f64[3]
  return %6
}""", """
func @f(%x: f64[3], %y: f64[3]) -> (f64[3]) {
  %0 = mul %x, %y : f64[3]                     # a.py:1
  %1 = tanh %0 : f64[3]                        # a.py:3
  %2 = mul %y, %x : f64[3]                     # a.py:5
  %3 = add %1, %1 : f64[3]
  %4 = add %3, %2 : f64[3]
  return %4
}""")


def test_cse_compares_params_exactly():
    golden(cse, """
func @f() -> (f64[2], f64[2], f64[2], f64[2], f64[2], f64[2], f32[2], f64[2], f64[2], i64[2]) {
  %0 = full {dtype="f64", shape=(2,), value=0.0} : f64[2]
  %1 = full {dtype="f64", shape=(2,), value=-0.0} : f64[2]
  %2 = full {dtype="f64", shape=(2,), value=nan} : f64[2]
  %3 = full {dtype="f64", shape=(2,), value=nan} : f64[2]
  %4 = full {dtype="f64", shape=(2,), value=0.0} : f64[2]
  %5 = constant {value=array([1.0, 2.0], f64)} : f64[2]
  %6 = constant {value=array([1.0, 2.0], f32)} : f32[2]
  %7 = constant {value=array([1.0, 2.0], f64)} : f64[2]
  %8 = constant {value=array([1.0, 3.0], f64)} : f64[2]
  %9 = constant {value=array([1, 2], i64)} : i64[2]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9
}""", """
func @f() -> (f64[2], f64[2], f64[2], f64[2], f64[2], f64[2], f32[2], f64[2], f64[2], i64[2]) {
  %0 = full {dtype="f64", shape=(2,), value=0.0} : f64[2]
  %1 = full {dtype="f64", shape=(2,), value=-0.0} : f64[2]
  %2 = full {dtype="f64", shape=(2,), value=nan} : f64[2]
  %3 = constant {value=array([1.0, 2.0], f64)} : f64[2]
  %4 = constant {value=array([1.0, 2.0], f32)} : f32[2]
  %5 = constant {value=array([1.0, 3.0], f64)} : f64[2]
  %6 = constant {value=array([1, 2], i64)} : i64[2]
  return %0, %1, %2, %2, %0, %3, %4, %3, %5, %6
}""")


def test_cse_keeps_ops_with_different_params():
    src = """
func @f(%x: f64[2,3]) -> (f64[3], f64[2], f64[3,2], f64[6]) {
  %0 = reduce_sum %x {axes=(0,)} : f64[3]
  %1 = reduce_sum %x {axes=(1,)} : f64[2]
  %2 = reshape %x {shape=(3, 2)} : f64[3,2]
  %3 = reshape %x {shape=(6,)} : f64[6]
  return %0, %1, %2, %3
}"""
    golden(cse, src, src)


# ---------------------------------------------------------------- dce

def test_dce_removes_dead_ops_and_keeps_params():
    golden(dce, """
func @f(%x: f64[3], %unused: f32[2]) -> (f64[3]) {
  %0 = exp %x : f64[3]                   # d.py:1
  %1 = log %0 : f64[3]                   # d.py:2
  %2 = neg %x : f64[3]                   # d.py:3
  %3 = full {dtype="f64", shape=(3,), value=1.0} : f64[3]
  %4 = add %2, %3 : f64[3]               # d.py:5
  %5 = tanh %4 : f64[3]                  # d.py:6
  return %4
}""", """
func @f(%x: f64[3], %unused: f32[2]) -> (f64[3]) {
  %0 = neg %x : f64[3]                   # d.py:3
  %1 = full {dtype="f64", shape=(3,), value=1.0} : f64[3]
  %2 = add %0, %1 : f64[3]               # d.py:5
  return %2
}""")


def test_dce_of_a_param_result():
    golden(dce, """
func @f(%x: f64[3]) -> (f64[3], f64[3]) {
  %0 = exp %x : f64[3]
  return %x, %x
}""", """
func @f(%x: f64[3]) -> (f64[3], f64[3]) {
  return %x, %x
}""")


def _chain(n: int):
    """A function of n ops: a long dependency chain with dead and duplicate work mixed in."""
    b = Builder("chain")
    x = b.param(TensorType("f64", (8,)), "x")
    one = b.add1("full", [], {"shape": (8,), "dtype": "f64", "value": 1.0})
    h = x
    while len(b.ops) < n - 4:
        a = b.add1("mul", [h, one])                     # simplified away
        s1 = b.add1("sin", [a])
        s2 = b.add1("sin", [a])                         # merged by cse
        b.add1("exp", [s1])                             # dead
        h = b.add1("add", [s1, s2])
    h = b.add1("logsumexp", [h], {"axes": (0,)})
    return b.build([h])


def test_passes_are_iterative_on_deep_functions():
    fn = _chain(10_000)
    for _, run in PASSES:
        fn = run(fn)
    assert prims(fn).count("sin") == prims(fn).count("add") - 1
    assert "exp" in prims(fn) and len(fn.ops) < 5000


def test_optimize_of_ten_thousand_ops_runs():
    fn = _chain(10_000)
    assert len(fn.ops) >= 9_990
    out = optimize(fn)
    x = np.linspace(-1, 1, 8)
    np.testing.assert_allclose(eval_function(out, [x]), eval_function(fn, [x]))


# ---------------------------------------------------------------- the pipeline on traced programs

def test_pass_order():
    assert [name for name, _ in PASSES] == ["lower", "simplify", "cse", "dce", "lower_barriers"]


def _mlp(x, w):
    return np.sum(np.tanh(x @ w + 1.0) * 1.0)


def _leaky(x, w):
    return np.where(x > 0, x, 0.1 * x) * 1.0 + 0.0 - w.sum()


def _shapes(x, w):
    return (x.T.T.reshape(-1).reshape(x.shape) + 0.0) ** 2 + x ** 1


def _relu_mean(x, w):
    return np.maximum(x, 0).mean(axis=0) + np.maximum(x, 0).mean(axis=0)


def _manual_softmax(x, w):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _constants(x, w):
    return x * np.ones(x.shape) + np.arange(x.shape[1]) * 2.0 + np.exp(np.zeros(x.shape[1]))


def _concat(x, w):
    return np.concatenate([x, x], axis=0)[::2] - np.concatenate([x, x], axis=0)[1::2]


def _all_composites(x, w):
    y = fnn.softmax(x) + fnn.log_softmax(x, axis=0) + fnn.layer_norm(x)
    y = y + fnn.gelu(x) + fnn.gelu(x, approximate=True)
    return y.sum() + fnn.logsumexp(x, axis=1).sum() + fnn.logsumexp(x)


ZOO = [
    _mlp, _leaky, _shapes, _relu_mean, _manual_softmax, _constants, _concat, _all_composites,
    lambda x, w: fnn.softmax(x @ w, axis=0),
    lambda x, w: fnn.log_softmax(x),
    lambda x, w: fnn.logsumexp(x, axis=0),
    lambda x, w: fnn.cross_entropy(x, np.array([0, 3, 1, 2, 3])),
    lambda x, w: fnn.layer_norm(x.reshape(5, 2, 2), ndim=2),
    lambda x, w: fnn.gelu(x @ w) * fnn.gelu(x @ w),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("f", ZOO, ids=lambda f: f.__name__)
def test_optimize_preserves_semantics(f, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((5, 4)) * 3).astype(dtype)
    w = rng.standard_normal((4, 4)).astype(dtype)
    fn = fg.make_ir(f)(x, w)
    out = fn
    for _, run in PASSES:
        out = run_pass(run, out)
    assert not set(prims(out)) & COMPOSITES
    assert str(optimize(fn)) == str(out)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for got, want in zip(eval_function(out, [x, w]), eval_function(fn, [x, w]), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_optimize_with_debug_verifies_and_prints(monkeypatch, capsys):
    monkeypatch.setenv("FUSEGRAD_DEBUG", "2")
    fn = fg.make_ir(_mlp)(np.ones((2, 3)), np.ones((3, 4)))
    optimize(fn)
    printed = capsys.readouterr().out
    assert [line for line in printed.splitlines() if line.startswith("// ----")] == [
        f"// ---- after {name} ----" for name, _ in PASSES]


def test_optimize_debug_catches_a_broken_pass(monkeypatch):
    def broken(fn):   # drops every op: the result is never defined
        return Function(fn.name, fn.params, [], fn.results)
    monkeypatch.setattr(pipeline, "PASSES", [("broken", broken)])
    fn = fg.make_ir(_mlp)(np.ones((2, 3)), np.ones((3, 4)))
    monkeypatch.setenv("FUSEGRAD_DEBUG", "1")
    with pytest.raises(fg.ir.VerifyError, match="never defined"):
        pipeline.optimize(fn)
    monkeypatch.setenv("FUSEGRAD_DEBUG", "")
    pipeline.optimize(fn)
