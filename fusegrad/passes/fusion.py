"""Fusion: group the ops of an optimized Function into loop kernels and library steps.

A kernel is one loop nest over a domain (a shape). Its members are the elementwise ops of that
shape ("full"), the reductions and scatters that consume values of that shape ("reduce",
"scatter"), and, after a reduction over the trailing loops, the per-row ops that use its result
("row") and reductions of those across rows ("row_reduce"): the kernel then makes several
passes over each row, so a softmax reads a row from memory once. Values a kernel computes
stay in registers unless another node or the caller needs them.

Index maps of values already in memory (broadcast_in_dim, transpose, slice, pad, concatenate,
take, take_along_axis, reshapes that only add or drop unit axes) are "inline": they compute
nothing, and every kernel that reads them folds the map into its loads, as it does with `full`
and `iota`. A matmul of at most SMALL_DOT_K terms is a member too, reading its operands from
memory. Other matmuls (BLAS), other reshapes (views), cumsum and anything codegen cannot loop
over are steps. Inline values that a step or the caller needs are materialized by a small kernel.

Legality comes from levels: a node's level is one more than the highest level it reads from,
so nodes of equal level never depend on each other and running nodes by level is a valid order.
An op may join a kernel only if everything else it reads has a lower level; kernels of the same
level and domain can always merge. Each op is placed once, so fusion is linear in the ops.
A kernel stops growing at MAX_KERNEL_OPS ops, and the next op starts a new one. Placement is
greedy; sinking.py then moves elementwise ops a later kernel alone reads into that kernel.

The kernels, steps and the Fusion they make up are defined in schedule.py, which sinking.py,
memory.py and codegen read too; this module is the placement (`_Fuser`) and `fuse`.
"""

from __future__ import annotations

from ..ir.core import Function, Op, Value
from ..ir.primitives import ELEMENTWISE
from .schedule import (CONST, INDEX_MAPS, INLINE, MAX_KERNEL_OPS, NODE, NULLARY, PARAM,
                       REDUCERS, SCANS, SCATTERS, SMALL_DOT_K, Fusion, Kernel, Step,
                       check_schedule, domain_of, is_view, small_dot, step_kind, unit_only)
from .sinking import sink

# The schedule's names, for the modules and tests that import them from here.
__all__ = ["fuse", "CONST", "INDEX_MAPS", "INLINE", "MAX_KERNEL_OPS", "NODE", "NULLARY", "PARAM",
           "REDUCERS", "SCANS", "SCATTERS", "SMALL_DOT_K", "Fusion", "Kernel", "Step",
           "check_schedule", "domain_of", "is_view", "small_dot", "step_kind", "unit_only"]


def fuse(fn: Function) -> Fusion:
    """Group fn's ops into kernels and steps (see the module docstring)."""
    fuser = _Fuser(fn)
    for op in fn.ops:
        fuser.place(op)
    for r in fn.results:
        if fuser.kind[r] == INLINE:
            fuser.materialize(r)
    sink(fuser)
    fusion = fuser.result()
    check_schedule(fusion)
    return fusion


class _Fuser:
    def __init__(self, fn: Function):
        self.fn = fn
        self.kind: dict[Value, str] = {p: PARAM for p in fn.params}
        self.node: dict[Value, object] = {}           # NODE values -> kernel or step
        self.sources: dict[Value, frozenset] = {}     # INLINE values -> nodes they read
        self.producer: dict[Value, Op] = {}
        self.role: dict[Op, str] = {}
        self.mat: dict[Value, object] = {}            # materialized INLINE values
        self.nodes: list = []
        self.by_domain: dict[tuple, list[Kernel]] = {}
        self.order = {op: i for i, op in enumerate(fn.ops)}
        self.read: set[Value] = set()                 # values some placed op reads

    # -- bookkeeping ---------------------------------------------------------------------

    def find(self, node):
        while node.parent is not None:
            node = node.parent
        return node

    def home(self, v: Value):
        return self.find(self.node[v]) if self.kind[v] == NODE else None

    def deps(self, v: Value) -> set:
        """The nodes reading v depends on."""
        if self.kind[v] == NODE:
            return {self.home(v)}
        if self.kind[v] == INLINE:
            return {self.find(n) for n in self.sources[v]}
        return set()

    def level_of(self, nodes) -> int:
        return max((n.level for n in nodes), default=-1)

    def new_kernel(self, domain, level) -> Kernel:
        k = Kernel(len(self.nodes), domain, level)
        self.nodes.append(k)
        self.by_domain.setdefault(k.domain, []).append(k)
        return k

    def join(self, op: Op, k: Kernel, role: str, consumed=(), split=None):
        k.ops.append(op)
        self.role[op] = role
        k.consumed.update(consumed)
        if split is not None:
            k.split = split
        self.kind[op.out] = NODE
        self.node[op.out] = k

    def merge(self, kernels: list[Kernel]) -> Kernel:
        target, *rest = kernels
        for k in rest:
            target.ops.extend(k.ops)
            target.consumed |= k.consumed
            target.split = target.split if target.split is not None else k.split
            k.parent = target
            k.ops = []
            self.by_domain[k.domain].remove(k)
        return target                       # ops are put back in order by result()

    # -- placement -----------------------------------------------------------------------

    def place(self, op: Op):
        self._place(op)
        self.read.update(op.inputs)

    def _place(self, op: Op):
        self.producer.update((v, op) for v in op.outputs)   # several: control flow (a step)
        prim = op.prim
        if prim == "constant":
            self.kind[op.out] = INLINE if op.out.shape == () else CONST
            self.sources[op.out] = frozenset()
        elif prim in NULLARY:
            self.kind[op.out] = INLINE
            self.sources[op.out] = frozenset()
        elif step_kind(op) is not None:
            self.step(op, step_kind(op))
        elif prim == "matmul":          # a small dot: its operands are read at any index
            b = op.inputs[1]
            # A transposed W, say: copy it, so that the loop over the output's columns reads
            # rows of b. Not when an op placed earlier already reads b inline: its kernel's
            # level assumed no buffer for b, and may run before the copy.
            if self.kind[b] == INLINE and b not in self.read:
                self.materialize(b)
                if isinstance(self.mat[b], Kernel):
                    self.kind[b], self.node[b] = NODE, self.mat.pop(b)
            if not self.join_producer(op):
                self.join_sibling_or_new(op)
        elif prim in INDEX_MAPS and not self.join_producer(op, index_map=True):
            if prim == "reshape" and not unit_only(op.inputs[0].shape, op.out.shape):
                self.step(op, "view")
            else:
                self.kind[op.out] = INLINE
                self.sources[op.out] = frozenset(n for v in op.inputs for n in self.deps(v))
        elif prim not in INDEX_MAPS and not self.join_producer(op):
            self.join_sibling_or_new(op)

    def step(self, op: Op, kind: str):
        for v in op.inputs:
            if self.kind[v] == INLINE:
                self.materialize(v, for_matmul=kind == "blas")
        nodes = set()
        for v in op.inputs:
            nodes |= self.deps(v) if self.kind[v] != INLINE else {self.find(self.mat[v])}
        s = Step(len(self.nodes), op, kind, self.level_of(nodes) + 1)
        self.nodes.append(s)
        for v in op.outputs:
            self.kind[v] = NODE
            self.node[v] = s

    def materialize(self, v: Value, for_matmul=False):
        """Give an inline value a buffer: a view where one does, else a copying kernel."""
        if v in self.mat:
            return
        op = self.producer[v]
        if is_view(op, for_matmul):
            src = op.inputs[0]
            if self.kind[src] == INLINE:
                self.materialize(src)
            deps = {self.find(self.mat[src])} if self.kind[src] == INLINE else self.deps(src)
            s = Step(len(self.nodes), op, "view", self.level_of(deps) + 1)
            self.nodes.append(s)
            self.mat[v] = s
            return
        k = self.new_kernel(v.shape, self.level_of(self.deps(v)) + 1)
        k.ops.append(op)
        self.role[op] = "full"
        self.mat[v] = k

    def join_producer(self, op: Op, index_map=False) -> bool:
        """Join (merging if needed) the kernels at the top level that op reads directly."""
        direct, indirect = set(), set()
        for v in op.inputs:
            (direct if self.kind[v] == NODE else indirect).update(self.deps(v))
        top = self.level_of(direct | indirect)
        cands = [n for n in direct if n.level == top]
        if not cands or any(not isinstance(n, Kernel) or n.domain != cands[0].domain
                            for n in cands):
            return False
        if any(n.level == top for n in indirect):
            return False                          # same level, or reads a candidate's buffer
        splits = {k.split for k in cands} - {None}
        if len(splits) > 1 or sum(len(k.ops) for k in cands) >= MAX_KERNEL_OPS:
            return False
        found = self.role_in(op, set(cands), splits.pop() if splits else None)
        if found is None or (index_map and found[0] == "full" and op.prim != "broadcast_in_dim"
                             and op.prim != "take_along_axis"):
            return False
        k = self.merge(sorted(cands, key=lambda n: n.id))
        self.join(op, k, *found)
        return True

    def join_sibling_or_new(self, op: Op):
        nodes = set()
        for v in op.inputs:
            nodes |= self.deps(v)
        top = self.level_of(nodes)
        for k in sorted(self.by_domain.get(domain_of(op), ()), key=lambda k: k.level):
            if k.level > top and len(k.ops) < MAX_KERNEL_OPS:
                found = self.role_in(op, {k}, k.split)
                if found is not None:
                    self.join(op, k, *found)
                    return
        k = self.new_kernel(domain_of(op), top + 1)
        found = self.role_in(op, {k}, None)
        if found is None:
            raise AssertionError(f"fusion: {op!r} fits no kernel of its own domain")
        self.join(op, k, *found)

    # -- roles ---------------------------------------------------------------------------

    def where(self, v: Value, ks: set) -> str:
        """How a member of a kernel in ks sees v: its role there, "out" or "inline"."""
        if self.kind[v] == NODE and self.home(v) in ks:
            return self.role[self.producer[v]]
        return "inline" if self.kind[v] == INLINE else "out"

    def role_in(self, op: Op, ks: set, split):
        """(role, consumed reductions, split) for op in the union of kernels ks, or None."""
        kdom = next(iter(ks)).domain
        wh = [self.where(v, ks) for v in op.inputs]
        prim = op.prim
        plain = all(w in ("full", "out", "inline") for w in wh)
        if prim in REDUCERS and wh[0] in ("row", "reduce"):
            return self.row_reduce_role(op, wh[0], kdom, split)
        if prim in REDUCERS or prim in SCATTERS:
            if domain_of(op) != kdom:
                return None
            if prim in REDUCERS:
                return ("reduce", (), None) if plain else None
            idx, g = wh
            ok = g in ("full", "out", "inline") and (
                idx in ("out", "inline") or (prim == "scatter_add_along_axis" and idx == "full"))
            return ("scatter", (), None) if ok else None
        if prim in ELEMENTWISE and plain:
            return ("full", (), None) if op.out.shape == kdom else None
        if prim == "take_along_axis":
            ok = op.out.shape == kdom and wh[0] in ("out", "inline") and plain
            return ("full", (), None) if ok else None
        if prim == "matmul":                # every operand element is read, from memory
            ok = op.out.shape == kdom and all(w in ("out", "inline") for w in wh)
            return ("full", (), None) if ok else None
        rows = [(v, w) for v, w in zip(op.inputs, wh) if w in ("row", "reduce")]
        if not rows or not all(w in ("row", "reduce", "out", "inline") for w in wh) or \
                (prim not in ELEMENTWISE and prim not in ("broadcast_in_dim", "reshape")):
            return None
        consumed = [self.producer[v] for v, w in rows if w == "reduce"]
        split = self.common_split(consumed, split)
        if split is None:
            return None
        outer = self.loops_of(kdom)[:split]
        row_shape = [kdom[a] for a in outer]
        if prim == "broadcast_in_dim" and op.out.shape == kdom:
            (v,) = op.inputs
            mapped = [op.params["dims"][a] for a, n in enumerate(v.shape) if n != 1]
            ok = mapped == list(outer) and [n for n in v.shape if n != 1] == row_shape
            return ("full", consumed, split) if ok else None
        if [n for n in op.out.shape if n != 1] != row_shape:
            return None
        if prim in ("broadcast_in_dim", "reshape") and \
                not unit_only(op.inputs[0].shape, op.out.shape):
            return None
        return "row", consumed, split

    def common_split(self, reductions, split):
        """The row split the reductions (and `split`, when set) share; None if they differ."""
        for r in reductions:
            s = self.row_split(r)
            if s is None or (split is not None and s != split):
                return None
            split = s
        return split

    def row_reduce_role(self, op: Op, where: str, kdom, split):
        """A reduction of a per-row value (say, a sum of row losses) accumulates across rows
        in the same kernel; its result is only for later nodes."""
        x = op.inputs[0]
        consumed = [self.producer[x]] if where == "reduce" else []
        split = self.common_split(consumed, split)
        if split is None:
            return None
        outer = self.loops_of(kdom)[:split]
        if [n for n in x.shape if n != 1] != [kdom[a] for a in outer]:
            return None
        return "row_reduce", consumed, split

    @staticmethod
    def loops_of(domain) -> tuple:
        return tuple(a for a, n in enumerate(domain) if n != 1)

    def row_split(self, r: Op) -> int | None:
        """The outer-loop count of a reduction whose reduced loops are the innermost ones."""
        x = r.inputs[0]
        axes = set(r.params["axes"]) if "axes" in r.params else {r.params["axis"] % x.type.ndim}
        loops = self.loops_of(x.shape)
        kept = [a for a in loops if a not in axes]
        if list(loops[:len(kept)]) != kept:
            return None
        return len(kept)

    # -- result --------------------------------------------------------------------------

    def result(self) -> Fusion:
        nodes = [n for n in self.nodes if n.parent is None and
                 (not isinstance(n, Kernel) or n.ops)]
        nodes.sort(key=lambda n: (n.level, n.id))
        for n in nodes:
            if isinstance(n, Kernel):
                n.ops.sort(key=self.order.__getitem__)
        node_of = {v: self.find(n) for v, n in self.node.items()}
        mat = {v: self.find(n) for v, n in self.mat.items()}
        kind = dict(self.kind)
        return Fusion(self.fn, nodes, kind, node_of, dict(self.role), mat, self.producer)
