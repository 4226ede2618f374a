"""How a Function is compiled, and why: the one decision compile_numba, tiered execution and
the compile worker ask for.

    straight        straight-line LLVM: a long function of scalars and small f64 arrays
    straight_scan   a scan body of small f64 arrays as one LLVM loop
    glue            control flow compiled, a little glue around it on the interpreter
    nests           f64 LLVM loop nests (nests.py), where its cost model prefers them
    kernel_ir       the kernel IR (kernel_ir/): float32, int64 and index ops (gathers,
                    scatters), in the program or its loops' bodies, that Numba would take
                    seconds to compile; host steps and control flow included; every program
                    it covers under FUSEGRAD_KERNEL_IR=all (read on each call, for measuring)
    numba           generated Numba source, for everything else

`choose` returns (path, reason); compile_numba logs both under FUSEGRAD_LOG=compile.
`renderer` says (the same way) which text the kernel IR is rendered to: LLVM IR or Numba.
`numba_ok=False` is the second tier of tiered execution: Numba for what the LLVM paths take.
"""

from __future__ import annotations

import os

from ..ir.control import nested
from . import kernel_ir, loops, nests, straight, straight_loops

KERNEL_IR = os.environ.get("FUSEGRAD_KERNEL_IR", "1") != "0"
# FUSEGRAD_KERNEL_IR=all: every program (and scan body) the kernel IR covers compiles there,
# the f64 ones the other paths take today included: for testing and measuring it on them.
EVERYTHING = os.environ.get("FUSEGRAD_KERNEL_IR", "1") == "all"
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
    special = _needs_numba_today(ir)
    if EVERYTHING and KERNEL_IR and kernel_ir.covers(ir) is None:
        return "kernel_ir", "every program the kernel IR covers (FUSEGRAD_KERNEL_IR=all)"
    if scan is not None:
        if straight_loops.supports(ir, *scan):
            return "straight_scan", "a scan body of small f64 arrays"
        if special and KERNEL_IR and kernel_ir.covers(ir) is None:
            return "kernel_ir", f"a scan body of {special}, run from Python each step"
        return "numba", "a scan body the LLVM scan loop does not take"
    if KERNEL_IR and os.environ.get("FUSEGRAD_KERNEL_IR") == "all" and \
            kernel_ir.covers(ir) is None:
        return "kernel_ir", "every program the kernel IR covers (FUSEGRAD_KERNEL_IR=all)"
    if straight.supports(ir):
        return "straight", "a long function of scalars and small f64 arrays"
    if glue_only(ir):
        # f64 control flow stays: its compiled loops (straight_loops.py) and glue on the
        # interpreter compile faster than one kernel-IR program, or run as fast (the report of
        # issue 24 has the measurements); bodies of other dtypes would take Numba seconds.
        if special and KERNEL_IR and kernel_ir.covers(ir) is None:
            return "kernel_ir", f"control flow of {special}, its loops compiled in LLVM"
        return "glue", "control flow with a little glue around it"
    if not nests_ok:
        return "numba", "the second tier: Numba's vectorized math"
    if nests.supports(ir) and nests.preferred(ir):
        return "nests", "f64 loop nests, preferred by their cost model"
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
    """What sends ir past the f64 paths: float32, int64 values, or an index op, in ir or in
    the Functions its control flow holds."""
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
