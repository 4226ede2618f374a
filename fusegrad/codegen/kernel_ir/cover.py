"""Which ops the kernel IR has a form of: `covers(fn)` names the first op of fn it cannot run;
`is_host(op)` says which run as host steps (host.py) rather than compiled: the registry's
host category, and the few ops with no compiled form (`host_reason` says why: a reduction
of bools, a long matmul of integers), which run their registry implementation as the
interpreter does."""

from __future__ import annotations

from ...ir.control import nested
from ...ir.primitives import PRIMITIVES
from ...passes.schedule import SMALL_DOT_K
from .build import GATHERS, REDUCTIONS, SHAPES
from .folds import FOLDS
from .nodes import DTYPES

COMPILED = {"cumprod"}          # host-category prims the kernel IR compiles (folds.py)
LOOPS = ("scan", "while_loop", "cond")      # compiled in place where they can (control.py)
_OTHER = {"reshape", "constant", "iota", "full", "matmul", *SHAPES, *REDUCTIONS, *GATHERS,
          *FOLDS}


def covers(fn) -> str | None:
    """None if the kernel IR runs every op of fn (compiled, or as a host step), else why not
    (the first op it cannot run)."""
    from .jit import DATA_OFFSET, ITEMS_OFFSET
    if DATA_OFFSET is None or ITEMS_OFFSET is None:
        return "the address of an array's data or a tuple's items cannot be found"
    for op in fn.ops:
        why = _unsupported(op)
        if why:
            return f"{op.prim} at {op.loc or '?'}: {why}"
    return None


def _unsupported(op) -> str | None:
    """Why op can be neither compiled nor a host step: a dtype the IR lacks, or an op a host
    step cannot stand for (an elementwise op joins its neighbours' loop, plan.py)."""
    if any(v.dtype not in DTYPES for v in (*op.inputs, *op.outputs)):
        return "a value of another dtype"
    entry = PRIMITIVES[op.prim]
    if entry.category == "elementwise":
        return _lacks(op, None)
    if entry.category == "composite":
        return "a composite op (passes.lower expands them before codegen)"
    return None


def host_reason(op) -> str | None:
    """Why op, of no host category, runs as a host step (None: it compiles)."""
    from .. import cblas
    if PRIMITIVES[op.prim].category in ("host", "elementwise", "composite"):
        return None
    return _lacks(op, cblas.BITS)


def covers_op(op, loops: bool = False) -> bool:
    """Whether the kernel IR runs op (with loops: compiled, no host step)."""
    if loops and is_host(op):
        return False
    return _unsupported(op) is None


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
        if k > SMALL_DOT_K and op.out.dtype not in ("f32", "f64"):
            return f"a matmul of {op.out.dtype} over {k} > SMALL_DOT_K terms: no ?gemm"
        if k > SMALL_DOT_K and blas_bits is None:
            return "a long matmul without a ?gemm (no CBLAS found)"
        if op.out.dtype == "bool":
            return "a matmul of bools"
    return None


def compiles(op) -> bool:
    """Whether a scan, while_loop or cond compiles in place: every op its Functions hold has
    a compiled form (no host step, nested control flow included)."""
    return op.prim in LOOPS and all(covers_op(o, loops=True) for _, fn in nested(op)
                                    for o in fn.ops)


def is_host(op) -> bool:
    """Whether op runs as a host step: the registry's host category, but cumprod and the
    control flow that compiles in place; and an op with no compiled form (host_reason)."""
    if PRIMITIVES[op.prim].category == "host":
        return op.prim not in COMPILED and not compiles(op)
    return host_reason(op) is not None


def kind_of(op) -> str | None:
    """build.py's group kind for a host step."""
    return "host" if is_host(op) else None
