"""Folds in the kernel IR's plan and loops (codegen/kernel_ir/views.py, plan.py, loop_group.py):
a broadcast, transpose, slice or rev whose uses are all loop ops has no buffer (its uses load
the operand with a stride 0 on a broadcast axis), one that a use needs written out keeps its
buffer; elementwise math and the sum of what it computes are one loop, with no buffer for the
intermediate, in lanes of a fixed order (bit for bit, both renderers); first calls on eager,
interp and numba (the kernel IR, poison on) agree on size-1 axes, 0-d and empty arrays and
broadcasts of transposed operands."""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen.compile import load_module, njit_options, versions
from fusegrad.codegen.kernel_ir import Plan, build, compile_kernel_ir
from fusegrad.codegen.kernel_ir.loop_group import BLOCK
from fusegrad.codegen.kernel_ir.nodes import Load, Loop, Store, walk
from fusegrad.codegen.kernel_ir.rewrite import LANES, optimize
from fusegrad.ir import Builder, TensorType
from fusegrad.runtime.interpreter import eval_function
from fusegrad.testing import assert_backends_agree

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_POISON", "1")


def _places(program) -> set:
    return {(s.buf.slot, s.buf.byte) for g in program.groups for s in walk(g)
            if isinstance(s, Store)}


def _run(fn, args):
    run, _ = compile_kernel_ir(fn)
    got, want = run(list(args)), eval_function(fn, list(args))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-13, atol=1e-13)
    return got


def test_a_broadcast_into_elementwise_ops_has_no_buffer():
    b = Builder("spread")
    x = b.param(TensorType("f64", (300,)), "x")
    y = b.param(TensorType("f64", (200, 300)), "y")
    wide = b.add1("broadcast_in_dim", [x], {"dims": (1,), "shape": (200, 300)})
    fn = b.build([b.add1("mul", [b.add1("exp", [wide]), y])])
    plan = Plan(fn)
    assert wide in plan.views and wide not in plan.where and plan.arena == 0
    program, _ = build(fn, plan)
    loads = [s for g in program.groups for s in walk(g) if isinstance(s, Load)
             and s.buf == plan.where[x]]
    outer = [s.var for g in program.groups for s in g if isinstance(s, Loop)]
    assert len(loads) == 1 and outer[0] not in [r for r, _ in loads[0].index.terms]
    assert len(program.groups) == 1
    _run(fn, [RNG.normal(size=300), RNG.normal(size=(200, 300))])


def test_a_broadcast_that_would_leave_a_short_inner_loop_is_written_out():
    """x[:, None] * y over (5000, 3): its loads would make an inner loop of 3 (scalar math);
    written out, the exp and the product are one flat loop, which vectorizes. The rows' sums
    of 3 are a loop of their own, for the same reason."""
    b = Builder("short")
    x = b.param(TensorType("f64", (5000,)), "x")
    y = b.param(TensorType("f64", (5000, 3)), "y")
    wide = b.add1("broadcast_in_dim", [x], {"dims": (0,), "shape": (5000, 3)})
    e = b.add1("exp", [b.add1("mul", [wide, y])])
    fn = b.build([b.add1("reduce_sum", [e], {"axes": (1,)}), e])
    plan = Plan(fn)
    assert wide not in plan.views and wide in plan.where
    assert [[op.prim for op in g] for g in plan.groups] == [
        ["broadcast_in_dim"], ["mul", "exp"], ["reduce_sum"]]
    assert plan.loop_shape(plan.groups[1]) == (15000,)
    _run(fn, [RNG.normal(size=5000), RNG.normal(size=(5000, 3))])


def test_remaps_compose_and_one_a_use_needs_is_written_out():
    """A broadcast of a transposed slice is one map of the param; the same broadcast also
    returned (a result needs its buffer) is written out, and a matmul's operand too."""
    b = Builder("remaps")
    x = b.param(TensorType("f64", (6, 4)), "x")
    s = b.add1("slice", [x], {"start": (1, 0), "stop": (5, 4), "step": (2, 1)})     # (2, 4)
    t = b.add1("transpose", [s], {"perm": (1, 0)})                                 # (4, 2)
    wide = b.add1("broadcast_in_dim", [t], {"dims": (1, 2), "shape": (3, 4, 2)})
    kept = b.add1("broadcast_in_dim", [x], {"dims": (1, 2), "shape": (2, 6, 4)})
    rev = b.add1("rev", [x], {"axes": (0,)})
    y = b.param(TensorType("f64", (4, 5)), "y")
    fn = b.build([b.add1("neg", [wide]), kept, b.add1("matmul", [rev, y])])
    plan = Plan(fn)
    assert {s, t, wide} <= set(plan.views) and plan.views[wide][0] is x
    assert plan.views[wide][1:] == (4, (0, 1, 8))      # x[1 + 2 j, i]: offset 4, strides
    assert kept not in plan.views and rev not in plan.views and kept in plan.where
    _run(fn, [RNG.normal(size=(6, 4)), RNG.normal(size=(4, 5))])


def _w1(n, dtype="f64"):
    b = Builder("w1")
    x, w = (b.param(TensorType(dtype, (n,)), name) for name in "xw")
    e = b.add1("mul", [b.add1("tanh", [b.add1("mul", [x, w])]), b.add1("logistic", [x])])
    return b.build([b.add1("reduce_sum", [e], {"axes": (0,)})]), e


def test_math_and_its_sum_are_one_loop_without_a_buffer():
    fn, e = _w1(5000)
    program, plan = build(fn, Plan(fn))
    optimize(program, threads=False)
    assert len(program.groups) == 1 and e not in plan.where and e not in plan.stored
    loops = [s for s in program.groups[0] if isinstance(s, Loop)]
    width = BLOCK * LANES["f64"]
    assert [s.extent for s in loops] == [5000 // width, 5000 % width]
    assert [t.extent for t in loops[0].body if isinstance(t, Loop)] == [width]
    args = [RNG.normal(size=5000), RNG.normal(size=5000)]
    got = _run(fn, args)
    run, _ = compile_kernel_ir(fn, renderer="numba", cache=(load_module, njit_options,
                                                             versions))
    assert run(list(args))[0].tobytes() == got[0].tobytes()


@pytest.mark.parametrize("dtype", ["f64", "f32", "i64"])
def test_a_sum_in_a_loop_of_math_folds_in_lanes_in_a_fixed_order(dtype):
    n, width = 1037, BLOCK * LANES[dtype]
    b = Builder("lanes")
    x, w = (b.param(TensorType(dtype, (3, n)), name) for name in "xw")
    fn = b.build([b.add1("reduce_sum", [b.add1("mul", [x, w])], {"axes": (1,)})])
    kind = {"f64": np.float64, "f32": np.float32, "i64": np.int64}[dtype]
    x, w = (RNG.integers(-9, 9, (3, n)) if dtype == "i64" else
            RNG.normal(size=(3, n)).astype(kind) for _ in range(2))
    got = compile_kernel_ir(fn)[0]([x, w])[0]
    e = x * w                                        # exact: one rounding, as the loop's
    for row in range(3):
        lanes = [kind(0)] * width                    # lane l: e[l], e[l + width], ...
        for i in range(n - n % width):
            lanes[i % width] = lanes[i % width] + e[row, i]
        for i in range(n - n % width, n):            # lane 0 takes the tail
            lanes[0] = lanes[0] + e[row, i]
        while len(lanes) > 1:                        # then pairwise, in lane order
            lanes = [a + c for a, c in zip(lanes[::2], lanes[1::2])]
        assert got[row].tobytes() == np.asarray(lanes[0], kind).tobytes()


def test_jacrev_of_a_curve_fit_writes_no_broadcast_out():
    """fg.jacrev's pullback over a 1000-row identity: its broadcasts fold into the loads of
    one loop with its sums, so the arena holds no array of the batch's size."""
    def residuals(theta, t):
        p = theta.reshape(4, 3)
        return (p[:, 0:1] * np.exp(-p[:, 1:2] ** 2 * t) + p[:, 2:3]).sum(0)
    theta, t = RNG.normal(size=12) * 0.5, np.linspace(0, 2, 300)
    ir = fg.jit(fg.jacrev(residuals), backend="numba").lower(theta, t).ir
    plan = Plan(ir)
    spread = [op.out for op in ir.ops if op.prim == "broadcast_in_dim"
              and op.out.type.size == 300 * 4 * 300]
    assert spread and all(v in plan.views for v in spread)
    assert plan.arena < 300 * 4 * 300 * 8 // 4
    assert_backends_agree(fg.jacrev(residuals), theta, t, rtol=1e-12, atol=1e-12)


def _edges(x, y, s):
    """Broadcasts over size-1 axes, of a 0-d value and of a transposed operand, and sums."""
    wide = x.T[None, :, :] * y[:, None, :] + s          # (4, 3, 2) + 0-d
    return np.sum(np.tanh(wide), axis=2) + np.sum(wide * s, axis=(0, 2))


@pytest.mark.parametrize("shapes", [((2, 3), (4, 2), ()), ((1, 3), (4, 1), ()),
                                    ((0, 3), (4, 0), ()), ((2, 1), (1, 2), ())])
def test_first_calls_agree_across_backends_on_broadcast_edges(shapes):
    args = [RNG.normal(size=s) for s in shapes]
    assert_backends_agree(_edges, *args, rtol=1e-12, atol=1e-12)
    assert_backends_agree(fg.grad(lambda *a: np.sum(_edges(*a) ** 2), argnums=(0, 1, 2)),
                          *args, rtol=1e-12, atol=1e-12)


def test_a_long_sum_of_math_agrees_across_backends():
    x = RNG.normal(size=(40, 300))
    assert_backends_agree(fg.value_and_grad(
        lambda x: np.sum(np.tanh(x.T * x[:, 0]) * np.exp(-x.T)) + np.sum(x[:, ::-1] * 2.0)), x,
        rtol=1e-11, atol=1e-11)
