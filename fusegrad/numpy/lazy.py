"""Arrays made by NumPy's constructors in user code while fusegrad traces or differentiates:
plain constants until a traced value (or a tensor that needs a gradient) reaches them.

`traj = np.zeros((T, 2)); traj[t] = x`, `L = np.zeros((d, d)); L[rows, cols] = l` and
`np.eye(k)[y]` are how NumPy programs fill and index arrays. While a trace or an eager
transform runs, np.zeros and its friends (constructors.LAZY_CONSTRUCTORS), called from user
code, return a LazyMethods object instead of the ndarray: it holds the ndarray (its numbers) and
forwards every ndarray operator, method and attribute to it, so while it stays constant it acts
as that ndarray (np.asarray of it gives the numbers; NumPy and SciPy accept it). The moment a
traced value is written into it (item assignment, an in-place operator, out=), it becomes one:
the object's class changes to the tracer's (or the eager tensor's) in place, with the numbers as
a constant, and the write is then that class's functional update, so every name bound to it
sees the new value. Indexing it with a traced index is a gather from the constant. Views of it
(basic indexing, reshape, .T, ...) are lazy too, and follow their root when it becomes traced.

A concrete class provides the slots (a tracer's or a tensor's, so that the class can change)
and `_numbers()`, `_root()`, `_root_numbers()`, `_become()`, `_follow()` and `_gather()`
(fusegrad.numpy.getitem of the numbers).
"""

from __future__ import annotations

import numpy as np

from ..dispatch import LazyArray, level


def boxed(x) -> bool:
    """Whether x is or holds (in lists and tuples) a tensor or tracer."""
    if isinstance(x, (list, tuple)):
        return any(boxed(e) for e in x)
    return level(x) > 0 and not isinstance(x, LazyMethods)


def concrete(x):
    """x with every lazy array in it (lists, tuples, dicts) replaced by its numbers."""
    if isinstance(x, LazyMethods):
        return x._live_numbers()
    if isinstance(x, (list, tuple)):
        items = [concrete(e) for e in x]
        return items if isinstance(x, list) else tuple(items)
    if isinstance(x, dict):
        return {k: concrete(v) for k, v in x.items()}
    return x


def positions(view: np.ndarray, root: np.ndarray) -> np.ndarray:
    """The flat (C-order) positions in a C-contiguous root of the elements of a view of it;
    read-only where NumPy's view is."""
    item = root.itemsize
    offset = (view.__array_interface__["data"][0] - root.__array_interface__["data"][0]) // item
    out = np.full(view.shape, offset, np.int64)
    for axis, (n, stride) in enumerate(zip(view.shape, view.strides)):
        shape = [1] * view.ndim
        shape[axis] = n
        out += (np.arange(n, dtype=np.int64) * (stride // item)).reshape(shape)
    out.flags.writeable = view.flags.writeable
    return out


def _forward(name):
    """A method that calls the ndarray's, with lazy arguments given as numbers."""
    def method(self, *args, **kwargs):
        if self._follows_root():            # a view whose root became traced: self is one now
            return getattr(self, name)(*args, **kwargs)
        return self._wrap(getattr(self._numbers(), name)(*concrete(args), **concrete(kwargs)))
    method.__name__ = name
    return method


def _inplace(name):
    """`c += v`: NumPy's write while v is constant; once v is traced, c becomes traced first."""
    def method(self, other):
        if boxed(other) or self._follows_root():
            self._become()
            return getattr(self, name)(other)
        getattr(self._numbers(), name)(concrete(other))
        return self
    method.__name__ = name
    return method


_BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
           "xor", "lshift", "rshift", "divmod")
_OPERATORS = ([f"__{n}__" for n in _BINARY] + [f"__r{n}__" for n in _BINARY] +
              ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__neg__", "__pos__",
               "__abs__", "__invert__", "__len__", "__iter__", "__contains__", "__bool__",
               "__int__", "__float__", "__index__", "__complex__", "__repr__", "__str__",
               "__format__", "__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__"])


class LazyMethods(LazyArray):
    __slots__ = ()
    __hash__ = None         # as ndarray's

    def __getattr__(self, name):
        """Every other ndarray attribute and method (shape, dtype, T, sum, fill, ...)."""
        if name.startswith("__"):
            raise AttributeError(name)
        if self._follows_root():
            return getattr(self, name)
        value = getattr(self._numbers(), name)
        if callable(value):
            return lambda *args, **kwargs: self._wrap(value(*concrete(args), **concrete(kwargs)))
        return self._wrap(value)

    def __getitem__(self, key):
        if self._follows_root():
            return self[key]
        if boxed(key):                          # np.eye(k)[y] with y traced: a gather
            return self._gather(key)
        return self._wrap(self._numbers()[concrete(key)])

    def __setitem__(self, key, value):
        if boxed(key) or boxed(value) or self._follows_root():
            self._become()
            self[key] = value
            return
        self._numbers()[concrete(key)] = concrete(value)

    def __array__(self, dtype=None, copy=None):
        if self._follows_root():
            return self.__array__(dtype, copy)
        numbers = self._numbers()
        if copy:
            return np.array(numbers, dtype=dtype)
        return numbers if dtype is None else numbers.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        outs = out if isinstance(out, tuple) else () if out is None else (out,)
        targets = [o for o in outs if isinstance(o, LazyMethods)]
        if targets and (boxed(inputs) or any(o._follows_root() for o in targets)):
            for o in targets:
                o._become()
            return getattr(ufunc, method)(*inputs, **kwargs)
        result = getattr(ufunc, method)(*concrete(inputs), **concrete(kwargs))
        return out if out is not None else self._wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        return self._wrap(func(*concrete(args), **concrete(kwargs)))

    def _live_numbers(self) -> np.ndarray:
        if self._follows_root():
            return self.__array__()             # a tracer now: raises, naming the call
        return self._numbers()

    def _follows_root(self) -> bool:
        """For a lazy view whose root became traced: become a traced view of it (True)."""
        root = self._root()
        if root is None or isinstance(root, LazyMethods):
            return False
        self._follow()
        return True

    def _wrap(self, result):
        """NumPy's result on the numbers, as a lazy array where it is an ndarray: a view of
        the root's numbers is a lazy view, a new C-contiguous array a new lazy array (as
        NumPy's results are new ndarrays). Scalars and the rest stay as they are."""
        if isinstance(result, tuple) and any(type(r) is np.ndarray for r in result):
            return tuple(self._wrap(r) for r in result)
        if type(result) is not np.ndarray:
            return result
        numbers = self._root_numbers()
        if np.may_share_memory(result, numbers):
            return self._view(result) if result.dtype == numbers.dtype else result
        return type(self)(result) if result.flags.c_contiguous else result


for _name in _OPERATORS:
    setattr(LazyMethods, _name, _forward(_name))
for _name in _BINARY[:-1]:
    setattr(LazyMethods, f"__i{_name}__", _inplace(f"__i{_name}__"))


def hide(cls, *classes):
    """Make the public members a concrete lazy class inherits from classes (ArrayMethods'
    tracer methods) ndarray's: each goes to __getattr__, so to the numbers."""
    for name in {n for c in classes for n in vars(c) if not n.startswith("_")}:
        setattr(cls, name, property(lambda self, name=name: self.__getattr__(name)))
