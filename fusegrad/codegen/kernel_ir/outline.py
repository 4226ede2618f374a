"""Which groups are hot, and the scalar functions every group calls.

A group is hot when it visits at least BIG elements in loops of at least HOT_EXTENT
iterations: run.py compiles it with LLVM's O2 and its loop vectorizer, rewrite.py gives it
accumulators, lanes and threads. A long function of a few elements (the 1 500-op chain on
f64[4]) is not: O2's cost grows faster than its length, and there is no loop to vectorize.

A primitive whose rule is at least OUTLINE_STATEMENTS statements (mathlib's polynomial exp,
log, tanh...) is a `Call` of one scalar Function of the program, named after the primitive,
built once per (primitive, operand dtypes, params) from the same builder rule and compiled at
O2 with the hot groups: the statements are the same, with no fast-math flags, so the bits are
the same as inline. The other groups (compiled at level 0, linear in their length) call it,
so a program holding thousands of exp calls compiles each once instead of once per use; the
hot groups' loops call it too, and LLVM inlines it there (`alwaysinline`) before its loop
vectorizer runs, so the generated text says `tanh` once per use and defines it once.
"""

from __future__ import annotations

import itertools

from ...ir.primitives import PRIMITIVES
from .builder import Builder
from .nodes import Alu, Call, Const, Function, Reg

BIG = 1024                  # elements a group visits
HOT_EXTENT = 256            # iterations of its longest loop
OUTLINE_STATEMENTS = 12
_NAMES = itertools.count()


def hot(work: int, elements: int) -> bool:
    """Whether a group visiting `work` elements, `elements` at most in one loop, is hot."""
    return work >= BIG and elements >= HOT_EXTENT


class Outlines:
    """The program's scalar Functions (name -> Function), and which key has which."""

    def __init__(self):
        self.functions: dict = {}
        self.names: dict = {}       # (prim, dtypes, params) -> name, or None: inline

    def scalar(self, b, op, xs):
        """op's value from the registers xs: its rule inline (short rules, constant operands,
        rules that may raise), else a Call, in hot groups too (LLVM inlines it there)."""
        rule = PRIMITIVES[op.prim].scalar
        if any(isinstance(x, Const) for x in xs):
            return rule(b.at(op.loc), *xs, **op.params)
        key = (op.prim, tuple(x.dtype for x in xs), repr(sorted(op.params.items())))
        if key not in self.names:
            self.names[key] = self._define(op.prim, rule, xs, op.params)
        name = self.names[key]
        if name is None:
            return rule(b.at(op.loc), *xs, **op.params)
        fn = self.functions[name]
        out = b.fresh(fn.result.dtype)
        b.out.append(Call(out, name, tuple(xs), b.note))
        return out

    def _define(self, prim, rule, xs, params) -> str | None:
        b = Builder(errors=[])
        args = tuple(b.fresh(x.dtype, "a") for x in xs)
        result = rule(b, *args, **params)
        if b.errors or len(b.out) < OUTLINE_STATEMENTS or not isinstance(result, Reg) or \
                not all(isinstance(s, Alu) for s in b.out):
            return None
        name = f"{prim}.{next(_NAMES)}"
        self.functions[name] = Function(args, tuple(b.out), result)
        return name
