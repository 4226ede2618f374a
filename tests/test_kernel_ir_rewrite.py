"""The kernel IR's rewrites of itself (codegen/kernel_ir/rewrite.py), at the kernel-IR level:
build a Program, rewrite it, check its structure and its first call (poison on) against the
interpreter; the order a sum is folded in lanes, bit for bit; the same bits for a parallel
loop run in chunks on threads.py's workers, on the caller alone, and not split at all; the
first error of a parallel loop that raises; choose() taking long and short programs."""

import contextlib
import os
import threading
import types

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen.kernel_ir.jit import DATA_OFFSET
from fusegrad.codegen.choose import choose
from fusegrad.codegen.compile import load_module, njit_options, versions
from fusegrad.codegen.kernel_ir import Plan, build, compile_kernel_ir
from fusegrad.codegen.kernel_ir.nodes import (Alu, Buffer, Index, Load, Loop, Raise, Reg, Set,
                                              Store, walk)
from fusegrad.codegen.kernel_ir.partials import chunk_size, chunk_sums
from fusegrad.codegen.kernel_ir.rewrite import LANES, apart, copy, optimize, visits
from fusegrad.codegen.kernel_ir.run import compile_program
from fusegrad.codegen.kernel_ir.threads import _workers, pool
from fusegrad.ir import Builder, TensorType
from fusegrad.runtime.interpreter import eval_function
from fusegrad.testing import assert_backends_agree

RNG = np.random.default_rng(5)
NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64}


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_POISON", "1")


def reduce_fn(shape, axes, dtype="f64", prim="reduce_sum"):
    """x's reduction over axes: a group of the reduction alone, whose sums rewrite.py
    carries in registers (in a group with math, loop_group.py writes them in lanes)."""
    b = Builder("red")
    x = b.param(TensorType(dtype, shape), "x")
    return b.build([b.add1(prim, [x], {"axes": axes})])


def math_and_sum(shape, axes, dtype="f64"):
    """tanh of x, a result, and its sum over axes: one loop group (loop_group.py)."""
    b = Builder("tanh_sum")
    x = b.param(TensorType(dtype, shape), "x")
    e = b.add1("tanh", [x])
    return b.build([b.add1("reduce_sum", [e], {"axes": axes}), e])


def sample(dtype, shape):
    if dtype == "i64":
        return RNG.integers(-50, 50, shape)
    return RNG.standard_normal(shape).astype(NP[dtype])


def rewritten(fn, threads=True):
    program, plan = build(fn, Plan(fn))
    optimize(program, threads=threads, plan=plan)
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
    assert len(program.groups) == 1
    rows = next(s for s in program.groups[0] if isinstance(s, Loop) and
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
    loops = [s for s in program.groups[0] if isinstance(s, Loop)]
    assert [s.extent for s in loops] == [n // width, n % width]
    x = sample(dtype, (n,))
    got = run(program, plan, [x])
    e = x
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
    # a row's sum ends before the next row, a column's not
    assert [s.extent for s in rows.groups[0] if isinstance(s, Loop) and s.parallel] == [600]
    assert not any(isinstance(s, Loop) and s.parallel for s in columns.groups[0])
    b = Builder("tanh")
    x = b.param(TensorType("f64", (600, 500)), "x")
    program = rewritten(b.build([b.add1("tanh", [x])]))[0]
    assert [s.parallel for s in program.groups[0] if isinstance(s, Loop)] == [True]
    b = Builder("scatter")
    i = b.param(TensorType("i64", (300000,)), "i")
    v = b.param(TensorType("f64", (300000,)), "v")
    fn = b.build([b.add1("scatter_add", [i, v], {"axis": 0, "shape": (9,)})])
    program, _ = build(fn, Plan(fn))
    optimize(program)
    loops = [s for s in program.groups[0] if isinstance(s, Loop)]
    checks = [s for s in loops if any(isinstance(t, Raise) for t in walk(s.body))]
    assert checks and all(s.parallel for s in checks)        # the bounds check: it only reads
    for s in loops:                                          # the scatter: stores anywhere
        if s not in checks:
            assert not s.parallel and (not apart(s) or s.extent == 9)


@pytest.fixture
def many_chunks(monkeypatch):
    """Parallel loops from 64 loads and stores, in chunks of about 16."""
    monkeypatch.setattr("fusegrad.codegen.kernel_ir.rewrite.PARALLEL_WORK", 64)
    monkeypatch.setattr("fusegrad.codegen.kernel_ir.partials.CHUNK_VISITS", 16)


@contextlib.contextmanager
def workers(n):
    """threads.py's pool with n workers taking chunks (0: the caller runs them all)."""
    pool().start()
    pool().set(n, 0)
    try:
        yield
    finally:
        pool().set(len(pool().threads), 0)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_threads_give_the_serial_bits(dtype, many_chunks):
    fn = math_and_sum((300, 37), (1,), dtype)               # tanh, and its rows' sums
    x = sample(dtype, (300, 37))
    threaded, serial = rewritten(fn), rewritten(fn, threads=False)
    extents = [s.extent for g in threaded[0].groups for s in g
               if isinstance(s, Loop) and s.parallel]
    assert extents and set(extents) == {300}               # the loops over rows
    assert not any(isinstance(s, Loop) and s.parallel for g in serial[0].groups for s in g)
    compiled = compile_program(*threaded, DATA_OFFSET)
    assert "@fusegrad_threads_run(" in compiled[1]
    want = run(*serial, [x])
    for n in (len(pool().threads), 0, 1):
        with workers(n):
            for _ in range(3):
                got = compiled[0]([x])
                assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    agrees(fn, [x], got)


def test_two_callers_and_a_forked_child_get_the_same_bits(many_chunks):
    fn = reduce_fn((300, 37), (0, 1))
    x = sample("f64", (300, 37))
    compiled = compile_program(*rewritten(fn), DATA_OFFSET)[0]
    want = [w.tobytes() for w in run(*rewritten(fn, threads=False), [x])]
    got: list = []
    callers = [threading.Thread(target=lambda: got.extend(
        [g.tobytes() for g in compiled([x])] for _ in range(20))) for _ in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert got == [want] * 40
    read, write = os.pipe()
    child = os.fork()
    if child == 0:                                  # the child: its own workers, or none
        try:
            same = all([g.tobytes() for g in compiled([x])] == want for _ in range(5))
            again = compile_program(*rewritten(fn), DATA_OFFSET)[0]
            same = same and [g.tobytes() for g in again([x])] == want
            os.write(write, b"1" if same and len(pool().threads) == _workers() else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    assert os.waitpid(child, 0)[1] == 0


def test_a_parallel_loop_that_raises_raises_the_first_error_and_where(many_chunks):
    def pick(table, idx):
        return np.sum(table[idx] * 2.0)
    table, idx = RNG.standard_normal(50), RNG.integers(0, 50, 3000)
    idx[2100], idx[2900] = 51, -60                 # in later chunks: the first one is quoted
    jitted = fg.jit(pick)
    lowered = jitted.lower(table, idx)
    assert "@fusegrad_threads_run(" in lowered.source
    for n in (len(pool().threads), 0):
        with workers(n):
            with pytest.raises(IndexError, match=r"index 51 is out of bounds for axis 0 with "
                                                 r"size 50 \(at test_kernel_ir_rewrite.py:\d+\)"):
                jitted(table, idx)
    idx[2100], idx[2900] = 3, -6
    np.testing.assert_allclose(jitted(table, idx), np.sum(table[idx] * 2.0), rtol=1e-12)


def in_lanes(values, dtype, start=0):
    """start + values in rewrite.lanes' order: lane l adds values l, l + width, ... (lane 0
    from start, and the tail), then pairwise; a loop shorter than two blocks adds in order."""
    width, zero = LANES[dtype], NP[dtype](0)
    if len(values) < 2 * width:
        total = NP[dtype](start)
        for v in values:
            total = total + v
        return total
    lanes, whole = [NP[dtype](start)] + [zero] * (width - 1), len(values) - len(values) % width
    for i, v in enumerate(values):
        lanes[i % width if i < whole else 0] = lanes[i % width if i < whole else 0] + v
    while len(lanes) > 1:
        lanes = [a + b for a, b in zip(lanes[::2], lanes[1::2])]
    return lanes[0]


@pytest.mark.parametrize("dtype,shape", [("f64", (3000,)), ("f32", (3000,)), ("f64", (60, 50))])
def test_a_long_sum_adds_partial_sums_by_chunk_in_a_fixed_order(dtype, shape, many_chunks):
    fn = reduce_fn(shape, tuple(range(len(shape))), dtype)
    x = sample(dtype, shape)
    threaded, serial = rewritten(fn), rewritten(fn, threads=False)
    chunks = [s for s in threaded[0].groups[0] if isinstance(s, Loop) and s.parallel]
    assert len(chunks) == 1 and not any(s.parallel for g in serial[0].groups for s in walk(g)
                                        if isinstance(s, Loop))
    want = run(*serial, [x])
    compiled = compile_program(*threaded, DATA_OFFSET)[0]
    for n in (len(pool().threads), 0):
        with workers(n):
            got = compiled([x])
            assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    e = x.reshape(-1)                               # the sum alone, in its group
    plain = build(fn, Plan(fn))[0].groups[0]
    size = chunk_size(next(s for s in plain if isinstance(s, Loop)), visits)
    size *= 1 if len(shape) == 1 else shape[1]
    partials = []
    for k in range(0, e.size, size):
        rows = [e[k:k + size]] if len(shape) == 1 else \
            [e[r:r + shape[1]] for r in range(k, min(k + size, e.size), shape[1])]
        partials.append(NP[dtype](0))
        for row in rows:                            # a row's lane 0 goes on from the last
            partials[-1] = in_lanes(row, dtype, partials[-1])
    assert got[0].tobytes() == np.asarray(in_lanes(partials, dtype), NP[dtype]).tobytes()
    agrees(fn, [x], got)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_math_and_its_full_sum_run_on_threads_in_chunks_of_lanes(dtype, many_chunks):
    fn = math_and_sum((3000,), (0,), dtype)         # W1's kind: one loop of math and a sum
    x = sample(dtype, (3000,))
    threaded, serial = rewritten(fn), rewritten(fn, threads=False)
    assert [s.extent for s in threaded[0].groups[0] if isinstance(s, Loop) and s.parallel]
    assert not any(s.parallel for g in serial[0].groups for s in walk(g) if isinstance(s, Loop))
    compiled = compile_program(*threaded, DATA_OFFSET)
    assert "@fusegrad_threads_run(" in compiled[1]
    want = run(*serial, [x])
    for n in (len(pool().threads), 0, 1):
        with workers(n):
            got = compiled[0]([x])
            assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    e, width = got[1], 2 * LANES[dtype]             # loop_group.py's lanes, BLOCK of them
    plain = build(fn, Plan(fn))[0].groups[0]
    size = chunk_size(next(s for s in plain if isinstance(s, Loop)), visits) * width
    whole = e.size - e.size % width
    lanes = [NP[dtype](0)] * width
    for k in range(0, whole, size):                 # each chunk's lanes from 0, added in order
        part = [NP[dtype](0)] * width
        for i in range(k, min(k + size, whole)):
            part[i % width] = part[i % width] + e[i]
        lanes = [a + b for a, b in zip(lanes, part)]
    for i in range(whole, e.size):                  # lane 0 takes the tail
        lanes[0] = lanes[0] + e[i]
    while len(lanes) > 1:                           # then pairwise, in lane order
        lanes = [a + b for a, b in zip(lanes[::2], lanes[1::2])]
    assert got[0].tobytes() == np.asarray(lanes[0], NP[dtype]).tobytes()
    agrees(fn, [x], got)


def test_a_running_sum_someone_reads_is_not_cut_into_chunks():
    i, x, acc, total = (Reg(n, d) for n, d in (("%i", "i64"), ("%x", "f64"), ("%a", "f64"),
                                                ("%t", "f64")))
    dst, src, out = Buffer(1, 0, "f64"), Buffer(2, 0, "f64"), Buffer(3, 0, "f64")
    body = [Load(x, src, Index(0, ((i, 1),))), Load(acc, dst, Index()),
            Alu(total, "add", (acc, x)), Store(dst, Index(), total)]
    plan = types.SimpleNamespace(arena=0)
    plain = [Loop(i, 1 << 20, body)]
    assert len(chunk_sums(plain, plan, iter(range(9)), visits, apart, copy)) > 1     # a sum: cut
    shown = [Loop(i, 1 << 20, [*body, Store(out, Index(0, ((i, 1),)), total)])]
    assert chunk_sums(shown, plan, iter(range(9)), visits, apart, copy) == shown    # a cumsum: not


@pytest.mark.parametrize("make", [lambda: reduce_fn((60, 50), (0, 1)),
                                  lambda: math_and_sum((3000,), (0,))])
def test_numbas_prange_runs_the_same_chunks_to_the_same_bits(make, many_chunks):
    fn = make()
    x = sample("f64", fn.params[0].type.shape)
    through_numba, text = compile_kernel_ir(fn, renderer="numba",
                                            cache=(load_module, njit_options, versions))
    assert "prange(" in text
    got, want = through_numba([x]), compile_kernel_ir(fn)[0]([x])
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))


def test_kernel_ir_takes_f64_programs_short_ones_too():
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
    assert choose(small)[0] == "kernel_ir"          # its call costs what Numba's does
