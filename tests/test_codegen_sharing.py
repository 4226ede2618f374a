"""Unrolled programs (issue 15) whose buffers the runner reuses (its arenas): the values against
the interpreter, and reused buffers never clobber a result the caller still holds, nor another
thread's call."""

import threading

import numpy as np
import pytest

import fusegrad as fg

rng = np.random.default_rng(15)


def rnn(h, w, b):
    """An unrolled loop: the same kernels every step (a sum down the columns of an outer
    sum ends one), on other buffers."""
    for _ in range(6):
        h = np.tanh(np.sum(np.exp(h[:, None] + w), axis=0) + b)
    return np.sum(h * h)


W = rng.standard_normal((13, 13)) / 4


def chain(y):
    """A chain whose gradient needs the input of every sin of the first kernel (a matrix
    product, a BLAS call, ends it): that kernel's residuals."""
    for i in range(16):
        y = np.sin(y) if i % 2 else y * 1.0001
    y = np.sin(W @ y)
    return np.sum(y * y)


@pytest.fixture(scope="module")
def rnn_grad():
    return fg.jit(fg.value_and_grad(rnn, argnums=(0, 1, 2)), backend="numba")


@pytest.fixture(scope="module")
def chain_grad():
    return fg.jit(fg.value_and_grad(chain), backend="numba")


def rnn_args(n=7):
    return rng.standard_normal(n), rng.standard_normal((n, n)), rng.standard_normal(n)


def close(got, want):
    for g, w in zip(fg.tree.flatten(got)[0], fg.tree.flatten(want)[0]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)


def test_unrolled_loops_match_the_interpreter(rnn_grad, chain_grad):
    args = rnn_args()
    close(rnn_grad(*args), fg.jit(fg.value_and_grad(rnn, argnums=(0, 1, 2)),
                                  backend="interp")(*args))
    x = np.linspace(0.1, 0.9, 13)
    close(chain_grad(x), fg.jit(fg.value_and_grad(chain), backend="interp")(x))


def test_results_held_by_the_caller_survive_the_next_call(rnn_grad, chain_grad):
    for f, args, other in ((rnn_grad, rnn_args(), rnn_args()),
                           (chain_grad, (np.linspace(0.1, 0.9, 13),), (np.linspace(1, 2, 13),))):
        first = f(*args)
        kept = [np.array(a, copy=True) for a in fg.tree.flatten(first)[0]]
        f(*other)
        for held, copy in zip(fg.tree.flatten(first)[0], kept):
            np.testing.assert_array_equal(held, copy)
        close(f(*args), first)


def test_threads_calling_at_once_each_get_their_own_buffers(rnn_grad):
    inputs = [rnn_args() for _ in range(4)]
    want = [rnn_grad(*a) for a in inputs]
    got, barrier = [None] * 4, threading.Barrier(4)

    def call(i):
        barrier.wait()
        for _ in range(20):
            got[i] = rnn_grad(*inputs[i])
    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        close(g, w)
