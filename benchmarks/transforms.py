"""Forward mode, Hessians, checkpointing and vmap: op counts, times and peak memory.

    python benchmarks/transforms.py [--quick] [--only ops,hessian,remat,vmap,jac]

Tables:
  ops      optimized IR op counts of f, jvp(f) and grad (vjp) of f for three programs (nested
           loop bodies counted too): forward mode leaves no reverse pass behind
  hessian  fg.hessian (forward over reverse) and fg.hvp (jvp of grad) against the reverse
           over reverse forms (fusegrad.transforms.hessian / hvp): time per call, peak memory
  remat    peak memory of the gradient of a 10 000-step scan, with and without fg.checkpoint
           on its body (interp, NumPy buffers traced by tracemalloc)
  vmap     per-example gradients of the MLP 784-512-10 over a batch of 256: vmap(grad)
           against a Python loop of grads (and jax.vmap, torch.func.vmap where installed)
  jac      a 1000x50 Jacobian (the residuals of a curve fit): jacfwd against jacrev (and
           jax.jacfwd / jacrev, torch.func.jacfwd / jacrev where installed)
"""

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE)]
os.environ.setdefault("FUSEGRAD_TIERED", "0")
import fusegrad as fg  # noqa: E402
from fusegrad import lax, transforms  # noqa: E402


def median_time(fn, *args, repeat=7):
    fn(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def peak_bytes(fn, *args):
    fn(*args)                   # compiled and warm: the call's own allocations only
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def count_ops(fn) -> int:
    n = 0
    for op in fn.ops:
        n += 1
        for value in op.params.values():
            if isinstance(value, fg.ir.Function):
                n += count_ops(value)
    return n


def fmt_bytes(n):
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


# -- ops --------------------------------------------------------------------------------------

def _mlp(params, x):
    w1, b1, w2, b2 = params
    h = np.tanh(x @ w1 + b1)
    return fg.nn.logsumexp(h @ w2 + b2, axis=-1).sum()


def _rnn(w, xs):
    def body(h, x):
        h = np.tanh(w @ h + x)
        return h, (h * h).sum()
    h, ys = lax.scan(body, np.zeros(w.shape[0]), xs)
    return h.sum() + ys.sum()


def _norm(x, c):
    return (fg.nn.softmax(fg.nn.layer_norm(x), axis=-1) * c).sum()


def table_ops(quick):
    rng = np.random.default_rng(0)
    progs = {
        "MLP 784-512-10, batch 32": (
            _mlp, ([rng.normal(size=s) for s in [(784, 512), (512,), (512, 10), (10,)]],
                   rng.normal(size=(32, 784)))),
        "RNN scan, 64 units, 100 steps": (_rnn, (rng.normal(size=(64, 64)),
                                                 rng.normal(size=(100, 64)))),
        "softmax(layer_norm(x)) 128x256": (_norm, (rng.normal(size=(128, 256)),
                                                   rng.normal(size=(128, 256)))),
    }
    print("\n## IR op counts after the passes (nested bodies included)\n")
    print(f"| {'program':32} | f | jvp(f) | grad(f) |\n|---|---|---|---|")
    for name, (f, args) in progs.items():
        tangents = fg.tree.tree_map(np.ones_like, args[0]) if hasattr(fg.tree, "tree_map") \
            else _ones_like(args[0])

        def jvp_f(a0, a1, t0):
            return fg.jvp(lambda p: f(p, a1), (a0,), (t0,))
        counts = [count_ops(fg.jit(g, backend="interp").lower(*a).ir) for g, a in (
            (f, args), (jvp_f, args + (tangents,)), (fg.grad(f), args))]
        print(f"| {name:32} | {counts[0]} | {counts[1]} | {counts[2]} |")


def _ones_like(tree):
    leaves, treedef = fg.tree.flatten(tree)
    return fg.tree.unflatten(treedef, [np.ones_like(x) for x in leaves])


# -- hessian ------------------------------------------------------------------------------------

def _objective(x):
    a = np.outer(np.arange(1.0, x.size + 1), np.ones(x.size)) / x.size
    return (np.tanh(a @ x) ** 2).sum() + fg.nn.logsumexp(x, axis=0) + (x ** 4).sum()


def table_hessian(quick):
    n = 16 if quick else 32
    x, v = np.linspace(-1, 1, n), np.linspace(1, 2, n)
    print(f"\n## Hessian and HVP of a scalar function of {n} parameters\n")
    print("| form | backend | time per call | peak memory (interp/eager: tracemalloc) |")
    print("|---|---|---|---|")
    forms = {
        "hessian, forward over reverse": (fg.hessian(_objective), (x,)),
        "hessian, reverse over reverse": (transforms.hessian(_objective), (x,)),
        "hvp, jvp of grad": (lambda x, v: fg.hvp(_objective, (x,), (v,)), (x, v)),
        "hvp, grad of <grad, v>": (lambda x, v: transforms.hvp(_objective, (x,), (v,)),
                                   (x, v)),
    }
    ref = {}
    for name, (f, args) in forms.items():
        for backend in ("numba", "interp", "eager"):
            jitted = fg.jit(f, backend=backend)
            t0 = time.perf_counter()
            out = jitted(*args)
            first = time.perf_counter() - t0
            key = name.split(",")[0]
            assert np.allclose(out, ref.setdefault(key, out), rtol=1e-8, atol=1e-10), name
            peak = "" if backend == "numba" else fmt_bytes(peak_bytes(jitted, *args))
            print(f"| {name} | {backend} | {median_time(jitted, *args) * 1e3:.3f} ms "
                  f"(first call {first:.2f} s) | {peak} |")


# -- remat --------------------------------------------------------------------------------------

def table_remat(quick):
    steps = 2000 if quick else 10_000
    rng = np.random.default_rng(0)
    w = rng.normal(size=(32, 32)) * 0.2

    def block(h, x):
        for _ in range(4):
            h = np.tanh(w @ h + x)
        return h

    def loss(h0, xs, remat):
        step = fg.checkpoint(block) if remat else block

        def body(h, x):
            return step(h, x), None
        return (lax.scan(body, h0, xs)[0] ** 2).sum()
    h0, xs = rng.normal(size=32), rng.normal(size=(steps, 32))
    print(f"\n## Gradient of a {steps}-step scan (carry f64[32], 4 tanh layers per step)\n")
    print("| body | stacked residuals | peak memory (interp) | time per call |")
    print("|---|---|---|---|")
    grads = {}
    for remat in (False, True):
        g = fg.jit(fg.grad(loss), backend="interp", static_argnums=(2,))
        ir = g.lower(h0, xs, remat).ir
        stacked = sum(len(op.outputs) - op.params["num_carry"] for op in ir.ops
                      if op.prim == "scan" and not op.params["reverse"])
        grads[remat] = g(h0, xs, remat)
        peak = peak_bytes(g, h0, xs, remat)
        print(f"| {'fg.checkpoint(block)' if remat else 'block'} | {stacked} x f64[{steps},32] "
              f"| {fmt_bytes(peak)} | {median_time(g, h0, xs, remat, repeat=3) * 1e3:.1f} ms |")
    assert np.allclose(grads[False], grads[True], rtol=1e-10, atol=1e-12)
    table_remat_top_level(rng)


def table_remat_top_level(rng):
    """No scan: 8 checkpointed blocks in a row, the recomputation kept apart by the barrier."""
    ws = [rng.normal(size=(256, 256)) * 0.06 for _ in range(8)]

    def block(h, w):
        for _ in range(4):
            h = np.tanh(h @ w)
        return h

    def loss(x, remat):
        step = fg.checkpoint(block) if remat else block
        for w in ws:
            x = step(x, w)
        return (x ** 2).sum()
    x = rng.normal(size=(128, 256))
    print("\n## value_and_grad of 8 blocks of 4 tanh layers, x f64[128,256], no scan\n")
    print("| blocks | tanh ops (optimized) | peak memory (interp) | time per call |")
    print("|---|---|---|---|")
    for remat in (False, True):
        g = fg.jit(fg.value_and_grad(loss), backend="interp", static_argnums=(1,))
        tanh = [op.prim for op in g.lower(x, remat).ir.ops].count("tanh")
        print(f"| {'fg.checkpoint(block)' if remat else 'block'} | {tanh} "
              f"| {fmt_bytes(peak_bytes(g, x, remat))} | "
              f"{median_time(g, x, remat, repeat=3) * 1e3:.1f} ms |")


# -- vmap ---------------------------------------------------------------------------------------

def _mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    logits = np.tanh(x @ w1 + b1) @ w2 + b2
    return fg.nn.logsumexp(logits, axis=-1) - (logits * y).sum()    # y one-hot


def _mlp_params(rng):
    return [rng.normal(size=(784, 512)) * 0.03, np.zeros(512),
            rng.normal(size=(512, 10)) * 0.04, np.zeros(10)]


def table_vmap(quick):
    rng = np.random.default_rng(0)
    params, batch = _mlp_params(rng), 64 if quick else 256
    x, y = rng.normal(size=(batch, 784)), np.eye(10)[rng.integers(0, 10, size=batch)]
    per_example = fg.vmap(fg.grad(_mlp_loss), in_axes=(None, 0, 0))
    loop_grad = fg.jit(fg.grad(_mlp_loss))

    def loop(params, x, y):
        grads = [loop_grad(params, x[i], y[i]) for i in range(len(x))]
        return [np.stack([g[k] for g in grads]) for k in range(4)]
    cols = {"fusegrad vmap(grad), jit numba": fg.jit(per_example),
            "fusegrad vmap(grad), jit interp": fg.jit(per_example, backend="interp"),
            "fusegrad loop of jit(grad)": loop}
    cols.update(_jax_vmap(batch) or {})
    cols.update(_torch_vmap() or {})
    print(f"\n## Per-example gradients, MLP 784-512-10, batch {batch} (f64)\n")
    print("| implementation | time per batch |\n|---|---|")
    want = loop(params, x, y)
    for name, f in cols.items():
        got = f(params, x, y)
        assert all(np.allclose(g, w, atol=1e-10) for g, w in zip(got, want)), name
        print(f"| {name} | {median_time(f, params, x, y, repeat=3) * 1e3:.1f} ms |")


def _jax_vmap(batch):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("\n(jax is not installed: no jax.vmap column)")
        return None
    jax.config.update("jax_enable_x64", True)

    def loss(params, x, y):
        w1, b1, w2, b2 = params
        logits = jnp.tanh(x @ w1 + b1) @ w2 + b2
        return jax.nn.logsumexp(logits) - (logits * y).sum()
    f = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
    return {"jax.jit(jax.vmap(jax.grad))": lambda p, x, y: [np.asarray(g) for g in f(p, x, y)]}


def _torch_vmap():
    try:
        import torch
        from torch.func import grad, vmap
    except ImportError:
        print("\n(torch is not installed: no torch.func.vmap column)")
        return None

    def loss(params, x, y):
        w1, b1, w2, b2 = params
        logits = torch.tanh(x @ w1 + b1) @ w2 + b2
        return torch.logsumexp(logits, -1) - (logits * y).sum()
    f = vmap(grad(loss), in_dims=(None, 0, 0))

    def run(p, x, y):
        out = f([torch.from_numpy(a) for a in p], torch.from_numpy(x), torch.from_numpy(y))
        return [g.numpy() for g in out]
    return {"torch.func.vmap(grad)": run}


# -- jac ------------------------------------------------------------------------------------------

def _residuals(theta, t, data):
    """A curve fit's residuals: a sum of 10 damped oscillators (5 parameters each)."""
    p = theta.reshape(10, 5)
    model = (p[:, 0:1] * np.exp(-p[:, 1:2] ** 2 * t) * np.sin(p[:, 2:3] * t + p[:, 3:4])
             + p[:, 4:5]).sum(0)
    return model - data


def table_jac(quick):
    rng = np.random.default_rng(0)
    t, theta = np.linspace(0, 5, 1000), rng.normal(size=50) * 0.5
    data = _residuals(theta, t, np.zeros(1000)) + 0.01 * rng.normal(size=1000)
    print("\n## Jacobian of 1000 residuals with respect to 50 parameters\n")
    print("| form | backend | time per call | first call |\n|---|---|---|---|")
    ref = None
    for name, jac in (("jacfwd", fg.jacfwd), ("jacrev", fg.jacrev)):
        for backend in ("numba", "interp", "eager"):
            if backend == "eager" and quick and name == "jacrev":
                continue
            f = fg.jit(jac(_residuals), backend=backend)
            t0 = time.perf_counter()
            out = f(theta, t, data)
            first = time.perf_counter() - t0
            ref = out if ref is None else ref
            assert out.shape == (1000, 50) and np.allclose(out, ref, atol=1e-10), name
            repeat = 1 if backend == "eager" else 5
            took = median_time(f, theta, t, data, repeat=repeat)
            print(f"| {name} | {backend} | {took * 1e3:.2f} ms | {first:.2f} s |")
    for name, f in {**_jax_jac(), **_torch_jac()}.items():
        t0 = time.perf_counter()
        out = f(theta, t, data)
        first = time.perf_counter() - t0
        assert out.shape == (1000, 50) and np.allclose(out, ref, atol=1e-10), name
        took = median_time(f, theta, t, data, repeat=5)
        print(f"| {name} | | {took * 1e3:.2f} ms | {first:.2f} s |")


def _jax_jac() -> dict:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    jax.config.update("jax_enable_x64", True)

    def residuals(theta, t, data):
        p = theta.reshape(10, 5)
        return (p[:, 0:1] * jnp.exp(-p[:, 1:2] ** 2 * t) * jnp.sin(p[:, 2:3] * t + p[:, 3:4])
                + p[:, 4:5]).sum(0) - data
    return {f"jax.jit(jax.{name})": (lambda f: lambda *a: np.asarray(f(*a)))(
        jax.jit(getattr(jax, name)(residuals))) for name in ("jacfwd", "jacrev")}


def _torch_jac() -> dict:
    try:
        import torch
        import torch.func
    except ImportError:
        return {}

    def residuals(theta, t, data):
        p = theta.reshape(10, 5)
        return (p[:, 0:1] * torch.exp(-p[:, 1:2] ** 2 * t) * torch.sin(p[:, 2:3] * t
                                                                       + p[:, 3:4])
                + p[:, 4:5]).sum(0) - data

    def column(jac):
        f = jac(residuals)
        return lambda *a: f(*[torch.from_numpy(x) for x in a]).numpy()
    return {f"torch.func.{name}": column(getattr(torch.func, name))
            for name in ("jacfwd", "jacrev")}


TABLES = {"ops": table_ops, "hessian": table_hessian, "remat": table_remat, "vmap": table_vmap,
          "jac": table_jac}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=",".join(TABLES))
    opts = ap.parse_args(argv)
    for name in opts.only.split(","):
        TABLES[name](opts.quick)


if __name__ == "__main__":
    main()
