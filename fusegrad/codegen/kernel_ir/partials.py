"""A long loop's sums in partial sums, one per chunk of its range, so the loop can run on
threads and still give the same bits on any number of them (a rewrite of the kernel IR).

A top-level loop whose iterations write apart except for sums into elements it does not move
(dst[k] = dst[k] + x, k the same on every iteration: W1's value, W5's total) cannot be split
over threads as it is: the order of the additions would depend on the split. So the loop is
cut into chunks of a fixed number of iterations (CHUNK_VISITS loads and stores, about, a
function of the loop alone), each chunk adding into a slot of its own, zeroed first,

    for c in range(extent // size):              # parallel: each chunk writes apart
        part[c] = 0;  for j in range(size): ... part[c] = part[c] + x[c * size + j] ...
    part[last] = 0;  for j in range(extent % size): ...      # the rest, if any
    for c in range(chunks): dst[k] = dst[k] + part[c]         # folded in chunk order

whether threads are on or off, in every renderer, so the order is in the IR: threads take
chunks, and the fold after them is serial. The slots are arena bytes past the plan's.
"""

from __future__ import annotations

from .nodes import ITEMSIZE, Alu, Buffer, Call, Const, If, Index, Load, Loop, Reg, Store
from .nodes import While, walk

CHUNK_VISITS = 1 << 14          # loads and stores a chunk runs, about (llvm.py's too)
_ALIGN = 64


def chunk_sums(stmts, plan, names, visits, apart, copy) -> list:
    """stmts with each top-level loop of sums (and nothing else that crosses iterations) cut
    into chunks of partial sums, slots taken from the end of plan's arena (visits, apart and
    copy: rewrite.py's)."""
    out = []
    for s in stmts:
        sums = _sums(s, apart) if isinstance(s, Loop) else None
        if not sums:
            out.append(s)
            continue
        size = chunk_size(s, visits)
        if size >= s.extent:
            out.append(s)
            continue
        out += _chunked(s, sums, size, plan, next(names), copy)
    return out


def chunk_size(loop, visits) -> int:
    """Iterations of loop a chunk runs: about CHUNK_VISITS loads and stores, in whole lanes
    of rewrite.lanes (16)."""
    size = -(-CHUNK_VISITS * loop.extent // max(1, visits(loop)))
    return max(16, -(-size // 16) * 16)


def _place(buf) -> tuple:
    return buf.slot, buf.byte


def _sums(loop, apart) -> list:
    """[(load, store)] of the sums loop carries, when everything else writes apart."""
    if any(isinstance(s, (If, While)) for s in walk(loop.body)):
        return []
    if any(loop.var in s.args for s in walk(loop.body) if isinstance(s, (Alu, Call))) or \
            any(loop.var == getattr(s, "value", None) for s in walk(loop.body)):
        return []                               # the counter as a value
    inner = {s.var for s in walk(loop.body) if isinstance(s, Loop)} | {loop.var}
    inner |= {s.out for s in walk(loop.body) if isinstance(s, (Alu, Call, Load))}
    touched: dict = {}
    for s in walk(loop.body):
        if isinstance(s, (Load, Store)):
            touched.setdefault(_place(s.buf), []).append(s)
    sums = []
    for uses in touched.values():
        stores = [u for u in uses if isinstance(u, Store)]
        if len(stores) != 1 or any(r in inner for r, _ in stores[0].index.terms):
            continue
        store, loads = stores[0], [u for u in uses if isinstance(u, Load)]
        add = next((s for s in walk(loop.body) if isinstance(s, Alu) and
                    s.out == store.value), None)
        if len(loads) != 1 or loads[0].index != store.index or add is None or \
                add.op != "add" or loads[0].out not in add.args or \
                store.buf.dtype not in ("f32", "f64", "i64") or \
                _uses(loads[0].out, loop.body) != 1 or _uses(add.out, loop.body) != 1:
            return []                           # a carried element that is not a sum alone
        sums.append((loads[0], store))
    skip = {_place(store.buf) for _, store in sums}
    return sums if sums and apart(loop, skip) else []


def _uses(reg, stmts) -> int:
    """How many statements read reg."""
    return sum(reg in getattr(s, "args", ()) or reg in (getattr(s, "value", None),
                                                        getattr(s, "cond", None))
               or any(r == reg for r, _ in getattr(s, "index", Index()).terms)
               for s in walk(stmts))


def _redirect(stmts, moved: dict) -> list:
    """stmts with the loads and stores in `moved` ((buf, index) -> (buf, index)) moved."""
    out = []
    for s in stmts:
        if isinstance(s, Load) and (s.buf, s.index) in moved:
            s = Load(s.out, *moved[s.buf, s.index])
        elif isinstance(s, Store) and (s.buf, s.index) in moved:
            s = Store(*moved[s.buf, s.index], s.value)
        elif isinstance(s, Loop):
            s = Loop(s.var, s.extent, _redirect(s.body, moved), s.parallel)
        out.append(s)
    return out


def _chunked(loop, sums, size, plan, tag, copy) -> list:
    full, rest = divmod(loop.extent, size)
    chunks = full + bool(rest)
    c, j = Reg(f"%c{tag}", "i64"), Reg(f"%j{tag}", "i64")
    parts = []
    for load, _ in sums:
        dtype = load.buf.dtype
        plan.arena = -(-plan.arena // _ALIGN) * _ALIGN
        parts.append(Buffer(0, plan.arena, dtype))
        plan.arena += chunks * ITEMSIZE[dtype]

    def chunk(var, count, counter, slot, suffix):
        """Zero the chunk's slots, then run its iterations adding into them."""
        moved = {(ld.buf, ld.index): (part, slot) for (ld, _), part in zip(sums, parts)}
        zero = [Store(part, slot, Const(0, part.dtype)) for part in parts]
        body = copy(_redirect(loop.body, moved), {loop.var: counter}, suffix)
        return [*zero, Loop(var, count, body)]
    out = []
    if full:
        out.append(Loop(c, full, chunk(j, size, (j, 1, 0, ((c, size),)),
                                       Index(0, ((c, 1),)), "_k")))
    if rest:
        tail = Reg(f"%t{tag}", "i64")
        out += chunk(tail, rest, (tail, 1, full * size), Index(full), "_r")
    for k, ((load, store), part) in enumerate(zip(sums, parts)):    # in chunk order
        f = Reg(f"%f{tag}_{k}", "i64")
        p, r, total = (Reg(f"{load.out.name}_{n}{tag}", load.out.dtype) for n in "prs")
        out.append(Loop(f, chunks, [Load(p, part, Index(0, ((f, 1),))),
                                    Load(r, load.buf, load.index),
                                    Alu(total, "add", (r, p)),
                                    Store(store.buf, store.index, total)]))
    return out

