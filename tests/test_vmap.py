"""fg.vmap: compositions (nested, per-example gradients, grad of vmap, jvp), in_axes and
out_axes pytrees, chunk_size, the batched IR, and JAX's errors naming the argument."""

import numpy as np
import pytest

import fusegrad as fg

RNG = np.random.default_rng(3)
W, X, Y = RNG.normal(size=(4, 3)), RNG.normal(size=(5, 3)), RNG.normal(size=(5, 4))


def loss(w, x, y):
    return ((np.tanh(w @ x) - y) ** 2).sum()


PER_EXAMPLE = np.stack([fg.grad(loss)(W, x, y) for x, y in zip(X, Y)])


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_per_example_gradients_and_grad_of_vmap(backend):
    jit = fg.jit
    got = jit(fg.vmap(fg.grad(loss), in_axes=(None, 0, 0)), backend=backend)(W, X, Y)
    np.testing.assert_allclose(got, PER_EXAMPLE, rtol=1e-12)
    total = jit(fg.grad(lambda w: fg.vmap(loss, in_axes=(None, 0, 0))(w, X, Y).sum()),
                backend=backend)(W)
    np.testing.assert_allclose(total, PER_EXAMPLE.sum(0), rtol=1e-12)


@pytest.mark.parametrize("backend", ["eager", "interp"])
def test_nested_vmap_pytrees_and_out_axes(backend):
    def f(p, x):
        return {"s": p["a"] * x + np.sin(x), "t": (p["b"] * x).sum()}
    p = {"a": X[0], "b": X[1]}
    nested = fg.vmap(fg.vmap(f, in_axes=({"a": None, "b": None}, 0)), in_axes=(None, 0),
                     out_axes={"s": 1, "t": 0})
    out = fg.jit(nested, backend=backend)(p, np.stack([X, 2 * X]))
    want = [[f(p, x) for x in xs] for xs in (X, 2 * X)]
    assert out["s"].shape == (5, 2, 3)
    np.testing.assert_allclose(out["s"], np.stack([[w["s"] for w in ws] for ws in want], 1))
    np.testing.assert_allclose(out["t"], [[w["t"] for w in ws] for ws in want])


@pytest.mark.parametrize("chunk", [1, 2, 5, 7])
def test_chunk_size_gives_the_same_values(chunk):
    f = fg.jit(fg.vmap(fg.grad(loss), in_axes=(None, 0, 0), chunk_size=chunk),
               backend="interp")
    np.testing.assert_allclose(f(W, X, Y), PER_EXAMPLE, rtol=1e-12)


def test_the_batched_ir_stacks_rows_into_one_matmul():
    ir = fg.jit(fg.vmap(lambda x: np.tanh(x @ W.T), in_axes=0), backend="interp").lower(X).ir
    prims = [op.prim for op in ir.ops]
    assert prims.count("matmul") == 1 and "scan" not in prims
    (mm,) = [op for op in ir.ops if op.prim == "matmul"]
    assert mm.inputs[0].type.shape == (5, 3)


def test_jvp_of_vmap_and_vmap_of_jvp():
    f = fg.vmap(lambda x: np.sin(x) * x)
    _, dot = fg.jit(lambda x, t: fg.jvp(f, (x,), (t,)), backend="interp")(X, Y[:, :3])
    np.testing.assert_allclose(dot, (np.cos(X) * X + np.sin(X)) * Y[:, :3], rtol=1e-12)
    cols = fg.jit(fg.vmap(lambda t: fg.jvp(np.tanh, (X[0],), (t,))[1]), backend="interp")(
        np.eye(3))
    np.testing.assert_allclose(cols, np.diag(1 - np.tanh(X[0]) ** 2), rtol=1e-12)


def test_bad_axes_name_the_argument():
    f = fg.vmap(lambda a, b: a + b)
    with pytest.raises(ValueError, match=r"len\(in_axes\)=1, len\(args\)=2"):
        fg.vmap(lambda a, b: a + b, in_axes=(0,))(X, X)
    with pytest.raises(ValueError, match="map argument 1 along axis 2, which implies that its "
                                         "rank should be at least 3, but is only 2"):
        fg.vmap(lambda a, b: a + b, in_axes=(0, 2))(X, X)
    with pytest.raises(ValueError, match="inconsistent sizes .* has size 5, .* has size 4"):
        f(X, W)
    with pytest.raises(ValueError, match="at least one non-None value in in_axes"):
        fg.vmap(np.sin, in_axes=None)(X)
    with pytest.raises(ValueError, match="mapped output .* but out_axes is None"):
        fg.vmap(np.sin, out_axes=None)(X)
    with pytest.raises(ValueError, match="out_axes=2 is out of range for output leaf 0 of "
                                         "rank 2"):
        fg.vmap(np.sin, out_axes=2)(X)
    with pytest.raises(ValueError, match="in_axes specification for argument 0 must be a "
                                         "tree prefix of the argument"):
        fg.vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": X})
    with pytest.raises(ValueError, match="map argument 0 along axis -3, which implies that its "
                                         "rank should be at least 3"):
        fg.vmap(np.sin, in_axes=-3)(X)
