"""Special functions (issue 14): log-gamma and the gamma family, the complementary and inverse
error functions, log Φ (log_ndtr) and the modified Bessel functions of orders 0 and 1.

Where C has the function (lgamma, erfc and tgamma), the primitive is elementwise: it fuses
into loops (the kernel IR calls C's function: the builder's `libm` op). The others are "host"
primitives: compiled code calls SciPy's ufunc between kernels. Either way the reference
implementation (interp, eager, constant folding, host steps) is scipy.special's ufunc, imported
on the first evaluation, so `import fusegrad` does not pay SciPy's ~0.5 s; results keep the
operand's dtype as the ufuncs do.
"""

from __future__ import annotations

import numpy as np

from .elementwise import FLOAT, _unary_float
from .registry import PRIMITIVES, Doc, define, fail, require_float

SECTION = "Special functions"


def _special(name):
    """scipy.special's function `name`, imported on first use."""
    try:
        import scipy.special
    except ImportError:  # pragma: no cover - scipy is optional
        raise ImportError(f"fusegrad evaluates the special function {name} with scipy.special: "
                          f"install scipy") from None
    return getattr(scipy.special, name)


def _scipy_unary(name):
    """x -> scipy.special.<name>(x) in x's dtype."""
    def impl(x):
        x = np.asarray(x)
        return np.asarray(_special(name)(x), dtype=x.dtype)
    impl.__name__ = impl.__qualname__ = name
    return impl


def _polygamma(x, *, n):
    x = np.asarray(x)
    out = _special("psi")(x) if n == 0 else _special("polygamma")(n, x)
    return np.asarray(out, dtype=x.dtype)


def _polygamma_rule(prim, x, *, n):
    require_float(prim, x)
    if type(n) is not int or n < 0:
        fail(prim, f"the order n must be a non-negative int, got {n!r}", x)
    return x


def _libm(name, scipy_name, semantics, domain):
    """An elementwise special function compiled code computes with C's (its scalar rule)."""
    define(name, "elementwise", _unary_float, _scipy_unary(scipy_name), section=SECTION,
           domain=domain, doc=Doc(FLOAT, "", "same as x", semantics))


def _host(name, scipy_name, semantics):
    """A special function compiled code calls SciPy for (a host step)."""
    define(name, "host", _unary_float, _scipy_unary(scipy_name), section=SECTION,
           doc=Doc(FLOAT, "", "same as x", semantics))


# -- the table ------------------------------------------------------------------------------

_libm("lgamma", "gammaln", "log\\|Γ(x)\\| (`scipy.special.gammaln`)", "positive")
_libm("gamma", "gamma", "Γ(x) (`scipy.special.gamma`)", "positive")
_libm("erfc", "erfc", "1 - erf(x) without cancellation (`scipy.special.erfc`)", "normal")

define("polygamma", "host", _polygamma_rule, _polygamma, section=SECTION,
       doc=Doc(FLOAT, "`n`: int ≥ 0", "same as x",
               "ψ⁽ⁿ⁾(x), the n-th derivative of digamma ψ = Γ'/Γ (`scipy.special.polygamma`; "
               "n = 0 is `digamma`); host step"))
_host("erfinv", "erfinv", "the inverse of erf on (-1, 1) (`scipy.special.erfinv`); host step")
_host("erfcinv", "erfcinv", "the inverse of erfc on (0, 2) (`scipy.special.erfcinv`); "
      "host step")
_host("log_ndtr", "log_ndtr", "log Φ(x), the log of the standard normal CDF, accurate in both "
      "tails (`scipy.special.log_ndtr`); host step")
_host("i0", "i0", "I₀(x), modified Bessel function of order 0 (`scipy.special.i0`); host step")
_host("i1", "i1", "I₁(x), modified Bessel function of order 1 (`scipy.special.i1`); host step")
_host("i0e", "i0e", "e^-\\|x\\| I₀(x), exponentially scaled (`scipy.special.i0e`); host step")
_host("i1e", "i1e", "e^-\\|x\\| I₁(x), exponentially scaled (`scipy.special.i1e`); host step")


# -- scalar rules over the kernel IR's builder: C's functions (no vectorizable algorithm yet),
# in float64 as SciPy's float32 loops compute, with SciPy's (cephes') edges where C differs

_MAXLOG = 7.09782712893383996843e2     # cephes: erfc is 0 where x * x exceeds it


def _gamma_rule(b, x):
    """C's tgamma; below the normal range a zero of its sign, as SciPy's (C's is subnormal),
    and -0.0 from x <= -2**31 on (SciPy's sign there, its int parity overflowing)."""
    x64 = b.convert(x, "f64")
    r = b.libm("tgamma", x64)
    tiny = b.lt(b.fabs(r), float(np.finfo(np.float64).smallest_normal))
    r = b.select(tiny, b.copysign(b.const(0.0, "f64"), r), r)
    r = b.select(b.and_(b.le(x64, -2.0 ** 31), b.eq(r, 0.0)), b.const(-0.0, "f64"), r)
    return b.convert(r, x.dtype)


def _lgamma_rule(b, x):
    """C's lgamma; like SciPy's, -inf at -inf (C's is +inf) and +inf where 1/x overflows
    (C's is the finite -log|x|)."""
    x64 = b.convert(x, "f64")
    r = b.libm("lgamma", x64)
    inf = float("inf")
    r = b.select(b.eq(b.fabs(b.fdiv(1.0, x64)), inf), b.const(inf, "f64"), r)
    return b.convert(b.select(b.eq(x64, -inf), x64, r), x.dtype)


def _erfc_rule(b, x):
    """C's erfc; 0 where x > 0 and x * x > MAXLOG, as SciPy's (C's is subnormal to 27.2)."""
    x64 = b.convert(x, "f64")
    under = b.and_(b.gt(x64, 0.0), b.gt(b.mul(x64, x64), _MAXLOG))
    return b.convert(b.select(under, b.const(0.0, "f64"), b.libm("erfc", x64)), x.dtype)


PRIMITIVES["gamma"].scalar = _gamma_rule
PRIMITIVES["lgamma"].scalar = _lgamma_rule
PRIMITIVES["erfc"].scalar = _erfc_rule
