"""Every primitive of the registry on 0-d inputs: eager, interp and numba agree on the first
call in shape, dtype and value, for the result and for the gradient (issue 23).

On numba, host steps returned 0-d results as shape (1,) (scipy.special.digamma, erfinv,
polygamma, the gradients of gammaln and gamma) and a kernel reading one failed to type (the
sum of a digamma, the gradient of erfinv). Here each primitive gets cases with 0-d operands,
or with a 0-d result where it takes none (a reduction to a scalar, a gather at a 0-d index),
in every dtype its shape rule accepts; NO_0D names the primitives that cannot have either, and
why. The cases run batched, one traced function per backend (two for numba: all together,
which the kernel IR compiles, host steps between its parts, and the f64 elementwise ones
alone, which it compiles in one part); a batch that fails is rerun case by case
to name the culprit.
"""

import numpy as np
import pytest
from domains import Domains, custom_mul_sin

import fusegrad as fg
from fusegrad import lax
from fusegrad.dispatch import bind
from fusegrad.formulas import vjp_rules
from fusegrad.ir.primitives import PRIMITIVES, ShapeError, infer_types
from fusegrad.ir.types import NP_DTYPES, TensorType

D = Domains(seed=23, margin=0.5)
INTS = {"normal": -3, "positive": 3, "away_from_zero": 3, "distinct": 3, "unit": 0,
        "above_one": 2}
SECOND = {"normal": 2, "positive": 2, "away_from_zero": 2, "distinct": 5, "unit": 1,
          "above_one": 2}

NO_0D = {
    "concatenate": "joins along an axis: rank >= 1",
    "argsort": "sorts along an axis: rank >= 1", "argpartition": "as argsort",
    "cumsum": "runs along an axis: rank >= 1", "cumprod": "as cumsum",
    "iota": "counts along an axis: rank >= 1",
    "take_along_axis": "index and result have the operand's rank >= 1",
    "scatter_add_along_axis": "as take_along_axis",
    "matmul": "rank >= 2 (the tracer reshapes vectors)",
    **dict.fromkeys(("solve", "triangular_solve", "cholesky", "eigh", "svd", "qr", "expm"),
                    "matrices in, matrices out"),
}


def _operand(domain, dtype, second=False):
    if dtype == "bool":
        return np.bool_(not second)
    if dtype == "i64":
        return np.int64((SECOND if second else INTS)[domain])
    value = D.sample(domain)
    if second and domain == "distinct":
        value = value + 0.03
    return np.asarray(value, NP_DTYPES[dtype])


def _elementwise_cases() -> dict:
    cases = {}
    for p in PRIMITIVES.values():
        if p.category != "elementwise" or p.name in ("select", "convert"):
            continue
        domains = p.domain or ("normal",) * p.arity
        for dtype in ("f64", "f32", "i64", "bool"):
            try:
                infer_types(p.name, [TensorType(dtype, ())] * p.arity, {})
            except ShapeError:
                continue
            args = [np.asarray(_operand(dom, dtype, i == 1)) for i, dom in enumerate(domains)]
            cases[f"{p.name}_{dtype}"] = (lambda *xs, n=p.name: bind(n, *xs), args)
    return cases


def _x(value=0.6, dtype=np.float64):
    return np.asarray(value, dtype)


def _v(n=3):
    return np.linspace(-0.4, 0.9, n)


def _scan(c, xs):
    return lax.scan(lambda c, x: (c * 0.5 + x, c * x), c, xs)


def _while(x):
    return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))[1]


def _custom(x, y):
    return custom_mul_sin(x, y)


ODE = dict(rhs=fg.make_ir(lambda y, t, k: -k * y)(np.zeros(1), 0.0, 0.0), method="RK45",
           rtol=1e-8, atol=1e-8, t_end=None, max_step=0.0, mxstep=0)    # a 0-d operand k

CASES = {
    **_elementwise_cases(),
    "select": (lambda p, a, b: lax.select(p, a, b), [np.bool_(False), _x(), _x(-1.5)]),
    "convert_f64_i64": (lambda x: lax.convert(x, "i64"), [_x(-2.7)]),
    "convert_f64_f32": (lambda x: lax.convert(x, "f32"), [_x()]),
    "convert_i64_f64": (lambda x: lax.convert(x, "f64"), [np.asarray(4, np.int64)]),
    "convert_bool_f64": (lambda x: lax.convert(x, "f64"), [np.bool_(True)]),
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (), ()), [_x()]),
    "broadcast_in_dim_up": (lambda x: lax.broadcast_in_dim(x, (2,), ()), [_x()]),
    "reshape": (lambda x: lax.reshape(x, (1, 1)), [_x()]),
    "reshape_down": (lambda v: lax.reshape(v, ()), [_v(1)]),
    "transpose": (lambda x: lax.transpose(x, ()), [_x()]),
    "slice": (lambda x: lax.slice(x, (), ()), [_x()]),
    "pad": (lambda x: lax.pad(x, (), ()), [_x()]),
    "rev": (lambda x: lax.rev(x, ()), [_x()]),
    "take": (lambda v, i: lax.take(v, i, 0), [_v(), np.asarray(2, np.int64)]),
    "scatter_add": (lambda i, g: lax.scatter_add(i, g, 0, (3,)),
                    [np.asarray(1, np.int64), _x()]),
    **{f"{r}{suffix}": (lambda x, r=r, axes=axes: bind(r, x, axes=axes), [arg])
       for r in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
       for suffix, axes, arg in (("", (), _x()), ("_to_0d", (0,), _v()))},
    "reduce_sum_i64": (lambda x: lax.reduce_sum(x, ()), [np.asarray(5, np.int64)]),
    "argmax": (lambda v: lax.argmax(v, 0), [_v()]),
    "argmin": (lambda v: lax.argmin(v, 0), [_v()]),
    "full": (lambda x: x * lax.full((), 1.5, "f64"), [_x()]),
    "constant": (lambda x: x + lax.constant(np.float64(2.5)), [_x()]),
    "softmax": (lambda x: lax.softmax(x, 0), [_v()]),
    "log_softmax": (lambda x: lax.log_softmax(x, 0), [_v()]),
    "logsumexp": (lambda x: lax.logsumexp(x, ()), [_x()]),
    "logsumexp_to_0d": (lambda v: lax.logsumexp(v, (0,)), [_v()]),
    "cross_entropy": (lambda x: lax.cross_entropy(x, np.array([1, 0])),
                      [np.arange(6.0).reshape(2, 3) / 7]),
    "layer_norm": (lambda v: lax.layer_norm(v, 1, 1e-5), [_v()]),
    "gelu": (lambda x: lax.gelu(x, False), [_x()]),
    "gelu_tanh": (lambda x: lax.gelu(x, True), [_x()]),
    "slogdet": (lambda a: bind("slogdet", a), [np.array([[2.0, 0.5], [0.3, 1.5]])]),
    "require_zero": (lambda x: x + bind("require_zero", x * 0, shape=(), message="nonzero"),
                     [_x()]),
    "polygamma": (lambda x: bind("polygamma", x, n=0), [_x(0.7)]),
    "polygamma_1": (lambda x: bind("polygamma", x, n=1), [_x(0.7)]),
    "polygamma_f32": (lambda x: bind("polygamma", x, n=0), [_x(0.7, np.float32)]),
    **{name: (lambda x, n=name: bind(n, x), [_x(0.3)])
       for name in ("erfinv", "log_ndtr", "i0", "i1", "i0e", "i1e")},
    "erfcinv": (lambda x: bind("erfcinv", x), [_x(1.3)]),
    "scan": (_scan, [_x(), _v()]),
    "while_loop": (_while, [_x()]),
    "cond": (lambda p, x: lax.cond(p, lambda a: a * 2.0, lambda a: a - 1.0, x),
             [np.bool_(True), _x()]),
    "custom_vjp_call": (_custom, [_x(), _x(-0.4)]),
    "optimization_barrier": (lambda x: bind("optimization_barrier", x) * x, [_x()]),
    "ode_solve": (lambda k, y0: bind("ode_solve", lax.reshape(y0, (1,)), np.array([0.0, 0.5]),
                                     k, **ODE), [_x(), _x(1.5)]),
}
NOT_DIFFERENTIATED = {"while_loop": "no reverse mode under jit (as JAX)"}
# The f64 scalars of elementwise primitives with a scalar rule over the kernel IR's builder
# (lgamma's and gamma's derivatives need polygamma, a host step: they run in the batch above).
STRAIGHT = [name for name in CASES if name.endswith("_f64") and name[:-4] in PRIMITIVES
            and PRIMITIVES[name[:-4]].category == "elementwise"
            and PRIMITIVES[name[:-4]].scalar is not None and name[:-4] not in ("lgamma", "gamma")]


def _prim(case: str) -> str:
    for name in sorted(PRIMITIVES, key=len, reverse=True):
        if case == name or case.startswith(name + "_"):
            return name
    raise KeyError(case)


def _grads(name, fn, args):
    """The gradient of the sum of fn's float outputs w.r.t. its float operands, or ()."""
    floats = tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    if name in NOT_DIFFERENTIATED or not floats or _prim(name) not in vjp_rules or \
            not any(np.dtype(getattr(o, "dtype", np.float64)).kind == "f" for o in outs):
        return ()

    def total(*xs):
        res = fn(*xs)
        res = res if isinstance(res, tuple) else (res,)
        return sum(np.sum(r) for r in res if np.dtype(r.dtype).kind == "f")
    return fg.grad(total, argnums=floats)(*args)


def _batch(names):
    def run(inputs):
        return {name: (CASES[name][0](*inputs[name]), _grads(name, CASES[name][0],
                                                              inputs[name]))
                for name in names}
    run.__name__ = "zero_d_batch"
    return run


def _run(names, backend, compiler=None):
    """Each case's (result, gradient) on backend; a failing batch names its failing cases.
    compiler: the kind of executable the batch must compile to (Executable.kind)."""
    inputs = {name: tuple(CASES[name][1]) for name in names}
    jitted = fg.jit(_batch(names), backend=backend)
    try:
        with np.errstate(all="ignore"):
            kind = compiler and jitted.lower(inputs).compiled().kind
            result = jitted(inputs)
    except Exception:
        failing = []
        for name in names:
            try:
                with np.errstate(all="ignore"):
                    fg.jit(_batch([name]), backend=backend)({name: inputs[name]})
            except Exception as e:  # noqa: BLE001 - reported, with its case
                failing.append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
        raise AssertionError(f"{backend} fails on:\n" + "\n".join(failing)) from None
    assert kind == compiler, f"the batch compiled to {kind}, not {compiler}"
    return result


def _leaves(tree):
    return fg.tree.flatten(tree)[0]


def _disagreements(names, got, want, backend) -> list:
    wrong = []
    for name in names:
        for i, (a, b) in enumerate(zip(_leaves(got[name]), _leaves(want[name]))):
            a, b = np.asarray(a), np.asarray(b)
            what = f"{name} leaf {i} on {backend}"
            if a.shape != b.shape or a.dtype != b.dtype:
                wrong.append(f"{what}: {a.dtype}{list(a.shape)}, interp {b.dtype}{list(b.shape)}")
            elif not np.allclose(a, b, rtol=2e-6 if a.dtype == np.float32 else 1e-12,
                                 atol=0, equal_nan=True):
                wrong.append(f"{what}: {a}, interp {b}")
    return wrong


@pytest.fixture(scope="module")
def reference():
    return _run(list(CASES), "interp")


def test_every_primitive_has_a_0d_case_or_a_reason():
    covered = {_prim(name) for name in CASES}
    assert sorted(set(PRIMITIVES) - covered - set(NO_0D)) == []
    assert sorted(covered & set(NO_0D)) == []


def test_interp_results_are_0d(reference):
    """The reference itself: a 0-d operand gives a 0-d result, as the registry's type says."""
    for name, (fn, args) in CASES.items():
        types = fg.make_ir(fn)(*args).results
        got = _leaves(reference[name][0])
        assert [np.shape(x) for x in got] == [t.type.shape for t in types], name
        assert [str(np.asarray(x).dtype) for x in got] == [t.type.np_dtype.name for t in types]


@pytest.mark.parametrize("backend", ["eager", "numba"])
def test_backends_agree_on_0d(backend, reference):
    names = list(CASES)
    wrong = _disagreements(names, _run(names, backend), reference, backend)
    assert not wrong, "\n".join(wrong)


def test_kernel_ir_agrees_on_0d(reference):
    got = _run(STRAIGHT, "numba", compiler="kernel_ir")
    wrong = _disagreements(STRAIGHT, got, reference, "numba (kernel IR)")
    assert not wrong, "\n".join(wrong)
