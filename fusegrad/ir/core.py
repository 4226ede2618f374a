"""The SSA IR: Values defined once, Ops in definition order, and Functions that hold them.

A Function is immutable: passes build new ones with a Builder. Values are compared by identity;
their printed names (%0, %x) are assigned by the printer, never stored. An Op carries the user's
source location (`file.py:12`) and an optional note (the provenance of a VJP op), both printed
as a trailing comment. Value and Op are defined in values.py: the printer and dot.py, which a
Function calls (lazily) for `str(fn)` and `fn.to_dot()`, import them from there, not from here.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from .primitives import ShapeError, infer_types
from .types import TensorType
from .values import Op, Value

__all__ = ["Builder", "Function", "Op", "Value"]


class Function:
    __slots__ = ("name", "params", "ops", "results", "__weakref__", "_text")

    def __init__(self, name: str, params: Sequence[Value], ops: Sequence[Op],
                 results: Sequence[Value]):
        self.name = name
        self.params = tuple(params)
        self.ops = tuple(ops)
        self.results = tuple(results)
        self._text = None

    @property
    def param_types(self) -> tuple[TensorType, ...]:
        return tuple(p.type for p in self.params)

    @property
    def result_types(self) -> tuple[TensorType, ...]:
        return tuple(r.type for r in self.results)

    def __str__(self) -> str:
        if self._text is None:
            from .printer import print_function
            self._text = print_function(self)
        return self._text

    def __repr__(self) -> str:
        return f"<Function @{self.name}: {len(self.ops)} ops>"

    def to_dot(self, **kwargs) -> str:
        from .dot import to_dot
        return to_dot(self, **kwargs)

    def render(self, path, **kwargs):
        from .dot import render
        return render(self, path, **kwargs)


class Builder:
    """Appends Ops with inferred types; `build` freezes the result into a Function."""

    def __init__(self, name: str = "f"):
        self.name = name
        self.params: list[Value] = []
        self.ops: list[Op] = []

    def param(self, type: TensorType, hint: str | None = None) -> Value:
        value = Value(type, hint)
        self.params.append(value)
        return value

    def add(self, prim: str, inputs: Iterable[Value] = (), params: dict | None = None,
            loc: str | None = None, note: str | None = None) -> tuple[Value, ...]:
        """Append `prim(inputs){params}`; returns its outputs (always a tuple)."""
        inputs = tuple(inputs)
        params = params or {}
        try:
            types = infer_types(prim, [v.type for v in inputs], params)
        except ShapeError as e:
            where = f" at {loc}" if loc else ""
            raise ShapeError(f"{e}{where}") from None
        outputs = tuple(Value(t) for t in types)
        self.ops.append(Op(prim, inputs, params, outputs, loc, note))
        return outputs

    def add1(self, prim: str, inputs: Iterable[Value] = (), params: dict | None = None,
             loc: str | None = None, note: str | None = None) -> Value:
        (out,) = self.add(prim, inputs, params, loc, note)
        return out

    def append(self, op: Op) -> None:
        """Append an existing Op unchanged (passes that copy most ops use this)."""
        self.ops.append(op)

    def build(self, results: Sequence[Value], name: str | None = None) -> Function:
        return Function(name or self.name, self.params, self.ops, results)
