"""The formula table: coverage, the shared helpers, and gradcheck of every rule at order 1 and 2.

Each row of CASES calls one primitive through fusegrad.lax on eager float64 tensors with seeded
random inputs from a declared domain (positive_input for log/sqrt/pow, away_from_zero for
abs/prod, distinct values for max/min), so no finite difference straddles a kink. Order 2 checks
the gradient function built with create_graph=True.
"""

import inspect

import numpy as np
import pytest

from domains import Domains, case_prim, primitive_cases
from fusegrad import lax
from fusegrad.formulas import (
    NON_DIFFERENTIABLE,
    _vjp,
    node_names,
    sum_to_shape,
    unbroadcast_and_cast,
    vjp_rules,
)
from fusegrad.ir.primitives import PRIMITIVES
from fusegrad.runtime.engine import grad
from fusegrad.runtime.grad_mode import enable_grad
from fusegrad.runtime.gradcheck import gradcheck
from fusegrad.runtime.graph import SavedTensor, _Meta, input_mode, rule_reads
from fusegrad.runtime.tensor import Tensor, tensor

_domains = Domains(seed=1234, margin=0.2)
rng = _domains.rng
normal, positive_input = _domains.normal, _domains.positive
away_from_zero, distinct = _domains.away_from_zero, _domains.distinct


CASES = primitive_cases(_domains)
_prim = case_prim


def leaves(arrays):
    return [tensor(a, requires_grad=True) if a.dtype.kind == "f" else a for a in arrays]


def test_every_differentiable_primitive_has_a_rule_and_a_name():
    assert set(vjp_rules) | NON_DIFFERENTIABLE == set(PRIMITIVES)
    assert not set(vjp_rules) & NON_DIFFERENTIABLE
    assert set(node_names) == set(vjp_rules)
    assert all(name.endswith("Backward") for name in node_names.values())


def test_every_rule_has_a_gradcheck_row():
    covered = {_prim(c) for c in CASES}
    covered |= {"matmul" if c.startswith("matmul") else c for c in covered}
    assert set(vjp_rules) <= covered


def test_chapter_node_names():
    assert node_names["mul"] == "MulBackward"
    assert node_names["reduce_sum"] == "SumBackward"
    assert node_names["convert"] == "ToBackward"
    assert node_names["logistic"] == "SigmoidBackward"
    assert node_names["cross_entropy"] == "CrossEntropyBackward"
    assert node_names["slice"] == "SliceBackward"
    assert node_names["take"] == "IndexSelectBackward"
    assert node_names["concatenate"] == "CatBackward"


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradcheck_order_1(case):
    fn, arrays = CASES[case]
    result = gradcheck(fn, leaves(arrays))
    assert result.passed, result.report


def _first_order(fn, arrays):
    """x -> grad(sum(fn(x) * v), x) with create_graph: the function order 2 checks."""
    out = fn(*[tensor(a) for a in arrays])
    v = tensor(np.random.default_rng(7).standard_normal(out.shape))

    def gradient(*xs):
        with enable_grad():
            diff = [x for x in xs if isinstance(x, Tensor)]
            grads = grad(fn(*xs), diff, v, create_graph=True)
        return tuple(tensor(np.zeros(x.shape)) if g is None else g for x, g in zip(diff, grads))
    return gradient


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradcheck_order_2(case):
    fn, arrays = CASES[case]
    result = gradcheck(_first_order(fn, arrays), leaves(arrays), atol=1e-4)
    assert result.passed, result.report


SUM_TO_SHAPE = [((2, 3), [[1, 2, 3], [4, 5, 6]]), ((3,), [5, 7, 9]), ((1, 3), [[5, 7, 9]]),
                ((2, 1), [[6], [15]]), ((), 21)]


@pytest.mark.parametrize("target, expected", SUM_TO_SHAPE)
def test_sum_to_shape_table(target, expected):
    g = np.array([[1.0, 2, 3], [4, 5, 6]])
    out = sum_to_shape(g, target)
    assert np.shape(out) == target
    np.testing.assert_array_equal(out, expected)


def test_sum_to_shape_returns_its_argument_when_nothing_was_broadcast():
    g = np.ones((2, 3))
    assert sum_to_shape(g, (2, 3)) is g


def test_sum_to_shape_rejects_too_few_dimensions():
    with pytest.raises(ValueError, match=r"cannot reduce gradient of shape \[3\] to \[2, 3\]"):
        sum_to_shape(np.ones(3), (2, 3))


def test_unbroadcast_and_cast_sums_and_casts():
    out = unbroadcast_and_cast(np.ones((4, 3)), (4, 1), np.float32)
    assert out.dtype == np.float32 and out.shape == (4, 1)
    np.testing.assert_array_equal(out, np.full((4, 1), 3.0))
    assert unbroadcast_and_cast(np.ones(3), (3,), "f64").dtype == np.float64


def test_rules_run_on_plain_numpy_arrays():
    g, x, y = np.ones((2, 3)), np.full((2, 3), 2.0), np.full((3,), 5.0)
    gx, gy = vjp_rules["mul"](g, x * y, x, y)
    np.testing.assert_array_equal(gx, np.full((2, 3), 5.0))
    np.testing.assert_array_equal(gy, np.full((2, 3), 2.0))  # broadcast shape: driver sums
    (gx,) = vjp_rules["tanh"](g, np.tanh(x), x)
    np.testing.assert_allclose(gx, 1 - np.tanh(2.0) ** 2)


def test_saved_state_is_what_the_rule_reads():
    assert rule_reads(vjp_rules["add"]) == (None, (None, None), "data")
    assert rule_reads(vjp_rules["exp"]) == ("data", (None,), "data")  # saves its output
    assert rule_reads(vjp_rules["reduce_sum"]) == (None, ("meta",), "data")  # the shape only
    assert rule_reads(vjp_rules["mul"]) == (None, ("data", "data"), "data")
    assert rule_reads(vjp_rules["cross_entropy"])[1] == ("data", "data")


# -- what a rule reads: its reads= declaration, which the eager engine saves by ----------------

class _UndeclaredRead(Exception):
    """Not an AttributeError or TypeError, so NumPy's protocol lookups do not swallow it."""


class _Unread:
    """Stands in for an argument a rule's declaration leaves out: any use of it raises."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        raise _UndeclaredRead(f"{self._name}.{attr}")

    def _use(self, *args, **kwargs):
        raise _UndeclaredRead(self._name)


for _op in ("array", "array_ufunc", "array_function", "len", "iter", "getitem", "contains",
            "bool", "float", "int", "index", "eq", "ne", "lt", "le", "gt", "ge", "neg", "pos",
            "abs", "invert", "add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
            "rtruediv", "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow", "matmul",
            "rmatmul", "and", "rand", "or", "ror", "xor", "rxor"):
    setattr(_Unread, f"__{_op}__", _Unread._use)


def _rule_calls(case, monkeypatch):
    """The case's rule and each (g, args, params) the eager engine calls it with in a backward,
    with every argument: the engine runs an undeclared spy in its place."""
    fn, arrays = CASES[case]
    prim = _prim(case)
    rule, calls = vjp_rules[prim], []

    def spy(g, *args, **params):
        calls.append((g, args, params))
        return rule(g, *args, **params)
    monkeypatch.setitem(vjp_rules, prim, spy)
    xs = leaves(arrays)
    out = fn(*xs)
    v = tensor(np.random.default_rng(3).standard_normal(out.shape))
    grad(out, [x for x in xs if isinstance(x, Tensor)], v)
    assert calls
    return rule, calls


def _arg_names(rule, n) -> list:
    """The names of a rule's n arguments after g: out, x, y... or xs[0], xs[1]..."""
    params = list(inspect.signature(rule).parameters.values())[1:]
    names = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    rest = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "?")
    return (names + [f"{rest}[{k}]" for k in range(n)])[:n]


def _stand_ins(rule, args, modes):
    """args as a node saves them by modes: _Unread where not saved, _Meta where only .shape."""
    return [_Unread(name) if mode is None
            else _Meta(a.shape, a.dtype) if mode == "meta" and hasattr(a, "shape") else a
            for a, name, mode in zip(args, _arg_names(rule, len(args)), modes)]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        x is None if y is None else x is not None and np.array_equal(x, y, equal_nan=True)
        for x, y in zip(a, b))


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rule_reads_only_what_it_declares(case, monkeypatch):
    """Sufficient: a rule gives the same cotangents when every argument its declaration leaves
    out raises on any use and every `.shape` one is a _Meta. Minimal: one step less of any
    declared argument (its value -> a _Meta, a _Meta -> nothing) breaks it."""
    rule, calls = _rule_calls(case, monkeypatch)
    reads = getattr(rule, "reads", None)
    assert reads is not None, f"{rule.__name__} declares no reads= in formulas.py"
    for g, args, params in calls:
        modes = [rule_reads(rule)[0]] + [input_mode(rule, i) for i in range(len(args) - 1)]
        full, what = rule(g, *args, **params), f"{rule.__name__} (reads={reads!r})"
        try:
            declared = rule(g, *_stand_ins(rule, args, modes), **params)
        except _UndeclaredRead as e:
            pytest.fail(f"{what} uses {e}, undeclared")
        except Exception as e:
            pytest.fail(f"{what} fails on what it declares: {type(e).__name__}: {e}")
        assert _same(declared, full), f"{what} gives other cotangents on what it declares"
        for i, (mode, name) in enumerate(zip(modes, _arg_names(rule, len(args)))):
            if mode is None or (mode == "data" and not hasattr(args[i], "shape")):
                continue  # a Python scalar is saved as itself, even for .shape
            less = modes[:i] + ["meta" if mode == "data" else None] + modes[i + 1:]
            try:
                with np.errstate(all="ignore"):
                    works = _same(rule(g, *_stand_ins(rule, args, less), **params), full)
            except Exception:
                works = False
            fewer = f"{name}.shape" if mode == "data" else f"no {name}"
            assert not works, f"{what} works as well with {fewer}: over-declared"


def test_a_variadic_rule_declares_all_its_inputs_at_once():
    assert rule_reads(vjp_rules["concatenate"]) == (None, (), "meta")  # reads="xs.shape"
    a, b = tensor(np.ones((2, 1)), requires_grad=True), tensor(np.ones((2, 3)), requires_grad=True)
    node = lax.concatenate([a, b], 1).grad_fn
    assert node.saved[0] is None and [type(s) for s in node.saved[1:]] == [_Meta, _Meta]
    assert [s.shape for s in node.saved[1:]] == [(2, 1), (2, 3)]


@pytest.mark.parametrize("reads", ["z", "out x y", "x.dtype", "axis", "g", "x x.shape", "out."])
def test_a_declaration_names_the_rules_own_arguments_once(reads, monkeypatch):
    def bad(g, out, x, *, axis=0):
        return (g,)
    monkeypatch.setitem(vjp_rules, "exp", vjp_rules["exp"])
    monkeypatch.setitem(node_names, "exp", node_names["exp"])
    _vjp("exp", "ExpBackward", reads=reads)(bad)  # restored by monkeypatch
    assert vjp_rules["exp"] is bad and bad.reads == reads
    with pytest.raises(ValueError, match=r"bad .*is not one of its arguments \(out, x\)"):
        rule_reads(bad)
    with pytest.raises(ValueError, match="is not one of its arguments"):  # at first use
        lax.exp(tensor([1.0], requires_grad=True))


def test_an_undeclared_rule_gets_every_argument(monkeypatch):
    seen = []

    def mul(g, out, x, y):
        seen.append((out, x, y))
        return g * y, g * x

    def add(g, out, x, y):
        seen.append((out, x, y))
        return g, g
    monkeypatch.setitem(vjp_rules, "mul", mul)
    monkeypatch.setitem(vjp_rules, "add", add)
    assert rule_reads(mul) == rule_reads(add) == ("data", (), "data")
    x = tensor([1.0, 2.0], requires_grad=True)
    y = -x  # NegBackward saves nothing, so y may be updated in place
    y += 1.0  # rebased on a copy of y's old value, since an undeclared add reads it
    z = y * 3.0
    assert [type(s) for s in z.grad_fn.saved] == [SavedTensor, SavedTensor, float]
    z.sum().backward()
    np.testing.assert_array_equal(x.grad, [-3.0, -3.0])
    (z_out, y_seen, three), (y_out, old, one) = seen
    np.testing.assert_array_equal(z_out, [0.0, -3.0])
    np.testing.assert_array_equal(old, [-1.0, -2.0])
    np.testing.assert_array_equal(y_seen, [0.0, -1.0])
    np.testing.assert_array_equal(y_out, [0.0, -1.0])
    assert one == 1.0 and three == 3.0


def test_non_differentiable_results_have_no_history():
    x = tensor([-1.0, 0.5, 2.0], requires_grad=True)
    for result in (x > 0, x == 0.5, lax.sign(x), lax.argmax(x, 0), lax.ne(x, x)):
        assert not result.requires_grad and result.grad_fn is None


# -- numerical stability of the composites ---------------------------------------------------

def test_logsumexp_large_and_all_minus_infinity():
    x = tensor([1000.0, 1000.0], requires_grad=True)
    y = lax.logsumexp(x, (0,))
    assert y.item() == 1000.6931471805599
    y.backward()
    np.testing.assert_array_equal(x.grad, [0.5, 0.5])
    z = tensor([-np.inf, -np.inf], requires_grad=True)
    w = lax.logsumexp(z, (0,))
    w.backward()
    assert w.item() == -np.inf and not np.isnan(z.grad.data).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_and_softplus_are_finite_and_exact_in_the_tails(dtype):
    from fusegrad import nn
    x = tensor([-1000.0, 0.0, 1000.0], dtype=dtype, requires_grad=True)
    s = nn.sigmoid(x)
    s.sum().backward()
    np.testing.assert_array_equal(s, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(x.grad, [0.0, 0.25, 0.0])
    assert x.grad.dtype == dtype
    x.zero_grad()
    p = nn.softplus(x)
    p.sum().backward()
    np.testing.assert_allclose(p, [0.0, np.log(2.0), 1000.0], rtol=1e-6)
    np.testing.assert_array_equal(x.grad, [0.0, 0.5, 1.0])  # = sigmoid(x), exactly


def test_softmax_family_is_finite_for_large_inputs():
    from fusegrad import nn
    x = tensor([[1000.0, 0.0, -1000.0]], requires_grad=True)
    (nn.softmax(x) * tensor([[1.0, 2.0, 3.0]])).sum().backward()
    assert np.isfinite(x.grad.data).all()
    y = tensor([[1000.0, 0.0]], requires_grad=True)
    nn.log_softmax(y).sum().backward()
    np.testing.assert_allclose(y.grad, [[-1.0, 1.0]])
    z = tensor([[1000.0, -1000.0]], requires_grad=True)
    loss = nn.cross_entropy(z, np.array([1]))
    loss.backward()
    assert loss.item() == 2000.0
    np.testing.assert_array_equal(z.grad, [[1.0, -1.0]])


def test_pow_guards():
    x = tensor([0.0, 2.0], requires_grad=True)
    (x ** 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0])  # d/dx x**0 is 0, even at 0
    base, exponent = tensor([0.0, 2.0], requires_grad=True), tensor([2.0, 3.0],
                                                                    requires_grad=True)
    (base ** exponent).sum().backward()
    np.testing.assert_array_equal(base.grad, [0.0, 12.0])
    np.testing.assert_allclose(exponent.grad, [0.0, 8 * np.log(2.0)])  # not 0 * log 0 = nan


def test_pow_guards_survive_differentiation():
    x = tensor(0.0, requires_grad=True)
    (g1,) = grad(x ** 0.0, x, create_graph=True)
    (g2,) = grad(g1, x, allow_unused=True)
    assert g1.item() == 0.0 and (g2 is None or g2.item() == 0.0)
    e = tensor(0.0, requires_grad=True)
    (ge,) = grad(x ** e, e, create_graph=True)
    (gee,) = grad(ge, e, allow_unused=True)
    assert ge.item() == 0.0 and (gee is None or gee.item() == 0.0)
