"""The kernel IR: one small graph of loops over buffers, built once from a Function and its
memory plan, before any text exists, and rendered through a table (llvm.py) to LLVM IR.

    plan.py     which ops share a loop, where every value lives (the one memory plan)
    nodes.py    the IR: loops, loads and stores through affine indices, scalar ops, raises,
                BLAS calls
    builder.py  the scalar builder a primitive's registry `scalar` rule is written over
    mathlib.py  codegen/mathlib.py's polynomial exp, log, tanh, logistic over the builder
    build.py    each op category as kernel IR; folds.py cumsum, cumprod, argmax, argmin
    host.py     host steps: ops run in Python between compiled parts (linalg, sorts, special
                functions, control flow around its compiled bodies)
    control.py  scan, while_loop and cond compiled in place
    cover.py    which ops have a form here (`covers`), which run as host steps (`is_host`)
    rewrite.py  rewrites of the IR to itself: accumulators in registers, sums in lanes,
                parallel loops, small loops unrolled
    outline.py  which groups are hot; scalar Functions the other groups call
    llvm.py     the LLVM renderer; run.py compiles it (jit.py: llvmlite) and calls it
    numba.py    the Numba renderer (numba_support.py: what its text imports), compiled
                through compile.py's module cache

`covers(fn)` says whether every op of fn has a form here, or names the first that has not.
"""

from __future__ import annotations

from ...ir.evaluate import eval_function
from .build import build, register
from .control import CONTROL
from .cover import covers, covers_op, is_host, kind_of
from .folds import FOLDS
from .host import build_host
from .plan import Plan

register({**FOLDS, "host": build_host, **CONTROL}, kind_of)


def compile_kernel_ir(fn, compile_fn=None, rewrite: bool = True, renderer: str = "llvm",
                      cache=None):
    """(run, source) for fn, which `covers`, rendered to LLVM IR or to Numba Python source
    (cache: compile.py's module cache, numba.compile_program says what). compile_fn(fn,
    scan=None) compiles the nested Functions of control flow that stays a host step
    (compile.py passes compile_numba, which chooses their path); without it they run on the
    interpreter. rewrite=False skips rewrite.optimize."""
    from .jit import DATA_OFFSET
    from .rewrite import optimize
    program, plan = build(fn, Plan(fn))
    if rewrite:
        optimize(program)
    if renderer == "numba":
        from .numba import compile_program as through_numba
        return through_numba(program, plan, cache, compile_fn or _interpreted)
    from .run import compile_program
    return compile_program(program, plan, DATA_OFFSET, compile_fn or _interpreted)


def _interpreted(fn, scan=None):
    def run(leaves):
        return eval_function(fn, list(leaves))
    run.loop = None
    return run


__all__ = ["covers", "covers_op", "compile_kernel_ir", "build", "is_host", "Plan"]
