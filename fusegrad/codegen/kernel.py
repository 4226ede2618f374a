"""The source of one loop kernel: its loop nest written out, one line per IR value.

Emission is demand-driven, as in XLA's loop fusion: to store a value at an index, emit its op
at that index, which asks for its operands at the indices the op maps them to (a broadcast drops
axes, a transpose permutes them, a slice offsets them), down to loads and literals. Each (value,
index) pair becomes one line `v12 = <template>` placed at the shallowest loop depth whose loop
variables it uses, so per-row work is hoisted out of inner loops.

A kernel runs `passes` over its inner loops. With `split` outer loops shared (the rows), pass p
may use the results of reductions finished in pass p-1: a softmax is three passes over each row
(max, sum of exp, store). Lines deeper than the split belong to one pass and are recomputed in a
later pass that needs them again; lines at or above it are computed once per row. Reductions
accumulate in scalars when their kept loops are outer loops, else into the output array.
"""

from __future__ import annotations

import math

from ..ir.primitives import ELEMENTWISE
from ..passes.fusion import INLINE, Kernel
from .chunks import parallel_worth, render_chunks
from .index_maps import INDEX_RULES, ZERO, Expr
from .loop_ir import Accumulate, Call, Cols, Let, Loop, Return, Store, index_only, names
from .support import STREAM_MIN_BYTES
from .templates import (
    MATH_FUNCS,
    MATHLIB_MAX_CALLS,
    literal,
    new_buffer,
    reduction_init,
    render,
    render_convert,
)


class KernelSource:
    """Builds the loop tree of one kernel (loop_ir.py). Afterwards `inputs` lists the values it
    loads (its array and scalar arguments, in first-use order), `scalar_outputs` the 0-d
    results it returns, `passes` the passes over a row, `chunk` the chunk function's tree and
    call when it runs as chunks (chunks.py), and `has_reduction` / `parallel_rows` decide
    options."""

    def __init__(self, kernel: Kernel, fusion, names, syms, describe, name: str,
                 parallel=False, streamed=frozenset(), pool=False, where=None, rows=None):
        self.k, self.fusion, self.names, self.syms = kernel, fusion, names, syms
        self.stack_rows = rows or {}  # value -> (stack, row): it is that row of a stack
        self.stacks: dict = {}       # the stacks it reads or writes -> their names, s0, s1, ...
        self.where = where           # op -> the code of its source line, for an error
        self.index_checks: dict = {}  # (index array, size, axis) -> where: checked before
        self.describe, self.name, self.parallel = describe, name, parallel
        self.pool = pool             # whether OpenBLAS's threads may run it (pool.py)
        self.pool_split = None       # decided by tree(): "rows", "cols" or None
        self.column_sums_only = True  # whatever spans the rows is a sum kept per column
        self.streamed = streamed     # outputs to store a row at a time with stream_row
        self.loops = kernel.loops
        self.depth_of = {a: i + 1 for i, a in enumerate(self.loops)}
        self.split = kernel.split or 0
        self.members = {op.out: op for op in kernel.ops}
        self.outputs = set(fusion.outputs[kernel])
        self.identity = tuple(self.loop_var(a) if n != 1 else ZERO
                              for a, n in enumerate(kernel.domain))
        self.memo: dict = {}
        self.scratch_decls: list = []  # scratch rows' allocations: once, or per row in prange
        self.value_names: dict = {}
        self.copies: dict = {}
        self.inputs: dict = {}
        self.prologue, self.returns = [], {}     # returns: 0-d value -> expression
        # (pass, depth, "pre" or "post") -> the statements placed before or after the loop at
        # that depth; pass None above the split, where statements run once per row
        self.placed: dict = {}
        self.cur = 0
        self.serial = False          # an accumulator spans the outer loop: no prange
        self.accs: list = []         # (name, prim, np dtype) of accumulators over the whole nest
        self.chunk = None            # decided by tree(): see chunks.py
        self.row_parts: list = []    # (name, prim, np dtype) of reductions folded per row
        size = math.prod(kernel.domain)
        calls = sum(op.prim in MATH_FUNCS for op in kernel.ops)
        itemsize = max((op.out.type.np_dtype.itemsize for op in kernel.ops
                        if op.out.dtype in ("f32", "f64")), default=8)
        self.big = parallel_worth(size, calls, itemsize)
        self.rows = bool(kernel.split) and self.big and kernel.domain[self.loops[0]] >= 2
        self.vectorized = bool(self.loops) and calls <= MATHLIB_MAX_CALLS

    # -- placement -----------------------------------------------------------------------

    def loop_var(self, axis: int) -> Expr:
        return Expr(f"i{axis}", self.depth_of[axis])

    def put(self, stmt, depth: int, phase: int, where: str = "pre"):
        key = (None if depth < self.split else phase, depth, where)
        self.placed.setdefault(key, []).append(stmt)

    def at(self, phase, depth: int, where: str) -> list:
        return self.placed.get((phase, depth, where), [])

    @property
    def phases(self) -> int:
        """The passes over a row that have statements (and the rows' own region after them)."""
        return max([self.passes] + [p + 1 for p, _, _ in self.placed if p is not None])

    def statements(self) -> list:
        return [s for nodes in self.placed.values() for s in nodes]

    # -- passes --------------------------------------------------------------------------

    def plan_passes(self):
        """pass_of[op]: the pass computing a full/reduce/scatter member; avail[v]: the first
        pass (or row region) where a member's value exists."""
        self.pass_of, self.avail = {}, {}
        role = self.fusion.role
        for op in self.k.ops:
            first = max((self.avail[v] for v in op.inputs if v in self.avail), default=0)
            r = role[op]
            if r in ("full", "reduce", "scatter"):
                self.pass_of[op] = first
            self.avail[op.out] = first + 1 if r == "reduce" else first
        self.passes = max(self.pass_of.values(), default=0) + 1

    # -- emission ------------------------------------------------------------------------

    def build(self) -> list:
        self.plan_passes()
        role = self.fusion.role
        for p in range(self.passes):
            self.cur = p
            roots = [op for op in self.k.ops if self.pass_of.get(op) == p and (
                role[op] in ("reduce", "scatter") or op.out in self.outputs)]
            self.prepare(roots)
            for op in roots:
                if role[op] == "reduce":
                    self.emit_reduce(op)
                elif role[op] == "scatter":
                    self.emit_scatter(op)
                else:
                    self.store(op.out, self.identity, p)
        self.cur = self.passes
        roots = [op for op in self.k.ops if role[op] == "row_reduce" or
                 (role[op] == "row" and op.out in self.outputs)]
        self.prepare(roots)
        for op in roots:
            if role[op] == "row_reduce":
                self.emit_row_reduce(op)
        for op in roots:
            if role[op] == "row":
                self.store(op.out, self.row_index(op.out.shape), None)
        return self.tree()

    def prepare(self, roots):
        """Emit the members the roots need in definition order, so that the demand-driven
        emit() finds its operands ready and never recurses deeper than an index map chain."""
        role, needed, stack = self.fusion.role, set(), list(roots)
        while stack:
            op = stack.pop()
            for v in op.inputs:
                producer = self.members.get(v)
                if producer is not None and producer not in needed and \
                        role[producer] in ("full", "row"):
                    needed.add(producer)
                    stack.append(producer)
        for op in self.k.ops:
            if op in needed:
                canonical = self.identity if role[op] == "full" else self.row_index(op.out.shape)
                self.emit(op.out, canonical)

    def store(self, v, index, phase):
        e = self.emit(v, index)
        if v.shape == ():
            self.returns[v] = e.text
            return
        depth = max([e.depth] + [i.depth for i in index])
        phase = e.avail if phase is None else phase
        if v in self.streamed and self.streams(index):
            self.stream(v, e, depth, phase)
            return
        self.put(Store(*self.element(v, index, out=True), e.text), depth, phase)

    def streams(self, index) -> bool:
        """Whether an output stored at `index` can go out a row at a time: stored over the
        whole domain, its last axis the innermost loop, and rows never shared by threads
        (the scratch row is one per thread only when rows run in prange)."""
        loops = self.loops
        return index == self.identity and len(loops) >= 2 and \
            loops[-1] == len(self.k.domain) - 1 and (self.split == len(loops) - 1 or
                                                     not self.parallel)

    def stream(self, v, e, depth, phase):
        """Store v into a row scratch in the inner loop, then copy each finished row out, with
        non-temporal stores when v has at least STREAM_MIN_BYTES (decided at run time, so the
        source still depends on ranks only): support.stream_row."""
        row = self.scratch_row(f"{self.names[v]}_stream", v)
        size = " * ".join(self.syms.dim(self.k.domain[a]) for a in self.loops)
        self.prologue.append(
            Let(f"{row}_nt", f"{size} >= {STREAM_MIN_BYTES // v.type.np_dtype.itemsize}"))
        self.put(Store(row, self.identity[-1].text, e.text), depth, phase)
        whole = Cols(f"{self.buffer(v)}[{_join(self.identity[:-1])}]")
        self.put(Call("stream_row", [whole, Cols(row), f"{row}_nt"]), depth - 1, phase, "post")

    def buffer(self, v) -> str:
        return f"{self.names[v]}_out"

    def element(self, v, index, out=False) -> tuple:
        """v at index: (array, index) of an element of its array, or of its row of a stack."""
        if v not in self.stack_rows:
            return self.buffer(v) if out else self.names[v], _join(index)
        stack, row = self.stack_rows[v]
        name = self.stacks.setdefault(stack, f"s{len(self.stacks)}")
        return name, f"{row}, {_join(index)}"

    def row_index(self, shape) -> tuple:
        outer = iter(self.loops[:self.split])
        return tuple(ZERO if n == 1 else self.loop_var(next(outer)) for n in shape)

    def emit(self, v, index) -> Expr:
        key = (v, _join(index))
        e = self.memo.get(key)
        if e is not None and (e.pass_ is None or e.pass_ == self.cur):
            return e
        if e is not None and self.scratchable(v, index, e):
            e = self.memo[key] = self.from_scratch(v, e)
            return e
        op = self.members.get(v)
        if op is not None and self.fusion.role[op] == "reduce":
            raise AssertionError(f"codegen: {self.names[v]} read at [{key[1]}] before its "
                                 f"reduction in {self.name} finished")
        if op is not None or self.fusion.kind[v] == INLINE:
            op = op or self.fusion.producer[v]
            e = self.compute(op, index)
        else:
            e = self.load(v, index)
        self.memo[key] = e
        return e

    def scratchable(self, v, index, e) -> bool:
        """A math call computed in an earlier pass over the row is kept in a row-sized scratch
        array instead of being computed again (a softmax's exp, once instead of three times)."""
        op = self.members.get(v) or self.fusion.producer.get(v)
        return op is not None and op.prim in MATH_FUNCS and self.split >= 1 and \
            len(self.loops) == self.split + 1 and index == self.identity and \
            e.depth == len(self.loops) and e.text == self.value_names.get((v, _join(index)))

    def from_scratch(self, v, e) -> Expr:
        """v's row, stored in the pass that computed e and read in every later one."""
        inner = self.loop_var(self.loops[-1]).text
        row = self.scratch_row(f"{e.text}_row", v)
        self.put(Store(row, inner, e.text), e.depth, e.pass_)
        return Expr(f"{row}[{inner}]", e.depth, e.avail)

    def scratch_row(self, name: str, v) -> str:
        """Declare a scratch array of v's dtype, one inner row long (see tree for where)."""
        n = self.syms.dim(self.k.domain[self.loops[-1]])
        self.scratch_decls.append(Let(name, new_buffer(n, v.type.np_dtype.name)))
        return name

    def bounded(self, idx, j: Expr, n: int, axis: int, op) -> Expr:
        """j, an entry of the index array idx used on an axis of size n, within NumPy's
        bounds: an array in memory is checked once before the kernel runs (the entry does it,
        see index_checks), an index computed here is checked where it is used."""
        if idx not in self.members and self.fusion.kind[idx] != INLINE:
            self.index_checks.setdefault((idx, n, axis), self.where(op))
            return j
        return Expr(f"check_index({j.text}, {self.syms.dim(n)}, {axis}, {self.where(op)})",
                    j.depth, j.avail, j.pass_)

    def load(self, v, index) -> Expr:
        name = self.names[v]
        self.inputs.setdefault(v, None)
        if v.shape == ():
            return Expr(name)
        array, at = self.element(v, index)
        return Expr(f"{array}[{at}]", max(i.depth for i in index))

    def compute(self, op, index) -> Expr:
        if op.prim not in ELEMENTWISE:
            return INDEX_RULES[op.prim](self, op, index)
        ins = [self.emit(u, index) for u in op.inputs]
        texts = [e.text for e in ins]
        if op.prim == "convert":
            text = render_convert(op.inputs[0].dtype, op.out.dtype, texts[0])
        else:
            dtype = op.inputs[1 if op.prim == "select" else 0].dtype
            text = render(op.prim, dtype, texts, self.vectorized)
        return self.statement(op, index, text, ins)

    def statement(self, op, index, text, ins) -> Expr:
        v = op.out
        key = (v, _join(index))
        name = self.value_names.get(key)
        if name is None:
            count = self.copies[v] = self.copies.get(v, -1) + 1
            name = self.names[v] + (f"_{count}" if count else "")
            self.value_names[key] = name
        depth = max((e.depth for e in ins), default=0)
        avail = max((e.avail for e in ins), default=0)
        deep = depth > self.split
        self.put(Let(name, text, self.describe(op)), depth, self.cur if deep else avail)
        return Expr(name, depth, avail, self.cur if deep else None)

    # -- reductions and scatters ---------------------------------------------------------

    def emit_reduce(self, op):
        e = self.emit(op.inputs[0], self.identity)
        kept = [a for a in self.loops if a not in _axes(op)]
        self.reduce(op, e, self.identity, kept, len(self.loops), self.cur)

    def emit_row_reduce(self, op):
        """A reduction over the rows of a per-row value: updated once per row."""
        x = op.inputs[0]
        index = self.row_index(x.shape)
        outer = iter(self.loops[:self.split])
        loop_of = {a: next(outer) for a, n in enumerate(x.shape) if n != 1}
        kept = [loop for a, loop in loop_of.items() if a not in _axes(op)]
        e = self.emit(x, index)
        self.reduce(op, e, index, kept, self.split, e.avail)

    def reduce(self, op, e, index, kept, last, phase):
        """Fold e, the operand at index, into an accumulator updated at depth `last`: a scalar
        living at the depth of the kept loops when they are the outer ones, else the output
        array itself."""
        axes = _axes(op)
        kept_index = tuple(ix for a, ix in enumerate(index) if a not in axes)
        ndim = op.inputs[0].type.ndim
        pos = index[op.params["axis"] % ndim].text if "axis" in op.params else ""
        if list(self.loops[:len(kept)]) == kept:
            self.scalar_reduce(op, e, len(kept), kept_index, pos, last, phase)
        else:
            self.serial = True
            self.column_sums_only &= op.prim not in ("argmax", "argmin") and \
                [i.text for i in kept_index] == [f"i{self.loops[-1]}"]
            self.array_reduce(op, e, kept_index, pos, last, phase)

    def row_partials(self, op) -> bool:
        """Whether a reduction over everything in a large row kernel folds one partial per row
        (folded in row order after the loop), so the rows can run under prange."""
        ks = self.k.ops
        return self.rows and op.prim not in ("argmax", "argmin") and op.out.shape == () and \
            not any(op.out in other.inputs for other in ks)

    def scalar_reduce(self, op, e, depth, kept_index, pos, last, p):
        v, prim, dtype = op.out, op.prim, op.inputs[0].dtype
        acc = self.names[v]
        if depth < len(self.loops):
            self.column_sums_only = False   # the accumulator spans columns
        if depth == 0 and self.loops and self.row_partials(op):
            depth = 1
            self.row_parts.append((acc, prim, op.out.type.np_dtype.name))
            self.put(Store(f"{acc}_part", f"i{self.loops[0]}", acc), depth, p, "post")
        elif depth == 0 and self.loops:
            self.serial = True
            self.accs.append((acc, prim, op.out.type.np_dtype.name))
        comment = self.describe(op)
        if prim in ("argmax", "argmin"):
            best, take = f"{acc}_best", f"{acc}_take"
            cmp = ">" if prim == "argmax" else "<"
            self.put(Let(best, reduction_init(prim, dtype)), depth, p)
            self.put(Let(acc, "0"), depth, p)
            self.put(Let(take, f"{e.text} {cmp} {best} or ({e.text} != {e.text} and "
                               f"{best} == {best})", comment), last, p)
            self.put(Let(best, f"{e.text} if {take} else {best}"), last, p)
            self.put(Let(acc, f"{pos} if {take} else {acc}"), last, p)
        else:
            self.put(Let(acc, reduction_init(prim, dtype)), depth, p)
            self.put(Accumulate(prim, acc, e.text, comment), last, p)
        if v.shape == ():
            if v in self.outputs:
                self.returns[v] = acc
        elif v in self.outputs:
            self.put(Store(self.buffer(v), _join(kept_index), acc), depth, p, "post")
        self.memo[(v, _join(kept_index))] = Expr(acc, depth, p + 1)

    def array_reduce(self, op, e, kept_index, pos, last, p):
        v, prim, dtype = op.out, op.prim, op.inputs[0].dtype
        buf, at = self.buffer(v), _join(kept_index)
        target = f"{buf}[{at}]"
        comment = self.describe(op)
        if prim in ("argmax", "argmin"):
            best = f"{self.names[v]}_best"
            shape = ", ".join(self.syms.dim(n) for n in v.shape)
            np_dtype = f"np.{op.inputs[0].type.np_dtype.name}"
            self.prologue.append(Let(best, f"np.full(({shape},), "
                                           f"{reduction_init(prim, dtype)}, {np_dtype})"))
            self.prologue.append(Call("fill", ["0"], obj=buf))
            cmp = ">" if prim == "argmax" else "<"
            best_at = f"{best}[{at}]"
            take = f"{self.names[v]}_take"
            self.put(Let(take, f"{e.text} {cmp} {best_at} or ({e.text} != {e.text} "
                               f"and {best_at} == {best_at})", comment), last, p)
            self.put(Store(best, at, f"{e.text} if {take} else {best_at}"), last, p)
            self.put(Store(buf, at, f"{pos} if {take} else {target}"), last, p)
        else:
            self.prologue.append(Call("fill", [reduction_init(prim, dtype)], obj=Cols(buf)))
            self.put(Accumulate(prim, target, e.text, comment), last, p)

    def emit_scatter(self, op):
        """Add g into the output at the index idx gives: rows may add into the same element,
        so the kernel runs serially."""
        self.serial, self.column_sums_only = True, False
        idx, g = op.inputs
        axis = op.params["axis"]
        e = self.emit(g, self.identity)
        I = self.identity
        n = op.out.shape[axis]
        if op.prim == "scatter_add_along_axis":
            j = self.bounded(idx, self.emit(idx, I), n, axis, op)
            target = I[:axis] + (j,) + I[axis + 1:]
        else:
            j = self.bounded(idx, self.emit(idx, I[axis:axis + idx.type.ndim]), n, axis, op)
            target = I[:axis] + (j,) + I[axis + idx.type.ndim:]
        buf = self.buffer(op.out)
        self.prologue.append(Call("fill", [literal(0, op.out.dtype)], obj=buf))
        self.put(Accumulate("reduce_sum", f"{buf}[{_join(target)}]", e.text, self.describe(op)),
                 len(self.loops), self.cur)

    # -- rendering -----------------------------------------------------------------------

    @property
    def scalar_outputs(self) -> list:
        return [op.out for op in self.k.ops if op.out in self.returns]

    @property
    def has_reduction(self) -> bool:
        return any(self.fusion.role[op] in ("reduce", "row_reduce", "scatter")
                   for op in self.k.ops)

    def tree(self) -> list:
        """The kernel's body as a loop tree; how it runs in parts (chunks under prange, or
        the pool's rows or columns) is decided here, on the statements, before any text."""
        chunkable = not self.split and len(self.loops) == 1 and \
            not any(op.prim in ("argmax", "argmin") for op in self.k.ops)
        if chunkable and not self.prologue and self.phases == 1 and \
                self.big and self.k.domain[self.loops[0]] >= 2 and \
                set(self.returns.values()) <= {a for a, _, _ in self.accs} and \
                index_only(self.statements(), f"i{self.loops[0]}"):
            return render_chunks(self)
        self.pool_split = self.choose_pool_split()
        n = self.syms.dim(self.k.domain[self.loops[0]]) if self.loops else "1"
        parts = [Let(f"{a}_part", new_buffer(n, dt)) for a, _, dt in self.row_parts]
        if self.parallel_rows and self.scratch_decls:    # rows run at once: one array each
            self.placed[(0, self.split, "pre")] = self.scratch_decls + self.at(0, self.split, "pre")
        else:
            parts += self.scratch_decls
        body = parts + self.prologue + self.outer(0)
        for a, prim, _ in self.row_parts:
            body += [Let(a, f"{a}_part[0]"),
                     Loop("r", n, [Accumulate(prim, a, f"{a}_part[r]")], start="1")]
        if "stream_row" in names(body, called=True):
            body.append(Call("stream_fence"))
        if self.returns:
            body.append(Return(self.returns[v] for v in self.scalar_outputs))
        return body

    def choose_pool_split(self) -> str | None:
        """How the kernel splits into parts for OpenBLAS's threads (pool.py): "rows" when its
        rows are independent, "cols" when all that spans the rows is sums kept per column
        (each column is then summed in row order, as serially), None to run serially.

        Only a big single-pass 2-D nest that would otherwise run on one core qualifies, with
        no scalar results (a part returns nothing) and only arrays and sizes for arguments
        (a part gets them as addresses in an int64 array)."""
        if not (self.pool and self.big and len(self.loops) == 2 and not self.split and
                self.phases == 1 and not self.parallel_rows and not self.returns and
                not self.row_parts and all(v.shape != () for v in self.inputs)):
            return None
        outer, inner = self.loops
        if {"ipow", "check_index"} & names(self.prologue + self.statements(), called=True):
            return None         # ipow or an index check may raise, and a part cannot
        if not self.serial and self.k.domain[outer] >= 2:
            return "rows"
        if self.column_sums_only and self.k.domain[inner] >= 2 and \
                index_only(self.statements(), f"i{inner}"):
            return "cols"
        return None

    @property
    def parallel_rows(self) -> bool:
        return (self.parallel or self.rows) and not self.serial

    def loop(self, axis, body, outermost=False) -> list:
        """The loop over an axis, if it has a body: a pool part's covers lo:hi of the rows or
        (unsigned) of the columns it was split along."""
        if not body:
            return []
        var = f"i{axis}"
        if self.pool_split == "rows" and axis == self.loops[0]:
            return [Loop(var, "hi", body, start="lo")]
        if self.pool_split == "cols" and axis == self.loops[-1]:
            return [Loop(var, "hi", body, start="lo", unsigned=True)]
        return [Loop(var, self.syms.dim(self.k.domain[axis]), body,
                     parallel=outermost and self.parallel_rows)]

    def outer(self, t) -> list:
        if t < self.split:
            return self.at(None, t, "pre") + self.loop(self.loops[t], self.outer(t + 1), t == 0) \
                + self.at(None, t, "post")
        return [s for p in range(self.phases) for s in self.inner(p, t)]

    def inner(self, p, t) -> list:
        """Pass p's statements at depth t, around the loop at that depth."""
        nested = self.loop(self.loops[t], self.inner(p, t + 1), t == 0) \
            if t < len(self.loops) else []
        return self.at(p, t, "pre") + nested + self.at(p, t, "post")


def _axes(op) -> set:
    x = op.inputs[0]
    return set(op.params["axes"]) if "axes" in op.params else {op.params["axis"] % x.type.ndim}


def _join(index) -> str:
    return ", ".join(i.text for i in index)
