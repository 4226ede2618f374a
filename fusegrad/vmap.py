"""fg.vmap: map a function over an axis of its arguments (jax.vmap, torch.func.vmap).

Inside a trace, fun is traced once for one example (the mapped axis removed from each mapped
argument) and passes/batching.py turns that Function into one over the whole batch, rule by
rule from the registry; the result is inlined into the enclosing trace, so vmap composes with
grad, jvp, jit and itself. `chunk_size` runs the batched Function over chunks of that many
examples in a scan (lax.map's batch_size), bounding the memory of the intermediates.

Outside a trace, on NumPy arrays, the same happens on the interpreter (wrap in fg.jit to
compile). On eager tensors, or under an eager transform, vmap is what it means: a loop over
the examples, stacked, recorded on the tape like any Python code.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from . import lax
from . import numpy as fnp
from .dispatch import level
from .passes.batching import batch, lift_result
from .runtime.signature import leaf_type
from .state import eager_transforms
from .tracer.tracer import Tracer, is_tracing, trace_flat
from .tracer.tracer import _current as current_trace
from .transforms import inline_consumed
from .tree import flatten, unflatten


def vmap(fun, in_axes=0, out_axes=0, axis_size=None, chunk_size=None):
    """Vectorize fun over an axis of its positional arguments.

    Args:
        fun: a function of arrays (pytrees allowed).
        in_axes: an int, None, or a tuple/list with one entry per positional argument, each an
            int, None or a pytree prefix of that argument: the axis to map over (None: the
            argument is the same for every example).
        out_axes: an int, None or a pytree prefix of the output: where the mapped axis goes
            (None: the output must not depend on the mapped arguments).
        axis_size: the batch size, needed only when no argument is mapped.
        chunk_size: run at most this many examples at once (a scan over chunks).

    Returns:
        The vectorized function.
    """
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size must be a positive int, got {chunk_size!r}")
    jitted = []

    @functools.wraps(fun)
    def vmapped(*args):
        axes = _leaf_axes(in_axes, args)
        size = _batch_size(args, axes, axis_size)
        if is_tracing():
            return _traced(fun, args, axes, size, out_axes, chunk_size)
        if _eager(args):
            return _looped(fun, args, axes, size, out_axes)
        if not jitted:
            from .api import jit
            jitted.append(jit(lambda *a: _traced(fun, a, _leaf_axes(in_axes, a), size,
                                                 out_axes, chunk_size), backend="interp"))
        return jitted[0](*args)
    return vmapped


# -- in_axes and sizes --------------------------------------------------------------------------

def _leaf_axes(in_axes, args) -> list:
    """One axis (int or None) per leaf of args, with JAX's errors for a bad in_axes."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple):
        if len(in_axes) != len(args):
            raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries "
                             f"corresponding to the positional arguments passed to the "
                             f"function, but got len(in_axes)={len(in_axes)}, "
                             f"len(args)={len(args)}")
        specs = in_axes
    else:
        specs = (in_axes,) * len(args)
    axes = []
    for i, (spec, arg) in enumerate(zip(specs, args)):
        axes.extend(_prefix_axes(spec, arg, f"argument {i}"))
    return axes


def _prefix_axes(spec, arg, where) -> list:
    if spec is None or isinstance(spec, int):
        if spec is not None and not isinstance(spec, bool):
            for k, x in enumerate(flatten(arg)[0]):
                _check_axis(spec, x, where if len(flatten(arg)[0]) == 1 else f"{where} leaf {k}")
        return [spec] * len(flatten(arg)[0])
    if isinstance(spec, dict) and isinstance(arg, dict) and set(spec) == set(arg):
        return [a for key in sorted(arg, key=_sort_key) for a in
                _prefix_axes(spec[key], arg[key], f"{where}[{key!r}]")]
    if isinstance(spec, (tuple, list)) and isinstance(arg, (tuple, list)) and \
            len(spec) == len(arg):
        return [a for k, (s, x) in enumerate(zip(spec, arg))
                for a in _prefix_axes(s, x, f"{where}[{k}]")]
    raise ValueError(f"vmap in_axes specification for {where} must be a tree prefix of the "
                     f"argument: got {spec!r} for a {type(arg).__name__}")


def _sort_key(k):
    return (type(k).__name__, k)


def _check_axis(axis, x, where):
    ndim = len(fnp._shape(x))
    if not -ndim <= axis < ndim:
        raise ValueError(f"vmap was requested to map {where} along axis {axis}, which implies "
                         f"that its rank should be at least {axis + 1 if axis >= 0 else -axis}, "
                         f"but is only {ndim} (its shape is {tuple(fnp._shape(x))})")


def _batch_size(args, axes, axis_size) -> int:
    leaves = flatten(tuple(args))[0]
    sizes = {}
    for k, (x, a) in enumerate(zip(leaves, axes)):
        if a is not None:
            sizes[k] = fnp._shape(x)[a]
    if not sizes:
        if axis_size is None:
            raise ValueError("vmap must have at least one non-None value in in_axes, or be "
                             "given axis_size")
        return axis_size
    if len(set(sizes.values())) > 1 or (axis_size is not None and
                                        axis_size not in sizes.values()):
        listed = ", ".join(f"leaf {k} of shape {tuple(fnp._shape(leaves[k]))} mapped along "
                           f"axis {axes[k]} has size {n}" for k, n in sizes.items())
        given = f" (axis_size={axis_size})" if axis_size is not None else ""
        raise ValueError(f"vmap got inconsistent sizes for array axes to be mapped{given}: "
                         f"{listed}")
    return next(iter(sizes.values()))


def _eager(args) -> bool:
    return eager_transforms.depth > 0 or os.environ.get("FUSEGRAD_BACKEND") == "eager" or any(
        level(x) == 1 for x in flatten(tuple(args))[0])


def _moved(x, axis):
    """x with `axis` first."""
    ndim = len(fnp._shape(x))
    axis %= ndim
    if axis == 0:
        return x
    return lax.transpose(x, (axis,) + tuple(i for i in range(ndim) if i != axis))


def _out_axes(out_axes, out_tree, n) -> list:
    if out_axes is None or isinstance(out_axes, int):
        return [out_axes] * n
    spec_leaves, spec_tree = flatten(out_axes)
    if spec_tree == out_tree:
        return spec_leaves
    raise ValueError(f"vmap out_axes {out_axes!r} do not match the output's structure")


def _placed(x, axis, who):
    if axis is None:
        return x
    ndim = len(fnp._shape(x))
    if not -ndim <= axis < ndim:
        raise ValueError(f"vmap out_axes={axis} is out of range for {who} of rank {ndim}")
    axis %= ndim
    if axis == 0:
        return x
    perm = list(range(1, ndim))
    perm.insert(axis, 0)
    return lax.transpose(x, tuple(perm))


# -- traced ---------------------------------------------------------------------------------------

def _traced(fun, args, axes, size, out_axes, chunk_size):
    leaves, tree = flatten(tuple(args))
    moved = [x if a is None else _moved(x, a) for x, a in zip(leaves, axes)]
    types = []
    for x, a in zip(moved, axes):
        t, weak = (x.aval, x.weak) if isinstance(x, Tracer) else leaf_type(x)
        types.append((t.with_shape(t.shape[1:]) if a is not None else t, weak))

    def flat_fun(*xs):
        return fun(*unflatten(tree, list(xs)))
    fn, out_tree, captures = trace_flat(flat_fun, [t for t, _ in types],
                                        f"vmap_{getattr(fun, '__name__', 'fun')}",
                                        weak=[w for _, w in types])
    flags = [a is not None for a in axes] + [False] * len(captures)
    inputs = moved + list(captures)
    if chunk_size is not None and chunk_size < size:
        outs, on = _chunked(fn, flags, inputs, size, chunk_size)
    else:
        outs, on = _whole(fn, flags, inputs, size)
    placed = _out_axes(out_axes, out_tree, len(outs))
    results = []
    ctx = current_trace()
    for k, (o, is_on, axis) in enumerate(zip(outs, on, placed)):
        if axis is None:
            if is_on:
                raise ValueError(f"vmap has mapped output (leaf {k}) but out_axes is None")
            results.append(o)
            continue
        if not is_on:
            o = Tracer(lift_result(ctx, ctx.read(o), size), ctx)
        results.append(_placed(o, axis, f"output leaf {k}"))
    return unflatten(out_tree, results)


def _whole(fn, flags, inputs, size):
    bfn, on = batch(fn, flags, size)
    return inline_consumed(bfn, inputs), on


def _chunked(fn, flags, inputs, size, chunk):
    """The batched Function over chunks of `chunk` examples in a scan, then the remainder."""
    n, rem = divmod(size, chunk)
    bfn, on = batch(fn, flags, chunk)
    mapped = [i for i, f in enumerate(flags) if f]
    xs = [lax.reshape(lax.slice(inputs[i], (0,) * len(inputs[i].shape),
                                (n * chunk,) + tuple(inputs[i].shape[1:])),
                      (n, chunk) + tuple(inputs[i].shape[1:])) for i in mapped]

    def body(carry, xs_chunk):
        args = list(inputs)
        for i, x in zip(mapped, xs_chunk):
            args[i] = x
        outs = inline_consumed(bfn, args)
        ctx = current_trace()
        return carry, [o if o_on else Tracer(lift_result(ctx, ctx.read(o), chunk), ctx)
                       for o, o_on in zip(outs, on)]
    _, ys = lax.scan(body, (), xs)
    outs = [lax.reshape(y, (n * chunk,) + tuple(y.shape[2:])) for y in ys]
    if rem:
        tail = list(inputs)
        for i in mapped:
            tail[i] = lax.slice(inputs[i], (n * chunk,) + (0,) * (len(inputs[i].shape) - 1),
                                tuple(inputs[i].shape))
        rest, rest_on = _whole(fn, flags, tail, rem)
        ctx = current_trace()
        rest = [o if o_on else Tracer(lift_result(ctx, ctx.read(o), rem), ctx)
                for o, o_on in zip(rest, rest_on)]
        outs = [lax.concatenate([a, b], 0) for a, b in zip(outs, rest)]
    return outs, [True] * len(outs)


# -- eager: a loop over the examples ------------------------------------------------------------

def _looped(fun, args, axes, size, out_axes):
    leaves, tree = flatten(tuple(args))
    moved = [x if a is None else _moved(x, a) for x, a in zip(leaves, axes)]
    per_example = []
    for b in range(size):
        example = [x if a is None else x[b] for x, a in zip(moved, axes)]
        out = fun(*unflatten(tree, example))
        out_leaves, out_tree = flatten(out)
        per_example.append(out_leaves)
    if size == 0:
        raise ValueError("vmap over an empty batch needs a traced function: wrap it in fg.jit")
    placed = _out_axes(out_axes, out_tree, len(per_example[0]))
    stacked = []
    for k, axis in enumerate(placed):
        column = [ex[k] for ex in per_example]
        if axis is None:
            stacked.append(column[0])
            continue
        ndim = len(fnp._shape(column[0])) + 1
        stacked.append(fnp.stack(column, axis=axis % ndim if -ndim <= axis < ndim else
                                 _bad_out_axis(axis, ndim, k)))
    return unflatten(out_tree, [np.asarray(s) if isinstance(s, np.generic) else s
                                for s in stacked])


def _bad_out_axis(axis, ndim, k):
    raise ValueError(f"vmap out_axes={axis} is out of range for output leaf {k} of rank {ndim}")
