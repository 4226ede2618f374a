"""Eager engine and IR autodiff agree: value_and_grad of a zoo of programs, run by the eager
tape engine (fg.jit(..., backend="eager") just calls it) and by the IR autodiff pass executed by
the interpreter (backend="interp"), compared with fusegrad.testing.assert_backends_agree.

The zoo covers every differentiable primitive (a test checks it on the traced programs), every
composite (softmax, log_softmax,
logsumexp, cross_entropy, layer_norm, gelu in both forms), broadcasting, float32 and float64,
pytree arguments and tuple argnums. Each program ends in `total`, a weighted sum, so every
output element gets a different cotangent.
"""

import numpy as np
import pytest
import scipy.linalg

from domains import Domains, case_prim, custom_mul_sin, elementwise_cases, primitive_cases

import fusegrad as fg
import fusegrad.nn as fnn
import fusegrad.scipy  # noqa: F401 - scipy.linalg on tensors and tracers
from fusegrad import lax
from fusegrad.formulas import vjp_rules
from fusegrad.testing import assert_backends_agree, check_grads
from fusegrad.transforms import value_and_grad

rng = np.random.default_rng(2024)


def normal(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def positive(*shape, dtype=np.float64):
    return rng.uniform(0.5, 2.0, shape).astype(dtype)


def distinct(*shape):
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.1 - n * 0.05 + 0.01).reshape(shape)


def total(y):
    """A scalar whose cotangent differs per element: sum(sin(y))."""
    return np.sum(np.sin(y))


IDX = np.array([2, 0, 2, 1])
IDX2 = np.array([[0, 2], [1, 1], [2, 0]])
TARGETS = np.array([2, 0, 1, 1])
A, B, V = normal(3, 4), normal(4, 2), normal(4)
A32, B32 = normal(3, 4, dtype=np.float32), normal(4, 2, dtype=np.float32)
P = positive(2, 3)

# name -> (function, args, argnums); prims listed in `covers` below
PROGRAMS = {
    "neg": (lambda x: total(-x), (A,), 0),
    "abs": (lambda x: total(np.abs(x)), (A + np.sign(A) * 0.1,), 0),
    "exp": (lambda x: total(np.exp(x)), (A,), 0),
    "log": (lambda x: total(np.log(x)), (P,), 0),
    "log1p": (lambda x: total(np.log1p(x)), (P,), 0),
    "expm1": (lambda x: total(np.expm1(x)), (A,), 0),
    "sqrt": (lambda x: total(np.sqrt(x)), (P,), 0),
    "rsqrt": (lambda x: total(lax.rsqrt(x)), (P,), 0),
    "sin_cos": (lambda x: total(np.sin(x) * np.cos(x)), (A,), 0),
    "tanh": (lambda x: total(np.tanh(x)), (A,), 0),
    "sigmoid": (lambda x: total(fnn.sigmoid(x)), (A,), 0),
    "erf": (lambda x: total(lax.erf(x)), (A,), 0),
    "add_broadcast": (lambda x, b: total(x + b), (A, V), (0, 1)),
    "sub_broadcast_col": (lambda x, c: total(x - c), (A, normal(3, 1)), (0, 1)),
    "mul_scalar": (lambda x: total(x * 3.0), (A,), 0),
    "mul_broadcast": (lambda x, y: total(x * y), (normal(2, 1, 4), normal(3, 1)), (0, 1)),
    "div": (lambda x, y: total(x / y), (A, positive(3, 4)), (0, 1)),
    "rdiv_scalar": (lambda x: total(2.0 / x), (P,), 0),
    "pow_both": (lambda x, y: total(x ** y), (P, normal(2, 3)), (0, 1)),
    "pow_int_exponent": (lambda x: total(x ** 3), (A,), 0),
    "square_reciprocal": (lambda x: total(np.square(x) + np.reciprocal(x)), (P,), 0),
    "maximum": (lambda x, y: total(np.maximum(x, y)), (distinct(3, 4), distinct(3, 4) + 0.03),
                (0, 1)),
    "minimum": (lambda x, y: total(np.minimum(x, y)), (distinct(3, 4), distinct(3, 4) + 0.03),
                (0, 1)),
    "relu": (lambda x: total(fnn.relu(x)), (A + np.sign(A) * 0.1,), 0),
    "remainder": (lambda x, y: total(x % y + np.mod(x, -y)), (3 * A, positive(3, 4)), (0, 1)),
    "fmod": (lambda x, y: total(np.fmod(x, y) * y), (3 * A, normal(3, 4)), (0, 1)),
    "rounding": (lambda x: total(x * (np.floor(x) + np.ceil(x) + np.trunc(x) + np.rint(x))
                                 + np.round(x, 1)), (3 * A,), 0),
    "where": (lambda x, y: total(np.where(x > 0, x * y, y)), (A, normal(3, 4)), (0, 1)),
    "clip": (lambda x: total(np.clip(x, -0.5, 0.5)), (distinct(3, 4) + 0.003,), 0),
    "astype_f32": (lambda x: total(x.astype(np.float32)), (A,), 0),
    "broadcast_to": (lambda x: total(np.broadcast_to(x, (3, 4))), (V,), 0),
    "reshape": (lambda x: total(x.reshape(6, 2) @ np.ones((2, 2))), (A,), 0),
    "transpose": (lambda x: total(x.T @ A), (A,), 0),
    "getitem_slice": (lambda x: total(x[1:, ::2]), (A,), 0),
    "getitem_int_array": (lambda x: total(x[:, np.array([3, 0, 3])]), (A,), 0),
    "getitem_negative_step": (lambda x: total(x[::-1]), (A,), 0),
    "pad": (lambda x: total(lax.pad(x, (1, 0), (0, 2), (0, 1))), (normal(2, 3),), 0),
    "concatenate": (lambda x, y: total(np.concatenate([x, y, x], axis=1)),
                    (normal(2, 1), normal(2, 3)), (0, 1)),
    "stack": (lambda x, y: total(np.stack([x, y])), (V, normal(4)), (0, 1)),
    "take": (lambda x: total(np.take(x, IDX, axis=1)), (normal(2, 3),), 0),
    "take_along_axis": (lambda x: total(np.take_along_axis(x, IDX2, axis=1)), (normal(3, 3),),
                        0),
    "scatter_add": (lambda g: total(lax.scatter_add(IDX, g, 1, (2, 3))), (normal(2, 4),), 0),
    "scatter_add_along_axis": (
        lambda g: total(lax.scatter_add_along_axis(IDX2, g, 1, (3, 4))), (normal(3, 2),), 0),
    "sum_axis": (lambda x: total(np.sum(x, axis=0)), (A,), 0),
    "mean_var": (lambda x: np.mean(x) + np.var(x, axis=1).sum(), (A,), 0),
    "max_axis": (lambda x: total(np.max(x, axis=1)), (distinct(3, 4),), 0),
    "min_all": (lambda x: np.min(x) * 2.0, (distinct(3, 4),), 0),
    "max_ties": (lambda x: np.max(x), (np.array([1.0, 3.0, 3.0, 2.0]),), 0),
    "prod": (lambda x: total(np.prod(x, axis=1)), (P,), 0),
    "prod_with_zero": (lambda x: np.prod(x), (np.array([2.0, 0.0, 3.0]),), 0),
    "cumsum": (lambda x: total(np.cumsum(x, axis=1)), (A,), 0),
    "norm": (lambda x: np.linalg.norm(x), (A,), 0),
    "matmul": (lambda a, b: total(a @ b), (A, B), (0, 1)),
    "matmul_vec": (lambda a, v: total(a @ v), (A, V), (0, 1)),
    "matmul_batched": (lambda a, b: total(a @ b), (normal(2, 3, 4), B), (0, 1)),
    "softmax": (lambda x: total(fnn.softmax(x, axis=1)), (A,), 0),
    "log_softmax": (lambda x: total(fnn.log_softmax(x, axis=0)), (A,), 0),
    "logsumexp": (lambda x: total(fnn.logsumexp(x, axis=1)), (A * 10,), 0),
    "cross_entropy": (lambda x: fnn.cross_entropy(x, TARGETS), (normal(4, 3),), 0),
    "layer_norm": (lambda x: total(fnn.layer_norm(x)), (A,), 0),
    "layer_norm_2d": (lambda x: total(fnn.layer_norm(x, ndim=2, eps=1e-3)), (normal(2, 2, 3),),
                      0),
    "gelu_erf": (lambda x: total(fnn.gelu(x)), (A,), 0),
    "gelu_tanh": (lambda x: total(fnn.gelu(x, approximate=True)), (A,), 0),
    "softplus": (lambda x: total(fnn.softplus(x)), (A,), 0),
    "float32_mlp": (lambda w, b, x: total(np.tanh(x @ w + b)),
                    (B32, normal(2, dtype=np.float32), A32), (0, 1)),
    "float32_weak_scalars": (lambda x: total(x * 0.5 + 2.0) / 3, (A32,), 0),
    "mixed_precision": (lambda x, y: total(x * y), (A32, A), (0, 1)),
    "pytree_params": (lambda p, x: total(np.tanh(x @ p["w"] + p["b"])) + np.sum(p["s"][0] ** 2),
                      ({"w": B, "b": normal(2), "s": [V, None]}, A), 0),
    "pytree_argnums_tuple": (lambda p, q: total(p[0] * q["a"] + p[1]),
                             ((V, normal(4)), {"a": normal(4)}), (0, 1)),
    "fan_out": (lambda x: total(x * x + np.exp(x) * x - x), (A,), 0),
    "mlp_cross_entropy": (
        lambda w1, w2, x: fnn.cross_entropy(fnn.gelu(x @ w1) @ w2, TARGETS),
        (normal(3, 5), normal(5, 3), normal(4, 3)), (0, 1)),
    "attention_like": (
        lambda q, k, v: total(fnn.softmax(q @ k.T / 2.0, axis=-1) @ v),
        (normal(3, 4), normal(5, 4), normal(5, 2)), (0, 1, 2)),
    "unused_argument": (lambda x, y: total(x), (A, B), (0, 1)),
    "custom_vjp": (lambda x, y: total(custom_mul_sin(x, y) * x), (A, normal(3, 4)), (0, 1)),
}

# One program per differentiable elementwise primitive, from its registry domain
# (tests/domains.py), so a new elementwise primitive joins the zoo without an edit here; and
# one per other primitive case of tests/domains.py that no program above traces.
for _name, (_f, _xs) in elementwise_cases(Domains(seed=11, margin=0.3)).items():
    PROGRAMS[f"prim_{_name}"] = (lambda *xs, f=_f: total(f(*xs)), tuple(_xs),
                                 tuple(range(len(_xs))))
# A traced while_loop has no reverse mode (formulas/control.py): its program is one whose
# gradient does not flow through the loop.
PROGRAMS["while_loop_count"] = (
    lambda x: total(x) * lax.while_loop(lambda c: c < 3, lambda c: c + 1, 0), (A,), (0,))
for _name, (_f, _xs) in primitive_cases(Domains(seed=13, margin=0.3)).items():
    if _name == "while_loop":
        continue
    if _name == case_prim(_name) and f"prim_{_name}" not in PROGRAMS:   # layout variants: no
        _floats = tuple(k for k, x in enumerate(_xs) if np.asarray(x).dtype.kind == "f")
        PROGRAMS[f"case_{_name}"] = (lambda *xs, f=_f: total(f(*xs)), tuple(_xs), _floats)

# Linear algebra (issue 14): the LAPACK primitives through NumPy's and SciPy's names.
_SQ = np.random.default_rng(12).standard_normal((3, 3)) + 3 * np.eye(3)
_SPD = _SQ @ _SQ.T
PROGRAMS.update({
    "linalg_solve_det": (lambda a, b: total(np.linalg.solve(a, b)) + np.linalg.det(a),
                         (_SQ, _SQ[:, :2]), (0, 1)),
    "linalg_factorizations": (
        lambda s, t: total(np.linalg.cholesky(s)) + total(np.linalg.eigh(s)[0])
        + total(np.linalg.svd(t, compute_uv=False)) + total(np.linalg.qr(t)[1]), (_SPD, _SQ[:, :2]),
        (0, 1)),
    "linalg_scipy": (lambda a, b: total(scipy.linalg.solve_triangular(a, b, lower=True))
                     + total(scipy.linalg.expm(0.3 * a)), (_SQ, _SQ[:, :2]), (0, 1)),
})


def _traced_prims(name) -> set:
    fun, args, argnums = PROGRAMS[name]
    return {op.prim for op in fg.make_ir(value_and_grad(fun, argnums=argnums))(*args).ops}


def test_zoo_is_large_and_covers_every_rule():
    assert len(PROGRAMS) >= 50
    traced = set().union(*map(_traced_prims, PROGRAMS))
    assert sorted(set(vjp_rules) - traced) == []


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_eager_and_ir_autodiff_agree(name):
    fun, args, argnums = PROGRAMS[name]
    single = any(leaf.dtype == np.float32 for leaf in _leaves(args))
    tol = {"rtol": 2e-5, "atol": 1e-6} if single else {"rtol": 1e-9, "atol": 1e-12}
    report = assert_backends_agree(value_and_grad(fun, argnums=argnums), *args,
                                   backends=("eager", "interp"), **tol)
    value, _ = report.outputs["interp"]
    assert np.shape(value) == ()


def _leaves(tree):
    from fusegrad.tree import flatten
    return [np.asarray(x) for x in flatten(tree)[0]]


@pytest.mark.parametrize("name", ["float32_mlp"])
def test_all_three_backends_agree_on_gradients(name):
    """A smoke test of compiled gradients (numba compiles are slow; the zoo runs above)."""
    fun, args, argnums = PROGRAMS[name]
    single = any(leaf.dtype == np.float32 for leaf in _leaves(args))
    tol = {"rtol": 2e-5, "atol": 1e-6} if single else {"rtol": 1e-9, "atol": 1e-12}
    assert_backends_agree(value_and_grad(fun, argnums=argnums), *args, **tol)


@pytest.mark.parametrize("name", ["tanh", "matmul", "softmax", "layer_norm", "pow_both",
                                  "attention_like"])
def test_second_order_against_finite_differences(name):
    fun, args, _ = PROGRAMS[name]
    check_grads(fun, args, order=2)


# -- the helpers themselves -------------------------------------------------------------------

def _broken_pass(fn):
    """A deliberately wrong optimization: every tanh becomes sin."""
    from fusegrad.ir.core import Builder
    b = Builder(fn.name)
    env = {p: b.param(p.type, p.hint) for p in fn.params}
    for op in fn.ops:
        prim = "sin" if op.prim == "tanh" else op.prim
        outs = b.add(prim, [env[v] for v in op.inputs], op.params, op.loc, op.note)
        env.update(zip(op.outputs, outs))
    return b.build([env[r] for r in fn.results])


def model(x):
    return np.sum(np.tanh(x) * 2.0)


def test_disagreement_names_the_output_op_and_blames_a_pass(monkeypatch):
    from fusegrad.passes import pipeline
    monkeypatch.setattr(pipeline, "PASSES", pipeline.PASSES + [("broken", _broken_pass)])
    with pytest.raises(AssertionError) as info:
        assert_backends_agree(model, A, backends=("eager", "interp"))
    text = str(info.value)
    assert "backends 'interp' and 'eager' disagree on model" in text
    assert "output leaf 0: shape [] float64" in text and "max abs error" in text
    assert "reduce_sum" in text and "test_agreement.py:" in text
    assert "suspect an optimization pass" in text


def test_per_value_hook_finds_the_first_diverging_ir_value(monkeypatch):
    """A backend whose executable has debug_values() is compared value by value."""
    import fusegrad.codegen
    from fusegrad.passes.pipeline import optimize
    from fusegrad.runtime.interpreter import Interpreted
    from fusegrad.testing import debug_values

    class SkewedTanh(Interpreted):
        def __init__(self, fn, log=None):
            super().__init__(optimize(fn))

        def debug_values(self, leaves):
            env = debug_values(self.ir, leaves)
            for op in self.ir.ops:
                if op.prim == "tanh":
                    env[op.out] = env[op.out] + 1.0
            return env

        def __call__(self, leaves):
            env = self.debug_values(leaves)
            return [env[r] + 1.0 for r in self.ir.results]

    monkeypatch.setattr(fusegrad.codegen, "compile_numba", SkewedTanh, raising=False)
    with pytest.raises(AssertionError, match=r"first diverging IR value %\d+ = tanh %x : "
                                             r"f64\[3,4\] at test_agreement\.py:\d+"):
        assert_backends_agree(model, A, backends=("interp", "numba"))


def test_numba_is_skipped_with_a_note_until_codegen_lands():
    from fusegrad.testing import numba_unavailable
    reason = numba_unavailable()
    if reason is None:
        pytest.skip("the numba backend is available")
    with pytest.warns(UserWarning, match="skipping backend 'numba'"):
        report = assert_backends_agree(model, A)
    assert set(report.outputs) == {"eager", "interp"} and "numba" in report.skipped


def test_check_grads_names_the_wrong_argument(monkeypatch):
    monkeypatch.setitem(vjp_rules, "tanh", lambda g, out, x: (g * (1 - out),))
    with pytest.raises(AssertionError) as info:
        check_grads(lambda x, y: np.sum(np.tanh(x)) + np.sum(y * y), (A, B), order=1)
    text = str(info.value)
    assert "order-1 reverse-mode derivative" in text
    assert "argument 0" in text and "<-- wrong" in text.split("argument 0")[1].split("\n")[0]
    assert "<-- wrong" not in text.split("argument 1")[1]


def test_check_grads_under_jit_and_for_vector_outputs():
    check_grads(lambda x: np.tanh(x) * x, (V,), order=2, backend="interp")
