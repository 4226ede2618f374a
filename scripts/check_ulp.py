"""The accuracy of mathlib's arc functions and roots (codegen/mathlib_arc.py) against NumPy.

    python scripts/check_ulp.py              # 2e6 inputs per function and dtype (~1 min)
    python scripts/check_ulp.py 200000 atan  # fewer inputs, some functions
    python scripts/check_ulp.py --float32 97  # unary ones on every 97th float32 (~1 min)

Each function runs in the njit loop a fused kernel would use, on log-uniform magnitudes of both
signs from the smallest subnormal to the largest float, dense uniform samples where the function
bends or its reduction switches (|x| near 1, tan(pi/8), ...), and the special values (0, -0,
inf, -inf, nan, the largest float, subnormals); binary functions on pairs of those. The error is
in ulps of the result against NumPy in the next wider type (long double for float64, float64 for
float32), the reference test_mathlib.py uses; nan must be nan and zeros must carry NumPy's sign.
Prints the largest error, rounded up to hundredths, and where it occurs.
"""

import math
import sys

import numba
import numpy as np

from fusegrad.codegen.mathlib import FUNCS

NAMES = ("atan", "atan2", "asin", "acos", "asinh", "acosh", "atanh", "cbrt", "hypot")
BINARY = ("atan2", "hypot")
REFERENCE = {"atan": np.arctan, "atan2": np.arctan2, "asin": np.arcsin, "acos": np.arccos,
             "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "cbrt": np.cbrt,
             "hypot": np.hypot}
DTYPES = {"f64": np.float64, "f32": np.float32}
# where a function bends or its reduction switches: sampled uniformly as well
DENSE = {"atan": [(-3, 3)], "asin": [(-1, 1), (0.99, 1)], "acos": [(-1, 1), (0.99, 1), (-1, -0.99)],
         "asinh": [(-3, 3)], "acosh": [(1, 3), (1, 1.01)], "atanh": [(-1, 1), (0.99, 1)],
         "cbrt": [(-10, 10)], "atan2": [(-3, 3)], "hypot": [(-3, 3)]}


def loop(f, arity):
    if arity == 1:
        @numba.njit(error_model="numpy")
        def run(x, y):
            out = np.empty_like(x)
            for i in range(x.size):
                out[i] = f(x[i])
            return out
    else:
        @numba.njit(error_model="numpy")
        def run(x, y):
            out = np.empty_like(x)
            for i in range(x.size):
                out[i] = f(x[i], y[i])
            return out
    return run


def specials(dtype):
    fi = np.finfo(dtype)
    edge = [0.0, fi.smallest_subnormal, fi.smallest_normal, 0.5, 1.0, 2.0, fi.max, np.inf]
    return np.array([*edge, *(-v for v in edge), np.nan, -np.nan], dtype)


def inputs(name, dtype, n, rng):
    """n sample inputs (and for binary functions as many second operands)."""
    fi = np.finfo(dtype)
    lo, hi = np.log(float(fi.smallest_subnormal)), np.log(float(fi.max))
    mags = np.exp(rng.uniform(lo, hi, n))
    parts = [mags * rng.choice([-1.0, 1.0], n)]
    for a, b in DENSE[name]:
        parts.append(rng.uniform(a, b, n))
    x = np.concatenate(parts).astype(dtype)
    s = specials(dtype)
    if name not in BINARY:
        return np.concatenate([x, s]), None
    y = np.concatenate([x[rng.permutation(x.size)] for _ in range(1)])
    # the second operand: independent, the same magnitude (ratios near 1), and a scaled copy
    # (ratios near tan(pi/8) and its inverse); then every pair of special values
    y = np.concatenate([y, x * dtype(1 + 1e-3 * rng.standard_normal()),
                        x * dtype(0.41421356)])
    x = np.concatenate([x, x, x])
    sx, sy = np.meshgrid(s, s)
    return np.concatenate([x, sx.ravel()]), np.concatenate([y, sy.ravel()])


def ulp_error(got, ref):
    """|got - ref| in spacings of ref rounded to got's dtype; 0 where both are the same inf/nan
    (and zeros of the same sign); inf where only one is nan or the zero's sign differs."""
    with np.errstate(all="ignore"):
        near = ref.astype(got.dtype)
        err = np.abs(got.astype(ref.dtype) - ref) / np.spacing(np.abs(near)).astype(ref.dtype)
    same = ((got == near) & (np.signbit(got) == np.signbit(near))) | \
        (np.isnan(got) & np.isnan(near))
    err = np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))
    return np.where((got == 0) & (near == 0) & (np.signbit(got) != np.signbit(near)),
                    np.inf, err)


def measure(name, dt, n, seed=0):
    """(largest ulp error, the input(s) where it occurs)."""
    dtype = DTYPES[dt]
    x, y = inputs(name, dtype, n, np.random.default_rng(seed))
    arity = 2 if name in BINARY else 1
    got = loop(FUNCS[name, dt], arity)(x, x if y is None else y)
    wide = np.longdouble if dtype == np.float64 else np.float64
    with np.errstate(all="ignore"):
        args = (x.astype(wide),) if y is None else (x.astype(wide), y.astype(wide))
        ref = REFERENCE[name](*args)
    err = ulp_error(got, ref)
    i = int(np.argmax(err))
    return float(err[i]), (x[i],) if y is None else (x[i], y[i])


def sweep32(name, stride):
    """The unary function on every stride-th float32 bit pattern, both signs, against NumPy
    in float64: (largest ulp error, where)."""
    bits = np.arange(0, 0x7F800001, stride, dtype=np.int64).astype(np.int32)
    x = np.concatenate([bits.view(np.float32), -bits.view(np.float32)])
    got = loop(FUNCS[name, "f32"], 1)(x, x)
    with np.errstate(all="ignore"):
        err = ulp_error(got, REFERENCE[name](x.astype(np.float64)))
    i = int(np.argmax(err))
    return float(err[i]), x[i]


def _up(e):
    return math.ceil(e * 100) / 100


def main():
    if sys.argv[1:2] == ["--float32"]:
        stride = int(sys.argv[2]) if len(sys.argv) > 2 else 97
        for name in (n for n in NAMES if n not in BINARY):
            e, at = sweep32(name, stride)
            print(f"{name:9s} float32 every {stride}th: {_up(e):.2f} ulp at {float(at)!r}")
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    names = sys.argv[2:] or NAMES
    print(f"{'function':9s} {'float64':>8s} {'float32':>8s}   worst float64 input")
    for name in names:
        (e64, at64), (e32, _) = (measure(name, dt, n) for dt in ("f64", "f32"))
        print(f"{name:9s} {_up(e64):8.2f} {_up(e32):8.2f}   "
              f"{', '.join(repr(float(v)) for v in at64)}")


if __name__ == "__main__":
    main()
