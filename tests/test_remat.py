"""fg.checkpoint: the same gradients, and a scan body's backward stores only its carry."""

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import lax

RNG = np.random.default_rng(1)
W = RNG.normal(size=(4, 4)) * 0.5
H0, XS = RNG.normal(size=4), RNG.normal(size=(6, 4))


def block(h, x):
    for _ in range(3):
        h = np.tanh(W @ h + x)
    return h


def loss(h0, xs, remat):
    step = fg.checkpoint(block) if remat else block

    def body(h, x):
        return step(h, x), (h * x).sum()
    h, ys = lax.scan(body, h0, xs)
    return (h ** 2).sum() + ys.sum()


def _fd_grad(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps)
                     for e in np.eye(x.size).reshape((-1,) + x.shape)]).reshape(x.shape)


@pytest.mark.parametrize("backend", ["eager", "interp", "numba"])
def test_checkpointed_gradients_are_the_gradients(backend):
    g = fg.jit(fg.grad(loss, argnums=(0, 1)), backend=backend, static_argnums=(2,))
    gh, gx = g(H0, XS, True)
    np.testing.assert_allclose(gh, _fd_grad(lambda h: loss(h, XS, False), H0), atol=1e-7)
    np.testing.assert_allclose(gx, _fd_grad(lambda x: loss(H0, x, False), XS), atol=1e-7)


def test_a_checkpointed_scan_body_stacks_only_its_carry():
    def stacked(remat):
        ir = fg.jit(fg.grad(loss), backend="interp", static_argnums=(2,)).lower(H0, XS, remat).ir
        (fwd,) = [op for op in ir.ops if op.prim == "scan" and not op.params["reverse"]]
        return [str(v.type) for v in fwd.outputs[fwd.params["num_carry"]:]]
    assert stacked(False) == ["f64[6,4]"] * 3     # the three tanh outputs of each step
    assert stacked(True) == ["f64[6,4]"]          # the carry h of each step


def test_checkpoint_composes_with_jvp_hessian_and_integer_arguments():
    def f(x, n):
        return np.sin(x) ** n
    ck = fg.checkpoint(f)
    x = np.array([0.3, -1.2])
    for backend in ("eager", "interp"):
        _, dot = fg.jit(lambda x, t: fg.jvp(lambda y: ck(y, 3), (x,), (t,)),
                        backend=backend)(x, x)
        np.testing.assert_allclose(dot, 3 * np.sin(x) ** 2 * np.cos(x) * x, rtol=1e-12)
        h = fg.jit(fg.hessian(lambda y: ck(y, 3).sum()), backend=backend)(x)
        np.testing.assert_allclose(h, np.diag(6 * np.sin(x) * np.cos(x) ** 2 - 3 *
                                              np.sin(x) ** 3), rtol=1e-10, atol=1e-12)


def test_top_level_recomputation_survives_cse():
    """The backward pass reads x and g through an optimization barrier: its tanh ops are not
    merged into the forward pass's, and the barrier is gone from the optimized IR."""
    def f(x):
        return np.tanh(np.tanh(x) * 2).sum()

    def prims(fun):
        vg = fg.value_and_grad(fun)
        return [op.prim for op in fg.jit(vg, backend="interp").lower(H0).ir.ops]
    assert prims(f).count("tanh") == 2
    ck = prims(fg.checkpoint(f))
    assert ck.count("tanh") == 4 and "optimization_barrier" not in ck
    for backend in ("interp", "numba"):
        np.testing.assert_allclose(fg.jit(fg.grad(fg.checkpoint(f)), backend=backend)(H0),
                                   fg.grad(f)(H0), rtol=1e-13)
