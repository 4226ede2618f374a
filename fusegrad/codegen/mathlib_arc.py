"""Branch-free arc functions and roots for mathlib: atan, atan2, asin, acos, asinh, acosh,
atanh, cbrt and hypot, in float64 and float32, vectorizable like the rest of mathlib.py (same
recipe, same building blocks from mathlib_ops.py; mathlib.py adds them to FUNCS).

atan family. Everything reduces to atan(n/d) for 0 <= n <= d, which is k pi/4 + t with t =
atan(r), |r| <= tan(pi/8), and r = n/d (k = 0) or (n - d)/(n + d) (k = 1): one division either
way, chosen by select, and the difference n - d is exact where it is taken (Sterbenz). t is an
odd polynomial r + r z P(z), z = r**2 (minimax, relative weight). The quadrant bookkeeping of
atan (1/x above 1), atan2 (swap, x < 0) and asin/acos (atan2 of x and sqrt(1 - x**2), the
latter an fma) maps k to 0..4 and a sign s, and the result is k pi/4 + s t with pi/4 split in
hi + lo, hi short enough that k hi is exact: one rounding at the end.

asinh = log1p(|x| + x**2 / (1 + sqrt(1 + x**2))), acosh = log1p(t + sqrt(t**2 + 2t)) with
t = x - 1, both log(2|x|) for huge x, through one call of mathlib's log kernel (log(u 2**k) +
corr) whose arguments are selected, so one logarithm is evaluated either way. atanh = log1p(2a
+ 2a**2/(1 - a)) / 2 below a = 1/2 and log1p(2a / (1 - a)) / 2 above, sharing the division.

cbrt: m 2**k from the exponent bits, k = 3q + e, a degree-4 seed for cbrt(m) (1e-5) times
2**(e/3), one Newton step (1e-10), and for float64 a second one whose residual y**3 - x is
exact to a rounding thanks to fma. hypot: m sqrt(1 + (n/m)**2) with m = max, n = min of |x|,
|y|, so nothing overflows or underflows before the result does.

Accuracy against NumPy (scripts/check_ulp.py, measured; tests/test_elementwise_breadth.py
asserts these bounds on a smaller sweep), in ulps of the result, over log-uniform inputs from
the smallest subnormal to the largest float of both signs, the interesting ranges densely, and
inf, nan and signed zeros (which match NumPy exactly):

             atan  atan2  asin  acos  asinh  acosh  atanh  cbrt  hypot
    float64  0.72   0.85  0.84  0.92   1.23   0.80   0.81  0.50   0.75
    float32  0.84   0.86  0.91  0.84   1.18   0.83   0.83  0.51   0.75

(float32's unary functions on every 97th float32 too: within the same bounds.) cbrt is
correctly rounded but for rare halfway-close cases; the hyperbolic ones inherit part of
mathlib's log kernel's error. The compiled kernels' results thus differ from NumPy's (glibc's,
below 1 ulp) in the last bit or so; eager and interp compute NumPy's own.
"""

import numpy as np

from .mathlib_ops import (_div, _frexp, _horner, _jit, _ldexp, _select, _typed, copysign,
                          floor, fma)

from .math_tables import ARC_F32 as _F32, ARC_F64 as _F64  # noqa: E402


def _make_atan(T, c):
    zero, quarter, half, one, two, four = T(0), T(0.25), T(0.5), T(1), T(2), T(4)
    inf, nan, sub = T(np.inf), T(np.nan), np.finfo(T).smallest_subnormal
    t8, (hi, lo), poly, huge = c["tan_pi8"], c["pio4"], c["atan"], c["huge"]
    small, up = one / huge, c["scale_up"]

    @_jit
    def core(n, d, dn, dd):
        # (k, r, r_lo) with atan((n + dn)/(d + dd)) = k pi/4 + atan(r + r_lo), 0 <= n <= d
        # and dn, dd tiny. The rounding errors of num and den (Fast2Sum, as d >= n) and dn,
        # dd fold into r_lo with the division's own (exact by fma), as mathlib's tanh does
        both_inf = n == inf
        mid = (n > t8 * d) | both_inf
        num = _select(mid, n - d, n)
        den = _select(mid, n + d, d)
        e_num = _select(mid, (n - (num + d)) + (dn - dd), dn)
        e_den = _select(mid, (n - (den - d)) + (dn + dd), dd)
        den = max(den, sub)  # 0/0 (n = d = 0) is 0
        r = _div(num, den)
        r_lo = _div(fma(-r, den, num) + e_num - r * e_den, den)
        return _select(mid, one, zero), _select(both_inf, zero, r), _select(d < inf, r_lo, zero)

    @_jit
    def finish(n, d, dn, dd, swap, neg):  # atan: moved to pi/2 - . (swap), to pi - . (neg)
        k, r, r_lo = core(n, d, dn, dd)
        k = _select(swap, two - k, k)
        s = _select(swap, -one, one)
        k = _select(neg, four - k, k)
        s = _select(neg, -s, s)
        z = r * r
        tail = fma(r * z, _horner(z, poly), r_lo)  # atan(r + r_lo) - r
        head = fma(k, hi, s * r)  # k hi + s r and its rounding error (k hi is exact and
        err = s * r - (head - k * hi)  # larger than |r| unless k = 0): one rounding in all
        return head + (fma(k, lo, s * tail) + err)

    @_jit
    def atan(x):
        a = abs(x)
        r = copysign(finish(min(a, one), max(a, one), zero, zero, a > one, False), x)
        return _select(a <= inf, r, x)

    @_jit
    def atan2(y, x):
        ax, ay = abs(x), abs(y)
        d = max(ax, ay)
        scale = _select(d > huge, quarter, _select(d < small, up, one))
        ax, ay = ax * scale, ay * scale
        neg = copysign(one, x) < zero  # x < 0, or -0.0
        r = copysign(finish(min(ax, ay), max(ax, ay), zero, zero, ay > ax, neg), y)
        return _select((x != x) | (y != y), x + y, r)

    @_jit
    def cos_asin(a):  # (w, dw): sqrt(1 - a**2) = w + dw, nan beyond 1
        g = fma(-a, a, one)  # and its error eg: 1 - g is exact above 1/2, else 1 - a*a is
        p = a * a
        eg = _select(g >= half, fma(-a, a, one - g), ((one - p) - g) - fma(a, a, -p))
        w = np.sqrt(g)
        return w, _div(fma(-w, w, g) + eg, max(w + w, sub))

    @_jit
    def asin(x):  # atan2(|x|, w), w = sqrt(1 - x**2)
        a = abs(x)
        w, dw = cos_asin(a)
        sw = a > w
        r = finish(_select(sw, w, a), _select(sw, a, w), _select(sw, dw, zero),
                   _select(sw, zero, dw), sw, False)
        return _select(a <= one, copysign(r, x), nan)

    @_jit
    def acos(x):  # atan2(w, x)
        a = abs(x)
        w, dw = cos_asin(a)
        sw = w > a
        r = finish(_select(sw, a, w), _select(sw, w, a), _select(sw, zero, dw),
                   _select(sw, dw, zero), sw, x < zero)
        return _select(a <= one, r, nan)

    return atan, atan2, asin, acos


def _make_hyperbolic(T, c, kernel):
    zero, half, one, two, inf, nan = T(0), T(0.5), T(1), T(2), T(np.inf), T(np.nan)
    big, sub, third = c["log_big"], np.finfo(T).smallest_subnormal, T(1 / 3)
    small = T(np.sqrt(np.finfo(T).eps))

    @_jit
    def log1p2(v, dv, x, large):  # log1p(v + dv), tiny dv, or log(2x) if large: one kernel
        u = one + v
        e = _div(_select(u >= two, one - (u - v), v - (u - one)) + dv, u)  # as in log1p, and
        corr = fma(-half * e, e, e)  # to second order: log(u (1 + e)) = log u + e - e**2/2
        r = kernel(_select(large, x, u), _select(large, one, zero), _select(large, zero, corr))
        # below sqrt(eps), the series: the kernel rounds at ulp(1) ~ ulp(v) there
        return _select(v < small, v + fma(v * v, fma(v, third, -half), dv), r)

    @_jit
    def asinh(x):
        a = abs(x)
        q = _div(a * a, one + np.sqrt(fma(a, a, one)))
        v = a + q
        r = log1p2(v, q - (v - a), a, a > big)  # v's rounding error by Fast2Sum (a >= q)
        r = copysign(_select(a < inf, r, a), x)
        return _select(x != x, x, r)

    @_jit
    def acosh(x):
        t = x - one
        tt = t + t
        w = fma(t, t, tt)  # t**2 + 2t = w + ew (tt - w is exact where it matters, t < 2)
        ew = fma(t, t, tt - w)
        s = np.sqrt(w)
        v = t + s  # and the errors of s and of this sum (Fast2Sum, s >= t)
        dv = (t - (v - s)) + _div(fma(-s, s, w) + ew, max(s + s, sub))
        r = log1p2(v, dv, x, x > big)
        r = _select(x < inf, r, x)
        return _select(x >= one, r, nan)

    @_jit
    def atanh(x):
        a = abs(x)
        t = a + a
        om = one - a
        q = _div(t, om)  # and its error, from the division and the rounding of 1 - a
        dq = _div(fma(-q, om, t) - q * (-a - (om - one)), om)
        low = a < half  # 2a + 2a**2/(1 - a) there, the same as 2a/(1 - a) but better rounded
        v = _select(low, fma(q, a, t), q)
        dv = _select(low, fma(q, a, t - v) + dq * a, dq)
        r = copysign(half * log1p2(v, dv, a, False), x)
        r = _select(v < inf, r, copysign(inf, x))
        return _select(a <= one, r, _select(x != x, x, nan))

    return asinh, acosh, atanh


def _make_roots(T, c):
    zero, one, two, three, four, inf = T(0), T(1), T(2), T(3), T(4), T(np.inf)
    tiny, up, third = c["tiny"], T(2.0 ** c["tiny_scale"]), T(-c["tiny_scale"] / 3)
    poly, (c2, c4) = c["cbrt"], c["cbrt2"]
    (h_small, h_big), (up2, down) = c["hypot_range"], c["hypot_scale"]
    twice = T is not np.float32  # float64 needs a second Newton step

    @_jit
    def cbrt(x):
        a = abs(x)
        sub = a < tiny
        m, k = _frexp(_select(sub, a * up, a))
        q = floor(_div(k, three))  # k = 3q + e; k/3 rounds, but never across an integer
        e = k - three * q
        mr = m * _select(e == zero, one, _select(e == one, two, four))  # cbrt(mr) in [0.89, 1.79)
        y = _horner(m, poly) * _select(e == zero, one, _select(e == one, c2, c4))
        if twice:
            y = y - _div(fma(y * y, y, -mr), three * y * y)
        y2 = y * y  # Newton with the residual y**3 - mr exact to one rounding
        res = fma(y2, y, -mr) + fma(y, y, -y2) * y
        y = y - _div(res, three * y2)
        r = copysign(_ldexp(y, q + _select(sub, third, zero)), x)
        return _select((a > zero) & (a < inf), r, x + x)

    @_jit
    def hypot(x, y):
        a, b = abs(x), abs(y)
        m = max(a, b)
        scale = _select(m > h_big, down, _select(m < h_small, up2, one))  # m**2 stays normal
        m, n = m * scale, min(a, b) * scale
        h = np.sqrt(fma(m, m, n * n))
        # Borges' correction: h**2 - m**2 - n**2 from exact products (fma), h**2 - m**2 exact
        hh, mm = h * h, m * m
        tau = fma(-n, n, hh - mm) + fma(h, h, -hh) - fma(m, m, -mm)
        h = (h - _div(tau, h + h)) * _div(one, scale)
        h = _select(m > zero, h, zero)
        h = _select((a != a) | (b != b), a + b, h)
        return _select((a == inf) | (b == inf), inf, h)

    return cbrt, hypot


def build(T, kernel):
    """The functions for float type T, given mathlib's log kernel of that type."""
    c = _typed(T, _F64 if T is np.float64 else _F32)
    atan, atan2, asin, acos = _make_atan(T, c)
    asinh, acosh, atanh = _make_hyperbolic(T, c, kernel)
    cbrt, hypot = _make_roots(T, c)
    return {"atan": atan, "atan2": atan2, "asin": asin, "acos": acos, "asinh": asinh,
            "acosh": acosh, "atanh": atanh, "cbrt": cbrt, "hypot": hypot}
