"""Pytrees: nested dicts, lists, tuples and named tuples (and None) flattened to leaves.

A treedef is a hashable description of the structure, so it can be part of a cache key.
Dict keys are sorted, as in JAX; None is an empty subtree, not a leaf. A named tuple (any tuple
subclass with `_fields`: NumPy 2's EighResult, SVDResult, ..., or the user's) is a node whose
treedef keeps its class, `("namedtuple", children, cls)`, so it comes back as itself. The
children sit at index 1 of lists', tuples' and named tuples' treedefs (code that reads a named
tuple's as a tuple's reads it right), at index 2 of dicts'; `children(treedef)` finds them.

`ravel(tree) -> (flat, unravel)` is jax.flatten_util.ravel_pytree: every leaf raveled and
concatenated into one 1-D array, and the function that cuts such an array back into the tree.
It is written in plain NumPy calls (np.concatenate, np.ravel, np.reshape, slicing, astype) on
the leaves: on NumPy arrays they are NumPy's, and on eager tensors and tracers they dispatch
through __array_function__ / the array methods to fusegrad.numpy, so ravel and unravel are
recorded, traced and differentiated like any other NumPy code. This keeps tree.py free of
imports: the tracer and the signature cache import it, so it sits below fusegrad.numpy.
"""

from __future__ import annotations

import numpy as np


def flatten(tree) -> tuple[list, tuple]:
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(node, leaves):
    if node is None:
        return ("none",)
    if isinstance(node, tuple) and hasattr(type(node), "_fields"):
        return ("namedtuple", tuple(_flatten(child, leaves) for child in node), type(node))
    if isinstance(node, (list, tuple)):
        kind = "list" if isinstance(node, list) else "tuple"
        return (kind, tuple(_flatten(child, leaves) for child in node))
    if isinstance(node, dict):
        keys = tuple(sorted(node))
        return ("dict", keys, tuple(_flatten(node[k], leaves) for k in keys))
    leaves.append(node)
    return ("leaf",)


def unflatten(treedef: tuple, leaves) -> object:
    it = iter(leaves)
    out = _build(treedef, it)
    if next(it, _END) is not _END:
        raise ValueError("unflatten: more leaves than the tree structure holds")
    return out


_END = object()


def _build(treedef, it):
    kind = treedef[0]
    if kind == "leaf":
        leaf = next(it, _END)
        if leaf is _END:
            raise ValueError("unflatten: fewer leaves than the tree structure holds")
        return leaf
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _build(child, it) for k, child in zip(treedef[1], treedef[2])}
    children = [_build(child, it) for child in treedef[1]]
    if kind == "namedtuple":
        return treedef[2](*children)
    return children if kind == "list" else tuple(children)


def children(treedef: tuple) -> tuple:
    """The child treedefs of a node (none for a leaf or None)."""
    kind = treedef[0]
    if kind in ("leaf", "none"):
        return ()
    return treedef[2] if kind == "dict" else treedef[1]


def num_leaves(treedef: tuple) -> int:
    if treedef[0] == "leaf":
        return 1
    return sum(num_leaves(c) for c in children(treedef))


def tree_map(fn, tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(x) for x in leaves])


def ravel(tree) -> tuple[object, object]:
    """Flatten a pytree of arrays into one 1-D array: JAX's ravel_pytree.

    Returns `(flat, unravel)`. `flat` is every leaf raveled (C order) and concatenated, leaves
    in flatten's order (dict keys sorted). Its dtype is np.result_type of the leaves' dtypes
    (NumPy's promotion, which fusegrad follows: float32 with float64 gives float64; a Python
    scalar leaf counts as NumPy's default dtype, float64, int64 or bool, as JAX counts it as
    its own default dtype); an empty tree gives a float64 array of shape (0,).

    `unravel(flat)` rebuilds the tree from an array of shape `(flat.size,)`. When all leaves
    have one dtype it keeps the dtype it is given (a float32 tree unravels a float64 array into
    float64 leaves, as JAX's does); with mixed dtypes it requires flat's dtype and casts each
    leaf back to its own, raising TypeError for another dtype, as JAX does. Leaves come back
    as arrays of their shapes (a Python scalar as a 0-d array); unravelled NumPy arrays are
    copies, never views of `flat`, so updating `flat` in place leaves them alone.

    Both work on NumPy arrays, eager tensors and tracers (inside fg.jit and fg.grad) and are
    differentiable: `fg.grad(lambda f: loss(unravel(f)))(flat)` is the flat gradient.
    """
    leaves, treedef = flatten(tree)
    dtypes = [_dtype_of(x) for x in leaves]
    shapes = [tuple(int(n) for n in np.shape(x)) for x in leaves]
    dtype = np.result_type(*dtypes) if leaves else np.dtype(np.float64)
    if leaves:
        flat = np.concatenate([np.ravel(_cast(x, d, dtype)) for x, d in zip(leaves, dtypes)])
    else:
        flat = np.zeros(0, dtype)
    single = all(d == dtype for d in dtypes)
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    total = sum(sizes)

    def unravel(flat):
        shape = tuple(np.shape(flat))
        if shape != (total,):
            raise ValueError(f"unravel: expected a 1-D array of shape ({total},), the size of "
                             f"the raveled tree, got shape {shape}")
        got = _dtype_of(flat)
        if not single and got != dtype:
            raise TypeError(f"unravel: given an array of dtype {got} but expected {dtype}: "
                            f"the tree mixes dtypes {sorted({str(d) for d in dtypes})}, so "
                            f"unravel casts back from {dtype} only")
        copy = isinstance(flat, np.ndarray)     # no views of flat: it may be updated in place
        out, start = [], 0
        for s, n, d in zip(shapes, sizes, dtypes):
            chunk = np.reshape(flat[start:start + n], s)
            start += n
            if not single and d != got:
                chunk = chunk.astype(d)
            out.append(np.array(chunk) if copy else chunk)
        return unflatten(treedef, out)

    return flat, unravel


def _dtype_of(x) -> np.dtype:
    """A leaf's dtype: arrays, tensors and tracers carry one; Python scalars get NumPy's."""
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(x).dtype


def _cast(x, dtype, to):
    if not hasattr(x, "dtype"):
        return np.asarray(x, to)
    return x if dtype == to else x.astype(to)
