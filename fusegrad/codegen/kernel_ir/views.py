"""Index remaps folded into loads: a broadcast_in_dim, transpose, slice or rev is an affine map
of its operand's elements, so where every use of its result is a loop op (an elementwise op or
a reduction, which load their operands one element at a time), the plan gives it no buffer and
its uses load the operand through the map instead of reading a copy written out in full.

A view of a value v of shape s is (root, offset, strides): v[i] is element
offset + sum(i[d] * strides[d]) of root's buffer (a value the plan places, read as a flat
row-major array). A value in a buffer of its own is (v, 0, strides(s)); a broadcast axis has
stride 0, a transposed one its operand's stride, a slice scales the strides by its steps and
starts at its first element, a rev walks its axes backwards from their last element. Remaps of
remaps compose: a broadcast of a transposed slice is one map of the sliced value's root.

A remap stays written out (a copy in build.py's `_shape`) where a use needs a buffer: a host
step, a matmul's BLAS call, control flow, a reshape of it, or a program result; and where its
loads would leave the innermost loop short (MIN_INNER).
"""

from __future__ import annotations

REMAPS = ("broadcast_in_dim", "transpose", "slice", "rev")
# A loop nest whose innermost loop runs fewer iterations than MIN_INNER keeps its math in
# scalar (LLVM's loop vectorizer leaves loops shorter than 16 alone): a remap, or a sum, that
# would make one of at least SMALL elements stays out of the loop instead (written out, or a
# loop of its own), as a flat loop of the math vectorizes.
MIN_INNER = 16
SMALL = 1024


def strides(shape) -> tuple:
    """Row-major strides, in elements, of a contiguous array of shape."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def merged_axes(shape, *strides_) -> tuple:
    """Runs of axes every map walks as one merged into one axis; axes of size 1 dropped."""
    merged: list = []
    for n, *ss in ((n, *ss) for n, *ss in zip(shape, *strides_) if n != 1):
        if merged and all(outer == inner * n for outer, inner in zip(merged[-1][1:], ss)):
            merged[-1] = (merged[-1][0] * n, *ss)
        else:
            merged.append((n, *ss))
    return tuple(a[0] for a in merged), [tuple(a[j] for a in merged)
                                         for j in range(1, len(strides_) + 1)]


def inner(shape, *maps) -> int:
    """The innermost extent of the nest walking shape through maps (strides), merged."""
    walked = merged_axes(shape, strides(shape), *maps)[0]
    return walked[-1] if walked else 1


def remap(op, offset: int, st) -> tuple:
    """(offset, strides) over op.out's shape, of op (a REMAPS op) whose operand's element i is
    offset + sum(i * st)."""
    p, x = op.params, op.inputs[0]
    if op.prim == "broadcast_in_dim":
        out = [0] * op.out.type.ndim
        for axis, d in enumerate(p["dims"]):
            out[d] = 0 if x.shape[axis] == 1 else st[axis]
        return offset, tuple(out)
    if op.prim == "transpose":
        return offset, tuple(st[a] for a in p["perm"])
    if op.prim == "slice":
        return (offset + sum(a * s for a, s in zip(p["start"], st)),
                tuple(j * s for j, s in zip(p["step"], st)))
    axes = set(p["axes"])                                           # rev
    return (offset + sum((x.shape[a] - 1) * st[a] for a in axes),
            tuple(-s if a in axes else s for a, s in enumerate(st)))


def fold(fn, loop_op, of) -> dict:
    """{value: (root, offset, strides)} for the results of fn's REMAPS ops that no use needs
    written out: every use is loop_op(use), or a remap folded too. of(v) is v's alias root."""
    uses: dict = {}
    for op in fn.ops:
        for v in op.inputs:
            uses.setdefault(v, []).append(op)
    results, folded = set(fn.results), set()
    for op in reversed(fn.ops):
        if op.prim in REMAPS and op.out not in results and uses.get(op.out) and all(
                loop_op(u) or u.outputs[0] in folded for u in uses[op.out]) and (
                op.out.type.size < SMALL or inner(op.out.shape, remap(
                    op, 0, strides(op.inputs[0].shape))[1]) >= MIN_INNER):
            folded.add(op.out)
    views: dict = {}
    for op in fn.ops:
        if op.prim in REMAPS and op.out in folded:
            x = of(op.inputs[0])
            root, offset, st = views.get(x, (x, 0, strides(op.inputs[0].shape)))
            views[op.out] = (root, *remap(op, offset, st))
    return views
