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
    control.py  a scan as a compiled loop of the same program
    llvm.py     the LLVM renderer; run.py compiles it with llvmlite and calls it

`covers(fn)` says whether every op of fn has a form here, or names the first that has not.
"""

from __future__ import annotations

from ...ir.primitives import PRIMITIVES
from ...passes.schedule import SMALL_DOT_K
from .build import GATHERS, REDUCTIONS, SHAPES, build
from .folds import FOLDS
from .control import compiles
from .host import COMPILED, is_host
from .nodes import DTYPES
from .plan import Plan

_OTHER = {"reshape", "constant", "iota", "full", "matmul", *SHAPES, *REDUCTIONS, *GATHERS,
          *FOLDS}


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


def covers_op(op, loops: bool = False) -> bool:
    """Whether the kernel IR has a form of op (with loops: a compiled one, no host step)."""
    from .. import cblas
    if loops and PRIMITIVES[op.prim].category == "host" and op.prim not in COMPILED \
            and not compiles(op):
        return False
    return _lacks(op, cblas.BITS) is None


def _lacks(op, blas_bits) -> str | None:
    if any(v.dtype not in DTYPES for v in (*op.inputs, *op.outputs)):
        return "a value of another dtype"
    entry = PRIMITIVES[op.prim]
    if entry.category == "host":        # a host step, or a scan compiled as a loop
        return None
    if len(op.outputs) != 1:
        return "an op of several results"
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
    if op.prim == "matmul":
        k = op.inputs[0].shape[-1]
        if k > SMALL_DOT_K and (op.out.dtype not in ("f32", "f64") or blas_bits is None):
            return "a long matmul without a ?gemm"
        if op.out.dtype == "bool":
            return "a matmul of bools"
    return None


def compile_kernel_ir(fn, compile_fn=None):
    """(run, LLVM text) for fn, which `covers`; compile_fn compiles the nested Functions of
    its control flow (default: codegen.compile.compile_numba, which chooses their path)."""
    from .. import nests
    from .run import compile_program
    if compile_fn is None:
        from ..compile import compile_numba as compile_fn
    program, plan = build(fn, Plan(fn))
    return compile_program(program, plan, nests.DATA_OFFSET, compile_fn)


__all__ = ["covers", "covers_op", "compile_kernel_ir", "build", "is_host", "Plan"]
