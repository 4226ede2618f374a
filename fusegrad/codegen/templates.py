"""Rendering scalar code: one Python expression per elementwise op, as in tinygrad's renderer.
Kernels are loops whose bodies are these expressions, one line per IR value.

The templates themselves are the registry's (`numba` and `libm` of each entry in
ir/elementwise.py, beside the NumPy implementation they match bit for bit). `{0}`, `{1}`, ...
are the operands (names, loads or literals, so repeating one is free); `{zero}`, `{one}`,
`{minus_one}` are constants of the operand dtype. float32 constants are written
`np.float32(...)` so nothing widens to float64.

The transcendental functions come from codegen/mathlib.py (branch-free, so loops vectorize)
when USE_MATHLIB is on and the module imports; else from `math`. That is the one switch. A
kernel asks for them only where they pay: in loops, and at most MATHLIB_MAX_CALLS of them,
because Numba inlines each call's IR and compile time grows faster than linearly with it.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

from ..ir.primitives import PRIMITIVES

USE_MATHLIB = os.environ.get("FUSEGRAD_MATHLIB", "1") != "0"
MATHLIB_MAX_CALLS = 24

# The registry's scalar forms: a template per elementwise primitive, or a libm call for the
# transcendental ones (which mathlib may replace with an inlined, vectorizable version).
TEMPLATES = {p.name: p.numba for p in PRIMITIVES.values() if p.numba is not None}
MATH_FALLBACK = {p.name: p.libm for p in PRIMITIVES.values() if p.libm is not None}
MATH_FUNCS = tuple(MATH_FALLBACK)
CONVERT = {"f64": "np.float64({0})", "f32": "np.float32({0})", "i64": "np.int64({0})",
           "bool": "({0} != {zero})"}


def mathlib_funcs() -> dict | None:
    """mathlib's FUNCS table, or None when it is switched off or missing."""
    if not USE_MATHLIB:
        return None
    try:
        from . import mathlib
    except ImportError:
        return None
    return getattr(mathlib, "FUNCS", None)


# mathlib's sin and cos reduce their argument by pi/2 with three constants: accurate below
# |x| = 2**43 (2**19 in float32) and silently wrong past it, so kernels call C's (the kernel
# IR's rules do the same).
RANGE_LIMITED = frozenset({"sin", "cos"})


def math_name(prim: str, dtype: str, vectorized: bool = True) -> str:
    """The name a kernel calls for a transcendental function (see emit.py's imports)."""
    funcs = mathlib_funcs()
    if vectorized and funcs is not None and (prim, dtype) in funcs and \
            prim not in RANGE_LIMITED:
        return f"{prim}_{dtype}"
    return MATH_FALLBACK[prim].format(dtype=dtype)


def literal(value, dtype: str) -> str:
    """A scalar constant of an IR dtype as Numba source."""
    if dtype == "bool":
        return "True" if value else "False"
    if dtype == "i64":
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        text = "np.nan"
    elif math.isinf(value):
        text = "np.inf" if value > 0 else "-np.inf"
    else:
        text = repr(value)
    return f"np.float32({text})" if dtype == "f32" else text


def render(prim: str, dtype: str, operands: list[str], vectorized: bool = True) -> str:
    """The scalar expression of an elementwise op; dtype is the operands' dtype. `vectorized`
    asks for mathlib's inlined functions, else the math module's (libm) calls."""
    if prim in MATH_FUNCS:      # unary, or binary (atan2, hypot)
        return f"{math_name(prim, dtype, vectorized)}({', '.join(operands)})"
    template = TEMPLATES[prim]
    if isinstance(template, dict):
        template = template.get(dtype) or template["f"]
    return template.format(*operands, **_constants(dtype))


def render_convert(src_dtype: str, dst_dtype: str, operand: str) -> str:
    if src_dtype == dst_dtype:
        return operand
    return CONVERT[dst_dtype].format(operand, **_constants(src_dtype))


# FUSEGRAD_POISON=1: every buffer generated code allocates or reuses starts out as garbage that
# cannot pass for a result (NaN; the most negative int64, an index no bounds check accepts;
# True), so a kernel that reads a buffer before its writer ran gives NaN on the first call
# instead of a plausible number on some calls. Read when a module is generated: the poisoned
# text is another module, with its own cache entry.
POISON_VALUE = {"float32": math.nan, "float64": math.nan, "int64": -2 ** 63, "bool": True,
                "bool_": True}
POISON_FILL = {k: "np.nan" if isinstance(v, float) else repr(v) for k, v in POISON_VALUE.items()}


def poison_on() -> bool:
    return os.environ.get("FUSEGRAD_POISON", "") not in ("", "0")


def empty(shape, np_dtype: str, poison: bool):
    """A buffer the runner allocates itself (np.empty), poisoned as generated code's are."""
    if poison:
        return np.full(shape, POISON_VALUE[np_dtype], np_dtype)
    return np.empty(shape, np_dtype)


def new_buffer(shape: str, np_dtype: str) -> str:
    """The expression allocating a buffer (np.empty, or a poisoned np.full)."""
    if poison_on():
        return f"np.full({shape}, {POISON_FILL[np_dtype]}, np.{np_dtype})"
    return f"np.empty({shape}, np.{np_dtype})"


def _constants(dtype: str) -> dict:
    if dtype == "bool":
        return {"zero": "False", "one": "True", "minus_one": "True"}
    return {"zero": literal(0, dtype), "one": literal(1, dtype), "minus_one": literal(-1, dtype)}


def reduction_init(prim: str, dtype: str) -> str:
    """The identity an accumulator starts from."""
    if prim == "reduce_sum":
        return literal(0, dtype)
    if prim == "reduce_prod":
        return literal(1, dtype)
    low = prim in ("reduce_max", "argmax")
    if dtype == "bool":
        return "False" if low else "True"
    if dtype == "i64":
        info = np.iinfo(np.int64)
        return str(info.min if low else info.max)
    return literal(-math.inf if low else math.inf, dtype)


def reduction_update(prim: str, acc: str, x: str) -> str:
    """The statement folding x into acc."""
    if prim == "reduce_sum":
        return f"{acc} += {x}"
    if prim == "reduce_prod":
        return f"{acc} *= {x}"
    cmp = ">" if prim == "reduce_max" else "<"
    return f"{acc} = {x} if {x} {cmp} {acc} or {x} != {x} else {acc}"


def py_scalar(dtype: str) -> str:
    """The Python type a runner converts a 0-d argument of an IR dtype to."""
    return {"f32": "float", "f64": "float", "i64": "int", "bool": "bool"}[dtype]


def np_name(dtype: str) -> str:
    """The NumPy name of an IR dtype."""
    return {"f32": "float32", "f64": "float64", "i64": "int64", "bool": "bool_"}[dtype]


SYMBOL = re.compile(r"\b([dc])(\d+)\b")


def symbols_in(text: str) -> list[str]:
    """The dN and cN symbols a piece of code uses (comments excluded), in numeric order."""
    code = "\n".join(line.split("  # ")[0] for line in text.splitlines())
    found = {(m.group(1), int(m.group(2))) for m in SYMBOL.finditer(code)}
    return [f"{kind}{n}" for kind, n in sorted(found)]
