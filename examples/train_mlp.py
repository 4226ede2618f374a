"""Train a small MLP on two interleaved spirals with fusegrad.

The loss is ordinary NumPy code. `fg.jit(fg.value_and_grad(loss))` traces it once, appends the
backward pass, fuses and compiles it; `--backend eager` runs the same function on the eager
tape engine instead. The script reaches a stated accuracy, times both engines, and writes the
gradient's IR as text, DOT and SVG into the output folder.

    python examples/train_mlp.py [--epochs 300] [--backend numba|interp|eager] [--out out/]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import fusegrad as fg
import fusegrad.nn as fnn

TARGET_ACCURACY = 0.97


def spirals(n_per_class=200, noise=0.15, seed=0):
    """Two interleaved spirals in the plane, labels 0 and 1."""
    rng = np.random.default_rng(seed)
    t = np.sqrt(rng.uniform(0.05, 1.0, n_per_class)) * 3 * np.pi
    arm = np.stack([t * np.cos(t), t * np.sin(t)], axis=1) / (3 * np.pi)
    x = np.concatenate([arm, -arm]) + noise * rng.normal(size=(2 * n_per_class, 2)) / 3
    y = np.concatenate([np.zeros(n_per_class), np.ones(n_per_class)]).astype(np.int64)
    return x, y


def init_params(sizes, seed=1):
    rng = np.random.default_rng(seed)
    return [{"w": rng.normal(size=(m, n)) * np.sqrt(1.0 / m), "b": np.zeros(n)}
            for m, n in zip(sizes[:-1], sizes[1:])]


def forward(params, x):
    h = x
    for layer in params[:-1]:
        h = np.tanh(h @ layer["w"] + layer["b"])
    return h @ params[-1]["w"] + params[-1]["b"]


def loss(params, x, y):
    return fnn.cross_entropy(forward(params, x), y)


def accuracy(params, x, y):
    return float(np.mean(np.argmax(forward(params, x), axis=1) == y))


class Adam:
    def __init__(self, params, lr=0.02, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps, self.t = lr, b1, b2, eps, 0
        self.m = [{k: np.zeros_like(v) for k, v in p.items()} for p in params]
        self.v = [{k: np.zeros_like(v) for k, v in p.items()} for p in params]

    def step(self, params, grads):
        self.t += 1
        for p, g, m, v in zip(params, grads, self.m, self.v):
            for k in p:
                m[k] = self.b1 * m[k] + (1 - self.b1) * g[k]
                v[k] = self.b2 * v[k] + (1 - self.b2) * g[k] ** 2
                m_hat = m[k] / (1 - self.b1 ** self.t)
                v_hat = v[k] / (1 - self.b2 ** self.t)
                p[k] = p[k] - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def train(step_fn, params, x, y, epochs, log_every=None):
    opt = Adam(params)
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        value, grads = step_fn(params, x, y)
        opt.step(params, grads)
        if log_every and (epoch % log_every == 0 or epoch == epochs):
            print(f"epoch {epoch:4d}  loss {float(value):.4f}  "
                  f"accuracy {accuracy(params, x, y):.3f}", flush=True)
    return (time.perf_counter() - start) / epochs


def write_ir(step_fn, params, x, y, out):
    os.makedirs(out, exist_ok=True)
    lowered = step_fn.lower(params, x, y)
    with open(os.path.join(out, "grad_ir.txt"), "w") as f:
        f.write(str(lowered.traced) + "\n\n// optimized\n" + str(lowered.ir) + "\n")
    with open(os.path.join(out, "grad_ir.dot"), "w") as f:
        f.write(lowered.ir.to_dot(clusters=lowered.clusters))
    try:
        lowered.ir.render(os.path.join(out, "grad_ir.svg"), clusters=lowered.clusters)
    except RuntimeError as e:
        print(f"(no SVG: {e})")
    if lowered.source:
        with open(os.path.join(out, "kernels.py"), "w") as f:
            f.write(lowered.source)
    print(f"wrote the gradient's IR ({len(lowered.ir.ops)} ops, {lowered.kernels} kernels) "
          f"to {out}/")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--backend", choices=("numba", "interp", "eager"), default=None,
                        help="how to run the training step (default: fusegrad's default)")
    parser.add_argument("--out", default="out", help="folder for the IR text, DOT and SVG")
    args = parser.parse_args(argv)

    x, y = spirals()
    params = init_params([2, args.hidden, args.hidden, 2])
    value_and_grad = fg.value_and_grad(loss)
    jitted = fg.jit(value_and_grad, backend=args.backend)
    backend = args.backend or fg.api.default_backend()
    print(f"two spirals: {len(x)} points; MLP 2-{args.hidden}-{args.hidden}-2 (tanh); "
          f"backend {backend}")

    t0 = time.perf_counter()
    jitted(params, x, y)        # numba is tiered: this call runs on the interpreter, the
    first_result = time.perf_counter() - t0     # next queues the compile (in the background)
    train(jitted, params, x, y, args.epochs, max(1, args.epochs // 10))
    acc = accuracy(params, x, y)

    jitted.lower(params, x, y)  # waits for the compile, so the timing below is compiled code
    jitted(params, x, y)        # and its first call's one-time work is not in it
    per_step = train(jitted, init_params([2, args.hidden, args.hidden, 2]), x, y, 50)
    eager_params = init_params([2, args.hidden, args.hidden, 2])
    eager_step = train(value_and_grad, eager_params, x, y, 3)
    print(f"time per step: {backend} {per_step * 1e3:.3f} ms (first result after "
          f"{first_result:.2f} s); eager engine {eager_step * 1e3:.3f} ms")
    write_ir(fg.jit(value_and_grad, backend="interp" if backend == "eager" else backend),
             params, x, y, args.out)
    status = "reached" if acc >= TARGET_ACCURACY else "did NOT reach"
    print(f"final accuracy {acc:.3f}: {status} the target {TARGET_ACCURACY:.2f}")
    return 0 if acc >= TARGET_ACCURACY else 1


if __name__ == "__main__":
    sys.exit(main())
