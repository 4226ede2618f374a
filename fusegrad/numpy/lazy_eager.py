"""The eager form of numpy/lazy.py's arrays: NumPy constructors' results in user code inside an
eager grad or vjp. A LazyEager has a Tensor's slots, so that `_become` turns the object itself
into a Tensor (no grad, on the same buffer) before a tensor that needs a gradient is written
into it; the write is then the Tensor's recorded functional update. While lazy, `data` holds
the numbers, and a view keeps its lazy root in `grad` and the root's numbers in `grad_fn`.

A view used after its root became a Tensor becomes one too: on its own numbers (a NumPy view,
registered as one of the root's storage) while the root still has them and needs no gradient,
else the root's elements at its positions (a recorded gather), as NumPy's view would show
them then. Writes into the root after that are not seen by the view, nor writes into the view
by the root: the eager engine's known gap for views (docs/design.md); a recorded in-place
operator on either raises (inplace.py's live-view rule), an item assignment does not.
"""

from __future__ import annotations

from .. import lax
from ..runtime.inplace import InplaceMethods
from ..runtime.tensor import Tensor, TensorSlots, _init
from ..tracer.methods import ArrayMethods
from .indexing import getitem
from .lazy import LazyMethods, hide, positions
from .shapes import reshape


class LazyEager(LazyMethods, TensorSlots):
    __slots__ = ()

    def __init__(self, numbers, root=None, root_numbers=None):
        self.data, self.grad, self.grad_fn = numbers, root, root_numbers
        self._requires_grad, self._version, self._accumulator = False, None, None

    def _numbers(self):
        return self.data

    def _gather(self, key):
        return getitem(self._numbers(), key)

    def _root(self):
        return self.grad

    def _root_numbers(self):
        return self.data if self.grad is None else self.grad_fn

    def _view(self, numbers):
        root = self if self.grad is None else self.grad
        return LazyEager(numbers, root, root.data)

    def _become(self):
        root = self.grad
        if root is not None:
            if isinstance(root, LazyMethods):
                root._become()
            self._follows_root()
            return
        self.__class__ = Tensor
        _init(self, self.data)

    def _follow(self):
        root, numbers, root_numbers = self.grad, self.data, self.grad_fn
        self.__class__ = Tensor
        if root.data is root_numbers and not root.requires_grad:
            _init(self, numbers)
            self._version = root._vc()
            self._version.add_view(root, self)
            return
        new = lax.take(reshape(root, (-1,)), positions(numbers, root_numbers), 0)
        _init(self, new.data)
        self.grad_fn, self._requires_grad = new.grad_fn, new.requires_grad
        self._version = root._vc()              # a recorded in-place write into it raises
        self._version.add_view(root, self)


hide(LazyEager, ArrayMethods, InplaceMethods)


def make(numbers):
    return LazyEager(numbers)
