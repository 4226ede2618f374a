"""Graphviz drawings of a Function: values flow along edges labeled with their types.

`to_dot` writes DOT source by hand, so it needs neither the graphviz package nor the `dot`
program; `render` pipes that source through `dot` to an svg, png or pdf file. Parameters and
results are ellipses, ops are boxes labeled with the primitive and its key params, and fused
kernels (lists of Ops from the fusion pass) are drawn as clusters. So are the nested Functions
of control flow (a scan's body, a cond's branches), drawn inside a cluster of their own next to
the op that holds them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .printer import describe_op, format_literal, functions_of, value_names
from .values import Op, Value

if TYPE_CHECKING:
    from .core import Function

FORMATS = ("svg", "png", "pdf")
MAX_PARAM_TEXT = 40
NO_DOT = ("rendering needs the Graphviz 'dot' program: install it with `apt-get install graphviz` "
          "(Debian/Ubuntu) or `brew install graphviz`; to_dot() still works without it")

_PARAM_STYLE = 'shape=ellipse, style=filled, fillcolor="#dbe9f6"'
_RESULT_STYLE = 'shape=ellipse, style=filled, fillcolor="#dff0d8"'
_OP_STYLE = 'shape=box, style="rounded,filled", fillcolor="#ffffff"'
_CONST_STYLE = 'shape=box, style="rounded,filled", fillcolor="#eeeeee"'


def to_dot(fn: Function, clusters: list[list[Op]] | None = None) -> str:
    """DOT source for fn; `clusters` (lists of fn's Ops) are drawn as `kernel k` boxes, and
    the Functions an op holds (a loop's body, a cond's branches) as nested clusters."""
    graph = _Graph(fn)
    _draw(graph, fn)
    op_ids = {id(op): f"op{i}" for i, op in enumerate(fn.ops)}
    body = graph.nodes + graph.edges + _clusters(clusters or [], op_ids)
    return "\n".join([f"digraph {_quote(fn.name)} {{", *_HEADER, *body, "}"]) + "\n"


def _draw(graph: _Graph, fn: Function) -> None:
    pre = graph.prefix
    for i, p in enumerate(fn.params):
        graph.node(f"{pre}p{i}", graph.name(p) + "\n" + _type(p), _PARAM_STYLE)
        if isinstance(p, Value):
            graph.producer.setdefault(p, f"{pre}p{i}")
    for i, op in enumerate(fn.ops):
        style = _CONST_STYLE if op.prim in ("constant", "full", "iota") else _OP_STYLE
        tooltip = f", tooltip={_quote(op.loc)}" if op.loc else ""
        graph.node(f"{pre}op{i}", op_label(op, graph.names), style + tooltip)
        for v in op.inputs:
            graph.edge(v, f"{pre}op{i}")
        for v in op.outputs:
            if isinstance(v, Value):
                graph.producer.setdefault(v, f"{pre}op{i}")
        for key, sub in functions_of(op):
            _region(graph, f"{pre}op{i}", key, sub)
    for k, r in enumerate(fn.results):
        graph.node(f"{pre}r{k}", f"result {k}\n{_type(r)}", _RESULT_STYLE)
        graph.edge(r, f"{pre}r{k}")


def _region(graph: _Graph, op_id: str, key: str, sub: Function) -> None:
    """A nested Function as a cluster, with a dashed edge from the op to each of its params."""
    inner = _Graph(sub, prefix=f"{op_id}_{key}_")
    _draw(inner, sub)
    graph.nodes.append(f"  subgraph cluster_{op_id}_{key} {{")
    graph.nodes.append(f"    label={_quote(f'{key} @{sub.name}')}; style=\"rounded\"; "
                       f"color=\"#5b8fc7\";")
    graph.nodes += ["  " + line for line in inner.nodes + inner.edges]
    graph.nodes.append("  }")
    graph.edges += [f"  {op_id} -> {inner.prefix}p{i} [style=dashed];"
                    for i in range(len(sub.params))]


_HEADER = ("  rankdir=TB;", '  graph [fontname="Helvetica", fontsize=11];',
           '  node [fontname="Helvetica", fontsize=10];',
           '  edge [fontname="Helvetica", fontsize=9];')


class _Graph:
    """Nodes and edges collected in order; values nothing defines get a red placeholder."""

    def __init__(self, fn: Function, prefix: str = ""):
        self.prefix = prefix
        self.names = value_names(fn)
        self.producer: dict[Value, str] = {}
        self.nodes: list[str] = []
        self.edges: list[str] = []
        self.undefined = 0

    def name(self, v) -> str:
        return self.names.get(v, "%?") if isinstance(v, Value) else "?"

    def node(self, node_id: str, label: str, style: str):
        self.nodes.append(f"  {node_id} [label={_quote(label)}, {style}];")

    def edge(self, v, dst: str):
        src = self.producer.get(v) if isinstance(v, Value) else None
        if src is None:
            src = f"{self.prefix}undef{self.undefined}"
            self.undefined += 1
            self.node(src, self.name(v) + "\n(undefined)", 'shape=ellipse, color="#cc0000"')
            if isinstance(v, Value):
                self.producer[v] = src
        self.edges.append(f"  {src} -> {dst} [label={_quote(_type(v))}];")


def op_label(op: Op, names) -> str:
    """`%3 = reduce_sum` then one `key=value` line per param (long values shortened)."""
    head = describe_op(op, names)
    params = []
    for key in sorted(op.params or {}, key=str):
        value = op.params[key]
        if op.prim == "constant" and key == "value":
            array = np.asarray(value)
            text = format_literal(array) if array.size <= 4 else f"<{array.size} values>"
        else:
            text = format_literal(value)
        if len(text) > MAX_PARAM_TEXT:
            text = text[:MAX_PARAM_TEXT - 3] + "..."
        params.append(f"{key}={text}")
    return "\n".join([head, *params])


def render(fn: Function, path, clusters: list[list[Op]] | None = None) -> Path:
    """Write fn's graph to path (.svg, .png or .pdf) with Graphviz's `dot`; returns the path."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"cannot render to {path.name!r}: use a .svg, .png or .pdf path")
    source = to_dot(fn, clusters=clusters)
    if shutil.which("dot") is None:
        raise RuntimeError(NO_DOT)
    try:
        import graphviz
    except ImportError:
        raise RuntimeError("rendering needs the graphviz Python package: "
                           "pip install graphviz; to_dot() still works without it") from None
    try:
        data = graphviz.Source(source).pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RuntimeError(NO_DOT) from None
    path.write_bytes(data)
    return path


def _clusters(clusters, op_ids) -> list[str]:
    lines, seen = [], set()
    for k, ops in enumerate(clusters):
        members = []
        for op in ops:
            if id(op) not in op_ids:
                raise ValueError(f"cluster {k} holds {op!r}, which is not an op of the function")
            if id(op) in seen:
                raise ValueError(f"{op!r} is in more than one cluster")
            seen.add(id(op))
            members.append(op_ids[id(op)])
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f'    label="kernel {k}"; style="rounded,dashed"; color="#888888";')
        lines += [f"    {m};" for m in members]
        lines.append("  }")
    return lines


def _type(v) -> str:
    return str(v.type) if isinstance(v, Value) else "?"


def _quote(text) -> str:
    """A DOT string literal; newlines become centered line breaks."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r", "").replace("\n", "\\n") + '"'
