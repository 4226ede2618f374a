"""The IR interpreter: the env/read/write loop over each primitive's NumPy implementation.

This is the reference semantics of the IR; every backend is compared with it. The
implementations are the registry's (ir/elementwise.py and its siblings), evaluated by
ir/evaluate.apply, which the eager engine and bind() on plain NumPy inputs share.
"""

from __future__ import annotations


import numpy as np

from ..ir.evaluate import apply

__all__ = ["apply", "eval_function", "Interpreted"]


def eval_function(fn, args) -> list:
    """Run a Function on concrete arrays, one op at a time: the reference semantics."""
    env = {}

    def read(v):
        return env[v]

    def write(v, x):
        x = np.asarray(x)
        if x.dtype != v.type.np_dtype:
            x = x.astype(v.type.np_dtype)
        if x.shape != v.type.shape:
            raise RuntimeError(f"interpreter: got shape {x.shape} for a value of type {v.type}")
        env[v] = x

    for p, a in zip(fn.params, args, strict=True):
        write(p, a)
    for op in fn.ops:
        try:
            out = apply(op.prim, [read(v) for v in op.inputs], op.params)
        except IndexError as e:     # a gather's index out of bounds: say where it was used
            raise IndexError(f"{e} (at {op.loc})" if op.loc else str(e)) from None
        write(op.out, out)
    return [read(r) for r in fn.results]


class Interpreted:
    """The "interp" backend: the optimized Function run by eval_function."""

    kernels = 0
    source = ""

    def __init__(self, fn):
        self.ir = fn

    def __call__(self, leaves) -> list:
        return eval_function(self.ir, leaves)
