"""A loop group (plan.py: elementwise ops walking one number of elements, and the sums of what
they compute) as one loop nest, every intermediate value a register.

The nest walks plan.loop_shape(ops), axes that every map walks alike merged into one. Each
operand is loaded through its view (views.py: a folded broadcast is a stride 0, a value in a
buffer of its own as flat as the loop), each value is stored where the plan says, and each
reduction's result is filled with its identity first, then folded into element by element in
row-major order, in the same pass as the math that computes it.

In a hot group that computes math, sums whose innermost axis is reduced and runs at least
2 * BLOCK * LANES iterations are written in lanes (rewrite.py's `lanes` order, BLOCK times
wider): lane l of a row takes elements l, l + width, ... (lane 0 starts from the result's
value and takes the tail), each lane's partial sum in a slot of a scratch region of the arena,
and the lanes are added pairwise, in lane order, at the row's end. The element loop is then a
loop over blocks around a loop over the lanes, which LLVM's loop vectorizer runs as vectors,
the math included: a sum carried in registers (rewrite.py's lanes, which a group of sums alone
gets) would keep the math in scalar, one element at a time. The scratch has a row of slots per
iteration of the outermost loop, so that loop's iterations still write apart (rewrite.py's
parallel loops); a full sum's one row of lanes is cut with its loop into chunks of partial
sums (partials.py), so that loop runs on threads too. The order is fixed by the program's
shapes: no thread count, vector width or renderer changes the bits.
"""

from __future__ import annotations

import math

from .build import REDUCTIONS, affine
from .nodes import Buffer, Const, ITEMSIZE, Index
from .rewrite import LANES
from .plan import kept
from .views import merged_axes, strides

BLOCK = 2                       # lanes: BLOCK * rewrite.LANES, a few vectors wide
SCRATCH_ELEMENTS = 1 << 16      # at most this many slots a row per outer iteration, else one row


def build_loop(k, plan, ops):
    """The statements of loop group ops (an "elementwise" or "reduce" group of build.py)."""
    shape = plan.loop_shape(ops)
    flat, views, made = strides(shape), {}, {op.out for op in ops}
    for op in ops:          # a value in a buffer of its own is as flat as the loop
        for v in op.inputs:
            if plan.of(v) not in made:
                views[plan.of(v)] = plan.view(v) if plan.of(v) in plan.views else \
                    (plan.buffer(v), 0, flat)
    reduced = {}
    for op in ops:
        if op.prim in REDUCTIONS:
            (fident, iident), _ = REDUCTIONS[op.prim]
            k.fill(plan.buffer(op.out), op.out.type.size,
                   fident if op.out.dtype in ("f32", "f64") else iident)
            reduced[op] = kept(op, len(shape))
    maps = [flat, *(st for _, _, st in views.values()), *reduced.values()]
    walked, merged = merged_axes(shape, *maps)
    merged = dict(zip(maps, merged))
    if not math.prod(shape):
        return
    sums = [op for op in reduced if op.prim == "reduce_sum" and merged[reduced[op]][-1:] == (0,)]
    width = BLOCK * min((LANES.get(op.out.dtype, 0) for op in sums), default=0)
    group = _Group(k, plan, ops, views, merged, flat, reduced)
    if k.hot and width and walked[-1] >= 2 * width and len(reduced) < len(ops):
        k.nest(walked[:-1], lambda outer: _lanes(group, outer, walked, width, sums))
    else:
        k.nest(walked, lambda index: group.element(lambda st, off=0: affine(index, st, off),
                                                   lambda op, value: None))


class _Group:
    """The statements of one element of the loop: `element(at, lane)`, where at(strides,
    offset) is the element's Index in a map and lane(op, value) takes a sum's value (or
    returns None: it folds into the result's element, in place)."""

    def __init__(self, k, plan, ops, views, merged, flat, reduced):
        self.k, self.plan, self.ops, self.views = k, plan, ops, views
        self.merged, self.flat, self.reduced = merged, flat, reduced

    def element(self, at, lane):
        k, plan, regs = self.k, self.plan, {}
        for op in self.ops:
            k.at(op)
            xs = []
            for v in op.inputs:
                r = plan.of(v)
                if r in regs:
                    xs.append(regs[r])
                else:
                    buf, offset, st = self.views[r]
                    xs.append(k.load(buf, at(self.merged[st], offset)))
            if op.prim in REDUCTIONS:
                if lane(op, xs[0]) is None:
                    dst, where = plan.buffer(op.out), at(self.merged[self.reduced[op]])
                    k.store(dst, where, REDUCTIONS[op.prim][1](k.b, k.load(dst, where), xs[0]))
                continue
            out = Const(op.params["value"], op.out.dtype) if op.prim == "full" else \
                k.scalar(op, xs)
            regs[op.out] = out
            if op.out in plan.stored:
                k.store(plan.buffer(op.out), at(self.merged[self.flat]), out)


def _lanes(group, outer, walked, width, sums):
    """The innermost loop of the row at `outer` in lanes of `width` (module docstring)."""
    k, plan = group.k, group.plan
    n, rows = walked[-1], walked[0] if len(walked) > 1 else 1
    rows = rows if rows * width <= SCRATCH_ELEMENTS else 1
    first = ((outer[0], width),) if rows > 1 and outer[0] is not None else ()
    slots = {}
    for op in sums:
        at = plan.scratch(rows * width * ITEMSIZE[op.out.dtype])
        slots[op] = Buffer(0, at, op.out.dtype)
        dst, where = plan.buffer(op.out), affine(outer, group.merged[group.reduced[op]][:-1])
        k.store(slots[op], Index(0, first), k.load(dst, where))
        for lane in range(1, width):
            k.store(slots[op], Index(lane, first), Const(0, op.out.dtype))

    def fold(lane_terms):
        def lane(op, value):
            if op not in slots:
                return None
            slot = Index(0, first + lane_terms)
            k.store(slots[op], slot, k.b.add(k.load(slots[op], slot), value))
            return True
        return lane

    def at_block(b, j):
        terms = (((b, width),) if b is not None else ()) + ((j, 1),)
        return lambda st, off=0: affine(outer, st[:-1], off).plus(
            terms=tuple((r, s * st[-1]) for r, s in terms))
    blocks, tail = divmod(n, width)
    k.loop(blocks, lambda b: k.loop(width, lambda j: group.element(
        at_block(b, j), fold(((j, 1),)))))
    if tail:
        k.loop(tail, lambda t: group.element(
            lambda st, off=0: affine(outer, st[:-1], off + blocks * width * st[-1]).plus(
                terms=((t, st[-1]),) if t is not None else ()), fold(())))
    for op in sums:
        level = [k.load(slots[op], Index(lane, first)) for lane in range(width)]
        while len(level) > 1:
            level = [k.b.add(a, b) for a, b in zip(level[::2], level[1::2])]
        k.store(plan.buffer(op.out), affine(outer, group.merged[group.reduced[op]][:-1]),
                level[0])
