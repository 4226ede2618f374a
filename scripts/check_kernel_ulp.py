"""The accuracy of every transcendental elementwise primitive's scalar rule in the kernel IR
(tests/test_kernel_ir_math.py asserts MAX_ULP, the bounds this measures).

    python scripts/check_kernel_ulp.py               # 1e5 random inputs per function and dtype
    python scripts/check_kernel_ulp.py 20000 sin cos  # fewer inputs, some functions

Each function runs as a compiled kernel IR Function on log-uniform magnitudes of both signs
from the smallest subnormal to the largest float, uniform ones in (-8, 8) and where the
function bends (DENSE), and the edge values of the test. Prints, per function and dtype, the
largest error in ulps against the precise value (NumPy in the next wider type; mpmath for the
special functions in float64) and against NumPy in the same dtype (the interpreter), and the
input of the largest error against the precise value.
"""

import math
import os
import sys

import numpy as np

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "tests")]
from test_kernel_ir_math import (MAX_ULP, NP, grid, precise, run_on,  # noqa: E402
                                 signature, ulps)

DENSE = {"asin": (-1, 1), "acos": (-1, 1), "atanh": (-1, 1), "acosh": (1, 3),
         "lgamma": (-10, 10), "gamma": (-10, 10), "erfc": (-6, 27), "erf": (-6, 6),
         "tanh": (-20, 20), "logistic": (-40, 40), "expm1": (-1, 1), "log1p": (-1, 1),
         "exp": (-745, 710), "log": (0, 4)}


def inputs(prim, dtype, n, rng):
    arity = signature(prim, dtype)[0]
    args = grid(dtype, arity, rng, n // 2)
    if prim in DENSE:
        lo, hi = DENSE[prim]
        args = [np.concatenate([args[0], rng.uniform(lo, hi, n).astype(NP[dtype])])]
    if prim == "pow":                # x**y not over- or underflowing, and near the limits
        x = np.exp(rng.uniform(-7, 7, n))
        y = np.concatenate([rng.uniform(-50, 50, n // 2), rng.uniform(-745, 710, n - n // 2)
                            / np.log(x[n // 2:])])
        neg = -np.exp(rng.uniform(-3, 3, n))
        args = [np.concatenate([args[0], x, neg]).astype(NP[dtype]),
                np.concatenate([args[1], y, rng.integers(-60, 60, n)]).astype(NP[dtype])]
    if prim in ("sin", "cos"):       # accurate below 2**43 (kernel_ir/mathlib.py)
        args = [a[~(np.abs(a) >= 2.0 ** 43)] for a in args]
    return args


def measure(prim, dtype, n, seed=0):
    args = inputs(prim, dtype, n, np.random.default_rng(seed))
    got, want = run_on(prim, args, {})
    edge = np.isnan(want) | np.isinf(want) | (want == 0)
    err = ulps(got, np.where(edge, want, precise(prim, args)))
    i, vs_np = int(np.argmax(err)), ulps(got, want)
    j = int(np.argmax(vs_np))
    return float(err[i]), float(vs_np[j]), tuple(float(a[i]) for a in args), \
        tuple(float(a[j]) for a in args)


def _up(e):
    return math.ceil(e * 100) / 100 if e < 1e6 else math.inf


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    names = sys.argv[2:] or sorted(MAX_ULP)
    print(f"{'function':9s} {'f64':>6s} {'f64/np':>7s} {'f32':>6s} {'f32/np':>7s}   "
          "worst inputs (float64, float32)")
    for prim in names:
        (e64, n64, at64, np64), (e32, n32, at32, np32) = (
            measure(prim, dt, n) for dt in ("f64", "f32"))
        print(f"{prim:9s} {_up(e64):6.2f} {_up(n64):7.2f} {_up(e32):6.2f} {_up(n32):7.2f}   "
              f"{at64} {at32}; against NumPy {np64} {np32}", flush=True)


if __name__ == "__main__":
    main()
