"""Functions of float64 arrays of any size compiled through LLVM directly, a loop nest an op,
without Numba.

Numba types and lowers each generated kernel and entry on its own, at a fixed cost of a
tenth of a second to seconds, whatever its size: an MLP's gradient (50 ops, 784x512 weights)
took 6 s to compile and an LSTM unrolled over 20 steps (1 900 ops on 4x30 arrays) 23 s.
Written here as LLVM text, the same functions compile in a fraction of that, because every op
is one small loop nest over buffers:

- elementwise ops of one size that follow each other are one flat loop, their intermediate
  values registers (the fusion that matters most, done in program order);
- a shape op (broadcast_in_dim, transpose, slice, rev, pad, concatenate) is a nest that reads
  through an affine map (a base and a stride per axis) and writes contiguously, or the other
  way round; reshape and same-dtype convert are no code at all, another name for a buffer;
- a reduction zeroes its result, then walks its operand in row-major order and folds each
  element into the result element it belongs to: every result element folds its terms in
  row-major order from the identity, as the Numba backend's loops do;
- a matmul of at most passes/schedule.SMALL_DOT_K terms is a nest of fmas in the order of k
  (the Numba backend's bits); a longer one calls NumPy's own ?gemm (cblas.py) per batch.

Values live in buffers: the params', a result array each for the results, constants made
once, and an arena for the rest, where a value's slot is reused once its last use has run
(a value's slot is taken before its operands' are given back, so no nest writes over what it
reads); a call takes an idle arena or makes one. Bools are stored as 0.0 and 1.0.

Two modules: the loops that visit the most elements, up to HOT_LOOPS of them, go through
LLVM's O2 pipeline for this CPU with its loop vectorizer (without unrolling, which doubles
the compile time of many short loops); the rest, thousands of short loops in an unrolled
program, are compiled at level 0 with FastISel, linear in their length. Neither uses
fast-math flags, so the two give the same bits. Elementwise math is straight.py's: IEEE
arithmetic and libm, so sin, exp, log and tanh are NumPy's bits; there is no indexing (take,
scatter) and no other dtype here, so nothing can go out of range. The entry takes a table of
the array objects themselves and reads each one's data pointer; it is called through ctypes,
which releases the GIL. Which functions come here rather than to Numba: `preferred`.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import math
import os
import re

import numpy as np

from ..ir.primitives import PRIMITIVES
from ..passes.schedule import SMALL_DOT_K
from . import cblas, straight
from .templates import empty, poison_on

ENABLED = os.environ.get("FUSEGRAD_NESTS", "1") != "0"
OPT = 2
HOT_ELEMENTS = 1024     # a group visiting fewer is never optimized
HOT_LOOPS = 32          # loops at O2, about 15 ms of LLVM each
PART_LINES = 1000       # lines a function at most: LLVM's work on one grows faster

_ELEMENTWISE = {*straight._FORMS, "select", "convert", "full"}
_SHAPES = {"broadcast_in_dim", "transpose", "slice", "rev", "pad", "concatenate"}
_SUPPORTED = {*_ELEMENTWISE, *_SHAPES, *straight._REDUCTIONS, "reshape", "constant", "iota",
              "matmul"}


def supports(fn) -> bool:
    """Whether every value of fn is f64 or bool and every op one this module writes."""
    import llvmlite.binding as llvm
    if not ENABLED or DATA_OFFSET is None or llvm.llvm_version_info < (15,):  # `ptr`: LLVM 15+
        return False
    values = [*fn.params, *(v for op in fn.ops for v in op.outputs)]
    return all(v.dtype in ("f64", "bool") for v in values) and all(
        len(op.outputs) == 1 and op.prim in _SUPPORTED and _typed(op) for op in fn.ops)


# Which of the two compiles a function both can. Numba's loops call mathlib's vectorized exp,
# log, tanh & co (about 1 ns an element; libm 10-20 ns) and spread big loops over the cores, so
# for a function that is mostly such math on many elements, Numba's seconds of compile buy a
# several-fold faster run: benchmarks/run.py's W1 (tanh and sigmoid of 10**4 to 4 10**6
# elements) runs 5 times faster there. Where BLAS, plain arithmetic or short arrays take the
# time (an MLP's gradient, an unrolled LSTM), both run within a factor of about 2 and nests
# compile 5 to 20 times faster. The estimate uses rough costs per element or product term on
# this project's reference machine; only their ratios matter.
# A short function that runs in microseconds goes to Numba too: it compiles in about a second
# there, and a call costs 4 us instead of 8 (a ctypes call and the table of arrays: the W3
# scalar of benchmarks/run.py).
LIBM_NS, ELEMENT_NS, TERM_NS = 15.0, 1.0, 0.035
NUMBA_LIBM_SHARE = 0.5          # Numba where libm would take at least this share of the time
NUMBA_LIBM_NS = 50_000          # ... and at least this long a call
NUMBA_SHORT_OPS = 24            # Numba for at most this many ops
NUMBA_SHORT_NS = 20_000         # ... that take at most this long a call


def preferred(fn) -> bool:
    """Whether nests should compile fn rather than Numba (the model above)."""
    libm, other = _estimate(fn)
    if len(fn.ops) <= NUMBA_SHORT_OPS and libm + other <= NUMBA_SHORT_NS:
        return False
    return libm < NUMBA_LIBM_NS or libm < NUMBA_LIBM_SHARE * (libm + other)


# Between the two, a function nests take may still run notably faster on Numba: an MLP's
# gradient, whose tanh of 131 072 elements takes 4 of its 14 ms here and a few tenths there.
# Under tiered execution such a function runs on the nests at once and switches to Numba
# when a background compile is done (api.Tiered).
NUMBA_LATER_SHARE = 0.1
NUMBA_LATER_NS = 1_000_000


def numba_later(fn) -> bool:
    """Whether Numba would run fn, which nests take, notably faster: libm calls at least
    NUMBA_LATER_SHARE of its estimated time and at least NUMBA_LATER_NS a call."""
    libm, other = _estimate(fn)
    return libm >= NUMBA_LATER_NS and libm >= NUMBA_LATER_SHARE * (libm + other)


def _estimate(fn) -> tuple:
    """Estimated ns a call spends in libm and in everything else."""
    libm = other = 0.0
    for op in fn.ops:
        size = op.out.type.size
        if op.prim == "matmul":
            other += size * op.inputs[0].shape[-1] * TERM_NS
        elif op.prim in _LIBM:
            libm += size * LIBM_NS
        else:
            other += max([size, *(v.type.size for v in op.inputs)]) * ELEMENT_NS
    return libm, other


def _calls_libm(form) -> bool:
    """Whether a form calls libm: a C function, an intrinsic LLVM lowers to one, or frem."""
    text = form if isinstance(form, str) else " ".join(form)
    called = re.findall(r"call double @([\w.]+)", text)
    return "frem" in text or any(not f.startswith(_INSTRUCTIONS) for f in called)


_INSTRUCTIONS = tuple(f"llvm.{f}." for f in ("fabs", "ceil", "floor", "sqrt", "rint", "trunc",
                                             "fma", "minnum", "maxnum", "copysign"))


_LIBM = {name for name, form in straight._FORMS.items() if _calls_libm(form)}


def _typed(op) -> bool:
    """Whether op's dtypes are the ones its code is written for, and an elementwise op's
    operands have its shape (its loop reads them at its own flat index)."""
    if op.prim in _ELEMENTWISE and any(v.shape != op.out.shape for v in op.inputs):
        return False
    if op.prim == "matmul":
        return op.out.dtype == "f64" and (op.inputs[0].shape[-1] <= SMALL_DOT_K
                                          or cblas.BITS is not None)
    if op.prim in ("reshape", "iota"):
        return op.prim == "reshape" or op.out.dtype == "f64"
    return straight._typed(op, SMALL_DOT_K)


def _strides(shape) -> tuple:
    """Row-major strides, in elements."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


# -- where values live ---------------------------------------------------------------------------

class _Plan:
    """Each op's group (elementwise runs share one), each value's buffer, and the buffer table
    the entry takes: [arena, params..., results..., constants...]."""

    def __init__(self, fn):
        self.fn = fn
        self.root = {}                  # a value -> the value whose buffer it names
        self.groups: list = []          # lists of ops, in order; a group is one loop or nest
        self.stored: set = set()        # roots that need a buffer
        self.where: dict = {}           # root -> (slot, offset in elements)
        self.consts: list = []          # arrays for the constant slots
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
            if prim in _ELEMENTWISE and last and last[0].prim in _ELEMENTWISE and \
                    last[0].out.type.size == op.out.type.size:
                last.append(op)
            else:
                self.groups.append([op])
            self._group_of[op.out] = len(self.groups) - 1

    def _choose_stored(self):
        """A value needs a buffer unless every use is an elementwise op of its own loop."""
        self.last_use = {}
        for g, ops in enumerate(self.groups):
            for op in ops:
                if op.prim not in _ELEMENTWISE:
                    self.stored.add(op.out)
                for v in op.inputs:
                    r = self.of(v)
                    self.last_use[r] = g
                    if self._group_of.get(r) != g or op.prim not in _ELEMENTWISE:
                        self.stored.add(r)
        self.stored.update(self.of(r) for r in self.fn.results)

    def _place(self):
        fn = self.fn
        slot = 1
        for p in fn.params:
            self.where[p] = (slot, 0)
            slot += 1
        self.result_slot = {}           # a root -> the index of the result array it fills
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


def source(plan: _Plan, prefix: str = "nests") -> tuple:
    """LLVM IR texts (hot, cold) and the names of the hot module's functions. The cold module
    holds `void @{prefix}_entry(ptr arrays)`, arrays the table of array objects, and the
    groups whose loops are short; the hot one the groups whose loops run longest, as functions
    the entry calls, up to HOT_LOOPS loops of them."""
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
    hot, budget = set(), HOT_LOOPS
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
    modules = {True: _declarations(), False: _declarations()}
    for k, (is_hot, codes) in enumerate(parts):
        name = f"@{prefix}_part{k}"
        lines = [f"define {'' if is_hot else 'internal '}void {name}(ptr %arrays) "
                 f"noinline nounwind {{"]
        for slot in sorted(set().union(*(c.slots for c in codes))):
            lines += [f"  %s{slot} = getelementptr ptr, ptr %arrays, i64 {slot}",
                      f"  %o{slot} = load ptr, ptr %s{slot}",
                      f"  %d{slot} = getelementptr i8, ptr %o{slot}, i64 {DATA_OFFSET}",
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
    return "\n".join(modules[True]), "\n".join(modules[False]), hot_names


def _work(ops) -> int:
    """About how many elements a group's loops visit (a long matmul's work is BLAS's)."""
    op = ops[0]
    if op.prim == "matmul":
        k = op.inputs[0].shape[-1]
        return op.out.type.size * k if k <= SMALL_DOT_K else 0
    return sum(max(v.type.size for v in (*o.inputs, o.out)) for o in ops)


def _declarations() -> list:
    lines = straight._declarations()
    if cblas.BITS:
        n = f"i{cblas.BITS}"
        lines.append(f"declare void @fusegrad_dgemm(i32, i32, i32, {n}, {n}, {n}, double, ptr, "
                     f"{n}, ptr, {n}, double, ptr, {n})")
    return lines


def _emit(code: _Code, plan: _Plan, ops: list):
    op = ops[0]
    if op.out.type.size == 0:
        return
    if op.prim in _ELEMENTWISE:
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


# -- compiling and running -----------------------------------------------------------------------

_COUNT = itertools.count()


def compile_nests(fn):
    """Compile fn (which `supports`): `run(leaves) -> list of arrays`, and the LLVM text."""
    import llvmlite.binding as llvm
    plan = _Plan(fn)
    prefix = f"nests{next(_COUNT)}"
    hot, cold, hot_names = source(plan, prefix)
    if hot_names:
        for name, address in zip(hot_names, straight.machine_code(hot, hot_names, OPT,
                                                                  vectorize="loops")):
            llvm.add_symbol(name, address)
    address = straight.machine_code(cold, f"{prefix}_entry", 0, fast_isel=True)
    text = (f"; fusegrad: @{fn.name} as LLVM loop nests (codegen/nests.py)\n{cold}"
            + (f"\n; the longest loops, optimized:\n{hot}" if hot_names else ""))
    entry = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))(address)
    return _runner(entry, plan), text


def _data_offset() -> int | None:
    """Where a NumPy array object keeps the address of its data (PyArrayObject's `data`, 16
    bytes in on 64-bit CPython), found by looking, so that the entry can take the array
    objects themselves: a call then passes their id()s, 15 times faster than asking each for
    its address. None if two probes disagree (then Numba compiles everything)."""
    found = set()
    for probe in (np.empty(3), np.zeros((2, 5))[1]):
        want = probe.ctypes.data
        found.add(next((offset for offset in range(8, 64, 8) if
                        ctypes.c_void_p.from_address(id(probe) + offset).value == want), None))
    return found.pop() if len(found) == 1 else None


DATA_OFFSET = _data_offset()


def _runner(cfunc, plan: _Plan):
    """run(leaves): the entry called with the table of array objects, [arena, params...,
    results..., constants...]; a result that is a param, a constant or another result is
    copied out. The arena never leaves the runner, so the next call reuses it (a fresh one
    would be page-faulted in again: 1-2 ms for an MLP's)."""
    poison = poison_on()
    fn = plan.fn
    consts = plan.consts
    owned = {i: r for r, i in plan.result_slot.items()}
    shapes = [r.shape for r in fn.results]
    bools = [r.dtype == "bool" for r in fn.results]
    copies = []             # (index, slot, start, stop, shape) of results copied out
    for i, r in enumerate(fn.results):
        root = plan.of(r)
        if owned.get(i) is not root:
            slot, offset = plan.where[root]
            copies.append((i, slot, offset, offset + r.type.size, r.shape))
    table = ctypes.c_void_p * (1 + len(fn.params) + len(shapes) + len(consts))
    f64, ascontiguous = np.float64, np.ascontiguousarray
    new = functools.partial(empty, np_dtype="float64", poison=True) if poison else np.empty
    arena_size = plan.arena
    arenas = [np.empty(0)] if not arena_size else []   # idle arenas: a call takes one

    def run(leaves):
        params = [ascontiguous(x, f64) for x in leaves]
        try:                    # pop and append are atomic: calls in threads never share one
            arena = arenas.pop()
            if poison:
                arena.fill(np.nan)
        except IndexError:
            arena = new(arena_size)
        outs = [new(shape) for shape in shapes]
        arrays = [arena, *params, *outs, *consts]
        cfunc(table(*map(id, arrays)))
        for i, slot, start, stop, shape in copies:
            outs[i] = arrays[slot].reshape(-1)[start:stop].reshape(shape).copy()
        arenas.append(arena)
        return [out.astype(bool) if flag else out for out, flag in zip(outs, bools)]
    return run
