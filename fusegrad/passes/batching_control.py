"""Batching rules of the ops holding Functions: their bodies are batched by this package's pass.

A scan becomes one scan of the batched body: its xs, mapped, are scanned along their second
axis ([length, B, ...]), and a carry is batched when its initial value is or when the body
makes it depend on a batched value (a fixed point). A cond with a shared predicate stays a
cond of the batched branches; with a batched predicate both branches run and a select per
example picks the results (as JAX does: a branch that raises raises for every example). A
while_loop with a batched predicate runs while any example's predicate holds, and the body
keeps the carries of the examples that are done (a select per example). custom_vjp_call
keeps the user's bwd: the batched op's VJP traces bwd for one example and batches it.

Each rule has the registry's signature (ir/batching.py); passes/batching.py installs them into
their entries, handing over its `batch` (this module imports nothing of it: no cycle).
"""

from __future__ import annotations

from .. import lax
from ..ir.batching import lift
from ..ir.primitives import PRIMITIVES
from ..ir.types import TensorType
from ..tracer.tracer import Tracer, inline, trace_flat

_batch = None     # passes/batching.py's batch, given by install()


def _add(args, prim, inputs, params):
    ctx = args[0].ctx
    outs = ctx.builder.add(prim, [ctx.read(t) for t in inputs], params)
    return tuple(Tracer(v, ctx) for v in outs)


def _moveaxis(x, src, dst):
    perm = [i for i in range(len(x.shape)) if i != src]
    perm.insert(dst, src)
    return lax.transpose(x, tuple(perm))


def _lifted(size, args, flags, want):
    return [lift(lax, size, a) if w and not f else a for a, f, w in zip(args, flags, want)]


def _fixed_point(body, before, carry, after, size, n_out):
    """body batched with its carries (the params between `before` and `after`, one result
    each first) batched where they must be; returns (Function, carry flags, result flags)."""
    batch = _batch
    carry = list(carry)
    while True:
        flags = list(before) + carry + list(after)
        fn, out = batch(body, flags, size, force=carry + [False] * (n_out - len(carry)))
        if out[:len(carry)] == carry:
            return fn, carry, out
        carry = [a or b for a, b in zip(carry, out)]


def scan(lax_, prim, size, args, batched, *, body, length, reverse, num_consts, num_carry):
    nc, nk = num_consts, num_carry
    fn, carry, out = _fixed_point(body, batched[:nc], batched[nc:nc + nk], batched[nc + nk:],
                                  size, len(body.results))
    xs = [_moveaxis(x, 0, 1) if b else x for x, b in zip(args[nc + nk:], batched[nc + nk:])]
    inputs = list(args[:nc]) + _lifted(size, args[nc:nc + nk], batched[nc:nc + nk], carry) + xs
    outs = _add(args, "scan", inputs, {"body": fn, "length": length, "reverse": reverse,
                                       "num_consts": nc, "num_carry": nk})
    ys = [_moveaxis(y, 1, 0) if b else lift(lax, size, y)
          for y, b in zip(outs[nk:], out[nk:])]
    return tuple(_lifted(size, outs[:nk], carry, [True] * nk)) + tuple(ys)


def cond(lax_, prim, size, args, batched, *, true_branch, false_branch):
    batch = _batch
    flags = batched[1:]
    want = [a or b for a, b in zip(batch(true_branch, flags, size)[1],
                                   batch(false_branch, flags, size)[1])]
    if batched[0]:
        want = [True] * len(want)
    t, _ = batch(true_branch, flags, size, force=want)
    f, _ = batch(false_branch, flags, size, force=want)
    if not batched[0]:
        outs = _add(args, "cond", args, {"true_branch": t, "false_branch": f})
        return tuple(_lifted(size, outs, want, [True] * len(outs)))
    pred = args[0]
    return tuple(_select(pred, a, b) for a, b in zip(inline(t, args[1:]), inline(f, args[1:])))


def _select(pred, a, b):
    """Per example: a where pred (bool[B]) holds, else b."""
    return lax.select(lax.broadcast_in_dim(pred, a.shape, (0,)), a, b)


def while_loop(lax_, prim, size, args, batched, *, cond, body, cond_nconsts, body_nconsts):
    batch = _batch
    cn, bn = cond_nconsts, body_nconsts
    cflags, bflags, kflags = batched[:cn], batched[cn:cn + bn], batched[cn + bn:]
    carry = list(kflags)
    while True:
        body_b, carry, _ = _fixed_point(body, bflags, carry, (), size, len(carry))
        cond_b, (pred_batched,) = batch(cond, list(cflags) + carry, size)
        if not pred_batched or all(carry):
            break
        carry = [True] * len(carry)
    k = _lifted(size, args[cn + bn:], kflags, carry)
    if not pred_batched:
        outs = _add(args, "while_loop", list(args[:cn + bn]) + k, {
            "cond": cond_b, "body": body_b, "cond_nconsts": cn, "body_nconsts": bn})
        return tuple(_lifted(size, outs, carry, [True] * len(outs)))
    return _add(args, "while_loop", list(args[:cn]) + list(args[:cn + bn]) + k, {
        "cond": _any_cond(cond_b, cn), "body": _masked_body(cond_b, body_b, cn, bn),
        "cond_nconsts": cn, "body_nconsts": cn + bn})


def _any_cond(cond_b, cn):
    def run(*a):
        (pred,) = inline(cond_b, a)
        return lax.gt(lax.reduce_max(lax.convert(pred, "i64"), (0,)), 0)
    return _traced(run, cond_b.param_types, f"any_{cond_b.name}")


def _masked_body(cond_b, body_b, cn, bn):
    """(cond consts, body consts, k) -> body(k) for the examples whose predicate holds, else k."""
    def run(*a):
        cc, bc, k = a[:cn], a[cn:cn + bn], a[cn + bn:]
        (pred,) = inline(cond_b, cc + k)
        return [_select(pred, new, old) for new, old in zip(inline(body_b, bc + k), k)]
    types = list(cond_b.param_types[:cn]) + list(body_b.param_types)
    return _traced(run, types, f"masked_{body_b.name}")


def _traced(run, types, name):
    fn, _, captures = trace_flat(run, list(types), name)
    assert not captures, "a batched loop body closes over nothing"
    return fn


class BatchedCall:
    """The `call` of a batched custom_vjp_call: its VJP is the user's bwd traced for one
    example and batched (every operand carries the batch axis)."""

    def __init__(self, call, n_in, n_res):
        self.call, self.n_in, self.n_res = call, n_in, n_res

    def __repr__(self) -> str:
        return f"vmap({self.call!r})"

    def vjp(self, g, operands) -> tuple:
        n_in, n_res, slots = self.n_in, self.n_res, []
        multi = isinstance(g, tuple)
        leaves = list(operands[n_in:n_in + n_res]) + (list(g) if multi else [g])
        pad = [None] * (len(operands) - n_in - n_res)

        def per_example(*xs):
            res, gs = xs[:n_res], xs[n_res:]
            cts = self.call.vjp(tuple(gs) if multi else gs[0], [None] * n_in + list(res) + pad)
            slots[:] = [i for i, c in enumerate(cts) if c is not None]
            return [cts[i] for i in slots]
        types = [TensorType(x.aval.dtype, x.aval.shape[1:]) for x in leaves]
        fn, _, captures = trace_flat(per_example, types, f"vmap_bwd_{self.call!r}")
        size = leaves[0].aval.shape[0]
        fn, _ = _batch(fn, [True] * len(types) + [False] * len(captures), size,
                       force=[True] * len(fn.results))
        cts = [None] * len(operands)
        for i, c in zip(slots, inline(fn, leaves + list(captures))):
            cts[i] = c
        return tuple(cts)


def custom_vjp_call(lax_, prim, size, args, batched, *, fun, n_in, n_res, call):
    inputs = _lifted(size, args, batched, [True] * len(args))
    return _add(args, "custom_vjp_call", inputs, {
        "fun": fun, "n_in": n_in, "n_res": n_res, "call": BatchedCall(call, n_in, n_res)})


def install(batch) -> None:
    """Called once by passes/batching.py with its `batch`: the rules go into the registry."""
    global _batch
    _batch = batch
    for name, rule in (("scan", scan), ("cond", cond), ("while_loop", while_loop),
                       ("custom_vjp_call", custom_vjp_call)):
        PRIMITIVES[name].batch = rule
