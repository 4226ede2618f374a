"""Calling kernel-IR code (kernel_ir/run.py): the quick runner of a one-step program (its arena
and status on the entry's stack, or from the pool when the program raises or its arena is
large) and the general runner keep what a call must: results are new arrays on every call,
never a previous call's; f64[] params pass as floats in any form; a Raise raises IndexError
with the user's file:line and leaves the runner usable; poison fills the arena and the
results; two threads calling at once each get their own answer; big results are recycled
once nothing holds them."""

import threading

import numpy as np
import pytest

from fusegrad.api import make_ir
from fusegrad.codegen.kernel_ir import Plan, build, compile_kernel_ir
from fusegrad.codegen.kernel_ir import run as kir_run
from fusegrad.codegen.kernel_ir.jit import DATA_OFFSET
from fusegrad.codegen.kernel_ir.nodes import Buffer, Index, Load, Loop, Reg, Store
from fusegrad.passes.pipeline import optimize

MODES = ("stack", "pooled", "general")


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    """Which runner compile_program gives: the quick one with the arena on the stack where the
    program allows it, the quick one taking states from the pool, or the general one."""
    if request.param == "pooled":
        monkeypatch.setattr(kir_run, "STACK_ARENA", -1)
    if request.param == "general":
        monkeypatch.setattr(kir_run, "_quick_of", lambda *args: None)
    return request.param


def compiled(f, *args):
    return compile_kernel_ir(optimize(make_ir(f)(*args)))[0]


def several(x, s):
    """Results of several shapes, an intermediate in the arena, and a scalar param."""
    y = np.sin(x) * s + x
    return y, (y * y).sum(), s * 2.0 + 1.0, np.exp(-x * s)


def several_np(x, s):
    y = np.sin(x) * s + x
    return [y, (y * y).sum(), np.float64(s * 2.0 + 1.0), np.exp(-x * s)]


def agrees(got, want):
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, np.ndarray) and g.shape == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("size", [3, 5000, 20_000])       # 20 000: results are recycled
def test_each_call_returns_new_arrays(mode, size):
    x1, x2 = np.linspace(-2, 2, size), np.linspace(1, 3, size)
    run = compiled(several, x1, 0.5)
    first = run([x1, 0.5])
    kept = [a.copy() for a in first]
    second = run([x2, -1.5])
    agrees(first, several_np(x1, 0.5))
    agrees(second, several_np(x2, -1.5))
    assert all((a == k).all() for a, k in zip(first, kept))
    arrays = [*first, *second, x1, x2]
    assert not any(np.shares_memory(a, b) for k, a in enumerate(arrays)
                   for b in arrays[k + 1:])


def test_a_big_result_nobody_holds_is_recycled_and_one_held_never(mode, monkeypatch):
    """A result of RECYCLE_BYTES or more comes back from a former call once its caller has
    dropped it (and every view of it); held, it is never written again. Under poison the
    recycled array is filled with NaN before the entry runs."""
    monkeypatch.setenv("FUSEGRAD_POISON", "1")
    made = []
    monkeypatch.setattr(kir_run, "empty", lambda shape, *a: made.append(shape) or
                        np.full(shape, np.nan))
    size = kir_run.RECYCLE_BYTES // 8 + 1
    x1, x2 = np.linspace(-2, 2, size), np.linspace(1, 3, size)
    run = compiled(several, x1, 0.5)
    first = run([x1, 0.5])
    assert made.count((size,)) == 2             # y and exp(-x s): new
    del first
    second = run([x2, -1.5])
    agrees(second, several_np(x2, -1.5))
    assert made.count((size,)) == 2             # recycled, filled with NaN again
    view = second[0][::2]
    kept = view.copy()
    del second
    third = run([x1, 0.5])
    agrees(third, several_np(x1, 0.5))
    assert not np.shares_memory(third[0], view) and (view == kept).all()
    assert made.count((size,)) == 3             # y's array is held through the view: new


def aliases(x, s):
    """Results that are params or views of another result: copied out."""
    y = np.sin(x) * s
    return x, s, y, y.reshape(3, 1)


def test_results_that_are_params_or_another_result_are_copies(mode):
    x = np.array([0.5, -1.0, 2.0])
    run = compiled(aliases, x, 0.25)
    for s in (0.25, -3.0):
        got = run([x, s])
        y = np.sin(x) * s
        agrees(got, [x, np.float64(s), y, y.reshape(3, 1)])
        assert not any(np.shares_memory(a, b) for k, a in enumerate([*got, x])
                       for b in [*got, x][k + 1:])


@pytest.mark.parametrize("scalar", [0.75, np.float64(0.75), np.array(0.75), 3])
def test_a_scalar_param_takes_any_form_of_a_float(mode, scalar):
    x = np.linspace(-1, 1, 4)
    run = compiled(several, x, 0.25)
    agrees(run([x, scalar]), several_np(x, float(scalar)))


def take(x, i):
    return np.tanh(x[:, i]) * 2.0


def test_an_index_out_of_range_raises_with_the_users_line(mode):
    x, good = np.arange(12.0).reshape(3, 4), np.array([0, 3, -1])
    run = compiled(take, x, good)
    for _ in range(2):           # the runner stays usable after an error
        with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 1 with size 4 "
                                             r"\(at test_kernel_ir_call.py:\d+\)"):
            run([x, np.array([0, 4, 1])])
        agrees(run([x, good]), [np.tanh(x[:, good]) * 2.0])


def test_poison_fills_the_arena_and_the_results(mode, monkeypatch):
    """A program rewritten to read arena bytes it never wrote, into the first two of its
    result's three elements: under poison they read NaN, and the third, unwritten, is NaN."""
    monkeypatch.setenv("FUSEGRAD_POISON", "1")
    fn = optimize(make_ir(lambda x: x * 2.0)(np.zeros(3)))
    plan = Plan(fn)
    program, plan = build(fn, plan)
    out, i, v = plan.buffer(fn.results[0]), Reg("%i", "i64"), Reg("%v", "f64")
    program.groups = [[Loop(i, 2, [Load(v, Buffer(0, 0, "f64"), Index(0, ((i, 1),))),
                                   Store(out, Index(0, ((i, 1),)), v)])]]
    program.notes, program.work, program.hot = [""], [2], [False]
    plan.arena = 64
    run, _ = kir_run.compile_program(program, plan, DATA_OFFSET)
    for _ in range(2):
        assert np.isnan(run([np.ones(3)])[0]).all()


@pytest.mark.parametrize("size", [3, 5000])
def test_two_threads_calling_at_once_each_get_their_answer(mode, size):
    run = compiled(several, np.zeros(size), 0.0)
    errors = []

    def calls(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            x, s = rng.standard_normal(size), float(rng.standard_normal())
            try:
                agrees(run([x, s]), several_np(x, s))
            except AssertionError as e:  # pragma: no cover - reported below
                errors.append(e)
    threads = [threading.Thread(target=calls, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def softmaxish(x, s):
    """An intermediate two loop groups read (the max between them): it lives in the arena."""
    t = np.sin(x) * s + x
    return np.exp(t - t.max())


def test_a_short_program_gets_the_quick_runner_its_arena_on_the_stack():
    fn = optimize(make_ir(softmaxish)(np.zeros(3), 0.0))
    program, plan = build(fn, Plan(fn))
    quick = kir_run._quick_of(program, plan, kir_run.steps(program), False)
    assert quick is not None and quick.scalars == [1] and quick.stack == plan.arena > 0
    fn = optimize(make_ir(take)(np.zeros((3, 4)), np.array([0, 1, 2])))
    program, plan = build(fn, Plan(fn))
    assert program.errors and kir_run._quick_of(program, plan, kir_run.steps(program),
                                                False).stack is None


def test_only_a_short_call_keeps_the_gil():
    """A quick call of at most GIL_ELEMENTS elements keeps the GIL; a longer one, or one that
    calls ?gemm (whose work the count leaves out), lets other threads run meanwhile."""
    def keeps(f, *args):
        fn = optimize(make_ir(f)(*args))
        program, plan = build(fn, Plan(fn))
        quick = kir_run._quick_of(program, plan, kir_run.steps(program), False)
        return kir_run._keeps_gil(program, quick)
    assert keeps(several, np.zeros(3), 0.0)
    assert not keeps(several, np.zeros(5000), 0.0)
    assert not keeps(lambda a, b: a @ b, np.zeros((2, 300)), np.zeros((300, 2)))
