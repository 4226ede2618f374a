"""Batching rules: how each primitive runs on operands with a leading batch axis (fg.vmap).

Every registry entry gets a `batch` field here, one rule per category (and per shape op, whose
params each name axes): `rule(lax, prim, size, args, batched, **params)` returns the op's
outputs, each with the batch axis first, given the operands (`batched[i]` says whether args[i]
has it; the others are the same for every example). Rules are written with the `lax` module
they are passed, as lowerings are, so this package imports nothing above it.

Gathers with batched indices become take_along_axis and scatter_add_along_axis over the
batch; the linear algebra of host steps already maps over leading axes, and the special
functions computed by host steps are elementwise. The ops holding Functions (scan, cond,
while_loop, custom_vjp_call) get their rules from passes/batching_control.py, which batches
their bodies. A primitive whose entry says FALLBACK (ode_solve) is batched by
passes/batching.py as a scan over the batch that runs the op once per example, with one
warning naming it.
"""

from __future__ import annotations

from .registry import PRIMITIVES

FALLBACK = "scan over the batch"


def lift(lax, size, x):
    """An unbatched operand with the batch axis added (the same value for every example)."""
    return lax.broadcast_in_dim(x, (size,) + tuple(x.shape), tuple(range(1, len(x.shape) + 1)))


def _all_batched(lax, size, args, batched):
    return [a if b else lift(lax, size, a) for a, b in zip(args, batched)]


def _axis(axis, ndim) -> int:
    """An axis of the unbatched operand (of rank ndim), moved past the batch axis."""
    return axis % max(ndim, 1) + 1


def elementwise(lax, prim, size, args, batched, **params):
    return lax.bind(prim, *_all_batched(lax, size, args, batched), **params)


def reduction(lax, prim, size, args, batched, **params):
    (x,) = args
    if "axes" in params:
        params = {**params, "axes": tuple(a + 1 for a in params["axes"])}
    else:
        params = {**params, "axis": _axis(params["axis"], len(x.shape) - 1)}
    return lax.bind(prim, x, **params)


def along_axis(lax, prim, size, args, batched, **params):
    """Ops of one operand with an `axis` param: cumsum, cumprod, softmax, log_softmax."""
    (x,) = args
    return lax.bind(prim, x, **{**params, "axis": _axis(params["axis"], len(x.shape) - 1)})


def logsumexp(lax, prim, size, args, batched, *, axes):
    return lax.bind(prim, args[0], axes=tuple(a + 1 for a in axes))


def same_params(lax, prim, size, args, batched, **params):
    """layer_norm (its last axes) and gelu: the batch axis is just one more leading axis."""
    return lax.bind(prim, args[0], **params)


def broadcast_in_dim(lax, prim, size, args, batched, *, shape, dims):
    return lax.broadcast_in_dim(args[0], (size,) + tuple(shape), (0,) + tuple(d + 1 for d in dims))


def reshape(lax, prim, size, args, batched, *, shape):
    return lax.reshape(args[0], (size,) + tuple(shape))


def transpose(lax, prim, size, args, batched, *, perm):
    return lax.transpose(args[0], (0,) + tuple(p + 1 for p in perm))


def slice(lax, prim, size, args, batched, *, start, stop, step):
    return lax.slice(args[0], (0,) + tuple(start), (size,) + tuple(stop), (1,) + tuple(step))


def pad(lax, prim, size, args, batched, *, low, high, interior):
    return lax.pad(args[0], (0,) + tuple(low), (0,) + tuple(high), (0,) + tuple(interior))


def concatenate(lax, prim, size, args, batched, *, axis):
    return lax.concatenate(_all_batched(lax, size, args, batched),
                           _axis(axis, len(args[0].shape) - (1 if batched[0] else 0)))


def rev(lax, prim, size, args, batched, *, axes):
    return lax.rev(args[0], tuple(a + 1 for a in axes))


def matmul(lax, prim, size, args, batched):
    """A batched contraction. When one operand is a matrix shared by every example (x @ w),
    the examples' rows are stacked into one matrix product instead of copying w per example."""
    a, b = args
    if batched[0] and not batched[1] and len(b.shape) == 2:
        rows = lax.reshape(a, (_prod(a.shape[:-1]), a.shape[-1]))
        return lax.reshape(lax.bind("matmul", rows, b), tuple(a.shape[:-1]) + (b.shape[-1],))
    if batched[1] and not batched[0] and len(a.shape) == 2 and len(b.shape) == 3:
        k, n = b.shape[1], b.shape[2]
        cols = lax.reshape(lax.transpose(b, (1, 0, 2)), (k, size * n))
        out = lax.reshape(lax.bind("matmul", a, cols), (a.shape[0], size, n))
        return lax.transpose(out, (1, 0, 2))
    return lax.bind("matmul", *_all_batched(lax, size, args, batched))


def _moveaxis(lax, x, src, dst):
    perm = [i for i in range(len(x.shape)) if i != src]
    perm.insert(dst, src)
    return lax.transpose(x, tuple(perm))


def _spread_index(lax, idx, size, pre, post):
    """Batched indices [B, I...] flattened to [B, K] and broadcast over the batched operand's
    other axes: [B, pre..., K, post...], the index array of an along-axis gather or scatter."""
    k = _prod(idx.shape[1:])
    shape = (size,) + tuple(pre) + (k,) + tuple(post)
    return lax.broadcast_in_dim(lax.reshape(idx, (size, k)), shape, (0, len(pre) + 1))


def take(lax, prim, size, args, batched, *, axis):
    x, idx = args
    axis = axis % (len(x.shape) - batched[0])
    if not batched[1]:
        return lax.take(x, idx, axis + 1)
    if not batched[0]:      # x shared: one gather, the batch axis of idx moved to the front
        return _moveaxis(lax, lax.take(x, idx, axis), axis, 0)
    pre, post = x.shape[1:axis + 1], x.shape[axis + 2:]
    out = lax.take_along_axis(x, _spread_index(lax, idx, size, pre, post), axis + 1)
    return lax.reshape(out, (size,) + tuple(pre) + tuple(idx.shape[1:]) + tuple(post))


def take_along_axis(lax, prim, size, args, batched, *, axis):
    x, idx = _all_batched(lax, size, args, batched)
    return lax.take_along_axis(x, idx, _axis(axis, len(x.shape) - 1))


def scatter_add(lax, prim, size, args, batched, *, axis, shape):
    idx, g = args
    axis = axis % len(shape)
    out_shape = (size,) + tuple(shape)
    if not batched[1]:
        g = lift(lax, size, g)
    if not batched[0]:
        return lax.scatter_add(idx, g, axis + 1, out_shape)
    pre, post = shape[:axis], shape[axis + 1:]
    index = _spread_index(lax, idx, size, pre, post)
    return lax.scatter_add_along_axis(index, lax.reshape(g, index.shape), axis + 1, out_shape)


def scatter_add_along_axis(lax, prim, size, args, batched, *, axis, shape):
    idx, g = _all_batched(lax, size, args, batched)
    return lax.scatter_add_along_axis(idx, g, _axis(axis, len(shape)), (size,) + tuple(shape))


def stacks(lax, prim, size, args, batched, **params):
    """Linear algebra on stacks of matrices: the batch axis is one more leading axis."""
    return lax.bind(prim, *_all_batched(lax, size, args, batched), **params)


def require_zero(lax, prim, size, args, batched, *, shape, message):
    return lax.bind(prim, args[0], shape=(size,) + tuple(shape), message=message)


def cross_entropy(lax, prim, size, args, batched):
    """Per example: the mean over rows of -log_softmax(logits)[i, target_i]."""
    logits, targets = _all_batched(lax, size, args, batched)
    n = logits.shape[1]
    picked = lax.take_along_axis(lax.bind("log_softmax", logits, axis=2),
                                 lax.reshape(targets, (size, n, 1)), 2)
    total = lax.reduce_sum(picked, (1, 2))
    return lax.div(lax.neg(total), lax.full((size,), float(n), total.dtype))


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def no_operands(lax, prim, size, args, batched, **params):
    raise AssertionError(f"{prim} has no operands and is never batched")


BY_CATEGORY = {"elementwise": elementwise, "reduction": reduction, "nullary": no_operands}
BY_NAME = {
    "cumsum": along_axis, "cumprod": along_axis, "softmax": along_axis,
    "log_softmax": along_axis, "logsumexp": logsumexp, "layer_norm": same_params,
    "gelu": same_params, "broadcast_in_dim": broadcast_in_dim, "reshape": reshape,
    "transpose": transpose, "slice": slice, "pad": pad, "concatenate": concatenate, "rev": rev,
    "matmul": matmul, "take": take, "take_along_axis": take_along_axis,
    "scatter_add": scatter_add, "scatter_add_along_axis": scatter_add_along_axis,
    "argsort": along_axis, "argpartition": along_axis, "require_zero": require_zero,
    "cross_entropy": cross_entropy, "optimization_barrier": elementwise,
    **{name: stacks for name in ("solve", "triangular_solve", "cholesky", "eigh", "svd", "qr",
                                 "slogdet", "expm")},
    **{name: elementwise for name in ("polygamma", "erfinv", "erfcinv", "log_ndtr", "i0", "i1",
                                      "i0e", "i1e")},
}


def install() -> None:
    """Give every registry entry its rule, or FALLBACK."""
    for p in PRIMITIVES.values():
        if p.batch is None:
            p.batch = BY_NAME.get(p.name) or BY_CATEGORY.get(p.category) or FALLBACK
