"""fusegrad.codegen.mathlib: accuracy over the whole range, special values, and vectorization.

Each function is compiled once, inside the same njit loop a fused kernel would use. Its error is
measured in ulps of the result against NumPy evaluated in long double (float64 functions;
scipy's erf in float64, since NumPy has none) or in float64 (float32 functions), over ~1e5
log-uniform inputs of both signs plus the special values.
"""

import math
import re

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from fusegrad.codegen.mathlib import FUNCS, exp64, log64, tanh32

try:
    from scipy.special import erf as _erf
except ImportError:  # glibc's erf is as good; scipy is the reference the spec names
    _erf = np.vectorize(math.erf, otypes=[np.float64])

MAX_ULP = {"exp": 1.0}  # the rest: 3 ulp
DTYPES = {"f64": np.float64, "f32": np.float32}
TRIG_RANGE = {"f64": 2.0**43, "f32": 2.0**19}  # sin and cos are accurate below


def _vectorized(f):
    @numba.njit(error_model="numpy")
    def apply(x):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = f(x[i])
        return out

    return apply


# The one-argument functions; two-argument ones (atan2, hypot) are tested with their
# primitives (tests/test_elementwise_breadth.py).
UNARY = {key: f for key, f in FUNCS.items() if f.py_func.__code__.co_argcount == 1}
LOOPS = {key: _vectorized(f) for key, f in UNARY.items()}


def _reference(name, x):
    """NumPy's value in the next wider type (scipy's erf stays float64)."""
    wide = x.astype(np.longdouble if x.dtype == np.float64 else np.float64)
    with np.errstate(all="ignore"):
        if name == "logistic":
            return 1 / (1 + np.exp(-wide))
        if name == "erf":
            return _erf(x.astype(np.float64)).astype(wide.dtype)
        return getattr(np, name)(wide)


def _ulp_error(got, ref):
    """|got - ref| in spacings of ref rounded to got's dtype; 0 where both are the same inf/nan."""
    with np.errstate(all="ignore"):
        near = ref.astype(got.dtype)
        err = np.abs(got.astype(ref.dtype) - ref) / np.spacing(np.abs(near)).astype(ref.dtype)
    same = (got == near) | (np.isnan(got) & np.isnan(near))
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf)), near


def _specials(dtype):
    fi = np.finfo(dtype)
    tiny, normal = fi.smallest_subnormal, fi.smallest_normal
    edge = [0.0, tiny, normal - tiny, normal, 0.5, 1.0, 2.0, fi.max, np.inf]
    return np.array([*edge, *(-v for v in edge), np.nan], dtype)


def _pi2_multiples(dtype):
    # x nearest to k pi/2: the hardest inputs for the argument reduction of sin and cos
    x = (np.arange(1, 63663, dtype=np.longdouble) * (np.longdouble(np.pi) / 2)).astype(dtype)
    return np.concatenate([x, -x, np.nextafter(x, dtype(np.inf))])


def _inputs(name, dt, n=25_000):
    dtype = DTYPES[dt]
    fi, rng = np.finfo(dtype), np.random.default_rng(0)
    lo, hi = float(fi.smallest_subnormal), float(fi.max)

    def logu(a, b):  # log-uniform magnitudes in [a, b]
        return np.exp(rng.uniform(np.log(a), np.log(b), n))

    if name in ("exp", "expm1"):
        top = 1.1 * np.log(hi)
        parts = [logu(lo, top), -logu(lo, top), rng.uniform(np.log(lo) - 5, top, n)]
    elif name == "log":
        parts = [logu(lo, hi), logu(lo, hi), rng.uniform(0.5, 2, n), -logu(lo, hi)[:100]]
    elif name == "log1p":
        parts = [logu(lo, hi), -logu(lo, 1), -1 + logu(fi.eps / 4, 1), rng.uniform(-0.5, 1, n)]
    elif name in ("sin", "cos"):
        top = TRIG_RANGE[dt]
        parts = [logu(lo, top), -logu(lo, top), rng.uniform(-1e5, 1e5, n), _pi2_multiples(dtype)]
    else:
        parts = [logu(lo, 1e3), -logu(lo, 1e3), rng.uniform(-8, 8, n)]
    specials = _specials(dtype)
    if name in ("sin", "cos"):
        specials = specials[np.abs(specials) != fi.max]
    return np.concatenate([np.concatenate(parts).astype(dtype), specials])


@pytest.mark.parametrize("name, dt", list(UNARY))
def test_accuracy(name, dt):
    x = _inputs(name, dt)
    got = LOOPS[name, dt](x)
    err, near = _ulp_error(got, _reference(name, x))
    worst = np.argmax(err)
    assert err[worst] <= MAX_ULP.get(name, 3.0), f"{name}({x[worst]!r}) = {got[worst]!r}"
    zero = near == 0  # signed zeros: expm1(-0.0) = -0.0, tanh(-0.0) = -0.0, ...
    assert (np.signbit(got[zero]) == np.signbit(near[zero])).all()


def test_float32_tanh_over_a_strided_sweep_of_every_float():
    """Every 251st positive float32 bit pattern, 2^-149 to the largest (8.5 million inputs);
    the full sweep of all 2^31 (40 s, run by hand) gave at most 2.50 ulp."""
    bits = np.arange(1, np.float32(np.finfo(np.float32).max).view(np.int32), 251,
                     dtype=np.int32)
    x = bits.view(np.float32)
    err, _ = _ulp_error(LOOPS["tanh", "f32"](x), np.tanh(x.astype(np.float64)))
    assert err.max() <= 2.5, f"tanh({x[np.argmax(err)]!r})"


NAN, INF = np.nan, np.inf
EXACT = [  # (function, x, result) for both dtypes; every function also maps nan to nan
    ("exp", -INF, 0.0), ("exp", INF, INF), ("exp", -0.0, 1.0), ("expm1", -0.0, -0.0),
    ("expm1", -INF, -1.0), ("expm1", INF, INF), ("log", -1.0, NAN), ("log", -INF, NAN),
    ("log", 0.0, -INF), ("log", -0.0, -INF), ("log", INF, INF), ("log", 1.0, 0.0),
    ("log1p", -1.0, -INF), ("log1p", -2.0, NAN), ("log1p", -0.0, -0.0), ("log1p", INF, INF),
    ("tanh", -0.0, -0.0), ("tanh", -INF, -1.0), ("tanh", INF, 1.0), ("logistic", 0.0, 0.5),
    ("logistic", -INF, 0.0), ("logistic", INF, 1.0), ("erf", -0.0, -0.0), ("erf", INF, 1.0),
    ("erf", -INF, -1.0), ("sin", -0.0, -0.0), ("sin", INF, NAN), ("sin", -INF, NAN),
    ("cos", -0.0, 1.0), ("cos", INF, NAN), ("cos", -INF, NAN),
    *((name, NAN, NAN) for name in ("exp", "expm1", "log", "log1p", "tanh", "logistic", "erf",
                                    "sin", "cos")),
]


@pytest.mark.parametrize("dt", list(DTYPES))
def test_special_values(dt):
    for name, x, want in EXACT:
        got = LOOPS[name, dt](np.array([x], DTYPES[dt]))[0]
        same = got == want and np.signbit(got) == np.signbit(want)
        assert np.isnan(got) if np.isnan(want) else same, f"{name}{dt}({x}) = {got!r}, not {want}"


@pytest.mark.parametrize("dt", list(DTYPES))
def test_trig_beyond_accurate_range_stays_bounded(dt):
    x = np.array([1e20, -1e30, 3e38, np.finfo(DTYPES[dt]).max], DTYPES[dt])
    for name in ("sin", "cos"):
        assert (np.abs(LOOPS[name, dt](x)) <= 1).all()


def test_results_do_not_depend_on_vector_lane():
    # shifting the array by one moves every element to another SIMD lane or the scalar tail
    for (name, dt), loop in LOOPS.items():
        x = _inputs(name, dt, n=300)
        assert loop(x)[1:].tobytes() == loop(x[1:]).tobytes(), (name, dt)


def _has_avx2():
    features = numba.config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()
    return "+avx2" in features and numba.config.CPU_NAME != "generic"


FUSED = {"error_model": "numpy", "fastmath": {"reassoc"}}  # the flags of a fused reduction
VECTOR_CASES = [  # log64 also under Numba's default flags
    (exp64, ("exp", "f64"), "pd", FUSED),
    (tanh32, ("tanh", "f32"), "ps", FUSED),
    (log64, ("log", "f64"), "pd", {}),
]


@pytest.mark.skipif(not _has_avx2(), reason="the CPU has no AVX2")
@pytest.mark.parametrize("f, key, sfx, flags", VECTOR_CASES)
def test_loop_vectorizes(f, key, sfx, flags):
    @numba.njit(**flags)
    def kernel(x, y, out):
        for i in range(x.size):
            out[i] = f(x[i]) * y[i]

    x = _inputs(*key, n=1000)
    out = np.empty_like(x)
    kernel(x, np.ones_like(x), out)
    np.testing.assert_array_equal(out, LOOPS[key](x))  # the caller's flags change no result
    asm = kernel.inspect_asm(kernel.signatures[0])
    assert re.search(rf"vfmadd\w*{sfx}\s+%[yz]mm", asm), "no packed fma"
    assert not re.search(r"\b(exp|tanh|log)f?\b", asm), "calls libm"
    if key[1] == "f32":
        assert "double" not in kernel.inspect_llvm(kernel.signatures[0]), "widens to float64"
