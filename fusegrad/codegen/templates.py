"""Scalar code templates: one Python expression per primitive and dtype, as in tinygrad's
renderer. Kernels are loops whose bodies are these expressions, one line per IR value.

`{0}`, `{1}`, ... are the operands (names, loads or literals, so repeating one is free);
`{zero}`, `{one}`, `{minus_one}` are constants of the operand dtype. A template is a string or a
dict keyed by dtype ("f" for both floats). float32 constants are written `np.float32(...)` so
nothing widens to float64. Semantics follow runtime/interpreter.py exactly: integer div is floor
division, maximum/minimum propagate nan, logistic is the stable form, and `and`/`or`/`not` on
i64 are logical (0 or 1), as NumPy's logical ufuncs cast back to i64.

The transcendental functions come from codegen/mathlib.py (branch-free, so loops vectorize)
when USE_MATHLIB is on and the module imports; else from `math`. That is the one switch. A
kernel asks for them only where they pay: in loops, and at most MATHLIB_MAX_CALLS of them,
because Numba inlines each call's IR and compile time grows faster than linearly with it.
"""

from __future__ import annotations

import math
import os

import numpy as np

MATH_FUNCS = ("exp", "expm1", "log", "log1p", "tanh", "logistic", "erf", "sin", "cos")
USE_MATHLIB = os.environ.get("FUSEGRAD_MATHLIB", "1") != "0"
MATHLIB_MAX_CALLS = 24

TEMPLATES: dict = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "neg": "(-{0})",
    "div": {"f": "({0} / {1})", "i64": "({0} // {1})"},
    "pow": {"f": "({0} ** {1})", "i64": "ipow({0}, {1})"},
    "maximum": "({0} if {0} >= {1} or {0} != {0} else {1})",
    "minimum": "({0} if {0} <= {1} or {0} != {0} else {1})",
    "abs": "abs({0})",
    "sign": {"f": "({one} if {0} > {zero} else ({minus_one} if {0} < {zero} else {0}))",
             "i64": "({one} if {0} > {zero} else ({minus_one} if {0} < {zero} else {zero}))"},
    "sqrt": "np.sqrt({0})", "rsqrt": "({one} / np.sqrt({0}))",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})",
    "and": {"bool": "({0} & {1})", "i64": "np.int64(({0} != 0) & ({1} != 0))"},
    "or": {"bool": "({0} | {1})", "i64": "np.int64(({0} != 0) | ({1} != 0))"},
    "not": {"bool": "(not {0})", "i64": "np.int64({0} == 0)"},
    "select": "({1} if {0} else {2})",
    # NumPy's bits: np.floor & co. are LLVM's rounding intrinsics; Numba's float % is CPython's
    # (the sign of the divisor, a signed zero copied from it, nan for x % 0 under the numpy
    # error model), where its np.remainder loses the zero's sign. Integer x % 0 is 0, as NumPy;
    # integer fmod is built on % (np.fmod would trap on x % 0 and on INT64_MIN % -1).
    "floor": "np.floor({0})", "ceil": "np.ceil({0})", "round": "np.rint({0})",
    "trunc": "np.trunc({0})", "remainder": "({0} % {1})",
    "fmod": {"f": "np.fmod({0}, {1})",
             "i64": "({0} % {1} - ({1} if {0} % {1} != 0 and ({0} < 0) != ({1} < 0) else 0))"},
}
MATH_FALLBACK = {"exp": "math.exp", "expm1": "math.expm1", "log": "math.log",
                 "log1p": "math.log1p", "tanh": "math.tanh", "erf": "math.erf",
                 "sin": "math.sin", "cos": "math.cos", "logistic": "stable_logistic_{dtype}"}
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


def math_name(prim: str, dtype: str, vectorized: bool = True) -> str:
    """The name a kernel calls for a transcendental function (see emit.py's imports)."""
    funcs = mathlib_funcs()
    if vectorized and funcs is not None and (prim, dtype) in funcs:
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
    if prim in MATH_FUNCS:
        return f"{math_name(prim, dtype, vectorized)}({operands[0]})"
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
POISON_FILL = {"float32": "np.nan", "float64": "np.nan", "int64": "-9223372036854775808",
               "bool": "True", "bool_": "True"}


def poison_on() -> bool:
    return os.environ.get("FUSEGRAD_POISON", "") not in ("", "0")


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
