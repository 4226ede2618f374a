"""custom_vjp_call: the op of a function with a user-written VJP (fusegrad.custom_vjp).

When a `@fg.custom_vjp` function is traced, its fwd is traced as ordinary ops and this op ties
the pieces together: its operands are the primal input leaves, then the residual leaves fwd
returned as traced values, then fwd's output leaves; its outputs are those output leaves
(the identity). So the forward values are fwd's, and the op only marks the place where
autodiff must call the user's bwd instead of differentiating fwd's ops: the VJP rule
(formulas/custom.py) calls bwd on the residual operands and the output cotangents, and gives
cotangents to the primal operands only. The residuals keep their dependence on the inputs
through fwd's ops, so a bwd written with traceable operations differentiates again.

The params are `fun` (the function's name), `n_in` and `n_res` (how many operands are primal
inputs and residuals), and `call`, an opaque object holding bwd and the tree structures
(fusegrad/custom.py); the text form prints it as `<opaque ...>`, so IR holding this op does
not parse back. The op never reaches codegen: the lower pass replaces its outputs by the out
operands before fusion, and DCE removes the fwd ops only the residuals needed.
"""

from __future__ import annotations

from .registry import Doc, define, fail

SECTION = "Custom rules"


def _split(operands, n_in, n_res):
    return operands[n_in + n_res:]


def _custom_vjp_call_rule(prim, *types, fun, n_in, n_res, call):
    outs = _split(types, n_in, n_res)
    if n_in < 0 or n_res < 0 or not outs:
        fail(prim, f"needs n_in={n_in} primal inputs and n_res={n_res} residuals followed by "
                   f"at least one output operand", *types)
    return tuple(outs)


def _identity(*operands, fun, n_in, n_res, call):
    outs = _split(operands, n_in, n_res)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _lower_custom_vjp_call(lax, *operands, fun, n_in, n_res, call):
    return tuple(_split(operands, n_in, n_res))


define("custom_vjp_call", "composite", _custom_vjp_call_rule, _identity,
       lower=_lower_custom_vjp_call, section=SECTION,
       doc=Doc("primal inputs x…, residuals r…, outputs y… (any types)",
               "`fun` (the name), `n_in`, `n_res`, `call` (bwd and the tree structures; "
               "opaque, not parsed back)",
               "y…'s types",
               "the identity on y…; its VJP calls the user's bwd on r… and the cotangents "
               "of y…, and gives cotangents to x… only (`fusegrad.custom_vjp`). Lowered "
               "away before fusion"))


# -- optimization_barrier: what fg.checkpoint's recomputation reads ---------------------------

def _barrier_rule(prim, *types):
    if not types:
        fail(prim, "needs at least one operand")
    return tuple(types)


def _barrier(*operands):
    return operands[0] if len(operands) == 1 else tuple(operands)


def _lower_barrier(lax, *operands):
    return tuple(operands)


define("optimization_barrier", "composite", _barrier_rule, _barrier, lower=_lower_barrier,
       section=SECTION,
       doc=Doc("x… (any types)", "", "x…'s types",
               "the identity on x… (`jax.lax.optimization_barrier`), opaque to the "
               "optimization passes: ops computed from its outputs are not merged (CSE) with "
               "the same ops on its operands. fg.checkpoint's backward pass reads the "
               "arguments and the cotangent through one, so the recomputation stays a "
               "recomputation; the pipeline removes it after CSE and DCE"))
