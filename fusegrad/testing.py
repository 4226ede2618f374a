"""Test helpers: do the backends agree, and do the gradients match finite differences.

`assert_backends_agree` runs a function under fg.jit with each backend and compares the output
pytrees. When a backend disagrees with "interp" (the reference semantics), the report localizes
the difference. Backends that can show their intermediate values are compared value by value,
in IR order, and the first diverging IR value is named with its op and source line. A backend
shows its values through the `debug_values(leaves) -> {Value: array}` method of its executable
(the interpreter has one here; codegen can add one to its executable later). Otherwise, the
report names the first differing output leaf and the optimized-IR op that produced it, and says
whether the traced, unoptimized IR agrees with the reference (which tells a pass bug from a
tracing or formula bug).

`check_grads` is jax.test_util.check_grads(modes="rev"): reverse-mode derivatives up to `order`
against central finite differences in float64, along random directions.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from . import numpy as fnp
from .api import jit
from .ir.printer import value_names
from .ir.evaluate import apply
from .runtime.signature import leaf_array, signature_of
from .transforms import grad
from .tree import flatten, unflatten

BACKENDS = ("eager", "interp", "numba")


@dataclass
class AgreementReport:
    """What assert_backends_agree compared: outputs per backend, and the backends it skipped."""

    outputs: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)   # backend -> reason


def numba_unavailable() -> str | None:
    """Why the numba backend cannot run here (None when it can)."""
    try:
        from .codegen import compile_numba  # noqa: F401
    except ImportError as e:
        return f"the numba backend is not available ({e})"
    return None


def assert_backends_agree(fun, *args, backends=BACKENDS, rtol=1e-6, atol=1e-8,
                          static_argnums=()) -> AgreementReport:
    """Run fg.jit(fun, backend=b, tiered=False)(*args) for each backend and compare the
    output pytrees.

    Raises AssertionError naming the backends, the first differing output leaf (or IR value)
    and its source line. Backends that cannot run here (numba before codegen lands) are
    skipped with a warning and listed in the returned report's `skipped`.
    """
    report = AgreementReport()
    for b in backends:
        reason = numba_unavailable() if b == "numba" else None
        if reason is not None:
            report.skipped[b] = reason
            warnings.warn(f"assert_backends_agree: skipping backend 'numba': {reason}",
                          stacklevel=2)
            continue
        # tiered=False: the numba column is Numba's code from the first call, not the interpreter
        report.outputs[b] = jit(fun, static_argnums=static_argnums, backend=b,
                                tiered=False)(*args)
    ran = list(report.outputs)
    ref = "interp" if "interp" in report.outputs else (ran[0] if ran else None)
    for b in ran:
        if b != ref:
            problem = _compare(report.outputs[ref], report.outputs[b], rtol, atol)
            if problem is not None:
                detail = _localize(fun, args, static_argnums, ref, b, problem, rtol, atol)
                raise AssertionError(f"backends {ref!r} and {b!r} disagree on "
                                     f"{_name(fun)}: {detail}")
    return report


# -- comparing pytrees ------------------------------------------------------------------------

@dataclass
class _Mismatch:
    index: int | None        # the first differing leaf (None: the tree structures differ)
    text: str


def _as_array(x):
    return np.asarray(x.data if hasattr(x, "_fg_level") and hasattr(x, "data") else x)


def _compare(expected, actual, rtol, atol) -> _Mismatch | None:
    (ref_leaves, ref_tree), (leaves, tree) = flatten(expected), flatten(actual)
    if ref_tree != tree:
        return _Mismatch(None, f"output structures differ: {ref_tree} vs {tree}")
    for i, (a, b) in enumerate(zip(ref_leaves, leaves)):
        text = _leaf_difference(_as_array(a), _as_array(b), rtol, atol)
        if text is not None:
            return _Mismatch(i, f"output leaf {i}: {text}")
    return None


def _leaf_difference(a: np.ndarray, b: np.ndarray, rtol, atol) -> str | None:
    if a.shape != b.shape:
        return f"shapes {list(a.shape)} vs {list(b.shape)}"
    if a.dtype != b.dtype:
        return f"dtypes {a.dtype} vs {b.dtype}"
    if a.dtype.kind not in "fc":
        bad = a != b
        return None if not bad.any() else f"{int(bad.sum())} of {a.size} elements differ"
    close = np.isclose(b, a, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    with np.errstate(all="ignore"):
        err = np.abs(b.astype(np.float64) - a)
        rel = err / np.maximum(np.abs(a), np.finfo(np.float64).tiny)
    at = np.unravel_index(int(np.nanargmax(np.where(close, -1, err))), a.shape) if a.ndim else ()
    return (f"shape {list(a.shape)} {a.dtype}, {int((~close).sum())} of {a.size} elements "
            f"differ, max abs error {np.nanmax(err):.3g}, max rel error {np.nanmax(rel):.3g} "
            f"(at index {tuple(int(i) for i in at)}: {a[at]!r} vs {b[at]!r})")


# -- localizing a disagreement ------------------------------------------------------------------

def debug_values(fn, leaves) -> dict:
    """Every value of fn evaluated op by op with the interpreter: {Value: array}."""
    env = dict(zip(fn.params, [np.asarray(x) for x in leaves]))
    for op in fn.ops:
        outs = apply(op.prim, [env[v] for v in op.inputs], op.params)
        if len(op.outputs) == 1:
            outs = (outs,)
        for v, x in zip(op.outputs, outs):
            env[v] = np.asarray(x).astype(v.type.np_dtype, copy=False)
    return env


def _backend_values(lowered, leaves) -> dict | None:
    """Per-value results of a backend, when its executable offers them: the hook
    `executable.debug_values(leaves) -> {Value of lowered.ir: array}` (for codegen to add)."""
    hook = getattr(lowered.executable, "debug_values", None)
    if hook is not None:
        return hook(leaves)
    if type(lowered.executable).__name__ == "Interpreted":
        return debug_values(lowered.ir, leaves)
    return None


def _localize(fun, args, static_argnums, ref, other, problem: _Mismatch, rtol, atol) -> str:
    if problem.index is None:
        return problem.text
    ref_lowered = jit(fun, static_argnums=static_argnums, backend=ref).lower(*args)
    leaves = [leaf_array(x) for x in signature_of(args, static_argnums)[1]]
    fn = ref_lowered.ir
    names = value_names(fn)
    if other != "eager":
        other_lowered = jit(fun, static_argnums=static_argnums, backend=other).lower(*args)
        theirs = _aligned(fn, other_lowered, _backend_values(other_lowered, leaves))
        if theirs is not None:
            first = _first_divergence(fn, debug_values(fn, leaves), theirs, names, rtol, atol)
            if first is not None:
                return first
    lines = [problem.text]
    if problem.index < len(fn.results):
        lines.append(f"that output is {_describe_value(fn, fn.results[problem.index], names)}")
        lines.append(_traced_verdict(ref_lowered, leaves, problem.index, rtol, atol))
    if other not in ("interp", "eager"):
        lines.append(f"(backend {other!r} does not expose per-value results yet: give its "
                     f"executable a debug_values(leaves) method to find the first diverging "
                     f"IR value)")
    return "\n  ".join(lines)


def _aligned(fn, other_lowered, values) -> dict | None:
    """The other backend's per-value results keyed by fn's Values (its IR must print alike)."""
    other = other_lowered.ir
    if values is None or (other is not fn and str(other) != str(fn)):
        return None
    if other is fn:
        return values
    pairs = zip([v for op in fn.ops for v in op.outputs],
                [v for op in other.ops for v in op.outputs])
    return {mine: values[theirs] for mine, theirs in pairs if theirs in values}


def _first_divergence(fn, mine, theirs, names, rtol, atol) -> str | None:
    for op in fn.ops:
        for v in op.outputs:
            if v in mine and v in theirs:
                text = _leaf_difference(np.asarray(mine[v]), np.asarray(theirs[v]), rtol, atol)
                if text is not None:
                    return (f"first diverging IR value {_describe_value(fn, v, names)}: "
                            f"{text}")
    return None


def _describe_value(fn, v, names) -> str:
    for op in fn.ops:
        if v in op.outputs:
            where = f" at {op.loc}" if op.loc else ""
            note = f" ({op.note})" if op.note else ""
            args = ", ".join(names.get(x, "?") for x in op.inputs)
            return f"{names[v]} = {op.prim} {args} : {v.type}{where}{note}"
    return f"{names.get(v, '?')} : {v.type} (a parameter)"


def _traced_verdict(lowered, leaves, index, rtol, atol) -> str:
    """Does the traced, unoptimized IR give the reference's value for this output?"""
    traced = lowered.traced
    try:
        before = debug_values(traced, leaves)[traced.results[index]]
        after = debug_values(lowered.ir, leaves)[lowered.ir.results[index]]
    except Exception as e:  # noqa: BLE001 - diagnostics must not hide the real failure
        return f"(could not evaluate the traced IR: {e})"
    if _leaf_difference(np.asarray(before), np.asarray(after), rtol, atol) is None:
        return "the traced (unoptimized) IR gives the same value as the optimized IR"
    return ("the traced (unoptimized) IR gives a different value from the optimized IR: "
            "suspect an optimization pass")


def _name(fun) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


# -- gradients against finite differences ----------------------------------------------------

def check_grads(fun, args, order=2, eps=1e-6, rtol=1e-4, atol=1e-6, seed=0, backend=None):
    """Check reverse-mode derivatives of `fun` up to `order` against finite differences.

    Like jax.test_util.check_grads(fun, args, order, modes=("rev",)). Arguments are cast to
    float64. A non-scalar output is first projected on a random cotangent u (checking the vjp);
    order k+1 checks the gradient of x -> <grad_k(x), w> for a random w, i.e. grad of grad.
    Each order compares <grad, v> with (f(x + eps v) - f(x - eps v)) / (2 eps) for a random
    direction v; on failure, each argument is perturbed alone to name the wrong one.

    backend: None differentiates eagerly; "interp" or "numba" compiles each gradient with
    fg.jit(..., backend=backend).
    """
    rng = np.random.default_rng(seed)
    args = tuple(_float64_tree(a) for a in args)
    nums = tuple(range(len(args)))
    out = fun(*args)
    f = fun
    if np.shape(_as_array(out)) != ():
        u = rng.standard_normal(np.shape(_as_array(out)))
        f = _projected(fun, u)
    for k in range(1, order + 1):
        g = grad(f, argnums=nums)
        if backend is not None:
            g = jit(g, backend=backend, tiered=False)
        _check_order(f, g, args, k, eps, rtol, atol, rng, _name(fun))
        w = tuple(_random_like(a, rng) for a in args)
        f = _directional(g, w)


def _float64_tree(a):
    leaves, tree = flatten(a)
    return unflatten(tree, [np.asarray(_as_array(x), dtype=np.float64) for x in leaves])


def _random_like(a, rng):
    leaves, tree = flatten(a)
    return unflatten(tree, [rng.standard_normal(np.shape(x)) for x in leaves])


def _projected(fun, u):
    def projected(*xs):
        return fnp.sum(fnp.multiply(fun(*xs), u))
    projected.__name__ = f"<u, {_name(fun)}>"
    return projected


def _directional(g, w):
    def directional(*xs):
        total = 0.0
        for a, b in zip(flatten(g(*xs))[0], flatten(w)[0]):
            total = total + fnp.sum(fnp.multiply(a, b))
        return total
    return directional


def _dot(a, b) -> float:
    return float(sum(np.vdot(np.asarray(_as_array(x), np.float64), y)
                     for x, y in zip(flatten(a)[0], flatten(b)[0])))


def _shift(args, v, t, only=None):
    out = []
    for i, (a, d) in enumerate(zip(args, v)):
        if only is not None and i != only:
            out.append(a)
            continue
        (la, tree), (ld, _) = flatten(a), flatten(d)
        out.append(unflatten(tree, [x + t * y for x, y in zip(la, ld)]))
    return tuple(out)


def _fd(f, args, v, eps, only=None) -> float:
    plus = float(_as_array(f(*_shift(args, v, eps, only))))
    minus = float(_as_array(f(*_shift(args, v, -eps, only))))
    return (plus - minus) / (2 * eps)


def _check_order(f, g, args, k, eps, rtol, atol, rng, name) -> None:
    v = tuple(_random_like(a, rng) for a in args)
    grads = g(*args)
    ad = _dot(grads, v)
    fd = _fd(f, args, v, eps)
    if abs(ad - fd) <= atol + rtol * abs(fd):
        return
    lines = [(f"check_grads: order-{k} reverse-mode derivative of {name} disagrees with "
              f"finite differences (eps={eps}, rtol={rtol}, atol={atol}) along a random "
              f"direction:"),
             f"  autodiff <grad, v> = {ad!r}",
             f"  finite difference  = {fd!r}   (abs error {abs(ad - fd):.3g})"]
    for i in range(len(args)):
        ad_i = _dot(grads[i], v[i])
        fd_i = _fd(f, args, v, eps, only=i)
        ok = abs(ad_i - fd_i) <= atol + rtol * abs(fd_i)
        lines.append(f"  argument {i}: autodiff {ad_i!r}, finite difference {fd_i!r}"
                     f"{'' if ok else '   <-- wrong'}")
    raise AssertionError("\n".join(lines))
