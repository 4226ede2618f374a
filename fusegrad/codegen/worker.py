"""The compile worker: one long-lived child process that compiles Functions with Numba for
tiered execution (fusegrad/tiering.py), when the kernel IR is rendered to Numba source
(FUSEGRAD_RENDERER=numba; the LLVM rendering compiles in the slot's thread, llvmlite
releasing the GIL).

Numba types and lowers in Python, so a compile in a thread of the user's process shares the
GIL with the user's calls and slows both; a child has its own interpreter and core, and the
memory a long compile takes is not the user's. One child serves every compile of its parent
in turn, so Numba is imported once, not once per function.

The child gets `(Function, env)` requests on its stdin and runs `compile_numba` on
each, which writes the generated modules and Numba's machine code into the disk cache; the
parent's own `compile_numba` afterwards finds that text and loads instead of compiling. Each
reply holds the compile's log lines (the parent logs them) and the child's resident memory, so
the parent can retire a child that grew too big. Messages are pickles behind an 8-byte length,
on the child's original stdout; whatever the compile prints goes to stderr.

The child never outlives its parent: it exits at the end of its stdin (the parent closed the
pipe or died) and, should a forked sibling still hold the pipe open, when it sees that its
parent process is gone. It ignores SIGINT: a Ctrl-C is the parent's to handle.

    python -m fusegrad.codegen.worker PARENT_PID
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import warnings

_LENGTH = struct.Struct("<Q")
PARENT_CHECK_S = 0.5        # how often the child looks for its parent


class WorkerDied(RuntimeError):
    """The compile process ended (crashed or was killed) before it replied."""


def send(stream, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def receive(stream):
    """The next message, or None at the end of the stream."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


_LIVE: set = set()          # this process's workers
_LIVE_LOCK = threading.Lock()
_CLOSED = [False]           # set at exit: no new worker starts


class Worker:
    """The parent's handle on one compile process; `compile` is called by one thread at a
    time (tiering's compile slot that owns it)."""

    def __init__(self):
        with _LIVE_LOCK:
            if _CLOSED[0]:
                raise RuntimeError("the interpreter is exiting: no compile process is started")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fusegrad.codegen.worker", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
            _LIVE.add(self)
        self.rss = 0            # bytes, as of the last reply
        self.compiles = 0
        self.busy = False

    def compile(self, fn, log) -> None:
        """Compile fn into the disk cache, the child's log lines handed to log. Raises
        RuntimeError with the child's error, or WorkerDied."""
        from .compile import writable_cache_dir
        env = {k: v for k, v in os.environ.items() if k.startswith(("FUSEGRAD_", "NUMBA_"))}
        env["FUSEGRAD_CACHE_DIR"] = str(writable_cache_dir())
        message = pickle.dumps((fn, env), protocol=pickle.HIGHEST_PROTOCOL)
        self.busy = True
        try:
            self.proc.stdin.write(_LENGTH.pack(len(message)) + message)
            self.proc.stdin.flush()
            reply = receive(self.proc.stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            reply = None
        finally:
            self.busy = False
        if reply is None:
            code = self.proc.wait()
            raise WorkerDied(f"the compile process exited with code {code} while compiling "
                             f"@{fn.name}")
        status, payload, lines, self.rss = reply
        self.compiles += 1
        for line in lines:
            log(line)
        if status != "ok":
            raise RuntimeError(f"the compile process failed: {payload}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 1.0) -> None:
        """End the child: closing its stdin ends it between compiles; a busy one is told to
        stop (SIGTERM: it removes its partial files first), and killed after `timeout`."""
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self.busy:
            self.proc.terminate()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()        # after the exit: a reader has its end of file by now

    def abandon(self) -> None:
        """In a forked child of the parent: drop the handle without touching the process,
        which belongs to the parent, and close this process's copies of its pipes so the
        worker still sees the end of its stdin when the parent goes."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                os.close(stream.fileno())
            except (OSError, ValueError):
                pass
        self.proc.returncode = 0       # Popen.__del__ must not wait for it


@atexit.register
def close_all() -> None:
    """At exit: no new worker, and every live one stopped (a busy one at once)."""
    with _LIVE_LOCK:
        _CLOSED[0] = True
        workers = list(_LIVE)
    for worker in workers:
        worker.close()


def _forget_after_fork() -> None:
    """In a forked child: the parent's workers are the parent's (see Worker.abandon)."""
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()
    for worker in list(_LIVE):
        worker.abandon()
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


# ---- the child -----------------------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """Stop, as at SIGTERM, once the parent is gone (even mid-compile)."""
    import time
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _set_env(env: dict) -> None:
    """The parent's FUSEGRAD_* and NUMBA_* variables as of the request (this process's own)."""
    for key in [k for k in os.environ if k.startswith(("FUSEGRAD_", "NUMBA_"))]:
        if key not in env:
            del os.environ[key]
    os.environ.update(env)


class Stopped(Exception):
    """Raised in the child by SIGTERM. An Exception, not SystemExit, so that the writers of
    cache files (ours and Numba's) remove their temporary files on the way out."""


def _stop(signum, frame):
    threading.Timer(2.0, os._exit, (1,)).start()     # should a compile swallow it
    raise Stopped()


def _serve(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())      # prints must not break the replies
    requests = sys.stdin.buffer
    warnings.simplefilter("ignore")     # Numba's performance notes are not the user's to read
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    from . import compile as compile_module
    while True:
        request = receive(requests)
        if request is None:
            return
        fn, env = request
        _set_env(env)
        lines: list = []
        try:
            compile_module.compile_numba(fn, log=lines.append)
            reply = ("ok", None)
        except Stopped:
            return
        except Exception as e:  # noqa: BLE001 - reported to the parent, which says what
            reply = ("error", f"{type(e).__name__}: {e}")
        compile_module.forget_modules()          # the parent loads them; keep memory flat
        send(replies, (*reply, lines, _rss_bytes()))


if __name__ == "__main__":
    try:
        _serve(int(sys.argv[1]))
    except Stopped:
        pass
