"""pow(x, y) over the scalar builder, vectorizable, within an ulp of C's (NumPy's) pow.

pow = exp(y log|x|) needs log|x| to about 2**-66 relative, or y log|x| (up to 745) carries its
error into the result: log|x| = k ln2 + 2 atanh(s), s = f / (2 + f), f = m - 1 for the
mantissa m in [sqrt(1/2), sqrt(2)), is computed as a double-double (hi + lo): s with its
division residual (fma), 2s**3/3 with error-free products, the rest s**5 (2/5 + 2/7 s**2 + ...)
as Taylor's series to s**27 (its truncation is below 2**-76) in plain float64, and k ln2 in
mathlib's two parts (k hi exact). y log|x| is an fma product (hi + lo); exp is mathlib's,
with lo folded into its reduced argument by TwoSum. float32 is computed in float64, one
rounding at the end. C99's special values (pow(x, 0) = pow(1, y) = 1, nan for a negative x to a
non-integer y, the sign of an odd integer power, +-0, +-inf, (+-1)**inf = 1) are selects.
"""

from __future__ import annotations

from .mathlib import _TABLES, _frexp, _horner, _ldexp, _reduce

_C = _TABLES["f64"]
_TWO_THIRDS = (0.6666666666666666, 3.700743415417188e-17)       # hi + lo
_SERIES = tuple(2 / (2 * n + 1) for n in range(13, 1, -1))      # 2/27, ..., 2/7, 2/5
_INF = float("inf")


def _two_sum(b, x, y):
    s = b.add(x, y)
    bb = b.sub(s, x)
    return s, b.add(b.sub(x, b.sub(s, bb)), b.sub(y, bb))


def _log_dd(b, a):
    """(hi, lo) = log(a) for a positive finite float64 a, to about 2**-66 relative."""
    sub = b.lt(a, _C["tiny"])                       # subnormal: scaled into the normal range
    m, k = _frexp(b, b.select(sub, b.mul(a, 2.0 ** 54), a))
    k = b.sub(k, b.select(sub, b.const(54.0, "f64"), b.const(0.0, "f64")))
    f = b.sub(m, 1.0)                               # exact
    d = b.add(f, 2.0)
    d_lo = b.sub(f, b.sub(d, 2.0))                  # 2 + f = d + d_lo (Fast2Sum)
    s = b.fdiv(f, d)
    s_lo = b.fdiv(b.sub(b.fma(b.neg(s), d, f), b.mul(s, d_lo)), d)
    z = b.mul(s, s)
    z_lo = b.add(b.fma(s, s, b.neg(z)), b.mul(b.add(s, s), s_lo))
    s3 = b.mul(z, s)
    s3_lo = b.add(b.fma(z, s, b.neg(s3)), b.add(b.mul(z_lo, s), b.mul(z, s_lo)))
    c_hi, c_lo = _TWO_THIRDS
    t = b.mul(s3, c_hi)                             # 2s**3/3 = t + t_lo
    t_lo = b.add(b.fma(s3, c_hi, b.neg(t)), b.add(b.mul(s3_lo, c_hi), b.mul(s3, c_lo)))
    # s**5 P(s**2), and s_lo's first-order effect on it: 2 s_lo s**4 (1 + s**2 + ...)
    rest = b.add(b.mul(b.mul(s3, z), _horner(b, z, _SERIES)),
                 b.mul(b.mul(b.add(s_lo, s_lo), b.mul(z, z)), b.add(1.0, z)))
    s2 = b.add(s, s)
    hi = b.add(s2, t)                               # |2s| >= |t|: Fast2Sum
    lo = b.add(b.add(b.sub(s2, hi), t), b.add(b.add(b.add(s_lo, s_lo), t_lo), rest))
    ln2_hi, ln2_lo = _C["ln2"]
    top, err = _two_sum(b, b.mul(k, ln2_hi), hi)    # k ln2_hi is exact
    low = b.add(err, b.add(lo, b.mul(k, ln2_lo)))
    out = b.add(top, low)                           # renormalized (|top| >= |low|): rest,
    return out, b.sub(low, b.sub(out, top))         # in lo so far, is not below ulp(hi)


def _exp_dd(b, p, p_lo):
    """exp(p + p_lo): mathlib's exp, p_lo added to the reduced argument (where p is in its
    range: beyond, exp is 0 or inf and p_lo may be anything)."""
    lo, hi = _C["exp_range"]
    p_lo = b.select(b.and_(b.ge(p, lo), b.le(p, hi)), p_lo, b.const(0.0, "f64"))
    r, k, r_lo = _reduce(b, b.max(b.min(p, hi), lo), _C)
    r, e = _two_sum(b, r, p_lo)
    r_lo = b.add(r_lo, e)
    one = b.const(1.0, "f64")
    q = b.add(one, r)
    tail = b.add(b.add(b.sub(one, q), r), b.fma(b.mul(r, r), _horner(b, r, _C["expm1"]), r_lo))
    return _ldexp(b, b.add(q, tail), k)


def pow_(b, x, y):
    dtype = x.dtype
    x, y = b.convert(x, "f64"), b.convert(y, "f64")
    a = b.fabs(x)
    normal = b.and_(b.gt(a, 0.0), b.lt(a, _INF))
    hi, lo = _log_dd(b, a)
    hi = b.select(normal, hi, b.select(b.eq(a, 0.0), b.const(-_INF, "f64"), a))  # inf, nan
    p = b.mul(y, hi)
    p_lo = b.add(b.fma(y, hi, b.neg(p)), b.mul(y, b.select(normal, lo, b.const(0.0, "f64"))))
    r = _exp_dd(b, p, p_lo)
    fy = b.floor(y)
    whole = b.eq(y, fy)                             # true for +-inf, false for nan
    half = b.mul(y, 0.5)
    odd = b.and_(whole, b.ne(half, b.floor(half)))
    r = b.select(b.and_(b.lt(b.bitcast(x, "i64"), 0), odd), b.neg(r), r)
    bad = b.and_(b.and_(b.lt(x, 0.0), b.gt(x, -_INF)), b.and_(b.ne(y, fy), b.eq(y, y)))
    r = b.select(bad, b.const(float("nan"), "f64"), r)
    unit = b.or_(b.or_(b.eq(x, 1.0), b.eq(y, 0.0)),
                 b.and_(b.eq(a, 1.0), b.eq(b.fabs(y), _INF)))
    return b.convert(b.select(unit, b.const(1.0, "f64"), r), dtype)


FUNCTIONS = {"pow": pow_}
