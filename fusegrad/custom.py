"""fg.custom_vjp: a function whose gradient is the user's own rule (JAX's custom_vjp).

    @fg.custom_vjp
    def f(x, y): ...
    def f_fwd(x, y): return out, residuals
    def f_bwd(residuals, g): return (gx, gy)      # one cotangent per input of f
    f.defvjp(f_fwd, f_bwd)

A call of f goes one of three ways:

* nothing to differentiate (NumPy values, tensors that do not require grad, under no_grad):
  f itself runs, as in JAX.
* eager, with a tensor that requires grad: fwd runs on the tensors with grad recording on, so
  the residuals keep their history; the outputs get one node, CustomVjpBackward[f], whose
  edges go to f's inputs only and whose rule (the formula table's `custom_vjp_call`) calls bwd.
  When fwd cannot run on tensors (it converts them to NumPy: float(x), SciPy,
  np.linalg.eigvalsh, ...), it runs again on the NumPy values under no_grad: its residuals are
  then constants, which is exact for first derivatives; differentiating the gradient again
  raises.
* traced (fg.jit, fg.make_ir, traced grad): fwd is traced as ordinary ops, noted
  `custom_vjp[f] fwd`, and the op `custom_vjp_call` (ir/custom.py) takes the inputs, the traced
  residuals and fwd's outputs and returns the outputs. The autodiff pass calls its rule, which
  calls bwd on tracers: bwd's ops are noted `custom_vjp[f] bwd` and keep bwd's source lines.
  `lower` removes the op and DCE the residual-only ops of a program not differentiated. Under
  a trace f is used through fwd, so the IR keeps the rule for any later differentiation.

In every way the residuals' dependence on the inputs goes through fwd's ops, so a bwd written
with operations fusegrad records is differentiated again (fg.grad of fg.grad, fg.hessian).
Pytrees (dict, list, tuple) are accepted for the inputs, the output, the residuals and the
cotangents; residual leaves that are not traced values or tensors (ints, strings, NumPy
arrays) are passed to bwd as they are. Integer and bool inputs get no cotangent, and bwd may
return None for any input (or any part of one): zero.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading

import numpy as np

from . import lax
from .dispatch import bind
from .formulas import node_names, vjp_rules
from .ir.types import dtype_name
from .runtime import hooks
from .runtime.grad_mode import _state as _grad_state
from .runtime.grad_mode import no_grad
from .runtime.graph import Node, SavedTensor, gradient_edge
from .runtime.tensor import Tensor, _wrap
from .tracer.location import user_location
from .custom_checks import (abstract_output, check_cotangents, describe, dtype_of, input_info,
                            is_numeric, render, same_output, shape_of, signature, type_of)
from .tracer.tracer import _WALK, ConcretizationError, Tracer, is_tracing
from .tracer.tracer import _current as _current_trace
from .tree import flatten, unflatten

PRIM = "custom_vjp_call"
_NO_INPUT = (None, None, None)


class _InFwd(threading.local):
    specs = ()      # the custom_vjp functions whose fwd runs in this thread (a class default)


_in_fwd = _InFwd()


@contextlib.contextmanager
def _running_fwd(spec):
    """While fwd runs, a call of f itself is f's primal function (fwd often calls f)."""
    prev = _in_fwd.specs
    _in_fwd.specs = prev + (spec,)
    try:
        yield
    finally:
        _in_fwd.specs = prev


class custom_vjp:  # noqa: N801 - named as jax.custom_vjp, used as a decorator
    """Decorate `fun` to give it a user-written VJP: `fun.defvjp(fwd, bwd)`.

    fwd(*args) returns `(output, residuals)`, the output with fun's structure, shapes and
    dtypes; bwd(residuals, g), with g a cotangent shaped like the output, returns a tuple with
    one cotangent per positional argument of fun, each shaped like that argument (or None).
    """

    def __init__(self, fun):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd = self.bwd = None
        self._f_outputs: dict = {}      # input signature -> fun's output (tree, types) or None

    @property
    def name(self) -> str:
        return getattr(self.fun, "__name__", None) or type(self.fun).__name__

    def defvjp(self, fwd, bwd) -> None:
        """Set the forward rule `fwd(*args) -> (out, residuals)` and the backward rule
        `bwd(residuals, g) -> tuple of cotangents`."""
        for role, rule in (("fwd", fwd), ("bwd", bwd)):
            if not callable(rule):
                raise TypeError(f"custom_vjp {self.name}: defvjp needs a callable {role}, got "
                                f"{type(rule).__name__}")
        self.fwd, self.bwd = fwd, bwd

    def __repr__(self) -> str:
        return f"<custom_vjp {self.name}>"

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(f"custom_vjp {self.name}: pass the arguments positionally (got "
                            f"keywords {', '.join(sorted(kwargs))}); bwd returns one cotangent "
                            f"per positional argument")
        if self.fwd is None:
            raise TypeError(f"custom_vjp {self.name}: no VJP is defined; call "
                            f"{self.name}.defvjp({self.name}_fwd, {self.name}_bwd) before "
                            f"calling {self.name}")
        if self in _in_fwd.specs:     # fwd calling f (JAX's idiom): the primal function
            return self.fun(*args)
        leaves = flatten(args)[0]
        if is_tracing() and any(isinstance(x, Tracer) for x in leaves):
            return _traced_call(self, args)
        if _grad_state.enabled and any(isinstance(x, Tensor) and x.requires_grad
                                       for x in leaves):
            return _eager_call(self, args)
        return self.fun(*args)

    # -- names for messages -------------------------------------------------------------------
    def _role(self, role: str) -> str:
        rule = self.fwd if role == "fwd" else self.bwd
        name = getattr(rule, "__name__", None)
        return name if name and name != "<lambda>" else f"{self.name}'s {role}"

    def _arg_name(self, i: int) -> str:
        try:
            params = [p.name for p in inspect.signature(self.fun).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = []
        return params[i] if i < len(params) else f"arg{i}"

    # -- fwd's output against fun's -------------------------------------------------------------
    def _check_output(self, args, out_tree, out_leaves) -> None:
        """fwd's output must have fun's structure, shapes and dtypes. fun's are found by tracing
        it once per input signature (a function that cannot be traced is not checked)."""
        key = signature(args)
        cached = key is not None and key in self._f_outputs
        expected = self._f_outputs[key] if cached else abstract_output(self.fun, args)
        got = (out_tree, [type_of(x) for x in out_leaves])
        if expected is not None and not same_output(expected, got) and cached:
            expected = abstract_output(self.fun, args)     # confirm: fun may have changed
        if key is not None:
            self._f_outputs[key] = expected
        if expected is not None and not same_output(expected, got):
            raise TypeError(f"custom_vjp {self.name}: {self._role('fwd')} returned the output "
                            f"{render(*got)}, but {self.name} returns {render(*expected)}; "
                            f"fwd must return (output, residuals) with the output exactly as "
                            f"{self.name}'s (structure, shapes and dtypes)")


# -- one call: what the rule needs ------------------------------------------------------------

class CustomVjpCall:
    """One call of a custom_vjp function: the `call` param of its custom_vjp_call op (or of its
    eager node), hashable by identity. It holds bwd, the input, residual and output structures,
    and the residual leaves that are not operands; `vjp` is the rule's body."""

    def __init__(self, spec, args, res_tree, res_leaves, res_slots, out_tree, out_types,
                 traced, layout=None, numpy_fwd=None):
        self.spec = spec
        self.arg_trees = [flatten(a)[1] for a in args]
        self.in_info = input_info(args)
        self.res_tree, self.res_leaves, self.res_slots = res_tree, res_leaves, res_slots
        self.out_tree, self.out_types = out_tree, out_types
        self.traced = traced
        self.layout = layout            # eager: how the node's gradient holds each output's
        self.numpy_fwd = numpy_fwd      # eager: why fwd ran on NumPy values, or None
        self.n_in = sum(info[4] is not None for info in self.in_info)

    def __repr__(self) -> str:
        return f"custom_vjp[{self.spec.name}]"

    def vjp(self, g, operands) -> tuple:
        spec, n_in, n_res = self.spec, self.n_in, len(self.res_slots)
        leaves = list(self.res_leaves)
        for slot, value in zip(self.res_slots, operands[n_in:n_in + n_res]):
            leaves[slot] = value
        residuals = unflatten(self.res_tree, leaves)
        cotangent = unflatten(self.out_tree, self._g_leaves(g))
        recording = isinstance(g, Tensor)       # eager create_graph: bwd is differentiated
        if recording and self.numpy_fwd is not None and any(
                is_numeric(x) for x in self.res_leaves):
            raise RuntimeError(
                f"custom_vjp {spec.name}: {spec._role('fwd')} could not run on fusegrad "
                f"tensors ({self.numpy_fwd}), so it ran on NumPy values and its residuals carry "
                f"no derivative: the gradient of {spec.name} cannot be differentiated again "
                f"(grad of grad, hessian, create_graph). Write {spec._role('fwd')} with "
                f"operations fusegrad records to differentiate {spec.name} twice.")
        ctx = g.ctx if isinstance(g, Tracer) else (
            g[0].ctx if isinstance(g, tuple) and isinstance(g[0], Tracer) else None)
        cts = _run_user(spec, "bwd", spec.bwd, (residuals, cotangent), ctx, "bwd",
                        recording=recording)
        cts = check_cotangents(spec, self.arg_trees, self.in_info, cts, self.traced)
        return tuple(cts) + (None,) * (len(operands) - n_in)

    def _g_leaves(self, g) -> list:
        if self.layout is None:                 # traced: one cotangent per output
            return list(g) if len(self.out_types) > 1 else [g]
        out = []
        for entry in self.layout:
            kind, shape, dtype = entry[0], entry[-2], entry[-1]
            if kind == "zeros":
                out.append(np.zeros(shape, dtype))
            elif kind == "whole":
                out.append(g)
            else:                               # a piece of the packed gradient
                _, start, size, shape, dtype = entry
                piece = lax.reshape(lax.slice(g, (start,), (start + size,)), shape)
                out.append(piece if np.dtype(dtype) == dtype_of(piece)
                           else lax.convert(piece, dtype_name(dtype)))
        return out


# -- traced: fwd as ops, then the custom_vjp_call op ------------------------------------------

def _traced_call(spec, args):
    ctx = _current_trace()
    start = len(ctx.builder.ops)
    with _running_fwd(spec):
        out, res = _fwd_pair(spec, _run_user(spec, "fwd", spec.fwd, args, ctx, "fwd"))
    out_leaves, out_tree = _output_leaves(spec, args, out)
    res_leaves, res_tree = flatten(res)
    res_slots = [k for k, r in enumerate(res_leaves) if isinstance(r, Tracer)]
    primal = [x for x in flatten(args)[0] if is_numeric(x)]
    call = CustomVjpCall(spec, args, res_tree,
                         [None if k in res_slots else r for k, r in enumerate(res_leaves)],
                         res_slots, out_tree, [type_of(x) for x in out_leaves], traced=True)
    outs = bind(PRIM, *primal, *[res_leaves[k] for k in res_slots], *out_leaves,
                fun=spec.name, n_in=len(primal), n_res=len(res_slots), call=call)
    op = ctx.builder.ops[-1]
    op.note = f"custom_vjp[{spec.name}]"
    for new in ctx.builder.ops[start:-1]:
        new.note = _join(f"custom_vjp[{spec.name}] fwd", new.note)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    for t, x in zip(outs, out_leaves):
        t.weak = type_of(x)[2]         # a Python scalar's result stays weak (NEP 50)
    return unflatten(out_tree, outs)


def _output_leaves(spec, args, out):
    """fwd's output leaves and structure, checked against f's."""
    out_leaves, out_tree = flatten(out)
    for x in out_leaves:
        if not is_numeric(x):
            raise TypeError(f"custom_vjp {spec.name}: the output of {spec._role('fwd')} holds "
                            f"a {type(x).__name__}; outputs must be arrays")
    spec._check_output(args, out_tree, out_leaves)
    return out_leaves, out_tree


def _run_user(spec, role, rule, args, ctx, what, recording=False):
    """Call the user's fwd or bwd. Traced (ctx), their ops get the user's lines and a note;
    an operation that needs concrete values gets an error that names the function."""
    start = saved = None
    if ctx is not None:
        start, saved = len(ctx.builder.ops), ctx.fixed_loc
        ctx.fixed_loc = _WALK           # the user's file:line, not the op being differentiated
    try:
        return rule(*args)
    except Exception as e:
        if (ctx is None and not recording) or not _untraceable(e):
            raise
        if ctx is not None:
            raise type(e)(
                f"custom_vjp {spec.name}: {spec._role(role)} cannot be traced: {e}\nUnder "
                f"fg.jit (backends \"interp\" and \"numba\") and inside traced transforms, "
                f"fwd and bwd run on traced values and become part of the compiled program, "
                f"so they must use operations fusegrad traces. A function that needs "
                f"concrete NumPy values (float(x), SciPy, np.linalg.eigvalsh) can be wrapped "
                f"with custom_vjp only eagerly: call it outside fg.jit, or use "
                f"fg.jit(..., backend=\"eager\").") from e
        raise type(e)(
            f"custom_vjp {spec.name}: {spec._role(role)} cannot run on fusegrad tensors, which "
            f"it must when the gradient of {spec.name} is differentiated again (grad of grad, "
            f"hessian, create_graph): {e}") from e
    finally:
        if ctx is not None:
            ctx.fixed_loc = saved
            if what == "bwd":
                for new in ctx.builder.ops[start:]:
                    new.note = _join(f"custom_vjp[{spec.name}] bwd", new.note)


def _join(note, old):
    return note if old is None else f"{note}; {old}"


def _untraceable(e) -> bool:
    """The errors of running NumPy-only code on tracers or tensors: a value needed as a
    number, or a NumPy function fusegrad has no rule for."""
    return isinstance(e, ConcretizationError) or (
        type(e) is TypeError and str(e).startswith("fusegrad has no rule for"))


def _fwd_pair(spec, pair):
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        got = (f"a {type(pair).__name__} of length {len(pair)}"
               if isinstance(pair, (tuple, list)) else describe(pair))
        raise TypeError(f"custom_vjp {spec.name}: {spec._role('fwd')} must return a pair "
                        f"(output, residuals), got {got}")
    return pair


# -- eager: fwd on the tensors, one node for the outputs --------------------------------------

def _eager_call(spec, args):
    numpy_fwd = None
    try:
        with _running_fwd(spec):
            pair = spec.fwd(*args)
    except Exception as e:
        if not _untraceable(e):
            raise
        numpy_fwd = str(e).split("\n")[0]
        plain = [unflatten(t, [x.data if isinstance(x, Tensor) else x for x in leaves])
                 for leaves, t in map(flatten, args)]
        with no_grad(), _running_fwd(spec):
            pair = spec.fwd(*plain)
    out, res = _fwd_pair(spec, pair)
    out_leaves, out_tree = _output_leaves(spec, args, out)
    floats = [k for k, x in enumerate(out_leaves) if dtype_of(x).kind == "f"]
    if not floats:
        return out
    res_leaves, res_tree = flatten(res)
    res_slots = [k for k, r in enumerate(res_leaves) if isinstance(r, Tensor)]
    primal = [x for x in flatten(args)[0] if is_numeric(x)]
    layout, node_out = _pack(out_leaves, floats)
    call = CustomVjpCall(spec, args, res_tree,
                         [None if k in res_slots else r for k, r in enumerate(res_leaves)],
                         res_slots, out_tree, [type_of(x) for x in out_leaves], traced=False,
                         layout=layout, numpy_fwd=numpy_fwd)
    n_out = len(out_leaves)
    inputs = [(gradient_edge(x), x.data.shape, x.data.dtype)
              if isinstance(x, Tensor) and x.requires_grad else _NO_INPUT for x in primal]
    inputs += [_NO_INPUT] * (len(res_slots) + n_out)
    saved = [None] * (1 + len(primal)) + [SavedTensor(res_leaves[k], False) for k in res_slots] \
        + [None] * n_out
    params = {"fun": spec.name, "n_in": len(primal), "n_res": len(res_slots), "call": call}
    node_out.grad_fn = Node(f"{node_names[PRIM]}[{spec.name}]", vjp_rules[PRIM], params, saved,
                            inputs, node_out.data.shape,
                            user_location(full=True) if hooks.anomaly_enabled else None)
    node_out._requires_grad = True
    new = list(out_leaves)
    if len(floats) == 1:
        new[floats[0]] = node_out
    else:
        for k, (_, start, size, shape, dtype) in zip(floats, (layout[k] for k in floats)):
            piece = lax.reshape(lax.slice(node_out, (start,), (start + size,)), shape)
            new[k] = piece if piece.dtype == dtype else lax.convert(piece, dtype_name(dtype))
    return unflatten(out_tree, new)


def _pack(out_leaves, floats):
    """The node's output tensor and, per output leaf, where its gradient comes from: the
    node's whole gradient (one float output), a piece of it (several float outputs: the node's
    output is their concatenation, flattened, in their common dtype), or zeros (int, bool)."""
    layout = [("zeros", shape_of(x), dtype_of(x)) for x in out_leaves]
    if len(floats) == 1:
        k = floats[0]
        x = out_leaves[k]
        node_out = _wrap(x.data if isinstance(x, Tensor) else np.asarray(x))
        if isinstance(x, Tensor):
            node_out._version = x._vc()     # the same storage as fwd's output
        layout[k] = ("whole", shape_of(x), dtype_of(x))
        return layout, node_out
    common = np.result_type(*[dtype_of(out_leaves[k]) for k in floats])
    parts, start = [], 0
    for k in floats:
        x = out_leaves[k]
        data = np.asarray(x.data if isinstance(x, Tensor) else x)
        parts.append(data.astype(common).reshape(-1))
        layout[k] = ("piece", start, data.size, data.shape, data.dtype)
        start += data.size
    return layout, _wrap(np.concatenate(parts))

