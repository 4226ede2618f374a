"""Random programs over the whole op set: eager, interp and numba agree on the value and the
gradients on their FIRST calls (each backend a fresh jit; the suite runs in poison mode, so a
buffer read before it is written shows as NaN), and the gradients match finite differences.
Programs include matrix products of 1-D and 2-D operands (matmul, dot, inner), gathers with
random (negative too) and out-of-range index arrays passed as arguments, and np.stack.

A program is a list of steps drawn by hypothesis; each step applies one NumPy-level operation to
values computed earlier (with broadcasting), keeping every value in a range where its
derivative is smooth (inputs in [-1, 1]; exp and log only behind tanh and abs + 1). The final
value is summed to a scalar, whose gradient with respect to every input is checked.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusegrad as fg
import fusegrad.nn as fnn
from fusegrad.testing import assert_backends_agree, check_grads

UNARY = {
    "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "neg": np.negative, "square": np.square,
    "exp_tanh": lambda a: np.exp(np.tanh(a)), "log_abs": lambda a: np.log(np.abs(a) + 1.0),
    "sqrt_abs": lambda a: np.sqrt(a * a + 0.5), "sigmoid": fnn.sigmoid,
    "expm1": lambda a: np.expm1(np.tanh(a)), "log1p": lambda a: np.log1p(np.tanh(a) * 0.5),
    "gelu": fnn.gelu, "gelu_tanh": lambda a: fnn.gelu(a, approximate=True),
    "erf": lambda a: fg.numpy.erf(a), "scale": lambda a: 0.5 * a + 0.25,
}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "div": lambda a, b: a / (b * b + 1.0), "max": np.maximum, "min": np.minimum,
    "where": lambda a, b: np.where(a > b, a * 2.0, b),
    "pow": lambda a, b: (a * a + 1.0) ** (b * 0.5),
}
REDUCE = {
    "sum": lambda a, ax: np.sum(a, axis=ax, keepdims=True),
    "mean": lambda a, ax: np.mean(a, axis=ax, keepdims=True),
    "max": lambda a, ax: np.max(a, axis=ax, keepdims=True),
    "softmax": lambda a, ax: fnn.softmax(a, axis=ax),
    "log_softmax": lambda a, ax: fnn.log_softmax(a, axis=ax),
    "logsumexp": lambda a, ax: fnn.logsumexp(a, axis=ax, keepdims=True),
    "layer_norm": lambda a, ax: fnn.layer_norm(a) if ax == a.ndim - 1 else a * 1.5,
    "cumsum": lambda a, ax: np.cumsum(a, axis=ax),
}
SHAPES = [(3, 4), (1, 4), (3, 1), (4,)]


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    n_inputs = draw(st.integers(1, 3))
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(n_inputs)]
    steps = []
    for _ in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "view"]))
        table = {"unary": UNARY, "binary": BINARY, "reduce": REDUCE,
                 "view": {"T": 0, "slice": 0, "concat": 0, "matmul": 0, "dot": 0,
                          "inner": 0, "gather": 0, "stack": 0}}[kind]
        name = draw(st.sampled_from(sorted(table)))
        steps.append((kind, name, draw(st.integers(0, 99)), draw(st.integers(0, 99))))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    args = [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]
    return steps, args, rng.integers(-4, 4, 5)


def dot(a, b):
    """np.dot of whatever ranks line up: matrix-vector, vector-matrix, vector-vector."""
    if a.ndim == 2 and b.ndim == 1 and a.shape[1] == b.shape[0]:
        return np.dot(a, b)
    if a.ndim == 1 and b.ndim == 2 and a.shape[0] == b.shape[0]:
        return np.dot(a, b)
    if a.ndim == 1 and b.ndim == 1 and a.shape == b.shape:
        return np.dot(a, b)
    return np.dot(a[0] if a.ndim == 2 else a, a.T if a.ndim == 2 else a)


def inner(a, b):
    return np.inner(a, b) if a.shape[-1] == b.shape[-1] else np.inner(a, a)


def run_program(steps, *inputs, idx):
    """The program's loss; idx (an int array, an argument) is the gathers' index."""
    values = list(inputs)
    for kind, name, i, j in steps:
        a, b = values[i % len(values)], values[j % len(values)]
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            b = a                       # keep the program well-typed
        if kind == "unary":
            values.append(UNARY[name](a))
        elif kind == "binary":
            values.append(BINARY[name](a, b))
        elif kind == "reduce":
            values.append(REDUCE[name](a, j % a.ndim))
        elif name == "T":
            values.append(a.T)
        elif name == "slice":
            values.append(a[..., ::2] if a.shape[-1] > 1 else a)
        elif name == "concat":
            values.append(np.concatenate([a, a * 0.5], axis=-1))
        elif name == "matmul" and a.ndim == 2 and b.ndim >= 1 and a.shape[1] == b.shape[0]:
            values.append(a @ b)
        elif name == "dot":
            values.append(dot(a, b))
        elif name == "inner":
            values.append(inner(a, b))
        elif name == "gather" and a.ndim:      # in range, negative entries too
            n = a.shape[-1]
            values.append(a[..., np.minimum(np.maximum(idx, -n), n - 1)])
        elif name == "gather_raw":
            values.append(a[..., idx])
        elif name == "stack":
            values.append(np.stack([a, a * 0.5]))
        else:
            values.append(a @ a.T if a.ndim == 2 else a * 0.5)
    return np.sum(values[-1] * values[-1]) + np.sum(values[-1])


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_agree_across_backends_and_with_finite_differences(program):
    steps, args, idx = program
    f32 = args[0].dtype == np.float32

    def loss(*xs):
        return run_program(steps, *xs[:len(args)], idx=xs[-1])

    argnums = tuple(range(len(args)))
    tol = dict(rtol=2e-3, atol=2e-4) if f32 else dict(rtol=1e-9, atol=1e-10)
    assert_backends_agree(fg.value_and_grad(loss, argnums=argnums), *args, idx, **tol)
    check_grads(lambda *xs: loss(*xs, idx), [a.astype(np.float64) for a in args], order=1)


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from([4, 5, 9, -5, -9, 10**9]))
def test_random_gathers_out_of_range_raise_on_every_backend(program, bad):
    steps, args, idx = program
    steps = steps + [("view", "gather_raw", 0, 0)]
    idx = idx.copy()
    idx[len(steps) % len(idx)] = bad

    def loss(*xs):
        return run_program(steps, *xs[:len(args)], idx=xs[-1])

    for backend in ("eager", "interp", "numba"):
        with pytest.raises(IndexError, match="out of bounds for axis"):
            fg.jit(fg.grad(loss), backend=backend)(*args, idx)


def test_the_program_generator_covers_every_op():
    covered = set(UNARY) | set(BINARY) | set(REDUCE)
    assert len(covered) == len(UNARY) + len(BINARY) + len(REDUCE) - 1  # "max" is in two
    for name in UNARY:
        x = np.linspace(-1, 1, 12).reshape(3, 4)
        assert np.all(np.isfinite(UNARY[name](x)))


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
