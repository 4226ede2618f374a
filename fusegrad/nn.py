"""fusegrad.nn: neural-network functions. The composites (softmax, log_softmax, logsumexp,
cross_entropy, layer_norm, gelu) are single IR ops with their own VJP rule; the `lower` pass
expands them into primitives before fusion.
"""

from __future__ import annotations

from . import lax
from . import numpy as fnp

relu = fnp.relu
sigmoid = fnp.sigmoid
logsumexp = fnp.logsumexp


def _axis(x, axis):
    (axis,) = fnp._axes(axis, fnp._ndim(x))
    return axis


def softmax(x, axis=-1):
    return lax.softmax(x, _axis(x, axis))


def log_softmax(x, axis=-1):
    return lax.log_softmax(x, _axis(x, axis))


def gelu(x, approximate=False):
    """GELU; approximate=True (or "tanh") uses the tanh form."""
    return lax.gelu(x, approximate not in (False, "none"))


def cross_entropy(logits, targets):
    """Mean over rows of -log softmax(logits)[row, target]; targets are integer classes."""
    if fnp._ndim(logits) != 2 or fnp._ndim(targets) != 1:
        raise ValueError(f"cross_entropy needs logits [N, C] and targets [N], got "
                         f"{list(fnp._shape(logits))} and {list(fnp._shape(targets))}")
    return lax.cross_entropy(logits, fnp._indices(targets))


def layer_norm(x, eps=1e-5, ndim=1):
    """Standardize over the trailing `ndim` axes (no affine parameters)."""
    return lax.layer_norm(x, ndim, eps)


def softplus(x):
    """log(1 + exp(x)), finite and exact in both tails: max(x, 0) + log1p(exp(-|x|)).

    maximum splits its tie at 0 evenly, so the gradient there is the exact 1/2."""
    return fnp.add(fnp.maximum(x, 0), fnp.log1p(fnp.exp(fnp.negative(fnp.absolute(x)))))
