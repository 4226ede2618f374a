"""How a Function is compiled, and why: the one decision compile_numba, tiered execution and
the compile worker ask for.

    kernel_ir       the kernel IR (kernel_ir/): every program it covers, of every dtype, index
                    ops, host steps and control flow included (scan, while_loop, cond
                    compiled in place); a scan body that stays a host step, run from
                    Python each step
    glue            control flow compiled, a little glue around it on the interpreter
    numba           generated Numba source: f64 math on many elements (`math_heavy`), f64
                    broadcasts written out (`broadcast_heavy`), and what the kernel IR lacks

`choose` returns (path, reason); compile_numba logs both under FUSEGRAD_LOG=compile.
`renderer` says (the same way) which text the kernel IR is rendered to: LLVM IR or Numba.
"""

from __future__ import annotations

import os

from ..ir.control import nested
from ..ir.primitives import PRIMITIVES
from . import kernel_ir, loops

KERNEL_IR = os.environ.get("FUSEGRAD_KERNEL_IR", "1") != "0"
# A function of control flow and at most this much glue around it runs the glue on the
# interpreter: the RNN of benchmarks/compile_time.py has 10 glue ops (fills, two sums), which
# NumPy runs in 63 us a call (of 1.04 ms) and Numba took 1.8 s to compile (kernels, segments).
GLUE_MAX_OPS = 16
GLUE_MAX_ELEMENTS = 1 << 14


def glue_only(ir) -> bool:
    """Whether ir is control-flow ops (loops.HOSTS) with only a little small glue around."""
    glue = [op for op in ir.ops if op.prim not in loops.HOSTS]
    return len(glue) < len(ir.ops) and len(glue) <= GLUE_MAX_OPS and all(
        v.type.size <= GLUE_MAX_ELEMENTS for op in glue for v in op.outputs)


_INDEX_OPS = {"take", "take_along_axis", "scatter_add", "scatter_add_along_axis"}


# An f64 program whose transcendental math (the registry's `libm` primitives) covers at least
# MATH_ELEMENTS elements goes to Numba: benchmarks/run.py's W1 (tanh and sigmoid of 10**6
# elements) runs in 5.8 ms there and 11.7 ms through the kernel IR on one thread (its mathlib
# tanh and logistic in LLVM's vectorized loop, and the value's sum a second pass), 6.1 ms on
# two, which it takes only while a core is idle. At 10**4 elements the kernel IR is twice as
# fast (68 us against 150).
MATH_ELEMENTS = 1 << 19


def math_heavy(ir) -> bool:
    """Whether ir's transcendental elementwise ops visit at least MATH_ELEMENTS elements."""
    return sum(op.out.type.size for op in ir.ops
               if PRIMITIVES[op.prim].libm is not None) >= MATH_ELEMENTS


def choose(ir, scan=None) -> tuple:
    """(path, reason) for compiling ir (a scan body when scan is (num_consts, num_carry))."""
    why_not = kernel_ir.covers(ir) if KERNEL_IR else "it all: it is off (FUSEGRAD_KERNEL_IR=0)"
    special = _needs_numba_today(ir)
    # FUSEGRAD_KERNEL_IR=all (read on each call) sends these to the kernel IR too, for measuring.
    if why_not is None and special is None and scan is None and \
            os.environ.get("FUSEGRAD_KERNEL_IR") != "all" and \
            not any(nested(op) for op in ir.ops):
        if math_heavy(ir):
            return "numba", "f64 math on many elements: Numba's loops run it faster"
    if scan is not None:
        if why_not is None:
            return "kernel_ir", "a scan body (of a host step), run from Python each step"
        return "numba", f"a scan body the kernel IR lacks {why_not} for: Numba's loop"
    if why_not is None:
        return "kernel_ir", f"{special or 'f64 only'}, which the kernel IR compiles in LLVM"
    if glue_only(ir):
        return "glue", f"control flow with a little glue around it (the kernel IR lacks " \
                       f"{why_not})"
    return "numba", f"the kernel IR lacks {why_not}"


RENDERERS = ("llvm", "numba")


def renderer() -> tuple:
    """(renderer, reason): the kernel IR's text, FUSEGRAD_RENDERER=llvm|numba (read at each
    compile). LLVM by default: llvmlite compiles it in a fraction of Numba's time, with the
    same bits; Numba's rendering is kept selectable for its prange threads and caching."""
    name = os.environ.get("FUSEGRAD_RENDERER", "")
    if name in RENDERERS:
        return name, f"FUSEGRAD_RENDERER={name}"
    if name:
        raise ValueError(f"FUSEGRAD_RENDERER={name!r}: expected one of {', '.join(RENDERERS)}")
    return "llvm", "the default (FUSEGRAD_RENDERER unset)"


def _needs_numba_today(ir) -> str | None:
    """What the reason names: float32, int64 values, or an index op, in ir or in the
    Functions its control flow holds (what took Numba's slow compile before the kernel IR)."""
    ops = list(_all_ops(ir))
    for op in ops:
        if op.prim in _INDEX_OPS:
            return f"integer indexing ({op.prim})"
    values = [*ir.params, *(v for op in ops for v in op.outputs)]
    dtypes = sorted({v.dtype for v in values} - {"f64", "bool"})
    return f"values of {', '.join(dtypes)}" if dtypes else None


def _all_ops(ir):
    for op in ir.ops:
        yield op
        for _, fn in nested(op):
            yield from _all_ops(fn)


def numba_free(ir) -> bool:
    """Whether the kernel IR compiles ir without Numba: the Functions its host steps of
    control flow hold (compiled on their own) take no Numba either."""
    for op in ir.ops:
        if op.prim in loops.HOSTS and kernel_ir.is_host(op):
            scan = (op.params["num_consts"], op.params["num_carry"]) \
                if op.prim == "scan" else None
            for _, fn in nested(op):
                path, _ = choose(fn, scan)
                if path == "numba" or path in ("glue", "kernel_ir") and not numba_free(fn):
                    return False
    return True
