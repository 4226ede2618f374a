"""The SSA IR: types, values, ops, functions, and the registry of primitives."""

from .core import Builder, Function, Op, Value
from .primitives import (COMPOSITES, ELEMENTWISE, PRIMITIVES, REDUCTIONS, Prim, Primitive,
                         ShapeError)
from .types import TensorType, dtype_name
from .printer import print_function
from .parser import parse, ParseError
from .verify import verify, VerifyError

__all__ = ["Builder", "Function", "Op", "Value", "COMPOSITES", "ELEMENTWISE", "REDUCTIONS",
           "PRIMITIVES", "Prim", "Primitive", "ShapeError", "TensorType", "dtype_name",
           "print_function", "parse", "ParseError", "verify", "VerifyError"]
