"""Every primitive, traced through fusegrad.lax under fg.jit(backend="interp"), equals NumPy.

One row per primitive: a lax call, the inputs, and the NumPy reference. A test checks that the
rows cover every primitive of the registry, so a new primitive needs a row here, unless it is a
float function of fusegrad.numpy's FLOAT_UNARY table: those rows are made from the table.
"""

import math

import numpy as np
import pytest
import scipy.integrate
import scipy.linalg
from scipy import special

from domains import Domains

import fusegrad as fg
from fusegrad import lax
from fusegrad.dispatch import bind
from fusegrad.ir import PRIMITIVES, ShapeError
from fusegrad.numpy.elementwise import FLOAT_UNARY
from fusegrad.numpy import special as fnp_special

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4))
Y = rng.standard_normal((3, 4))
POS = rng.uniform(0.5, 2.0, (3, 4))
I = rng.integers(-4, 5, (3, 4))
J = rng.integers(1, 5, (3, 4))
B = X > 0
C = Y > 0
IDX = np.array([2, 0, -1, 1])
IDX2 = rng.integers(0, 4, (3, 2))
A3 = rng.standard_normal((2, 3, 4))
M3 = rng.standard_normal((2, 4, 5))
SQ = X[:, :3] + 3 * np.eye(3)            # linear algebra (issue 14): well conditioned,
SPD = SQ @ SQ.T                            # symmetric positive definite


def _packed(batch, *results):
    """NumPy's results as one array, as ir/linalg.py packs them: each flat after the batch."""
    return np.concatenate([np.reshape(r, batch + (-1,)) for r in results], axis=-1)


def run(f, *args, **kw):
    return fg.jit(f, backend="interp", **kw)(*args)


def assert_same(actual, expected, rtol=1e-6, atol=1e-12):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind in "fc":
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


def _scatter_add_ref(idx, g, axis, shape):
    out = np.zeros(shape, g.dtype)
    np.add.at(out, (slice(None),) * axis + (idx,), g)
    return out


def _scatter_add_along_ref(idx, g, axis, shape):
    out = np.zeros(shape, g.dtype)
    index = list(np.indices(idx.shape, sparse=True))
    index[axis] = idx
    np.add.at(out, tuple(index), g)
    return out


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@fg.custom_vjp
def _custom_tanh(x):
    return lax.tanh(x)


_custom_tanh.defvjp(lambda x: (lax.tanh(x), lax.tanh(x)), lambda t, g: (g * (1 - t * t),))


# (primitive, lax function, args, NumPy reference)
CASES = [
    ("exp", lax.exp, (X,), np.exp),
    ("log", lax.log, (POS,), np.log),
    ("log1p", lax.log1p, (POS,), np.log1p),
    ("expm1", lax.expm1, (X,), np.expm1),
    ("sqrt", lax.sqrt, (POS,), np.sqrt),
    ("rsqrt", lax.rsqrt, (POS,), lambda x: 1 / np.sqrt(x)),
    ("sin", lax.sin, (X,), np.sin),
    ("cos", lax.cos, (X,), np.cos),
    ("tanh", lax.tanh, (X,), np.tanh),
    ("logistic", lax.logistic, (X,), lambda x: 1 / (1 + np.exp(-x))),
    ("erf", lax.erf, (X,), special.erf),
    ("neg", lax.neg, (X,), np.negative),
    ("abs", lax.abs, (I,), np.abs),
    ("sign", lax.sign, (X,), np.sign),
    ("floor", lax.floor, (X * 3,), np.floor),
    ("ceil", lax.ceil, (X * 3,), np.ceil),
    ("round", lax.round, (X * 3,), np.rint),
    ("trunc", lax.trunc, (X * 3,), np.trunc),
    ("remainder", lax.remainder, (I, J), np.remainder),
    ("fmod", lax.fmod, (X * 3, Y), np.fmod),
    ("add", lax.add, (X, Y), np.add),
    ("sub", lax.sub, (I, J), np.subtract),
    ("mul", lax.mul, (X, Y), np.multiply),
    ("div", lax.div, (X, POS), np.divide),
    ("pow", lax.pow, (POS, Y), np.power),
    ("maximum", lax.maximum, (X, Y), np.maximum),
    ("minimum", lax.minimum, (I, J), np.minimum),
    ("lt", lax.lt, (X, Y), np.less),
    ("le", lax.le, (I, J), np.less_equal),
    ("gt", lax.gt, (X, Y), np.greater),
    ("ge", lax.ge, (X, Y), np.greater_equal),
    ("eq", lax.eq, (I, J), np.equal),
    ("ne", lax.ne, (I, J), np.not_equal),
    ("and", lax.and_, (B, C), np.logical_and),
    ("or", lax.or_, (B, C), np.logical_or),
    ("not", lax.not_, (B,), np.logical_not),
    ("select", lax.select, (B, X, Y), np.where),
    ("convert", lambda x: lax.convert(x, "f32"), (X,), lambda x: x.astype(np.float32)),
    ("broadcast_in_dim", lambda x: lax.broadcast_in_dim(x[0], (2, 3, 4), (2,)), (X,),
     lambda x: np.broadcast_to(x[0], (2, 3, 4))),
    ("reshape", lambda x: lax.reshape(x, (4, 3)), (X,), lambda x: x.reshape(4, 3)),
    ("transpose", lambda x: lax.transpose(x, (2, 0, 1)), (A3,),
     lambda x: np.transpose(x, (2, 0, 1))),
    ("slice", lambda x: lax.slice(x, (1, 0), (3, 4), (1, 2)), (X,), lambda x: x[1:3, 0:4:2]),
    ("pad", lambda x: lax.pad(x, (1, 0), (0, 2), (0, 1)), (X,),
     lambda x: _pad_ref(x, (1, 0), (0, 2), (0, 1))),
    ("concatenate", lambda x, y: lax.concatenate([x, y, x], 1), (X, Y),
     lambda x, y: np.concatenate([x, y, x], 1)),
    ("take", lambda x: lax.take(x, IDX % 4, 1), (X,), lambda x: np.take(x, IDX % 4, 1)),
    ("take_along_axis", lambda x: lax.take_along_axis(x, IDX2, 1), (X,),
     lambda x: np.take_along_axis(x, IDX2, 1)),
    ("scatter_add", lambda g: lax.scatter_add(np.array([1, 0, 1]), g, 1, (3, 2)), (X[:, :3],),
     lambda g: _scatter_add_ref(np.array([1, 0, 1]), g, 1, (3, 2))),
    ("scatter_add_along_axis", lambda g: lax.scatter_add_along_axis(IDX2, g, 1, (3, 4)),
     (Y[:, :2],), lambda g: _scatter_add_along_ref(IDX2, g, 1, (3, 4))),
    ("reduce_sum", lambda x: lax.reduce_sum(x, (0, 2)), (A3,), lambda x: x.sum(axis=(0, 2))),
    ("reduce_max", lambda x: lax.reduce_max(x, (1,)), (X,), lambda x: x.max(axis=1)),
    ("reduce_min", lambda x: lax.reduce_min(x, (0,)), (I,), lambda x: x.min(axis=0)),
    ("reduce_prod", lambda x: lax.reduce_prod(x, (0, 1)), (X,), np.prod),
    ("argmax", lambda x: lax.argmax(x, 1), (X,), lambda x: np.argmax(x, 1)),
    ("argmin", lambda x: lax.argmin(x, 0), (X,), lambda x: np.argmin(x, 0)),
    ("cumsum", lambda x: lax.cumsum(x, 1), (X,), lambda x: np.cumsum(x, 1)),
    ("matmul", lax.matmul, (A3, M3), np.matmul),
    ("full", lambda x: lax.add(x, lax.full((3, 4), 2.5, "f64")), (X,), lambda x: x + 2.5),
    ("iota", lambda x: lax.add(x, lax.iota((3, 4), "i64", 1)), (I,),
     lambda x: x + np.arange(4)),
    ("constant", lambda x: lax.mul(x, lax.constant(Y)), (X,), lambda x: x * Y),
    ("softmax", lambda x: lax.softmax(x, 0), (X,), lambda x: _softmax(x, 0)),
    ("log_softmax", lambda x: lax.log_softmax(x, 1), (X,), lambda x: np.log(_softmax(x, 1))),
    ("logsumexp", lambda x: lax.logsumexp(x, (1,)), (X,),
     lambda x: special.logsumexp(x, axis=1)),
    ("cross_entropy", lambda x: lax.cross_entropy(x, np.array([0, 3, 1])), (X,),
     lambda x: -np.mean(np.log(_softmax(x, 1))[np.arange(3), [0, 3, 1]])),
    ("layer_norm", lambda x: lax.layer_norm(x, 2, 1e-5), (A3,),
     lambda x: (x - x.mean((1, 2), keepdims=True))
     / np.sqrt(x.var((1, 2), keepdims=True) + 1e-5)),
    ("gelu", lambda x: lax.gelu(x, False), (X,),
     lambda x: 0.5 * x * (1 + special.erf(x / math.sqrt(2)))),
    ("custom_vjp_call", _custom_tanh, (X,), np.tanh),
    ("optimization_barrier", lambda x: bind("optimization_barrier", x) * 2, (X,),
     lambda x: x * 2),
    # -- special functions (issue 14, SciPy)
    ("lgamma", lax.lgamma, (3 * X,), special.gammaln),
    ("gamma", lax.gamma, (3 * X,), special.gamma),
    ("erfc", lax.erfc, (3 * X,), special.erfc),
    ("polygamma", lambda x: fnp_special.polygamma(3, x), (POS,), lambda x: special.polygamma(3, x)),
    ("erfinv", fnp_special.erfinv, (np.tanh(X),), special.erfinv),
    ("erfcinv", fnp_special.erfcinv, (1 + np.tanh(X),), special.erfcinv),
    ("log_ndtr", fnp_special.log_ndtr, (10 * X,), special.log_ndtr),
    ("i0", fnp_special.i0, (3 * X,), special.i0),
    ("i1", fnp_special.i1, (3 * X,), special.i1),
    ("i0e", fnp_special.i0e, (3 * X,), special.i0e),
    ("i1e", fnp_special.i1e, (3 * X,), special.i1e),
    # -- elementwise breadth (issue 14)
    ("atan2", lax.atan2, (X, Y), np.arctan2),
    ("hypot", lax.hypot, (X, Y), np.hypot),
    ("signbit", lax.signbit, (np.array([-0.0, 0.0, -np.nan, np.nan, -1.0, 2.0]),), np.signbit),
    # -- shapes, joining and indexing (issue 14)
    ("rev", lambda x: lax.rev(x, (0, 2)), (A3,), lambda x: x[::-1, :, ::-1]),
    ("argsort", lambda x: lax.argsort(x, 0, stable=True), (np.round(X),),
     lambda x: np.argsort(x, axis=0, kind="stable")),
    ("argpartition", lambda x: lax.argpartition(x, (1,), 1), (X,),
     lambda x: np.argpartition(x, 1, axis=1)),
    # -- linear algebra (issue 14): LAPACK host steps; packed results as ir/linalg.py lays out
    ("solve", lambda a, b: bind("solve", a, b), (SQ, X[:, :2]), np.linalg.solve),
    ("triangular_solve", lambda a, b: bind("triangular_solve", a, b, lower=True,
                                           transpose=True, unit_diagonal=False),
     (SQ, X[:, :2]), lambda a, b: scipy.linalg.solve_triangular(a, b, trans=1, lower=True)),
    ("cholesky", lambda a: bind("cholesky", a, upper=False), (SPD,), np.linalg.cholesky),
    ("eigh", lambda a: bind("eigh", a, lower=True), (SPD,),
     lambda a: _packed((), *np.linalg.eigh(a))),
    ("svd", lambda a: bind("svd", a), (X,),
     lambda a: _packed((), *np.linalg.svd(a, full_matrices=False))),
    ("qr", lambda a: bind("qr", a), (X.T,), lambda a: _packed((), *np.linalg.qr(a))),
    ("slogdet", lambda a: bind("slogdet", a), (M3[..., :4],),
     lambda a: _packed((2,), *np.linalg.slogdet(a))),
    ("expm", lambda a: bind("expm", a), (SQ,), scipy.linalg.expm),
    ("require_zero", lambda x: bind("require_zero", x, shape=(2, 3), message="m"), (0 * X,),
     lambda x: np.zeros((2, 3))),
    ("cumprod", lambda x: bind("cumprod", x, axis=1), (X,), lambda x: np.cumprod(x, 1)),
]


def _scan_ref(x):
    c, ys = x[0], []
    for r in x:
        c, y = c * 0.5 + r, c * r
        ys.append(y)
    return np.stack(ys)


def _while_ref(x):
    while np.sum(x * x) < 100.0:
        x = x * 1.5 + 0.1
    return x


# Control flow (issue 15): one op each under a trace, through fusegrad.lax's JAX-named front end.
CASES += [
    ("scan", lambda x: lax.scan(lambda c, r: (c * 0.5 + r, c * r), x[0], x)[1], (X,), _scan_ref),
    ("while_loop", lambda x: lax.while_loop(lambda c: np.sum(c * c) < 100.0,
                                            lambda c: c * 1.5 + 0.1, x), (X,), _while_ref),
    ("cond", lambda x, y: lax.cond(np.sum(x) > np.sum(y), lambda a, b: a - b,
                                   lambda a, b: a * b, x, y), (X, Y),
     lambda x, y: x - y if np.sum(x) > np.sum(y) else x * y),
    # ODEs (issue 23): scipy.integrate.odeint traced is one ode_solve op; SciPy on the arrays
    ("ode_solve", lambda y0, k: scipy.integrate.odeint(lambda y, t, k: -k * y * np.cos(t), y0,
                                                       np.linspace(0, 1, 4), args=(k,)),
     (X[0], POS[0]),
     lambda y0, k: scipy.integrate.odeint(lambda y, t, k: -k * y * np.cos(t), y0,
                                          np.linspace(0, 1, 4), args=(k,))),
]

# The NumPy dispatch table's one-primitive float functions (fusegrad.numpy's FLOAT_UNARY) get a
# row each, with NumPy's own ufunc as the reference and inputs from the registry's domain.
_domains = Domains(seed=5, margin=0.2)
CASES += [(prim, getattr(lax, prim), (_domains.sample(PRIMITIVES[prim].domain[0], 3, 4),), ufunc)
          for ufunc, prim in FLOAT_UNARY.items() if prim not in {c[0] for c in CASES}]


def _pad_ref(x, low, high, interior):
    out = np.zeros([lo + hi + n + (n - 1) * it for n, lo, hi, it in
                    zip(x.shape, low, high, interior)], x.dtype)
    out[tuple(slice(lo, lo + n + (n - 1) * it, it + 1)
              for n, lo, it in zip(x.shape, low, interior))] = x
    return out


EXTRA = [  # more shapes and dtypes for some primitives
    ("cumsum reverse", lambda x: lax.cumsum(x, 0, reverse=True), (X,),
     lambda x: np.flip(np.cumsum(np.flip(x, 0), 0), 0)),
    ("matmul 2-d i64", lax.matmul, (I, J.T), np.matmul),
    ("gelu tanh f32", lambda x: lax.gelu(x, True), (X.astype(np.float32),),
     lambda x: (0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))))
     .astype(np.float32)),
    ("tanh f32", lax.tanh, (X.astype(np.float32),), np.tanh),
    ("div i64 floors", lax.div, (I, J), np.floor_divide),
    ("broadcast size-1 axis", lambda x: lax.broadcast_in_dim(x[:1], (3, 4), (0, 1)), (X,),
     lambda x: np.broadcast_to(x[:1], (3, 4))),
    ("logsumexp all axes", lambda x: lax.logsumexp(x, (0, 1)), (X,), special.logsumexp),
    ("reduce_sum f32", lambda x: lax.reduce_sum(x, (0,)), (X.astype(np.float32),),
     lambda x: x.sum(0)),
    ("svd full_matrices", lambda a: bind("svd", a, full_matrices=True), (M3,),
     lambda a: _packed((2,), *np.linalg.svd(a))),
    ("qr complete", lambda a: bind("qr", a, mode="complete"), (M3.mT,),
     lambda a: _packed((2,), *np.linalg.qr(a, "complete"))),
    ("qr raw", lambda a: bind("qr", a, mode="raw"), (M3,),
     lambda a: _packed((2,), *np.linalg.qr(a, "raw"))),
    ("cumprod i64", lambda x: bind("cumprod", x, axis=0), (I,), lambda x: np.cumprod(x, 0)),
]


@pytest.mark.parametrize("name, f, args, ref", CASES + EXTRA, ids=[c[0] for c in CASES + EXTRA])
def test_primitive_matches_numpy(name, f, args, ref):
    assert_same(run(f, *args), ref(*args), rtol=2e-6 if "f32" in name else 1e-6)


def test_every_primitive_has_a_case():
    covered = {name for name, *_ in CASES}
    assert covered == set(PRIMITIVES), set(PRIMITIVES) ^ covered


TRACED = [c for c in CASES if c[0] not in ("full", "iota", "constant")]


@pytest.mark.parametrize("name, f, args, ref", TRACED, ids=[c[0] for c in TRACED])
def test_primitive_appears_in_the_traced_ir(name, f, args, ref):
    fn = fg.make_ir(f)(*args)
    assert name in [op.prim for op in fn.ops]


def test_nullary_primitives_inside_a_trace_are_recorded():
    # full/iota have no operands to route by: inside a trace they become ops, not baked arrays
    fn = fg.make_ir(lambda x: lax.add(x, lax.iota((3, 4), "i64", 1)))(I)
    assert [op.prim for op in fn.ops] == ["iota", "add"]
    fn = fg.make_ir(lambda x: x + np.zeros_like(x))(X)
    assert fn.ops[0].prim == "full" and fn.ops[0].params["value"] == 0.0


def test_lax_on_numpy_arrays_computes_directly():
    assert_same(lax.add(X, 1.0), X + 1.0)
    assert_same(lax.reduce_sum(X, (1,)), X.sum(1))
    assert_same(lax.select(B, X, Y), np.where(B, X, Y))


@pytest.mark.parametrize("f, args, words", [
    (lambda x, y: lax.matmul(x, y), (X, Y), ["matmul", "f64[3,4]"]),
    (lambda x: lax.reshape(x, (5, 2)), (X,), ["reshape", "12 elements", "[5, 2]"]),
    (lambda x: lax.transpose(x, (0, 0)), (X,), ["transpose", "perm"]),
    (lambda x: lax.concatenate([x, x[:, :2].T], 0), (X,), ["concatenate", "f64[3,4]",
                                                         "f64[2,3]"]),
    (lambda x: lax.take_along_axis(x, IDX2.T, 1), (X,), ["take_along_axis", "i64[2,3]"]),
    (lambda x: lax.and_(x, x), (X,), ["and", "bool or i64", "f64[3,4]"]),
    (lambda x: lax.reduce_sum(x, (2,)), (X,), ["reduce_sum", "axes"]),
])
def test_primitive_shape_errors_name_op_and_shapes(f, args, words):
    with pytest.raises(ShapeError) as info:
        run(f, *args)
    for word in words:
        assert word in str(info.value)
    assert "test_primitives.py:" in str(info.value)
