"""The scalar builder: a primitive's scalar math, written once as a rule over it.

A registry entry's `scalar` rule is `rule(b, *xs, **params) -> Reg`, xs the operands as
registers; it calls the methods below, each appending one `Alu` node to the statements being
built, noted with the builder's `note` (the op's equation and file:line: nodes.py). The ops
are the small fixed set every renderer has a row for:

    arithmetic  add sub mul fdiv neg fma sdiv srem        (of the operands' dtype; fma floats)
    float       sqrt fabs rint floor copysign
    compare     lt le gt ge eq ne uno                     (-> bool; ordered, except ne, uno)
    logic       and or xor shl lshr ashr select
    casts       convert (to another dtype), bitcast (a float's bits as a same-width integer)
    libm        a call of C's function args[0] (LIBM: fmod, erfc, lgamma, tgamma, sin, cos),
                only where no vectorizable algorithm exists

A rule may also stop the call: `b.fail(cond, error, message, value)` appends a `Raise` whose
message names the op's file:line (the builder `at(loc)` returns for the op).

Registers of dtype i32 exist for float32's exponent-bit tricks; memory holds only DTYPES.
Python numbers are accepted where a register is, as constants of the other operand's dtype.
"""

from __future__ import annotations

import itertools

from .nodes import Alu, Const, Raise, Reg

FLOATS = ("f32", "f64")
INT_OF = {"f32": "i32", "f64": "i64"}
# C's functions the `libm` op calls: name -> (dtype, arity, Python's spelling, for Numba)
LIBM = {"fmod": ("f64", 2, "np.fmod"), "erfc": ("f64", 1, "math.erfc"),
        "lgamma": ("f64", 1, "math.lgamma"), "tgamma": ("f64", 1, "math.gamma"),
        "sin": ("f64", 1, "math.sin"), "cos": ("f64", 1, "math.cos")}


class Builder:
    """Appends scalar statements to `out` (a list the caller may swap: a loop's body)."""

    def __init__(self, names=None, out=None, errors=None, loc=None, note=""):
        self.names = names if names is not None else itertools.count()
        self.out = out if out is not None else []
        self.errors = errors if errors is not None else []
        self.loc = loc
        self.note = note            # the equation and file:line every node made now carries

    def at(self, loc) -> "Builder":
        """A builder appending to the same statements for the op at the user's line `loc`."""
        return Builder(self.names, self.out, self.errors, loc, self.note)

    def fresh(self, dtype: str, stem: str = "v") -> Reg:
        return Reg(f"%{stem}{next(self.names)}", dtype)

    def emit(self, op: str, dtype: str, *args) -> Reg:
        out = self.fresh(dtype)
        self.out.append(Alu(out, op, args, self.note))
        return out

    @staticmethod
    def const(value, dtype: str) -> Const:
        return Const(value, dtype)

    @staticmethod
    def dtype(x) -> str:
        return x.dtype

    def is_float(self, x) -> bool:
        return x.dtype in FLOATS

    def _args(self, *xs) -> tuple:
        dtype = next(x.dtype for x in xs if isinstance(x, (Reg, Const)))
        return dtype, tuple(x if isinstance(x, (Reg, Const)) else Const(x, dtype) for x in xs)

    def _same(self, op, *xs) -> Reg:
        dtype, args = self._args(*xs)
        return self.emit(op, dtype, *args)

    # arithmetic, of the operands' dtype
    def add(self, x, y): return self._same("add", x, y)           # noqa: E704
    def sub(self, x, y): return self._same("sub", x, y)           # noqa: E704
    def mul(self, x, y): return self._same("mul", x, y)           # noqa: E704
    def fdiv(self, x, y): return self._same("fdiv", x, y)         # noqa: E704
    def sdiv(self, x, y): return self._same("sdiv", x, y)         # noqa: E704
    def srem(self, x, y): return self._same("srem", x, y)         # noqa: E704
    def neg(self, x): return self._same("neg", x)                 # noqa: E704
    def fma(self, x, y, z):
        """x * y + z rounded once; of integers (exact, wrapping) a mul and an add."""
        if not self.is_float(x if isinstance(x, (Reg, Const)) else y):
            return self.add(self.mul(x, y), z)
        return self._same("fma", x, y, z)

    def sqrt(self, x): return self._same("sqrt", x)               # noqa: E704
    def fabs(self, x): return self._same("fabs", x)               # noqa: E704
    def rint(self, x): return self._same("rint", x)               # noqa: E704
    def floor(self, x): return self._same("floor", x)             # noqa: E704
    def copysign(self, x, y): return self._same("copysign", x, y)  # noqa: E704
    def and_(self, x, y): return self._same("and", x, y)          # noqa: E704
    def or_(self, x, y): return self._same("or", x, y)            # noqa: E704
    def xor(self, x, y): return self._same("xor", x, y)           # noqa: E704
    def shl(self, x, y): return self._same("shl", x, y)           # noqa: E704
    def lshr(self, x, y): return self._same("lshr", x, y)         # noqa: E704
    def ashr(self, x, y): return self._same("ashr", x, y)         # noqa: E704

    def cmp(self, how: str, x, y) -> Reg:
        _, args = self._args(x, y)
        return self.emit(how, "bool", *args)

    def lt(self, x, y): return self.cmp("lt", x, y)               # noqa: E704
    def le(self, x, y): return self.cmp("le", x, y)               # noqa: E704
    def gt(self, x, y): return self.cmp("gt", x, y)               # noqa: E704
    def ge(self, x, y): return self.cmp("ge", x, y)               # noqa: E704
    def eq(self, x, y): return self.cmp("eq", x, y)               # noqa: E704
    def ne(self, x, y): return self.cmp("ne", x, y)               # noqa: E704

    def select(self, cond, x, y) -> Reg:
        dtype, (x, y) = self._args(x, y)
        return self.emit("select", dtype, cond, x, y)

    def min(self, x, y):
        """y if y < x else x: a nan x is kept (mathlib's `min(x, hi)`)."""
        return self.select(self.lt(y, x), y, x)

    def max(self, x, y):
        return self.select(self.gt(y, x), y, x)

    def convert(self, x, dtype: str):
        return x if x.dtype == dtype else self.emit("convert", dtype, x)

    def bitcast(self, x, dtype: str):
        return self.emit("bitcast", dtype, x)

    def libm(self, name: str, *xs):
        """C's function `name` of xs, in its own dtype (a float32 widened for a double
        function, the result rounded back, as SciPy's float32 loops compute): a call no loop
        vectorizes, so only where mathlib*.py has no algorithm."""
        ctype, arity, _ = LIBM[name]
        assert arity == len(xs), name
        dtype, args = self._args(*xs)
        wide = tuple(self.convert(x, ctype) for x in args)
        return self.convert(self.emit("libm", ctype, name, *wide), dtype)

    def fail(self, cond, error: type, message: str, value=0) -> None:
        """Stop the call with `error(message)` where cond holds; "{}" in message quotes the
        i64 `value`."""
        where = f" (at {self.loc})" if self.loc else ""
        self.errors.append((error, message + where))
        value = value if isinstance(value, (Reg, Const)) else Const(value, "i64")
        self.out.append(Raise(cond, len(self.errors), value, self.note))

    def math(self, name: str, *xs):
        """A transcendental function of mathlib*.py's algorithms, expanded in place."""
        from . import mathlib, mathlib_arc, mathlib_pow
        for module in (mathlib, mathlib_arc, mathlib_pow):
            if name in module.FUNCTIONS:
                return module.FUNCTIONS[name](self, *xs)
        raise KeyError(f"mathlib has no {name}")
