"""The traced form of numpy/lazy.py's arrays: NumPy constructors' results in user code under a
trace. A LazyTraced has a Tracer's slots, so that `_become` can turn the object itself into a
Tracer whose value is its numbers as a constant; a lazy view then follows its root as a traced
view (views.View) of the root's elements at its positions.

While lazy the slots hold: `_value` the numbers, `base` the lazy root of a view (None for a
root), `ctx` the root's numbers for a view.
"""

from __future__ import annotations

from ..tracer import views
from ..tracer.methods import ArrayMethods
from ..tracer.tracer import Tracer, TracerSlots, _current
from .indexing import getitem
from .lazy import LazyMethods, hide, positions


class LazyTraced(LazyMethods, TracerSlots):
    __slots__ = ()

    def __init__(self, numbers, root=None, root_numbers=None):
        self._value, self.base, self.ctx, self.weak = numbers, root, root_numbers, False

    def _numbers(self):
        return self._value

    def _gather(self, key):
        return getitem(self._numbers(), key)

    def _root(self):
        return self.base

    def _root_numbers(self):
        return self._value if self.base is None else self.ctx

    def _view(self, numbers):
        root = self if self.base is None else self.base
        return LazyTraced(numbers, root, root._value)

    def _become(self):
        """Turn into a Tracer in the current trace: a root's value is its numbers, a view's
        the root's elements at its positions."""
        if self.base is not None:
            if isinstance(self.base, LazyMethods):
                self.base._become()
            self._follows_root()
            return
        ctx = _current()
        numbers = self._value
        self.__class__ = Tracer
        self.ctx, self.base, self.weak = ctx, None, False
        self._value = ctx.read(numbers.copy())

    def _follow(self):
        root, where = self.base, positions(self._value, self.ctx)
        if type(root) is not Tracer:
            raise TypeError(f"a view of an array made by NumPy is used after its array became "
                            f"a {type(root).__name__}")
        self.__class__ = Tracer
        self.ctx, self.weak = root.ctx, False
        view = self.base = views.View(root, where)
        self._value = view.recompute()


hide(LazyTraced, ArrayMethods)


def make(numbers):
    return LazyTraced(numbers)
