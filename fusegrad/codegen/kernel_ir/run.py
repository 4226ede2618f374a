"""Compiling a kernel-IR program with llvmlite, and calling it.

The hot groups (outline.hot) that visit the most elements, up to HOT_LOOPS loops of them,
and the program's scalar Functions go through LLVM's O2 pipeline for this CPU with its loop
vectorizer; the rest, often thousands of short loops in an unrolled program, are compiled at
level 0 with FastISel, linear in their length. The entry takes the table of the array objects
themselves ([arena, params..., results..., constants...]) and an int64 status cell,
and returns 0 or the number of the error a Raise met; the runner raises it. Host steps
(nodes.Host) split the program: each run of groups between them is an entry of its own, and
the runner calls entries and host steps (host.py) in order on the same table of arrays.
status[1] says whether parallel loops may use OpenBLAS's threads on this call: only while the
machine's load (os.getloadavg, over the last minute) leaves a core idle. A fork-join waits
for its slowest part, and a part queued behind another process's timeslice costs milliseconds
(W5 ran 2.3x slower on threads than serially on this 2-core machine under a load of 8); the
bits are the same either way.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os

import numpy as np

from .poison import empty, poison_on
from . import llvm as render
from . import host
from .jit import machine_code
from .nodes import Host, Loop, walk

HOT_ELEMENTS = 1024
HOT_LOOPS = 32
_COUNT = itertools.count()


def steps(program) -> list:
    """The program split at its host steps: lists of group indices (one compiled entry each)
    and the Host nodes between them, in order."""
    out: list = []
    for g, stmts in enumerate(program.groups):
        host = next((s for s in stmts if isinstance(s, Host)), None)
        if host is not None:
            out.append(host)
        elif out and isinstance(out[-1], list):
            out[-1].append(g)
        else:
            out.append([g])
    return out


def source(program, data_offset: int, hot_loops: int | None = None) -> tuple:
    """(hot text, cold text, hot function names, the entry name of each compiled step)."""
    prefix = f"kir{next(_COUNT)}"
    loops = [sum(isinstance(s, Loop) for s in walk(g)) for g in program.groups]
    hot, budget = set(), HOT_LOOPS if hot_loops is None else hot_loops
    for g in sorted(range(len(program.groups)), key=lambda g: -program.work[g]):
        if program.work[g] < HOT_ELEMENTS or loops[g] > budget:
            break
        if program.hot and not program.hot[g]:
            continue
        hot.add(g)
        budget -= loops[g]
    names, texts = itertools.count(), {True: [], False: []}
    entries, hot_names, count = [], [], itertools.count()
    for name, fn in program.functions.items():       # at O2, called from either module
        definition, declaration = render.scalar_function(name, fn)
        texts[True].append(definition)
        texts[False].append(declaration)
        hot_names.append(name)
    for gs in (s for s in steps(program) if isinstance(s, list)):
        parts: list = []                 # (is hot, [group indices], lines)
        for g in gs:
            size = sum(1 for _ in walk(program.groups[g]))
            if parts and parts[-1][0] == (g in hot) and parts[-1][2] + size < render.PART_LINES:
                parts[-1][1].append(g)
                parts[-1][2] += size
            else:
                parts.append([g in hot, [g], size])
        called = []
        for is_hot, part, _ in parts:
            name = f"{prefix}_part{next(count)}"
            called.append(name)
            texts[is_hot].append(render.function(name, [program.groups[g] for g in part],
                                                 names, data_offset, internal=not is_hot))
            if is_hot:
                texts[False].append(f"declare i64 @{name}(ptr, ptr)")
                hot_names.append(name)
        entries.append(f"{prefix}_entry{len(entries)}")
        texts[False].append(_entry(entries[-1], called))
    hot_text, cold_text = "\n\n".join(texts[True]), "\n\n".join(texts[False])
    hot_text = "\n".join([*render.declarations(hot_text), hot_text])
    cold_text = "\n".join([*render.declarations(cold_text), cold_text])
    return hot_text, cold_text, hot_names, entries


def _entry(name: str, parts: list) -> str:
    """An entry calling parts in order, returning the first error number one returns."""
    lines = [f"define i64 @{name}(ptr %arrays, ptr %status) nounwind {{", "entry:"]
    for k, part in enumerate(parts):
        lines += [f"  %r{k} = call i64 @{part}(ptr %arrays, ptr %status)",
                  f"  %f{k} = icmp ne i64 %r{k}, 0", f"  br i1 %f{k}, label %out{k}, "
                  f"label %next{k}", f"out{k}:", f"  ret i64 %r{k}", f"next{k}:"]
    return "\n".join([*lines, "  ret i64 0", "}", ""])


def compile_program(program, plan, data_offset: int, compile_fn=None):
    """`run(leaves) -> list of arrays`, and the LLVM text. compile_fn compiles the nested
    Functions of host steps' control flow (codegen.compile.compile_numba)."""
    import llvmlite.binding as llvm
    hot, cold, hot_names, entry_names = source(program, data_offset)
    if hot_names:
        for name, address in zip(hot_names, machine_code(hot, hot_names, 2)):
            llvm.add_symbol(name, address)
    addresses = iter(machine_code(cold, entry_names, 0, fast_isel=True)
                     if entry_names else ())
    kind = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
    calls, hosts = [], []
    for s in steps(program):
        if isinstance(s, list):
            calls.append(kind(next(addresses)))
        else:
            calls.append(host.step(s, compile_fn))
            hosts.append(f"; host step {s.op.prim} at {s.op.loc or '?'} between compiled parts")
    text = (f"; fusegrad: @{program.name} as kernel IR (codegen/kernel_ir)\n"
            + "".join(line + "\n" for line in hosts) + cold
            + (f"\n; the longest loops, optimized:\n{hot}" if hot_names else ""))
    threaded = any(isinstance(s, Loop) and s.parallel for g in program.groups for s in walk(g))
    run = runner(calls, plan, program.errors, threaded)
    run.compiled = {k: v for c in calls for k, v in getattr(c, "compiled", {}).items()}
    return run, text


python_function = type(lambda: None)


def idle_core() -> bool:
    """Whether the last minute's load leaves a core to spare for a second thread."""
    return os.getloadavg()[0] < (os.cpu_count() or 1) - 0.5


def runner(calls, plan, errors, threaded=False):
    """run(leaves): the compiled entries (ctypes functions of the table of array objects and
    the status cells) and Python steps (host steps, Numba entries: functions of the list of
    arrays and the status cells) called in order;
    a result that is not its own array (a param, a constant, another result, the arena) is
    copied out. Idle arenas are reused by the next call, each with its views of the results
    it holds."""
    poison = poison_on()
    fn = plan.fn
    owned = {i: r for r, i in plan.result_slot.items()}
    results = [(r.shape, str(r.type.np_dtype)) for r in fn.results]
    params = [p.type.np_dtype for p in fn.params]
    copies = []                     # (result, slot, byte offset, size, dtype, shape)
    for i, r in enumerate(fn.results):
        root = plan.of(r)
        if owned.get(i) is not root:
            b = plan.where[root]
            copies.append((i, b.slot, b.byte, r.type.size, r.type.np_dtype, r.shape))
    from_arena = [c for c in copies if c[1] == 0]
    elsewhere = [c for c in copies if c[1] != 0]
    table = ctypes.c_void_p * (1 + len(fn.params) + len(results) + len(plan.consts))
    consts = tuple(map(id, plan.consts))
    keep = plan.consts              # the constants live as long as the runner
    ascontiguous, byref, status_cells = np.ascontiguousarray, ctypes.byref, ctypes.c_int64 * 2
    new = functools.partial(empty, poison=poison) if poison else \
        (lambda shape, np_dtype: np.empty(shape, np_dtype))
    arenas = []
    single = calls[0] if len(calls) == 1 and calls[0].__class__ is not python_function \
        else None

    def arena_views():
        arena = np.full(plan.arena, 0xFF, np.uint8) if poison else np.empty(plan.arena,
                                                                            np.uint8)
        return arena, [(i, arena[byte:byte + size * np.dtype(dt).itemsize].view(dt)
                        .reshape(shape)) for i, _, byte, size, dt, shape in from_arena]

    def run(leaves):
        args = [ascontiguous(x, dt) for x, dt in zip(leaves, params)]
        arena, views = arenas.pop() if arenas else arena_views()
        if poison:
            arena.fill(0xFF)
        outs = [new(shape, np_dtype=dt) for shape, dt in results]
        status = status_cells(0, threaded and idle_core())
        pointers = table(id(arena), *map(id, args), *map(id, outs), *consts)
        code = 0
        try:
            if single:
                code = single(pointers, byref(status))
            else:
                arrays = [arena, *args, *outs, *keep]
                for call in calls:
                    code = call(arrays, status) if call.__class__ is python_function else \
                        call(pointers, byref(status))
                    if code:
                        break
            for i, view in views:
                outs[i] = view.copy()
        finally:
            arenas.append((arena, views))
        if code:
            kind, message = errors[code - 1]
            raise kind(message.format(status[0]))
        if elsewhere:
            arrays = [arena, *args, *outs, *keep]
            for i, slot, _, size, _, shape in elsewhere:
                outs[i] = arrays[slot].reshape(-1)[:size].reshape(shape).copy()
        return outs
    return run
