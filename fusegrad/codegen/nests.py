"""Functions of float64 arrays of any size compiled through LLVM directly, a loop nest an op,
without Numba.

Numba types and lowers each generated kernel and entry on its own, at a fixed cost of a
tenth of a second to seconds, whatever its size: an MLP's gradient (50 ops, 784x512 weights)
took 6 s to compile and an LSTM unrolled over 20 steps (1 900 ops on 4x30 arrays) 23 s.
Written here as LLVM text, the same functions compile in a fraction of that, because every op
is one small loop nest over buffers:

- elementwise ops of one size that follow each other are one flat loop, their intermediate
  values registers (the fusion that matters most, done in program order);
- a shape op (broadcast_in_dim, transpose, slice, rev, pad, concatenate) is a nest that reads
  through an affine map (a base and a stride per axis) and writes contiguously, or the other
  way round; reshape and same-dtype convert are no code at all, another name for a buffer;
- a reduction zeroes its result, then walks its operand in row-major order and folds each
  element into the result element it belongs to: every result element folds its terms in
  row-major order from the identity, as the Numba backend's loops do;
- a matmul of at most passes/schedule.SMALL_DOT_K terms is a nest of fmas in the order of k
  (the Numba backend's bits); a longer one calls NumPy's own ?gemm (cblas.py) per batch.

Values live in buffers: the params', a result array each for the results, constants made
once, and an arena for the rest, where a value's slot is reused once its last use has run
(a value's slot is taken before its operands' are given back, so no nest writes over what it
reads); a call takes an idle arena or makes one. Bools are stored as 0.0 and 1.0.

Two modules: the loops that visit the most elements, up to HOT_LOOPS of them, go through
LLVM's O2 pipeline for this CPU with its loop vectorizer (without unrolling, which doubles
the compile time of many short loops); the rest, thousands of short loops in an unrolled
program, are compiled at level 0 with FastISel, linear in their length. Neither uses
fast-math flags, so the two give the same bits. Elementwise math is straight.py's: IEEE
arithmetic and libm, so sin, exp, log and tanh are NumPy's bits; there is no indexing (take,
scatter) and no other dtype here, so nothing can go out of range. The entry takes a table of
the array objects themselves and reads each one's data pointer; it is called through ctypes,
which releases the GIL. Which functions come here rather than to Numba: `preferred`.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import re

import numpy as np

from ..passes.schedule import SMALL_DOT_K
from . import cblas, straight
from .nest_text import ELEMENTWISE, SUPPORTED, Plan, source
from .templates import empty, poison_on

ENABLED = os.environ.get("FUSEGRAD_NESTS", "1") != "0"
OPT = 2
HOT_LOOPS = 32          # loops at O2, about 15 ms of LLVM each

def supports(fn) -> bool:
    """Whether every value of fn is f64 or bool and every op one this module writes."""
    import llvmlite.binding as llvm
    if not ENABLED or DATA_OFFSET is None or llvm.llvm_version_info < (15,):  # `ptr`: LLVM 15+
        return False
    values = [*fn.params, *(v for op in fn.ops for v in op.outputs)]
    return all(v.dtype in ("f64", "bool") for v in values) and all(
        len(op.outputs) == 1 and op.prim in SUPPORTED and _typed(op) for op in fn.ops)


# Which of the two compiles a function both can. Numba's loops call mathlib's vectorized exp,
# log, tanh & co (about 1 ns an element; libm 10-20 ns) and spread big loops over the cores, so
# for a function that is mostly such math on many elements, Numba's seconds of compile buy a
# several-fold faster run: benchmarks/run.py's W1 (tanh and sigmoid of 10**4 to 4 10**6
# elements) runs 5 times faster there. Where BLAS, plain arithmetic or short arrays take the
# time (an MLP's gradient, an unrolled LSTM), both run within a factor of about 2 and nests
# compile 5 to 20 times faster. The estimate uses rough costs per element or product term on
# this project's reference machine; only their ratios matter.
# A short function that runs in microseconds goes to Numba too: it compiles in about a second
# there, and a call costs 4 us instead of 8 (a ctypes call and the table of arrays: the W3
# scalar of benchmarks/run.py).
LIBM_NS, ELEMENT_NS, TERM_NS = 15.0, 1.0, 0.035
NUMBA_LIBM_SHARE = 0.5          # Numba where libm would take at least this share of the time
NUMBA_LIBM_NS = 50_000          # ... and at least this long a call
NUMBA_SHORT_OPS = 24            # Numba for at most this many ops
NUMBA_SHORT_NS = 20_000         # ... that take at most this long a call


# Broadcasts too: a nest writes each broadcast_in_dim out in full, where Numba's kernels fold it
# into their loads. A function made mostly of products with broadcast operands (fg.jacrev's
# pullback mapped over a 1000-row identity: 7 broadcasts of 10**7 elements, 35 % of its
# elements) ran 10 times slower here than on Numba, and slower than the interpreter, whose
# broadcasts are NumPy views: 224 ms against 6.5 ms (interp 133 ms); jacfwd 4.8 ms against 0.31.
NUMBA_BROADCAST_SHARE = 0.25    # Numba where broadcasts write at least this share of elements
NUMBA_BROADCAST_NS = 50_000     # ... and at least this long a call


def preferred(fn) -> bool:
    """Whether nests should compile fn rather than Numba (the model above)."""
    libm, other = _estimate(fn)
    if len(fn.ops) <= NUMBA_SHORT_OPS and libm + other <= NUMBA_SHORT_NS:
        return False
    spread = _broadcast_ns(fn)
    if spread >= NUMBA_BROADCAST_NS and spread >= NUMBA_BROADCAST_SHARE * (libm + other):
        return False
    return libm < NUMBA_LIBM_NS or libm < NUMBA_LIBM_SHARE * (libm + other)


# Between the two, a function nests take may still run notably faster on Numba: an MLP's
# gradient, whose tanh of 131 072 elements takes 4 of its 14 ms here and a few tenths there.
# Under tiered execution such a function runs on the nests at once and switches to Numba
# when a background compile is done (api.Tiered).
NUMBA_LATER_SHARE = 0.1
NUMBA_LATER_NS = 1_000_000


def numba_later(fn) -> bool:
    """Whether Numba would run fn, which nests take, notably faster: libm calls at least
    NUMBA_LATER_SHARE of its estimated time and at least NUMBA_LATER_NS a call."""
    libm, other = _estimate(fn)
    return libm >= NUMBA_LATER_NS and libm >= NUMBA_LATER_SHARE * (libm + other)


def _estimate(fn) -> tuple:
    """Estimated ns a call spends in libm and in everything else."""
    libm = other = 0.0
    for op in fn.ops:
        size = op.out.type.size
        if op.prim == "matmul":
            other += size * op.inputs[0].shape[-1] * TERM_NS
        elif op.prim in _LIBM:
            libm += size * LIBM_NS
        else:
            other += max([size, *(v.type.size for v in op.inputs)]) * ELEMENT_NS
    return libm, other


def _broadcast_ns(fn) -> float:
    """Estimated ns a call spends writing out broadcasts that grow their operand."""
    return sum(op.out.type.size * ELEMENT_NS for op in fn.ops
               if op.prim == "broadcast_in_dim" and op.out.type.size > op.inputs[0].type.size)


def _calls_libm(form) -> bool:
    """Whether a form calls libm: a C function, an intrinsic LLVM lowers to one, or frem."""
    text = form if isinstance(form, str) else " ".join(form)
    called = re.findall(r"call double @([\w.]+)", text)
    return "frem" in text or any(not f.startswith(_INSTRUCTIONS) for f in called)


_INSTRUCTIONS = tuple(f"llvm.{f}." for f in ("fabs", "ceil", "floor", "sqrt", "rint", "trunc",
                                             "fma", "minnum", "maxnum", "copysign"))


_LIBM = {name for name, form in straight._FORMS.items() if _calls_libm(form)}


def _typed(op) -> bool:
    """Whether op's dtypes are the ones its code is written for, and an elementwise op's
    operands have its shape (its loop reads them at its own flat index)."""
    if op.prim in ELEMENTWISE and any(v.shape != op.out.shape for v in op.inputs):
        return False
    if op.prim == "matmul":
        return op.out.dtype == "f64" and (op.inputs[0].shape[-1] <= SMALL_DOT_K
                                          or cblas.BITS is not None)
    if op.prim in ("reshape", "iota"):
        return op.prim == "reshape" or op.out.dtype == "f64"
    return straight._typed(op, SMALL_DOT_K)


# -- compiling and running -----------------------------------------------------------------------

_COUNT = itertools.count()


def compile_nests(fn):
    """Compile fn (which `supports`): `run(leaves) -> list of arrays`, and the LLVM text."""
    import llvmlite.binding as llvm
    plan = Plan(fn)
    prefix = f"nests{next(_COUNT)}"
    hot, cold, hot_names = source(plan, prefix, HOT_LOOPS, DATA_OFFSET)
    if hot_names:
        for name, address in zip(hot_names, straight.machine_code(hot, hot_names, OPT,
                                                                  vectorize="loops")):
            llvm.add_symbol(name, address)
    address = straight.machine_code(cold, f"{prefix}_entry", 0, fast_isel=True)
    text = (f"; fusegrad: @{fn.name} as LLVM loop nests (codegen/nests.py)\n{cold}"
            + (f"\n; the longest loops, optimized:\n{hot}" if hot_names else ""))
    entry = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))(address)
    return _runner(entry, plan), text


def _data_offset() -> int | None:
    """Where a NumPy array object keeps the address of its data (PyArrayObject's `data`, 16
    bytes in on 64-bit CPython), found by looking, so that the entry can take the array
    objects themselves: a call then passes their id()s, 15 times faster than asking each for
    its address. None if two probes disagree (then Numba compiles everything)."""
    found = set()
    for probe in (np.empty(3), np.zeros((2, 5))[1]):
        want = probe.ctypes.data
        found.add(next((offset for offset in range(8, 64, 8) if
                        ctypes.c_void_p.from_address(id(probe) + offset).value == want), None))
    return found.pop() if len(found) == 1 else None


DATA_OFFSET = _data_offset()


def _runner(cfunc, plan: Plan):
    """run(leaves): the entry called with the table of array objects, [arena, params...,
    results..., constants...]; a result that is a param, a constant or another result is
    copied out. The arena never leaves the runner, so the next call reuses it (a fresh one
    would be page-faulted in again: 1-2 ms for an MLP's)."""
    poison = poison_on()
    fn = plan.fn
    consts = plan.consts
    owned = {i: r for r, i in plan.result_slot.items()}
    shapes = [r.shape for r in fn.results]
    bools = [r.dtype == "bool" for r in fn.results]
    copies = []             # (index, slot, start, stop, shape) of results copied out
    for i, r in enumerate(fn.results):
        root = plan.of(r)
        if owned.get(i) is not root:
            slot, offset = plan.where[root]
            copies.append((i, slot, offset, offset + r.type.size, r.shape))
    table = ctypes.c_void_p * (1 + len(fn.params) + len(shapes) + len(consts))
    f64, ascontiguous = np.float64, np.ascontiguousarray
    new = functools.partial(empty, np_dtype="float64", poison=True) if poison else np.empty
    arena_size = plan.arena
    arenas = [np.empty(0)] if not arena_size else []   # idle arenas: a call takes one

    def run(leaves):
        params = [ascontiguous(x, f64) for x in leaves]
        try:                    # pop and append are atomic: calls in threads never share one
            arena = arenas.pop()
            if poison:
                arena.fill(np.nan)
        except IndexError:
            arena = new(arena_size)
        outs = [new(shape) for shape in shapes]
        arrays = [arena, *params, *outs, *consts]
        cfunc(table(*map(id, arrays)))
        for i, slot, start, stop, shape in copies:
            outs[i] = arrays[slot].reshape(-1)[start:stop].reshape(shape).copy()
        arenas.append(arena)
        return [out.astype(bool) if flag else out for out, flag in zip(outs, bools)]
    return run
