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

A sum may also be a dense block of elements that inner loops walk (dst[j] = dst[j] + x over
an inner j, the same j on every iteration): loop_group.py's lanes of a full sum, W1's math and
its sum in one loop. Each chunk then has a block of slots of its own (part[c, j], zeroed
first), the lanes of each chunk are added into dst's lanes chunk after chunk, element by
element, and loop_group.py adds the lanes pairwise after that, as without chunks.
"""

from __future__ import annotations

from .nodes import ITEMSIZE, Alu, Buffer, Call, Const, If, Index, Load, Loop, Reg, Store
from .nodes import While, walk

CHUNK_VISITS = 1 << 14          # loads and stores a chunk runs, about (llvm.py's too)
MAX_SPAN = 64                   # elements of a block sum a chunk has slots for: a row of lanes
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
    extents = {s.var: s.extent for s in walk(loop.body) if isinstance(s, Loop)}
    inner = {s.out for s in walk(loop.body) if isinstance(s, (Alu, Call, Load))} | {loop.var}
    touched: dict = {}
    for s in walk(loop.body):
        if isinstance(s, (Load, Store)):
            touched.setdefault(_place(s.buf), []).append(s)
    sums = []
    for uses in touched.values():
        stores = [u for u in uses if isinstance(u, Store)]
        if len(stores) != 1 or any(r in inner for r, _ in stores[0].index.terms):
            continue
        if _span(stores[0].index, extents) is None:
            return []                           # moved by inner loops, not in one small block
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


def _span(index, extents):
    """How many elements index walks over the inner loops (extents): 1 for one element, the
    product of the extents when they walk a dense block (strides 1, e1, e1 * e2, ...: a row of
    loop_group.py's lanes) of at most MAX_SPAN elements (a column sum's row would want a row of
    slots per chunk), else None."""
    span = 1
    for reg, stride in sorted(index.terms, key=lambda t: t[1]):
        if reg not in extents or stride != span:
            return None
        span *= extents[reg]
    return span if span <= MAX_SPAN else None


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
    extents = {s.var: s.extent for s in walk(loop.body) if isinstance(s, Loop)}
    spans = [_span(load.index, extents) for load, _ in sums]
    parts = []
    for (load, _), span in zip(sums, spans):
        dtype = load.buf.dtype
        plan.arena = -(-plan.arena // _ALIGN) * _ALIGN
        parts.append(Buffer(0, plan.arena, dtype))
        plan.arena += chunks * span * ITEMSIZE[dtype]

    def chunk(var, count, counter, first, suffix):
        """Zero the chunk's slots (its first at `first`), then run its iterations adding into
        them, each element of a sum into its own slot."""
        moved = {(ld.buf, ld.index): (part, Index(first.offset * span,
                                                  tuple((r, k * span) for r, k in first.terms)
                                                  + ld.index.terms))
                 for (ld, _), part, span in zip(sums, parts, spans)}
        zero = []
        for part, span in zip(parts, spans):
            at = Index(first.offset * span, tuple((r, k * span) for r, k in first.terms))
            z = Reg(f"%z{tag}{suffix}_{len(zero)}", "i64")
            zero.append(Store(part, at, Const(0, part.dtype)) if span == 1 else
                        Loop(z, span, [Store(part, at.plus(terms=((z, 1),)),
                                             Const(0, part.dtype))]))
        body = copy(_redirect(loop.body, moved), {loop.var: counter}, suffix)
        return [*zero, Loop(var, count, body)]
    out = []
    if full:
        out.append(Loop(c, full, chunk(j, size, (j, 1, 0, ((c, size),)),
                                       Index(0, ((c, 1),)), "_k")))
    if rest:
        tail = Reg(f"%t{tag}", "i64")
        out += chunk(tail, rest, (tail, 1, full * size), Index(full), "_r")
    for k, ((load, store), part, span) in enumerate(zip(sums, parts, spans)):
        out.append(_fold(load, store, part, span, chunks, f"{tag}_{k}"))
    return out


def _fold(load, store, part, span, chunks, tag):
    """dst's elements plus their partial sums, chunk after chunk (span elements a chunk)."""
    f, e = Reg(f"%f{tag}", "i64"), Reg(f"%e{tag}", "i64")
    p, r, total = (Reg(f"{load.out.name}_{n}{tag}", load.out.dtype) for n in "prs")
    if span == 1:
        return Loop(f, chunks, [Load(p, part, Index(0, ((f, 1),))),
                                Load(r, load.buf, load.index),
                                Alu(total, "add", (r, p)),
                                Store(store.buf, store.index, total)])
    at = Index(load.index.offset, ((e, 1),))
    return Loop(f, chunks, [Loop(e, span, [Load(p, part, Index(0, ((f, span), (e, 1)))),
                                           Load(r, load.buf, at),
                                           Alu(total, "add", (r, p)),
                                           Store(store.buf, at, total)])])

