"""Rewrites of the kernel IR to itself, each decided by a query on its nodes (never on text):

    accumulate  a load and store of one element that a loop does not move (a reduction's
                result, dst[i] = dst[i] + x[i, j] over j) become a Var the loop carries: one
                load before the loop, one store after it, a register in between;
    lanes       a sum a loop of at least 2 * LANES iterations carries is split into LANES
                partial sums, lane l taking the iterations l, l + LANES, ... (lane 0 also the
                tail), added pairwise at the end. That order is in the IR, so LLVM may run the
                lanes as one vector without fast-math flags, and every renderer, machine and
                vector width gives the same bits (Numba's kernels use fastmath 'reassoc'
                instead, whose order depends on the vector width LLVM picks);
    parallel    a top-level loop of at least PARALLEL_WORK loads and stores is marked
                `parallel` when its iterations write apart (each store's address moves with
                the loop's counter by more than the inner loops span, nothing raises, no Var
                crosses iterations): any split of its range gives the same bits;
    unroll      a loop of at most UNROLL_EXTENT iterations whose unrolled body stays under
                UNROLL_STATEMENTS statements becomes straight-line code (the counter a
                constant in every address), as today's straight-line path writes small arrays.

`optimize(program)` runs them in that order; the renderers take the rewritten program as is.
"""

from __future__ import annotations

from .nodes import Alu, Call, Const, Gemm, Get, Index, Load, Loop, Note, Raise, Reg, Set, Store
from .nodes import Var
from .nodes import walk

BIG = 1024                  # elements a group visits: run.py's HOT_ELEMENTS
LANES = {"f64": 8, "f32": 16, "i64": 8}
PARALLEL_WORK = 1 << 18
UNROLL_EXTENT = 16
UNROLL_STATEMENTS = 24


def optimize(program, threads: bool = True):
    """The rewrites a group's size calls for: a hot group (outline.hot: run.py compiles it
    with LLVM's O2) gets accumulators, lanes and threads, another (compiled at O0) is
    unrolled."""
    names = iter(range(1 << 62))            # Vars are named apart across the whole program
    for g, stmts in enumerate(program.groups):
        if program.hot[g] if program.hot else program.work[g] >= BIG:
            stmts = lanes(accumulate(stmts, names))
            if threads and program.work[g] >= PARALLEL_WORK:
                mark_parallel(stmts)
        else:
            stmts = unroll(stmts, UNROLL_EXTENT, UNROLL_STATEMENTS)
        program.groups[g] = stmts
    return program


# -- copying statements with registers substituted --------------------------------------------

def _value(x, sub):
    if isinstance(x, Reg) and x in sub:
        reg, scale, offset = sub[x]
        if reg is None:
            return Const(offset, x.dtype)
        assert (scale, offset) == (1, 0), "an affine counter used as a value"
        return reg
    return x


def _index(index, sub) -> Index:
    offset, terms = index.offset, []
    for reg, stride in index.terms:
        if reg in sub:
            new, scale, off = sub[reg]
            offset += off * stride
            if new is not None:
                terms.append((new, stride * scale))
        else:
            terms.append((reg, stride))
    return Index(offset, tuple(terms))


def copy(stmts, sub: dict, suffix: str, vars_: dict | None = None) -> list:
    """stmts with every register they define renamed (name + suffix), registers in sub
    replaced (reg -> (new reg or None, scale, offset): the value offset + scale * new) and
    Vars in vars_ replaced."""
    sub, vars_ = dict(sub), vars_ or {}

    def rename(reg):
        new = Reg(reg.name + suffix, reg.dtype)
        sub[reg] = (new, 1, 0)
        return new

    def one(s):
        if isinstance(s, Alu):
            args = tuple(_value(a, sub) for a in s.args)
            return Alu(rename(s.out), s.op, args)
        if isinstance(s, Call):
            return Call(rename(s.out), s.fn, tuple(_value(a, sub) for a in s.args))
        if isinstance(s, Load):
            index = _index(s.index, sub)
            return Load(rename(s.out), s.buf, index)
        if isinstance(s, Store):
            return Store(s.buf, _index(s.index, sub), _value(s.value, sub))
        if isinstance(s, Get):
            return Get(rename(s.out), vars_.get(s.var, s.var))
        if isinstance(s, Set):
            return Set(vars_.get(s.var, s.var), _value(s.value, sub))
        if isinstance(s, Raise):
            return Raise(_value(s.cond, sub), s.error, _value(s.value, sub))
        if isinstance(s, Gemm):
            return Gemm(s.dtype, s.m, s.n, s.k, *((b, _index(i, sub)) for b, i in (s.a, s.b, s.c)))
        if isinstance(s, Loop):
            var = rename(s.var)
            return Loop(var, s.extent, [one(t) for t in s.body], s.parallel)
        assert isinstance(s, Note)
        return s
    return [one(s) for s in stmts]


def _defined(stmts) -> set:
    out = set()
    for s in walk(stmts):
        if isinstance(s, (Alu, Call, Load, Get)):
            out.add(s.out)
        elif isinstance(s, Loop):
            out.add(s.var)
    return out


def _place(buf) -> tuple:
    return buf.slot, buf.byte


# -- accumulate --------------------------------------------------------------------------------

def accumulate(stmts, names=None) -> list:
    """Inner loops first: a loop whose top level loads and stores one element at an index it
    does not move, and touches that buffer nowhere else, carries the element in a Var."""
    names = names if names is not None else iter(range(1 << 62))
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            s = Loop(s.var, s.extent, accumulate(s.body, names), s.parallel)
            out += _carried(s, names)
        else:
            out.append(s)
    return out


def _carried(loop, names) -> list:
    if any(isinstance(s, Gemm) for s in walk(loop.body)):
        return [loop]                           # it writes memory without a Store
    inner = _defined(loop.body) | {loop.var}
    touched: dict = {}
    for s in walk(loop.body):
        if isinstance(s, (Load, Store)):
            touched.setdefault(_place(s.buf), []).append(s)
    before, after = [], []
    for place, uses in touched.items():
        loads = [u for u in uses if isinstance(u, Load)]
        stores = [u for u in uses if isinstance(u, Store)]
        if len(loads) != 1 or len(stores) != 1 or not all(u in loop.body for u in uses):
            continue
        load, store = loads[0], stores[0]
        if load.index != store.index or any(r in inner for r, _ in load.index.terms) or \
                loop.body.index(load) > loop.body.index(store):
            continue
        var = Var(f"%acc{next(names)}", load.buf.dtype)
        first, last = Reg(var.name + "_in", load.out.dtype), Reg(var.name + "_out",
                                                                  load.out.dtype)
        before += [Load(first, load.buf, load.index), Set(var, first)]
        after += [Get(last, var), Store(store.buf, store.index, last)]
        loop.body[loop.body.index(load)] = Get(load.out, var)
        loop.body[loop.body.index(store)] = Set(var, store.value)
    return [*before, loop, *after]


# -- lanes -------------------------------------------------------------------------------------

def lanes(stmts) -> list:
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            body = lanes(s.body)
            s = Loop(s.var, s.extent, body, s.parallel)
            sums = _sums(s)
            if sums:
                out += _split(s, sums)
                continue
        out.append(s)
    return out


def _sums(loop) -> list:
    """The Vars an innermost loop only adds to (Get, then Set of Get + x), or [] if it is not
    one lanes can split: short, nested, raising, using its counter as a value, other Vars."""
    width = None
    body = loop.body
    if any(isinstance(s, (Loop, Raise, Gemm)) for s in body):
        return []
    if any(loop.var in s.args for s in body if isinstance(s, (Alu, Call))) or \
            any(loop.var == s.value for s in body if isinstance(s, (Store, Set))):
        return []
    gets = {s.var: s for s in body if isinstance(s, Get)}
    sets = {s.var: s for s in body if isinstance(s, Set)}
    if not sets or gets.keys() != sets.keys():
        return []
    adds = {s.out: s for s in body if isinstance(s, Alu)}
    for var, st in sets.items():
        alu = adds.get(st.value)
        if alu is None or alu.op != "add" or gets[var].out not in alu.args or \
                sum(gets[var].out in getattr(t, "args", ()) for t in body) != 1 or \
                sum(isinstance(t, Get) and t.var == var for t in body) != 1:
            return []
        width = LANES.get(var.dtype)
    if width is None or loop.extent < 2 * width:
        return []
    return list(sets)


def _split(loop, sums) -> list:
    width = min(LANES[v.dtype] for v in sums)
    blocks, tail = divmod(loop.extent, width)
    lane_vars = [{v: Var(f"{v.name}_l{k}", v.dtype) if k else v for v in sums}
                 for k in range(width)]
    out = [Set(lane_vars[k][v], Const(0, v.dtype)) for k in range(1, width) for v in sums]
    outer = Reg(loop.var.name + "_b", "i64")
    body = []
    for k in range(width):
        body += copy(loop.body, {loop.var: (outer, width, k)}, f"_l{k}", lane_vars[k])
    out.append(Loop(outer, blocks, body))
    if tail:
        rest = Reg(loop.var.name + "_t", "i64")
        out.append(Loop(rest, tail, copy(loop.body, {loop.var: (rest, 1, blocks * width)},
                                         "_t")))
    for v in sums:                               # pairwise, in lane order
        level = [lane_vars[k][v] for k in range(width)]
        step = 0
        while len(level) > 1:
            nxt = []
            for a, b in zip(level[::2], level[1::2]):
                ra, rb = Reg(f"{a.name}_g{step}", a.dtype), Reg(f"{b.name}_g{step}", b.dtype)
                total = Reg(f"{a.name}_s{step}", a.dtype)
                out += [Get(ra, a), Get(rb, b), Alu(total, "add", (ra, rb)), Set(a, total)]
                nxt.append(a)
            level, step = nxt, step + 1
    return out


# -- parallel ----------------------------------------------------------------------------------

def mark_parallel(stmts, work: int = PARALLEL_WORK):
    """Mark the group's top-level loops of at least `work` loads and stores whose iterations
    write apart."""
    for s in stmts:
        if isinstance(s, Loop) and s.extent >= 2 and visits(s) >= work and apart(s):
            s.parallel = True


def visits(loop) -> int:
    """How many loads and stores the loop runs."""
    return loop.extent * sum(visits(s) if isinstance(s, Loop) else isinstance(s, (Load, Store))
                             for s in loop.body)


def apart(loop) -> bool:
    """Whether iterations of loop touch apart: what one writes no other reads or writes."""
    extents = {s.var: s.extent for s in walk(loop.body) if isinstance(s, Loop)}
    seen_vars: set = set()
    stored: dict = {}
    for s in walk(loop.body):
        if isinstance(s, (Raise, Gemm)):
            return False
        if isinstance(s, Get) and s.var not in seen_vars:
            return False                        # a Var set before the loop: carried across
        if isinstance(s, Set):
            seen_vars.add(s.var)
        if isinstance(s, Store):
            if not _moves_apart(s.index, loop.var, extents):
                return False
            stored.setdefault(_place(s.buf), set()).add(s.index)
    if not _used(loop.body) <= _defined(loop.body) | {loop.var}:
        return False            # a register from before the loop: a task function lacks it
    return all(s.index in stored[_place(s.buf)] for s in walk(loop.body)
               if isinstance(s, Load) and _place(s.buf) in stored)


def _used(stmts) -> set:
    out = set()
    for s in walk(stmts):
        values = list(getattr(s, "args", ())) + [getattr(s, n, None) for n in
                                                 ("value", "cond")]
        values += [r for r, _ in getattr(s, "index", Index()).terms]
        out.update(v for v in values if isinstance(v, Reg))
    return out


def _moves_apart(index, var, extents) -> bool:
    step = [stride for reg, stride in index.terms if reg == var]
    if len(step) != 1:
        return False
    span = 0
    for reg, stride in index.terms:
        if reg == var:
            continue
        if reg not in extents:
            return False                        # a loaded index: could land anywhere
        span += (extents[reg] - 1) * abs(stride)
    return span < abs(step[0])


# -- unroll ------------------------------------------------------------------------------------

def unroll(stmts, extent: int, limit: int) -> list:
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            body = unroll(s.body, extent, limit)
            size = sum(1 for _ in walk(body))
            if s.extent <= extent and s.extent * size <= limit and not s.parallel:
                for k in range(s.extent):
                    out += copy(body, {s.var: (None, 0, k)}, f"_u{k}")
                continue
            s = Loop(s.var, s.extent, body, s.parallel)
        out.append(s)
    return out
