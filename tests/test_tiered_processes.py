"""The compile worker in the user's process (fusegrad/tiering.py, codegen/worker.py): one worker
at a time, compiles only for signatures used again, nothing left after exit, forks, threads,
redefinitions, a killed worker and an unwritable cache.

Process counts are asserted from the library's own records (the live workers, the workers
ever started), and every wait is a guard against a hang, not a measured time."""

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.codegen import worker as worker_module
from fusegrad.tiering import COMPILES, Tiered

X32 = np.linspace(-1.0, 1.0, 7, dtype=np.float32)   # compiled by Numba in the worker


def _loss(k):
    """A distinct small function for each k (its own IR, its own compile)."""
    def loss(x):
        return np.sum(np.sin(x * np.float32(k + 1)) * x)
    loss.__name__ = f"loss{k}"
    return loss


def _want(k, x):
    return np.sum(np.sin(x * np.float32(k + 1)) * x)


def _tier(jitted) -> Tiered:
    return next(iter(jitted._entries.values()))[0].executable


@pytest.fixture(autouse=True)
def numba_worker(monkeypatch):
    """The tests are about the Numba compile worker, which compiles the kernel IR's Numba
    rendering (the LLVM one compiles in the slot's thread): FUSEGRAD_RENDERER=numba here and
    in children."""
    monkeypatch.setenv("FUSEGRAD_RENDERER", "numba")


@pytest.fixture
def tiered_on(monkeypatch):
    """Tiered execution, rendered to Numba (numba_worker): compiled in the worker process."""
    monkeypatch.setenv("FUSEGRAD_TIERED", "1")
    monkeypatch.delenv("FUSEGRAD_COMPILE_WORKERS", raising=False)
    yield
    assert COMPILES.join(timeout=600), "compiles were left running"


@pytest.fixture
def started(monkeypatch):
    """Every Worker started, and the most alive at once."""
    record = {"started": 0, "most": 0}
    real = worker_module.Worker.__init__

    def counting(self):
        real(self)
        record["started"] += 1
        record["most"] = max(record["most"], len(worker_module._LIVE))
    monkeypatch.setattr(worker_module.Worker, "__init__", counting)
    return record


@pytest.fixture
def held_slot(monkeypatch):
    """The first compile a slot takes blocks until released; every compile is recorded."""
    release, holding, compiled = threading.Event(), threading.Event(), []
    real = Tiered.compile

    def compile_(self, worker):
        compiled.append(self.ir.name)
        if not holding.is_set():
            holding.set()
            assert release.wait(timeout=600)
        return real(self, worker)
    monkeypatch.setattr(Tiered, "compile", compile_)
    yield release, holding, compiled
    release.set()


def test_a_signature_called_once_is_never_compiled(tiered_on, started):
    f = fg.jit(_loss(0))
    np.testing.assert_allclose(f(X32), _want(0, X32), rtol=1e-6)
    tier = _tier(f)
    assert not tier.queued and tier.compiled is None and tier.calls == 1
    assert COMPILES.join(timeout=60) and started["started"] == 0


def test_the_second_call_queues_one_compile_and_later_calls_switch(tiered_on):
    f = fg.jit(_loss(1))
    first, second = f(X32), f(X32)
    assert _tier(f).queued
    assert COMPILES.join(timeout=600)
    assert _tier(f).compiled.kind == "kernel_ir" and _tier(f).error is None
    third = f(X32)
    for value in (first, second, third):
        np.testing.assert_allclose(value, _want(1, X32), rtol=1e-6)


def test_many_functions_compile_on_one_worker_at_a_time(tiered_on, started):
    functions = [fg.jit(_loss(k)) for k in range(2, 7)]
    for _ in range(2):
        for f in functions:
            f(X32)
    assert COMPILES.join(timeout=600)
    assert started["most"] <= 1 and started["started"] <= 1
    for k, f in zip(range(2, 7), functions):
        assert _tier(f).compiled is not None
        np.testing.assert_allclose(f(X32), _want(k, X32), rtol=1e-6)


def test_eight_threads_calling_a_new_function_compile_it_once(tiered_on, held_slot):
    release, holding, compiled = held_slot
    f = fg.jit(_loss(7))
    results, barrier = [], threading.Barrier(8)

    def call():
        barrier.wait()
        for _ in range(3):
            results.append(f(X32))
    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    release.set()
    assert COMPILES.join(timeout=600)
    assert compiled == ["loss7"] and f.cache_size == 1 and len(results) == 24
    for value in results + [f(X32)]:
        np.testing.assert_allclose(value, _want(7, X32), rtol=1e-6)


def test_compiles_of_collected_functions_are_dropped(tiered_on, held_slot):
    """A notebook cell run 20 times: each run redefines and re-jits the function and calls it
    twice. While the first compile is held, the later ones queue; each is dropped when its
    function is collected, so only the first and the last one compile."""
    release, holding, compiled = held_slot
    for run in range(20):
        f = fg.jit(_loss(8 + run % 2))
        f(X32)
        f(X32)
        gc.collect()
    assert holding.wait(timeout=600)
    release.set()
    assert COMPILES.join(timeout=600)
    assert len(compiled) == 2
    np.testing.assert_allclose(f(X32), _want(8 + 19 % 2, X32), rtol=1e-6)


def test_a_killed_worker_leaves_the_function_on_the_interpreter(tiered_on, monkeypatch):
    """The worker dies mid-compile: one RuntimeWarning names the function, its calls stay
    right on the interpreter, and the next compile starts a new worker."""
    real = worker_module.Worker.compile

    def killed(self, fn, log):
        os.kill(self.proc.pid, signal.SIGKILL)
        return real(self, fn, log)
    monkeypatch.setattr(worker_module.Worker, "compile", killed)
    f = fg.jit(_loss(10))
    f(X32)
    f(X32)
    assert COMPILES.join(timeout=600)
    with pytest.warns(RuntimeWarning, match=r"compiling @loss10 failed.*compile process exited"):
        value = f(X32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # said once
        again = f(X32)
    for v in (value, again):
        np.testing.assert_allclose(v, _want(10, X32), rtol=1e-6)
    monkeypatch.setattr(worker_module.Worker, "compile", real)
    g = fg.jit(_loss(11))
    g(X32)
    g(X32)
    assert COMPILES.join(timeout=600)
    assert _tier(g).compiled is not None and _tier(g).error is None


def test_no_worker_compiles_in_the_calling_thread(tiered_on, monkeypatch, started):
    monkeypatch.setenv("FUSEGRAD_COMPILE_WORKERS", "0")
    f = fg.jit(_loss(12))
    f(X32)
    assert _tier(f).compiled is None
    np.testing.assert_allclose(f(X32), _want(12, X32), rtol=1e-6)
    assert _tier(f).compiled is not None and started["started"] == 0


def test_a_bad_worker_count_is_a_clear_error(tiered_on, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_COMPILE_WORKERS", "many")
    f = fg.jit(_loss(13))
    f(X32)
    with pytest.raises(ValueError, match="FUSEGRAD_COMPILE_WORKERS='many'"):
        f(X32)


# ---- whole processes ---------------------------------------------------------------------------

SCRIPT_HEAD = """
import os, sys, numpy as np, fusegrad as fg
from fusegrad.codegen import worker
from fusegrad.tiering import COMPILES
x = np.linspace(-1.0, 1.0, 7, dtype=np.float32)
def make(k):
    def loss(x):
        return np.sum(np.sin(x * np.float32(k + 1)) * x)
    return fg.jit(loss)
"""


def _run_script(body, env=None, **kwargs):
    script = SCRIPT_HEAD + textwrap.dedent(body)
    full_env = dict(os.environ, FUSEGRAD_TIERED="1", FUSEGRAD_RENDERER="numba", **(env or {}))
    full_env.pop("FUSEGRAD_COMPILE_WORKERS", None)
    return subprocess.Popen([sys.executable, "-c", script], env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def _gone(pid, timeout=30.0) -> bool:
    """Whether process pid has exited (waiting up to timeout for it to)."""
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:                                   # our own child: a zombie until reaped
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_nothing_outlives_a_script_that_exits_mid_compile(tmp_path):
    """Ten functions used twice, then exit at once: the pending compiles are cancelled, the
    worker is stopped, and no temporary file is left in the cache."""
    proc = _run_script("""
        fs = [make(k) for k in range(10)]
        for f in fs:
            f(x); f(x)
        print(" ".join(str(w.proc.pid) for w in worker._LIVE), flush=True)
    """, env={"FUSEGRAD_CACHE_DIR": str(tmp_path)})
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    pids = [int(p) for p in out.split()]
    assert len(pids) <= 1
    assert all(_gone(pid) for pid in pids)
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


def test_the_worker_exits_when_its_parent_is_killed(tmp_path):
    proc = _run_script("""
        import time
        f = make(0)
        f(x); f(x)
        while not worker._LIVE:
            time.sleep(0.01)
        print(next(iter(worker._LIVE)).proc.pid, flush=True)
        time.sleep(600)
    """, env={"FUSEGRAD_CACHE_DIR": str(tmp_path)})
    pid = int(proc.stdout.readline())
    proc.kill()
    proc.wait()
    assert _gone(pid, timeout=60)


def test_an_unwritable_cache_compiles_with_one_warning_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    proc = _run_script("""
        import warnings
        warnings.simplefilter("always")
        f = make(3)
        values = [f(x) for _ in range(2)]
        assert COMPILES.join(timeout=600)
        values.append(f(x))
        from fusegrad.tiering import Tiered
        tier = next(iter(f._entries.values()))[0].executable
        assert tier.compiled is not None, tier.error
        from fusegrad.codegen import compile as c
        print(list(c._PRIVATE.values())[0], float(values[-1]))
    """, env={"FUSEGRAD_CACHE_DIR": str(blocker / "cache")})
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    private, value = out.split()
    assert err.count("cannot be written") == 1
    np.testing.assert_allclose(float(value), _want(3, X32), rtol=1e-6)
    assert not os.path.exists(private)


def _pool_task(k):
    """In a pool worker: the same jitted function, used three times."""
    from fusegrad.codegen import worker
    f = fg.jit(_loss(20))
    values = [float(f(X32)) for _ in range(3)]
    assert COMPILES.join(timeout=600)
    values.append(float(f(X32)))
    return values, len(worker._LIVE)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_multiprocessing_pool_jits_in_each_process(method, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_TIERED", "1")      # Numba (numba_worker), in workers
    f = fg.jit(_loss(20))                    # the parent has a worker and a compile, too
    f(X32)
    f(X32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)    # fork with threads, on 3.12+
        with multiprocessing.get_context(method).Pool(2) as pool:
            results = pool.map_async(_pool_task, range(2)).get(timeout=600)
    assert COMPILES.join(timeout=600)
    for values, live in results:
        assert live <= 1
        np.testing.assert_allclose(values, [_want(20, X32)] * 4, rtol=1e-6)
