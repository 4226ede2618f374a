"""Tiered execution: a jitted signature runs on the interpreter until it is used again, then
compiles on one bounded compile worker, and calls switch to the compiled code when it is ready.

The policy, in `wants_compile`: a signature is queued for compiling on its second call. A
function called once (a parameter sweep, a test) never compiles: its optimized IR runs on the
interpreter at about hand-written NumPy speed, where a compile costs 0.3-10 s and, with Numba,
a few hundred megabytes. From the second call on it is worth it: the compiled code runs 1.5-30
times faster than the interpreter, and the compile happens off the caller's path.

The schedule, in `CompileQueue`: at most FUSEGRAD_COMPILE_WORKERS compiles run at a time
(default 1), each on a slot: a thread that takes the queued compile whose interpreted calls
have cost the most so far (the hot training step before a function a test called twice), and
compiles it. Every function compiles through the kernel IR: rendered to LLVM (the default,
codegen.compile.without_numba) it compiles in the slot thread, llvmlite releasing the GIL;
rendered to Numba (FUSEGRAD_RENDERER=numba) it compiles in the slot's worker process
(codegen/worker.py: Numba is imported there once, and its seconds of Python do not share the
caller's GIL), and the slot thread then loads the modules from the disk cache. There is one
compile, no second tier. FUSEGRAD_COMPILE_WORKERS=0 compiles in the calling thread, on the
second call.

Nothing outlives its use: the queue holds weak references (a compile whose jitted function was
garbage-collected is dropped, as a redefined notebook function's is), a slot idle for
IDLE_S seconds ends with its worker, a worker that grew past WORKER_MAX_RSS is replaced after
its compile, pending compiles are cancelled at exit and workers stopped (codegen/worker.py),
and a forked child starts with an empty queue of its own. A worker that dies mid-compile
leaves that function on the interpreter with one RuntimeWarning; the next compile starts a
new worker.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
import weakref

from .runtime.signature import log_compile

COMPILE_AFTER_CALLS = 2             # a signature is queued when it is called this many times
IDLE_S = 30.0                       # a slot (and its worker) with nothing to do ends after this
WORKER_MAX_RSS = 768 << 20          # a worker above this is replaced after its compile


def wants_compile(calls: int) -> bool:
    """Whether a signature called `calls` times (this call included) should be compiled."""
    return calls >= COMPILE_AFTER_CALLS


def workers_default() -> int:
    value = os.environ.get("FUSEGRAD_COMPILE_WORKERS", "1")
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"FUSEGRAD_COMPILE_WORKERS={value!r}: give the number of compile "
                         f"processes, 0 or more (0 compiles in the calling thread)")
    return count


class Tiered:
    """The numba backend's executable while a signature is on the interpreter.

    `__call__` counts calls, queues the compile when `wants_compile` says so, and runs the
    interpreter until the compiled entry is ready; the call after that switches. Calls before
    and after a switch are each correct; they may differ in the last bits (fused loops and
    mathlib round otherwise than NumPy's calls). A compile that fails leaves the function on
    the interpreter with one RuntimeWarning that says why. `wait()` compiles now, or waits for
    the compile under way, and returns the compiled entry: `jit.lower` and everything that
    inspects the generated code call it.
    """

    def __init__(self, ir):
        from .runtime.interpreter import Interpreted
        self.ir = ir
        self.interpreted = Interpreted(ir)
        self.compiled = None
        self.error = None
        self.calls = 0
        self.interp_seconds = 0.0        # what the interpreted calls have cost: the priority
        self.queued = False
        self._switched = False
        self._done = threading.Event()
        self._claim = threading.Lock()   # taken, never released, by whoever queues the compile
        self._start_time = time.perf_counter()
        self._on_switch: list = []       # hooks given the compiled run when calls switch

    def when_switched(self, hook) -> None:
        """hook(run) once calls switch to the compiled entry (now, if they have): api.Jitted's
        fast path then calls the entry's run itself, not through this object."""
        if self._switched and self.error is None:
            hook(self.compiled.run)
        else:
            self._on_switch.append(hook)

    def _after_fork(self):
        """In a forked child, a compile the parent had queued or begun is not this process's:
        the signature starts over on the interpreter."""
        if not self._done.is_set():
            self._done = threading.Event()
            self._claim = threading.Lock()
            self.queued, self.calls = False, 0

    def __call__(self, leaves) -> list:
        compiled = self.compiled
        if compiled is not None:
            if not self._switched:
                self._switch("interp")
            return compiled(leaves)
        if self.error is not None:
            if not self._switched:
                self._switch("interp")
        elif not self.queued:
            self.calls += 1
            if wants_compile(self.calls) and self._claim.acquire(blocking=False):
                self.queued = True          # by this thread alone: the claim is taken once
                COMPILES.submit(self)
                if self.compiled is not None:           # compiled in this thread
                    return self(leaves)
        start = time.perf_counter()
        out = self.interpreted(leaves)
        self.interp_seconds += time.perf_counter() - start
        return out

    def compile(self, worker) -> None:
        """The first tier's compile, run by a slot (or the calling thread, worker None)."""
        from . import codegen
        from .codegen.worker import WorkerDied
        try:
            if worker is not None:
                try:                        # the child decides as this process would
                    worker.compile(self.ir, log_compile)
                except WorkerDied:
                    raise
                except Exception as e:  # noqa: BLE001 - compile here instead, and say why
                    log_compile(f"tiered {self.ir.name}: compiling in this process ({e})")
            self.compiled = codegen.compile_numba(self.ir, log=log_compile)
        except Exception as e:  # noqa: BLE001 - reported on the next call, kept on interp
            self.error = e
        finally:
            self._done.set()

    def _switch(self, tier: str):
        self._switched = True
        if self.error is not None:
            warnings.warn(f"fusegrad: compiling @{self.ir.name} failed "
                          f"({type(self.error).__name__}: {self.error}); its calls keep "
                          f"running on the interpreter", RuntimeWarning, stacklevel=4)
            return
        log_compile(f"tiered {self.ir.name}: the {self.compiled.kind} entry is ready after "
                    f"{time.perf_counter() - self._start_time:.3f} s; calls switch from "
                    f"{tier}")
        hooks, self._on_switch = self._on_switch, []
        for hook in hooks:
            hook(self.compiled.run)

    def wait(self):
        """The compiled executable: compiled now in this thread, unless a slot has begun
        compiling it (then waited for); raises what the compile raised."""
        mine = self._claim.acquire(blocking=False) or COMPILES.withdraw(self)
        self.queued = True
        if mine:
            self.compile(None)
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self.compiled

    @property
    def ready(self) -> bool:
        return self._done.is_set()


class _Job:
    __slots__ = ("target",)

    def __init__(self, tiered):
        self.target = weakref.ref(tiered)

    def priority(self):
        tiered = self.target()
        return tiered.interp_seconds if tiered is not None else 0.0


class CompileQueue:
    """Pending compiles and the slots that run them (the module docstring says how)."""

    def __init__(self):
        self._reset()
        os.register_at_fork(after_in_child=self._reset)
        atexit.register(self.close)

    def _reset(self):
        for tiered in getattr(self, "_inflight", ()):
            tiered._after_fork()
        self._inflight = weakref.WeakSet()       # queued or compiling, for _after_fork
        self._cond = threading.Condition(threading.Lock())
        self._pending: list[_Job] = []
        self._slots = 0          # slot threads alive
        self._running = 0        # jobs being compiled
        self._idle = 0           # of them, waiting for work
        self._closed = False

    def submit(self, tiered) -> None:
        slots = workers_default()
        if slots == 0:
            tiered.compile(None)
            return
        with self._cond:
            if self._closed:
                return
            self._pending.append(_Job(tiered))
            self._inflight.add(tiered)
            if self._idle:
                self._cond.notify_all()      # join() may wait on the condition too
            elif self._slots < slots:
                self._slots += 1
                threading.Thread(target=self._slot, name="fusegrad-compile",
                                 daemon=True).start()

    def withdraw(self, tiered) -> bool:
        """Take tiered's first compile out of the queue; False when no longer pending (a slot
        has it, or has done it)."""
        with self._cond:
            for job in self._pending:
                if job.target() is tiered:
                    self._pending.remove(job)
                    return True
        return False

    def join(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or compiling (tests, benchmarks); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running and not any(
                job.target() is not None for job in self._pending), timeout)

    def _next(self):
        """The pending job worth the most (under the lock); dead ones are dropped."""
        self._pending = [job for job in self._pending if job.target() is not None]
        if not self._pending:
            return None
        job = max(self._pending, key=_Job.priority)
        self._pending.remove(job)
        return job

    def _slot(self):
        worker = None
        try:
            while True:
                with self._cond:
                    job = self._next()
                    while job is None and not self._closed:
                        self._idle += 1
                        woken = self._cond.wait(IDLE_S)
                        self._idle -= 1
                        job = self._next()
                        if job is None and not woken:
                            break
                    if job is None:
                        self._slots -= 1
                        return
                    self._running += 1
                try:
                    worker = self._run(job, worker)
                finally:
                    with self._cond:
                        self._running -= 1
                        self._cond.notify_all()
        finally:
            if worker is not None:
                worker.close()

    def _run(self, job, worker):
        """Run one job, on this slot's worker when it needs Numba (started, or replaced, as
        needed), else in this thread."""
        from .codegen.compile import without_numba
        from .codegen.worker import Worker
        tiered = job.target()
        if tiered is None:
            return worker
        try:
            if not without_numba() and (worker is None or not worker.alive):
                worker = Worker()
        except Exception as e:  # noqa: BLE001 - this compile fails; the next one tries again
            tiered.error = e
            tiered._done.set()
            return None
        tiered.compile(None if without_numba() else worker)
        with self._cond:
            self._inflight.discard(tiered)
        del tiered, job
        if worker is not None and (not worker.alive or worker.rss > WORKER_MAX_RSS):
            worker.close()
            return None
        return worker

    def close(self):
        """At exit: pending compiles are cancelled; slots end after the compile at hand."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()


COMPILES = CompileQueue()
