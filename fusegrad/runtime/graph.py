"""The recorded backward graph of the eager engine: nodes, edges and saved tensors.

A Node is one backward function: the VJP rule of the primitive that produced a tensor, the values
that rule reads (saved at record time with their storage versions), and one NodeInput per
operand: (edge, shape, dtype), where the edge is the node that receives that operand's gradient:
the operand's grad_fn, the shared AccumulateGrad of a leaf that requires grad, or None.

Edges point from outputs towards leaves, so holding the loss keeps its graph alive and dropping
it frees the graph by reference counting. There are no reference cycles (a node never holds its
own output tensor, only the output's array) and no `__del__`, so a chain of any length is freed
without recursion in Python code (CPython's trashcan bounds the C-level deallocation depth).

The engine saves only what a rule reads, as the rule declares it on registration in formulas/
(`@_vjp("reduce_sum", "SumBackward", reads="x.shape")`, stored as `rule.reads`): an argument
the declaration leaves out is not saved; one declared as `x.shape` is saved as a _Meta (so
SumBackward keeps the input's shape and dtype, not the input); one named bare is saved in full.
`rule_reads` maps the declared names to argument positions once per rule. A rule without a
declaration (one a test puts in vjp_rules) gets every argument.
"""

from __future__ import annotations

import inspect
import threading
import weakref

_reads_cache: dict = {}
_SAVE_ALL = ("data", (), "data")
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class _Meta:
    """Stands in for a saved value whose rule reads only its shape and dtype."""

    __slots__ = ("dtype", "shape")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


def rule_reads(rule) -> tuple:
    """(out_mode, input_modes, rest_mode): what the engine saves of `out` and of each input.

    A mode is None (not saved: the rule does not read it), "meta" (a _Meta: shape, dtype, ndim)
    or "data" (the value). Inputs past `input_modes` (a rule taking *xs) use rest_mode. From the
    rule's declaration `rule.reads`; a rule without one saves everything. Cached per function
    object, so monkeypatching a rule in vjp_rules is picked up.
    """
    cached = _reads_cache.get(rule)
    if cached is None:
        declared = getattr(rule, "reads", None)
        cached = _SAVE_ALL if declared is None else _resolve(rule, declared)
        _reads_cache[rule] = cached
    return cached


def input_mode(rule, i: int):
    """rule_reads' mode for input i (0 is the first input after `out`)."""
    _, modes, rest = rule_reads(rule)
    return modes[i] if i < len(modes) else rest


def _resolve(rule, declared: str) -> tuple:
    """A declaration ("out x.shape", names of the rule's own arguments) as rule_reads' modes."""
    params = list(inspect.signature(rule).parameters.values())[1:]  # g is always passed
    positional = [p.name for p in params if p.kind in _POSITIONAL]
    rest = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    modes = dict.fromkeys(positional + [rest] if rest else positional)
    if not positional:
        raise TypeError(f"VJP rule {_rule_name(rule)} must take (g, out, *inputs, **params)")
    for token in declared.split():
        name, dot, attr = token.partition(".")
        if name not in modes or (dot and attr != "shape") or modes[name] is not None:
            raise ValueError(
                f"VJP rule {_rule_name(rule)} declares reads={declared!r}: {token!r} is not "
                f"one of its arguments ({', '.join(modes)}), once, bare or with .shape (g and "
                f"the keyword params are always passed)")
        modes[name] = "meta" if dot else "data"
    return (modes[positional[0]], tuple(modes[n] for n in positional[1:]),
            modes[rest] if rest else "data")


def _rule_name(rule) -> str:
    code = getattr(rule, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return getattr(rule, "__qualname__", repr(rule)) + where


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
