"""Functions of float64 arrays compiled through the kernel IR (what the LLVM loop nests,
codegen/nests.py, compiled before it) against the interpreter, NumPy and finite differences:
broadcasts, strided and reversed slices, pads, concatenation, reductions over any axes, short
and long matmuls, batched ones, gradients of orders 1 and 2, nan and inf, empty arrays, bool
params and results, results that are params or constants, poison mode, threads, hot and cold
groups giving the same bits; every program takes the path."""

import threading

import numpy as np

import fusegrad as fg
from fusegrad.codegen import choose
from fusegrad.codegen.kernel_ir import run
from fusegrad.testing import assert_backends_agree, check_grads

HEADER = "; fusegrad: @"
KERNEL_IR = " as kernel IR"


def _pair(fun, argnums=0):
    return (fg.jit(fg.value_and_grad(fun, argnums=argnums), backend="numba"),
            fg.jit(fg.value_and_grad(fun, argnums=argnums), backend="interp"))


def _took_kernel_ir(jitted, *args) -> bool:
    source = jitted.lower(*args).source
    return source.startswith(HEADER) and KERNEL_IR in source.splitlines()[0]


def _assert_close(got, want, rtol=1e-12, atol=1e-14):
    for g, w in zip(_leaves(got), _leaves(want)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in _leaves(item)]
    return [np.asarray(x)]


def shapes(x, w):
    """Broadcasts, transposes, strided and reversed slices, concatenation, reductions over
    the first, middle and last axes, and a batched product: x (3, 4, 5), w (5, 6)."""
    y = x * w[:, 0] + np.flip(x, axis=1) - x[:, ::-1, ::2].sum(axis=2, keepdims=True)
    z = np.concatenate([y, np.transpose(x, (0, 2, 1))[:, :4, :] ** 2], axis=2)
    m = np.max(z, axis=1) - np.min(z, axis=(0, 1), keepdims=True)[0] + np.prod(x, axis=1)[:, :1]
    s = np.sum(y * y, axis=(0, 1)) + np.mean(z, axis=0)[1, :5]
    batched = x @ w                                          # (3, 4, 6): ?gemm per batch
    short = x[:, :, :3] @ w[:3, :]                           # 3 terms: fmas
    return (np.sum(m * m) + np.sum(s) + np.sum(batched * short) / 7.0
            + np.sum(np.where(batched > 0.1, batched, 0.5 * short)))


X = np.random.default_rng(0).uniform(0.3, 1.2, (3, 4, 5))
W = np.random.default_rng(1).uniform(-1.0, 1.0, (5, 6))


def test_shape_ops_reductions_and_products_match_the_interpreter():
    fast, ref = _pair(shapes, (0, 1))
    assert _took_kernel_ir(fast, X, W)
    _assert_close(fast(X, W), ref(X, W))


def test_first_calls_agree_on_eager_interp_and_numba():
    """Nothing warmed up: each backend's first call, value and gradients (and then, that
    numba's was the kernel IR)."""
    assert_backends_agree(fg.value_and_grad(shapes, argnums=(0, 1)), X, W, rtol=1e-12,
                          atol=1e-14)
    assert_backends_agree(fg.value_and_grad(mlp, argnums=(0, 1, 2, 3)), *_mlp_args(),
                          rtol=1e-12, atol=1e-14)
    assert _took_kernel_ir(fg.jit(fg.value_and_grad(shapes, argnums=(0, 1)), backend="numba"), X, W)
    assert _took_kernel_ir(fg.jit(fg.value_and_grad(mlp, argnums=(0, 1, 2, 3)), backend="numba"),
                       *_mlp_args())


def test_shape_ops_gradients_match_finite_differences():
    check_grads(shapes, (X, W), order=2, backend="numba")


def mlp(W1, b1, W2, b2, X, Y):
    logits = np.tanh(X @ W1 + b1) @ W2 + b2
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(Y * log_probs, axis=1))


def _mlp_args(batch=16, d=20, h=24, k=5):
    rng = np.random.default_rng(2)
    return (0.3 * rng.standard_normal((d, h)), 0.1 * rng.standard_normal(h),
            0.3 * rng.standard_normal((h, k)), np.zeros(k), rng.standard_normal((batch, d)),
            np.eye(k)[rng.integers(0, k, batch)])


def test_an_mlp_gradient_takes_the_path_and_matches_interp_and_finite_differences():
    args = _mlp_args()
    fast, ref = _pair(mlp, (0, 1, 2, 3))
    assert _took_kernel_ir(fast, *args)
    _assert_close(fast(*args), ref(*args))
    check_grads(lambda W1, b1: mlp(W1, b1, *args[2:]), args[:2], order=1, backend="numba")


def test_a_scientists_loop_over_time_steps():
    """A diffusion step in plain NumPy, unrolled by tracing: slices, concatenation, and
    reductions, against the plain loop and finite differences."""
    def simulate(u, kappa):
        for _ in range(12):
            lap = np.concatenate([u[1:2] - u[:1], u[2:] - 2.0 * u[1:-1] + u[:-2],
                                  u[-2:-1] - u[-1:]])
            u = u + kappa * lap
        return np.sum(u * u) + np.max(u)
    u0 = np.sin(np.linspace(0.0, 3.0, 200)) + 0.1
    fast = fg.jit(simulate, backend="numba")
    assert _took_kernel_ir(fast, u0, 0.2)
    np.testing.assert_allclose(fast(u0, 0.2), simulate(u0, 0.2), rtol=1e-13)
    check_grads(simulate, (u0, 0.2), order=1, backend="numba")


def test_nan_inf_and_extrema():
    def f(x, y):
        return (np.maximum(x, y) + np.minimum(x, y) * 2.0, np.max(x, axis=0), np.min(y, axis=1),
                x / y, np.sum(x * y, axis=1))
    x = np.array([[1.0, np.nan, 3.0, -np.inf], [np.inf, 2.0, -1.0, 0.0]] * 40)
    y = np.array([[2.0, 1.0, np.nan, 1.0], [1.0, 0.0, -0.0, np.inf]] * 40)
    got = fg.jit(f, backend="numba")(x, y)
    want = fg.jit(f, backend="interp")(x, y)
    assert _took_kernel_ir(fg.jit(f, backend="numba"), x, y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)       # nan where NumPy has nan, same infinities


def test_empty_arrays_and_empty_reductions():
    def f(x, w):
        return np.sum(x, axis=0), x @ w, np.sum(x) + 1.0, np.max(w, axis=1) if w.size else w
    x, w = np.zeros((0, 3)), np.ones((3, 2))
    fast = fg.jit(f, backend="numba")
    assert _took_kernel_ir(fast, x, w)
    got, want = fast(x, w), fg.jit(f, backend="interp")(x, w)
    for g, expected in zip(got, want):
        assert g.shape == expected.shape
        np.testing.assert_array_equal(g, expected)

    def zero_terms(a, b):
        return a @ b + 1.0
    a, b = np.ones((70, 0)), np.ones((0, 2))
    np.testing.assert_array_equal(fg.jit(zero_terms, backend="numba")(a, b), np.ones((70, 2)))


def test_bool_params_and_results_and_results_that_are_params_or_constants():
    def f(x, mask):
        keep = mask & (x > 0.5)
        return keep, np.where(keep, x, -x), x, x, np.ones(3), x.reshape(10, 10)
    x = np.linspace(0.0, 1.0, 100)
    mask = np.arange(100) % 3 == 0
    fast = fg.jit(f, backend="numba")
    assert _took_kernel_ir(fast, x, mask)
    got, want = fast(x, mask), f(x, mask)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert got[2] is not x and got[2] is not got[3]       # results never alias params or each other
    got[2][0] = 5.0
    assert x[0] == 0.0 and got[3][0] == 0.0


def test_buffers_reused_within_a_call_never_clobber_live_values():
    """A long chain whose temporaries share arena slots: exact against the interpreter (C's
    sin, as NumPy's), its sums within rounding (NumPy adds pairwise, the kernel IR in 8
    lanes), where a clobbered buffer would be wrong by far."""
    def chain(x):
        keep = []
        for i in range(30):
            x = np.sin(x) * 1.01 if i % 3 else np.concatenate([x[5:], x[:5]]) + 0.5
            if i % 7 == 0:
                keep.append(np.sum(x))
        return x, sum(keep)
    x = np.linspace(-1.0, 1.0, 100)
    fast, ref = fg.jit(chain, backend="numba"), fg.jit(chain, backend="interp")
    assert _took_kernel_ir(fast, x)
    (got, total), (want, want_total) = fast(x), ref(x)
    assert got.tobytes() == want.tobytes()
    np.testing.assert_allclose(total, want_total, rtol=1e-14)


def test_poison_mode_gives_the_same_bits(monkeypatch):
    args = _mlp_args()
    grad = fg.value_and_grad(mlp, argnums=(0, 1, 2, 3))
    results = []
    for poison in ("1", "0"):
        monkeypatch.setenv("FUSEGRAD_POISON", poison)
        results.append(_leaves(fg.jit(grad, backend="numba", tiered=False)(*args)))
    for a, b in zip(*results):
        assert a.tobytes() == b.tobytes()


def test_calls_from_many_threads_agree():
    args = _mlp_args(batch=64)
    jitted = fg.jit(fg.value_and_grad(mlp, argnums=(0, 2)), backend="numba")
    want = _leaves(jitted(*args))
    got = [None] * 4

    def call(k):
        for _ in range(5):
            got[k] = _leaves(jitted(*args))
    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for leaves in got:
        for a, b in zip(leaves, want):
            assert a.tobytes() == b.tobytes()


def test_every_program_takes_the_path_big_math_heavy_or_short():
    def w1(x, w, b):
        return np.sum(np.tanh(x * w + b) / (1.0 + np.exp(-x)))
    big = np.linspace(-1.0, 1.0, 200_000)
    heavy = fg.jit(fg.grad(w1, argnums=(0, 1, 2)), backend="numba")
    assert choose.choose(heavy.lower(big, big, big).ir)[0] == "kernel_ir"
    got = heavy(big, big, big)
    want = fg.jit(fg.grad(w1, argnums=(0, 1, 2)), backend="interp")(big, big, big)
    _assert_close(got, want, rtol=1e-13, atol=1e-15)
    huge = np.linspace(-1.0, 1.0, 1 << 20)         # W1's size
    ir = fg.jit(fg.grad(w1, argnums=(0, 1, 2)), backend="interp").lower(huge, huge, huge).ir
    assert choose.choose(ir) == ("kernel_ir", "every op compiled")
    args = _mlp_args(batch=256, d=100, h=128, k=10)
    assert choose.choose(fg.jit(fg.grad(mlp), backend="numba").lower(*args).ir)[0] == \
        "kernel_ir"
    scalar = fg.jit(fg.value_and_grad(lambda x: np.sin(x) * x + np.exp(-x * x)), backend="numba")
    assert _took_kernel_ir(scalar, 0.5)
    np.testing.assert_allclose(scalar(0.5)[0], np.sin(0.5) * 0.5 + np.exp(-0.25), rtol=1e-15)


def test_big_broadcasts_fold_into_the_kernel_irs_loads():
    """A jacrev's pullback mapped over an identity multiplies by broadcasts of 10**6 elements:
    the kernel IR folds them into its loads (no buffer)."""
    def residuals(p, t):
        return np.exp(-p[:, :1] ** 2 * t) * np.sin(p[:, 1:] * t)
    p, t = np.linspace(0.1, 1.0, 20).reshape(10, 2), np.linspace(0.0, 5.0, 100)
    f = fg.jit(fg.jacrev(residuals), backend="numba", tiered=False)
    assert choose.choose(f.lower(p, t).ir) == ("kernel_ir", "every op compiled")
    assert _took_kernel_ir(f, p, t)
    eps, e = 1e-6, np.zeros((10, 2))
    e[3, 1] = eps
    fd = (residuals(p + e, t) - residuals(p - e, t)) / (2 * eps)
    np.testing.assert_allclose(f(p, t)[..., 3, 1], fd, rtol=1e-7, atol=1e-9)


def test_optimized_and_unoptimized_loops_give_the_same_bits(monkeypatch):
    """No fast-math flags: the loops compiled at O2 (vectorized) and at level 0 agree bit for
    bit, so which loops are hot never changes a result."""
    args = _mlp_args(batch=64, d=40, h=48)
    grad = fg.value_and_grad(mlp, argnums=(0, 1, 2, 3))
    results = []
    for loops in (run.HOT_LOOPS, 0):
        monkeypatch.setattr(run, "HOT_LOOPS", loops)
        jitted = fg.jit(grad, backend="numba")
        source = jitted.lower(*args).source
        assert ("optimized:" in source and "_part" in source.split("optimized:")[1]) == \
            bool(loops)
        results.append(_leaves(jitted(*args)))
    for a, b in zip(*results):
        assert a.tobytes() == b.tobytes()
