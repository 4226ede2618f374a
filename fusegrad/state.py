"""Which transformations are under way: the state that tracing and the eager transforms share.

A jitted call must not run compiled code while a trace records (fusegrad.tracer) or while an
eager grad/vjp evaluates its function (fusegrad.transforms): it would hand back constants. The
tracer and the transforms write this state, and api.py (the jit) and conversion.py read it. It
sits below all of them and imports nothing from fusegrad, so the tracer needs neither the eager
runtime nor the transforms to keep it.
"""

from __future__ import annotations

import threading

# How many traces and eager transforms are under way, in all threads together. A jitted call
# reads this one int (a few ns) and looks at its own thread's state only when it is nonzero.
busy = [0]
_busy_lock = threading.Lock()


def add_busy(n: int) -> None:
    with _busy_lock:
        busy[0] += n


class _EagerTransforms(threading.local):
    depth = 0       # eager grad/vjp evaluations under way in this thread (see transforms.py)


eager_transforms = _EagerTransforms()
