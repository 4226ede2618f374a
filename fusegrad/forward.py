"""Forward mode and Jacobians: jvp, linearize, jacfwd, jacrev, jacobian, hessian, hvp.

No JVP rule is written: inside a trace, jvp traces fun and runs passes/jvp.py, which derives
each op's JVP from its VJP rule by transposition (the gradient of <vjp(g), x_dot> with respect
to g); the reverse half is dead and DCE removes it. Outside a trace, on the eager tape, the
same transposition runs as autograd's make_jvp_reversemode does: the VJP is recorded as a
function of a cotangent g (create_graph), and its VJP with respect to g, with the tangents as
cotangent, is the JVP.

Jacobians are built from rows (jacrev: one vjp per output element) or columns (jacfwd: one
jvp per input element); hessian is jacfwd of jacrev (forward over reverse) and hvp the jvp of
grad, as in JAX.
"""

from __future__ import annotations

import functools

import numpy as np

from . import lax
from . import numpy as fnp
from .passes import jvp as jvp_pass
from .transforms import (check_float_leaves, chosen_argnums, gc_paused, grad, inline_consumed,
                         replace_args, trace_inner, unflatten_per_arg, vjp)
from .tracer.tracer import inline, is_tracing
from .tree import flatten, num_leaves, unflatten


def jvp(fun, primals, tangents, has_aux=False):
    """Evaluate fun(*primals) and its directional derivative along `tangents`.

    Args:
        fun: a function of arrays (pytrees allowed) returning arrays (pytrees allowed).
        primals: a tuple or list of the arguments.
        tangents: a tuple or list of the same structure, each leaf of its primal's shape and
            dtype (integer and bool leaves are not differentiated).
        has_aux: fun returns `(out, aux)`; aux is returned third, undifferentiated.

    Returns:
        `(out, out_dot)`, both in the structure of fun's output; `(out, out_dot, aux)` with
        has_aux.
    """
    primals, tangents = _check_tangents(primals, tangents)
    f = _without_aux(fun, has_aux)
    with gc_paused():
        out, dot = _traced_jvp(f, primals, tangents) if is_tracing() else \
            _eager_jvp(f, primals, tangents)
    if has_aux:
        (out, aux), (dot, _) = out, dot
        return out, dot, aux
    return out, dot


def linearize(fun, *primals):
    """`(out, f_jvp)`: fun's value at primals and the linear map `f_jvp(*tangents) -> out_dot`.

    The forward pass runs once: eagerly its graph is kept for the calls of f_jvp; under a trace
    the repeated forward ops of each call are merged by CSE.
    """
    primals, _ = _check_tangents(primals, primals, "linearize")
    if is_tracing():
        fn, out_tree, trees, inputs, tangent_fn = _trace_jvp(fun, primals)
        out = unflatten(out_tree, inline(fn, inputs))

        def f_jvp(*tangents):
            _, tangents = _check_tangents(primals, tangents, "linearize's f_jvp")
            outs = inline(tangent_fn, inputs + _tangent_leaves(fn, tangents, trees))
            return unflatten(out_tree, outs[len(fn.results):])
        return out, f_jvp
    out, transposed = _eager_transposed(fun, primals)

    def f_jvp(*tangents):
        _, tangents = _check_tangents(primals, tangents, "linearize's f_jvp")
        return transposed(tangents)
    return out, f_jvp


def jacfwd(fun, argnums=0, has_aux=False):
    """The Jacobian of fun with respect to `argnums`, one jvp per input element.

    For an output leaf of shape o and an input leaf of shape i, the block has shape o + i; the
    result nests the output's structure outside the chosen arguments' (a tuple of them for a
    tuple argnums). With has_aux, `(jacobian, aux)`.
    """
    @functools.wraps(fun)
    def jacfwd_fun(*args):
        nums, chosen, f = _chosen(fun, args, argnums, has_aux, "jacfwd")
        out, f_jvp = linearize(f, *chosen)
        if has_aux:
            out, aux = out
        jac = _jacobian_columns(out, f_jvp, chosen, has_aux, isinstance(argnums, int))
        return (jac, _plain(aux)) if has_aux else jac
    return jacfwd_fun


def jacrev(fun, argnums=0, has_aux=False):
    """The Jacobian of fun with respect to `argnums`, one vjp per output element; shaped and
    nested as jacfwd's."""
    @functools.wraps(fun)
    def jacrev_fun(*args):
        nums, chosen, f = _chosen(fun, args, argnums, has_aux, "jacrev")
        out, pullback = vjp(f, *chosen)
        if has_aux:
            (out, aux), pair_pullback = out, pullback
            aux_zeros = _zeros_like(aux)

            def pullback(ct):
                return pair_pullback((ct, aux_zeros))
        jac = _jacobian_rows(out, pullback, chosen, isinstance(argnums, int))
        return (jac, _plain(aux)) if has_aux else jac
    return jacrev_fun


jacobian = jacrev


def hessian(fun, argnums=0):
    """The Hessian of a scalar fun: jacfwd of jacrev (forward over reverse). For one array
    argument of shape s it has shape s + s; for pytrees or a tuple argnums it nests H[i][j]."""
    return jacfwd(jacrev(fun, argnums), argnums)


def hvp(fun, primals, tangents):
    """The Hessian-vector product H(primals) @ tangents: the jvp of grad (forward over
    reverse). One product per primal, in a tuple, or the product itself for one primal."""
    primals, tangents = _check_tangents(primals, tangents, "hvp")
    nums = tuple(range(len(primals)))
    _, out = jvp(grad(fun, argnums=nums), primals, tangents)
    return out[0] if len(primals) == 1 else out


# -- checks -------------------------------------------------------------------------------------

def _fmt(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _check_tangents(primals, tangents, who="jvp"):
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        bad = primals if not isinstance(primals, (tuple, list)) else tangents
        raise TypeError(f"{who}: primal and tangent arguments must be tuples or lists, got a "
                        f"{type(bad).__name__}; pass (x,) for one argument")
    if len(primals) != len(tangents):
        raise ValueError(f"{who}: {len(primals)} primals but {len(tangents)} tangents; pass "
                         f"one tangent per primal")
    for i, (p, t) in enumerate(zip(primals, tangents)):
        p_leaves, p_tree = flatten(p)
        t_leaves, t_tree = flatten(t)
        if p_tree != t_tree:
            raise TypeError(f"{who}: the tangent of argument {i} has another tree structure "
                            f"than its primal: {t_tree} for {p_tree}")
        for k, (x, dx) in enumerate(zip(p_leaves, t_leaves)):
            where = f"argument {i}" + (f" (leaf {k})" if len(p_leaves) > 1 else "")
            ps, ts = tuple(fnp._shape(x)), tuple(fnp._shape(dx))
            if ps != ts:
                raise ValueError(f"{who}: the tangent of {where} has shape {_fmt(ts)}, but "
                                 f"the primal has shape {_fmt(ps)}; a tangent has its "
                                 f"primal's shape")
            pd, td = fnp._dtype(x), fnp._dtype(dx)
            if pd.kind == "f" and td != pd and not isinstance(dx, (float, int)):
                raise TypeError(f"{who}: the tangent of {where} has dtype {td}, but the "
                                f"primal has dtype {pd}; a tangent has its primal's dtype "
                                f"(use .astype(np.{pd}))")
    return tuple(primals), tuple(tangents)


def _without_aux(fun, has_aux):
    if not has_aux:
        return fun

    @functools.wraps(fun)
    def pair(*args):
        out = fun(*args)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"has_aux=True requires the function to return a pair "
                            f"(output, aux), got {type(out).__name__}")
        return out[0], out[1]
    return pair


def _zeros_like(tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [np.zeros(fnp._shape(x), fnp._dtype(x)) for x in leaves])


def _plain(tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [np.asarray(getattr(x, "data", x)) if not is_tracing() else x
                               for x in leaves])


def _chosen(fun, args, argnums, has_aux, who):
    nums = chosen_argnums(argnums, len(args), who)
    for i in nums:
        check_float_leaves(args[i], i, who)

    def f(*xs):
        out = fun(*replace_args(args, nums, xs))
        if has_aux:
            value, aux = split_pair(out, who)
            return value, aux
        return out
    return nums, [args[i] for i in nums], f


def split_pair(out, who):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{who}(..., has_aux=True) requires the function to return a pair "
                        f"(output, aux), got {type(out).__name__}")
    return out[0], out[1]


# -- inside a trace: the jvp pass -------------------------------------------------------------

def _trace_jvp(fun, primals):
    fn, out_tree, trees, inputs = trace_inner(fun, primals, f"jvp_{_name(fun)}")
    n = sum(num_leaves(t) for t in trees)
    wrt = [i for i in range(n) if fn.params[i].type.is_float]
    return fn, out_tree, trees, inputs, jvp_pass.jvp(fn, wrt)


def _tangent_leaves(fn, tangents, trees) -> list:
    """The tangent leaves of the float primal leaves, in the primal's dtype."""
    leaves = []
    for t in tangents:
        leaves.extend(flatten(t)[0])
    out = []
    for p, t in zip(fn.params, leaves):
        if p.type.is_float:
            same = not isinstance(t, (int, float)) and fnp._dtype(t) == p.type.np_dtype
            out.append(t if same else lax.convert(t, p.type.dtype))
    return out


def _traced_jvp(fun, primals, tangents):
    fn, out_tree, trees, inputs, tangent_fn = _trace_jvp(fun, primals)
    outs = inline_consumed(tangent_fn, inputs + _tangent_leaves(fn, tangents, trees))
    r = len(fn.results)
    return unflatten(out_tree, outs[:r]), unflatten(out_tree, outs[r:])


def _name(fun) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


# -- outside a trace: the VJP's VJP on the tape -------------------------------------------------

def _eager_transposed(fun, primals):
    """(out, transposed): transposed(tangents) is the JVP, the VJP of fun's VJP with respect
    to its cotangent (recorded once, replayed for each tangent). Integer and bool leaves are
    held fixed."""
    leaves, spots, rebuild = _float_leaves(primals)

    def f(*xs):
        return fun(*rebuild(xs))
    out, pullback = vjp(f, *leaves)
    out_leaves, out_tree = flatten(out)
    zeros = [np.zeros(fnp._shape(o), fnp._dtype(o)) for o in out_leaves]
    floats = [k for k, z in enumerate(zeros) if z.dtype.kind == "f"]

    def pull(*gs):
        cts = list(zeros)
        for k, g in zip(floats, gs):
            cts[k] = g
        return pullback(unflatten(out_tree, cts))
    _, transpose = vjp(pull, *[zeros[k] for k in floats])

    def transposed(tangents):
        t_flat = [leaf for t in tangents for leaf in flatten(t)[0]]
        chosen = tuple(np.asarray(t_flat[k], dtype=fnp._dtype(x))
                       if isinstance(t_flat[k], (int, float)) else t_flat[k]
                       for x, k in zip(leaves, spots))
        dots = list(zeros)
        for k, d in zip(floats, transpose(chosen) if floats else ()):
            dots[k] = d
        return unflatten(out_tree, dots)
    return out, transposed


def _float_leaves(primals):
    """The float leaves of primals, their positions among all leaves, and a function putting
    new float leaves back into the argument list."""
    all_leaves, tree = flatten(tuple(primals))
    spots = [k for k, x in enumerate(all_leaves)
             if isinstance(x, float) or fnp._dtype(x).kind == "f"]

    def rebuild(xs):
        new = list(all_leaves)
        for k, x in zip(spots, xs):
            new[k] = x
        return unflatten(tree, new)
    return [all_leaves[k] for k in spots], spots, rebuild


def _eager_jvp(fun, primals, tangents):
    out, transposed = _eager_transposed(fun, primals)
    return out, transposed(tangents)


# -- Jacobians from jvp columns or vjp rows --------------------------------------------------
#
# Inside a trace the basis is mapped with fg.vmap (one batched pass, not one per element);
# eagerly it is a loop of f_jvp or pullback calls on the recorded graph.

def _basis(leaves):
    """Per leaf, the stacked unit directions of all the leaves' elements: leaf j's array has
    shape (N,) + leaf j's shape, N the total number of elements, row k a 1 at element k."""
    sizes = [int(np.prod(fnp._shape(x))) for x in leaves]
    eye = np.eye(sum(sizes), dtype=np.result_type(*[fnp._dtype(x) for x in leaves]))
    cols = np.split(eye, np.cumsum(sizes)[:-1], axis=1)
    return [c.reshape((len(eye),) + tuple(fnp._shape(x))).astype(fnp._dtype(x))
            for c, x in zip(cols, leaves)]


def _mapped(linear, basis, n_out):
    """linear applied to each row of the basis: per output leaf, the results stacked."""
    if is_tracing():
        from .vmap import vmap
        return flatten(vmap(lambda *units: linear(list(units)))(*basis))[0]
    outs = [[] for _ in range(n_out)]
    for k in range(len(basis[0])):
        for i, o in enumerate(flatten(linear([b[k] for b in basis]))[0]):
            outs[i].append(o)
    return [fnp.stack(o, axis=0) for o in outs]


def _jacobian_columns(out, f_jvp, chosen, has_aux, single: bool):
    """J[i][j] = d out_leaf_i / d in_leaf_j from f_jvp of each input element's direction."""
    out_leaves, in_leaves = flatten(out)[0], flatten(tuple(chosen))[0]
    arg_trees = [flatten(c)[1] for c in chosen]

    def column(units):
        dot = f_jvp(*unflatten_per_arg(arg_trees, units))
        return dot[0] if has_aux else dot
    cols = _mapped(column, _basis(in_leaves), len(out_leaves))
    return _assemble(out, chosen, cols, single, rows=False)


def _jacobian_rows(out, pullback, chosen, single: bool):
    """J[i][j] from the pullback of each output element's direction."""
    out_leaves, out_tree = flatten(out)
    n_in = len(flatten(tuple(chosen))[0])
    rows = _mapped(lambda units: pullback(unflatten(out_tree, units)), _basis(out_leaves), n_in)
    return _assemble(out, chosen, rows, single, rows=True)


def _assemble(out, chosen, parts, single, rows):
    """The blocks, out leaf i by in leaf j, from the stacked rows (parts[j]: the pullbacks of
    every out element) or columns (parts[i]: the jvps of every in element)."""
    out_leaves, out_tree = flatten(out)
    in_leaves, in_tree = flatten(tuple(chosen))
    o_ends = np.cumsum([0] + [int(np.prod(fnp._shape(o))) for o in out_leaves])
    i_ends = np.cumsum([0] + [int(np.prod(fnp._shape(x))) for x in in_leaves])
    blocks = []
    for i, o in enumerate(out_leaves):
        o_shape = tuple(fnp._shape(o))
        inner = []
        for j, x in enumerate(in_leaves):
            x_shape = tuple(fnp._shape(x))
            if rows:
                block = parts[j][o_ends[i]:o_ends[i + 1]]
            else:
                block = parts[i][i_ends[j]:i_ends[j + 1]]
                block = fnp.transpose(block, tuple(range(1, len(o_shape) + 1)) + (0,))
            inner.append(fnp.reshape(block, o_shape + x_shape))
        nested = unflatten(in_tree, inner)
        blocks.append(nested[0] if single else nested)
    return unflatten(out_tree, blocks)
