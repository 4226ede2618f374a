"""Tiered execution: fg.jit's first calls run the optimized IR on the interpreter while Numba
compiles in a background thread, and later calls run the compiled entry once it is ready.

The compile is held on an Event here, so "the first call did not wait for Numba" is a fact the
test arranges, not a timing it measures."""

import sys
import threading
import warnings

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.codegen as codegen
from fusegrad.api import Tiered


def loss(x, w):
    return np.sum(np.tanh(x * w) * np.exp(-x * x))


def reference(x, w):
    value = np.sum(np.tanh(x * w) * np.exp(-x * x))
    t = np.tanh(x * w)
    gw = np.sum((1 - t * t) * x * np.exp(-x * x))
    return value, gw


X = np.linspace(-0.5, 1.5, 9)
W = 0.7


@pytest.fixture
def tiered_on(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_TIERED", "1")


@pytest.fixture
def held_compile(monkeypatch):
    """Numba's compile blocks until the test releases it."""
    release, started = threading.Event(), threading.Event()
    real = codegen.compile_numba

    def held(ir, *args, **kwargs):
        started.set()
        assert release.wait(timeout=120), "the test never released the compile"
        return real(ir, *args, **kwargs)
    monkeypatch.setattr(codegen, "compile_numba", held)
    return release, started


def test_the_first_calls_run_on_the_interpreter_while_numba_compiles(tiered_on, held_compile,
                                                                     capfd, monkeypatch):
    release, started = held_compile
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    f = fg.jit(fg.value_and_grad(loss, argnums=1))
    want_value, want_grad = reference(X, W)
    for _ in range(2):                   # the compile is still held: both calls are interp's
        value, grad = f(X, W)
        np.testing.assert_allclose(value, want_value, rtol=1e-13)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12)
    assert started.wait(timeout=60)
    tier = next(iter(f._entries.values()))[0].executable
    assert isinstance(tier, Tiered) and not tier.ready and tier.compiled is None
    release.set()
    compiled = tier.wait()
    assert tier.ready and compiled.kernels >= 1
    capfd.readouterr()
    value, grad = f(X, W)                # now the compiled entry
    assert "calls switch from interp" in capfd.readouterr().err
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(compiled([X, np.asarray(W)])[1]), grad)


def test_lower_waits_for_the_compile(tiered_on):
    f = fg.jit(fg.grad(loss, argnums=1))
    lowered = f.lower(X, W)
    assert not isinstance(lowered.executable, Tiered)
    assert lowered.source.startswith(("# fusegrad", "; fusegrad")) and lowered.kernels >= 1
    np.testing.assert_allclose(f(X, W), reference(X, W)[1], rtol=1e-12)


def test_tiered_false_and_the_environment_compile_before_the_first_call(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_TIERED", "1")
    f = fg.jit(loss, tiered=False)
    f(X, W)
    assert not isinstance(next(iter(f._entries.values()))[0].executable, Tiered)
    monkeypatch.setenv("FUSEGRAD_TIERED", "0")
    g = fg.jit(loss)
    g(X, W)
    assert not isinstance(next(iter(g._entries.values()))[0].executable, Tiered)


def test_the_interpreter_tier_is_only_for_the_numba_backend(tiered_on):
    f = fg.jit(loss, backend="interp")
    f(X, W)
    assert type(next(iter(f._entries.values()))[0].executable).__name__ == "Interpreted"


def test_a_failed_compile_warns_and_stays_on_the_interpreter(tiered_on, monkeypatch):
    release = threading.Event()

    def broken(ir, *args, **kwargs):
        assert release.wait(timeout=120)
        raise RuntimeError("no LLVM today")
    monkeypatch.setattr(codegen, "compile_numba", broken)
    f = fg.jit(loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the compile has not failed yet
        first = f(X, W)
    release.set()
    tier = next(iter(f._entries.values()))[0].executable
    with pytest.raises(RuntimeError, match="no LLVM today"):
        tier.wait()
    with pytest.warns(RuntimeWarning, match="compiling @loss with Numba failed.*no LLVM"):
        again = f(X, W)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # said once, not on every call
        assert f(X, W) == again == first
    np.testing.assert_allclose(first, reference(X, W)[0], rtol=1e-13)


def test_keyword_calls_keep_the_setting(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_TIERED", "1")
    f = fg.jit(lambda x, scale=1.0: np.sum(x * scale), tiered=False)
    assert f(X, scale=2.0) == pytest.approx(2 * np.sum(X))
    inner = next(iter(f._by_keywords.values()))
    assert not isinstance(next(iter(inner._entries.values()))[0].executable, Tiered)


def test_a_program_with_host_steps_switches_to_compiled_segments(tiered_on):
    """np.linalg.solve is a LAPACK host step: the compiled module's segments compile on their
    first run, which the background thread makes with the first call's arguments."""
    a = np.array([[3.0, 0.5, 0.1], [0.2, 2.0, 0.3], [0.1, 0.4, 4.0]])
    b = np.array([1.0, -2.0, 0.5])

    def f(a, b):
        return np.sum(np.tanh(np.linalg.solve(a, b)))
    g = fg.jit(fg.grad(f, argnums=(0, 1)))
    first = g(a, b)
    tier = next(iter(g._entries.values()))[0].executable
    compiled = tier.wait()
    assert not compiled.precompiled
    later = g(a, b)
    want = fg.jit(fg.grad(f, argnums=(0, 1)), backend="interp")(a, b)
    for x, y, z in zip(first, later, want):
        np.testing.assert_array_equal(x, z)          # the first call was the interpreter's
        np.testing.assert_allclose(y, z, rtol=1e-12)


def test_the_switch_interval_is_short_while_compiling_and_restored_after(tiered_on,
                                                                         held_compile):
    """While a compile thread runs, Python hands the GIL over every 0.1 ms, so the thread's
    many short calls into LLVM do not each wait 5 ms for a caller that keeps calling; the
    process's own interval comes back when the last compile ends."""
    release, started = held_compile
    before = sys.getswitchinterval()
    f = fg.jit(fg.grad(loss, argnums=1))
    f(X, W)
    assert started.wait(timeout=60)
    assert sys.getswitchinterval() == pytest.approx(1e-4)
    release.set()
    next(iter(f._entries.values()))[0].executable.wait()
    assert sys.getswitchinterval() == before


def test_loop_nests_that_numba_runs_faster_switch_to_it_later(tiered_on, monkeypatch, capfd):
    """Loop nests first (compiled in the thread at once), then Numba, compiled in a child, for
    a function the cost model says Numba runs notably faster (here: any)."""
    from fusegrad.codegen import nests
    monkeypatch.setattr(nests, "NUMBA_SHORT_OPS", 0)            # nests take the function...
    monkeypatch.setattr(nests, "NUMBA_LIBM_NS", float("inf"))
    monkeypatch.setattr(nests, "NUMBA_LATER_NS", 0)             # ... and Numba is better later
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    f = fg.jit(fg.value_and_grad(loss, argnums=1))
    want_value, want_grad = reference(X, W)
    f(X, W)
    tier = next(iter(f._entries.values()))[0].executable
    assert tier.wait().kind == "nests"
    tier._thread.join(timeout=240)
    assert tier.compiled.kind == "numba" and "def entry" in tier.compiled.source
    assert "calls switch from loop nests" in capfd.readouterr().err
    value, grad = f(X, W)
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12)
