"""Small models written with plain NumPy, for the command line and the README.

    python -m fusegrad ir examples/model.py:loss --arg f64[4] --arg f64[4] --arg f64[4]
    python -m fusegrad ir examples/model.py:mlp_loss \
        --arg '{w1: f64[3,8], b1: f64[8], w2: f64[8,2], b2: f64[2]}' --arg f64[5,3] --arg f64[5,2]

Nothing here imports fusegrad: the same functions run on NumPy arrays, and fusegrad traces,
differentiates and compiles them unchanged.
"""

import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def loss(x, w, b):
    y = np.tanh(x * w + b) * sigmoid(x)
    return np.sum(y)


def mlp_loss(params, x, y):
    """Mean squared error of a one-hidden-layer tanh network; params is a dict of arrays."""
    h = np.tanh(x @ params["w1"] + params["b1"])
    out = h @ params["w2"] + params["b2"]
    return np.mean((out - y) ** 2)


def init_mlp(n_in=3, n_hidden=8, n_out=2, seed=0):
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in),
            "b1": np.zeros(n_hidden),
            "w2": rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden),
            "b2": np.zeros(n_out)}


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3))
    print("loss     =", loss(x[0], x[1], x[2]))
    print("mlp_loss =", mlp_loss(init_mlp(), x, rng.standard_normal((5, 2))))
