"""The accuracy of fusegrad's vectorized tanh beyond the test suite's samples.

    python scripts/check_tanh.py            # every positive float32 (about 40 s), 2e7 float64

float32: every positive finite input against libm's float64 tanh. float64: 2e7 inputs, half
log-uniform in [1e-12, 40], half uniform in [0, 20], against NumPy's long double tanh. Prints the
largest error in ulps of the result and where it occurs (tanh is odd: negatives are the same).
"""

import math
import time

import numba
import numpy as np

from fusegrad.codegen.mathlib import FUNCS

TANH32, TANH64 = FUNCS["tanh", "f32"], FUNCS["tanh", "f64"]


@numba.njit(error_model="numpy")
def _sweep32(top):
    worst, at = 0.0, 0
    for bits in range(1, top):
        x = np.int32(bits).view(np.float32)
        ref = math.tanh(np.float64(x))
        near = abs(np.float32(ref))
        ulp = np.float64(np.nextafter(near, np.float32(np.inf)) - near)
        err = abs(np.float64(TANH32(x)) - ref) / ulp
        if err > worst:
            worst, at = err, bits
    return worst, at


@numba.njit(error_model="numpy")
def _tanh64(x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = TANH64(x[i])
    return out


def main():
    t = time.perf_counter()
    top = int(np.float32(np.finfo(np.float32).max).view(np.int32))
    worst, at = _sweep32(top)
    print(f"float32, all {top - 1} positive finite inputs: max {worst:.3f} ulp at "
          f"{np.int32(at).view(np.float32)!r} ({time.perf_counter() - t:.0f} s)")
    rng, worst64, at64 = np.random.default_rng(7), 0.0, 0.0
    for _ in range(10):
        x = np.concatenate([np.exp(rng.uniform(np.log(1e-12), np.log(40), 10**6)),
                            rng.uniform(0, 20, 10**6)])
        ref = np.tanh(x.astype(np.longdouble))
        spacing = np.spacing(np.abs(ref.astype(np.float64))).astype(np.longdouble)
        err = np.abs(_tanh64(x).astype(np.longdouble) - ref) / spacing
        i = int(np.argmax(err))
        if err[i] > worst64:
            worst64, at64 = float(err[i]), x[i]
    print(f"float64, 2e7 sampled inputs: max {worst64:.3f} ulp at {at64!r}")


if __name__ == "__main__":
    main()
