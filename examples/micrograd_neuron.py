"""The scalar examples of the course readings, on fusegrad's eager engine and its transforms.

Every number printed here is one the seed documents print; tests/test_examples.py runs this
script and checks them.
"""

from __future__ import annotations

import numpy as np

import fusegrad as fg


def part1_graph():
    """L = (a*b + c) * relu(d) at a=2, b=3, c=1, d=1.5."""
    a, b, c, d = (fg.tensor(v, requires_grad=True) for v in (2.0, 3.0, 1.0, 1.5))
    L = (a * b + c) * d.relu()
    L.backward()
    print(f"Part 1 graph: L = {L.item():.1f}; a.grad {a.grad.item():.1f}, b.grad "
          f"{b.grad.item():.1f}, c.grad {c.grad.item():.1f}, d.grad {d.grad.item():.1f}")


def relu_neuron():
    """0.5 * (relu(w1*x1 + w2*x2 + b) - 1)^2 with the A6 numbers."""
    x1, x2, w1, w2, b = (fg.tensor(v, requires_grad=True) for v in (1.0, 2.0, 0.5, 0.3, 0.1))
    z = w1 * x1 + w2 * x2 + b
    loss = 0.5 * (z.relu() - 1.0) ** 2
    loss.backward()
    print(f"relu neuron: z={z.item():.1f}, loss={loss.item():.2f}; dw1={w1.grad.item():.1f}, "
          f"dw2={w2.grad.item():.1f}, db={b.grad.item():.1f}, dx1={x1.grad.item():.1f}, "
          f"dx2={x2.grad.item():.2f}")


def tanh_neuron():
    """y = tanh(w1*x1 + w2*x2 + b), and the reuse graphs a*a + a and (a+a)*a."""
    x1, x2, w1, w2, b = (fg.tensor(v, requires_grad=True) for v in (1.5, -2.0, 0.6, 0.4, 0.1))
    y = (w1 * x1 + w2 * x2 + b).tanh()
    y.backward()
    print(f"tanh neuron: y = {y.item():.4f}; dy/dw1 = {w1.grad.item():.4f}, dy/dw2 = "
          f"{w2.grad.item():.4f}, dy/db = {b.grad.item():.4f}, dy/dx1 = {x1.grad.item():.4f}")
    print(f"a*a + a at a=3: df/da = {fg.grad(lambda a: a * a + a)(3.0):.1f}; "
          f"(a+a)*a at a=2: df/da = {fg.grad(lambda a: (a + a) * a)(2.0):.1f}")


def expression(a, b, c):
    d = a * b + c
    e = np.tanh(d + a)
    return e * d + b


def expression_example():
    out, grads = fg.value_and_grad(expression, argnums=(0, 1, 2))(0.7, -1.3, 2.0)
    print(f"expression(0.7, -1.3, 2.0) = {out:.6f}; dL/da {grads[0]:.6f}, dL/db "
          f"{grads[1]:.6f}, dL/dc {grads[2]:.6f}")


def higher_order():
    d1 = fg.grad(np.tanh)
    d2 = fg.grad(d1)
    d3 = fg.grad(d2)
    print(f"tanh at 0.5: f' = {d1(0.5):.6f}, f'' = {d2(0.5):.6f}, f''' = {d3(0.5):.6f}")
    hessian = fg.hessian(lambda w: w[0] ** 2 * w[1])(np.array([1.5, -2.0]))
    print(f"Hessian of w0^2 * w1 at (1.5, -2.0): {hessian.tolist()}")
    hvp = fg.hvp(lambda w: w[0] ** 2 * w[1], (np.array([1.5, -2.0]),), (np.array([1.0, 0.0]),))
    print(f"Hessian-vector product with (1, 0): {np.asarray(hvp).ravel().tolist()}")


def main():
    part1_graph()
    relu_neuron()
    tanh_neuron()
    expression_example()
    higher_order()


if __name__ == "__main__":
    main()
