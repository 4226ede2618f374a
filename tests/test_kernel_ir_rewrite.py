"""The kernel IR's rewrites of itself (codegen/kernel_ir/rewrite.py), at the kernel-IR level:
build a Program, rewrite it, check its structure and its first call (poison on) against the
interpreter; the order a sum is folded in lanes, bit for bit; the same bits for a parallel
loop run on OpenBLAS's threads, on one thread, and serially (the runner's say, status[1],
forced on: it is off while the machine has no idle core)."""

import ctypes

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen import cblas
from fusegrad.codegen import pool_bind as pool
from fusegrad.codegen.kernel_ir.jit import DATA_OFFSET
from fusegrad.codegen.choose import choose
from fusegrad.codegen.kernel_ir import Plan, build, compile_kernel_ir
from fusegrad.codegen.kernel_ir.nodes import Alu, Load, Loop, Raise, Set, Store, walk
from fusegrad.codegen.kernel_ir.rewrite import LANES, apart, optimize
from fusegrad.codegen.kernel_ir.run import compile_program
from fusegrad.ir import Builder, TensorType
from fusegrad.runtime.interpreter import eval_function
from fusegrad.testing import assert_backends_agree

RNG = np.random.default_rng(5)
NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64}


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_POISON", "1")


def reduce_fn(shape, axes, dtype="f64", prim="reduce_sum"):
    """tanh (or a copy, for ints) of x, and its reduction over axes: two groups."""
    b = Builder("red")
    x = b.param(TensorType(dtype, shape), "x")
    e = b.add1("tanh" if dtype != "i64" else "neg", [x])
    return b.build([b.add1(prim, [e], {"axes": axes}), e])


def sample(dtype, shape):
    if dtype == "i64":
        return RNG.integers(-50, 50, shape)
    return RNG.standard_normal(shape).astype(NP[dtype])


def rewritten(fn, threads=True):
    program, plan = build(fn, Plan(fn))
    optimize(program, threads=threads)
    return program, plan


def run(program, plan, args):
    return compile_program(program, plan, DATA_OFFSET)[0](list(args))


def agrees(fn, args, got):
    for g, w in zip(got, eval_function(fn, list(args))):
        w = np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        tol = 2e-5 if w.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_a_row_sum_accumulates_in_a_register():
    fn = reduce_fn((6, 400), (1,))
    program, plan = rewritten(fn, threads=False)
    dst = plan.buffer(fn.results[0])
    rows = next(s for s in program.groups[1] if isinstance(s, Loop) and
                any(isinstance(t, Loop) for t in s.body))
    inner = [s for s in rows.body if isinstance(s, Loop)]
    assert inner and not any((s.buf.slot, s.buf.byte) == (dst.slot, dst.byte)
                             for s in walk(inner) if isinstance(s, (Load, Store)))
    assert any(isinstance(s, Set) for s in walk(inner))     # the sum, in lanes of Vars
    stores = [s for s in rows.body if isinstance(s, Store)]
    assert len(stores) == 1                                  # one store a row, after its loop
    x = sample("f64", (6, 400))
    agrees(fn, [x], run(program, plan, [x]))


@pytest.mark.parametrize("dtype", ["f64", "f32", "i64"])
def test_a_long_sum_folds_in_lanes_in_a_fixed_order(dtype):
    n = 1037                                     # blocks of LANES and a tail
    fn = reduce_fn((n,), (0,), dtype)
    program, plan = rewritten(fn, threads=False)
    width = LANES[dtype]
    loops = [s for s in program.groups[1] if isinstance(s, Loop)]
    assert [s.extent for s in loops] == [n // width, n % width]
    x = sample(dtype, (n,))
    got = run(program, plan, [x])
    e = np.asarray(eval_function(fn, [x])[1])
    lanes = [NP[dtype](0)] * width               # lane l: e[l], e[l + width], ...
    for i in range(n - n % width):
        lanes[i % width] = lanes[i % width] + e[i]
    for i in range(n - n % width, n):            # lane 0 takes the tail
        lanes[0] = lanes[0] + e[i]
    while len(lanes) > 1:                        # then pairwise, in lane order
        lanes = [a + b for a, b in zip(lanes[::2], lanes[1::2])]
    assert got[0].tobytes() == np.asarray(lanes[0], NP[dtype]).tobytes()
    agrees(fn, [x], got)


def test_max_and_short_sums_keep_the_row_major_fold():
    for fn in (reduce_fn((3, 500), (1,), prim="reduce_max"), reduce_fn((3, 9), (1,))):
        program, plan = rewritten(fn, threads=False)
        assert not any(isinstance(s, Set) and s.var.name.endswith("_l1")
                       for g in program.groups for s in walk(g))
        x = sample("f64", fn.params[0].shape)
        agrees(fn, [x], run(program, plan, [x]))


def test_small_loops_are_unrolled_and_addresses_become_constants():
    b = Builder("small")
    x = b.param(TensorType("f64", (2, 3)), "x")
    t = b.add1("transpose", [b.add1("neg", [x])], {"perm": (1, 0)})
    fn = b.build([b.add1("reduce_sum", [t], {"axes": (1,)})])
    program, plan = rewritten(fn)
    assert not any(isinstance(s, Loop) for g in program.groups for s in walk(g))
    assert all(not s.index.terms for g in program.groups for s in walk(g)
               if isinstance(s, (Load, Store)))
    names = [s.out.name for g in program.groups for s in walk(g) if isinstance(s, (Alu, Load))]
    assert len(names) == len(set(names))                    # still SSA
    x = sample("f64", (2, 3))
    agrees(fn, [x], run(program, plan, [x]))


def test_only_loops_whose_iterations_write_apart_are_parallel():
    rows = rewritten(reduce_fn((600, 500), (1,)))[0]
    columns = rewritten(reduce_fn((600, 500), (0,)))[0]
    assert [s.extent for s in rows.groups[1] if isinstance(s, Loop) and s.parallel] == [600]
    assert not any(isinstance(s, Loop) and s.parallel for s in columns.groups[1])
    assert all(s.parallel for g in (rows, columns) for s in g.groups[0]
               if isinstance(s, Loop))                      # the elementwise loop
    b = Builder("scatter")
    i = b.param(TensorType("i64", (300000,)), "i")
    v = b.param(TensorType("f64", (300000,)), "v")
    fn = b.build([b.add1("scatter_add", [i, v], {"axis": 0, "shape": (9,)})])
    program, _ = build(fn, Plan(fn))
    optimize(program)
    for s in program.groups[0]:
        if isinstance(s, Loop):
            assert not s.parallel and (not apart(s) or s.extent == 9)
    assert any(isinstance(s, Raise) for s in walk(program.groups[0]))


def _set_blas_threads():
    lib = ctypes.CDLL(cblas.LIBRARY) if cblas.LIBRARY else None
    return next((getattr(lib, n) for n in ("scipy_openblas_set_num_threads64_",
                                          "openblas_set_num_threads64_",
                                          "openblas_set_num_threads") if hasattr(lib, n)), None)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_threads_give_the_serial_bits(dtype, monkeypatch):
    monkeypatch.setattr("fusegrad.codegen.kernel_ir.run.idle_core", lambda: True)
    fn = reduce_fn((600, 511), (1,), dtype)
    x = sample(dtype, (600, 511))
    threaded, serial = rewritten(fn), rewritten(fn, threads=False)
    assert any(isinstance(s, Loop) and s.parallel for g in threaded[0].groups for s in g)
    compiled = compile_program(*threaded, DATA_OFFSET)
    want = run(*serial, [x])
    if pool.AVAILABLE:
        assert "@fusegrad_pool_split(" in compiled[1]
    got = compiled[0]([x])
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    setter = _set_blas_threads()
    if pool.AVAILABLE and setter is not None:
        before = pool._threads_function(ctypes.CDLL(cblas.LIBRARY))()
        setter(1)
        try:
            got = compiled[0]([x])
        finally:
            setter(before)
        assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    agrees(fn, [x], got)


def test_kernel_ir_takes_programs_long_and_short():
    def f(x, w):
        return np.sum(np.tanh(x @ w) * x[:, :3]), np.max(x, axis=0)
    args = (RNG.standard_normal((40, 30)), RNG.standard_normal((30, 3)))
    ir = fg.jit(f, backend="interp").lower(*args).ir
    assert choose(ir)[0] == "kernel_ir"
    assert_backends_agree(f, *args)
    run_, text = compile_kernel_ir(ir)
    assert "kernel IR" in text

    def g(x):
        return np.sin(x) * x
    small = fg.jit(g, backend="interp").lower(0.5).ir
    assert choose(small)[0] == "kernel_ir"
