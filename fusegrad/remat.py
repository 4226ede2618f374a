"""fg.checkpoint (jax.checkpoint, remat): the backward pass recomputes fun's forward.

A checkpointed function is a custom_vjp whose residuals are its own arguments: fwd runs fun
and keeps only the inputs; bwd runs fun again under vjp and pulls the cotangent back through
that recomputation. So the formula table still writes every derivative (bwd is fusegrad's own
vjp), and everything custom_vjp supports comes with it: eager, traced and compiled, pytrees,
integer arguments (no cotangent), grad of grad and forward mode (jvp transposes bwd, which is
linear in g).

Inside a scan body this is what bounds memory: the forward scan stores, per step, only the
values the body's VJP reads, and the VJP of a checkpointed call reads only its arguments (the
carry and the x slice), not its intermediates. At the top level of a program the recomputed
ops are identical to the forward ones, and CSE may merge them again.
"""

from __future__ import annotations

import functools

from .custom import custom_vjp
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


def _is_float(x) -> bool:
    if isinstance(x, float):
        return True
    dtype = getattr(x, "dtype", None)
    return dtype is not None and getattr(dtype, "kind", "") == "f"


remat = checkpoint
