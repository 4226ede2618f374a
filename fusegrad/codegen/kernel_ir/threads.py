"""The kernel IR's threads: a parallel loop cut into chunks that every thread takes in turn.

A parallel loop (rewrite.py marks it) is rendered as a task `i64 task(arrays, status, first,
last)` running iterations first .. last - 1 as the serial loop would, and a call

    fusegrad_threads_run(task, arrays, status, extent, chunk)

which cuts range(extent) into chunks of `chunk` iterations. The caller publishes the job, wakes
the workers (one semaphore post each) and then takes chunks itself, as the workers do, from
one shared counter (a compare-and-swap on `word`, the job's generation in its high 32 bits and
the next chunk in its low 32): a worker the system has not scheduled yet takes nothing, its
chunks go to whoever is running, and the caller waits only for chunks already taken (asleep
on a second semaphore, which the thread finishing the last chunk posts). So a
loaded machine costs at most the chunks a thread was preempted in, never the whole share of
a thread that has not started (OpenBLAS's fork-join waited for every part; the kernel IR
used threads only while os.getloadavg left a core idle). The iterations of a parallel loop
write apart, so any thread running any chunk gives the same bits.

A task that meets a Raise returns its error number; the job is then run again serially from
the first chunk on the caller's status, so the error (and the value it quotes) is the first one
the serial loop meets. The pool runs one job at a time: a second caller (another Python
thread) finding it busy runs its loop serially, as does every caller when there are no
workers (one core, FUSEGRAD_THREADS=1, or a forked child before it compiles a program with a
parallel loop, which starts the child's own).

The pool is the usable cores less one threads (FUSEGRAD_THREADS less one), started once, on
the first compile of a program with a parallel loop: each a Python thread that calls the
worker loop through ctypes (which releases the GIL), awake SPIN_NS after a job, then asleep on
the semaphore; an atexit hook stops and joins them. Nothing is process-wide but the pool.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import threading
import time

from .jit import machine_code

_STATE = ("word", "task", "arrays", "extent", "chunk", "chunks", "done", "failed", "busy",
          "stop", "workers", "sleepers", "waiting")                # each on its own cache line

SPIN_NS = 200_000               # how long a thread waits awake for chunks, before sleeping
_TEXT = "\n".join([
    *(f"@{name} = internal global i64 0, align 64" for name in _STATE),
    "@sem = internal global [64 x i8] zeroinitializer, align 64",
    "@joined = internal global [64 x i8] zeroinitializer, align 64",
    "declare i32 @sem_wait(ptr)", "declare i32 @sem_post(ptr)",
    "declare i32 @sem_getvalue(ptr, ptr)", "declare i32 @sched_yield()",
    "declare i32 @clock_gettime(i32, ptr)", """
define internal i64 @now() {
entry:
  %ts = alloca [2 x i64]
  %r = call i32 @clock_gettime(i32 CLOCK, ptr %ts)
  %sec = load i64, ptr %ts
  %at = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %at
  %big = mul i64 %sec, 1000000000
  %t = add i64 %big, %ns
  ret i64 %t
}

; one chunk of the job in `word`, if one is left: 1 (look again) or 0 (none left)
define internal i64 @take(ptr %cell) {
entry:
  %w = load atomic i64, ptr @word seq_cst, align 8
  %i = and i64 %w, 4294967295
  %n = load atomic i64, ptr @chunks seq_cst, align 8
  %t = load atomic i64, ptr @task seq_cst, align 8
  %a = load atomic i64, ptr @arrays seq_cst, align 8
  %e = load atomic i64, ptr @extent seq_cst, align 8
  %c = load atomic i64, ptr @chunk seq_cst, align 8
  %left = icmp ult i64 %i, %n
  br i1 %left, label %claim, label %none
claim:
  %w1 = add i64 %w, 1
  %x = cmpxchg ptr @word, i64 %w, i64 %w1 seq_cst seq_cst
  %ok = extractvalue { i64, i1 } %x, 1
  br i1 %ok, label %run, label %again
run:
  %first = mul i64 %i, %c
  %end = add i64 %first, %c
  %short = icmp ult i64 %e, %end
  %last = select i1 %short, i64 %e, i64 %end
  %fn = inttoptr i64 %t to ptr
  %arrays = inttoptr i64 %a to ptr
  %r = call i64 %fn(ptr %arrays, ptr %cell, i64 %first, i64 %last)
  %bad = icmp ne i64 %r, 0
  br i1 %bad, label %fail, label %finish
fail:
  store atomic i64 1, ptr @failed seq_cst, align 8
  br label %finish
finish:
  %d = atomicrmw add ptr @done, i64 1 seq_cst
  %d1 = add i64 %d, 1
  %last_one = icmp eq i64 %d1, %n
  br i1 %last_one, label %final, label %again
final:                                  ; the caller, if asleep, is told
  %asleep = atomicrmw xchg ptr @waiting, i64 0 seq_cst
  %tell = icmp ne i64 %asleep, 0
  br i1 %tell, label %post, label %again
post:
  %p = call i32 @sem_post(ptr @joined)
  br label %again
again:
  ret i64 1
none:
  ret i64 0
}

; a worker thread's life: take chunks while there are any, look for more a while (SPIN_NS,
; yielding), then sleep on the semaphore, counted in @sleepers
define void @fusegrad_threads_worker() {
entry:
  %cell = alloca i64
  br label %sleep
sleep:
  %s0 = atomicrmw add ptr @sleepers, i64 1 seq_cst
  %early = call i64 @take(ptr %cell)
  %found = icmp ne i64 %early, 0
  br i1 %found, label %awake, label %block
block:
  %s = call i32 @sem_wait(ptr @sem)
  br label %awake
awake:
  %s1 = atomicrmw sub ptr @sleepers, i64 1 seq_cst
  %stop = load atomic i64, ptr @stop seq_cst, align 8
  %quit = icmp ne i64 %stop, 0
  br i1 %quit, label %out, label %work
work:
  %more = call i64 @take(ptr %cell)
  %again = icmp ne i64 %more, 0
  br i1 %again, label %work, label %idle
idle:
  %t0 = call i64 @now()
  %until = add i64 %t0, SPIN_NS
  br label %spin
spin:
  %t = call i64 @now()
  %long = icmp sgt i64 %t, %until
  br i1 %long, label %sleep, label %poll
poll:
  %y = call i32 @sched_yield()
  %w = load atomic i64, ptr @word seq_cst, align 8
  %i = and i64 %w, 4294967295
  %n = load atomic i64, ptr @chunks seq_cst, align 8
  %left = icmp ult i64 %i, %n
  br i1 %left, label %work, label %spin
out:
  ret void
}

define ptr @fusegrad_threads_sem(i64 %k) {
entry:
  %first = icmp eq i64 %k, 0
  %sem = select i1 %first, ptr @sem, ptr @joined
  ret ptr %sem
}

; the pool's say from Python: how many workers take chunks, whether they should leave
define void @fusegrad_threads_set(i64 %workers, i64 %stop) {
entry:
  store atomic i64 %workers, ptr @workers seq_cst, align 8
  store atomic i64 %stop, ptr @stop seq_cst, align 8
  ret void
}

; in a forked child, the one thread left: no job, no workers, nobody asleep
define void @fusegrad_threads_forked() {
entry:
  store atomic i64 0, ptr @busy seq_cst, align 8
  store atomic i64 0, ptr @sleepers seq_cst, align 8
  store atomic i64 0, ptr @waiting seq_cst, align 8
  store atomic i64 0, ptr @workers seq_cst, align 8
  store atomic i64 0, ptr @stop seq_cst, align 8
  store atomic i64 0, ptr @done seq_cst, align 8
  store atomic i64 0, ptr @failed seq_cst, align 8
  store atomic i64 0, ptr @chunks seq_cst, align 8
  ret void
}

define i64 @fusegrad_threads_run(ptr %task, ptr %arrays, ptr %status, i64 %extent, i64 %chunk) {
entry:
  %cell = alloca i64
  %value = alloca i32
  %c1 = add i64 %chunk, -1
  %e1 = add i64 %extent, %c1
  %n = udiv i64 %e1, %chunk
  %nw = load atomic i64, ptr @workers seq_cst, align 8
  %none = icmp eq i64 %nw, 0
  %one = icmp ult i64 %n, 2
  %alone = or i1 %none, %one
  br i1 %alone, label %serial, label %lock
lock:
  %x = cmpxchg ptr @busy, i64 0, i64 1 seq_cst seq_cst
  %got = extractvalue { i64, i1 } %x, 1
  br i1 %got, label %publish, label %serial
publish:
  %w = load atomic i64, ptr @word seq_cst, align 8
  %g = lshr i64 %w, 32
  %g1 = add i64 %g, 1
  %gen = shl i64 %g1, 32
  %closed = or i64 %gen, 4294967295
  store atomic i64 %closed, ptr @word seq_cst, align 8
  %t = ptrtoint ptr %task to i64
  %a = ptrtoint ptr %arrays to i64
  store atomic i64 %t, ptr @task seq_cst, align 8
  store atomic i64 %a, ptr @arrays seq_cst, align 8
  store atomic i64 %extent, ptr @extent seq_cst, align 8
  store atomic i64 %chunk, ptr @chunk seq_cst, align 8
  store atomic i64 %n, ptr @chunks seq_cst, align 8
  store atomic i64 0, ptr @done seq_cst, align 8
  store atomic i64 0, ptr @failed seq_cst, align 8
  store atomic i64 %gen, ptr @word seq_cst, align 8
  %gv = call i32 @sem_getvalue(ptr @sem, ptr %value)
  %v = load i32, ptr %value
  %v64 = sext i32 %v to i64
  %asleep = load atomic i64, ptr @sleepers seq_cst, align 8
  %want = sub i64 %asleep, %v64
  %n1 = add i64 %n, -1
  %fewer = icmp slt i64 %n1, %want
  %posts = select i1 %fewer, i64 %n1, i64 %want
  %anyp = icmp sgt i64 %posts, 0
  br i1 %anyp, label %post, label %help
post:
  %k = phi i64 [0, %publish], [%k1, %post]
  %p = call i32 @sem_post(ptr @sem)
  %k1 = add i64 %k, 1
  %postmore = icmp slt i64 %k1, %posts
  br i1 %postmore, label %post, label %help
help:
  %more = call i64 @take(ptr %cell)
  %again = icmp ne i64 %more, 0
  br i1 %again, label %help, label %wait
wait:                                   ; chunks others took: yield a while
  %since = call i64 @now()
  %deadline = add i64 %since, SPIN_NS
  br label %check
check:
  %d = load atomic i64, ptr @done seq_cst, align 8
  %all = icmp uge i64 %d, %n
  br i1 %all, label %joined, label %yield
yield:
  %y = call i32 @sched_yield()
  %now = call i64 @now()
  %long = icmp sgt i64 %now, %deadline
  br i1 %long, label %doze, label %check
doze:                                   ; then sleep until the last chunk's thread posts
  store atomic i64 1, ptr @waiting seq_cst, align 8
  %d2 = load atomic i64, ptr @done seq_cst, align 8
  %all2 = icmp uge i64 %d2, %n
  br i1 %all2, label %undo, label %sleep
undo:                                   ; all done meanwhile: a post only if one was promised
  %was = atomicrmw xchg ptr @waiting, i64 0 seq_cst
  %promised = icmp eq i64 %was, 0
  br i1 %promised, label %sleep, label %joined
sleep:
  %j = call i32 @sem_wait(ptr @joined)
  %woke = icmp eq i32 %j, 0
  br i1 %woke, label %joined, label %sleep
joined:
  %f = load atomic i64, ptr @failed seq_cst, align 8
  store atomic i64 0, ptr @busy seq_cst, align 8
  %failed = icmp ne i64 %f, 0
  br i1 %failed, label %serial, label %done
serial:
  %first = phi i64 [0, %entry], [0, %lock], [0, %joined], [%next, %step]
  %end = add i64 %first, %chunk
  %short = icmp ult i64 %extent, %end
  %last = select i1 %short, i64 %extent, i64 %end
  %r = call i64 %task(ptr %arrays, ptr %status, i64 %first, i64 %last)
  %bad = icmp ne i64 %r, 0
  br i1 %bad, label %raise, label %step
step:
  %next = add i64 %first, %chunk
  %left = icmp ult i64 %next, %extent
  br i1 %left, label %serial, label %done
raise:
  ret i64 %r
done:
  ret i64 0
}
"""])


def _workers() -> int:
    """Threads besides the caller: FUSEGRAD_THREADS less one if set, else the cores this
    process may use less one."""
    wanted = os.environ.get("FUSEGRAD_THREADS")
    if wanted:
        if not wanted.isdigit() or int(wanted) < 1:
            raise ValueError(f"FUSEGRAD_THREADS={wanted!r}: expected a whole number of threads "
                             f"(the caller included), at least 1")
        return int(wanted) - 1
    usable = getattr(os, "sched_getaffinity", None)
    return max(0, (len(usable(0)) if usable else os.cpu_count() or 1) - 1)


class _Pool:
    """The worker threads and the addresses of the pool's code and state."""

    def __init__(self):
        import llvmlite.binding as llvm
        self.lock = threading.Lock()
        self.threads: list = []
        self.started = False
        names = ["fusegrad_threads_worker", "fusegrad_threads_run", "fusegrad_threads_sem",
                 "fusegrad_threads_set", "fusegrad_threads_forked"]
        text = _TEXT.replace("SPIN_NS", str(SPIN_NS)).replace("CLOCK",
                                                              str(time.CLOCK_MONOTONIC))
        worker, run_address, sem, say, forked = machine_code(text, names, 2)
        self.forked = ctypes.CFUNCTYPE(None)(forked)
        self.worker = ctypes.CFUNCTYPE(None)(worker)
        self.set = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(say)
        llvm.add_symbol("fusegrad_threads_run", run_address)
        sems = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)(sem)
        self.sems = [sems(0), sems(1)]
        self.libc = ctypes.CDLL(None)
        if any(self.libc.sem_init(ctypes.c_void_p(sem), 0, 0) for sem in self.sems):
            raise OSError("sem_init failed: no unnamed semaphores here")
        os.register_at_fork(after_in_child=self.after_fork)

    def after_fork(self):
        """In a forked child: no workers (the next compile of a parallel loop starts them)."""
        self.forked()
        for sem in self.sems:
            self.libc.sem_init(ctypes.c_void_p(sem), 0, 0)
        self.lock, self.threads, self.started = threading.Lock(), [], False

    def start(self):
        """Start the workers, once per process."""
        with self.lock:
            if self.started:
                return
            self.started = True
            pid = os.getpid()
            for k in range(_workers()):
                t = threading.Thread(target=self.worker, name=f"fusegrad-kernel-ir-{k}",
                                     daemon=True)
                t.start()
                self.threads.append(t)
            self.set(len(self.threads), 0)
            atexit.register(self.stop, pid)

    def stop(self, pid=None):
        """Wake every worker to leave, and join them (atexit, in the process that started
        them)."""
        if pid is not None and pid != os.getpid():
            return
        self.set(0, 1)
        for _ in self.threads:
            self.libc.sem_post(ctypes.c_void_p(self.sems[0]))
        for t in self.threads:
            t.join(timeout=5)
        self.threads = []


_POOL: _Pool | None = None
_MADE = threading.Lock()


def pool() -> _Pool:
    """The pool, its code compiled and fusegrad_threads_run registered with LLVM on first
    use (its workers start with pool().start())."""
    global _POOL
    with _MADE:
        if _POOL is None:
            _POOL = _Pool()
        return _POOL


@functools.cache
def available() -> bool:
    """Whether this process can have the pool (llvm.py renders parallel loops serially if
    not: no unnamed semaphores, as on macOS)."""
    try:
        pool()
    except OSError:
        return False
    return True
