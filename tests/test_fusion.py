"""The fusion pass, on traced and hand-built IR (no compilation here): the kernels
`lowered.clusters` draws.

Checks the kernel grouping the issue asks for (the W1 gradient is one kernel; row-wise
composites and their gradients are one kernel; matmul is a BLAS step with its elementwise
neighbours fused), the structural invariants every grouping must keep (levels order the nodes,
clusters partition the fused ops, a kernel never reads its own output).
"""


import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn as fnn
import fusegrad.numpy as fnp
from fusegrad.ir import Builder, TensorType
from fusegrad.passes.fusion import INLINE, MAX_KERNEL_OPS, NODE, SMALL_DOT_K, Kernel, Step, fuse
from fusegrad.passes.pipeline import optimize
from fusegrad.transforms import value_and_grad

rng = np.random.default_rng(0)


def optimized(fun, *args, argnums=None):
    f = fun if argnums is None else value_and_grad(fun, argnums=argnums)
    return optimize(fg.make_ir(f)(*args))


def w1(x, w, b):
    return np.sum(np.tanh(x * w + b) * fnp.sigmoid(x))


def check_invariants(fusion):
    """Levels order the nodes; each read comes from an earlier node or the caller; the
    clusters partition the kernel members; no kernel reads a buffer it writes itself."""
    fn = fusion.fn
    position = {node: i for i, node in enumerate(fusion.nodes)}
    levels = [node.level for node in fusion.nodes]
    assert levels == sorted(levels)
    members = [op for k in fusion.kernels for op in k.ops]
    assert len(members) == len(set(members))
    for node in fusion.nodes:
        for v in fusion.reads(node):
            home = fusion.buffer_of(v)
            if home is None:
                assert v in fn.params or fusion.producer[v].prim == "constant"
            else:
                assert home is not node and position[home] < position[node]
                assert home.level < node.level
                assert v in fusion.outputs[home]
    for op in fn.ops:           # every computing op is in exactly one kernel or step
        if fusion.kind[op.out] == NODE:
            assert op in members or any(isinstance(n, Step) and n.op is op
                                        for n in fusion.nodes)
    return fusion


def test_w1_gradient_is_one_kernel_with_four_outputs():
    x, w, b = (rng.standard_normal(16) for _ in range(3))
    fusion = check_invariants(fuse(optimized(w1, x, w, b, argnums=(0, 1, 2))))
    assert len(fusion.nodes) == 1
    (k,) = fusion.kernels
    assert len(fusion.outputs[k]) == 4 and k.split in (None, 0)
    assert [op.prim for op in k.ops].count("reduce_sum") == 1


def test_elementwise_chain_and_broadcast_bias_fuse():
    x, b = rng.standard_normal((4, 5)), rng.standard_normal(5)
    fusion = check_invariants(fuse(optimized(lambda x, b: np.exp(x + b) * 2.0 - x, x, b)))
    assert len(fusion.kernels) == 1 and not [n for n in fusion.nodes if isinstance(n, Step)]


@pytest.mark.parametrize("name, fun", [
    ("softmax", lambda x: fnn.softmax(x, axis=-1)),
    ("log_softmax", lambda x: fnn.log_softmax(x, axis=-1)),
    ("logsumexp", lambda x: fnn.logsumexp(x, axis=-1)),
    ("layer_norm", lambda x: fnn.layer_norm(x)),
])
def test_row_composites_are_one_row_kernel_forward_and_backward(name, fun):
    x, c = rng.standard_normal((6, 7)), rng.standard_normal((6, 7))
    fusion = check_invariants(fuse(optimized(fun, x)))
    assert len(fusion.nodes) == 1 and fusion.kernels[0].split == 1, name
    loss = (lambda x: np.sum(fun(x) * c[:, 0])) if name == "logsumexp" else \
        (lambda x: np.sum(fun(x) * c))
    fusion = check_invariants(fuse(optimized(loss, x, argnums=0)))
    assert len(fusion.nodes) == 1 and fusion.kernels[0].split == 1, name


def test_cross_entropy_gradient_is_two_row_kernels():
    logits, targets = rng.standard_normal((5, 4)), np.array([0, 3, 1, 1, 2])
    fusion = check_invariants(fuse(optimized(
        lambda z: fnn.cross_entropy(z, targets), logits, argnums=0)))
    assert len(fusion.kernels) <= 2 and not [n for n in fusion.nodes if isinstance(n, Step)]


def test_softmax_then_layer_norm_gradient_is_one_kernel():
    x, c = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((8, 16))
    fusion = check_invariants(fuse(optimized(
        lambda x: np.sum(fnn.softmax(fnn.layer_norm(x)) * c.astype(np.float32)), x, argnums=0)))
    assert len(fusion.nodes) == 1


def test_mlp_step_matmuls_are_blas_and_transposes_are_views():
    n = SMALL_DOT_K + 2                  # every product sums more terms than a loop takes...
    W1, b1 = rng.standard_normal((n, n - 1)), rng.standard_normal(n - 1)
    W2, X = rng.standard_normal((n - 1, 3)), rng.standard_normal((n + 2, n))
    y = rng.integers(0, 3, n + 2)

    def loss(W1, b1, W2, X):
        return fnn.cross_entropy(np.tanh(X @ W1 + b1) @ W2, y)
    fusion = check_invariants(fuse(optimized(loss, W1, b1, W2, X, argnums=(0, 1, 2))))
    steps = [n for n in fusion.nodes if isinstance(n, Step)]
    assert sum(s.kind == "blas" for s in steps) == 4      # 2 forward, 2 backward
    assert all(s.kind in ("blas", "view") for s in steps)
    assert len(fusion.kernels) <= 5                       # with the copy of W2.T
    # ... but dH = dl @ W2.T, over 3 classes: it is computed where it is multiplied by 1 - h*h
    dot = next(k for k in fusion.kernels if any(op.prim == "matmul" for op in k.ops))
    assert {"mul", "sub"} <= {op.prim for op in dot.ops}
    first = next(k for k in fusion.kernels if any(op.prim == "tanh" for op in k.ops))
    assert {"add", "tanh"} <= {op.prim for op in first.ops}   # bias add and tanh: one loop
    # 1 - h*h is computed where the backward pass multiplies by it, from h (stored for a
    # matmul anyway), not stored by the first kernel and read back
    h = next(op.out for op in first.ops if op.prim == "tanh")
    assert fusion.outputs[first] == [h]
    backward = next(k for k in fusion.kernels if any(op.prim == "mul" and h in op.inputs
                                                     for op in k.ops))
    assert backward is not first and h in fusion.reads(backward)


def test_sinking_never_makes_a_kernel_read_more_buffers():
    """An elementwise value read by one later kernel moves there only when that kernel reads
    no more buffers than before: here moving a*b would trade one read for two."""
    b = Builder("sink")
    x, a, c = (b.param(TensorType("f64", (8,)), n) for n in "xac")
    s = b.add1("sin", [x])
    ab = b.add1("mul", [s, a])                # read by the second kernel only
    r = b.add1("reduce_sum", [b.add1("add", [s, c])], {"axes": (0,)})
    rb = b.add1("broadcast_in_dim", [r], {"shape": (8,), "dims": ()})
    out = b.add1("mul", [ab, rb])
    fusion = check_invariants(fuse(b.build([out, s])))
    first = fusion.node_of[s]
    assert fusion.node_of[ab] is first    # needs s and a: stays, the later kernel reads ab


def test_index_maps_of_inputs_are_folded_into_loads():
    x, v = rng.standard_normal((3, 4)), rng.standard_normal(4)
    fn = optimized(lambda x, v: np.concatenate([x.T[1:], np.broadcast_to(v, (3, 4)).T], 0) * 2,
                   x, v)
    fusion = check_invariants(fuse(fn))
    assert len(fusion.nodes) == 1
    inline = {fusion.producer[v].prim for v in fusion.kind
              if fusion.kind[v] == INLINE and v in fusion.producer}
    assert {"transpose", "slice", "concatenate"} <= inline


def test_reshape_is_a_view_and_reduction_results_feed_later_kernels():
    x = rng.standard_normal((4, 6))
    fn = optimized(lambda x: np.exp(x.reshape(6, 4)).sum(0) + np.max(x), x)
    fusion = check_invariants(fuse(fn))
    assert any(isinstance(n, Step) and n.kind == "view" for n in fusion.nodes)


def test_column_reduction_accumulates_into_its_output_in_the_same_loop():
    x = rng.standard_normal((5, 3))
    fusion = check_invariants(fuse(optimized(lambda x: (np.tanh(x).sum(0), np.tanh(x) * 2), x)))
    assert len(fusion.kernels) == 1


def test_consumer_of_a_column_reduction_starts_a_new_kernel():
    x = rng.standard_normal((5, 3))
    fusion = check_invariants(fuse(optimized(lambda x: x - np.mean(x, axis=0), x)))
    first, *_, last = fusion.kernels
    assert [op.prim for op in first.ops] == ["reduce_sum"] and first.split is None
    assert [op.prim for op in last.ops] == ["sub"] and first.level < last.level


def test_fusion_of_a_long_chain_is_linear():
    b = Builder("long")
    x = b.param(TensorType("f64", (16,)), "x")
    y = x
    for i in range(10_000):
        y = b.add1("sin" if i % 2 else "mul", [y] if i % 2 else [y, x])
    fn = b.build([b.add1("reduce_sum", [y], {"axes": (0,)})])
    fusion = fuse(fn)       # its time is benchmarks/run.py's W4 trace+compile figure
    assert len(fusion.nodes) == -(-10_001 // MAX_KERNEL_OPS)      # split to bound compile time
    check_invariants(fusion)


def test_clusters_draw_as_dot_subgraphs():
    x, w, b = (rng.standard_normal(4) for _ in range(3))
    fn = optimized(w1, x, w, b, argnums=(0, 1, 2))
    dot = fn.to_dot(clusters=fuse(fn).clusters)
    assert "subgraph cluster_0" in dot and "cluster_1" not in dot


def test_kernel_for_a_column_reduction_is_not_a_row_kernel():
    x = rng.standard_normal((5, 3))
    fusion = fuse(optimized(lambda x: np.sum(x, axis=0), x))
    (k,) = fusion.kernels
    assert isinstance(k, Kernel) and k.split is None
