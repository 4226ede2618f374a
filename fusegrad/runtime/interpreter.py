"""The IR interpreter: the env/read/write loop over each primitive's NumPy implementation.

This is the reference semantics of the IR; every backend is compared with it. The loop
(eval_function) and the implementations are the registry's, in fusegrad/ir/ (evaluate.py),
shared with the eager engine, bind() on plain NumPy inputs and the control-flow primitives,
which run their nested Functions with it.
"""

from __future__ import annotations

from ..ir.evaluate import apply, eval_function

__all__ = ["apply", "eval_function", "Interpreted"]


class Interpreted:
    """The "interp" backend: the optimized Function run by eval_function."""

    kernels = 0
    source = ""

    def __init__(self, fn):
        self.ir = fn

    def __call__(self, leaves) -> list:
        return eval_function(self.ir, leaves)
