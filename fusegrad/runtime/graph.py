"""The recorded backward graph of the eager engine: nodes, edges and saved tensors.

A Node is one backward function: the VJP rule of the primitive that produced a tensor, the values
that rule reads (saved at record time with their storage versions), and one NodeInput per
operand: (edge, shape, dtype), where the edge is the node that receives that operand's gradient:
the operand's grad_fn, the shared AccumulateGrad of a leaf that requires grad, or None.

Edges point from outputs towards leaves, so holding the loss keeps its graph alive and dropping
it frees the graph by reference counting. There are no reference cycles (a node never holds its
own output tensor, only the output's array) and no `__del__`, so a chain of any length is freed
without recursion in Python code (CPython's trashcan bounds the C-level deallocation depth).

The engine saves only what a rule reads. `rule_reads` looks at the rule's bytecode once: an
argument the rule never loads is not saved; one it only uses as `x.shape` / `x.dtype` is saved as
a _Meta (so SumBackward keeps the input shape, not the input); anything else is saved in full.
"""

from __future__ import annotations

import dis
import threading
import weakref

_META_ATTRS = frozenset(("shape", "dtype", "ndim"))
_reads_cache: dict = {}


class _Meta:
    """Stands in for a saved value whose rule reads only its shape and dtype."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


def rule_reads(rule) -> tuple:
    """(out_mode, input_modes, rest_mode): how a rule reads `out` and each input.

    A mode is None (never loaded), "meta" (only `.shape` / `.dtype` / `.ndim`) or "data".
    Inputs past `input_modes` (a rule taking *inputs) use rest_mode, always "data". Cached per
    function object, so monkeypatching a rule in vjp_rules is picked up.
    """
    cached = _reads_cache.get(rule)
    if cached is not None:
        return cached
    code = getattr(rule, "__code__", None)
    if code is None or code.co_argcount < 2:  # not a plain function: save everything
        result = ("data", (), "data")
    else:
        names = code.co_varnames[1:code.co_argcount]  # (out, *inputs); g is always needed
        modes = _modes(list(dis.get_instructions(rule)), dict.fromkeys(names))
        result = (modes[names[0]], tuple(modes[n] for n in names[1:]), "data")
    _reads_cache[rule] = result
    return result


def _modes(instructions, modes: dict) -> dict:
    """Conservative: any instruction naming an argument, other than a store, reads its data,
    except a plain local load followed by `.shape` / `.dtype` / `.ndim`."""
    for ins, follow in zip(instructions, instructions[1:] + [None]):
        if ins.opname.startswith(("STORE", "DELETE")):
            continue
        names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
        meta_only = (len(names) == 1 and ins.opname in ("LOAD_FAST", "LOAD_FAST_BORROW")
                     and follow is not None and follow.opname == "LOAD_ATTR"
                     and follow.argval in _META_ATTRS)
        for name in names:
            if isinstance(name, str) and name in modes:
                modes[name] = "meta" if meta_only and modes[name] != "data" else "data"
    return modes


def _version_error(expected, version) -> RuntimeError:
    where = f" (modified by {version.op} at {version.where})" if version.where else ""
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: expected version {expected}, got {version.value}{where}")


class SavedTensor:
    """A value a rule needs at backward time, with the storage version it had when saved.

    It keeps the array (a reference, not a copy), the version counter it shares with every view
    of that storage, and for inputs the tensor itself, so a create_graph backward differentiates
    through the input's history. A saved output keeps only its array (no cycle through grad_fn).
    """

    __slots__ = ("data", "expected", "tensor", "version")

    def __init__(self, tensor, is_output: bool):
        self.tensor = None if is_output else tensor
        self.data = tensor.data
        # An input keeps its tensor, so the counter can wait until something creates it (an
        # in-place op or a view); most tensors never get one. An output needs it now.
        version = tensor._vc() if is_output else tensor._version
        self.version = version
        self.expected = 0 if version is None else version.value

    def unpack(self):
        version = self.version
        if version is None:
            version = self.tensor._version
            if version is None:
                return self.data
        if version.value != self.expected:
            raise _version_error(self.expected, version)
        return self.data

    def unpack_plain(self):
        """unpack(), with a 0-d array as a NumPy scalar: what a rule gets when nothing records."""
        data = self.unpack()
        return data[()] if data.ndim == 0 else data


class Node:
    """One backward function: name, rule, params, saved values and one NodeInput per operand.

    `inputs` holds (edge, shape, dtype) tuples: the node to send the operand's gradient to (or
    None), and the operand's shape and dtype at record time, against which the engine checks and
    fits every gradient the rule returns.
    """

    __slots__ = (
        "__weakref__",
        "inputs",
        "name",
        "params",
        "retained",
        "rule",
        "saved",
        "shape",
        "where",
    )

    def __init__(self, name, rule, params, saved, inputs, shape=(), where=None):
        self.name = name
        self.rule = rule
        self.params = params
        self.saved = saved  # [out, *inputs]; None once released
        self.inputs = inputs
        self.shape = shape  # the output's shape: how far an operand's gradient may broadcast
        self.retained = None  # weakref to the output tensor, set by retain_grad()
        self.where = where  # the user's file:line of the forward op (anomaly mode only)

    @property
    def next_functions(self) -> tuple:
        return tuple((edge, 0) for edge, _, _ in self.inputs)

    @property
    def released(self) -> bool:
        return self.saved is None

    def release_variables(self) -> None:
        self.saved = None

    def __repr__(self) -> str:
        return f"<{self.name}>"


class AccumulateGrad(Node):
    """The node of a leaf that requires grad: adds the incoming gradient into `leaf.grad`."""

    __slots__ = ("variable",)
    lock = threading.Lock()  # leaves may be shared by graphs running in several threads

    def __init__(self, variable):
        super().__init__("AccumulateGrad", None, None, (), (), variable.shape)
        self.variable = variable

    def release_variables(self) -> None:
        pass

    @property
    def released(self) -> bool:
        return False


def gradient_edge(t):
    """The node a new node should send t's gradient to: grad_fn, a leaf's shared accumulator."""
    if t.grad_fn is not None:
        return t.grad_fn
    ref = t._accumulator
    acc = ref() if ref is not None else None
    if acc is None:
        acc = AccumulateGrad(t)
        t._accumulator = weakref.ref(acc)
    return acc
