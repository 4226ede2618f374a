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

from .loop_ir import Accumulate, Call, Let, Loop, Return, Store
from .templates import new_buffer

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


def render_chunks(src) -> list:
    """The body of src's kernel as the parallel loop over chunks; sets src.chunk to the tree
    of the chunk function and its call, to which the kernel's function adds the kernel's
    arguments (emit.py: they are known once its tree is)."""
    n, i = src.syms.dim(src.k.domain[src.loops[0]]), f"i{src.loops[0]}"
    accs = [a for a, _, _ in src.accs]
    chunk = src.at(0, 0, "pre") + [Loop("j", "hi - lo", [
        Let(i, "numba.uint64(lo + j)", "unsigned: no wraparound checks"), *src.inner(0, 1)])]
    if accs:
        chunk.append(Return(accs))
    call = Call(f"{src.name}_chunk", ["lo", f"min(lo + size, {n})"], accs)
    src.chunk = (chunk, call)
    body = [Let("lo", "c * size"), call]
    body += [Store(f"{a}_part", "c", a) for a in accs]
    nodes = [Let("size", f"{SMALL_CHUNK} if {n} <= {SMALL_MAX} else {CHUNK}"),
             Let("chunks", f"({n} + size - 1) // size")]
    nodes += [Let(f"{a}_part", new_buffer("chunks", dt)) for a, _, dt in src.accs]
    nodes.append(Loop("c", "chunks", body, parallel=True))
    for a, prim, _ in src.accs:
        nodes += [Let(a, f"{a}_part[0]"),
                  Loop("c", "chunks", [Accumulate(prim, a, f"{a}_part[c]")], start="1")]
    nodes += src.at(0, 0, "post")
    if src.returns:
        nodes.append(Return(src.returns[v] for v in src.scalar_outputs))
    return nodes
