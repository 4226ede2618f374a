"""The differentiation transforms: grad, value_and_grad, vjp, elementwise_grad (forward.py
builds jvp, jacfwd, jacrev, hessian and hvp on them).

Each transform has two interpretations, chosen when the transformed function is called:

* inside a trace (under fg.jit or fg.make_ir) it traces `fun` into an inner Function whose
  params are the leaves of the differentiated arguments, runs the autodiff pass on it and inlines
  the result into the enclosing trace. Outer tracers that `fun` closes over become captured
  params of the inner Function and are passed back in, so the gradient of a closure is exact and
  jit compiles forward and backward as one program;
* outside any trace it runs on the eager tape engine, with real Python control flow: the
  differentiated leaves become fresh Tensors, `fun` runs recording a graph, and engine.grad
  computes the gradients. A thread-local depth counts the eager transforms being evaluated;
  below the outermost one the backward pass is recorded (create_graph) and Tensors are returned,
  so the enclosing transform differentiates through them. The outermost returns NumPy arrays.

elementwise_grad is grad of a sum, so it works in both worlds.
"""

from __future__ import annotations

import contextlib
import functools
import gc

import numpy as np

from . import lax
from . import numpy as fnp
from .ir.core import Op
from .numpy.constructors import numpy_constructors
from .numpy.lazy_eager import make as lazy_eager
from .passes import autodiff
from .runtime import engine
from .runtime.grad_mode import enable_grad
from .runtime.signature import leaf_type
from .runtime.tensor import Tensor, tensor
from .state import add_busy, eager_transforms
from .tracer.location import call_located
from .tracer.tracer import Tracer, inline, is_tracing, trace_flat
from .tracer.tracer import _current as current_trace
from .tree import flatten, num_leaves, unflatten

_local = eager_transforms      # a threading.local with a class default: reads never raise


def in_eager_transform() -> bool:
    """Whether an eager grad/vjp is evaluating its function in this thread.

    Then a jitted function called inside must run eagerly, or its result would be a constant
    to the enclosing differentiation.
    """
    return _local.depth > 0


@contextlib.contextmanager
def _eager_scope():
    _local.depth += 1
    add_busy(1)
    try:
        with enable_grad(), numpy_constructors(lazy_eager):
            yield
    finally:
        _local.depth -= 1
        add_busy(-1)


# -- public API -----------------------------------------------------------------------------

def grad(fun=None, argnums=0, has_aux=False):
    """The gradient of a scalar-valued `fun` with respect to the arguments `argnums`.

    Args:
        fun: a function returning a floating-point scalar (or `(scalar, aux)` with has_aux).
        argnums: an int or a tuple of ints choosing the differentiated positional arguments.
        has_aux: fun returns a pair `(output, aux)`; aux is returned alongside, undifferentiated.

    Returns:
        A function returning the gradients in the structure of the chosen arguments (a tuple
        of them for a tuple argnums), as NumPy arrays; `(grads, aux)` with has_aux.
    """
    if fun is None:
        return functools.partial(grad, argnums=argnums, has_aux=has_aux)

    @functools.wraps(fun)
    def grad_fun(*args, **kwargs):
        _, aux, grads = _value_and_grad(fun, args, kwargs, argnums, has_aux, "grad")
        return (grads, aux) if has_aux else grads
    return grad_fun


def value_and_grad(fun=None, argnums=0, has_aux=False):
    """Like grad, but the function returns `(value, grads)`; `((value, aux), grads)` with has_aux.
    """
    if fun is None:
        return functools.partial(value_and_grad, argnums=argnums, has_aux=has_aux)

    @functools.wraps(fun)
    def value_and_grad_fun(*args, **kwargs):
        value, aux, grads = _value_and_grad(fun, args, kwargs, argnums, has_aux,
                                            "value_and_grad")
        return ((value, aux) if has_aux else value), grads
    return value_and_grad_fun


def vjp(fun, *primals):
    """Evaluate fun(*primals) and return `(out, vjp_fn)`.

    `vjp_fn(cotangent)` takes a cotangent shaped like `out` (a pytree) and returns a tuple with
    one gradient per primal, each in that primal's structure. vjp_fn may be called many times.
    """
    for i, p in enumerate(primals):
        check_float_leaves(p, i, "vjp")
    if is_tracing():
        with gc_paused():
            return _traced_vjp(fun, primals)
    return _eager_vjp(fun, primals)


def elementwise_grad(fun, argnums=0):
    """autograd's elementwise_grad: the gradient of `sum(fun(*args))` w.r.t. `argnums`.

    For a function that acts elementwise (each output element depends on the input element at
    its position only) this is the derivative at every element: elementwise_grad(np.tanh)(x)
    is 1 - tanh(x)**2, shaped like x. For other functions it is the vector-Jacobian product
    with a cotangent of ones. argnums is as grad's; it composes with itself (second
    derivatives), with grad and with fg.jit.
    """
    @functools.wraps(fun)
    def summed(*args, **kwargs):
        out = fun(*args, **kwargs)
        if isinstance(out, (tuple, list, dict)):
            raise TypeError(f"elementwise_grad requires the function to return an array, got "
                            f"a {type(out).__name__}")
        return fnp.sum(out)

    return grad(summed, argnums=argnums)


# -- shared checks ----------------------------------------------------------------------------

def chosen_argnums(argnums, nargs: int, who: str) -> tuple:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise ValueError(f"{who}: argnums must name at least one argument")
    out = []
    for i in nums:
        if not isinstance(i, int) or not -nargs <= i < nargs:
            raise ValueError(f"{who}: argnums={argnums!r} names argument {i}, but the function "
                             f"was called with {nargs} positional arguments")
        out.append(i % nargs)
    return tuple(out)


def check_float_leaves(arg, argnum: int, who: str) -> None:
    for x in flatten(arg)[0]:
        if not isinstance(x, float) and fnp._dtype(x).kind != "f":
            fix = (f"pass {float(x)!r} instead of {x!r}" if isinstance(x, (int, np.generic))
                   else "pass 1.0 instead of 1")
            raise TypeError(f"{who} requires floating-point inputs, got {fnp._dtype(x)} for "
                            f"argument {argnum}; {fix} or use .astype(np.float64)")


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def split_output(out, has_aux: bool, who: str):
    """(value, aux) of fun's output, with clear errors for misuse of has_aux."""
    if has_aux:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            got = (f"a {type(out).__name__} of length {len(out)}"
                   if isinstance(out, (tuple, list)) else type(out).__name__)
            raise TypeError(f"{who}(..., has_aux=True) requires the function to return a pair "
                            f"(output, aux), got {got}")
        value, aux = out
    else:
        value, aux = out, None
    if isinstance(value, (tuple, list, dict)):
        hint = "" if has_aux else "; if it returns (output, aux), pass has_aux=True"
        raise TypeError(f"{who} requires a scalar output, got a {type(value).__name__}{hint}")
    shape, dtype = fnp._shape(value), fnp._dtype(value)
    if shape != ():
        raise TypeError(f"{who} requires a scalar output, got shape {_fmt_shape(shape)}; use "
                        f"fg.vjp for vector outputs or sum the output")
    if dtype.kind != "f":
        raise TypeError(f"{who} requires a floating-point output, got {dtype}; make the "
                        f"function return a float (e.g. compute in float64)")
    return value, aux


def _value_and_grad(fun, args, kwargs, argnums, has_aux, who):
    nums = chosen_argnums(argnums, len(args), who)
    for i in nums:
        check_float_leaves(args[i], i, who)
    with gc_paused():      # the tape, like a trace, is many small objects alive until the end
        if is_tracing():
            value, aux, grads = _traced_value_and_grad(fun, args, kwargs, nums, has_aux, who)
        else:
            value, aux, grads = _eager_value_and_grad(fun, args, kwargs, nums, has_aux, who)
    return value, aux, (grads[0] if isinstance(argnums, int) else tuple(grads))


def replace_args(args, nums, new) -> list:
    full = list(args)
    for i, x in zip(nums, new):
        full[i] = x
    return full


# -- inside a trace: trace, differentiate the inner Function, inline ------------------------

@contextlib.contextmanager
def gc_paused():
    """Suspend the cyclic garbage collector while building IR or an eager tape.

    Tracing allocates millions of small acyclic objects (Values, Ops, tracers), and the tape
    a Node, a Tensor and saved values per op; CPython's generational collector rescans them
    again and again, which doubles the time to differentiate a 100 000-op program (and the
    eager engine's time per op). Reference counting still frees everything; a cycle made by the
    user's function waits for the next collection after the transform.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def trace_inner(fun, chosen, name):
    """Trace fun over the leaves of the `chosen` arguments (everything else it reads is
    closed over: outer tracers become captured params, concrete values constants).

    Returns (fn, out_tree, trees, n): the leading n params of fn are the chosen leaves, the
    rest are captures; `inputs` for inline are the chosen leaves followed by the captures.
    """
    trees, leaves = [], []
    for arg in chosen:
        arg_leaves, tree = flatten(arg)
        trees.append(tree)
        leaves.extend(arg_leaves)
    avals = [(x.aval, x.weak) if isinstance(x, Tracer) else leaf_type(x) for x in leaves]

    def flat_fun(*tracers):
        return fun(*unflatten_per_arg(trees, tracers))

    fn, out_tree, captures = trace_flat(flat_fun, [t for t, _ in avals], name,
                                        weak=[w for _, w in avals])
    return fn, out_tree, trees, leaves + list(captures)


def unflatten_per_arg(trees, leaves) -> list:
    it = iter(leaves)
    return [unflatten(tree, [next(it) for _ in range(num_leaves(tree))]) for tree in trees]


def _traced_value_and_grad(fun, args, kwargs, nums, has_aux, who):
    def inner(*xs):
        return split_output(fun(*replace_args(args, nums, xs), **kwargs), has_aux, who)

    fn, out_tree, trees, inputs = trace_inner(inner, [args[i] for i in nums],
                                               f"{who}_{_name(fun)}")
    n = sum(num_leaves(t) for t in trees)
    captured: list = []             # what a custom_vjp bwd closes over (autodiff.vjp)
    back = autodiff.vjp(fn, range(n), outputs=(0,), captures=captured)
    outs = inline_consumed(back, inputs + captured)
    value, aux = unflatten(out_tree, outs[:len(fn.results)])
    return value, aux, unflatten_per_arg(trees, outs[len(fn.results):])


def inline_consumed(fn, args) -> list:
    """inline(fn, args) for a Function used nowhere else: its ops move into the current trace.

    Values are compared by identity and fn is discarded, so an op whose inputs are all
    internal to fn is appended as it is; only ops reading a param are rebuilt, with the same
    output Values. Nothing is re-typed: the gradient of a 100 000-op program inlines in a
    fraction of the time a copy takes.
    """
    ctx = current_trace()
    env = {p: ctx.read(a) for p, a in zip(fn.params, args, strict=True)}
    ops = ctx.builder.ops
    for op in fn.ops:
        if any(v in env for v in op.inputs):
            op = Op(op.prim, [env.get(v, v) for v in op.inputs], op.params, op.outputs, op.loc,
                    op.note)
        ops.append(op)
    return [Tracer(env.get(r, r), ctx) for r in fn.results]


def _traced_vjp(fun, primals):
    fn, out_tree, trees, inputs = trace_inner(fun, primals, f"vjp_{_name(fun)}")
    n_params = sum(num_leaves(t) for t in trees)
    out = unflatten(out_tree, inline(fn, inputs))
    cache, captured = [], []

    def vjp_fn(cotangent):
        if not cache:
            cache.append(autodiff.vjp(fn, range(n_params), range(len(fn.results)),
                                      cotangent_params=True, captures=captured))
        cts = _cotangent_leaves(cotangent, out_tree, fn.result_types)
        outs = inline(cache[0], inputs + cts + captured)
        return tuple(unflatten_per_arg(trees, outs[len(fn.results):]))
    return out, vjp_fn


def _cotangent_leaves(cotangent, out_tree, types) -> list:
    leaves, tree = flatten(cotangent)
    if tree != out_tree:
        raise ValueError("vjp_fn: the cotangent must have the structure of the function's "
                         "output")
    fitted = []
    for ct, t in zip(leaves, types):
        if tuple(fnp._shape(ct)) != t.shape:
            raise ValueError(f"vjp_fn: cotangent of shape {_fmt_shape(fnp._shape(ct))} for an "
                             f"output of type {t}")
        fitted.append(ct if fnp._dtype(ct) == t.np_dtype else lax.convert(ct, t.dtype))
    return fitted


def _name(fun) -> str:
    return getattr(fun, "__name__", None) or type(fun).__name__


# -- outside any trace: the eager tape engine -------------------------------------------------

def _input_tensor(x) -> Tensor:
    """A fresh differentiable input: d/d(this tensor) only, not through other uses of x."""
    if isinstance(x, Tensor) and x.requires_grad:
        return lax.reshape(x, x.shape)      # a new node on x's graph
    return tensor(x.data if isinstance(x, Tensor) else x, requires_grad=True)


def _outer_needs_graph(values) -> bool:
    """Record the backward pass when an enclosing computation can differentiate through it."""
    return in_eager_transform() or any(
        isinstance(x, Tensor) and x.requires_grad for v in values for x in flatten(v)[0])


def _eager_inputs(chosen) -> tuple[list, list, list]:
    trees, tensors, new_args = [], [], []
    for arg in chosen:
        leaves, tree = flatten(arg)
        ts = [_input_tensor(x) for x in leaves]
        trees.append(tree)
        tensors.extend(ts)
        new_args.append(unflatten(tree, ts))
    return trees, tensors, new_args


def _eager_grads(outputs, inputs, cotangents, create_graph, retain_graph=None) -> list:
    """engine.grad over the outputs that carry history; zeros where no gradient flows."""
    roots, seeds = [], []
    for i, out in enumerate(outputs):
        if isinstance(out, Tensor) and out.requires_grad:
            roots.append(out)
            seeds.append(None if cotangents is None else cotangents[i])
    found = [None] * len(inputs)
    if roots:
        found = engine.grad(roots, inputs, None if cotangents is None else seeds,
                            retain_graph=retain_graph, create_graph=create_graph)
    return [tensor(np.zeros(x.shape, x.dtype)) if g is None else g
            for g, x in zip(found, inputs)]


def _finish(tree, keep_tensors: bool):
    """Outermost eager results are NumPy arrays; nested ones stay Tensors."""
    if keep_tensors:
        return tree
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [np.asarray(x.data) if isinstance(x, Tensor) else x
                               for x in leaves])


def _eager_value_and_grad(fun, args, kwargs, nums, has_aux, who):
    nested = _outer_needs_graph(args)
    with _eager_scope():
        trees, inputs, new_args = _eager_inputs([args[i] for i in nums])
        value, aux = call_located(lambda: split_output(
            fun(*replace_args(args, nums, new_args), **kwargs), has_aux, who))
        grads = _eager_grads([value], inputs, None, create_graph=nested)
    value = value if isinstance(value, Tensor) else np.asarray(value)
    grads = unflatten_per_arg(trees, grads)
    return _finish(value, nested), _finish(aux, nested), _finish(grads, nested)


def _eager_vjp(fun, primals):
    nested = _outer_needs_graph(primals)
    with _eager_scope():
        trees, inputs, new_args = _eager_inputs(primals)
        out = call_located(fun, *new_args)
    out_leaves, out_tree = flatten(out)

    def vjp_fn(cotangent):
        ct_leaves, ct_tree = flatten(cotangent)
        if ct_tree != out_tree:
            raise ValueError("vjp_fn: the cotangent must have the structure of the function's "
                             "output")
        keep = nested or _outer_needs_graph([cotangent])
        grads = _eager_grads(out_leaves, inputs, ct_leaves, create_graph=keep,
                             retain_graph=True)
        return tuple(_finish(unflatten_per_arg(trees, grads), keep))
    return _finish(out, nested), vjp_fn
