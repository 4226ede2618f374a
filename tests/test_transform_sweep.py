"""Forward mode and vmap over every primitive of the registry (tests/domains.py's rows).

For every differentiable primitive: jvp against central finite differences, and the identity
<jvp(v), w> = <v, vjp(w)> between the derived forward mode and the table's reverse mode. For
every primitive row: vmap against a Python loop over three examples drawn from its domains.
Eager and interp run the full sweep; numba compiles a representative batch together, first
call, in poison mode (conftest.py).
"""

import warnings

import numpy as np
import pytest
from domains import Domains, case_prim, primitive_cases

import fusegrad as fg
from fusegrad.testing import assert_backends_agree

CASES = primitive_cases(Domains(1234, 0.2))
BATCH = [primitive_cases(Domains(k, 0.2)) for k in (5, 6, 7)]


# lax.matmul of a 1-D operand is an eager-only row (traced code reaches matmul through `@`,
# which makes the vector a matrix first)
EAGER_ONLY = {"matmul_vec_left", "matmul_vec_right"}


def _skip(case, backend):
    if backend != "eager" and case in EAGER_ONLY:
        pytest.skip("lax.matmul takes rank >= 2 operands when traced")


def _floats(arrays):
    return [i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]


def _outs(f, args) -> list:
    return [np.asarray(o) for o in fg.tree.flatten(f(*args))[0]]


def _directions(arrays, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(np.shape(a)) if i in _floats(arrays) else np.zeros_like(a)
            for i, a in enumerate(arrays)]


def _jvp_and_vjp(f, arrays, backend, with_vjp):
    v = _directions(arrays, 1)
    out = _outs(f, arrays)
    w = [np.random.default_rng(2 + k).standard_normal(o.shape) if o.dtype.kind == "f" else
         np.zeros(o.shape, o.dtype) for k, o in enumerate(out)]
    fl = _floats(arrays)

    def both(xs, vs, ws):
        def of_floats(*ys):
            full = list(arrays)
            for i, y in zip(fl, ys):
                full[i] = y
            return f(*full)
        out, dot = fg.jvp(of_floats, tuple(xs), tuple(vs))
        if not with_vjp:
            return dot, None
        out, pullback = fg.vjp(of_floats, *xs)
        return dot, pullback(fg.tree.unflatten(fg.tree.flatten(out)[1], ws))
    dot, back = fg.jit(both, backend=backend)([arrays[i] for i in fl], [v[i] for i in fl], w)
    return [np.asarray(d) for d in fg.tree.flatten(dot)[0]], back, v, w, fl


@pytest.mark.parametrize("backend", ["eager", "interp"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_jvp_matches_finite_differences_and_transposes_the_vjp(case, backend):
    _skip(case, backend)
    f, arrays = CASES[case]
    # a traced while_loop has forward mode but no reverse mode (as in JAX)
    with_vjp = not (case == "while_loop" and backend != "eager")
    dots, back, v, w, fl = _jvp_and_vjp(f, arrays, backend, with_vjp)
    eps = 1e-6
    plus = _outs(f, [a + eps * t if i in fl else a for i, (a, t) in enumerate(zip(arrays, v))])
    minus = _outs(f, [a - eps * t if i in fl else a for i, (a, t) in enumerate(zip(arrays, v))])
    for d, p, m in zip(dots, plus, minus):
        if p.dtype.kind == "f":
            np.testing.assert_allclose(d, (p - m) / (2 * eps), rtol=1e-4, atol=1e-6)
    if not with_vjp:
        return
    lhs = sum(np.sum(d * o) for d, o in zip(dots, w) if d.dtype.kind == "f")
    rhs = sum(np.sum(v[i] * np.asarray(b)) for i, b in zip(fl, back))
    assert np.isclose(lhs, rhs, rtol=1e-9, atol=1e-10), (lhs, rhs)


def _batched(case):
    f, _ = CASES[case]
    examples = [b[case][1] for b in BATCH]
    stacked = [np.stack([ex[i] for ex in examples]) for i in range(len(examples[0]))]
    return f, examples, stacked


@pytest.mark.parametrize("backend", ["eager", "interp"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_vmap_matches_a_loop_over_the_examples(case, backend):
    _skip(case, backend)
    f, examples, stacked = _batched(case)
    want = [_outs(f, ex) for ex in examples]
    with warnings.catch_warnings():     # every primitive row but ode_solve's has a rule
        if case_prim(case) != "ode_solve":
            warnings.filterwarnings("error", message=".*has no batching rule")
        if backend == "eager":      # on tensors: the loop over the examples, on the tape
            out = fg.vmap(f)(*[fg.tensor(s) for s in stacked])
        else:
            out = fg.jit(fg.vmap(f), backend=backend)(*stacked)
    got = [np.asarray(getattr(g, "data", g)) for g in fg.tree.flatten(out)[0]]
    for k, g in enumerate(got):
        np.testing.assert_allclose(g, np.stack([w[k] for w in want]), rtol=1e-12, atol=1e-12)


def test_a_primitive_without_a_rule_warns_once_and_scans(monkeypatch):
    """The declared fallback (ode_solve's), tried on take with its rule taken away."""
    from fusegrad.ir.batching import FALLBACK
    from fusegrad.ir.primitives import PRIMITIVES
    from fusegrad.passes import batching
    monkeypatch.setattr(PRIMITIVES["take"], "batch", FALLBACK)
    batching._warned.discard("take")
    f, examples, stacked = _batched("take")
    with pytest.warns(UserWarning, match="primitive 'take' .* has no batching rule; it runs "
                                         "as a scan over the batch"):
        got = fg.jit(fg.vmap(f), backend="interp")(*stacked)
    np.testing.assert_allclose(got, np.stack([f(*ex) for ex in examples]))


REPRESENTATIVE = ["tanh", "mul", "div", "select", "broadcast_in_dim", "transpose", "pad",
                  "concatenate", "reduce_max", "cumsum", "matmul", "matmul_batched",
                  "softmax", "layer_norm", "take", "scan", "cond", "custom_vjp_call",
                  "take_along_axis", "scatter_add", "cholesky", "while_loop"]


def test_numba_agrees_on_a_representative_batch_first_call():
    cases = [(CASES[c][0], CASES[c][1], _batched(c)[2]) for c in REPRESENTATIVE]

    def program(inputs, tangents, stacked):
        out = []
        for (f, arrays, _), xs, vs, bs in zip(cases, inputs, tangents, stacked):
            fl = _floats(arrays)

            def of_floats(*ys, f=f, arrays=arrays, fl=fl):
                full = list(arrays)
                for i, y in zip(fl, ys):
                    full[i] = y
                return f(*full)
            out.append(fg.jvp(of_floats, tuple(xs[i] for i in fl), tuple(vs[i] for i in fl)))
            out.append(fg.vmap(f)(*bs))
        return out
    inputs = [a for _, a, _ in cases]
    tangents = [_directions(a, 3) for a in inputs]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*has no batching rule")
        assert_backends_agree(program, inputs, tangents, [s for _, _, s in cases],
                              backends=("interp", "numba"), rtol=1e-9, atol=1e-10)
