"""mathlib: branch-free math as rules over the scalar builder: exp, expm1, log, log1p, tanh,
logistic and erf here; the arc functions, cbrt and hypot in mathlib_arc.py, pow in
mathlib_pow.py.

Cody-Waite reduction with fma, a Horner fma chain, exponent-bit reconstruction, selects for
the special values, so the kernel IR's loops vectorize them, and both renderings give the
same bits; the constant tables are codegen/math_tables.py's. sin and cos are not here: a
Cody-Waite reduction is accurate only below |x| = 2**43
and silently wrong (though in [-1, 1]) above, and a full-range reduction (Payne-Hanek) needs a
table lookup the builder lacks, so their rules call C's sin and cos (builder.libm), correct
everywhere and NumPy's float64 bits, at the price of loops that do not vectorize. The measured
accuracy, in ulps against
the precise value, is tests/test_kernel_ir_math.py's MAX_ULP (scripts/check_kernel_ulp.py).
"""

from __future__ import annotations

import numpy as np

from ..math_tables import _F32, _F64

_LAYOUT = {"f64": ("i64", 52, 1023), "f32": ("i32", 23, 127)}


def _table(dtype: str) -> dict:
    T = np.float64 if dtype == "f64" else np.float32
    return {k: tuple(float(T(x)) for x in v) if isinstance(v, tuple) else float(T(v))
            for k, v in (_F64 if dtype == "f64" else _F32).items()}


_TABLES = {"f64": _table("f64"), "f32": _table("f32")}


def _horner(b, x, coeffs):
    acc = b.const(coeffs[0], x.dtype)
    for c in coeffs[1:]:
        acc = b.fma(acc, x, b.const(c, x.dtype))
    return acc


def _to_int(b, k):
    """An integer-valued float as an integer of its width, through k + 1.5 * 2**mant."""
    ity, mant, _ = _LAYOUT[k.dtype]
    magic = 1.5 * 2.0 ** mant
    return b.sub(b.bitcast(b.add(k, magic), ity), b.bitcast(b.const(magic, k.dtype), ity))


def _pow2_bits(b, ki, dtype):
    _, mant, bias = _LAYOUT[dtype]
    return b.bitcast(b.shl(b.add(ki, bias), mant), dtype)


def _pow2(b, k):
    return _pow2_bits(b, _to_int(b, k), k.dtype)


def _ldexp(b, p, k):
    ki = _to_int(b, k)
    k1 = b.ashr(ki, 1)
    return b.mul(b.mul(p, _pow2_bits(b, k1, p.dtype)), _pow2_bits(b, b.sub(ki, k1), p.dtype))


def _frexp(b, x):
    ity, mant, bias = _LAYOUT[x.dtype]
    one, low = (1023 << 52, 0x3FE6A09E << 32) if mant == 52 else (0x3F800000, 0x3F3504F3)
    bits = b.add(b.bitcast(x, ity), one - low)
    k = b.sub(b.lshr(bits, mant), bias)
    m = b.bitcast(b.add(b.and_(bits, (1 << mant) - 1), low), x.dtype)
    return m, b.convert(k, x.dtype)


def _reduce(b, x, c):
    k = b.rint(b.mul(x, c["log2e"]))
    ln2hi, ln2lo = c["ln2"]
    r1 = b.fma(b.neg(k), ln2hi, x)
    r = b.fma(b.neg(k), ln2lo, r1)
    return r, k, b.fma(b.neg(k), ln2lo, b.sub(r1, r))


def _expm1_r(b, r, t, c):
    return b.fma(b.mul(r, r), _horner(b, r, c["expm1"]), b.add(r, t))


def exp(b, x):
    c = _TABLES[x.dtype]
    lo, hi = c["exp_range"]
    r, k, r_lo = _reduce(b, b.max(b.min(x, hi), lo), c)
    p = b.add(b.const(1.0, x.dtype), r)
    tail = b.add(b.add(b.sub(b.const(1.0, x.dtype), p), r),
                 b.fma(b.mul(r, r), _horner(b, r, c["expm1"]), r_lo))
    return _ldexp(b, b.add(p, tail), k)


def exp2(b, x):
    """2**n exp(f ln 2) for x = n + f, |f| <= 1/2: f is exact, so integers give 2**n exactly."""
    c, edge = _TABLES[x.dtype], 1100.0 if x.dtype == "f64" else 160.0    # past overflow
    a = b.max(b.min(x, edge), -edge)
    n = b.rint(a)
    return _ldexp(b, exp(b, b.mul(b.sub(a, n), c["ln2"][0] + c["ln2"][1])), n)


def _ratio(b, n, en, d, ed):
    rd = b.fdiv(b.const(1.0, d.dtype), d)
    q = b.mul(n, rd)
    return b.fma(b.sub(b.add(b.fma(b.neg(q), d, n), en), b.mul(q, ed)), rd, q)


def tanh(b, x):
    c = _TABLES[x.dtype]
    one, two, zero = (b.const(v, x.dtype) for v in (1.0, 2.0, 0.0))
    r, k, _ = _reduce(b, b.max(b.mul(b.neg(two), b.fabs(x)), c["expm1_min"]), c)
    p = _pow2(b, k)
    m = b.fma(p, _expm1_r(b, r, zero, c), b.sub(p, one))
    d = b.add(two, m)
    if x.dtype == "f64":
        q = _ratio(b, b.neg(m), zero, d, b.add(b.sub(two, d), m))
    else:
        q = b.fdiv(b.neg(m), d)
    return b.copysign(q, x)


def logistic(b, x):
    c = _TABLES[x.dtype]
    one, zero = b.const(1.0, x.dtype), b.const(0.0, x.dtype)
    lo, kcap = c["exp_range"][0], c["kcap"]
    a = b.neg(b.fabs(x))
    r, k, _ = _reduce(b, b.max(a, lo), c)            # mathlib's exp_parts
    u = _expm1_r(b, r, zero, c)
    w = b.add(one, u)
    ew = b.add(b.sub(one, w), u)
    p = _pow2(b, b.min(b.neg(k), kcap))
    d, pos = b.add(p, w), b.ge(x, zero)
    s = _ratio(b, b.select(pos, p, w), b.select(pos, zero, ew), d,
               b.add(b.add(b.sub(p, d), w), ew))
    tiny = b.and_(b.lt(k, -kcap), b.lt(x, zero))
    return b.select(tiny, _ldexp(b, w, k), s)


def log_kernel(b, u, k0, corr):
    """log(u * 2**k0) + corr for a positive normal u (mathlib.py's `kernel`)."""
    c = _TABLES[u.dtype]
    half, one, two = (b.const(v, u.dtype) for v in (0.5, 1.0, 2.0))
    ln2hi, ln2lo = c["ln2"]
    m, k = _frexp(b, u)
    k = b.add(k, k0)
    f = b.sub(m, one)
    hfsq = b.mul(b.mul(half, f), f)
    s = b.fdiv(f, b.add(two, f))
    z = b.mul(s, s)
    r = b.mul(z, _horner(b, z, c["log"]))
    return b.add(b.add(b.sub(b.add(b.mul(s, b.add(hfsq, r)), b.add(b.mul(k, ln2lo), corr)),
                             hfsq), f), b.mul(k, ln2hi))


def _normal(b, x):
    """(u, k): x = u 2**k with u normal, subnormal x scaled up."""
    c = _TABLES[x.dtype]
    sub = b.lt(x, c["tiny"])
    return (b.select(sub, b.mul(x, 2.0 ** c["tiny_scale"]), x),
            b.select(sub, b.const(-c["tiny_scale"], x.dtype), b.const(0.0, x.dtype)))


def _log_edges(b, x, out):
    """out, but x for x = inf or nan, nan below zero and -inf at zero."""
    zero, inf = b.const(0.0, x.dtype), b.const(float("inf"), x.dtype)
    out = b.select(b.lt(x, inf), out, x)
    out = b.select(b.lt(x, zero), b.const(float("nan"), x.dtype), out)
    return b.select(b.eq(x, zero), b.const(float("-inf"), x.dtype), out)


def log(b, x):
    u, k = _normal(b, x)
    return _log_edges(b, x, log_kernel(b, u, k, b.const(0.0, x.dtype)))


def log2(b, x):
    """k + log(m) / ln 2 for x = m 2**k, m in [√½, √2): exact at powers of two (m = 1)."""
    u, k0 = _normal(b, x)
    m, k = _frexp(b, u)
    zero = b.const(0.0, x.dtype)
    scaled = b.mul(log_kernel(b, m, zero, zero), 1.0 / np.log(2.0))
    return _log_edges(b, x, b.add(b.add(k, k0), scaled))


def log1p(b, x):
    one, two, zero = (b.const(v, x.dtype) for v in (1.0, 2.0, 0.0))
    u = b.add(one, x)
    # the rounding error of 1 + x (exact), as a first-order correction to log(u)
    corr = b.fdiv(b.select(b.ge(u, two), b.sub(one, b.sub(u, x)), b.sub(x, b.sub(u, one))), u)
    r = b.copysign(log_kernel(b, u, zero, corr), x)     # the sign of x, even for -0.0
    r = b.select(b.lt(x, float("inf")), r, x)
    r = b.select(b.lt(x, -1.0), b.const(float("nan"), x.dtype), r)
    return b.select(b.eq(x, -1.0), b.const(float("-inf"), x.dtype), r)


def expm1(b, x):
    c = _TABLES[x.dtype]
    r, k, _ = _reduce(b, b.max(b.min(x, c["exp_range"][1]), c["expm1_min"]), c)
    # 2**k (expm1(r) + 1 - 2**-k): exact for k = 0, and 2**k never overflows alone
    t = b.sub(b.const(1.0, x.dtype), _pow2(b, b.neg(b.min(k, c["kcap"]))))
    return b.copysign(_ldexp(b, _expm1_r(b, r, t, c), k), x)


def erf(b, x):
    c = _TABLES[x.dtype]
    a = b.min(b.fabs(x), c["erf_max"])
    small = b.fma(a, _horner(b, b.mul(a, a), c["erf_near"]), a)  # exact for tiny x
    # 1 - erfc(x) = 1 - exp(-x**2 + L(x)); fma keeps x**2 exact inside the exponent
    large = b.sub(b.const(1.0, x.dtype),
                  exp(b, b.fma(b.neg(a), a, _horner(b, b.sub(a, 2.0), c["erf_far"]))))
    return b.copysign(b.select(b.lt(a, 1.0), small, large), x)


FUNCTIONS = {"exp": exp, "exp2": exp2, "expm1": expm1, "log": log, "log2": log2,
             "log1p": log1p, "tanh": tanh, "logistic": logistic, "erf": erf}
