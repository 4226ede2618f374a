"""Large 1-D kernels as fixed-size chunks under prange, with reproducible reductions.

Each chunk runs the serial loop of the kernel over its elements in a function of its own (so
LLVM vectorizes it as it would a serial kernel) and returns its partial reductions, stored by
chunk number; after the parallel loop the partials are folded in chunk order. The chunk size
depends on the length only (small chunks up to SMALL_MAX elements, so that 10**4 elements still
split across threads; large ones above, where each chunk's partials and call cost show), never
on the thread count, so the bits of every result are the same for any number of threads and
any schedule. The loop variable is unsigned inside a chunk: with a signed index Numba checks
for negative (wraparound) indices, and LLVM, unable to prove the start of the range
non-negative, stops vectorizing.
"""

from __future__ import annotations

import math
import re

from .templates import new_buffer, reduction_update

CHUNK = 2 ** 14            # elements per chunk of a parallel 1-D kernel of > SMALL_MAX elements
SMALL_CHUNK = 2 ** 10      # ... and of one of at most SMALL_MAX elements
SMALL_MAX = 2 ** 15
PARALLEL_WORK = 2 ** 16    # less work (elements x weight) stays serial: starting threads costs
MATH_WEIGHT = 4            # a polynomial exp/tanh/... per element weighs as much as 4 plain ops


def _weight(math_calls: int, itemsize: int) -> float:
    """The work per element, in float64 plain ops: float32 vectors hold twice the lanes."""
    return (1 + MATH_WEIGHT * math_calls) * itemsize / 8


def parallel_worth(size: int, math_calls: int, itemsize: int = 8) -> bool:
    """Whether a loop nest of `size` elements with `math_calls` transcendental calls per
    element, on floats of `itemsize` bytes, is worth the thread pool."""
    return size * _weight(math_calls, itemsize) >= PARALLEL_WORK


def min_parallel_size(math_calls: int, itemsize: int = 8) -> int:
    """The smallest nest that parallel_worth() accepts."""
    return math.ceil(PARALLEL_WORK / _weight(math_calls, itemsize))


_SUBSCRIPT = re.compile(r"\[([^\[\]]*)\]")


def only_indexes(ph, i: str) -> bool:
    """Whether the loop variable appears only as a whole index in a phase's lines (`a[i]`,
    `a[j, i]`), so it may be unsigned (arithmetic mixing uint64 and int64 would give floats)."""
    lines = [*ph.pre, *ph.post, *[x for t in (ph.inner_pre, ph.inner_post)
                                  for ls in t.values() for x in ls]]
    code, done = "\n".join(line.split("  # ")[0] for line in lines), None
    while code != done:        # innermost subscripts first: a[i, b[i]]
        done, code = code, _SUBSCRIPT.sub(lambda m: "<" + ",".join(
            "_" if part.strip() == i else part for part in m.group(1).split(",")) + ">", code)
    return not re.search(rf"\b{i}\b", code)


def render_chunks(src) -> str:
    """The body of src's kernel as the parallel loop over chunks; sets src.chunk_body, the
    body of the chunk function, whose call takes the kernel's arguments in place of ARGS."""
    src.chunked = src.serial = True
    (ph,) = src.phases
    n, i = src.syms.dim(src.k.domain[src.loops[0]]), f"i{src.loops[0]}"
    accs = [a for a, _, _ in src.accs]
    chunk = ph.pre + ["for j in range(hi - lo):",
                      f"    {i} = numba.uint64(lo + j)  # unsigned: no wraparound checks",
                      *_indent(src.inner(ph, 1))]
    if accs:
        chunk.append(f"return {', '.join(accs)}")
    src.chunk_body = "\n".join(_indent(chunk))
    call = f"{src.name}_chunk(lo, min(lo + size, {n}), ARGS)"
    body = ["lo = c * size"]
    if accs:
        body += [f"{', '.join(accs)} = {call}"]
        body += [f"{a}_part[c] = {a}" for a in accs]
    else:
        body.append(call)
    lines = [f"size = {SMALL_CHUNK} if {n} <= {SMALL_MAX} else {CHUNK}",
             f"chunks = ({n} + size - 1) // size"]
    lines += [f"{a}_part = {new_buffer('chunks', dt)}" for a, _, dt in src.accs]
    lines += ["for c in prange(chunks):", *_indent(body)]
    for a, prim, _ in src.accs:
        lines += [f"{a} = {a}_part[0]", "for c in range(1, chunks):",
                  "    " + reduction_update(prim, a, f"{a}_part[c]")]
    lines += ph.post
    if src.returns:
        lines.append(f"return {', '.join(src.returns[v] for v in src.scalar_outputs)}")
    return "\n".join(_indent(lines))


def _indent(lines) -> list:
    return ["    " + line for line in lines]
