"""Both renderings of the kernel IR, LLVM (kernel_ir/llvm.py) and Numba (kernel_ir/numba.py),
over every registry primitive the kernel IR covers, in every dtype its shape rule accepts:
first calls (poison on, as conftest sets) agree with the interpreter, and the two renderings
give the same bits. Operands hold nan, inf, signed zeros and int64's extremes; each Function
also runs its op on 0-d and empty operands; gathers take negative indices and raise NumPy's
IndexError out of range. One Function per primitive and dtype, compiled once per rendering.
Below them, unit tests render hand-built programs and a traced one end to end."""

import functools
import re

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen.choose import renderer
from fusegrad.codegen.compile import load_module, njit_options, versions
from fusegrad.codegen.kernel_ir import compile_kernel_ir, covers
from fusegrad.codegen.kernel_ir import numba as numba_render
from fusegrad.codegen.kernel_ir.nodes import (Alu, Buffer, Const, Index, Load, Loop, Note,
                                              Program, Raise, Reg, Store)
from fusegrad.codegen.kernel_ir.plan import Plan
from fusegrad.ir import PRIMITIVES, Builder, TensorType
from fusegrad.ir.registry import ShapeError, infer_types
from fusegrad.passes.schedule import SMALL_DOT_K
from fusegrad.runtime.interpreter import eval_function
from fusegrad.runtime.signature import log_compile

DTYPES = ("f32", "f64", "i64", "bool")
NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "bool": np.bool_}
SPECIAL = {"f": [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, 3e38, -2.5],
           "i": [-(2 ** 63), 2 ** 63 - 1, 0, -1, 2 ** 60 + 2 ** 36 + 1, -7]}   # no f32 via f64


def sample(dtype, shape, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "i64":
        x = rng.integers(-9, 10, shape)
        x.flat[:6] = SPECIAL["i"][:x.size]
    else:
        x = rng.standard_normal(shape) * 3
        x.flat[:8] = SPECIAL["f"][:x.size]
    if positive:
        x = np.where(np.abs(x) < 0, 2 ** 63 - 1, np.abs(x))    # abs(INT64_MIN) wraps
    return x.astype(NP[dtype])


class Case:
    """A Function being built, and the arguments of its first call."""

    def __init__(self, name):
        self.b, self.args = Builder(name), []

    def param(self, dtype, shape, value=None, positive=False):
        self.args.append(sample(dtype, shape, len(self.args), positive) if value is None
                         else np.asarray(value, NP[dtype]))
        return self.b.param(TensorType(dtype, shape), f"x{len(self.args)}")

    def op(self, prim, *xs, **params):
        return self.b.add1(prim, list(xs), params)


# -- one Function per primitive and dtype ------------------------------------------------------

def _elementwise(prim, dtype):
    """prim on operands of shape (2, 4), () and (0, 3), or None where the shape rule says no."""
    signatures = ([dtype], [dtype, dtype], ["bool", dtype, dtype])
    params_ = [{"dtype": d} for d in DTYPES] if prim == "convert" else [{}]
    for sig in signatures:
        try:
            infer_types(prim, [TensorType(d, (2,)) for d in sig], params_[0])
        except ShapeError:
            continue
        c = Case(f"{prim}_{dtype}")
        outs = []
        for shape in ((2, 4), (), (0, 3)):
            xs = [c.param(d, shape, positive=prim in ("log", "sqrt", "pow")) for d in sig]
            outs += [c.op(prim, *xs, **p) for p in params_]
        return c, outs
    return None


def _shapes(c, d):
    x = c.param(d, (2, 3))
    return [c.op("reshape", x, shape=(3, 2)),
            c.op("broadcast_in_dim", c.param(d, (3,)), shape=(2, 3), dims=(1,)),
            c.op("broadcast_in_dim", c.param(d, ()), shape=(2, 2), dims=()),
            c.op("transpose", x, perm=(1, 0)),
            c.op("transpose", c.param(d, (2, 0, 3)), perm=(2, 0, 1)),
            c.op("slice", c.param(d, (2, 5)), start=(0, 1), stop=(2, 5), step=(1, 2)),
            c.op("rev", x, axes=(0, 1)),
            c.op("pad", x, low=(1, 0), high=(0, 2), interior=(0, 1)),
            c.op("concatenate", x, c.param(d, (1, 3)), axis=0),
            c.op("concatenate", c.param(d, (2, 1)), x, axis=1)]


def _reduction(prim):
    def build(c, d):
        x = c.param(d, (2, 3))
        outs = [c.op(prim, x, axes=(1,)), c.op(prim, x, axes=(0, 1)),
                c.op(prim, c.param(d, ()), axes=())]
        if prim in ("reduce_sum", "reduce_prod"):
            outs.append(c.op(prim, c.param(d, (0, 3)), axes=(0,)))
        return outs
    return build


def _gathers(c, d):
    x = c.param(d, (2, 5))
    i = c.param("i64", (4,), [0, -1, 4, -5])
    j = c.param("i64", (2, 3), [[1, -2, 0], [4, 4, -5]])
    return [c.op("take", x, i, axis=1), c.op("take", x, c.param("i64", (2, 2), [[1, -2], [0, 0]]),
                                             axis=0),
            c.op("take_along_axis", x, j, axis=1),
            c.op("take", x, c.param("i64", (0,), []), axis=1)]


def _scatters(c, d):
    i = c.param("i64", (4,), [0, -1, 4, -1])
    j = c.param("i64", (2, 3), [[1, -2, 1], [4, 4, -5]])
    return [c.op("scatter_add", i, c.param(d, (2, 4)), axis=1, shape=(2, 5)),
            c.op("scatter_add_along_axis", j, c.param(d, (2, 3)), axis=1, shape=(2, 5))]


def _matmul(k):
    def build(c, d):
        outs = [c.op("matmul", c.param(d, (2, k)), c.param(d, (k, 3))),
                c.op("matmul", c.param(d, (2, 2, k)), c.param(d, (2, k, 1)))]
        if k <= SMALL_DOT_K:
            outs.append(c.op("matmul", c.param(d, (2, 0)), c.param(d, (0, 3))))
        return outs
    return build


def _creation(c, d):
    return [c.op("iota", shape=(3, 2), dtype=d, axis=1),
            c.op("full", shape=(2, 3), dtype=d, value=True if d == "bool" else 3),
            c.op("constant", value=sample(d, (2, 2), 9))]


def _folds(c, d):
    x = c.param(d, (2, 3))
    outs = [c.op("argmax", x, axis=1), c.op("argmin", x, axis=0)]
    if d != "bool":
        outs += [c.op("cumsum", x, axis=1), c.op("cumsum", x, axis=0, reverse=True),
                 c.op("cumprod", x, axis=1)]
    return outs


OTHERS = {"shapes": _shapes, "folds": _folds, "reduce_sum": _reduction("reduce_sum"),
          "reduce_prod": _reduction("reduce_prod"), "reduce_max": _reduction("reduce_max"),
          "reduce_min": _reduction("reduce_min"), "gathers": _gathers, "scatters": _scatters,
          "matmul": _matmul(3), "matmul_gemm": _matmul(SMALL_DOT_K + 5), "creation": _creation}
ELEMENTWISE = sorted(n for n, p in PRIMITIVES.items() if p.scalar is not None)
# compile.py's module cache, for Numba, logging as fg.jit does (FUSEGRAD_LOG=compile)
CACHE = (functools.partial(load_module, log=log_compile), njit_options, versions)


@functools.cache
def case(kind, dtype):
    """(Case, its Function, {renderer: (run, text)}), or (None, why not, None)."""
    if kind in OTHERS:
        c = Case(f"{kind}_{dtype}")
        try:
            outs = OTHERS[kind](c, dtype)
        except ShapeError as e:
            return None, f"its shape rule says no: {e}", None
    else:
        found = _elementwise(kind, dtype)
        if found is None:
            return None, "its shape rule says no", None
        c, outs = found
    fn = c.b.build(outs)
    why = covers(fn)
    if why:
        return None, f"the kernel IR lacks {why}", None
    return c, fn, {r: compile_kernel_ir(fn, renderer=r, cache=CACHE) for r in ("llvm", "numba")}


def _bits(x):
    """x's bytes, every nan one canonical nan: a nan's sign and payload are not a value (LLVM's
    O2 and Numba pass a nan operand through or make x86's default nan, as NumPy's loops do)."""
    if x.dtype.kind == "f":
        x = np.where(np.isnan(x), np.array(np.nan, x.dtype), x)
    return x.tobytes()


def run_both(kind, dtype, args=None):
    """Both renderings' first call against the interpreter's; their bits against each other."""
    c, fn, compiled = case(kind, dtype)
    if c is None:
        pytest.skip(fn)
    args = c.args if args is None else args
    with np.errstate(all="ignore"):
        want = eval_function(fn, list(args))
        got = {r: run(list(args)) for r, (run, _) in compiled.items()}
    for k, w in enumerate(want):
        w, llvm, numba = np.asarray(w), got["llvm"][k], got["numba"][k]
        assert (llvm.dtype, llvm.shape) == (w.dtype, w.shape), k
        assert _bits(llvm) == _bits(numba) and numba.shape == w.shape, \
            f"result {k}: LLVM {llvm} and Numba {numba} differ in their bits"
        if w.dtype.kind == "f":
            tol = 4e-6 if w.dtype == np.float32 else 1e-13
            np.testing.assert_allclose(llvm, w, rtol=tol, atol=tol, err_msg=f"result {k}")
        else:
            np.testing.assert_array_equal(llvm, w, err_msg=f"result {k}")
    return compiled


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", [*ELEMENTWISE, *OTHERS])
def test_both_renderings_agree_with_the_interpreter_and_each_other(kind, dtype):
    run_both(kind, dtype)


def test_every_primitive_the_kernel_ir_covers_has_a_case():
    from fusegrad.codegen.kernel_ir.cover import _OTHER
    seen = set(ELEMENTWISE)
    for kind in OTHERS:
        for dtype in DTYPES:
            c, fn, _ = case(kind, dtype)
            if c is not None:
                seen.update(op.prim for op in fn.ops)
    covered = {n for n, p in PRIMITIVES.items() if p.scalar is not None} | set(_OTHER)
    assert covered <= seen, f"no case renders {sorted(covered - seen)}"


@pytest.mark.parametrize("kind,where,bad,first", [
    ("gathers", 1, [0, 5, 1, 1], 5), ("gathers", 1, [-6, 0, 1, 1], -6),
    ("scatters", 0, [0, 1, 9, -8], 9)])
def test_an_index_out_of_range_raises_on_both(kind, where, bad, first):
    c, fn, compiled = case(kind, "f64")
    args = list(c.args)
    args[where] = np.array(bad)
    for r, (run, _) in compiled.items():
        with pytest.raises(IndexError, match=rf"^index {first} is out of bounds for axis 1 "
                                             r"with size 5$"):
            run(args)


# -- the kernel IR level: hand-built programs, the renderer choice, a traced program ---------

def tiny_program():
    """out[i] = fma(x[i], 2, x[i]) for i < 4, a Raise where x[i] is nan, by hand."""
    i, x, y, nan = Reg("%i", "i64"), Reg("%x", "f64"), Reg("%y", "f64"), Reg("%n", "bool")
    body = [Load(x, Buffer(1, 0, "f64"), Index(0, ((i, 1),))),
            Alu(nan, "uno", (x, x)), Raise(nan, 1, i),
            Alu(y, "fma", (x, Const(2.0, "f64"), x)),
            Store(Buffer(2, 0, "f64"), Index(0, ((i, 1),)), y)]
    return Program("tiny", [[Note("%y = fma %x, 2.0, %x   ; here.py:1"), Loop(i, 4, body)]],
                   [], [(FloatingPointError, "nan at {}")], [4])


def test_a_hand_built_program_renders_the_same_through_both():
    b = Builder("tiny")
    x = b.param(TensorType("f64", (4,)), "x")
    plan = Plan(b.build([b.add1("neg", [x])]))
    from fusegrad.codegen.kernel_ir.jit import DATA_OFFSET
    from fusegrad.codegen.kernel_ir.run import compile_program as through_llvm
    runs = [through_llvm(tiny_program(), plan, DATA_OFFSET),
            numba_render.compile_program(tiny_program(), plan, CACHE)]
    x = np.array([0.1, -3.0, 1e308, 7.0])
    outs = [run([x])[0] for run, _ in runs]
    assert outs[0].tobytes() == outs[1].tobytes()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(outs[0], x * 2.0 + x)     # x * 2 is exact: one rounding
    for run, text in runs:
        assert "here.py:1" in text
        with pytest.raises(FloatingPointError, match="nan at 2"):
            run([np.array([0.0, 1.0, np.nan, 2.0])])


def test_the_numba_table_spells_each_op_with_its_llvm_meaning():
    f, i = Reg("%f", "f32"), Reg("%k", "i32")
    spell = lambda op, *args, out=f: numba_render.alu(Alu(out, op, args))  # noqa: E731
    assert spell("add", f, Const(0.5, "f32")) == "f + np.float32(0.5)"
    assert spell("lshr", i, Const(23, "i32"), out=i) == "np.int32(np.uint32(k) >> " \
                                                        "np.uint32(np.int32(23)))"
    assert spell("ne", f, f, out=Reg("%b", "bool")) == "f != f"
    assert spell("bitcast", f, out=i) == "as_i32(f)"
    assert numba_render.literal(Const(-(2 ** 63), "i64")) == "np.int64(np.uint64(" \
                                                              "9223372036854775808))"
    assert numba_render.literal(Const(float("-inf"), "f64")) == "-np.inf"


def test_a_parallel_loop_is_a_prange():
    program = tiny_program()
    loop = program.groups[0][1]
    loop.parallel = True

    def text():
        return numba_render.source(program, [list(range(len(program.groups)))], 3,
                                   lambda kind, parallel: {"parallel": parallel})
    assert "for i in range(4):" in text() and "@njit(parallel=False)" in text()  # it returns
    loop.body = [s for s in loop.body if not isinstance(s, Raise)]
    assert "for i in prange(4):" in text() and "@njit(parallel=True)" in text()


def test_the_renderer_is_chosen_in_one_place_and_says_why(monkeypatch):
    monkeypatch.delenv("FUSEGRAD_RENDERER", raising=False)
    assert renderer() == ("llvm", "the default (FUSEGRAD_RENDERER unset)")
    monkeypatch.setenv("FUSEGRAD_RENDERER", "numba")
    assert renderer() == ("numba", "FUSEGRAD_RENDERER=numba")
    monkeypatch.setenv("FUSEGRAD_RENDERER", "c")
    with pytest.raises(ValueError, match="expected one of llvm, numba"):
        renderer()


def gather_loss(x, idx):
    return np.sum(np.tanh(x[:, idx]) * 2)


@pytest.mark.parametrize("name", ["llvm", "numba"])
def test_a_traced_program_through_each_renderer(name, monkeypatch, capsys):
    monkeypatch.setenv("FUSEGRAD_RENDERER", name)
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    x = sample("f32", (3, 5), 4)
    x[~np.isfinite(x)] = 0.5
    jitted = fg.jit(fg.value_and_grad(gather_loss), tiered=False)
    value, grad = jitted(x, np.array([0, -1, 2, 2]))
    want = fg.jit(fg.value_and_grad(gather_loss), backend="interp")(x, np.array([0, -1, 2, 2]))
    np.testing.assert_allclose(value, want[0], rtol=1e-5)
    np.testing.assert_allclose(grad, want[1], rtol=1e-5, atol=1e-6)
    low = jitted.lower(x, np.array([0, -1, 2, 2]))
    assert low.executable.kind == "kernel_ir"
    assert f"render gather_loss: {name}" in capsys.readouterr().err
    line = gather_loss.__code__.co_firstlineno + 1
    assert f"test_kernel_ir_render.py:{line}" in low.source
    assert ("rendered for Numba" in low.source) == (name == "numba")
    with pytest.raises(IndexError, match=re.escape(f"(at test_kernel_ir_render.py:{line})")):
        jitted(x, np.array([0, 5, 1, 1]))


def test_both_texts_carry_every_equation_and_declare_only_what_they_use():
    from fusegrad.codegen.kernel_ir import build
    for kind, dtype in (("tanh", "f32"), ("gathers", "f64"), ("matmul_gemm", "f64")):
        c, fn, compiled = case(kind, dtype)
        program, _ = build(fn)
        for run, text in compiled.values():
            for lines in program.notes:
                assert all(line in text for line in lines), (kind, lines)
        llvm = compiled["llvm"][1]
        declared = re.findall(r"^declare \S+ (@[\w.]+)\(", llvm, re.M)
        assert all(re.search(rf"call \S+ {re.escape(f)}\(", llvm) for f in declared), declared
        assert bool(re.search(r"call float @tanh\.\d+\(", llvm)) == (kind == "tanh")  # mathlib's
        assert ("@fusegrad_dgemm" in declared) == (kind == "matmul_gemm")


def test_the_numba_rendering_is_loaded_from_disk_by_a_new_module(monkeypatch, capsys):
    from fusegrad.codegen.compile import forget_modules
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    c, fn, compiled = case("exp", "f64")
    capsys.readouterr()
    forget_modules()                    # as a new process: only the files on disk are left
    run, text = compile_kernel_ir(fn, renderer="numba", cache=CACHE)
    assert text == compiled["numba"][1]
    log = capsys.readouterr().err
    assert f"load {fn.name} from disk cache" in log and "cache miss" not in log
    assert run(c.args)[0].tobytes() == compiled["numba"][0](c.args)[0].tobytes()


def host_and_scan_loss(a, idx, x):
    """A host step (cholesky) between compiled parts, a gather, and a compiled f32 scan."""
    chol = np.linalg.cholesky(a @ a.T + 3 * np.eye(3))

    def body(c, xi):
        c = np.tanh(c * 0.5 + xi)
        return c, c.sum()
    c, ys = fg.lax.scan(body, x[0], x)
    return np.sum(chol[:, idx] ** 2) + np.sum(ys) + np.sum(c)


def test_host_steps_and_control_flow_through_both_renderers(monkeypatch):
    """Both renderings split at the host step and compile the scan in place: the same bits,
    the interpreter's values, and no fallback to another path (kind stays kernel_ir)."""
    a = np.arange(9.0).reshape(3, 3) / 10
    idx, x = np.array([0, 2, -1]), np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)
    grad = fg.grad(host_and_scan_loss, argnums=(0, 2))
    want = fg.jit(grad, backend="interp")(a, idx, x)
    got = {}
    for name in ("llvm", "numba"):
        monkeypatch.setenv("FUSEGRAD_RENDERER", name)
        jitted = fg.jit(grad, tiered=False)
        got[name] = jitted(a, idx, x)
        assert jitted.lower(a, idx, x).executable.kind == "kernel_ir"
    for k, w in enumerate(want):
        assert got["llvm"][k].tobytes() == got["numba"][k].tobytes(), k
        np.testing.assert_allclose(got["llvm"][k], w, rtol=1e-6, atol=1e-7)
