"""Where the values of a loop-nest function live, and its LLVM text (nests.py compiles it).

`Plan` groups the ops (a run of elementwise ops of one size is one loop) and gives every
value that needs one a buffer: a param's array, a result array, a constant, or a slot in the
arena, reused after its last use. `source` writes each group as a loop nest, the hot groups
(those that visit the most elements) into one module and the rest into another, and the
entry that calls them in order. See nests.py for what each op becomes and why.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..ir.primitives import PRIMITIVES
from ..passes.schedule import SMALL_DOT_K
from . import cblas, straight

HOT_ELEMENTS = 1024     # a group visiting fewer is never optimized
PART_LINES = 1000       # lines a function at most: LLVM's work on one grows faster

ELEMENTWISE = {*straight._FORMS, "select", "convert", "full"}
_SHAPES = {"broadcast_in_dim", "transpose", "slice", "rev", "pad", "concatenate"}
SUPPORTED = {*ELEMENTWISE, *_SHAPES, *straight._REDUCTIONS, "reshape", "constant", "iota",
              "matmul"}



def _strides(shape) -> tuple:
    """Row-major strides, in elements."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


# -- where values live ---------------------------------------------------------------------------

class Plan:
    """Each op's group (elementwise runs share one), each value's buffer, and the buffer table
    the entry takes: [arena, params..., results..., constants...]."""

    def __init__(self, fn):
        self.fn = fn
        self.root = {}                  # a value -> the value whose buffer it names
        self.groups: list = []          # lists of ops, in order; a group is one loop or nest
        self.stored: set = set()        # roots that need a buffer
        self.where: dict = {}           # root -> (slot, offset in elements)
        self.consts: list = []          # arrays for the constant slots
        self.last_use: dict = {}        # root -> the index of the last group that reads it
        self.result_slot: dict = {}     # root -> the index of the result array it fills
        self.arena = 0
        self._group_of = {}
        self._partition()
        self._choose_stored()
        self._place()

    def of(self, v):
        return self.root.get(v, v)

    def _partition(self):
        for op in self.fn.ops:
            prim = op.prim
            if prim == "reshape" or (prim == "convert" and op.inputs[0].dtype == op.out.dtype):
                self.root[op.out] = self.of(op.inputs[0])
                continue
            if prim in ("constant", "iota"):
                continue
            last = self.groups[-1] if self.groups else None
            if prim in ELEMENTWISE and last and last[0].prim in ELEMENTWISE and \
                    last[0].out.type.size == op.out.type.size:
                last.append(op)
            else:
                self.groups.append([op])
            self._group_of[op.out] = len(self.groups) - 1

    def _choose_stored(self):
        """A value needs a buffer unless every use is an elementwise op of its own loop."""
        for g, ops in enumerate(self.groups):
            for op in ops:
                if op.prim not in ELEMENTWISE:
                    self.stored.add(op.out)
                for v in op.inputs:
                    r = self.of(v)
                    self.last_use[r] = g
                    if self._group_of.get(r) != g or op.prim not in ELEMENTWISE:
                        self.stored.add(r)
        self.stored.update(self.of(r) for r in self.fn.results)

    def _place(self):
        fn = self.fn
        slot = 1
        for p in fn.params:
            self.where[p] = (slot, 0)
            slot += 1
        for i, r in enumerate(fn.results):
            root = self.of(r)
            if root in self._group_of and root not in self.result_slot:
                self.result_slot[root] = i
                self.where[root] = (slot + i, 0)
        slot += len(fn.results)
        for op in fn.ops:
            if op.prim in ("constant", "iota"):
                value = op.params["value"] if op.prim == "constant" else \
                    PRIMITIVES["iota"].impl(**{**op.params, "dtype": "f64"})
                self.consts.append(np.ascontiguousarray(value, np.float64).reshape(-1))
                self.where[op.out] = (slot, 0)
                slot += 1
        free = _FreeList()
        for g, ops in enumerate(self.groups):
            for op in ops:          # outputs first: a nest never writes over its operands
                if op.out in self.stored and op.out not in self.where:
                    self.where[op.out] = (0, free.take(op.out.type.size))
            done = {self.of(v) for op in ops for v in op.inputs if
                    self.last_use.get(self.of(v)) == g}
            done.update(op.out for op in ops if op.out not in self.last_use)
            for r in done:
                if self.where.get(r, (None,))[0] == 0:
                    free.give(self.where[r][1], r.type.size)
        self.arena = free.end


class _FreeList:
    """First-fit allocation of element ranges in the arena, merging neighbours when freed."""

    def __init__(self):
        self.blocks: list = []      # (offset, size), sorted
        self.end = 0

    def take(self, size: int) -> int:
        for k, (offset, room) in enumerate(self.blocks):
            if room >= size:
                if room == size:
                    del self.blocks[k]
                else:
                    self.blocks[k] = (offset + size, room - size)
                return offset
        offset, self.end = self.end, self.end + size
        return offset

    def give(self, offset: int, size: int):
        if size == 0:
            return
        self.blocks.append((offset, size))
        self.blocks.sort()
        merged = []
        for start, room in self.blocks:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + room)
            else:
                merged.append((start, room))
        self.blocks = merged


# -- the LLVM text -------------------------------------------------------------------------------

class _Code:
    """One group's lines, with fresh SSA names (shared by the function's groups) and loops
    whose counters are phi nodes (sizes are known, so a loop runs at least once or is not
    written). An element's address is a base pointer, made once before the group's loops, plus
    the loop counters times strides; each array's data pointer `%p<slot>` is loaded once at
    the top of the function."""

    def __init__(self, names):
        self.names = names          # an itertools.count shared by a function's groups
        self.label = self.current = f"g{next(names)}"   # its first block, the block at its end
        self.loops = 0
        self.head: list = []        # the group's base pointers, before its loops
        self.lines: list = []
        self.slots: set = set()     # the arrays it uses
        self.bases: dict = {}       # (slot, offset) -> base pointer

    def fresh(self, stem: str = "v") -> str:
        return f"%{stem}{next(self.names)}"

    def emit(self, *lines):
        self.lines.extend("  " + line for line in lines)

    def loop(self, n: int, body):
        """for i in range(n): body(i), i an i64 operand; n == 1 is no loop at all. The loop
        test sits at the end of the body's last block (n >= 1)."""
        if n == 1:
            body("0")
            return
        self.loops += 1
        before, head, done = self.current, self.fresh("h")[1:], self.fresh("x")[1:]
        i, following, more = self.fresh("i"), self.fresh(), self.fresh()
        self.lines += [f"  br label %{head}", f"{head}:"]
        phi = len(self.lines)
        self.current = head
        body(i)
        self.lines.insert(phi, f"  {i} = phi i64 [0, %{before}], [{following}, %{self.current}]")
        self.emit(f"{following} = add nuw nsw i64 {i}, 1",
                  f"{more} = icmp ult i64 {following}, {n}",
                  f"br i1 {more}, label %{head}, label %{done}")
        self.lines.append(f"{done}:")
        self.current = done

    def nest(self, shape, body, index=()):
        """Loops over shape in row-major order; body(indices)."""
        if len(index) == len(shape):
            body(index)
            return
        self.loop(shape[len(index)], lambda i: self.nest(shape, body, (*index, i)))

    def at(self, where, strides=(), index=(), extra: int = 0) -> str:
        """The address of element extra + sum(index * strides) of the buffer at `where`, a
        (slot, offset) pair."""
        slot, offset = where
        key = (slot, offset + extra)
        self.slots.add(slot)
        if key not in self.bases:
            self.bases[key] = f"%p{slot}"
            if key[1]:
                self.bases[key] = self.fresh("q")
                self.head.append(f"  {self.bases[key]} = getelementptr double, ptr %p{slot}, "
                                 f"i64 {key[1]}")
        total = None
        for i, stride in zip(index, strides):
            if stride == 0 or i == "0":
                continue
            term = i
            if stride != 1:
                term = self.fresh()
                self.emit(f"{term} = mul nsw i64 {i}, {stride}")
            if total is not None:
                name = self.fresh()
                self.emit(f"{name} = add nsw i64 {total}, {term}")
                term = name
            total = term
        if total is None:
            return self.bases[key]
        name = self.fresh("a")
        self.emit(f"{name} = getelementptr double, ptr {self.bases[key]}, i64 {total}")
        return name

    def load(self, address: str, dtype: str) -> str:
        x = self.fresh()
        self.emit(f"{x} = load double, ptr {address}")
        if dtype == "bool":
            x, flag = self.fresh(), x
            self.emit(f"{x} = fcmp une double {flag}, 0.0")
        return x

    def store(self, address: str, x: str, dtype: str):
        if dtype == "bool":
            x, flag = self.fresh(), x
            self.emit(f"{x} = select i1 {flag}, double 1.0, double 0.0")
        self.emit(f"store double {x}, ptr {address}")


def source(plan: Plan, prefix: str, hot_loops: int, data_offset: int) -> tuple:
    """LLVM IR texts (hot, cold) and the names of the hot module's functions. The cold module
    holds `void @{prefix}_entry(ptr arrays)`, arrays the table of array objects, and the
    groups whose loops are short; the hot one the groups whose loops run longest, as functions
    the entry calls, up to hot_loops loops of them. An array object keeps the address of its
    data data_offset bytes in."""
    names = itertools.count()
    groups = []
    for ops in plan.groups:
        code = _Code(names)
        _emit(code, plan, ops)
        op = ops[-1]
        if code.lines:
            code.lines[-1] += f"  ; {op.prim} at {op.loc}" if len(ops) == 1 else \
                f"  ; {len(ops)} elementwise ops to {op.prim} at {op.loc}"
        groups.append(code)
    hot, budget = set(), hot_loops
    for g in sorted(range(len(groups)), key=lambda g: -_work(plan.groups[g])):
        if _work(plan.groups[g]) < HOT_ELEMENTS or groups[g].loops > budget:
            break
        hot.add(g)
        budget -= groups[g].loops
    parts: list = []               # (hot, groups)
    for g, code in enumerate(groups):
        if parts and parts[-1][0] == (g in hot) and \
                sum(len(c.lines) for c in parts[-1][1]) < PART_LINES:
            parts[-1][1].append(code)
        else:
            parts.append((g in hot, [code]))
    modules = {True: [], False: []}
    for k, (is_hot, codes) in enumerate(parts):
        name = f"@{prefix}_part{k}"
        lines = [f"define {'' if is_hot else 'internal '}void {name}(ptr %arrays) "
                 f"noinline nounwind {{"]
        for slot in sorted(set().union(*(c.slots for c in codes))):
            lines += [f"  %s{slot} = getelementptr ptr, ptr %arrays, i64 {slot}",
                      f"  %o{slot} = load ptr, ptr %s{slot}",
                      f"  %d{slot} = getelementptr i8, ptr %o{slot}, i64 {data_offset}",
                      f"  %p{slot} = load ptr, ptr %d{slot}"]
        for code in codes:
            lines += [f"  br label %{code.label}", f"{code.label}:", *code.head, *code.lines]
        modules[is_hot].append("\n".join([*lines, "  ret void", "}"]))
        if is_hot:
            modules[False].append(f"declare void {name}(ptr)")
    modules[False] += [f"define void @{prefix}_entry(ptr %arrays) nounwind {{",
                       *(f"  call void @{prefix}_part{k}(ptr %arrays)"
                         for k in range(len(parts))), "  ret void", "}", ""]
    hot_names = [f"{prefix}_part{k}" for k, (is_hot, _) in enumerate(parts) if is_hot]
    hot_text, cold_text = ("\n".join(modules[k]) for k in (True, False))
    declared = _declarations()
    return (straight.with_declarations(hot_text, declared) if hot_text else "",
            straight.with_declarations(cold_text, declared), hot_names)


def _work(ops) -> int:
    """About how many elements a group's loops visit (a long matmul's work is BLAS's)."""
    op = ops[0]
    if op.prim == "matmul":
        k = op.inputs[0].shape[-1]
        return op.out.type.size * k if k <= SMALL_DOT_K else 0
    return sum(max(v.type.size for v in (*o.inputs, o.out)) for o in ops)


def _declarations() -> list:
    lines = []
    if cblas.BITS:
        n = f"i{cblas.BITS}"
        lines.append(f"declare void @fusegrad_dgemm(i32, i32, i32, {n}, {n}, {n}, double, ptr, "
                     f"{n}, ptr, {n}, double, ptr, {n})")
    return lines


def _emit(code: _Code, plan: Plan, ops: list):
    op = ops[0]
    if op.out.type.size == 0:
        return
    if op.prim in ELEMENTWISE:
        _elementwise(code, plan, ops)
    elif op.prim in straight._REDUCTIONS:
        _reduce(code, plan, op)
    elif op.prim == "matmul":
        _matmul(code, plan, op)
    else:
        _shape(code, plan, op)


def _elementwise(code, plan, ops):
    """One flat loop; a value stays in a register unless later groups or the results use it."""
    def body(i):
        regs = {}
        for op in ops:
            xs = [regs[plan.of(v)] if plan.of(v) in regs else
                  code.load(code.at(plan.where[plan.of(v)], (1,), (i,)), v.dtype)
                  for v in op.inputs]
            if op.prim == "full":
                out = straight._literal(op.params["value"], op.out.dtype)
            else:
                out = code.fresh()
                code.emit(*straight._lines(op, out, xs))
            regs[op.out] = out
            if op.out in plan.stored:
                code.store(code.at(plan.where[op.out], (1,), (i,)), out, op.out.dtype)
    code.loop(ops[0].out.type.size, body)


def _copy(code, shape, src, src_map, dst, dst_map):
    """dst[dst_map(index)] = src[src_map(index)] over shape; a map is (offset, strides)."""
    shape, (src_strides, dst_strides) = _merged(shape, src_map[1], dst_map[1])

    def body(index):
        x = code.load(code.at(src, src_strides, index, src_map[0]), "f64")
        code.store(code.at(dst, dst_strides, index, dst_map[0]), x, "f64")
    if math.prod(shape):
        code.nest(shape, body)


def _merged(shape, *strides) -> tuple:
    """shape and strides with each run of axes that every map walks as one axis merged into
    it (a contiguous copy is one flat loop), and axes of size 1 dropped."""
    axes = [(n, *ss) for n, *ss in zip(shape, *strides) if n != 1]
    merged: list = []
    for n, *ss in axes:
        if merged and all(outer == inner * n for outer, inner in zip(merged[-1][1:], ss)):
            merged[-1] = (merged[-1][0] * n, *ss)
        else:
            merged.append((n, *ss))
    return tuple(a[0] for a in merged), [tuple(a[k] for a in merged)
                                         for k in range(1, len(strides) + 1)]


def _fill(code, where, size: int, value: float):
    literal = straight._double(value)
    code.loop(size, lambda i: code.emit(f"store double {literal}, ptr "
                                        f"{code.at(where, (1,), (i,))}"))


def _shape(code, plan, op):
    """A shape op: read through an affine map of the operand, write the result in order, or
    (pad, concatenate) the other way round."""
    prim, p, out = op.prim, op.params, op.out
    x = op.inputs[0]
    src, dst = plan.where[plan.of(x)], plan.where[out]
    xs, os_ = _strides(x.shape), _strides(out.shape)
    in_order = (0, os_)
    if prim == "broadcast_in_dim":
        strides = [0] * out.type.ndim
        for axis, d in enumerate(p["dims"]):
            strides[d] = 0 if x.shape[axis] == 1 else xs[axis]
        _copy(code, out.shape, src, (0, strides), dst, in_order)
    elif prim == "transpose":
        _copy(code, out.shape, src, (0, [xs[a] for a in p["perm"]]), dst, in_order)
    elif prim == "slice":
        start = sum(a * s for a, s in zip(p["start"], xs))
        _copy(code, out.shape, src, (start, [k * s for k, s in zip(p["step"], xs)]), dst,
              in_order)
    elif prim == "rev":
        axes = set(p["axes"])
        start = sum((x.shape[a] - 1) * xs[a] for a in axes)
        strides = [-s if a in axes else s for a, s in enumerate(xs)]
        _copy(code, out.shape, src, (start, strides), dst, in_order)
    elif prim == "pad":
        _fill(code, dst, out.type.size, 0.0)
        start = sum(lo * s for lo, s in zip(p["low"], os_))
        strides = [(it + 1) * s for it, s in zip(p["interior"], os_)]
        _copy(code, x.shape, src, (0, xs), dst, (start, strides))
    elif prim == "concatenate":
        axis, start = p["axis"] % out.type.ndim, 0
        for v in op.inputs:
            _copy(code, v.shape, plan.where[plan.of(v)], (0, _strides(v.shape)), dst,
                  (start * os_[axis], os_))
            start += v.shape[axis]
    else:
        raise NotImplementedError(prim)


def _reduce(code, plan, op):
    """The result set to the identity, then every operand element folded into its result
    element, the operand walked in row-major order."""
    x, out = op.inputs[0], op.out
    identity, fold = straight._REDUCTIONS[op.prim]
    dst = plan.where[out]
    _fill(code, dst, out.type.size, identity)
    axes, kept = set(op.params["axes"]), iter(_strides(out.shape))
    strides = [0 if a in axes else next(kept) for a in range(x.type.ndim)]
    src = plan.where[plan.of(x)]

    def body(index):
        element = code.load(code.at(src, _strides(x.shape), index), "f64")
        at = code.at(dst, strides, index)
        acc, total = code.fresh(), code.fresh()
        code.emit(f"{acc} = load double, ptr {at}",
                  *(line.format(out=total, acc=acc, x=element) for line in fold),
                  f"store double {total}, ptr {at}")
    if x.type.size:
        code.nest(x.shape, body)


def _matmul(code, plan, op):
    """[..., m, k] @ [..., k, n]: fmas in the order of k for a short k, else ?gemm per batch."""
    a, b = op.inputs
    out = op.out
    *batch, m, k = a.shape
    n = b.shape[-1]
    wa, wb, wo = plan.where[plan.of(a)], plan.where[plan.of(b)], plan.where[out]
    sa, sb, so = _strides(a.shape), _strides(b.shape), _strides(out.shape)
    if k == 0:
        _fill(code, wo, out.type.size, 0.0)
    elif k <= SMALL_DOT_K:
        def body(index):
            *bi, i, j = index
            acc = None
            for t in range(k):
                x = code.load(code.at(wa, sa, (*bi, i), t), "f64")
                y = code.load(code.at(wb, (*sb[:-2], 1), (*bi, j), t * n), "f64")
                name = code.fresh()
                code.emit(f"{name} = fmul double {x}, {y}" if acc is None else
                          f"{name} = call double @llvm.fma.f64(double {x}, double {y}, "
                          f"double {acc})")
                acc = name
            code.store(code.at(wo, so, index), acc, "f64")
        code.nest(out.shape, body)
    else:
        ints = f"i{cblas.BITS}"

        def call(bi):
            pa, pb, po = code.at(wa, sa, bi), code.at(wb, sb, bi), code.at(wo, so, bi)
            code.emit(f"call void @fusegrad_dgemm(i32 {cblas.ROW_MAJOR}, i32 {cblas.NO_TRANS}, "
                      f"i32 {cblas.NO_TRANS}, {ints} {m}, {ints} {n}, {ints} {k}, double 1.0, "
                      f"ptr {pa}, {ints} {k}, ptr {pb}, {ints} {n}, double 0.0, ptr {po}, "
                      f"{ints} {n})")
        code.nest(tuple(batch), call)
