"""Reference implementations that fusegrad is measured against.

Every workload is written once per framework, outside fusegrad, so the benchmark has something
to lose to. "numpy (hand)" is the baseline and the oracle: gradients derived by hand, checked
against every other column at setup. The hand-fused Numba loops (njit, error_model='numpy',
fastmath=False, one pass over memory) are the practical limit of a fused kernel built on libm;
the prange variants show what a second core adds. Without SVML (icc_rt) Numba calls scalar libm
tanh/exp, which numpy's SIMD loops beat, so on transcendental-heavy workloads this limit loses
to numpy, and fusegrad's numba backend, which has its own vectorizable math, can beat it. jax
and torch use their own autodiff.

A column is a dict {workload: maker}. Array workloads (W1, W2, W5): maker(*numpy_args) -> call,
call() -> (value, grads) in the framework's own types (args converted once, outside the timed
call). Scalar workloads: W3 maker() -> fn, W4 maker(steps) -> fn, fn(x: float) -> (value, grad) as
the framework returns them (0-d arrays or tensors, jax's blocked on): the timed call is the
call alone, and the check converts.
jax and torch are imported only inside their column builders, so either may be missing.
"""

import math

import numpy as np

ARGNUMS = {"W1": (0, 1, 2), "W2": (0, 1, 2, 3), "W3": 0, "W4": 0, "W5": (0,)}
W4_A, W4_C = 1.0000001, 1e-7  # one chain step: y = y*A + C*sin(y), 4 primitive ops
W5_EPS = 1e-5


# ---- inputs (fixed seeds: every process builds the same arrays) ----------------------------


def w1_inputs(n, dtype):
    r = np.random.default_rng(1)
    return tuple(r.standard_normal(n).astype(dtype) for _ in range(3))


def w2_inputs(dtype, batch=256, sizes=(784, 512, 10)):
    r = np.random.default_rng(2)
    d, h, k = sizes
    W1 = (r.standard_normal((d, h)) / math.sqrt(d)).astype(dtype)
    b1 = (0.1 * r.standard_normal(h)).astype(dtype)
    W2 = (r.standard_normal((h, k)) / math.sqrt(h)).astype(dtype)
    b2 = (0.1 * r.standard_normal(k)).astype(dtype)
    X = r.standard_normal((batch, d)).astype(dtype)
    y = r.integers(0, k, batch)
    return W1, b1, W2, b2, X, y


def w3_inputs(n=1000):
    return [float(v) for v in np.random.default_rng(3).uniform(-2.0, 2.0, n)]


def w5_inputs(shape=(4096, 1024), dtype=np.float32):
    r = np.random.default_rng(5)
    return (3 * r.standard_normal(shape) + 1).astype(dtype), r.standard_normal(shape).astype(dtype)


# ---- numpy (hand): value and hand-derived gradients ------------------------------------------


def w1_numpy(x, w, b):
    t = np.tanh(x * w + b)
    s = 1 / (1 + np.exp(-x))
    ts = t * s
    dz = s * (1 - t * t)
    return ts.sum(), (dz * w + ts * (1 - s), dz * x, dz)


def w2_numpy(W1, b1, W2, b2, X, y):
    H = np.tanh(X @ W1 + b1)
    logits = H @ W2 + b2
    z = logits - logits.max(1, keepdims=True)
    e = np.exp(z)
    s = e.sum(1, keepdims=True)
    rows = np.arange(len(y))
    loss = np.mean(np.log(s[:, 0]) - z[rows, y])
    dl = e / s
    dl[rows, y] -= 1
    dl /= len(y)
    dz = (dl @ W2.T) * (1 - H * H)
    return loss, (X.T @ dz, dz.sum(0), H.T @ dl, dl.sum(0))


def w2_gemms(W1, b1, W2, b2, X, y):
    """The five matmuls of one training step, into preallocated outputs: a floor for W2."""
    H, dl = np.tanh(X @ W1), np.ones((len(y), W2.shape[1]), X.dtype)
    outs = [np.empty((X.shape[0], W1.shape[1]), X.dtype), np.empty_like(dl),
            np.empty_like(H), np.empty_like(W2), np.empty_like(W1)]

    def call():
        np.matmul(X, W1, out=outs[0])
        np.matmul(H, W2, out=outs[1])
        np.matmul(dl, W2.T, out=outs[2])
        np.matmul(H.T, dl, out=outs[3])
        np.matmul(X.T, H, out=outs[4])
        return outs
    return call


def w3_python(x):
    s, e = math.sin(x), math.exp(-x * x)
    return s * x + e, math.cos(x) * x + s - 2 * x * e


def w4_python(x, steps):
    ys = []
    for _ in range(steps):
        ys.append(x)
        x = x * W4_A + W4_C * math.sin(x)
    g = 1.0
    for y in reversed(ys):
        g *= W4_A + W4_C * math.cos(y)
    return x, g


def w5_numpy(x, c):
    xc = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(-1, keepdims=True) + W5_EPS)
    xh = xc * rstd
    e = np.exp(xh - xh.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    pc = p * c
    dxh = pc - p * pc.sum(-1, keepdims=True)
    dx = rstd * (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True))
    return pc.sum(), (dx,)


def _bind(f):
    return lambda *args: (lambda: f(*args))


NUMPY = {"W1": _bind(w1_numpy), "W2": _bind(w2_numpy), "W3": lambda: w3_python,
         "W4": lambda steps: lambda x: w4_python(x, steps), "W5": _bind(w5_numpy)}
GEMMS = {"W2": w2_gemms}


# ---- numba (hand fused): one loop, no temporaries ------------------------------------------


def numba_column(parallel):
    """Hand-fused Numba kernels; `parallel` swaps the outer loop for prange (W1 and W5 only)."""
    from numba import njit, prange

    jit = njit(error_model="numpy", fastmath=False, parallel=parallel)
    loop = prange if parallel else range
    scalar = njit(error_model="numpy", fastmath=False)

    @jit
    def w1(x, w, b, one):  # `one` carries the dtype, so float32 stays float32
        gx, gw, gb = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        acc = 0.0
        for i in loop(x.size):
            t = np.tanh(x[i] * w[i] + b[i])
            s = one / (one + np.exp(-x[i]))
            ts = t * s
            acc += ts
            dz = s * (one - t * t)
            gx[i], gw[i], gb[i] = dz * w[i] + ts * (one - s), dz * x[i], dz
        return acc, (gx, gw, gb)

    @scalar
    def w2(W1, b1, W2, b2, X, y):  # serial only: prange threads fight OpenBLAS's for 2 cores
        B, H = X.shape[0], X @ W1
        for i in range(B):
            for j in range(H.shape[1]):
                H[i, j] = np.tanh(H[i, j] + b1[j])
        dl = H @ W2
        loss = 0.0
        for i in range(B):
            m = -np.inf
            for k in range(dl.shape[1]):
                dl[i, k] += b2[k]
                m = max(m, dl[i, k])
            s, zy = 0.0, dl[i, y[i]] - m
            for k in range(dl.shape[1]):
                dl[i, k] = np.exp(dl[i, k] - m)
                s += dl[i, k]
            loss += np.log(s) - zy
            for k in range(dl.shape[1]):
                dl[i, k] = (dl[i, k] / s - (k == y[i])) / B
        dz = dl @ W2.T
        for i in range(B):
            for j in range(dz.shape[1]):
                dz[i, j] *= 1 - H[i, j] * H[i, j]
        gb1, gb2 = np.zeros(b1.size, X.dtype), np.zeros(b2.size, X.dtype)
        for i in range(B):
            gb1 += dz[i]
            gb2 += dl[i]
        return loss / B, (X.T @ dz, gb1, H.T @ dl, gb2)

    @scalar
    def w3(x):
        s, e = np.sin(x), np.exp(-x * x)
        return s * x + e, np.cos(x) * x + s - 2 * x * e

    @scalar
    def w4(x, steps):
        ys = np.empty(steps)
        for i in range(steps):
            ys[i] = x
            x = x * W4_A + W4_C * np.sin(x)
        g = 1.0
        for i in range(steps - 1, -1, -1):
            g *= W4_A + W4_C * np.cos(ys[i])
        return x, g

    @scalar
    def _w5_row(x, c, g, n):  # g holds exp, then dxhat; passes stay in L1
        mu, mx = 0.0, -np.inf
        for j in range(n):
            mu += x[j]
            mx = max(mx, x[j])
        mu /= n
        var = 0.0
        for j in range(n):
            var += (x[j] - mu) ** 2
        rstd = 1 / np.sqrt(var / n + W5_EPS)
        m, s, ec = (mx - mu) * rstd, 0.0, 0.0
        for j in range(n):
            e = np.exp((x[j] - mu) * rstd - m)
            g[j], s, ec = e, s + e, ec + e * c[j]
        dot, a, b = ec / s, 0.0, 0.0
        for j in range(n):
            d = g[j] / s * (c[j] - dot)
            g[j], a, b = d, a + d, b + d * (x[j] - mu) * rstd
        a, b = a / n, b / n
        for j in range(n):
            g[j] = rstd * (g[j] - a - (x[j] - mu) * rstd * b)
        return dot

    @jit
    def w5(x, c):
        gx, n = np.empty_like(x), x.shape[1]
        acc = 0.0
        for i in loop(x.shape[0]):
            acc += _w5_row(x[i], c[i], gx[i], n)
        return acc, (gx,)

    col = {"W1": lambda x, w, b: lambda: w1(x, w, b, x.dtype.type(1)), "W5": _bind(w5)}
    if not parallel:
        col.update(W2=_bind(w2), W3=lambda: w3, W4=lambda steps: lambda x: w4(x, steps))
    return col


# ---- jax: jax.jit(jax.value_and_grad(f)) ---------------------------------------------------


def jax_column():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    def w1(x, w, b):
        return jnp.sum(jnp.tanh(x * w + b) * jax.nn.sigmoid(x))

    def w2(W1, b1, W2, b2, X, y):
        logits = jnp.tanh(X @ W1 + b1) @ W2 + b2
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

    def w3(x):
        return jnp.sin(x) * x + jnp.exp(-x * x)

    def w4(steps):
        def chain(x):
            for _ in range(steps):
                x = x * W4_A + W4_C * jnp.sin(x)
            return x
        return chain

    def w5(x, c):
        xc = x - x.mean(-1, keepdims=True)
        xh = xc * jax.lax.rsqrt((xc * xc).mean(-1, keepdims=True) + W5_EPS)
        return jnp.sum(jax.nn.softmax(xh, axis=-1) * c)

    def arrays(f, argnums):
        def make(*args):
            vg, dev = jax.jit(jax.value_and_grad(f, argnums)), [jax.device_put(a) for a in args]
            return lambda: jax.block_until_ready(vg(*dev))
        return make

    def scalar(f):
        vg = jax.jit(jax.value_and_grad(f))
        return lambda x: jax.block_until_ready(vg(x))

    return {"W1": arrays(w1, ARGNUMS["W1"]), "W2": arrays(w2, ARGNUMS["W2"]),
            "W3": lambda: scalar(w3), "W4": lambda steps: scalar(w4(steps)),
            "W5": arrays(w5, ARGNUMS["W5"])}


# ---- torch: autograd, optionally with torch.compile on the forward ---------------------------


def torch_column(compiled):
    """torch.autograd.grad on f (faster per call than torch.func.grad_and_value for scalars);
    `compiled` wraps f in torch.compile, so AOTAutograd compiles the forward and backward."""
    import torch
    import torch.nn.functional as F

    def w1(x, w, b):
        return torch.sum(torch.tanh(x * w + b) * torch.sigmoid(x))

    def w2(W1, b1, W2, b2, X, y):
        return F.cross_entropy(torch.tanh(X @ W1 + b1) @ W2 + b2, y)

    def w3(x):
        return torch.sin(x) * x + torch.exp(-x * x)

    def w4(steps):
        def chain(x):
            for _ in range(steps):
                x = x * W4_A + W4_C * torch.sin(x)
            return x
        return chain

    def w5(x, c):
        p = torch.softmax(F.layer_norm(x, x.shape[-1:], eps=W5_EPS), -1)
        return torch.sum(p * c)

    def value_and_grad(f, argnums):
        f = torch.compile(f) if compiled else f

        def call(*args):
            args = [a.detach().requires_grad_(i in argnums) for i, a in enumerate(args)]
            out = f(*args)
            return out.detach(), torch.autograd.grad(out, [args[i] for i in argnums])
        return call

    def arrays(f, argnums):
        def make(*args):
            vg, dev = value_and_grad(f, argnums), [torch.from_numpy(a) for a in args]
            return lambda: vg(*dev)
        return make

    def scalar(f):
        vg = value_and_grad(f, (0,))

        def call(x):
            v, (g,) = vg(torch.tensor(x, dtype=torch.float64))
            return v, g
        return call

    return {"W1": arrays(w1, ARGNUMS["W1"]), "W2": arrays(w2, ARGNUMS["W2"]),
            "W3": lambda: scalar(w3), "W4": lambda steps: scalar(w4(steps)),
            "W5": arrays(w5, ARGNUMS["W5"])}
