"""Scans compiled in place by the kernel IR (kernel_ir/control.py: the loop inside the
program, what straight_loops.py's LLVM scan loop did for small f64 bodies before it): first
calls against the interpreter and the Python loop, values and derivatives of order 1 and 2,
reverse, length 0, carries that trade places (scalars and bools among them), ys that are
carries, nan and inf, poison mode, a body compiled alone (a scan that stays a host step), and
int64 counters and big carries, which straight_loops.py left to Numba's njit loop.
"""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen import compile_numba
from fusegrad.ir.evaluate import eval_function
from fusegrad.passes.pipeline import optimize
from fusegrad.testing import check_grads
from fusegrad.tree import flatten

rng = np.random.default_rng(7)


def scans(fun, *args) -> list:
    """The scan ops of fun's optimized IR, each with its body compiled as the numba backend
    compiles the body of a scan that stays a host step."""
    fn = optimize(fg.make_ir(fun)(*args))
    return [(op, compile_numba(op.params["body"], scan=(op.params["num_consts"],
                                                        op.params["num_carry"])))
            for op in fn.ops if op.prim == "scan"]


def compiled_in_place(fun, *args, static_argnums=()) -> bool:
    """Whether the numba backend compiles fun as one kernel-IR program, its scans loops in it
    (no host step)."""
    source = fg.jit(fun, backend="numba", static_argnums=static_argnums).lower(*args).source
    return "as kernel IR" in source.splitlines()[0] and "host step" not in source


def rnn(w, u, h0, xs, reverse=False):
    def step(h, x):
        h = np.tanh(w @ h + u @ x)
        return h, np.sum(h * h)
    h, ys = fg.lax.scan(step, h0, xs, reverse=reverse)
    return np.sum(ys) / len(xs) + np.sum(h)


def rnn_python(w, u, h0, xs, reverse=False):
    h, total = h0, 0.0
    for x in xs[::-1] if reverse else xs:
        h = np.tanh(w @ h + u @ x)
        total = total + np.sum(h * h)
    return total / len(xs) + np.sum(h)


def rnn_args(hidden, steps):
    return (0.3 * rng.standard_normal((hidden, hidden)), 0.3 * rng.standard_normal((hidden, 3)),
            rng.standard_normal(hidden), rng.standard_normal((steps, 3)))


def rnn_of(reverse):
    return lambda w, u, h0, xs: rnn(w, u, h0, xs, reverse)


@pytest.mark.parametrize("reverse", [False, True])
def test_rnn_value_and_gradient_match_interp_and_the_python_loop(reverse):
    args = rnn_args(16, 7)             # 16-term products: past SMALL_DOT_K, a ?gemm each
    vg = fg.value_and_grad(rnn_of(reverse), argnums=(0, 1, 2, 3))
    forward, backward = scans(vg, *args)
    assert compiled_in_place(vg, *args)
    assert backward[0].params["reverse"] is not reverse
    (value, grads), (want, want_grads) = (fg.jit(vg, backend=b)(*args)
                                          for b in ("numba", "interp"))
    np.testing.assert_allclose(value, want, rtol=1e-13)
    np.testing.assert_allclose(value, rnn_python(*args, reverse), rtol=1e-13)
    for g, w in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)
    for g, w in zip(grads, fg.grad(rnn_python, argnums=(0, 1, 2, 3))(*args, reverse),
                    strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("reverse", [False, True])
def test_rnn_derivatives_of_order_two_match_finite_differences(reverse):
    check_grads(rnn_of(reverse), rnn_args(3, 4), order=2, backend="numba")


def mixed(c, xs, reverse):
    """Carries that trade places each step (an array, a scalar and a bool among them), a
    select on the bool carry, and ys that are carries and xs."""
    def f(c, x):
        a, b, s, flag = c
        s_next = np.where(flag, s * 2.0, s - 1.0) + np.sum(x)
        return (b, a + x * s, s_next, ~flag | (np.sum(x) > s)), (a, s, flag, x)
    return fg.lax.scan(f, c, xs, reverse=reverse)


MIXED = {b: fg.jit(mixed, static_argnums=2, backend=b) for b in ("numba", "interp")}
MIXED_C = (np.array([1.0, 2.0]), np.array([-1.0, 0.5]), 0.25, np.bool_(True))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("steps", [0, 1, 6])
def test_swapping_scalar_and_bool_carries_give_the_bits_of_interp_and_the_loop(steps, reverse):
    xs = rng.standard_normal((steps, 2))
    got = MIXED["numba"](MIXED_C, xs, reverse)
    for want in (MIXED["interp"](MIXED_C, xs, reverse), mixed(MIXED_C, xs, reverse)):
        for a, b in zip(flatten(got)[0], flatten(want)[0], strict=True):
            assert np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_array_equal(a, b)
    assert compiled_in_place(mixed, MIXED_C, xs, reverse, static_argnums=2)
    if steps == 0:
        assert [np.shape(y) for y in got[1]] == [(0, 2), (0,), (0,), (0, 2)]
        for a, b in zip(got[0], MIXED_C, strict=True):
            np.testing.assert_array_equal(a, b)


def test_nan_and_inf_flow_through_the_loop():
    def f(c, xs):
        return fg.lax.scan(lambda c, x: (np.maximum(c, x) * 0.5, c * x + np.minimum(c, x)), c, xs)
    c = np.array([1.0, -np.inf, 0.0])
    xs = np.array([[np.nan, 2.0, np.inf], [1.0, np.nan, -1.0], [np.inf, 0.0, 3.0]])
    got, want = (fg.jit(f, backend=b)(c, xs) for b in ("numba", "interp"))
    assert np.isnan(got[0][0]) and np.isnan(got[1]).any() and np.isinf(got[1]).any()
    for a, b in zip(flatten(got)[0], flatten(want)[0], strict=True):
        np.testing.assert_array_equal(a, b)


def test_poison_mode_gives_the_same_bits(monkeypatch):
    args = rnn_args(4, 5)
    g = fg.grad(rnn, argnums=(0, 1, 2, 3))
    poisoned = fg.jit(g, backend="numba")(*args)
    monkeypatch.setenv("FUSEGRAD_POISON", "0")
    plain = fg.jit(g, backend="numba")(*args)
    for a, b in zip(poisoned, plain, strict=True):
        assert a.tobytes() == b.tobytes()


def test_one_step_runs_as_the_interpreter_does():
    args = rnn_args(5, 4)
    (op, exe), = scans(rnn, *args)
    body, leaves = op.params["body"], [args[0], args[1], args[2], args[3][0]]
    for a, b in zip(exe(leaves), eval_function(body, leaves), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def test_counters_and_big_values_compile_in_place_too():
    def euler(y):                           # fori_loop: an i64 counter carry
        return fg.lax.fori_loop(0, 4, lambda i, y: y + 0.1 * np.sin(0.1 * i - y), y)

    def big(c, xs):                         # a carry past MAX_ELEMENTS
        return fg.lax.scan(lambda c, x: (c * x, np.sum(c)), c, xs)
    y0 = rng.standard_normal(3)
    c, xs = rng.standard_normal(65), rng.standard_normal(3)      # straight_loops.py took 64
    for fun, args in ((euler, (y0,)), (big, (c, xs))):
        assert compiled_in_place(fun, *args)
        for a, b in zip(flatten(fg.jit(fun, backend="numba")(*args))[0], flatten(fun(*args))[0],
                        strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-13)
