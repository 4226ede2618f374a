"""Compiling a kernel-IR program with llvmlite, and calling it.

The groups that visit the most elements, up to HOT_LOOPS loops of them, go through LLVM's O2
pipeline for this CPU with its loop vectorizer; the rest, often thousands of short loops in
an unrolled program, are compiled at level 0 with FastISel, linear in their length (as
nests.py does, and for the same measured reasons). The entry takes the table of the array
objects themselves ([arena, params..., results..., constants...]) and an int64 status cell,
and returns 0 or the number of the error a Raise met; the runner raises it.
"""

from __future__ import annotations

import ctypes
import functools
import itertools

import numpy as np

from .. import straight
from ..templates import empty, poison_on
from . import llvm as render
from .nodes import Loop, walk

HOT_ELEMENTS = 1024
HOT_LOOPS = 32
_COUNT = itertools.count()


def source(program, data_offset: int, hot_loops: int = HOT_LOOPS) -> tuple:
    """(hot text, cold text, hot function names, entry name)."""
    prefix = f"kir{next(_COUNT)}"
    loops = [sum(isinstance(s, Loop) for s in walk(g)) for g in program.groups]
    hot, budget = set(), hot_loops
    for g in sorted(range(len(program.groups)), key=lambda g: -program.work[g]):
        if program.work[g] < HOT_ELEMENTS or loops[g] > budget:
            break
        hot.add(g)
        budget -= loops[g]
    parts: list = []                 # (is hot, [group indices])
    for g, stmts in enumerate(program.groups):
        size = sum(1 for _ in walk(stmts))
        if parts and parts[-1][0] == (g in hot) and parts[-1][2] + size < render.PART_LINES:
            parts[-1][1].append(g)
            parts[-1][2] += size
        else:
            parts.append([g in hot, [g], size])
    names, texts = itertools.count(), {True: [], False: []}
    for k, (is_hot, gs, _) in enumerate(parts):
        texts[is_hot].append(render.function(f"{prefix}_part{k}", [program.groups[g]
                                                                   for g in gs],
                                             names, data_offset, internal=not is_hot))
        if is_hot:
            texts[False].append(f"declare i64 @{prefix}_part{k}(ptr, ptr)")
    entry = [f"define i64 @{prefix}_entry(ptr %arrays, ptr %status) nounwind {{", "entry:"]
    for k in range(len(parts)):
        entry += [f"  %r{k} = call i64 @{prefix}_part{k}(ptr %arrays, ptr %status)",
                  f"  %f{k} = icmp ne i64 %r{k}, 0", f"  br i1 %f{k}, label %out{k}, "
                  f"label %next{k}", f"out{k}:", f"  ret i64 %r{k}", f"next{k}:"]
    texts[False].append("\n".join([*entry, "  ret i64 0", "}", ""]))
    hot_text, cold_text = "\n\n".join(texts[True]), "\n\n".join(texts[False])
    hot_text = "\n".join([*render.declarations(hot_text), hot_text])
    cold_text = "\n".join([*render.declarations(cold_text), cold_text])
    hot_names = [f"{prefix}_part{k}" for k, (is_hot, _, _) in enumerate(parts) if is_hot]
    return hot_text, cold_text, hot_names, f"{prefix}_entry"


def compile_program(program, plan, data_offset: int):
    """`run(leaves) -> list of arrays`, and the LLVM text."""
    import llvmlite.binding as llvm
    hot, cold, hot_names, entry_name = source(program, data_offset)
    if hot_names:
        for name, address in zip(hot_names, straight.machine_code(hot, hot_names, 2,
                                                                  vectorize="loops")):
            llvm.add_symbol(name, address)
    address = straight.machine_code(cold, entry_name, 0, fast_isel=True)
    text = (f"; fusegrad: @{program.name} as kernel IR (codegen/kernel_ir)\n{cold}"
            + (f"\n; the longest loops, optimized:\n{hot}" if hot_names else ""))
    entry = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.c_void_p)(address)
    table = ctypes.c_void_p * (1 + len(plan.fn.params) + len(plan.fn.results) +
                               len(plan.consts))

    def call(arrays, status):
        return entry(table(*map(id, arrays)), status.ctypes.data)
    return runner(call, plan, program.errors), text


def runner(call, plan, errors):
    """run(leaves): call(arrays, status) runs the entry on the table of arrays; a result that
    is not its own array (a param, a constant, another result, the arena) is copied out. Idle
    arenas are reused by the next call."""
    poison = poison_on()
    fn = plan.fn
    consts = plan.consts
    owned = {i: r for r, i in plan.result_slot.items()}
    results = [(r.shape, str(r.type.np_dtype)) for r in fn.results]
    params = [p.type.np_dtype for p in fn.params]
    copies = []
    for i, r in enumerate(fn.results):
        root = plan.of(r)
        if owned.get(i) is not root:
            b = plan.where[root]
            copies.append((i, b.slot, b.byte, r.type.size, r.type.np_dtype, r.shape))
    ascontiguous = np.ascontiguousarray
    new = functools.partial(empty, poison=poison)
    arena_size = plan.arena
    arenas = []

    def run(leaves):
        args = [ascontiguous(x, dt) for x, dt in zip(leaves, params)]
        try:
            arena = arenas.pop()
            if poison:
                arena.fill(0xFF)
        except IndexError:
            arena = np.full(arena_size, 0xFF, np.uint8) if poison else \
                np.empty(arena_size, np.uint8)
        outs = [new(shape, np_dtype=dt) for shape, dt in results]
        arrays = [arena, *args, *outs, *consts]
        status = np.zeros(1, np.int64)
        code = call(arrays, status)
        arenas.append(arena)
        if code:
            kind, message = errors[code - 1]
            raise kind(message.format(int(status[0])))
        for i, slot, byte, size, dt, shape in copies:
            a = arrays[slot]
            flat = a.view(np.uint8).reshape(-1) if slot == 0 else a.reshape(-1)
            if slot == 0:
                flat = flat[byte:byte + size * np.dtype(dt).itemsize].view(dt)
            outs[i] = flat[:size].reshape(shape).copy()
        return outs
    return run
