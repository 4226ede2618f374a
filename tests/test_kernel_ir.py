"""The kernel IR (codegen/kernel_ir): built from IR, rendered to LLVM, run; every primitive with
a scalar rule in every dtype its shape rule accepts agrees with the interpreter (poison on);
index ops check their bounds once, outside the loop, and wrap negative indices; the choice of
compiler is a query (codegen/choose.py) that names its reason."""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen.choose import choose
from fusegrad.codegen.kernel_ir import Plan, build, compile_kernel_ir, covers
from fusegrad.codegen.kernel_ir.nodes import Gemm, Loop, Raise, walk
from fusegrad.ir import PRIMITIVES, Builder, TensorType
from fusegrad.ir.registry import ShapeError, infer_types
from fusegrad.runtime.interpreter import eval_function
from fusegrad.testing import assert_backends_agree

DTYPES = ("f32", "f64", "i64", "bool")
SCALAR = sorted(name for name, p in PRIMITIVES.items() if p.scalar is not None)
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_POISON", "1")


def sample(dtype, shape, positive=False):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype == "i64":
        x = RNG.integers(-7, 8, shape)
        return np.abs(x) + 1 if positive else x
    x = RNG.standard_normal(shape) * 3
    x.flat[:4] = [0.0, -0.0, np.inf, np.nan][:x.size]
    return (np.abs(x) if positive else x).astype(np_dtype(dtype))


def np_dtype(dtype):
    return {"f32": np.float32, "f64": np.float64, "i64": np.int64, "bool": np.bool_}[dtype]


def operands(prim, dtype):
    """The operand types prim's shape rule accepts for dtype, with params, or None."""
    shape = (3, 7)
    t, p = TensorType(dtype, shape), TensorType("bool", shape)
    for types, params in (([t], {}), ([t, t], {}), ([p, t, t], {})):
        if prim == "convert":
            return [t], [{"dtype": d} for d in DTYPES]
        try:
            infer_types(prim, types, params)
            return types, [params]
        except ShapeError:
            continue
    return None


def cases():
    for prim in SCALAR:
        for dtype in DTYPES:
            found = operands(prim, dtype)
            if found:
                for params in found[1]:
                    yield prim, dtype, found[0], params


def run_both(fn, args):
    assert covers(fn) is None
    run, text = compile_kernel_ir(fn)
    got, want = run(list(args)), eval_function(fn, list(args))
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        if w.dtype.kind == "f":
            tol = 4e-6 if w.dtype == np.float32 else 1e-13
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
        else:
            np.testing.assert_array_equal(g, w)
    return text


@pytest.mark.parametrize("prim,dtype,types,params", list(cases()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_scalar_rule_in_every_dtype_matches_the_interpreter(prim, dtype, types, params):
    b = Builder(f"{prim}_{dtype}")
    xs = [b.param(t, f"x{i}") for i, t in enumerate(types)]
    b_out = b.add1(prim, xs, params)
    fn = b.build([b_out])
    positive = prim in ("log", "sqrt", "pow")      # an i64 ** -1 raises
    args = [sample(t.dtype, t.shape, positive) for t in types]
    if prim == "div" and dtype == "i64":
        args[1][0, :3] = 0                      # x // 0 is 0, as in NumPy
        args[0][0, 3], args[1][0, 3] = -(2 ** 63), -1
    with np.errstate(all="ignore"):
        run_both(fn, args)


def test_math_is_exact_over_a_wide_range():
    """exp, log, tanh, logistic: mathlib's algorithms, within its ulp bounds of NumPy."""
    for dtype, tol in (("f64", 4e-16), ("f32", 3e-7)):
        for prim in ("exp", "log", "tanh", "logistic"):
            b = Builder(prim)
            x = b.param(TensorType(dtype, (2000,)), "x")
            fn = b.build([b.add1(prim, [x])])
            xs = np.concatenate([-np.logspace(-30, 3, 1000), np.logspace(-30, 3, 1000)])
            xs = np.abs(xs) if prim == "log" else xs
            run, _ = compile_kernel_ir(fn)
            with np.errstate(all="ignore"):
                got, want = run([xs.astype(np_dtype(dtype))])[0], eval_function(
                    fn, [xs.astype(np_dtype(dtype))])[0]
                np.testing.assert_allclose(got, want, rtol=4 * tol, atol=0, err_msg=prim)


def gather_fn():
    b = Builder("gather")
    x = b.param(TensorType("f32", (4, 6)), "x")
    i = b.param(TensorType("i64", (3,)), "i")
    taken = b.add1("take", [x, i], {"axis": 1})
    t = b.add1("tanh", [taken])
    back = b.add1("scatter_add", [i, t], {"axis": 1, "shape": (4, 6)})
    return b.build([t, back])


def test_the_bounds_check_is_one_loop_before_the_gather():
    program, _ = build(gather_fn())
    take = program.groups[0]
    checks = [s for s in take if isinstance(s, Loop) and
              any(isinstance(r, Raise) for r in walk(s.body))]
    gathers = [s for s in take if isinstance(s, Loop) and s not in checks]
    assert len(checks) == 1 and take.index(checks[0]) < take.index(gathers[0])
    assert not any(isinstance(r, Raise) for r in walk(gathers))
    assert "take" in program.notes[0][0]


@pytest.mark.parametrize("idx", [[0, 5, 2], [-1, -6, 3], [1, 1, 1]])
def test_gathers_and_scatters_match_numpy_with_negative_indices(idx, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_DEBUG", "3")       # the text with mathlib's tanh in full
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    text = run_both(gather_fn(), [x, np.array(idx)])
    assert "declare float @llvm.fma.f32" in text and "@llvm.exp" not in text


@pytest.mark.parametrize("idx,bad", [([0, 6, 2], 6), ([-7, 1, 9], -7)])
def test_an_index_out_of_range_raises_numpys_error(idx, bad):
    run, _ = compile_kernel_ir(gather_fn())
    with pytest.raises(IndexError, match=rf"index {bad} is out of bounds for axis 1 with "
                                         r"size 6"):
        run([np.zeros((4, 6), np.float32), np.array(idx)])


def test_a_long_float32_matmul_is_a_gemm_and_a_short_one_fmas():
    b = Builder("mm")
    a = b.param(TensorType("f32", (5, 40)), "a")
    w = b.param(TensorType("f32", (40, 3)), "w")
    v = b.param(TensorType("f32", (3, 2)), "v")
    out = b.add1("matmul", [b.add1("matmul", [a, w]), v])
    fn = b.build([out])
    program, _ = build(fn)
    assert sum(isinstance(s, Gemm) for g in program.groups for s in walk(g)) == 1
    run_both(fn, [RNG.standard_normal(s).astype(np.float32) for s in ((5, 40), (40, 3),
                                                                       (3, 2))])


def test_one_memory_plan_reuses_the_arena():
    b = Builder("chain")
    x = b.param(TensorType("f64", (64,)), "x")
    y = x
    for _ in range(6):
        y = b.add1("exp", [b.add1("transpose", [y], {"perm": (0,)})])
    fn = b.build([y])
    plan = Plan(fn)
    assert plan.arena <= 2 * 64 * 8
    run_both(fn, [RNG.standard_normal(64) * 0.1])


# -- the choice, and first calls on every backend ------------------------------------------

def hmm(log_B, obs, log_a):
    alpha = log_B[:, obs[0]]
    for t in range(1, 4):
        alpha = np.log(np.sum(np.exp(alpha[:, None] + log_a), axis=0)) + log_B[:, obs[t]]
    return np.sum(alpha)


def test_index_programs_go_to_the_kernel_ir_and_say_why(capsys, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    args = (RNG.standard_normal((3, 4)), np.array([0, 3, -1, 2]), RNG.standard_normal((3, 3)))
    jitted = fg.jit(fg.grad(hmm), backend="numba", tiered=False)
    jitted(*args)
    ir = jitted.lower(*args).ir
    assert choose(ir) == ("kernel_ir", "every op compiled")
    assert "choose hmm: kernel_ir (every op compiled)" in capsys.readouterr().err
    assert_backends_agree(fg.grad(hmm), *args)
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 1 with size 4 "
                                         r"\(at test_kernel_ir.py:\d+\)"):
        jitted(args[0], np.array([0, 4, 1, 1]), args[2])


def per_dtype(x, y, p):
    """Every covered elementwise primitive the dtype allows, as NumPy spells it."""
    outs = [x + y, x - y, x * y, -x, np.abs(x), np.maximum(x, y), np.minimum(x, y),
            x < y, x <= y, x > y, x >= y, x == y, x != y, np.where(p, x, y),
            x.astype(np.float32), x.astype(np.int64), x.astype(bool)]
    if x.dtype.kind == "f":
        outs += [x / y, np.exp(x), np.log(np.abs(x) + 1), np.tanh(x), np.sqrt(np.abs(x)),
                 1 / (1 + np.exp(-x)), x.astype(np.float64)]
    else:
        outs += [np.logical_and(x, y), np.logical_or(x, y), np.logical_not(x)]
    return tuple(outs)


@pytest.mark.parametrize("dtype", ["f32", "i64"])
def test_first_calls_agree_on_eager_interp_and_numba(dtype):
    x, y = sample(dtype, (5, 4)), sample(dtype, (5, 4), positive=True)
    if dtype == "f32":
        x, y = np.nan_to_num(x, posinf=2.0, nan=0.5), np.nan_to_num(y, posinf=2.0, nan=0.5)
    with np.errstate(all="ignore"):
        assert_backends_agree(per_dtype, x, y, sample("bool", (5, 4)), rtol=2e-6, atol=1e-6)
