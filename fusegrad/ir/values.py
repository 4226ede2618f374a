"""The nodes of the SSA IR: Values, defined once, and the Ops that define them.

They live apart from core.py (Function, Builder) so that the printer and the DOT drawing, which
core.py calls for `str(fn)` and `fn.to_dot()`, can recognize Values without importing core.
"""

from __future__ import annotations

from typing import Sequence

from .types import TensorType


class Value:
    __slots__ = ("type", "hint", "__weakref__")

    def __init__(self, type: TensorType, hint: str | None = None):
        self.type = type
        self.hint = hint

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"<Value {self.hint or hex(id(self))}: {self.type}>"


class Op:
    __slots__ = ("prim", "inputs", "params", "outputs", "loc", "note")

    def __init__(self, prim: str, inputs: Sequence[Value], params: dict,
                 outputs: Sequence[Value], loc: str | None = None, note: str | None = None):
        self.prim = prim
        self.inputs = tuple(inputs)
        self.params = params
        self.outputs = tuple(outputs)
        self.loc = loc
        self.note = note

    @property
    def out(self) -> Value:
        """The single output of a single-output op."""
        (out,) = self.outputs
        return out

    def __repr__(self) -> str:
        return f"<Op {self.prim} {self.params} at {self.loc}>"
