"""The one memory plan of the kernel IR: which ops share a loop, and where each value lives.

Loop ops (elementwise ops, and sums of what they compute) visiting one number of elements
share a group: one loop nest, its intermediate values registers, each sum folding its operand
into its result as the loop goes; a loop op joins the latest group it fits after those that
compute what it reads (`_partition`). Every other op is a group of its own, in program order
(an op of several results, a host step, has a buffer per result). A value needs a buffer
unless every use is a loop op of its own group; a broadcast_in_dim, transpose, slice or rev
whose every use is a loop op has none: its uses load its operand through an affine map
(views.py). Buffers are the entry's table of arrays: [arena, params..., results...,
constants...]; the arena is bytes, where a value's range (64-byte aligned) is taken before its
group runs and given back after its last use, so no group writes over what it reads. reshape,
and convert to the same dtype, are another name for their operand's buffer. A group may take
scratch space after everything placed (`scratch`: loop_group.py's lanes of a sum).
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.primitives import PRIMITIVES
from .nodes import ITEMSIZE, Buffer
from .views import MIN_INNER, SMALL, fold, inner, strides

ALIGN = 64
REDUCE = ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min")


def is_elementwise(op) -> bool:
    return PRIMITIVES[op.prim].category == "elementwise" or op.prim == "full"


def is_alias(op) -> bool:
    return op.prim == "reshape" or (op.prim == "convert" and op.inputs[0].dtype == op.out.dtype)


def is_loop_op(op) -> bool:
    """Whether op loads its operands one element at a time in a loop group."""
    return op.prim in REDUCE or is_elementwise(op) and not is_alias(op)


def kept(op, ndim: int) -> tuple:
    """The strides of a reduction's result over its operand's axes: 0 on a reduced one."""
    axes, out = set(op.params["axes"]), iter(strides(op.out.shape))
    return tuple(0 if a in axes else next(out) for a in range(ndim))


def _fits(op, group) -> bool:
    """Whether a loop op fits the loop of a group (their `Plan._walk`s): it walks as many
    elements, the same shape where both read through maps, and the nest's innermost loop stays
    long (MIN_INNER) if it is big; maxes, mins and products fold in order, in a loop of their
    own (a loop of them would run its math one element at a time)."""
    if op is None or group is None or op[3] or group[3]:
        return False
    (shape, mapped, maps, _), (walked, fixed, more, _) = op, group
    if math.prod(shape) != math.prod(walked) or mapped and fixed and shape != walked:
        return False
    shape = shape if mapped else walked
    return math.prod(shape) < SMALL or inner(shape, *maps, *more) >= MIN_INNER


def _joined(group, op):
    """The `Plan._walk` of a group that op joined."""
    (walked, fixed, more, _), (shape, mapped, maps, _) = group, op
    return (shape if mapped and not fixed else walked), fixed or mapped, more | maps, False


def iteration(op) -> tuple:
    """The shape a loop op's loop walks: its result's, or a reduction's operand's."""
    return op.inputs[0].shape if op.prim in REDUCE else op.out.shape


class Plan:
    """groups (lists of ops), where (root value -> Buffer), views (folded remap -> (root,
    offset, strides)), consts (arrays), arena (bytes)."""

    def __init__(self, fn):
        self.fn = fn
        self.root: dict = {}
        self.groups: list = []
        self.where: dict = {}
        self.consts: list = []
        self.result_slot: dict = {}
        self.arena = 0
        for op in fn.ops:
            if is_alias(op):
                self.root[op.out] = self.of(op.inputs[0])
        self.views = fold(fn, is_loop_op, self.of)
        group_of = self._partition()
        stored, last_use = self._stored(group_of)
        self._place(group_of, stored, last_use)
        self.stored = stored

    def of(self, v):
        return self.root.get(v, v)

    def base(self, v):
        """The value whose buffer v's elements are read from."""
        r = self.of(v)
        return self.views[r][0] if r in self.views else r

    def _partition(self) -> dict:
        """Groups in dependence order: a loop op joins the latest loop group it fits
        (`_fits`) of those after every group computing what it reads (after the group itself
        where it reads a sum the group computes, or a value through a view); any other op is
        a group of its own at the end. A loop op may so run before groups it follows in the
        program (they cannot read it): a gradient's math over one shape, split by ops on
        smaller arrays, is one loop."""
        group_of, sums, walks = {}, set(), []
        for op in self.fn.ops:
            if is_alias(op) or op.prim in ("constant", "iota") or op.outputs[0] in self.views:
                continue
            after = 0
            for v in op.inputs:
                g = group_of.get(self.base(v), -1)
                after = max(after, g + (self.of(v) in self.views or self.base(v) in sums))
            walk = self._walk(op)
            home = next((g for g in range(len(self.groups) - 1, after - 1, -1)
                         if _fits(walk, walks[g])), None)
            if home is None:
                self.groups.append([op])
                walks.append(walk)
                home = len(self.groups) - 1
            else:
                self.groups[home].append(op)
                walks[home] = _joined(walks[home], walk)
            if op.prim in REDUCE:
                sums.add(op.out)
            for out in op.outputs:
                group_of[out] = home
        return group_of

    def _walk(self, op):
        """What `_fits` asks of a loop op, or of a loop group (`_joined`): None for another
        op, else (shape walked, whether a map fixes it, the maps, whether it folds in order)."""
        if not is_loop_op(op):
            return None
        shape = iteration(op)
        maps = {self.views[self.of(v)][2] for v in op.inputs if self.of(v) in self.views}
        if op.prim in REDUCE:
            maps.add(kept(op, len(shape)))
        return shape, bool(maps), frozenset(maps), op.prim in REDUCE and op.prim != "reduce_sum"

    def mapped(self, op) -> bool:
        """Whether loop op `op` walks a shape of its own: a reduction, or one reading a view."""
        return op.prim in REDUCE or any(self.of(v) in self.views for v in op.inputs)

    def loop_shape(self, ops) -> tuple:
        """The shape a loop group's nest walks: that of the ops that walk one, else flat."""
        for op in ops:
            if self.mapped(op):
                return iteration(op)
        return (ops[0].out.type.size,)

    def view(self, v) -> tuple:
        """(Buffer, offset, strides): v[i] is at offset + sum(i * strides) in the Buffer."""
        r = self.of(v)
        if r in self.views:
            root, offset, st = self.views[r]
            b = self.where[root]
            return Buffer(b.slot, b.byte, v.dtype), offset, st
        return self.buffer(v), 0, strides(v.shape)

    def scratch(self, nbytes: int) -> int:
        """Where nbytes of the arena after everything placed start, for one group's use."""
        at = -(-self.arena // ALIGN) * ALIGN
        self.arena = at + nbytes
        return at

    def _stored(self, group_of) -> tuple:
        stored, last_use = set(), {}
        for g, ops in enumerate(self.groups):
            for op in ops:
                if not is_elementwise(op):
                    stored.update(op.outputs)
                for v in op.inputs:
                    r = self.base(v)
                    last_use[r] = g
                    if group_of.get(r) != g or not is_loop_op(op):
                        stored.add(r)
        stored.update(self.of(r) for r in self.fn.results)
        return stored, last_use

    def _place(self, group_of, stored, last_use):
        fn, slot = self.fn, 1
        for p in fn.params:
            self.where[p] = Buffer(slot, 0, p.dtype)
            slot += 1
        for i, r in enumerate(fn.results):
            root = self.of(r)
            if root in group_of and root not in self.result_slot:
                self.result_slot[root] = i
                self.where[root] = Buffer(slot + i, 0, root.dtype)
        slot += len(fn.results)
        for op in fn.ops:
            if op.prim in ("constant", "iota"):
                value = op.params["value"] if op.prim == "constant" else \
                    PRIMITIVES["iota"].impl(**op.params)
                self.consts.append(np.ascontiguousarray(value, op.out.type.np_dtype).reshape(-1))
                self.where[op.out] = Buffer(slot, 0, op.out.dtype)
                slot += 1
        free = FreeList()
        for g, ops in enumerate(self.groups):
            outs = [out for op in ops for out in op.outputs]
            for out in outs:        # outputs first: a group never writes over its operands
                if out in stored and out not in self.where:
                    self.where[out] = Buffer(0, free.take(_bytes(out)), out.dtype)
            done = {self.base(v) for op in ops for v in op.inputs
                    if last_use.get(self.base(v)) == g}
            done.update(out for out in outs if out not in last_use)
            for r in done:
                if r in self.where and self.where[r].slot == 0:
                    free.give(self.where[r].byte, _bytes(r))
        self.arena = free.end

    def buffer(self, v) -> Buffer:
        """v's buffer, typed as v (an alias may differ from its root only in shape)."""
        b = self.where[self.of(v)]
        return Buffer(b.slot, b.byte, v.dtype)


def _bytes(v) -> int:
    return -(-v.type.size * ITEMSIZE[v.dtype] // ALIGN) * ALIGN


class FreeList:
    """First-fit allocation of byte ranges in the arena, merging neighbours when freed."""

    def __init__(self):
        self.blocks: list = []      # (offset, size), sorted
        self.end = 0

    def take(self, size: int) -> int:
        for k, (offset, room) in enumerate(self.blocks):
            if room >= size:
                self.blocks[k:k + 1] = [] if room == size else [(offset + size, room - size)]
                return offset
        offset, self.end = self.end, self.end + size
        return offset

    def give(self, offset: int, size: int):
        if size == 0:
            return
        merged = []
        for start, room in sorted([*self.blocks, (offset, size)]):
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + room)
            else:
                merged.append((start, room))
        self.blocks = merged
