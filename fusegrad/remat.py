"""fg.checkpoint (jax.checkpoint, remat): the backward pass recomputes fun's forward.

A checkpointed function is a custom_vjp whose residuals are its own arguments: fwd runs fun
and keeps only the inputs; bwd runs fun again under vjp and pulls the cotangent back through
that recomputation. So the formula table still writes every derivative (bwd is fusegrad's own
vjp), and everything custom_vjp supports comes with it: eager, traced and compiled, pytrees,
integer arguments (no cotangent), grad of grad and forward mode (jvp transposes bwd, which is
linear in g).

bwd reads the arguments and the cotangent through one `optimization_barrier` op (JAX's remat
does the same): the recomputed ops then read the barrier's outputs, not fun's inputs, so CSE
cannot merge them into the forward pass's, and they cannot run before the cotangent exists.
The pipeline drops the barrier after CSE and DCE (passes/lower.py).

Inside a scan body this is what bounds memory: the forward scan stores, per step, only the
values the body's VJP reads, and the VJP of a checkpointed call reads only its arguments (the
carry and the x slice), not its intermediates.
"""

from __future__ import annotations

import functools

from .custom import custom_vjp
from .dispatch import bind
from .tracer.tracer import Tracer
from .transforms import vjp
from .tree import flatten, unflatten


def checkpoint(fun):
    """fun, whose gradient recomputes fun's forward pass instead of storing its intermediates.
    """
    @functools.wraps(fun)
    def primal(*args):
        return fun(*args)
    remat = custom_vjp(primal)

    def fwd(*args):
        return fun(*args), args

    def bwd(args, g):
        leaves, tree = flatten(tuple(args))
        spots = [k for k, x in enumerate(leaves) if _is_float(x)]
        leaves, g = _barrier(leaves, spots, g)

        def of_floats(*xs):
            new = list(leaves)
            for k, x in zip(spots, xs):
                new[k] = x
            return fun(*unflatten(tree, new))
        _, pullback = vjp(of_floats, *[leaves[k] for k in spots])
        cts = [None] * len(leaves)
        for k, ct in zip(spots, pullback(g)):
            cts[k] = ct
        return tuple(unflatten(tree, cts))
    remat.defvjp(fwd, bwd)
    return remat


def _barrier(leaves, spots, g):
    """The float leaves and the cotangent through one optimization_barrier, when traced (the
    eager engine has no passes to shield from, and records ops of one output only)."""
    g_leaves, g_tree = flatten(g)
    through = [leaves[k] for k in spots] + g_leaves
    if not any(isinstance(x, Tracer) for x in through):
        return leaves, g
    out = bind("optimization_barrier", *through)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    leaves = list(leaves)
    for k, x in zip(spots, out):
        leaves[k] = x
    return leaves, unflatten(g_tree, out[len(spots):])


def _is_float(x) -> bool:
    if isinstance(x, float):
        return True
    dtype = getattr(x, "dtype", None)
    return dtype is not None and getattr(dtype, "kind", "") == "f"


remat = checkpoint
