"""ns/element of fusegrad's vectorizable math functions against math.* in Numba and NumPy.

Each function runs in the same njit loop `out[i] = f(x[i])` (atan2 and hypot: `f(x[i], y[i])`,
y a shuffled copy of x) over N = 1e6 elements; the table
prints the median of 7 timed runs (after one compiling run). Run from the repository root:
`python -m benchmarks.bench_mathlib` (or plain `python benchmarks/...` with fusegrad installed).
"""

import math
import time

import numba
import numpy as np

from fusegrad.codegen.mathlib import FUNCS

try:
    from scipy.special import erf as np_erf
    from scipy.special import expit as np_logistic
except ImportError:  # scipy is optional: NumPy has no erf, and expit is one line
    np_erf = None

    def np_logistic(x, out):
        return np.divide(1, 1 + np.exp(-x), out=out)


N, REPEATS = 1_000_000, 7
DOMAIN = {"exp": (-50, 50), "expm1": (-5, 5), "log": (1e-3, 1e3), "log1p": (-0.9, 1e3),
          "tanh": (-5, 5), "logistic": (-20, 20), "erf": (-4, 4), "sin": (-100, 100),
          "cos": (-100, 100), "atan": (-5, 5), "atan2": (-5, 5), "asin": (-1, 1),
          "acos": (-1, 1), "asinh": (-5, 5), "acosh": (1, 10), "atanh": (-1, 1),
          "cbrt": (-100, 100), "hypot": (-100, 100)}
BINARY = ("atan2", "hypot")


@numba.njit(error_model="numpy")
def math_logistic(x):
    return 1 / (1 + math.exp(-x))


MATH = {"exp": math.exp, "expm1": math.expm1, "log": math.log, "log1p": math.log1p,
        "tanh": math.tanh, "logistic": math_logistic, "erf": math.erf, "sin": math.sin,
        "cos": math.cos, "atan": math.atan, "atan2": math.atan2, "asin": math.asin,
        "acos": math.acos, "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh,
        "cbrt": np.cbrt, "hypot": math.hypot}
NUMPY = {"exp": np.exp, "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
         "logistic": np_logistic, "erf": np_erf, "sin": np.sin, "cos": np.cos,
         "atan": np.arctan, "atan2": np.arctan2, "asin": np.arcsin, "acos": np.arccos,
         "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "cbrt": np.cbrt,
         "hypot": np.hypot}


def loop(f):
    @numba.njit(error_model="numpy")
    def run(x, out):
        for i in range(x.size):
            out[i] = f(x[i])

    return run


def loop2(f):
    @numba.njit(error_model="numpy")
    def run(x, y, out):
        for i in range(x.size):
            out[i] = f(x[i], y[i])

    return run


def ns_per_element(call, x, out, *, y=None):
    args = (x, out) if y is None else (x, y, out)
    call(*args)  # compile and warm up
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        call(*args)
        times.append(time.perf_counter() - t0)
    return np.median(times) / x.size * 1e9


def main():
    rng = np.random.default_rng(0)
    print(f"{'ns/element':10s} {'dtype':5s} {'fusegrad':>9s} {'math.*':>9s} {'numpy':>9s}")
    for (name, dt), f in FUNCS.items():
        x = rng.uniform(*DOMAIN[name], N).astype(np.float32 if dt == "f32" else np.float64)
        out = np.empty_like(x)
        if name in BINARY:
            y = rng.permutation(x)
            ours = ns_per_element(loop2(f), x, out, y=y)
            libm = ns_per_element(loop2(MATH[name]), x, out, y=y)
            ref = ns_per_element(lambda x, y, out, f=NUMPY[name]: f(x, y, out=out), x, out, y=y)
            print(f"{name:10s} {dt:5s} {ours:9.2f} {libm:9.2f} {ref:9.2f}")
            continue
        ours = ns_per_element(loop(f), x, out)
        libm = ns_per_element(loop(MATH[name]), x, out)
        ufunc = NUMPY[name]
        ref = ns_per_element(lambda x, out, f=ufunc: f(x, out=out), x, out) if ufunc else math.nan
        print(f"{name:10s} {dt:5s} {ours:9.2f} {libm:9.2f} {ref:9.2f}")


if __name__ == "__main__":
    main()
