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
from .chunks import only_indexes, parallel_worth, render_chunks
from .index_maps import INDEX_RULES, ZERO, Expr
from .support import STREAM_MIN_BYTES
from .templates import (
    MATH_FUNCS,
    MATHLIB_MAX_CALLS,
    literal,
    new_buffer,
    reduction_init,
    reduction_update,
    render,
    render_convert,
)

COLS = "%cols%"  # where a column-split part slices its columns: see choose_pool_split


class _Phase:
    def __init__(self):
        self.pre, self.post = [], []
        self.inner_pre: dict[int, list] = {}
        self.inner_post: dict[int, list] = {}


class KernelSource:
    """Builds the function text of one kernel. Afterwards `inputs` lists the values it loads
    (its array and scalar arguments, in first-use order), `scalar_outputs` the 0-d results it
    returns, `passes` the passes over a row, and `has_reduction` / `serial` decide options."""

    def __init__(self, kernel: Kernel, fusion, names, syms, describe, name: str,
                 parallel=False, streamed=frozenset(), pool=False, where=None, rows=None):
        self.k, self.fusion, self.names, self.syms = kernel, fusion, names, syms
        self.stack_rows = rows or {}  # value -> (stack, row): it is that row of a stack
        self.stacks: dict = {}       # the stacks it reads or writes -> their names, s0, s1, ...
        self.where = where           # op -> the code of its source line, for an error
        self.index_checks: dict = {}  # (index array, size, axis) -> where: checked before
        self.may_raise = False       # an index it computes is checked in the loop
        self.describe, self.name, self.parallel = describe, name, parallel
        self.pool = pool             # whether OpenBLAS's threads may run it (pool.py)
        self.pool_split = None       # decided by render(): "rows", "cols" or None
        self.column_sums_only = True  # whatever spans the rows is a sum kept per column
        self.streamed = streamed     # outputs to store a row at a time with stream_row
        self.streaming = False       # whether any output was (then stream_fence() at the end)
        self.loops = kernel.loops
        self.depth_of = {a: i + 1 for i, a in enumerate(self.loops)}
        self.split = kernel.split or 0
        self.members = {op.out: op for op in kernel.ops}
        self.outputs = set(fusion.outputs[kernel])
        self.identity = tuple(self.loop_var(a) if n != 1 else ZERO
                              for a, n in enumerate(kernel.domain))
        self.memo: dict = {}
        self.scratch: dict = {}      # (value, index) -> its per-row scratch array (scratchable)
        self.scratch_decls: list = []  # their allocations: once, or once per row in prange
        self.value_names: dict = {}
        self.copies: dict = {}
        self.inputs: dict = {}
        self.prologue, self.returns = [], {}     # returns: 0-d value -> expression
        self.pre = [[] for _ in range(self.split)]
        self.post = [[] for _ in range(self.split)]
        self.phases: list[_Phase] = []
        self.cur = 0
        self.has_reduction = False
        self.serial = False          # an accumulator spans the outer loop: no prange
        self.accs: list = []         # (name, prim, np dtype) of accumulators over the whole nest
        self.chunkable = not kernel.split and len(self.loops) == 1
        self.chunked = False         # decided by render(): see chunks.py
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

    def phase(self, p: int) -> _Phase:
        while len(self.phases) <= p:
            self.phases.append(_Phase())
        return self.phases[p]

    def put(self, line: str, depth: int, phase: int, where: str = "pre"):
        if depth < self.split:
            (self.pre if where == "pre" else self.post)[depth].append(line)
        elif depth == self.split:
            ph = self.phase(phase)
            (ph.pre if where == "pre" else ph.post).append(line)
        else:
            ph = self.phase(phase)
            table = ph.inner_pre if where == "pre" else ph.inner_post
            table.setdefault(depth, []).append(line)

    def line(self, code: str, comment: str | None = None) -> str:
        return f"{code}  # {comment}" if comment else code

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

    def build(self) -> str:
        self.plan_passes()
        role = self.fusion.role
        for p in range(self.passes):
            self.cur = p
            self.phase(p)
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
        return self.render()

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
        self.put(f"{self.element(v, index, out=True)} = {e.text}", depth, phase)

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
            f"{row}_nt = {size} >= {STREAM_MIN_BYTES // v.type.np_dtype.itemsize}")
        self.put(f"{row}[{self.identity[-1].text}] = {e.text}", depth, phase)
        self.put(f"stream_row({self.buffer(v)}[{_join(self.identity[:-1])}]{COLS}, {row}{COLS}, "
                 f"{row}_nt)",
                 depth - 1, phase, "post")
        self.streaming = True

    def buffer(self, v) -> str:
        return f"{self.names[v]}_out"

    def element(self, v, index, out=False) -> str:
        """v at index: an element of its array, or of its row of a stack."""
        if v not in self.stack_rows:
            return f"{self.buffer(v) if out else self.names[v]}[{_join(index)}]"
        stack, row = self.stack_rows[v]
        name = self.stacks.setdefault(stack, f"s{len(self.stacks)}")
        return f"{name}[{row}, {_join(index)}]"

    def row_index(self, shape) -> tuple:
        outer = iter(self.loops[:self.split])
        return tuple(ZERO if n == 1 else self.loop_var(next(outer)) for n in shape)

    def emit(self, v, index) -> Expr:
        key = (v, _join(index))
        e = self.memo.get(key)
        if e is not None and (e.pass_ is None or e.pass_ == self.cur):
            return e
        if e is not None and (key in self.scratch or self.scratchable(v, index, e)):
            e = self.memo[key] = self.from_scratch(key, v, e)
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

    def from_scratch(self, key, v, e) -> Expr:
        inner = self.loop_var(self.loops[-1]).text
        row = self.scratch.get(key)
        if row is None:
            row = self.scratch[key] = self.scratch_row(f"{e.text}_row", v)
            self.put(f"{row}[{inner}] = {e.text}", e.depth, e.pass_)
        return Expr(f"{row}[{inner}]", e.depth, e.avail, self.cur)

    def scratch_row(self, name: str, v) -> str:
        """Declare a scratch array of v's dtype, one inner row long (see render for where)."""
        n = self.syms.dim(self.k.domain[self.loops[-1]])
        self.scratch_decls.append(f"{name} = {new_buffer(n, v.type.np_dtype.name)}")
        return name

    def bounded(self, idx, j: Expr, n: int, axis: int, op) -> Expr:
        """j, an entry of the index array idx used on an axis of size n, within NumPy's
        bounds: an array in memory is checked once before the kernel runs (the entry does it,
        see index_checks), an index computed here is checked where it is used."""
        if idx not in self.members and self.fusion.kind[idx] != INLINE:
            self.index_checks.setdefault((idx, n, axis), self.where(op))
            return j
        self.may_raise = True
        return Expr(f"check_index({j.text}, {self.syms.dim(n)}, {axis}, {self.where(op)})",
                    j.depth, j.avail, j.pass_)

    def load(self, v, index) -> Expr:
        name = self.names[v]
        self.inputs.setdefault(v, None)
        if v.shape == ():
            return Expr(name)
        return Expr(self.element(v, index), max(i.depth for i in index))

    def compute(self, op, index) -> Expr:
        if op.prim not in ELEMENTWISE:
            return INDEX_RULES[op.prim](self, op, index)
        ins = [self.emit(u, index) for u in op.inputs]
        texts = [e.text for e in ins]
        if op.prim == "convert":
            text = render_convert(op.inputs[0].dtype, op.out.dtype, texts[0])
        else:
            text = render(op.prim, op.inputs[1 if op.prim == "select" else 0].dtype, texts,
                          self.vectorized)
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
        self.put(self.line(f"{name} = {text}", self.describe(op)), depth,
                 self.cur if deep else avail)
        return Expr(name, depth, avail, self.cur if deep else None)

    # -- reductions and scatters ---------------------------------------------------------

    def emit_reduce(self, op):
        x = op.inputs[0]
        e = self.emit(x, self.identity)
        axes = _axes(op)
        kept = [a for a in self.loops if a not in axes]
        kept_index = tuple(ix for a, ix in enumerate(self.identity) if a not in axes)
        pos = self.identity[op.params["axis"] % x.type.ndim].text if "axis" in op.params else ""
        self.reduce(op, e, kept, kept_index, pos, len(self.loops), self.cur)

    def emit_row_reduce(self, op):
        """A reduction over the rows of a per-row value: updated once per row."""
        x = op.inputs[0]
        index = self.row_index(x.shape)
        e = self.emit(x, index)
        axes = _axes(op)
        outer = iter(self.loops[:self.split])
        loop_of = {a: next(outer) for a, n in enumerate(x.shape) if n != 1}
        kept = [loop for a, loop in loop_of.items() if a not in axes]
        kept_index = tuple(ix for a, ix in enumerate(index) if a not in axes)
        pos = index[op.params["axis"] % x.type.ndim].text if "axis" in op.params else ""
        self.reduce(op, e, kept, kept_index, pos, self.split, e.avail)

    def reduce(self, op, e, kept, kept_index, pos, last, phase):
        """Fold e into an accumulator updated at depth `last`: a scalar living at the depth of
        the kept loops when they are the outer ones, else the output array itself."""
        self.has_reduction = True
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
            self.put(f"{acc}_part[i{self.loops[0]}] = {acc}", depth, p, "post")
        elif depth == 0 and self.loops:
            self.serial = True
            self.accs.append((acc, prim, op.out.type.np_dtype.name))
        comment = self.describe(op)
        if prim in ("argmax", "argmin"):
            self.chunkable = False
            best, take = f"{acc}_best", f"{acc}_take"
            cmp = ">" if prim == "argmax" else "<"
            self.put(f"{best} = {reduction_init(prim, dtype)}", depth, p)
            self.put(f"{acc} = 0", depth, p)
            self.put(self.line(f"{take} = {e.text} {cmp} {best} or ({e.text} != {e.text} and "
                               f"{best} == {best})", comment), last, p)
            self.put(f"{best} = {e.text} if {take} else {best}", last, p)
            self.put(f"{acc} = {pos} if {take} else {acc}", last, p)
        else:
            self.put(f"{acc} = {reduction_init(prim, dtype)}", depth, p)
            self.put(self.line(reduction_update(prim, acc, e.text), comment), last, p)
        if v.shape == ():
            if v in self.outputs:
                self.returns[v] = acc
        elif v in self.outputs:
            self.put(f"{self.buffer(v)}[{_join(kept_index)}] = {acc}", depth, p, "post")
        self.memo[(v, _join(kept_index))] = Expr(acc, depth, p + 1)

    def array_reduce(self, op, e, kept_index, pos, last, p):
        v, prim, dtype = op.out, op.prim, op.inputs[0].dtype
        buf = self.buffer(v)
        target = f"{buf}[{_join(kept_index)}]"
        comment = self.describe(op)
        if prim in ("argmax", "argmin"):
            best = f"{self.names[v]}_best"
            shape = ", ".join(self.syms.dim(n) for n in v.shape)
            np_dtype = f"np.{op.inputs[0].type.np_dtype.name}"
            self.prologue.append(f"{best} = np.full(({shape},), "
                                 f"{reduction_init(prim, dtype)}, {np_dtype})")
            self.prologue.append(f"{buf}.fill(0)")
            cmp = ">" if prim == "argmax" else "<"
            best_at = f"{best}[{_join(kept_index)}]"
            take = f"{self.names[v]}_take"
            self.put(self.line(f"{take} = {e.text} {cmp} {best_at} or ({e.text} != {e.text} "
                               f"and {best_at} == {best_at})", comment), last, p)
            self.put(f"{best_at} = {e.text} if {take} else {best_at}", last, p)
            self.put(f"{target} = {pos} if {take} else {target}", last, p)
        else:
            self.prologue.append(f"{buf}{COLS}.fill({reduction_init(prim, dtype)})")
            self.put(self.line(reduction_update(prim, target, e.text), comment), last, p)

    def emit_scatter(self, op):
        self.has_reduction = True
        self.serial = self.column_sums_only = False
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
        self.prologue.append(f"{buf}.fill({literal(0, op.out.dtype)})")
        self.put(self.line(f"{buf}[{_join(target)}] += {e.text}", self.describe(op)),
                 len(self.loops), self.cur)

    # -- rendering -----------------------------------------------------------------------

    @property
    def scalar_outputs(self) -> list:
        return [op.out for op in self.k.ops if op.out in self.returns]

    def render(self) -> str:
        if self.chunkable and not self.prologue and len(self.phases) == 1 and \
                self.big and self.k.domain[self.loops[0]] >= 2 and \
                set(self.returns.values()) <= {a for a, _, _ in self.accs} and \
                only_indexes(self.phases[0], f"i{self.loops[0]}"):
            return render_chunks(self)
        self.pool_split = self.choose_pool_split()
        n = self.syms.dim(self.k.domain[self.loops[0]]) if self.loops else "1"
        parts = [f"{a}_part = {new_buffer(n, dt)}" for a, _, dt in self.row_parts]
        if self.parallel_rows and self.scratch_decls:    # rows run at once: one array each
            self.phase(0).pre[:0] = self.scratch_decls
        else:
            parts += self.scratch_decls
        body = parts + self.prologue + self.outer(0)
        for a, prim, _ in self.row_parts:
            body += [f"{a} = {a}_part[0]", f"for r in range(1, {n}):",
                     "    " + reduction_update(prim, a, f"{a}_part[r]")]
        if self.streaming:
            body.append("stream_fence()")
        if self.returns:
            body.append(f"return {', '.join(self.returns[v] for v in self.scalar_outputs)}")
        text = "\n".join(_indent(body))
        return text.replace(COLS, "[lo:hi]" if self.pool_split == "cols" else "")

    def choose_pool_split(self) -> str | None:
        """How the kernel splits into parts for OpenBLAS's threads (pool.py): "rows" when its
        rows are independent, "cols" when all that spans the rows is sums kept per column
        (each column is then summed in row order, as serially), None to run serially.

        Only a big single-pass 2-D nest that would otherwise run on one core qualifies, with
        no scalar results (a part returns nothing) and only arrays and sizes for arguments
        (a part gets them as addresses in an int64 array)."""
        if not (self.pool and self.big and len(self.loops) == 2 and not self.split and
                len(self.phases) == 1 and not self.parallel_rows and not self.returns and
                not self.row_parts and all(v.shape != () for v in self.inputs)):
            return None
        if self.may_raise or any(op.prim == "pow" and op.out.dtype == "i64"
                                 for op in self.k.ops):
            return None         # ipow or an index check may raise, and a part cannot
        ph, (outer, inner) = self.phases[0], self.loops
        if not self.serial and self.k.domain[outer] >= 2:
            return "rows"
        if self.column_sums_only and self.k.domain[inner] >= 2 and \
                only_indexes(ph, f"i{inner}"):
            return "cols"
        return None

    def split_range(self, axis) -> str | None:
        """The loop range of the axis a pool part covers, lo:hi (unsigned for the inner
        loop, which LLVM vectorizes only if it need not check for negative indices)."""
        if self.pool_split == "rows" and axis == self.loops[0]:
            return "range(lo, hi)"
        if self.pool_split == "cols" and axis == self.loops[-1]:
            return "range(numba.uint64(lo), numba.uint64(hi))"
        return None

    @property
    def parallel_rows(self) -> bool:
        return (self.parallel or self.rows) and not self.serial

    def loop(self, axis, body, outermost=False) -> list:
        if not body:
            return []
        rng = "prange" if outermost and self.parallel_rows else "range"
        rng = self.split_range(axis) or f"{rng}({self.syms.dim(self.k.domain[axis])})"
        return [f"for i{axis} in {rng}:", *_indent(body)]

    def outer(self, t) -> list:
        if t < self.split:
            return self.pre[t] + self.loop(self.loops[t], self.outer(t + 1), t == 0) \
                + self.post[t]
        lines = []
        for ph in self.phases:
            lines += ph.pre
            if t < len(self.loops):
                lines += self.loop(self.loops[t], self.inner(ph, t + 1), t == 0)
            lines += ph.post
        return lines

    def inner(self, ph, t) -> list:
        lines = list(ph.inner_pre.get(t, []))
        if t < len(self.loops):
            lines += self.loop(self.loops[t], self.inner(ph, t + 1))
        return lines + ph.inner_post.get(t, [])


def _axes(op) -> set:
    x = op.inputs[0]
    return set(op.params["axes"]) if "axes" in op.params else {op.params["axis"] % x.type.ndim}


def _join(index) -> str:
    return ", ".join(i.text for i in index)


def _indent(lines) -> list:
    return ["    " + line for line in lines]
