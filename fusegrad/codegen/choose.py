"""How a Function is compiled, and why: the one decision compile_numba, tiered execution and
the compile worker ask for.

    straight        straight-line LLVM: a long function of scalars and small f64 arrays
    straight_scan   a scan body of small f64 arrays as one LLVM loop
    glue            control flow compiled, a little glue around it on the interpreter
    nests           f64 LLVM loop nests (nests.py), where its cost model prefers them
    kernel_ir       the kernel IR (kernel_ir/): float32, int64 and index ops (gathers,
                    scatters) that Numba would take seconds to compile
    numba           generated Numba source, for everything else

`choose` returns (path, reason); compile_numba logs both under FUSEGRAD_LOG=compile.
`renderer` says (the same way) which text the kernel IR is rendered to: LLVM IR or Numba.
`numba_ok=False` is the second tier of tiered execution: Numba for what the LLVM paths take.
"""

from __future__ import annotations

import os

from . import kernel_ir, loops, nests, straight, straight_loops

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


def choose(ir, scan=None, nests_ok: bool = True) -> tuple:
    """(path, reason) for compiling ir (a scan body when scan is (num_consts, num_carry))."""
    if scan is not None:
        if straight_loops.supports(ir, *scan):
            return "straight_scan", "a scan body of small f64 arrays"
        return "numba", "a scan body the LLVM scan loop does not take"
    if straight.supports(ir):
        return "straight", "a long function of scalars and small f64 arrays"
    if glue_only(ir):
        return "glue", "control flow with a little glue around it"
    if not nests_ok:
        return "numba", "the second tier: Numba's vectorized math"
    if nests.supports(ir) and nests.preferred(ir):
        return "nests", "f64 loop nests, preferred by their cost model"
    special = _needs_numba_today(ir)
    if special is None:
        return "numba", "f64 only, where Numba's vectorized math or short calls win"
    if not KERNEL_IR:
        return "numba", f"{special}; the kernel IR is off (FUSEGRAD_KERNEL_IR=0)"
    why_not = kernel_ir.covers(ir)
    if why_not is None:
        return "kernel_ir", f"{special}, which the kernel IR compiles in LLVM"
    return "numba", f"{special}, and the kernel IR lacks {why_not}"


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
    """What sends ir past the f64 paths: float32, int64 values, or an index op."""
    for op in ir.ops:
        if op.prim in _INDEX_OPS:
            return f"integer indexing ({op.prim})"
    values = [*ir.params, *(v for op in ir.ops for v in op.outputs)]
    dtypes = sorted({v.dtype for v in values} - {"f64", "bool"})
    return f"values of {', '.join(dtypes)}" if dtypes else None
