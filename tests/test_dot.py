"""Graphviz output: DOT source by hand (nodes, typed edges, kernel clusters) and rendering, with
a friendly error when the `dot` program is missing."""

import shutil

import numpy as np
import pytest

from fusegrad.ir import Builder, TensorType
from fusegrad.ir import dot as ir_dot
from fusegrad.ir.dot import NO_DOT, render, to_dot


def T(dtype, *shape):
    return TensorType(dtype, tuple(shape))


def mlp_fn():
    b = Builder("mlp")
    x, w = b.param(T("f64", 2, 3), "x"), b.param(T("f64", 3, 4), "w")
    h = b.add1("matmul", [x, w], loc="mlp.py:3")
    h = b.add1("tanh", [h], loc="mlp.py:4")
    c = b.add1("constant", [], {"value": np.float64(0.5)}, loc="mlp.py:5")
    c = b.add1("broadcast_in_dim", [c], {"shape": (2, 4), "dims": ()}, loc="mlp.py:5")
    h = b.add1("mul", [h, c], loc="mlp.py:5")
    s = b.add1("reduce_sum", [h], {"axes": (0, 1)}, loc="mlp.py:6", note="loss")
    return b.build([s, h])


def test_to_dot_has_params_ops_results_and_typed_edges():
    src = mlp_fn().to_dot()
    assert src.startswith('digraph "mlp" {\n') and src.endswith("}\n")
    assert 'p0 [label="%x\\nf64[2,3]"' in src
    assert 'p1 [label="%w\\nf64[3,4]"' in src
    assert 'op0 [label="%0 = matmul"' in src and 'tooltip="mlp.py:3"' in src
    assert 'op2 [label="%2 = constant\\nvalue=array(0.5, f64)"' in src
    assert 'op3 [label="%3 = broadcast_in_dim\\ndims=()\\nshape=(2, 4)"' in src
    assert 'op5 [label="%5 = reduce_sum\\naxes=(0, 1)"' in src
    assert 'r0 [label="result 0\\nf64[]"' in src and 'r1 [label="result 1\\nf64[2,4]"' in src
    edges = [line.strip() for line in src.splitlines() if "->" in line]
    assert edges == [
        'p0 -> op0 [label="f64[2,3]"];', 'p1 -> op0 [label="f64[3,4]"];',
        'op0 -> op1 [label="f64[2,4]"];', 'op2 -> op3 [label="f64[]"];',
        'op1 -> op4 [label="f64[2,4]"];', 'op3 -> op4 [label="f64[2,4]"];',
        'op4 -> op5 [label="f64[2,4]"];', 'op5 -> r0 [label="f64[]"];',
        'op4 -> r1 [label="f64[2,4]"];']
    assert "subgraph" not in src


def test_clusters_are_drawn_as_kernels():
    fn = mlp_fn()
    src = to_dot(fn, clusters=[[fn.ops[0]], fn.ops[1:]])
    assert '  subgraph cluster_0 {\n    label="kernel 0";' in src
    assert "    op0;\n  }" in src
    body = src.split("subgraph cluster_1 {")[1].split("}")[0]
    assert 'label="kernel 1"' in body
    assert body.split()[-5:] == [f"op{i};" for i in range(1, 6)]
    with pytest.raises(ValueError, match="not an op of the function"):
        to_dot(fn, clusters=[mlp_fn().ops[:1]])
    with pytest.raises(ValueError, match="more than one cluster"):
        to_dot(fn, clusters=[fn.ops[:2], fn.ops[1:3]])


def test_labels_are_escaped_and_large_constants_summarized():
    b = Builder('say "hi"')
    c = b.add1("constant", [], {"value": np.arange(100.0)})
    s = b.add1("reduce_sum", [c], {"axes": (0,)}, loc='C:\\src\\"x".py:1')
    src = to_dot(b.build([s]))
    assert src.startswith('digraph "say \\"hi\\"" {')
    assert 'op0 [label="%0 = constant\\nvalue=<100 values>"' in src
    assert 'tooltip="C:\\\\src\\\\\\"x\\".py:1"' in src


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs the Graphviz dot program")
@pytest.mark.parametrize("suffix, magic", [(".svg", b"<?xml"), (".png", b"\x89PNG"),
                                           (".pdf", b"%PDF")])
def test_render_writes_files(tmp_path, suffix, magic):
    fn = mlp_fn()
    path = fn.render(tmp_path / f"graph{suffix}", clusters=[fn.ops[1:5]])
    assert path == tmp_path / f"graph{suffix}"
    data = path.read_bytes()
    assert data.startswith(magic)
    if suffix == ".svg":
        text = data.decode()
        assert "kernel 0" in text and "f64[2,4]" in text and "reduce_sum" in text
    assert [p.name for p in tmp_path.iterdir()] == [path.name]   # no stray DOT source file


def test_render_rejects_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match=r"use a \.svg, \.png or \.pdf path"):
        render(mlp_fn(), tmp_path / "graph.gif")


def test_render_without_dot_program_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)
    with pytest.raises(RuntimeError) as info:
        render(mlp_fn(), tmp_path / "graph.svg")
    assert str(info.value) == NO_DOT
    assert "apt-get install graphviz" in NO_DOT and "brew install graphviz" in NO_DOT
    assert "to_dot() still works without it" in NO_DOT
    assert not (tmp_path / "graph.svg").exists()
    assert "digraph" in mlp_fn().to_dot()      # DOT source needs no executable


def test_render_when_graphviz_cannot_run_dot(tmp_path, monkeypatch):
    graphviz = pytest.importorskip("graphviz")

    def missing(*args, **kwargs):
        raise graphviz.ExecutableNotFound(["dot", "-Tsvg"])
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: "/usr/bin/dot")
    monkeypatch.setattr(graphviz.Source, "pipe", missing)
    with pytest.raises(RuntimeError, match="rendering needs the Graphviz 'dot' program"):
        ir_dot.render(mlp_fn(), tmp_path / "graph.png")


def test_render_with_empty_path_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        render(mlp_fn(), tmp_path / "graph.pdf")


def test_a_loop_body_is_drawn_as_a_cluster_next_to_its_op():
    s = Builder("step")
    w, h = s.param(T("f64", 3), "w"), s.param(T("f64", 3), "h")
    body = s.build([s.add1("tanh", [s.add1("mul", [w, h], loc="rnn.py:7")], loc="rnn.py:7")])
    b = Builder("loop")
    w, h0 = b.param(T("f64", 3), "w"), b.param(T("f64", 3), "h0")
    (h,) = b.add("scan", [w, h0], {"body": body, "length": 5, "num_carry": 1, "num_consts": 1,
                                   "reverse": False}, loc="rnn.py:9")
    src = to_dot(b.build([h]))
    lines = src.splitlines()
    start = lines.index("  subgraph cluster_op0_body {")
    end = lines.index("  }", start)
    cluster = lines[start:end]
    assert cluster[1] == '    label="body @step"; style="rounded"; color="#5b8fc7";'
    assert '    op0_body_p0 [label="%w\\nf64[3]", shape=ellipse, style=filled, ' \
           'fillcolor="#dbe9f6"];' in cluster
    assert any(line.startswith('    op0_body_op1 [label="%1 = tanh"') for line in cluster)
    assert '    op0_body_op0 -> op0_body_op1 [label="f64[3]"];' in cluster
    assert '    op0_body_op1 -> op0_body_r0 [label="f64[3]"];' in cluster
    assert "  op0 -> op0_body_p0 [style=dashed];" in lines[end:]
    assert "  op0 -> op0_body_p1 [style=dashed];" in lines[end:]
    assert 'op0 [label="%0 = scan\\nbody=@step\\nlength=5' in src
    assert "  p1 -> op0 [label=\"f64[3]\"];" in lines and "  op0 -> r0 [label=\"f64[3]\"];" in lines
