"""Seeded input domains for gradient tests (values where every primitive is smooth, so no
finite difference straddles a kink: the seed chapter's positive_input and away_from_zero), and
the table of one or more cases per differentiable primitive that the formula tests (gradcheck
on the eager engine) and the autodiff tests (the VJP inner-product identity on the IR) share."""

import numpy as np

from fusegrad import custom_vjp, lax, make_ir
from fusegrad.dispatch import bind
from fusegrad.formulas import vjp_rules
from fusegrad.ir.primitives import PRIMITIVES
from fusegrad.numpy import special as fnp_special


class Domains:
    def __init__(self, seed: int, margin: float):
        self.rng = np.random.default_rng(seed)
        self.margin = margin

    def normal(self, *shape):
        return self.rng.standard_normal(shape)

    def positive(self, *shape):
        """[0.5, 2.5): for log, sqrt, pow."""
        return self.rng.uniform(0.5, 2.5, shape)

    def away_from_zero(self, *shape):
        """At least `margin` from 0: for abs, relu, prod."""
        x = self.rng.standard_normal(shape)
        return np.where(x >= 0, x + self.margin, x - self.margin)

    def distinct(self, *shape):
        """Values at least 0.1 apart, in random order: no ties within eps (for max/min)."""
        n = int(np.prod(shape))
        return (self.rng.permutation(n) * 0.1 - n * 0.05 + 0.01).reshape(shape)

    def unit(self, *shape):
        """(-0.9, 0.9): inside [-1, 1], away from its ends (arcsin, arctanh)."""
        return self.rng.uniform(-0.9, 0.9, shape)

    def above_one(self, *shape):
        """(1.2, 3): where arccosh is smooth."""
        return self.rng.uniform(1.2, 3.0, shape)

    def sample(self, domain: str, *shape):
        """Inputs from the sampler a registry entry names as an operand's domain."""
        return getattr(self, domain)(*shape)


IDX = np.array([2, 0, 2, 1])
IDX2 = np.array([[0, 2], [1, 1], [2, 0]])
TARGETS = np.array([2, 0, 1, 1])


def elementwise_cases(d: Domains) -> dict:
    """One row per differentiable elementwise primitive with a domain in its registry entry: a
    [2, 3] operand, and for binary ones a [3] second operand (broadcast, so the driver's
    un-broadcasting is tested too), offset where both are `distinct` so they never tie."""
    cases = {}
    for p in PRIMITIVES.values():
        if p.category != "elementwise" or p.name not in vjp_rules or not p.domain:
            continue
        shapes = [(2, 3), (3,)][:len(p.domain)]
        xs = [d.sample(dom, *shape) for dom, shape in zip(p.domain, shapes)]
        if p.domain == ("distinct", "distinct"):
            xs[1] = xs[1] + 0.03
        cases[p.name] = (getattr(lax, p.name), xs)
    return cases


def primitive_cases(d: Domains) -> dict:
    """case -> (function of lax ops, inputs): one or more rows per differentiable primitive,
    inputs drawn from d's domains. Several rows per prim where layouts differ."""
    return {
        **elementwise_cases(d),
        "pow_scalar": (lambda x: lax.pow(x, 3.0), [d.normal(2, 3)]),
        "select": (lambda a, b: lax.select(np.array([True, False, True]), a, b),
                   [d.normal(2, 3), d.normal(2, 3)]),
        "convert": (lambda x: lax.convert(x, "f64"), [d.normal(2, 3)]),
        "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (2, 4, 3), (0, 2)),
                             [d.normal(2, 1)]),
        "reshape": (lambda x: lax.reshape(x, (3, 2)), [d.normal(2, 3)]),
        "transpose": (lambda x: lax.transpose(x, (2, 0, 1)), [d.normal(2, 3, 4)]),
        "slice": (lambda x: lax.slice(x, (0, 1), (2, 6), (1, 2)), [d.normal(2, 7)]),
        "pad": (lambda x: lax.pad(x, (1, 0), (0, 2), (0, 1)), [d.normal(2, 3)]),
        "concatenate": (lambda a, b, c: lax.concatenate([a, b, c], 1),
                        [d.normal(2, 1), d.normal(2, 3), d.normal(2, 2)]),
        "take": (lambda x: lax.take(x, IDX, 1), [d.normal(2, 3)]),
        "take_along_axis": (lambda x: lax.take_along_axis(x, IDX2, 1), [d.normal(3, 3)]),
        "scatter_add": (lambda g: lax.scatter_add(IDX, g, 1, (2, 3)), [d.normal(2, 4)]),
        "scatter_add_along_axis": (lambda g: lax.scatter_add_along_axis(IDX2, g, 1, (3, 4)),
                                   [d.normal(3, 2)]),
        "reduce_sum": (lambda x: lax.reduce_sum(x, (0, 2)), [d.normal(2, 3, 2)]),
        "reduce_max": (lambda x: lax.reduce_max(x, (1,)), [d.distinct(2, 4)]),
        "reduce_min": (lambda x: lax.reduce_min(x, (0, 1)), [d.distinct(2, 4)]),
        "reduce_prod": (lambda x: lax.reduce_prod(x, (1,)), [d.away_from_zero(2, 4)]),
        "cumsum": (lambda x: lax.cumsum(x, 1), [d.normal(2, 4)]),
        "cumsum_reverse": (lambda x: lax.cumsum(x, 0, reverse=True), [d.normal(3, 2)]),
        "cumprod": (lambda x: bind("cumprod", x, axis=1), [d.normal(2, 4)]),
        "matmul": (lax.matmul, [d.normal(2, 3), d.normal(3, 4)]),
        "matmul_vec_left": (lax.matmul, [d.normal(3), d.normal(3, 4)]),
        "matmul_vec_right": (lax.matmul, [d.normal(2, 3), d.normal(3)]),
        "matmul_batched": (lax.matmul, [d.normal(2, 3, 4), d.normal(4, 2)]),
        "softmax": (lambda x: lax.softmax(x, 1), [d.normal(2, 4)]),
        "log_softmax": (lambda x: lax.log_softmax(x, 0), [d.normal(3, 2)]),
        "logsumexp": (lambda x: lax.logsumexp(x, (1,)), [d.normal(2, 4)]),
        "cross_entropy": (lambda x, t: lax.cross_entropy(x, t), [d.normal(4, 3), TARGETS]),
        "layer_norm": (lambda x: lax.layer_norm(x, 1, 1e-5), [d.normal(2, 4)]),
        "layer_norm_2d": (lambda x: lax.layer_norm(x, 2, 1e-3), [d.normal(2, 2, 3)]),
        "gelu": (lambda x: lax.gelu(x, False), [d.normal(2, 3)]),
        "gelu_tanh": (lambda x: lax.gelu(x, True), [d.normal(2, 3)]),
        "custom_vjp_call": (custom_mul_sin, [d.normal(2, 3), d.normal(2, 3)]),
        "optimization_barrier": (lambda x: bind("optimization_barrier", x), [d.normal(2, 3)]),
        # -- special functions (issue 14, SciPy): the host primitives of ir/special.py
        "polygamma": (fnp_special.digamma, [d.positive(2, 3)]),
        "polygamma_2": (lambda x: fnp_special.polygamma(2, x), [d.positive(2, 3)]),
        "erfinv": (fnp_special.erfinv, [d.unit(2, 3)]),
        "erfcinv": (lambda x: fnp_special.erfcinv(x + 1.0), [d.unit(2, 3)]),
        "log_ndtr": (fnp_special.log_ndtr, [d.normal(2, 3)]),
        "i0": (fnp_special.i0, [d.normal(2, 3)]),
        "i1": (fnp_special.i1, [d.normal(2, 3)]),
        "i0e": (fnp_special.i0e, [d.away_from_zero(2, 3)]),
        "i1e": (fnp_special.i1e, [d.away_from_zero(2, 3)]),
        # -- shapes, joining and indexing (issue 14): rev (argsort, argpartition have no VJP)
        "rev": (lambda x: lax.rev(x, (0, 2)), [d.normal(2, 3, 2)]),
        # -- linear algebra (issue 14): the LAPACK host primitives, bound by name, on
        # well-conditioned (a + 3I) and positive definite (x xᵀ + I) matrices made from the
        # draws; eigenvector and singular-vector signs drop out of the squares
        **linalg_cases(d),
        # -- control flow (issue 15): the ops bound directly, with one output each so that the
        # eager engine records them (fg.lax's loops are Python loops on tensors)
        **control_cases(d),
    }


def _well(a):
    return lax.add(a, 3 * np.eye(a.shape[-1]))


def _spd(x):
    return lax.add(lax.matmul(x, lax.transpose(x, (1, 0))), np.eye(x.shape[-1]))


def linalg_cases(d: Domains) -> dict:
    def trsolve(lower, transpose, unit):
        return lambda a, b: bind("triangular_solve", _well(a), b, lower=lower,
                                 transpose=transpose, unit_diagonal=unit)

    def square(packed):
        return lax.mul(packed, packed)
    return {
        "solve": (lambda a, b: bind("solve", _well(a), b), [d.normal(3, 3), d.normal(3, 2)]),
        "triangular_solve": (trsolve(True, False, False), [d.normal(3, 3), d.normal(3, 2)]),
        "triangular_solve_upper": (trsolve(False, True, True), [d.normal(3, 3), d.normal(3, 1)]),
        "cholesky": (lambda x: bind("cholesky", _spd(x), upper=False), [d.normal(3, 3)]),
        "cholesky_upper": (lambda x: bind("cholesky", _spd(x), upper=True), [d.normal(3, 3)]),
        "eigh": (lambda x: square(bind("eigh", x, lower=True)), [d.normal(3, 3)]),
        "eigh_upper": (lambda x: square(bind("eigh", x, lower=False)), [d.normal(3, 3)]),
        "svd": (lambda x: square(bind("svd", x)), [d.normal(3, 2)]),
        "svd_wide": (lambda x: square(bind("svd", x)), [d.normal(2, 3)]),
        "qr": (lambda x: bind("qr", x), [d.normal(3, 2)]),
        "qr_wide": (lambda x: bind("qr", x), [d.normal(2, 3)]),
        "slogdet": (lambda a: bind("slogdet", _well(a)), [d.normal(3, 3)]),
        "expm": (lambda x: bind("expm", 0.5 * x), [d.normal(3, 3)]),
    }


def control_cases(d: Domains) -> dict:
    """scan (an RNN step tanh(w h + x) over 3 steps, forward and reversed), while_loop (a
    data-dependent trip count, 2 to 3 steps for these draws), cond (each branch)."""
    w, v = np.zeros((2, 2)), np.zeros(2)
    step = make_ir(lambda w, h, x: np.tanh(w @ h + x))(w, v, v)
    grow = make_ir(lambda x: np.sin(x) + 1.4 * x)(np.zeros((2, 3)))
    small = make_ir(lambda x: np.sum(x * x) < 40.0)(np.zeros((2, 3)))
    branches = [make_ir(f)(v, v) for f in (lambda a, b: a * np.sin(b), lambda a, b: a - b * b)]

    def scan(reverse):
        return lambda w, h, xs: bind("scan", w, h, xs, body=step, length=3, reverse=reverse,
                                     num_consts=1, num_carry=1)

    def cond(pred):
        return lambda a, b: bind("cond", np.array(pred), a, b, true_branch=branches[0],
                                 false_branch=branches[1])
    rnn = [0.5 * d.normal(2, 2), d.normal(2), d.normal(3, 2)]
    rhs = make_ir(lambda y, t, k: -k * y + np.sin(t))(v, np.float64(0.0), v)
    ode = dict(rhs=rhs, method="odeint", rtol=1e-11, atol=1e-11, t_end=None, max_step=0.0,
               mxstep=0)
    return {
        "ode_solve": (lambda y0, k: bind("ode_solve", y0, np.array([0.0, 0.4, 1.0]), k, **ode),
                      [d.normal(2), d.positive(2)]),
        "scan": (scan(False), rnn),
        "scan_reverse": (scan(True), [x.copy() for x in rnn]),
        "while_loop": (lambda x: bind("while_loop", x, cond=small, body=grow, cond_nconsts=0,
                                      body_nconsts=0), [d.normal(2, 3)]),
        "cond": (cond(True), [d.normal(2), d.normal(2)]),
        "cond_false": (cond(False), [d.normal(2), d.normal(2)]),
    }


@custom_vjp
def custom_mul_sin(x, y):
    """x * sin(y) with a hand-written VJP: the custom_vjp_call row (bwd is differentiable)."""
    return x * lax.sin(y)


def _custom_mul_sin_fwd(x, y):
    s = lax.sin(y)
    return x * s, (x, s, lax.cos(y))


def _custom_mul_sin_bwd(res, g):
    x, s, c = res
    return g * s, g * x * c


custom_mul_sin.defvjp(_custom_mul_sin_fwd, _custom_mul_sin_bwd)


def case_prim(case: str) -> str:
    return case if case in vjp_rules else case.rsplit("_", 1)[0].replace("_vec", "")


def scalarized(f, args):
    """sum over f's float outputs of <sin(output), u> for fixed random u: one number (integer
    outputs, such as a rank or an index, carry no gradient and are left out)."""
    us = {i: np.random.default_rng(i).standard_normal(np.shape(o))
          for i, o in enumerate(f(*args)) if np.asarray(o).dtype.kind == "f"}

    def scalar(*xs):
        outs = f(*xs)
        return sum(np.sum(np.sin(outs[i]) * u) for i, u in us.items())
    scalar.__name__ = f.__name__
    return scalar


def central_difference(f, x, eps=1e-6):
    """The gradient of a scalar f at array x by central differences, entry by entry."""
    g = np.zeros_like(x)
    for i in range(x.size):
        step = np.zeros_like(x)
        step.flat[i] = eps
        g.flat[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return g
