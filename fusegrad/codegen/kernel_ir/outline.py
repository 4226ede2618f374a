"""Which groups are hot, and scalar functions for the others.

A group is hot when it visits at least BIG elements in loops of at least HOT_EXTENT
iterations: run.py compiles it with LLVM's O2 and its loop vectorizer, rewrite.py gives it
accumulators, lanes and threads. A long function of a few elements (the 1 500-op chain on
f64[4]) is not: O2's cost grows faster than its length, and there is no loop to vectorize.

In the other groups (compiled at level 0, linear in their length) a primitive whose rule is
at least OUTLINE_STATEMENTS statements (mathlib's polynomial exp, log, sin, tanh...) is a
`Call` of one scalar Function of the program, built once per (primitive, operand dtypes,
params) from the same builder rule and compiled at O2 with the hot groups: the statements are
the same, with no fast-math flags, so the bits are the same as inline, and a program holding
thousands of exp calls compiles each once instead of once per use.
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

    def scalar(self, b, op, xs, hot_group: bool):
        """op's value from the registers xs: its rule inline (hot groups, short rules,
        constant operands, rules that may raise), else a Call."""
        rule = PRIMITIVES[op.prim].scalar
        if hot_group or any(isinstance(x, Const) for x in xs):
            return rule(b.at(op.loc), *xs, **op.params)
        key = (op.prim, tuple(x.dtype for x in xs), repr(sorted(op.params.items())))
        if key not in self.names:
            self.names[key] = self._define(rule, xs, op.params)
        name = self.names[key]
        if name is None:
            return rule(b.at(op.loc), *xs, **op.params)
        fn = self.functions[name]
        out = b.fresh(fn.result.dtype)
        b.out.append(Call(out, name, tuple(xs), b.note))
        return out

    def _define(self, rule, xs, params) -> str | None:
        b = Builder(errors=[])
        args = tuple(b.fresh(x.dtype, "a") for x in xs)
        result = rule(b, *args, **params)
        if b.errors or len(b.out) < OUTLINE_STATEMENTS or not isinstance(result, Reg) or \
                not all(isinstance(s, Alu) for s in b.out):
            return None
        name = f"fgfn{next(_NAMES)}"
        self.functions[name] = Function(args, tuple(b.out), result)
        return name
