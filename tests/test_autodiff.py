"""The autodiff pass (passes/autodiff.py): IR text of gradients, provenance notes, skipping,
zeros, fan-in, general VJPs, deep chains, and the VJP inner-product identity for every rule.

The identity <vjp(u), v> == <u, jvp(v)> is checked per primitive on the IR the pass emits, run
by the interpreter, with jvp(v) from central finite differences in float64.
"""

import re
import sys

import numpy as np
import pytest

import fusegrad as fg
from domains import TARGETS, Domains, case_prim, primitive_cases
from fusegrad import lax
from fusegrad.formulas import NON_DIFFERENTIABLE, vjp_rules
from fusegrad.ir.types import TensorType
from fusegrad.passes.autodiff import vjp
from fusegrad.runtime.interpreter import eval_function
from fusegrad.transforms import grad

F64 = TensorType("f64", (4,))


def loss(x, w, b):
    h = np.tanh(x * w + b)
    return np.sum(h * h)


X, W, B = np.linspace(-1, 1, 4), np.full(4, 0.5), np.full(4, 0.1)


def test_grad_ir_has_forward_ops_then_annotated_backward_ops():
    text = str(fg.make_ir(grad(loss, argnums=(0, 1, 2)))(X, W, B))
    lines = text.splitlines()
    assert lines[0].startswith("func @")
    assert "%0 = mul %x, %w : f64[4]" in text
    assert "tanh" in text and "reduce_sum" in text
    assert re.search(r"vjp seed of %\d+", text)
    for prim in ("reduce_sum", "tanh", "mul"):
        assert re.search(rf"# test_autodiff\.py:\d+  vjp\[{prim}\] of %\d+", text), prim
    # the backward of `mul` is annotated with the forward mul's name, %0
    assert re.search(r"= mul %\d+, %w : f64\[4\] +# test_autodiff\.py:\d+  vjp\[mul\] of %0",
                     text)
    # every backward op carries the forward op's source line
    fwd_line = re.search(r"%0 = mul .*# (test_autodiff\.py:\d+)", text).group(1)
    assert all(fwd_line in line for line in lines if "vjp[mul] of %0" in line)


def test_pass_result_layout_results_then_grads():
    fn = fg.make_ir(loss)(X, W, B)
    g = vjp(fn, [1])
    assert g.result_types == (TensorType("f64", ()), F64)
    assert g.params[:3] == fn.params            # forward params and ops are shared, not copied
    assert g.ops[:len(fn.ops)] == fn.ops
    value, gw = eval_function(g, [X, W, B])
    assert value == pytest.approx(loss(X, W, B))
    h = np.tanh(X * W + B)
    np.testing.assert_allclose(gw, 2 * h * (1 - h * h) * X)


def test_cotangent_params_give_a_general_vjp():
    fn = fg.make_ir(lambda x, w: np.tanh(x * w))(X, W)
    g = vjp(fn, [0, 1], outputs=(0,), cotangent_params=True)
    assert len(g.params) == 3 and g.params[2].type == F64
    assert "%g: f64[4]" in str(g)
    u = np.arange(4.0)
    out, gx, gw = eval_function(g, [X, W, u])
    d = u * (1 - np.tanh(X * W) ** 2)
    np.testing.assert_allclose(out, np.tanh(X * W))
    np.testing.assert_allclose(gx, d * W)
    np.testing.assert_allclose(gw, d * X)


def test_unused_param_gets_zeros_and_integer_paths_are_skipped():
    def f(x, n, y):
        return np.sum(x * 2.0) + np.sum(n * 3)       # y unused; n is an integer array

    fn = fg.make_ir(f)(X, np.arange(4), W)
    g = vjp(fn, [0, 2])
    _, gx, gy = eval_function(g, [X, np.arange(4), W])
    np.testing.assert_allclose(gx, np.full(4, 2.0))
    np.testing.assert_array_equal(gy, np.zeros(4))
    assert "vjp zeros for %y" in str(g)
    assert not any(op.note and "convert" in op.note for op in g.ops)  # no vjp of the int path


def test_non_differentiable_ops_stop_gradients():
    fn = fg.make_ir(lambda x: np.sum(np.where(x > 0, x, 0.0) * np.sign(x)))(X)
    g = vjp(fn, [0])
    notes = [op.note for op in g.ops if op.note]
    assert not any("sign" in n or "[gt]" in n for n in notes)
    np.testing.assert_allclose(eval_function(g, [X])[1], (X > 0) * 1.0)


def test_fan_out_cotangents_are_summed():
    fn = fg.make_ir(lambda x: np.sum(x * x + x))(X)
    g = vjp(fn, [0])
    np.testing.assert_allclose(eval_function(g, [X])[1], 2 * X + 1)


def test_param_differentiated_twice_in_wrt():
    fn = fg.make_ir(lambda x: np.sum(x * x))(X)
    _, g1, g2 = eval_function(vjp(fn, [0, 0]), [X])
    np.testing.assert_allclose(g1, 2 * X)
    np.testing.assert_allclose(g2, 2 * X)


def test_output_not_depending_on_wrt_gives_zeros():
    fn = fg.make_ir(lambda x, y: np.sum(y))(X, W)
    g = vjp(fn, [0])
    np.testing.assert_array_equal(eval_function(g, [X, W])[1], np.zeros(4))


def test_float32_cotangents_stay_float32():
    x32 = X.astype(np.float32)
    fn = fg.make_ir(lambda x, y: np.sum(x * y))(x32, W)   # x promoted to f64 in the IR
    g = vjp(fn, [0, 1])
    assert g.result_types[1] == TensorType("f32", (4,))
    _, gx, gy = eval_function(g, [x32, W])
    assert gx.dtype == np.float32 and gy.dtype == np.float64


def test_errors_name_the_problem():
    fn = fg.make_ir(lambda x, n: x * n)(X, np.arange(4))
    with pytest.raises(TypeError, match="i64"):
        vjp(fn, [1])
    with pytest.raises(TypeError, match="cotangent_params=True"):
        vjp(fn, [0])                        # non-scalar result seeded with 1
    with pytest.raises(ValueError, match="out of range"):
        vjp(fn, [5])


def test_missing_rule_is_reported(monkeypatch):
    monkeypatch.delitem(vjp_rules, "tanh")
    fn = fg.make_ir(lambda x: np.sum(np.tanh(x)))(X)
    with pytest.raises(NotImplementedError, match="tanh"):
        vjp(fn, [0])


def test_every_primitive_is_differentiable_or_listed():
    from fusegrad.ir.primitives import PRIMITIVES
    missing = set(PRIMITIVES) - set(vjp_rules) - NON_DIFFERENTIABLE
    assert missing == set()


def test_long_chain_ir_differentiates_without_recursion():
    """The pass and the printer on a 5 000-op chain at a recursion limit of 200 (the 100 000-op
    chain through jit runs in test_nested.py)."""
    def chain(x):
        y = x
        for _ in range(5_000):
            y = y * 1.0000001
        return y

    fn = fg.make_ir(chain)(1.0)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        g = vjp(fn, [0])
        text = str(g)
    finally:
        sys.setrecursionlimit(old)
    assert text.count("vjp[mul]") >= 5_000
    assert eval_function(g, [np.array(1.0)])[1] == pytest.approx(1.0000001 ** 5_000)


# -- the VJP inner-product identity, per primitive ---------------------------------------------

_domains = Domains(seed=7, margin=0.3)
rng = _domains.rng
normal, positive = _domains.normal, _domains.positive
away_from_zero, distinct = _domains.away_from_zero, _domains.distinct


# The shared per-primitive table, as IR programs: integer operands are closed over (every
# traced input is differentiated), matmul needs rank >= 2 in the IR, and convert changes dtype.
# A traced while_loop has no reverse mode (formulas/control.py; test_control_flow.py checks
# the error), so its row runs on the eager engine only.
IDENTITY_CASES = {case: row for case, row in primitive_cases(_domains).items()
                  if not case.startswith("matmul_vec") and case != "while_loop"}
IDENTITY_CASES["cross_entropy"] = (lambda x: lax.cross_entropy(x, TARGETS), [normal(4, 3)])
IDENTITY_CASES["convert"] = (lambda x: lax.convert(x, "f32"), [normal(2, 3)])


def test_identity_cases_cover_every_rule():
    covered = {case_prim(case) for case in IDENTITY_CASES}
    assert set(vjp_rules) - {"while_loop"} <= covered


@pytest.mark.parametrize("case", sorted(IDENTITY_CASES))
def test_vjp_inner_product_identity(case):
    fun, xs = IDENTITY_CASES[case]
    fn = fg.make_ir(fun)(*xs)
    assert any(op.prim == case_prim(case) for op in fn.ops)
    out_type = fn.result_types[0]
    u = rng.standard_normal(out_type.shape).astype(out_type.np_dtype)
    vs = [rng.standard_normal(x.shape) for x in xs]
    g = vjp(fn, range(len(xs)), cotangent_params=True)
    x_bars = eval_function(g, [*xs, u])[1:]
    lhs = sum(np.vdot(xb, v) for xb, v in zip(x_bars, vs))
    single = "f32" in (out_type.dtype, *(p.type.dtype for p in fn.params))
    eps, tol = (1e-2, 1e-3) if single else (1e-6, 1e-6)  # convert: linear, so a big eps is exact
    plus = eval_function(fn, [x + eps * v for x, v in zip(xs, vs)])[0].astype(np.float64)
    minus = eval_function(fn, [x - eps * v for x, v in zip(xs, vs)])[0].astype(np.float64)
    rhs = np.vdot(u, (plus - minus) / (2 * eps))
    assert lhs == pytest.approx(rhs, rel=tol, abs=tol)
