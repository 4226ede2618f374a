"""Structured control flow with JAX's names and signatures: scan, fori_loop, while_loop, cond
(re-exported by fusegrad.lax, so `fg.lax.scan(...)` ports from JAX).

Inside a trace (fg.jit, fg.make_ir, a grad being traced) each call traces its Python functions
once into closed nested Functions and binds one op of ir/control.py: the values of enclosing
traces a body reads become the op's leading operands (the tracer's captures). Outside any trace
(eager tensors, NumPy arrays, Python numbers) each is the Python loop its docstring shows, so
the eager engine records every step and differentiates it with no rule of its own.

As in JAX, carries keep one tree structure, shape and dtype from step to step, and a traced
body that breaks that raises a TypeError naming both. A Python number among the carries (or a
cond branch's results) is weakly typed: it takes the dtype the other side gives it (a float32
carry started at 0.0 stays float32), as JAX promotes weak types.

This module sits below the tracer (which imports fusegrad.numpy, which imports fusegrad.lax),
so it finds the tracer as dispatch.ambient_handler(), the Tracer class while a trace runs,
traces with its `_fg_trace` and binds with its `_fg_bind`, so that a loop over constants is an
op of the trace too, not run while tracing.
"""

from __future__ import annotations

import operator

import numpy as np

from . import dispatch
from .dispatch import EAGER_LEVEL, TRACE_LEVEL, bind, level
from .ir.core import Function
from .ir.types import NP_DTYPES, TensorType
from .ir.values import Value
from .tree import children, flatten, num_leaves, unflatten

__all__ = ["cond", "fori_loop", "scan", "while_loop"]


def scan(f, init, xs=None, length=None, reverse=False):
    """Scan f over the leading axis of xs, carrying state: `jax.lax.scan`.

        carry = init
        for i in range(length):              # reversed(range(length)) with reverse=True
            carry, ys[i] = f(carry, xs[i])
        return carry, stack(ys)

    init, xs and the ys f returns are pytrees; xs may be None when `length` is given, and f
    may return None as its y (then ys is None). ys keep the order of xs with reverse=True.
    """
    xs_leaves, xs_tree = flatten(xs)
    length = _scan_length(xs_leaves, length)
    tracer = dispatch.ambient_handler()
    if tracer is None:
        return _eager_scan(f, init, xs_leaves, xs_tree, length, bool(reverse))
    return _traced_scan(tracer, f, init, xs_leaves, xs_tree, length, bool(reverse), _name(f))


def fori_loop(lower, upper, body_fun, init_val):
    """`for i in range(lower, upper): val = body_fun(i, val)`: `jax.lax.fori_loop`.

    Traced with static bounds (Python or NumPy integers) it is a scan that carries the counter
    (reverse-mode differentiable); with traced bounds a while_loop (not differentiable in
    reverse mode, as in JAX). body_fun's `i` is a weakly typed integer: `x * i` keeps x's dtype.
    """
    for bound in (lower, upper):
        _check_int(bound)
    tracer = dispatch.ambient_handler()
    if tracer is None:
        val = init_val
        for i in range(_static_int(lower), _static_int(upper)):
            val = body_fun(i, val)
        return val
    name = _name(body_fun)
    if level(lower) != TRACE_LEVEL and level(upper) != TRACE_LEVEL:
        lo, hi = _static_int(lower), _static_int(upper)

        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None
        (_, val), _ = _traced_scan(tracer, step, (lo, init_val), [], ("none",), max(hi - lo, 0),
                                   False, name)
        return val

    def body(carry):
        i, val = carry
        return i + 1, body_fun(i, val)
    return _traced_while(tracer, lambda carry: carry[0] < upper, body, (lower, init_val),
                         _name(body_fun))[1]


def while_loop(cond_fun, body_fun, init_val):
    """`while cond_fun(val): val = body_fun(val)`: `jax.lax.while_loop`. cond_fun returns a
    boolean scalar. Reverse-mode differentiation of a traced while_loop raises (its trip count
    is not known when the program is traced); use scan or fori_loop with static bounds."""
    tracer = dispatch.ambient_handler()
    if tracer is None:
        val = init_val
        while _truth(cond_fun(val), "while_loop's cond_fun"):
            val = body_fun(val)
        return val
    return _traced_while(tracer, cond_fun, body_fun, init_val, _name(body_fun))


def cond(pred, true_fun, false_fun, *operands):
    """`true_fun(*operands) if pred else false_fun(*operands)`: `jax.lax.cond`. pred is a
    boolean or integer scalar (nonzero is true). Traced, both branches are traced and must
    return the same tree structure, shapes and dtypes; only the chosen one runs."""
    tracer = dispatch.ambient_handler()
    if tracer is None:
        return (true_fun if _truth(pred, "cond's pred") else false_fun)(*operands)
    return _traced_cond(tracer, pred, true_fun, false_fun, operands)


# -- eager: Python loops ----------------------------------------------------------------------

def _eager_scan(f, init, xs_leaves, xs_tree, length, reverse):
    carry, ys = init, []
    for i in range(length - 1, -1, -1) if reverse else range(length):
        carry, y = _pair(f(carry, unflatten(xs_tree, [x[i] for x in xs_leaves])), f)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        return carry, _empty_ys(f, init, xs_leaves, xs_tree)
    return carry, _stack(ys, f)


def _stack(ys, f):
    """The per-step ys, stacked leaf by leaf along a new leading axis."""
    trees = [flatten(y) for y in ys]
    tree = trees[0][1]
    if any(t != tree for _, t in trees):
        raise TypeError(f"fg.lax.scan: the body {_name(f)!r} returned ys of different tree "
                        f"structures at different steps")
    columns = zip(*[leaves for leaves, _ in trees]) if tree != ("none",) else []
    stacked = [bind("concatenate", *[bind("reshape", y, shape=(1,) + np.shape(_data(y)))
                                     for y in column], axis=0) for column in columns]
    return unflatten(tree, stacked)


def _empty_ys(f, init, xs_leaves, xs_tree):
    """ys of a scan of length 0: f runs once on zeros for their types (JAX traces it once)."""
    zeros = [np.zeros(np.shape(_data(x))[1:], np.asarray(_data(x)).dtype) for x in xs_leaves]
    _, y = _pair(f(init, unflatten(xs_tree, zeros)), f)
    leaves, tree = flatten(y)
    return unflatten(tree, [np.zeros((0,) + np.shape(_data(v)), np.asarray(_data(v)).dtype)
                            for v in leaves])


def _truth(x, what) -> bool:
    data = np.asarray(_data(x))
    if data.shape != ():
        raise TypeError(f"fg.lax: {what} must be a scalar, got shape {list(data.shape)}")
    return bool(data)


def _data(x):
    return x.data if level(x) == EAGER_LEVEL else x


# -- traced: one op each ---------------------------------------------------------------------

def _traced_scan(tracer, f, init, xs_leaves, xs_tree, length, reverse, name):
    init_leaves, init_tree = flatten(init)
    carry = [_leaf_type(x) for x in init_leaves]
    xs = [(t.with_shape(t.shape[1:]), w) for t, w in map(_leaf_type, xs_leaves)]

    def body(c, x):
        return _pair(f(c, x), f)

    def trace(carry, out_dtypes):
        fn, out_tree, weak, captures = _trace(tracer, body, [(init_tree, carry), (xs_tree, xs)],
                                              name, out_dtypes)
        (c_tree, y_tree) = children(out_tree)
        return fn, c_tree, y_tree, weak, captures

    fn, c_tree, y_tree, weak, captures = trace(carry, None)
    n = len(carry)
    carry, out_dtypes = _unify(carry, c_tree, fn.result_types[:n], weak[:n], init_tree,
                               "fg.lax.scan", f"the body {name!r}")
    if out_dtypes is not None:
        fn, c_tree, y_tree, weak, captures = trace(carry, out_dtypes + [None] * len(weak[n:]))
        _unify(carry, c_tree, fn.result_types[:n], [False] * n, init_tree, "fg.lax.scan",
               f"the body {name!r}")
    operands = captures + [_cast(x, t) for x, (t, _) in zip(init_leaves, carry)] + xs_leaves
    outs = _tuple(tracer._fg_bind("scan", operands, dict(
        body=fn, length=length, reverse=reverse, num_consts=len(captures), num_carry=n)))
    return unflatten(init_tree, outs[:n]), unflatten(y_tree, outs[n:])


def _traced_while(tracer, cond_fun, body_fun, init, name):
    init_leaves, tree = flatten(init)
    carry = [_leaf_type(x) for x in init_leaves]
    n = len(carry)
    body, b_tree, weak, b_caps = _trace(tracer, body_fun, [(tree, carry)], name)
    carry, out_dtypes = _unify(carry, b_tree, body.result_types, weak, tree,
                               "fg.lax.while_loop", f"the body {name!r}")
    if out_dtypes is not None:
        body, b_tree, _, b_caps = _trace(tracer, body_fun, [(tree, carry)], name, out_dtypes)
        _unify(carry, b_tree, body.result_types, [False] * n, tree, "fg.lax.while_loop",
               f"the body {name!r}")
    test, c_tree, _, c_caps = _trace(tracer, cond_fun, [(tree, carry)], _name(cond_fun))
    if c_tree != ("leaf",) or test.result_types[0] != TensorType("bool", ()):
        got = _show(c_tree, test.result_types)
        raise TypeError(f"fg.lax.while_loop: cond_fun {_name(cond_fun)!r} must return a "
                        f"boolean scalar, got {got}")
    operands = c_caps + b_caps + [_cast(x, t) for x, (t, _) in zip(init_leaves, carry)]
    outs = _tuple(tracer._fg_bind("while_loop", operands, dict(
        cond=test, body=body, cond_nconsts=len(c_caps), body_nconsts=len(b_caps))))
    return unflatten(tree, outs)


def _traced_cond(tracer, pred, true_fun, false_fun, operands):
    pred = _predicate(pred)
    flat = [flatten(x) for x in operands]
    leaves = [leaf for ls, _ in flat for leaf in ls]
    args = [(tree, [_leaf_type(x) for x in ls]) for ls, tree in flat]
    funs = (true_fun, false_fun)
    traced = [_trace(tracer, fun, args, _name(fun)) for fun in funs]
    dtypes = _branch_dtypes(traced, funs)
    if dtypes is not None:
        traced = [_trace(tracer, fun, args, _name(fun), d) for fun, d in zip(funs, dtypes)]
        _branch_dtypes(traced, funs, final=True)
    (t_fn, out_tree, _, t_caps), (f_fn, _, _, f_caps) = traced
    nt = len(t_caps)
    # both branches take (true's captures, false's captures, operands): each gets unused
    # params for the other's
    t_fn = Function(t_fn.name, [*t_fn.params[:nt], *_fresh(f_fn.params[:len(f_caps)]),
                                *t_fn.params[nt:]], t_fn.ops, t_fn.results)
    f_fn = Function(f_fn.name, [*_fresh(t_fn.params[:nt]), *f_fn.params], f_fn.ops,
                    f_fn.results)
    result = _tuple(tracer._fg_bind("cond", [pred, *t_caps, *f_caps, *leaves],
                                    dict(true_branch=t_fn, false_branch=f_fn)))
    return unflatten(out_tree, result)


def _branch_dtypes(traced, funs, final=False):
    """The dtypes to convert each branch's results to, where a weak result (a Python number)
    meets a dtype of the other branch; None when the branches already agree. Raises when
    they differ otherwise."""
    (t_fn, t_tree, t_weak, _), (f_fn, f_tree, f_weak, _) = traced
    t_types, f_types = t_fn.result_types, f_fn.result_types
    fixes = [[None] * len(t_types), [None] * len(f_types)]
    ok = t_tree == f_tree
    for k, (a, b) in enumerate(zip(t_types, f_types) if ok else ()):
        if a == b:
            continue
        if a.shape != b.shape or final or not (t_weak[k] or f_weak[k]):
            ok = False
        elif t_weak[k]:
            fixes[0][k] = b.dtype
        else:
            fixes[1][k] = a.dtype
    if not ok:
        raise TypeError(
            f"fg.lax.cond: true_fun {_name(funs[0])!r} and false_fun {_name(funs[1])!r} must "
            f"return the same tree structure, shapes and dtypes, but true_fun returns "
            f"{_show(t_tree, t_types)} and false_fun returns {_show(f_tree, f_types)}")
    return fixes if any(d is not None for fix in fixes for d in fix) else None


# -- helpers -----------------------------------------------------------------------------------

def _trace(tracer, fun, args, name, out_dtypes=None):
    """Trace fun(*args), each argument given as (treedef, [(type, weak) per leaf]), into a
    closed Function whose leading params are the captured outer values. out_dtypes converts
    result leaves (None: keep). Returns (fn, out_tree, weak per result leaf, captures)."""
    types = [tw for _, tws in args for tw in tws]
    found = {}

    def flat_fun(*leaves):
        it = iter(leaves)
        values = [unflatten(tree, [next(it) for _ in tws]) for tree, tws in args]
        out, out_tree = flatten(fun(*values))
        if out_dtypes is not None:
            out = [_convert(v, d) for v, d in zip(out, out_dtypes)]
        found["weak"] = [_is_weak(v) for v in out]
        return unflatten(out_tree, out)
    fn, out_tree, captures = tracer._fg_trace(flat_fun, [t for t, _ in types],
                                              [w for _, w in types], name)
    n = len(types)
    fn = Function(fn.name, fn.params[n:] + fn.params[:n], fn.ops, fn.results)
    return fn, out_tree, found["weak"], list(captures)


def _unify(carry, out_tree, out_types, out_weak, tree, who, what):
    """Check that a body returns its carry's structure and types. Where they differ in dtype
    only and one side is weak (a Python number), the weak side takes the other's dtype: the
    returned (carry, out_dtypes) then say how to trace again; out_dtypes is None when the
    body agrees already."""
    out_types = out_types[:num_leaves(out_tree)]
    ok = out_tree == tree
    new, fixes = list(carry), [None] * len(carry)
    for k, ((t, weak), u) in enumerate(zip(carry, out_types) if ok else ()):
        if t == u:
            continue
        if t.shape != u.shape or not (weak or out_weak[k]):
            ok = False
        elif out_weak[k]:
            fixes[k] = t.dtype
        else:
            new[k] = (u, False)
    if not ok:
        raise TypeError(f"{who}: {what} must return a carry with the tree structure, shapes "
                        f"and dtypes of its input, but the input carry is "
                        f"{_show(tree, [t for t, _ in carry])} and it returns "
                        f"{_show(out_tree, out_types)}")
    changed = new != carry or any(d is not None for d in fixes)
    return new, (fixes if changed else None)


class _Shown:
    def __init__(self, t):
        self.t = t

    def __repr__(self):
        return str(self.t)


def _show(tree, types) -> str:
    """A tree with its leaves' types, for messages: `(f64[3], {'b': i64[]})`."""
    return repr(unflatten(tree, [_Shown(t) for t in types]))


def _fresh(params) -> list:
    return [Value(p.type, p.hint) for p in params]


def _leaf_type(x) -> tuple[TensorType, bool]:
    """A leaf's IR type, and whether it is weak (a Python number, or a weak tracer)."""
    if level(x) == TRACE_LEVEL:
        return x.aval, x.weak
    if type(x) in (bool, int, float):
        return TensorType.of(np.asarray(x)), True
    return TensorType.of(np.asarray(_data(x))), False


def _is_weak(x) -> bool:
    return x.weak if level(x) == TRACE_LEVEL else type(x) in (bool, int, float)


def _convert(x, dtype):
    if dtype is None:
        return x
    if level(x) == TRACE_LEVEL:
        return x if x.aval.dtype == dtype else bind("convert", x, dtype=dtype)
    return np.asarray(_data(x), NP_DTYPES[dtype])


def _cast(x, t: TensorType):
    """An initial carry leaf as the carry's type (a weak one may have been promoted)."""
    if level(x) == TRACE_LEVEL:
        return _convert(x, t.dtype)
    return np.asarray(_data(x), t.np_dtype)


def _predicate(pred):
    t, _ = _leaf_type(pred)
    if t.shape != ():
        raise TypeError(f"fg.lax.cond: pred must be a scalar, got shape {list(t.shape)}")
    if t.dtype == "bool":
        return pred if level(pred) == TRACE_LEVEL else np.asarray(_data(pred))
    return bind("ne", pred, 0)


def _scan_length(xs_leaves, length) -> int:
    sizes = set()
    for x in xs_leaves:
        shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
        if not shape:
            raise ValueError("fg.lax.scan: every leaf of xs needs a leading axis to scan "
                             "over, got a 0-d value")
        sizes.add(shape[0])
    if len(sizes) > 1:
        raise ValueError(f"fg.lax.scan: the leaves of xs have different leading axis sizes "
                         f"{sorted(sizes)}")
    if length is None:
        if not sizes:
            raise ValueError("fg.lax.scan: xs has no arrays to scan over and no length was "
                             "given; pass length=")
        return sizes.pop()
    length = operator.index(length)
    if sizes and sizes != {length} or length < 0:
        raise ValueError(f"fg.lax.scan: length={length} disagrees with the leading axis size "
                         f"{sorted(sizes)} of xs" if sizes else
                         f"fg.lax.scan: length must be >= 0, got {length}")
    return length


def _check_int(bound) -> None:
    t, _ = _leaf_type(bound)
    if t.shape != () or t.dtype != "i64":
        raise TypeError(f"fg.lax.fori_loop: lower and upper must be integer scalars, got {t}")


def _static_int(x) -> int:
    return int(np.asarray(_data(x)))


def _pair(out, f):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"fg.lax.scan: the body {_name(f)!r} must return a pair (carry, y), "
                        f"got {type(out).__name__}"
                        + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    return out


def _tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _name(f) -> str:
    return getattr(f, "__name__", None) or type(f).__name__
