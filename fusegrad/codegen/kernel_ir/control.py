"""A scan (fori_loop with static bounds is one) as a compiled loop of the same program.

The body Function is built on its own (build.build, its own Plan) and its statements are
moved into one Loop over the steps, with every buffer and register renamed into the enclosing
program:

    the body's arena        a region of the enclosing arena, after everything the plan placed
    its constants           more constants of the enclosing table
    consts c...             the scan operands' own buffers
    carries k...            two regions each, trading places: step i reads region i & 1 and
                            writes region 1 - (i & 1), so a result that aliases its own or
                            another carry is never overwritten before it is read (the rule
                            codegen/loops.py follows with Numba); the initial carries are
                            copied into region 0 before the loop, the final ones out of
                            region length & 1 after it
    xs[i], ys[i]            the stacked operand and result, one more affine term in the step
                            (position length - 1 - i with `reverse`)

A body result that is not in its own buffer (a param, a constant, a value another result
holds) is copied into place after the body's statements. Registers get a suffix per scan, so
nested scans compile too; the body's errors (an index out of bounds, with the user's
file:line) are the enclosing program's. A scan whose body has a host step stays a host step
(host.py: the loop in Python around the compiled body).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from .nodes import ITEMSIZE, Alu, Buffer, Const, Gemm, Index, Load, Loop, Raise, Reg, Store

_SCANS = itertools.count()


def compiles(op) -> bool:
    """Whether a scan compiles as a loop: its body (and nested bodies) without host steps."""
    from . import covers_op
    return op.prim == "scan" and all(covers_op(o, loops=True) for o in op.params["body"].ops)


def build_scan(k, plan, ops):
    from .build import build
    from .plan import Plan
    (op,) = ops
    p = op.params
    body, length, nc, nk = p["body"], p["length"], p["num_consts"], p["num_carry"]
    program, bplan = build(body, Plan(body))
    consts, inits, xs = op.inputs[:nc], op.inputs[nc:nc + nk], op.inputs[nc + nk:]
    finals, ys = op.outputs[:nk], op.outputs[nk:]
    base = _grow(plan, bplan.arena)
    regions = [_grow(plan, 2 * _bytes(v)) for v in inits]
    for v, at in zip(inits, regions):
        _copy(k, v.type.size, plan.buffer(v), Index(), Buffer(0, at, v.dtype), Index())
    const_slot = 1 + len(plan.fn.params) + len(plan.fn.results) + len(plan.consts)
    plan.consts.extend(bplan.consts)
    if length:
        i = Reg(f"%scan{next(_SCANS)}", "i64")
        loop = Loop(i, length)
        outer, k.b.out = k.b.out, loop.body
        cur = k.b.and_(i, 1)
        nxt = k.b.sub(1, cur)
        pos = Index(length - 1, ((i, -1),)) if p["reverse"] else Index(0, ((i, 1),))
        where = _Where(bplan, base, const_slot, len(body.params) + len(body.results))
        for j, v in enumerate(consts):
            where.param(j, plan.buffer(v), Index())
        for j, v in enumerate(inits):
            where.param(nc + j, Buffer(0, regions[j], v.dtype), Index(0, ((cur, v.type.size),)))
        for j, v in enumerate(xs):
            where.param(nc + nk + j, plan.buffer(v), _scaled(pos, math.prod(v.shape[1:])))
        out_at = [(Buffer(0, regions[j], v.dtype), Index(0, ((nxt, v.type.size),)))
                  for j, v in enumerate(inits)]
        out_at += [(plan.buffer(v), _scaled(pos, math.prod(v.shape[1:]))) for v in ys]
        for j, r in enumerate(body.results):
            if bplan.result_slot.get(bplan.of(r)) == j:
                where.result(j, *out_at[j])
        suffix, errors = f".s{next(_SCANS)}", len(k.errors)
        k.errors.extend(program.errors)
        for stmts in program.groups:
            k.b.out.extend(_moved(s, where, suffix, errors) for s in stmts)
        for j, r in enumerate(body.results):      # results not in their own buffer
            if bplan.result_slot.get(bplan.of(r)) != j:
                src, at = where.of(bplan.where[bplan.of(r)], Index())
                _copy(k, r.type.size, src, at, *out_at[j], suffix=suffix)
        k.b.out = outer
        outer.append(loop)
    for v, at, out in zip(inits, regions, finals):
        _copy(k, v.type.size, Buffer(0, at, v.dtype), Index(length % 2 * v.type.size),
              plan.buffer(out), Index())


def _bytes(v) -> int:
    return v.type.size * ITEMSIZE[v.dtype]


def _grow(plan, size: int) -> int:
    """size bytes at the end of the enclosing arena (64-byte aligned), for this scan alone."""
    at = -(-plan.arena // 64) * 64
    plan.arena = at + size
    return at


def _scaled(pos: Index, row: int) -> Index:
    return Index(pos.offset * row, tuple((r, s * row) for r, s in pos.terms))


def _copy(k, size, src, src_at, dst, dst_at, suffix=""):
    """dst[dst_at + e] = src[src_at + e] for e < size."""
    if size == 0:
        return

    def body(e):
        term = ((e, 1),) if e is not None else ()
        k.store(dst, dst_at.plus(terms=term), k.load(src, src_at.plus(terms=term)))
    k.loop(size, body)


class _Where:
    """The enclosing (Buffer, Index) of each body buffer: slot and byte -> place."""

    def __init__(self, bplan, base, const_slot, first_const):
        self.bplan, self.base, self.places = bplan, base, {}
        self.const_slot, self.first_const = const_slot, first_const

    def param(self, j, buf, index):
        self.places[self.bplan.where[self.bplan.fn.params[j]].slot] = (buf, index)

    def result(self, j, buf, index):
        self.places[1 + len(self.bplan.fn.params) + j] = (buf, index)

    def of(self, buf, index) -> tuple:
        if buf.slot == 0:
            return Buffer(0, self.base + buf.byte, buf.dtype), index
        if buf.slot >= self.first_const + 1:
            return Buffer(self.const_slot + buf.slot - self.first_const - 1, buf.byte,
                          buf.dtype), index
        outer, extra = self.places[buf.slot]
        scale = ITEMSIZE[outer.dtype] // ITEMSIZE[buf.dtype] if outer.dtype != buf.dtype else 1
        assert scale == 1, "a body buffer is typed as its place"
        return Buffer(outer.slot, outer.byte + buf.byte, buf.dtype), \
            index.plus(extra.offset, extra.terms)


def _reg(x, suffix):
    return Reg(x.name + suffix, x.dtype) if isinstance(x, Reg) else x


def _index(index, suffix):
    return Index(index.offset, tuple((_reg(r, suffix), s) for r, s in index.terms))


def _moved(s, where, suffix, errors):
    """Statement s of the body, its registers renamed and its buffers placed."""
    def place(buf, index):
        return where.of(buf, _index(index, suffix))
    if isinstance(s, Load):
        return Load(_reg(s.out, suffix), *place(s.buf, s.index))
    if isinstance(s, Store):
        return Store(*place(s.buf, s.index), _reg(s.value, suffix))
    if isinstance(s, Alu):
        return Alu(_reg(s.out, suffix), s.op, tuple(_reg(a, suffix) for a in s.args))
    if isinstance(s, Raise):
        return Raise(_reg(s.cond, suffix), s.error + errors, _reg(s.value, suffix))
    if isinstance(s, Loop):
        return Loop(_reg(s.var, suffix), s.extent,
                    [_moved(t, where, suffix, errors) for t in s.body])
    if isinstance(s, Gemm):
        return dataclasses.replace(s, a=place(*s.a), b=place(*s.b), c=place(*s.c))
    return s                                    # Note


__all__ = ["build_scan", "compiles", "Const"]
