"""Pytrees: nested dicts, lists and tuples (and None) flattened to a list of leaves.

A treedef is a hashable description of the structure, so it can be part of a cache key.
Dict keys are sorted, as in JAX; None is an empty subtree, not a leaf.
"""

from __future__ import annotations


def flatten(tree) -> tuple[list, tuple]:
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(node, leaves):
    if node is None:
        return ("none",)
    if isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
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
    return children if kind == "list" else tuple(children)


def num_leaves(treedef: tuple) -> int:
    kind = treedef[0]
    if kind == "leaf":
        return 1
    if kind == "none":
        return 0
    return sum(num_leaves(c) for c in treedef[-1])


def tree_map(fn, tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(x) for x in leaves])
