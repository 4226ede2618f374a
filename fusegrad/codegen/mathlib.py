"""Branch-free transcendental functions that vectorize inside Numba loops.

Without SVML, Numba lowers `math.exp` & co. to scalar libm calls, and a call stops LLVM's loop
vectorizer. These functions are plain float arithmetic instead, so a loop calling them becomes
packed SIMD (AVX2/AVX-512). Each one follows the same recipe:

1. reduce the argument exactly: Cody-Waite with fma (x = k ln2 + r, x = q pi/2 + r), or split
   the exponent and mantissa bits (log);
2. evaluate a polynomial in the small remainder with fma (Horner);
3. reconstruct: scale by 2**k through the exponent bits, pick the sin/cos quadrant;
4. patch nan, inf, signed zeros and domain errors with selects, never with branches.

Every function comes as float64 (`exp64`) and float32 (`exp32`); the float32 ones see only
float32 constants, so nothing widens to double and a vector holds twice the lanes. Polynomials
are near-minimax fits (mpmath, Lawson-weighted least squares on a Chebyshev grid); the comment
on each table names the fitted function, interval and weight.

Accuracy (tests/test_mathlib.py): exp within 1 ulp, the others within 3 ulp (measured against
correctly rounded values: at most 1.5), over the whole range including subnormals, overflow and
signed zeros. sin and cos reduce by pi/2 with three constants: accurate for |x| < 2**43
(float64) and |x| < 2**19 (float32); beyond that the result is wrong but stays in [-1, 1].

Kernels call the `KERNEL_FUNCS` copies: each compiled once as its own Numba function whose LLVM
function is marked alwaysinline, so LLVM pastes it into every loop (the only way the big ones,
erf and logistic, reliably inline and vectorize) while Numba types and lowers it once, not once
per call site (mathlib_ops.llvm_inlined). They keep their own flags (no fastmath) inside any
caller; divisions are bare fdiv, so any error_model vectorizes. Without FMA hardware
(pre-AVX2 x86) llvm.fma becomes a libm call: still correct, but slow. `FUNCS` maps
(name, "f64" | "f32") to the function for code generation; atan2 and hypot take two operands.

This module holds exp, expm1, log, log1p, tanh, logistic, erf, sin and cos; mathlib_arc.py the
arc functions (atan, atan2, asin, acos, asinh, acosh, atanh), cbrt and hypot, all within 1.25
ulp (its docstring has the table); mathlib_ops.py the LLVM-level building blocks both use.
"""

import numpy as np

from . import mathlib_arc
from .mathlib_ops import (_div, _frexp, _horner, _jit, _ldexp, _pow2, _typed, copysign,
                          floor, fma, llvm_inlined, rint)


from .math_tables import _F32, _F64  # noqa: E402 (the constants, shared)


# The factories below close over constants of one dtype; Numba freezes closure values, so the
# same source yields the float64 and the float32 function. Literals like 1.0 would be float64:
# every constant comes from the table or from T.


def _make_exp(T, c):
    one, log2e, (ln2hi, ln2lo) = T(1), c["log2e"], c["ln2"]
    (lo, hi), m1min, kcap, poly = c["exp_range"], c["expm1_min"], c["kcap"], c["expm1"]

    @_jit
    def reduce(x):  # (r, k, r_lo) with x = k ln2 + r + r_lo, |r| <= ln2/2
        k = rint(x * log2e)
        r1 = fma(-k, ln2hi, x)  # exact: ln2hi has 32 bits and r1 is small
        r = fma(-k, ln2lo, r1)
        return r, k, fma(-k, ln2lo, r1 - r)

    @_jit
    def expm1_r(r, t):  # (exp(r) - 1) + t, adding t to r before the small terms
        return fma(r * r, _horner(r, poly), r + t)

    @_jit
    def exp(x):
        r, k, r_lo = reduce(max(min(x, hi), lo))  # min/max keep a nan first argument
        p = one + r  # exp(r) = p + tail, summing the tail before the one rounding of p + tail
        tail = ((one - p) + r) + fma(r * r, _horner(r, poly), r_lo)
        return _ldexp(p + tail, k)

    @_jit
    def expm1(x):
        r, k, _ = reduce(max(min(x, hi), m1min))
        # 2**k (expm1(r) + 1 - 2**-k): exact for k = 0, and 2**k never overflows alone
        t = one - _pow2(-min(k, kcap))
        return copysign(_ldexp(expm1_r(r, t), k), x)  # expm1 has the sign of x, even -0.0

    return exp, expm1, reduce, expm1_r


def _make_tanh_sigmoid(T, c, reduce, expm1_r):
    zero, one, two = T(0), T(1), T(2)
    (lo, _), m1min, kcap = c["exp_range"], c["expm1_min"], c["kcap"]

    @_jit
    def ratio(n, en, d, ed):  # (n + en) / (d + ed) for rounding errors en, ed: ~0.5 ulp
        rd = _div(one, d)
        q = n * rd
        return fma(fma(-q, d, n) + en - q * ed, rd, q)  # one Newton step absorbs en, ed

    @_jit
    def exp_parts(x):  # exp(x) = 2**k (w + ew): w = 1 + expm1(r) rounded, ew its error
        r, k, _ = reduce(x)
        u = expm1_r(r, zero)
        w = one + u
        return k, w, (one - w) + u

    # tanh and sigmoid: exp(-|x|) = 2**-m (w + ew) turns both into ratios of p = 2**m and w,
    # which never overflow. The sums p +- w round; Fast2Sum (p >= w) recovers their errors
    # and `ratio` folds them back, leaving about one rounding in all.

    # tanh|x| = -m / (2 + m) with m = expm1(-2|x|) = 2**k u + (2**k - 1), one fma from
    # u = expm1(r): m is then good to about an ulp even near -1, where computing expm1 and
    # adding 2 would not be. float32 divides plainly (every positive float checked: at most
    # 2.5 ulp); float64 folds the rounding of 2 + m back into the quotient (2.0 ulp sampled).
    fold = T is not np.float32

    @_jit
    def tanh(x):
        r, k, _ = reduce(max(-two * abs(x), m1min))
        p = _pow2(k)
        m = fma(p, expm1_r(r, zero), p - one)
        d = two + m
        q = ratio(-m, zero, d, (two - d) + m) if fold else _div(-m, d)
        return copysign(q, x)

    @_jit
    def sigmoid(x):  # p / (p + w) for x >= 0, w / (p + w) below; just exp(x) past m = kcap
        a = -abs(x)
        k, w, ew = exp_parts(max(a, lo))
        p = _pow2(min(-k, kcap))
        d, pos = p + w, x >= zero
        s = ratio(p if pos else w, zero if pos else ew, d, ((p - d) + w) + ew)
        return _ldexp(w, k) if (k < -kcap) & (x < zero) else s

    return tanh, sigmoid


def _make_log(T, c):
    zero, half, one, two, inf, nan = T(0), T(0.5), T(1), T(2), T(np.inf), T(np.nan)
    (ln2hi, ln2lo), poly = c["ln2"], c["log"]
    tiny, up, up_k = c["tiny"], T(2.0 ** c["tiny_scale"]), c["tiny_scale"]

    @_jit
    def kernel(u, k0, corr):  # log(u * 2**k0) + corr for positive normal u
        m, k = _frexp(u)
        k = k + k0
        f = m - one
        hfsq = half * f * f
        s = _div(f, two + f)  # log(m) = log((1+s)/(1-s)) = 2s + s R(s**2), |s| < 0.172
        z = s * s
        r = z * _horner(z, poly)
        return s * (hfsq + r) + (k * ln2lo + corr) - hfsq + f + k * ln2hi

    @_jit
    def log(x):
        sub = x < tiny  # subnormal: scale into the normal range first
        r = kernel(x * up if sub else x, -up_k if sub else zero, zero)
        r = r if x < inf else x  # inf and nan
        r = nan if x < zero else r
        return -inf if x == zero else r

    @_jit
    def log1p(x):
        u = one + x
        # rounding error of 1 + x (exact), as a first-order correction to log(u)
        corr = _div(one - (u - x) if u >= two else x - (u - one), u)
        r = copysign(kernel(u, zero, corr), x)  # log1p has the sign of x, even for -0.0
        r = r if x < inf else x
        r = nan if x < -one else r
        return -inf if x == -one else r

    return log, log1p, kernel


def _make_erf(T, c, exp):
    one, two, xmax, near, far = T(1), T(2), c["erf_max"], c["erf_near"], c["erf_far"]

    @_jit
    def erf(x):
        a = min(abs(x), xmax)
        small = fma(a, _horner(a * a, near), a)  # x + x Q(x**2): exact for tiny x
        # 1 - erfc(x) = 1 - exp(-x**2 + L(x)); fma keeps x**2 exact inside the exponent
        large = one - exp(fma(-a, a, _horner(a - two, far)))
        return copysign(small if a < one else large, x)

    return erf


def _make_trig(T, c):
    zero, half, one, rmax = T(0), T(0.5), T(1), c["trig_range"]
    (p1, p2, p3), twoopi, spoly, cpoly = c["pio2"], c["twoopi"], c["sin"], c["cos"]

    @_jit
    def sin_shifted(a, shift):  # sin(a + shift pi/2) for a >= 0 (shift is 0 or 1)
        q = rint(a * twoopi)
        # a - q pi/2 with pi/2 = p1 + p2 + p3: the first fma is exact, the rest round at |r|
        r = fma(-q, p3, fma(-q, p2, fma(-q, p1, a)))
        r = max(min(r, rmax), -rmax)  # only past the accurate range: keeps |result| <= 1
        z = r * r
        s = fma(r * z, _horner(z, spoly), r)
        hz = half * z
        w = one - hz  # cos r = w + ((1 - w) - hz) + ...: (1 - w) - hz is w's rounding error
        co = w + (((one - w) - hz) + z * z * _horner(z, cpoly))
        n = (q + shift) * half
        v = co if n != floor(n) else s  # odd quadrant: cosine
        return -v if n * half - floor(n * half) >= half else v  # quadrants 2 and 3: negate

    @_jit
    def sin(x):
        return copysign(one, x) * sin_shifted(abs(x), zero)

    @_jit
    def cos(x):
        return sin_shifted(abs(x), one)

    return sin, cos


def _build(T, table):
    c = _typed(T, table)
    exp, expm1, reduce, expm1_r = _make_exp(T, c)
    tanh, sigmoid = _make_tanh_sigmoid(T, c, reduce, expm1_r)
    log, log1p, kernel = _make_log(T, c)
    sin, cos = _make_trig(T, c)
    erf = _make_erf(T, c, exp)
    return {"exp": exp, "expm1": expm1, "log": log, "log1p": log1p, "tanh": tanh,
            "logistic": sigmoid, "erf": erf, "sin": sin, "cos": cos}, kernel


(_f64, _logs64), (_f32, _logs32) = _build(np.float64, _F64), _build(np.float32, _F32)
_arc64, _arc32 = mathlib_arc.build(np.float64, _logs64), mathlib_arc.build(np.float32, _logs32)
FUNCS = {(name, dt): f for dt, fs in (("f64", {**_f64, **_arc64}), ("f32", {**_f32, **_arc32}))
         for name, f in fs.items()}
KERNEL_FUNCS = {key: llvm_inlined(f) for key, f in FUNCS.items()}

exp64, expm1_64, log64, log1p64, tanh64, sigmoid64, erf64, sin64, cos64 = _f64.values()
exp32, expm1_32, log32, log1p32, tanh32, sigmoid32, erf32, sin32, cos32 = _f32.values()
