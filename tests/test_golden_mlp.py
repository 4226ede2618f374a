"""The seed chapter's golden two-layer perceptron, against fixtures PyTorch wrote
(scripts/generate_golden.py): loss to 1e-12, gradients to rtol 1e-6 / atol 1e-12, on the
eager engine and through every jit backend."""

import os

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as fnn

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mlp")
G = {name[:-4]: np.load(os.path.join(GOLDEN, name)) for name in os.listdir(GOLDEN)}
PARAMS = ("w1", "b1", "w2", "b2")


def loss(w1, b1, w2, b2, x, targets):
    return fnn.cross_entropy(np.tanh(x @ w1 + b1) @ w2 + b2, targets)


def check(value, grads):
    assert abs(float(value) - float(G["loss"])) <= 1e-12
    for name, g in zip(PARAMS, grads):
        np.testing.assert_allclose(np.asarray(g), G[f"grad_{name}"], rtol=1e-6, atol=1e-12)


def test_eager_tensors_match_pytorch():
    params = [fg.tensor(G[name], requires_grad=True) for name in PARAMS]
    out = loss(*params, fg.tensor(G["x"]), G["targets"])
    out.backward()
    check(out.item(), [p.grad.numpy() for p in params])


@pytest.mark.parametrize("backend", [None, "interp", "numba"])
def test_value_and_grad_matches_pytorch(backend):
    f = fg.value_and_grad(loss, argnums=(0, 1, 2, 3))
    if backend is not None:
        f = fg.jit(f, backend=backend)
    check(*f(*(G[name] for name in PARAMS), G["x"], G["targets"]))
