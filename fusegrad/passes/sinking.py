"""Sinking: after fusion, move elementwise ops into the one later kernel that reads them.

A separate step over the fuser's placement (`fusion._Fuser`), run by `fusion.fuse` before the
kernels are finalized: placement is greedy and puts an op in the first kernel it fits, which
for a value used only by a later kernel means a buffer written, then read back. It reads the
placement through the fuser's state (`fn`, `nodes`, `kind`, `node`, `producer`, `role`, `mat`,
`order`, `find`, `home`) and the schedule's names (schedule.py); it imports nothing from
fusion.py, which imports it.
"""

from __future__ import annotations

import heapq
import itertools

from typing import TYPE_CHECKING

from ..ir.core import Op, Value
from ..ir.primitives import ELEMENTWISE
from .schedule import INLINE, MAX_KERNEL_OPS, NODE, PARAM, Kernel

if TYPE_CHECKING:
    from .fusion import _Fuser


def sink(fuser: _Fuser) -> None:
    """Move elementwise ops into the one later kernel that reads their values.

    A kernel that computes `1 - h*h` from its `h` and stores it for a later kernel of the
    same domain writes a buffer the later kernel reads back. When those ops are read by
    nothing else, the later kernel can compute them itself from what is in memory anyway
    (`h`, stored for a matmul): the op runs once either way, one write and one read fewer.
    A group moves only if the later kernel then reads no more buffers than before.
    """
    fn = fuser.fn
    results = set(fn.results)
    users: dict[Value, list[Op]] = {}
    for op in fn.ops:
        for v in op.inputs:
            users.setdefault(v, []).append(op)

    def kernel_of(op):
        v = op.outputs[0]      # a control-flow step has several, all on its node
        k = fuser.node.get(v) if fuser.kind.get(v) == NODE else None
        return fuser.find(k) if isinstance(k, Kernel) else None

    def in_memory(u, home):
        return u in results or any(kernel_of(o) is not home for o in users.get(u, ()))

    for kc in [n for n in fuser.nodes if isinstance(n, Kernel)]:
        if kc.parent is not None:
            continue
        work = [v for op in kc.ops for v in op.inputs]
        while work:
            v = work.pop()
            k = fuser.home(v)
            if not isinstance(k, Kernel) or k is kc or k.domain != kc.domain:
                continue
            group = _sinkable(fuser, v, k, kc, users, results, kernel_of, in_memory)
            if group is None:
                continue
            for op in group:
                k.ops.remove(op)
                kc.ops.append(op)
                fuser.node[op.out] = kc
                work.extend(op.inputs)


def _sinkable(fuser, v, k, kc, users, results, kernel_of, in_memory):
    """The ops of k that compute v for kc alone, if moving them into kc pays; else None.

    Walks back from v in reverse program order, so an op is judged after all its readers:
    it joins the group when every reader is in kc or in the group."""
    members = set(kc.ops)
    group: set[Op] = set()
    leaves: set[Value] = set()
    tie = itertools.count()
    heap, seen = [(-fuser.order.get(fuser.producer.get(v), -1), next(tie), v)], {v}
    while heap:
        _, _, u = heapq.heappop(heap)
        op = fuser.producer.get(u)
        if fuser.kind[u] == NODE and fuser.home(u) is k and u not in results and \
                fuser.role.get(op) == "full" and op.prim in ELEMENTWISE and \
                all(o in members or o in group for o in users.get(u, ())):
            group.add(op)
            for w in op.inputs:
                if w not in seen:
                    seen.add(w)
                    heapq.heappush(heap, (-fuser.order.get(fuser.producer.get(w), -1), next(tie),
                                          w))
        elif fuser.kind[u] == NODE and fuser.home(u) is k and not in_memory(u, k):
            return None                     # a register of k: kc could not read it
        else:
            leaves |= _memory_leaves(fuser, u)
    if not group or len(kc.ops) + len(group) > MAX_KERNEL_OPS or any(
            fuser.kind[u] == NODE and fuser.home(u) is k and not in_memory(u, k)
            for u in leaves):       # read through an index map, but only in a register
        return None
    read_before = set().union(*(_memory_leaves(fuser, w) for op in kc.ops for w in op.inputs
                                if fuser.kind[w] != NODE or fuser.home(w) is not kc))
    dropped = {op.out for op in group} & read_before
    return sorted(group, key=fuser.order.__getitem__) \
        if len(leaves - read_before) <= len(dropped) else None


def _memory_leaves(fuser, u) -> set:
    """The buffers (params and node values) a kernel reads to read u."""
    kind = fuser.kind[u]
    if kind in (NODE, PARAM):
        return {u}
    if kind == INLINE and u not in fuser.mat:
        return set().union(*(_memory_leaves(fuser, w) for w in fuser.producer[u].inputs))
    return set()
