"""Control flow compiled in place: a scan (fori_loop with static bounds is one) as a Loop,
a while_loop as a While, a cond as an If, all in the enclosing program.

Each nested Function is built on its own (build.build, its own Plan) and its statements are
moved into the enclosing group, every buffer and register renamed (`_embed`):

    its arena               a region of the enclosing arena, after everything the plan placed
    its constants           more constants of the enclosing table
    consts, operands        the op's operands' own buffers
    carries k...            two regions each, trading places: trip i reads region i & 1 and
                            writes region 1 - (i & 1), so a result that aliases its own or
                            another carry is never overwritten before it is read; the
                            initial carries are
                            copied into region 0 first, the final ones out of the region the
                            trip count picks (a scan's length; a while_loop counts its trips
                            in an i64 cell of the arena, and its cond writes a bool cell)
    xs[i], ys[i]            the stacked operand and result, one more affine term in the step
                            (position length - 1 - i with `reverse`)
    a cond's results        the op's outputs, written by the branch taken

A result that is not in its own buffer (a param, a constant, a value another result holds)
is copied into place after the Function's statements. Registers get a suffix per embedding,
so nested control flow compiles too; the nested errors (an index out of bounds, with the
user's file:line) are the enclosing program's. Control flow whose Functions need a host step
stays a host step (host.py: the loop in Python around bodies compiled on their own).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from .build import build
from .nodes import (ITEMSIZE, Alu, Buffer, Call, Const, Gemm, If, Index, Load, Loop, Raise,
                    Reg, Store, While)
from .plan import Plan

_COUNT = itertools.count()


def _embed(k, plan, fn, params, results):
    """fn's statements appended where k builds, its param j read from params[j] and its result
    j written to results[j] ((Buffer, Index) each); returns nothing."""
    program, bplan = build(fn, Plan(fn), hot=k.hot)
    where = _Where(bplan, _grow(plan, bplan.arena),
                   1 + len(plan.fn.params) + len(plan.fn.results) + len(plan.consts))
    plan.consts.extend(bplan.consts)
    for j, at in enumerate(params):
        where.places[1 + j] = at
    owned = [bplan.result_slot.get(bplan.of(r)) == j for j, r in enumerate(fn.results)]
    for j, at in enumerate(results):
        if owned[j]:
            where.places[1 + len(fn.params) + j] = at
    suffix, errors = f".s{next(_COUNT)}", len(k.errors)
    k.errors.extend(program.errors)
    k.outlines.functions.update(program.functions)
    for stmts in program.groups:
        k.b.out.extend(_moved(s, where, suffix, errors) for s in stmts)
    for j, r in enumerate(fn.results):          # results not in a buffer of their own
        if not owned[j]:
            _copy(k, r.type.size, *where.of(bplan.where[bplan.of(r)], Index()), *results[j])


def _regions(k, plan, inits):
    """Two regions of the arena for each carry, the initial values copied into the first."""
    regions = [_grow(plan, 2 * _bytes(v)) for v in inits]
    for v, at in zip(inits, regions):
        _copy(k, v.type.size, plan.buffer(v), Index(), Buffer(0, at, v.dtype), Index())
    return regions


def _carries(inits, regions, parity) -> list:
    """Where each carry is in the region `parity` (a register) picks."""
    return [(Buffer(0, at, v.dtype), Index(0, ((parity, v.type.size),)))
            for v, at in zip(inits, regions)]


def _finals(k, plan, inits, regions, outs, parity):
    """The final carries, from the region `parity` (a register or a constant 0 / 1)."""
    for v, at, out in zip(inits, regions, outs):
        src = Index(parity * v.type.size) if isinstance(parity, int) else \
            Index(0, ((parity, v.type.size),))
        _copy(k, v.type.size, Buffer(0, at, v.dtype), src, plan.buffer(out), Index())


def build_scan(k, plan, ops):
    (op,) = ops
    p = op.params
    body, length, nc, nk = p["body"], p["length"], p["num_consts"], p["num_carry"]
    consts, inits, xs = op.inputs[:nc], op.inputs[nc:nc + nk], op.inputs[nc + nk:]
    regions = _regions(k, plan, inits)
    if length:
        loop = Loop(Reg(f"%scan{next(_COUNT)}", "i64"), length)
        outer, k.b.out = k.b.out, loop.body
        cur = k.b.and_(loop.var, 1)
        pos = Index(length - 1, ((loop.var, -1),)) if p["reverse"] else \
            Index(0, ((loop.var, 1),))
        rows = [(plan.buffer(v), _scaled(pos, math.prod(v.shape[1:])))
                for v in (*xs, *op.outputs[nk:])]
        _embed(k, plan, body, [(plan.buffer(v), Index()) for v in consts] +
               _carries(inits, regions, cur) + rows[:len(xs)],
               _carries(inits, regions, k.b.sub(1, cur)) + rows[len(xs):])
        k.b.out = outer
        outer.append(loop)
    _finals(k, plan, inits, regions, op.outputs[:nk], length % 2)


def build_while(k, plan, ops):
    """A while_loop: the trip count in an i64 cell picks the carries' region, as for scan."""
    (op,) = ops
    p = op.params
    ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
    cc, bc, inits = op.inputs[:ncc], op.inputs[ncc:ncc + nbc], op.inputs[ncc + nbc:]
    regions = _regions(k, plan, inits)
    cell = (Buffer(0, _grow(plan, 8), "i64"), Index())
    flag = (Buffer(0, _grow(plan, 1), "bool"), Index())
    k.store(*cell, Const(0, "i64"))
    outer = k.b.out
    k.b.out = test = []
    trips = k.load(*cell)
    cur = k.b.and_(trips, 1)
    _embed(k, plan, p["cond"], [(plan.buffer(v), Index()) for v in cc] +
           _carries(inits, regions, cur), [flag])
    loop = While(test, k.load(*flag))
    k.b.out = loop.body
    _embed(k, plan, p["body"], [(plan.buffer(v), Index()) for v in bc] +
           _carries(inits, regions, cur), _carries(inits, regions, k.b.sub(1, cur)))
    k.store(*cell, k.b.add(trips, 1))
    k.b.out = outer
    outer.append(loop)
    _finals(k, plan, inits, regions, op.outputs, k.b.and_(k.load(*cell), 1))


def build_cond(k, plan, ops):
    """A cond: each branch built in place, the predicate read from its bool buffer."""
    (op,) = ops
    pred, *operands = op.inputs
    branch = If(k.load(plan.buffer(pred), Index()))
    outer = k.b.out
    for key, body in (("true_branch", branch.then), ("false_branch", branch.orelse)):
        k.b.out = body
        _embed(k, plan, op.params[key], [(plan.buffer(v), Index()) for v in operands],
               [(plan.buffer(v), Index()) for v in op.outputs])
    k.b.out = outer
    outer.append(branch)


CONTROL = {"scan": build_scan, "while_loop": build_while, "cond": build_cond}


def _bytes(v) -> int:
    return v.type.size * ITEMSIZE[v.dtype]


def _grow(plan, size: int) -> int:
    """size bytes at the end of the enclosing arena (64-byte aligned), for one op alone."""
    at = -(-plan.arena // 64) * 64
    plan.arena = at + size
    return at


def _scaled(pos: Index, row: int) -> Index:
    return Index(pos.offset * row, tuple((r, s * row) for r, s in pos.terms))


def _copy(k, size, src, src_at, dst, dst_at):
    """dst[dst_at + e] = src[src_at + e] for e < size."""
    if size == 0:
        return

    def body(e):
        term = ((e, 1),) if e is not None else ()
        k.store(dst, dst_at.plus(terms=term), k.load(src, src_at.plus(terms=term)))
    k.loop(size, body)


class _Where:
    """The enclosing (Buffer, Index) of each buffer of an embedded Function: its arena a
    region at `base`, its constants from slot `const_slot` on, params and results `places`."""

    def __init__(self, bplan, base, const_slot):
        self.base, self.const_slot, self.places = base, const_slot, {}
        self.first_const = 1 + len(bplan.fn.params) + len(bplan.fn.results)

    def of(self, buf, index) -> tuple:
        if buf.slot == 0:
            return Buffer(0, self.base + buf.byte, buf.dtype), index
        if buf.slot >= self.first_const:
            return Buffer(self.const_slot + buf.slot - self.first_const, buf.byte,
                          buf.dtype), index
        outer, extra = self.places[buf.slot]
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
        return Load(_reg(s.out, suffix), *place(s.buf, s.index), s.note)
    if isinstance(s, Store):
        return Store(*place(s.buf, s.index), _reg(s.value, suffix), s.note)
    if isinstance(s, Alu):
        return Alu(_reg(s.out, suffix), s.op, tuple(_reg(a, suffix) for a in s.args), s.note)
    if isinstance(s, Call):
        return Call(_reg(s.out, suffix), s.fn, tuple(_reg(a, suffix) for a in s.args), s.note)
    if isinstance(s, Raise):
        return Raise(_reg(s.cond, suffix), s.error + errors, _reg(s.value, suffix), s.note)
    if isinstance(s, Loop):
        return Loop(_reg(s.var, suffix), s.extent,
                    [_moved(t, where, suffix, errors) for t in s.body])
    if isinstance(s, Gemm):
        return dataclasses.replace(s, a=place(*s.a), b=place(*s.b), c=place(*s.c))
    if isinstance(s, If):
        return If(_reg(s.cond, suffix), [_moved(t, where, suffix, errors) for t in s.then],
                  [_moved(t, where, suffix, errors) for t in s.orelse])
    if isinstance(s, While):
        return While([_moved(t, where, suffix, errors) for t in s.test], _reg(s.cond, suffix),
                     [_moved(t, where, suffix, errors) for t in s.body])
    return s                                    # Note


