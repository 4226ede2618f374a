"""Index maps and nullary ops inside a kernel: they compute nothing, they move the index.

Each rule takes the kernel being emitted, the op and the index its result is wanted at, and
returns the expression of that element: a broadcast drops axes, a transpose permutes them, a
slice offsets them, a gather reads the index from another array, pad and concatenate choose
between loads with a conditional expression (so nothing is loaded out of bounds), `full` is a
literal and `iota` is the index itself. One row per primitive, as the templates are. The one
rule that computes is a small matmul's (fusion.SMALL_DOT_K): a row of fmas over moved indices.
"""

from __future__ import annotations

from .templates import literal, render_convert


class Expr:
    """A scalar expression: its text, the loop depth it needs, and the pass it exists from."""

    __slots__ = ("avail", "depth", "pass_", "text")

    def __init__(self, text: str, depth: int = 0, avail: int = 0, pass_=None):
        self.text, self.depth, self.avail, self.pass_ = text, depth, avail, pass_


ZERO = Expr("0")


def _bin(a: Expr, op: str, b: Expr) -> Expr:
    """Index arithmetic that folds the trivial cases, so loads stay readable."""
    if op == "+" and a.text == "0":
        return b
    if op in "+-" and b.text == "0":
        return a
    if op == "*" and (a.text == "0" or b.text == "1"):
        return a
    if op == "*" and b.text == "0":
        return b
    return Expr(f"({a.text} {op} {b.text})", max(a.depth, b.depth))


def _const(k, n: int) -> Expr:
    return Expr(k.syms.dim(n))


def _broadcast_in_dim(k, op, I):
    (x,) = op.inputs
    return k.emit(x, tuple(I[d] if n != 1 else ZERO
                           for n, d in zip(x.shape, op.params["dims"])))


def _reshape(k, op, I):
    (x,) = op.inputs
    moving = iter([ix for ix, n in zip(I, op.out.shape) if n != 1])
    return k.emit(x, tuple(ZERO if n == 1 else next(moving) for n in x.shape))


def _transpose(k, op, I):
    J = [None] * len(I)
    for a, p in enumerate(op.params["perm"]):
        J[p] = I[a]
    return k.emit(op.inputs[0], tuple(J))


def _slice(k, op, I):
    p = op.params
    return k.emit(op.inputs[0], tuple(
        _bin(_const(k, a), "+", _bin(i, "*", _const(k, s)))
        for i, a, s in zip(I, p["start"], p["step"])))


def _rev(k, op, I):
    """Reversed axes read from the other end: index (n - 1) - i, no load of an index array
    (n is the size's symbol, so the text depends on ranks, not sizes)."""
    (x,) = op.inputs
    axes = op.params["axes"]
    return k.emit(x, tuple(_bin(_bin(_const(k, n), "-", Expr("1")), "-", i)
                           if a in axes and n != 1 else i
                           for a, (i, n) in enumerate(zip(I, x.shape))))


def _take(k, op, I):
    x, idx = op.inputs
    a = op.params["axis"] % x.type.ndim
    j = k.bounded(idx, k.emit(idx, I[a:a + idx.type.ndim]), x.shape[a], a, op)
    return k.emit(x, I[:a] + (j,) + I[a + idx.type.ndim:])


def _take_along_axis(k, op, I):
    x, idx = op.inputs
    a = op.params["axis"] % x.type.ndim
    j = k.bounded(idx, k.emit(idx, I), x.shape[a], a, op)
    return k.emit(x, I[:a] + (j,) + I[a + 1:])


def _pad(k, op, I):
    (x,) = op.inputs
    p = op.params
    J, conds = [], []
    for i, n, lo, hi, it in zip(I, x.shape, p["low"], p["high"], p["interior"]):
        shifted = _bin(i, "-", _const(k, lo))
        if it:
            j = _bin(shifted, "//", _const(k, it + 1))
            conds.append(f"{shifted.text} % {_const(k, it + 1).text} == 0")
        else:
            j = shifted
        if lo or hi or it:
            conds.append(f"0 <= {j.text} < {_const(k, n).text}" if n != 1
                         else f"{j.text} == 0")
        J.append(j if n != 1 else ZERO)
    inner = k.emit(x, tuple(J))
    if not conds:
        return inner
    zero = literal(0, op.out.dtype)
    depth = max([inner.depth] + [i.depth for i in I])
    return Expr(f"({inner.text} if {' and '.join(conds)} else {zero})", depth, inner.avail)


def _concatenate(k, op, I):
    a = op.params["axis"] % op.out.type.ndim
    offset, pieces = 0, []
    for x in op.inputs:
        shifted = _bin(I[a], "-", _const(k, offset))
        e = k.emit(x, I[:a] + (shifted if x.shape[a] != 1 else ZERO,) + I[a + 1:])
        offset += x.shape[a]
        pieces.append((e, _const(k, offset).text))
    text = pieces[-1][0].text
    for e, end in reversed(pieces[:-1]):
        text = f"({e.text} if {I[a].text} < {end} else {text})"
    depth = max([e.depth for e, _ in pieces] + [i.depth for i in I])
    return Expr(text, depth, max(e.avail for e, _ in pieces))


def _matmul(k, op, I):
    """A small-K matrix product (fusion.SMALL_DOT_K): one fma per term, in the order of k, as
    OpenBLAS's kernels accumulate (the same bits as np.matmul here, measured up to K = 15 in
    float64 and 31 in float32). The row of `a` is loop-invariant in the inner loop, the rows
    of `b` are contiguous there, so the loop vectorizes over the output's columns."""
    a, b = op.inputs
    i, j = I
    terms = [(k.emit(a, (i, Expr(str(t)))), k.emit(b, (Expr(str(t)), j)))
             for t in range(a.shape[1])]
    (x, y), rest = terms[0], terms[1:]
    text = f"{x.text} * {y.text}"
    for x, y in rest:
        text = f"fma({x.text}, {y.text}, {text})"
    return k.statement(op, I, text, [e for pair in terms for e in pair])


def _full(k, op, I):
    return Expr(k.syms.scalar(op.params["value"], op.out.dtype))


def _constant(k, op, I):
    return Expr(literal(op.params["value"].item(), op.out.dtype))


def _iota(k, op, I):
    i = I[op.params["axis"]]
    dtype = op.out.dtype
    text = i.text if dtype == "i64" else render_convert("i64", dtype, i.text)
    return Expr(text, i.depth)


INDEX_RULES = {
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "transpose": _transpose,
    "slice": _slice,
    "rev": _rev,
    "take": _take,
    "take_along_axis": _take_along_axis,
    "pad": _pad,
    "concatenate": _concatenate,
    "full": _full,
    "constant": _constant,
    "iota": _iota,
    "matmul": _matmul,
}
