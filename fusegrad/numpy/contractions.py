"""Contractions: einsum, tensordot, dot, inner, vdot, outer, vecdot, multi_dot, and np.linalg's
diagonal and trace.

Every contraction ends in the matmul primitive (a BLAS call, or a fused loop for a few terms)
or in broadcast, multiply and reduce_sum (one fused loop): never a Python loop over elements.

einsum takes NumPy's subscripts: explicit (`ij,jk->ik`) and implicit output (the labels that
appear once, sorted), `...` broadcasting, repeated labels in one operand (diagonals: `ii->i`,
traces: `ii`), size-1 axes broadcasting against any size, the sublist form
`einsum(a, [0, 1], b, [1, 2], [0, 2])`, and any number of operands. Each operand first loses
its diagonals (the repeated axes moved last, merged into one and sliced with stride
1 + n + n² ...: exact, and an index map whose gradient is a pad) and the labels no one else
needs (summed). Then operands are contracted two at a time in greedy order, as opt_einsum's
"greedy": among the pairs that share a label (all pairs if none do), the one whose result is
smallest compared with its operands. A pair is one matmul after a transpose and reshape into
[batch, m, k] @ [batch, k, n]; a pair with nothing to sum is a broadcast multiply, and one
whose result has a single element per batch a multiply and a sum. `optimize=` is accepted and
ignored (the order is always this one); the values are NumPy's up to the rounding of sums in
another order.
"""

from __future__ import annotations

import builtins
import math
from itertools import combinations

import numpy as np

from .. import lax
from ..dispatch import level
from .base import _dtype, _ndim, _shape, _shape_error, astype
from .elementwise import multiply, not_equal
from .linalg import _mT, _stacked, matmul
from .reductions import sum
from .shapes import ravel, reshape, transpose


def dot(a, b):
    """np.dot: a product with a scalar, matmul when b has rank <= 2, else tensordot over a's
    last and b's second-to-last axis."""
    if _ndim(a) == 0 or _ndim(b) == 0:      # np.dot makes Python scalars arrays: not weak
        return multiply(*(x if level(x) else np.asarray(x) for x in (a, b)))
    if _ndim(b) > 2:        # sum over a's last and b's second-to-last axis
        return tensordot(a, b, ([_ndim(a) - 1], [_ndim(b) - 2]))
    return matmul(a, b)


def outer(a, b):
    """Both raveled: a column times a row (a broadcast multiply)."""
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def vdot(a, b):
    """The sum of the raveled product."""
    return sum(multiply(ravel(a), ravel(b)))


def inner(a, b):
    """np.inner: a * b if either is 0-d, else the sum over both last axes, of shape
    a.shape[:-1] + b.shape[:-1] (one matmul of the operands flattened to rows)."""
    if _ndim(a) == 0 or _ndim(b) == 0:
        return dot(a, b)
    k = _shape(a)[-1]
    if _shape(b)[-1] != k:
        raise _shape_error("inner: the last axes differ", a, b)
    if _ndim(a) == 1 and _ndim(b) == 1:
        return vdot(a, b)
    rows = matmul(reshape(a, (-1, k)), transpose(reshape(b, (-1, k))))
    return reshape(rows, _shape(a)[:-1] + _shape(b)[:-1])


def tensordot(a, b, axes=2):
    """NumPy's: the summed axes moved last in a and first in b, both flattened to matrices,
    one matmul, reshaped back."""
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = list(range(-int(axes), 0)), list(range(int(axes)))
    else:
        axes_a, axes_b = axes
    axes_a = list(axes_a) if isinstance(axes_a, (list, tuple)) else [axes_a]
    axes_b = list(axes_b) if isinstance(axes_b, (list, tuple)) else [axes_b]
    sa, sb = _shape(a), _shape(b)
    if len(axes_a) != len(axes_b) or any(
            sa[i] != sb[j] for i, j in zip(axes_a, axes_b)):
        raise ValueError("shape-mismatch for sum")
    axes_a = [i % len(sa) if sa else i for i in axes_a]
    axes_b = [j % len(sb) if sb else j for j in axes_b]
    free_a = [i for i in range(len(sa)) if i not in axes_a]
    free_b = [j for j in range(len(sb)) if j not in axes_b]
    k = math.prod(sa[i] for i in axes_a)
    at = reshape(transpose(a, free_a + axes_a), (math.prod(sa[i] for i in free_a), k))
    bt = reshape(transpose(b, axes_b + free_b), (k, math.prod(sb[j] for j in free_b)))
    return reshape(matmul(at, bt), tuple(sa[i] for i in free_a) + tuple(sb[j] for j in free_b))


def vecdot(x1, x2, /, *, axis=-1, **kwargs):
    """Sum of x1 * x2 over `axis` after broadcasting (np.vecdot, np.linalg.vecdot)."""
    if kwargs.get("out") is not None:
        raise TypeError("fusegrad functions do not support out=; assign the result instead")
    return sum(multiply(x1, x2), axis=axis)


def linalg_outer(x1, x2, /):
    """np.linalg.outer: outer of two 1-D arrays."""
    if _ndim(x1) != 1 or _ndim(x2) != 1:
        raise ValueError(f"Input arrays must be one-dimensional, but they are "
                         f"x1.ndim={_ndim(x1)} and x2.ndim={_ndim(x2)}.")
    return outer(x1, x2)


def multi_dot(arrays, *, out=None):
    """NumPy's: 1-D ends as a row and a column, the cheapest parenthesization (NumPy's cost
    rule for three, its dynamic program for more), then dot."""
    if out is not None:
        raise TypeError("fusegrad functions do not support out=; assign the result instead")
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    if len(arrays) == 2:
        return dot(arrays[0], arrays[1])
    first, last = _ndim(arrays[0]), _ndim(arrays[-1])
    if first == 1:
        arrays[0] = reshape(arrays[0], (1, -1))
    if last == 1:
        arrays[-1] = reshape(arrays[-1], (-1, 1))
    for a in arrays:
        if _ndim(a) != 2:
            raise np.linalg.LinAlgError(f"{_ndim(a)}-dimensional array given. Array must be "
                                        f"two-dimensional")
    dims = [_shape(a)[0] for a in arrays] + [_shape(arrays[-1])[1]]
    result = _chain(arrays, _chain_order(dims), 0, len(arrays) - 1)
    if first == 1 and last == 1:
        return reshape(result, ())
    return ravel(result) if first == 1 or last == 1 else result


def _chain_order(p):
    n = len(p) - 1
    if n == 3:     # NumPy's _multi_dot_three: (AB)C when strictly cheaper
        cost1 = p[0] * p[2] * (p[1] + p[3])
        cost2 = p[1] * p[3] * (p[0] + p[2])
        return {(0, 2): 1 if cost1 < cost2 else 0, (1, 2): 1, (0, 1): 0}
    m, s = {}, {}
    for i in range(n):
        m[i, i] = 0
    for span in range(1, n):
        for i in range(n - span):
            j = i + span
            m[i, j] = math.inf
            for k in range(i, j):
                q = m[i, k] + m[k + 1, j] + p[i] * p[k + 1] * p[j + 1]
                if q < m[i, j]:
                    m[i, j], s[i, j] = q, k
    return s


def _chain(arrays, order, i, j):
    if i == j:
        return arrays[i]
    k = order[i, j]
    return dot(_chain(arrays, order, i, k), _chain(arrays, order, k + 1, j))


# -- np.linalg's diagonal, trace and matrix_transpose (NumPy 2) ------------------------------

def matrix_transpose(x, /):
    """The last two axes swapped."""
    return _mT(_stacked(x))


def diagonal(x, /, *, offset=0):
    """The diagonal of the last two axes (np.linalg.diagonal): a strided slice of the
    flattened matrices, exact and an index map in compiled code."""
    x = _stacked(x)
    m, n = _shape(x)[-2:]
    start, length = (offset, builtins.min(m, n - offset)) if offset >= 0 \
        else (-offset * n, builtins.min(m + offset, n))
    start, stop = (start, start + (n + 1) * (length - 1) + 1) if length > 0 else (0, 0)
    batch = _shape(x)[:-2]
    r = len(batch)
    return lax.slice(reshape(x, batch + (m * n,)), (0,) * r + (start,), batch + (stop,),
                     (1,) * r + (n + 1,))


def trace(x, /, *, offset=0, dtype=None):
    """The sum of diagonal(x, offset) (np.linalg.trace: the last two axes)."""
    d = diagonal(x, offset=offset)
    return sum(d, axis=-1, dtype=dtype)


# -- einsum -----------------------------------------------------------------------------------

def einsum(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    """Any subscripts (explicit, implicit, `...`, repeated labels, sublists, size-1
    broadcasting), operands contracted pairwise in opt_einsum's greedy order, each pair one
    matmul or a fused multiply and sum; `optimize` is ignored."""
    if out is not None:
        raise TypeError("fusegrad functions do not support out=; assign the result instead")
    subscripts, arrays = _subscripts(operands)
    inputs, output, sizes = _parse(subscripts, [_shape(a) for a in arrays])
    target = np.dtype(dtype) if dtype is not None else \
        np.result_type(*[_dtype(a) for a in arrays])
    work = np.dtype(np.int64) if target == np.bool_ else target    # bools: and, then any
    terms = [(a if _dtype(a) == work else astype(a, work), list(labels))
             for a, labels in zip(arrays, inputs)]
    terms = [_prepare(x, labels, sizes) for x, labels in terms]
    while len(terms) > 1:
        i, j = _greedy_pair(terms, output, sizes)
        rest = [t for k, t in enumerate(terms) if k not in (i, j)]
        needed = set(output).union(*(labels for _, labels in rest))
        terms = rest + [_contract(terms[i], terms[j], needed, sizes)]
    x, labels = _sum_unneeded(*terms[0], set(output))
    x = transpose(x, [labels.index(lab) for lab in output])
    return not_equal(x, 0) if target == np.bool_ else x


def _subscripts(operands):
    """(subscripts string, arrays) from either calling form."""
    if operands and isinstance(operands[0], str):
        return operands[0], list(operands[1:])
    arrays, terms = list(operands[0::2]), [_sublist(s) for s in operands[1::2]]
    if len(operands) % 2:       # an output sublist
        arrays, out = arrays[:-1], _sublist(operands[-1])
        return ",".join(terms) + "->" + out, arrays
    return ",".join(terms), arrays


def _sublist(labels) -> str:
    def letter(k):
        if k is Ellipsis:
            return "..."
        k = int(k)
        if not 0 <= k < 52:
            raise ValueError("subscript is not within the valid range [0, 52)")
        return chr(ord("A") + k) if k < 26 else chr(ord("a") + k - 26)
    return "".join(letter(k) for k in labels)


def _labels(term: str, ndim: int, n_ell: int, where: str) -> list:
    """A term's labels, its `...` spelled as the last ndim-len(letters) of n_ell labels."""
    if term.count("...") > 1 or "." in term.replace("...", ""):
        raise ValueError(f"einstein sum subscripts string contains a '.' that is not part of "
                         f"an ellipsis ('...') in {where}")
    head, dots, tail = term.partition("...")
    for c in head + tail:
        if not (c.isascii() and c.isalpha()):
            raise ValueError(f"invalid subscript '{c}' in einstein sum subscripts string, "
                             f"subscripts must be letters")
    if not dots:
        return list(term)
    k = ndim - len(head) - len(tail)
    if k < 0:
        raise ValueError(f"einstein sum subscripts string contains too many subscripts for "
                         f"{where}")
    return list(head) + [f".{i}" for i in range(n_ell - k, n_ell)] + list(tail)


def _parse(subscripts: str, shapes):
    """(labels per operand, output labels, size per label), with NumPy's checks."""
    text = subscripts.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError("more operands provided to einstein sum function than specified in "
                         "the subscripts string" if len(shapes) > len(terms) else
                         "fewer operands provided to einstein sum function than specified in "
                         "the subscripts string")
    n_ell = builtins.max([len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                          if "..." in t] or [0])
    inputs = [_labels(t, len(s), n_ell, f"operand {i}") for i, (t, s)
              in enumerate(zip(terms, shapes))]
    for i, (labels, shape) in enumerate(zip(inputs, shapes)):
        if len(labels) != len(shape):
            raise ValueError(f"operand {i} has {len(shape)} dimensions but the einstein sum "
                             f"subscripts string gives {len(labels)} for it")
    sizes = _sizes(inputs, shapes)
    ell = [f".{i}" for i in range(n_ell)]
    if not arrow:
        counts = {}
        for labels in inputs:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        return inputs, ell + sorted(lab for lab, c in counts.items()
                                    if c == 1 and not lab.startswith(".")), sizes
    if "..." not in rhs and any(sizes[e] != 1 for e in ell):
        raise ValueError("output has more dimensions than subscripts given in einstein sum, "
                         "but no '...' ellipsis provided to broadcast the extra dimensions.")
    output = _labels(rhs, len(rhs.replace("...", "")) + n_ell, n_ell, "the output")
    if "..." not in rhs:
        output = [lab for lab in output if not lab.startswith(".")]
    for lab in output:
        if output.count(lab) > 1:
            raise ValueError(f"einstein sum subscripts string includes output subscript "
                             f"'{lab}' multiple times")
        if lab not in sizes:
            raise ValueError(f"einstein sum subscripts string included output subscript "
                             f"'{lab}' which never appeared in an input")
    return inputs, output, sizes


def _sizes(inputs, shapes) -> dict:
    """Each label's size: equal across operands, or 1 (broadcast); equal within one operand."""
    sizes = {}
    for i, (labels, shape) in enumerate(zip(inputs, shapes)):
        mine = {}
        for lab, n in zip(labels, shape):
            if mine.setdefault(lab, n) != n:
                raise ValueError(f"dimensions in operand {i} for collapsing index "
                                 f"'{lab}' don't match ({mine[lab]} != {n})")
            old = sizes.setdefault(lab, n)
            if old != n and 1 not in (old, n):
                raise ValueError(f"operands could not be broadcast together: label "
                                 f"'{lab.replace('.', '...')}' has sizes {old} and {n}")
            sizes[lab] = builtins.max(old, n)
    return sizes


def _prepare(x, labels, sizes):
    """One operand with its diagonals taken and its broadcast (size-1) axes dropped."""
    for lab in dict.fromkeys(labels):
        if labels.count(lab) > 1:
            x, labels = _diagonal(x, labels, lab)
    keep = [k for k, lab in enumerate(labels) if _shape(x)[k] == sizes[lab]]
    if len(keep) < len(labels):
        x = reshape(x, [_shape(x)[k] for k in keep])
        labels = [labels[k] for k in keep]
    return x, labels


def _diagonal(x, labels, label):
    """The diagonal over every axis labelled `label`, as one axis at the end."""
    axes = [k for k, lab in enumerate(labels) if lab == label]
    rest = [k for k in range(len(labels)) if k not in axes]
    shape = _shape(x)
    n, k = shape[axes[0]], len(axes)
    kept = [shape[r] for r in rest]
    flat = reshape(transpose(x, rest + axes), kept + [n ** k])
    step = builtins.sum(n ** i for i in range(k))       # from (i, i, ...) to (i+1, i+1, ...)
    x = lax.slice(flat, [0] * (len(rest) + 1), kept + [n ** k], [1] * len(rest) + [step])
    return x, [labels[r] for r in rest] + [label]


def _sum_unneeded(x, labels, needed):
    axes = [k for k, lab in enumerate(labels) if lab not in needed]
    if not axes:
        return x, labels
    return sum(x, tuple(axes)), [lab for lab in labels if lab in needed]


def _size(labels, sizes) -> int:
    return math.prod(sizes[lab] for lab in labels)


def _greedy_pair(terms, output, sizes):
    """opt_einsum's greedy choice: the pair whose result is smallest against its operands,
    among pairs that share a label if any do."""
    pairs = list(combinations(range(len(terms)), 2))
    sharing = [(i, j) for i, j in pairs if set(terms[i][1]) & set(terms[j][1])]

    def cost(pair):
        i, j = pair
        others = set(output).union(*(t[1] for k, t in enumerate(terms) if k not in pair))
        la, lb = terms[i][1], terms[j][1]
        kept = {lab for lab in la + lb if lab in others}
        return (_size(kept, sizes) - _size(la, sizes) - _size(lb, sizes), pair)
    return builtins.min(sharing or pairs, key=cost)


def _contract(a_term, b_term, needed, sizes):
    """Two operands as one: matmul over the labels both have and nobody else needs."""
    (a, la), (b, lb) = _sum_unneeded(*a_term, needed | set(b_term[1])), \
        _sum_unneeded(*b_term, needed | set(a_term[1]))
    batch = [lab for lab in la if lab in lb and lab in needed]
    summed = [lab for lab in la if lab in lb and lab not in needed]
    free_a = [lab for lab in la if lab not in lb]
    free_b = [lab for lab in lb if lab not in la]
    dims = [sizes[lab] for lab in batch]
    out_labels = batch + free_a + free_b
    m, n, k = _size(free_a, sizes), _size(free_b, sizes), _size(summed, sizes)
    if not summed or m * n == 1:
        # A broadcast product (then a sum over `summed`, fused): no matmul to gain from.
        tail = [k] if summed else []
        a = reshape(transpose(a, [la.index(lab) for lab in batch + free_a + summed]),
                    dims + [sizes[lab] for lab in free_a] + [1] * len(free_b) + tail)
        b = reshape(transpose(b, [lb.index(lab) for lab in batch + free_b + summed]),
                    dims + [1] * len(free_a) + [sizes[lab] for lab in free_b] + tail)
        product = multiply(a, b)
        return (sum(product, -1) if summed else product), out_labels
    a = reshape(transpose(a, [la.index(lab) for lab in batch + free_a + summed]), dims + [m, k])
    b = reshape(transpose(b, [lb.index(lab) for lab in batch + summed + free_b]), dims + [k, n])
    shape = dims + [sizes[lab] for lab in free_a + free_b]
    return reshape(matmul(a, b), shape), out_labels


__all__ = ["dot", "einsum", "inner", "outer", "tensordot", "vdot"] + \
    (["vecdot"] if hasattr(np, "vecdot") else [])

# NumPy's functions that land here through __array_ufunc__ / __array_function__.
HANDLED = {
    np.dot: dot, np.outer: outer, np.vdot: vdot, np.inner: inner, np.tensordot: tensordot,
    np.einsum: einsum, np.linalg.multi_dot: multi_dot,
    **{getattr(np.linalg, name): fn for name, fn in (
        ("tensordot", tensordot), ("vecdot", vecdot), ("outer", linalg_outer),
        ("diagonal", diagonal), ("trace", trace), ("matrix_transpose", matrix_transpose))
       if hasattr(np.linalg, name)},
    **({np.vecdot: vecdot} if hasattr(np, "vecdot") else {}),
}
