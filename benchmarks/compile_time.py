"""Cold compile time: each program's first call in a fresh process with an empty cache.

    python benchmarks/compile_time.py                       # every program, fusegrad (tiered off)
    python benchmarks/compile_time.py --programs chain380,lstm --columns fusegrad,jax
    python benchmarks/compile_time.py --json

One child process per (program, column): it imports the library, builds the inputs, and times
the first call of the jitted value-and-gradient (trace + passes + compile + run), then a second
call, and reports its peak RSS; the parent kills it past --limit seconds. Columns: `fusegrad`
(FUSEGRAD_TIERED=0: the whole compile before the first result), `numba_renderer` (the same
with FUSEGRAD_RENDERER=numba: what the kernel IR compiles is rendered for Numba), `tiered`
(fusegrad's default: the first call runs on the interpreter, the second queues the compile on
the compile worker; the child keeps calling until the compiled entry takes over, and reports
when), `interp`, `jax` (jax.jit, where installed), `hand` (rnn_scan
only: the RNN's value and gradient written by hand in Numba).
Every child checks its value against the plain NumPy program. The programs are written in
plain NumPy, as users write them; gmm, mog_vi, gp and convnet (with SciPy) live in
real_programs.py.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PROGRAMS = {
    "chain380": "vector chain: y*1.0001 and sin(y) alternating, 380 ops on f64[4], value and grad",
    "chain1500": "the same chain at 1 500 ops",
    "chain15000": "the same chain at 15 000 ops",
    "mlp": "MLP 784-512-10 (batch 256, tanh, softmax cross entropy): loss and 4 grads",
    "lstm": "LSTM over 20 time steps, hidden 30, 4 sequences, logsumexp outputs (autograd's)",
    "hmm": "HMM forward pass in log space over 50 steps, 5 states, logsumexp (autograd's example)",
    "hmm_index": "the HMM with the observations an int64 argument: log_B[:, obs[t]] a gather",
    "mlp32": "float32 MLP 784-512-10 (batch 256, tanh) with integer labels: cross_entropy",
    "rnn_scan": "tanh RNN over 1 000 steps, hidden 16, written with fg.lax.scan / jax.lax.scan",
    "gmm": "Gaussian mixture, 10 components in 2-D, 300 points: multivariate_normal.logpdf",
    "mog_vi": "mixture-of-Gaussians VI, 10 components, 40 samples each: norm.logpdf",
    "gp": "Gaussian process, RBF kernel, 50 points in 2-D: Cholesky, solve_triangular",
    "convnet": "LeNet-5 shape, batch 32 of 28x28: scipy.signal.convolve per filter, max pool",
    "w3": "a short function: benchmarks/run.py's W3, sin(x)*x+exp(-x*x) of a float, value and grad",
}
REAL = ("gmm", "mog_vi", "gp", "convnet")     # benchmarks/real_programs.py
COLUMNS = ("fusegrad", "numba_renderer", "tiered", "interp", "jax", "hand")


# -- the programs, in plain NumPy (np may be jax.numpy in the jax column) -------------------------

def chain(np, n):
    def f(y):
        for i in range(n // 2):
            y = y * 1.0001 if i % 2 == 0 else np.sin(y)
            y = np.sin(y) if i % 2 == 0 else y * 1.0001
        return np.sum(y)
    import numpy
    return f, (numpy.linspace(0.1, 0.4, 4),), 0


def mlp(np, logsumexp):
    import numpy
    rng = numpy.random.default_rng(0)

    def f(W1, b1, W2, b2, X, Y):
        logits = np.tanh(X @ W1 + b1) @ W2 + b2
        return -np.mean(np.sum(Y * (logits - logsumexp(logits, axis=1, keepdims=True)), axis=1))
    args = (0.05 * rng.standard_normal((784, 512)), numpy.zeros(512),
            0.05 * rng.standard_normal((512, 10)), numpy.zeros(10),
            rng.standard_normal((256, 784)), numpy.eye(10)[rng.integers(0, 10, 256)])
    return f, args, (0, 1, 2, 3)


def lstm(np, logsumexp):
    import numpy
    rng = numpy.random.default_rng(1)
    T, S, V, H = 20, 4, 30, 30
    inputs = numpy.eye(V)[rng.integers(0, V, (T, S))]

    def sigmoid(x):
        return 0.5 * (np.tanh(x) + 1.0)

    def f(params):
        init_h, init_c, change, forget, ingate, outgate, predict = params
        hiddens = np.repeat(init_h, S, axis=0)
        cells = np.repeat(init_c, S, axis=0)
        total = 0.0
        for t in range(T - 1):
            full = np.hstack((np.ones((S, 1)), inputs[t], hiddens))
            change_now = np.tanh(full @ change)
            cells = cells * sigmoid(full @ forget) + sigmoid(full @ ingate) * change_now
            hiddens = sigmoid(full @ outgate) * np.tanh(cells)
            logits = np.hstack((np.ones((S, 1)), hiddens)) @ predict
            log_probs = logits - logsumexp(logits, axis=1, keepdims=True)
            total = total + np.sum(log_probs * inputs[t + 1])
        return total / ((T - 1) * S)
    gate = (1 + V + H, H)
    params = (0.1 * rng.standard_normal((1, H)), 0.1 * rng.standard_normal((1, H)),
              *(0.1 * rng.standard_normal(gate) for _ in range(4)),
              0.1 * rng.standard_normal((H + 1, V)))
    return f, (params,), 0


def hmm(np, logsumexp):
    import numpy
    rng = numpy.random.default_rng(2)
    K, T = 5, 50
    obs = rng.integers(0, 4, T)

    def f(log_pi, log_A, log_B):
        log_pi = log_pi - logsumexp(log_pi)
        log_A = log_A - logsumexp(log_A, axis=1, keepdims=True)
        log_B = log_B - logsumexp(log_B, axis=1, keepdims=True)
        log_alpha = log_pi + log_B[:, obs[0]]
        for t in range(1, T):
            log_alpha = logsumexp(log_alpha[:, None] + log_A, axis=0) + log_B[:, obs[t]]
        return logsumexp(log_alpha)
    return f, (rng.standard_normal(K), rng.standard_normal((K, K)),
               rng.standard_normal((K, 4))), (0, 1, 2)


def hmm_index(np, logsumexp):
    """hmm with obs passed in (an int64 array indexing log_B), as every HMM does."""
    f, args, argnums = hmm(np, logsumexp)
    T = 50
    obs = __import__("numpy").random.default_rng(2).integers(0, 4, T)

    def g(log_pi, log_A, log_B, obs):
        log_pi = log_pi - logsumexp(log_pi)
        log_A = log_A - logsumexp(log_A, axis=1, keepdims=True)
        log_B = log_B - logsumexp(log_B, axis=1, keepdims=True)
        log_alpha = log_pi + log_B[:, obs[0]]
        for t in range(1, T):
            log_alpha = logsumexp(log_alpha[:, None] + log_A, axis=0) + log_B[:, obs[t]]
        return logsumexp(log_alpha)
    return g, (*args, obs), argnums


def mlp32(np, logsumexp):
    """A float32 MLP with integer labels; the loss is the mean cross entropy."""
    import numpy
    rng = numpy.random.default_rng(0)

    def f(W1, b1, W2, b2, X, y):
        logits = np.tanh(X @ W1 + b1) @ W2 + b2
        logp = logits - logsumexp(logits, axis=1, keepdims=True)
        return -np.mean(np.take_along_axis(logp, y[:, None], axis=1))
    f32 = numpy.float32
    args = ((0.05 * rng.standard_normal((784, 512))).astype(f32), numpy.zeros(512, f32),
            (0.05 * rng.standard_normal((512, 10))).astype(f32), numpy.zeros(10, f32),
            rng.standard_normal((256, 784)).astype(f32), rng.integers(0, 10, 256))
    return f, args, (0, 1, 2, 3)


def rnn_scan(np, lax):
    import numpy
    rng = numpy.random.default_rng(3)
    T, H, D = 1000, 16, 4
    xs = rng.standard_normal((T, D))

    def f(W, U, h0):
        def step(h, x):
            h = np.tanh(W @ h + U @ x)
            return h, np.sum(h * h)
        h, ys = lax.scan(step, h0, xs)
        return np.sum(ys) / T + np.sum(h)
    return f, (0.3 * rng.standard_normal((H, H)), 0.3 * rng.standard_normal((H, D)),
               numpy.zeros(H)), (0, 1, 2)


def rnn_hand():
    """The scan RNN's value and gradient written by hand in Numba: a forward loop that keeps
    every h, a backward loop over them in reverse (the reference for fg.lax.scan's loop)."""
    import numba
    import numpy

    @numba.njit(cache=False)
    def value_and_grad(W, U, h0, xs):
        T, H = xs.shape[0], h0.shape[0]
        hs = numpy.empty((T + 1, H))
        hs[0] = h0
        total = 0.0
        for t in range(T):
            h = numpy.tanh(W @ hs[t] + U @ xs[t])
            hs[t + 1] = h
            total += numpy.sum(h * h)
        value = total / T + numpy.sum(hs[T])
        gW, gU = numpy.zeros_like(W), numpy.zeros_like(U)
        gh = numpy.ones(H)
        for t in range(T - 1, -1, -1):
            h = hs[t + 1]
            gh = gh + 2.0 * h / T
            ga = gh * (1.0 - h * h)
            gW += numpy.outer(ga, hs[t])
            gU += numpy.outer(ga, xs[t])
            gh = W.T @ ga
        return value, (gW, gU, gh)
    return value_and_grad


class _PythonLax:
    """lax.scan as the Python loop it means."""

    @staticmethod
    def scan(f, init, xs):
        carry, ys = init, []
        for x in xs:
            carry, y = f(carry, x)
            ys.append(y)
        import numpy
        return carry, numpy.stack(ys)


def w3(np, logsumexp):
    def f(x):
        return np.sin(x) * x + np.exp(-x * x)
    return f, (0.7,), 0


def build(name, np, logsumexp, lax, scipy=None):
    if name in REAL:
        import real_programs
        return real_programs.PROGRAMS[name](np, scipy or real_programs.scipy_names())
    if name.startswith("chain"):
        return chain(np, int(name[5:]))
    if name == "rnn_scan":
        return rnn_scan(np, lax)
    return {"mlp": mlp, "lstm": lstm, "hmm": hmm, "hmm_index": hmm_index,
            "mlp32": mlp32, "w3": w3}[name](np, logsumexp)


# -- one child: the first call, timed --------------------------------------------------------

def child(name, column):
    sys.path[:0] = [ROOT, HERE]              # this checkout's fusegrad, not an installed one
    start = time.perf_counter()
    if column != "jax":
        import fusegrad as fg                # before SciPy, so its names are fusegrad's
    import numpy
    from scipy.special import logsumexp
    if column == "hand":                 # hand-written Numba, for rnn_scan only
        fun, args, argnums = build(name, numpy, logsumexp, None)
        hand = rnn_hand()
        xs = numpy.random.default_rng(3).standard_normal((1000, 4))

        def call():
            return float(hand(*args, xs)[0])
    elif column == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp as jlse
        from real_programs import jax_scipy_names
        fun, args, argnums = build(name, jnp, jlse, jax.lax, jax_scipy_names())
        jitted = jax.jit(jax.value_and_grad(fun, argnums=argnums))

        def call():
            value, grads = jitted(*args)
            jax.block_until_ready(grads)
            return float(value)
    else:
        fun, args, argnums = build(name, numpy, logsumexp, fg.lax)
        backend = "interp" if column == "interp" else "numba"
        options = {"tiered": True} if column == "tiered" else {}   # else FUSEGRAD_TIERED=0
        jitted = fg.jit(fg.value_and_grad(fun, argnums=argnums), backend=backend, **options)

        def call():
            return float(jitted(*args)[0])
    imported = time.perf_counter()
    t0 = time.perf_counter()
    value = call()
    first = time.perf_counter() - t0
    extra = {}
    if column == "tiered":               # call on while Numba compiles: how fast, until when
        tier = next(iter(jitted._entries.values()))[0].executable
        calls, t1 = 0, time.perf_counter()
        while not getattr(tier, "ready", True):
            call()
            calls += 1
        done = time.perf_counter()
        extra = {"switch": done - t0, "calls_before_switch": calls,
                 "call_during_compile": (done - t1) / calls if calls else None}
    t0 = time.perf_counter()
    call()
    second = time.perf_counter() - t0
    if name == "rnn_scan":       # the plain loop; tests/test_control_flow.py checks the rest
        want = float(rnn_scan(numpy, _PythonLax())[0](*args))
    else:
        want = float(build(name, numpy, logsumexp, None)[0](*build(name, numpy, logsumexp,
                                                                   None)[1]))
    return {"first": first, "second": second, "import": imported - start,
            "ok": abs(value - want) <= (1e-5 if name == "mlp32" else 1e-9) * max(1.0, abs(want)),
            "value": value,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def run_child(name, column, limit):
    if column == "hand" and name != "rnn_scan":
        return {"error": "rnn_scan only"}
    cache = tempfile.mkdtemp(prefix="fg-cold-")
    env = dict(os.environ, FUSEGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=cache,
               FUSEGRAD_TIERED="1" if column == "tiered" else "0")
    if column == "numba_renderer":
        env["FUSEGRAD_RENDERER"] = "numba"
    cmd = [sys.executable, __file__, "--child", name, column]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"error": f"killed after {limit} s"}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:120]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--columns", default="fusegrad,tiered,jax")
    ap.add_argument("--limit", type=float, default=600)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        print(json.dumps(child(*opts.child)))
        return
    results = {}
    for name in opts.programs.split(","):
        for column in opts.columns.split(","):
            results[name, column] = run_child(name, column, opts.limit)
            if not opts.json:
                print(f"  {name} {column}: {results[name, column]}", file=sys.stderr)
    if opts.json:
        print(json.dumps({f"{k[0]}/{k[1]}": v for k, v in results.items()}, indent=1))
        return
    cols = opts.columns.split(",")
    print("first call in a fresh process, empty cache: seconds (peak MB); second call below"
          " (tiered: and when the compiled entry took over)")
    print("| program | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name in opts.programs.split(","):
        cells = []
        for column in cols:
            r = results[name, column]
            if "error" in r:
                cells.append(f"n/a ({r['error']})")
            else:
                mb = f" ({r['peak_mb']:.0f} MB)" if r.get("peak_mb") else ""
                bad = "" if r["ok"] else " WRONG"
                switch = f", compiled at {r['switch']:.2f}" if r.get("switch") else ""
                cells.append(f"{r['first']:.2f}{mb}{bad}<br>{r['second'] * 1e3:.2f} ms{switch}")
        print(f"| {name}: {PROGRAMS[name]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
