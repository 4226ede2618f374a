"""The memory plan: which buffer each materialized value lives in.

Only values that leave a kernel or step get memory at all (fusion keeps the rest in registers).
Nodes run in order; a buffer whose last reader has run is free, and the next output of the same
dtype and shape takes it instead of a fresh allocation. Views (reshape, transpose for BLAS)
share their base's buffer, so the base lives as long as its views. Parameters, constants and
results are never reused. Reuse stays inside a segment (the stretch of nodes between two host
steps), since segments are separate compiled functions.
"""

from __future__ import annotations

from .schedule import Fusion, Kernel, Step

FRESH = None


def _allocates(node) -> bool:
    """Whether node's outputs are buffers the entry allocates (and may recycle)."""
    return isinstance(node, Kernel) or node.kind in ("blas", "scan")


def plan_memory(fusion: Fusion) -> dict:
    """Map each value a kernel, scan or BLAS call writes to FRESH or to the dead value whose
    buffer it takes over."""
    order = {node: i for i, node in enumerate(fusion.nodes)}
    end = len(fusion.nodes)
    last = {}                                   # value -> position of its last reader
    for node in fusion.nodes:
        for v in fusion.reads(node):
            last[v] = max(last.get(v, -1), order[node])
    for r in fusion.fn.results:
        last[r] = end
    base = {}                                   # view -> the value whose buffer it shows
    for node in fusion.nodes:
        if isinstance(node, Step) and node.kind == "view":
            src = node.op.inputs[0]
            base[node.op.out] = base.get(src, src)
    for view, root in base.items():
        last[root] = max(last.get(root, -1), last.get(view, -1))
    owned = {}                                  # value -> True if its buffer may be recycled
    plan: dict = {}
    free: dict[tuple, list] = {}
    pending = []                                # (position of last use, value)
    segment = 0
    for node in fusion.nodes:
        i = order[node]
        if isinstance(node, Step) and node.kind == "host":
            free.clear()
            pending = []
            segment += 1
            continue
        still = []
        for pos, v in pending:
            if pos < i:
                free.setdefault((v.dtype, v.shape), []).append(v)
            else:
                still.append((pos, v))
        pending = still
        if not _allocates(node):
            continue
        for v in fusion.outputs[node]:
            if v.shape == ():
                continue
            pool = free.get((v.dtype, v.shape))
            plan[v] = pool.pop() if pool else FRESH
            owned[v] = True
            if last.get(v, -1) < end:
                pending.append((last.get(v, i), v))
    return plan
