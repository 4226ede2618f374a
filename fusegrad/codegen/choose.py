"""How a Function is compiled, and why: the one decision compile_numba, tiered execution and
the compile worker ask for.

    kernel_ir   the kernel IR (kernel_ir/), rendered to LLVM or Numba (`renderer`): every
                program of every dtype, index ops and control flow included (scan,
                while_loop and cond compiled in place, or host steps whose Functions compile
                on their own); the few ops with no compiled form (cover.host_reason: a
                reduction of bools, a long integer matmul) and the registry's host category
                run as host steps, as the interpreter runs them
    interp      what the kernel IR cannot run at all (`kernel_ir.covers` names it: NumPy's
                arrays' data address not found, an elementwise op without a scalar rule, a
                composite left unexpanded): the interpreter, whole (no program of the test
                suite but the one test of this path)

`choose` returns (path, reason); compile_numba logs both under FUSEGRAD_LOG=compile.
`renderer` says (the same way) which text the kernel IR is rendered to: LLVM IR or Numba.
"""

from __future__ import annotations

import os

from . import kernel_ir
from .kernel_ir.cover import host_reason


def choose(ir, scan=None) -> tuple:
    """(path, reason) for compiling ir (a scan body when scan is (num_consts, num_carry))."""
    why_not = kernel_ir.covers(ir)
    if why_not is not None:
        return "interp", f"the kernel IR cannot run {why_not}"
    hosts = [f"{op.prim} at {op.loc or '?'} ({why})" for op in ir.ops
             for why in [host_reason(op)] if why]
    what = "a scan body (of a host step), run from Python each step; " if scan is not None \
        else ""
    return "kernel_ir", what + (f"host steps: {', '.join(hosts)}" if hosts else
                                "every op compiled")


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
