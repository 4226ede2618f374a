"""Buffers across calls and big parallel-sized loops (the numba backend).

The runner reuses its arenas across calls but hands the caller arrays of its own: results the
caller keeps are never overwritten. Loops big enough to run in parallel parts agree with the
interpreter (tests/test_kernel_ir_rewrite.py checks that their bits do not depend on the
thread count).
"""

import numpy as np

import fusegrad as fg


def loss(x, w, b):
    return np.sum(np.tanh(x * w + b) * (1 / (1 + np.exp(-x))))


def inputs(n, dtype=np.float64, seed=0):
    r = np.random.default_rng(seed)
    return [r.standard_normal(n).astype(dtype) for _ in range(3)]


VG = fg.jit(fg.value_and_grad(loss, argnums=(0, 1, 2)))


def test_held_results_are_never_overwritten():
    a = inputs(1000)
    value, grads = VG(*a)
    kept = [g.copy() for g in grads]
    view = grads[1][::2]
    value2, grads2 = VG(*inputs(1000, seed=1))
    assert all(np.array_equal(k, g) for k, g in zip(kept, grads))
    assert not {id(g) for g in grads2} & {id(g) for g in grads}
    del grads
    _, grads3 = VG(*inputs(1000, seed=2))
    assert np.array_equal(view, kept[1][::2])      # the view keeps its base out of the pool
    assert value != value2


def test_parallel_sized_loops_agree_with_the_interpreter():
    def several(x, y):
        z = np.sin(x) * y
        return np.sum(z), np.max(z), np.exp(-x) + y, np.min(np.abs(y)[::-1])

    def rows(a):
        e = np.exp(a - np.max(a, axis=1, keepdims=True))
        return np.max(e / np.sum(e, axis=1, keepdims=True)), np.sum(a * a)

    r = np.random.default_rng(4)
    x, y = r.standard_normal(1 << 17), r.standard_normal(1 << 17)
    a = r.standard_normal((64, 1024))
    for f, args in ((several, (x, y)), (rows, (a,))):
        got = fg.jit(f)(*args)
        want = fg.jit(f, backend="interp")(*args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
