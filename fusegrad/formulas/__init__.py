"""THE formula table: one vector-Jacobian product rule per differentiable primitive.

This is the only place in fusegrad where a derivative is written down (like PyTorch's
derivatives.yaml). The eager tape engine calls these rules on NumPy arrays (or on eager tensors,
recording again, under create_graph=True); the IR autodiff pass calls them on tracers to append
the backward ops. So a rule is written only with `fusegrad.lax` functions and Python operators.

Signature:  rule(g, out, *inputs, **params) -> tuple, one cotangent per input.

Names in scope:
    g        the cotangent of the output (the gradient of the loss with respect to `out`);
             it has the output's shape and dtype
    out      the primal output of the op (use it when the derivative is cheaper through it:
             exp, tanh, logistic, sqrt, softmax, ...)
    x, y...  the primal inputs, in the op's argument order; a rule may read `.shape` and
             `.dtype` of array inputs (never of Python scalars)
    params   the op's static params as keywords (axes, axis, shape, perm, ...)

Each rule declares on registration which of its own arguments it reads besides g: `reads="x y"`
(the values), `reads="x.shape"` (only .shape / .dtype / .ndim), `reads="xs.shape"` (every one of
*xs), `reads=""` (none). The eager engine saves exactly these for backward (runtime/graph.py);
params are always passed. tests/test_formulas.py checks that each declaration is sufficient
(an undeclared argument is never touched) and minimal.

Conventions:
    * None means "no gradient flows to this input": indices, select's predicate. Primitives with
      no derivative at all (comparisons, logic, sign, argmax, nullary constructors) are listed in
      NON_DIFFERENTIABLE; their results are constants for autodiff.
    * Elementwise rules may return a cotangent in the *broadcast* shape and the *output* dtype.
      Un-broadcasting (sum_to_shape) and casting back to the input's dtype happen once, in the
      driver (`unbroadcast_and_cast`), never in a rule. Skipping None and summing fan-in also
      live in the driver.
    * Kinks follow PyTorch: relu'(0) = 0 (relu is traced as select(x > 0, x, 0) and needs no rule
      of its own); abs'(0) = sign(0) = 0; maximum/minimum and reduce_max/min split the gradient
      evenly among ties; clamp is maximum/minimum. nan propagates, in the value as in NumPy and
      in the gradient as PyTorch's max(): the nan operands are the result and share g, so
      maximum(nan, 1) sends g to the nan and 0 to the 1.
    * Rounding (floor, ceil, round, trunc) is piecewise constant: no gradient. remainder
      (x - y floor(x/y)) and fmod (x - y trunc(x/y)) have slope 1 in x and -floor(x/y),
      -trunc(x/y) in y, as PyTorch.
    * pow guards: the base gets 0 where the exponent is 0 (so d/dx x**0 = 0 even at x = 0), the
      exponent gets 0 where the base is 0 (instead of 0 * log 0 = nan).
    * prod: no zero in the slice -> out / x; exactly one zero -> the product of the others at the
      zero and 0 elsewhere; several zeros -> 0 everywhere.
    * softmax and log_softmax go through the saved output and logsumexp through a max-shifted
      softmax, so they stay finite (and exact for ties) for large inputs; a logsumexp slice
      that is entirely -inf gets a zero gradient, not nan.
    * cross_entropy is the mean over rows of -log_softmax(logits)[target]; its gradient is
      (softmax - onehot(target)) / N, the one-hot a scatter of ones: like the forward gather,
      it follows NumPy's index rules (-1 is the last class, out of range raises).
    * layer_norm backward is (g - mean(g) - y * mean(g * y)) / sigma, with sigma recomputed from x.
    * gelu: exact Phi(x) + x phi(x), or the derivative of the tanh approximation.

The rules are grouped by category in the modules of this package (elementwise.py, structural.py,
reductions.py, linalg.py, composites.py, custom.py, control.py); table.py holds the registration
and the helpers they share. Two things only control flow needs (control.py): a rule may set
`rule.partial_g = True` to get None in g for the outputs no gradient reaches (a scan's
residuals), and FORWARD_RULES maps a primitive to the function the autodiff pass runs on each
of its ops a gradient flows through before the backward walk, returning the op to run instead
(a scan that also stacks the residuals its rule reads).
"""

from . import (composites, control, custom, elementwise, linalg, reductions,  # noqa: F401
               special, structural)
from .table import (NON_DIFFERENTIABLE, _vjp, node_names, sum_to_shape, unbroadcast_and_cast,
                    vjp_rules)

FORWARD_RULES = {"scan": control.scan_forward}

__all__ = ["FORWARD_RULES", "NON_DIFFERENTIABLE", "_vjp", "node_names", "sum_to_shape",
           "unbroadcast_and_cast", "vjp_rules"]
