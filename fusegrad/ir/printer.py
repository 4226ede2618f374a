"""The text form of the IR: one line per op, names assigned here and never stored.

    func @loss(%x: f64[4], %w: f64[4]) -> (f64[]) {
      %0 = mul %x, %w : f64[4]                 # model.py:7
      %1 = reduce_sum %0 {axes=(0,)} : f64[]   # model.py:8  vjp[mul] of %5
      return %1
    }

Parameters are named from their hints, op outputs are numbered in order. Param values print as
Python-like literals that parser.py reads back exactly (floats via repr, arrays with their
dtype), so `str(parse(str(fn))) == str(fn)`. A param holding a Function (a loop's body, a
cond's branch: ir/control.py) prints as `@name`, and the Function itself follows the op's line
as an indented region with names of its own, as MLIR prints regions:

      %2, %3 = scan %w, %h, %xs {body=@step, length=4, ...} : f64[3], f64[4,3]
        func @step(%arg0: f64[3,3], %arg1: f64[3], %arg2: f64[3]) -> (f64[3], f64[3]) {
          ...
        }
 The printer never fails on malformed IR (the
verifier uses it to name things): unknown values print as `%undefN`. docs/ir.md has the grammar.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING

import numpy as np

from .control import is_function
from .types import NP_DTYPES, TensorType, dtype_name
from .values import Op, Value

if TYPE_CHECKING:
    from .core import Function

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
AUTO_PARAM_RE = re.compile(r"arg(\d+)\Z")
COMMENT_COLUMN_LIMIT = 80   # longer lines do not push every comment to the right


def print_function(fn: Function) -> str:
    """The text IR of `fn` (what `str(fn)` returns)."""
    names = value_names(fn)
    header = ", ".join(f"{names[p]}: {format_type(p.type)}" if isinstance(p, Value) else "?"
                       for p in fn.params)
    results = ", ".join(_type_of(r) for r in fn.results)
    lines = [(format_op(op, names), format_comment(op.loc, op.note)) for op in fn.ops]
    width = max((len(code) for code, comment in lines
                 if comment is not None and len(code) <= COMMENT_COLUMN_LIMIT), default=0)
    body = []
    for op, (code, comment) in zip(fn.ops, lines):
        body.append(f"{code.ljust(width)}   # {comment}" if comment is not None else code)
        for _, sub in functions_of(op):
            body += ["    " + line for line in print_function(sub).split("\n")]
    ret = "  return " + ", ".join(_name(r, names) for r in fn.results)
    return "\n".join([f"func @{format_func_name(fn.name)}({header}) -> ({results}) {{",
                      *body, ret.rstrip(), "}"])


def functions_of(op: Op) -> list:
    """The (key, Function) params of op in printed (sorted) order: its nested regions."""
    params = op.params or {}
    return [(k, params[k]) for k in sorted(params, key=str) if is_function(params[k])]


def value_names(fn: Function) -> dict[Value, str]:
    """Printed name (with %) of every Value in fn, keyed by identity."""
    names: dict[Value, str] = {}
    params = [p for p in fn.params if isinstance(p, Value)]
    for p, name in zip(params, param_names(params), strict=True):
        names.setdefault(p, f"%{name}")
    counter = 0
    for op in fn.ops:
        for v in op.outputs:
            if isinstance(v, Value) and v not in names:
                names[v] = f"%{counter}"
                counter += 1
    undefined = 0
    for v in [v for op in fn.ops for v in op.inputs] + list(fn.results):
        if isinstance(v, Value) and v not in names:
            names[v] = f"%undef{undefined}"
            undefined += 1
    return names


def param_names(params) -> list[str]:
    """A hint names its parameter when it is a valid name used by no other parameter."""
    hints = [p.hint if isinstance(p.hint, str) and NAME_RE.match(p.hint) else None
             for p in params]
    out = []
    for i, hint in enumerate(hints):
        auto = AUTO_PARAM_RE.match(hint or "")
        usable = hint is not None and hints.count(hint) == 1 and (not auto or hint == f"arg{i}")
        out.append(hint if usable else f"arg{i}")
    return out


def describe_op(op: Op, names: dict[Value, str]) -> str:
    """`%3 = mul`: how error messages name an op."""
    outs = ", ".join(_name(v, names) for v in op.outputs)
    return f"{outs} = {op.prim}" if outs else str(op.prim)


def format_op(op: Op, names: dict[Value, str]) -> str:
    line = "  " + describe_op(op, names)
    if op.inputs:
        line += " " + ", ".join(_name(v, names) for v in op.inputs)
    if op.params:
        line += " " + format_params(op.params, op.prim)
    if op.outputs:
        line += " : " + ", ".join(_type_of(v) for v in op.outputs)
    return line


def format_type(t) -> str:
    return str(t) if isinstance(t, TensorType) else f"<not a type: {type(t).__name__}>"


def format_params(params: dict, prim: str = "") -> str:
    items = []
    for key in sorted(params, key=str):
        value = params[key]
        text = format_array(value) if prim == "constant" and key == "value" \
            else format_literal(value)
        key_text = key if isinstance(key, str) and NAME_RE.match(key) and "." not in key \
            else json.dumps(str(key))
        items.append(f"{key_text}={text}")
    return "{" + ", ".join(items) + "}"


def format_literal(value) -> str:
    """A param value as Python-like text: ints, floats, bools, strings, None, tuples, arrays."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return format_float(float(value))
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "None"
    if isinstance(value, (tuple, list)):
        items = [format_literal(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, np.ndarray):
        return format_array(value)
    if isinstance(value, TensorType):
        return str(value)
    if is_function(value):
        return "@" + format_func_name(value.name)
    return f"<opaque {type(value).__name__}>"


def format_float(x: float) -> str:
    """repr, which round-trips; inf, -inf, nan and -nan (sign bit set) are bare words."""
    if math.isnan(x):
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    return repr(x)


def format_array(value) -> str:
    """`array([1.0, 2.0], f64)`; empty arrays carry their shape: `array([], f64[0,3])`."""
    try:
        array = np.asarray(value)
        name = dtype_name(array.dtype)
    except TypeError:
        return f"<opaque {type(value).__name__}>"
    array = array.astype(NP_DTYPES[name], copy=False)
    if array.size == 0:
        return f"array([], {TensorType(name, array.shape)})"
    element = _ELEMENT_FORMATS[name]
    return f"array({_nested(array.tolist(), element)}, {name})"


def _f32(x: float) -> str:
    """Shortest float32 text when it reads back to the same float32, else the float64 repr."""
    if not math.isfinite(x):
        return format_float(x)
    short = str(np.float32(x))
    return short if float(np.float32(float(short))) == x else repr(x)


_ELEMENT_FORMATS = {"f64": format_float, "f32": _f32, "i64": str, "bool": str}


def _nested(items, element) -> str:
    if isinstance(items, list):
        return "[" + ", ".join(_nested(v, element) for v in items) + "]"
    return element(items)


def format_func_name(name) -> str:
    name = str(name)
    return name if NAME_RE.match(name) else json.dumps(name)


def format_comment(loc, note) -> str | None:
    """`loc  note`; a missing loc prints as `-`; awkward text is JSON-quoted."""
    if loc is None and note is None:
        return None
    loc_text = "-" if loc is None else _comment_field(str(loc), is_loc=True)
    if note is None:
        return loc_text
    return f"{loc_text}  {_comment_field(str(note), is_loc=False)}"


def _comment_field(text: str, is_loc: bool) -> str:
    bare = (text and text == text.strip() and text.isprintable() and not text.startswith('"')
            and not (is_loc and ("  " in text or text == "-")))
    return text if bare else json.dumps(text)


def _name(v, names: dict[Value, str]) -> str:
    return names.get(v, "%?") if isinstance(v, Value) else f"<not a Value: {type(v).__name__}>"


def _type_of(v) -> str:
    return format_type(v.type) if isinstance(v, Value) else "?"
