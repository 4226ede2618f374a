"""Custom rules: the user's own VJP (fusegrad.custom_vjp)."""

from __future__ import annotations

from .table import _vjp


@_vjp("custom_vjp_call", "CustomVjpBackward", reads="xs")
def custom_vjp_call(g, out, *xs, fun, n_in, n_res, call):
    """The user's bwd, called on the residual operands and g (unflattened into their trees),
    its result checked against the inputs: cotangents for the n_in primal inputs, None for the
    residuals and outputs, so no gradient goes through fwd's own ops to the output. The eager
    node saves only the residuals (fusegrad/custom.py records it)."""
    return call.vjp(g, xs)


@_vjp("optimization_barrier", "OptimizationBarrierBackward", reads="")
def optimization_barrier(g, out, *xs):
    """The identity's: each cotangent passes through."""
    return tuple(g) if isinstance(g, (tuple, list)) else (g,)
