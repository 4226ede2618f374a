"""A scatter kernel stays serial: rows of g may add into the same row of the output, so a
pool part per block of rows (codegen/pool.py) would race, and each part would zero the whole
output before adding its own rows."""

import numpy as np

import fusegrad as fg

rng = np.random.default_rng(3)


def embedding_loss(w, idx):
    return np.sum(np.tanh(np.take(w, idx, axis=0)))


def test_a_big_scatter_add_runs_serially_and_adds_every_row():
    w = rng.standard_normal((20, 128))
    idx = rng.integers(0, 20, 200)          # 200 x 128 elements with a tanh: big enough to split
    grad = fg.jit(fg.grad(embedding_loss), backend="numba")
    assert "pool_run(" not in grad.lower(w, idx).source
    want = np.zeros_like(w)
    np.add.at(want, idx, 1.0 - np.tanh(w[idx]) ** 2)
    for _ in range(3):
        np.testing.assert_allclose(grad(w, idx), want, rtol=1e-12, atol=1e-12)
