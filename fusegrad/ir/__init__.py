"""The SSA IR: types, values, ops, functions, primitives and their shape rules."""

from .core import Builder, Function, Op, Value
from .primitives import COMPOSITES, ELEMENTWISE, REDUCTIONS, Prim, ShapeError, shape_rules
from .types import TensorType, dtype_name
from .printer import print_function
from .parser import parse, ParseError
from .verify import verify, VerifyError

__all__ = ["Builder", "Function", "Op", "Value", "COMPOSITES", "ELEMENTWISE", "REDUCTIONS",
           "Prim", "ShapeError", "shape_rules", "TensorType", "dtype_name", "print_function",
           "parse", "ParseError", "verify", "VerifyError"]
