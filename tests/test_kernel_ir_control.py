"""The kernel IR's host steps, folds and control flow (codegen/kernel_ir: host.py, folds.py,
control.py) against the interpreter, on the first call with poison on: host steps of one and
several results splitting the entry, cumsum/cumprod bit for bit with NumPy, argmax/argmin's
first occurrence and nan rules, scatters of bools, scans (carries aliasing results, reversed,
of length 0, out-of-range indices in the body), while loops of 0 iterations, both branches of
a cond; and the choice that sends them to the kernel IR."""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen.choose import choose
from fusegrad.codegen.kernel_ir import build, compile_kernel_ir, covers
from fusegrad.codegen.kernel_ir.nodes import Host, If, Loop, While, walk
from fusegrad.codegen.kernel_ir.run import steps
from fusegrad.ir import Builder, TensorType
from fusegrad.runtime.interpreter import eval_function

RNG = np.random.default_rng(1)
F64 = TensorType("f64", (3, 3))


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_POISON", "1")


def run_both(fn, args, exact=True):
    """fn compiled through the kernel IR against the interpreter; the results."""
    assert covers(fn) is None, covers(fn)
    run, text = compile_kernel_ir(fn)
    got, want = run(list(args)), eval_function(fn, list(args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        if exact or w.dtype.kind != "f":
            np.testing.assert_array_equal(g, w)
            if w.dtype.kind == "f":     # the same bits, -0.0 included
                assert (np.signbit(g) == np.signbit(w)).all()
        else:
            tol = 4e-6 if w.dtype == np.float32 else 1e-13
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return got, text


# -- host steps -----------------------------------------------------------------------------

def test_host_steps_split_the_entry():
    b = Builder("eig")
    a = b.param(F64, "a")
    sym = b.add1("add", [a, b.add1("transpose", [a], {"perm": (1, 0)})])
    packed = b.add1("eigh", [sym], {"lower": True})
    w = b.add1("slice", [packed], {"start": (0,), "stop": (3,), "step": (1,)})
    e = b.add1("exp", [w])
    sorted_ = b.add1("argsort", [b.add1("neg", [e])], {"axis": 0, "stable": True})
    fn = b.build([e, sorted_, packed])
    program, _ = build(fn)
    kinds = ["code" if isinstance(x, list) else type(x).__name__ for x in steps(program)]
    assert kinds == ["code", "Host", "code", "Host"], kinds
    got, text = run_both(fn, [RNG.standard_normal((3, 3))])
    assert "host step eigh" in text and "host step argsort" in text


def test_a_host_step_on_a_0d_value_and_a_param_result():
    b = Builder("zero_d")
    x = b.param(TensorType("f64", ()), "x")
    y = b.add1("erfinv", [b.add1("mul", [x, x])])
    fn = b.build([y, x, b.add1("i0", [y])])
    run_both(fn, [np.float64(0.3)])


def test_an_error_a_host_step_raises_reaches_the_caller():
    b = Builder("rz")
    x = b.param(TensorType("f64", (2,)), "x")
    fn = b.build([b.add1("require_zero", [b.add1("exp", [x])],
                         {"shape": (2,), "message": "not zero"})])
    run, _ = compile_kernel_ir(fn)
    with pytest.raises(NotImplementedError, match="not zero"):
        run([np.zeros(2)])
    assert run([np.full(2, -np.inf)])[0].tolist() == [0.0, 0.0]


# -- folds ----------------------------------------------------------------------------------

@pytest.mark.parametrize("prim,dtype,params", [
    ("cumsum", "f64", {"axis": 1}), ("cumsum", "f32", {"axis": 0, "reverse": True}),
    ("cumsum", "i64", {"axis": -1}), ("cumprod", "f64", {"axis": 0}),
    ("cumprod", "i64", {"axis": 1}), ("cumsum", "f64", {"axis": 2, "reverse": True})])
def test_running_folds_are_numpys_bits(prim, dtype, params):
    shape = (4, 5, 1) if params["axis"] == 2 else (4, 5)
    b = Builder(prim)
    x = b.param(TensorType(dtype, shape), "x")
    fn = b.build([b.add1(prim, [x], params)])
    if dtype == "i64":
        arg = RNG.integers(-5, 6, shape)
    else:
        arg = (RNG.standard_normal(shape) * 1e3).astype(np.float32 if dtype == "f32" else
                                                        np.float64)
        arg[0, 0] = -0.0
    run_both(fn, [arg])


@pytest.mark.parametrize("prim", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["f64", "f32", "i64", "bool"])
def test_arg_reductions_take_the_first_best_and_the_first_nan(prim, dtype):
    b = Builder(prim)
    x = b.param(TensorType(dtype, (5, 6)), "x")
    fn = b.build([b.add1(prim, [x], {"axis": 1}), b.add1(prim, [x], {"axis": 0})])
    if dtype == "bool":
        arg = RNG.random((5, 6)) < 0.5
        arg[0] = False
    elif dtype == "i64":
        arg = RNG.integers(-2, 3, (5, 6))
    else:
        arg = RNG.integers(-2, 3, (5, 6)).astype(np.float32 if dtype == "f32" else np.float64)
        arg[1, 2], arg[1, 4], arg[2, 0], arg[3] = np.nan, np.nan, np.nan, -np.inf
    run_both(fn, [arg])


def test_a_scatter_of_bools_is_a_logical_or():
    b = Builder("scatter_bool")
    i = b.param(TensorType("i64", (4,)), "i")
    g = b.param(TensorType("bool", (2, 4)), "g")
    fn = b.build([b.add1("scatter_add", [i, g], {"axis": 1, "shape": (2, 3)})])
    run_both(fn, [np.array([0, 2, 0, -1]), np.array([[1, 0, 1, 1], [0, 0, 1, 0]], bool)])


# -- scan as a compiled loop ----------------------------------------------------------------

def scan_fn(length=5, reverse=False, swap=False, dtype="f64", index=False):
    """A scan carrying (a, b): a <- tanh(a * w + x) (+ a gather of table at x's index), b <- a
    (or the two swapped: results aliasing the other carry), y = a * b, over xs of `length`."""
    body = Builder("step")
    t = TensorType(dtype, (3,))
    w = body.param(t, "w")
    tab = body.param(TensorType(dtype, (4,)), "table")
    a, bb = body.param(t, "a"), body.param(t, "b")
    x = body.param(TensorType("i64" if index else dtype, (3,)), "x")
    if index:
        xv = body.add1("take", [tab, x], {"axis": 0}, loc="model.py:7")
    else:
        xv = x
    new_a = body.add1("tanh", [body.add1("add", [body.add1("mul", [a, w]), xv])])
    y = body.add1("mul", [a, bb])
    results = [bb, a, y] if swap else [new_a, a, y]
    step = body.build(results)
    b = Builder("scan")
    w_, tab_ = b.param(t, "w"), b.param(TensorType(dtype, (4,)), "table")
    a0, b0 = b.param(t, "a0"), b.param(t, "b0")
    xs = b.param(TensorType("i64" if index else dtype, (length, 3)), "xs")
    outs = b.add("scan", [w_, tab_, a0, b0, xs],
                 {"body": step, "length": length, "reverse": reverse, "num_consts": 2,
                  "num_carry": 2})
    return b.build(list(outs))


def scan_args(length=5, dtype="f64", index=False):
    dt = np.float32 if dtype == "f32" else np.float64
    xs = RNG.integers(-4, 4, (length, 3)) if index else RNG.standard_normal((length, 3))
    return [RNG.standard_normal(3).astype(dt), RNG.standard_normal(4).astype(dt),
            RNG.standard_normal(3).astype(dt), RNG.standard_normal(3).astype(dt),
            xs if index else xs.astype(dt)]


@pytest.mark.parametrize("length,reverse,swap", [(5, False, False), (4, True, False),
                                                 (5, False, True), (0, False, False),
                                                 (1, True, True)])
def test_a_scan_is_one_compiled_loop(length, reverse, swap):
    fn = scan_fn(length, reverse, swap)
    program, _ = build(fn)
    assert not any(isinstance(s, Host) for g in program.groups for s in g)
    run_both(fn, scan_args(length), exact=False)


def test_a_float32_scan_with_a_gather_raises_at_the_users_line():
    fn = scan_fn(6, index=True, dtype="f32")
    args = scan_args(6, "f32", index=True)
    run_both(fn, args, exact=False)
    run, _ = compile_kernel_ir(fn)
    args[4][3, 1] = 4
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 0 with size 4 "
                                         r"\(at model.py:7\)"):
        run(args)


def test_nested_scans_compile_as_nested_loops():
    inner = scan_fn(3, reverse=True)
    b = Builder("outer_step")
    t = TensorType("f64", (3,))
    w, tab, a = b.param(t, "w"), b.param(TensorType("f64", (4,)), "table"), b.param(t, "a")
    xs = b.param(TensorType("f64", (3, 3)), "xs")
    fa, fb, ys = b.add("scan", [w, tab, a, a, xs], dict(inner.ops[0].params))
    step = b.build([b.add1("add", [fa, fb]), ys])
    b = Builder("outer")
    w_, tab_, a0 = b.param(t, "w"), b.param(TensorType("f64", (4,)), "table"), b.param(t, "a0")
    xss = b.param(TensorType("f64", (2, 3, 3)), "xss")
    outs = b.add("scan", [w_, tab_, a0, xss], {"body": step, "length": 2, "reverse": False,
                                               "num_consts": 2, "num_carry": 1})
    fn = b.build(list(outs))
    program, _ = build(fn)
    assert not any(isinstance(s, Host) for g in program.groups for s in g)
    run_both(fn, [RNG.standard_normal(3), RNG.standard_normal(4), RNG.standard_normal(3),
                  RNG.standard_normal((2, 3, 3))], exact=False)


# -- through fg.jit: the choice, while_loop and cond compiled, host steps, errors ------------

def loop_and_branch(x, n):
    """A while_loop of n steps (0 included) on float32 values, then a cond on their sum."""
    i, v = fg.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5 + 1.0),
                             (0, x))
    w = fg.lax.cond(np.sum(v) > 0, lambda v: v * 2.0, lambda v: np.tanh(v) - 1.0, v)
    return i, w


def loop_and_branch_python(x, n):
    i, v = 0, x
    while i < n:
        i, v = i + 1, v * np.float32(1.5) + np.float32(1.0)
    return i, (v * np.float32(2.0) if np.sum(v) > 0 else np.tanh(v) - np.float32(1.0))


@pytest.mark.parametrize("n,sign", [(0, 1.0), (0, -1.0), (3, 1.0), (2, -1.0)])
def test_while_loops_of_zero_steps_and_both_branches_of_a_cond(n, sign, capsys, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    x = (sign * (np.abs(RNG.standard_normal(3)) + 8.0)).astype(np.float32)
    jitted = fg.jit(loop_and_branch, backend="numba", tiered=False)
    got = jitted(x, n)
    ir = jitted.lower(x, n).ir
    assert choose(ir)[0] == "kernel_ir"
    program, _ = build(ir)
    kinds = {type(s) for g in program.groups for s in walk(g)}
    assert If in kinds and While in kinds and Host not in kinds
    assert "choose loop_and_branch: kernel_ir" in capsys.readouterr().err
    for g, w in zip(got, fg.jit(loop_and_branch, backend="interp")(x, n), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=4e-6)         # mathlib's tanh, within 2 ulp
    want = loop_and_branch_python(x, n)
    assert int(got[0]) == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=4e-6)


def scan_with_a_host_step(x, xs):
    """A float32 scan whose body sorts: the scan is a host step, its body compiled alone."""
    def step(c, row):
        s = np.sort(row + c)
        return c + s[-1], s
    return fg.lax.scan(step, x, xs)


def test_a_scan_whose_body_needs_a_host_step_is_a_host_step_of_several_results():
    x, xs = np.float32(0.5), RNG.standard_normal((4, 3)).astype(np.float32)
    jitted = fg.jit(scan_with_a_host_step, backend="numba", tiered=False)
    ir = jitted.lower(x, xs).ir
    assert choose(ir)[0] == "kernel_ir"
    program, _ = build(ir)
    hosts = [s for g in program.groups for s in g if isinstance(s, Host)]
    assert [h.op.prim for h in hosts] == ["scan"] and len(hosts[0].outputs) == 2
    got, want = jitted(x, xs), fg.jit(scan_with_a_host_step, backend="interp")(x, xs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def emissions(table, obs):
    """A scan reading table[obs[t]] each step: an index op inside a compiled loop."""
    def step(total, o):
        e = table[o]
        return total + e * e, e
    return fg.lax.scan(step, 0.0, obs)


def test_a_gather_out_of_range_inside_a_scan_raises_with_the_users_line():
    table, obs = RNG.standard_normal(5), np.array([0, 4, -5, 2])
    jitted = fg.jit(fg.value_and_grad(lambda t, o: emissions(t, o)[0]), backend="numba",
                    tiered=False)
    ir = jitted.lower(table, obs).ir
    path, reason = choose(ir)
    assert (path, reason) == ("kernel_ir", "every op compiled")
    value, grad = jitted(table, obs)
    want_value, want_grad = fg.jit(fg.value_and_grad(lambda t, o: emissions(t, o)[0]),
                                   backend="interp")(table, obs)
    np.testing.assert_allclose(value, want_value, rtol=1e-14)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-14)
    with pytest.raises(IndexError, match=r"index 5 is out of bounds for axis 0 with size 5 "
                                         r"\(at test_kernel_ir_control.py:\d+\)"):
        jitted(table, np.array([0, 5, 1, 1]))


def test_a_host_step_with_an_empty_result_still_runs():
    b = Builder("rz_empty")
    x = b.param(TensorType("f64", (2,)), "x")
    fn = b.build([b.add1("require_zero", [x], {"shape": (0,), "message": "not zero"})])
    run, _ = compile_kernel_ir(fn)
    with pytest.raises(NotImplementedError, match="not zero"):
        run([np.ones(2)])
    assert run([np.zeros(2)])[0].shape == (0,)


def rnn(w, u, h0, xs):
    def step(h, x):
        h = np.tanh(w @ h + u @ x)
        return h, np.sum(h * h)
    h, ys = fg.lax.scan(step, h0, xs, reverse=True)
    return np.sum(h) + np.sum(ys * ys)


def test_an_f64_rnn_gradient_is_one_kernel_ir_program():
    """An f64 RNN's gradient (glue and LLVM scan loops before the kernel IR) compiles as one
    kernel-IR program, its two scans compiled loops, with interp's values."""
    args = (0.4 * RNG.standard_normal((4, 4)), 0.4 * RNG.standard_normal((4, 2)),
            RNG.standard_normal(4), RNG.standard_normal((5, 2)))
    vg = fg.value_and_grad(rnn, argnums=(0, 1, 2))
    jitted = fg.jit(vg, backend="numba", tiered=False)
    ir = jitted.lower(*args).ir
    assert choose(ir)[0] == "kernel_ir" and covers(ir) is None
    program, _ = build(ir)
    assert sum(isinstance(s, Loop) and s.var.name.startswith("%scan") for g in program.groups
               for s in walk(g)) == 2
    (value, grads), (want, want_grads) = jitted(*args), fg.jit(vg, backend="interp")(*args)
    np.testing.assert_allclose(value, want, rtol=1e-13)
    for g, w in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)
