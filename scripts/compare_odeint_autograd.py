"""fusegrad's differentiable scipy.integrate.odeint against HIPS autograd's odeint on autograd's
ode_net example shape: a tanh MLP right-hand side (2 -> 16 -> 2), a loss over the trajectory,
and the gradient with respect to the MLP's parameters (one flat vector, as autograd's odeint
takes them) and the initial state.

    pip install autograd && python scripts/compare_odeint_autograd.py

Not part of the test command (autograd is no dependency); tests/test_ode.py checks the same
gradients against finite differences."""

import autograd.numpy as anp
import numpy as np
import scipy.integrate
from autograd import grad as agrad
from autograd.builtins import tuple as atuple
from autograd.scipy.integrate import odeint as aodeint

import fusegrad as fg

rng = np.random.default_rng(0)
params = [0.5 * rng.normal(size=(2, 16)), 0.1 * rng.normal(size=16),
          0.5 * rng.normal(size=(16, 2)), 0.1 * rng.normal(size=2)]
y0 = np.array([2.0, 0.0])
t = np.linspace(0.0, 2.0, 11)
target = np.stack([np.cos(t), -np.sin(t)], axis=1) * 2.0


SHAPES = [(2, 16), (16,), (16, 2), (2,)]
theta = np.concatenate([p.ravel() for p in params])


def make(np_, odeint, pack=tuple):
    def rhs(y, t, theta):
        parts, at = [], 0
        for shape in SHAPES:
            size = int(np.prod(shape))
            parts.append(np_.reshape(theta[at:at + size], shape))
            at += size
        w1, b1, w2, b2 = parts
        return np_.dot(np_.tanh(np_.dot(y, w1) + b1), w2) + b2

    def loss(theta, y0):
        ys = odeint(rhs, y0, t, pack((theta,)), rtol=1e-10, atol=1e-10)
        return np_.sum((ys - target) ** 2)
    return loss


argnums = (0, 1)
want = agrad(make(anp, aodeint, atuple), argnums)(theta, y0)   # its boxable tuple
got_eager = fg.grad(make(np, scipy.integrate.odeint), argnums=argnums)(theta, y0)
got_jit = fg.jit(fg.grad(make(np, scipy.integrate.odeint), argnums=argnums))(theta, y0)
for name, got in (("eager", got_eager), ("jit", got_jit)):
    worst = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-300))
                for g, w in zip(got, want))
    print(f"fusegrad {name} vs autograd's odeint: largest relative difference {worst:.2e}")
    assert worst < 1e-6, worst
