"""Every elementwise primitive's scalar rule (its registry entry, over the kernel IR's builder)
against the interpreter (NumPy, SciPy for the special functions), in every dtype its shape rule
accepts, on the first call with poison on, over a grid of edge values: signed zeros, infinities,
nan, subnormals, the largest and smallest floats, exact integers, halfway points for rounding,
domain boundaries and their neighbours, and random values of every magnitude.

A function NumPy computes exactly (rounding, sign, remainders, fmod, integer math, rsqrt) must
match it bit for bit. A transcendental one must match NumPy's nan,
infinities and signed zeros exactly, and be within MAX_ULP (float64, float32) of the precise
value: NumPy's function in the next wider type (long double, float64), or mpmath's for the
special functions in float64. The bounds are measured: scripts/check_kernel_ulp.py prints the
largest error over ~1e5 random points per function, against that reference and against NumPy
in the same dtype (which errs itself: SciPy's erfc by 28 ulp at 5.76, NumPy's float32 exp and
log by an ulp or two).
"""

import numpy as np
import pytest

from fusegrad.codegen.kernel_ir import compile_kernel_ir, covers
from fusegrad.ir import PRIMITIVES, Builder, TensorType
from fusegrad.ir.registry import ShapeError, infer_types
from fusegrad.runtime.interpreter import eval_function

NP = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "bool": np.bool_}
ELEMENTWISE = sorted(n for n, p in PRIMITIVES.items() if p.category == "elementwise")
# the largest error against the precise value, measured (scripts/check_kernel_ulp.py) and
# rounded up to a quarter ulp: (float64, float32)
MAX_ULP = {
    "acos": (1, 1), "acosh": (1, 1), "asin": (1, 1), "asinh": (1.25, 1.25),
    "atan": (0.75, 0.75), "atan2": (0.75, 0.75), "atanh": (1, 1), "cbrt": (0.75, 0.75),
    "cos": (1, 0.5), "sin": (1, 0.5), "erf": (1, 1), "erfc": (3.25, 0.5),
    "gamma": (5.25, 0.5), "lgamma": (4.5, 0.5), "exp": (1, 1), "exp2": (1, 1), "expm1": (1.5, 1.25),
    "hypot": (0.75, 0.75), "log": (1, 1), "log2": (1.5, 1.75), "log1p": (1, 1), "logistic": (1, 1),
    "tanh": (2, 2.5), "pow": (0.75, 0.5),
}
SPECIAL = ("erf", "erfc", "lgamma", "gamma")     # SciPy's; mpmath is their float64 reference


def max_ulp(prim, dtype):
    return MAX_ULP.get(prim, (0, 0))[dtype == "f32"]


def ulps(got, ref):
    """|got - ref| per element in spacings of ref rounded to got's dtype (ref may be wider);
    0 where both are nan or equal with the same sign bit, inf where only one is nan, inf or a
    zero of the other sign."""
    if got.dtype.kind != "f":
        return np.where(got == ref, 0.0, np.inf)
    with np.errstate(all="ignore"):
        near = ref.astype(got.dtype)
        err = np.abs(got.astype(ref.dtype) - ref) / np.spacing(np.abs(near)).astype(ref.dtype)
    same = ((got == near) & (np.signbit(got) == np.signbit(near))) | \
        (np.isnan(got) & np.isnan(near))
    err = np.where(np.isinf(got) | np.isinf(near) | (got == 0) | (near == 0), np.inf, err)
    return np.where(same, 0.0, np.nan_to_num(np.asarray(err, np.float64), nan=np.inf))


def precise(prim, args):
    """prim's value at args (floats) in the next wider type: NumPy's impl in long double or
    float64, or mpmath's for the special functions in float64."""
    wide = np.longdouble if args[0].dtype == np.float64 else np.float64
    if prim in SPECIAL and wide is np.longdouble:
        return _mpmath(prim, args[0])
    with np.errstate(all="ignore"):
        return np.asarray(PRIMITIVES[prim].impl(*(a.astype(wide) for a in args)), wide)


def _mpmath(prim, x):
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.prec = 100
    f = {"erf": mpmath.erf, "erfc": mpmath.erfc, "gamma": mpmath.gamma,
         "lgamma": lambda t: mpmath.re(mpmath.loggamma(t))}[prim]
    out = PRIMITIVES[prim].impl(x).astype(np.longdouble)     # inf, nan, poles: SciPy's
    for i, v in enumerate(x):
        if np.isfinite(out[i]) and out[i] != 0:
            out[i] = np.longdouble(mpmath.nstr(f(mpmath.mpf(float(v))), 30))
    return out


def specials(dtype):
    """The edge values of a float dtype."""
    fi = np.finfo(NP[dtype])
    one_minus, one_plus = np.nextafter(NP[dtype](1), NP[dtype](0)), np.nextafter(
        NP[dtype](1), NP[dtype](2))
    edge = [0.0, fi.smallest_subnormal, 3 * fi.smallest_subnormal, fi.smallest_normal,
            fi.tiny * 1.5, fi.eps, 1e-10, 0.1, 0.5, one_minus, 1.0, one_plus, 1.5, 2.0, 2.5,
            3.0, 3.5, 0.7853981633974483, 1.5707963267948966, 3.141592653589793, 4.0, 6.0,
            10.0, 26.0, 100.0, 170.5, 171.7, 1e5, 2.0 ** 23 + 0.5, 2.0 ** 24, 2.0 ** 52 + 0.5,
            2.0 ** 53, 1e30, fi.max, np.inf]
    vals = np.array([*edge, *(-v for v in edge), np.nan], np.float64)
    with np.errstate(over="ignore"):
        return np.unique(vals.astype(NP[dtype]))


def random_floats(dtype, n, rng):
    """Log-uniform magnitudes of both signs over the whole range, and uniform ones near 0."""
    fi = np.finfo(NP[dtype])
    lo, hi = np.log(float(fi.smallest_subnormal)), np.log(float(fi.max))
    mags = np.exp(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)
    near = rng.uniform(-8, 8, n)
    with np.errstate(over="ignore"):
        return np.concatenate([mags, near]).astype(NP[dtype])


INTS = np.array([-(2 ** 63), -(2 ** 63) + 1, -(2 ** 62), -10 ** 12, -64, -63, -8, -7, -3, -2, -1,
                 0, 1, 2, 3, 7, 8, 62, 63, 64, 10 ** 12, 2 ** 62, 2 ** 63 - 1], np.int64)


def grid(dtype, arity, rng, n=400):
    """arity operand arrays: every pair of the edge values, then random ones."""
    if dtype == "bool":
        edge = np.array([False, True])
    elif dtype == "i64":
        edge = np.concatenate([INTS, rng.integers(-50, 50, 20)])
    else:
        edge = specials(dtype)
    if arity == 1:
        extra = random_floats(dtype, n, rng) if dtype in ("f32", "f64") else edge
        return [np.concatenate([edge, extra])]
    if arity == 3:
        xs, ys = grid(dtype, 2, rng, n)
        return [rng.random(xs.size) < 0.5, xs, ys]
    xs, ys = (a.ravel() for a in np.meshgrid(edge, edge))
    if dtype in ("f32", "f64"):
        xs = np.concatenate([xs, random_floats(dtype, n, rng)])
        ys = np.concatenate([ys, random_floats(dtype, n, rng)])
    return [xs, ys]


def signature(prim, dtype):
    """The operand types prim's shape rule accepts for dtype (with params), or None."""
    for arity in (1, 2, 3):
        types = [TensorType(dtype, (1,))] * arity
        if arity == 3:
            types = [TensorType("bool", (1,)), *types[1:]]
        params = {"dtype": "f64"} if prim == "convert" else {}
        try:
            infer_types(prim, types, params)
            return arity, params
        except ShapeError:
            continue
    return None


def run_on(prim, args, params):
    """(kernel IR result, interpreter result) of prim applied to args."""
    b = Builder(prim)
    xs = [b.param(TensorType(NP_NAME[a.dtype.type], a.shape), f"x{i}")
          for i, a in enumerate(args)]
    fn = b.build([b.add1(prim, xs, params)])
    assert covers(fn) is None, covers(fn)
    run, _ = compile_kernel_ir(fn)
    with np.errstate(all="ignore"):
        return run(list(args))[0], np.asarray(eval_function(fn, list(args))[0])


NP_NAME = {v: k for k, v in NP.items()}


def cases():
    for prim in ELEMENTWISE:
        for dtype in NP:
            found = signature(prim, dtype)
            if found:
                yield prim, dtype, *found


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_POISON", "1")


def inputs(prim, dtype, arity, rng):
    args = grid(dtype, arity, rng)
    if prim == "pow" and dtype == "i64":
        args[1] = np.abs(args[1])                       # a negative exponent raises
        args[1][args[1] < 0] = 2 ** 63 - 1
    return args


@pytest.mark.parametrize("prim,dtype,arity,params", list(cases()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_elementwise_primitive_matches_numpy_within_its_bound(prim, dtype, arity, params):
    args = inputs(prim, dtype, arity, np.random.default_rng(0))
    got, want = run_on(prim, args, params)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    bound = max_ulp(prim, dtype) if want.dtype.kind == "f" else 0
    if bound:   # NumPy's nan, infinities and signed zeros exactly; the rest within the bound
        edge = np.isnan(want) | np.isinf(want) | (want == 0)
        _within(prim, dtype, args, got, np.where(edge, want, precise(prim, args)), bound)
    else:
        _within(prim, dtype, args, got, want, 0)


def _within(prim, dtype, args, got, ref, bound):
    err = ulps(got, ref)
    worst = int(np.argmax(err))
    at = tuple(a[worst] for a in args)
    assert err[worst] <= bound, f"{prim} {dtype}{at}: {got[worst]!r}, reference " \
                                f"{ref[worst]!r} ({err[worst]} ulp > {bound})"


def test_every_elementwise_primitive_has_a_scalar_rule():
    assert [n for n in ELEMENTWISE if PRIMITIVES[n].scalar is None] == []


def test_a_negative_integer_power_raises_numpys_error_naming_the_line():
    b = Builder("ipow")
    x, y = (b.param(TensorType("i64", (4,)), n) for n in "xy")
    fn = b.build([b.add1("pow", [x, y], loc="model.py:7")])
    run, _ = compile_kernel_ir(fn)
    ok = [np.array([2, -3, 5, 0]), np.array([3, 3, 0, 0])]
    np.testing.assert_array_equal(run(ok)[0], [8, -27, 1, 1])
    with pytest.raises(ValueError, match=r"negative integer powers.*model\.py:7"):
        run([np.array([2, 2, 2, 2]), np.array([1, 2, -1, 3])])
