"""bind(): apply a primitive to whatever values it is given.

Every operation in fusegrad, the user-facing NumPy functions and the VJP formulas alike, ends
in `bind(prim, *args, **params)`. The kind of the arguments decides what happens, as with JAX's
interpreters: a value type takes part by defining a class attribute `_fg_level` and a classmethod
`_fg_bind(prim, args, params)`. The argument of the highest level handles the call: tracers
(level 2) append an Op to the current trace, eager tensors (level 1) compute and record a tape
node, and plain NumPy arrays and Python scalars are evaluated directly.
"""

from __future__ import annotations

from .ir.evaluate import apply

TRACE_LEVEL = 2
EAGER_LEVEL = 1


_LEVELS: dict = {}


class LazyArray:
    """The base of fusegrad.numpy.lazy's arrays (np.zeros & co. made in traced user code):
    tracers and tensors ask `isinstance(x, LazyArray)` here, below the package's face."""

    __slots__ = ()


def level(x) -> int:
    cls = type(x)
    lv = _LEVELS.get(cls)
    if lv is None:
        lv = _LEVELS[cls] = getattr(cls, "_fg_level", 0)
    return lv


def top_level(args) -> int:
    return max((level(a) for a in args), default=0)


def _no_ambient():
    return None


# Returns the handler for ops without boxed operands (full, iota, ...): the tracer installs
# one, so that `np.zeros_like(x)` inside a trace becomes a `full` op, not a baked-in array.
ambient_handler = _no_ambient


def bind(prim: str, *args, **params):
    """Apply primitive `prim` to args: traced, recorded on the tape, or computed now."""
    handler, best = None, 0
    for a in args:
        cls = type(a)
        lv = _LEVELS.get(cls)
        if lv is None:
            lv = level(a)
        if lv > best:
            handler, best = cls, lv
    if handler is None:
        handler = ambient_handler() if not args else None
        if handler is None:
            return apply(prim, args, params)
    return handler._fg_bind(prim, args, params)
