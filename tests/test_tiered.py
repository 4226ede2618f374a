"""Tiered execution: a signature's first call runs the optimized IR on the interpreter, its
second queues a compile on the one compile worker (fusegrad/tiering.py), and later calls run
the compiled entry once it is ready.

The compile is held on an Event here, so "the call did not wait for Numba" is a fact the
test arranges, not a timing it measures. tests/test_tiered_processes.py checks the worker
processes: their number, their exit, forks and threads."""

import os
import sys
import threading
import warnings

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.codegen as codegen
from fusegrad.tiering import COMPILES, Tiered


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
    for _ in range(3):                   # queued on the second; held: all three are interp's
        value, grad = f(X, W)
        np.testing.assert_allclose(value, want_value, rtol=1e-13)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12)
    assert started.wait(timeout=120)
    tier = next(iter(f._entries.values()))[0].executable
    assert isinstance(tier, Tiered) and not tier.ready and tier.compiled is None
    release.set()
    compiled = tier.wait()
    assert tier.ready and compiled.kind == "kernel_ir"
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
        assert f(X, W) == first          # queues the compile
    release.set()
    tier = next(iter(f._entries.values()))[0].executable
    with pytest.raises(RuntimeError, match="no LLVM today"):
        tier.wait()
    with pytest.warns(RuntimeWarning, match="compiling @loss failed.*no LLVM"):
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


def test_a_program_with_host_steps_switches_to_compiled_code(tiered_on):
    """np.linalg.solve is a LAPACK host step between compiled parts, all compiled before the
    switch."""
    a = np.array([[3.0, 0.5, 0.1], [0.2, 2.0, 0.3], [0.1, 0.4, 4.0]])
    b = np.array([1.0, -2.0, 0.5])

    def f(a, b):
        return np.sum(np.tanh(np.linalg.solve(a, b)))
    g = fg.jit(fg.grad(f, argnums=(0, 1)))
    first = g(a, b)
    g(a, b)
    assert COMPILES.join(timeout=240)
    tier = next(iter(g._entries.values()))[0].executable
    assert tier.compiled.kind == "kernel_ir" and tier.error is None
    later = g(a, b)
    want = fg.jit(fg.grad(f, argnums=(0, 1)), backend="interp")(a, b)
    for x, y, z in zip(first, later, want):
        np.testing.assert_array_equal(x, z)          # the first call was the interpreter's
        np.testing.assert_allclose(y, z, rtol=1e-12)


def test_compiling_changes_no_process_wide_state(tiered_on, held_compile):
    """No switch interval of the compile's own while it runs, and no environment variable
    set behind the user's back (OpenMP's defaults are set only while Numba loads it)."""
    release, started = held_compile
    interval, environment = sys.getswitchinterval(), dict(os.environ)
    f = fg.jit(fg.grad(loss, argnums=1))
    f(X, W)
    f(X, W)
    assert started.wait(timeout=120)
    assert sys.getswitchinterval() == interval
    release.set()
    next(iter(f._entries.values()))[0].executable.wait()
    big = np.linspace(0.0, 1.0, 1 << 17)       # a chunked kernel: Numba's threads start
    fg.jit(lambda x: np.sum(np.exp(np.sin(x) * x)), tiered=False)(big)
    assert sys.getswitchinterval() == interval and dict(os.environ) == environment


def test_f64_arrays_compile_once_through_the_kernel_ir(tiered_on, monkeypatch, capfd):
    """A function of f64 arrays (the loop nests' before the kernel IR) compiles once, with
    llvmlite in the slot thread: no second tier recompiles it with Numba later."""
    monkeypatch.setenv("FUSEGRAD_LOG", "compile")
    f = fg.jit(fg.value_and_grad(loss, argnums=1))
    x = np.linspace(-0.5, 1.5, 4096)
    want_value, want_grad = reference(x, W)
    f(x, W)
    f(x, W)
    assert COMPILES.join(timeout=240)
    tier = next(iter(f._entries.values()))[0].executable
    assert tier.compiled.kind == "kernel_ir"
    value, grad = f(x, W)
    log = capfd.readouterr().err
    assert log.count("entry is ready") == 1 and "calls switch from interp" in log
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12)


def test_after_the_switch_calls_go_to_the_compiled_run_itself(tiered_on):
    """The fast path installed on the first (interpreted) call is repointed at the compiled
    entry's run when calls switch: no Tiered and Executable layers a call."""
    f = fg.jit(fg.value_and_grad(loss, argnums=1))
    x = np.linspace(-0.5, 1.5, 8)
    f(x, W)
    f(x, W)
    assert COMPILES.join(timeout=240)
    value, grad = f(x, W)                        # the switch
    tier = next(iter(f._entries.values()))[0].executable
    assert [run for run, _ in f._fast.values()] == [tier.compiled.run]
    for got, want in zip((value, grad, *f(x, W)), reference(x, W) * 2):
        np.testing.assert_allclose(got, want, rtol=1e-12)
