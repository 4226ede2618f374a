"""graph_dot: the recorded eager graph of a tensor as Graphviz DOT source.

One box per node (its name; AccumulateGrad also shows the leaf's shape and dtype), one arrow per
edge in the direction gradients flow, labelled with the shape of the gradient sent along it.
Pipe the text into `dot -Tsvg` to see it.
"""

from __future__ import annotations

from .graph import AccumulateGrad
from .tensor import Tensor, gradient_edge


def _shape(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def graph_dot(tensor: Tensor, name: str = "backward") -> str:
    """DOT source of the graph that backward() on `tensor` would walk."""
    lines = [f"digraph {name} {{", "  node [shape=box, fontname=Helvetica];"]
    if not tensor.requires_grad:
        lines += ['  root [label="tensor without history", shape=plaintext];', "}"]
        return "\n".join(lines)
    root = gradient_edge(tensor)
    ids = {root: 0}
    lines.append(f'  root [label="{_shape(tensor.shape)} {tensor.dtype}", shape=plaintext];')
    lines.append(f'  root -> n0 [label="{_shape(tensor.shape)}"];')
    pending = [root]
    while pending:  # an explicit stack: deep graphs need no recursion
        node = pending.pop()
        lines.append(f'  n{ids[node]} [label="{_label(node)}"];')
        for edge, shape, _ in node.inputs:
            if edge is None:
                continue
            if edge not in ids:
                ids[edge] = len(ids)
                pending.append(edge)
            lines.append(f'  n{ids[node]} -> n{ids[edge]} [label="{_shape(shape)}"];')
    lines.append("}")
    return "\n".join(lines)


def _label(node) -> str:
    if isinstance(node, AccumulateGrad):
        leaf = node.variable
        return f"AccumulateGrad\\n{_shape(leaf.shape)} {leaf.dtype}"
    return node.name + (" (released)" if node.released else "")
