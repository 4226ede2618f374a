"""The kernel IR: one small graph of loops over buffers, built once from a Function and its
memory plan, before any text exists, and rendered through a table (llvm.py) to LLVM IR.

    plan.py     which ops share a loop, where every value lives (the one memory plan)
    nodes.py    the IR: loops, loads and stores through affine indices, scalar ops, raises,
                BLAS calls
    builder.py  the scalar builder a primitive's registry `scalar` rule is written over
    mathlib.py  codegen/mathlib.py's polynomial exp, log, tanh, logistic over the builder
    build.py    each op category as kernel IR
    llvm.py     the LLVM renderer; run.py compiles it with llvmlite and calls it
    numba.py    the Numba renderer (numba_support.py: what its text imports), compiled
                through compile.py's module cache

`covers(fn)` says whether every op of fn has a form here, or names the first that has not.
"""

from __future__ import annotations

from ...ir.primitives import PRIMITIVES
from ...passes.schedule import SMALL_DOT_K
from .build import GATHERS, REDUCTIONS, SHAPES, build
from .nodes import DTYPES
from .plan import Plan

_OTHER = {"reshape", "constant", "iota", "full", "matmul", *SHAPES, *REDUCTIONS, *GATHERS}


def covers(fn) -> str | None:
    """None if the kernel IR compiles every op of fn, else why not (the first op it lacks)."""
    from .. import cblas, nests
    if nests.DATA_OFFSET is None:
        return "the address of an array's data cannot be found"
    for op in fn.ops:
        why = _lacks(op, cblas.BITS)
        if why:
            return f"{op.prim} at {op.loc or '?'}: {why}"
    return None


def _lacks(op, blas_bits) -> str | None:
    values = [*op.inputs, *op.outputs]
    if len(op.outputs) != 1 or any(v.dtype not in DTYPES for v in values):
        return "an op of several results or of another dtype"
    entry = PRIMITIVES[op.prim]
    if entry.category == "elementwise":
        if entry.scalar is None:
            return "no scalar rule in its registry entry"
        if any(v.shape != op.out.shape for v in op.inputs):
            return "operands of another shape"
        return None
    if op.prim not in _OTHER:
        return "no kernel IR form"
    if op.prim in REDUCTIONS and op.out.dtype not in ("f32", "f64", "i64"):
        return "a reduction of bools"
    if op.prim.startswith("scatter") and op.out.dtype == "bool":
        return "a scatter of bools"
    if op.prim == "matmul":
        a, b = op.inputs
        k = a.shape[-1]
        if a.type.ndim < 2 or b.type.ndim != a.type.ndim or a.shape[:-2] != b.shape[:-2]:
            return "a matmul of other ranks"
        if k > SMALL_DOT_K and (op.out.dtype not in ("f32", "f64") or blas_bits is None):
            return "a long matmul without a ?gemm"
        if op.out.dtype == "bool":
            return "a matmul of bools"
    return None


def compile_kernel_ir(fn, renderer: str = "llvm", cache=None):
    """(run, source) for fn, which `covers`, rendered to LLVM IR or to Numba Python source
    (cache: compile.py's module cache, numba.compile_program says what)."""
    from .. import nests
    program, plan = build(fn, Plan(fn))
    if renderer == "numba":
        from .numba import compile_program as through_numba
        return through_numba(program, plan, cache)
    from .run import compile_program
    return compile_program(program, plan, nests.DATA_OFFSET)


__all__ = ["covers", "compile_kernel_ir", "build", "Plan"]
