"""First calls are right: the programs that once read a pooled buffer before its writer ran
(the seed of a backward pass, a small matmul's operand), compared on the first call of every
backend against NumPy and finite differences; and poison mode itself.

The suite runs with FUSEGRAD_POISON=1 (tests/conftest.py): every buffer compiled code
allocates or reuses starts as NaN, so such a read gives NaN instead of a stale plausible value.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.passes.fusion import Fusion, check_schedule, fuse
from fusegrad.passes.pipeline import optimize
from fusegrad.testing import check_grads

BACKENDS = ("eager", "interp", "numba")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
x3, y3 = np.array([1.0, 2.0, 3.0]), np.array([4.0, -5.0, 6.0])
M = np.arange(6.0).reshape(2, 3) / 5


def first_calls(f, *args):
    return {b: fg.jit(f, backend=b)(*args) for b in BACKENDS}


def test_grad_of_a_vector_inner_product_on_the_first_call():
    for b, (gx, gy) in first_calls(fg.grad(lambda x, y: x @ y, argnums=(0, 1)), x3, y3).items():
        np.testing.assert_array_equal(gx, y3, err_msg=b)
        np.testing.assert_array_equal(gy, x3, err_msg=b)


def test_grad_of_dot_with_itself_is_twice_x():
    for b, g in first_calls(fg.grad(lambda x: np.dot(x, x)), x3).items():
        np.testing.assert_array_equal(g, 2 * x3, err_msg=b)


def test_grad_of_the_sum_of_a_gram_matrix():
    # d/dM sum(M M^T) = 2 (1 1^T) M: every row is twice the column sums
    expected = 2 * np.broadcast_to(M.sum(axis=0), M.shape)
    for b, g in first_calls(fg.grad(lambda m: np.sum(m @ m.T)), M).items():
        np.testing.assert_allclose(g, expected, rtol=1e-14, err_msg=b)


def conv_net(w, v, x):
    """A 1-D convnet as a scientist writes it: a loop of shifted slices, tanh, a dense layer."""
    n = x.shape[1] - w.shape[0] + 1
    h = np.zeros((x.shape[0], n))
    for k in range(w.shape[0]):
        h = h + w[k] * x[:, k:k + n]
    return np.sum(np.log1p(np.exp(np.tanh(h) @ v)))


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_small_convnet_gradient_matches_finite_differences(backend):
    rng = np.random.default_rng(0)
    w, v, x = rng.standard_normal(3), rng.standard_normal((6, 2)), rng.standard_normal((4, 8))
    check_grads(conv_net, (w, v, x), order=1, backend=backend)
    eager = fg.grad(conv_net, argnums=(0, 1))(w, v, x)
    compiled = fg.jit(fg.grad(conv_net, argnums=(0, 1)), backend=backend)(w, v, x)
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(c, e, rtol=1e-12)


def test_a_schedule_that_reads_before_it_writes_fails_to_compile():
    fusion = fuse(optimize(fg.make_ir(fg.grad(lambda m: np.sum(m @ m.T)))(M)))
    reader = next(n for n in fusion.nodes if fusion.reads(n) and
                  any(fusion.buffer_of(v) is not None for v in fusion.reads(n)))
    nodes = [reader] + [n for n in fusion.nodes if n is not reader]
    swapped = Fusion(fusion.fn, nodes, fusion.kind, fusion.node_of, fusion.role, fusion.mat,
                     fusion.producer)
    with pytest.raises(AssertionError, match="before .* writes it"):
        check_schedule(swapped)


def generated(poison: str) -> str:
    code = ("import numpy as np, fusegrad as fg\n"
            "f = fg.jit(fg.grad(lambda m: np.sum(np.tanh(m @ m.T))))\n"
            "m = np.arange(6.0).reshape(2, 3) / 5\n"
            "print('RESULT', f(m).tolist(), f(m).tolist())\n")
    env = dict(os.environ, FUSEGRAD_POISON=poison)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_poison_mode_gives_the_plain_results():
    results = [text[text.index("RESULT"):] for text in (generated("1"), generated("0"))]
    assert results[0] == results[1] and "nan" not in results[0]


def test_poisoned_arrays_cannot_pass_for_results(monkeypatch):
    from fusegrad.codegen.kernel_ir.poison import empty, poison_on
    assert np.isnan(empty((2, 3), "float32", True)).all()
    assert np.isnan(empty(4, "float64", True)).all() and empty(2, "bool", True).all()
    assert (empty(3, "int64", True) == np.iinfo(np.int64).min).all()
    monkeypatch.setenv("FUSEGRAD_POISON", "0")
    assert not poison_on()
    monkeypatch.setenv("FUSEGRAD_POISON", "1")
    assert poison_on()
