"""Linear algebra."""

from __future__ import annotations

from .. import lax
from .table import _mT, _vjp


def _matmul_vjp(g, a, b):
    """g @ b^T and a^T @ g, with 1-D operands promoted to a row (a) or a column (b) and back.

    Batch dimensions that were broadcast come back in the broadcast shape; the driver sums them.
    """
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    a2 = lax.reshape(a, (1,) + tuple(a.shape)) if a_vec else a
    b2 = lax.reshape(b, tuple(b.shape) + (1,)) if b_vec else b
    batch = tuple(g.shape)[:len(g.shape) - (not a_vec) - (not b_vec)]
    g2 = lax.reshape(g, batch + (a2.shape[-2], b2.shape[-1]))
    ga, gb = lax.matmul(g2, _mT(b2)), lax.matmul(_mT(a2), g2)
    if a_vec:
        ga = lax.reshape(ga, batch + tuple(a.shape))
    if b_vec:
        gb = lax.reshape(gb, batch + tuple(b.shape))
    return ga, gb


@_vjp("matmul", "MatmulBackward", reads="a b")
def matmul(g, out, a, b):
    return _matmul_vjp(g, a, b)
