"""The numba backend (the kernel IR, rendered to LLVM) against the interpreter (the reference
semantics): every primitive on hand-built IR, NumPy programs and gradients through fg.jit,
matrix products, host steps, and what fg.jit exposes of the compiled code.

Each output is compared with eval_function on the same optimized IR: equal dtypes and shapes,
values to a few ulp (the vectorized math library differs from libm in the last bits).
tests/test_kernel_ir_render.py compares the Numba rendering with the LLVM one.
"""

import os
from fractions import Fraction

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as fnn
import fusegrad.numpy as fnp
from fusegrad.codegen import compile_numba
from fusegrad.codegen.choose import choose
from fusegrad.codegen.kernel_ir import build
from fusegrad.codegen.kernel_ir.nodes import Gemm, walk
from fusegrad.passes.schedule import SMALL_DOT_K
from fusegrad.ir import PRIMITIVES, Builder, TensorType
from fusegrad.runtime.interpreter import eval_function
from fusegrad.transforms import value_and_grad

rng = np.random.default_rng(7)
TOL = {"f64": {"rtol": 1e-12, "atol": 1e-14}, "f32": {"rtol": 2e-6, "atol": 1e-7}}
# Every elementwise primitive of the registry that takes floats (the logical ones, select and
# convert are added by hand below), so a new primitive is compiled and checked here unasked.
_FLOAT_OPS = [p for p in PRIMITIVES.values() if p.category == "elementwise"
              and p.name not in ("and", "or", "not", "select", "convert")]
UNARY = tuple(p.name for p in _FLOAT_OPS if p.arity == 1)
BINARY = tuple(p.name for p in _FLOAT_OPS if p.arity == 2)


def same(exe, fn, args, tol):
    got, want = exe(list(args)), eval_function(fn, list(args))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"result {i}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, err_msg=f"result {i}", **tol)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"result {i}")


def built(fn):
    exe = compile_numba(fn)
    assert exe.kind == "kernel_ir"
    return exe, fn


def T(dtype, shape):
    return TensorType(dtype, shape)


# -- every primitive, on hand-built IR ---------------------------------------------------------

def elementwise_fn(dtype):
    b = Builder(f"elementwise_{dtype}")
    x, y = b.param(T(dtype, (3, 5)), "x"), b.param(T(dtype, (3, 5)), "y")
    outs = [b.add1(p, [x]) for p in UNARY] + [b.add1(p, [x, y]) for p in BINARY]
    lt, gt = b.add1("lt", [x, y]), b.add1("gt", [x, y])
    outs += [b.add1("and", [lt, gt]), b.add1("or", [lt, gt]), b.add1("not", [lt]),
             b.add1("select", [lt, x, y])]
    outs += [b.add1("convert", [x], {"dtype": t}) for t in ("f32", "f64", "i64", "bool")]
    return b.build(outs)


def elementwise_args(dtype):
    np_dtype = T(dtype, ()).np_dtype
    x = rng.uniform(0.1, 3.0, (3, 5)).astype(np_dtype)
    y = rng.uniform(-2.0, 2.0, (3, 5)).astype(np_dtype)
    x[0, :4] = [np.inf, 0.0, 1e-30, 40.0]
    y[0, :4] = [np.nan, 0.0, -0.0, 2.0]
    y[1, 1] = x[1, 1]                    # ties for maximum, eq, le
    return x, y


@pytest.fixture(scope="module", params=["f64", "f32"])
def elementwise(request):
    return request.param, *built(elementwise_fn(request.param))


def test_elementwise_primitives_match_the_interpreter(elementwise):
    dtype, exe, fn = elementwise
    with np.errstate(all="ignore"):
        same(exe, fn, elementwise_args(dtype), TOL[dtype])


def test_integer_and_bool_primitives():
    b = Builder("ints")
    x, y = b.param(T("i64", (6,)), "x"), b.param(T("i64", (6,)), "y")
    outs = [b.add1(p, [x, y]) for p in ("add", "sub", "mul", "div", "maximum", "minimum",
                                         "and", "or", "lt", "eq")]
    outs += [b.add1(p, [x]) for p in ("neg", "abs", "sign", "not")]
    outs += [b.add1("convert", [x], {"dtype": t}) for t in ("f32", "f64", "bool")]
    flag = b.add1("convert", [x], {"dtype": "bool"})
    outs += [b.add1("convert", [flag], {"dtype": "f64"}), b.add1("not", [flag])]
    exe, fn = built(b.build(outs))
    with np.errstate(all="ignore"):
        same(exe, fn, (np.array([7, -7, 0, 5, -8, 3]), np.array([2, 2, 3, 0, -3, 3])), {})


@pytest.fixture(scope="module")
def index_maps():
    b = Builder("maps")
    x = b.param(T("f64", (3, 4)), "x")
    v = b.param(T("f64", (4,)), "v")
    idx = b.param(T("i64", (5,)), "idx")
    ia = b.param(T("i64", (3, 4)), "ia")

    def neg(prim, inputs, **params):
        return b.add1("neg", [b.add1(prim, inputs, params)])
    outs = [
        b.add1("add", [b.add1("broadcast_in_dim", [v], {"shape": (3, 4), "dims": (1,)}), x]),
        neg("transpose", [x], perm=(1, 0)),
        neg("slice", [x], start=(1, 0), stop=(3, 4), step=(1, 2)),
        neg("pad", [x], low=(1, 0), high=(0, 2), interior=(0, 1)),
        neg("concatenate", [x, x, b.add1("slice", [x], {"start": (0, 0), "stop": (3, 1),
                                                          "step": (1, 1)})], axis=1),
        neg("take", [x, idx], axis=1),
        neg("take_along_axis", [x, ia], axis=1),
        b.add1("scatter_add", [idx, b.add1("take", [x, idx], {"axis": 1})],
               {"axis": 1, "shape": (3, 4)}),
        b.add1("scatter_add_along_axis", [ia, b.add1("exp", [x])], {"axis": 1, "shape": (3, 4)}),
        neg("reshape", [x], shape=(4, 3)),
        b.add1("reshape", [b.add1("exp", [x])], {"shape": (12,)}),
        b.add1("reshape", [x], {"shape": (3, 1, 4)}),
        b.add1("iota", [], {"shape": (3, 4), "dtype": "f64", "axis": 1}),
        b.add1("iota", [], {"shape": (2, 3), "dtype": "i64", "axis": 0}),
        b.add1("full", [], {"shape": (3, 4), "dtype": "f64", "value": 2.5}),
        b.add1("mul", [x, b.add1("constant", [], {"value": rng.standard_normal((3, 4))})]),
        b.add1("cumsum", [x], {"axis": 1}),
        b.add1("cumsum", [x], {"axis": 0, "reverse": True}),
        x,
    ]
    for prim in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):
        outs += [b.add1(prim, [x], {"axes": axes}) for axes in ((0,), (1,), (0, 1), ())]
    outs += [b.add1(prim, [x], {"axis": axis}) for prim in ("argmax", "argmin")
             for axis in (0, 1)]
    xs = rng.standard_normal((3, 4))
    xs[0, 1] = np.nan
    xs[2, 2] = xs[2, 3]
    args = (xs, rng.standard_normal(4), np.array([0, 3, 1, 1, -1]), rng.integers(0, 4, (3, 4)))
    return (*built(b.build(outs)), args)


def test_index_maps_reductions_and_scans_match_the_interpreter(index_maps):
    exe, fn, args = index_maps
    same(exe, fn, args, TOL["f64"])


def test_results_never_alias_the_arguments(index_maps):
    exe, _, args = index_maps
    outs = exe(list(args))
    for out in outs:
        assert not any(np.shares_memory(out, a) for a in args if isinstance(a, np.ndarray))


def test_a_long_matmul_is_a_gemm_call():
    b = Builder("matmuls")
    a, c = b.param(T("f32", (2, 3, 4)), "a"), b.param(T("f32", (2, 4, 5)), "c")
    m = b.param(T("f64", (SMALL_DOT_K + 1, 4)), "m")   # more terms than a loop kernel takes
    mt = b.add1("transpose", [m], {"perm": (1, 0)})
    outs = [b.add1("matmul", [a, c]), b.add1("matmul", [mt, b.add1("tanh", [m])])]
    exe, fn = built(b.build(outs))
    same(exe, fn, (rng.standard_normal((2, 3, 4)).astype(np.float32),
                   rng.standard_normal((2, 4, 5)).astype(np.float32),
                   rng.standard_normal((SMALL_DOT_K + 1, 4))), {"rtol": 1e-5, "atol": 1e-6})
    program, _ = build(fn)
    gemms = [s for g in program.groups for s in walk(g) if isinstance(s, Gemm)]
    assert [g.dtype for g in gemms] == ["f64"]      # a @ c has 4 terms: loops compute it


def _fma_chain(a, b):
    """a @ b as fma(a[i, k], b[k, j], acc) in k order, each step rounded once: exactly, with
    Fractions, for float64; for float32 the product and sum are exact or rounded once in
    float64 before rounding to float32."""
    acc = np.zeros((a.shape[0], b.shape[1]), a.dtype)
    for k in range(a.shape[1]):
        if a.dtype == np.float32:
            acc = (a[:, k:k + 1].astype(np.float64) * b[k] + acc).astype(a.dtype)
            continue
        for i, j in np.ndindex(acc.shape):
            acc[i, j] = float(Fraction(a[i, k]) * Fraction(b[k, j]) + Fraction(acc[i, j]))
    return acc


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_small_k_matmul_is_a_row_of_fmas_in_its_consumers_kernel(dtype):
    """dH = dl @ W.T with few classes, then dH * (1 - h*h): loops, no ?gemm, the product
    np.matmul's bits (fma in k order, as OpenBLAS)."""
    def f(dl, w, h):
        return (dl @ w.T) * (1 - h * h)

    jf = fg.jit(f)
    for k in (1, 5, SMALL_DOT_K):
        dl, w = (rng.standard_normal(s).astype(dtype) for s in ((40, k), (24, k)))
        h = rng.standard_normal((40, 24)).astype(dtype)
        assert "gemm(" not in jf.lower(dl, w, h).source
        dot = fg.jit(lambda dl, w: dl @ w.T)(dl, w)
        exact = _fma_chain(dl, w.T)
        assert dot.dtype == dtype and np.array_equal(dot, exact)
        np.testing.assert_array_equal(jf(dl, w, h), exact * (1 - h * h))
        # np.matmul sums in k order too where OpenBLAS's kernel does (float64 here; float32
        # on Haswell, not on Zen for k > 8): then the bits are the same, else within rounding
        bound = k * np.finfo(dtype).eps * (np.abs(dl) @ np.abs(w.T))
        assert np.all(np.abs(dot - dl @ w.T) <= bound)
    dl, w = rng.standard_normal((40, SMALL_DOT_K + 1)), rng.standard_normal((24, SMALL_DOT_K + 1))
    assert "gemm(" in jf.lower(dl, w, rng.standard_normal((40, 24))).source  # a ?gemm call


def test_the_numba_renderings_gemm_gives_numpys_bits():
    """numba_support.gemm on the views the Numba rendering passes (flat buffers' slices,
    reshaped): one ?gemm call, np.matmul's bits."""
    from numba import njit

    from fusegrad.codegen.kernel_ir.numba_support import gemm

    @njit
    def product(a, b, out, m, k, n):
        gemm(a[:m * k].reshape((m, k)), b[:k * n].reshape((k, n)), out[:m * n].reshape((m, n)))
    for dtype in (np.float32, np.float64):
        a = rng.standard_normal((7, SMALL_DOT_K + 1)).astype(dtype)
        b = rng.standard_normal((SMALL_DOT_K + 1, 6)).astype(dtype)
        out = np.full(50, np.nan, dtype)
        product(a.ravel(), b.ravel(), out, 7, SMALL_DOT_K + 1, 6)
        assert np.array_equal(out[:42].reshape(7, 6), a @ b) and np.isnan(out[42:]).all()


def test_an_op_with_no_compiled_form_is_a_host_step_between_compiled_parts():
    b = Builder("host")                  # an integer matmul: no BLAS, so a host step
    x = b.param(T("i64", (3, 3)), "x")
    y = b.add1("matmul", [b.add1("mul", [x, x]), x])
    exe, fn = built(b.build([b.add1("add", [y, x]), b.add1("reduce_sum", [y], {"axes": (0,)})]))
    same(exe, fn, (rng.integers(-5, 5, (3, 3)),), {})
    b = Builder("wide")
    x = b.param(T("i64", (3, SMALL_DOT_K + 1)), "x")
    wide = b.build([b.add1("matmul", [x, b.add1("transpose", [x], {"perm": (1, 0)})])])
    path, reason = choose(wide)
    assert path == "kernel_ir" and reason.startswith("host steps: matmul at") and "i64" in reason
    exe, fn = built(wide)
    same(exe, fn, (rng.integers(-5, 5, (3, SMALL_DOT_K + 1)),), {})


def test_scalar_parameters_and_results():
    b = Builder("scalars")
    s, f = b.param(T("f64", ()), "s"), b.param(T("f32", ()), "f")
    i = b.param(T("i64", ()), "i")
    outs = [b.add1("sin", [s]), b.add1("mul", [f, f]), b.add1("reduce_sum", [s], {"axes": ()}),
            b.add1("add", [i, i]), b.add1("reshape", [s], {"shape": (1, 1)}), s]
    exe, fn = built(b.build(outs))
    same(exe, fn, (1.5, np.float32(2.0), 3), TOL["f64"])
    same(exe, fn, (np.asarray(0.5), np.asarray(2.5, np.float32), np.int64(4)), TOL["f64"])


# -- programs through fg.jit ---------------------------------------------------------------------

def frontend_program(x, y, v, t):
    """Broadcasting, negative axes, keepdims, float32 and every composite, forward."""
    z = x * v + y.T[:, :1]
    return (np.sum(z, axis=-1, keepdims=True), np.max(z, axis=(0, 1)), np.mean(z, axis=-2),
            np.argmax(z, axis=-1), np.cumsum(z, axis=-1), np.where(z > 0, z, 0.5 * z),
            fnn.softmax(z, axis=-1), fnn.log_softmax(z, axis=0), fnn.logsumexp(z, axis=-1),
            fnn.cross_entropy(z, t), fnn.layer_norm(z), fnn.gelu(z),
            fnn.gelu(z, approximate=True), (z.astype(np.float32) * 2.0) ** 2,
            np.clip(z, -0.5, 0.5), z[::-1, 1:], np.concatenate([z, z[:, :1]], axis=-1))


FRONTEND_ARGS = (rng.standard_normal((5, 3)), rng.standard_normal((3, 5)), rng.standard_normal(3),
                 np.array([2, 0, 1, 1, 0]))


@pytest.fixture(scope="module")
def frontend():
    return fg.jit(frontend_program, backend="numba")


def assert_trees_close(got, want, rtol=1e-11, atol=1e-12):
    got_leaves, want_leaves = fg.api.flatten(got)[0], fg.api.flatten(want)[0]
    assert len(got_leaves) == len(want_leaves)
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"leaf {i}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"leaf {i}")


def test_numpy_programs_with_composites_match_the_interpreter(frontend):
    want = fg.jit(frontend_program, backend="interp")(*FRONTEND_ARGS)
    assert_trees_close(frontend(*FRONTEND_ARGS), want)


def w1(x, w, b):
    return np.sum(np.tanh(x * w + b) * fnp.sigmoid(x))


@pytest.fixture(scope="module")
def w1_grad():
    return fg.jit(value_and_grad(w1, argnums=(0, 1, 2)), backend="numba")


def test_w1_value_and_gradient_match_the_interpreter(w1_grad):
    args = tuple(rng.standard_normal(1000) for _ in range(3))
    want = fg.jit(value_and_grad(w1, argnums=(0, 1, 2)), backend="interp")(*args)
    assert_trees_close(w1_grad(*args), want)
    assert "tanh %1 : f64[1000]   (test_codegen.py:" in w1_grad.lower(*args).source


def loss_zoo(w, x, t):
    """A gradient through matmul, broadcasting, every composite and a column reduction."""
    h = np.tanh(x @ w + 0.1)
    z = fnn.layer_norm(h) * 2.0 + fnn.gelu(h)
    return (fnn.cross_entropy(z, t) + np.sum(fnn.softmax(z, axis=-1) * h)
            + np.mean(fnn.logsumexp(z, axis=-1)) + np.sum(np.sum(h, axis=0) ** 2)
            + np.sum(fnn.log_softmax(z, axis=0)[0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradients_match_the_interpreter(dtype):
    args = (rng.standard_normal((5, 4)).astype(dtype), rng.standard_normal((6, 5)).astype(dtype),
            np.array([0, 3, 1, 2, 2, 1]))
    f = value_and_grad(loss_zoo, argnums=(0, 1))
    got = fg.jit(f, backend="numba")(*args)
    want = fg.jit(f, backend="interp")(*args)
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == np.float64 else {"rtol": 3e-5, "atol": 1e-6}
    assert_trees_close(got, want, **tol)


def test_lowered_exposes_ir_kernels_and_clusters(w1_grad):
    args = tuple(rng.standard_normal(5) for _ in range(3))
    lowered = w1_grad.lower(*args)
    assert len(lowered.clusters) == lowered.kernels == 1
    assert set(lowered.clusters[0]) <= set(lowered.ir.ops)
    assert "subgraph cluster_0" in lowered.ir.to_dot(clusters=lowered.clusters)


def test_debug_3_prints_the_source(capsys, monkeypatch, w1_grad):
    monkeypatch.setenv("FUSEGRAD_DEBUG", "3")
    args = tuple(rng.standard_normal(5) for _ in range(3))
    compile_numba(w1_grad.lower(*args).ir)
    assert "// ---- kernel IR rendered to LLVM for @w1 ----" in capsys.readouterr().out


def test_jitted_scalar_functions_take_the_fast_path():
    f = fg.jit(value_and_grad(lambda x: np.sin(x) * x + np.exp(-x * x)), backend="numba")
    value, grad = f(0.5)
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.float64
    np.testing.assert_allclose(grad, np.cos(0.5) * 0.5 + np.sin(0.5) - np.exp(-0.25),
                               rtol=1e-14)
    assert len(f._fast) == 1
    assert f(0.25)[0] == np.sin(0.25) * 0.25 + np.exp(-0.0625)


def test_scalar_results_of_a_kernel_keep_their_order_across_passes():
    b = Builder("passes")
    x = b.param(T("f64", (4, 5)), "x")
    m = b.add1("reduce_max", [x], {"axes": (1,)})
    t = b.add1("sub", [x, b.add1("broadcast_in_dim", [m], {"shape": (4, 5), "dims": (0,)})])
    late = b.add1("reduce_sum", [t], {"axes": (0, 1)})          # second pass, defined first
    early = b.add1("reduce_sum", [x], {"axes": (0, 1)})         # first pass, defined later
    exe, fn = built(b.build([late, early, b.add1("exp", [t])]))
    same(exe, fn, (rng.standard_normal((4, 5)),), TOL["f64"])


def test_without_a_cblas_long_matmuls_are_host_steps(tmp_path):
    """FUSEGRAD_BLAS=numba (or no CBLAS found): a long matmul is a host step (np.matmul), its
    results np.matmul's."""
    import subprocess
    import sys
    code = ("import numpy as np, fusegrad as fg\n"
            "from fusegrad.codegen import cblas\n"
            "from fusegrad.codegen.choose import choose\n"
            "r = np.random.default_rng(0)\n"
            "a, b = r.standard_normal((5, 40)), r.standard_normal((40, 3))\n"
            "g = fg.jit(lambda a, b: (a @ b) * 2.0 + a[:, :3])\n"
            "print(cblas.DESCRIPTION, '|', choose(g.lower(a, b).ir)[1])\n"
            "print(np.abs(g(a, b) - ((a @ b) * 2.0 + a[:, :3])).max())\n")
    env = dict(os.environ, FUSEGRAD_BLAS="numba", FUSEGRAD_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert out[0].startswith("none | host steps: matmul at") and "no CBLAS found" in out[0]
    assert float(out[1]) == 0.0


def test_compiled_matmuls_never_import_scipy_and_numba_blas_still_works(tmp_path):
    """fusegrad's compiled code calls NumPy's CBLAS and never imports scipy.linalg; a user's
    own njit np.dot afterwards still gets SciPy's BLAS from Numba as usual."""
    import subprocess
    import sys
    code = ("import sys, numpy as np, numba, fusegrad as fg\n"
            "a = np.arange(12.0).reshape(3, 4)\n"
            "g = fg.jit(lambda a: np.sum(np.tanh(a @ a.T)))\n"
            "print(float(g(a)), 'scipy.linalg' in sys.modules)\n"
            "dot = numba.njit(lambda a: np.dot(a, a.T))\n"
            "print(float(np.abs(dot(a) - a @ a.T).max()), 'scipy.linalg' in sys.modules)\n")
    env = dict(os.environ, FUSEGRAD_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert float(out[0]) == pytest.approx(np.sum(np.tanh(np.arange(12.0).reshape(3, 4) @
                                                         np.arange(12.0).reshape(3, 4).T)))
    assert out[1] == "False" and float(out[2]) == 0.0 and out[3] == "True"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sin_and_cos_of_huge_arguments_are_cs(dtype):
    """A Cody-Waite sin and cos would be wrong past |x| = 2**43 (2**19 in float32): the
    kernel IR calls C's."""
    x = np.array([1e20, 3e15, 2.0 ** 50, 1.0, -7e30, 1e6] * 40, dtype)
    f = fg.jit(lambda v: np.sin(v) * np.cos(v), backend="numba", tiered=False)
    assert f.lower(x).executable.kind == "kernel_ir"
    np.testing.assert_allclose(f(x), np.sin(x) * np.cos(x), rtol=2e-7 if dtype == np.float32
                               else 1e-15, atol=1e-7 if dtype == np.float32 else 1e-16)


def test_what_the_kernel_ir_cannot_run_runs_on_the_interpreter_and_says_why(monkeypatch, capsys):
    monkeypatch.setattr("fusegrad.codegen.kernel_ir.jit.DATA_OFFSET", None)
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    x = rng.standard_normal(5)
    f = fg.jit(lambda x: np.sum(np.tanh(x) * x), backend="numba", tiered=False)
    assert f(x) == np.sum(np.tanh(x) * x)
    assert f.lower(x).executable.kind == "interp"
    assert "kernel IR cannot run the address of an array's data" in capsys.readouterr().err
