"""mathlib's atan, atan2, asin, acos, asinh, acosh, atanh, cbrt and hypot as rules over the
scalar builder, branch-free so the kernel IR's loops vectorize them (their accuracy in ulps is
tests/test_kernel_ir_math.py's MAX_ULP).

atan family. Everything reduces to atan(n/d) for 0 <= n <= d, which is k pi/4 + t with t =
atan(r), |r| <= tan(pi/8), and r = n/d (k = 0) or (n - d)/(n + d) (k = 1): one division either
way, chosen by select, and the difference n - d is exact where it is taken (Sterbenz). t is an
odd polynomial r + r z P(z), z = r**2 (minimax, relative weight). The quadrant bookkeeping of
atan (1/x above 1), atan2 (swap, x < 0) and asin/acos (atan2 of x and sqrt(1 - x**2), the
latter an fma) maps k to 0..4 and a sign s, and the result is k pi/4 + s t with pi/4 split in
hi + lo, hi short enough that k hi is exact: one rounding at the end.

asinh = log1p(|x| + x**2 / (1 + sqrt(1 + x**2))), acosh = log1p(t + sqrt(t**2 + 2t)) with
t = x - 1, both log(2|x|) for huge x, through one call of mathlib.py's log kernel
(`log_kernel`: log(u 2**k) + corr) whose arguments are selected, so one logarithm is evaluated
either way. atanh = log1p(2a + 2a**2/(1 - a)) / 2 below a = 1/2 and log1p(2a / (1 - a)) / 2
above, sharing the division.

cbrt: m 2**k from the exponent bits, k = 3q + e, a degree-4 seed for cbrt(m) (1e-5) times
2**(e/3), one Newton step (1e-10), and for float64 a second one whose residual y**3 - x is
exact to a rounding thanks to fma. hypot: m sqrt(1 + (n/m)**2) with m = max, n = min of |x|,
|y|, so nothing overflows or underflows before the result does.
"""

from __future__ import annotations

import numpy as np

from ..math_tables import ARC_F32 as _F32, ARC_F64 as _F64
from .mathlib import _frexp, _horner, _ldexp, log_kernel


def _table(dtype: str) -> dict:
    T = np.float64 if dtype == "f64" else np.float32
    return {k: tuple(float(T(x)) for x in v) if isinstance(v, tuple) else float(T(v))
            for k, v in (_F64 if dtype == "f64" else _F32).items()}


_TABLES = {"f64": _table("f64"), "f32": _table("f32")}
_NORMAL_R = {"f64": 2.0 ** -968, "f32": 2.0 ** -100}     # ulp(r) is 2**-1020 / 2**-123 here
_SUB = {"f64": float(np.finfo(np.float64).smallest_subnormal),
        "f32": float(np.finfo(np.float32).smallest_subnormal)}


def _consts(b, dtype, *values):
    return (b.const(v, dtype) for v in values)


def _core(b, n, d, dn, dd):
    """(k, r, r_lo): atan((n + dn)/(d + dd)) = k pi/4 + atan(r + r_lo), 0 <= n <= d."""
    c, dt = _TABLES[n.dtype], n.dtype
    zero, one = _consts(b, dt, 0.0, 1.0)
    both_inf = b.eq(n, float("inf"))
    mid = b.or_(b.gt(n, b.mul(c["tan_pi8"], d)), both_inf)
    num = b.select(mid, b.sub(n, d), n)
    den = b.select(mid, b.add(n, d), d)
    e_num = b.select(mid, b.add(b.sub(n, b.add(num, d)), b.sub(dn, dd)), dn)
    e_den = b.select(mid, b.add(b.sub(n, b.sub(den, d)), b.add(dn, dd)), dd)
    den = b.max(den, _SUB[dt])                      # 0/0 (n = d = 0) is 0
    r = b.fdiv(num, den)
    r_lo = b.fdiv(b.sub(b.add(b.fma(b.neg(r), den, num), e_num), b.mul(r, e_den)), den)
    # r_lo is right only where the residual num - r den is not subnormal; below, r alone is
    # atan's correctly rounded value (without this, atan2(2**-149, 1.57) was -0.0 in float32)
    keep = b.and_(b.lt(d, float("inf")), b.ge(b.fabs(r), _NORMAL_R[n.dtype]))
    return b.select(mid, one, zero), b.select(both_inf, zero, r), b.select(keep, r_lo, zero)


def _finish(b, n, d, dn, dd, swap, neg):
    """atan of n/d moved to pi/2 - . (swap) and to pi - . (neg): one rounding at the end."""
    c, dt = _TABLES[n.dtype], n.dtype
    one, two, four = _consts(b, dt, 1.0, 2.0, 4.0)
    hi, lo = c["pio4"]
    k, r, r_lo = _core(b, n, d, dn, dd)
    k = b.select(swap, b.sub(two, k), k)
    s = b.select(swap, b.const(-1.0, dt), one)
    k = b.select(neg, b.sub(four, k), k)
    s = b.select(neg, b.neg(s), s)
    z = b.mul(r, r)
    tail = b.fma(b.mul(r, z), _horner(b, z, c["atan"]), r_lo)     # atan(r + r_lo) - r
    sr = b.mul(s, r)
    head = b.fma(k, hi, sr)
    err = b.sub(sr, b.sub(head, b.mul(k, hi)))
    return b.add(head, b.add(b.fma(k, lo, b.mul(s, tail)), err))


def atan(b, x):
    zero, one = _consts(b, x.dtype, 0.0, 1.0)
    a = b.fabs(x)
    false = b.const(False, "bool")
    r = b.copysign(_finish(b, b.min(a, one), b.max(a, one), zero, zero, b.gt(a, one), false), x)
    return b.select(b.le(a, float("inf")), r, x)


def atan2(b, y, x):
    c, dt = _TABLES[x.dtype], x.dtype
    zero, one = _consts(b, dt, 0.0, 1.0)
    ax, ay = b.fabs(x), b.fabs(y)
    d = b.max(ax, ay)
    huge = c["huge"]
    scale = b.select(b.gt(d, huge), b.const(0.25, dt),
                     b.select(b.lt(d, 1.0 / huge), b.const(c["scale_up"], dt), one))
    ax, ay = b.mul(ax, scale), b.mul(ay, scale)
    neg = b.lt(b.copysign(one, x), zero)            # x < 0, or -0.0
    r = b.copysign(_finish(b, b.min(ax, ay), b.max(ax, ay), zero, zero, b.gt(ay, ax), neg), y)
    return b.select(b.or_(b.ne(x, x), b.ne(y, y)), b.add(x, y), r)


def _cos_asin(b, a):
    """(w, dw): sqrt(1 - a**2) = w + dw, nan beyond 1."""
    one = b.const(1.0, a.dtype)
    g = b.fma(b.neg(a), a, one)
    p = b.mul(a, a)
    eg = b.select(b.ge(g, 0.5), b.fma(b.neg(a), a, b.sub(one, g)),
                  b.sub(b.sub(b.sub(one, p), g), b.fma(a, a, b.neg(p))))
    w = b.sqrt(g)
    return w, b.fdiv(b.add(b.fma(b.neg(w), w, g), eg), b.max(b.add(w, w), _SUB[a.dtype]))


def asin(b, x):                                     # atan2(|x|, w), w = sqrt(1 - x**2)
    zero = b.const(0.0, x.dtype)
    a = b.fabs(x)
    w, dw = _cos_asin(b, a)
    sw = b.gt(a, w)
    r = _finish(b, b.select(sw, w, a), b.select(sw, a, w), b.select(sw, dw, zero),
                b.select(sw, zero, dw), sw, b.const(False, "bool"))
    return b.select(b.le(a, 1.0), b.copysign(r, x), b.const(float("nan"), x.dtype))


def acos(b, x):                                     # atan2(w, x)
    zero = b.const(0.0, x.dtype)
    a = b.fabs(x)
    w, dw = _cos_asin(b, a)
    sw = b.gt(w, a)
    r = _finish(b, b.select(sw, a, w), b.select(sw, w, a), b.select(sw, zero, dw),
                b.select(sw, dw, zero), sw, b.lt(x, zero))
    return b.select(b.le(a, 1.0), r, b.const(float("nan"), x.dtype))


def _log1p2(b, v, dv, x, large):
    """log1p(v + dv) for a tiny dv, or log(2x) where `large`: one call of the log kernel."""
    dt = v.dtype
    zero, half, one, two = _consts(b, dt, 0.0, 0.5, 1.0, 2.0)
    small, third = float(np.sqrt(np.finfo(np.dtype(_NP[dt])).eps)), 1 / 3
    u = b.add(one, v)
    e = b.fdiv(b.add(b.select(b.ge(u, two), b.sub(one, b.sub(u, v)), b.sub(v, b.sub(u, one))),
                     dv), u)
    corr = b.fma(b.mul(b.neg(half), e), e, e)       # log(u (1 + e)) = log u + e - e**2/2
    r = log_kernel(b, b.select(large, x, u), b.select(large, one, zero),
                   b.select(large, zero, corr))
    # below sqrt(eps), the series: the kernel rounds at ulp(1) ~ ulp(v) there
    series = b.add(v, b.fma(b.mul(v, v), b.fma(v, third, b.neg(half)), dv))
    return b.select(b.lt(v, small), series, r)


_NP = {"f64": np.float64, "f32": np.float32}


def asinh(b, x):
    c = _TABLES[x.dtype]
    one = b.const(1.0, x.dtype)
    a = b.fabs(x)
    q = b.fdiv(b.mul(a, a), b.add(one, b.sqrt(b.fma(a, a, one))))
    v = b.add(a, q)
    r = _log1p2(b, v, b.sub(q, b.sub(v, a)), a, b.gt(a, c["log_big"]))
    r = b.copysign(b.select(b.lt(a, float("inf")), r, a), x)
    return b.select(b.ne(x, x), x, r)


def acosh(b, x):
    c, dt = _TABLES[x.dtype], x.dtype
    one = b.const(1.0, dt)
    t = b.sub(x, one)
    tt = b.add(t, t)
    w = b.fma(t, t, tt)                             # t**2 + 2t = w + ew
    ew = b.fma(t, t, b.sub(tt, w))
    s = b.sqrt(w)
    v = b.add(t, s)
    dv = b.add(b.sub(t, b.sub(v, s)),
               b.fdiv(b.add(b.fma(b.neg(s), s, w), ew), b.max(b.add(s, s), _SUB[dt])))
    r = _log1p2(b, v, dv, x, b.gt(x, c["log_big"]))
    r = b.select(b.lt(x, float("inf")), r, x)
    return b.select(b.ge(x, 1.0), r, b.const(float("nan"), dt))


def atanh(b, x):
    dt = x.dtype
    one, half, inf = _consts(b, dt, 1.0, 0.5, float("inf"))
    a = b.fabs(x)
    t = b.add(a, a)
    om = b.sub(one, a)
    q = b.fdiv(t, om)                               # and its error: the division, 1 - a
    dq = b.fdiv(b.sub(b.fma(b.neg(q), om, t), b.mul(q, b.sub(b.neg(a), b.sub(om, one)))), om)
    low = b.lt(a, 0.5)          # 2a + 2a**2/(1 - a) there: 2a/(1 - a), better rounded
    v = b.select(low, b.fma(q, a, t), q)
    dv = b.select(low, b.add(b.fma(q, a, b.sub(t, v)), b.mul(dq, a)), dq)
    r = b.copysign(b.mul(half, _log1p2(b, v, dv, a, b.const(False, "bool"))), x)
    r = b.select(b.lt(v, inf), r, b.copysign(inf, x))
    return b.select(b.le(a, 1.0), r, b.select(b.ne(x, x), x, b.const(float("nan"), dt)))


def cbrt(b, x):
    c, dt = _TABLES[x.dtype], x.dtype
    zero, one, two, three, four = _consts(b, dt, 0.0, 1.0, 2.0, 3.0, 4.0)
    c2, c4 = c["cbrt2"]
    a = b.fabs(x)
    sub = b.lt(a, c["tiny"])
    m, k = _frexp(b, b.select(sub, b.mul(a, 2.0 ** c["tiny_scale"]), a))
    q = b.floor(b.fdiv(k, three))                   # k = 3q + e
    e = b.sub(k, b.mul(three, q))
    mr = b.mul(m, b.select(b.eq(e, 0.0), one, b.select(b.eq(e, 1.0), two, four)))
    y = b.mul(_horner(b, m, c["cbrt"]),
              b.select(b.eq(e, 0.0), one, b.select(b.eq(e, 1.0), b.const(c2, dt),
                                                   b.const(c4, dt))))
    if dt == "f64":                                 # float64 needs a second Newton step
        y = b.sub(y, b.fdiv(b.fma(b.mul(y, y), y, b.neg(mr)), b.mul(b.mul(three, y), y)))
    y2 = b.mul(y, y)                                # the residual y**3 - mr, exact to one rounding
    res = b.add(b.fma(y2, y, b.neg(mr)), b.mul(b.fma(y, y, b.neg(y2)), y))
    y = b.sub(y, b.fdiv(res, b.mul(three, y2)))
    third = b.select(sub, b.const(-c["tiny_scale"] / 3, dt), zero)
    r = b.copysign(_ldexp(b, y, b.add(q, third)), x)
    return b.select(b.and_(b.gt(a, 0.0), b.lt(a, float("inf"))), r, b.add(x, x))


def hypot(b, x, y):
    c, dt = _TABLES[x.dtype], x.dtype
    one, inf = _consts(b, dt, 1.0, float("inf"))
    (h_small, h_big), (up2, down) = c["hypot_range"], c["hypot_scale"]
    a, bb = b.fabs(x), b.fabs(y)
    m = b.max(a, bb)
    scale = b.select(b.gt(m, h_big), b.const(down, dt),
                     b.select(b.lt(m, h_small), b.const(up2, dt), one))
    m, n = b.mul(m, scale), b.mul(b.min(a, bb), scale)
    h = b.sqrt(b.fma(m, m, b.mul(n, n)))
    hh, mm = b.mul(h, h), b.mul(m, m)               # Borges' correction
    tau = b.sub(b.add(b.fma(b.neg(n), n, b.sub(hh, mm)), b.fma(h, h, b.neg(hh))),
                b.fma(m, m, b.neg(mm)))
    h = b.mul(b.sub(h, b.fdiv(tau, b.add(h, h))), b.fdiv(one, scale))
    h = b.select(b.gt(m, 0.0), h, b.const(0.0, dt))
    h = b.select(b.or_(b.ne(a, a), b.ne(bb, bb)), b.add(a, bb), h)
    return b.select(b.or_(b.eq(a, inf), b.eq(bb, inf)), inf, h)


FUNCTIONS = {"atan": atan, "atan2": atan2, "asin": asin, "acos": acos, "asinh": asinh,
             "acosh": acosh, "atanh": atanh, "cbrt": cbrt, "hypot": hypot}
