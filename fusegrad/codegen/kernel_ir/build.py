"""From a Function and its Plan to the kernel IR: each group of ops as loops over buffers.

- a loop group (plan.py: elementwise ops of one size, and reductions of what they compute)
  is one loop nest; each op's scalar math is its registry entry's `scalar` rule, called with
  the operands' registers, each loaded through its view (views.py: a broadcast folded into
  the load is a stride 0); a reduction stores its identity, then folds every operand element,
  in row-major order, into the result element it belongs to (REDUCTIONS: one identity and
  combine row each), in the same loop as the math that computes it;
- a shape op (broadcast_in_dim, transpose, slice, rev, pad, concatenate) that a use needs
  written out copies through an affine map of its operand;
- a gather (take, take_along_axis) and its transpose (scatter_add, scatter_add_along_axis)
  first walk the index array once, raising NumPy's IndexError (with the user's file:line)
  at the first entry outside [-n, n); the loop then loads an index, wraps a negative one
  and uses it as one more term of the affine address;
- a matmul of at most SMALL_DOT_K terms is a nest of fmas in the order of k (the Numba
  backend's bits), a longer float one NumPy's own ?gemm (a Gemm node) per batch.
"""

from __future__ import annotations

import math

from ...ir.control import nested
from ...ir.printer import format_op, value_names
from ...passes.schedule import SMALL_DOT_K
from .builder import Builder
from .nodes import Const, Gemm, Index, Load, Loop, Note, Program, Raise, Store
from .outline import Outlines
from .outline import hot as is_hot
from .plan import Plan, is_elementwise
from .views import REMAPS, merged_axes, remap, strides

_INT_MIN, _INT_MAX = -(2 ** 63), 2 ** 63 - 1


def _max(b, acc, x):
    return b.select(b.or_(b.gt(x, acc), b.ne(x, x)), x, acc)


def _min(b, acc, x):
    return b.select(b.or_(b.lt(x, acc), b.ne(x, x)), x, acc)


REDUCTIONS = {    # prim: (identity of a float / of an i64, combine)
    "reduce_sum": ((0.0, 0), lambda b, acc, x: b.add(acc, x)),
    "reduce_prod": ((1.0, 1), lambda b, acc, x: b.mul(acc, x)),
    "reduce_max": ((-math.inf, _INT_MIN), _max),
    "reduce_min": ((math.inf, _INT_MAX), _min),
}
SHAPES = ("broadcast_in_dim", "transpose", "slice", "rev", "pad", "concatenate")
GATHERS = ("take", "take_along_axis", "scatter_add", "scatter_add_along_axis")


def affine(index, strides_, offset: int = 0) -> Index:
    return Index(offset, tuple((i, s) for i, s in zip(index, strides_)
                               if i is not None and s != 0))


class Kernel:
    """The statements of one group, built through a Builder whose `out` is the current body;
    `scalar(op, xs)` is op's value inline, or a Call (outline.py)."""

    def __init__(self, names, program_errors, outlines=None, hot=True):
        self.b = Builder(names, errors=program_errors)
        self.body = self.b.out
        self.errors = program_errors
        self.outlines, self.hot = outlines or Outlines(), hot
        self.notes: dict = {}       # op -> its equation and file:line

    def at(self, op):
        """From here on, the statements made are op's: they carry its note."""
        self.b.note = self.notes.get(op, self.b.note)

    def scalar(self, op, xs):
        self.at(op)
        return self.outlines.scalar(self.b, op, xs)

    def loop(self, n: int, body):
        if n == 1:
            body(None)
            return
        outer, loop = self.b.out, Loop(self.b.fresh("i64", "i"), n)
        outer.append(loop)
        self.b.out = loop.body
        body(loop.var)
        self.b.out = outer

    def nest(self, shape, body, index=()):
        if len(index) == len(shape):
            body(index)
            return
        self.loop(shape[len(index)], lambda i: self.nest(shape, body, (*index, i)))

    def load(self, buf, index: Index):
        out = self.b.fresh(buf.dtype)
        self.b.out.append(Load(out, buf, index, self.b.note))
        return out

    def store(self, buf, index: Index, value):
        self.b.out.append(Store(buf, index, value, self.b.note))

    def fill(self, buf, size: int, value):
        self.loop(size, lambda i: self.store(buf, affine((i,), (1,)), Const(value, buf.dtype)))

    def check(self, idx_buf, size: int, n: int, axis: int, op):
        """One pass over an index array: the first entry outside [-n, n) raises."""
        where = f" (at {op.loc})" if op.loc else ""
        self.errors.append((IndexError, "index {} is out of bounds for axis " +
                            f"{axis} with size {n}{where}"))
        error = len(self.errors)

        def body(i):
            j = self.load(idx_buf, affine((i,), (1,)))
            bad = self.b.or_(self.b.lt(j, -n), self.b.ge(j, n))
            self.b.out.append(Raise(bad, error, j, self.b.note))
        self.loop(size, body)

    def index(self, idx_buf, index: Index, n: int):
        """The index at idx_buf[index], a negative one counted from the end."""
        j = self.load(idx_buf, index)
        return self.b.select(self.b.lt(j, 0), self.b.add(j, n), j)


def build(fn, plan: Plan | None = None, hot: bool | None = None) -> tuple:
    """(Program, Plan) for fn, whose every op `covers.supported` takes; hot: every group is
    (True) or none is (False), as the group a control-flow body is built into, else each as
    outline.hot says."""
    plan = plan or Plan(fn)
    every = hot
    names, errors, groups, notes, work, hot = iter(range(1 << 62)), [], [], [], [], []
    printed = value_names(fn)
    outlines = Outlines()
    for ops in plan.groups:
        work.append(_work(ops))
        hot.append(is_hot(work[-1], max((v.type.size for o in ops
                                          for v in (*o.inputs, *o.outputs)), default=0))
                   if every is None else every)
        k = Kernel(names, errors, outlines, hot[-1])
        k.notes = {op: f"{format_op(op, printed).strip()}   ({op.loc or '?'})" for op in ops}
        k.at(ops[0])
        if len(ops[0].outputs) != 1 or any(v.type.size for o in ops for v in o.outputs) or \
                _kind(ops[0]) in _STEPS:
            _GROUP[_kind(ops[0])](k, plan, ops)
        lines = list(k.notes.values())
        k.body.insert(0, Note("\n".join(lines)))
        groups.append(k.body)
        notes.append(lines)
    return Program(fn.name, groups, notes, errors, work, hot, outlines.functions), plan


def _kind(op) -> str:
    for kind_of in _KIND_OF:
        kind = kind_of(op)
        if kind:
            return kind
    if is_elementwise(op):
        return "elementwise"
    for kind, prims in (("shape", SHAPES), ("reduce", REDUCTIONS), ("gather", GATHERS)):
        if op.prim in prims:
            return kind
    return op.prim


def _work(ops) -> int:
    op = ops[0]
    if op.prim == "matmul":
        k = op.inputs[0].shape[-1]
        return op.out.type.size * k if k <= SMALL_DOT_K else 0
    if nested(op):
        return op.params.get("length", 1) * sum(_work([o]) for _, f in nested(op)
                                                 for o in f.ops)
    return sum(max(v.type.size for v in (*o.inputs, *o.outputs)) for o in ops)


def _copy(k, shape, src, src_map, dst, dst_map):
    """dst[dst_map(index)] = src[src_map(index)] over shape; a map is (offset, strides)."""
    shape, (s_strides, d_strides) = merged_axes(shape, src_map[1], dst_map[1])
    if math.prod(shape):
        k.nest(shape, lambda index: k.store(dst, affine(index, d_strides, dst_map[0]), k.load(
            src, affine(index, s_strides, src_map[0]))))


def _shape(k, plan, ops):
    op = ops[0]
    prim, p, out, x = op.prim, op.params, op.out, op.inputs[0]
    src, dst = plan.buffer(x), plan.buffer(out)
    xs, os_ = strides(x.shape), strides(out.shape)
    in_order = (0, os_)
    if prim in REMAPS:
        _copy(k, out.shape, src, remap(op, 0, xs), dst, in_order)
    elif prim == "pad":
        k.fill(dst, out.type.size, 0)
        start = sum(lo * s for lo, s in zip(p["low"], os_))
        _copy(k, x.shape, src, (0, xs), dst,
              (start, [(it + 1) * s for it, s in zip(p["interior"], os_)]))
    else:                                   # concatenate
        axis, start = p["axis"] % out.type.ndim, 0
        for v in op.inputs:
            _copy(k, v.shape, plan.buffer(v), (0, strides(v.shape)), dst,
                  (start * os_[axis], os_))
            start += v.shape[axis]


def _gather(k, plan, ops):
    op = ops[0]
    p, out = op.params, op.out
    scatter = op.prim.startswith("scatter")
    idx, data = (op.inputs[0], op.inputs[1]) if scatter else (op.inputs[1], op.inputs[0])
    big = tuple(p["shape"]) if scatter else data.shape      # the indexed array's shape
    axis = p["axis"] % len(big)
    n, ib, bs = big[axis], plan.buffer(idx), strides(big)
    k.check(ib, idx.type.size, n, axis, op)
    small = data.shape if scatter else out.shape            # the loop's shape
    along = op.prim.endswith("along_axis")
    dst = plan.buffer(out)
    if scatter:
        k.fill(dst, out.type.size, 0)

    width = 1 if along else idx.type.ndim
    others = [s for i, s in enumerate(bs) if i != axis]

    def body(index):
        at = affine(index if along else index[axis:axis + width], strides(idx.shape))
        j = k.index(ib, at, n)
        big_at = affine(index[:axis] + index[axis + width:], others).plus(
            terms=((j, bs[axis]),))
        small_at = affine(index, strides(small))
        if scatter:         # np.add.at of bools is a logical or
            add = k.b.or_ if out.dtype == "bool" else k.b.add
            k.store(dst, big_at, add(k.load(dst, big_at), k.load(plan.buffer(data), small_at)))
        else:
            k.store(dst, small_at, k.load(plan.buffer(data), big_at))
    if math.prod(small):
        k.nest(small, body)


def _matmul(k, plan, ops):
    op = ops[0]
    a, b = op.inputs
    out = op.out
    *batch, m, kk = a.shape
    n = b.shape[-1]
    wa, wb, wo = plan.buffer(a), plan.buffer(b), plan.buffer(out)
    sa, sb, so = strides(a.shape), strides(b.shape), strides(out.shape)
    if kk == 0:
        k.fill(wo, out.type.size, 0)
    elif kk <= SMALL_DOT_K:
        def body(index):
            *bi, i, j = index
            acc = None
            for t in range(kk):
                x = k.load(wa, affine((*bi, i), sa, t))
                y = k.load(wb, affine((*bi, j), (*sb[:-2], 1), t * n))
                acc = k.b.mul(x, y) if acc is None else k.b.fma(x, y, acc)
            k.store(wo, affine(index, so), acc)
        k.nest(out.shape, body)
    else:
        def call(bi):
            k.b.out.append(Gemm(out.dtype, m, n, kk, (wa, affine(bi, sa)), (wb, affine(bi, sb)),
                                (wo, affine(bi, so)), k.b.note))
        k.nest(tuple(batch), call)


_GROUP = {"shape": _shape, "gather": _gather, "matmul": _matmul}
_KIND_OF: list = []
_STEPS = ("host", "scan", "while_loop", "cond")     # built even when their results are empty:
                                                    # they may raise


def register(groups: dict, kind_of):
    """More kinds of group (loop_group.py, folds.py, host.py, control.py: kernel_ir/__init__
    registers them,
    so this module imports none of them), and a function naming an op's kind first."""
    _GROUP.update(groups)
    _KIND_OF.append(kind_of)
