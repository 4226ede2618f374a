"""Thread-local gradient mode: whether eager operations record tape nodes.

The flag is per thread, as in the seed chapter: one thread can evaluate under `no_grad()` while
another trains. Every guard saves the previous value and restores it on exit, so guards nest and
survive exceptions. `no_grad`, `enable_grad` and `set_grad_enabled` work as context managers
and as decorators; `set_grad_enabled(flag)` also takes effect immediately when called plainly.
"""

from __future__ import annotations

import functools
import threading


class _State(threading.local):
    enabled = True  # class attribute: the default every new thread starts with
    backward = 0    # backward passes running in this thread (engine._run)


_state = _State()


def is_grad_enabled() -> bool:
    """Whether operations on eager tensors record history in this thread."""
    return _state.enabled


def _set(flag: bool) -> None:
    _state.enabled = bool(flag)


class _GradModeGuard:
    """Sets the mode on enter, restores the previous mode on exit; usable as a decorator."""

    _flag = True

    def __enter__(self):
        self._prev = _state.enabled
        _state.enabled = self._flag
        return self

    def __exit__(self, *exc):
        _state.enabled = self._prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradModeGuard):
    """Disable recording: `with fg.no_grad(): ...` or `@fg.no_grad()`."""

    _flag = False


class enable_grad(_GradModeGuard):
    """Enable recording inside a no_grad region: `with fg.enable_grad(): ...`."""

    _flag = True


class set_grad_enabled:
    """Set the mode now; used as a context manager, restore it on exit.

    `fg.set_grad_enabled(False)` switches recording off for this thread until switched back;
    `with fg.set_grad_enabled(flag): ...` and `@fg.set_grad_enabled(flag)` scope the change.
    """

    def __init__(self, flag: bool):
        self._flag = bool(flag)
        self._prev = _state.enabled
        _state.enabled = self._flag

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.enabled = self._prev
        return False

    def __call__(self, fn):
        _state.enabled = self._prev  # decorating must not change the mode at definition time
        flag = self._flag

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(flag):
                return fn(*args, **kwargs)
        return wrapper
